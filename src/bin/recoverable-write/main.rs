//! `recoverable-write`: the operators' command line (feature `cli`; SQLite ledgers with the
//! default feature `sqlite`, PostgreSQL ones with `postgres`). Run `recoverable-write --help`.
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
//! recoverable-write --ledger sqlite:ops.db --tenant acme reconcile --from payments.csv --format stripe
//! recoverable-write --ledger sqlite:ops.db --tenant acme reconcile --from payments.csv --format stripe \
//!     --apply --reviewer alice --reason "outage export"
//! ```
//!
//! `reconcile --from EXPORT` reads a vendor's export (CSV or JSON lines; `--format stripe`,
//! `adyen`, `square`, `paypal`, or `generic` with `--reference-column` and `--operation-column`
//! and/or `--key-column`) and prints the plan: which operations in review it would resolve as
//! succeeded with which reference, which rows match nothing, which operations in review no row
//! names. `--apply` resolves them, each at the version the plan read (a row that changed since
//! is skipped and reported, exit 4); it never resolves anything as not executed.
//!
//! Retention (`purge`, and the retention dates `show` prints) reads the same settings as the
//! application: the contracts file it loads (`--contracts`, for their `keep_details_secs` and
//! `keep_identity_secs`) and the ledger-wide clocks (`--keep-details`, `--keep-identity`,
//! `--keep-callback-deliveries`, `--keep-quarantined-callbacks`; the library's defaults when
//! not given). See [`recoverable_write::retention`].
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
//! The ledger is `--ledger` or `RECOVERABLE_WRITE_LEDGER`: `sqlite:PATH`, `sqlite://PATH` (or a
//! bare path to an existing SQLite file), or a `postgres://` / `postgresql://` URL (`--schema`,
//! default `public`). The ledger URL is never printed (it may hold a password); the commands
//! `show` prints name a SQLite ledger, so they run as printed.
//!
//! An operation is named by its id, or by what names only one operation: the end of its id
//! (generated ids start with their creation time, so a short prefix names every operation of
//! that minute), a prefix, its intent, or the vendor's reference. `resolve … succeeded` wants
//! the vendor's reference (`--remote-ref`) or an explicit `--no-reference`: it is final. Every command is scoped to one tenant (`--tenant`);
//! `--all-tenants` is the explicit operator capability to see them all.
//!
//! Output is a table or plain text by default, JSON with `--json`. Nothing printed holds a
//! credential: operations are shown through their redacted
//! [`HandoffPackage`](recoverable_write::HandoffPackage) and listing columns (the one body value
//! there is the answer of a lookup that resolved the operation, its secret fields `[redacted]`).
//!
//! Exit codes ([`exit`]): 0 ok, 1 operational error (ledger unreachable, store failure),
//! 2 usage (bad arguments, bad ledger URL or one whose backend this binary was built without,
//! ambiguous id, empty reason, a deletion not confirmed or without the application's
//! retention), 3 operation not found, 4 stale version (the operation changed since it was
//! read: show it again), 5 refused by the state machine (e.g. resolving an operation that is
//! not in `MANUAL_REVIEW`; releasing a row that is not quarantined, or that this version still
//! cannot decode).
//!
//! A row this version cannot decode is quarantined by the recovery pass that meets it; `stats`
//! counts it on its own `QUARANTINED` line, `list` shows it (with the decode error) under the
//! open queue or alone with `--state quarantined`, `show` prints the columns it can read, and
//! `quarantine release` gives it back to recovery once a version that reads it runs.
//!
//! The binary's modules: [`args`] (clap), [`open`] (the ledger from `--ledger`), [`commands`]
//! (one file per command), [`render`] (text output), [`error`] (exit codes). It uses only the
//! library's public API.

mod args;
mod commands;
mod error;
mod open;
mod render;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Parser as _;
use recoverable_write::retention::Retention;
use recoverable_write::review::Reviews;
use recoverable_write::{Contracts, RecoverableWrite, Tenant, ledger::TenantScope};

use crate::args::Cli;
use crate::commands::Ctx;
use crate::error::{CliError, exit};

/// Runs the command line with the process arguments and returns its exit code.
fn main() -> ExitCode {
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
            ExitCode::from(exit::OK)
        }
        Err(e) => {
            let _ = std::io::stdout().lock().write_all(e.output.as_bytes());
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

/// Runs one parsed command; `Ok` is what to print on stdout.
async fn run(cli: Cli) -> Result<String, CliError> {
    let scope = scope(&cli)?;
    let target = cli.ledger.as_deref().ok_or_else(|| {
        CliError::usage("no ledger: pass --ledger sqlite:PATH or postgres://… (or set RECOVERABLE_WRITE_LEDGER)")
    })?;
    let retention = retention(&cli);
    let contracts = match &cli.contracts {
        Some(path) => Contracts::load(path).map_err(|e| CliError::usage(e.to_string()))?,
        None => Contracts::default(),
    };
    let store = open::open(target, &cli.schema).await?;
    let ledger = store.ledger();
    let config = match RecoverableWrite::builder(ledger.clone())
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
        ledger_shown: open::printable(target),
    };
    let result = ctx.run(cli.command).await;
    store.close().await;
    result
}

/// The tenants the command sees: `--tenant T`, or every one with `--all-tenants`.
fn scope(cli: &Cli) -> Result<TenantScope, CliError> {
    match (&cli.tenant, cli.all_tenants) {
        (Some(t), false) => Ok(TenantScope::Tenant(Tenant::new(t.as_str()))),
        (None, true) => Ok(TenantScope::AllTenants),
        _ => Err(CliError::usage(
            "name the tenant (--tenant T), or pass --all-tenants to see every tenant",
        )),
    }
}

/// The ledger-wide retention clocks given (`--keep-details`, …), the library's defaults for
/// the others.
fn retention(cli: &Cli) -> Retention {
    let mut retention = Retention::new();
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
    retention
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
