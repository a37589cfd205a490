//! Tests of the pure transition function (DESIGN.md "States", "Retries: one owner, one budget";
//! seed 000 "Put Query-First into the Runtime State Machine", "Route by Execution Evidence",
//! "Manual Takeover").
//!
//! Three layers: one unit test per allowed transition, a table over every forbidden
//! (state, event) pair, and property tests that drive random event sequences from `PREPARED`
//! and check the rules after every step. `BudgetPolicy::query_delay` and `validate` are tested
//! at the end, because the machine's scheduling is built on them.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

/// A fixed "now" for unit tests (ms since the epoch).
const T0: i64 = 1_700_000_000_000;
/// The default policy's window end for an operation first sent at `T0`.
const DEADLINE: i64 = T0 + 60_000;

/// The row fields the machine reads and writes, owned so a sequence can be replayed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Row {
    state: State,
    may_have_applied: bool,
    attempts_used: u32,
    queries_used: u32,
    deadline_ms: Option<i64>,
}

impl Row {
    /// A freshly recorded operation.
    fn prepared() -> Self {
        Row {
            state: State::Prepared,
            may_have_applied: false,
            attempts_used: 0,
            queries_used: 0,
            deadline_ms: None,
        }
    }

    /// A representative, reachable row for `state` under the default policy: one attempt sent at
    /// `T0`, one query used; everything after the first send may have applied except
    /// `RETRY_READY`, which is only entered on proof of non-execution.
    fn typical(state: State) -> Self {
        match state {
            State::Prepared => Row::prepared(),
            State::RetryReady => Row {
                state,
                may_have_applied: false,
                attempts_used: 1,
                queries_used: 1,
                deadline_ms: Some(DEADLINE),
            },
            State::InFlight => Row {
                state,
                may_have_applied: false,
                attempts_used: 1,
                queries_used: 0,
                deadline_ms: Some(DEADLINE),
            },
            _ => Row {
                state,
                may_have_applied: true,
                attempts_used: 1,
                queries_used: 1,
                deadline_ms: Some(DEADLINE),
            },
        }
    }

    fn may(self, may_have_applied: bool) -> Self {
        Row {
            may_have_applied,
            ..self
        }
    }

    fn attempts(self, attempts_used: u32) -> Self {
        Row {
            attempts_used,
            ..self
        }
    }

    fn queries(self, queries_used: u32) -> Self {
        Row {
            queries_used,
            ..self
        }
    }

    fn deadline(self, deadline_ms: Option<i64>) -> Self {
        Row {
            deadline_ms,
            ..self
        }
    }

    fn snapshot<'a>(&self, policy: &'a BudgetPolicy) -> Snapshot<'a> {
        Snapshot {
            state: self.state,
            may_have_applied: self.may_have_applied,
            attempts_used: self.attempts_used,
            queries_used: self.queries_used,
            deadline_ms: self.deadline_ms,
            policy,
        }
    }

    /// The row after an allowed transition.
    fn after(t: &Transition) -> Self {
        Row {
            state: t.to,
            may_have_applied: t.may_have_applied,
            attempts_used: t.attempts_used,
            queries_used: t.queries_used,
            deadline_ms: t.deadline_ms,
        }
    }
}

fn clock(now_ms: i64) -> Clock {
    Clock {
        now_ms,
        jitter: 0.5,
    }
}

fn run(row: Row, event: &Event, now_ms: i64) -> Result<Transition, Refused> {
    transition(
        &row.snapshot(&BudgetPolicy::default()),
        event,
        clock(now_ms),
    )
}

#[track_caller]
fn ok(row: Row, event: &Event, now_ms: i64) -> Transition {
    match run(row, event, now_ms) {
        Ok(t) => t,
        Err(e) => panic!("{row:?} + {event:?} was refused: {e}"),
    }
}

#[track_caller]
fn refused(row: Row, event: &Event, now_ms: i64) -> Refused {
    match run(row, event, now_ms) {
        Ok(t) => panic!("{row:?} + {event:?} was allowed: {t:?}"),
        Err(e) => e,
    }
}

