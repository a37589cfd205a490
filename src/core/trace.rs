//! The `tracing` spans an on-call engineer follows a write by (issue 30 item 8).
//!
//! - `recoverable_write.write`: one per tracked write through the layer or the reqwest
//!   middleware, over the whole call (prepare, send, classify, record);
//! - `recoverable_write.recover`: one per recovery step on a claimed operation.
//!
//! Both carry the same fields — `operation` (the operation id), `tenant`, `contract` (its
//! name), `attempt` and `generation` — so a lost response and its later recovery are found by
//! one `operation` value. The events inside them are the steps (see `docs/recovery.md`, "Traces").
//! Never a body, a key value or a credential: ids, names, states, statuses and evidence
//! classes only.
//!
//! Cheap when nobody listens: a disabled span is `Span::none()`-like, and every field is
//! recorded by reference (`Display` runs only in a subscriber that records it), so the write
//! path allocates nothing for tracing.

use tracing::Span;
use tracing::field::{Empty, display};

use crate::ledger::OperationRecord;
use crate::operation::{AttemptId, OperationId, Tenant};

/// The span of one tracked write. Its fields are recorded as they become known:
/// [`identify`] once the operation is made, [`claimed`] once its send is claimed.
pub(crate) fn write_span() -> Span {
    tracing::info_span!(
        "recoverable_write.write",
        operation = Empty,
        tenant = Empty,
        contract = Empty,
        attempt = Empty,
        generation = Empty,
    )
}

/// The span of one recovery step on `row` as claimed (its attempt, if it has one, is the one
/// whose outcome is being recovered; a replay records its own with [`claimed`]).
pub(crate) fn recover_span(row: &OperationRecord) -> Span {
    let span = tracing::info_span!(
        "recoverable_write.recover",
        operation = %row.operation_id,
        tenant = %row.tenant,
        contract = %row.contract.name,
        attempt = Empty,
        generation = %row.generation,
        state = %row.state,
    );
    if let Some(attempt) = &row.current_attempt
        && !span.is_disabled()
    {
        span.record("attempt", display(attempt));
    }
    span
}

/// Records which operation `span` (a [`write_span`]) is about.
pub(crate) fn identify(span: &Span, operation: &OperationId, tenant: &Tenant, contract: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("operation", display(operation));
    span.record("tenant", display(tenant));
    span.record("contract", contract);
}

/// Records the attempt whose send `record` now holds (its contract, attempt and generation),
/// and tells the claim as an event. The claim is in the ledger: bytes may leave.
pub(crate) fn claimed(span: &Span, record: &OperationRecord, attempt: &AttemptId) {
    if !span.is_disabled() {
        span.record("contract", &*record.contract.name);
        span.record("attempt", display(attempt));
        span.record("generation", display(&record.generation));
    }
    tracing::debug!(
        state = %record.state,
        attempts_used = record.attempts_used,
        "send claimed"
    );
}
