//! Retention soak: a million operations through the ledger at a short retention. Does the
//! store's size plateau, and does the write path keep its throughput while purging?
//!
//! ```text
//! cargo bench -p recoverable-write-benches --bench retention_soak
//! RW_SOAK_OPS=200000 cargo bench -p recoverable-write-benches --bench retention_soak   # shorter
//! RW_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench ... # PostgreSQL too
//! RW_SOAK_ONLY=postgres ...                                                 # one backend
//! ```
//!
//! For each backend, two ledgers are written side by side, in alternating chunks of 50 000
//! operations (64 tasks, each operation the two writes of a request through the layer:
//! `create_and_apply`, then the result, `SUCCEEDED`; 1 KiB bodies):
//!
//! - **purging**: retention on, details after 2 s, the row after 5 s; purgers run every
//!   second *while this ledger's chunk is written* (two purgers on PostgreSQL, which share the
//!   work through `SKIP LOCKED`), so every purge competes with the writes it is measured
//!   against;
//! - **keeping**: no retention (as before issue 15).
//!
//! Alternating chunks keep the disk's and the machine's drift out of the comparison. After
//! each chunk the bench prints both ledgers' size on disk (SQLite: database + WAL files;
//! PostgreSQL: `pg_total_relation_size` of the operations and evidence tables) and the chunk's
//! throughput. At the end: the median chunk throughput of each, their ratio (target: purging at
//! least 90% of keeping), and the size of each at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "support/mod.rs"]
mod support;

use bytes::Bytes;
use recoverable_write::RecoverableWrite;
use recoverable_write::SqliteLedger;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::conformance::{keep, update_of};
use recoverable_write::ledger::{Ledger, NewOperation};
use recoverable_write::retention::{Purger, Retention};
use recoverable_write::state::State;
use support::{first_claim, median, new_row, now_ms};

const CHUNK: u64 = 50_000;
const CONCURRENCY: u64 = 64;

/// A fresh operation with a 1 KiB body.
fn fresh_operation() -> NewOperation {
    let mut new = support::fresh_operation();
    let mut request = (*new.request).clone();
    request.body = Bytes::from(vec![b'x'; 1024]);
    new.request = Arc::new(request);
    new
}

/// The two writes of one request: create and claim, then the result, both waiting for their
/// commit (`apply`, the worst case for the write path; the layer's `record` may skip the fsync).
async fn lifecycle(ledger: &dyn Ledger) {
    let new = fresh_operation();
    let first = first_claim(&new);
    let r = new_row(ledger.create_and_apply(new, first).await.expect("create"));
    let done = keep(&r, State::Succeeded, now_ms());
    ledger
        .apply(update_of(&r, done, "attempt_result"))
        .await
        .expect("apply")
        .expect("result precondition holds");
}

