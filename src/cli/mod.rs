//! The operators' command line (feature `cli`): the `recoverable-write` binary.
//!
//! ```text
//! recoverable-write --ledger sqlite:ops.db --tenant acme list --state manual_review --older-than 10m
//! recoverable-write --ledger sqlite:ops.db --tenant acme show op-5d1f…
//! recoverable-write --ledger sqlite:ops.db --tenant acme claim op-5d1f… --version 7 \
//!     --reviewer alice --reason "checking the vendor console"
//! recoverable-write --ledger sqlite:ops.db --tenant acme resolve op-5d1f… succeeded \
//!     --remote-ref W731 --version 8 --reviewer alice --reason "ticket W731 in the console"
//! recoverable-write --ledger postgres://ops@db/ops --all-tenants stats
//! recoverable-write --ledger sqlite:ops.db --all-tenants --contracts contracts.toml purge --dry-run
//! recoverable-write --ledger sqlite:ops.db --all-tenants --contracts contracts.toml purge --yes
//! recoverable-write --ledger sqlite:ops.db --tenant acme list --state quarantined
//! recoverable-write --ledger sqlite:ops.db --tenant acme quarantine release op-5d1f… --version 9 \
//!     --reviewer alice --reason "every worker runs 0.4"
//! recoverable-write --ledger sqlite:ops.db --tenant acme erase op-5d1f…     # one operation's details
//! recoverable-write --ledger sqlite:ops.db --tenant acme erase --all-finished --yes
//! ```
//!
//! Retention (`purge`, and the retention dates `show` prints) reads the same settings as the
//! application: the contracts file it loads (`--contracts`, for their `keep_details_secs` and
//! `keep_identity_secs`) and the ledger-wide clocks (`--keep-details`, `--keep-identity`,
//! `--keep-callback-deliveries`, `--keep-quarantined-callbacks`; the library's defaults when
//! not given). See [`crate::retention`].
//!
//! `purge` deletes, so it asks twice. Without a contracts file it refuses (exit 2): the
//! library's default clocks (rows kept 35 days) can be shorter than the application's and than
//! a vendor's key retention (PayPal Payments: 45 days), and a row deleted too early lets a
//! repeated intent be sent again; `--default-retention` says to purge by the defaults anyway.
//! Then it prints its plan (per contract: the clocks applied, how many operations would lose
//! their details or be deleted; callback records) and deletes only what that plan listed, with
//! `--yes` or when a person answers `yes` on the terminal. Otherwise (a script, CI: no
//! terminal) it deletes nothing and exits 2 after the plan. `--dry-run` prints the plan only.
//!
//! The ledger is `--ledger` or `RECOVERABLE_WRITE_LEDGER`: `sqlite:PATH`, `sqlite://PATH`, or
//! a `postgres://` / `postgresql://` URL (`--schema`, default `public`). The ledger URL is never
//! printed (it may hold a password). Every command is scoped to one tenant (`--tenant`);
//! `--all-tenants` is the explicit operator capability to see them all.
//!
//! Output is a table or plain text by default, JSON with `--json`. Nothing printed holds a
//! credential: operations are shown through their redacted
//! [`HandoffPackage`](crate::HandoffPackage) and listing columns (the one body value there is
//! the answer of a lookup that resolved the operation, its secret fields `[redacted]`).
//!
//! Exit codes ([`exit`]): 0 ok, 1 operational error (ledger unreachable, store failure),
//! 2 usage (bad arguments, bad ledger URL, ambiguous id, empty reason, a deletion not
//! confirmed or without the application's retention), 3 operation not found,
//! 4 stale version (the operation changed since it was read: show it again), 5 refused by the
//! state machine (e.g. resolving an operation that is not in `MANUAL_REVIEW`; releasing a row
//! that is not quarantined, or that this version still cannot decode).
//!
//! A row this version cannot decode is quarantined by the recovery pass that meets it; `stats`
//! counts it on its own `QUARANTINED` line, `list` shows it (with the decode error) under the
//! open queue or alone with `--state quarantined`, `show` prints the columns it can read, and
//! `quarantine release` gives it back to recovery once a version that reads it runs.

mod render;

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::ledger::{
    Ledger, LedgerError, OPEN_STATES, OperationQuery, OperationRecord, Order, TenantScope,
    TextMatch, WATCHED_STATES,
};
use crate::operation::{OperationId, Tenant};
use crate::operator::{self, AuditEntry, parse_duration};
use crate::review::{ReviewError, Reviews};
use crate::state::{ReviewDecision, State};
use crate::{PostgresLedger, SqliteLedger};

/// The process exit codes.
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// Operational error: the ledger is unreachable or failed; nothing was changed by this
    /// command unless it says so.
    pub const OPERATIONAL: u8 = 1;
    /// Usage: bad arguments, an unsupported ledger URL, an ambiguous operation id, a blank
    /// reason; a deletion not confirmed (`--yes`), or a purge without the application's
    /// contracts. Nothing changed.
    pub const USAGE: u8 = 2;
    /// No such operation (in the tenant scope).
    pub const NOT_FOUND: u8 = 3;
    /// Stale version: the operation changed since the version given was read. Nothing changed;
    /// `show` it again.
    pub const STALE: u8 = 4;
    /// The state machine refuses the action in the operation's state. Nothing changed.
    pub const REFUSED: u8 = 5;
}

const EXIT_CODES_HELP: &str = "\
Exit codes: 0 ok, 1 operational error (ledger unreachable or failing), 2 usage (bad arguments, \
bad ledger URL, ambiguous id, blank reason, a deletion not confirmed or without the \
application's contracts), 3 operation not found, 4 stale version (changed \
since it was read: show it again), 5 refused in the operation's state.

Never create a write again by hand while it is UNKNOWN, PROCESSING or IN_FLIGHT: the vendor may \
already have it.";

/// Find, understand and resolve stuck recoverable writes.
#[derive(Debug, Parser)]
#[command(name = "recoverable-write", version, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// The ledger: sqlite:PATH, sqlite://PATH or postgres://… (never printed).
    #[arg(
        long,
        env = "RECOVERABLE_WRITE_LEDGER",
        global = true,
        hide_env_values = true
    )]
    pub ledger: Option<String>,
    /// PostgreSQL schema of the ledger.
    #[arg(
        long,
        env = "RECOVERABLE_WRITE_SCHEMA",
        global = true,
        default_value = "public"
    )]
    pub schema: String,
    /// The tenant whose operations to see (every command is tenant-scoped).
    #[arg(long, global = true)]
    pub tenant: Option<String>,
    /// See every tenant's operations: the explicit operator capability.
    #[arg(long, global = true, conflicts_with = "tenant")]
    pub all_tenants: bool,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// The contracts file the application loads (TOML or JSON): their retention clocks.
    #[arg(long, env = "RECOVERABLE_WRITE_CONTRACTS", global = true)]
    pub contracts: Option<std::path::PathBuf>,
    /// Ledger-wide details clock (e.g. 7d), as the application configures it.
    #[arg(long, global = true, value_parser = parse_duration)]
    pub keep_details: Option<std::time::Duration>,
    /// Ledger-wide identity clock (e.g. 35d), as the application configures it.
    #[arg(long, global = true, value_parser = parse_duration)]
    pub keep_identity: Option<std::time::Duration>,
    /// How long callback dedupe records are kept (e.g. 35d).
    #[arg(long, global = true, value_parser = parse_duration)]
    pub keep_callback_deliveries: Option<std::time::Duration>,
    /// How long quarantined callback events are kept (e.g. 90d).
    #[arg(long, global = true, value_parser = parse_duration)]
    pub keep_quarantined_callbacks: Option<std::time::Duration>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
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
}

