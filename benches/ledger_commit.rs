//! The SQLite ledger alone (no HTTP): what a commit costs, what group commit buys, and what
//! creating and claiming an operation in one transaction (`create_and_apply`) saves.
//!
//! ```text
//! cargo bench -p recoverable-write-benches --bench ledger_commit
//! ```
//!
//! Every ledger is a file in a temp dir with `synchronous=FULL` (the default). Benchmarks:
//!
//! - `first_send/create_then_claim`: the two-step path before the first byte leaves (the layer
//!   takes it when an authorizer is set): `create_or_get`, then `apply` (the claim) once the row
//!   is back. Two commits, two fsyncs.
//! - `first_send/create_and_apply`: what the layer does otherwise: one `create_and_apply` call,
//!   one commit.
//! - `first_send/create_only`: one commit of a plain create, for reference.
//! - `lifecycle/concurrency_{1,64}/{group_commit,batch1}`: `create_and_apply` then `apply` (the
//!   two writes of one request through the layer) from 1 or 64 tasks, with group commit on
//!   (default) and off (`max_batch(1)`), and with group commit but `synchronous=OFF` (no fsync:
//!   what the statements alone cost, the CPU ceiling of the write path).
//!
//! After criterion's report (each case measured in turn), the table comes from 12 interleaved
//! rounds that run every case of a group for about 250 ms in rotated order (see
//! `benches/overhead.rs` for why): the median time per operation, the median of the per-round
//! ratios to the group's first case, and writes per commit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;

#[path = "support/mod.rs"]
mod support;
use recoverable_write::ledger::backend::Update;
use recoverable_write::ledger::conformance::{evidence_entry, keep, new_operation, update_of};
use recoverable_write::ledger::{
    Created, Ledger, NewOperation, OperationRecord, SqliteLedgerOptions, Synchronous,
};
use recoverable_write::state::{Clock, Event, State};
use recoverable_write::{AttemptId, SqliteLedger};
use support::median;

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

/// The claim of send rights on `r`, as the layer builds it.
fn claim(r: &OperationRecord) -> Update {
    let now = now_ms();
    r.update_on(
        &Event::ClaimSend,
        Clock {
            now_ms: now,
            jitter: 0.0,
        },
        Some(AttemptId::generate()),
        Some(now + r.policy.lease().as_millis() as i64),
        None,
        evidence_entry("attempt_registered", now),
    )
    .expect("claim from PREPARED")
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

/// The first send's claim of a new operation, as the layer builds it.
fn first_claim(new: &NewOperation) -> Update {
    let now = now_ms();
    new.first_update_on(
        &Event::ClaimSend,
        Clock {
            now_ms: now,
            jitter: 0.0,
        },
        Some(AttemptId::generate()),
        Some(now + new.policy.lease().as_millis() as i64),
        evidence_entry("attempt_registered", now),
    )
    .expect("claim from PREPARED")
}

async fn create_and_apply(ledger: &SqliteLedger) -> OperationRecord {
    let new = fresh_operation();
    let first = first_claim(&new);
    let r = new_row(ledger.create_and_apply(new, first).await.expect("create"));
    assert_eq!(r.state, State::InFlight);
    r
}

/// The two writes of one request through the layer: create and claim, record the result.
async fn lifecycle(ledger: &SqliteLedger) {
    let r = create_and_apply(ledger).await;
    let done = keep(&r, State::Succeeded, now_ms());
    claimed(ledger.apply(update_of(&r, done, "attempt_result")).await);
}

/// What one benchmark does per iteration.
#[derive(Clone, Copy)]
enum Work {
    CreateThenClaim,
    CreateAndApply,
    CreateOnly,
    /// The two writes of a request, from this many tasks at once.
    Lifecycle(u64),
}

/// One benchmark: its name, its comparison group, the ledger and the runtime it runs on.
struct Case<'a> {
    group: &'static str,
    name: &'static str,
    work: Work,
    ledger: &'a SqliteLedger,
    rt: &'a tokio::runtime::Runtime,
}

impl Case<'_> {
    /// Runs `iters` operations; returns the elapsed time.
    fn run(&self, iters: u64) -> Duration {
        let ledger = self.ledger.clone();
        let work = self.work;
        self.rt.block_on(async move {
            let start = Instant::now();
            match work {
                Work::CreateThenClaim => {
                    for _ in 0..iters {
                        create_then_claim(&ledger).await;
                    }
                }
                Work::CreateAndApply => {
                    for _ in 0..iters {
                        create_and_apply(&ledger).await;
                    }
                }
                Work::CreateOnly => {
                    for _ in 0..iters {
                        new_row(
                            ledger
                                .create_or_get(fresh_operation())
                                .await
                                .expect("create"),
                        );
                    }
                }
                Work::Lifecycle(concurrency) => {
                    let next = std::sync::Arc::new(AtomicU64::new(0));
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
                }
            }
            start.elapsed()
        })
    }

    fn id(&self) -> String {
        format!("{}/{}", self.group, self.name)
    }
}

