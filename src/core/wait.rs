//! Waiting for the recovery engine: with `wait_for_resolution`, a caller whose write ended
//! unresolved waits (bounded) for the engine to resolve it.

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;

use super::Shared;
use super::stored::stored_result;
use crate::error::Error;
use crate::state::State;

/// With [`Builder::wait_for_resolution`](crate::Builder::wait_for_resolution), waits for the recovery engine to resolve
/// the operation named by `err`; otherwise returns `err`.
pub(crate) async fn await_resolution(
    shared: &Shared,
    err: Error,
) -> Result<Response<Full<Bytes>>, Error> {
    let (Some(bound), Some(outcome)) = (shared.wait, err.outcome()) else {
        return Err(err);
    };
    if !matches!(
        outcome.state,
        State::Unknown | State::InFlight | State::Processing | State::RetryReady
    ) {
        return Err(err);
    }
    let (tenant, op, attempt) = (
        outcome.tenant.clone(),
        outcome.operation_id.clone(),
        outcome.attempt,
    );
    let deadline = tokio::time::Instant::now() + bound;
    let mut rx = shared.notifier.subscribe();
    let mut latest = None;
    loop {
        // The ledger is the truth: read it after subscribing, so no resolution is missed.
        if let Ok(Some(row)) = shared.ledger.get(&tenant, &op).await {
            match row.state {
                State::Succeeded | State::Rejected => return Ok(stored_result(&row)),
                State::ManualReview => return Err(Error::for_state(&row, attempt, None, None)),
                _ => latest = Some(row),
            }
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        let poll = deadline.min(now + Duration::from_millis(250));
        loop {
            tokio::select! {
                notice = rx.recv() => match notice {
                    Ok(n) if n.outcome().operation_id == op && n.outcome().tenant == tenant => break,
                    Ok(_) => continue,
                    // Missed notices: re-read the ledger.
                    Err(_) => break,
                },
                _ = tokio::time::sleep_until(poll) => break,
            }
        }
    }
    Err(match latest {
        Some(row) => Error::for_state(&row, attempt, None, None),
        None => err,
    })
}
