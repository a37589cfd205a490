//! Checks of `apply`, the compare-and-swap: a matching precondition writes every column and
//! bumps the version; a stale one changes nothing; an attempt-level `REJECTED` is refused once
//! an attempt may have applied; the "may have applied" fact is sticky.

use bytes::Bytes;

use super::fixtures::{RawChanges, T0, keep, new_operation, update_of};
use super::helpers::{apply_ok, create, get, log, must};
use crate::ledger::{Ledger, OperationRecord, StoredHeaders, StoredResponse, Update};
use crate::operation::{AttemptId, Generation, OperationId, Tenant};
use crate::state::State;

/// With the expected state, generation and version, `apply` writes every mutable column,
/// increments the version by one, and returns the row as stored.
pub async fn apply_with_matching_precondition_writes_every_column_and_bumps_version<L: Ledger>(
    ledger: L,
) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let attempt = AttemptId::generate();
    let response = StoredResponse {
        status: 201,
        headers: [
            ("content-type", "application/json"),
            ("request-id", "req_123"),
            ("request-id", "req_456"),
            ("x-note", "a, \"b\": déjà vu"),
        ]
        .into_iter()
        .collect(),
        body: Bytes::from_static(b"{\"id\":\"W731\"}\x00\xff"),
    };
    let changes = RawChanges {
        state: State::InFlight,
        last_result: Some(State::Unknown),
        generation: Generation(1),
        attempts_used: 2,
        queries_used: 3,
        may_have_applied: true,
        reset_may_have_applied: false,
        current_attempt: Some(attempt),
        lease_until_ms: Some(T0 + 15_000),
        next_check_ms: Some(T0 + 250),
        deadline_ms: Some(T0 + 60_000),
        remote_ref: Some("W731".to_owned()),
        reason: Some("lost response".to_owned()),
        response: Some(response.clone()),
        now_ms: T0 + 5,
    };
    let applied = apply_ok(&ledger, update_of(&r, changes, "attempt_registered")).await;
    let expected = OperationRecord {
        state: State::InFlight,
        last_result: Some(State::Unknown),
        generation: Generation(1),
        version: 1,
        attempts_used: 2,
        queries_used: 3,
        may_have_applied: true,
        current_attempt: Some(attempt),
        lease_until_ms: Some(T0 + 15_000),
        next_check_ms: Some(T0 + 250),
        deadline_ms: Some(T0 + 60_000),
        remote_ref: Some("W731".to_owned()),
        reason: Some("lost response".to_owned()),
        response: Some(response),
        updated_ms: T0 + 5,
        ..r.clone()
    };
    assert_eq!(applied, expected);
    assert_eq!(get(&ledger, &r).await, expected);

    // The next update must present version 1.
    let again = apply_ok(
        &ledger,
        update_of(&applied, keep(&applied, State::Unknown, T0 + 6), "y"),
    )
    .await;
    assert_eq!(again.version, 2);
    assert_eq!(again.state, State::Unknown);
    assert_eq!(again.created_ms, T0);
}

