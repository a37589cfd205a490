//! The embeddable review page (feature `review-ui`): an axum [`Router`] that an application
//! mounts behind its own authentication, so a person can find stuck operations, understand them
//! and claim and resolve them from a browser.
//!
//! - `GET /`: the queue, with filters (`state`, `contract`, `host`, `q` for an operation id or
//!   remote reference prefix, `older_than` such as `10m`, `order`, and `tenant` when the router
//!   serves every tenant), ages, and keyset pagination (`after`).
//! - `GET /op/{id}`: one operation: what a person needs to decide in plain language, late
//!   evidence that arrived after a claim, the redacted [`HandoffPackage`] (parameters, attempts,
//!   evidence timeline, budget, authorization) and the forms.
//! - Quarantined operations (rows this version cannot decode, skipped by recovery) are counted
//!   in the header, listed above the open queue (alone with `state=quarantined`) with the decode
//!   error, and open as a raw, redacted view of the columns this version can read: never a 503.
//!   `POST /op/{id}/release` (a required `reason`, the version and CSRF token like the other
//!   forms) gives one back to recovery once this version reads it; 409 while it cannot.
//! - `POST /op/{id}/claim` and `POST /op/{id}/resolve` (`decision` = `succeeded` with an
//!   optional `remote_ref`, `not_executed` with `reapprove`, or `keep_pending`), each with a
//!   required `reason`. Every form carries the version it was shown at (a compare-and-swap: a
//!   stale version answers 409 with the current state, and a form sent twice says "already
//!   done") and a CSRF token bound to the person, the operation and that version. A success
//!   answers `303 See Other` back to the operation's page.
//!
//! The application authenticates. Its middleware inserts a [`ReviewerIdentity`] into the
//! request's extensions; without one every route answers 401. A read-only identity sees
//! everything, is shown no forms, and its POSTs are refused with 403.
//!
//! The page is server-rendered HTML ([askama](https://docs.rs/askama) templates compiled into
//! the crate, a small embedded style sheet, no JavaScript), and shows nothing beyond the
//! redacted handoff package: no credential, and no body value but the answer of a lookup that
//! resolved the operation, with the contract's secret answer fields `[redacted]` (see
//! [`HandoffPackage`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use axum::{Router, extract::Request, middleware::{self, Next}, response::Response};
//! use recoverable_write::review_ui::{self, ReviewUiConfig, ReviewerIdentity};
//! use recoverable_write::{Ledger, Tenant};
//!
//! async fn auth(mut req: Request, next: Next) -> Response {
//!     // Your own authentication decides who this is and whether they may resolve.
//!     req.extensions_mut().insert(ReviewerIdentity::resolver("alice"));
//!     next.run(req).await
//! }
//!
//! # fn app(ledger: Arc<dyn Ledger>) -> Router {
//! let review = review_ui::router(ReviewUiConfig::for_tenant(ledger, Tenant::new("acme")));
//! Router::new()
//!     .nest("/ops", review)
//!     .layer(middleware::from_fn(auth))
//! # }
//! ```

mod csrf;
mod quarantine;
mod words;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use askama::Template;
use axum::Form;
use axum::Router;
use axum::extract::{Extension, OriginalUri, Path, Query, Request, State as AxState};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::encoding::encode_component;
use crate::ledger::{
    Cursor, Ledger, OPEN_STATES, OperationQuery, OperationRecord, Order, TenantScope, TextMatch,
};
use crate::operation::{OperationId, Tenant};
use crate::review::{HandoffPackage, ReviewError, Reviews};
use crate::secret::Secret;
use crate::state::{ReviewDecision, State};

/// Who is using the page, as the application's authentication established it. Insert it into
/// the request's extensions (e.g. in your auth middleware) before the review router runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewerIdentity {
    /// The person's name, recorded in the audit trail of every action they take.
    pub name: String,
    /// Whether they may claim and resolve (otherwise: read-only).
    pub may_resolve: bool,
}

impl ReviewerIdentity {
    /// A person who may claim and resolve.
    pub fn resolver(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            may_resolve: true,
        }
    }

    /// A person who may only look.
    pub fn read_only(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            may_resolve: false,
        }
    }
}

/// How the review router is set up: the ledger, whose operations it serves (one tenant, or all
/// of them as an explicit operator capability), the reviews API and the CSRF key.
#[derive(Clone)]
pub struct ReviewUiConfig {
    ledger: Arc<dyn Ledger>,
    reviews: Reviews,
    scope: TenantScope,
    csrf_key: Secret,
    page_size: u32,
    retention: Option<crate::retention::Purger>,
}

impl fmt::Debug for ReviewUiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReviewUiConfig")
            .field("scope", &self.scope)
            .field("page_size", &self.page_size)
            .field("csrf_key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl ReviewUiConfig {
    /// The page for one tenant's operations.
    pub fn for_tenant(ledger: Arc<dyn Ledger>, tenant: Tenant) -> Self {
        Self::scoped(ledger, TenantScope::Tenant(tenant))
    }

    /// The page for every tenant's operations: the operator capability. Mount it only for
    /// people who may see every tenant.
    pub fn all_tenants(ledger: Arc<dyn Ledger>) -> Self {
        Self::scoped(ledger, TenantScope::AllTenants)
    }

    /// The page over `scope`. The CSRF key is 32 random bytes (see [`csrf_key`](Self::csrf_key)).
    pub fn scoped(ledger: Arc<dyn Ledger>, scope: TenantScope) -> Self {
        Self {
            reviews: Reviews::new(ledger.clone()),
            ledger,
            scope,
            csrf_key: Secret::random(),
            page_size: 50,
            retention: None,
        }
    }

    /// Shows each operation's retention dates (when its details and its row go), from the
    /// application's retention settings: pass [`Handle::purger`](crate::Handle::purger).
    pub fn retention(mut self, purger: crate::retention::Purger) -> Self {
        self.retention = Some(purger);
        self
    }

    /// Acts through these reviews (e.g. [`Handle::reviews`](crate::Handle::reviews),
    /// to share the layer's authorizer and notifier). They must be over the same ledger.
    pub fn reviews(mut self, reviews: Reviews) -> Self {
        self.reviews = reviews;
        self
    }

    /// The key CSRF tokens are made with. Give every replica behind one load balancer the same
    /// key (32 random bytes, kept secret); by default each router makes its own.
    ///
    /// A [`Secret`] is at least [`Secret::MIN_LEN`] bytes, so the page cannot be built with an
    /// empty key (anyone could compute its tokens): read it so that a missing variable stops
    /// the start.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use recoverable_write::review_ui::ReviewUiConfig;
    /// # use recoverable_write::{Ledger, Secret, Tenant};
    /// # fn demo(ledger: Arc<dyn Ledger>) -> Result<(), Box<dyn std::error::Error>> {
    /// let config = ReviewUiConfig::for_tenant(ledger, Tenant::new("acme"))
    ///     .csrf_key(Secret::new(std::env::var("REVIEW_CSRF_KEY")?)?);
    /// # let _ = config;
    /// # Ok(()) }
    /// ```
    pub fn csrf_key(mut self, key: Secret) -> Self {
        self.csrf_key = key;
        self
    }

    /// Operations per queue page (default 50, at most 1000).
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = n.clamp(1, crate::ledger::MAX_LIMIT);
        self
    }
}

