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
//! - `lifecycle/concurrency_{1,64}/{group_commit,batch1}`: `create_and_apply` then `record`
//!   (the two writes of one request through the layer; the result is not fsynced when its batch
//!   holds no claim) from 1 or 64 tasks, with group commit on
//!   (default) and off (`max_batch(1)`), and with group commit but `synchronous=OFF` (no fsync:
//!   what the statements alone cost, the CPU ceiling of the write path). The result is
//!   recorded as the layer records it: detached (`Ledger::record_detached`: the caller does not
//!   wait for it; each timed run ends when every result has landed), and in
//!   `group_commit_waited` with `detached_results(false)` (the caller waits for its result's
//!   commit, as before).
//! - `lifecycle/concurrency_{1,64}/crate_statements` (issue #14, formerly `raw_reference`): the
//!   same rows per operation, written with the crate's own schema and statement texts and no
//!   other crate code: one OS thread
//!   owning a `rusqlite` connection, cached prepared statements, WAL, `synchronous=FULL`, the
//!   crate's schema and values (read back from a file the crate wrote), requests from the tasks
//!   handed over a channel, one transaction per batch of up to 64, callers released after the
//!   COMMIT (see `benches/support/crate_statements_sqlite.rs`).
//! - `lifecycle/concurrency_{1,64}/minimal` (issue 29): the least work the semantics allow, its
//!   own one-table schema and two statements (a durable claim of one row; the result, detached,
//!   an `UPDATE` of it), the primary key and the idempotency key's uniqueness only, the same
//!   group commit (see `benches/support/minimal_sqlite.rs`).
//! - `lifecycle/concurrency_1/raw_fsync_tick`: one tiny row per commit through the same
//!   reference, one at a time: what one commit (one fsync) costs here, in the same run.
//!
//! The table ends with the targets of issue #14 next to what this run measured: the crate's
//! lifecycle throughput at concurrency 64 as a share of the reference's (median of per-round
//! ratios), and its median latency at concurrency 1 against one fsync + 150 us.
//!
//! Shorter runs: criterion's own flags (`--warm-up-time 1 --measurement-time 1`, a filter such
//! as `lifecycle`), `RW_BENCH_ROUNDS` and `RW_BENCH_TURN_MS` for the interleaved phase.
//!
//! After criterion's report (each case measured in turn), the table comes from 12 interleaved
//! rounds that run every case of a group for about 250 ms in rotated order (see
//! `benches/overhead.rs` for why): the median time per operation, the median of the per-round
//! ratios to the group's first case, and writes per commit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;

#[cfg(feature = "postgres")]
#[path = "support/crate_statements_postgres.rs"]
mod crate_statements_postgres;
#[path = "support/crate_statements_sqlite.rs"]
mod crate_statements_sqlite;
#[cfg(feature = "postgres")]
#[path = "support/minimal_postgres.rs"]
mod minimal_postgres;
#[path = "support/minimal_sqlite.rs"]
mod minimal_sqlite;
#[path = "support/mod.rs"]
mod support;
#[cfg(feature = "postgres")]
use crate_statements_postgres::CrateStatementsPostgres;
#[cfg(feature = "postgres")]
use minimal_postgres::MinimalPostgres;
// `crate_statements_postgres` reads the template through its former name.
#[cfg(feature = "postgres")]
use crate_statements_sqlite as raw_sqlite;
use crate_statements_sqlite::{RawLedger, capture};
use minimal_sqlite::MinimalSqlite;
#[cfg(feature = "postgres")]
use recoverable_write::ledger::PostgresLedger;
use recoverable_write::ledger::backend::Update;
use recoverable_write::ledger::conformance::{evidence_entry, keep, update_of};
use recoverable_write::ledger::{Ledger, OperationRecord, SqliteLedgerOptions, Synchronous};
use recoverable_write::state::{Event, State, Tick};
use recoverable_write::{AttemptId, SqliteLedger};
use support::{first_claim, fresh_operation, median, new_row, now_ms};

