//! The SQLite ledger alone (no HTTP): what a commit costs, what group commit buys, and what
//! creating and claiming an operation in one transaction would save.
//!
//! ```text
//! cargo bench --bench ledger_commit
//! ```
//!
//! Every ledger is a file in a temp dir with `synchronous=FULL` (the default). Benchmarks:
//!
//! - `first_send/create_then_claim`: what the layer does today before the first byte leaves:
//!   `create_or_get`, then `apply` (the claim) once the row is back. Two commits, two fsyncs.
//! - `first_send/create_and_claim_one_commit`: the same two requests queued together, so the
//!   writer task runs them in one transaction (the claim is built from the row the create will
//!   insert: `PREPARED`, generation 0, version 0). One commit: what a combined
//!   `create_and_claim` ledger method would cost. Run on a current-thread runtime so both are
//!   always queued before the writer task runs (the table checks writes/commit).
//! - `first_send/create_only`: one commit, for reference.
//! - `lifecycle/concurrency_{1,64}/{group_commit,batch1}`: create, claim, record (the three
//!   writes of one request through the layer) from 1 or 64 tasks, with group commit on
//!   (default) and off (`max_batch(1)`), and with group commit but `synchronous=OFF` (no fsync:
//!   what the statements alone cost, the CPU ceiling of the write path).
//!
//! A table after criterion's report gives the median time per operation, and writes per commit.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use recoverable_write::ledger::conformance::{evidence_entry, keep, new_operation, update_of};
use recoverable_write::ledger::{
    Created, Ledger, NewOperation, OperationRecord, SqliteLedgerOptions, Synchronous, Update,
};
use recoverable_write::state::{Clock, Event, State, transition};
use recoverable_write::{AttemptId, Generation, SqliteLedger};

/// Mean ns per operation of every sample, and the writes/commit seen, keyed by benchmark.
static SAMPLES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

static NEXT: AtomicU64 = AtomicU64::new(0);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

fn fresh_operation() -> NewOperation {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let id = format!("op-{n:010}");
    let mut new = new_operation("tenant-a", &id, &format!("intent-{n:010}"));
    new.now_ms = now_ms();
    new
}

/// The row `create_or_get(new)` inserts, without asking the ledger.
fn predicted_row(new: &NewOperation) -> OperationRecord {
    OperationRecord {
        tenant: new.tenant.clone(),
        operation_id: new.operation_id.clone(),
        action: new.action.clone(),
        intent_ref: new.intent_ref.clone(),
        idempotency_key: new.idempotency_key.clone(),
        payload_hash: new.payload_hash.clone(),
        request: new.request.clone(),
        contract: new.contract.clone(),
        policy: new.policy.clone(),
        state: State::Prepared,
        last_result: None,
        generation: Generation(0),
        version: 0,
        attempts_used: 0,
        queries_used: 0,
        may_have_applied: false,
        current_attempt: None,
        lease_until_ms: None,
        next_check_ms: None,
        deadline_ms: None,
        remote_ref: None,
        reason: None,
        response: None,
        created_ms: new.now_ms,
        updated_ms: new.now_ms,
    }
}

/// The claim of send rights on `r`, as the layer builds it.
fn claim(r: &OperationRecord) -> Update {
    let now = now_ms();
    let t = transition(
        &r.snapshot(),
        &Event::ClaimSend,
        Clock {
            now_ms: now,
            jitter: 0.0,
        },
    )
    .expect("claim from PREPARED");
    r.update_for(
        &t,
        Some(AttemptId::generate()),
        Some(now + r.policy.lease().as_millis() as i64),
        None,
        evidence_entry("attempt_registered", now),
        now,
    )
}

fn claimed(
    result: Result<Option<OperationRecord>, recoverable_write::ledger::LedgerError>,
) -> OperationRecord {
    result.expect("apply").expect("claim precondition holds")
}

fn new_row(created: Created) -> OperationRecord {
    match created {
        Created::New(r) => r,
        Created::Existing(r) => panic!("{} already existed", r.operation_id),
    }
}

async fn create_then_claim(ledger: &SqliteLedger) {
    let r = new_row(
        ledger
            .create_or_get(fresh_operation())
            .await
            .expect("create"),
    );
    claimed(ledger.apply(claim(&r)).await);
}

async fn create_and_claim_one_commit(ledger: &SqliteLedger) {
    let new = fresh_operation();
    let update = claim(&predicted_row(&new));
    let (created, applied) = tokio::join!(ledger.create_or_get(new), ledger.apply(update));
    new_row(created.expect("create"));
    claimed(applied);
}

/// The three writes of one request through the layer: create, claim, record the result.
async fn lifecycle(ledger: &SqliteLedger) {
    let r = new_row(
        ledger
            .create_or_get(fresh_operation())
            .await
            .expect("create"),
    );
    let r = claimed(ledger.apply(claim(&r)).await);
    let done = keep(&r, State::Succeeded, now_ms());
    claimed(ledger.apply(update_of(&r, done, "attempt_result")).await);
}

