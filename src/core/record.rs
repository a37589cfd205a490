//! The finishing phase of an attempt: read and classify what it produced, record the result
//! through the state machine, and answer the caller.
//!
//! [`record_attempt`] reads as its steps: [`observe`] the attempt, keep the vendor's answer if
//! it is authoritative ([`stored_if_authoritative`]), [`record_result`], find the row as it now
//! stands ([`row_after`]), and [`answer_caller`].

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::Response;
use http_body::Body;
use http_body_util::Full;
use tower::BoxError;

use super::body::{collect_limited, read_by};
use super::engine::{self, Extras};
use super::stored::{stored_response, stored_result};
use super::{AttemptCtx, Error, Outcome, Shared};
use crate::contract::Contract;
use crate::evidence::Evidence;
use crate::ledger::{LedgerError, OperationRecord, StoredResponse};
use crate::operation::AttemptId;
use crate::state::{Event, State};

/// What the attempt produced.
pub(crate) enum Observed<RB> {
    Response(Response<RB>),
    Failed(BoxError),
    TimedOut,
}

/// The note of an attempt's result that found the operation taken over.
const LATE_RESULT: &str = "attempt result arrived after the operation moved on";

/// Reads, classifies and records what one attempt produced (the layer's first send and the
/// recoverer's replays alike).
// Not an async fn on purpose: see the comment on the async block below.
#[allow(clippy::manual_async_fn)]
pub(crate) fn record_attempt<RB>(
    mut ctx: AttemptCtx,
    observed: Observed<RB>,
) -> impl Future<Output = Result<Response<Full<Bytes>>, Error>>
where
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    // An async block, not an async fn: an async fn copies its arguments into locals and keeps
    // both, so the attempt's row would be stored twice in the write path's one allocation.
    async move {
        // `ctx` is used in place, never destructured into locals (a moved-out copy of the row
        // would be stored beside it).
        let now = ctx.shared.clock.system_time();
        let (evidence, response, source) = observe(&ctx, observed, now).await;
        let attempt = ctx.attempt;
        let retry_after = evidence.retry_after();
        tracing::info!(
            operation = %ctx.record.operation_id,
            attempt = %attempt,
            generation = %ctx.record.generation,
            evidence = evidence.label(),
            "attempt classified"
        );
        let authoritative = matches!(
            evidence,
            Evidence::Succeeded { .. } | Evidence::Rejected { .. }
        );
        let stored =
            stored_if_authoritative(response.as_ref(), authoritative, &ctx.contract, &ctx.shared);

        // The evidence moves into the ledger's log. The rare paths below that need it again (a
        // result that arrived late, or could not be recorded) get it back: classified anew from the
        // response (a pure function of what was read), or from a copy when there is no response.
        let kept = response.is_none().then(|| evidence.clone());
        let contract = &ctx.contract;
        let again = |response: Option<&Response<Bytes>>| match (&kept, response) {
            (Some(e), _) => e.clone(),
            (None, Some(res)) => {
                contract.classify_response(res.status(), res.headers(), res.body(), now)
            }
            (None, None) => Evidence::unknown("the attempt's evidence was lost"),
        };

        let outcome = record_result(&ctx.shared, &mut ctx.record, attempt, evidence, stored).await;
        let (row, recorded) = match outcome {
            // `record` is the row as recorded (its stored response aside: `response` is it).
            Ok(engine::Recorded::Done) => (ctx.record, true),
            // Boxed: a write that is recorded never takes it, and inline it would make every
            // write's future larger to allocate and move.
            Ok(engine::Recorded::Refused | engine::Recorded::Stale) => (
                Box::pin(row_after_late(
                    &ctx.shared,
                    ctx.record,
                    attempt,
                    again(response.as_ref()),
                ))
                .await,
                false,
            ),
            Err(e) => {
                // The attempt happened but could not be recorded: the row stays IN_FLIGHT, its
                // lease expires and reconciliation takes over. Never a duplicate.
                tracing::error!(operation = %ctx.record.operation_id, error = %e, "could not record attempt result; it will be reconciled");
                (ctx.record, false)
            }
        };
        tracing::debug!(state = %row.state, recorded, "result recorded");
        count_unknown(&row);
        answer_caller(
            row,
            response,
            attempt,
            authoritative && !recorded,
            source,
            retry_after,
            again,
        )
    }
}