/// `purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Print the plan (what would be purged, per contract); change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete what the plan lists without asking (scripts and CI, where no one can answer).
    #[arg(long, conflicts_with = "dry_run")]
    pub yes: bool,
    /// Purge by the library's default clocks, as no contracts file is given: details kept 7
    /// days and rows 35 days after an operation finished. They can be shorter than the
    /// application's own clocks and than a vendor's key retention (PayPal Payments keeps keys
    /// 45 days), and a row deleted too early lets a repeated intent be sent again: prefer
    /// --contracts with the file the application loads.
    #[arg(long)]
    pub default_retention: bool,
}

/// `erase`.
#[derive(Debug, Args)]
pub struct EraseArgs {
    /// The operation whose details to erase (id or unique prefix).
    #[arg(
        required_unless_present = "all_finished",
        conflicts_with = "all_finished"
    )]
    pub op: Option<String>,
    /// Delete every finished operation of the tenant, and its callback records.
    #[arg(long)]
    pub all_finished: bool,
    /// Confirm the deletion of --all-finished (it cannot be undone).
    #[arg(long)]
    pub yes: bool,
}

/// `quarantine`.
#[derive(Debug, Args)]
pub struct QuarantineArgs {
    /// Most entries of each kind, oldest first.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// Act on a quarantined row (without one: list what is quarantined).
    #[command(subcommand)]
    pub action: Option<QuarantineAction>,
}

/// `quarantine release`: give a quarantined row back to recovery.
#[derive(Debug, Subcommand)]
pub enum QuarantineAction {
    /// Give a quarantined row back to recovery, once a version that can read it runs: the row
    /// is read again and released only if it decodes (otherwise it stays quarantined, exit 5).
    /// Nothing else changes; the recoverer's next pass picks it up where it stopped.
    Release(ReleaseArgs),
}

/// `quarantine release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Operation id (or a unique prefix of it).
    pub op: String,
    /// Who you are (recorded in the audit trail).
    #[arg(long)]
    pub reviewer: String,
    /// Why (recorded in the audit trail), e.g. "every worker runs 0.4 now".
    #[arg(long)]
    pub reason: String,
    /// The version `show` (or `list --state quarantined`) printed: refused if the row changed
    /// since.
    #[arg(long)]
    pub version: u64,
}

/// `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// States to list (repeat or comma-separate; `manual_review`, `unknown`, …, or `open`), or
    /// `quarantined` alone: the rows this version could not decode, set aside (they are also
    /// listed after the others when no state, or `open`, is asked).
    #[arg(long, value_delimiter = ',')]
    pub state: Vec<String>,
    /// Only this contract name.
    #[arg(long)]
    pub contract: Option<String>,
    /// Only writes to this host.
    #[arg(long)]
    pub host: Option<String>,
    /// Created longer ago than this (90s, 10m, 1h30m, 2d).
    #[arg(long, value_parser = parse_duration)]
    pub older_than: Option<std::time::Duration>,
    /// Unchanged for longer than this.
    #[arg(long, value_parser = parse_duration)]
    pub unchanged_for: Option<std::time::Duration>,
    /// Operation id or vendor reference starting with this.
    #[arg(long = "match", value_name = "PREFIX")]
    pub text: Option<String>,
    /// Oldest first (the order the queue formed).
    #[arg(long)]
    pub oldest_first: bool,
    /// Rows per page (at most 1000).
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Continue after this cursor (printed under the previous page).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Only operations whose final state a vendor's later word contradicted, not yet
    /// acknowledged (`acknowledge`). They are usually SUCCEEDED or REJECTED: every state is
    /// listed unless --state narrows it.
    #[arg(long)]
    pub contradicted: bool,
}

/// `acknowledge`.
#[derive(Debug, Args)]
pub struct AcknowledgeArgs {
    /// Operation id (or a unique prefix of it).
    pub op: String,
    /// Who you are (recorded in the audit trail).
    #[arg(long)]
    pub reviewer: String,
    /// What you checked and did at the vendor (recorded in the audit trail).
    #[arg(long)]
    pub reason: String,
    /// The version `show` printed: refused if the operation changed since (a newer
    /// contradiction, say).
    #[arg(long)]
    pub version: u64,
}

/// `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Operation id (or a unique prefix of it, or the vendor's reference).
    pub op: String,
}

/// `claim`.
#[derive(Debug, Args)]
pub struct ClaimArgs {
    /// Operation id (or a unique prefix of it).
    pub op: String,
    /// Who you are (recorded in the audit trail).
    #[arg(long)]
    pub reviewer: String,
    /// Why (recorded in the audit trail).
    #[arg(long)]
    pub reason: String,
    /// The version `show` printed: the claim is refused if the operation changed since.
    #[arg(long)]
    pub version: u64,
    /// Take the operation over from the reviewer who holds it (a claim is exclusive; the
    /// audit trail names you both).
    #[arg(long)]
    pub take_over: bool,
}

/// A reviewer's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Decision {
    /// You verified the vendor did it (give --remote-ref).
    Succeeded,
    /// You verified the vendor did not do it: re-approve it (--reapprove), the engine resends
    /// it with the same key and bytes under a fresh budget.
    NotExecuted,
    /// You cannot tell yet: record that, change nothing.
    KeepPending,
}

/// `resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Operation id (or a unique prefix of it).
    pub op: String,
    /// The decision.
    pub decision: Decision,
    /// The vendor's reference of what it created (with `succeeded`).
    #[arg(long)]
    pub remote_ref: Option<String>,
    /// Confirms that `not-executed` sends the write again (same key, same bytes).
    #[arg(long)]
    pub reapprove: bool,
    /// Who you are (recorded in the audit trail).
    #[arg(long)]
    pub reviewer: String,
    /// Why (recorded in the audit trail).
    #[arg(long)]
    pub reason: String,
    /// The version `show` (or your claim) printed.
    #[arg(long)]
    pub version: u64,
}

/// `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Resolution times over operations changed within this period.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub since: std::time::Duration,
    /// Most open operations read for the per-target counts, and most resolved ones for the
    /// resolution times.
    #[arg(long, default_value_t = 10_000)]
    pub scan_limit: usize,
}

/// A failed command: its message (never a credential) and exit code.
#[derive(Debug)]
pub struct CliError {
    /// One of [`exit`].
    pub code: u8,
    /// What went wrong and what to do.
    pub message: String,
    /// What to print on stdout before the message, usually nothing (the plan of a purge that
    /// was not confirmed).
    pub output: String,
}

