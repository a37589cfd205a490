//! The accept loop, per-connection serving, and the HTTP handlers.
//!
//! # Why not `axum::serve`
//!
//! A lost response (drill D1) needs the vendor to commit and then close the TCP connection
//! without writing anything. A handler cannot do that through axum, so the vendor runs its own
//! accept loop: each connection is served by hyper's HTTP/1 connection driver, with a
//! per-connection [`ConnectionControl`] placed in every request's extensions. A handler that
//! fires it never returns; the connection task sees the signal and drops the connection
//! future, which closes the socket with no response written.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, header};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tower_service::Service;

use super::faults::Rejection;
use super::store::{
    CreateTicket, PostOutcome, SeenRequest, Store, StoredResponse, payload_hash, ticket_json,
};
use super::vendor::{VendorState, lock};

/// Lets a handler close the connection its request arrived on.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnectionControl(Arc<Notify>);

impl ConnectionControl {
    fn kill(&self) {
        // `notify_one` keeps a permit if the connection task is not waiting yet.
        self.0.notify_one();
    }

    async fn killed(&self) {
        self.0.notified().await;
    }
}

pub(crate) async fn accept_loop(shared: Arc<VendorState>) {
    let router = router(Arc::clone(&shared));
    loop {
        match poll_fn(|cx| shared.acceptor.poll_accept(cx)).await {
            None => break,
            Some(Ok((stream, _peer))) => {
                let close_all = shared.close_all.subscribe();
                tokio::spawn(serve_connection(router.clone(), stream, close_all));
            }
            Some(Err(error)) => {
                tracing::debug!(%error, "fake vendor: accept failed");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    tracing::debug!("fake vendor: accept loop stopped");
}

async fn serve_connection(
    router: Router,
    stream: tokio::net::TcpStream,
    mut close_all: watch::Receiver<u64>,
) {
    let control = ConnectionControl::default();
    let per_request = control.clone();
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(per_request.clone());
        let mut router = router.clone();
        router.call(request)
    });
    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    // Dropping `connection` drops the socket: the peer sees the connection close.
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "fake vendor: connection ended with an error");
            }
        }
        () = control.killed() => {
            tracing::debug!("fake vendor: connection dropped after commit, no response");
        }
        _ = close_all.changed() => {
            tracing::debug!("fake vendor: connection closed by the vendor");
        }
    }
}

fn router(shared: Arc<VendorState>) -> Router {
    Router::new()
        .route("/tickets", post(create_ticket).get(list_tickets))
        .route("/operations/by-key/{key}", get(lookup_by_key))
        .route("/operations/{operation_id}", get(lookup_by_id))
        .fallback(not_found)
        .with_state(shared)
}

/// Records the request; returns its tenant and raw key header value.
fn record(
    shared: &VendorState,
    store: &mut Store,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> (String, Option<String>) {
    let tenant = headers
        .get(&shared.config.tenant_header)
        .and_then(|value| value.to_str().ok())
        .filter(|value| !value.is_empty())
        .unwrap_or("default")
        .to_owned();
    let key = headers
        .get(&shared.config.key_header)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let path = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
    store.record(SeenRequest {
        method,
        path,
        idempotency_key: key.clone(),
        tenant: tenant.clone(),
        headers: headers.clone(),
        body,
        at: Instant::now(),
    });
    (tenant, key)
}

/// The key identity: surrounding whitespace and RFC 8941 string quotes removed.
fn normalise_key(raw: &str) -> &str {
    let trimmed = raw.trim();
    trimmed
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(trimmed)
}

struct ParsedCreate {
    payload: Value,
    operation_id: Option<String>,
    device_id: String,
}

fn parse_create(body: &[u8]) -> Option<ParsedCreate> {
    let payload: Value = serde_json::from_slice(body).ok()?;
    let object = payload.as_object()?;
    let device_id = object
        .get("device_id")?
        .as_str()
        .filter(|id| !id.is_empty())?
        .to_owned();
    let operation_id = match object.get("operation_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        Some(_) => return None,
    };
    Some(ParsedCreate {
        payload,
        operation_id,
        device_id,
    })
}

fn error_code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::INTERNAL_SERVER_ERROR => "internal_error",
        StatusCode::BAD_GATEWAY => "bad_gateway",
        StatusCode::SERVICE_UNAVAILABLE => "service_unavailable",
        StatusCode::GATEWAY_TIMEOUT => "gateway_timeout",
        _ => "upstream_error",
    }
}

