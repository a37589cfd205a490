//! Glue between the pure state machine and the ledger, shared by the layer and the recoverer.

use std::borrow::Cow;

use super::Shared;
use crate::error::Outcome;
use crate::evidence::Evidence;
use crate::ledger::{
    LedgerError, NewEvidence, NewOperation, OperationRecord, StoredResponse, Update,
};
use crate::notify::Notice;
use crate::operation::{AttemptId, Generation};
use crate::state::{Clock, Event, Refused, State, transition};

/// The state machine's view of now, from the configuration's clock.
pub(crate) fn clock(shared: &Shared) -> Clock {
    Clock {
        now_ms: shared.clock.now_ms(),
        jitter: shared.clock.jitter(),
    }
}

/// What applying an event to a row came to.
#[derive(Debug)]
// Unboxed: the row is moved out at once by every caller; boxing it cost an allocation per change.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Applied {
    /// The ledger accepted the change; the new row.
    Done(OperationRecord),
    /// The state machine does not allow the event in the row's state; nothing changed.
    Refused(Refused),
    /// The row moved on since it was read (another worker, the sweeper, a reviewer); nothing
    /// changed.
    Stale,
}

/// Extra columns an event sets beside the transition.
#[derive(Debug, Default)]
pub(crate) struct Extras {
    pub(crate) attempt: Option<AttemptId>,
    pub(crate) lease_until_ms: Option<i64>,
    pub(crate) response: Option<StoredResponse>,
    pub(crate) note: Option<String>,
}

/// Runs the transition function on `record` and applies the result with a compare-and-swap.
/// Publishes the new state on the notifier when it changed.
pub(crate) async fn apply_event(
    shared: &Shared,
    record: &OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
) -> Result<Applied, LedgerError> {
    let update = match update_for_event(shared, record, event, kind, extras) {
        Ok(u) => u,
        Err(refused) => return Ok(Applied::Refused(refused)),
    };
    Ok(match shared.ledger.apply(update).await? {
        Some(row) => {
            if row.state != record.state {
                publish(shared, &row);
            }
            Applied::Done(row)
        }
        None => Applied::Stale,
    })
}

/// What [`record_event`] did; on `Done` the caller's row is the row as recorded.
#[derive(Debug)]
pub(crate) enum Recorded {
    Done,
    /// The state machine does not allow the event in the row's state.
    Refused,
    Stale,
}

/// [`apply_event`] for what an attempt produced, written after its bytes left
/// ([`Ledger::record_unread`](crate::ledger::Ledger::record_unread), which need not wait for
/// durability nor read the row back). On [`Recorded::Done`], `record` is the row as recorded —
/// except its `response` when the event stored one: that is the vendor's answer the caller
/// holds itself, and it is not copied back. Otherwise `record` is unchanged.
pub(crate) async fn record_event(
    shared: &Shared,
    record: &mut OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
) -> Result<Recorded, LedgerError> {
    let mut update = match update_for_event(shared, record, event, kind, extras) {
        Ok(u) => u,
        Err(_) => return Ok(Recorded::Refused),
    };
    // The changes, to write into `record` if the store does not hand its row back; the stored
    // response is not copied (see above).
    let response = update.changes.response.take();
    let changes = update.changes.clone();
    let stored_response = response.is_some();
    update.changes.response = response;
    let before = record.state;
    match shared.ledger.record_unread(update).await? {
        crate::ledger::Recorded::Row(row) => *record = row,
        crate::ledger::Recorded::Applied => {
            let kept = stored_response.then(|| record.response.take());
            record.set_changes(changes);
            if let Some(kept) = kept {
                record.response = kept;
            }
        }
        crate::ledger::Recorded::Stale => return Ok(Recorded::Stale),
    }
    if record.state != before {
        publish(shared, record);
    }
    Ok(Recorded::Done)
}

