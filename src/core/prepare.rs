//! The preparation phase of a write: freeze the request, record the operation (or find the one
//! the ledger holds), and claim send rights, before anything is sent.
//!
//! [`prepare_inner`] reads as its steps: [`operation_of`] the request, [`freeze_body`], build the
//! exact request, [`create_or_get`] (or [`find_to_resume`]) the row, [`adopt_existing`] when it
//! was there already, [`claim_first_send`], and hand the attempt over ([`attempt_to_send`]).

use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use tower::BoxError;

use super::body::collect_limited;
use super::engine::{self, Applied, Extras};
use super::stored::stored_result;
use super::{Error, Shared, outgoing, trace};
use crate::authorize::Access;
use crate::contract::Contract;
use crate::guard::AttemptToken;
use crate::ledger::{Created, NewOperation, OperationRecord};
use crate::operation::{AttemptId, Operation, OperationId, PayloadHash, Tenant};
use crate::state::{Event, State};

/// A step's answer when there is nothing to send: the response from the ledger.
type Answered = Response<Full<Bytes>>;

/// A first send ready to be claimed: the operation's row, the request built for it, and the
/// contract it was built under.
type Sendable = (OperationRecord, Request<Bytes>, Arc<Contract>);

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

/// Freezes the request, records the operation (or finds it) and claims send rights: what may
/// be sent, or the answer when nothing is. An error names the operation when one was made (the
/// caller may wait for the recovery engine to resolve it). `span` is the write's
/// [`trace::write_span`]: its fields are recorded as they become known.
pub(crate) async fn prepare_inner<B>(
    shared: Arc<Shared>,
    req: Request<B>,
    span: &tracing::Span,
) -> Result<Step<B>, Error>
where
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let (parts, body) = req.into_parts();
    let op = operation_of(&parts);
    let bytes = freeze_body(body, shared.max_request_body).await?;

    let (tenant, resume) = (op.tenant().clone(), op.is_resume());
    let (new, contract) =
        shared.new_operation(op, &parts.method, &parts.uri, &parts.headers, bytes.clone());
    let payload_hash = new.payload_hash.clone();
    let op_id = new.operation_id.clone();
    trace::identify(span, &op_id, &tenant, &new.contract.name);
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

    let attempt = AttemptId::generate();
    // The ledger's answer is not bound to a local: the row moves out of it at once, so the
    // future does not keep a second copy of it across the awaits below.
    let (record, request, contract) = match if resume {
        find_to_resume(&shared, tenant, op_id).await?
    } else {
        create_or_get(&shared, new, attempt, op_id).await?
    } {
        Created::New(r) => (r, fresh, contract),
        Created::Existing(r) => {
            match adopt_existing(&shared, r, fresh, &caller, &contract, &bytes, &payload_hash)? {
                Ok(adopted) => adopted,
                Err(answered) => return Ok(Step::Done(answered)),
            }
        }
    };
    let record = if claimed_at_creation(&record, attempt) {
        engine::publish(&shared, &record);
        record
    } else {
        // Boxed: only an operation created by someone else, or under an authorizer, takes it.
        match Box::pin(claim_first_send(&shared, record, attempt)).await? {
            Ok(record) => record,
            Err(answered) => return Ok(Step::Done(answered)),
        }
    };
    trace::claimed(span, &record, &attempt);
    Ok(attempt_to_send(shared, contract, record, request, attempt))
}

/// The operation the caller named on the request, or an ad-hoc one for its method and URL.
fn operation_of(parts: &Parts) -> Operation {
    parts
        .extensions
        .get::<Operation>()
        .cloned()
        .unwrap_or_else(|| Operation::ad_hoc(&parts.method, &parts.uri))
}

/// The request body, frozen: of known length, and at most `limit` bytes.
async fn freeze_body<B>(body: B, limit: usize) -> Result<Bytes, Error>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let hint = body.size_hint();
    match hint.upper() {
        None => return Err(Error::NonReplayableBody),
        Some(n) if n > limit as u64 => return Err(Error::BodyTooLarge { limit }),
        Some(_) => {}
    }
    match collect_limited(body, limit).await {
        Ok(b) => Ok(b),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Error::BodyTooLarge { limit }),
        Err(source) => Err(Error::BodyRead { source }),
    }
}

/// The operation a resume names. A resume never creates: an id the ledger does not hold is an
/// error, nothing is sent.
async fn find_to_resume(
    shared: &Shared,
    tenant: Tenant,
    op_id: OperationId,
) -> Result<Created, Error> {
    match shared.ledger.get(&tenant, &op_id).await {
        Ok(Some(row)) => Ok(Created::Existing(row)),
        Ok(None) => Err(Error::NotFound {
            tenant,
            operation: op_id,
        }),
        Err(source) => Err(Error::Ledger {
            operation: Some(op_id),
            source,
        }),
    }
}

/// The new operation's row, or the one the ledger already holds for its id. Without an
/// authorizer, a new operation is created and its first send claimed in one ledger call. With
/// one, permission is checked on the PREPARED row before send rights are claimed
/// ([`claim_first_send`]): a refusal leaves the operation PREPARED (never sent) for a caller
/// with permission.
fn create_or_get(
    shared: &Shared,
    new: NewOperation,
    attempt: AttemptId,
    op_id: OperationId,
) -> impl Future<Output = Result<Created, Error>> + use<'_> {
    // Not an async fn: the operation moves into the ledger's call at once, so the future
    // awaited holds the ledger's (boxed) one and the id, not a second copy of the operation.
    let first = if shared.authorizer.is_open() {
        engine::first_claim(shared, &new, attempt)
    } else {
        None
    };
    let call = match first {
        Some(first) => shared.ledger.create_and_apply(new, first),
        None => shared.ledger.create_or_get(new),
    };
    async move {
        call.await.map_err(|source| Error::Ledger {
            operation: Some(op_id),
            source,
        })
    }
}

