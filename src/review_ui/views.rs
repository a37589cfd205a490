//! What every page of the review UI shares: the chrome around its content, the HTML response
//! with its security headers, the pages' addresses, and the message pages (sign-in, refusals,
//! 409s with the operation as it is now, a ledger that does not answer).

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{ReviewUiOptions, ReviewerIdentity, words};
use crate::encoding::encode_component;
use crate::ledger::TenantScope;
use crate::operation::{OperationId, Tenant};
use crate::reconcile::EngineHealth;
use crate::review::HandoffPackage;

/// What every page shows around its content.
pub(super) struct Chrome {
    pub(super) queue: String,
    pub(super) title: String,
    pub(super) who: String,
    pub(super) role: &'static str,
    pub(super) scope: String,
    /// Whether the engine is running, in the header (and its alarm above the content), on the
    /// pages that read it.
    pub(super) engine: Option<EngineView>,
}

/// The engine's line in the header, and its alarm.
pub(super) struct EngineView {
    pub(super) status: String,
    pub(super) alarm: Option<String>,
}

impl EngineView {
    pub(super) fn of(health: &EngineHealth) -> Self {
        Self {
            status: health.status(),
            alarm: health.alarm(),
        }
    }
}

impl Chrome {
    pub(super) fn new(
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
            engine: None,
        }
    }

    /// The page shows whether the engine is running (`None`: the ledger did not say).
    pub(super) fn with_engine(mut self, health: Option<&EngineHealth>) -> Self {
        self.engine = health.map(EngineView::of);
        self
    }
}

/// Whether the engine is running, for `scope` at `now`; `None` (logged) if the ledger does
/// not answer: the page is shown without it rather than not at all.
pub(super) async fn engine_health(
    ledger: &dyn crate::ledger::ListingLedger,
    scope: &TenantScope,
    now: i64,
) -> Option<EngineHealth> {
    EngineHealth::read(ledger, scope, now)
        .await
        .inspect_err(|e| tracing::warn!(error = %e, "review page: engine health not read"))
        .ok()
}

pub(super) fn scope_label(scope: &TenantScope) -> String {
    match scope {
        TenantScope::Tenant(t) => format!("tenant {t}"),
        TenantScope::AllTenants => "all tenants".to_owned(),
    }
}

pub(super) fn html(status: StatusCode, body: Result<String, askama::Error>) -> Response {
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

/// The queue's address: the mount path itself (axum's `nest("/ops", ..)` serves `/ops`, not
/// `/ops/`), or `/` when the router is not nested.
pub(super) fn queue_root(base: &str) -> String {
    if base.is_empty() {
        "/".to_owned()
    } else {
        base.to_owned()
    }
}

/// One operation's address (naming its tenant when the router serves every tenant).
pub(super) fn op_href(
    base: &str,
    cfg: &ReviewUiOptions,
    tenant: &Tenant,
    id: &OperationId,
) -> String {
    let mut href = format!("{base}/op/{}", encode_component(id.as_str()));
    if cfg.scope == TenantScope::AllTenants {
        href.push_str("?tenant=");
        href.push_str(&encode_component(tenant.as_str()));
    }
    href
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
pub(super) struct CurrentView {
    pub(super) state: String,
    pub(super) badge: &'static str,
    pub(super) version: u64,
    pub(super) headline: String,
    pub(super) facts: Vec<String>,
}

/// What a 409 page shows of an operation as it is now.
pub(super) fn current_view(p: &HandoffPackage, now: i64) -> CurrentView {
    let s = words::summary(p, now);
    CurrentView {
        state: words::state(p.state).to_owned(),
        badge: words::badge(p.state),
        version: p.version,
        headline: s.headline,
        facts: s.facts,
    }
}

/// A page that says what happened (`current`: the operation as it is now, and its address).
pub(super) fn message(
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

/// 503: the ledger failed (logged); nothing was changed.
pub(super) fn ledger_failed(
    who: &ReviewerIdentity,
    base: &str,
    e: &dyn std::error::Error,
) -> Response {
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
