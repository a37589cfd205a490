//! An axum service whose handler creates a ticket at a vendor through a recoverable-write stack.
//!
//! ```text
//! cargo run --example axum_app
//! RUST_LOG=recoverable_write=info cargo run --example axum_app   # with the layer's tracing
//! ```
//!
//! Routes:
//!
//! - `POST /support-requests/{request_id}/ticket`, authenticated (`Authorization: Bearer <key>`;
//!   the tenant comes from the key, never from a header a client can set), with body
//!   `{"device_id":"E17","priority":"P2"}`. The support request is the approved intent: calling
//!   again for the same request never creates a second ticket. Answers
//!   - `201` `{"operation_id","status":"SUCCEEDED","ticket_id","message","from_ledger","ticket"}`
//!     (`ticket` is the vendor's document when the vendor's answer is at hand; it is absent when
//!     the ticket was confirmed by a lookup after a lost response);
//!   - `202` `{"operation_id","status","message","status_url"}` and `Location` when the outcome
//!     is not known yet (`UNKNOWN`, `PROCESSING`, `RETRY_READY`, `MANUAL_REVIEW`): the message
//!     says "do not create it again", never "retry";
//!   - `409` when the request id was already used with another payload (nothing sent);
//!   - `422` when the vendor rejected the ticket (documented refusal, no side effect);
//!   - `503` when the ledger is down (nothing sent); `500` otherwise.
//! - `401` without a known API key, before anything is recorded or sent.
//! - `GET /operations/{operation_id}`, authenticated: the ledger's view (state, ticket id,
//!   attempts, the caller-facing message); `404` for an unknown id or another tenant's.
//!
//! `main` starts the fake vendor, a SQLite ledger in a temporary directory, the recovery engine
//! and the app on 127.0.0.1, drives it (a normal create, a lost response, the status endpoint,
//! a repeat, a conflicting repeat) and exits non-zero if anything is off. `tests/axum_app.rs`
//! reuses [`build`] to drive the same app over HTTP.

use std::error::Error as StdError;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use recoverable_write::RecoverableWrite;
use recoverable_write::layer::ResponseBody;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::Ledger;
use recoverable_write::{
    BudgetPolicy, Error, HttpLookup, Operation, OperationId, Outcome, Recoverer,
    SendOnceGuardLayer, State as OpState, Tenant,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};
use tracing::Instrument;

/// The header the vendor reads its tenant from (set by this app from the caller's identity).
pub const TENANT_HEADER: &str = "x-tenant";

/// The demo's API keys and the tenant each one authenticates. A real app resolves its own
/// credentials (sessions, JWTs, mTLS) in its auth middleware; what matters is that the tenant
/// comes from the authenticated identity, never from a header any client can set.
pub const API_KEYS: &[(&str, &str)] = &[
    ("demo-key-tenant-a", "tenant-a"),
    ("demo-key-tenant-b", "tenant-b"),
];

/// The authenticated caller: its tenant, from its API key.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The tenant the key belongs to.
    pub tenant: Tenant,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let key = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        API_KEYS
            .iter()
            .find(|(k, _)| Some(*k) == key)
            .map(|(_, tenant)| Caller {
                tenant: Tenant::new(*tenant),
            })
            .ok_or_else(|| problem(StatusCode::UNAUTHORIZED, "a known API key is required"))
    }
}

/// The client stack the handler calls, bodies collected: tracing → recoverable-write layer →
/// timeout → send-once guard → hyper-util client.
pub type TicketClient = BoxCloneSyncService<Request<Full<Bytes>>, http::Response<Bytes>, Error>;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    vendor_base_url: Arc<str>,
    tickets: TicketClient,
    ledger: Arc<dyn FullLedger>,
}

/// The app and its recovery engine, built together so they share one ledger and one contract.
pub struct App {
    /// The axum router, ready to serve.
    pub router: Router,
    /// The recovery engine. `main` spawns it; the integration test runs passes itself.
    pub recoverer: Recoverer,
}