/// Writes `n` operations from [`CONCURRENCY`] tasks; returns operations per second.
async fn chunk(ledger: Arc<dyn FullLedger>, n: u64) -> f64 {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (ledger, next) = (ledger.clone(), next.clone());
        tasks.spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                lifecycle(&*ledger).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("writer");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Purgers that run every second while `on` is set.
fn purgers(purger: Purger, on: Arc<AtomicBool>, count: usize, rows: Arc<AtomicU64>) {
    for _ in 0..count {
        let (purger, on, rows) = (purger.clone(), on.clone(), rows.clone());
        tokio::spawn(async move {
            loop {
                if on.load(Ordering::Relaxed) {
                    match purger.run().await {
                        Ok(r) => {
                            rows.fetch_add(r.details.rows + r.identity.rows, Ordering::Relaxed);
                        }
                        Err(e) => eprintln!("purge failed: {e}"),
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
}

/// How the size of a ledger is read.
type SizeOf = Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = u64>>>>;

struct Pair {
    name: &'static str,
    purging: Arc<dyn FullLedger>,
    keeping: Arc<dyn FullLedger>,
    size_purging: SizeOf,
    size_keeping: SizeOf,
    purgers: usize,
}

async fn soak(pair: Pair, total: u64) {
    let on = Arc::new(AtomicBool::new(false));
    let purged = Arc::new(AtomicU64::new(0));
    let config = RecoverableWrite::builder(pair.purging.clone())
        .retention(
            Retention::new()
                .details(Duration::from_secs(2))
                .identity(Duration::from_secs(5))
                .interval(None),
        )
        .build()
        .expect("valid retention");
    purgers(config.purger(), on.clone(), pair.purgers, purged.clone());
    println!(
        "\n{}: {total} operations into each ledger, chunks of {CHUNK}, {CONCURRENCY} tasks",
        pair.name
    );
    println!(
        "{:>9} {:>14} {:>14} {:>16} {:>16}",
        "ops", "purging ops/s", "keeping ops/s", "purging bytes", "keeping bytes"
    );
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let mut written = 0;
    while written < total {
        let n = CHUNK.min(total - written);
        on.store(true, Ordering::Relaxed);
        let a = chunk(pair.purging.clone(), n).await;
        on.store(false, Ordering::Relaxed);
        let b = chunk(pair.keeping.clone(), n).await;
        written += n;
        with.push(a);
        without.push(b);
        println!(
            "{written:>9} {a:>14.0} {b:>14.0} {:>16} {:>16}",
            (pair.size_purging)().await,
            (pair.size_keeping)().await
        );
    }
    let mut ratios: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a / b).collect();
    let (a, b) = (median(&mut with), median(&mut without));
    println!(
        "{}: median chunk throughput purging {a:.0} ops/s, keeping {b:.0} ops/s: ratio {:.3}; \
         median of the per-chunk ratios {:.3} (target >= 0.90); rows purged (details + \
         identity) {}",
        pair.name,
        a / b,
        median(&mut ratios),
        purged.load(Ordering::Relaxed)
    );
}

fn sqlite_size(path: std::path::PathBuf) -> SizeOf {
    Box::new(move || {
        let path = path.clone();
        Box::pin(async move {
            ["", "-wal"]
                .iter()
                .map(|suffix| {
                    let mut p = path.clone().into_os_string();
                    p.push(suffix);
                    std::fs::metadata(p).map_or(0, |m| m.len())
                })
                .sum()
        })
    })
}

#[cfg(feature = "postgres")]
fn pg_size(pool: sqlx::PgPool, schema: String) -> SizeOf {
    Box::new(move || {
        let (pool, schema) = (pool.clone(), schema.clone());
        Box::pin(async move {
            let sql = format!(
                "SELECT (pg_total_relation_size('\"{schema}\".rw_operations') \
                 + pg_total_relation_size('\"{schema}\".rw_evidence'))::bigint"
            );
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await
                .expect("table size") as u64
        })
    })
}

#[cfg(feature = "postgres")]
async fn postgres_pair(url: &str) -> Option<(Pair, Vec<String>)> {
    use recoverable_write::PostgresLedger;
    use recoverable_write::ledger::PostgresLedgerOptions;
    let mut ledgers = Vec::new();
    let mut schemas = Vec::new();
    for which in ["purging", "keeping"] {
        let schema = format!("rw_soak_{which}_{}", std::process::id());
        let options = PostgresLedgerOptions::new()
            .schema(schema.clone())
            .expect("schema")
            .max_connections(8);
        let ledger = match PostgresLedger::connect_with(url, options).await {
            Ok(l) => l,
            Err(e) => {
                println!("PostgreSQL skipped: {e}");
                return None;
            }
        };
        ledgers.push(ledger);
        schemas.push(schema);
    }
    let keeping = ledgers.pop().expect("two");
    let purging = ledgers.pop().expect("two");
    let pair = Pair {
        name: "postgres",
        size_purging: pg_size(purging.pool().clone(), schemas[0].clone()),
        size_keeping: pg_size(keeping.pool().clone(), schemas[1].clone()),
        purging: Arc::new(purging),
        keeping: Arc::new(keeping),
        purgers: 2,
    };
    Some((pair, schemas))
}

fn main() {
    let total: u64 = std::env::var("RW_SOAK_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // `RW_SOAK_ONLY=sqlite` or `=postgres` runs one backend.
    let only = std::env::var("RW_SOAK_ONLY").unwrap_or_default();
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b) = (dir.path().join("purging.db"), dir.path().join("keeping.db"));
        let pair = Pair {
            name: "sqlite",
            purging: Arc::new(SqliteLedger::open(&a).await.expect("open")),
            keeping: Arc::new(SqliteLedger::open(&b).await.expect("open")),
            size_purging: sqlite_size(a),
            size_keeping: sqlite_size(b),
            purgers: 1,
        };
        if only != "postgres" {
            soak(pair, total).await;
        }

        #[cfg(feature = "postgres")]
        match std::env::var("RW_POSTGRES_URL")
            .ok()
            .filter(|_| only != "sqlite")
        {
            Some(url) => {
                if let Some((pair, schemas)) = postgres_pair(&url).await {
                    soak(pair, total).await;
                    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
                    for s in schemas {
                        let sql = format!("DROP SCHEMA \"{s}\" CASCADE");
                        let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await;
                    }
                }
            }
            None => println!("\npostgres: skipped (set RW_POSTGRES_URL)"),
        }
    });
}
