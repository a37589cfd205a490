//! The command line's arguments: the clap structures of the global options and of every
//! command (`recoverable-write --help` prints them).

use clap::{Args, Parser, Subcommand, ValueEnum};
use recoverable_write::operator::parse_duration;

const EXIT_CODES_HELP: &str = "\
Exit codes: 0 ok, 1 operational error (ledger unreachable or failing), 2 usage (bad arguments, \
bad ledger URL, ambiguous id, blank reason, a deletion not confirmed or without the \
application's contracts), 3 operation not found, 4 stale version (changed \
since it was read: show it again), 5 refused in the operation's state. `reconcile --apply`: 4 if a \
planned row changed since the plan, else 5 if one was claimed by another reviewer or refused \
(the other rows were applied, the report says which); a mapping under which one export row \
matches two operations is refused whole (5).

Never create a write again by hand while it is UNKNOWN, PROCESSING, IN_FLIGHT or MANUAL_REVIEW: \
the vendor may already have it (resolve it instead: `show OP` prints the commands).

OP, where a command takes one: the operation id, or what names exactly one operation: the last \
characters of its id (ids start with their creation time, so their ends tell them apart), a \
prefix of it, its intent, or the vendor's reference.";

/// Find, understand and resolve stuck recoverable writes.
#[derive(Debug, Parser)]
#[command(name = "recoverable-write", version, after_help = EXIT_CODES_HELP)]
pub(crate) struct Cli {
    /// The ledger: sqlite:PATH, sqlite://PATH (or the path of an existing SQLite file) or
    /// postgres://… (a PostgreSQL URL is never printed).
    #[arg(
        long,
        env = "RECOVERABLE_WRITE_LEDGER",
        global = true,
        hide_env_values = true
    )]
    pub(crate) ledger: Option<String>,
    /// PostgreSQL schema of the ledger.
    #[arg(
        long,
        env = "RECOVERABLE_WRITE_SCHEMA",
        global = true,
        default_value = "public"
    )]
    pub(crate) schema: String,
    /// The tenant whose operations to see (every command is tenant-scoped).
    #[arg(long, global = true)]
    pub(crate) tenant: Option<String>,
    /// See every tenant's operations: the explicit operator capability.
    #[arg(long, global = true, conflicts_with = "tenant")]
    pub(crate) all_tenants: bool,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The contracts file the application loads (TOML or JSON): their retention clocks.
    #[arg(long, env = "RECOVERABLE_WRITE_CONTRACTS", global = true)]
    pub(crate) contracts: Option<std::path::PathBuf>,
    /// Ledger-wide details clock (e.g. 7d), as the application configures it.
    #[arg(long, global = true, value_parser = parse_duration)]
    pub(crate) keep_details: Option<std::time::Duration>,
    /// Ledger-wide identity clock (e.g. 35d), as the application configures it.
    #[arg(long, global = true, value_parser = parse_duration)]
    pub(crate) keep_identity: Option<std::time::Duration>,
    /// How long callback dedupe records are kept (e.g. 35d).
    #[arg(long, global = true, value_parser = parse_duration)]
    pub(crate) keep_callback_deliveries: Option<std::time::Duration>,
    /// How long quarantined callback events are kept (e.g. 90d).
    #[arg(long, global = true, value_parser = parse_duration)]
    pub(crate) keep_quarantined_callbacks: Option<std::time::Duration>,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List operations, newest first (filters combine with AND).
    List(ListArgs),
    /// Show one operation: the redacted handoff package, its timeline and audit trail, why it
    /// is stuck and what the engine would do next.
    Show(ShowArgs),
    /// Take an operation over (any non-terminal state): automatic sends stop at once.
    Claim(ClaimArgs),
    /// Resolve an operation in MANUAL_REVIEW.
    Resolve(ResolveArgs),
    /// Acknowledge the contradictions recorded on a finished operation (a vendor's word after
    /// its final state that says otherwise: `list --contradicted`), once you have checked at
    /// the vendor. It leaves the queue; its state does not change.
    Acknowledge(AcknowledgeArgs),
    /// Counts by state and target, the oldest stuck items, review resolution times.
    Stats(StatsArgs),
    /// What the ledger holds but never acts on: vendor callbacks that matched no operation of
    /// their tenant (or named an unknown account, or another tenant's operation), and rows it
    /// could not decode. `quarantine release OP` gives such a row back to recovery once a
    /// version that can read it runs.
    Quarantine(QuarantineArgs),
    /// Purge what retention says is due now (finished operations' details, then their rows;
    /// callback records), in bounded batches. Ledger-wide: needs --all-tenants, and the
    /// application's contracts (--contracts) or --default-retention. Prints the plan first and
    /// deletes only with --yes or a yes on the terminal. Operations that are not finished are
    /// never purged.
    Purge(PurgeArgs),
    /// The right to erasure: one finished operation's details (its identity stays, so a repeat
    /// still sends nothing), or every finished operation of the tenant with --all-finished.
    /// Refused while the operation, or any of the tenant's, is not finished.
    Erase(EraseArgs),
    /// Reconcile from a vendor's export (CSV or JSON lines, e.g. the dashboard's payments
    /// export after an outage): match each row to an operation and print the plan (which
    /// operations in review it would resolve as succeeded, with which reference; which rows
    /// match nothing; which operations in review no row names). Changes nothing without
    /// --apply. Never resolves anything as not executed: absence from an export proves nothing.
    Reconcile(ReconcileArgs),
}

