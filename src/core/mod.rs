//! The write path every adapter calls: freeze, claim, send once, record, wait.
//!
//! The tower layer ([`crate::layer`]), the reqwest middleware and the recoverer are thin adapters
//! over this module: they hand it a request (or a row) and it decides, with the ledger and the
//! state machine, what may be sent and records what came back. Nothing here knows about any of
//! the adapters.

pub(crate) mod engine;
pub(crate) mod outgoing;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};

use self::engine::{Applied, Extras};
use crate::authorize::{Access, SharedAuthorizer};
use crate::budget::BudgetPolicy;
use crate::clock::SharedClock;
use crate::contract::{Contract, Contracts};
pub(crate) use crate::error::{Error, Outcome};
use crate::guard::AttemptToken;
use crate::ledger::{
    Created, Ledger, NewOperation, OperationRecord, StoredHeaders, StoredResponse,
};
use crate::notify::Notifier;
use crate::operation::{AttemptId, FrozenRequest, IdempotencyKey, Operation, PayloadHash};
use crate::state::{Event, State};
use tower::BoxError;

/// Default limit on a write's request body: 1 MiB.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 1024 * 1024;
/// Default limit on a write's response body: 4 MiB.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 4 * 1024 * 1024;
/// Default limit on the response body kept in the ledger for callers that ask again: 64 KiB.
pub const DEFAULT_STORED_BODY: usize = 64 * 1024;

/// Whether a vendor response header is never stored.
fn unstored_response_header(name: &http::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "set-cookie"
            | "authorization"
            | "proxy-authenticate"
            | "www-authenticate"
            | "connection"
            | "transfer-encoding"
            | "content-length"
            | "keep-alive"
    )
}

/// The headers of a vendor response that are kept with it: all but those
/// [`unstored_response_header`] names and the credential headers (the defaults and the
/// contract's `secret_headers`), and only values of visible ASCII. The buffer is sized once, so
/// this allocates once (not at all when nothing is kept).
fn stored_headers(headers: &http::HeaderMap, secret: &[String]) -> StoredHeaders {
    StoredHeaders::sized(|| {
        headers
            .iter()
            .filter(|(k, _)| !unstored_response_header(k))
            .filter(|(k, _)| !crate::operation::is_secret(k, secret))
            // The crate's own markers are written by the crate, never taken from a vendor.
            .filter(|(k, _)| !k.as_str().starts_with("recoverable-write-"))
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
    })
}

/// The vendor's authoritative response as kept for callers that ask again: its status, the
/// headers [`stored_headers`] keeps, and at most `limit` bytes of its body with the contract's
/// secret answer fields replaced (see [`crate::redact`]). The one place a response is made
/// ready for the ledger. `None` when the body may hold a secret field and cannot be read: it is
/// not stored, and a caller asking again gets the synthesized answer.
fn stored_response(
    res: &Response<Bytes>,
    contract: &Contract,
    limit: usize,
) -> Option<StoredResponse> {
    // Redacted whole, then cut: a cut JSON body could not be read any more.
    let body = crate::redact::answer(res.body(), &contract.answer_secrets())?;
    let mut headers = stored_headers(res.headers(), &contract.secret_headers);
    if body.len() > limit {
        // Kept with the response, so every later replay of it says so.
        headers.push(TRUNCATED_HEADER, "true");
    }
    Some(StoredResponse {
        status: res.status().as_u16(),
        headers,
        // A copy, not a slice: a slice would pin the client's whole read buffer for as long as
        // the ledger keeps the row.
        body: Bytes::copy_from_slice(&body[..body.len().min(limit)]),
    })
}

#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) contracts: Contracts,
    pub(crate) policy: BudgetPolicy,
    pub(crate) max_request_body: usize,
    pub(crate) max_response_body: usize,
    pub(crate) stored_body: usize,
    pub(crate) authorizer: SharedAuthorizer,
    pub(crate) notifier: Notifier,
    pub(crate) wait: Option<Duration>,
    pub(crate) track_all_writes: bool,
    pub(crate) denied_first_sends: crate::error::DeniedFirstSend,
    pub(crate) clock: SharedClock,
    pub(crate) retention: crate::retention::Retention,
}