/// Rounds of the interleaved phase, and the target duration of one case's turn in a round.
const ROUNDS: usize = 12;
const TURN: Duration = Duration::from_millis(250);

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    // First sends run one at a time, on a current-thread runtime.
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
    let first = open(&current, "first_send.db", SqliteLedgerOptions::new());
    let group_commit = open(&multi, "lifecycle.db", SqliteLedgerOptions::new());
    let batch1 = open(
        &multi,
        "lifecycle_batch1.db",
        SqliteLedgerOptions::new().max_batch(1),
    );
    // No fsync at all: what the statements alone cost (the CPU ceiling of the write path).
    let sync_off = open(
        &multi,
        "lifecycle_off.db",
        SqliteLedgerOptions::new().synchronous(Synchronous::Off),
    );

    let mut cases = vec![
        Case {
            group: "first_send",
            name: "create_then_claim",
            work: Work::CreateThenClaim,
            ledger: &first,
            rt: &current,
        },
        Case {
            group: "first_send",
            name: "create_and_apply",
            work: Work::CreateAndApply,
            ledger: &first,
            rt: &current,
        },
        Case {
            group: "first_send",
            name: "create_only",
            work: Work::CreateOnly,
            ledger: &first,
            rt: &current,
        },
    ];
    for (group, concurrency) in [
        ("lifecycle/concurrency_1", 1),
        ("lifecycle/concurrency_64", 64),
    ] {
        for (name, ledger) in [
            ("batch1", &batch1),
            ("group_commit", &group_commit),
            ("group_commit_sync_off", &sync_off),
        ] {
            cases.push(Case {
                group,
                name,
                work: Work::Lifecycle(concurrency),
                ledger,
                rt: &multi,
            });
        }
    }

    // Phase 1: criterion, one case after the other.
    let mut c = Criterion::default()
        .sample_size(15)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut calibrated: BTreeMap<String, f64> = BTreeMap::new();
    for case in &cases {
        let mut group = c.benchmark_group(case.group);
        let mut samples = Vec::new();
        group.bench_function(case.name, |b| {
            b.iter_custom(|iters| {
                let elapsed = case.run(iters);
                samples.push(elapsed.as_nanos() as f64 / iters.max(1) as f64);
                elapsed
            })
        });
        group.finish();
        if !samples.is_empty() {
            calibrated.insert(case.id(), median(&mut samples));
        }
    }
    c.final_summary();
    if calibrated.is_empty() {
        return; // criterion ran nothing (a filter, --list, --test)
    }

    // Phase 2: the table, from interleaved rounds (see benches/overhead.rs for why).
    cases.retain(|case| calibrated.contains_key(&case.id()));
    let mut per_op: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let groups: Vec<&str> = {
        let mut g: Vec<&str> = cases.iter().map(|c| c.group).collect();
        g.dedup();
        g
    };
    for round in 0..ROUNDS {
        for group in &groups {
            let members: Vec<&Case> = cases.iter().filter(|c| c.group == *group).collect();
            for k in 0..members.len() {
                let case = members[(k + round) % members.len()];
                let n = ((TURN.as_nanos() as f64 / calibrated[&case.id()]) as u64).max(10);
                let (c0, w0) = (case.ledger.commits(), case.ledger.committed_writes());
                let elapsed = case.run(n);
                per_op
                    .entry(case.id())
                    .or_default()
                    .push(elapsed.as_nanos() as f64 / n as f64);
                let e = counts.entry(case.id()).or_default();
                e.0 += case.ledger.commits() - c0;
                e.1 += case.ledger.committed_writes() - w0;
            }
        }
    }

    println!(
        "\nSQLite ledger alone: {ROUNDS} interleaved rounds, ~{} ms per case per round",
        TURN.as_millis()
    );
    println!(
        "(us/op: median over rounds; vs first: median of per-round ratios of time per op to the \
         group's first case)"
    );
    println!(
        "{:<26} {:<28} {:>10} {:>9} {:>9} {:>14}",
        "group", "case", "us/op", "ops/s", "vs first", "writes/commit"
    );
    let mut ratio = BTreeMap::new();
    for group in &groups {
        let members: Vec<&Case> = cases.iter().filter(|c| c.group == *group).collect();
        let base = &per_op[&members[0].id()];
        for case in members {
            let v = &per_op[&case.id()];
            let mut r: Vec<f64> = v.iter().zip(base).map(|(t, b)| t / b).collect();
            let r = median(&mut r);
            ratio.insert(case.id(), r);
            let m = median(&mut v.clone());
            let (commits, writes) = counts[&case.id()];
            println!(
                "{:<26} {:<28} {:>10.1} {:>9.0} {:>8.2}x {:>14.1}",
                group,
                case.name,
                m / 1000.0,
                1e9 / m,
                r,
                writes as f64 / commits.max(1) as f64
            );
        }
    }
    if let (Some(one), Some(alone)) = (
        ratio.get("first_send/create_and_apply"),
        ratio.get("first_send/create_only"),
    ) {
        println!(
            "first send at concurrency 1: create_and_apply (one commit) takes {:.0}% of the time \
             of create then claim (two commits); a plain create takes {:.0}%",
            100.0 * one,
            100.0 * alone
        );
    }
    for concurrency in [1, 64] {
        let group = format!("lifecycle/concurrency_{concurrency}");
        if let Some(gc) = ratio.get(&format!("{group}/group_commit")) {
            println!(
                "group commit at concurrency {concurrency}: {:.2}x the throughput of one commit per write",
                1.0 / gc
            );
        }
    }
}
