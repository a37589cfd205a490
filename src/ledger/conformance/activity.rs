//! Checks of the activity over time: operations created, finished and escalated per interval,
//! and the review backlog at each interval's end, from the evidence log's own times.

use super::fixtures::{T0, evidence_entry, keep, new_operation, update_of};
use super::helpers::{apply_ok, create, must};
use crate::ledger::{ActivityWindow, LedgerError, ListingLedger, OperationRecord, TenantScope};
use crate::operation::Tenant;
use crate::state::State;

/// Creates `id` of `tenant` at `created_ms`, then moves it through `steps` (state, time).
async fn history<L: ListingLedger>(
    ledger: &L,
    tenant: &str,
    id: &str,
    created_ms: i64,
    steps: &[(State, i64)],
) -> OperationRecord {
    let mut new = new_operation(tenant, id, &format!("intent-{id}"));
    new.now_ms = created_ms;
    let mut r = create(ledger, new).await;
    for &(state, at) in steps {
        r = apply_ok(ledger, update_of(&r, keep(&r, state, at), "setup")).await;
    }
    r
}

/// Per interval of one second: created, finished (`SUCCEEDED`, `REJECTED`) and escalated
/// (entered `MANUAL_REVIEW`) count each change once, in the interval of its logged time;
/// changes that keep the state (a claim for recovery) and notes count as nothing; changes
/// before the window are not counted and those after it only move the backlog, which is
/// walked back from today's; another tenant's operations are counted only across tenants; a
/// window that does not divide into intervals is refused.
pub async fn activity_counts_changes_per_interval_and_the_backlog<L: ListingLedger>(ledger: L) {
    let s = |ms: i64| T0 + ms;
    // In review since before the window.
    history(
        &ledger,
        "tenant-a",
        "op-old",
        s(-5000),
        &[(State::ManualReview, s(-4000))],
    )
    .await;
    // Created and escalated in interval 0; a recovery-style claim that keeps the state in 3.
    let a = history(
        &ledger,
        "tenant-a",
        "op-a",
        s(100),
        &[(State::ManualReview, s(200))],
    )
    .await;
    apply_ok(
        &ledger,
        update_of(
            &a,
            keep(&a, State::ManualReview, s(3500)),
            "recovery_claimed",
        ),
    )
    .await;
    // Created in 1, unknown in 1, escalated in 2, resolved as succeeded in 3.
    history(
        &ledger,
        "tenant-a",
        "op-b",
        s(1100),
        &[
            (State::Unknown, s(1200)),
            (State::ManualReview, s(2100)),
            (State::Succeeded, s(3100)),
        ],
    )
    .await;
    // Created and rejected in 1.
    history(
        &ledger,
        "tenant-a",
        "op-c",
        s(1500),
        &[(State::Rejected, s(1600))],
    )
    .await;
    // Created in 2, a note in 2: still prepared.
    let d = history(&ledger, "tenant-a", "op-d", s(2500), &[]).await;
    must(
        ledger
            .append_evidence(&d.tenant, &d.operation_id, evidence_entry("note", s(2600)))
            .await,
        "append_evidence",
    );
    // After the window: created and escalated.
    history(
        &ledger,
        "tenant-a",
        "op-after",
        s(4500),
        &[(State::ManualReview, s(4600))],
    )
    .await;
    // Another tenant: created and escalated in 0.
    history(
        &ledger,
        "tenant-b",
        "op-x",
        s(100),
        &[(State::ManualReview, s(300))],
    )
    .await;

    let window = must(ActivityWindow::new(s(0), s(4000), 1000), "window");
    let a_scope = TenantScope::Tenant(Tenant::new("tenant-a"));
    let got = must(ledger.activity(&a_scope, window).await, "activity");
    let col = |f: fn(&crate::ledger::ActivityBucket) -> u64| -> Vec<u64> {
        got.buckets.iter().map(f).collect()
    };
    assert_eq!(got.buckets.len(), 4);
    assert_eq!(got.buckets[0].start_ms, s(0));
    assert_eq!(got.buckets[3].end_ms, s(4000));
    assert_eq!(col(|b| b.created), [1, 2, 1, 0], "created: {got:?}");
    assert_eq!(col(|b| b.finished), [0, 1, 0, 1], "finished: {got:?}");
    assert_eq!(col(|b| b.escalated), [1, 0, 1, 0], "escalated: {got:?}");
    // In review at each end: op-old and op-a; op-b too from 2100 until 3100.
    assert_eq!(col(|b| b.backlog), [2, 2, 3, 2], "backlog: {got:?}");
    assert_eq!(got.backlog_now, 3, "op-old, op-a and op-after");

    let all = must(
        ledger.activity(&TenantScope::AllTenants, window).await,
        "activity across tenants",
    );
    let col = |f: fn(&crate::ledger::ActivityBucket) -> u64| -> Vec<u64> {
        all.buckets.iter().map(f).collect()
    };
    assert_eq!(col(|b| b.created), [2, 2, 1, 0], "{all:?}");
    assert_eq!(col(|b| b.escalated), [2, 0, 1, 0], "{all:?}");
    assert_eq!(col(|b| b.backlog), [3, 3, 4, 3], "{all:?}");
    assert_eq!(all.backlog_now, 4);

    let empty = TenantScope::Tenant(Tenant::new("tenant-none"));
    let none = must(ledger.activity(&empty, window).await, "activity of no rows");
    assert!(
        none.buckets
            .iter()
            .all(|b| b.created + b.finished + b.escalated + b.backlog == 0),
        "{none:?}"
    );

    let bad = ActivityWindow {
        since_ms: s(0),
        until_ms: s(3500),
        bucket_ms: 1000,
    };
    assert!(matches!(
        ledger.activity(&a_scope, bad).await,
        Err(LedgerError::Config(_))
    ));
}
