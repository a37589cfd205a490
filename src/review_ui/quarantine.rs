//! Quarantined operations on the review page: rows this version cannot decode, listed in the
//! queue with what is wrong, opened as a raw, redacted view (never a 503), and released with a
//! form once a version that can read them runs.

use askama::Template;
use axum::Form;
use axum::extract::{Extension, OriginalUri, Path, State as AxState};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::forms::{posted_form, verified_tenant};
use super::lookup::{Lookup, load, lookup_failed};
use super::operation::{EventView, pairs, timeline};
use super::queue::{RowView, host_of};
use super::views::{
    Chrome, CurrentView, html, ledger_failed, message, op_href, queue_root, scope_label,
};
use super::{ReviewUiOptions, ReviewerIdentity, Shared, csrf, mount_base, now_ms, words};
use crate::encoding::encode_component;
use crate::ledger::{QUARANTINE_RELEASED, SkippedRow};
use crate::operation::OperationId;
use crate::review::{QuarantinePackage, ReviewError, quarantine_problem};

/// How a quarantined operation's state is shown.
pub(super) const LABEL: &str = "Quarantined";
/// The CSS class of its badge.
pub(super) const BADGE: &str = "b-quarantined";

/// A queue row for a row reported by its raw columns.
pub(super) fn row_view(base: &str, cfg: &ReviewUiOptions, r: &SkippedRow, now: i64) -> RowView {
    let c = &r.columns;
    let problem = if r.readable {
        format!("readable now: release it ({})", r.error)
    } else {
        r.error.clone()
    };
    RowView {
        href: op_href(base, cfg, &r.tenant, &r.operation_id),
        id: r.operation_id.to_string(),
        state: if r.quarantined_ms.is_some() {
            LABEL
        } else {
            "Unreadable"
        },
        badge: BADGE,
        action: c.action.as_deref().map(words::action).unwrap_or_default(),
        tenant: r.tenant.to_string(),
        target: c.request_url.as_deref().map(host_of).unwrap_or_default(),
        contract: c.contract_name.clone().unwrap_or_default(),
        age: words::age(now - r.created_ms),
        changed: format!("{} ago", words::age(now - r.updated_ms)),
        attempts: c
            .attempts_used
            .map_or_else(|| "?".to_owned(), |n| n.to_string()),
        reason: format!("stored state {}; {problem}", r.state),
        contradicted: false,
    }
}

/// The release form of a quarantined operation.
pub(super) struct ReleaseForm {
    pub(super) action: String,
    pub(super) tenant: String,
    pub(super) version: u64,
    pub(super) csrf: String,
}

fn release_form(
    cfg: &ReviewUiOptions,
    who: &ReviewerIdentity,
    base: &str,
    q: &QuarantinePackage,
) -> Option<ReleaseForm> {
    let version = q.version?;
    (who.may_resolve && q.quarantined_ms.is_some()).then(|| ReleaseForm {
        action: format!(
            "{base}/op/{}/release",
            encode_component(q.operation_id.as_str())
        ),
        tenant: q.tenant.to_string(),
        version,
        csrf: csrf::token(
            cfg.csrf_key.bytes(),
            &who.name,
            q.tenant.as_str(),
            q.operation_id.as_str(),
            version,
        ),
    })
}

/// What the normal operation page shows of a quarantined row this version reads.
pub(super) struct Banner {
    pub(super) since: String,
    pub(super) problem: String,
    pub(super) release: Option<ReleaseForm>,
}

pub(super) fn banner(
    cfg: &ReviewUiOptions,
    who: &ReviewerIdentity,
    base: &str,
    q: &QuarantinePackage,
    now: i64,
) -> Banner {
    Banner {
        since: q.quarantined_ms.map_or_else(String::new, |at| {
            format!("{} ({} ago)", words::utc(at), words::age(now - at))
        }),
        problem: q.error.clone(),
        release: release_form(cfg, who, base, q),
    }
}

#[derive(Template)]
#[template(path = "review/quarantined.html")]
struct QuarantinedPage {
    chrome: Chrome,
    back: String,
    id: String,
    done: String,
    quarantined: bool,
    headline: String,
    problem: String,
    facts: Vec<String>,
    next: String,
    warnings: Vec<String>,
    fields: Vec<(String, String)>,
    request: Vec<(String, String)>,
    unreadable: Vec<(String, String)>,
    release: Option<ReleaseForm>,
    read_only_note: bool,
    no_version: bool,
    timeline: Vec<EventView>,
    evidence_error: String,
}

