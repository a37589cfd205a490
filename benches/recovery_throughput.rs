//! Recovery throughput (issue 29 item 5): after a vendor outage, a backlog of `UNKNOWN`
//! operations drained by the recovery engine, against a vendor on loopback that answers every
//! lookup at once.
//!
//! ```text
//! RW_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//! cargo bench -p recoverable-write-benches --bench recovery_throughput -- 100000
//! ```
//!
//! The one argument is the backlog's size (default 100,000; `-- 2000` for a smoke run).
//!
//! - **SQLite**: a fresh ledger file (`synchronous=FULL`, the default) holding the backlog,
//!   made by one `INSERT ... SELECT` (`support/backlog.rs`, shared with `recovery_scan`),
//!   drained by one recoverer working one row at a time (the default) and 32 at once
//!   (`Recoverer::concurrency(32)`, its batch size).
//! - **PostgreSQL** (feature `postgres` and a server at `RW_POSTGRES_URL`; skipped without):
//!   a fresh schema with the backlog, one `PostgresLedger` with a pool of 8, drained by 1, 2,
//!   4 and 8 recoverers each working one row at a time (each its own `Recoverer` task over the
//!   shared ledger, as separate workers would run), then by 1 and 4 working 32 rows at once.
//!
//! Each drain runs with the per-target replay limiter off and on (`ReplayLimiter::new(50.0,
//! 10)`: 50 replays a second per host). The limiter only gates replays; every lookup here
//! answers `SUCCEEDED`, so no replay is needed, and "on" measures what consulting nothing
//! costs (the rows never reach it).
//!
//! The vendor is a hyper server on 127.0.0.1 (in this process, on the same runtime) answering
//! `GET /operations/{id}` with `200 {"operation_id":id,"status":"SUCCEEDED","resource_id":"W1"}`,
//! and `201` to anything else. It keeps nothing per request: the crate's `FakeVendor` logs
//! every request it sees (`FakeVendor::requests`), which would grow the process's memory with
//! the backlog and hide the recoverer's.
//!
//! Reported per drain: operations reconciled per second (backlog / time until no operation is
//! `UNKNOWN`, `RETRY_READY`, `PROCESSING` or `IN_FLIGHT`, counted by the ledger every 100 ms
//! near the end and more seldom before: see `next_count`),
//! the lookups' round trip as the recoverer's client saw it (median and 99th percentile), the
//! process's resident memory (`/proc/self/statm`, sampled every 100 ms: at the start, the
//! peak, and the peak's growth), and the time the gauges (`Recoverer::export_gauges`) and the
//! review queue (`MANUAL_REVIEW` count) take to read exact once the drain ends, with whether
//! they are (every open state 0, nothing quarantined), and the CPU cores busy during the drain
//! in this process (`cpu app`: the recoverers, the vendor and the client) and in the
//! PostgreSQL server's processes on this machine (`cpu pg`), from `/proc/*/stat`: on 2 cores,
//! a sum near 2 says the machine is the bound. Then the goals of issue 29 next to what the run
//! measured, and for PostgreSQL the CPU each operation costs (this process with the vendor,
//! and the server) per worker count, with the cores 3x one worker's rate would need. The lookups' round trip is
//! as the recoverer's client saw it: the vendor answers at once, and what the round trip adds
//! is the queueing of 32 lookups at once on 2 cores.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use recoverable_write::ledger::{FullLedger, ListingLedger, TenantScope};
use recoverable_write::{HttpLookup, RecoverableWrite, ReplayLimiter, State};
use tokio::net::TcpListener;

#[path = "support/backlog.rs"]
mod backlog;
#[path = "support/mod.rs"]
mod support;

/// Rows each recoverer works at once (`Recoverer::concurrency`), as the recovery guide advises
/// for a backlog: its batch size (the default, 32).
const CONCURRENCY: usize = 32;

/// The backlog's size unless the command line gives one.
const DEFAULT_SIZE: u64 = 100_000;

/// Lookup round trips seen by the recoverer's client, in 10 µs buckets up to 100 ms.
static LOOKUP_US: [AtomicU64; 10_001] = [const { AtomicU64::new(0) }; 10_001];

fn record_lookup(elapsed: Duration) {
    let bucket = (elapsed.as_micros() / 10).min(10_000) as usize;
    LOOKUP_US[bucket].fetch_add(1, Ordering::Relaxed);
}

/// (median, 99th percentile) in µs of the lookups recorded since the last call; resets.
fn lookup_percentiles() -> (f64, f64) {
    let counts: Vec<u64> = LOOKUP_US
        .iter()
        .map(|c| c.swap(0, Ordering::Relaxed))
        .collect();
    let total: u64 = counts.iter().sum();
    let at = |q: f64| {
        let want = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return (i as f64 + 0.5) * 10.0;
            }
        }
        f64::NAN
    };
    (at(0.5), at(0.99))
}

