//! `POST /op/{id}/claim` and `POST /op/{id}/resolve`: the checks of a posted form (its fields,
//! its token, the version it was shown at, a form sent twice), the action through the reviews
//! API, and the page that answers (303 back to the operation, or why nothing was changed).

use axum::Form;
use axum::extract::{Extension, OriginalUri, Path, State as AxState};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::forms::{Posted, decision, field, posted_form, verified_tenant};
use super::lookup::{Lookup, load, lookup_failed};
use super::views::{current_view, ledger_failed, message, op_href};
use super::{ReviewUiOptions, ReviewerIdentity, Shared, mount_base, now_ms, words};
use crate::ledger::OperationRecord;
use crate::operation::{OperationId, Tenant};
use crate::review::{HandoffPackage, ReviewError};
use crate::state::ReviewDecision;

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

pub(super) async fn claim(
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

pub(super) async fn resolve(
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

/// Checks the form, acts through the reviews API, and answers: `303 See Other` back to the
/// operation's page, or the page that says why nothing was changed.
async fn act(
    cfg: &ReviewUiOptions,
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
        Err(why) => return incomplete(who, base, why),
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
    if stale_or_repeated(&before, &who.name, &action, post.version) {
        return conflict(who, base, &before, &action, post.version, &href);
    }
    let take_over = field(form, "take_over").is_some_and(|v| !v.is_empty());
    match perform(cfg, &who.name, &tenant, &id, &post, &action, take_over).await {
        Ok(_) => back_to_operation(&href, &action),
        Err(ReviewError::VersionMismatch { .. }) => {
            match load(cfg, Some(tenant.as_str()), &id).await {
                Ok(now) => conflict(who, base, &now, &action, post.version, &href),
                Err(l) => lookup_failed(who, base, &id, l),
            }
        }
        Err(e) => refused(who, base, &id, &before, &action, href, e),
    }
}

/// 400: the form does not say what to do.
fn incomplete(who: &ReviewerIdentity, base: &str, why: String) -> Response {
    message(
        StatusCode::BAD_REQUEST,
        Some(who),
        base,
        "The form is incomplete",
        vec![why],
        None,
    )
}

/// The form was shown at another version than the operation's, or (for keeping it pending,
/// which changes no state) this person already sent it at that version.
fn stale_or_repeated(before: &HandoffPackage, who: &str, action: &Action, shown: u64) -> bool {
    let keep_pending = matches!(action, Action::Resolve(ReviewDecision::KeepPending));
    before.version != shown || keep_pending && already_done(before, who, action, shown).is_some()
}

/// The action, through the reviews API, which records the audit entry with it: who, when,
/// why, from which version to which.
async fn perform(
    cfg: &ReviewUiOptions,
    who: &str,
    tenant: &Tenant,
    id: &OperationId,
    post: &Posted,
    action: &Action,
    take_over: bool,
) -> Result<OperationRecord, ReviewError> {
    match action {
        Action::Claim if take_over => {
            cfg.reviews
                .take_over(tenant, id, who, &post.reason, post.version)
                .await
        }
        Action::Claim => {
            cfg.reviews
                .claim_with_reason(tenant, id, who, &post.reason, post.version)
                .await
        }
        Action::Resolve(d) => {
            cfg.reviews
                .resolve_with_reason(tenant, id, who, &post.reason, post.version, d.clone())
                .await
        }
    }
}

/// `303 See Other` to the operation's page, saying what was done.
fn back_to_operation(href: &str, action: &Action) -> Response {
    let sep = if href.contains('?') { '&' } else { '?' };
    let mut res = StatusCode::SEE_OTHER.into_response();
    let location = format!("{href}{sep}done={}", action.done());
    if let Ok(v) = HeaderValue::from_str(&location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// The page that says why the reviews API refused the action (`before`: the operation as the
/// form's checks read it): nothing was changed.
fn refused(
    who: &ReviewerIdentity,
    base: &str,
    id: &OperationId,
    before: &HandoffPackage,
    action: &Action,
    href: String,
    e: ReviewError,
) -> Response {
    match e {
        ReviewError::Refused(r) => message(
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
            Some((current_view(before, now_ms()), href)),
        ),
        ReviewError::NotFound { .. } => lookup_failed(who, base, id, Lookup::NotFound),
        ReviewError::ClaimedByOther { holder, .. } => message(
            StatusCode::CONFLICT,
            Some(who),
            base,
            "Claimed by another reviewer",
            vec![format!(
                "{holder} holds this operation: a claim is exclusive. Nothing was changed. Ask \
                 {holder}, or take it over on the operation's page (the audit trail names you \
                 both)."
            )],
            Some((current_view(before, now_ms()), href)),
        ),
        ReviewError::ReasonRequired => incomplete(
            who,
            base,
            "A reason is required: say what you checked and why you decided this.".into(),
        ),
        e => ledger_failed(who, base, &e),
    }
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
