//! Overhead of the layer against the bare hyper-util client, side by side in one run.
//!
//! A small hyper server on 127.0.0.1 answers every request with `201 {"id":"W1"}`. Each
//! configuration sends POSTs at concurrency 1 and 64, all in one run, side by side:
//! - `bare`: the hyper-util legacy client alone;
//! - `layer_memory`: RecoverableWriteLayer + SendOnceGuard + client, MemoryLedger;
//! - `layer_sqlite_full`: the same over SqliteLedger with `synchronous=FULL` (a file in a temp
//!   dir), group commit on (the default, up to 64 writes per commit);
//! - `layer_sqlite_full_batch1`: the same with group commit off (`max_batch(1)`: one
//!   transaction, one fsync, per ledger write), to show what batching buys.
//!
//! A reqwest row is not possible yet: the crate has no reqwest adapter (feature `reqwest`).
//!
//! ```text
//! cargo bench --bench overhead
//! ```
//!
//! After criterion's own report, a table prints for each configuration the median time per
//! request (median over criterion's samples of the mean time per request in the sample), its
//! throughput relative to `bare` at the same concurrency, and for SQLite the mean number of
//! ledger writes per commit. Then the median per-request latency at concurrency 1 (every request
//! timed on its own) and the latency each layer adds to `bare`, and which targets of issue #6 are
//! met. Every figure comes from this one run; compare ratios, not absolute numbers across runs.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use recoverable_write::ledger::{Ledger, SqliteLedgerOptions};
use recoverable_write::{MemoryLedger, RecoverableWriteLayer, SendOnceGuardLayer, SqliteLedger};
use tokio::net::TcpListener;
use tower::util::BoxCloneService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

type Svc = BoxCloneService<Request<Full<Bytes>>, u16, BoxError>;

/// Mean ns per request of every sample, keyed by (concurrency, configuration).
static SAMPLES: Mutex<BTreeMap<(usize, &'static str), Vec<f64>>> = Mutex::new(BTreeMap::new());

/// Latency of every single request at concurrency 1 (ns), keyed by configuration.
static LATENCIES: Mutex<BTreeMap<&'static str, Vec<f64>>> = Mutex::new(BTreeMap::new());

async fn serve(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let svc = service_fn(|req: Request<Incoming>| async move {
                let _ = req.into_body().collect().await;
                Ok::<_, Infallible>(
                    Response::builder()
                        .status(201)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(br#"{"id":"W1"}"#)))
                        .expect("response"),
                )
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .pool_max_idle_per_host(128)
        .build(connector)
}

fn bare() -> Svc {
    BoxCloneService::new(client().map_err(BoxError::from).and_then(
        |res: Response<Incoming>| async move {
            let status = res.status().as_u16();
            res.into_body().collect().await?;
            Ok(status)
        },
    ))
}

fn layered(ledger: Arc<dyn Ledger>) -> Svc {
    let svc = ServiceBuilder::new()
        .layer(RecoverableWriteLayer::from_arc(ledger))
        .layer(SendOnceGuardLayer::new())
        .service(client());
    BoxCloneService::new(
        svc.map_err(BoxError::from)
            .and_then(|res: Response<_>| async move {
                let status = res.status().as_u16();
                let _ = BodyExt::collect(res.into_body()).await;
                Ok(status)
            }),
    )
}

/// Sends `n` POSTs with `concurrency` in flight; returns the elapsed time. At concurrency 1,
/// every request's own latency is added to `latencies`.
async fn drive(
    svc: &Svc,
    addr: SocketAddr,
    n: u64,
    concurrency: usize,
    latencies: Option<&mut Vec<f64>>,
) -> Duration {
    if let (1, Some(latencies)) = (concurrency, latencies) {
        let mut svc = svc.clone();
        let url = format!("http://{addr}/tickets");
        let start = Instant::now();
        for _ in 0..n {
            let req = request(&url);
            let sent = Instant::now();
            let status = svc
                .ready()
                .await
                .expect("ready")
                .call(req)
                .await
                .expect("request succeeds");
            latencies.push(sent.elapsed().as_nanos() as f64);
            assert_eq!(status, 201);
        }
        return start.elapsed();
    }
    let next = Arc::new(AtomicU64::new(0));
    let url = format!("http://{addr}/tickets");
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let mut svc = svc.clone();
        let next = next.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let req = request(&url);
                let status = svc
                    .ready()
                    .await
                    .expect("ready")
                    .call(req)
                    .await
                    .expect("request succeeds");
                assert_eq!(status, 201);
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    start.elapsed()
}

fn request(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"device_id":"E17","priority":"P2"}"#,
        )))
        .expect("request")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One configuration of the comparison.
struct Config {
    name: &'static str,
    svc: Svc,
    /// The SQLite ledger behind it, for its group-commit counters.
    sqlite: Option<SqliteLedger>,
}

/// Ledger writes per commit of each (concurrency, configuration) measured on SQLite.
type Batching = BTreeMap<(usize, &'static str), f64>;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(serve(listener));
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = |file: &str, options: SqliteLedgerOptions| {
        rt.block_on(SqliteLedger::open_with(dir.path().join(file), options))
            .expect("sqlite ledger")
    };
    let full = sqlite("bench.db", SqliteLedgerOptions::new());
    let batch1 = sqlite("batch1.db", SqliteLedgerOptions::new().max_batch(1));

    let configs = vec![
        Config {
            name: "bare",
            svc: bare(),
            sqlite: None,
        },
        Config {
            name: "layer_memory",
            svc: layered(Arc::new(MemoryLedger::new())),
            sqlite: None,
        },
        Config {
            name: "layer_sqlite_full",
            svc: layered(Arc::new(full.clone())),
            sqlite: Some(full),
        },
        Config {
            name: "layer_sqlite_full_batch1",
            svc: layered(Arc::new(batch1.clone())),
            sqlite: Some(batch1),
        },
    ];

    let mut batching = Batching::new();
    let mut c = Criterion::default()
        .sample_size(15)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    for concurrency in [1usize, 64] {
        let mut group = c.benchmark_group(format!("post/concurrency_{concurrency}"));
        group.throughput(Throughput::Elements(1));
        for config in &configs {
            let name = config.name;
            let counters = |l: &SqliteLedger| (l.commits(), l.committed_writes());
            let before = config.sqlite.as_ref().map(counters);
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let mut latencies = Vec::new();
                    let elapsed = rt.block_on(drive(
                        &config.svc,
                        addr,
                        iters,
                        concurrency,
                        Some(&mut latencies),
                    ));
                    LATENCIES
                        .lock()
                        .expect("latencies")
                        .entry(name)
                        .or_default()
                        .extend(latencies);
                    SAMPLES
                        .lock()
                        .expect("samples")
                        .entry((concurrency, name))
                        .or_default()
                        .push(elapsed.as_nanos() as f64 / iters.max(1) as f64);
                    elapsed
                })
            });
            if let (Some(l), Some((commits, writes))) = (&config.sqlite, before) {
                let (c1, w1) = counters(l);
                if c1 > commits {
                    batching.insert(
                        (concurrency, name),
                        (w1 - writes) as f64 / (c1 - commits) as f64,
                    );
                }
            }
        }
        group.finish();
    }
    c.final_summary();
    report(&configs, &batching);
}

