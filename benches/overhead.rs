//! Overhead of the layer against the bare hyper-util client, side by side in one run.
//!
//! A small hyper server on 127.0.0.1 answers every request with `201 {"id":"W1"}`. Each
//! configuration sends POSTs at concurrency 1 and 64:
//! - `bare`: the hyper-util legacy client alone;
//! - `layer_memory`: RecoverableWriteLayer + SendOnceGuard + client, MemoryLedger;
//! - `layer_sqlite_full`: the same over SqliteLedger with `synchronous=FULL` (a file in a temp dir).
//!
//! ```text
//! cargo bench --bench overhead
//! ```
//!
//! After criterion's own report, a table prints the median time per request of each
//! configuration, its throughput relative to `bare` at the same concurrency, and the added median
//! latency at concurrency 1.

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
use recoverable_write::ledger::Ledger;
use recoverable_write::{MemoryLedger, RecoverableWriteLayer, SendOnceGuardLayer, SqliteLedger};
use tokio::net::TcpListener;
use tower::util::BoxCloneService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

type Svc = BoxCloneService<Request<Full<Bytes>>, u16, BoxError>;

/// Median ns per request of every sample, keyed by "concurrency/name".
static SAMPLES: Mutex<BTreeMap<(usize, &'static str), Vec<f64>>> = Mutex::new(BTreeMap::new());

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

/// Sends `n` POSTs with `concurrency` in flight; returns the elapsed time.
async fn drive(svc: &Svc, addr: SocketAddr, n: u64, concurrency: usize) -> Duration {
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
                let req = Request::post(url.as_str())
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(
                        br#"{"device_id":"E17","priority":"P2"}"#,
                    )))
                    .expect("request");
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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

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

    let configs: Vec<(&'static str, Svc)> = vec![
        ("bare", bare()),
        ("layer_memory", layered(Arc::new(MemoryLedger::new()))),
        (
            "layer_sqlite_full",
            layered(Arc::new(
                rt.block_on(SqliteLedger::open(dir.path().join("bench.db")))
                    .expect("sqlite ledger"),
            )),
        ),
    ];

    let mut c = Criterion::default()
        .sample_size(15)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    for concurrency in [1usize, 64] {
        let mut group = c.benchmark_group(format!("post/concurrency_{concurrency}"));
        group.throughput(Throughput::Elements(1));
        for (name, svc) in &configs {
            group.bench_function(*name, |b| {
                b.iter_custom(|iters| {
                    let elapsed = rt.block_on(drive(svc, addr, iters, concurrency));
                    SAMPLES
                        .lock()
                        .expect("samples")
                        .entry((concurrency, *name))
                        .or_default()
                        .push(elapsed.as_nanos() as f64 / iters.max(1) as f64);
                    elapsed
                })
            });
        }
        group.finish();
    }
    c.final_summary();

    let mut samples = SAMPLES.lock().expect("samples");
    if samples.is_empty() {
        return;
    }
    println!("\nrecoverable-write overhead (median time per request; throughput relative to bare)");
    println!(
        "{:<12} {:<20} {:>14} {:>12} {:>10}",
        "concurrency", "configuration", "us/request", "req/s", "vs bare"
    );
    for concurrency in [1usize, 64] {
        let Some(mut base) = samples.get_mut(&(concurrency, "bare")).map(|v| v.clone()) else {
            continue;
        };
        let base = median(&mut base);
        for (name, _) in &configs {
            if let Some(v) = samples.get_mut(&(concurrency, *name)) {
                let m = median(v);
                println!(
                    "{:<12} {:<20} {:>14.1} {:>12.0} {:>9.1}%",
                    concurrency,
                    name,
                    m / 1000.0,
                    1e9 / m,
                    100.0 * base / m
                );
            }
        }
    }
    if let (Some(b), Some(m)) = (
        samples.get(&(1, "bare")).cloned(),
        samples.get(&(1, "layer_memory")).cloned(),
    ) {
        let (mut b, mut m) = (b, m);
        println!(
            "added median latency at concurrency 1 (layer_memory - bare): {:.1} us",
            (median(&mut m) - median(&mut b)) / 1000.0
        );
    }
}
