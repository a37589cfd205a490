//! Checks of the recoverer workers' heartbeats (one row per worker, replaced at each beat,
//! dead workers pruned) and of the count of overdue checks.

use super::fixtures::T0;
use super::helpers::must;
use super::listing::listed_row;
use crate::ledger::{
    DEAD_WORKER_RETENTION_MS, LedgerError, ListingLedger, TenantScope, WorkerHeartbeat,
};
use crate::operation::Tenant;
use crate::state::State;

fn beat(worker: &str, at_ms: i64, claimed_total: u64) -> WorkerHeartbeat {
    WorkerHeartbeat {
        worker_id: worker.to_owned(),
        host: "host-1".to_owned(),
        version: "0.0.0-test".to_owned(),
        started_ms: T0,
        interval_ms: 30_250,
        pass_started_ms: at_ms - 40,
        pass_finished_ms: at_ms,
        claimed_last_pass: 2,
        claimed_total,
        errors: 1,
        last_error: Some("ledger unavailable: connection reset".to_owned()),
    }
}

/// A beat replaces its worker's row (every field round-trips); the heartbeats come back most
/// recent first; a worker silent for longer than the retention is deleted by the next beat of
/// any worker; a beat without a worker id is refused.
pub async fn heartbeats_are_one_row_per_worker_and_dead_ones_pruned<L: ListingLedger>(ledger: L) {
    assert!(must(ledger.heartbeats().await, "heartbeats").is_empty());
    let old = beat("worker-old", T0, 0);
    must(ledger.record_heartbeat(old.clone()).await, "beat");
    let mut a = beat("worker-a", T0 + 1_000, 2);
    must(ledger.record_heartbeat(a.clone()).await, "beat");
    a.pass_finished_ms = T0 + 2_000;
    a.claimed_total = 5;
    a.errors = 0;
    a.last_error = None;
    must(ledger.record_heartbeat(a.clone()).await, "beat again");
    assert_eq!(
        must(ledger.heartbeats().await, "heartbeats"),
        vec![a.clone(), old.clone()],
        "one row per worker, the most recent beat first, every field as written"
    );

    // A week and a bit later, another worker beats: the old one's row goes, `a`'s is kept
    // until it too is past the retention.
    let later = T0 + DEAD_WORKER_RETENTION_MS + 1_500;
    let b = beat("worker-b", later, 0);
    must(ledger.record_heartbeat(b.clone()).await, "beat");
    assert_eq!(
        must(ledger.heartbeats().await, "heartbeats"),
        vec![b.clone(), a],
        "the worker silent for longer than the retention is pruned"
    );

    let mut nameless = beat("", later, 0);
    nameless.worker_id.clear();
    assert!(matches!(
        ledger.record_heartbeat(nameless).await,
        Err(LedgerError::Config(_))
    ));
}

/// `count_overdue` counts `UNKNOWN` and `RETRY_READY` rows whose next check is before the given
/// time, within the scope; `PROCESSING`, `MANUAL_REVIEW` and rows due later are not counted.
pub async fn count_overdue_counts_late_unknown_and_retry_ready_rows<L: ListingLedger>(ledger: L) {
    let late = T0 + 1_000;
    let rows = [
        ("tenant-a", "op-unknown-late", State::Unknown, Some(T0)),
        (
            "tenant-a",
            "op-retry-late",
            State::RetryReady,
            Some(T0 + 10),
        ),
        (
            "tenant-b",
            "op-unknown-late-b",
            State::Unknown,
            Some(T0 + 20),
        ),
        (
            "tenant-a",
            "op-unknown-soon",
            State::Unknown,
            Some(late + 60_000),
        ),
        ("tenant-a", "op-at-the-edge", State::Unknown, Some(late)),
        ("tenant-a", "op-processing", State::Processing, Some(T0)),
        ("tenant-a", "op-review", State::ManualReview, None),
    ];
    for (tenant, id, state, next) in rows {
        listed_row(&ledger, tenant, id, T0 - 5_000, state, "c", None, next).await;
    }
    let all = TenantScope::AllTenants;
    let a = TenantScope::Tenant(Tenant::new("tenant-a"));
    assert_eq!(must(ledger.count_overdue(&all, late).await, "overdue"), 3);
    assert_eq!(must(ledger.count_overdue(&a, late).await, "overdue"), 2);
    assert_eq!(
        must(ledger.count_overdue(&a, late + 1).await, "overdue"),
        3,
        "a next check equal to the bound is not before it"
    );
    assert_eq!(must(ledger.count_overdue(&all, T0).await, "overdue"), 0);
}