fn report(configs: &[Config], batching: &Batching) {
    let mut samples = SAMPLES.lock().expect("samples");
    if samples.is_empty() {
        return;
    }
    println!(
        "\nrecoverable-write overhead (median time per request; throughput relative to bare; one run)"
    );
    println!(
        "{:<12} {:<26} {:>12} {:>10} {:>9} {:>14}",
        "concurrency", "configuration", "us/request", "req/s", "vs bare", "writes/commit"
    );
    let mut ratio = BTreeMap::new();
    for concurrency in [1usize, 64] {
        let Some(mut base) = samples.get_mut(&(concurrency, "bare")).map(|v| v.clone()) else {
            continue;
        };
        let base = median(&mut base);
        for config in configs {
            let Some(v) = samples.get_mut(&(concurrency, config.name)) else {
                continue;
            };
            let m = median(v);
            ratio.insert((concurrency, config.name), base / m);
            let per_commit = batching
                .get(&(concurrency, config.name))
                .map_or_else(String::new, |w| format!("{w:.1}"));
            println!(
                "{:<12} {:<26} {:>12.1} {:>10.0} {:>8.1}% {:>14}",
                concurrency,
                config.name,
                m / 1000.0,
                1e9 / m,
                100.0 * base / m,
                per_commit
            );
        }
        println!(
            "{:<12} {:<26} {:>12} {:>10} {:>9} {:>14}",
            concurrency, "reqwest (+layer)", "n/a", "n/a", "n/a", "(no reqwest adapter yet)"
        );
    }

    let mut latencies = LATENCIES.lock().expect("latencies");
    let mut medians = BTreeMap::new();
    for config in configs {
        if let Some(v) = latencies.get_mut(config.name).filter(|v| !v.is_empty()) {
            medians.insert(config.name, (median(v), v.len()));
        }
    }
    if let Some(&(bare, _)) = medians.get("bare") {
        println!("\nlatency at concurrency 1 (median of every request's own latency)");
        println!(
            "{:<26} {:>10} {:>12} {:>10}",
            "configuration", "requests", "median us", "added us"
        );
        for config in configs {
            if let Some(&(m, n)) = medians.get(config.name) {
                println!(
                    "{:<26} {:>10} {:>12.1} {:>10.1}",
                    config.name,
                    n,
                    m / 1000.0,
                    (m - bare) / 1000.0
                );
            }
        }
    }

    println!("\ntargets (issue #6)");
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    if let Some(r) = ratio.get(&(64, "layer_memory")) {
        println!(
            "  layer_memory throughput at concurrency 64 >= 95% of bare: {:.1}% -> {}",
            100.0 * r,
            verdict(*r >= 0.95)
        );
    }
    if let (Some(&(b, _)), Some(&(m, _))) = (medians.get("bare"), medians.get("layer_memory")) {
        let added = (m - b) / 1000.0;
        println!(
            "  layer_memory added median latency at concurrency 1 < 20 us: {added:.1} us -> {}",
            verdict(added < 20.0)
        );
    }
    if let Some(r) = ratio.get(&(64, "layer_sqlite_full")) {
        println!(
            "  layer_sqlite_full throughput at concurrency 64 >= 50% of bare: {:.1}% -> {}",
            100.0 * r,
            verdict(*r >= 0.5)
        );
    }
}