fn record(name: &str, per_op_ns: f64) {
    SAMPLES
        .lock()
        .expect("samples")
        .entry(name.to_owned())
        .or_default()
        .push(per_op_ns);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let open = |rt: &tokio::runtime::Runtime, file: &str, options: SqliteLedgerOptions| {
        rt.block_on(SqliteLedger::open_with(dir.path().join(file), options))
            .expect("open ledger")
    };

    let mut c = Criterion::default()
        .sample_size(15)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    let mut per_commit: BTreeMap<String, f64> = BTreeMap::new();

    // ── first send: two commits or one ──
    let first = open(&current, "first_send.db", SqliteLedgerOptions::new());
    {
        let mut group = c.benchmark_group("first_send");
        let cases: [(&str, u8); 3] = [
            ("create_then_claim", 0),
            ("create_and_claim_one_commit", 1),
            ("create_only", 2),
        ];
        for (name, case) in cases {
            let (c0, w0) = (first.commits(), first.committed_writes());
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let elapsed = current.block_on(async {
                        let start = Instant::now();
                        for _ in 0..iters {
                            match case {
                                0 => create_then_claim(&first).await,
                                1 => create_and_claim_one_commit(&first).await,
                                _ => {
                                    new_row(
                                        first
                                            .create_or_get(fresh_operation())
                                            .await
                                            .expect("create"),
                                    );
                                }
                            }
                        }
                        start.elapsed()
                    });
                    record(
                        &format!("first_send/{name}"),
                        elapsed.as_nanos() as f64 / iters.max(1) as f64,
                    );
                    elapsed
                })
            });
            let (c1, w1) = (first.commits(), first.committed_writes());
            per_commit.insert(
                format!("first_send/{name}"),
                (w1 - w0) as f64 / (c1 - c0).max(1) as f64,
            );
        }
        group.finish();
    }

    // ── the three writes of a request, 1 or 64 at a time, batched or not ──
    let ledgers = [
        (
            "group_commit",
            open(&multi, "lifecycle.db", SqliteLedgerOptions::new()),
        ),
        (
            "batch1",
            open(
                &multi,
                "lifecycle_batch1.db",
                SqliteLedgerOptions::new().max_batch(1),
            ),
        ),
        // No fsync at all: what the statements alone cost (the CPU ceiling).
        (
            "group_commit_sync_off",
            open(
                &multi,
                "lifecycle_off.db",
                SqliteLedgerOptions::new().synchronous(Synchronous::Off),
            ),
        ),
    ];
    for concurrency in [1_u64, 64] {
        let mut group = c.benchmark_group(format!("lifecycle/concurrency_{concurrency}"));
        for (name, ledger) in &ledgers {
            let (c0, w0) = (ledger.commits(), ledger.committed_writes());
            group.bench_function(*name, |b| {
                b.iter_custom(|iters| {
                    let elapsed = multi.block_on(async {
                        let next = std::sync::Arc::new(AtomicU64::new(0));
                        let start = Instant::now();
                        let mut tasks = tokio::task::JoinSet::new();
                        for _ in 0..concurrency {
                            let (ledger, next) = (ledger.clone(), next.clone());
                            tasks.spawn(async move {
                                while next.fetch_add(1, Ordering::Relaxed) < iters {
                                    lifecycle(&ledger).await;
                                }
                            });
                        }
                        while let Some(done) = tasks.join_next().await {
                            done.expect("worker");
                        }
                        start.elapsed()
                    });
                    record(
                        &format!("lifecycle/concurrency_{concurrency}/{name}"),
                        elapsed.as_nanos() as f64 / iters.max(1) as f64,
                    );
                    elapsed
                })
            });
            let (c1, w1) = (ledger.commits(), ledger.committed_writes());
            per_commit.insert(
                format!("lifecycle/concurrency_{concurrency}/{name}"),
                (w1 - w0) as f64 / (c1 - c0).max(1) as f64,
            );
        }
        group.finish();
    }
    c.final_summary();

    let mut samples = SAMPLES.lock().expect("samples");
    if samples.is_empty() {
        return;
    }
    println!("\nSQLite ledger, synchronous=FULL (median time per operation; one run)");
    println!(
        "{:<52} {:>12} {:>10} {:>14}",
        "benchmark", "us/op", "ops/s", "writes/commit"
    );
    let mut medians = BTreeMap::new();
    for (name, v) in samples.iter_mut() {
        let m = median(v);
        medians.insert(name.clone(), m);
        println!(
            "{:<52} {:>12.1} {:>10.0} {:>14.1}",
            name,
            m / 1000.0,
            1e9 / m,
            per_commit.get(name).copied().unwrap_or(f64::NAN)
        );
    }
    if let (Some(two), Some(one)) = (
        medians.get("first_send/create_then_claim"),
        medians.get("first_send/create_and_claim_one_commit"),
    ) {
        println!(
            "create + claim in one commit at concurrency 1: saves {:.1} us of {:.1} us ({:.0}%) before the first byte leaves",
            (two - one) / 1000.0,
            two / 1000.0,
            100.0 * (two - one) / two
        );
    }
    for concurrency in [1, 64] {
        if let (Some(gc), Some(b1)) = (
            medians.get(&format!("lifecycle/concurrency_{concurrency}/group_commit")),
            medians.get(&format!("lifecycle/concurrency_{concurrency}/batch1")),
        ) {
            println!(
                "group commit at concurrency {concurrency}: {:.2}x the throughput of one commit per write",
                b1 / gc
            );
        }
    }
}
