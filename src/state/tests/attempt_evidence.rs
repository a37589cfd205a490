//! One attempt's evidence: what each class of answer does to the operation.

use super::*;

#[test]
fn attempt_succeeded_is_terminal_and_keeps_the_remote_ref() {
    let row = Row::typical(State::InFlight);
    let t = ok(row, &attempt(succeeded("W731")), T0 + 300);
    assert_eq!(t.to, State::Succeeded);
    assert_eq!(t.remote_ref.as_deref(), Some("W731"));
    assert_eq!(t.last_result, Some(State::Succeeded));
    assert!(t.may_have_applied);
    assert!(!t.bump_generation, "recording a result is not a claim");
    assert_eq!(t.next_check_ms, None);
    assert_eq!(t.attempts_used, 1);
}

#[test]
fn attempt_processing_schedules_a_check_with_backoff() {
    let row = Row::typical(State::InFlight);
    let now = T0 + 300;
    let t = ok(row, &attempt(processing(None)), now);
    assert_eq!(t.to, State::Processing);
    assert!(t.may_have_applied, "an accepted write may apply");
    // Query number 0: uniform(0, 250 ms) at jitter 0.5.
    assert_eq!(t.next_check_ms, Some(now + 125));
}

#[test]
fn attempt_processing_honours_retry_after_as_a_minimum() {
    let row = Row::typical(State::InFlight);
    let now = T0 + 300;
    let t = ok(row, &attempt(processing(ms(3_000))), now);
    assert_eq!(t.to, State::Processing);
    assert_eq!(
        t.next_check_ms,
        Some(now + 3_000),
        "the hint is longer: it wins"
    );
    // A hint shorter than the backoff does not shorten it.
    let row = row.queries(3); // query number 3: uniform(0, 2000 ms) → 1000 at jitter 0.5
    let t = ok(row, &attempt(processing(ms(10))), now);
    assert_eq!(t.next_check_ms, Some(now + 1_000));
}

#[test]
fn attempt_rejected_is_rejected_only_when_nothing_may_have_applied() {
    let row = Row::typical(State::InFlight).may(false);
    let t = ok(row, &attempt(rejected()), T0 + 300);
    assert_eq!(t.to, State::Rejected);
    assert_eq!(t.last_result, Some(State::Rejected));
    assert_eq!(t.reason.as_deref(), Some("400 invalid_request"));
    assert!(!t.operation_level, "this is evidence about one attempt");
    assert!(!t.may_have_applied);
}

#[test]
fn attempt_rejected_after_an_earlier_attempt_may_have_applied_is_unknown() {
    // "a 400 for a replay says nothing about the first send"
    let row = Row::typical(State::InFlight).may(true).attempts(2);
    let now = T0 + 20_000;
    let t = ok(row, &attempt(rejected()), now);
    assert_eq!(t.to, State::Unknown);
    assert!(t.may_have_applied, "the sticky fact stays");
    assert!(!t.operation_level);
    assert_ne!(t.last_result, Some(State::Rejected));
    assert!(t.next_check_ms.is_some_and(|n| n >= now));
}

#[test]
fn attempt_not_executed_with_budget_left_is_retry_ready() {
    let row = Row::typical(State::InFlight).may(false);
    let now = T0 + 300;
    let t = ok(row, &attempt(not_executed(None)), now);
    assert_eq!(t.to, State::RetryReady);
    assert!(!t.may_have_applied);
    assert_eq!(t.next_check_ms, Some(now));
    assert_eq!(t.attempts_used, 1, "the unsent attempt still counts");
    // A vendor hint (Stripe 429 Retry-After) delays the resend.
    let t = ok(row, &attempt(not_executed(ms(2_000))), now);
    assert_eq!(t.to, State::RetryReady);
    assert_eq!(t.next_check_ms, Some(now + 2_000));
}

#[test]
fn attempt_not_executed_with_attempts_exhausted_escalates() {
    let row = Row::typical(State::InFlight).may(false).attempts(3);
    let t = ok(row, &attempt(not_executed(None)), T0 + 300);
    assert_eq!(t.to, State::ManualReview);
    assert!(
        !t.may_have_applied,
        "proven unsent: nothing may have applied"
    );
    assert!(t.reason.as_deref().unwrap().contains("exhausted"));
    assert!(
        !matches!(
            t.last_result,
            Some(State::Rejected | State::Succeeded) | None
        ),
        "attempts exhausted is never a business result: {:?}",
        t.last_result
    );
}

#[test]
fn attempt_not_executed_after_an_earlier_attempt_may_have_applied_is_unknown() {
    let row = Row::typical(State::InFlight).may(true).attempts(2);
    let t = ok(row, &attempt(not_executed(None)), T0 + 20_000);
    assert_eq!(
        t.to,
        State::Unknown,
        "this attempt's proof says nothing about the first"
    );
    assert!(t.may_have_applied);
}

#[test]
fn attempt_unknown_sets_may_have_applied() {
    let row = Row::typical(State::InFlight).may(false);
    let now = T0 + 10_000;
    let t = ok(row, &attempt(unknown(ms(4_000))), now);
    assert_eq!(t.to, State::Unknown);
    assert!(
        t.may_have_applied,
        "a timeout after the request left proves nothing"
    );
    assert_eq!(t.next_check_ms, Some(now + 4_000));
    assert_eq!(t.reason.as_deref(), Some("timeout"));
    assert!(!t.bump_generation);
}

#[test]
fn attempt_conflict_in_flight_is_unknown() {
    let row = Row::typical(State::InFlight).may(false);
    let now = T0 + 300;
    let t = ok(row, &attempt(conflict(ConflictKind::InFlight)), now);
    assert_eq!(t.to, State::Unknown);
    assert!(
        t.may_have_applied,
        "a competing request with this key may apply"
    );
    assert!(t.next_check_ms.is_some_and(|n| n >= now));
}

#[test]
fn attempt_conflict_mismatch_hands_over() {
    let row = Row::typical(State::InFlight).may(false);
    let t = ok(row, &attempt(conflict(ConflictKind::Mismatch)), T0 + 300);
    assert_eq!(t.to, State::ManualReview);
    assert!(
        t.may_have_applied,
        "the key was used: something may have applied"
    );
    assert_eq!(t.last_result, Some(State::Unknown));
    assert!(t.reason.is_some());
    assert_eq!(t.next_check_ms, None);
}

#[test]
fn attempt_hint_past_the_window_hands_over() {
    // DESIGN: "if the hint lands past the deadline ... the operation goes to MANUAL_REVIEW";
    // seed 000: "if Retry-After exceeds the remaining window, hand off".
    let row = Row::typical(State::InFlight).may(false);
    let now = DEADLINE - 5_000;
    for (evidence, business) in [
        (processing(ms(10_000)), State::Processing),
        (unknown(ms(10_000)), State::Unknown),
    ] {
        let t = ok(row, &attempt(evidence.clone()), now);
        assert_eq!(t.to, State::ManualReview, "{evidence:?}");
        assert_eq!(t.last_result, Some(business), "{evidence:?}");
        assert!(t.may_have_applied, "{evidence:?}");
        assert_eq!(t.next_check_ms, None);
    }
    // A resend that may only go after the window has closed.
    let t = ok(row, &attempt(not_executed(ms(10_000))), now);
    assert_eq!(t.to, State::ManualReview);
    assert!(!t.may_have_applied);
    // The same hints inside the window are honoured.
    let t = ok(row, &attempt(processing(ms(4_000))), now);
    assert_eq!(t.to, State::Processing);
    assert_eq!(t.next_check_ms, Some(now + 4_000));
}