fn ms(n: u64) -> Option<Duration> {
    Some(Duration::from_millis(n))
}

fn attempt(e: Evidence) -> Event {
    Event::AttemptResult(e)
}

fn lookup(e: Evidence) -> Event {
    Event::LookupResult(e)
}

fn callback(e: Evidence) -> Event {
    Event::Callback(e)
}

fn escalate_ev() -> Event {
    Event::Escalate {
        reason: "operator asked".into(),
    }
}

fn succeeded(r: &str) -> Evidence {
    Evidence::Succeeded {
        remote_ref: Some(r.into()),
    }
}

fn processing(retry_after: Option<Duration>) -> Evidence {
    Evidence::Processing {
        retry_after,
        remote_ref: None,
    }
}

fn rejected() -> Evidence {
    Evidence::Rejected {
        reason: "400 invalid_request".into(),
    }
}

fn not_executed(retry_after: Option<Duration>) -> Evidence {
    Evidence::NotExecuted {
        why: "connection refused".into(),
        retry_after,
    }
}

fn unknown(retry_after: Option<Duration>) -> Evidence {
    Evidence::Unknown {
        why: "timeout".into(),
        retry_after,
    }
}

fn conflict(conflict: ConflictKind) -> Evidence {
    Evidence::Conflict { conflict }
}

/// One value of every evidence class.
fn all_evidence() -> Vec<Evidence> {
    vec![
        succeeded("W731"),
        processing(None),
        rejected(),
        not_executed(None),
        unknown(None),
        conflict(ConflictKind::Mismatch),
        conflict(ConflictKind::InFlight),
    ]
}

/// A representative list of every kind of event.
fn all_events() -> Vec<Event> {
    let mut v = vec![
        Event::ClaimSend,
        Event::LeaseExpired,
        Event::ClaimRecovery,
        escalate_ev(),
        Event::Review(ReviewDecision::ConfirmedSucceeded {
            remote_ref: Some("W731".into()),
        }),
        Event::Review(ReviewDecision::ConfirmedNotExecuted),
        Event::Review(ReviewDecision::KeepPending),
        Event::ReplaySafe {
            reason: "stored first response".into(),
        },
        Event::ReviewClaim {
            reviewer: "alice".into(),
        },
        Event::Withdraw {
            reason: "first send not authorized".into(),
        },
    ];
    v.extend(all_evidence().into_iter().map(attempt));
    v.extend(all_evidence().into_iter().map(lookup));
    v.extend(all_evidence().into_iter().map(callback));
    v
}

/// The allowed (state, event) pairs, written from DESIGN.md's diagram independently of the code.
fn allowed(state: State, event: &Event) -> bool {
    use State::*;
    match event {
        Event::ClaimSend => matches!(state, Prepared | RetryReady),
        Event::AttemptResult(_) | Event::LeaseExpired => state == InFlight,
        Event::ClaimRecovery | Event::LookupResult(_) | Event::Callback(_) => {
            matches!(state, Unknown | Processing)
        }
        Event::Escalate { .. } => {
            matches!(
                state,
                Prepared | InFlight | Processing | Unknown | RetryReady
            )
        }
        // "Keep pending" changes nothing, so it is refused like any no-op.
        Event::Review(ReviewDecision::KeepPending) => false,
        Event::Review(_) => state == ManualReview,
        // Path (b) into RETRY_READY: only from UNKNOWN (never from PROCESSING: never re-create).
        Event::ReplaySafe { .. } => state == Unknown,
        // A reviewer can take over anything that is not terminal.
        Event::ReviewClaim { .. } => !state.is_terminal(),
        // "PREPARED ── never sent ──▶ REJECTED": a first send refused before any byte left.
        Event::Withdraw { .. } => state == Prepared,
    }
}

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

// ── sending ──────────────────────────────────────────────────────────────────────────────────

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

