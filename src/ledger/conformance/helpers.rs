//! Shortcuts the checks share: ledger calls that panic on failure, the row a fresh operation
//! must read back as, the first send's claim and a step of the state machine.

use super::fixtures::{RawChanges, T0, evidence_entry, keep, new_operation, update_of};
use crate::ledger::{
    Created, EvidenceEntry, Ledger, LedgerError, NewEvidence, NewOperation, OperationRecord, Update,
};
use crate::operation::{AttemptId, Generation};
use crate::state::{Event, State, Tick, transition};

pub(super) fn must<T>(result: Result<T, LedgerError>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e:?}"),
    }
}

pub(super) async fn create<L: Ledger>(ledger: &L, new: NewOperation) -> OperationRecord {
    match must(ledger.create_or_get(new).await, "create_or_get") {
        Created::New(r) => r,
        Created::Existing(r) => panic!("expected a new operation, got existing {}", r.operation_id),
    }
}

pub(super) async fn get<L: Ledger>(ledger: &L, r: &OperationRecord) -> OperationRecord {
    match must(ledger.get(&r.tenant, &r.operation_id).await, "get") {
        Some(row) => row,
        None => panic!("operation {} disappeared", r.operation_id),
    }
}

pub(super) async fn log<L: Ledger>(ledger: &L, r: &OperationRecord) -> Vec<EvidenceEntry> {
    must(
        ledger.evidence(&r.tenant, &r.operation_id).await,
        "evidence",
    )
}

pub(super) fn kinds(log: &[EvidenceEntry]) -> Vec<&str> {
    log.iter().map(|e| &*e.entry.kind).collect()
}

pub(super) async fn apply_ok<L: Ledger>(ledger: &L, update: Update) -> OperationRecord {
    let what = format!("apply {}", update.evidence.kind);
    match must(ledger.apply(update).await, &what) {
        Some(r) => r,
        None => panic!("{what}: precondition unexpectedly refused"),
    }
}

/// Moves a fresh operation straight to `state` with the given scheduling columns (the store
/// does not check transitions; the state machine does).
pub(super) async fn put<L: Ledger>(
    ledger: &L,
    id: &str,
    state: State,
    next_check_ms: Option<i64>,
    lease_until_ms: Option<i64>,
) -> OperationRecord {
    let r = create(
        ledger,
        new_operation("tenant-a", id, &format!("intent-{id}")),
    )
    .await;
    let changes = RawChanges {
        next_check_ms,
        lease_until_ms,
        ..keep(&r, state, T0)
    };
    apply_ok(ledger, update_of(&r, changes, "setup")).await
}

pub(super) fn assert_new_row(r: &OperationRecord, new: &NewOperation) {
    assert_eq!(r.tenant, new.tenant);
    assert_eq!(r.operation_id, new.operation_id);
    assert_eq!(r.action, new.action);
    assert_eq!(r.intent_ref, new.intent_ref);
    assert_eq!(r.idempotency_key, new.idempotency_key);
    assert_eq!(r.payload_hash, new.payload_hash);
    assert_eq!(r.request, new.request);
    assert_eq!(r.contract, new.contract);
    assert_eq!(r.policy, new.policy);
    assert_eq!(r.state, State::Prepared);
    assert_eq!(r.last_result, None);
    assert_eq!(r.generation, Generation(0));
    assert_eq!(r.version, 0);
    assert_eq!(r.attempts_used, 0);
    assert_eq!(r.queries_used, 0);
    assert!(!r.may_have_applied);
    assert_eq!(r.current_attempt, None);
    assert_eq!(r.lease_until_ms, None);
    assert_eq!(r.next_check_ms, None);
    assert_eq!(r.deadline_ms, None);
    assert_eq!(r.remote_ref, None);
    assert_eq!(r.reason, None);
    assert_eq!(r.response, None);
    assert_eq!(r.created_ms, new.now_ms);
    assert_eq!(r.updated_ms, new.now_ms);
}

pub(super) fn ids(rows: &[OperationRecord]) -> Vec<&str> {
    rows.iter().map(|r| r.operation_id.as_str()).collect()
}

/// The first-send claim the layer makes, as the `first` update of `new` at `now`.
pub(super) fn first_claim(new: &NewOperation, now: i64, note: &str) -> (AttemptId, Update) {
    let t = match transition(
        &new.snapshot(),
        &Event::ClaimSend,
        Tick {
            now_ms: now,
            jitter: 0.5,
        },
    ) {
        Ok(t) => t,
        Err(e) => panic!("claim send refused by the state machine: {e}"),
    };
    let attempt = AttemptId::generate();
    let lease = now + new.policy.lease().as_millis() as i64;
    let update = new.first_update(
        &t,
        Some(attempt),
        Some(lease),
        NewEvidence {
            attempt_id: Some(attempt),
            note: Some(note.to_owned()),
            ..evidence_entry("attempt_registered", now)
        },
        now,
    );
    (attempt, update)
}

pub(super) fn step(r: &OperationRecord, event: &Event, now_ms: i64) -> crate::state::Transition {
    match transition(
        &r.snapshot(),
        event,
        Tick {
            now_ms,
            jitter: 0.5,
        },
    ) {
        Ok(t) => t,
        Err(e) => panic!("state machine refused {}: {e}", event.name()),
    }
}