impl CliError {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            output: String::new(),
        }
    }

    fn with_output(mut self, output: String) -> Self {
        self.output = output;
        self
    }

    fn usage(message: impl Into<String>) -> Self {
        Self::new(exit::USAGE, message)
    }

    fn ledger(e: LedgerError) -> Self {
        match e {
            LedgerError::Config(m) => Self::usage(m),
            other => Self::new(exit::OPERATIONAL, other.to_string()),
        }
    }
}

/// Runs the command line with the process arguments and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(exit::USAGE));
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(exit::OPERATIONAL);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            // A closed pipe (`| head`) is not an error worth a panic.
            let _ = std::io::stdout().lock().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = std::io::stdout().lock().write_all(e.output.as_bytes());
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

/// Runs one parsed command; `Ok` is what to print on stdout.
///
/// # Errors
///
/// [`CliError`] with its exit code and message.
pub async fn run(cli: Cli) -> Result<String, CliError> {
    let scope = match (&cli.tenant, cli.all_tenants) {
        (Some(t), false) => TenantScope::Tenant(Tenant::new(t.as_str())),
        (None, true) => TenantScope::AllTenants,
        _ => {
            return Err(CliError::usage(
                "name the tenant (--tenant T), or pass --all-tenants to see every tenant",
            ));
        }
    };
    let target = cli.ledger.as_deref().ok_or_else(|| {
        CliError::usage("no ledger: pass --ledger sqlite:PATH or postgres://… (or set RECOVERABLE_WRITE_LEDGER)")
    })?;
    let mut retention = crate::retention::Retention::new();
    if let Some(d) = cli.keep_details {
        retention = retention.details(d);
    }
    if let Some(d) = cli.keep_identity {
        retention = retention.identity(d);
    }
    if let Some(d) = cli.keep_callback_deliveries {
        retention = retention.callback_deliveries(d);
    }
    if let Some(d) = cli.keep_quarantined_callbacks {
        retention = retention.quarantined_callbacks(Some(d));
    }
    let contracts = match &cli.contracts {
        Some(path) => crate::Contracts::load(path).map_err(|e| CliError::usage(e.to_string()))?,
        None => crate::Contracts::default(),
    };
    let store = open(target, &cli.schema).await?;
    let ledger = store.ledger();
    let config = match crate::RecoverableWrite::builder(ledger.clone())
        .contracts(contracts)
        .retention(retention)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            store.close().await;
            return Err(CliError::usage(e.to_string()));
        }
    };
    let ctx = Ctx {
        ledger: ledger.clone(),
        purger: config.purger(),
        contracts_file: cli.contracts.as_ref().map(|p| p.display().to_string()),
        reviews: Reviews::new(ledger),
        scope,
        json: cli.json,
        now_ms: now_ms(),
    };
    let result = match cli.command {
        Command::List(a) => ctx.list(a).await,
        Command::Show(a) => ctx.show(a).await,
        Command::Claim(a) => ctx.claim(a).await,
        Command::Resolve(a) => ctx.resolve(a).await,
        Command::Acknowledge(a) => ctx.acknowledge(a).await,
        Command::Stats(a) => ctx.stats(a).await,
        Command::Quarantine(a) => ctx.quarantine(a).await,
        Command::Purge(a) => ctx.purge(a).await,
        Command::Erase(a) => ctx.erase(a).await,
    };
    store.close().await;
    result
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// An open ledger, closed at the end of the command.
enum Store {
    Sqlite(Arc<SqliteLedger>),
    Postgres(Arc<PostgresLedger>),
}

impl Store {
    fn ledger(&self) -> Arc<dyn Ledger> {
        match self {
            Store::Sqlite(l) => l.clone(),
            Store::Postgres(l) => l.clone(),
        }
    }

    async fn close(&self) {
        match self {
            Store::Sqlite(l) => l.close().await,
            Store::Postgres(l) => l.close().await,
        }
    }
}

/// Opens the ledger named by `target`. A SQLite file must exist: a typo must not create an
/// empty ledger that shows no stuck operations.
async fn open(target: &str, schema: &str) -> Result<Store, CliError> {
    if let Some(path) = target
        .strip_prefix("sqlite://")
        .or_else(|| target.strip_prefix("sqlite:"))
    {
        if path.is_empty() {
            return Err(CliError::usage(
                "empty SQLite path: use --ledger sqlite:PATH",
            ));
        }
        let p = std::path::Path::new(path);
        if !p.is_file() {
            return Err(CliError::new(
                exit::OPERATIONAL,
                format!("no SQLite ledger file at {path}"),
            ));
        }
        return SqliteLedger::open(p)
            .await
            .map(|l| Store::Sqlite(Arc::new(l)))
            .map_err(|e| {
                CliError::new(
                    exit::OPERATIONAL,
                    format!("cannot open the SQLite ledger {path}: {e}"),
                )
            });
    }
    if target.starts_with("postgres://") || target.starts_with("postgresql://") {
        let options = crate::ledger::PostgresLedgerOptions::new()
            .schema(schema)
            .map_err(CliError::ledger)?
            .max_connections(2);
        return PostgresLedger::connect_with(target, options)
            .await
            .map(|l| Store::Postgres(Arc::new(l)))
            .map_err(|e| match e {
                LedgerError::Config(m) => CliError::usage(m),
                other => CliError::new(
                    exit::OPERATIONAL,
                    format!(
                        "cannot reach the PostgreSQL ledger {}: {other}",
                        redact_url(target)
                    ),
                ),
            });
    }
    let scheme = target.split_once(':').map_or(target, |(s, _)| s);
    Err(CliError::usage(format!(
        "unsupported ledger {:?}: use sqlite:PATH, sqlite://PATH or postgres://…",
        if scheme.len() < 20 { scheme } else { "?" }
    )))
}

/// A URL without its userinfo (user and password), for messages.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Why `purge` refuses to run without a contracts file.
const NO_CONTRACTS: &str = "purge deletes by the application's retention, and no contracts \
file was given: pass the one the application loads (--contracts FILE or \
RECOVERABLE_WRITE_CONTRACTS), with its ledger-wide clocks (--keep-details, --keep-identity, ...) \
if it sets them. The library's defaults (rows kept 35 days) can be shorter than the \
application's clocks and than a vendor's key retention (PayPal Payments: 45 days), and a row \
deleted too early lets a repeated intent be sent again; to purge by them anyway, pass \
--default-retention. Nothing was deleted.";

