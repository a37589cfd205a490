//! `purge`: what retention says is due now, by the application's contracts, shown as a plan
//! first and deleted only once someone said yes.

use std::io::{IsTerminal as _, Write as _};

use recoverable_write::ledger::TenantScope;

use super::{Ctx, to_json};
use crate::args::PurgeArgs;
use crate::error::{CliError, retention_error};
use crate::render;

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

impl Ctx {
    pub(super) async fn purge(&self, a: PurgeArgs) -> Result<String, CliError> {
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
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::args::{Cli, Command};

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
