//! Withdrawing a never-sent operation, claiming send rights, and an expired lease.

use super::*;

#[test]
fn withdraw_closes_a_never_sent_operation_as_rejected_about_the_operation() {
    let t = ok(
        Row::prepared(),
        &Event::Withdraw {
            reason: "first send not authorized: approval pending".into(),
        },
        T0,
    );
    assert_eq!(t.to, State::Rejected);
    assert_eq!(t.last_result, Some(State::Rejected));
    assert!(
        t.operation_level,
        "nothing was sent: it is about the operation"
    );
    assert!(!t.bump_generation, "no send rights are handed out");
    assert!(!t.may_have_applied);
    assert_eq!(t.attempts_used, 0);
}

#[test]
fn claim_send_from_prepared_enters_in_flight_and_starts_the_window() {
    let t = ok(Row::prepared(), &Event::ClaimSend, T0);
    assert_eq!(t.to, State::InFlight);
    assert!(
        t.bump_generation,
        "a claim of send rights is a new generation"
    );
    assert_eq!(t.attempts_used, 1, "the first send counts");
    assert_eq!(t.queries_used, 0);
    assert_eq!(
        t.deadline_ms,
        Some(T0 + 60_000),
        "window set at the first send"
    );
    assert!(!t.may_have_applied);
    assert_eq!(t.next_check_ms, None);
}

#[test]
fn claim_send_from_retry_ready_keeps_the_first_deadline() {
    let row = Row::typical(State::RetryReady).attempts(2);
    let t = ok(row, &Event::ClaimSend, T0 + 20_000);
    assert_eq!(t.to, State::InFlight);
    assert!(t.bump_generation);
    assert_eq!(t.attempts_used, 3);
    assert_eq!(
        t.deadline_ms,
        Some(DEADLINE),
        "the window runs from the first send, a replay does not extend it"
    );
    assert_eq!(t.queries_used, row.queries_used);
}

#[test]
fn claim_send_at_the_attempt_limit_escalates_instead() {
    let row = Row::typical(State::RetryReady).attempts(3);
    let t = ok(row, &Event::ClaimSend, T0 + 1_000);
    assert_eq!(t.to, State::ManualReview);
    assert_eq!(
        t.attempts_used, 3,
        "no attempt is registered past the limit"
    );
    assert!(!t.bump_generation, "no send rights are handed out");
    assert!(t.reason.as_deref().unwrap().contains("exhausted"));
    assert_ne!(
        t.last_result,
        Some(State::Rejected),
        "attempts exhausted is never a business failure"
    );
}

#[test]
fn claim_send_escalates_when_the_window_cannot_fit_another_attempt() {
    let row = Row::typical(State::RetryReady);
    let timeout = BudgetPolicy::default().attempt_timeout_ms as i64;
    // Exactly one attempt timeout left: still allowed.
    let t = ok(row, &Event::ClaimSend, DEADLINE - timeout);
    assert_eq!(t.to, State::InFlight);
    // One millisecond less: hand over.
    let t = ok(row, &Event::ClaimSend, DEADLINE - timeout + 1);
    assert_eq!(t.to, State::ManualReview);
    assert_eq!(t.attempts_used, row.attempts_used);
    assert!(t.reason.is_some());
}

// ── leases ───────────────────────────────────────────────────────────────────────────────────

#[test]
fn lease_expired_is_unknown_never_prepared() {
    let row = Row::typical(State::InFlight).may(false);
    let now = T0 + 15_000;
    let t = ok(row, &Event::LeaseExpired, now);
    assert_eq!(t.to, State::Unknown);
    assert!(t.bump_generation, "the stale holder is fenced off");
    assert!(t.may_have_applied, "the bytes may be on the wire");
    assert_eq!(t.next_check_ms, Some(now));
    assert_eq!(t.attempts_used, row.attempts_used);
    assert_eq!(t.deadline_ms, row.deadline_ms);
}