/// What this call sends for an operation the ledger held already: `Ok(Err(answer))` when there
/// is nothing to send (it is resolved, or the recovery engine owns it); an error when this
/// call's payload or key is not the operation's, or its contract is not configured any more.
/// Otherwise its first send, built from the request and the contract frozen on its row.
// The write path's own error, returned as it is (no box on the way back).
#[allow(clippy::result_large_err)]
fn adopt_existing(
    shared: &Shared,
    r: OperationRecord,
    fresh: Request<Bytes>,
    caller: &outgoing::Caller,
    contract: &Contract,
    bytes: &Bytes,
    payload_hash: &PayloadHash,
) -> Result<Result<Sendable, Answered>, Error> {
    if payload_conflicts(&r, payload_hash) {
        return Err(Error::Conflict {
            operation: r.operation_id,
        });
    }
    // The contract frozen on the row (looked up once; `None` if no longer configured).
    let frozen_contract = shared.contracts.find(&r.contract).cloned();
    // A caller's own key must be the operation's: never silently replaced.
    let key_contract = frozen_contract.as_deref().unwrap_or(contract);
    let (mut fresh_parts, _) = fresh.into_parts();
    if key_mismatch(&r, key_contract, caller.parts(&mut fresh_parts), bytes) {
        return Err(Error::KeyMismatch {
            operation: r.operation_id,
        });
    }
    // Resolved, or owned by the recovery engine: nothing to build, nothing to send.
    if let Some(answer) = not_sendable(&r) {
        return answer.map(Err);
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
        .with_body(&frozen_contract, bytes);
    let request = outgoing::build(&r.request, &frozen_contract, &r.idempotency_key, carried)
        .map_err(|e| build_error(&r.operation_id, e))?;
    Ok(Ok((r, request, frozen_contract)))
}

/// Whether `r` was made with another payload than this call's: an operation is one payload,
/// so a repeat of its id with another one is a conflict, and nothing is sent.
fn payload_conflicts(r: &OperationRecord, payload_hash: &PayloadHash) -> bool {
    if r.payload_hash == *payload_hash {
        return false;
    }
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "recoverable_write_payload_conflicts_total",
        "target" => engine::target_of(r),
        "tenant" => r.tenant.to_string(),
    )
    .increment(1);
    tracing::warn!(
        operation = %r.operation_id,
        tenant = %r.tenant,
        "conflicting payload for an existing operation; nothing sent"
    );
    true
}

/// Whether the caller put a key of its own where `contract` places keys, and it is not the
/// operation's.
fn key_mismatch(r: &OperationRecord, contract: &Contract, sent: &Parts, bytes: &Bytes) -> bool {
    outgoing::caller_key(contract, &sent.uri, &sent.headers, bytes)
        .is_some_and(|key| key != r.idempotency_key.as_str())
}

/// Send rights on the attempt when the row was not created and claimed in one step
/// ([`claimed_at_creation`]): claimed on the row ([`claim_send`]) once the authorizer allows a
/// first send. `Ok(Err(answer))`: nothing to send.
async fn claim_first_send(
    shared: &Shared,
    record: OperationRecord,
    attempt: AttemptId,
) -> Result<Result<OperationRecord, Answered>, Error> {
    if record.state == State::Prepared
        && let Err(denied) = shared.authorizer.check(&record, Access::Write).await
    {
        return Err(deny_first_send(shared, record, denied).await);
    }
    claim_send(shared, record, attempt).await
}

/// Whether `record` was created and claimed for `attempt` in one step ([`create_or_get`]):
/// send rights are held already.
fn claimed_at_creation(record: &OperationRecord, attempt: AttemptId) -> bool {
    record.state == State::InFlight && record.current_attempt == Some(attempt)
}

/// The attempt is durable: the request built for it, carrying its token, and what finishing it
/// needs.
fn attempt_to_send<B: From<Bytes>>(
    shared: Arc<Shared>,
    contract: Arc<Contract>,
    record: OperationRecord,
    request: Request<Bytes>,
    attempt: AttemptId,
) -> Step<B> {
    let (mut parts, body) = request.into_parts();
    let token = AttemptToken::new(record.operation_id.clone(), attempt);
    parts.extensions.insert(token.clone());
    let timeout = record.policy.attempt_timeout();
    Step::Send(
        Request::from_parts(parts, B::from(body)),
        AttemptCtx {
            shared,
            contract,
            record,
            attempt,
            token,
            deadline: tokio::time::Instant::now() + timeout,
        },
    )
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

fn build_error(operation: &crate::OperationId, e: outgoing::OutgoingError) -> Error {
    match e {
        outgoing::OutgoingError::Key(source) => Error::KeyPlacement { source },
        outgoing::OutgoingError::Secrets(_) => Error::SecretsUnavailable {
            operation: operation.clone(),
        },
        outgoing::OutgoingError::Frozen(detail) => Error::Ledger {
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