type Shared = Arc<ReviewUiConfig>;

/// The review page's router. Mount it behind your authentication, which inserts a
/// [`ReviewerIdentity`] per request: `Router::new().nest("/ops", router(config))`.
pub fn router(config: ReviewUiConfig) -> Router {
    Router::new()
        .route("/", get(queue))
        .route("/op/{id}", get(operation))
        .route("/op/{id}/claim", post(claim))
        .route("/op/{id}/resolve", post(resolve))
        .route("/op/{id}/release", post(quarantine::release))
        .layer(middleware::from_fn(gate))
        .with_state(Arc::new(config))
}

/// 401 without an identity, 403 for a read-only identity's POST; then the route.
async fn gate(req: Request, next: Next) -> Response {
    let base = base_of(&req);
    let Some(who) = req.extensions().get::<ReviewerIdentity>().cloned() else {
        return message(
            StatusCode::UNAUTHORIZED,
            None,
            &base,
            "Sign in required",
            vec!["The application did not say who you are. Sign in and try again.".into()],
            None,
        );
    };
    if req.method() == Method::POST && !who.may_resolve {
        return message(
            StatusCode::FORBIDDEN,
            Some(&who),
            &base,
            "Read-only access",
            vec![format!(
                "{} may look at operations but not claim or resolve them. Ask someone who may \
                 resolve.",
                who.name
            )],
            None,
        );
    }
    next.run(req).await
}

/// The path the router is mounted at (`/ops`), from the original and the nested URI.
fn base_of(req: &Request) -> String {
    let inner = req.uri().path();
    let original = req
        .extensions()
        .get::<OriginalUri>()
        .map_or(inner, |o| o.0.path());
    mount_base(original, inner)
}