impl Shared {
    /// The operation row for a write: contract chosen per target, request frozen without
    /// credentials, payload hashed with the contract's digest, budget frozen. The one place this
    /// is decided, for the layer and for callers that create operations themselves (outbox).
    pub(crate) fn new_operation(
        &self,
        op: Operation,
        method: &Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        body: Bytes,
    ) -> (NewOperation, Arc<Contract>) {
        let (contract, contract_ref) = self.contracts.select_with_reference(method, uri);
        let frozen = FrozenRequest::freeze(method, uri, headers, body, contract.secrets());
        // Over the URL without credentials: rotating an API key in the query (or a token in
        // the path) is not another payload.
        let redacted = crate::operation::redacted_uri(uri, contract.secrets());
        let payload_hash =
            PayloadHash::compute_for(method, &redacted, &frozen.body, &contract.digest);
        let (tenant, operation_id, action, intent_ref) = op.into_parts();
        let new = NewOperation {
            tenant,
            operation_id,
            action,
            intent_ref,
            // The caller's own key, where the contract places keys, is adopted (and checked
            // like any key when it is placed); otherwise a fresh opaque one.
            idempotency_key: outgoing::caller_key(contract, uri, headers, &frozen.body)
                .map_or_else(IdempotencyKey::generate, IdempotencyKey::from_stored),
            payload_hash,
            request: Arc::new(frozen),
            contract: contract_ref.clone(),
            policy: self.policy.clone(),
            now_ms: self.clock.now_ms(),
        };
        (new, contract.clone())
    }

    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> Self {
        Self {
            ledger,
            contracts: Contracts::default(),
            policy: BudgetPolicy::default(),
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            stored_body: DEFAULT_STORED_BODY,
            authorizer: SharedAuthorizer::default(),
            notifier: Notifier::default(),
            wait: None,
            track_all_writes: false,
            denied_first_sends: crate::error::DeniedFirstSend::default(),
            clock: SharedClock::default(),
            retention: crate::retention::Retention::default(),
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoverableWriteConfig")
            .field("ledger", &self.ledger)
            .field("contracts", &self.contracts)
            .field("policy", &self.policy)
            .field("max_request_body", &self.max_request_body)
            .field("max_response_body", &self.max_response_body)
            .field("stored_body", &self.stored_body)
            .field("authorizer", &self.authorizer)
            .field("wait", &self.wait)
            .field("track_all_writes", &self.track_all_writes)
            .field("denied_first_sends", &self.denied_first_sends)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// What the preparation phase decided.
// Unboxed: the context is moved into the write path's one boxed future at once.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Step<B> {
    /// Send this request; the attempt is registered.
    Send(Request<B>, AttemptCtx),
    /// Nothing to send: the answer comes from the ledger.
    Done(Response<Full<Bytes>>),
}

/// What the finishing phase needs to know about the attempt in flight.
pub(crate) struct AttemptCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) contract: Arc<Contract>,
    pub(crate) record: OperationRecord,
    pub(crate) attempt: AttemptId,
    pub(crate) token: AttemptToken,
    pub(crate) deadline: tokio::time::Instant,
}

pub(crate) async fn prepare<B>(shared: Arc<Shared>, req: Request<B>) -> Result<Step<B>, Error>
where
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    match prepare_inner(shared.clone(), req).await {
        // Boxed, here and on the other rare paths below: a future's size is that of its
        // largest state, and the write path's future is allocated once per request. Inline,
        // the paths a plain write never takes would make it several KiB larger to allocate and
        // move.
        Err(e) => Box::pin(await_resolution(&shared, e)).await.map(Step::Done),
        ok => ok,
    }
}