/// What the attempt produced, read and classified: the evidence, the response with its body
/// read (when one came and its body was read by the attempt's deadline), and the transport's
/// error (when it failed).
async fn observe<RB>(
    ctx: &AttemptCtx,
    observed: Observed<RB>,
    now: SystemTime,
) -> (Evidence, Option<Response<Bytes>>, Option<BoxError>)
where
    RB: Body,
    RB::Error: Into<BoxError>,
{
    match observed {
        Observed::Response(res) => {
            let (parts, body) = res.into_parts();
            tracing::debug!(status = parts.status.as_u16(), "answer received");
            let read = read_by(
                ctx.deadline,
                collect_limited(body, ctx.shared.max_response_body),
            )
            .await;
            match read {
                Ok(Ok(body)) => {
                    let evidence =
                        ctx.contract
                            .classify_response(parts.status, &parts.headers, &body, now);
                    (evidence, Some(Response::from_parts(parts, body)), None)
                }
                Ok(Err(e)) => (
                    Evidence::unknown(format!(
                        "response body lost after status {}: {}",
                        parts.status,
                        crate::error::Short(&e.to_string())
                    )),
                    None,
                    None,
                ),
                Err(_) => (
                    Evidence::unknown(format!(
                        "attempt timed out reading the body after status {}",
                        parts.status
                    )),
                    None,
                    None,
                ),
            }
        }
        Observed::Failed(e) => {
            // Not the error's text: a transport's error may name the URL (and its query).
            tracing::debug!(answer = "transport error", "no answer");
            (classify_failure(ctx, &*e), None, Some(e))
        }
        Observed::TimedOut => {
            tracing::debug!(answer = "timed out", "no answer");
            (
                Evidence::unknown(format!(
                    "attempt timed out after {} ms",
                    ctx.record.policy.attempt_timeout_ms
                )),
                None,
                None,
            )
        }
    }
}

