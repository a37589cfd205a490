//! Recovery: claims, lookups and callbacks, and when the query budget or the window runs out.

use super::*;

#[test]
fn claim_recovery_bumps_the_generation_and_keeps_the_state() {
    for state in [State::Unknown, State::Processing] {
        let row = Row::typical(state);
        let t = ok(row, &Event::ClaimRecovery, T0 + 5_000);
        assert_eq!(t.to, state);
        assert!(t.bump_generation, "{state}");
        assert_eq!(Row::after(&t), row, "a claim changes no counter");
    }
}

#[test]
fn claim_recovery_escalates_when_the_window_is_spent() {
    for state in [State::Unknown, State::Processing] {
        let row = Row::typical(state);
        assert_eq!(ok(row, &Event::ClaimRecovery, DEADLINE - 1).to, state);
        let t = ok(row, &Event::ClaimRecovery, DEADLINE);
        assert_eq!(t.to, State::ManualReview, "{state}");
        assert_eq!(t.last_result, Some(state), "the business result is kept");
        assert!(t.may_have_applied);
        assert!(t.reason.is_some());
    }
}

#[test]
fn claim_recovery_escalates_when_the_query_budget_is_spent() {
    let max = BudgetPolicy::default().max_queries;
    let row = Row::typical(State::Unknown).queries(max - 1);
    assert_eq!(
        ok(row, &Event::ClaimRecovery, T0 + 1_000).to,
        State::Unknown
    );
    let t = ok(row.queries(max), &Event::ClaimRecovery, T0 + 1_000);
    assert_eq!(t.to, State::ManualReview);
    assert_eq!(t.last_result, Some(State::Unknown));
    assert!(t.reason.as_deref().unwrap().contains("query budget"));
}

#[test]
fn lookup_not_found_is_weak_evidence_and_the_state_stays() {
    let now = T0 + 5_000;
    for state in [State::Unknown, State::Processing] {
        let row = Row::typical(state);
        let t = ok(
            row,
            &lookup(Evidence::unknown("404 operation not found")),
            now,
        );
        assert_eq!(t.to, state, "404 proves nothing");
        assert!(t.may_have_applied);
        assert_eq!(t.queries_used, row.queries_used + 1);
        // The next query is number 2: uniform(0, 1000 ms) at jitter 0.5.
        assert_eq!(t.next_check_ms, Some(now + 500));
        assert!(!t.operation_level);
    }
}

#[test]
fn lookup_unknown_honours_retry_after() {
    let now = T0 + 5_000;
    let t = ok(
        Row::typical(State::Unknown),
        &lookup(unknown(ms(7_000))),
        now,
    );
    assert_eq!(t.to, State::Unknown);
    assert_eq!(t.next_check_ms, Some(now + 7_000));
}

#[test]
fn lookup_processing_waits_for_the_server_interval() {
    let now = T0 + 5_000;
    let t = ok(
        Row::typical(State::Unknown),
        &lookup(processing(ms(5_000))),
        now,
    );
    assert_eq!(t.to, State::Processing);
    assert!(t.may_have_applied);
    assert_eq!(t.queries_used, 2);
    assert_eq!(t.next_check_ms, Some(now + 5_000));
}

#[test]
fn lookup_succeeded_is_terminal_with_the_remote_ref() {
    for state in [State::Unknown, State::Processing] {
        let t = ok(Row::typical(state), &lookup(succeeded("W731")), T0 + 5_000);
        assert_eq!(t.to, State::Succeeded);
        assert_eq!(t.remote_ref.as_deref(), Some("W731"));
        assert_eq!(t.last_result, Some(State::Succeeded));
        assert_eq!(t.queries_used, 2);
        assert_eq!(t.next_check_ms, None);
    }
}

#[test]
fn lookup_succeeded_counts_even_after_the_window() {
    // Authoritative evidence is never refused for being late.
    let t = ok(
        Row::typical(State::Unknown),
        &lookup(succeeded("W731")),
        DEADLINE + 1,
    );
    assert_eq!(t.to, State::Succeeded);
}

#[test]
fn lookup_rejected_is_an_operation_level_rejection() {
    let row = Row::typical(State::Unknown);
    assert!(row.may_have_applied);
    let t = ok(row, &lookup(rejected()), T0 + 5_000);
    assert_eq!(t.to, State::Rejected);
    assert!(
        t.operation_level,
        "only operation-level evidence may reject after may-have-applied"
    );
    assert_eq!(t.reason.as_deref(), Some("400 invalid_request"));
    assert_eq!(t.last_result, Some(State::Rejected));
    assert_eq!(t.queries_used, 2);
}

#[test]
fn lookup_not_executed_is_retry_ready_and_clears_may_have_applied() {
    let row = Row::typical(State::Unknown);
    let now = T0 + 5_000;
    let t = ok(row, &lookup(not_executed(ms(1_000))), now);
    assert_eq!(t.to, State::RetryReady);
    assert!(
        !t.may_have_applied,
        "the vendor's own record says it never ran"
    );
    assert!(t.operation_level);
    assert_eq!(t.queries_used, 2);
    assert_eq!(t.next_check_ms, Some(now + 1_000));
    assert_eq!(t.attempts_used, row.attempts_used);
}