/// The built-in export layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExportFormat {
    /// Stripe payments export: `id`, operation id in `operation_id (metadata)`.
    Stripe,
    /// Adyen settlement / payment accounting report: `Psp Reference`, `Merchant Reference`.
    Adyen,
    /// Square transactions export: `Payment ID`, `Reference ID`.
    Square,
    /// PayPal activity download: `Transaction ID`, `Custom Number`.
    Paypal,
    /// Columns you name: --reference-column and --key-column and/or --operation-column.
    Generic,
}

/// `reconcile`.
#[derive(Debug, Args)]
pub(crate) struct ReconcileArgs {
    /// The vendor's export file (CSV with a header line, or JSON lines).
    #[arg(long = "from", value_name = "EXPORT")]
    pub(crate) from: std::path::PathBuf,
    /// The export's layout.
    #[arg(long, value_enum, default_value = "generic")]
    pub(crate) format: ExportFormat,
    /// With --format generic: the column holding the vendor's object id (the reference).
    #[arg(long)]
    pub(crate) reference_column: Option<String>,
    /// With --format generic: the column holding the idempotency key the crate sent.
    #[arg(long)]
    pub(crate) key_column: Option<String>,
    /// With --format generic: the column holding the operation id the application put in
    /// the request's metadata.
    #[arg(long)]
    pub(crate) operation_column: Option<String>,
    /// Carry out the plan: resolve each planned operation as succeeded with its reference, at
    /// the version the plan read (a row that changed since is skipped and reported).
    #[arg(long, requires_all = ["reviewer", "reason"])]
    pub(crate) apply: bool,
    /// With --apply: carry out this plan, printed earlier by `reconcile --json` (its versions
    /// are the ones acted on; the export must be the same file, by digest).
    #[arg(long, requires = "apply")]
    pub(crate) plan: Option<std::path::PathBuf>,
    /// Who you are (recorded in every audit entry).
    #[arg(long)]
    pub(crate) reviewer: Option<String>,
    /// Why (recorded in every audit entry, with the export's name, digest and row).
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

/// `purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Print the plan (what would be purged, per contract); change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Delete what the plan lists without asking (scripts and CI, where no one can answer).
    #[arg(long, conflicts_with = "dry_run")]
    pub(crate) yes: bool,
    /// Purge by the library's default clocks, as no contracts file is given: details kept 7
    /// days and rows 35 days after an operation finished. They can be shorter than the
    /// application's own clocks and than a vendor's key retention (PayPal Payments keeps keys
    /// 45 days), and a row deleted too early lets a repeated intent be sent again: prefer
    /// --contracts with the file the application loads.
    #[arg(long)]
    pub(crate) default_retention: bool,
}

/// `erase`.
#[derive(Debug, Args)]
pub(crate) struct EraseArgs {
    /// The operation whose details to erase (as for `show`: its id, the end of it, its intent…).
    #[arg(
        required_unless_present = "all_finished",
        conflicts_with = "all_finished"
    )]
    pub(crate) op: Option<String>,
    /// Delete every finished operation of the tenant, and its callback records.
    #[arg(long)]
    pub(crate) all_finished: bool,
    /// Confirm the deletion of --all-finished (it cannot be undone).
    #[arg(long)]
    pub(crate) yes: bool,
}

/// `quarantine`.
#[derive(Debug, Args)]
pub(crate) struct QuarantineArgs {
    /// Most entries of each kind, oldest first.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
    /// Act on a quarantined row (without one: list what is quarantined).
    #[command(subcommand)]
    pub(crate) action: Option<QuarantineAction>,
}

/// `quarantine release`: give a quarantined row back to recovery.
#[derive(Debug, Subcommand)]
pub(crate) enum QuarantineAction {
    /// Give a quarantined row back to recovery, once a version that can read it runs: the row
    /// is read again and released only if it decodes (otherwise it stays quarantined, exit 5).
    /// Nothing else changes; the recoverer's next pass picks it up where it stopped.
    Release(ReleaseArgs),
}

/// `quarantine release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The operation: its id, or the end of its id, a prefix, its intent or the vendor's
    /// reference when that names only one operation.
    pub(crate) op: String,
    /// Who you are (recorded in the audit trail).
    #[arg(long)]
    pub(crate) reviewer: String,
    /// Why (recorded in the audit trail), e.g. "every worker runs 0.4 now".
    #[arg(long)]
    pub(crate) reason: String,
    /// The version `show` (or `list --state quarantined`) printed: refused if the row changed
    /// since.
    #[arg(long)]
    pub(crate) version: u64,
}