pub(crate) async fn prepare_inner<B>(shared: Arc<Shared>, req: Request<B>) -> Result<Step<B>, Error>
where
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let (parts, body) = req.into_parts();
    let op = parts
        .extensions
        .get::<Operation>()
        .cloned()
        .unwrap_or_else(|| Operation::ad_hoc(&parts.method, &parts.uri));

    // Freeze the body: bounded, of known length.
    let hint = body.size_hint();
    match hint.upper() {
        None => return Err(Error::NonReplayableBody),
        Some(n) if n > shared.max_request_body as u64 => {
            return Err(Error::BodyTooLarge {
                limit: shared.max_request_body,
            });
        }
        Some(_) => {}
    }
    let bytes = match collect_limited(body, shared.max_request_body).await {
        Ok(b) => b,
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(Error::BodyTooLarge {
                limit: shared.max_request_body,
            });
        }
        Err(source) => return Err(Error::BodyRead { source }),
    };

    let (tenant, resume) = (op.tenant().clone(), op.is_resume());
    let (new, contract) =
        shared.new_operation(op, &parts.method, &parts.uri, &parts.headers, bytes.clone());
    let payload_hash = new.payload_hash.clone();
    let op_id = new.operation_id.clone();
    let ledger_err = |source| Error::Ledger {
        operation: Some(op_id.clone()),
        source,
    };
    // The exact request is built, key placed, before anything is written: a request the
    // contract cannot place its key in leaves nothing behind.
    let (fresh, caller) = outgoing::build_first(
        parts,
        bytes.clone(),
        &new.request,
        &contract,
        &new.idempotency_key,
    )
    .map_err(|e| build_error(&op_id, e))?;

    // Without an authorizer, a new operation is created and its first send claimed in one
    // ledger call. With one, permission is checked on the PREPARED row before send rights are
    // claimed: a refusal leaves the operation PREPARED (never sent) for a caller with permission.
    let attempt = AttemptId::generate();
    let created = if resume {
        // A resume never creates: an id the ledger does not hold is an error, nothing is sent.
        match shared
            .ledger
            .get(&tenant, &op_id)
            .await
            .map_err(ledger_err)?
        {
            Some(row) => Created::Existing(row),
            None => {
                return Err(Error::NotFound {
                    tenant,
                    operation: op_id,
                });
            }
        }
    } else {
        let first = if shared.authorizer.is_open() {
            engine::first_claim(&shared, &new, attempt)
        } else {
            None
        };
        match first {
            Some(first) => shared.ledger.create_and_apply(new, first).await,
            None => shared.ledger.create_or_get(new).await,
        }
        .map_err(ledger_err)?
    };
    let (record, request, contract) = match created {
        Created::New(r) => (r, fresh, contract),
        Created::Existing(r) => {
            if r.payload_hash != payload_hash {
                #[cfg(feature = "metrics")]
                metrics::counter!(
                    "recoverable_write_payload_conflicts_total",
                    "target" => engine::target_of(&r),
                    "tenant" => r.tenant.to_string(),
                )
                .increment(1);
                tracing::warn!(
                    operation = %r.operation_id,
                    tenant = %r.tenant,
                    "conflicting payload for an existing operation; nothing sent"
                );
                return Err(Error::Conflict {
                    operation: r.operation_id,
                });
            }
            // The contract frozen on the row (looked up once; `None` if no longer configured).
            let frozen_contract = shared.contracts.find(&r.contract).cloned();
            // A caller's own key must be the operation's: never silently replaced.
            let key_contract = frozen_contract.as_deref().unwrap_or(&contract);
            let (mut fresh_parts, _) = fresh.into_parts();
            let sent = caller.parts(&mut fresh_parts);
            if let Some(key) = outgoing::caller_key(key_contract, &sent.uri, &sent.headers, &bytes)
                && key != r.idempotency_key.as_str()
            {
                return Err(Error::KeyMismatch {
                    operation: r.operation_id,
                });
            }
            // Resolved, or owned by the recovery engine: nothing to build, nothing to send.
            if let Some(answer) = not_sendable(&r) {
                return answer.map(Step::Done);
            }
            // Someone else created it (an outbox row, another instance mid-deploy): its first
            // send uses the contract and the bytes frozen on its row, not this call's.
            let Some(frozen_contract) = frozen_contract else {
                tracing::warn!(
                    operation = %r.operation_id,
                    contract = %r.contract.name,
                    "the operation's contract is not configured with the same content; nothing sent"
                );
                return Err(Error::ContractUnavailable {
                    operation: r.operation_id,
                    contract: r.contract.name.to_string(),
                });
            };
            // The caller's credentials and extensions, from the request built for a new
            // operation, under the row's contract.
            let carried = outgoing::Carried::take(&mut fresh_parts, &frozen_contract)
                .with_body(&frozen_contract, &bytes);
            let request =
                outgoing::build(&r.request, &frozen_contract, &r.idempotency_key, carried)
                    .map_err(|e| build_error(&r.operation_id, e))?;
            (r, request, frozen_contract)
        }
    };

    let record = if record.state == State::InFlight && record.current_attempt == Some(attempt) {
        // Created and claimed in one step.
        engine::publish(&shared, &record);
        record
    } else {
        if record.state == State::Prepared
            && let Err(denied) = shared.authorizer.check(&record, Access::Write).await
        {
            return Err(Box::pin(deny_first_send(&shared, record, denied)).await);
        }
        match Box::pin(claim_send(&shared, record, attempt)).await? {
            Ok(record) => record,
            Err(done) => return Ok(Step::Done(done)),
        }
    };

    // The attempt is durable: send the request built above.
    let (mut parts, body) = request.into_parts();
    let token = AttemptToken::new(record.operation_id.clone(), attempt);
    parts.extensions.insert(token.clone());
    let timeout = record.policy.attempt_timeout();
    tracing::debug!(
        operation = %record.operation_id,
        attempt = %attempt,
        generation = %record.generation,
        "sending attempt"
    );
    Ok(Step::Send(
        Request::from_parts(parts, B::from(body)),
        AttemptCtx {
            shared,
            contract,
            record,
            attempt,
            token,
            deadline: tokio::time::Instant::now() + timeout,
        },
    ))
}