#[test]
fn lookup_not_executed_with_attempts_exhausted_escalates() {
    let row = Row::typical(State::Unknown).attempts(3);
    let t = ok(row, &lookup(not_executed(None)), T0 + 5_000);
    assert_eq!(t.to, State::ManualReview);
    assert_eq!(t.queries_used, row.queries_used + 1, "the query was made");
    assert!(t.reason.as_deref().unwrap().contains("exhausted"));
}

#[test]
fn lookup_conflict_is_weak_evidence() {
    for kind in [ConflictKind::InFlight, ConflictKind::Mismatch] {
        let row = Row::typical(State::Unknown);
        let now = T0 + 5_000;
        let t = ok(row, &lookup(conflict(kind)), now);
        assert_eq!(t.to, State::Unknown, "{kind:?}");
        assert_eq!(t.queries_used, 2);
        assert!(t.next_check_ms.is_some_and(|n| n >= now));
    }
}

#[test]
fn lookup_escalates_when_the_queries_run_out() {
    let max = BudgetPolicy::default().max_queries;
    let row = Row::typical(State::Unknown).queries(max - 1);
    let t = ok(row, &lookup(Evidence::unknown("404")), T0 + 5_000);
    assert_eq!(t.to, State::ManualReview);
    assert_eq!(t.last_result, Some(State::Unknown));
    assert_eq!(t.queries_used, max, "the last query is counted on the row");
    assert!(t.reason.as_deref().unwrap().contains("query budget"));
    // With one more query left it stays.
    let t = ok(row.queries(max - 2), &lookup(Evidence::unknown("404")), T0);
    assert_eq!(t.to, State::Unknown);
    // Decisive evidence on the last query is still taken.
    let t = ok(row, &lookup(succeeded("W731")), T0 + 5_000);
    assert_eq!(t.to, State::Succeeded);
}

/// Issue 27 item 11: a callback is the vendor's word, not a query. A vendor that keeps saying
/// "processing" must not spend the budget the recovery engine needs to verify the write.
#[test]
fn a_processing_callback_spends_no_query() {
    let max = BudgetPolicy::default().max_queries;
    let now = T0 + 5_000;
    // One query left: ten processing callbacks in a row leave it untouched.
    let mut row = Row::typical(State::Unknown).queries(max - 1);
    for _ in 0..10 {
        let t = ok(row, &callback(processing(None)), now);
        assert_eq!(t.to, State::Processing);
        assert_eq!(t.queries_used, max - 1, "a callback is not a query");
        row = Row { state: t.to, ..row };
    }
    // The same answer from a lookup is the last query, and hands over.
    let t = ok(row, &lookup(processing(None)), now);
    assert_eq!(t.to, State::ManualReview);
    assert_eq!(t.queries_used, max);
    // Decisive callbacks resolve as lookups do, also without counting.
    let t = ok(row, &callback(succeeded("W731")), now);
    assert_eq!(t.to, State::Succeeded);
    assert_eq!(t.remote_ref.as_deref(), Some("W731"));
    assert_eq!(t.queries_used, max - 1);
}

/// Issue 27 item 11: a processing answer that names the object records its reference, so a
/// later callback matched only by that reference finds the operation.
#[test]
fn processing_that_names_the_object_records_its_reference() {
    let named = Evidence::Processing {
        retry_after: None,
        remote_ref: Some("pi_1".into()),
    };
    for event in [lookup(named.clone()), callback(named.clone())] {
        let t = ok(Row::typical(State::Unknown), &event, T0 + 5_000);
        assert_eq!(t.to, State::Processing);
        assert_eq!(t.remote_ref.as_deref(), Some("pi_1"), "{event:?}");
    }
    let t = ok(Row::typical(State::InFlight), &attempt(named), T0 + 1_000);
    assert_eq!(t.to, State::Processing);
    assert_eq!(t.remote_ref.as_deref(), Some("pi_1"));
    // Without a reference the row keeps its own (`None` here means "unchanged").
    let t = ok(
        Row::typical(State::Unknown),
        &callback(processing(None)),
        T0 + 5_000,
    );
    assert_eq!(t.remote_ref, None);
}

#[test]
fn lookup_escalates_when_the_next_check_falls_past_the_deadline() {
    let row = Row::typical(State::Unknown);
    let now = DEADLINE - 2_000;
    let t = ok(row, &lookup(processing(ms(2_000))), now);
    assert_eq!(t.to, State::ManualReview);
    assert_eq!(t.last_result, Some(State::Processing));
    assert_eq!(t.queries_used, row.queries_used + 1, "the query was made");
    assert!(t.may_have_applied);
    let t = ok(row, &lookup(processing(ms(1_999))), now);
    assert_eq!(t.to, State::Processing);
    assert_eq!(t.next_check_ms, Some(DEADLINE - 1));
    // A resend the vendor allows only after the window is a hand-over too.
    let t = ok(row, &lookup(not_executed(ms(5_000))), now);
    assert_eq!(t.to, State::ManualReview);
}