/// The operation page of a row this version cannot decode: 200, the columns it can read
/// (redacted: body size and field names, header names, never a value), what is wrong and what
/// to do.
pub(super) fn page(
    cfg: &ReviewUiOptions,
    who: &ReviewerIdentity,
    base: &str,
    q: &QuarantinePackage,
    now: i64,
    done: &str,
) -> Response {
    let e = crate::operator::explain_quarantine(q, now);
    let unknown = || "cannot be read".to_owned();
    let ts = |ms: i64| format!("{} ({} ago)", words::utc(ms), words::age(now - ms));
    let mut fields = vec![
        ("Tenant", q.tenant.to_string()),
        ("Action", q.action.clone().unwrap_or_else(unknown)),
        ("Intent", q.intent_ref.clone().unwrap_or_else(unknown)),
        ("State as stored", q.state.clone()),
    ];
    if let Some(r) = &q.last_result {
        fields.push(("Last result as stored", r.clone()));
    }
    fields.push((
        "Vendor reference",
        q.remote_ref.clone().unwrap_or_else(|| "none".into()),
    ));
    fields.push(("Created", ts(q.created_ms)));
    fields.push(("Last change", ts(q.updated_ms)));
    if let Some(at) = q.quarantined_ms {
        fields.push(("Quarantined", ts(at)));
    }
    fields.push((
        "Version / generation",
        format!(
            "{} / {}",
            q.version.map_or_else(unknown, |v| v.to_string()),
            q.generation.map_or_else(unknown, |g| g.to_string())
        ),
    ));
    fields.push((
        "Attempts / lookups used",
        format!(
            "{} / {}",
            q.attempts_used.map_or_else(unknown, |n| n.to_string()),
            q.queries_used.map_or_else(unknown, |n| n.to_string())
        ),
    ));
    if let Some(r) = &q.reason {
        fields.push(("Last reason", r.clone()));
    }
    let pr = &q.parameters;
    let request = vec![
        (
            "Request",
            format!(
                "{} {}",
                pr.method.clone().unwrap_or_else(unknown),
                pr.url.clone().unwrap_or_else(unknown)
            ),
        ),
        ("Contract", pr.contract.clone().unwrap_or_else(unknown)),
        (
            "Headers stored",
            match &pr.header_names {
                None => unknown(),
                Some(h) if h.is_empty() => "none".into(),
                Some(h) => h.join(", "),
            },
        ),
        (
            "Body",
            match (pr.body_bytes, pr.body_fields.is_empty()) {
                (None, _) => unknown(),
                (Some(n), true) => format!("{n} bytes"),
                (Some(n), false) => format!(
                    "{n} bytes; fields {} (values hidden)",
                    pr.body_fields.join(", ")
                ),
            },
        ),
        (
            "Payload hash",
            pr.payload_hash.clone().unwrap_or_else(unknown),
        ),
    ];
    let view = QuarantinedPage {
        chrome: Chrome::new(
            base,
            format!("Operation {}", q.operation_id),
            Some(who),
            &scope_label(&cfg.scope),
        ),
        back: queue_root(base),
        id: q.operation_id.to_string(),
        done: done.to_owned(),
        quarantined: q.quarantined_ms.is_some(),
        headline: e.headline,
        problem: quarantine_problem(q),
        facts: e.why,
        next: e.next,
        warnings: e.warnings,
        fields: pairs(&fields),
        request: pairs(&request),
        unreadable: q
            .unreadable
            .iter()
            .map(|u| (u.column.clone(), u.error.clone()))
            .collect(),
        release: release_form(cfg, who, base, q),
        read_only_note: !who.may_resolve,
        no_version: q.version.is_none(),
        timeline: timeline(&q.evidence, &[], now),
        evidence_error: q.evidence_error.clone().unwrap_or_default(),
    };
    html(StatusCode::OK, view.render())
}

