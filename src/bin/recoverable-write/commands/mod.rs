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
    /// The ledger as printed commands may name it: a SQLite target as given, never a
    /// PostgreSQL URL (it may hold a password).
    pub(crate) ledger_shown: Option<String>,
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

    /// How printed commands on `tenant`'s operations begin (see [`render::command_prefix`]).
    fn cmd(&self, tenant: &Tenant) -> String {
        render::command_prefix(self.ledger_shown.as_deref(), tenant.as_str())
    }

    /// Finds the operation `text` names, in the scope: an exact id or vendor reference, else
    /// the one operation whose id or reference starts or ends with it, or whose intent is it.
    /// Generated ids start with their creation time, so the end of an id is what tells it
    /// from its neighbours: a short prefix matches every operation made in the same minute.
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
        let exact = self.candidates(TextMatch::Exact(text.to_owned())).await?;
        let found = if exact.is_empty() {
            let mut all = Vec::new();
            for m in [
                TextMatch::Prefix(text.to_owned()),
                TextMatch::Suffix(text.to_owned()),
                TextMatch::Intent(text.to_owned()),
            ] {
                for c in self.candidates(m).await? {
                    if !all.iter().any(|a: &Candidate| a.same(&c)) {
                        all.push(c);
                    }
                }
            }
            all
        } else {
            exact
        };
        match found.as_slice() {
            [] => Err(CliError::new(
                exit::NOT_FOUND,
                match &self.scope {
                    TenantScope::Tenant(t) => format!(
                        "no operation {text:?} for tenant {t} (no id, vendor reference or intent \
                         is, starts or ends with it)"
                    ),
                    TenantScope::AllTenants => format!("no operation {text:?} in any tenant"),
                },
            )),
            [one] => Ok((one.tenant.clone(), one.id.clone())),
            many => Err(self.ambiguous(text, many)),
        }
    }

    /// The operations (at most [`CANDIDATES`] + 1) that `m` finds in the scope, quarantined
    /// and undecodable rows included.
    async fn candidates(&self, m: TextMatch) -> Result<Vec<Candidate>, CliError> {
        let q = OperationQuery::scoped(self.scope.clone())
            .text(m)
            .include_quarantined(true)
            .limit(CANDIDATES + 1);
        let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
        Ok(page
            .rows
            .iter()
            .map(|r| Candidate {
                tenant: r.tenant.clone(),
                id: r.operation_id.clone(),
                intent: Some(r.intent_ref.to_string()),
                state: r.state.to_string(),
            })
            .chain(page.skipped.iter().map(|s| Candidate {
                tenant: s.tenant.clone(),
                id: s.operation_id.clone(),
                intent: s.columns.intent_ref.clone(),
                state: s.state.clone(),
            }))
            .collect())
    }

    /// The usage error of a text that names several operations: they are listed, and the
    /// message says what tells them apart.
    fn ambiguous(&self, text: &str, many: &[Candidate]) -> CliError {
        let all = matches!(self.scope, TenantScope::AllTenants);
        let names: Vec<String> = many
            .iter()
            .take(usize::try_from(CANDIDATES).unwrap_or(usize::MAX))
            .map(|c| {
                let mut s = format!("  {}  {}", c.id, c.state);
                if let Some(i) = &c.intent {
                    s.push_str(&format!("  intent {i}"));
                }
                if all {
                    s.push_str(&format!("  tenant {}", c.tenant));
                }
                s
            })
            .collect();
        let more = if many.len() > names.len() {
            "\n  … and more"
        } else {
            ""
        };
        let tenants_differ = many.iter().any(|c| c.tenant != many[0].tenant);
        let tenant_hint = if all && tenants_differ {
            ", or --tenant T instead of --all-tenants"
        } else {
            ""
        };
        CliError::usage(format!(
            "{text:?} matches several operations:\n{}{more}\nName one: the whole id, the last \
             characters of its id (ids start with their creation time, so their ends differ), \
             or its intent{tenant_hint}",
            names.join("\n")
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
        Ok(render::acted(
            op,
            what,
            from_version,
            &pkg,
            audit.as_ref(),
            &self.cmd(tenant),
        ))
    }
}

/// How many operations an ambiguous id lists.
const CANDIDATES: u32 = 8;

/// An operation a typed id may name.
struct Candidate {
    tenant: Tenant,
    id: OperationId,
    /// `None` when its column cannot be read.
    intent: Option<String>,
    state: String,
}

impl Candidate {
    fn same(&self, other: &Candidate) -> bool {
        self.tenant == other.tenant && self.id == other.id
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