fn mount_base(original: &str, inner: &str) -> String {
    let base = original
        .strip_suffix(inner)
        .unwrap_or_else(|| if inner == "/" { original } else { "" });
    base.trim_end_matches('/').to_owned()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

// ---------------------------------------------------------------------------------------------
// Rendering

/// What every page shows around its content.
struct Chrome {
    queue: String,
    title: String,
    who: String,
    role: &'static str,
    scope: String,
}

impl Chrome {
    fn new(
        base: &str,
        title: impl Into<String>,
        who: Option<&ReviewerIdentity>,
        scope: &str,
    ) -> Self {
        Self {
            queue: queue_root(base),
            title: title.into(),
            who: who.map_or_else(String::new, |w| w.name.clone()),
            role: match who {
                Some(w) if w.may_resolve => "may resolve",
                Some(_) => "read-only",
                None => "",
            },
            scope: scope.to_owned(),
        }
    }
}

fn scope_label(scope: &TenantScope) -> String {
    match scope {
        TenantScope::Tenant(t) => format!("tenant {t}"),
        TenantScope::AllTenants => "all tenants".to_owned(),
    }
}

fn html(status: StatusCode, body: Result<String, askama::Error>) -> Response {
    let (status, body) = match body {
        Ok(b) => (status, b),
        Err(e) => {
            tracing::error!(error = %e, "review page: template failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "<!doctype html><title>Error</title><p>The page could not be rendered.</p>".into(),
            )
        }
    };
    let mut res = (status, body).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // No script, no framing, forms only to this origin; nothing cached.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    res
}

/// A link shown under a message.
struct Link {
    href: String,
    label: String,
}

#[derive(Template)]
#[template(path = "review/message.html")]
struct MessagePage {
    chrome: Chrome,
    status: u16,
    heading: String,
    lines: Vec<String>,
    current: Option<CurrentView>,
    links: Vec<Link>,
}

/// The state an operation is in now (on a 409 page).
struct CurrentView {
    state: String,
    badge: &'static str,
    version: u64,
    headline: String,
    facts: Vec<String>,
}

fn message(
    status: StatusCode,
    who: Option<&ReviewerIdentity>,
    base: &str,
    heading: &str,
    lines: Vec<String>,
    current: Option<(CurrentView, String)>,
) -> Response {
    let mut links = Vec::new();
    let current = current.map(|(c, href)| {
        links.push(Link {
            href,
            label: "Open the operation as it is now".into(),
        });
        c
    });
    if who.is_some() {
        links.push(Link {
            href: queue_root(base),
            label: "Back to the queue".into(),
        });
    }
    let page = MessagePage {
        chrome: Chrome::new(base, heading, who, ""),
        status: status.as_u16(),
        heading: heading.to_owned(),
        lines,
        current,
        links,
    };
    html(status, page.render())
}

// ---------------------------------------------------------------------------------------------
// The queue

struct CountLink {
    label: &'static str,
    badge: &'static str,
    count: u64,
    href: String,
}

struct RowView {
    href: String,
    id: String,
    state: &'static str,
    badge: &'static str,
    action: String,
    tenant: String,
    target: String,
    contract: String,
    age: String,
    changed: String,
    attempts: String,
    reason: String,
    /// A final state a vendor's later word contradicted, not yet acknowledged.
    contradicted: bool,
}

struct FilterView {
    state: String,
    contract: String,
    host: String,
    q: String,
    older_than: String,
    order: String,
    tenant: String,
}

struct StateOption {
    value: &'static str,
    label: &'static str,
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
}

/// A filter the page cannot use: 400 with what was wrong.
struct BadFilter(String);

/// `90s`, `10m`, `2h`, `1d` (a bare number is minutes).
fn parse_age(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let secs = match unit.trim() {
        "s" | "sec" | "secs" => n,
        "" | "m" | "min" | "mins" => n.checked_mul(60)?,
        "h" | "hour" | "hours" => n.checked_mul(3600)?,
        "d" | "day" | "days" => n.checked_mul(86_400)?,
        _ => return None,
    };
    Some(Duration::from_secs(secs))
}

fn parse_state(s: &str) -> Option<State> {
    let norm = s.trim().to_ascii_uppercase().replace(['-', ' '], "_");
    norm.parse().ok()
}

/// The queue's query, from the URL's parameters: the listing, its filters, and (for the first
/// page of the open queue) the query of the quarantined rows shown above it.
fn build_query(
    cfg: &ReviewUiConfig,
    params: &[(String, String)],
    now: i64,
) -> Result<(OperationQuery, FilterView, Option<OperationQuery>), BadFilter> {
    let mut f = FilterView {
        state: "open".into(),
        contract: String::new(),
        host: String::new(),
        q: String::new(),
        older_than: String::new(),
        order: "oldest".into(),
        tenant: String::new(),
    };
    let (mut all, mut open, mut aside, mut states) = (false, false, false, Vec::<State>::new());
    let mut contradicted = false;
    let mut after = None;
    for (k, v) in params {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        if v.contains('\0') {
            return Err(BadFilter(format!(
                "the filter {k} contains a NUL character"
            )));
        }
        match k.as_str() {
            "state" => match v {
                "open" => open = true,
                "all" => all = true,
                "contradicted" => contradicted = true,
                QUARANTINED => aside = true,
                _ => states
                    .push(parse_state(v).ok_or_else(|| BadFilter(format!("unknown state {v:?}")))?),
            },
            "contract" => f.contract = v.to_owned(),
            "host" => f.host = v.to_ascii_lowercase(),
            "q" => f.q = v.to_owned(),
            "older_than" => {
                parse_age(v).ok_or_else(|| {
                    BadFilter(format!(
                        "older_than {v:?} is not an age (write 90s, 10m, 2h or 1d)"
                    ))
                })?;
                f.older_than = v.to_owned();
            }
            "order" => match v {
                "oldest" | "newest" => f.order = v.to_owned(),
                _ => {
                    return Err(BadFilter(format!(
                        "order {v:?} is neither oldest nor newest"
                    )));
                }
            },
            "tenant" => f.tenant = v.to_owned(),
            "after" => {
                after = Some(
                    Cursor::parse(v)
                        .map_err(|_| BadFilter("the page link is not valid any more".into()))?,
                );
            }
            other => return Err(BadFilter(format!("unknown filter {other:?}"))),
        }
    }
    let scope = match (&cfg.scope, f.tenant.as_str()) {
        (TenantScope::AllTenants, "") => TenantScope::AllTenants,
        (TenantScope::AllTenants, t) => TenantScope::Tenant(Tenant::new(t)),
        (TenantScope::Tenant(t), "") => TenantScope::Tenant(t.clone()),
        (TenantScope::Tenant(t), other) if other == t.as_str() => TenantScope::Tenant(t.clone()),
        (TenantScope::Tenant(t), other) => {
            return Err(BadFilter(format!(
                "this page shows tenant {t} only, not {other:?}"
            )));
        }
    };
    if aside && (all || open || contradicted || !states.is_empty()) {
        return Err(BadFilter(
            "quarantined operations are listed on their own: their stored state may be one \
             this version does not know"
                .into(),
        ));
    }
    let mut q = OperationQuery::scoped(scope).limit(cfg.page_size);
    if !f.contract.is_empty() {
        q = q.contract(f.contract.clone());
    }
    if !f.host.is_empty() {
        q = q.host(f.host.clone());
    }
    if !f.q.is_empty() {
        q = q.text(TextMatch::Prefix(f.q.clone()));
    }
    if let Some(d) = (!f.older_than.is_empty())
        .then(|| parse_age(&f.older_than))
        .flatten()
    {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        q = q.created_before(now.saturating_sub(ms));
    }
    q = q.order(if f.order == "newest" {
        Order::NewestFirst
    } else {
        Order::OldestFirst
    });
    // The filters but the states: the quarantined rows shown above the open queue match them.
    let base = q.clone();
    if aside {
        f.state = QUARANTINED.into();
        q = q.quarantined_only();
    } else if contradicted {
        // Final states, mostly: every state, narrowed to the contradicted rows.
        f.state = "contradicted".into();
        q = q.contradicted();
    } else if all {
        f.state = "all".into();
    } else if states.is_empty() {
        q = q.states(OPEN_STATES);
    } else {
        f.state = states[0].as_str().to_owned();
        if open {
            states.extend(OPEN_STATES);
        }
        q = q.states(states);
    }
    // The open queue includes the rows set aside: they need a person too.
    let aside_query = (f.state == "open" && after.is_none()).then(|| base.quarantined_only());
    if let Some(c) = after {
        q = q.after(c);
    }
    Ok((q, f, aside_query))
}

/// The `state` filter value of the quarantined rows.
const QUARANTINED: &str = "quarantined";

/// The queue's address: the mount path itself (axum's `nest("/ops", ..)` serves `/ops`, not
/// `/ops/`), or `/` when the router is not nested.
fn queue_root(base: &str) -> String {
    if base.is_empty() {
        "/".to_owned()
    } else {
        base.to_owned()
    }
}

/// The queue URL for these filters (and a cursor).
fn queue_href(base: &str, f: &FilterView, after: Option<&str>) -> String {
    let mut parts = Vec::new();
    let mut push = |k: &str, v: &str| {
        if !v.is_empty() {
            parts.push(format!("{k}={}", encode_component(v)));
        }
    };
    if f.state != "open" {
        push("state", &f.state);
    }
    push("contract", &f.contract);
    push("host", &f.host);
    push("q", &f.q);
    push("older_than", &f.older_than);
    if f.order != "oldest" {
        push("order", &f.order);
    }
    push("tenant", &f.tenant);
    if let Some(a) = after {
        push("after", a);
    }
    if parts.is_empty() {
        queue_root(base)
    } else {
        format!("{}?{}", queue_root(base), parts.join("&"))
    }
}

fn op_href(base: &str, cfg: &ReviewUiConfig, tenant: &Tenant, id: &OperationId) -> String {
    let mut href = format!("{base}/op/{}", encode_component(id.as_str()));
    if cfg.scope == TenantScope::AllTenants {
        href.push_str("?tenant=");
        href.push_str(&encode_component(tenant.as_str()));
    }
    href
}

fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or_default().to_owned()
}

