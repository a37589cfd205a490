//! The commands, one file each, run on an open ledger ([`Ctx`]); and what several of them
//! share: finding an operation from what a person typed, reporting a review action, JSON.

mod acknowledge;
mod claim;
mod erase;
mod list;
mod purge;
mod quarantine;
mod reconcile;
mod resolve;
mod show;
mod stats;

use std::sync::Arc;

use recoverable_write::ledger::{
    FullLedger, LedgerError, ListingLedger, OperationQuery, OperationRecord, TenantScope, TextMatch,
};
use recoverable_write::operation::{OperationId, Tenant};
use recoverable_write::operator::{self, AuditEntry};
use recoverable_write::retention::Purger;
use recoverable_write::review::{ReviewError, Reviews};
use recoverable_write::state::State;
use serde::Serialize;

use crate::args::Command;
use crate::error::{CliError, exit, review_error};
use crate::render;

pub(crate) use self::list::{QuarantinedRow, Row};

/// What every command runs with: the open ledger, the settings, the tenant scope.
pub(crate) struct Ctx {
    pub(crate) ledger: Arc<dyn FullLedger>,
    pub(crate) purger: Purger,
    /// The contracts file given (`--contracts`), as printed.
    pub(crate) contracts_file: Option<String>,
    pub(crate) reviews: Reviews,
    pub(crate) scope: TenantScope,
    pub(crate) json: bool,
    pub(crate) now_ms: i64,
}

impl Ctx {
    /// Runs `command`; `Ok` is what to print on stdout.
    pub(crate) async fn run(&self, command: Command) -> Result<String, CliError> {
        match command {
            Command::List(a) => self.list(a).await,
            Command::Show(a) => self.show(a).await,
            Command::Claim(a) => self.claim(a).await,
            Command::Resolve(a) => self.resolve(a).await,
            Command::Acknowledge(a) => self.acknowledge(a).await,
            Command::Stats(a) => self.stats(a).await,
            Command::Quarantine(a) => self.quarantine(a).await,
            Command::Purge(a) => self.purge(a).await,
            Command::Erase(a) => self.erase(a).await,
            Command::Reconcile(a) => self.reconcile(a).await,
        }
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
}

/// A reviewer name: not blank.
fn reviewer(name: &str) -> Result<String, CliError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(CliError::usage("--reviewer must name you"));
    }
    Ok(name.to_owned())
}

/// The host of a stored URL (`-` if none).
fn host_of(url: &str) -> String {
    url.parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_owned))
        .unwrap_or_else(|| "-".to_owned())
}

/// `value` as pretty JSON, with a final newline.
fn to_json<T: Serialize>(value: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(value)
        .map(|mut s| {
            s.push('\n');
            s
        })
        .map_err(|e| CliError::new(exit::OPERATIONAL, format!("cannot serialize: {e}")))
}