/// The answer to a first send the authorizer refused, after doing what the configuration says
/// with the never-sent row ([`DeniedFirstSend`](crate::DeniedFirstSend)): closed as `REJECTED`
/// through the state machine (so nothing sends it later), or left `PREPARED` for the recoverer.
async fn deny_first_send(
    shared: &Shared,
    record: OperationRecord,
    denied: crate::authorize::Denied,
) -> Error {
    use crate::error::DeniedFirstSend;
    let mut fate = shared.denied_first_sends;
    if fate == DeniedFirstSend::Close {
        let reason = format!("first send not authorized: {}", denied.reason);
        match engine::apply_event(
            shared,
            &record,
            Event::Withdraw { reason },
            "withdrawn",
            engine::Extras::default(),
        )
        .await
        {
            Ok(engine::Applied::Done(_)) => {}
            Ok(_) => {
                // The row moved meanwhile (another caller, the recoverer): it is no longer
                // this call's to close, and a later repeat of the intent tells its fate.
                fate = DeniedFirstSend::Queue;
            }
            Err(source) => {
                return Error::Ledger {
                    operation: Some(record.operation_id),
                    source,
                };
            }
        }
    }
    tracing::warn!(
        operation = %record.operation_id,
        %denied,
        ?fate,
        "write not authorized; nothing sent"
    );
    Error::Denied {
        operation: record.operation_id,
        fate,
        source: denied,
    }
}

/// `read`'s output, or `Err(())` if `deadline` passes first. Unlike `timeout_at`, no timer
/// is registered when `read` is ready at once (a small response's body usually arrives with
/// its head): the timer is made on the first poll that finds `read` pending.
async fn read_by<F: Future>(deadline: tokio::time::Instant, read: F) -> Result<F::Output, ()> {
    use std::task::Poll;
    let mut read = std::pin::pin!(read);
    // Boxed: only a read that has to wait gets a timer.
    let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = read.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)))
            .as_mut()
            .poll(cx)
            .map(|()| Err(()))
    })
    .await
}

/// The data of `body`, at most `limit` bytes (`Limited`'s errors beyond, as with
/// `Limited::new(body, limit).collect().await?.to_bytes()`; trailers are ignored).
pub(crate) async fn collect_limited<B>(body: B, limit: usize) -> Result<Bytes, BoxError>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    collect(Limited::new(body, limit)).await
}

