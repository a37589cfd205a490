//! Checks of recovery's claims and the lease sweep: `claim_due` picks due, unleased rows in
//! order within its limit and fences them with a lease; `sweep_expired` moves only expired
//! `IN_FLIGHT` rows; of 32 racing senders exactly one wins the claim.

use std::sync::Arc;

use super::fixtures::{RawChanges, T0, evidence_entry, keep, new_operation, update_of};
use super::helpers::{apply_ok, create, get, ids, kinds, log, must, put};
use crate::ledger::{Ledger, NewEvidence, OperationRecord};
use crate::operation::{AttemptId, Generation};
use crate::state::{Event, State, Tick, transition};

/// `claim_due` takes exactly the `UNKNOWN`/`PROCESSING`/`RETRY_READY` rows whose next check is due and whose
/// lease is absent or over; each claimed row gets generation+1, version+1, the new lease and a
/// `recovery_claimed` entry. Every other row is untouched.
pub async fn claim_due_picks_only_due_unleased_recovery_rows<L: Ledger>(ledger: L) {
    let now = T0 + 1_000;
    let lease_ms = 10_000;
    let a = put(
        &ledger,
        "a-unknown-due",
        State::Unknown,
        Some(T0 + 100),
        None,
    )
    .await;
    let b = put(
        &ledger,
        "b-processing-lease-over",
        State::Processing,
        Some(T0 + 200),
        Some(T0 + 500),
    )
    .await;
    let c = put(&ledger, "c-not-due", State::Unknown, Some(T0 + 2_000), None).await;
    let d = put(
        &ledger,
        "d-leased",
        State::Unknown,
        Some(T0 + 300),
        Some(T0 + 5_000),
    )
    .await;
    let e = put(
        &ledger,
        "e-retry-ready",
        State::RetryReady,
        Some(T0 + 100),
        None,
    )
    .await;
    let f = put(
        &ledger,
        "f-in-flight",
        State::InFlight,
        Some(T0 + 100),
        None,
    )
    .await;
    let g = put(&ledger, "g-no-next-check", State::Unknown, None, None).await;
    let h = put(
        &ledger,
        "h-lease-ends-now",
        State::Processing,
        Some(T0 + 400),
        Some(now),
    )
    .await;
    let i = put(&ledger, "i-due-now", State::Unknown, Some(now), None).await;
    let j = put(
        &ledger,
        "j-manual-review",
        State::ManualReview,
        Some(T0 + 100),
        None,
    )
    .await;
    let k = put(
        &ledger,
        "k-succeeded",
        State::Succeeded,
        Some(T0 + 100),
        None,
    )
    .await;
    let l = put(&ledger, "l-prepared", State::Prepared, Some(T0 + 100), None).await;

    let claimed = must(ledger.claim_due(now, lease_ms, 100).await, "claim_due");
    assert_eq!(
        ids(&claimed),
        [
            "a-unknown-due",
            "e-retry-ready",
            "b-processing-lease-over",
            "h-lease-ends-now",
            "i-due-now"
        ],
        "claimed rows, in next-check order"
    );
    for (before, after) in [&a, &e, &b, &h, &i].into_iter().zip(&claimed) {
        let expected = OperationRecord {
            generation: before.generation.next(),
            version: before.version + 1,
            lease_until_ms: Some(now + lease_ms),
            updated_ms: now,
            ..before.clone()
        };
        assert_eq!(after, &expected);
        assert_eq!(&get(&ledger, before).await, &expected);
        let entries = log(&ledger, before).await;
        let last = &entries[entries.len() - 1].entry;
        assert_eq!(
            last,
            &NewEvidence {
                attempt_id: None,
                generation: expected.generation,
                kind: "recovery_claimed".into(),
                from_state: Some(before.state),
                to_state: Some(before.state),
                evidence: None,
                note: None,
                at_ms: now,
            }
        );
    }
    for untouched in [&c, &d, &f, &g, &j, &k, &l] {
        assert_eq!(&get(&ledger, untouched).await, untouched);
        assert_eq!(kinds(&log(&ledger, untouched).await), ["created", "setup"]);
    }
}

