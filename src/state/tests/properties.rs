//! Property tests: random event sequences from `PREPARED`, the rules checked after every step.

use super::*;

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
    clk: Tick,
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
            let clk = Tick { now_ms: now, jitter: *jitter };
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
        check_step(&policy, row, &event, Tick { now_ms: T0 + dt, jitter })?;
    }
}
