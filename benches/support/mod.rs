//! Pieces shared by the bench binaries: the loopback server, the client, the layered stack, the
//! request, and the median. Included with `#[path = "support/mod.rs"] mod support;`.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use recoverable_write::RecoverableWrite;
use recoverable_write::ledger::Ledger;
use recoverable_write::{BudgetPolicy, SendOnceGuardLayer};
use tokio::net::TcpListener;
use tower::util::BoxCloneService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// A client stack reduced to "send this request, give me the status".
pub type Svc = BoxCloneService<Request<Full<Bytes>>, u16, BoxError>;

/// A loopback server answering every request `201 {"id":"W1"}` after reading its body.
pub async fn serve_201(listener: TcpListener) {
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

/// The hyper-util client every configuration uses: no client retries, nodelay, a large pool.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .pool_max_idle_per_host(128)
        .build(connector)
}

/// The bare client: the baseline.
pub fn bare() -> Svc {
    BoxCloneService::new(client().map_err(BoxError::from).and_then(
        |res: Response<Incoming>| async move {
            let status = res.status().as_u16();
            res.into_body().collect().await?;
            Ok(status)
        },
    ))
}

/// The layer (with `policy`) and the send-once guard over the same client.
pub fn layered(ledger: Arc<dyn Ledger>, policy: BudgetPolicy) -> Svc {
    let svc = ServiceBuilder::new()
        // The bench's writes name no Operation: track them anyway (ad-hoc operations).
        .layer(
            RecoverableWrite::builder(ledger)
                .budget(policy)
                .track_all_writes(true)
                .build()
                .expect("a valid configuration")
                .layer(),
        )
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

/// The write every bench sends.
pub fn request(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"device_id":"E17","priority":"P2"}"#,
        )))
        .expect("request")
}

/// The frozen request every reference keeps: method, URL, headers (`name: value` lines) and
/// body, in one buffer (one allocation; the URL is written, not copied from a string made for
/// it).
pub fn freeze(
    method: &str,
    url: &dyn std::fmt::Display,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(256 + body.len());
    // Writing into a vector cannot fail.
    let _ = writeln!(out, "{method} {url}");
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// The median (sorts `v`).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Rounds of an interleaved phase: `RW_BENCH_ROUNDS`, else `default` (shorter runs for quick
/// checks; the medians need at least 3).
pub fn rounds(default: usize) -> usize {
    std::env::var("RW_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
        .max(1)
}

/// One case's turn in a round: `RW_BENCH_TURN_MS` milliseconds, else `default`.
pub fn turn(default: std::time::Duration) -> std::time::Duration {
    std::env::var("RW_BENCH_TURN_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(std::time::Duration::from_millis)
        .unwrap_or(default)
}

// ── ledger operations, as the layer makes them ──────────────────────────────────────────────────

static NEXT_OPERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The wall clock, in ms since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// A new operation of `tenant-a` with a fresh id and intent, created now (the conformance
/// suite's fixture: a small JSON body, repeated headers).
pub fn fresh_operation() -> recoverable_write::ledger::NewOperation {
    let n = NEXT_OPERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = format!("op-{n:010}");
    let mut new = recoverable_write::ledger::conformance::new_operation(
        "tenant-a",
        &id,
        &format!("intent-{n:010}"),
    );
    new.now_ms = now_ms();
    new
}

/// The first send's claim of a new operation, as the layer builds it.
pub fn first_claim(
    new: &recoverable_write::ledger::NewOperation,
) -> recoverable_write::ledger::backend::Update {
    let now = now_ms();
    new.first_update_on(
        &recoverable_write::state::Event::ClaimSend,
        recoverable_write::state::Tick {
            now_ms: now,
            jitter: 0.0,
        },
        Some(recoverable_write::AttemptId::generate()),
        Some(now + new.policy.lease().as_millis() as i64),
        recoverable_write::ledger::conformance::evidence_entry("attempt_registered", now),
    )
    .expect("claim from PREPARED")
}

/// The row of a create that must have been new.
pub fn new_row(
    created: recoverable_write::ledger::Created,
) -> recoverable_write::ledger::OperationRecord {
    match created {
        recoverable_write::ledger::Created::New(r) => r,
        recoverable_write::ledger::Created::Existing(r) => {
            panic!("{} already existed", r.operation_id)
        }
    }
}
