//! Issue 30 item 1, "Is the engine running?": every pass of a running recoverer records its
//! worker's heartbeat in the ledger (worker id, host, version, the pass, rows claimed, errors),
//! a failed pass is counted with its message, and the heartbeat is what the operators' tools
//! read ([`EngineHealth`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use recoverable_write::State;
use recoverable_write::clock::ProcessClock;
use recoverable_write::ledger::{
    BoxFuture, FullLedger, LedgerError, ListingLedger, MemoryLedger, TenantScope, WorkerHeartbeat,
};
use recoverable_write::reconcile::EngineHealth;
use recoverable_write::testing::drill::{Drill, DrillOptions, new_op, send};
use recoverable_write::testing::{FakeVendor, ForwardingLedger, LedgerCall};

/// Polls the ledger until `worker`'s heartbeat satisfies `done` (bounded: 5 s of polls).
async fn beat_of(
    ledger: &dyn FullLedger,
    worker: &str,
    done: impl Fn(&WorkerHeartbeat) -> bool,
) -> WorkerHeartbeat {
    let mut last = None;
    for _ in 0..500 {
        let beats = ledger.heartbeats().await.expect("heartbeats");
        if let Some(b) = beats.into_iter().find(|b| b.worker_id == worker) {
            if done(&b) {
                return b;
            }
            last = Some(b);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{worker}'s heartbeat never got there; last: {last:?}");
}

fn now() -> i64 {
    use recoverable_write::clock::Clock;
    ProcessClock.now_ms()
}

/// A lost response left `UNKNOWN`; a running worker claims it, finds the ticket, and its
/// heartbeat says so: one row per worker with its id, host, version and what it claimed. The
/// engine's health then counts it alive, and the alarm of "no worker" is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_records_a_heartbeat_after_each_pass() {
    let drill = Drill::start().await;
    let op = new_op("intent-heartbeat");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut drill.writer(), drill.ticket_request(&op, "E17")).await;
    assert_eq!(drill.record(op.id()).await.state, State::Unknown);
    let before = EngineHealth::read(&*drill.ledger, &TenantScope::AllTenants, now())
        .await
        .expect("health");
    assert_eq!((before.alive, before.waiting), (0, 1));
    assert!(before.alarm().is_some(), "no worker and a row waits");

    let started = now();
    let engine = drill
        .recoverer
        .clone()
        .worker_id("worker-heartbeat-1")
        .interval(Duration::from_millis(20))
        .spawn();
    let beat = beat_of(&*drill.ledger, "worker-heartbeat-1", |b| {
        b.claimed_total >= 1
    })
    .await;
    let resolved = drill.record(op.id()).await;
    let first = beat_of(&*drill.ledger, "worker-heartbeat-1", |b| {
        b.pass_finished_ms > beat.pass_finished_ms
    })
    .await;
    engine.shutdown().await;

    assert_eq!(resolved.state, State::Succeeded);
    assert_eq!(beat.version, env!("CARGO_PKG_VERSION"));
    assert!(!beat.host.is_empty());
    assert!(beat.started_ms >= started, "{beat:?}");
    assert!(beat.pass_started_ms <= beat.pass_finished_ms, "{beat:?}");
    assert_eq!(
        beat.interval_ms, 2_020,
        "the pause plus the drill's 2 s lease"
    );
    assert_eq!((beat.errors, beat.last_error.as_deref()), (0, None));
    assert_eq!(
        first.started_ms, beat.started_ms,
        "one row, replaced at each beat"
    );
    let beats = drill.ledger.heartbeats().await.expect("heartbeats");
    assert_eq!(beats.len(), 1, "{beats:?}");

    let after = EngineHealth::read(&*drill.ledger, &TenantScope::AllTenants, now())
        .await
        .expect("health");
    assert_eq!(after.alive, 1);
    assert_eq!(after.alarm(), None);
    assert_eq!(drill.vendor.tickets_created(), 1, "found, never resent");
    assert_eq!(drill.vendor.posts_received(), 1);
}

/// Fails every claim of due work while `failing` is set.
#[derive(Debug)]
struct FailingClaims {
    inner: Arc<MemoryLedger>,
    failing: AtomicBool,
}

impl ForwardingLedger for FailingClaims {
    fn inner(&self) -> &dyn FullLedger {
        &*self.inner
    }

    fn around<'a, T, F>(&'a self, call: LedgerCall, f: F) -> BoxFuture<'a, Result<T, LedgerError>>
    where
        T: Send + 'a,
        F: FnOnce(&'a dyn FullLedger) -> BoxFuture<'a, Result<T, LedgerError>> + Send + 'a,
    {
        if call == LedgerCall::ClaimDue && self.failing.load(Ordering::SeqCst) {
            return Box::pin(async {
                Err(LedgerError::Unavailable(
                    "connection to postgres://rw:hunter2@db.internal/ops refused".into(),
                ))
            });
        }
        f(&*self.inner)
    }
}

/// A pass that fails is counted in the heartbeat with its message, without the password its
/// URL carried; the worker stays alive (it beats), and recovers once the ledger answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pass_is_counted_in_the_heartbeat_without_credentials() {
    let ledger = Arc::new(FailingClaims {
        inner: Arc::new(MemoryLedger::new()),
        failing: AtomicBool::new(true),
    });
    let drill = Drill::with_ledger(
        FakeVendor::start().await,
        ledger.clone(),
        DrillOptions::default(),
    );
    let op = new_op("intent-heartbeat-errors");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut drill.writer(), drill.ticket_request(&op, "E17")).await;
    assert_eq!(drill.record(op.id()).await.state, State::Unknown);
    let engine = drill
        .recoverer
        .clone()
        .worker_id("worker-errors")
        .interval(Duration::from_millis(20))
        .spawn();
    let failed = beat_of(&*drill.ledger, "worker-errors", |b| b.errors >= 2).await;
    let message = failed.last_error.clone().expect("the last error is kept");
    assert!(message.contains("refused"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    assert!(message.contains("postgres://db.internal/ops"), "{message}");
    assert_eq!(failed.claimed_total, 0);
    assert_eq!(drill.record(op.id()).await.state, State::Unknown);

    ledger.failing.store(false, Ordering::SeqCst);
    let recovered = beat_of(&*drill.ledger, "worker-errors", |b| b.claimed_total >= 1).await;
    engine.shutdown().await;
    assert!(
        recovered.errors >= failed.errors,
        "errors are counted since the start"
    );
    assert_eq!(drill.record(op.id()).await.state, State::Succeeded);
    assert_eq!(drill.vendor.tickets_created(), 1);
}