/// The data of `body`, trailers ignored. A body of one data frame, the common case, is returned
/// as that frame, without a copy or a frame queue (`BodyExt::collect` allocates one).
pub(crate) async fn collect<B: Body>(body: B) -> Result<Bytes, B::Error> {
    use bytes::{Buf, BufMut, BytesMut};
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut more: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame?.into_data() else {
            continue;
        };
        if !data.has_remaining() {
            continue;
        }
        let chunk = data.copy_to_bytes(data.remaining());
        match (&mut more, &first) {
            (Some(buf), _) => buf.put(chunk),
            (None, Some(prev)) => {
                let mut buf = BytesMut::with_capacity(prev.len() + chunk.len());
                buf.put_slice(prev);
                buf.put(chunk);
                more = Some(buf);
            }
            (None, None) => first = Some(chunk),
        }
    }
    Ok(match more {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}

fn build_error(operation: &crate::OperationId, e: outgoing::BuildError) -> Error {
    match e {
        outgoing::BuildError::Key(source) => Error::KeyPlacement { source },
        outgoing::BuildError::Secrets(_) => Error::SecretsUnavailable {
            operation: operation.clone(),
        },
        outgoing::BuildError::Frozen(detail) => Error::Ledger {
            operation: Some(operation.clone()),
            source: crate::ledger::LedgerError::Corrupt {
                operation: operation.to_string(),
                detail: format!("the frozen request does not rebuild: {detail}"),
            },
        },
    }
}

/// Claims send rights on an existing operation (two-step path). Only PREPARED (first send) is
/// claimed here; every other state belongs to the recovery engine or is resolved (its stored
/// result comes back as `Ok(Err(response))`).
async fn claim_send(
    shared: &Shared,
    mut record: OperationRecord,
    attempt: AttemptId,
) -> Result<Result<OperationRecord, Response<Full<Bytes>>>, Error> {
    let id = record.operation_id.clone();
    let ledger_err = |source| Error::Ledger {
        operation: Some(id.clone()),
        source,
    };
    // Claim send rights. Only PREPARED (first send) is claimed here; every other state belongs
    // to the recovery engine or is resolved.
    loop {
        if let Some(answer) = not_sendable(&record) {
            return answer.map(Err);
        }
        let lease_until = shared.clock.now_ms() + record.policy.lease().as_millis() as i64;
        let applied = engine::apply_event(
            shared,
            &record,
            Event::ClaimSend,
            engine::CLAIM_KIND,
            Extras {
                attempt: Some(attempt),
                lease_until_ms: Some(lease_until),
                ..Extras::default()
            },
        )
        .await
        .map_err(ledger_err)?;
        match applied {
            Applied::Done(r) if r.state == State::InFlight => {
                record = r;
                break;
            }
            // The claim escalated (budget or window spent).
            Applied::Done(r) => return Err(Error::for_state(&r, None, None, None)),
            Applied::Refused(_) | Applied::Stale => {
                // Someone else moved it first (a concurrent caller for the same operation).
                record = shared
                    .ledger
                    .get(&record.tenant, &record.operation_id)
                    .await
                    .map_err(ledger_err)?
                    .ok_or_else(|| {
                        ledger_err(crate::ledger::LedgerError::Corrupt {
                            operation: id.to_string(),
                            detail: "operation vanished during claim".into(),
                        })
                    })?;
            }
        }
    }

    Ok(Ok(record))
}

/// The answer for a caller whose operation this call may not send: its stored result when it is
/// resolved, its state when the recovery engine owns it; `None` for a `PREPARED` one.
fn not_sendable(record: &OperationRecord) -> Option<Result<Response<Full<Bytes>>, Error>> {
    match record.state {
        State::Prepared => None,
        State::Succeeded | State::Rejected => Some(Ok(stored_result(record))),
        _ => Some(Err(Error::for_state(record, None, None, None))),
    }
}

/// Marks a response the crate wrote itself because the vendor's own answer was never seen (the
/// operation was resolved by a lookup, a callback or a human): `recoverable-write-outcome:
/// synthesized`.
pub const OUTCOME_HEADER: &str = "recoverable-write-outcome";
/// On a synthesized response: the vendor's status class the outcome stands for (`2xx` for
/// `SUCCEEDED`, `4xx` for `REJECTED`).
pub const STATUS_CLASS_HEADER: &str = "recoverable-write-status-class";
/// On a synthesized response: the vendor's reference of the created object, when known.
pub const REMOTE_REF_HEADER: &str = "recoverable-write-remote-ref";
/// On a stored response replayed to a repeat caller: `true` when its body was cut to the
/// stored-body limit ([`stored_body_limit`](crate::Builder::stored_body_limit), 64 KiB
/// by default), so it is not the vendor's whole answer (a JSON body may not even parse).
/// [`Outcome::body_truncated`] says the same. The first caller, who got the live response, got
/// all of it and no marker.
pub const TRUNCATED_HEADER: &str = "recoverable-write-truncated";

/// The answer when no vendor response is stored: `200 OK` for `SUCCEEDED`, `422 Unprocessable
/// Entity` for `REJECTED`, with the [`Outcome`] as JSON and the headers above. Code that parses
/// the vendor's body must check [`OUTCOME_HEADER`] first.
fn synthesized(record: &OperationRecord, outcome: &Outcome) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(outcome).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    let (status, class) = match record.state {
        State::Rejected => (http::StatusCode::UNPROCESSABLE_ENTITY, "4xx"),
        _ => (http::StatusCode::OK, "2xx"),
    };
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    h.insert(
        OUTCOME_HEADER,
        http::HeaderValue::from_static("synthesized"),
    );
    h.insert(STATUS_CLASS_HEADER, http::HeaderValue::from_static(class));
    if let Some(v) = record
        .remote_ref
        .as_deref()
        .and_then(|r| http::HeaderValue::from_str(r).ok())
    {
        h.insert(REMOTE_REF_HEADER, v);
    }
    r
}