// ── one attempt's evidence ───────────────────────────────────────────────────────────────────

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

// ── recovery ─────────────────────────────────────────────────────────────────────────────────

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

// ── humans ───────────────────────────────────────────────────────────────────────────────────

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

// ── forbidden transitions ────────────────────────────────────────────────────────────────────

#[test]
fn every_pair_outside_the_diagram_is_refused() {
    let mut allowed_pairs = 0;
    let mut refused_pairs = 0;
    for state in State::ALL {
        for event in all_events() {
            let row = Row::typical(state);
            let r = run(row, &event, T0 + 1_000);
            if allowed(state, &event) {
                let t = r.unwrap_or_else(|e| panic!("{state} + {event:?} refused: {e}"));
                assert_ne!(t.to, State::Prepared, "{state} + {event:?}");
                allowed_pairs += 1;
            } else {
                let Err(e) = r else {
                    panic!("{state} + {event:?} must be refused")
                };
                assert_eq!(e.from, state, "{event:?}");
                assert_eq!(e.event, event.name());
                refused_pairs += 1;
            }
        }
    }
    // 2 claim_send + 8 from IN_FLIGHT + 30 recovery (claims, lookups and callbacks) + 5
    // escalate + 2 reviews + 1 replay_safe + 6 review claims + 1 withdraw.
    assert_eq!(allowed_pairs, 55);
    assert_eq!(refused_pairs, 8 * all_events().len() - 55);
}

#[test]
fn nothing_ever_returns_to_prepared() {
    // Every state, every event, several budgets and clocks.
    let rows = |state| {
        [
            Row::typical(state),
            Row::typical(state).may(false),
            Row::typical(state).attempts(3).queries(10),
            Row::typical(state).deadline(None),
        ]
    };
    for state in State::ALL {
        for row in rows(state) {
            for event in all_events() {
                for now in [T0, DEADLINE - 1, DEADLINE + 1] {
                    if let Ok(t) = run(row, &event, now) {
                        assert_ne!(t.to, State::Prepared, "{row:?} + {event:?} at {now}");
                    }
                }
            }
        }
    }
}

#[test]
fn nothing_leaves_a_terminal_state() {
    // Late evidence is refused here so the caller appends it to the log instead.
    for state in [State::Succeeded, State::Rejected] {
        for event in all_events() {
            let e = refused(Row::typical(state), &event, T0 + 1_000);
            assert_eq!(e.from, state);
        }
    }
}

#[test]
fn a_succeeded_operation_never_goes_back_to_processing() {
    let row = Row::typical(State::Succeeded);
    for event in [
        attempt(processing(None)),
        lookup(processing(ms(1_000))),
        lookup(Evidence::unknown("404")),
        Event::ClaimRecovery,
        Event::LeaseExpired,
    ] {
        assert_eq!(refused(row, &event, T0).from, State::Succeeded);
    }
}

#[test]
fn manual_review_never_regains_send_rights_by_itself() {
    let row = Row::typical(State::ManualReview);
    for event in all_events() {
        let r = run(row, &event, T0 + 1_000);
        match &event {
            Event::Review(ReviewDecision::ConfirmedNotExecuted) => {
                assert_eq!(r.unwrap().to, State::RetryReady);
            }
            Event::Review(ReviewDecision::ConfirmedSucceeded { .. }) => {
                assert_eq!(r.unwrap().to, State::Succeeded);
            }
            // Another reviewer re-claims: still MANUAL_REVIEW, old holders fenced out.
            Event::ReviewClaim { .. } => {
                let t = r.unwrap();
                assert_eq!(t.to, State::ManualReview);
                assert!(t.bump_generation);
            }
            _ => {
                // A late W731 after takeover is appended and notifies; it moves nothing.
                let Err(e) = r else {
                    panic!("{event:?} must not move MANUAL_REVIEW")
                };
                assert_eq!(e.from, State::ManualReview);
            }
        }
    }
}