/// Builds the app against the vendor at `vendor_base_url` (e.g. `http://127.0.0.1:4000`),
/// recording into `ledger`, with `policy` frozen onto every new operation.
pub fn build(vendor_base_url: &str, ledger: Arc<dyn FullLedger>, policy: BudgetPolicy) -> App {
    // One retry owner: the recovery engine. The client's own retry of "canceled" requests is
    // switched off, and the guard refuses any second send of an attempt by a layer below ours.
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http();
    let rw = RecoverableWrite::builder(ledger.clone())
        .budget(policy.clone())
        .build()
        .expect("a valid configuration");
    let layer = rw.layer();
    let guard = SendOnceGuardLayer::new();

    // Where the timeout goes matters. Above the layer, a timeout would drop the layer's future
    // while the write is on the wire: nothing records the attempt's fate, the row stays
    // IN_FLIGHT until its lease runs out, and only then does recovery start. Below the layer, an
    // expired timeout is an error the layer sees and records at once as UNKNOWN evidence (a
    // timeout proves nothing either way). The layer also enforces its own attempt timeout
    // (`policy.attempt_timeout_ms`, shorter than the lease, covering the body too), so this one
    // only makes sense shorter than that: here, the time allowed for the response head.
    let head_timeout = policy.attempt_timeout() * 4 / 5;
    let stack = ServiceBuilder::new()
        // Tracing without tower-http: one event per write handed to the layer. Never the body or
        // credentials. The handler wraps the whole call in a span (tenant, request, operation).
        .map_request(|req: Request<Full<Bytes>>| {
            tracing::info!(method = %req.method(), uri = %req.uri(), "vendor write");
            req
        })
        .layer(layer.clone())
        .timeout(head_timeout)
        .layer(guard.clone())
        .service(client.clone());
    let tickets = BoxCloneSyncService::new(stack.and_then(
        |res: http::Response<ResponseBody<Incoming>>| async move {
            let (parts, body) = res.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|source| Error::Inner { source })?
                .to_bytes();
            Ok(http::Response::from_parts(parts, body))
        },
    ));

    // The engine shares the layer's ledger and contract. It asks the vendor first
    // (`GET /operations/{operation_id}`, tenant-scoped) and replays, when evidence allows it,
    // through the stack below the layer: the same guard and client.
    let lookup = HttpLookup::new(
        client.clone(),
        format!("{vendor_base_url}/operations/{{operation_id}}"),
    )
    .tenant_header(http::HeaderName::from_static(TENANT_HEADER));
    let recoverer = rw
        .recoverer()
        .reconciler(lookup)
        .replay_through(ServiceBuilder::new().layer(guard).service(client));

    let state = AppState {
        vendor_base_url: vendor_base_url.trim_end_matches('/').into(),
        tickets,
        ledger,
    };
    let router = Router::new()
        .route("/support-requests/{request_id}/ticket", post(create_ticket))
        .route("/operations/{operation_id}", get(operation_status))
        .with_state(state);
    App { router, recoverer }
}

/// The body of `POST /support-requests/{request_id}/ticket`.
#[derive(Debug, Deserialize)]
pub struct TicketRequest {
    /// The faulty device.
    pub device_id: String,
    /// The ticket priority, e.g. `P2`.
    pub priority: String,
}

/// The operation id for the ticket of one support request.
///
/// Derived from the intent instead of generated: the vendor's body names the operation (it is
/// the reference the vendor's lookup finds it by), the body is part of the payload hash, and so
/// every call for one support request must send the very same bytes. A fresh id per call would
/// make the second call a payload conflict instead of a resumption.
pub fn ticket_operation_id(request_id: &str) -> OperationId {
    OperationId::new(format!("op-ticket-{request_id}"))
}