/// The conditional update that applies `event` to `record`, with its evidence entry.
fn update_for_event(
    shared: &Shared,
    record: &OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
) -> Result<Update, Refused> {
    let clock = clock(shared);
    let t = transition(&record.snapshot(), &event, clock)?;
    // The event is spent: its evidence moves into the log entry.
    let evidence = match event {
        Event::AttemptResult(e) | Event::LookupResult(e) => Some(e),
        _ => None,
    };
    let entry = NewEvidence {
        attempt_id: extras.attempt.or(record.current_attempt),
        generation: record.generation,
        kind: Cow::Borrowed(kind),
        from_state: None,
        to_state: None,
        evidence,
        note: extras.note.or_else(|| t.reason.clone()),
        at_ms: clock.now_ms,
    };
    Ok(record.update_from(
        t,
        extras.attempt,
        extras.lease_until_ms,
        extras.response,
        entry,
        clock.now_ms,
    ))
}

/// The claim of a new operation's first send (`PREPARED` → `IN_FLIGHT` under `attempt`, with
/// its lease), as the `first` update of [`Ledger::create_and_apply`](crate::ledger::Ledger::create_and_apply).
/// `None` if the state machine would not move a fresh row to `IN_FLIGHT` (a budget that allows
/// no attempt): the caller takes the two-step path, which records why.
pub(crate) fn first_claim(
    shared: &Shared,
    new: &NewOperation,
    attempt: AttemptId,
) -> Option<Update> {
    let clock = clock(shared);
    let t = transition(&new.snapshot(), &Event::ClaimSend, clock).ok()?;
    if t.to != State::InFlight {
        return None;
    }
    let lease_until = clock.now_ms + new.policy.lease().as_millis() as i64;
    let entry = NewEvidence {
        attempt_id: Some(attempt),
        generation: Generation(0),
        kind: Cow::Borrowed(CLAIM_KIND),
        from_state: None,
        to_state: None,
        evidence: None,
        note: t.reason.clone(),
        at_ms: clock.now_ms,
    };
    Some(new.first_update(&t, Some(attempt), Some(lease_until), entry, clock.now_ms))
}

/// Evidence kind of a send claim.
pub(crate) const CLAIM_KIND: &str = "attempt_registered";

/// Tells waiting callers and reviewers where an operation now stands.
pub(crate) fn publish(shared: &Shared, row: &OperationRecord) {
    if row.state == State::ManualReview {
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "recoverable_write_escalations_total",
            "target" => target_of(row),
        )
        .increment(1);
    }
    if !shared.notifier.has_subscribers() {
        return;
    }
    let outcome = Outcome::from_record(row, None, true);
    if row.state == State::ManualReview {
        shared.notifier.publish(Notice::Escalated {
            reason: row.reason.clone().unwrap_or_default(),
            outcome,
        });
    } else {
        shared.notifier.publish(Notice::Transition(outcome));
    }
}

/// The target label of an operation: the host of its URL.
pub(crate) fn target_of(row: &OperationRecord) -> String {
    row.request
        .url
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_owned))
        .unwrap_or_default()
}

/// Appends an observation that may no longer change the row (late responses, answers after a
/// reviewer took over). It is kept as evidence and surfaced, never acted on.
pub(crate) async fn append_late(
    shared: &Shared,
    record: &OperationRecord,
    attempt: Option<AttemptId>,
    evidence: Evidence,
    note: String,
) -> Result<(), LedgerError> {
    tracing::warn!(
        operation = %record.operation_id,
        evidence = evidence.label(),
        "late evidence appended; it does not change the operation"
    );
    let entry = NewEvidence {
        attempt_id: attempt,
        generation: record.generation,
        kind: Cow::Borrowed("late_evidence"),
        from_state: None,
        to_state: None,
        evidence: Some(evidence.clone()),
        note: Some(note),
        at_ms: shared.clock.now_ms(),
    };
    shared
        .ledger
        .append_evidence(&record.tenant, &record.operation_id, entry)
        .await?;
    let current = shared
        .ledger
        .get(&record.tenant, &record.operation_id)
        .await?
        .unwrap_or_else(|| record.clone());
    shared.notifier.publish(Notice::LateEvidence {
        outcome: Outcome::from_record(&current, attempt, true),
        evidence,
    });
    Ok(())
}