#[test]
fn refusal_names_the_event_and_state() {
    let e = refused(Row::typical(State::Succeeded), &Event::ClaimSend, T0);
    assert_eq!(
        e.to_string(),
        "claim_send is not allowed in state SUCCEEDED"
    );
    let e = refused(
        Row::typical(State::ManualReview),
        &Event::Review(ReviewDecision::KeepPending),
        T0,
    );
    assert!(
        e.to_string()
            .starts_with("review is not allowed in state MANUAL_REVIEW: ")
    );
}

// ── property tests ───────────────────────────────────────────────────────────────────────────

fn arb_policy() -> impl Strategy<Value = BudgetPolicy> {
    (
        1u32..=4,
        0u32..=8,
        1u64..=60_000,
        1u64..=5_000,
        1u64..=2_000,
        0u64..=500,
        0u64..=5_000,
    )
        .prop_map(
            |(max_attempts, max_queries, window_ms, timeout, margin, base, extra)| BudgetPolicy {
                max_attempts,
                max_queries,
                window_ms,
                attempt_timeout_ms: timeout,
                lease_margin_ms: margin,
                query_backoff_base_ms: base,
                query_backoff_cap_ms: base + extra,
            },
        )
}

fn arb_hint() -> impl Strategy<Value = Option<Duration>> {
    prop::option::of((0u64..=20_000).prop_map(Duration::from_millis))
}

fn arb_evidence() -> impl Strategy<Value = Evidence> {
    prop_oneof![
        prop::option::of((0u16..1000).prop_map(|n| format!("W{n}")))
            .prop_map(|remote_ref| Evidence::Succeeded { remote_ref }),
        (arb_hint(), prop::option::of(Just("W731".to_owned()))).prop_map(
            |(retry_after, remote_ref)| Evidence::Processing {
                retry_after,
                remote_ref
            }
        ),
        Just(rejected()),
        arb_hint().prop_map(not_executed),
        arb_hint().prop_map(unknown),
        Just(conflict(ConflictKind::Mismatch)),
        Just(conflict(ConflictKind::InFlight)),
    ]
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => Just(Event::ClaimSend),
        4 => arb_evidence().prop_map(Event::AttemptResult),
        1 => Just(Event::LeaseExpired),
        3 => Just(Event::ClaimRecovery),
        4 => arb_evidence().prop_map(Event::LookupResult),
        2 => arb_evidence().prop_map(Event::Callback),
        1 => Just(escalate_ev()),
        1 => Just(Event::Review(ReviewDecision::ConfirmedSucceeded { remote_ref: None })),
        1 => Just(Event::Review(ReviewDecision::ConfirmedNotExecuted)),
        1 => Just(Event::Review(ReviewDecision::KeepPending)),
        2 => Just(Event::ReplaySafe { reason: "contract".into() }),
        1 => Just(Event::ReviewClaim { reviewer: "alice".into() }),
    ]
}

fn arb_state() -> impl Strategy<Value = State> {
    prop::sample::select(State::ALL.to_vec())
}

/// Any row, reachable or not (counters within the policy's limits).
fn arb_row(policy: &BudgetPolicy) -> impl Strategy<Value = Row> + use<> {
    (
        arb_state(),
        any::<bool>(),
        0..=policy.max_attempts,
        0..=policy.max_queries,
        prop::option::of(0i64..=60_000),
    )
        .prop_map(|(state, may, attempts, queries, deadline)| Row {
            state,
            may_have_applied: may,
            attempts_used: attempts,
            queries_used: queries,
            deadline_ms: deadline.map(|d| T0 + d),
        })
}

fn is_not_executed(event: &Event) -> bool {
    matches!(
        event,
        Event::LookupResult(Evidence::NotExecuted { .. })
            | Event::Callback(Evidence::NotExecuted { .. })
            | Event::Review(ReviewDecision::ConfirmedNotExecuted)
    )
}

