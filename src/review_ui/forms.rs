//! The posted forms: the fields every form carries (the version shown, the CSRF token, a
//! required reason), the resolve form's decision, and the check that the token is the one this
//! page gave this person for this operation at that version.

use axum::http::StatusCode;
use axum::response::Response;

use super::lookup::{lookup_failed, tenant_for};
use super::views::message;
use super::{ReviewUiOptions, ReviewerIdentity, csrf};
use crate::operation::{OperationId, Tenant};
use crate::state::ReviewDecision;

/// The longest reason kept (characters).
const MAX_REASON: usize = 500;

/// The fields every action's form carries.
pub(super) struct Posted {
    tenant: Option<String>,
    pub(super) version: u64,
    csrf: String,
    pub(super) reason: String,
}

/// The value of the form's field `name`, if it has one.
pub(super) fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
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

/// The resolve form's decision, or what is wrong with it.
pub(super) fn decision(form: &[(String, String)]) -> Result<ReviewDecision, String> {
    match field(form, "decision").unwrap_or_default() {
        "succeeded" => {
            let remote_ref = field(form, "remote_ref")
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(|r| crate::encoding::first_chars(r, 200).to_owned());
            // A success with no reference is final and cannot be traced to the vendor's
            // object later: only on an explicit word that there is none.
            if remote_ref.is_none() && field(form, "no_reference").is_none_or(str::is_empty) {
                return Err(
                    "To resolve as succeeded, give the vendor's reference, or tick “no \
                     reference”: you checked at the vendor and there is none to record."
                        .to_owned(),
                );
            }
            Ok(ReviewDecision::ConfirmedSucceeded { remote_ref })
        }
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

/// The fields every action's form carries, or the page that says what is wrong with them.
// The error is the page answered at once, on a path that ends the request: not worth a box.
#[allow(clippy::result_large_err)]
pub(super) fn posted_form(
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
pub(super) async fn verified_tenant(
    cfg: &ReviewUiOptions,
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