/// What a 409 page shows of a quarantined operation as it is now.
fn current_view(q: &QuarantinePackage, now: i64) -> CurrentView {
    let e = crate::operator::explain_quarantine(q, now);
    CurrentView {
        state: LABEL.to_owned(),
        badge: BADGE,
        version: q.version.unwrap_or_default(),
        headline: e.headline.trim_end_matches('.').to_owned(),
        facts: e.why,
    }
}

/// `POST /op/{id}/release`: gives a quarantined operation back to recovery if this version
/// reads it now, at the version the form was shown at (CSRF-bound to the person, the operation
/// and that version, like the other forms).
pub(super) async fn release(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
    Path(id): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let base = mount_base(original.path(), uri.path());
    let id = OperationId::new(id);
    let post = match posted_form(&who, &base, &form) {
        Ok(p) => p,
        Err(page) => return page,
    };
    let tenant = match verified_tenant(&cfg, &who, &base, &id, &post).await {
        Ok(t) => t,
        Err(page) => return page,
    };
    let href = op_href(&base, &cfg, &tenant, &id);
    let result = cfg
        .reviews
        .release_quarantined(&tenant, &id, &who.name, &post.reason, post.version)
        .await;
    let now = now_ms();
    let refused = |heading: &str, lines: Vec<String>, current: Option<CurrentView>| {
        message(
            StatusCode::CONFLICT,
            Some(&who),
            &base,
            heading,
            lines,
            current.map(|c| (c, href.clone())),
        )
    };
    match result {
        Ok(_) => {
            let sep = if href.contains('?') { '&' } else { '?' };
            let mut res = StatusCode::SEE_OTHER.into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("{href}{sep}done=release")) {
                res.headers_mut().insert(header::LOCATION, v);
            }
            res
        }
        Err(e @ ReviewError::StillUndecodable { .. }) => {
            let current = match cfg.reviews.quarantine_package(&tenant, &id).await {
                Ok(q) => q.map(|q| current_view(&q, now)),
                Err(_) => None,
            };
            refused(
                "This version still cannot read it",
                vec![
                    format!("{e}."),
                    "Nothing was changed: it stays quarantined and the recovery engine keeps \
                     skipping it."
                        .to_owned(),
                ],
                current,
            )
        }
        Err(ReviewError::VersionMismatch { current, .. }) => {
            let now_view = match cfg.reviews.quarantine_package(&tenant, &id).await {
                Ok(q) => q.map(|q| current_view(&q, now)),
                Err(_) => None,
            };
            refused(
                "Changed since you read it",
                vec![
                    format!(
                        "You read version {}; the operation is at version {current} now. Nothing \
                         was changed.",
                        post.version
                    ),
                    "Read it again as it is now before you release it.".to_owned(),
                ],
                now_view,
            )
        }
        Err(ReviewError::NotQuarantined { .. }) => {
            // A form sent twice finds its own release in the log.
            let (p, already) = match load(&cfg, Some(tenant.as_str()), &id).await {
                Ok(p) => {
                    let prefix = format!(
                        "{}; version {} -> ",
                        crate::review::quarantine::release_action(&who.name),
                        post.version
                    );
                    let note = p
                        .evidence
                        .iter()
                        .rev()
                        .filter(|e| e.kind == QUARANTINE_RELEASED)
                        .filter_map(|e| e.note.clone())
                        .find(|n| n.starts_with(&prefix));
                    (Some(p), note)
                }
                Err(_) => (None, None),
            };
            let current = p.as_ref().map(|p| super::views::current_view(p, now));
            match already {
                Some(note) => refused(
                    "Already done",
                    vec![
                        "This form was already submitted; nothing was done twice.".to_owned(),
                        format!("Recorded: {note}"),
                    ],
                    current,
                ),
                None => refused(
                    "Not quarantined",
                    vec![
                        "This operation is not quarantined (any more): there is nothing to \
                         release. Nothing was changed."
                            .to_owned(),
                    ],
                    current,
                ),
            }
        }
        Err(ReviewError::NotFound { .. }) => lookup_failed(&who, &base, &id, Lookup::NotFound),
        Err(ReviewError::ReasonRequired) => message(
            StatusCode::BAD_REQUEST,
            Some(&who),
            &base,
            "The form is incomplete",
            vec!["A reason is required: say what changed (e.g. which version now runs).".into()],
            None,
        ),
        Err(e) => ledger_failed(&who, &base, &e),
    }
}