/// The rules that hold for one step from any row (reachable or not).
fn check_step(
    policy: &BudgetPolicy,
    row: Row,
    event: &Event,
    clk: Clock,
) -> Result<Option<Transition>, TestCaseError> {
    let snap = row.snapshot(policy);
    let r = transition(&snap, event, clk);
    // (i) deterministic.
    prop_assert_eq!(&r, &transition(&snap, event, clk));
    let t = match r {
        Err(e) => {
            prop_assert_eq!(e.from, row.state);
            prop_assert_eq!(e.event, event.name());
            return Ok(None);
        }
        Ok(t) => t,
    };
    let ctx = format!("{row:?} + {event:?} at {} -> {t:?}", clk.now_ms);
    // (a) nothing returns to PREPARED.
    prop_assert_ne!(t.to, State::Prepared, "{}", ctx);
    // (b) nothing leaves SUCCEEDED / REJECTED.
    prop_assert!(!row.state.is_terminal(), "{}", ctx);
    // (c) MANUAL_REVIEW is left (or changed) only by a human.
    if row.state == State::ManualReview {
        prop_assert!(
            matches!(event, Event::Review(_) | Event::ReviewClaim { .. }),
            "{}",
            ctx
        );
        if matches!(event, Event::ReviewClaim { .. }) {
            prop_assert_eq!(t.to, State::ManualReview, "{}", ctx);
        }
        if t.to == State::RetryReady {
            prop_assert!(is_not_executed(event), "{}", ctx);
        }
    }
    if matches!(event, Event::Review(_)) {
        prop_assert_eq!(row.state, State::ManualReview, "{}", ctx);
    }
    // (d) the attempt limit holds; a claim at the limit escalates.
    if row.attempts_used <= policy.max_attempts {
        prop_assert!(t.attempts_used <= policy.max_attempts, "{}", ctx);
    }
    if *event == Event::ClaimSend && row.attempts_used >= policy.max_attempts {
        prop_assert_eq!(t.to, State::ManualReview, "{}", ctx);
    }
    // Only a granted send registers an attempt; only a review resets the counters.
    match (event, t.to) {
        (Event::ClaimSend, State::InFlight) => {
            prop_assert_eq!(t.attempts_used, row.attempts_used + 1, "{}", ctx);
            prop_assert!(t.deadline_ms.is_some(), "{}", ctx);
            if row.deadline_ms.is_some() {
                prop_assert_eq!(t.deadline_ms, row.deadline_ms, "{}", ctx);
            }
        }
        (Event::Review(ReviewDecision::ConfirmedNotExecuted), _) => {}
        _ => {
            prop_assert_eq!(t.attempts_used, row.attempts_used, "{}", ctx);
            prop_assert_eq!(t.deadline_ms, row.deadline_ms, "{}", ctx);
        }
    }
    if t.to == State::InFlight {
        prop_assert!(
            row.state.may_send() && *event == Event::ClaimSend,
            "{}",
            ctx
        );
        prop_assert!(t.bump_generation, "{}", ctx);
    }
    // Every lookup answer costs one query, whatever it leads to; a callback costs none.
    match event {
        Event::LookupResult(_) => {
            prop_assert_eq!(t.queries_used, row.queries_used + 1, "{}", ctx)
        }
        Event::Review(ReviewDecision::ConfirmedNotExecuted) => {}
        _ => prop_assert_eq!(t.queries_used, row.queries_used, "{}", ctx),
    }
    // (e) the sticky fact is cleared only by operation-level proof of non-execution.
    if row.may_have_applied && !t.may_have_applied {
        prop_assert!(is_not_executed(event), "{}", ctx);
        prop_assert!(t.operation_level, "{}", ctx);
    }
    if t.to == State::Succeeded {
        prop_assert!(t.may_have_applied, "{}", ctx);
    }
    // RETRY_READY means "safe to resend": either nothing may have applied (path (a)), or the
    // contract makes a same-key replay safe (path (b), which keeps the sticky fact).
    if t.to == State::RetryReady && !matches!(event, Event::ReplaySafe { .. }) {
        prop_assert!(
            !t.may_have_applied || row.state == State::RetryReady,
            "{}",
            ctx
        );
    }
    if matches!(event, Event::ReplaySafe { .. }) {
        prop_assert_eq!(row.state, State::Unknown, "{}", ctx);
        if t.to == State::RetryReady {
            prop_assert!(
                t.may_have_applied,
                "path (b) keeps the sticky fact: {}",
                ctx
            );
        }
    }
    if row.state == State::InFlight
        && !matches!(
            event,
            Event::AttemptResult(Evidence::NotExecuted { .. } | Evidence::Rejected { .. })
        )
    {
        prop_assert!(t.may_have_applied, "{}", ctx);
    }
    // (f) an attempt rejects the operation only when nothing may have applied; otherwise the
    // rejection must be about the operation itself.
    if t.to == State::Rejected {
        match event {
            Event::AttemptResult(_) => {
                prop_assert!(!row.may_have_applied, "{}", ctx);
                prop_assert!(!t.operation_level, "{}", ctx);
            }
            _ => prop_assert!(t.operation_level, "{}", ctx),
        }
    }
    // (g) claims fence the previous holder.
    match event {
        Event::ReviewClaim { .. } => {
            prop_assert!(t.bump_generation, "{}", ctx);
            prop_assert_eq!(t.to, State::ManualReview, "{}", ctx);
        }
        Event::ClaimSend if t.to == State::InFlight => prop_assert!(t.bump_generation, "{}", ctx),
        Event::ClaimRecovery if t.to == row.state => prop_assert!(t.bump_generation, "{}", ctx),
        Event::LeaseExpired => {
            prop_assert!(t.bump_generation, "{}", ctx);
            prop_assert_eq!(t.to, State::Unknown, "{}", ctx);
        }
        _ => {}
    }
    // (h) the next check is never in the past, and not scheduled past the window.
    if let Some(next) = t.next_check_ms {
        prop_assert!(next >= clk.now_ms, "{}", ctx);
        if matches!(
            event,
            Event::AttemptResult(_) | Event::LookupResult(_) | Event::Callback(_)
        ) && let Some(d) = t.deadline_ms
        {
            prop_assert!(next < d, "a check past the window must hand over: {}", ctx);
        }
    }
    // Hand-overs say why and keep a business result that is not a failure.
    if t.to == State::ManualReview {
        prop_assert!(t.reason.is_some(), "{}", ctx);
        prop_assert_eq!(t.next_check_ms, None, "{}", ctx);
        // A re-claim by another reviewer keeps the row's business result (`None`).
        let reclaim = row.state == State::ManualReview;
        prop_assert!(
            reclaim
                || matches!(
                    t.last_result,
                    Some(State::Prepared | State::RetryReady | State::Unknown | State::Processing)
                ),
            "{}",
            ctx
        );
    }
    if t.to.is_terminal() {
        prop_assert_eq!(t.last_result, Some(t.to), "{}", ctx);
        prop_assert_eq!(t.next_check_ms, None, "{}", ctx);
    }
    Ok(Some(t))
}