/// The claim of send rights on `r`, as the layer builds it.
fn claim(r: &OperationRecord) -> Update {
    let now = now_ms();
    r.update_on(
        &Event::ClaimSend,
        Tick {
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

async fn create_then_claim(ledger: &SqliteLedger) {
    let r = new_row(
        ledger
            .create_or_get(fresh_operation())
            .await
            .expect("create"),
    );
    claimed(ledger.apply(claim(&r)).await);
}

async fn create_and_apply(ledger: &impl Ledger) -> OperationRecord {
    let new = fresh_operation();
    let first = first_claim(&new);
    let r = new_row(ledger.create_and_apply(new, first).await.expect("create"));
    assert_eq!(r.state, State::InFlight);
    r
}

/// The two writes of one request through the layer: create and claim (durable before the
/// send), then the result as the layer writes it (only the claim must be durable; the layer
/// keeps its own copy of the row, so nothing is read back). A ledger that detaches results
/// (`SqliteLedger` by default) takes it with `Ledger::record_detached` and the caller does not
/// wait; otherwise `Ledger::record_unread` commits it without waiting for the disk.
async fn lifecycle(ledger: &impl Ledger) {
    let r = create_and_apply(ledger).await;
    let done = keep(&r, State::Succeeded, now_ms());
    let update = update_of(&r, done, "attempt_result");
    if ledger.detaches_results() {
        // Runs on the writer thread, where a panic would only be logged: counted instead, and
        // checked once the run's results have landed (`landed`).
        let settled: recoverable_write::ledger::Settled = Box::new(|recorded| {
            if !matches!(recorded, Ok(recoverable_write::ledger::Recorded::Applied)) {
                UNAPPLIED.fetch_add(1, Ordering::Relaxed);
            }
        });
        let late = evidence_entry("late_evidence", now_ms());
        ledger
            .record_detached(update, late, settled)
            .expect("record");
        return;
    }
    let recorded = ledger.record_unread(update).await.expect("record");
    assert!(
        !matches!(recorded, recoverable_write::ledger::Recorded::Stale),
        "the result's precondition holds"
    );
}

/// Detached results that did not apply (see `lifecycle`): none may.
static UNAPPLIED: AtomicU64 = AtomicU64::new(0);

/// Waits until every result `ledger` took detached has landed, so that a timed run counts their
/// writing, and checks that each one applied.
async fn landed(ledger: &SqliteLedger) {
    ledger.wait_for_results().await;
    assert_eq!(
        UNAPPLIED.load(Ordering::Relaxed),
        0,
        "every detached result's precondition holds"
    );
}

/// What one benchmark does per iteration.
#[derive(Clone, Copy)]
enum Work {
    CreateThenClaim,
    CreateAndApply,
    CreateOnly,
    /// The two writes of a request (or the reference's same rows), from this many tasks at once.
    Lifecycle(u64),
    /// One tiny row per commit through the raw SQLite reference, one at a time: one fsync.
    Tick,
}

/// What a case writes to: one of the crate's ledgers or a raw reference.
#[derive(Clone, Copy)]
enum Store<'a> {
    Crate(&'a SqliteLedger),
    Raw(&'a RawLedger),
    Minimal(&'a MinimalSqlite),
    #[cfg(feature = "postgres")]
    Postgres(&'a PostgresLedger),
    #[cfg(feature = "postgres")]
    CrateStatements(&'a CrateStatementsPostgres),
    #[cfg(feature = "postgres")]
    MinimalPostgres(&'a MinimalPostgres),
}

impl Store<'_> {
    /// Commits and committed writes so far (`None`: not counted).
    fn counters(&self) -> Option<(u64, u64)> {
        match self {
            Store::Crate(l) => Some((l.commits(), l.committed_writes())),
            Store::Raw(l) => Some((l.commits(), l.committed_writes())),
            Store::Minimal(l) => Some((l.commits(), l.committed_writes())),
            #[cfg(feature = "postgres")]
            Store::Postgres(_) | Store::CrateStatements(_) | Store::MinimalPostgres(_) => None,
        }
    }
}

/// Runs `one` `iters` times from `concurrency` tasks; at concurrency 1, every run's own
/// latency (ns) goes to `latencies`.
async fn spread<F, Fut>(iters: u64, concurrency: u64, one: F, latencies: &mut Vec<f64>)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    if concurrency == 1 {
        for _ in 0..iters {
            let t = Instant::now();
            one().await;
            latencies.push(t.elapsed().as_nanos() as f64);
        }
        return;
    }
    let next = std::sync::Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (one, next) = (one.clone(), next.clone());
        tasks.spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < iters {
                one().await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("worker");
    }
}

/// `f(handle)` as a cloneable `Fn` for [`spread`]: every call gets its own clone of `handle`.
macro_rules! each {
    ($handle:expr, |$h:ident| $body:expr) => {{
        let handle = $handle.clone();
        move || {
            let $h = handle.clone();
            async move { $body }
        }
    }};
}

/// One benchmark: its name, its comparison group, the store and the runtime it runs on.
struct Case<'a> {
    group: &'static str,
    name: &'static str,
    work: Work,
    store: Store<'a>,
    rt: &'a tokio::runtime::Runtime,
    /// Operations run so far, all phases (for profiles: `perf stat`, `strace -c` per operation).
    ran: std::cell::Cell<u64>,
}

impl Case<'_> {
    /// Runs `iters` operations; returns the elapsed time. One-at-a-time lifecycles and ticks
    /// add each operation's own latency (ns) to `latencies`.
    fn run(&self, iters: u64, latencies: &mut Vec<f64>) -> Duration {
        let (work, store) = (self.work, self.store);
        self.ran.set(self.ran.get() + iters);
        self.rt.block_on(async move {
            let start = Instant::now();
            match (work, store) {
                (Work::CreateThenClaim, Store::Crate(ledger)) => {
                    for _ in 0..iters {
                        create_then_claim(ledger).await;
                    }
                }
                (Work::CreateAndApply, Store::Crate(ledger)) => {
                    for _ in 0..iters {
                        create_and_apply(ledger).await;
                    }
                }
                (Work::CreateOnly, Store::Crate(ledger)) => {
                    for _ in 0..iters {
                        new_row(
                            ledger
                                .create_or_get(fresh_operation())
                                .await
                                .expect("create"),
                        );
                    }
                }
                (Work::Lifecycle(c), Store::Crate(ledger)) => {
                    spread(iters, c, each!(ledger, |l| lifecycle(&l).await), latencies).await;
                    landed(ledger).await;
                }
                (Work::Lifecycle(c), Store::Raw(raw)) => {
                    spread(iters, c, each!(raw, |r| r.lifecycle().await), latencies).await;
                }
                (Work::Lifecycle(c), Store::Minimal(min)) => {
                    spread(iters, c, each!(min, |m| m.lifecycle().await), latencies).await;
                    min.wait_for_results().await;
                }
                (Work::Tick, Store::Raw(raw)) => {
                    spread(iters, 1, each!(raw, |r| r.tick().await), latencies).await;
                }
                #[cfg(feature = "postgres")]
                (Work::Lifecycle(c), Store::Postgres(ledger)) => {
                    spread(iters, c, each!(ledger, |l| lifecycle(&l).await), latencies).await;
                }
                #[cfg(feature = "postgres")]
                (Work::Lifecycle(c), Store::CrateStatements(raw)) => {
                    spread(iters, c, each!(raw, |r| r.lifecycle().await), latencies).await;
                }
                #[cfg(feature = "postgres")]
                (Work::Lifecycle(c), Store::MinimalPostgres(m)) => {
                    spread(
                        iters,
                        c,
                        each!(m, |m| minimal_lifecycle(&m).await),
                        latencies,
                    )
                    .await;
                }
                _ => unreachable!("no such case"),
            }
            start.elapsed()
        })
    }

    fn id(&self) -> String {
        format!("{}/{}", self.group, self.name)
    }
}

/// Rounds of the interleaved phase, and the target duration of one case's turn in a round
/// (defaults; `RW_BENCH_ROUNDS` and `RW_BENCH_TURN_MS` override them, see `support`).
const ROUNDS: usize = 12;
const TURN: Duration = Duration::from_millis(250);

/// One request's two writes through the minimal PostgreSQL reference (no HTTP): the claim with
/// a fresh key and the frozen request, then the result.
#[cfg(feature = "postgres")]
async fn minimal_lifecycle(m: &MinimalPostgres) {
    let key = uuid::Uuid::new_v4().to_string();
    let request = b"POST http://127.0.0.1/tickets\ncontent-type: application/json\n\n{\"device_id\":\"E17\",\"priority\":\"P2\"}";
    let id = m.claim(&key, 0x5eed, request).await;
    m.result(&id, 201, br#"{"id":"W1"}"#).await;
}

/// The crate's PostgresLedger, the "same statements" reference over a bare pool and the minimal
/// reference (its own table, tokio-postgres), 8 connections each, in schemas of their own made
/// afresh (the first two migrated by the crate: the same tables and indexes). `None`, with a
/// note, when `RW_POSTGRES_URL` is unset or no server answers.
#[cfg(feature = "postgres")]
async fn postgres_pair(
    template: crate_statements_sqlite::Template,
) -> Option<(PostgresLedger, CrateStatementsPostgres, MinimalPostgres)> {
    use recoverable_write::ledger::PostgresLedgerOptions;
    let Ok(url) = std::env::var("RW_POSTGRES_URL") else {
        println!("postgres cases skipped: RW_POSTGRES_URL is unset");
        return None;
    };
    let admin = match sqlx::PgPool::connect(&url).await {
        Ok(admin) => admin,
        Err(e) => {
            println!("postgres cases skipped: no PostgreSQL at RW_POSTGRES_URL ({e})");
            return None;
        }
    };
    // Fresh schemas, not a TRUNCATE (see `postgres_ledger` in benches/overhead.rs).
    for schema in ["rw_bench_commit", "rw_bench_commit_ref"] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE"
        )))
        .execute(&admin)
        .await
        .expect("drop a bench schema");
    }
    admin.close().await;
    let open = |schema: &'static str| {
        let options = PostgresLedgerOptions::new()
            .schema(schema)
            .expect("schema name")
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(3));
        PostgresLedger::connect_with(&url, options)
    };
    let ledger = open("rw_bench_commit").await.expect("the crate's ledger");
    // The reference's tables: migrated by the crate, whose pool is then closed.
    open("rw_bench_commit_ref")
        .await
        .expect("migrate the reference's schema")
        .close()
        .await;
    // As the crate's pool does: a generic plan made while the table was empty would scan the
    // whole table on every UPDATE (see `PostgresLedger::connect_with`).
    let connect: sqlx::postgres::PgConnectOptions = url.parse().expect("RW_POSTGRES_URL");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with(connect.options([("plan_cache_mode", "force_custom_plan")]))
        .await
        .expect("the reference's pool");
    let minimal = MinimalPostgres::open(&url, 8).await?;
    Some((
        ledger,
        CrateStatementsPostgres::new(pool, "rw_bench_commit_ref", template),
        minimal,
    ))
}

