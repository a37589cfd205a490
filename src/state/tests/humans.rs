//! Humans: escalation, review decisions, path (b) and reviewer claims.

use super::*;

#[test]
fn escalate_from_every_non_terminal_state() {
    for (state, business, bump) in [
        (State::Prepared, State::Prepared, false),
        (State::InFlight, State::Unknown, true),
        (State::Processing, State::Processing, false),
        (State::Unknown, State::Unknown, false),
    ] {
        let row = Row::typical(state);
        let t = ok(row, &escalate_ev(), T0 + 5_000);
        assert_eq!(t.to, State::ManualReview, "{state}");
        assert_eq!(t.last_result, Some(business), "{state}");
        assert_eq!(t.bump_generation, bump, "{state}");
        assert_eq!(t.reason.as_deref(), Some("operator asked"));
        assert_eq!(t.next_check_ms, None);
        assert_eq!(t.attempts_used, row.attempts_used);
        assert_eq!(t.queries_used, row.queries_used);
    }
    let t = ok(Row::typical(State::RetryReady), &escalate_ev(), T0 + 5_000);
    assert_eq!(t.to, State::ManualReview);
    assert!(!t.bump_generation);
    assert!(!t.may_have_applied);
}

#[test]
fn escalating_an_in_flight_attempt_keeps_may_have_applied() {
    // The attempt's bytes may be on the wire; taking its send rights away does not unsend them.
    let row = Row::typical(State::InFlight).may(false);
    let t = ok(row, &escalate_ev(), T0 + 300);
    assert_eq!(t.to, State::ManualReview);
    assert!(t.bump_generation, "the in-flight holder is fenced off");
    assert!(t.may_have_applied);
    assert_eq!(t.last_result, Some(State::Unknown));
}

#[test]
fn review_confirmed_succeeded_is_terminal() {
    let row = Row::typical(State::ManualReview);
    let t = ok(
        row,
        &Event::Review(ReviewDecision::ConfirmedSucceeded {
            remote_ref: Some("W731".into()),
        }),
        T0 + 90_000,
    );
    assert_eq!(t.to, State::Succeeded);
    assert_eq!(t.remote_ref.as_deref(), Some("W731"));
    assert_eq!(t.last_result, Some(State::Succeeded));
    assert!(t.may_have_applied);
    assert!(
        t.bump_generation,
        "the reviewer's claim fences everyone else"
    );
}

#[test]
fn review_confirmed_not_executed_resets_the_budget() {
    let row = Row::typical(State::ManualReview).attempts(3).queries(10);
    let now = T0 + 90_000;
    let t = ok(
        row,
        &Event::Review(ReviewDecision::ConfirmedNotExecuted),
        now,
    );
    assert_eq!(t.to, State::RetryReady);
    assert!(t.bump_generation);
    assert!(!t.may_have_applied);
    assert!(t.operation_level);
    assert_eq!(
        (t.attempts_used, t.queries_used, t.deadline_ms),
        (0, 0, None)
    );
    assert_eq!(t.next_check_ms, Some(now));
    // The re-approved operation sends again under a fresh window.
    let t2 = ok(Row::after(&t), &Event::ClaimSend, now + 10);
    assert_eq!(t2.to, State::InFlight);
    assert_eq!(t2.attempts_used, 1);
    assert_eq!(t2.deadline_ms, Some(now + 10 + 60_000));
}

#[test]
fn review_keep_pending_changes_nothing() {
    let e = refused(
        Row::typical(State::ManualReview),
        &Event::Review(ReviewDecision::KeepPending),
        T0,
    );
    assert_eq!(e.from, State::ManualReview);
    assert_eq!(e.event, "review");
    assert!(e.detail.is_some());
}

// ── path (b) and reviewer claims ─────────────────────────────────────────────────────────────

