//! Forbidden transitions: every (state, event) pair outside the diagram is refused.

use super::*;

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