/// `list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// States to list (repeat or comma-separate; `manual_review`, `unknown`, …, or `open`), or
    /// `quarantined` alone: the rows this version could not decode, set aside (they are also
    /// listed after the others when no state, or `open`, is asked).
    #[arg(long, value_delimiter = ',')]
    pub(crate) state: Vec<String>,
    /// Only this contract name.
    #[arg(long)]
    pub(crate) contract: Option<String>,
    /// Only writes to this host.
    #[arg(long)]
    pub(crate) host: Option<String>,
    /// Created longer ago than this (90s, 10m, 1h30m, 2d).
    #[arg(long, value_parser = parse_duration)]
    pub(crate) older_than: Option<std::time::Duration>,
    /// Unchanged for longer than this.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) unchanged_for: Option<std::time::Duration>,
    /// Operation id or vendor reference starting with this.
    #[arg(long = "match", value_name = "PREFIX")]
    pub(crate) text: Option<String>,
    /// Oldest first (the order the queue formed).
    #[arg(long)]
    pub(crate) oldest_first: bool,
    /// Rows per page (at most 1000).
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u32,
    /// Continue after this cursor (printed under the previous page).
    #[arg(long)]
    pub(crate) cursor: Option<String>,
    /// Only operations whose final state a vendor's later word contradicted, not yet
    /// acknowledged (`acknowledge`). They are usually SUCCEEDED or REJECTED: every state is
    /// listed unless --state narrows it.
    #[arg(long)]
    pub(crate) contradicted: bool,
}

/// `acknowledge`.
#[derive(Debug, Args)]
pub(crate) struct AcknowledgeArgs {
    /// The operation: its id, or the end of its id, a prefix, its intent or the vendor's
    /// reference when that names only one operation.
    pub(crate) op: String,
    /// Who you are (recorded in the audit trail).
    #[arg(long)]
    pub(crate) reviewer: String,
    /// What you checked and did at the vendor (recorded in the audit trail).
    #[arg(long)]
    pub(crate) reason: String,
    /// The version `show` printed: refused if the operation changed since (a newer
    /// contradiction, say).
    #[arg(long)]
    pub(crate) version: u64,
}

/// `show`.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The operation: its id, or the end of its id, a prefix, its intent or the vendor's
    /// reference when that names only one operation.
    pub(crate) op: String,
}

/// `claim`.
#[derive(Debug, Args)]
pub(crate) struct ClaimArgs {
    /// The operation: its id, or the end of its id, a prefix, its intent or the vendor's
    /// reference when that names only one operation.
    pub(crate) op: String,
    /// Who you are (recorded in the audit trail).
    #[arg(long)]
    pub(crate) reviewer: String,
    /// Why (recorded in the audit trail).
    #[arg(long)]
    pub(crate) reason: String,
    /// The version `show` printed: the claim is refused if the operation changed since.
    #[arg(long)]
    pub(crate) version: u64,
    /// Take the operation over from the reviewer who holds it (a claim is exclusive; the
    /// audit trail names you both).
    #[arg(long)]
    pub(crate) take_over: bool,
}

/// A reviewer's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Decision {
    /// You verified the vendor did it (give --remote-ref, or --no-reference).
    Succeeded,
    /// You verified the vendor did not do it: re-approve it (--reapprove), the engine resends
    /// it with the same key and bytes under a fresh budget.
    NotExecuted,
    /// You cannot tell yet: record that, change nothing.
    KeepPending,
}

/// `resolve`.
#[derive(Debug, Args)]
pub(crate) struct ResolveArgs {
    /// The operation: its id, or the end of its id, a prefix, its intent or the vendor's
    /// reference when that names only one operation.
    pub(crate) op: String,
    /// The decision.
    pub(crate) decision: Decision,
    /// The vendor's reference of what it created (with `succeeded`).
    #[arg(long)]
    pub(crate) remote_ref: Option<String>,
    /// With `succeeded` and no --remote-ref: you checked at the vendor and there is no
    /// reference to record. A success without one cannot be traced to the vendor's object
    /// later, and it is final.
    #[arg(long, conflicts_with = "remote_ref")]
    pub(crate) no_reference: bool,
    /// Confirms that `not-executed` sends the write again (same key, same bytes).
    #[arg(long)]
    pub(crate) reapprove: bool,
    /// Who you are (recorded in the audit trail).
    #[arg(long)]
    pub(crate) reviewer: String,
    /// Why (recorded in the audit trail).
    #[arg(long)]
    pub(crate) reason: String,
    /// The version `show` (or your claim) printed.
    #[arg(long)]
    pub(crate) version: u64,
}

/// `stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Resolution times over operations changed within this period.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub(crate) since: std::time::Duration,
    /// Most open operations read for the per-target counts, and most resolved ones for the
    /// resolution times.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) scan_limit: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_parses() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "recoverable-write",
            "--ledger",
            "sqlite:x.db",
            "--tenant",
            "t",
            "list",
            "--state",
            "manual_review,unknown",
            "--older-than",
            "10m",
        ])
        .unwrap();
        let Command::List(a) = cli.command else {
            panic!("list")
        };
        assert_eq!(a.state, vec!["manual_review", "unknown"]);
        assert_eq!(a.older_than, Some(std::time::Duration::from_secs(600)));
    }
}