/// The loopback vendor: every lookup answers `SUCCEEDED`, anything else `201`.
async fn vendor(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let svc = service_fn(|req: Request<Incoming>| async move {
                let path = req.uri().path().to_owned();
                let _ = req.into_body().collect().await;
                let response = match path.strip_prefix("/operations/") {
                    Some(id) => Response::builder().status(200).body(Full::new(Bytes::from(
                        format!(
                            r#"{{"operation_id":"{id}","status":"SUCCEEDED","resource_id":"W1"}}"#
                        ),
                    ))),
                    None => Response::builder()
                        .status(201)
                        .body(Full::new(Bytes::from_static(br#"{"id":"W1"}"#))),
                };
                Ok::<_, Infallible>(response.expect("response"))
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Resident memory of this process, in bytes (`/proc/self/statm`; 0 where there is none).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// CPU seconds (user + system) used so far by this process and by the PostgreSQL server's
/// processes on this machine (every process named `postgres`; 0 where `/proc` shows none).
fn cpu_seconds() -> (f64, f64) {
    let ticks = |stat: &str| -> Option<(String, f64)> {
        let (comm_start, comm_end) = (stat.find('(')?, stat.rfind(')')?);
        let comm = stat[comm_start + 1..comm_end].to_owned();
        let rest: Vec<&str> = stat[comm_end + 2..].split_whitespace().collect();
        // Fields 14 and 15 (utime, stime) are the 12th and 13th after the command.
        let used = rest.get(11)?.parse::<f64>().ok()? + rest.get(12)?.parse::<f64>().ok()?;
        Some((comm, used / 100.0))
    };
    let own = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| ticks(&s))
        .map_or(0.0, |(_, t)| t);
    let mut server = 0.0;
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            if let Ok(stat) = std::fs::read_to_string(entry.path().join("stat"))
                && let Some((comm, t)) = ticks(&stat)
                && comm == "postgres"
            {
                server += t;
            }
        }
    }
    (own, server)
}

/// What one drain measured.
struct Drain {
    backend: &'static str,
    workers: usize,
    concurrency: usize,
    /// CPU seconds used during the drain by this process and by the PostgreSQL server.
    cpu_bench: f64,
    cpu_server: f64,
    limiter: bool,
    size: u64,
    elapsed: Duration,
    lookup_p50_us: f64,
    lookup_p99_us: f64,
    rss_start: u64,
    rss_peak: u64,
    gauges_after: Duration,
    gauges_exact: bool,
    review_queue: u64,
}

impl Drain {
    fn per_second(&self) -> f64 {
        self.size as f64 / self.elapsed.as_secs_f64()
    }
}

/// The open states a drained backlog leaves empty.
const WORKING: [State; 4] = [
    State::Unknown,
    State::RetryReady,
    State::Processing,
    State::InFlight,
];

/// Drains the backlog in `ledger` with `workers` recoverers; see the module's documentation.
async fn drain<L>(
    backend: &'static str,
    ledger: Arc<L>,
    size: u64,
    (workers, concurrency): (usize, usize),
    limiter: bool,
    vendor: SocketAddr,
) -> Drain
where
    L: FullLedger + ListingLedger + 'static,
{
    let rw = RecoverableWrite::builder(ledger.clone() as Arc<dyn FullLedger>)
        .transport(support::client())
        .build()
        .expect("a valid configuration");
    // The lookups' client, timed.
    let client = support::client();
    let timed = tower::service_fn(move |req: Request<Full<Bytes>>| {
        let client = client.clone();
        async move {
            let start = Instant::now();
            let res = client.request(req).await;
            record_lookup(start.elapsed());
            res
        }
    });
    let limiter = limiter.then(|| Arc::new(ReplayLimiter::new(50.0, 10)));
    let _ = lookup_percentiles();
    let rss_start = rss_bytes();
    let cpu_start = cpu_seconds();
    let start = Instant::now();
    let mut handles = Vec::with_capacity(workers);
    for _ in 0..workers {
        let lookup = HttpLookup::new(
            timed.clone(),
            format!("http://{vendor}/operations/{{operation_id}}"),
        )
        .tenant_header(HeaderName::from_static("x-tenant"));
        let mut recoverer = rw
            .recoverer()
            .reconciler(lookup)
            .gauge_interval(None)
            .send_prepared_after(None)
            .concurrency(concurrency);
        if let Some(limiter) = &limiter {
            recoverer = recoverer.replay_limiter(limiter.clone());
        }
        handles.push(recoverer.spawn());
    }
    let mut rss_peak = rss_start;
    let mut count_at = start;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        rss_peak = rss_peak.max(rss_bytes());
        if Instant::now() < count_at {
            continue;
        }
        let counts = ledger
            .count_by_state(&TenantScope::AllTenants)
            .await
            .expect("count");
        let left: u64 = WORKING.iter().filter_map(|s| counts.get(*s)).sum();
        if left == 0 {
            break;
        }
        count_at = Instant::now() + next_count(size, left, start.elapsed());
        if start.elapsed() > Duration::from_secs(1800) {
            panic!("{backend}: {left} operations still open after 30 minutes");
        }
    }
    let elapsed = start.elapsed();
    let cpu_end = cpu_seconds();
    for h in handles {
        h.shutdown().await;
    }
    let (lookup_p50_us, lookup_p99_us) = lookup_percentiles();
    // The gauges and the review queue, read once the drain is over.
    let gauges_at = Instant::now();
    let (counts, _oldest) = rw
        .recoverer()
        .export_gauges()
        .await
        .expect("gauges")
        .expect("a ledger with listing");
    let review_queue = counts.get(State::ManualReview).unwrap_or(0);
    let gauges_after = elapsed + gauges_at.elapsed();
    let gauges_exact = counts.iter().all(|(_, n)| n == 0) && counts.quarantined() == 0;
    Drain {
        backend,
        workers,
        concurrency,
        cpu_bench: cpu_end.0 - cpu_start.0,
        cpu_server: cpu_end.1 - cpu_start.1,
        limiter: limiter.is_some(),
        size,
        elapsed,
        lookup_p50_us,
        lookup_p99_us,
        rss_start,
        rss_peak,
        gauges_after,
        gauges_exact,
        review_queue,
    }
}

/// How long to wait before counting the open rows again: a quarter of the time the rest of the
/// backlog takes at the rate so far, between 100 ms and 2 s. The count reads an index entry per
/// open row (on PostgreSQL here about 24 ms of the server's CPU per 20,000 rows): counted every
/// 100 ms throughout, it took a quarter of a core from the drain it measured. Near the end it is
/// still read every 100 ms, so the drain's end is seen as precisely as before.
fn next_count(size: u64, left: u64, elapsed: Duration) -> Duration {
    let done = size.saturating_sub(left);
    if done == 0 {
        return Duration::from_millis(500);
    }
    let rest = elapsed.as_secs_f64() * left as f64 / done as f64;
    Duration::from_secs_f64((rest / 4.0).clamp(0.1, 2.0))
}

fn print(d: &Drain) {
    println!(
        "{:<10} {:>7} {:>5} {:>7} {:>9} {:>10.1} {:>10.0} {:>9.0} {:>9.0} {:>9.1} {:>9.1} {:>10.2} {:>6} {:>7} {:>8.2} {:>8.2}",
        d.backend,
        d.workers,
        d.concurrency,
        if d.limiter { "on" } else { "off" },
        d.size,
        d.elapsed.as_secs_f64(),
        d.per_second(),
        d.lookup_p50_us,
        d.lookup_p99_us,
        d.rss_start as f64 / 1_048_576.0,
        d.rss_peak.saturating_sub(d.rss_start) as f64 / 1_048_576.0,
        d.gauges_after.as_secs_f64(),
        if d.gauges_exact { "yes" } else { "NO" },
        d.review_queue,
        d.cpu_bench / d.elapsed.as_secs_f64(),
        d.cpu_server / d.elapsed.as_secs_f64(),
    );
}

fn header() {
    println!(
        "{:<10} {:>7} {:>5} {:>7} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>6} {:>7} {:>8} {:>8}",
        "backend",
        "workers",
        "conc",
        "limiter",
        "backlog",
        "drain s",
        "ops/s",
        "lkp p50us",
        "lkp p99us",
        "rss MiB",
        "+peak MiB",
        "gauges s",
        "exact",
        "review",
        "cpu app",
        "cpu pg"
    );
}

fn main() {
    // `cargo bench` passes `--bench`; the size is the first argument that is a number.
    let size = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<u64>().ok())
        .unwrap_or(DEFAULT_SIZE);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(vendor(listener));
    let url = format!("http://{addr}/tickets");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut drains = Vec::new();
    println!("recovery throughput: a backlog of {size} UNKNOWN operations, vendor on {addr}");
    header();

    for (concurrency, limiter) in [(1, false), (CONCURRENCY, false), (CONCURRENCY, true)] {
        let path = dir.path().join(format!(
            "backlog-{concurrency}-{}.db",
            if limiter { "on" } else { "off" }
        ));
        let made = Instant::now();
        rt.block_on(backlog::sqlite_unknown(
            &path,
            size,
            &url,
            support::now_ms(),
        ));
        let made = made.elapsed();
        let ledger = rt
            .block_on(recoverable_write::SqliteLedger::open(&path))
            .expect("open ledger");
        let d = rt.block_on(drain(
            "sqlite",
            Arc::new(ledger),
            size,
            (1, concurrency),
            limiter,
            addr,
        ));
        print(&d);
        eprintln!("  (sqlite backlog made in {:.1} s)", made.as_secs_f64());
        drains.push(d);
    }

    #[cfg(feature = "postgres")]
    {
        let url_pg = std::env::var("RW_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let reachable = rt.block_on(async {
            use sqlx::Connection;
            sqlx::PgConnection::connect(&url_pg).await.is_ok()
        });
        if reachable {
            let runs = [1usize, 2, 4, 8]
                .into_iter()
                .flat_map(|w| [(w, 1, false), (w, 1, true)])
                .chain([(1, CONCURRENCY, false), (4, CONCURRENCY, false)]);
            for (workers, concurrency, limiter) in runs {
                {
                    let made = Instant::now();
                    let ledger = rt.block_on(backlog::pg_unknown(
                        &url_pg,
                        "rw_bench_recovery",
                        8,
                        size,
                        &url,
                        support::now_ms(),
                    ));
                    let made = made.elapsed();
                    let d = rt.block_on(drain(
                        "postgres",
                        Arc::new(ledger),
                        size,
                        (workers, concurrency),
                        limiter,
                        addr,
                    ));
                    print(&d);
                    eprintln!("  (postgres backlog made in {:.1} s)", made.as_secs_f64());
                    drains.push(d);
                }
            }
        } else {
            eprintln!("postgres skipped: no PostgreSQL at RW_POSTGRES_URL");
        }
    }

    println!("\ngoals (issue 29 item 5)");
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let sqlite_goals = |d: &Drain, how: &str| {
        println!(
            "  SQLite, one recoverer {how}: {:.0} ops/s (goal >= 2,000) -> {}; lookups p50 {:.0} us, \
             p99 {:.0} us (goal < 1 ms) -> {}",
            d.per_second(),
            verdict(d.per_second() >= 2000.0),
            d.lookup_p50_us,
            d.lookup_p99_us,
            verdict(d.lookup_p50_us < 1000.0)
        );
    };
    if let Some(d) = drains
        .iter()
        .find(|d| d.backend == "sqlite" && d.concurrency == 1)
    {
        sqlite_goals(d, "one row at a time (the default), limiter off");
    }
    for limiter in [false, true] {
        let on = if limiter { "on" } else { "off" };
        if let Some(d) = drains
            .iter()
            .find(|d| d.backend == "sqlite" && d.limiter == limiter && d.concurrency == CONCURRENCY)
        {
            sqlite_goals(
                d,
                &format!("working {CONCURRENCY} rows at once, limiter {on}"),
            );
        }
        let pg = |w: usize| {
            drains.iter().find(|d| {
                d.backend == "postgres"
                    && d.limiter == limiter
                    && d.workers == w
                    && d.concurrency == 1
            })
        };
        if let (Some(one), Some(four)) = (pg(1), pg(4)) {
            let scale = four.per_second() / one.per_second();
            println!(
                "  PostgreSQL, limiter {on}, each worker one row at a time: 4 workers / 1 worker = {:.2}x (goal >= 3x) -> {} \
                 (2 workers {:.2}x, 8 workers {:.2}x)",
                scale,
                verdict(scale >= 3.0),
                pg(2).map_or(f64::NAN, |d| d.per_second() / one.per_second()),
                pg(8).map_or(f64::NAN, |d| d.per_second() / one.per_second()),
            );
            // What bounds the scaling: the CPU each operation costs (this process with the
            // vendor, plus the server) at each worker count, and the cores three times one
            // worker's rate would need at four workers' cost.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            let per_op = |d: &Drain| (d.cpu_bench + d.cpu_server) / d.size as f64;
            let busy = |d: &Drain| (d.cpu_bench + d.cpu_server) / d.elapsed.as_secs_f64();
            let costs: Vec<String> = [1, 2, 4, 8]
                .into_iter()
                .filter_map(|w| pg(w).map(|d| (w, d)))
                .map(|(w, d)| {
                    format!(
                        "{w} workers {:.2} ms ({:.2} cores busy)",
                        per_op(d) * 1000.0,
                        busy(d)
                    )
                })
                .collect();
            let needed = 3.0 * one.per_second() * per_op(four);
            println!(
                "    CPU per operation: {}; 3x one worker at four workers' cost needs {needed:.2} \
                 cores of {cores}",
                costs.join(", "),
            );
        }
    }
}