/// What a failed attempt tells: the contract classifies the transport's error, but a refusal
/// of the send-once guard after the attempt went out says nothing about the attempt itself.
fn classify_failure(
    ctx: &AttemptCtx,
    e: &(dyn std::error::Error + Send + Sync + 'static),
) -> Evidence {
    if crate::guard::find_refusal(e).is_some() && ctx.token.was_sent() {
        // An inner layer re-sent the attempt and the guard refused the copy. That proves
        // the copy unsent, not the first one, whose outcome we never saw.
        Evidence::unknown(
            "an inner retry was refused by the send-once guard; the first send's outcome is unknown",
        )
    } else {
        ctx.contract.classify_error(e)
    }
}

/// The vendor's response as the ledger keeps it, when it is authoritative (a success or a
/// rejection): later callers naming the operation get it back.
fn stored_if_authoritative(
    response: Option<&Response<Bytes>>,
    authoritative: bool,
    contract: &Contract,
    shared: &Shared,
) -> Option<StoredResponse> {
    match (response, authoritative) {
        (Some(res), true) => stored_response(res, contract, shared.stored_body),
        _ => None,
    }
}

/// Records the attempt's result through the state machine: written before the caller is
/// answered, or, when the ledger can detach it, written behind the caller's back (only the
/// claim had to be durable), a stale one then appended as late evidence once the ledger says
/// so. `record` becomes the row as recorded.
async fn record_result(
    shared: &Arc<Shared>,
    record: &mut OperationRecord,
    attempt: AttemptId,
    evidence: Evidence,
    stored: Option<StoredResponse>,
) -> Result<engine::Recorded, LedgerError> {
    let extras = Extras {
        attempt: Some(attempt),
        lease_until_ms: None,
        response: stored,
        note: None,
    };
    match engine::detaching(shared) {
        // The caller does not wait for the result to be written (only the claim had to be
        // durable); a stale one is appended as late evidence once the ledger says so.
        Some(runtime) => {
            let late = engine::Late {
                tenant: record.tenant.clone(),
                operation_id: record.operation_id.clone(),
                generation: record.generation,
                attempt: Some(attempt),
                evidence: evidence.clone(),
                note: std::borrow::Cow::Borrowed(LATE_RESULT),
            };
            let event = Event::AttemptResult(evidence);
            engine::record_event_detached(
                shared,
                runtime,
                record,
                event,
                "attempt_result",
                extras,
                late,
            )
        }
        None => {
            let event = Event::AttemptResult(evidence);
            engine::record_event(shared, record, event, "attempt_result", extras).await
        }
    }
}

/// The row as it stands after a result the row no longer takes (the lease ran out, or a
/// reviewer or recoverer took the operation over while this attempt was on the wire): the
/// observation is kept as late evidence only, and the row is read again.
async fn row_after_late(
    shared: &Shared,
    record: OperationRecord,
    attempt: AttemptId,
    late_evidence: Evidence,
) -> OperationRecord {
    if let Err(e) = engine::append_late(
        shared,
        &record,
        Some(attempt),
        late_evidence,
        LATE_RESULT.into(),
    )
    .await
    {
        tracing::error!(operation = %record.operation_id, error = %e, "could not append late evidence");
    }
    match shared
        .ledger
        .get(&record.tenant, &record.operation_id)
        .await
    {
        Ok(Some(row)) => row,
        _ => record,
    }
}

/// Counts an attempt that left its operation `UNKNOWN` (feature `metrics`).
fn count_unknown(row: &OperationRecord) {
    #[cfg(feature = "metrics")]
    if row.state == State::Unknown {
        metrics::counter!(
            "recoverable_write_unknown_total",
            "target" => engine::target_of(row),
            "tenant" => row.tenant.to_string(),
        )
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = row;
}

/// The caller's answer: the vendor's response when the operation is resolved by it, or when it
/// is authoritative but `unrecorded` (an outage, or the operation was taken over: the vendor's
/// answer is still the truth for this caller); the stored result of an operation resolved
/// otherwise; else an error with the operation's state.
// The write path's own error, returned as it is (no box on the way back).
#[allow(clippy::result_large_err)]
fn answer_caller(
    row: OperationRecord,
    response: Option<Response<Bytes>>,
    attempt: AttemptId,
    unrecorded: bool,
    source: Option<BoxError>,
    retry_after: Option<std::time::Duration>,
    again: impl Fn(Option<&Response<Bytes>>) -> Evidence,
) -> Result<Response<Full<Bytes>>, Error> {
    match (row.state, response) {
        (State::Succeeded | State::Rejected, Some(res)) => {
            let (mut parts, body) = res.into_parts();
            parts
                .extensions
                .insert(Outcome::from_row(row, Some(attempt), false));
            Ok(Response::from_parts(parts, Full::new(body)))
        }
        // Authoritative answer that the ledger could not take in (outage, or the operation was
        // taken over): the vendor's answer is still the truth for this caller.
        (_, Some(res)) if unrecorded => {
            let mut outcome = Outcome::from_record(&row, Some(attempt), false);
            if let Evidence::Succeeded { remote_ref } = again(Some(&res)) {
                outcome.remote_ref = remote_ref.or(outcome.remote_ref);
            }
            let (mut parts, body) = res.into_parts();
            parts.extensions.insert(outcome);
            Ok(Response::from_parts(parts, Full::new(body)))
        }
        (State::Succeeded | State::Rejected, None) => Ok(stored_result(&row)),
        _ => Err(Error::for_state(&row, Some(attempt), source, retry_after)),
    }
}