fn arb_steps() -> impl Strategy<Value = Vec<(Event, i64, f64)>> {
    // Mostly short steps, so operations live long enough inside their window to go deep.
    let step = prop_oneof![3 => 0i64..=500, 1 => 0i64..=8_000];
    prop::collection::vec((arb_event(), step, 0.0f64..1.0), 1..80)
}

proptest! {
    #[test]
    fn random_event_sequences_from_prepared_keep_every_rule(
        policy in arb_policy(),
        steps in arb_steps(),
    ) {
        let mut row = Row::prepared();
        let mut now = T0;
        let mut left_prepared = false;
        let mut was_terminal = false;
        for (event, dt, jitter) in &steps {
            now += dt;
            let clk = Clock { now_ms: now, jitter: *jitter };
            let before = row;
            let t = check_step(&policy, row, event, clk)?;
            if was_terminal {
                prop_assert!(t.is_none(), "{:?} moved a terminal operation", event);
            }
            if let Some(t) = t {
                row = Row::after(&t);
                // Reachable rows keep the budget and the meaning of each state.
                prop_assert!(row.attempts_used <= policy.max_attempts);
                if row.state == State::RetryReady && !matches!(event, Event::ReplaySafe { .. }) && before.state != State::RetryReady {
                    prop_assert!(!row.may_have_applied, "{:?}", row);
                }
                // A write that left the process may have applied; UNKNOWN and PROCESSING say so.
                if matches!(row.state, State::InFlight | State::Unknown | State::Processing) {
                    prop_assert!(row.deadline_ms.is_some(), "{:?} after {:?}", row, before);
                }
                if matches!(row.state, State::Unknown | State::Processing) {
                    prop_assert!(row.may_have_applied, "{:?} after {:?} + {:?}", row, before, event);
                }
            }
            left_prepared |= row.state != State::Prepared;
            if left_prepared {
                prop_assert_ne!(row.state, State::Prepared);
            }
            was_terminal |= row.state.is_terminal();
        }
    }

    #[test]
    fn any_row_any_event_keeps_the_step_rules(
        (policy, row) in arb_policy().prop_flat_map(|p| { let r = arb_row(&p); (Just(p), r) }),
        event in arb_event(),
        dt in 0i64..=70_000,
        jitter in 0.0f64..1.0,
    ) {
        check_step(&policy, row, &event, Clock { now_ms: T0 + dt, jitter })?;
    }
}