async fn create_ticket(
    State(app): State<AppState>,
    Path(request_id): Path<String>,
    Caller { tenant }: Caller,
    Json(body): Json<TicketRequest>,
) -> Response {
    if !is_plain_id(&request_id) {
        return problem(
            StatusCode::BAD_REQUEST,
            "request id must be 1-64 of [A-Za-z0-9._-]",
        );
    }
    if body.device_id.trim().is_empty() {
        return problem(StatusCode::BAD_REQUEST, "device_id is required");
    }

    // The support request is the approved intent; `(tenant, action, intent)` is unique in the
    // ledger, so this call resumes the operation if it exists.
    let op = Operation::new(tenant.as_str(), "create_ticket", request_id.as_str())
        .with_id(ticket_operation_id(&request_id));
    let vendor_body = json!({
        "operation_id": op.id(),
        "device_id": body.device_id,
        "priority": body.priority,
    });
    let req = Request::post(format!("{}/tickets", app.vendor_base_url))
        .header(header::CONTENT_TYPE, "application/json")
        // The vendor's tenant header is part of the frozen request, so replays carry it too.
        .header(TENANT_HEADER, tenant.as_str())
        .body(Full::new(Bytes::from(vendor_body.to_string())));
    let mut req = match req {
        Ok(r) => r,
        Err(e) => return problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    req.extensions_mut().insert(op.clone());

    // The call runs in its own task: if our caller hangs up, axum drops this handler, and a
    // dropped layer future would leave the write on the wire with nobody to record its result
    // (recovery would wait for the lease to expire). The task records it either way.
    let span = tracing::info_span!(
        "create_ticket",
        tenant = %tenant,
        request = %request_id,
        operation = %op.id(),
    );
    let call = app.tickets.clone().oneshot(req).instrument(span);
    match tokio::spawn(call).await {
        Ok(Ok(res)) => from_vendor(op.id(), res),
        Ok(Err(e)) => from_error(e),
        Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// An answer with an authoritative outcome: the vendor's (first or stored) response.
fn from_vendor(op: &OperationId, res: http::Response<Bytes>) -> Response {
    let Some(outcome) = res.extensions().get::<Outcome>().cloned() else {
        // Every tracked write comes back with an Outcome; anything else is a bug.
        return problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "response without an outcome",
        );
    };
    let doc = serde_json::from_slice::<Value>(res.body()).ok();
    // When the operation was resolved by a lookup (or a reviewer), the layer has no vendor
    // response to return: the body is the Outcome itself. Only a vendor document is a ticket.
    let vendor_doc = doc.filter(|d| serde_json::from_value::<Outcome>(d.clone()).is_err());
    match outcome.state {
        OpState::Succeeded => {
            let ticket_id = outcome.remote_ref.clone().or_else(|| {
                vendor_doc
                    .as_ref()
                    .and_then(|d| d.pointer("/id"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
            let mut body = json!({
                "operation_id": op,
                "status": outcome.state,
                "ticket_id": ticket_id,
                "message": outcome.message,
                "from_ledger": outcome.from_ledger,
            });
            if let Some(ticket) = vendor_doc {
                body["ticket"] = ticket;
            }
            (StatusCode::CREATED, Json(body)).into_response()
        }
        // A documented refusal (validation, authorization): nothing was created.
        OpState::Rejected => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({
                "operation_id": op,
                "status": outcome.state,
                "message": outcome.message,
                "vendor_status": res.status().as_u16(),
                "vendor_error": vendor_doc,
            })),
        )
            .into_response(),
        _ => pending(&outcome),
    }
}

/// An answer without an authoritative outcome. None of these tells the caller to retry. The
/// crate's own mapping (feature `axum`: 409 conflict, 403 denied, 503 ledger down, ...) answers
/// everything but the pending states, which get this app's status URL.
fn from_error(e: Error) -> Response {
    match e.outcome() {
        Some(outcome) => pending(outcome),
        None => e.into_response(),
    }
}

/// 202: the ticket may or may not exist yet; the recovery engine owns it now.
fn pending(outcome: &Outcome) -> Response {
    let status_url = format!("/operations/{}", outcome.operation_id);
    let mut res = (
        StatusCode::ACCEPTED,
        Json(json!({
            "operation_id": outcome.operation_id,
            "status": outcome.state,
            "message": outcome.message,
            "status_url": status_url,
        })),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&status_url) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

async fn operation_status(
    State(app): State<AppState>,
    Path(operation_id): Path<String>,
    Caller { tenant }: Caller,
) -> Response {
    let id = OperationId::new(operation_id);
    // Tenant-scoped: another tenant's operation is indistinguishable from a missing one.
    let row = match app.ledger.get(&tenant, &id).await {
        Ok(Some(row)) => row,
        Ok(None) => return problem(StatusCode::NOT_FOUND, "no such operation"),
        Err(e) => return problem(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    let mut outcome = Outcome::new(row.tenant.clone(), row.operation_id.clone(), row.state);
    outcome.remote_ref = row.remote_ref.clone();
    let mut body = json!({
        "operation_id": row.operation_id,
        "status": row.state,
        "ticket_id": row.remote_ref,
        "attempts": row.attempts_used,
        "queries": row.queries_used,
        "message": outcome.message,
    });
    // The row keeps the last reason it was given (why it became unknown, rejected, escalated);
    // once the ticket is confirmed, that history belongs in the evidence log, not here.
    if let (Some(reason), false) = (&row.reason, row.state == OpState::Succeeded) {
        body["reason"] = json!(reason);
    }
    (StatusCode::OK, Json(body)).into_response()
}

fn is_plain_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn problem(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "message": message }))).into_response()
}

// ---------------------------------------------------------------------------------------------
// The demonstration: everything below only runs under `cargo run --example axum_app`.

/// Log what `RUST_LOG` asks for (`recoverable_write=info`, `debug`, ...), else only warnings.
fn init_tracing() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::WARN));
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer())
        .with(filter)
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    match demo().await {
        Ok(()) => {
            println!("\nok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("\nFAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

type BoxError = Box<dyn StdError>;

async fn demo() -> Result<(), BoxError> {
    use recoverable_write::SqliteLedger;
    use recoverable_write::testing::FakeVendor;

    let vendor = FakeVendor::builder().start().await?;
    let dir = tempfile::tempdir()?;
    let ledger: Arc<dyn FullLedger> =
        Arc::new(SqliteLedger::open(dir.path().join("operations.db")).await?);
    let app = build(&vendor.base_url(), ledger, BudgetPolicy::default());
    let engine = app.recoverer.clone().spawn();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, app.router)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );
    println!("fake vendor at {}, app at {base}\n", vendor.base_url());

    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let call = |method: &'static str, path: String, body: Option<Value>| {
        let http = http.clone();
        let url = format!("{base}{path}");
        async move {
            let req = Request::builder()
                .method(method)
                .uri(&url)
                // Tenant A's API key: the app derives the tenant from it.
                .header(header::AUTHORIZATION, "Bearer demo-key-tenant-a")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(
                    body.map(|b| b.to_string()).unwrap_or_default(),
                )))?;
            let res = http.request(req).await?;
            let status = res.status();
            let bytes = res.into_body().collect().await?.to_bytes();
            let doc: Value = serde_json::from_slice(&bytes)?;
            println!("{method} {path}\n  -> {} {doc}", status.as_u16());
            Ok::<_, BoxError>((status, doc))
        }
    };
    let ensure = |ok: bool, what: &str| -> Result<(), BoxError> {
        if ok { Ok(()) } else { Err(what.into()) }
    };

    println!("1. a ticket for support request sr-1001");
    let (status, doc) = call(
        "POST",
        "/support-requests/sr-1001/ticket".into(),
        Some(json!({"device_id": "E17", "priority": "P2"})),
    )
    .await?;
    ensure(status == StatusCode::CREATED, "expected 201 for sr-1001")?;
    ensure(doc["ticket"]["id"] == "W731", "expected ticket W731")?;

    println!("\n2. the vendor commits sr-1002's ticket, then the connection drops (lost response)");
    vendor.faults().drop_after_commit(1);
    let (status, doc) = call(
        "POST",
        "/support-requests/sr-1002/ticket".into(),
        Some(json!({"device_id": "E18", "priority": "P1"})),
    )
    .await?;
    ensure(
        status == StatusCode::ACCEPTED,
        "expected 202 for the lost response",
    )?;
    ensure(doc["status"] == "UNKNOWN", "expected status UNKNOWN")?;
    let op = doc["operation_id"]
        .as_str()
        .ok_or("202 without an operation id")?
        .to_owned();

    println!("\n3. poll the status endpoint while the recovery engine asks the vendor");
    let mut resolved = None;
    for _ in 0..100 {
        let (status, doc) = call("GET", format!("/operations/{op}"), None).await?;
        ensure(
            status == StatusCode::OK,
            "expected 200 from the status endpoint",
        )?;
        if doc["status"] == "SUCCEEDED" {
            resolved = Some(doc);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let doc = resolved.ok_or("the operation was not resolved within 20 s")?;
    ensure(doc["ticket_id"] == "W732", "expected ticket W732")?;

    println!("\n4. the caller asks again for sr-1002: answered from the ledger, nothing sent");
    let posts = vendor.posts_received();
    let (status, doc) = call(
        "POST",
        "/support-requests/sr-1002/ticket".into(),
        Some(json!({"device_id": "E18", "priority": "P1"})),
    )
    .await?;
    ensure(status == StatusCode::CREATED, "expected 201 for the repeat")?;
    ensure(
        doc["from_ledger"] == true,
        "expected an answer from the ledger",
    )?;
    ensure(
        vendor.posts_received() == posts,
        "the repeat reached the vendor",
    )?;

    println!("\n5. the same support request with another device: a conflict, nothing sent");
    let (status, _) = call(
        "POST",
        "/support-requests/sr-1002/ticket".into(),
        Some(json!({"device_id": "E19", "priority": "P1"})),
    )
    .await?;
    ensure(status == StatusCode::CONFLICT, "expected 409")?;
    ensure(
        vendor.posts_received() == posts,
        "the conflict reached the vendor",
    )?;

    let created = vendor.tickets_created();
    println!("\ntickets created: {created}");
    ensure(created == 2, "expected exactly 2 tickets at the vendor")?;

    engine.shutdown().await;
    let _ = stop.send(());
    server.await??;
    Ok(())
}