/// `None` in `RawChanges` means NULL: the caller merges kept values (see
/// [`OperationRecord::update_on`]); the store writes what it is given.
pub async fn apply_writes_optional_columns_as_given<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let full = RawChanges {
        last_result: Some(State::Processing),
        current_attempt: Some(AttemptId::generate()),
        lease_until_ms: Some(T0 + 1),
        next_check_ms: Some(T0 + 2),
        deadline_ms: Some(T0 + 3),
        remote_ref: Some("W1".to_owned()),
        reason: Some("why".to_owned()),
        response: Some(StoredResponse {
            status: 202,
            headers: StoredHeaders::new(),
            body: Bytes::new(),
        }),
        ..keep(&r, State::Processing, T0 + 1)
    };
    let r = apply_ok(&ledger, update_of(&r, full, "full")).await;
    assert_eq!(
        r.response
            .as_ref()
            .map(|resp| (resp.status, resp.body.len(), resp.headers.len())),
        Some((202, 0, 0))
    );
    let cleared = RawChanges {
        state: State::Unknown,
        last_result: None,
        current_attempt: None,
        lease_until_ms: None,
        next_check_ms: None,
        deadline_ms: None,
        remote_ref: None,
        reason: None,
        response: None,
        ..keep(&r, State::Unknown, T0 + 2)
    };
    let cleared = apply_ok(&ledger, update_of(&r, cleared, "cleared")).await;
    let read = get(&ledger, &r).await;
    assert_eq!(read, cleared);
    assert_eq!(read.last_result, None);
    assert_eq!(read.current_attempt, None);
    assert_eq!(read.lease_until_ms, None);
    assert_eq!(read.next_check_ms, None);
    assert_eq!(read.deadline_ms, None);
    assert_eq!(read.remote_ref, None);
    assert_eq!(read.reason, None);
    assert_eq!(read.response, None);
}

async fn assert_refused<L: Ledger>(ledger: &L, update: Update, before: &OperationRecord) {
    let log_before = log(ledger, before).await;
    let what = format!("apply {}", update.evidence.kind);
    let result = must(ledger.apply(update).await, &what);
    assert_eq!(result, None, "{what} should have been refused");
    assert_eq!(
        &get(ledger, before).await,
        before,
        "a refused apply changed the row"
    );
    assert_eq!(
        log(ledger, before).await,
        log_before,
        "a refused apply appended evidence"
    );
}

/// A writer holding an old generation (a stale worker) is refused by the store.
pub async fn apply_with_stale_generation_changes_nothing<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let claimed = RawChanges {
        generation: Generation(1),
        ..keep(&r, State::InFlight, T0 + 1)
    };
    let claimed = apply_ok(&ledger, update_of(&r, claimed, "claim")).await;
    // A worker that read generation 0 and believes the version is current.
    let mut stale = update_of(
        &claimed,
        keep(&claimed, State::Succeeded, T0 + 2),
        "late_result",
    );
    stale.expect_generation = Generation(0);
    assert_refused(&ledger, stale, &claimed).await;
    // And one ahead of the row, for good measure.
    let mut ahead = update_of(&claimed, keep(&claimed, State::Succeeded, T0 + 2), "ahead");
    ahead.expect_generation = Generation(2);
    assert_refused(&ledger, ahead, &claimed).await;
}

/// An update computed from a read that another change has since superseded is refused.
pub async fn apply_with_stale_version_changes_nothing<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let stale = update_of(&r, keep(&r, State::Rejected, T0 + 2), "from_stale_read");
    let current = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::Prepared, T0 + 1), "note"),
    )
    .await;
    assert_eq!(current.version, 1);
    assert_refused(&ledger, stale, &current).await;
}

/// The row is not in the state the update expects: refused.
pub async fn apply_with_wrong_state_changes_nothing<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let mut wrong = update_of(&r, keep(&r, State::Succeeded, T0 + 1), "lookup");
    wrong.expect_state = State::Unknown;
    assert_refused(&ledger, wrong, &r).await;
}

/// Applying to an operation that does not exist is `None` (and creates nothing).
pub async fn apply_to_an_unknown_operation_is_none<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let mut ghost = update_of(&r, keep(&r, State::InFlight, T0 + 1), "ghost");
    ghost.operation_id = OperationId::new("op-ghost");
    assert_eq!(must(ledger.apply(ghost.clone()).await, "apply"), None);
    ghost.operation_id = r.operation_id.clone();
    ghost.tenant = Tenant::new("tenant-b");
    assert_eq!(must(ledger.apply(ghost).await, "apply"), None);
    assert_eq!(get(&ledger, &r).await, r);
    let none = must(
        ledger
            .get(&Tenant::new("tenant-a"), &OperationId::new("op-ghost"))
            .await,
        "get",
    );
    assert_eq!(none, None);
}

