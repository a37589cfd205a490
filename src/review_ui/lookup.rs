//! Finding the operation an address or a form names: its tenant (the router's, the one named,
//! or the only one with that id), its handoff package, and the page when there is none.

use axum::http::StatusCode;
use axum::response::Response;

use super::views::{ledger_failed, message};
use super::{ReviewUiOptions, ReviewerIdentity};
use crate::ledger::{OperationQuery, TenantScope, TextMatch};
use crate::operation::{OperationId, Tenant};
use crate::review::{HandoffPackage, ReviewError};

/// Why an operation could not be found or addressed.
pub(super) enum Lookup {
    NotFound,
    Bad(String),
    Failed(crate::ledger::LedgerError),
}

/// The tenant an operation is looked up in: the router's, or (for every tenant) the one the
/// URL names or the only one that has this id.
pub(super) async fn tenant_for(
    cfg: &ReviewUiOptions,
    given: Option<&str>,
    id: &OperationId,
) -> Result<Tenant, Lookup> {
    match (&cfg.scope, given.filter(|t| !t.is_empty())) {
        (TenantScope::Tenant(t), None) => Ok(t.clone()),
        (TenantScope::Tenant(t), Some(g)) if g == t.as_str() => Ok(t.clone()),
        (TenantScope::Tenant(_), Some(_)) => Err(Lookup::NotFound),
        (TenantScope::AllTenants, Some(g)) => Ok(Tenant::new(g)),
        (TenantScope::AllTenants, None) => {
            if id.as_str().contains('\0') {
                return Err(Lookup::NotFound);
            }
            let q = OperationQuery::all_tenants()
                .text(TextMatch::Exact(id.as_str().to_owned()))
                .include_quarantined(true)
                .limit(10);
            let page = cfg.ledger.list(&q).await.map_err(Lookup::Failed)?;
            let mut tenants: Vec<Tenant> = page
                .rows
                .into_iter()
                .map(|r| (r.tenant, r.operation_id))
                .chain(page.skipped.into_iter().map(|r| (r.tenant, r.operation_id)))
                .filter(|(_, op)| op == id)
                .map(|(tenant, _)| tenant)
                .collect();
            tenants.dedup();
            match tenants.len() {
                0 => Err(Lookup::NotFound),
                1 => Ok(tenants.remove(0)),
                _ => Err(Lookup::Bad(format!(
                    "several tenants have an operation {id}: add ?tenant= to the address"
                ))),
            }
        }
    }
}

/// The operation's handoff package.
pub(super) async fn load(
    cfg: &ReviewUiOptions,
    given_tenant: Option<&str>,
    id: &OperationId,
) -> Result<HandoffPackage, Lookup> {
    let tenant = tenant_for(cfg, given_tenant, id).await?;
    match cfg.reviews.handoff(&tenant, id).await {
        Ok(p) => Ok(p),
        Err(ReviewError::NotFound { .. }) => Err(Lookup::NotFound),
        Err(ReviewError::Ledger(e)) => Err(Lookup::Failed(e)),
        Err(e) => Err(Lookup::Bad(e.to_string())),
    }
}

/// The page that says why the operation could not be found: 404, 400 or 503.
pub(super) fn lookup_failed(
    who: &ReviewerIdentity,
    base: &str,
    id: &OperationId,
    l: Lookup,
) -> Response {
    match l {
        Lookup::NotFound => message(
            StatusCode::NOT_FOUND,
            Some(who),
            base,
            "No such operation",
            vec![format!(
                "There is no operation {id} here. Check the id, or look it up in the queue."
            )],
            None,
        ),
        Lookup::Bad(why) => message(
            StatusCode::BAD_REQUEST,
            Some(who),
            base,
            "That address does not work",
            vec![why],
            None,
        ),
        Lookup::Failed(e) => ledger_failed(who, base, &e),
    }
}