fn row_view(base: &str, cfg: &ReviewUiConfig, r: &OperationRecord, now: i64) -> RowView {
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

async fn queue(
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
    // Contradicted final states are not in any open state's count: say so above the queue.
    // One page of the partial index, whatever the history holds.
    let alarms = OperationQuery::scoped(query.scope().clone())
        .contradicted()
        .limit(cfg.page_size);
    let contradicted = match cfg.ledger.list(&alarms).await {
        Ok(p) if p.rows.is_empty() => None,
        Ok(p) => Some((
            format!(
                "{}{}",
                p.rows.len(),
                if p.next.is_some() { "+" } else { "" }
            ),
            queue_href(
                &base,
                &FilterView {
                    state: "contradicted".into(),
                    contract: String::new(),
                    host: String::new(),
                    q: String::new(),
                    older_than: String::new(),
                    order: "oldest".into(),
                    tenant: filters.tenant.clone(),
                },
                None,
            ),
        )),
        Err(e) => return ledger_failed(&who, &base, &e),
    };
    let count_href = |state: &str| {
        queue_href(
            &base,
            &FilterView {
                state: state.to_owned(),
                contract: String::new(),
                host: String::new(),
                q: String::new(),
                older_than: String::new(),
                order: "oldest".into(),
                tenant: filters.tenant.clone(),
            },
            None,
        )
    };
    let mut count_links: Vec<CountLink> = counts
        .iter()
        .map(|(s, n)| CountLink {
            label: words::state(s),
            badge: words::badge(s),
            count: n,
            href: count_href(s.as_str()),
        })
        .collect();
    // Never hidden: a quarantined row is a write whose outcome nobody is verifying.
    count_links.push(CountLink {
        label: quarantine::LABEL,
        badge: quarantine::BADGE,
        count: counts.quarantined(),
        href: count_href(QUARANTINED),
    });
    let counts_quarantined = counts.quarantined();
    let counts = count_links;
    // Rows reported by their raw columns (quarantined, or gone bad since their last claim)
    // are listed too, with what is wrong.
    let rows: Vec<RowView> = page
        .rows
        .iter()
        .map(|r| row_view(&base, &cfg, r, now))
        .chain(
            page.skipped
                .iter()
                .map(|r| quarantine::row_view(&base, &cfg, r, now)),
        )
        .collect();
    let aside = match aside_query {
        Some(q) => match cfg.ledger.list(&q).await {
            Ok(p) => p
                .skipped
                .iter()
                .map(|r| quarantine::row_view(&base, &cfg, r, now))
                .collect(),
            Err(e) => return ledger_failed(&who, &base, &e),
        },
        None => Vec::new(),
    };
    let aside_all = count_href(QUARANTINED);
    let next = page
        .next
        .as_ref()
        .map(|c| queue_href(&base, &filters, Some(c.as_str())));
    let first_page = params
        .iter()
        .any(|(k, _)| k == "after")
        .then(|| queue_href(&base, &filters, None));
    let showing = match (rows.len(), filters.state.as_str()) {
        (0, QUARANTINED) => "No quarantined operation matches these filters.".to_owned(),
        (n, QUARANTINED) => format!("{n} quarantined operation{} shown.", plural(n)),
        (0, _) => "No operation matches these filters.".to_owned(),
        (n, "open") => format!(
            "{n} open operation{} shown, oldest first by default.",
            plural(n)
        ),
        (n, _) => format!("{n} operation{} shown.", plural(n)),
    };
    let chrome = Chrome::new(&base, "Review queue", Some(&who), &scope_label(&cfg.scope));
    let view = QueuePage {
        chrome,
        counts,
        state_options: state_options(),
        all_tenants: cfg.scope == TenantScope::AllTenants,
        filters,
        rows,
        next,
        first_page,
        aside_more: (aside.len() as u64) < counts_quarantined,
        aside,
        aside_all,
        showing,
        contradicted,
    };
    html(StatusCode::OK, view.render())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn state_options() -> Vec<StateOption> {
    let mut v = vec![
        StateOption {
            value: "open",
            label: "Every open state",
        },
        StateOption {
            value: "contradicted",
            label: "Contradicted final states",
        },
    ];
    for s in [
        State::ManualReview,
        State::Unknown,
        State::Processing,
        State::Prepared,
        State::InFlight,
        State::RetryReady,
        State::Succeeded,
        State::Rejected,
    ] {
        v.push(StateOption {
            value: s.as_str(),
            label: words::state(s),
        });
    }
    v.push(StateOption {
        value: QUARANTINED,
        label: "Quarantined (cannot be read)",
    });
    v.push(StateOption {
        value: "all",
        label: "Every state",
    });
    v
}

fn ledger_failed(who: &ReviewerIdentity, base: &str, e: &dyn std::error::Error) -> Response {
    tracing::error!(error = %e, "review page: the ledger failed");
    message(
        StatusCode::SERVICE_UNAVAILABLE,
        Some(who),
        base,
        "The ledger is not answering",
        vec!["Nothing was changed. Try again in a moment.".into()],
        None,
    )
}

// ---------------------------------------------------------------------------------------------
// One operation

struct AttemptView {
    id: String,
    generation: u64,
    at: String,
    result: String,
}

struct EventView {
    seq: i64,
    at: String,
    ago: String,
    kind: String,
    transition: String,
    attempt: String,
    generation: u64,
    evidence: String,
    note: String,
    class: &'static str,
}

struct LateView {
    at: String,
    what: String,
}

struct FormView {
    claim_action: String,
    resolve_action: String,
    tenant: String,
    version: u64,
    csrf: String,
    can_claim: bool,
    can_resolve: bool,
    claimed_by_me: bool,
    /// Another reviewer holds it: claiming means taking it over (audited, names both).
    claimed_by: String,
    /// A conclusive success recorded after the escalation: offered as the resolution.
    suggest_success: bool,
    suggested_ref: String,
}

#[derive(Template)]
#[template(path = "review/operation.html")]
struct OperationPage {
    chrome: Chrome,
    back: String,
    id: String,
    state: &'static str,
    badge: &'static str,
    done: String,
    headline: String,
    facts: Vec<String>,
    advice: Vec<String>,
    late: Vec<LateView>,
    late_heading: String,
    /// The late evidence holds a conclusive success, offered below as the resolution.
    late_success: bool,
    /// The contradictions of the final state, while unacknowledged.
    contradictions: Vec<LateView>,
    form: Option<FormView>,
    read_only_note: bool,
    terminal: bool,
    fields: Vec<(String, String)>,
    request: Vec<(String, String)>,
    budget: Vec<(String, String)>,
    authorization: Vec<(String, String)>,
    attempts: Vec<AttemptView>,
    timeline: Vec<EventView>,
    /// Set when the row is quarantined although this version reads it: only a release gives it
    /// back to recovery.
    quarantine: Option<quarantine::Banner>,
}

/// Why an operation could not be found or addressed.
enum Lookup {
    NotFound,
    Bad(String),
    Failed(crate::ledger::LedgerError),
}

/// The tenant an operation is looked up in: the router's, or (for every tenant) the one the
/// URL names or the only one that has this id.
async fn tenant_for(
    cfg: &ReviewUiConfig,
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

async fn load(
    cfg: &ReviewUiConfig,
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

fn lookup_failed(who: &ReviewerIdentity, base: &str, id: &OperationId, l: Lookup) -> Response {
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

fn pairs(v: &[(&str, String)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

async fn operation(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let base = mount_base(original.path(), uri.path());
    let id = OperationId::new(id);
    let tenant = match tenant_for(&cfg, params.get("tenant").map(String::as_str), &id).await {
        Ok(t) => t,
        Err(l) => return lookup_failed(&who, &base, &id, l),
    };
    let done = match params.get("done").map(String::as_str) {
        Some("claim") => "Claimed. Automatic sends are stopped; you hold this operation now.",
        Some("resolve") => "Resolved. Your decision and reason are in the timeline below.",
        Some("keep_pending") => "Kept pending. Your note is in the timeline below.",
        Some("release") => {
            "Released from quarantine. The recovery engine picks it up at its next pass; the \
             release is in the timeline below."
        }
        _ => "",
    };
    // A row this version cannot decode is shown by the columns it can read, never as a 503.
    let aside = match cfg.reviews.quarantine_package(&tenant, &id).await {
        Ok(a) => a,
        Err(ReviewError::Ledger(e)) => return ledger_failed(&who, &base, &e),
        Err(e) => return lookup_failed(&who, &base, &id, Lookup::Bad(e.to_string())),
    };
    if let Some(q) = aside.as_ref().filter(|q| !q.readable) {
        return quarantine::page(&cfg, &who, &base, q, now_ms(), done);
    }
    let p = match load(&cfg, Some(tenant.as_str()), &id).await {
        Ok(p) => p,
        Err(l) => return lookup_failed(&who, &base, &id, l),
    };
    let mut view = operation_view(&cfg, &who, &base, &p, now_ms(), done);
    view.quarantine = aside
        .as_ref()
        .map(|q| quarantine::banner(&cfg, &who, &base, q, now_ms()));
    if let Some(purger) = &cfg.retention {
        let line = match cfg.ledger.get(&p.tenant, &p.operation_id).await {
            Ok(record) => record.and_then(|r| purger.dates(&r)).map_or_else(
                || crate::retention::RetentionDates::UNFINISHED.to_owned(),
                |d| d.describe(),
            ),
            Err(_) => "unknown (the ledger did not answer)".to_owned(),
        };
        view.fields.push(("Retention".to_owned(), line));
    }
    html(StatusCode::OK, view.render())
}

fn operation_view(
    cfg: &ReviewUiConfig,
    who: &ReviewerIdentity,
    base: &str,
    p: &HandoffPackage,
    now: i64,
    done: &str,
) -> OperationPage {
    let s = words::summary(p, now);
    let op_path = format!("{base}/op/{}", encode_component(p.operation_id.as_str()));
    let claim = words::last_claim(p);
    let terminal = p.state.is_terminal();
    // A success the vendor reported after the escalation (a verified callback, a late
    // response or lookup answer): shown first, and offered as the resolution.
    let late_success = crate::review::late_success(&p.evidence);
    let late_ref = late_success.and_then(|e| match &e.evidence {
        Some(crate::evidence::Evidence::Succeeded { remote_ref }) => remote_ref.clone(),
        _ => None,
    });
    let form = (who.may_resolve && !terminal).then(|| FormView {
        claim_action: format!("{op_path}/claim"),
        resolve_action: format!("{op_path}/resolve"),
        tenant: p.tenant.to_string(),
        version: p.version,
        csrf: csrf::token(
            cfg.csrf_key.bytes(),
            &who.name,
            p.tenant.as_str(),
            p.operation_id.as_str(),
            p.version,
        ),
        can_claim: true,
        can_resolve: p.state == State::ManualReview,
        claimed_by_me: claim.as_ref().is_some_and(|(w, _, _)| *w == who.name),
        claimed_by: claim
            .as_ref()
            .filter(|(w, _, _)| *w != who.name)
            .map(|(w, _, _)| w.clone())
            .unwrap_or_default(),
        suggest_success: p.state == State::ManualReview && late_success.is_some(),
        suggested_ref: late_ref.clone().unwrap_or_default(),
    });
    let late = words::late_evidence(p)
        .into_iter()
        .map(|e| LateView {
            at: format!(
                "{} ({} ago)",
                words::clock(e.at_ms),
                words::age(now - e.at_ms)
            ),
            what: match (&e.evidence, &e.note) {
                (Some(ev), _) => words::evidence(ev),
                (None, Some(n)) => n.clone(),
                (None, None) => words::kind(&e.kind),
            },
        })
        .collect();
    let ts = |ms: i64| format!("{} ({} ago)", words::utc(ms), words::age(now - ms));
    let created = p.evidence.first().map(|e| e.at_ms);
    let changed = p.evidence.last().map(|e| e.at_ms);
    let mut fields = vec![
        ("Tenant", p.tenant.to_string()),
        ("Action", p.action.clone()),
        ("Intent", p.intent_ref.clone()),
        ("State", words::state(p.state).to_owned()),
    ];
    if let Some(r) = p.last_result {
        fields.push(("Last result", words::state(r).to_owned()));
    }
    fields.push((
        "Vendor reference",
        match (&p.remote_ref, &late_ref) {
            (Some(r), _) => r.clone(),
            (None, Some(r)) => format!("{r} (reported after the escalation; not confirmed yet)"),
            (None, None) => "none yet".into(),
        },
    ));
    if let Some(c) = created {
        fields.push(("Created", ts(c)));
    }
    if let Some(c) = changed {
        fields.push(("Last event", ts(c)));
    }
    fields.push((
        "Version / generation",
        format!("{} / {}", p.version, p.generation),
    ));
    let pr = &p.parameters;
    let request = vec![
        ("Request", format!("{} {}", pr.method, pr.url)),
        ("Contract", pr.contract.clone()),
        (
            "Headers stored",
            if pr.header_names.is_empty() {
                "none".into()
            } else {
                pr.header_names.join(", ")
            },
        ),
        (
            "Body",
            if pr.body_fields.is_empty() {
                format!("{} bytes", pr.body_bytes)
            } else {
                format!(
                    "{} bytes; fields {} (values hidden)",
                    pr.body_bytes,
                    pr.body_fields.join(", ")
                )
            },
        ),
        ("Payload hash", pr.payload_hash.clone()),
    ];
    let b = &p.budget;
    let mut budget = vec![
        (
            "Attempts",
            format!("{} of {} used", b.attempts_used, b.max_attempts),
        ),
        (
            "Lookups",
            format!("{} of {} used", b.queries_used, b.max_queries),
        ),
    ];
    if let Some(d) = b.deadline_ms {
        let when = if d >= now {
            format!("{} (in {})", words::utc(d), words::age(d - now))
        } else {
            format!("{} ({} ago)", words::utc(d), words::age(now - d))
        };
        budget.push(("Recovery window ends", when));
    }
    let allowed = |d: &Option<String>| match d {
        None => "allowed".to_owned(),
        Some(r) => format!("denied: {r}"),
    };
    let authorization = vec![
        ("Writes", allowed(&p.authorization.write_denied)),
        ("Lookups", allowed(&p.authorization.query_denied)),
    ];
    let attempts = p
        .attempts
        .iter()
        .map(|a| AttemptView {
            id: a.attempt_id.clone(),
            generation: a.generation,
            at: ts(a.registered_ms),
            result: a
                .result
                .as_ref()
                .map_or_else(|| "no answer recorded".into(), words::evidence),
        })
        .collect();
    let late_seqs: Vec<i64> = words::late_evidence(p).iter().map(|e| e.seq).collect();
    let timeline = timeline(&p.evidence, &late_seqs, now);
    let chrome = Chrome::new(
        base,
        format!("Operation {}", p.operation_id),
        Some(who),
        &scope_label(&cfg.scope),
    );
    OperationPage {
        chrome,
        back: queue_root(base),
        id: p.operation_id.to_string(),
        state: words::state(p.state),
        badge: words::badge(p.state),
        done: done.to_owned(),
        headline: s.headline,
        facts: s.facts,
        advice: s.advice,
        late,
        late_heading: match (&claim, p.state) {
            (Some((w, _, _)), _) => format!("Late evidence after {w} claimed it"),
            (None, State::ManualReview) => "Late evidence after it went to review".to_owned(),
            _ => "Evidence recorded after the last decision".to_owned(),
        },
        late_success: late_success.is_some() && p.state == State::ManualReview,
        contradictions: if p.contradiction_ms.is_some() {
            p.evidence
                .iter()
                .filter(|e| e.kind == crate::contradiction::CONTRADICTION)
                .map(|e| LateView {
                    at: format!(
                        "{} ({} ago)",
                        words::clock(e.at_ms),
                        words::age(now - e.at_ms)
                    ),
                    what: e.note.clone().unwrap_or_else(|| words::kind(&e.kind)),
                })
                .collect()
        } else {
            Vec::new()
        },
        read_only_note: !who.may_resolve && !terminal,
        terminal,
        form,
        fields: pairs(&fields),
        request: pairs(&request),
        budget: pairs(&budget),
        authorization: pairs(&authorization),
        attempts,
        timeline,
        quarantine: None,
    }
}

/// The evidence timeline (`late_seqs`: the entries shown as late evidence).
fn timeline(
    evidence: &[crate::review::EvidenceSummary],
    late_seqs: &[i64],
    now: i64,
) -> Vec<EventView> {
    evidence
        .iter()
        .map(|e| EventView {
            seq: e.seq,
            at: words::clock(e.at_ms),
            ago: words::age(now - e.at_ms),
            kind: words::kind(&e.kind),
            transition: match e.transition {
                // No change of state: just the state it stayed in.
                Some((Some(from), Some(to))) if from == to => words::state(to).to_owned(),
                Some((from, to)) => format!(
                    "{} → {}",
                    from.map_or("—", words::state),
                    to.map_or("—", words::state)
                ),
                None => String::new(),
            },
            attempt: e
                .attempt_id
                .as_deref()
                .map(|a| crate::encoding::first_chars(a, 8).to_owned())
                .unwrap_or_default(),
            generation: e.generation,
            evidence: e.evidence.as_ref().map(words::evidence).unwrap_or_default(),
            // A note that only repeats the evidence is left out.
            note: e
                .note
                .clone()
                .filter(|n| {
                    !e.evidence
                        .as_ref()
                        .is_some_and(|ev| words::evidence(ev).contains(n.as_str()))
                })
                .unwrap_or_default(),
            class: if late_seqs.contains(&e.seq) {
                "late"
            } else if e.kind.starts_with("review") || e.kind == crate::ledger::QUARANTINE_RELEASED {
                "reviewer"
            } else {
                ""
            },
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Actions

/// A claim or a resolution, as the form asked.
#[derive(Clone, Debug)]
enum Action {
    Claim,
    Resolve(ReviewDecision),
}

impl Action {
    /// How the reviews API's audit note of this action by `who` at `version` begins
    /// ([`crate::review::audit_note`]): finds a form sent twice.
    fn audit_prefix(&self, who: &str, version: u64) -> String {
        let what = match self {
            Action::Claim => format!("claimed by {who}"),
            Action::Resolve(ReviewDecision::ConfirmedSucceeded { remote_ref }) => format!(
                "confirmed succeeded ({}) by {who}",
                remote_ref.as_deref().unwrap_or("no reference")
            ),
            Action::Resolve(ReviewDecision::ConfirmedNotExecuted) => {
                format!("confirmed not executed and re-approved by {who}")
            }
            Action::Resolve(ReviewDecision::KeepPending) => format!("kept pending by {who}"),
        };
        format!("{what}; version {version} -> ")
    }

    fn done(&self) -> &'static str {
        match self {
            Action::Claim => "claim",
            Action::Resolve(ReviewDecision::KeepPending) => "keep_pending",
            Action::Resolve(_) => "resolve",
        }
    }
}

/// The longest reason kept (characters).
const MAX_REASON: usize = 500;

struct Posted {
    tenant: Option<String>,
    version: u64,
    csrf: String,
    reason: String,
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn posted(form: &[(String, String)]) -> Result<Posted, (StatusCode, String)> {
    let csrf = field(form, "csrf")
        .filter(|c| !c.is_empty())
        .ok_or((
            StatusCode::FORBIDDEN,
            "The form carried no security token. Reload the operation's page and use its form."
                .to_owned(),
        ))?
        .to_owned();
    let version = field(form, "version")
        .and_then(|v| v.trim().parse().ok())
        .ok_or((
            StatusCode::BAD_REQUEST,
            "The form did not say which version of the operation you read.".to_owned(),
        ))?;
    let reason: String = field(form, "reason")
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let reason = reason.trim();
    if reason.is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            "A reason is required: say what you checked and why you decided this.".to_owned(),
        ));
    }
    let reason = crate::encoding::first_chars(reason, MAX_REASON).to_owned();
    Ok(Posted {
        tenant: field(form, "tenant").map(str::to_owned),
        version,
        csrf,
        reason,
    })
}

fn decision(form: &[(String, String)]) -> Result<ReviewDecision, String> {
    match field(form, "decision").unwrap_or_default() {
        "succeeded" => Ok(ReviewDecision::ConfirmedSucceeded {
            remote_ref: field(form, "remote_ref")
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(|r| crate::encoding::first_chars(r, 200).to_owned()),
        }),
        "not_executed" => {
            if field(form, "reapprove").is_some_and(|v| !v.is_empty()) {
                Ok(ReviewDecision::ConfirmedNotExecuted)
            } else {
                Err(
                    "To resolve as not executed, tick “re-approve”: it will be sent again with \
                     the same key and bytes."
                        .to_owned(),
                )
            }
        }
        "keep_pending" => Ok(ReviewDecision::KeepPending),
        "" => Err("Choose a decision.".to_owned()),
        other => Err(format!("Unknown decision {other:?}.")),
    }
}

async fn claim(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
    Path(id): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let base = mount_base(original.path(), uri.path());
    act(
        &cfg,
        &who,
        &base,
        OperationId::new(id),
        &form,
        Ok(Action::Claim),
    )
    .await
}

async fn resolve(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
    Path(id): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let base = mount_base(original.path(), uri.path());
    let action = decision(&form).map(Action::Resolve);
    act(&cfg, &who, &base, OperationId::new(id), &form, action).await
}

/// This person's audit entry of this very action at `version`, if there is one: the form was
/// already sent once.
fn already_done<'a>(
    p: &'a HandoffPackage,
    who: &str,
    action: &Action,
    version: u64,
) -> Option<&'a str> {
    let prefix = action.audit_prefix(who, version);
    p.evidence
        .iter()
        .rev()
        .filter(|e| e.kind.starts_with("review"))
        .filter_map(|e| e.note.as_deref())
        .find(|n| n.starts_with(&prefix))
}

fn current_view(p: &HandoffPackage, now: i64) -> CurrentView {
    let s = words::summary(p, now);
    CurrentView {
        state: words::state(p.state).to_owned(),
        badge: words::badge(p.state),
        version: p.version,
        headline: s.headline,
        facts: s.facts,
    }
}

/// The fields every action's form carries, or the page that says what is wrong with them.
// The error is the page answered at once, on a path that ends the request: not worth a box.
#[allow(clippy::result_large_err)]
fn posted_form(
    who: &ReviewerIdentity,
    base: &str,
    form: &[(String, String)],
) -> Result<Posted, Response> {
    posted(form).map_err(|(status, why)| {
        let heading = if status == StatusCode::FORBIDDEN {
            "The form was refused"
        } else {
            "The form is incomplete"
        };
        message(status, Some(who), base, heading, vec![why], None)
    })
}

/// The operation's tenant, if the form's security token is the one this page gave this person
/// for this operation at the version it shows; otherwise the page to answer.
// The error is the page answered at once, on a path that ends the request: not worth a box.
#[allow(clippy::result_large_err)]
async fn verified_tenant(
    cfg: &ReviewUiConfig,
    who: &ReviewerIdentity,
    base: &str,
    id: &OperationId,
    post: &Posted,
) -> Result<Tenant, Response> {
    let tenant = tenant_for(cfg, post.tenant.as_deref(), id)
        .await
        .map_err(|l| lookup_failed(who, base, id, l))?;
    if csrf::verify(
        cfg.csrf_key.bytes(),
        &who.name,
        tenant.as_str(),
        id.as_str(),
        post.version,
        &post.csrf,
    ) {
        Ok(tenant)
    } else {
        Err(message(
            StatusCode::FORBIDDEN,
            Some(who),
            base,
            "The form was refused",
            vec![
                "Its security token does not match this operation and your sign-in. Reload \
                 the operation's page and use its form."
                    .into(),
            ],
            None,
        ))
    }
}

async fn act(
    cfg: &ReviewUiConfig,
    who: &ReviewerIdentity,
    base: &str,
    id: OperationId,
    form: &[(String, String)],
    action: Result<Action, String>,
) -> Response {
    let post = match posted_form(who, base, form) {
        Ok(p) => p,
        Err(page) => return page,
    };
    let action = match action {
        Ok(a) => a,
        Err(why) => {
            return message(
                StatusCode::BAD_REQUEST,
                Some(who),
                base,
                "The form is incomplete",
                vec![why],
                None,
            );
        }
    };
    let tenant = match verified_tenant(cfg, who, base, &id, &post).await {
        Ok(t) => t,
        Err(page) => return page,
    };
    let before = match load(cfg, Some(tenant.as_str()), &id).await {
        Ok(p) => p,
        Err(l) => return lookup_failed(who, base, &id, l),
    };
    let href = op_href(base, cfg, &tenant, &id);
    let keep_pending = matches!(action, Action::Resolve(ReviewDecision::KeepPending));
    if before.version != post.version
        || keep_pending && already_done(&before, &who.name, &action, post.version).is_some()
    {
        return conflict(who, base, &before, &action, post.version, &href);
    }
    // The reviews API records the audit entry with the action: who, when, why, from which
    // version to which.
    let result = match &action {
        Action::Claim if field(form, "take_over").is_some_and(|v| !v.is_empty()) => {
            cfg.reviews
                .take_over(&tenant, &id, &who.name, &post.reason, post.version)
                .await
        }
        Action::Claim => {
            cfg.reviews
                .claim_with_reason(&tenant, &id, &who.name, &post.reason, post.version)
                .await
        }
        Action::Resolve(d) => {
            cfg.reviews
                .resolve_with_reason(
                    &tenant,
                    &id,
                    &who.name,
                    &post.reason,
                    post.version,
                    d.clone(),
                )
                .await
        }
    };
    match result {
        Ok(_) => {}
        Err(ReviewError::VersionMismatch { .. }) => {
            return match load(cfg, Some(tenant.as_str()), &id).await {
                Ok(now) => conflict(who, base, &now, &action, post.version, &href),
                Err(l) => lookup_failed(who, base, &id, l),
            };
        }
        Err(ReviewError::Refused(r)) => {
            return message(
                StatusCode::CONFLICT,
                Some(who),
                base,
                "Not possible in this state",
                vec![format!(
                    "The operation is {}: it cannot be {} now. Nothing was changed.",
                    words::state(r.from),
                    match action {
                        Action::Claim => "claimed",
                        Action::Resolve(_) => "resolved",
                    }
                )],
                Some((current_view(&before, now_ms()), href)),
            );
        }
        Err(ReviewError::NotFound { .. }) => {
            return lookup_failed(who, base, &id, Lookup::NotFound);
        }
        Err(ReviewError::ClaimedByOther { holder, .. }) => {
            return message(
                StatusCode::CONFLICT,
                Some(who),
                base,
                "Claimed by another reviewer",
                vec![format!(
                    "{holder} holds this operation: a claim is exclusive. Nothing was changed. \
                     Ask {holder}, or take it over on the operation's page (the audit trail \
                     names you both)."
                )],
                Some((current_view(&before, now_ms()), href)),
            );
        }
        Err(ReviewError::ReasonRequired) => {
            return message(
                StatusCode::BAD_REQUEST,
                Some(who),
                base,
                "The form is incomplete",
                vec!["A reason is required: say what you checked and why you decided this.".into()],
                None,
            );
        }
        Err(e) => return ledger_failed(who, base, &e),
    }
    let sep = if href.contains('?') { '&' } else { '?' };
    let mut res = StatusCode::SEE_OTHER.into_response();
    let location = format!("{href}{sep}done={}", action.done());
    if let Ok(v) = HeaderValue::from_str(&location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// 409: the operation changed since the form was shown; "already done" when the change is
/// this person's own action at that version (a form sent twice).
fn conflict(
    who: &ReviewerIdentity,
    base: &str,
    now: &HandoffPackage,
    action: &Action,
    shown: u64,
    href: &str,
) -> Response {
    let current = current_view(now, now_ms());
    let (heading, lines) = match already_done(now, &who.name, action, shown) {
        Some(note) => (
            "Already done",
            vec![
                "This form was already submitted; nothing was done twice.".to_owned(),
                format!("Recorded: {note}"),
            ],
        ),
        None => (
            "Changed since you read it",
            vec![
                format!(
                    "You read version {shown}; the operation is at version {} now. Nothing was \
                     changed.",
                    now.version
                ),
                "Read it again as it is now before you decide.".to_owned(),
            ],
        ),
    };
    message(
        StatusCode::CONFLICT,
        Some(who),
        base,
        heading,
        lines,
        Some((current, href.to_owned())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_path_is_found_from_the_original_uri() {
        assert_eq!(mount_base("/ops/", "/"), "/ops");
        assert_eq!(mount_base("/ops", "/"), "/ops");
        assert_eq!(mount_base("/ops/op/x", "/op/x"), "/ops");
        assert_eq!(mount_base("/op/x", "/op/x"), "");
        assert_eq!(mount_base("/", "/"), "");
    }

    #[test]
    fn ages_parse_with_units() {
        assert_eq!(parse_age("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_age("10"), Some(Duration::from_secs(600)));
        assert_eq!(parse_age("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_age("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_age("ten"), None);
        assert_eq!(parse_age("5w"), None);
        assert_eq!(parse_age(""), None);
        assert_eq!(parse_state("manual_review"), Some(State::ManualReview));
        assert_eq!(parse_state("Manual review"), Some(State::ManualReview));
        assert_eq!(parse_state("stuck"), None);
    }
}