/// The answer for a caller naming a resolved operation: the stored response, or a synthesized
/// one (see [`OUTCOME_HEADER`]) when the operation was resolved by a lookup or a human.
fn stored_result(record: &OperationRecord) -> Response<Full<Bytes>> {
    let outcome = Outcome::from_record(record, None, true);
    let mut res = match &record.response {
        Some(stored) => {
            let mut b = Response::builder().status(stored.status);
            for (k, v) in &stored.headers {
                b = b.header(k, v);
            }
            b.body(Full::new(stored.body.clone())).ok()
        }
        None => None,
    }
    .unwrap_or_else(|| synthesized(record, &outcome));
    res.extensions_mut().insert(outcome);
    res
}

/// What the attempt produced.
pub(crate) enum Observed<RB> {
    Response(Response<RB>),
    Failed(BoxError),
    TimedOut,
}

pub(crate) async fn finish<RB>(
    ctx: AttemptCtx,
    observed: Observed<RB>,
) -> Result<Response<Full<Bytes>>, Error>
where
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    let shared = ctx.shared.clone();
    match record_attempt(ctx, observed).await {
        Err(e) => Box::pin(await_resolution(&shared, e)).await,
        ok => ok,
    }
}

/// The note of an attempt's result that found the operation taken over.
const LATE_RESULT: &str = "attempt result arrived after the operation moved on";

/// Reads, classifies and records what one attempt produced (the layer's first send and the
/// recoverer's replays alike).
pub(crate) async fn record_attempt<RB>(
    ctx: AttemptCtx,
    observed: Observed<RB>,
) -> Result<Response<Full<Bytes>>, Error>
where
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    let AttemptCtx {
        shared,
        contract,
        record,
        attempt,
        token,
        deadline,
    } = ctx;
    let now = shared.clock.system_time();
    let mut source = None;
    let (evidence, response) = match observed {
        Observed::Response(res) => {
            let (parts, body) = res.into_parts();
            let read = read_by(deadline, collect_limited(body, shared.max_response_body)).await;
            match read {
                Ok(Ok(body)) => {
                    let evidence =
                        contract.classify_response(parts.status, &parts.headers, &body, now);
                    (evidence, Some(Response::from_parts(parts, body)))
                }
                Ok(Err(e)) => (
                    crate::evidence::Evidence::unknown(format!(
                        "response body lost after status {}: {}",
                        parts.status,
                        crate::error::Short(&e.to_string())
                    )),
                    None,
                ),
                Err(_) => (
                    crate::evidence::Evidence::unknown(format!(
                        "attempt timed out reading the body after status {}",
                        parts.status
                    )),
                    None,
                ),
            }
        }
        Observed::Failed(e) => {
            let evidence = if crate::guard::find_refusal(&*e).is_some() && token.was_sent() {
                // An inner layer re-sent the attempt and the guard refused the copy. That proves
                // the copy unsent, not the first one, whose outcome we never saw.
                crate::evidence::Evidence::unknown(
                    "an inner retry was refused by the send-once guard; the first send's outcome is unknown",
                )
            } else {
                contract.classify_error(&*e)
            };
            source = Some(e);
            (evidence, None)
        }
        Observed::TimedOut => (
            crate::evidence::Evidence::unknown(format!(
                "attempt timed out after {} ms",
                record.policy.attempt_timeout_ms
            )),
            None,
        ),
    };
    let retry_after = evidence.retry_after();
    tracing::info!(
        operation = %record.operation_id,
        attempt = %attempt,
        generation = %record.generation,
        evidence = evidence.label(),
        "attempt classified"
    );

    let authoritative = matches!(
        evidence,
        crate::evidence::Evidence::Succeeded { .. } | crate::evidence::Evidence::Rejected { .. }
    );
    let stored = match (&response, authoritative) {
        (Some(res), true) => stored_response(res, &contract, shared.stored_body),
        _ => None,
    };

    // The evidence moves into the ledger's log. The rare paths below that need it again (a
    // result that arrived late, or could not be recorded) get it back: classified anew from the
    // response (a pure function of what was read), or from a copy when there is no response.
    let kept = response.is_none().then(|| evidence.clone());
    let again = |response: Option<&Response<Bytes>>| match (&kept, response) {
        (Some(e), _) => e.clone(),
        (None, Some(res)) => {
            contract.classify_response(res.status(), res.headers(), res.body(), now)
        }
        (None, None) => crate::evidence::Evidence::unknown("the attempt's evidence was lost"),
    };
    let mut record = record;
    let extras = Extras {
        attempt: Some(attempt),
        lease_until_ms: None,
        response: stored,
        note: None,
    };
    let recorded = match engine::detaching(&shared) {
        // The caller does not wait for the result to be written (only the claim had to be
        // durable); a stale one is appended as late evidence once the ledger says so.
        Some(runtime) => {
            let late = engine::Late {
                tenant: record.tenant.clone(),
                operation_id: record.operation_id.clone(),
                generation: record.generation,
                attempt: Some(attempt),
                evidence: evidence.clone(),
                note: std::borrow::Cow::Borrowed(LATE_RESULT),
            };
            let event = Event::AttemptResult(evidence);
            engine::record_event_detached(
                &shared,
                runtime,
                &mut record,
                event,
                "attempt_result",
                extras,
                late,
            )
        }
        None => {
            let event = Event::AttemptResult(evidence);
            engine::record_event(&shared, &mut record, event, "attempt_result", extras).await
        }
    };

    let (row, recorded) = match recorded {
        // `record` is the row as recorded (its stored response aside: `response` is it).
        Ok(engine::Recorded::Done) => (record, true),
        Ok(engine::Recorded::Refused | engine::Recorded::Stale) => {
            // The lease ran out, or a reviewer or recoverer took the operation over while this
            // attempt was on the wire: the observation is kept as evidence only.
            if let Err(e) = engine::append_late(
                &shared,
                &record,
                Some(attempt),
                again(response.as_ref()),
                LATE_RESULT.into(),
            )
            .await
            {
                tracing::error!(operation = %record.operation_id, error = %e, "could not append late evidence");
            }
            let row = match shared
                .ledger
                .get(&record.tenant, &record.operation_id)
                .await
            {
                Ok(Some(row)) => row,
                _ => record,
            };
            (row, false)
        }
        Err(e) => {
            // The attempt happened but could not be recorded: the row stays IN_FLIGHT, its
            // lease expires and reconciliation takes over. Never a duplicate.
            tracing::error!(operation = %record.operation_id, error = %e, "could not record attempt result; it will be reconciled");
            (record, false)
        }
    };

    if row.state == State::Unknown {
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "recoverable_write_unknown_total",
            "target" => engine::target_of(&row),
            "tenant" => row.tenant.to_string(),
        )
        .increment(1);
    }
    match (row.state, response) {
        (State::Succeeded | State::Rejected, Some(res)) => {
            let (mut parts, body) = res.into_parts();
            parts
                .extensions
                .insert(Outcome::from_row(row, Some(attempt), false));
            Ok(Response::from_parts(parts, Full::new(body)))
        }
        // Authoritative answer that the ledger could not take in (outage, or the operation was
        // taken over): the vendor's answer is still the truth for this caller.
        (_, Some(res)) if authoritative && !recorded => {
            let mut outcome = Outcome::from_record(&row, Some(attempt), false);
            if let crate::evidence::Evidence::Succeeded { remote_ref } = again(Some(&res)) {
                outcome.remote_ref = remote_ref.or(outcome.remote_ref);
            }
            let (mut parts, body) = res.into_parts();
            parts.extensions.insert(outcome);
            Ok(Response::from_parts(parts, Full::new(body)))
        }
        (State::Succeeded | State::Rejected, None) => Ok(stored_result(&row)),
        _ => Err(Error::for_state(&row, Some(attempt), source, retry_after)),
    }
}

