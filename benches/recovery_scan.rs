//! Cost growth (issue #6): the recoverer's due-work scan and the sweeper as finished operations
//! pile up, and the memory an operation costs while it is in flight.
//!
//! ```text
//! cargo bench -p recoverable-write-benches --bench recovery_scan
//! ```
//!
//! # Scans: 1,000 vs 1,000,000 terminal rows
//!
//! Two SQLite ledger files are filled with 1,000 and 1,000,000 finished operations
//! (`SUCCEEDED`, one in ten `REJECTED`; realistic column sizes, no evidence rows: the scans never
//! read the evidence table) by one `INSERT ... SELECT` over a recursive CTE in one transaction.
//! Setup takes about 10-30 s for the large file on a 2-core machine (printed). Each file also
//! holds 10 `UNKNOWN` rows (the due work) and 10 rows the sweep benchmark puts back in flight
//! before every timed call.
//!
//! - `claim_due/nothing_due`: `claim_due` when nothing is due (the recoverer's idle poll);
//! - `claim_due/10_due`: `claim_due(limit 10)` claiming the same 10 rows every time (each call
//!   moves the clock past the previous call's lease);
//! - `sweep_expired/nothing_expired`: the sweeper with nothing in flight;
//! - `sweep_expired/10_expired`: the sweeper moving 10 expired in-flight rows to `UNKNOWN` (the
//!   rows are put back in flight through the ledger, untimed, before every call).
//!
//! Operator listing (issue 12), on the same files (50 of the finished rows are put in
//! `MANUAL_REVIEW`) and, with `RW_POSTGRES_URL` set and feature `postgres`, on PostgreSQL
//! schemas filled the same way by `generate_series` (group `listing_pg`):
//! - `listing/review_queue_first_page`: `list` of one tenant's review queue, oldest first, 50 rows;
//! - `listing/count_by_state`: `count_by_state` of one tenant.
//!
//! The ledgers run with `synchronous=OFF` here: a commit's fsync (milliseconds, and very noisy on
//! a shared disk) would swamp the query costs this benchmark is about. The table prints each
//! time at both sizes and the ratio, against the target "flat within 2x".
//!
//! # Memory per in-flight operation
//!
//! A counting global allocator (this binary only) tracks live heap bytes. A TCP server that
//! reads each request and never answers holds N requests in flight; the live bytes they add,
//! divided by N, is the memory per in-flight operation. Measured for the bare hyper-util client
//! (the floor: a connection, its buffers, the task), and for the layer over SQLite and over
//! memory; "added by the layer" is the difference to bare. Bodies are 36-byte static slices
//! the layer does not copy, so the figure is in effect "excluding the body". SQLite's own memory
//! (page cache, allocated by SQLite's allocator, bounded, not per operation) is not counted;
//! MemoryLedger keeps every row in the process by design, so its figure includes the row.
//!
//! # Allocations per request
//!
//! With the same allocator: heap allocations and bytes allocated per completed request at
//! concurrency 1, bare client vs layer over memory vs layer over SQLite, against a server that
//! answers `201 {"id":"W1"}`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backlog::{FILL, raw};
use criterion::Criterion;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::conformance::{RawChanges, keep, update_of};
#[cfg(feature = "postgres")]
use recoverable_write::ledger::{ClockSource, PostgresLedger, PostgresLedgerOptions};
use recoverable_write::ledger::{
    Ledger, OperationQuery, Order, SqliteLedgerOptions, Synchronous, TenantScope,
};
use recoverable_write::{BudgetPolicy, MemoryLedger, OperationId, SqliteLedger, State, Tenant};
use sqlx::Connection;
use tower::{Service, ServiceExt};

#[path = "support/backlog.rs"]
mod backlog;

// ── counting allocator ──────────────────────────────────────────────────────────────────────────

/// The system allocator, counting live bytes, allocations and bytes allocated.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counters
// are plain atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            counted_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            counted_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            ALLOCATED_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        }
        p
    }
}