/// Shows `plan` on stdout and asks on the terminal; only an explicit yes confirms.
async fn confirm_on_terminal(plan: String) -> bool {
    tokio::task::spawn_blocking(move || {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(plan.as_bytes());
        let _ = stdout.flush();
        drop(stdout);
        eprint!("Delete what the plan lists? This cannot be undone. Type yes to go on: ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).is_ok() && is_yes(&answer)
    })
    .await
    .unwrap_or(false)
}

fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// A retention refusal as its exit code.
fn retention_error(e: crate::retention::RetentionError) -> CliError {
    use crate::retention::RetentionError as E;
    match e {
        E::Ledger(e) => CliError::ledger(e),
        E::NotFound { .. } => CliError::new(exit::NOT_FOUND, e.to_string()),
        other => CliError::new(exit::REFUSED, other.to_string()),
    }
}

/// What `list --state` asked for.
#[derive(Debug, PartialEq, Eq)]
enum ListedStates {
    /// These states (none: every state); `open`: the open queue, whose quarantined rows are
    /// listed too (asked with `open`, or with no state at all).
    States { states: Vec<State>, open: bool },
    /// `quarantined`: the rows set aside as undecodable, alone.
    Quarantined,
}

impl ListedStates {
    fn parse(names: &[String]) -> Result<Self, CliError> {
        let norm = |n: &String| n.trim().to_ascii_uppercase().replace('-', "_");
        let (aside, states): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| norm(n) == "QUARANTINED");
        match (aside.is_empty(), states.is_empty()) {
            (false, true) => Ok(Self::Quarantined),
            (false, false) => Err(CliError::usage(
                "quarantined rows are listed on their own (--state quarantined): their stored \
                 state may be one this version does not know",
            )),
            (true, _) => {
                let open = names.iter().all(|n| n.trim().is_empty())
                    || names.iter().any(|n| norm(n) == "OPEN");
                let states: Vec<String> = states.into_iter().cloned().collect();
                Ok(Self::States {
                    states: parse_states(&states)?,
                    open,
                })
            }
        }
    }
}