/// `claim_due` takes at most `limit` rows, earliest next check first (ties in creation
/// order), and `limit` 0 claims nothing.
pub async fn claim_due_respects_limit_and_next_check_order<L: Ledger>(ledger: L) {
    for (id, next) in [
        ("n50", 50),
        ("n10", 10),
        ("n40", 40),
        ("n20", 20),
        ("tie-1", 30),
        ("tie-2", 30),
    ] {
        put(&ledger, id, State::Unknown, Some(T0 + next), None).await;
    }
    let now = T0 + 100;
    assert!(must(ledger.claim_due(now, 1_000, 0).await, "claim_due").is_empty());
    let first = must(ledger.claim_due(now, 1_000, 2).await, "claim_due");
    assert_eq!(ids(&first), ["n10", "n20"]);
    let rest = must(ledger.claim_due(now, 1_000, 10).await, "claim_due");
    assert_eq!(ids(&rest), ["tie-1", "tie-2", "n40", "n50"]);
    assert!(must(ledger.claim_due(now, 1_000, 10).await, "claim_due").is_empty());
}

/// A claimed row is not claimed again until its lease is over; then it is, at the next
/// generation.
pub async fn claim_due_does_not_reclaim_while_leased<L: Ledger>(ledger: L) {
    let r = put(&ledger, "op-1", State::Unknown, Some(T0), None).await;
    let lease_ms = 5_000;
    let first = must(ledger.claim_due(T0 + 10, lease_ms, 10).await, "claim_due");
    assert_eq!(ids(&first), ["op-1"]);
    assert_eq!(first[0].generation, r.generation.next());

    assert!(must(ledger.claim_due(T0 + 10, lease_ms, 10).await, "claim_due").is_empty());
    assert!(
        must(
            ledger.claim_due(T0 + 10 + lease_ms - 1, lease_ms, 10).await,
            "claim_due"
        )
        .is_empty(),
        "claimed again while the lease runs"
    );
    let second = must(
        ledger.claim_due(T0 + 10 + lease_ms, lease_ms, 10).await,
        "claim_due",
    );
    assert_eq!(ids(&second), ["op-1"]);
    assert_eq!(second[0].generation, r.generation.next().next());
    assert_eq!(second[0].version, r.version + 2);
    assert_eq!(second[0].lease_until_ms, Some(T0 + 10 + 2 * lease_ms));
    assert_eq!(
        kinds(&log(&ledger, &r).await),
        ["created", "setup", "recovery_claimed", "recovery_claimed"]
    );
}