/// With [`Builder::wait_for_resolution`](crate::Builder::wait_for_resolution), waits for the recovery engine to resolve
/// the operation named by `err`; otherwise returns `err`.
pub(crate) async fn await_resolution(
    shared: &Shared,
    err: Error,
) -> Result<Response<Full<Bytes>>, Error> {
    let (Some(bound), Some(outcome)) = (shared.wait, err.outcome()) else {
        return Err(err);
    };
    if !matches!(
        outcome.state,
        State::Unknown | State::InFlight | State::Processing | State::RetryReady
    ) {
        return Err(err);
    }
    let (tenant, op, attempt) = (
        outcome.tenant.clone(),
        outcome.operation_id.clone(),
        outcome.attempt,
    );
    let deadline = tokio::time::Instant::now() + bound;
    let mut rx = shared.notifier.subscribe();
    let mut latest = None;
    loop {
        // The ledger is the truth: read it after subscribing, so no resolution is missed.
        if let Ok(Some(row)) = shared.ledger.get(&tenant, &op).await {
            match row.state {
                State::Succeeded | State::Rejected => return Ok(stored_result(&row)),
                State::ManualReview => return Err(Error::for_state(&row, attempt, None, None)),
                _ => latest = Some(row),
            }
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        let poll = deadline.min(now + Duration::from_millis(250));
        loop {
            tokio::select! {
                notice = rx.recv() => match notice {
                    Ok(n) if n.outcome().operation_id == op && n.outcome().tenant == tenant => break,
                    Ok(_) => continue,
                    // Missed notices: re-read the ledger.
                    Err(_) => break,
                },
                _ = tokio::time::sleep_until(poll) => break,
            }
        }
    }
    Err(match latest {
        Some(row) => Error::for_state(&row, attempt, None, None),
        None => err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 27 item 11: a stored response cut to the stored-body limit is marked when it is
    /// replayed to a repeat caller (header and outcome); the first caller got all of it, and a
    /// response under the limit is never marked.
    #[tokio::test]
    async fn a_truncated_stored_response_is_marked_when_replayed() {
        use http_body_util::BodyExt as _;
        use tower::ServiceExt as _;

        let rw = crate::RecoverableWrite::builder(crate::MemoryLedger::new())
            .stored_body_limit(8)
            .build()
            .expect("valid configuration");
        let body_of =
            |len: usize| Bytes::from(format!("{{\"id\":\"W1\",\"pad\":\"{}\"}}", "x".repeat(len)));
        let call = |op: Operation, vendor_body: Bytes| {
            let layer = rw.layer();
            async move {
                let svc = tower::ServiceBuilder::new()
                    .layer(layer)
                    .service(tower::service_fn(
                        move |_req: http::Request<Full<Bytes>>| {
                            let b = vendor_body.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(
                                    Response::builder().status(201).body(Full::new(b)).unwrap(),
                                )
                            }
                        },
                    ));
                let mut req = http::Request::post("https://vendor.test/v1/tickets")
                    .body(Full::new(Bytes::from_static(b"{}")))
                    .unwrap();
                req.extensions_mut().insert(op);
                let res = svc.oneshot(req).await.expect("an authoritative answer");
                let outcome = res.extensions().get::<Outcome>().cloned().expect("outcome");
                let marker = res.headers().get(TRUNCATED_HEADER).cloned();
                let body = res.into_body().collect().await.unwrap().to_bytes();
                (outcome, marker, body)
            }
        };

        let long = body_of(40);
        let op = Operation::new("t", "create_ticket", "intent-long");
        let (first, marker, body) = call(op.clone(), long.clone()).await;
        assert_eq!(body, long, "the first caller gets the whole live answer");
        assert!(marker.is_none());
        assert!(!first.body_truncated);
        // The repeat caller gets the stored copy: cut, and saying so.
        let (again, marker, body) = call(op.clone(), long.clone()).await;
        assert!(again.from_ledger);
        assert_eq!(body, long.slice(..8));
        assert_eq!(marker.as_ref().map(|v| v.to_str().unwrap()), Some("true"));
        assert!(again.body_truncated);
        let json = serde_json::to_value(&again).unwrap();
        assert_eq!(json["body_truncated"], true);

        // Under the limit: replayed whole, no marker.
        let short = Bytes::from_static(b"{}");
        let op = Operation::new("t", "create_ticket", "intent-short");
        call(op.clone(), short.clone()).await;
        let (again, marker, body) = call(op, short.clone()).await;
        assert!(again.from_ledger);
        assert_eq!(body, short);
        assert!(marker.is_none());
        assert!(!again.body_truncated);
        assert!(
            serde_json::to_value(&again)
                .unwrap()
                .get("body_truncated")
                .is_none()
        );
    }

    #[test]
    fn stored_headers_keep_visible_ascii_values_of_stored_names_in_order() {
        let mut map = http::HeaderMap::new();
        map.append("content-type", "application/json".parse().unwrap());
        map.append("set-cookie", "session=secret".parse().unwrap());
        map.append("request-id", "req_1".parse().unwrap());
        map.append("request-id", "req_2, \"x\"".parse().unwrap());
        map.append("content-length", "12".parse().unwrap());
        map.append(
            "x-latin1",
            http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        map.append("x-api-key", "key-secret".parse().unwrap());
        map.append("x-vendor-token", "token-secret".parse().unwrap());
        let stored = stored_headers(&map, &["X-Vendor-Token".to_owned()]);
        let pairs: Vec<_> = stored.iter().collect();
        assert_eq!(
            pairs,
            [
                ("content-type", "application/json"),
                ("request-id", "req_1"),
                ("request-id", "req_2, \"x\""),
            ]
        );
        assert_eq!(
            stored_headers(&http::HeaderMap::new(), &[]),
            StoredHeaders::new()
        );
    }
}