fn main() {
    let (rounds, turn) = (support::rounds(ROUNDS), support::turn(TURN));
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
    // The caller waits for its result's commit too (as before results were detached).
    let waited = open(
        &multi,
        "lifecycle_waited.db",
        SqliteLedgerOptions::new().detached_results(false),
    );
    // No fsync at all: what the statements alone cost (the CPU ceiling of the write path).
    let sync_off = open(
        &multi,
        "lifecycle_off.db",
        SqliteLedgerOptions::new().synchronous(Synchronous::Off),
    );
    // The crate-statements reference: the crate's schema and one real operation's values, read back from a
    // file the crate wrote; its own files, batches of up to 64 (the crate's default).
    let template_file = dir.path().join("template.db");
    let template_ledger = open(&multi, "template.db", SqliteLedgerOptions::new());
    let template = multi.block_on(capture(&template_ledger, &template_file));
    let schema = crate_statements_sqlite::schema_of(&template_file);
    let row_bytes = template.row_bytes();
    let raw = RawLedger::open(
        &dir.path().join("raw.db"),
        &schema,
        template.clone(),
        SqliteLedgerOptions::DEFAULT_MAX_BATCH,
    );
    let raw_tick = RawLedger::open(
        &dir.path().join("raw_tick.db"),
        &schema,
        template.clone(),
        1,
    );
    // The minimal reference (issue 29): its own one-table schema and statements.
    let minimal = MinimalSqlite::open(
        &dir.path().join("minimal.db"),
        SqliteLedgerOptions::DEFAULT_MAX_BATCH,
    );
    #[cfg(feature = "postgres")]
    let postgres = multi.block_on(postgres_pair(template));
    #[cfg(not(feature = "postgres"))]
    drop(template);

    let mut cases = vec![
        Case {
            group: "first_send",
            name: "create_then_claim",
            work: Work::CreateThenClaim,
            store: Store::Crate(&first),
            rt: &current,
            ran: Default::default(),
        },
        Case {
            group: "first_send",
            name: "create_and_apply",
            work: Work::CreateAndApply,
            store: Store::Crate(&first),
            rt: &current,
            ran: Default::default(),
        },
        Case {
            group: "first_send",
            name: "create_only",
            work: Work::CreateOnly,
            store: Store::Crate(&first),
            rt: &current,
            ran: Default::default(),
        },
    ];
    for (group, concurrency) in [
        ("lifecycle/concurrency_1", 1),
        ("lifecycle/concurrency_64", 64),
    ] {
        for (name, ledger) in [
            ("batch1", &batch1),
            ("group_commit", &group_commit),
            ("group_commit_waited", &waited),
            ("group_commit_sync_off", &sync_off),
        ] {
            cases.push(Case {
                group,
                name,
                work: Work::Lifecycle(concurrency),
                store: Store::Crate(ledger),
                rt: &multi,
                ran: Default::default(),
            });
        }
        cases.push(Case {
            group,
            name: "crate_statements",
            work: Work::Lifecycle(concurrency),
            store: Store::Raw(&raw),
            rt: &multi,
            ran: Default::default(),
        });
        cases.push(Case {
            group,
            name: "minimal",
            work: Work::Lifecycle(concurrency),
            store: Store::Minimal(&minimal),
            rt: &multi,
            ran: Default::default(),
        });
        if concurrency == 1 {
            cases.push(Case {
                group,
                name: "raw_fsync_tick",
                work: Work::Tick,
                store: Store::Raw(&raw_tick),
                rt: &multi,
                ran: Default::default(),
            });
        }
    }

    #[cfg(feature = "postgres")]
    if let Some((ledger, raw, minimal)) = &postgres {
        for (group, concurrency) in [
            ("postgres/concurrency_1", 1),
            ("postgres/concurrency_64", 64),
        ] {
            for (name, store) in [
                ("crate_lifecycle", Store::Postgres(ledger)),
                ("minimal_reference", Store::MinimalPostgres(minimal)),
                ("crate_statements", Store::CrateStatements(raw)),
            ] {
                cases.push(Case {
                    group,
                    name,
                    work: Work::Lifecycle(concurrency),
                    store,
                    rt: &multi,
                    ran: Default::default(),
                });
            }
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
                let elapsed = case.run(iters, &mut Vec::new());
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
    // Median latency of one operation, per round (one-at-a-time cases only).
    let mut latency: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let groups: Vec<&str> = {
        let mut g: Vec<&str> = cases.iter().map(|c| c.group).collect();
        g.dedup();
        g
    };
    for round in 0..rounds {
        for group in &groups {
            let members: Vec<&Case> = cases.iter().filter(|c| c.group == *group).collect();
            for k in 0..members.len() {
                let case = members[(k + round) % members.len()];
                let n = ((turn.as_nanos() as f64 / calibrated[&case.id()]) as u64).max(10);
                let before = case.store.counters();
                let mut latencies = Vec::new();
                let elapsed = case.run(n, &mut latencies);
                per_op
                    .entry(case.id())
                    .or_default()
                    .push(elapsed.as_nanos() as f64 / n as f64);
                if !latencies.is_empty() {
                    latency
                        .entry(case.id())
                        .or_default()
                        .push(median(&mut latencies));
                }
                if let (Some((c0, w0)), Some((c1, w1))) = (before, case.store.counters()) {
                    let e = counts.entry(case.id()).or_default();
                    e.0 += c1 - c0;
                    e.1 += w1 - w0;
                }
            }
        }
    }

    println!(
        "\nThe ledgers alone: {rounds} interleaved rounds, ~{} ms per case per round",
        turn.as_millis()
    );
    println!(
        "(us/op: median over rounds; vs first: median of per-round ratios of time per op to the \
         group's first case; p50 us: median over rounds of each round's median latency, \
         one-at-a-time cases only)"
    );
    println!(
        "{:<26} {:<28} {:>10} {:>9} {:>9} {:>14} {:>9}",
        "group", "case", "us/op", "ops/s", "vs first", "writes/commit", "p50 us"
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
            let per_commit = counts
                .get(&case.id())
                .map(|(commits, writes)| {
                    format!("{:.1}", *writes as f64 / (*commits).max(1) as f64)
                })
                .unwrap_or_default();
            let p50 = latency
                .get(&case.id())
                .map(|l| format!("{:.1}", median(&mut l.clone()) / 1000.0))
                .unwrap_or_default();
            println!(
                "{:<26} {:<28} {:>10.1} {:>9.0} {:>8.2}x {:>14} {:>9}",
                group,
                case.name,
                m / 1000.0,
                1e9 / m,
                r,
                per_commit,
                p50
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

    // The crate against the references, ratios taken within each round.
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let per_round = |ours: &str, theirs: &str, f: &dyn Fn(f64, f64) -> f64| -> Option<f64> {
        let (a, b) = (per_op.get(ours)?, per_op.get(theirs)?);
        let mut v: Vec<f64> = a.iter().zip(b).map(|(a, b)| f(*a, *b)).collect();
        (!v.is_empty()).then(|| median(&mut v))
    };
    println!(
        "operations run per case in this process (all phases, for per-operation profile counts): {}",
        cases
            .iter()
            .map(|c| format!("{} {}", c.id(), c.ran.get()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "\ntargets (issue #14; crate-statements reference: one rusqlite thread, cached statements, the same \
         rows, {row_bytes} bytes of operation row, batches of up to {})",
        SqliteLedgerOptions::DEFAULT_MAX_BATCH
    );
    for concurrency in [1, 64] {
        let group = format!("lifecycle/concurrency_{concurrency}");
        for (reference, label) in [
            ("crate_statements", "crate-statements reference"),
            ("minimal", "minimal reference (issue 29)"),
        ] {
            if let Some(r) = per_round(
                &format!("{group}/group_commit"),
                &format!("{group}/{reference}"),
                &|ours, theirs| theirs / ours,
            ) {
                let target = if concurrency == 64 && reference == "crate_statements" {
                    format!("target >= 75% -> {}", verdict(r >= 0.75))
                } else {
                    "(no target)".to_owned()
                };
                println!(
                    "  SQLite lifecycle throughput at concurrency {concurrency}, crate / {label}: \
                     {:.1}% {target}",
                    100.0 * r
                );
            }
        }
    }
    for (reference, what) in [
        (
            "minimal_reference",
            "minimal reference (the limit, issue 29)",
        ),
        (
            "crate_statements",
            "the crate's pre-0009 statements on its schema (not a limit)",
        ),
    ] {
        if let Some(r) = per_round(
            "postgres/concurrency_64/crate_lifecycle",
            &format!("postgres/concurrency_64/{reference}"),
            &|ours, theirs| theirs / ours,
        ) {
            let target = if reference == "minimal_reference" {
                format!("target >= 75% -> {}", verdict(r >= 0.75))
            } else {
                "(no target)".to_owned()
            };
            println!(
                "  PostgreSQL lifecycle throughput at concurrency 64 (pools of 8), crate / \
                 {what}: {:.1}% {target}",
                100.0 * r
            );
        }
    }
    let p50 = |id: &str| latency.get(id).map(|l| median(&mut l.clone()));
    if let (Some(ours), Some(theirs), Some(fsync)) = (
        p50("lifecycle/concurrency_1/group_commit"),
        p50("lifecycle/concurrency_1/crate_statements"),
        p50("lifecycle/concurrency_1/raw_fsync_tick"),
    ) {
        let target = fsync + 150_000.0;
        println!(
            "  SQLite lifecycle at concurrency 1, the crate's median latency (what the ledger adds \
             to a request): {:.1} us; target <= one fsync ({:.1} us, a one-row commit) + 150 us \
             = {:.1} us -> {}",
            ours / 1000.0,
            fsync / 1000.0,
            target / 1000.0,
            verdict(ours <= target)
        );
        println!(
            "    (the crate-statements reference's median: {:.1} us; the crate adds {:.1} us to it)",
            theirs / 1000.0,
            (ours - theirs) / 1000.0
        );
        if let Some(min) = p50("lifecycle/concurrency_1/minimal") {
            println!(
                "    (the minimal reference's median: {:.1} us; the crate / minimal: {:.2}x)",
                min / 1000.0,
                ours / min
            );
        }
    }
    if let (Some(ours), Some(minimal), Some(same)) = (
        p50("postgres/concurrency_1/crate_lifecycle"),
        p50("postgres/concurrency_1/minimal_reference"),
        p50("postgres/concurrency_1/crate_statements"),
    ) {
        println!(
            "  PostgreSQL lifecycle at concurrency 1, median latency: crate {:.1} us, minimal \
             reference {:.1} us ({:.2}x), crate's pre-0009 statements {:.1} us",
            ours / 1000.0,
            minimal / 1000.0,
            ours / minimal,
            same / 1000.0
        );
    }
}
