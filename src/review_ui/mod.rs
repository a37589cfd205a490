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
//! - `GET /bulk`, `POST /bulk/plan` (multipart: the vendor's export `export`, its layout
//!   `format` = `stripe`, `adyen`, `square`, `paypal` or `generic` with `reference_column` and
//!   `operation_column` and/or `key_column`), `POST /bulk/apply` (the plan's rows, a required
//!   `reason`, its CSRF token): bulk reconciliation from a vendor's export
//!   ([`review::bulk`](crate::review::bulk)). The plan is shown before anything changes; apply
//!   resolves each planned operation as succeeded with its reference only if it is still at
//!   the version the plan showed, and reports the rows it skipped. Behind the same permission
//!   as resolving.
//!
//! The application authenticates. Its middleware inserts a [`ReviewerIdentity`] into the
//! request's extensions; without one every route answers 401. A read-only identity sees
//! everything, is shown no forms, and its POSTs are refused with 403.
//!
//! - `GET /activity`: the last day hour by hour, drawn as SVG on the server: operations
//!   created, finished and escalated per hour, and the review backlog at each hour's end
//!   ([`ListingLedger::activity`]).
//!
//! Every page says when it was read; the queue, an operation and the activity refresh
//! themselves in place ([`ReviewUiOptions::refresh_every`], off with
//! [`ReviewUiOptions::no_refresh`]) without touching a form being filled in: an operation that
//! changed meanwhile is reported, and its form still acts on the version the person read.
//!
//! The page is server-rendered HTML ([askama](https://docs.rs/askama) templates compiled into
//! the crate, a small embedded style sheet, and one inline script that only refreshes it,
//! allowed by its hash in the Content-Security-Policy; everything works without it), and shows
//! nothing beyond the
//! redacted handoff package: no credential, and no body value but the answer of a lookup that
//! resolved the operation, with the contract's secret answer fields `[redacted]` (see
//! [`HandoffPackage`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use axum::{Router, extract::Request, middleware::{self, Next}, response::Response};
//! use recoverable_write::review_ui::{self, ReviewUiOptions, ReviewerIdentity};
//! use recoverable_write::ledger::ListingLedger;
//! use recoverable_write::Tenant;
//!
//! async fn auth(mut req: Request, next: Next) -> Response {
//!     // Your own authentication decides who this is and whether they may resolve.
//!     req.extensions_mut().insert(ReviewerIdentity::resolver("alice"));
//!     next.run(req).await
//! }
//!
//! # fn app(ledger: Arc<dyn ListingLedger>) -> Router {
//! let review = review_ui::router(ReviewUiOptions::for_tenant(ledger, Tenant::new("acme")));
//! Router::new()
//!     .nest_service("/ops", review)
//!     .layer(middleware::from_fn(auth))
//! # }
//! ```
//!
//! [`HandoffPackage`]: crate::review::HandoffPackage

mod actions;
mod activity;
mod bulk;
mod charts;
mod csrf;
mod filters;
mod forms;
mod live;
mod lookup;
mod operation;
mod quarantine;
mod queue;
mod views;
mod words;

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{OriginalUri, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};

use self::views::message;
use crate::ledger::{ListingLedger, TenantScope};
use crate::operation::Tenant;
use crate::review::Reviews;
use crate::secret::Secret;

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
pub struct ReviewUiOptions {
    ledger: Arc<dyn ListingLedger>,
    reviews: Reviews,
    scope: TenantScope,
    csrf_key: Secret,
    page_size: u32,
    purger: Option<crate::retention::Purger>,
    /// How often an open page refreshes itself (`None`: never; see [`live`]).
    refresh: Option<std::time::Duration>,
}