fn counted_alloc(size: usize) {
    LIVE_BYTES.fetch_add(size as isize, Ordering::Relaxed);
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    ALLOCATED_BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// ── scans ───────────────────────────────────────────────────────────────────────────────────────

const SIZES: [u64; 2] = [1_000, 1_000_000];
/// Next check of the 10 due rows: `claim_due` at an earlier time finds nothing due.
const DUE_AT: i64 = 1_000;

const MAKE_DUE: &str = "
UPDATE rw_operations SET state = 'UNKNOWN', last_result = NULL, next_check_ms = ?1,
       lease_until_ms = NULL, operation_id = 'op-due-' || operation_id
WHERE operation_id IN (SELECT operation_id FROM rw_operations ORDER BY rowid LIMIT 10)";

const MAKE_SWEEPABLE: &str = "
UPDATE rw_operations SET operation_id = 'op-sweep-' || operation_id
WHERE operation_id IN (SELECT operation_id FROM rw_operations
                       WHERE operation_id NOT LIKE 'op-due-%' ORDER BY rowid LIMIT 10)";

/// The review queue the listing benchmarks read: 50 finished rows put in `MANUAL_REVIEW`.
const MAKE_REVIEW: &str = "
UPDATE rw_operations SET state = 'MANUAL_REVIEW', last_result = NULL,
       operation_id = 'op-review-' || operation_id
WHERE operation_id IN (SELECT operation_id FROM rw_operations
                       WHERE operation_id NOT LIKE 'op-due-%' AND operation_id NOT LIKE 'op-sweep-%'
                       ORDER BY rowid LIMIT 50)";

/// A ledger file with `rows` finished operations: the ledger, the ids of the rows the sweep
/// benchmark uses, and the setup time.
async fn filled(dir: &std::path::Path, rows: u64) -> (SqliteLedger, Vec<OperationId>, Duration) {
    let path = dir.join(format!("scan-{rows}.db"));
    let start = Instant::now();
    let options = SqliteLedgerOptions::new().synchronous(Synchronous::Off);
    // Opening runs the migrations; the rows go in through a raw connection in one transaction.
    SqliteLedger::open_with(&path, options.clone())
        .await
        .expect("create ledger")
        .close()
        .await;
    let policy = serde_json::to_string(&BudgetPolicy::default()).expect("policy json");
    let mut conn = raw(&path).await;
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query(FILL)
        .bind(rows as i64 + 20)
        .bind(policy)
        .execute(&mut *tx)
        .await
        .expect("fill");
    sqlx::query(MAKE_DUE)
        .bind(DUE_AT)
        .execute(&mut *tx)
        .await
        .expect("due rows");
    sqlx::query(MAKE_SWEEPABLE)
        .execute(&mut *tx)
        .await
        .expect("sweepable rows");
    sqlx::query(MAKE_REVIEW)
        .execute(&mut *tx)
        .await
        .expect("review rows");
    tx.commit().await.expect("commit");
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await
        .expect("checkpoint");
    sqlx::query("ANALYZE")
        .execute(&mut conn)
        .await
        .expect("analyze");
    let sweepable: Vec<String> = sqlx::query_scalar(
        "SELECT operation_id FROM rw_operations WHERE operation_id LIKE 'op-sweep-%'",
    )
    .fetch_all(&mut conn)
    .await
    .expect("sweepable ids");
    conn.close().await.expect("close");
    let ledger = SqliteLedger::open_with(&path, options)
        .await
        .expect("open ledger");
    let ids = sweepable.into_iter().map(OperationId::new).collect();
    (ledger, ids, start.elapsed())
}

/// Puts the sweep benchmark's rows back in flight with an expired lease, through the ledger's
/// own writer (another connection writing would make SQLite drop the writer's page cache, which
/// production never does), all in one batch.
async fn reset_sweepable(ledger: &SqliteLedger, ids: &[OperationId]) {
    let tenant = Tenant::new("tenant-a");
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids {
        let r = ledger
            .get(&tenant, id)
            .await
            .expect("get")
            .expect("sweepable row");
        let changes = RawChanges {
            lease_until_ms: Some(0),
            next_check_ms: None,
            ..keep(&r, State::InFlight, 0)
        };
        let ledger = ledger.clone();
        tasks.spawn(async move { ledger.apply(update_of(&r, changes, "bench_reset")).await });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("reset task")
            .expect("reset")
            .expect("reset precondition holds");
    }
}

/// Mean ns per call of every sample, keyed by (benchmark, rows).
type Samples = BTreeMap<(&'static str, u64), Vec<f64>>;

fn scans(c: &mut Criterion, dir: &std::path::Path) -> Samples {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let samples = Mutex::new(Samples::new());
    let record = |name: &'static str, rows: u64, ns: f64| {
        samples
            .lock()
            .expect("samples")
            .entry((name, rows))
            .or_default()
            .push(ns);
    };
    let mut files = Vec::new();
    for rows in SIZES {
        let (ledger, path, setup) = rt.block_on(filled(dir, rows));
        println!(
            "setup: {rows} terminal rows in {:.1} s",
            setup.as_secs_f64()
        );
        files.push((rows, ledger, path));
    }
    let clock = AtomicU64::new(10_000);

    // Each benchmark runs on both files back to back, so the pair compared shares the machine's
    // conditions as closely as a shared machine allows.
    let mut group = c.benchmark_group("claim_due");
    for (rows, ledger, _) in &files {
        group.bench_function(format!("nothing_due/{rows}"), |b| {
            b.iter_custom(|iters| {
                let elapsed = rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let claimed = ledger.claim_due(DUE_AT - 1, 1, 10).await.expect("claim");
                        assert!(claimed.is_empty());
                    }
                    start.elapsed()
                });
                record("claim_due/nothing_due", *rows, per_call(elapsed, iters));
                elapsed
            })
        });
    }
    for (rows, ledger, _) in &files {
        group.bench_function(format!("10_due/{rows}"), |b| {
            b.iter_custom(|iters| {
                let elapsed = rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        // Past the previous call's 1 ms lease: the same 10 rows are due again.
                        let now = clock.fetch_add(2, Ordering::Relaxed) as i64;
                        let claimed = ledger.claim_due(now, 1, 10).await.expect("claim");
                        assert_eq!(claimed.len(), 10);
                    }
                    start.elapsed()
                });
                record("claim_due/10_due", *rows, per_call(elapsed, iters));
                elapsed
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("sweep_expired");
    for (rows, ledger, _) in &files {
        group.bench_function(format!("nothing_expired/{rows}"), |b| {
            b.iter_custom(|iters| {
                let elapsed = rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let swept = ledger.sweep_expired(1).await.expect("sweep");
                        assert!(swept.is_empty());
                    }
                    start.elapsed()
                });
                record(
                    "sweep_expired/nothing_expired",
                    *rows,
                    per_call(elapsed, iters),
                );
                elapsed
            })
        });
    }
    for (rows, ledger, sweepable) in &files {
        group.bench_function(format!("10_expired/{rows}"), |b| {
            b.iter_custom(|iters| {
                let elapsed = rt.block_on(async {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iters {
                        reset_sweepable(ledger, sweepable).await;
                        let start = Instant::now();
                        let swept = ledger.sweep_expired(1).await.expect("sweep");
                        timed += start.elapsed();
                        assert_eq!(swept.len(), 10);
                    }
                    timed
                });
                record("sweep_expired/10_expired", *rows, per_call(elapsed, iters));
                elapsed
            })
        });
    }
    group.finish();

    let ledgers: Vec<(u64, &dyn FullLedger)> = files
        .iter()
        .map(|(rows, ledger, _)| (*rows, ledger as &dyn FullLedger))
        .collect();
    listing(c, &rt, "listing", &ledgers, &record);
    #[cfg(feature = "postgres")]
    if let Ok(url) = std::env::var("RW_POSTGRES_URL") {
        let mut pg = Vec::new();
        for rows in SIZES {
            let (ledger, setup) = rt.block_on(pg_filled(&url, rows));
            println!(
                "setup: PostgreSQL, {rows} terminal rows in {:.1} s",
                setup.as_secs_f64()
            );
            pg.push((rows, ledger));
        }
        let ledgers: Vec<(u64, &dyn FullLedger)> = pg
            .iter()
            .map(|(rows, ledger)| (*rows, ledger as &dyn FullLedger))
            .collect();
        listing(c, &rt, "listing_pg", &ledgers, &record);
        for (_, ledger) in pg {
            rt.block_on(async {
                let drop = format!("DROP SCHEMA \"{}\" CASCADE", ledger.schema());
                sqlx::query(sqlx::AssertSqlSafe(drop))
                    .execute(ledger.pool())
                    .await
                    .expect("drop schema");
                ledger.close().await;
            });
        }
    } else {
        println!("RW_POSTGRES_URL not set: no PostgreSQL listing rows");
    }
    samples.into_inner().expect("samples")
}

