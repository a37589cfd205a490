//! `GET /`: the queue: the counts per state, the filters, one page of operations (quarantined
//! ones listed above the open queue) and the links to the next page.

use askama::Template;
use axum::extract::{Extension, OriginalUri, Query, State as AxState};
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::filters::{
    BadFilter, FilterView, QUARANTINED, StateOption, build_query, queue_href, state_href,
    state_options,
};
use super::views::{Chrome, engine_health, ledger_failed, message, op_href, scope_label};
use super::{ReviewUiOptions, ReviewerIdentity, Shared, mount_base, now_ms, quarantine, words};
use crate::ledger::{OperationQuery, OperationRecord, Page, StateCounts, TenantScope};

/// A state's count above the queue, linking to its queue.
struct CountLink {
    label: &'static str,
    badge: &'static str,
    count: u64,
    href: String,
}

/// One operation's row in the queue.
pub(super) struct RowView {
    pub(super) href: String,
    pub(super) id: String,
    pub(super) state: &'static str,
    pub(super) badge: &'static str,
    pub(super) action: String,
    pub(super) tenant: String,
    pub(super) target: String,
    pub(super) contract: String,
    pub(super) age: String,
    pub(super) changed: String,
    pub(super) attempts: String,
    pub(super) reason: String,
    /// A final state a vendor's later word contradicted, not yet acknowledged.
    pub(super) contradicted: bool,
}

#[derive(Template)]
#[template(path = "review/queue.html")]
struct QueuePage {
    chrome: Chrome,
    counts: Vec<CountLink>,
    filters: FilterView,
    state_options: Vec<StateOption>,
    all_tenants: bool,
    rows: Vec<RowView>,
    next: Option<String>,
    first_page: Option<String>,
    /// Quarantined operations, shown above the open queue.
    aside: Vec<RowView>,
    /// More are quarantined than shown above the queue.
    aside_more: bool,
    /// The queue of quarantined operations.
    aside_all: String,
    showing: String,
    /// Operations of this scope whose final state was contradicted: `Some((count, link))`
    /// when there are any (the count ends in `+` past one page).
    contradicted: Option<(String, String)>,
    /// When the page was read, and how it refreshes.
    live: super::live::Live,
    /// The activity charts' page.
    activity_href: String,
    /// The bulk reconciliation page (plan from a vendor export, then apply).
    bulk_href: String,
}

/// The host a request went to, from its URL.
pub(super) fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or_default().to_owned()
}

fn row_view(base: &str, cfg: &ReviewUiOptions, r: &OperationRecord, now: i64) -> RowView {
    let reason = r.reason.clone().unwrap_or_default();
    let reason = if reason.chars().count() > 90 {
        format!("{}…", crate::encoding::first_chars(&reason, 89))
    } else {
        reason
    };
    RowView {
        href: op_href(base, cfg, &r.tenant, &r.operation_id),
        id: r.operation_id.to_string(),
        state: words::state(r.state),
        badge: words::badge(r.state),
        action: words::action(&r.action),
        tenant: r.tenant.to_string(),
        target: host_of(&r.request.url),
        contract: r.contract.name.to_string(),
        age: words::age(now - r.created_ms),
        changed: format!("{} ago", words::age(now - r.updated_ms)),
        attempts: format!("{}/{}", r.attempts_used, r.policy.max_attempts),
        reason,
        contradicted: r.contradiction_ms.is_some(),
    }
}