fn respond(stored: &StoredResponse, replayed: bool) -> Response {
    let mut response = (stored.status, axum::Json(stored.body.clone())).into_response();
    let headers = response.headers_mut();
    if let Some(value) = stored
        .retry_after
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        headers.insert(header::RETRY_AFTER, value);
    }
    if replayed {
        headers.insert(
            HeaderName::from_static("idempotent-replayed"),
            HeaderValue::from_static("true"),
        );
    }
    response
}

fn respond_rejection(rejection: &Rejection) -> Response {
    let mut response = respond(&rejection.to_response(), false);
    for (name, value) in rejection.extra_headers() {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

async fn create_ticket(
    State(shared): State<Arc<VendorState>>,
    Extension(control): Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (tenant, raw_key) = {
        let mut store = lock(&shared.store);
        store.posts_received += 1;
        record(
            &shared,
            &mut store,
            Method::POST,
            &uri,
            &headers,
            body.clone(),
        )
    };

    if lock(&shared.plan).is_revoked(&headers) {
        return respond(
            &StoredResponse::error(StatusCode::UNAUTHORIZED, "invalid_credentials"),
            false,
        );
    }
    let rejection = lock(&shared.plan).take_rejection();
    if let Some(rejection) = rejection {
        tracing::debug!(status = %rejection.status(), "fake vendor: create refused by a fault");
        return respond_rejection(&rejection);
    }

    let key = raw_key
        .as_deref()
        .map(normalise_key)
        .filter(|key| !key.is_empty())
        .map(str::to_owned);
    if key.is_none() && shared.config.require_key {
        return respond(
            &StoredResponse::error(StatusCode::BAD_REQUEST, "missing_idempotency_key"),
            false,
        );
    }
    let Some(parsed) = parse_create(&body) else {
        return respond(
            &StoredResponse::error(StatusCode::BAD_REQUEST, "validation_error"),
            false,
        );
    };
    let create = CreateTicket {
        tenant,
        key,
        payload_hash: payload_hash(&parsed.payload),
        operation_id: parsed.operation_id,
        device_id: parsed.device_id,
        payload: parsed.payload,
    };

    // Execution runs in its own task: once the vendor has the request, a client hanging up
    // (which may drop this handler) neither stops the commit nor leaves the key in progress.
    match tokio::spawn(execute_create(shared, create)).await {
        Ok(Execution::Answer { response, replayed }) => respond(&response, replayed),
        Ok(Execution::DropConnection) => {
            control.kill();
            // Never answer: the connection task drops the connection before anything is
            // written.
            std::future::pending().await
        }
        Err(error) => {
            tracing::debug!(%error, "fake vendor: create execution failed");
            respond(
                &StoredResponse::error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
                false,
            )
        }
    }
}

/// What the connection does with an executed create.
#[derive(Debug)]
enum Execution {
    Answer {
        response: StoredResponse,
        replayed: bool,
    },
    DropConnection,
}

/// Executes a validated create: pre-commit delay, idempotency decision and commit, then the
/// post-commit faults (delay; drop the connection or answer an error status).
async fn execute_create(shared: Arc<VendorState>, create: CreateTicket) -> Execution {
    let before = lock(&shared.plan).take_delay_before_commit();
    if let Some(delay) = before {
        tokio::time::sleep(delay).await;
    }

    let tenant = create.tenant.clone();
    let key = create.key.clone();
    let hold_processing = lock(&shared.plan).hold_processing;
    let outcome = lock(&shared.store).begin_post(create, hold_processing, Instant::now());
    let (response, ticket_id) = match outcome {
        PostOutcome::Answer { response, replayed } => {
            return Execution::Answer { response, replayed };
        }
        PostOutcome::Committed {
            response,
            ticket_id,
        } => (response, ticket_id),
    };
    tracing::debug!(%ticket_id, "fake vendor: ticket created");

    let after = lock(&shared.plan).take_after_commit();
    let error = after
        .status
        .map(|status| StoredResponse::error(status, error_code_for(status)));
    if let Some(delay) = after.delay {
        // The key stays in progress meanwhile: a concurrent same-key create gets 409.
        tokio::time::sleep(delay).await;
    }
    if let Some(key) = &key {
        let first_response = match &error {
            Some(error) if after.cache_error_response => error.clone(),
            _ => response.clone(),
        };
        lock(&shared.store).finish_key(&tenant, key, first_response);
    }

    if after.drop_connection {
        return Execution::DropConnection;
    }
    match error {
        Some(error) => {
            tracing::debug!(status = %error.status, "fake vendor: error status after commit");
            Execution::Answer {
                response: error,
                replayed: false,
            }
        }
        None => Execution::Answer {
            response,
            replayed: false,
        },
    }
}

fn not_found_response() -> StoredResponse {
    StoredResponse::error(StatusCode::NOT_FOUND, "not_found")
}

async fn lookup(
    shared: Arc<VendorState>,
    uri: Uri,
    headers: HeaderMap,
    find: impl FnOnce(&Store, &str, Instant) -> Option<StoredResponse>,
) -> Response {
    let tenant = {
        let mut store = lock(&shared.store);
        store.lookups_received += 1;
        record(
            &shared,
            &mut store,
            Method::GET,
            &uri,
            &headers,
            Bytes::new(),
        )
        .0
    };
    if lock(&shared.plan).is_revoked(&headers) {
        return respond(
            &StoredResponse::error(StatusCode::UNAUTHORIZED, "invalid_credentials"),
            false,
        );
    }
    let delay = lock(&shared.plan).take_lookup_delay();
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let forced_not_found = lock(&shared.plan).take_lookup_not_found();
    if forced_not_found {
        tracing::debug!("fake vendor: lookup answered 404 by a fault");
        return respond(&not_found_response(), false);
    }
    let found = find(&lock(&shared.store), &tenant, Instant::now());
    respond(&found.unwrap_or_else(not_found_response), false)
}

async fn lookup_by_id(
    State(shared): State<Arc<VendorState>>,
    Path(operation_id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    lookup(shared, uri, headers, |store, tenant, now| {
        store.lookup_by_id(tenant, &operation_id, now)
    })
    .await
}

async fn lookup_by_key(
    State(shared): State<Arc<VendorState>>,
    Path(key): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    lookup(shared, uri, headers, |store, tenant, now| {
        store.lookup_by_key(tenant, normalise_key(&key), now)
    })
    .await
}

/// `GET /tickets`: the tenant's tickets, `{"tickets":[{"id","operation_id","device_id","status"}]}`.
///
/// With `?operation_id=...` (percent-encoded) only the tickets created under that operation id,
/// a search a list lookup (`list_by_reference`) can use: such a request counts as a lookup
/// ([`FakeVendor::lookups_received`](super::FakeVendor::lookups_received)) and is refused with
/// 401 for a revoked credential, as the other lookups are. The list is consistent at once (no
/// lag): an eventually consistent search is the contract's `settle_secs`, tested on the engine.
async fn list_tickets(
    State(shared): State<Arc<VendorState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let filter = uri.query().and_then(|q| {
        q.split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(name, _)| *name == "operation_id")
            .map(|(_, value)| {
                percent_encoding::percent_decode_str(&value.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            })
    });
    let tickets = {
        let mut store = lock(&shared.store);
        if filter.is_some() {
            store.lookups_received += 1;
        }
        let (tenant, _) = record(
            &shared,
            &mut store,
            Method::GET,
            &uri,
            &headers,
            Bytes::new(),
        );
        store.tenant_tickets(&tenant)
    };
    if filter.is_some() && lock(&shared.plan).is_revoked(&headers) {
        return respond(
            &StoredResponse::error(StatusCode::UNAUTHORIZED, "invalid_credentials"),
            false,
        );
    }
    let body: Vec<Value> = tickets
        .iter()
        .filter(|t| match &filter {
            Some(id) => t.operation_id.as_deref() == Some(id.as_str()),
            None => true,
        })
        .map(ticket_json)
        .collect();
    respond(
        &StoredResponse::new(StatusCode::OK, json!({ "tickets": body })),
        false,
    )
}

async fn not_found(
    State(shared): State<Arc<VendorState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    record(
        &shared,
        &mut lock(&shared.store),
        method,
        &uri,
        &headers,
        body,
    );
    respond(&not_found_response(), false)
}