/// The operator's queries (issue 12): the first page of the review queue (50 rows, oldest
/// first, one tenant) and the counts by state of one tenant, on each ledger.
fn listing(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    group_name: &'static str,
    ledgers: &[(u64, &dyn FullLedger)],
    record: &dyn Fn(&'static str, u64, f64),
) {
    let (page_name, count_name) = if group_name == "listing" {
        ("listing/review_queue_first_page", "listing/count_by_state")
    } else {
        (
            "listing_pg/review_queue_first_page",
            "listing_pg/count_by_state",
        )
    };
    let tenant = Tenant::new("tenant-a");
    let queue = OperationQuery::tenant(tenant.clone())
        .state(State::ManualReview)
        .order(Order::OldestFirst)
        .limit(50);
    let scope = TenantScope::Tenant(tenant);
    let mut group = c.benchmark_group(group_name);
    for (rows, ledger) in ledgers {
        group.bench_function(format!("review_queue_first_page/{rows}"), |b| {
            b.iter_custom(|iters| {
                let elapsed = rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let page = ledger.list(&queue).await.expect("list");
                        assert_eq!(page.rows.len(), 50);
                    }
                    start.elapsed()
                });
                record(page_name, *rows, per_call(elapsed, iters));
                elapsed
            })
        });
    }
    for (rows, ledger) in ledgers {
        group.bench_function(format!("count_by_state/{rows}"), |b| {
            b.iter_custom(|iters| {
                let elapsed = rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let counts = ledger.count_by_state(&scope).await.expect("count");
                        assert_eq!(counts.get(State::ManualReview), Some(50));
                    }
                    start.elapsed()
                });
                record(count_name, *rows, per_call(elapsed, iters));
                elapsed
            })
        });
    }
    group.finish();
}