// ── BudgetPolicy ─────────────────────────────────────────────────────────────────────────────

mod budget_policy {
    use super::*;

    /// `min(cap, base * 2^n)` computed without overflow, independently of the code under test.
    fn ceiling(p: &BudgetPolicy, n: u32) -> u64 {
        let exp = (p.query_backoff_base_ms as u128) << n.min(64);
        exp.min(p.query_backoff_cap_ms as u128) as u64
    }

    fn arb_backoff() -> impl Strategy<Value = BudgetPolicy> {
        (0u64..=10_000, 0u64..=1_000_000).prop_map(|(base, extra)| BudgetPolicy {
            query_backoff_base_ms: base,
            query_backoff_cap_ms: base + extra,
            ..BudgetPolicy::default()
        })
    }

    proptest! {
        #[test]
        fn full_jitter_is_uniform_under_the_capped_exponential(
            p in arb_backoff(),
            n in 0u32..=64,
            unit in 0.0f64..1.0,
        ) {
            let top = ceiling(&p, n);
            let d = p.query_delay(n, None, unit).as_millis();
            prop_assert!(d <= top as u128, "{} > {}", d, top);
            // Full jitter: the delay scales with the random unit over the whole range
            // (not "half fixed, half random").
            let exact = top as f64 * unit;
            prop_assert!((d as f64 - exact).abs() < 1.0, "{} vs {}", d, exact);
            prop_assert_eq!(p.query_delay(n, None, 0.0), Duration::ZERO);
        }

        #[test]
        fn backoff_grows_with_n_up_to_the_cap(p in arb_backoff(), unit in 0.0f64..1.0) {
            let mut prev = Duration::ZERO;
            for n in 0..=64 {
                let d = p.query_delay(n, None, unit);
                prop_assert!(d >= prev, "n={}: {:?} < {:?}", n, d, prev);
                prop_assert!(d <= Duration::from_millis(p.query_backoff_cap_ms));
                prev = d;
            }
            // Past the doubling range the delay saturates at the cap, never wraps.
            if p.query_backoff_base_ms > 0 {
                let cap = p.query_backoff_cap_ms as f64 * unit;
                prop_assert!((p.query_delay(64, None, unit).as_millis() as f64 - cap).abs() < 1.0);
                prop_assert_eq!(p.query_delay(u32::MAX, None, unit), p.query_delay(64, None, unit));
            }
        }

        #[test]
        fn the_hint_is_a_minimum(
            p in arb_backoff(),
            n in 0u32..=64,
            unit in 0.0f64..1.0,
            hint_ms in 0u64..=2_000_000,
        ) {
            let hint = Duration::from_millis(hint_ms);
            let plain = p.query_delay(n, None, unit);
            let d = p.query_delay(n, Some(hint), unit);
            prop_assert!(d >= hint);
            prop_assert!(d >= plain);
            prop_assert_eq!(d, hint.max(plain));
        }

        #[test]
        fn larger_units_never_give_shorter_delays(
            p in arb_backoff(),
            n in 0u32..=64,
            a in 0.0f64..1.0,
            b in 0.0f64..1.0,
        ) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(p.query_delay(n, None, lo) <= p.query_delay(n, None, hi));
        }
    }

    #[test]
    fn default_backoff_values() {
        let p = BudgetPolicy::default();
        assert_eq!(p.query_delay(0, None, 0.5), Duration::from_millis(125));
        assert_eq!(p.query_delay(5, None, 0.5), Duration::from_millis(4_000));
        assert_eq!(p.query_delay(6, None, 0.5), Duration::from_millis(5_000));
        assert_eq!(p.query_delay(64, None, 0.5), Duration::from_millis(5_000));
        assert_eq!(
            p.query_delay(6, Some(Duration::from_millis(4_999)), 0.5),
            Duration::from_millis(5_000)
        );
        assert_eq!(
            p.query_delay(6, Some(Duration::from_millis(5_001)), 0.5),
            Duration::from_millis(5_001)
        );
    }

    #[test]
    fn extreme_backoff_saturates_instead_of_overflowing() {
        let p = BudgetPolicy {
            query_backoff_base_ms: u64::MAX / 2,
            query_backoff_cap_ms: u64::MAX,
            ..BudgetPolicy::default()
        };
        for n in [0, 1, 2, 63, 64, u32::MAX] {
            assert!(p.query_delay(n, None, 0.999_999) <= Duration::from_millis(u64::MAX));
        }
        // Out-of-range units are clamped to [0, 1].
        let p = BudgetPolicy::default();
        assert_eq!(p.query_delay(3, None, -1.0), Duration::ZERO);
        assert_eq!(p.query_delay(3, None, 7.0), Duration::from_millis(2_000));
        assert_eq!(p.query_delay(3, None, f64::NAN), Duration::ZERO);
    }

    #[test]
    fn validate_accepts_sane_policies() {
        BudgetPolicy::default().validate().unwrap();
        BudgetPolicy {
            max_attempts: 1,
            max_queries: 0,
            query_backoff_base_ms: 500,
            query_backoff_cap_ms: 500,
            ..BudgetPolicy::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn validate_rejects_each_nonsense_field() {
        let d = BudgetPolicy::default();
        let cases = [
            (
                BudgetPolicy {
                    max_attempts: 0,
                    ..d.clone()
                },
                "max_attempts",
            ),
            (
                BudgetPolicy {
                    attempt_timeout_ms: 0,
                    ..d.clone()
                },
                "attempt_timeout_ms",
            ),
            (
                BudgetPolicy {
                    lease_margin_ms: 0,
                    ..d.clone()
                },
                "lease_margin_ms",
            ),
            (
                BudgetPolicy {
                    query_backoff_base_ms: 10_001,
                    ..d.clone()
                },
                "query_backoff_base_ms",
            ),
            (
                BudgetPolicy {
                    window_ms: 9_999,
                    ..d.clone()
                },
                "window_ms",
            ),
        ];
        for (p, field) in cases {
            let err = p.validate().expect_err(field);
            assert_eq!(err.field(), field);
            assert!(err.to_string().contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn the_lease_outlives_the_attempt() {
        let p = BudgetPolicy {
            attempt_timeout_ms: 7_000,
            lease_margin_ms: 1,
            ..BudgetPolicy::default()
        };
        assert_eq!(p.attempt_timeout(), Duration::from_millis(7_000));
        assert_eq!(p.lease(), Duration::from_millis(7_001));
    }
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