/// Parses a state name: `manual_review`, `MANUAL-REVIEW`, … (`open`: every open state).
fn parse_states(names: &[String]) -> Result<Vec<State>, CliError> {
    let mut out = Vec::new();
    for name in names {
        let norm = name.trim().to_ascii_uppercase().replace('-', "_");
        if norm.is_empty() {
            continue;
        }
        if norm == "OPEN" {
            out.extend(OPEN_STATES);
            continue;
        }
        let s: State = norm.parse().map_err(|_| {
            CliError::usage(format!(
                "unknown state {name:?}: use one of {}, or open (or quarantined alone)",
                State::ALL
                    .iter()
                    .map(|s| s.as_str().to_ascii_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        out.push(s);
    }
    Ok(out)
}

/// The host of a stored URL (`-` if none).
fn host_of(url: &str) -> String {
    url.parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_owned))
        .unwrap_or_else(|| "-".to_owned())
}

/// One listing row: the columns an operator needs, no request values.
#[derive(Debug, Serialize)]
struct Row {
    tenant: String,
    operation_id: String,
    action: String,
    state: State,
    last_result: Option<State>,
    contract: String,
    target: String,
    version: u64,
    attempts_used: u32,
    max_attempts: u32,
    queries_used: u32,
    max_queries: u32,
    remote_ref: Option<String>,
    reason: Option<String>,
    created_ms: i64,
    updated_ms: i64,
    next_check_ms: Option<i64>,
    age_ms: i64,
    /// When a contradiction of its final state was first recorded, unacknowledged.
    #[serde(skip_serializing_if = "Option::is_none")]
    contradiction_ms: Option<i64>,
}

impl Row {
    fn new(r: &OperationRecord, now_ms: i64) -> Self {
        Self {
            tenant: r.tenant.as_str().to_owned(),
            operation_id: r.operation_id.as_str().to_owned(),
            action: r.action.to_string(),
            state: r.state,
            last_result: r.last_result,
            contract: r.contract.name.to_string(),
            target: host_of(&r.request.url),
            version: r.version,
            attempts_used: r.attempts_used,
            max_attempts: r.policy.max_attempts,
            queries_used: r.queries_used,
            max_queries: r.policy.max_queries,
            remote_ref: r.remote_ref.clone(),
            reason: r.reason.clone(),
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            next_check_ms: r.next_check_ms,
            contradiction_ms: r.contradiction_ms,
            age_ms: now_ms - r.created_ms,
        }
    }
}

/// One quarantined (or undecodable) listing row: its raw columns, no request values.
#[derive(Debug, Serialize)]
struct QuarantinedRow {
    tenant: String,
    operation_id: String,
    /// The state column as stored.
    state: String,
    /// Whether it is quarantined (recovery skips it); `false`: it went bad since its last
    /// claim and the next pass that meets it quarantines it.
    quarantined: bool,
    quarantined_ms: Option<i64>,
    /// Whether this version reads it now (then: release it).
    readable: bool,
    version: Option<u64>,
    action: Option<String>,
    /// The decode error (it names the column).
    error: String,
    created_ms: i64,
    updated_ms: i64,
    age_ms: i64,
}

impl QuarantinedRow {
    fn new(r: &crate::ledger::SkippedRow, now_ms: i64) -> Self {
        Self {
            tenant: r.tenant.as_str().to_owned(),
            operation_id: r.operation_id.as_str().to_owned(),
            state: r.state.clone(),
            quarantined: r.quarantined_ms.is_some(),
            quarantined_ms: r.quarantined_ms,
            readable: r.readable,
            version: r.columns.version,
            action: r.columns.action.clone(),
            error: r.error.clone(),
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            age_ms: now_ms - r.created_ms,
        }
    }
}

struct Ctx {
    ledger: Arc<dyn Ledger>,
    purger: crate::retention::Purger,
    /// The contracts file given (`--contracts`), as printed.
    contracts_file: Option<String>,
    reviews: Reviews,
    scope: TenantScope,
    json: bool,
    now_ms: i64,
}

fn to_json<T: Serialize>(value: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(value)
        .map(|mut s| {
            s.push('\n');
            s
        })
        .map_err(|e| CliError::new(exit::OPERATIONAL, format!("cannot serialize: {e}")))
}

/// One quarantined callback as printed: never its payload.
#[derive(Debug, Serialize)]
struct QuarantinedCallbackView {
    vendor: String,
    event_id: String,
    event_type: String,
    tenant: Option<String>,
    match_by: Option<String>,
    match_value: Option<String>,
    reason: String,
    evidence: Option<&'static str>,
    received: String,
}

/// One quarantined (undecodable) row as printed.
#[derive(Debug, Serialize)]
struct QuarantinedRowView {
    tenant: String,
    operation_id: String,
    error: String,
    at: String,
}

impl Ctx {
    async fn quarantine(&self, a: QuarantineArgs) -> Result<String, CliError> {
        if let Some(QuarantineAction::Release(r)) = a.action {
            return self.release(r).await;
        }
        // Scoped in the ledger, so the limit counts this scope's events (a tenant's first
        // `limit`, not the first `limit` of every tenant filtered down to none).
        let callbacks = self
            .ledger
            .quarantined_callbacks(&self.scope, a.limit)
            .await
            .map_err(CliError::ledger)?;
        let rows = self
            .ledger
            .quarantined(a.limit)
            .await
            .map_err(CliError::ledger)?;
        // A callback whose account mapped to no tenant belongs to no tenant: only an
        // all-tenants view shows it (the ledger's scope says so).
        let callbacks: Vec<QuarantinedCallbackView> = callbacks
            .into_iter()
            .map(|c| QuarantinedCallbackView {
                vendor: c.vendor,
                event_id: c.event_id,
                event_type: c.event_type,
                tenant: c.tenant.map(|t| t.as_str().to_owned()),
                match_by: c.match_by,
                match_value: c.match_value,
                reason: c.reason,
                evidence: c.evidence.as_ref().map(|e| e.label()),
                received: operator::format_time(c.received_at_ms),
            })
            .collect();
        let rows: Vec<QuarantinedRowView> = rows
            .into_iter()
            .filter(|r| self.scope.contains(&r.tenant))
            .map(|r| QuarantinedRowView {
                tenant: r.tenant.as_str().to_owned(),
                operation_id: r.operation_id.as_str().to_owned(),
                error: r.error,
                at: operator::format_time(r.at_ms),
            })
            .collect();
        if self.json {
            return to_json(&serde_json::json!({ "callbacks": callbacks, "rows": rows }));
        }
        let mut out = String::new();
        out.push_str(&format!("quarantined callbacks: {}\n", callbacks.len()));
        for c in &callbacks {
            out.push_str(&format!(
                "  {}  {} {} ({})  tenant {}  {} {}  evidence {}\n    why: {}\n",
                c.received,
                c.vendor,
                c.event_id,
                c.event_type,
                c.tenant.as_deref().unwrap_or("-"),
                c.match_by.as_deref().unwrap_or("-"),
                c.match_value.as_deref().unwrap_or("-"),
                c.evidence.unwrap_or("-"),
                c.reason,
            ));
        }
        out.push_str(&format!(
            "quarantined rows (could not be decoded): {}\n",
            rows.len()
        ));
        for r in &rows {
            out.push_str(&format!(
                "  {}  {} {}\n    why: {}\n",
                r.at, r.tenant, r.operation_id, r.error
            ));
        }
        if !rows.is_empty() {
            out.push_str(
                "  recovery skips them. Once a version that can read them runs: `show OP`, then \
                 `quarantine release OP --version N --reviewer YOU --reason …`\n",
            );
        }
        Ok(out)
    }

    /// `quarantine release`: the row is read again and given back to recovery if it decodes.
    async fn release(&self, a: ReleaseArgs) -> Result<String, CliError> {
        let (tenant, op) = self.locate(&a.op).await?;
        let reviewer = reviewer(&a.reviewer)?;
        let result = self
            .reviews
            .release_quarantined(&tenant, &op, &reviewer, &a.reason, a.version)
            .await;
        let row = match result {
            Ok(row) => row,
            Err(e) => return Err(review_error(e, None)),
        };
        if self.json {
            #[derive(Serialize)]
            struct Out<'a> {
                operation_id: &'a str,
                tenant: &'a str,
                action: &'a str,
                state: State,
                from_version: u64,
                version: u64,
            }
            return to_json(&Out {
                operation_id: op.as_str(),
                tenant: tenant.as_str(),
                action: "released from quarantine",
                state: row.state,
                from_version: a.version,
                version: row.version,
            });
        }
        Ok(format!(
            "{op}: released from quarantine (version {} -> {}); it is {} again, and the \
             recoverer's next pass picks it up where it stopped\n  {}\n",
            a.version,
            row.version,
            row.state,
            operator::state_meaning(row.state)
        ))
    }

    async fn purge(&self, a: PurgeArgs) -> Result<String, CliError> {
        if !matches!(self.scope, TenantScope::AllTenants) {
            return Err(CliError::usage(
                "purge is ledger-wide: pass --all-tenants (to erase one tenant, use erase --all-finished)",
            ));
        }
        let source = match (&self.contracts_file, a.default_retention) {
            (None, false) => return Err(CliError::usage(NO_CONTRACTS)),
            (Some(_), true) => {
                return Err(CliError::usage(
                    "--default-retention is for a purge without a contracts file, and one is given \
                     (--contracts or RECOVERABLE_WRITE_CONTRACTS): drop one of the two",
                ));
            }
            (Some(file), false) => format!("the contracts in {file}"),
            (None, true) => "the library's default clocks (--default-retention)".to_owned(),
        };
        if !self.purger.settings().is_enabled() {
            return Err(CliError::usage("retention is off"));
        }
        let plan = self.purger.plan().await.map_err(retention_error)?;
        // The plan is a preview, unless nothing is due: then it is the purge's (empty) result,
        // with nothing to confirm.
        let preview = a.dry_run || !plan.total.is_empty();
        let shown = if self.json {
            to_json(&serde_json::json!({ "dry_run": preview, "report": plan.total, "plan": plan }))?
        } else {
            render::purge_plan(&plan, &source)
        };
        if a.dry_run || plan.total.is_empty() {
            return Ok(shown);
        }
        // Deleting cannot be undone: only what the plan listed, and only once someone said so.
        let mut out = shown;
        if !a.yes {
            let asked = !self.json && std::io::stdin().is_terminal();
            if !asked {
                return Err(CliError::usage(
                    "nothing was deleted: pass --yes to delete what the plan above lists",
                )
                .with_output(out));
            }
            if !confirm_on_terminal(out).await {
                return Err(CliError::usage("nothing was deleted: not confirmed"));
            }
            out = String::new();
        }
        let report = self.purger.run_plan(&plan).await.map_err(retention_error)?;
        if self.json {
            return to_json(
                &serde_json::json!({ "dry_run": false, "report": report, "plan": plan }),
            );
        }
        out.push_str(&render::purge(&report, false));
        Ok(out)
    }

    async fn erase(&self, a: EraseArgs) -> Result<String, CliError> {
        let TenantScope::Tenant(tenant) = &self.scope else {
            return Err(CliError::usage(
                "erase works on one tenant: pass --tenant T",
            ));
        };
        if let Some(text) = &a.op {
            let (tenant, op) = self.locate(text).await?;
            let done = self
                .purger
                .erase_details(&tenant, &op)
                .await
                .map_err(retention_error)?;
            if self.json {
                return to_json(&serde_json::json!({
                    "operation_id": op.as_str(),
                    "details_erased": done.rows,
                    "bytes": done.bytes,
                }));
            }
            return Ok(if done.rows == 0 {
                format!("{op}: its details were already erased\n")
            } else {
                format!(
                    "{op}: request, response and evidence details erased ({} bytes); its identity \
                     stays, so a repeat still sends nothing\n",
                    done.bytes
                )
            });
        }
        if !a.yes {
            return Err(CliError::usage(
                "erase --all-finished deletes every finished operation of the tenant and cannot be \
                 undone: pass --yes to confirm",
            ));
        }
        let report = self
            .purger
            .erase_tenant(tenant)
            .await
            .map_err(retention_error)?;
        if self.json {
            return to_json(&serde_json::json!({ "tenant": tenant.as_str(), "report": report }));
        }
        Ok(format!(
            "tenant {tenant}: {} finished operation(s) deleted, {} callback record(s) deleted\n",
            report.identity.rows,
            report.callback_deliveries.rows + report.quarantined_callbacks.rows
        ))
    }

    async fn list(&self, a: ListArgs) -> Result<String, CliError> {
        let asked = ListedStates::parse(&a.state)?;
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        // The filters but the states, shared by the listing and its quarantined section.
        let mut base = OperationQuery::scoped(self.scope.clone())
            .limit(a.limit)
            .order(if a.oldest_first {
                Order::OldestFirst
            } else {
                Order::NewestFirst
            });
        if let Some(c) = a.contract {
            base = base.contract(c);
        }
        if let Some(h) = a.host {
            base = base.host(h.to_ascii_lowercase());
        }
        if let Some(d) = a.older_than {
            base = base.created_before(self.now_ms.saturating_sub(ms(d)));
        }
        if let Some(d) = a.unchanged_for {
            base = base.updated_before(self.now_ms.saturating_sub(ms(d)));
        }
        if let Some(t) = a.text {
            base = base.text(TextMatch::Prefix(t));
        }
        let mut q = match &asked {
            ListedStates::Quarantined => base.clone().quarantined_only(),
            ListedStates::States { states, .. } => base.clone().states(states.iter().copied()),
        };
        if let Some(c) = &a.cursor {
            q = q.after(crate::ledger::Cursor::parse(c).map_err(CliError::ledger)?);
        }
        if a.contradicted {
            q = q.contradicted();
        }
        let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
        let rows: Vec<Row> = page.rows.iter().map(|r| Row::new(r, self.now_ms)).collect();
        let (set_aside, bad): (Vec<_>, Vec<_>) = page
            .skipped
            .iter()
            .partition(|s| s.quarantined_ms.is_some() || asked == ListedStates::Quarantined);
        let mut quarantined: Vec<QuarantinedRow> = set_aside
            .into_iter()
            .map(|s| QuarantinedRow::new(s, self.now_ms))
            .collect();
        let skipped: Vec<String> = bad
            .iter()
            .map(|s| format!("{} {}: {}", s.tenant, s.operation_id, s.error))
            .collect();
        // The open queue includes the rows set aside: they need a person too. Listed once,
        // under the first page.
        if let ListedStates::States { open: true, .. } = asked
            && a.cursor.is_none()
        {
            let aside = self
                .ledger
                .list(&base.quarantined_only())
                .await
                .map_err(CliError::ledger)?;
            quarantined.extend(
                aside
                    .skipped
                    .iter()
                    .map(|s| QuarantinedRow::new(s, self.now_ms)),
            );
        }
        let next = page.next.map(|c| c.to_string());
        if self.json {
            #[derive(Serialize)]
            struct Out<'a> {
                operations: &'a [Row],
                quarantined: &'a [QuarantinedRow],
                next_cursor: Option<&'a str>,
                skipped: &'a [String],
            }
            return to_json(&Out {
                operations: &rows,
                quarantined: &quarantined,
                next_cursor: next.as_deref(),
                skipped: &skipped,
            });
        }
        let all = matches!(self.scope, TenantScope::AllTenants);
        if asked == ListedStates::Quarantined {
            let mut out = if quarantined.is_empty() {
                "no quarantined rows match\n".to_owned()
            } else {
                render::quarantined_list(&quarantined, all)
            };
            if let Some(next) = &next {
                out.push_str(&format!("more: add --cursor {next}\n"));
            }
            return Ok(out);
        }
        let mut out = render::list(&rows, next.as_deref(), &skipped, all);
        if !quarantined.is_empty() {
            out.push_str(&format!(
                "\nquarantined: {} row(s) this version cannot use; recovery skips them until they \
                 are released (`show OP`, then `quarantine release OP`)\n",
                quarantined.len()
            ));
            out.push_str(&render::quarantined_list(&quarantined, all));
        }
        Ok(out)
    }

    /// Finds the operation `text` names: an exact id, else a unique prefix of an id or of a
    /// vendor reference, in the scope.
    async fn locate(&self, text: &str) -> Result<(Tenant, OperationId), CliError> {
        if text.trim().is_empty() {
            return Err(CliError::usage("empty operation id"));
        }
        if let TenantScope::Tenant(t) = &self.scope {
            match self.ledger.get(t, &OperationId::new(text)).await {
                Ok(Some(r)) => return Ok((r.tenant, r.operation_id)),
                Ok(None) => {}
                // It exists, and this version cannot decode it: `show` reads it raw.
                Err(LedgerError::Corrupt { .. }) => return Ok((t.clone(), OperationId::new(text))),
                Err(e) => return Err(CliError::ledger(e)),
            }
        }
        for m in [
            TextMatch::Exact(text.to_owned()),
            TextMatch::Prefix(text.to_owned()),
        ] {
            let q = OperationQuery::scoped(self.scope.clone())
                .text(m)
                .include_quarantined(true)
                .limit(5);
            let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
            // Rows reported by their raw columns (quarantined, undecodable) are found too.
            let found: Vec<(&Tenant, &OperationId)> = page
                .rows
                .iter()
                .map(|r| (&r.tenant, &r.operation_id))
                .chain(page.skipped.iter().map(|s| (&s.tenant, &s.operation_id)))
                .collect();
            match found.as_slice() {
                [] => continue,
                [(tenant, id)] => return Ok(((*tenant).clone(), (*id).clone())),
                many => {
                    let names: Vec<String> = many
                        .iter()
                        .map(|(tenant, id)| format!("{id} (tenant {tenant})"))
                        .collect();
                    return Err(CliError::usage(format!(
                        "{text:?} matches several operations: {}; give the whole id, or --tenant",
                        names.join(", ")
                    )));
                }
            }
        }
        Err(CliError::new(
            exit::NOT_FOUND,
            match &self.scope {
                TenantScope::Tenant(t) => format!("no operation {text:?} for tenant {t}"),
                TenantScope::AllTenants => format!("no operation {text:?} in any tenant"),
            },
        ))
    }

    async fn show(&self, a: ShowArgs) -> Result<String, CliError> {
        let (tenant, op) = self.locate(&a.op).await?;
        let aside = self
            .reviews
            .quarantine_package(&tenant, &op)
            .await
            .map_err(|e| review_error(e, None))?;
        if let Some(q) = aside.as_ref().filter(|q| !q.readable) {
            return self.show_quarantined(q);
        }
        let pkg = self
            .reviews
            .handoff(&tenant, &op)
            .await
            .map_err(|e| review_error(e, None))?;
        let mut explanation = operator::explain(&pkg, self.now_ms);
        if let Some(q) = &aside {
            // Set aside: the engine does nothing with it until it is released.
            explanation.next = operator::explain_quarantine(q, self.now_ms).next;
        }
        let audit = operator::audit_trail(&pkg);
        let record = self
            .ledger
            .get(&tenant, &op)
            .await
            .map_err(CliError::ledger)?;
        let retention = record.as_ref().and_then(|r| self.purger.dates(r));
        if self.json {
            #[derive(Serialize)]
            struct Out<'a> {
                package: &'a crate::HandoffPackage,
                explanation: &'a operator::Explanation,
                audit: &'a [AuditEntry],
                late_evidence: Vec<i64>,
                /// `null` while the operation is not finished: it is kept whatever its age.
                retention: Option<crate::retention::RetentionDates>,
                /// Set when the row is quarantined although this version reads it.
                quarantined: Option<&'a crate::review::QuarantinePackage>,
                now_ms: i64,
            }
            return to_json(&Out {
                quarantined: aside.as_ref(),
                package: &pkg,
                explanation: &explanation,
                audit: &audit,
                late_evidence: operator::late_evidence(&pkg)
                    .iter()
                    .map(|e| e.seq)
                    .collect(),
                retention,
                now_ms: self.now_ms,
            });
        }
        let mut out = String::new();
        if let Some(q) = &aside {
            // Readable now, still set aside: only a release gives it back to recovery.
            let ex = operator::explain_quarantine(q, self.now_ms);
            out.push_str(&format!(
                "!! QUARANTINED: {}\n   {}\n   recoverable-write quarantine release {} --version \
                 {} --reviewer YOU --reason \"…\"\n\n",
                ex.headline, ex.next, pkg.operation_id, pkg.version
            ));
        }
        out.push_str(&render::show(&pkg, &explanation, &audit, self.now_ms));
        out.push_str(&render::retention(retention.as_ref()));
        Ok(out)
    }

    /// `show` of an operation this version cannot decode: its raw columns, redacted.
    fn show_quarantined(&self, q: &crate::review::QuarantinePackage) -> Result<String, CliError> {
        let explanation = operator::explain_quarantine(q, self.now_ms);
        if self.json {
            #[derive(Serialize)]
            struct Out<'a> {
                quarantined: &'a crate::review::QuarantinePackage,
                explanation: &'a operator::Explanation,
                now_ms: i64,
            }
            return to_json(&Out {
                quarantined: q,
                explanation: &explanation,
                now_ms: self.now_ms,
            });
        }
        Ok(render::quarantined(q, &explanation, self.now_ms))
    }

    async fn claim(&self, a: ClaimArgs) -> Result<String, CliError> {
        let (tenant, op) = self.locate(&a.op).await?;
        let reviewer = reviewer(&a.reviewer)?;
        let result = if a.take_over {
            self.reviews
                .take_over(&tenant, &op, &reviewer, &a.reason, a.version)
                .await
        } else {
            self.reviews
                .claim_with_reason(&tenant, &op, &reviewer, &a.reason, a.version)
                .await
        };
        self.acted(&tenant, &op, "claimed", a.version, result).await
    }

    async fn resolve(&self, a: ResolveArgs) -> Result<String, CliError> {
        if a.remote_ref.is_some() && a.decision != Decision::Succeeded {
            return Err(CliError::usage("--remote-ref goes with `succeeded` only"));
        }
        let decision = match a.decision {
            Decision::Succeeded => ReviewDecision::ConfirmedSucceeded {
                remote_ref: a.remote_ref.filter(|r| !r.trim().is_empty()),
            },
            Decision::NotExecuted => {
                if !a.reapprove {
                    return Err(CliError::usage(
                        "not-executed re-approves the write: the engine sends it again with the \
                         same key and bytes. Pass --reapprove to confirm you verified with the \
                         vendor that it was not executed",
                    ));
                }
                ReviewDecision::ConfirmedNotExecuted
            }
            Decision::KeepPending => ReviewDecision::KeepPending,
        };
        let (tenant, op) = self.locate(&a.op).await?;
        let reviewer = reviewer(&a.reviewer)?;
        let result = self
            .reviews
            .resolve_with_reason(&tenant, &op, &reviewer, &a.reason, a.version, decision)
            .await;
        let what = match a.decision {
            Decision::Succeeded => "resolved as succeeded",
            Decision::NotExecuted => "re-approved (confirmed not executed)",
            Decision::KeepPending => "kept pending",
        };
        self.acted(&tenant, &op, what, a.version, result).await
    }

    async fn acknowledge(&self, a: AcknowledgeArgs) -> Result<String, CliError> {
        let (tenant, op) = self.locate(&a.op).await?;
        let reviewer = reviewer(&a.reviewer)?;
        let result = self
            .reviews
            .acknowledge_contradiction(&tenant, &op, &reviewer, &a.reason, a.version)
            .await;
        self.acted(
            &tenant,
            &op,
            "contradiction acknowledged",
            a.version,
            result,
        )
        .await
    }

    /// Reports a claim or resolution, with the audit entry it appended.
    async fn acted(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        what: &str,
        from_version: u64,
        result: Result<OperationRecord, ReviewError>,
    ) -> Result<String, CliError> {
        let current = match result {
            Ok(row) => row,
            Err(e) => {
                let now = self.ledger.get(tenant, op).await.ok().flatten();
                return Err(review_error(e, now.as_ref()));
            }
        };
        // Keep pending returns the row as it was: read it again for the record.
        let pkg = self
            .reviews
            .handoff(tenant, op)
            .await
            .map_err(|e| review_error(e, None))?;
        let audit = operator::audit_trail(&pkg).pop();
        if self.json {
            #[derive(Serialize)]
            struct Out<'a> {
                operation_id: &'a str,
                tenant: &'a str,
                action: &'a str,
                state: State,
                from_version: u64,
                version: u64,
                audit: Option<&'a AuditEntry>,
            }
            return to_json(&Out {
                operation_id: op.as_str(),
                tenant: tenant.as_str(),
                action: what,
                state: pkg.state,
                from_version,
                version: current.version.max(pkg.version),
                audit: audit.as_ref(),
            });
        }
        Ok(render::acted(op, what, from_version, &pkg, audit.as_ref()))
    }

    async fn stats(&self, a: StatsArgs) -> Result<String, CliError> {
        let counts = self
            .ledger
            .count_by_state(&self.scope)
            .await
            .map_err(CliError::ledger)?;
        let oldest = self
            .ledger
            .oldest(&self.scope, &WATCHED_STATES)
            .await
            .map_err(CliError::ledger)?;
        // Open operations per state, contract and target.
        // Keyed by the state's position in `State::ALL` (states have no order of their own).
        let mut by_target: BTreeMap<(usize, String, String), u64> = BTreeMap::new();
        let mut scanned = 0usize;
        let mut truncated = false;
        let mut q = OperationQuery::scoped(self.scope.clone())
            .states(OPEN_STATES)
            .limit(1000);
        loop {
            let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
            for r in &page.rows {
                *by_target
                    .entry((
                        State::ALL.iter().position(|s| *s == r.state).unwrap_or(0),
                        r.contract.name.to_string(),
                        host_of(&r.request.url),
                    ))
                    .or_default() += 1;
            }
            scanned += page.rows.len();
            match page.next {
                Some(next) if scanned < a.scan_limit => q = q.after(next),
                Some(_) => {
                    truncated = true;
                    break;
                }
                None => break,
            }
        }
        // Resolution times of reviews resolved within the period.
        let since_ms = self
            .now_ms
            .saturating_sub(i64::try_from(a.since.as_millis()).unwrap_or(i64::MAX));
        let mut review_ms: Vec<i64> = Vec::new();
        let mut claim_ms: Vec<i64> = Vec::new();
        let mut total_ms: Vec<i64> = Vec::new();
        let mut q = OperationQuery::scoped(self.scope.clone())
            .states([State::Succeeded, State::Rejected, State::RetryReady])
            .updated_after(since_ms)
            .limit(200);
        let mut read = 0usize;
        'pages: loop {
            let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
            for r in &page.rows {
                if read >= a.scan_limit {
                    truncated = true;
                    break 'pages;
                }
                read += 1;
                if r.state.is_terminal() {
                    total_ms.push(r.updated_ms - r.created_ms);
                }
                let log = self
                    .ledger
                    .evidence(&r.tenant, &r.operation_id)
                    .await
                    .map_err(CliError::ledger)?;
                let mut handed_over: Option<i64> = None;
                let mut claimed: Option<i64> = None;
                for e in &log {
                    let into_review = e.entry.to_state == Some(State::ManualReview)
                        && e.entry.from_state != Some(State::ManualReview);
                    if into_review {
                        handed_over.get_or_insert(e.entry.at_ms);
                    }
                    match &*e.entry.kind {
                        "review_claimed" => {
                            let start = *handed_over.get_or_insert(e.entry.at_ms);
                            if claimed.is_none() {
                                claimed = Some(e.entry.at_ms);
                                claim_ms.push(e.entry.at_ms - start);
                            }
                        }
                        "review" if e.entry.to_state.is_some_and(|s| s != State::ManualReview) => {
                            if let Some(start) = handed_over.take() {
                                review_ms.push(e.entry.at_ms - start);
                            }
                            claimed = None;
                        }
                        _ => {}
                    }
                }
            }
            match page.next {
                Some(next) => q = q.after(next),
                None => break,
            }
        }
        let stats = render::Stats {
            counts: counts
                .iter()
                .map(|(state, n)| (state.as_str(), n))
                .chain(std::iter::once((render::QUARANTINED, counts.quarantined())))
                .collect(),
            quarantined: counts.quarantined(),
            by_target: by_target
                .into_iter()
                .map(|((state, contract, target), count)| render::TargetCount {
                    state: State::ALL[state],
                    contract,
                    target,
                    count,
                })
                .collect(),
            oldest: oldest
                .iter()
                .map(|(state, o)| render::Oldest {
                    state,
                    operation_id: o.map(|o| o.operation_id.as_str().to_owned()),
                    tenant: o.map(|o| o.tenant.as_str().to_owned()),
                    created_ms: o.map(|o| o.created_ms),
                    age_ms: o.map(|o| self.now_ms - o.created_ms),
                })
                .collect(),
            since_ms,
            review_resolution: render::Spread::of(review_ms),
            time_to_claim: render::Spread::of(claim_ms),
            first_send_to_final: render::Spread::of(total_ms),
            open_scanned: scanned,
            truncated,
            now_ms: self.now_ms,
        };
        if self.json {
            return to_json(&stats);
        }
        Ok(render::stats(&stats))
    }
}