#[test]
fn replay_safe_from_unknown_is_retry_ready_and_keeps_the_sticky_fact() {
    let ev = Event::ReplaySafe {
        reason: "stored first response inside retention".into(),
    };
    let t = ok(Row::typical(State::Unknown).attempts(1), &ev, T0 + 1_000);
    assert_eq!(t.to, State::RetryReady);
    assert!(t.may_have_applied, "the first send may still have applied");
    assert_eq!(
        t.attempts_used, 1,
        "the replay is counted when it is claimed"
    );
    // The replay's claim then registers attempt 2.
    let row = Row::after(&t);
    let c = ok(row, &Event::ClaimSend, T0 + 1_001);
    assert_eq!(c.to, State::InFlight);
    assert_eq!(c.attempts_used, 2);
    // A 400 for the replay says nothing about the first send: UNKNOWN, never REJECTED.
    let r = ok(
        Row::after(&c),
        &attempt(Evidence::Rejected {
            reason: "400".into(),
        }),
        T0 + 1_002,
    );
    assert_eq!(r.to, State::Unknown);
}

#[test]
fn replay_safe_escalates_when_attempts_or_window_are_spent() {
    let ev = Event::ReplaySafe {
        reason: "contract".into(),
    };
    let t = ok(Row::typical(State::Unknown).attempts(3), &ev, T0 + 1_000);
    assert_eq!(t.to, State::ManualReview);
    let t = ok(Row::typical(State::Unknown).attempts(1), &ev, DEADLINE - 1);
    assert_eq!(t.to, State::ManualReview);
    // Never from PROCESSING: an accepted write is polled, never re-created.
    assert_eq!(
        refused(Row::typical(State::Processing), &ev, T0).from,
        State::Processing
    );
}

#[test]
fn review_claim_fences_recovery_and_revokes_send_rights() {
    let ev = Event::ReviewClaim {
        reviewer: "alice".into(),
    };
    for state in [
        State::Prepared,
        State::InFlight,
        State::Processing,
        State::Unknown,
        State::RetryReady,
    ] {
        let t = ok(Row::typical(state), &ev, T0 + 1_000);
        assert_eq!(t.to, State::ManualReview, "{state}");
        assert!(t.bump_generation, "{state}: the old holder is fenced out");
        assert!(t.reason.as_deref().unwrap().contains("alice"));
        // After the claim nothing but a review moves it.
        let row = Row::after(&t);
        assert_eq!(
            refused(row, &Event::ClaimSend, T0 + 1_001).from,
            State::ManualReview
        );
    }
    let t = ok(Row::typical(State::InFlight).may(false), &ev, T0);
    assert!(t.may_have_applied, "an in-flight attempt may still apply");
}

/// Issue 10 item 1: a human's claim or decision cannot make an operation sendable while an
/// attempt cut off by it may still be on the wire; the row keeps that attempt's lease, and the
/// store claims nothing under a live lease.
#[test]
fn human_decisions_keep_a_live_attempt_lease_and_nothing_else_does() {
    let now = 1_000;
    let claim = Event::ReviewClaim {
        reviewer: "alice".into(),
    };
    assert!(ok(Row::typical(State::InFlight), &claim, now).keep_lease);
    assert!(ok(Row::typical(State::ManualReview), &claim, now).keep_lease);
    // A second review cycle: the RETRY_READY row a reviewer re-approved may still carry the
    // live attempt's lease (found by the simulation, seeds 44, 1536, 2040).
    assert!(ok(Row::typical(State::RetryReady), &claim, now).keep_lease);
    for from in [State::Unknown, State::Processing] {
        assert!(
            !ok(Row::typical(from), &claim, now).keep_lease,
            "a recovery lease on {from} guards no bytes on the wire"
        );
    }
    let escalate = Event::Escalate {
        reason: "budget".into(),
    };
    assert!(ok(Row::typical(State::InFlight), &escalate, now).keep_lease);
    assert!(ok(Row::typical(State::RetryReady), &escalate, now).keep_lease);
    assert!(!ok(Row::typical(State::Unknown), &escalate, now).keep_lease);
    let not_executed = ok(
        Row::typical(State::ManualReview),
        &Event::Review(ReviewDecision::ConfirmedNotExecuted),
        now,
    );
    assert_eq!(not_executed.to, State::RetryReady);
    assert!(not_executed.keep_lease);
    // An attempt's own result or its lease expiry ends it: the lease goes.
    let result = ok(
        Row::typical(State::InFlight),
        &attempt(Evidence::unknown("timeout")),
        now,
    );
    assert!(!result.keep_lease);
    assert!(!ok(Row::typical(State::InFlight), &Event::LeaseExpired, now).keep_lease);
}