/// A PostgreSQL ledger in a schema of its own with `rows` finished operations, the 50 oldest in
/// `MANUAL_REVIEW`, analyzed; and the setup time.
#[cfg(feature = "postgres")]
async fn pg_filled(url: &str, rows: u64) -> (PostgresLedger, Duration) {
    let schema = format!("rw_bench_listing_{rows}");
    let start = Instant::now();
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&mut conn)
    .await
    .expect("drop old schema");
    conn.close().await.expect("close");
    let options = PostgresLedgerOptions::new()
        .schema(schema.clone())
        .expect("schema")
        .clock(ClockSource::Caller)
        .max_connections(2);
    let ledger = PostgresLedger::connect_with(url, options)
        .await
        .expect("connect ledger");
    let policy = serde_json::to_string(&BudgetPolicy::default()).expect("policy json");
    let fill = format!(
        "INSERT INTO \"{schema}\".rw_operations (
            tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
            request_method, request_url, request_headers, request_body,
            contract_name, contract_hash, budget_policy, state, last_result,
            generation, version, attempts_used, may_have_applied, remote_ref,
            created_ms, updated_ms)
         SELECT 'tenant-a', 'op-' || i, 'create_ticket', 'intent-' || i,
                md5(i::text), md5('h' || i::text), 'POST', 'http://vendor.test/tickets',
                '[[\"content-type\",\"application/json\"]]', '\\x7b7d'::bytea,
                'default', 'x', $1,
                CASE WHEN i <= 50 THEN 'MANUAL_REVIEW' WHEN i % 10 = 0 THEN 'REJECTED'
                     ELSE 'SUCCEEDED' END,
                CASE WHEN i <= 50 THEN NULL WHEN i % 10 = 0 THEN 'REJECTED'
                     ELSE 'SUCCEEDED' END,
                1, 2, 1, TRUE, 'W' || i, 1700000000000 + i, 1700000000000 + i
         FROM generate_series(1, $2::bigint) AS i"
    );
    sqlx::query(sqlx::AssertSqlSafe(fill))
        .bind(policy)
        .bind(rows as i64 + 50)
        .execute(ledger.pool())
        .await
        .expect("fill");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ANALYZE \"{schema}\".rw_operations"
    )))
    .execute(ledger.pool())
    .await
    .expect("analyze");
    (ledger, start.elapsed())
}

