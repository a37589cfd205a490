//! Checks of `claim_prepared`: `PREPARED` rows left without an owner are claimed for recovery
//! when old and unleased, fenced by a lease, handed out disjointly to concurrent claimers, and
//! may still be claimed for sending.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::fixtures::{T0, evidence_entry, new_operation};
use super::helpers::{apply_ok, create, first_claim, get, ids, kinds, log, must, put, step};
use crate::ledger::{Ledger, NewOperation, OperationRecord, Update};
use crate::operation::{AttemptId, Generation};
use crate::state::{Event, State};

/// A new operation `id` created at `created_ms`.
pub(super) async fn create_at<L: Ledger>(ledger: &L, id: &str, created_ms: i64) -> OperationRecord {
    let new = NewOperation {
        now_ms: created_ms,
        ..new_operation("tenant-a", id, &format!("intent-{id}"))
    };
    create(ledger, new).await
}

/// The age and lease the `claim_prepared` checks use.
pub(super) const PREPARED_AGE_MS: i64 = 30_000;
pub(super) const PREPARED_LEASE_MS: i64 = 10_000;

/// Only `PREPARED` rows old enough and not leased are claimed, oldest first: generation and
/// version +1, the lease from now, still `PREPARED`, a `recovery_claimed` entry. Young rows,
/// rows already sent (`IN_FLIGHT`) and finished ones are left alone.
pub async fn claim_prepared_claims_only_old_unleased_prepared_rows<L: Ledger>(ledger: L) {
    // Created out of age order: the claim order is by creation time.
    let old_b = create_at(&ledger, "old-b", T0 + 1_000).await;
    let old_a = create_at(&ledger, "old-a", T0).await;
    let young = create_at(&ledger, "young", T0 + 50_000).await;
    let flying = put(&ledger, "flying", State::InFlight, None, Some(T0 + 1)).await;
    let done = put(&ledger, "done", State::Succeeded, None, None).await;
    let now = T0 + 60_000;
    assert!(
        must(
            ledger
                .claim_prepared(now, PREPARED_AGE_MS, PREPARED_LEASE_MS, 0)
                .await,
            "claim_prepared"
        )
        .is_empty(),
        "limit 0 claims nothing"
    );
    let claimed = must(
        ledger
            .claim_prepared(now, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&claimed), ["old-a", "old-b"]);
    for (row, before) in claimed.iter().zip([&old_a, &old_b]) {
        assert_eq!(row.state, State::Prepared);
        assert_eq!(row.generation, Generation(1));
        assert_eq!(row.version, 1);
        assert_eq!(row.lease_until_ms, Some(now + PREPARED_LEASE_MS));
        assert_eq!(row.updated_ms, now);
        assert_eq!(row.created_ms, before.created_ms);
        assert_eq!(row.request, before.request);
        assert_eq!(&get(&ledger, row).await, row);
        let entries = log(&ledger, row).await;
        assert_eq!(kinds(&entries), ["created", "recovery_claimed"]);
        let entry = &entries[1].entry;
        assert_eq!(entry.generation, Generation(1));
        assert_eq!(entry.from_state, Some(State::Prepared));
        assert_eq!(entry.to_state, Some(State::Prepared));
        assert_eq!(entry.at_ms, now);
    }
    for untouched in [&young, &flying, &done] {
        assert_eq!(&get(&ledger, untouched).await, untouched);
    }
}

/// A claimed `PREPARED` row is not claimed again while its lease runs; once it expires the row
/// is claimed again at the next generation.
pub async fn claim_prepared_lease_fences_a_second_claim_until_it_expires<L: Ledger>(ledger: L) {
    create_at(&ledger, "old", T0).await;
    let now = T0 + 60_000;
    let claim = |at: i64| ledger.claim_prepared(at, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10);
    let first = must(claim(now).await, "claim_prepared");
    assert_eq!(ids(&first), ["old"]);
    for at in [now, now + 1, now + PREPARED_LEASE_MS - 1] {
        assert!(
            must(claim(at).await, "claim_prepared").is_empty(),
            "claimed again at +{} ms while leased",
            at - now
        );
    }
    let again = must(claim(now + PREPARED_LEASE_MS).await, "claim_prepared");
    assert_eq!(ids(&again), ["old"]);
    assert_eq!(again[0].generation, Generation(2));
    assert_eq!(again[0].version, 2);
}

/// Concurrent claimers of old `PREPARED` rows get disjoint sets that together cover every row.
pub async fn concurrent_claim_prepared_gets_disjoint_rows<L: Ledger>(ledger: L) {
    const ROWS: usize = 24;
    const CLAIMERS: usize = 6;
    let ledger = Arc::new(ledger);
    for i in 0..ROWS {
        create_at(&*ledger, &format!("old-{i:02}"), T0 + i as i64).await;
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let mut tasks = Vec::with_capacity(CLAIMERS);
    for _ in 0..CLAIMERS {
        let (ledger, barrier) = (ledger.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut mine = Vec::new();
            loop {
                let got = must(
                    ledger
                        .claim_prepared(T0 + 60_000, PREPARED_AGE_MS, PREPARED_LEASE_MS, 3)
                        .await,
                    "claim_prepared",
                );
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|r| r.operation_id.to_string()));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        match task.await {
            Ok(mine) => all.extend(mine),
            Err(e) => panic!("claimer task failed: {e}"),
        }
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        distinct.len(),
        all.len(),
        "a row was claimed twice: {all:?}"
    );
    assert_eq!(all.len(), ROWS, "every old row is claimed once");
}

/// A `PREPARED` row claimed for recovery is sent with the usual compare-and-swap at the claimed
/// generation (`PREPARED` → `IN_FLIGHT`); the creator's own first claim, which expects the
/// fresh row, is refused: one sender.
pub async fn a_prepared_row_claimed_for_recovery_can_be_claimed_for_sending<L: Ledger>(ledger: L) {
    let new = new_operation("tenant-a", "op-outbox", "intent-outbox");
    let r = create(&ledger, new.clone()).await;
    let now = T0 + 60_000;
    let claimed = must(
        ledger
            .claim_prepared(now, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&claimed), ["op-outbox"]);
    let row = &claimed[0];
    let t = step(row, &Event::ClaimSend, now + 1);
    let attempt = AttemptId::generate();
    let send = row.update_for(
        &t,
        Some(attempt),
        Some(now + 1 + row.policy.lease().as_millis() as i64),
        None,
        evidence_entry("attempt_registered", now + 1),
        now + 1,
    );
    let sent = apply_ok(&ledger, send).await;
    assert_eq!(sent.state, State::InFlight);
    assert_eq!(sent.generation, Generation(2));
    assert_eq!(sent.current_attempt, Some(attempt));
    assert_eq!(sent.attempts_used, 1);
    // The creator comes back with the claim it built on the fresh row: refused.
    let (_, stale) = first_claim(&new, now + 2, "creator");
    let stale = Update {
        expect_generation: r.generation,
        expect_version: r.version,
        ..stale
    };
    assert_eq!(must(ledger.apply(stale).await, "apply"), None);
    assert_eq!(get(&ledger, &r).await, sent);
    assert_eq!(
        kinds(&log(&ledger, &r).await),
        ["created", "recovery_claimed", "attempt_registered"]
    );
    // An IN_FLIGHT row is never claimed as PREPARED, however old.
    assert!(
        must(
            ledger
                .claim_prepared(now + 1_000_000, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
                .await,
            "claim_prepared"
        )
        .is_empty()
    );
}