/// `sweep_expired` moves exactly the `IN_FLIGHT` rows whose lease ended before `now` to
/// `UNKNOWN` (never back to `PREPARED`): generation+1, `may_have_applied`, due now, lease
/// cleared, a `lease_expired` entry naming the attempt. Returned in creation order.
pub async fn sweep_expired_moves_only_expired_in_flight_rows<L: Ledger>(ledger: L) {
    let now = T0 + 1_000;
    let a = put(&ledger, "a-expired", State::InFlight, None, Some(T0 + 100)).await;
    let b = put(&ledger, "b-ends-now", State::InFlight, None, Some(now)).await;
    let c = put(
        &ledger,
        "c-running",
        State::InFlight,
        None,
        Some(T0 + 5_000),
    )
    .await;
    let d = put(
        &ledger,
        "d-unknown",
        State::Unknown,
        Some(T0 + 5_000),
        Some(T0 + 100),
    )
    .await;
    let e = put(&ledger, "e-in-flight-no-lease", State::InFlight, None, None).await;
    let attempt = AttemptId::generate();
    let f = {
        let r = create(
            &ledger,
            new_operation("tenant-a", "f-expired-with-attempt", "intent-f"),
        )
        .await;
        let changes = RawChanges {
            generation: Generation(1),
            attempts_used: 1,
            current_attempt: Some(attempt),
            lease_until_ms: Some(T0 + 50),
            deadline_ms: Some(T0 + 30_000),
            last_result: None,
            ..keep(&r, State::InFlight, T0)
        };
        apply_ok(&ledger, update_of(&r, changes, "attempt_registered")).await
    };

    let swept = must(ledger.sweep_expired(now).await, "sweep_expired");
    assert_eq!(ids(&swept), ["a-expired", "f-expired-with-attempt"]);
    for (before, after) in [&a, &f].into_iter().zip(&swept) {
        let expected = OperationRecord {
            state: State::Unknown,
            generation: before.generation.next(),
            version: before.version + 1,
            may_have_applied: true,
            next_check_ms: Some(now),
            lease_until_ms: None,
            reason: Some("attempt lease expired with no recorded result".to_owned()),
            updated_ms: now,
            ..before.clone()
        };
        assert_eq!(after, &expected);
        assert_eq!(&get(&ledger, before).await, &expected);
        let entries = log(&ledger, before).await;
        assert_eq!(
            entries[entries.len() - 1].entry,
            NewEvidence {
                attempt_id: before.current_attempt,
                generation: expected.generation,
                kind: "lease_expired".into(),
                from_state: Some(State::InFlight),
                to_state: Some(State::Unknown),
                evidence: None,
                note: None,
                at_ms: now,
            }
        );
    }
    assert_eq!(swept[1].current_attempt, Some(attempt));
    assert_eq!(swept[1].attempts_used, 1);
    assert_eq!(swept[1].deadline_ms, Some(T0 + 30_000));
    for untouched in [&b, &c, &d, &e] {
        assert_eq!(&get(&ledger, untouched).await, untouched);
    }
    assert!(must(ledger.sweep_expired(now).await, "sweep_expired").is_empty());
}

/// 32 senders compute the same `ClaimSend` from the same read and race: exactly one wins; the
/// row carries the winner's attempt and one `attempt_registered` entry.
pub async fn concurrent_claim_send_has_exactly_one_winner<L: Ledger>(ledger: L) {
    const SENDERS: usize = 32;
    let ledger = Arc::new(ledger);
    let r = create(
        &*ledger,
        new_operation("tenant-a", "op-race", "intent-race"),
    )
    .await;
    let barrier = Arc::new(tokio::sync::Barrier::new(SENDERS));
    let mut tasks = Vec::with_capacity(SENDERS);
    for i in 0..SENDERS {
        let (ledger, barrier, r) = (ledger.clone(), barrier.clone(), r.clone());
        tasks.push(tokio::spawn(async move {
            let now = T0 + 10;
            let t = match transition(
                &r.snapshot(),
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
            let lease = now + r.policy.lease().as_millis() as i64;
            let update = r.update_for(
                &t,
                Some(attempt),
                Some(lease),
                None,
                NewEvidence {
                    attempt_id: Some(attempt),
                    note: Some(format!("sender {i}")),
                    ..evidence_entry("attempt_registered", now)
                },
                now,
            );
            barrier.wait().await;
            let won = must(ledger.apply(update).await, "apply");
            won.map(|row| (attempt, row))
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Some(w)) => winners.push(w),
            Ok(None) => {}
            Err(e) => panic!("sender task failed: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one sender may win the claim");
    let (attempt, won) = &winners[0];
    assert_eq!(won.state, State::InFlight);
    assert_eq!(won.generation, Generation(1));
    assert_eq!(won.version, 1);
    assert_eq!(won.attempts_used, 1);
    assert_eq!(won.current_attempt, Some(*attempt));
    assert_eq!(&get(&*ledger, &r).await, won);
    let entries = log(&*ledger, &r).await;
    assert_eq!(kinds(&entries), ["created", "attempt_registered"]);
    assert_eq!(entries[1].entry.attempt_id, Some(*attempt));
}