/// A reviewer name: not blank.
fn reviewer(name: &str) -> Result<String, CliError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(CliError::usage("--reviewer must name you"));
    }
    Ok(name.to_owned())
}

/// The exit code and message of a failed review action; `now` is the row as it is now.
fn review_error(e: ReviewError, now: Option<&OperationRecord>) -> CliError {
    let state_now = now
        .map(|r| {
            format!(
                " It is now {} at version {} (generation {}).",
                r.state, r.version, r.generation.0
            )
        })
        .unwrap_or_default();
    match e {
        ReviewError::NotFound { tenant, operation } => CliError::new(
            exit::NOT_FOUND,
            format!("no operation {operation} for tenant {tenant}"),
        ),
        ReviewError::VersionMismatch {
            operation,
            expected,
            current,
        } => CliError::new(
            exit::STALE,
            format!(
                "refused: {operation} changed since version {expected} was read (now version \
                 {current}); nothing was changed.{state_now} Run `show` again, read what changed, \
                 and act on the version it prints."
            ),
        ),
        ReviewError::Refused(r) => CliError::new(
            exit::REFUSED,
            format!("refused: {r}; nothing was changed.{state_now}"),
        ),
        ReviewError::ClaimedByOther { operation, holder } => CliError::new(
            exit::REFUSED,
            format!(
                "refused: {operation} is claimed by {holder}; nothing was changed.{state_now} \
                 A claim is exclusive: ask {holder}, or take it over with `claim --take-over` \
                 (the audit trail names you both)."
            ),
        ),
        ReviewError::ReasonRequired => {
            CliError::usage("--reason must say why: it goes into the operation's audit trail")
        }
        ReviewError::NotQuarantined { operation } => CliError::new(
            exit::REFUSED,
            format!(
                "refused: {operation} is not quarantined (it may have been released already); \
                 nothing was changed.{state_now}"
            ),
        ),
        e @ ReviewError::StillUndecodable { .. } => {
            CliError::new(exit::REFUSED, format!("refused: {e}. Nothing was changed."))
        }
        ReviewError::Ledger(e) => CliError::ledger(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_in_any_case_and_open_expands() {
        let s = parse_states(&["manual_review".into(), "Unknown".into()]).unwrap();
        assert_eq!(s, vec![State::ManualReview, State::Unknown]);
        assert_eq!(
            parse_states(&["retry-ready".into()]).unwrap(),
            vec![State::RetryReady]
        );
        assert_eq!(
            parse_states(&["open".into()]).unwrap().len(),
            OPEN_STATES.len()
        );
        let e = parse_states(&["stuck".into()]).unwrap_err();
        assert_eq!(e.code, exit::USAGE);
    }

    #[test]
    fn urls_lose_their_userinfo_in_messages() {
        assert_eq!(
            redact_url("postgres://ops:hunter2@db:5432/ops"),
            "postgres://***@db:5432/ops"
        );
        assert_eq!(redact_url("postgres://db/ops"), "postgres://db/ops");
    }

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

    #[test]
    fn purge_asks_before_deleting() {
        let purge = |args: &[&str]| {
            let mut full = vec!["recoverable-write", "--all-tenants", "purge"];
            full.extend(args);
            Cli::try_parse_from(full).map(|cli| match cli.command {
                Command::Purge(a) => (a.dry_run, a.yes, a.default_retention),
                _ => panic!("purge"),
            })
        };
        assert_eq!(purge(&[]).unwrap(), (false, false, false));
        assert_eq!(
            purge(&["--yes", "--default-retention"]).unwrap(),
            (false, true, true)
        );
        assert!(
            purge(&["--dry-run", "--yes"]).is_err(),
            "a dry run deletes nothing"
        );
        for yes in ["yes", "YES\n", " y \r\n"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in ["", "\n", "no", "n", "yes please", "sure"] {
            assert!(!is_yes(no), "{no:?}");
        }
    }
}
