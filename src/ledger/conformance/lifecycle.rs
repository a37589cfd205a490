//! A whole lifecycle through the store: a lost response, the lease sweep, a refused late result
//! and recovery by a lookup.

use super::fixtures::{T0, evidence_entry, new_operation};
use super::helpers::{apply_ok, create, get, ids, log, must, step};
use crate::evidence::Evidence;
use crate::ledger::{Ledger, NewEvidence, OperationRecord};
use crate::operation::{AttemptId, Generation};
use crate::state::{Event, State};

/// Drill D1/D16/D17 through the store: the attempt is registered, its response is lost, the
/// lease runs out and the sweep makes it `UNKNOWN`; the stale sender's late result is refused;
/// recovery claims it and a lookup finds `W731`: `SUCCEEDED`, with the whole story in the log.
pub async fn lifecycle_lost_response_recovered_by_lookup<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-204", "intent-7781")).await;

    // PREPARED → IN_FLIGHT (register, then send).
    let t1 = T0 + 10;
    let claim = step(&r, &Event::ClaimSend, t1);
    let attempt = AttemptId::generate();
    let lease_until = t1 + r.policy.lease().as_millis() as i64;
    let in_flight = apply_ok(
        &ledger,
        r.update_for(
            &claim,
            Some(attempt),
            Some(lease_until),
            None,
            NewEvidence {
                attempt_id: Some(attempt),
                ..evidence_entry("attempt_registered", t1)
            },
            t1,
        ),
    )
    .await;
    assert_eq!(in_flight.state, State::InFlight);
    assert_eq!(in_flight.generation, Generation(1));
    assert_eq!(in_flight.attempts_used, 1);
    assert_eq!(in_flight.deadline_ms, Some(t1 + r.policy.window_ms as i64));

    // The response is lost; nothing is recorded. Before the lease ends, the sweep leaves it.
    assert!(must(ledger.sweep_expired(lease_until).await, "sweep").is_empty());
    let t2 = lease_until + 1;
    let swept = must(ledger.sweep_expired(t2).await, "sweep");
    assert_eq!(ids(&swept), ["op-204"]);
    let unknown = swept[0].clone();
    assert_eq!(unknown.state, State::Unknown);
    assert_eq!(unknown.generation, Generation(2));
    assert!(unknown.may_have_applied);
    assert_eq!(unknown.next_check_ms, Some(t2));

    // The original sender wakes up with a success: its generation is stale, the store refuses.
    let late = step(
        &in_flight,
        &Event::AttemptResult(Evidence::Succeeded {
            remote_ref: Some("W731".to_owned()),
        }),
        t2 + 1,
    );
    let stale = in_flight.update_for(
        &late,
        None,
        None,
        None,
        NewEvidence {
            attempt_id: Some(attempt),
            ..evidence_entry("attempt_result", t2 + 1)
        },
        t2 + 1,
    );
    assert_eq!(must(ledger.apply(stale).await, "apply"), None);

    // Recovery claims the due operation.
    let t3 = t2 + 5;
    let claimed = must(ledger.claim_due(t3, 3_000, 10).await, "claim_due");
    assert_eq!(ids(&claimed), ["op-204"]);
    let recovering = claimed[0].clone();
    assert_eq!(recovering.generation, Generation(3));
    assert_eq!(recovering.lease_until_ms, Some(t3 + 3_000));

    // The lookup by operation id finds W731.
    let t4 = t3 + 20;
    let found = Evidence::Succeeded {
        remote_ref: Some("W731".to_owned()),
    };
    let lookup = step(&recovering, &Event::LookupResult(found.clone()), t4);
    let done = apply_ok(
        &ledger,
        recovering.update_for(
            &lookup,
            None,
            None,
            None,
            NewEvidence {
                evidence: Some(found.clone()),
                ..evidence_entry("lookup", t4)
            },
            t4,
        ),
    )
    .await;
    let expected = OperationRecord {
        state: State::Succeeded,
        last_result: Some(State::Succeeded),
        generation: Generation(3),
        version: recovering.version + 1,
        queries_used: 1,
        may_have_applied: true,
        lease_until_ms: None,
        next_check_ms: None,
        remote_ref: Some("W731".to_owned()),
        // Success clears the reason the operation was unknown for.
        reason: None,
        updated_ms: t4,
        ..recovering.clone()
    };
    assert_eq!(done, expected);
    assert_eq!(get(&ledger, &r).await, expected);
    assert_eq!(
        done.idempotency_key, r.idempotency_key,
        "the key never changes"
    );
    assert_eq!(done.current_attempt, Some(attempt));

    // SUCCEEDED is terminal for the scheduler: nothing to claim or sweep.
    assert!(must(ledger.claim_due(t4 + 100_000, 3_000, 10).await, "claim_due").is_empty());
    assert!(must(ledger.sweep_expired(t4 + 100_000).await, "sweep").is_empty());

    let entries = log(&ledger, &r).await;
    let story: Vec<(&str, u64, Option<State>, Option<State>)> = entries
        .iter()
        .map(|e| {
            (
                &*e.entry.kind,
                e.entry.generation.0,
                e.entry.from_state,
                e.entry.to_state,
            )
        })
        .collect();
    assert_eq!(
        story,
        [
            ("created", 0, None, Some(State::Prepared)),
            (
                "attempt_registered",
                1,
                Some(State::Prepared),
                Some(State::InFlight)
            ),
            (
                "lease_expired",
                2,
                Some(State::InFlight),
                Some(State::Unknown)
            ),
            (
                "recovery_claimed",
                3,
                Some(State::Unknown),
                Some(State::Unknown)
            ),
            ("lookup", 3, Some(State::Unknown), Some(State::Succeeded)),
        ]
    );
    assert_eq!(entries[1].entry.attempt_id, Some(attempt));
    assert_eq!(entries[2].entry.attempt_id, Some(attempt));
    assert_eq!(entries[4].entry.evidence, Some(found));
}