async fn unknown_that_may_have_applied<L: Ledger>(ledger: &L) -> OperationRecord {
    let r = create(ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let changes = RawChanges {
        may_have_applied: true,
        ..keep(&r, State::Unknown, T0 + 1)
    };
    let r = apply_ok(ledger, update_of(&r, changes, "attempt_result")).await;
    assert!(r.may_have_applied);
    r
}

/// Once an attempt may have applied, a refusal of a later attempt cannot make the operation
/// `REJECTED`: the store refuses it (a 400 for a replay says nothing about the first send).
pub async fn rejected_is_refused_once_an_attempt_may_have_applied<L: Ledger>(ledger: L) {
    let r = unknown_that_may_have_applied(&ledger).await;
    let reject = RawChanges {
        reason: Some("400 invalid_request".to_owned()),
        ..keep(&r, State::Rejected, T0 + 2)
    };
    let update = update_of(&r, reject, "attempt_result");
    assert!(!update.operation_level);
    assert_refused(&ledger, update, &r).await;
}

/// Evidence about the operation itself (a lookup, a human) may reject it even after an attempt
/// may have applied.
pub async fn rejected_is_allowed_on_operation_level_evidence<L: Ledger>(ledger: L) {
    let r = unknown_that_may_have_applied(&ledger).await;
    let reject = RawChanges {
        reason: Some("vendor lookup: declined".to_owned()),
        last_result: Some(State::Rejected),
        ..keep(&r, State::Rejected, T0 + 2)
    };
    let mut update = update_of(&r, reject, "lookup");
    update.operation_level = true;
    let rejected = apply_ok(&ledger, update).await;
    assert_eq!(rejected.state, State::Rejected);
    assert_eq!(rejected.reason.as_deref(), Some("vendor lookup: declined"));
    assert_eq!(get(&ledger, &r).await, rejected);
}

/// While no attempt may have applied, an attempt-level rejection is accepted.
pub async fn rejected_is_allowed_when_nothing_may_have_applied<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let r = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::InFlight, T0 + 1), "claim"),
    )
    .await;
    assert!(!r.may_have_applied);
    let rejected = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::Rejected, T0 + 2), "attempt_result"),
    )
    .await;
    assert_eq!(rejected.state, State::Rejected);
}

/// `may_have_applied` only goes from false to true, unless the update resets it (a
/// reviewer's confirmed-not-executed decision), which writes the given value.
pub async fn may_have_applied_is_sticky_unless_reset<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let set = RawChanges {
        may_have_applied: true,
        ..keep(&r, State::Unknown, T0 + 1)
    };
    let r = apply_ok(&ledger, update_of(&r, set, "set")).await;
    assert!(r.may_have_applied);

    let try_clear = RawChanges {
        may_have_applied: false,
        ..keep(&r, State::Unknown, T0 + 2)
    };
    let r = apply_ok(&ledger, update_of(&r, try_clear, "try_clear")).await;
    assert!(r.may_have_applied, "may_have_applied must be sticky");
    assert!(get(&ledger, &r).await.may_have_applied);

    let reset_true = RawChanges {
        may_have_applied: true,
        reset_may_have_applied: true,
        ..keep(&r, State::ManualReview, T0 + 3)
    };
    let r = apply_ok(&ledger, update_of(&r, reset_true, "reset_true")).await;
    assert!(r.may_have_applied);

    let reset = RawChanges {
        may_have_applied: false,
        reset_may_have_applied: true,
        ..keep(&r, State::RetryReady, T0 + 4)
    };
    let mut reset = update_of(&r, reset, "review");
    reset.operation_level = true;
    let r = apply_ok(&ledger, reset).await;
    assert!(!r.may_have_applied, "a reset writes the given value");
    assert!(!get(&ledger, &r).await.may_have_applied);
}