impl fmt::Debug for ReviewUiOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReviewUiOptions")
            .field("scope", &self.scope)
            .field("page_size", &self.page_size)
            .field("csrf_key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl ReviewUiOptions {
    /// The page for one tenant's operations. The ledger must list them ([`ListingLedger`]).
    pub fn for_tenant(ledger: Arc<dyn ListingLedger>, tenant: Tenant) -> Self {
        Self::scoped(ledger, TenantScope::Tenant(tenant))
    }

    /// The page for every tenant's operations: the operator capability. Mount it only for
    /// people who may see every tenant.
    pub fn all_tenants(ledger: Arc<dyn ListingLedger>) -> Self {
        Self::scoped(ledger, TenantScope::AllTenants)
    }

    /// The page over `scope`. The CSRF key is 32 random bytes (see [`csrf_key`](Self::csrf_key)).
    pub fn scoped(ledger: Arc<dyn ListingLedger>, scope: TenantScope) -> Self {
        Self {
            reviews: Reviews::new(ledger.clone()),
            ledger,
            scope,
            csrf_key: Secret::random(),
            page_size: 50,
            purger: None,
            refresh: Some(live::DEFAULT_REFRESH),
        }
    }

    /// Shows each operation's retention dates (when its details and its row go), from the
    /// application's retention settings: pass [`Handle::purger`](crate::Handle::purger).
    pub fn purger(mut self, purger: crate::retention::Purger) -> Self {
        self.purger = Some(purger);
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
    /// # use recoverable_write::review_ui::ReviewUiOptions;
    /// # use recoverable_write::ledger::ListingLedger;
    /// # use recoverable_write::{Secret, Tenant};
    /// # fn demo(ledger: Arc<dyn ListingLedger>) -> Result<(), Box<dyn std::error::Error>> {
    /// let config = ReviewUiOptions::for_tenant(ledger, Tenant::new("acme"))
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

type Shared = Arc<ReviewUiOptions>;

/// The review page's router. Mount it behind your authentication, which inserts a
/// [`ReviewerIdentity`] per request: `Router::new().nest_service("/ops", router(config))`.
/// Every path answers with or without a trailing slash (`/ops/op/{id}/`); the mount path itself
/// too (`/ops/`) when mounted with `nest_service` (axum's `nest` routes `/ops` only).
pub fn router(config: ReviewUiOptions) -> Router {
    let routes = Router::new()
        .route("/", get(queue::queue))
        .route("/op/{id}", get(operation::operation))
        .route("/activity", get(activity::activity))
        .route("/op/{id}/claim", post(actions::claim))
        .route("/op/{id}/resolve", post(actions::resolve))
        .route("/op/{id}/release", post(quarantine::release))
        .route("/bulk", get(bulk::form))
        .route(
            "/bulk/plan",
            post(bulk::plan).layer(axum::extract::DefaultBodyLimit::max(
                crate::review::bulk::MAX_EXPORT_BYTES,
            )),
        )
        .route("/bulk/apply", post(bulk::apply))
        .layer(middleware::from_fn(gate))
        .with_state(Arc::new(config));
    // What no route matched: the same path without its trailing slash, routed again (a
    // nested router's `/` is its mount path without the slash).
    let again = routes.clone();
    routes.fallback_service(tower::service_fn(move |mut req: Request| {
        let again = again.clone();
        async move {
            let path = req.uri().path();
            if path.len() > 1 && path.ends_with('/') {
                let trimmed = path.trim_end_matches('/');
                let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
                let rest = req
                    .uri()
                    .query()
                    .map_or_else(|| trimmed.to_owned(), |q| format!("{trimmed}?{q}"));
                if let Ok(uri) = rest.parse() {
                    *req.uri_mut() = uri;
                    return tower::ServiceExt::oneshot(again, req).await;
                }
            }
            Ok::<Response, std::convert::Infallible>(StatusCode::NOT_FOUND.into_response())
        }
    }))
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
    // A trailing slash on the original path (`/ops/op/x/`) was trimmed before routing.
    let original = match original.trim_end_matches('/') {
        "" => "/",
        o => o,
    };
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
        assert_eq!(mount_base("/ops/op/x/", "/op/x"), "/ops");
        assert_eq!(mount_base("/ops//", "/"), "/ops");
    }
}