fn per_call(elapsed: Duration, iters: u64) -> f64 {
    elapsed.as_nanos() as f64 / iters.max(1) as f64
}

// ── memory ──────────────────────────────────────────────────────────────────────────────────────

#[path = "support/mod.rs"]
mod support;
use support::{Svc, bare, layered, median, request, serve_201};

/// A budget whose lease outlives the measurement.
fn patient_policy() -> BudgetPolicy {
    BudgetPolicy {
        attempt_timeout_ms: 120_000,
        window_ms: 600_000,
        ..BudgetPolicy::default()
    }
}

/// Accepts connections, reads each request, never answers. Counts requests received. Runs on
/// a plain thread and allocates nothing per connection (the streams go into a preallocated
/// vector), so the counted heap is the client's.
fn silent_server(received: Arc<AtomicUsize>, capacity: usize) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut held = Vec::with_capacity(capacity);
        let mut buf = [0_u8; 4096];
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if matches!(stream.read(&mut buf), Ok(n) if n > 0) {
                received.fetch_add(1, Ordering::SeqCst);
            }
            if held.len() == held.capacity() {
                held.clear(); // a previous round's connections: let them go
            }
            held.push(stream);
        }
    });
    addr
}

/// Live heap bytes added per operation while `n` requests through `svc` are in flight.
fn in_flight_bytes(rt: &tokio::runtime::Runtime, svc: &Svc, n: usize) -> f64 {
    let received = Arc::new(AtomicUsize::new(0));
    let addr = silent_server(received.clone(), 4 * n);
    let url = format!("http://{addr}/tickets");
    let round = |count: usize| -> isize {
        rt.block_on(async {
            let base = received.load(Ordering::SeqCst);
            let mut tasks = Vec::with_capacity(count);
            // Settle: let earlier rounds' frees land before the baseline.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let before = LIVE_BYTES.load(Ordering::SeqCst);
            for _ in 0..count {
                let mut svc = svc.clone();
                let req = request(&url);
                tasks.push(tokio::spawn(async move {
                    let _ = svc.ready().await.expect("ready").call(req).await;
                }));
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            while received.load(Ordering::SeqCst) < base + count {
                assert!(
                    Instant::now() < deadline,
                    "requests never reached the server"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // Let the last sends finish their bookkeeping.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let after = LIVE_BYTES.load(Ordering::SeqCst);
            for t in &tasks {
                t.abort();
            }
            for t in tasks {
                let _ = t.await;
            }
            after - before
        })
    };
    // A warm-up round (lazy statics, pools, statement caches), then the measured one.
    round(n / 4);
    round(n) as f64 / n as f64
}

/// (allocations, bytes allocated, live bytes retained) per completed request at concurrency 1.
/// The server runs in this process too; its share is the same for every configuration and is
/// in `bare`.
fn allocations_per_request(
    rt: &tokio::runtime::Runtime,
    svc: &Svc,
    addr: SocketAddr,
    n: u64,
) -> (f64, f64, f64) {
    let url = format!("http://{addr}/tickets");
    rt.block_on(async {
        let mut svc = svc.clone();
        for _ in 0..50 {
            let status = svc.ready().await.expect("ready").call(request(&url)).await;
            assert_eq!(status.expect("request"), 201);
        }
        let (a0, b0, l0) = (
            ALLOCATIONS.load(Ordering::SeqCst),
            ALLOCATED_BYTES.load(Ordering::SeqCst),
            LIVE_BYTES.load(Ordering::SeqCst),
        );
        for _ in 0..n {
            let status = svc.ready().await.expect("ready").call(request(&url)).await;
            assert_eq!(status.expect("request"), 201);
        }
        (
            (ALLOCATIONS.load(Ordering::SeqCst) - a0) as f64 / n as f64,
            (ALLOCATED_BYTES.load(Ordering::SeqCst) - b0) as f64 / n as f64,
            (LIVE_BYTES.load(Ordering::SeqCst) - l0) as f64 / n as f64,
        )
    })
}

fn memory(dir: &std::path::Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sqlite = |file: &str| -> Arc<dyn FullLedger> {
        Arc::new(
            rt.block_on(SqliteLedger::open(dir.join(file)))
                .expect("sqlite ledger"),
        )
    };
    let configs: Vec<(&str, Svc)> = vec![
        ("bare", bare()),
        (
            "layer_sqlite_full",
            layered(sqlite("in-flight.db"), patient_policy()),
        ),
        (
            "layer_memory",
            layered(Arc::new(MemoryLedger::new()), patient_policy()),
        ),
    ];
    const N: usize = 1_000;
    println!("\nmemory per in-flight operation ({N} in flight, live heap bytes / {N})");
    println!(
        "{:<22} {:>14} {:>18}",
        "configuration", "bytes/op", "added by layer"
    );
    let mut bare_bytes = None;
    for (name, svc) in &configs {
        let bytes = in_flight_bytes(&rt, svc, N);
        let base = *bare_bytes.get_or_insert(bytes);
        let added = if *name == "bare" {
            String::new()
        } else {
            format!("{:.0}", bytes - base)
        };
        println!("{name:<22} {bytes:>14.0} {added:>18}");
    }

    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(serve_201(listener));
    let alloc_configs: Vec<(&str, Svc)> = vec![
        ("bare", bare()),
        (
            "layer_memory",
            layered(Arc::new(MemoryLedger::new()), patient_policy()),
        ),
        (
            "layer_sqlite_full",
            layered(sqlite("allocs.db"), patient_policy()),
        ),
    ];
    println!("\nheap allocations per request at concurrency 1 (client and server in one process)");
    println!(
        "{:<22} {:>11} {:>10} {:>13} {:>12} {:>15}",
        "configuration", "allocs/req", "bytes/req", "added allocs", "added bytes", "retained/req"
    );
    let mut base = None;
    for (name, svc) in &alloc_configs {
        let (allocs, bytes, retained) = allocations_per_request(&rt, svc, addr, 2_000);
        let (ba, bb) = *base.get_or_insert((allocs, bytes));
        println!(
            "{name:<22} {allocs:>11.1} {bytes:>10.0} {:>13.1} {:>12.0} {retained:>15.0}",
            allocs - ba,
            bytes - bb
        );
    }
    println!(
        "(retained/req: live heap left behind by each finished request; MemoryLedger keeps its \
         rows, SQLite keeps them on disk)"
    );
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut c = Criterion::default()
        .sample_size(15)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut samples = scans(&mut c, dir.path());
    c.final_summary();

    if !samples.is_empty() {
        println!(
            "\nrecovery scans and operator listing (SQLite synchronous=OFF; listing_pg: \
             PostgreSQL), median time per call; target: flat within 2x"
        );
        println!(
            "{:<32} {:>14} {:>14} {:>8} {:>8}",
            "benchmark", "1k rows us", "1M rows us", "ratio", "target"
        );
        let names: Vec<&'static str> = samples.keys().map(|(n, _)| *n).collect();
        let mut seen = std::collections::BTreeSet::new();
        for name in names {
            if !seen.insert(name) {
                continue;
            }
            let (Some(mut small), Some(mut large)) = (
                samples.get_mut(&(name, SIZES[0])).map(|v| v.clone()),
                samples.get_mut(&(name, SIZES[1])).map(|v| v.clone()),
            ) else {
                continue;
            };
            let (s, l) = (median(&mut small), median(&mut large));
            let ratio = l / s;
            println!(
                "{:<32} {:>14.1} {:>14.1} {:>7.2}x {:>8}",
                name,
                s / 1000.0,
                l / 1000.0,
                ratio,
                if ratio <= 2.0 { "met" } else { "NOT met" }
            );
        }
    }
    memory(dir.path());
}