pub(super) async fn queue(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let base = mount_base(original.path(), uri.path());
    let now = now_ms();
    let (query, filters, aside_query) = match build_query(&cfg, &params, now) {
        Ok(q) => q,
        Err(BadFilter(why)) => {
            return message(
                StatusCode::BAD_REQUEST,
                Some(&who),
                &base,
                "That filter does not work",
                vec![why],
                None,
            );
        }
    };
    let page = match cfg.ledger.list(&query).await {
        Ok(p) => p,
        Err(e) => return ledger_failed(&who, &base, &e),
    };
    let counts = match cfg.ledger.count_by_state(query.scope()).await {
        Ok(c) => c,
        Err(e) => return ledger_failed(&who, &base, &e),
    };
    let contradicted = match contradicted_link(&cfg, &base, query.scope(), &filters.tenant).await {
        Ok(c) => c,
        Err(e) => return ledger_failed(&who, &base, &e),
    };
    let rows = rows(&cfg, &base, &page, now);
    let aside = match quarantined_aside(&cfg, &base, aside_query.as_ref(), now).await {
        Ok(a) => a,
        Err(e) => return ledger_failed(&who, &base, &e),
    };
    let next = page
        .next
        .as_ref()
        .map(|c| queue_href(&base, &filters, Some(c.as_str())));
    let first_page = params
        .iter()
        .any(|(k, _)| k == "after")
        .then(|| queue_href(&base, &filters, None));
    let engine = engine_health(&*cfg.ledger, query.scope(), now).await;
    let view = QueuePage {
        chrome: Chrome::new(&base, "Review queue", Some(&who), &scope_label(&cfg.scope))
            .with_engine(engine.as_ref()),
        counts: count_links(&base, &counts, &filters.tenant),
        state_options: state_options(),
        all_tenants: cfg.scope == TenantScope::AllTenants,
        showing: showing(rows.len(), &filters.state),
        aside_all: state_href(&base, QUARANTINED, &filters.tenant),
        filters,
        rows,
        next,
        first_page,
        aside_more: (aside.len() as u64) < counts.quarantined(),
        aside,
        contradicted,
        live: super::live::Live::new(&cfg, now),
        activity_href: format!("{base}/activity"),
        bulk_href: format!("{base}/bulk"),
    };
    super::live::page(&cfg, StatusCode::OK, view.render())
}

/// Contradicted final states are not in any open state's count: say so above the queue, with
/// their count (one page of the partial index, whatever the history holds) and their queue.
async fn contradicted_link(
    cfg: &ReviewUiOptions,
    base: &str,
    scope: &TenantScope,
    tenant: &str,
) -> Result<Option<(String, String)>, crate::ledger::LedgerError> {
    let alarms = OperationQuery::scoped(scope.clone())
        .contradicted()
        .limit(cfg.page_size);
    let p = cfg.ledger.list(&alarms).await?;
    if p.rows.is_empty() {
        return Ok(None);
    }
    Ok(Some((
        format!(
            "{}{}",
            p.rows.len(),
            if p.next.is_some() { "+" } else { "" }
        ),
        state_href(base, "contradicted", tenant),
    )))
}

/// The count of each open state, then of the quarantined rows: never hidden, a quarantined row
/// is a write whose outcome nobody is verifying.
fn count_links(base: &str, counts: &StateCounts, tenant: &str) -> Vec<CountLink> {
    let mut links: Vec<CountLink> = counts
        .iter()
        .map(|(s, n)| CountLink {
            label: words::state(s),
            badge: words::badge(s),
            count: n,
            href: state_href(base, s.as_str(), tenant),
        })
        .collect();
    links.push(CountLink {
        label: quarantine::LABEL,
        badge: quarantine::BADGE,
        count: counts.quarantined(),
        href: state_href(base, QUARANTINED, tenant),
    });
    links
}

/// The page's rows. Rows reported by their raw columns (quarantined, or gone bad since their
/// last claim) are listed too, with what is wrong.
fn rows(cfg: &ReviewUiOptions, base: &str, page: &Page, now: i64) -> Vec<RowView> {
    page.rows
        .iter()
        .map(|r| row_view(base, cfg, r, now))
        .chain(
            page.skipped
                .iter()
                .map(|r| quarantine::row_view(base, cfg, r, now)),
        )
        .collect()
}

/// The quarantined rows shown above the first page of the open queue (`query`), if any.
async fn quarantined_aside(
    cfg: &ReviewUiOptions,
    base: &str,
    query: Option<&OperationQuery>,
    now: i64,
) -> Result<Vec<RowView>, crate::ledger::LedgerError> {
    let Some(q) = query else {
        return Ok(Vec::new());
    };
    let p = cfg.ledger.list(q).await?;
    Ok(p.skipped
        .iter()
        .map(|r| quarantine::row_view(base, cfg, r, now))
        .collect())
}

/// The line under the filters: how many operations are shown.
fn showing(n: usize, state: &str) -> String {
    match (n, state) {
        (0, QUARANTINED) => "No quarantined operation matches these filters.".to_owned(),
        (n, QUARANTINED) => format!("{n} quarantined operation{} shown.", plural(n)),
        (0, _) => "No operation matches these filters.".to_owned(),
        (n, "open") => format!(
            "{n} open operation{} shown, oldest first by default.",
            plural(n)
        ),
        (n, _) => format!("{n} operation{} shown.", plural(n)),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
