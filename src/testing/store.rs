//! The fake vendor's business state: tickets, idempotency keys, operation records.
//!
//! Everything here runs under one mutex held by the server, so every count is exact: a ticket
//! is created at most once per commit, and a key's "in progress" marker is set in the same
//! critical section as the commit it guards.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// The business status of an operation at the fake vendor, as its lookup reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OperationStatus {
    /// Accepted, not finished: the ticket id is reserved but not yet visible in lookups.
    Processing,
    /// Done: the ticket exists.
    Succeeded,
    /// The vendor's asynchronous processing failed (see [`Faults::fail_processing`]).
    ///
    /// [`Faults::fail_processing`]: super::Faults::fail_processing
    Rejected,
}

impl OperationStatus {
    /// The wire name (`"PROCESSING"`, `"SUCCEEDED"`, `"REJECTED"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "PROCESSING",
            Self::Succeeded => "SUCCEEDED",
            Self::Rejected => "REJECTED",
        }
    }
}

/// A ticket the fake vendor created: one side effect.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Ticket {
    /// Ticket id, `W731`, `W732`, ...
    pub id: String,
    /// Tenant the ticket belongs to.
    pub tenant: String,
    /// The `operation_id` field of the creating request, if it had one.
    pub operation_id: Option<String>,
    /// The `device_id` field of the creating request.
    pub device_id: String,
    /// The idempotency key the creating request carried (normalised: RFC 8941 quotes removed).
    pub idempotency_key: Option<String>,
    /// The full JSON body of the creating request.
    pub payload: Value,
    /// Current status of the operation that created it.
    pub status: OperationStatus,
}

/// One request as the fake vendor received it, before any fault or routing decision.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SeenRequest {
    /// Request method.
    pub method: Method,
    /// Request path (with the query string, if any).
    pub path: String,
    /// The raw value of the idempotency key header, exactly as sent.
    pub idempotency_key: Option<String>,
    /// Tenant, from the tenant header (`"default"` when absent).
    pub tenant: String,
    /// All request headers.
    pub headers: HeaderMap,
    /// The request body bytes, exactly as received.
    pub body: Bytes,
    /// When the vendor received it.
    pub at: Instant,
}

/// A response the vendor stores against a key and replays verbatim.
#[derive(Debug, Clone)]
pub(crate) struct StoredResponse {
    pub(crate) status: StatusCode,
    pub(crate) body: Value,
    /// `Retry-After` header value, if any.
    pub(crate) retry_after: Option<String>,
}

impl StoredResponse {
    pub(crate) fn new(status: StatusCode, body: Value) -> Self {
        Self {
            status,
            body,
            retry_after: None,
        }
    }

    pub(crate) fn error(status: StatusCode, code: &str) -> Self {
        Self::new(status, json!({ "error": { "code": code } }))
    }
}

/// Knobs of the business logic, fixed at start.
#[derive(Debug, Clone)]
pub(crate) struct StoreConfig {
    pub(crate) key_retention: Duration,
    pub(crate) operation_retention: Duration,
    pub(crate) dedupe_by_operation_id: bool,
    pub(crate) remember_used_operations: bool,
    pub(crate) processing_retry_after: Option<String>,
}

/// A validated create request.
#[derive(Debug)]
pub(crate) struct CreateTicket {
    pub(crate) tenant: String,
    /// Normalised key; `None` only when the vendor does not require keys.
    pub(crate) key: Option<String>,
    pub(crate) payload_hash: [u8; 32],
    pub(crate) operation_id: Option<String>,
    pub(crate) device_id: String,
    pub(crate) payload: Value,
}

/// What the vendor decided for a POST.
#[derive(Debug)]
pub(crate) enum PostOutcome {
    /// Answer without any new side effect (replay, conflict, dedupe by operation id).
    Answer {
        response: StoredResponse,
        replayed: bool,
    },
    /// A ticket was created; the key (if any) is marked in progress until
    /// [`Store::finish_key`] stores the response.
    Committed {
        response: StoredResponse,
        ticket_id: String,
    },
}

#[derive(Debug)]
enum KeyState {
    InProgress,
    Done(StoredResponse),
}

#[derive(Debug)]
struct KeyRecord {
    payload_hash: [u8; 32],
    created_at: Instant,
    state: KeyState,
}

#[derive(Debug)]
struct OperationRecord {
    operation_id: Option<String>,
    /// Index into `Store::tickets`.
    ticket: usize,
    state_version: u64,
    created_at: Instant,
    reason: Option<String>,
}

/// `(tenant, value)`: every identity at the vendor is tenant-scoped.
type Scoped = (String, String);

#[derive(Debug)]
pub(crate) struct Store {
    config: StoreConfig,
    next_ticket: u64,
    tickets: Vec<Ticket>,
    keys: HashMap<Scoped, KeyRecord>,
    operations: Vec<OperationRecord>,
    operations_by_id: HashMap<Scoped, usize>,
    operations_by_key: HashMap<Scoped, usize>,
    used_operations: HashSet<Scoped>,
    requests: Vec<SeenRequest>,
    pub(crate) posts_received: u64,
    pub(crate) lookups_received: u64,
}

impl Store {
    pub(crate) fn new(config: StoreConfig, first_ticket: u64) -> Self {
        Self {
            config,
            next_ticket: first_ticket,
            tickets: Vec::new(),
            keys: HashMap::new(),
            operations: Vec::new(),
            operations_by_id: HashMap::new(),
            operations_by_key: HashMap::new(),
            used_operations: HashSet::new(),
            requests: Vec::new(),
            posts_received: 0,
            lookups_received: 0,
        }
    }

    pub(crate) fn record(&mut self, request: SeenRequest) {
        self.requests.push(request);
    }

    pub(crate) fn requests(&self) -> Vec<SeenRequest> {
        self.requests.clone()
    }

    pub(crate) fn tickets(&self) -> Vec<Ticket> {
        self.tickets.clone()
    }

    pub(crate) fn tickets_created(&self) -> u64 {
        self.tickets.len() as u64
    }

    pub(crate) fn tenant_tickets(&self, tenant: &str) -> Vec<Ticket> {
        self.tickets
            .iter()
            .filter(|t| t.tenant == tenant)
            .cloned()
            .collect()
    }

    /// Decide a create request: replay, conflict, dedupe, or commit a new ticket.
    pub(crate) fn begin_post(
        &mut self,
        request: CreateTicket,
        hold_processing: bool,
        now: Instant,
    ) -> PostOutcome {
        let scoped_key = request
            .key
            .as_ref()
            .map(|k| (request.tenant.clone(), k.clone()));

        if let Some(scoped) = &scoped_key
            && let Some(record) = self.keys.get(scoped)
        {
            if now.saturating_duration_since(record.created_at) >= self.config.key_retention {
                tracing::debug!("idempotency key expired; treating the request as new");
                self.keys.remove(scoped);
            } else if record.payload_hash != request.payload_hash {
                return answer(StoredResponse::error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_key_mismatch",
                ));
            } else {
                return match &record.state {
                    KeyState::InProgress => answer(StoredResponse::error(
                        StatusCode::CONFLICT,
                        "idempotency_key_in_use",
                    )),
                    KeyState::Done(stored) => PostOutcome::Answer {
                        response: stored.clone(),
                        replayed: true,
                    },
                };
            }
        }

        if let Some(operation_id) = &request.operation_id {
            let scoped_op = (request.tenant.clone(), operation_id.clone());
            if self.config.dedupe_by_operation_id
                && let Some(index) = self.live_operation(self.operations_by_id.get(&scoped_op), now)
            {
                tracing::debug!("create deduplicated by operation id");
                let response = self.existing_operation_response(index, false);
                if let Some(scoped) = scoped_key {
                    self.keys.insert(
                        scoped,
                        KeyRecord {
                            payload_hash: request.payload_hash,
                            created_at: now,
                            state: KeyState::Done(response.clone()),
                        },
                    );
                }
                return answer(response);
            }
            if self.config.remember_used_operations && self.used_operations.contains(&scoped_op) {
                tracing::debug!("create refused: operation id already used");
                return answer(StoredResponse::error(
                    StatusCode::CONFLICT,
                    "operation_already_used",
                ));
            }
        }

        // Commit: the side effect, its operation record and the key's in-progress marker, in
        // one critical section.
        let ticket_id = format!("W{}", self.next_ticket);
        self.next_ticket += 1;
        let status = if hold_processing {
            OperationStatus::Processing
        } else {
            OperationStatus::Succeeded
        };
        self.tickets.push(Ticket {
            id: ticket_id.clone(),
            tenant: request.tenant.clone(),
            operation_id: request.operation_id.clone(),
            device_id: request.device_id,
            idempotency_key: request.key.clone(),
            payload: request.payload,
            status,
        });
        let ticket = self.tickets.len() - 1;
        self.operations.push(OperationRecord {
            operation_id: request.operation_id.clone(),
            ticket,
            state_version: 1,
            created_at: now,
            reason: None,
        });
        let op_index = self.operations.len() - 1;
        if let Some(operation_id) = &request.operation_id {
            let scoped_op = (request.tenant.clone(), operation_id.clone());
            self.operations_by_id.insert(scoped_op.clone(), op_index);
            self.used_operations.insert(scoped_op);
        }
        if let Some(scoped) = scoped_key {
            self.operations_by_key.insert(scoped.clone(), op_index);
            self.keys.insert(
                scoped,
                KeyRecord {
                    payload_hash: request.payload_hash,
                    created_at: now,
                    state: KeyState::InProgress,
                },
            );
        }
        tracing::debug!(tickets_created = self.tickets.len(), "ticket committed");
        PostOutcome::Committed {
            response: self.existing_operation_response(op_index, true),
            ticket_id,
        }
    }

    /// Store the first response against a key that [`Store::begin_post`] marked in progress.
    /// A key forgotten meanwhile ([`Store::expire_keys`]) stays forgotten.
    pub(crate) fn finish_key(&mut self, tenant: &str, key: &str, response: StoredResponse) {
        let scoped = (tenant.to_owned(), key.to_owned());
        if let Some(record) = self.keys.get_mut(&scoped)
            && matches!(record.state, KeyState::InProgress)
        {
            record.state = KeyState::Done(response);
        }
    }

    /// The lookup body for an operation, by operation id.
    pub(crate) fn lookup_by_id(
        &self,
        tenant: &str,
        operation_id: &str,
        now: Instant,
    ) -> Option<StoredResponse> {
        let scoped = (tenant.to_owned(), operation_id.to_owned());
        let index = self.live_operation(self.operations_by_id.get(&scoped), now)?;
        Some(self.lookup_response(index))
    }

    /// The lookup body for an operation, by the idempotency key that created it.
    pub(crate) fn lookup_by_key(
        &self,
        tenant: &str,
        key: &str,
        now: Instant,
    ) -> Option<StoredResponse> {
        let scoped = (tenant.to_owned(), key.to_owned());
        let index = self.live_operation(self.operations_by_key.get(&scoped), now)?;
        Some(self.lookup_response(index))
    }

    /// Move every PROCESSING operation to `to`; returns how many moved.
    pub(crate) fn finish_processing(&mut self, to: OperationStatus, reason: Option<&str>) -> usize {
        let mut moved = HashSet::new();
        for (index, ticket) in self.tickets.iter_mut().enumerate() {
            if ticket.status == OperationStatus::Processing {
                ticket.status = to;
                moved.insert(index);
            }
        }
        for op in &mut self.operations {
            if moved.contains(&op.ticket) {
                op.state_version += 1;
                op.reason = reason.map(str::to_owned);
            }
        }
        moved.len()
    }

    pub(crate) fn expire_keys(&mut self) {
        self.keys.clear();
    }

    pub(crate) fn clean_operation_records(&mut self) {
        self.operations.clear();
        self.operations_by_id.clear();
        self.operations_by_key.clear();
    }

    fn live_operation(&self, index: Option<&usize>, now: Instant) -> Option<usize> {
        let index = *index?;
        let op = self.operations.get(index)?;
        (now.saturating_duration_since(op.created_at) < self.config.operation_retention)
            .then_some(index)
    }

    /// The response a create gets for an operation: `created` for the commit itself, otherwise
    /// a dedupe by operation id (200 with the existing ticket).
    fn existing_operation_response(&self, op_index: usize, created: bool) -> StoredResponse {
        let op = &self.operations[op_index];
        let ticket = &self.tickets[op.ticket];
        match ticket.status {
            OperationStatus::Processing => StoredResponse {
                status: StatusCode::ACCEPTED,
                body: json!({
                    "operation_id": ticket.operation_id,
                    "status": ticket.status.as_str(),
                }),
                retry_after: self.config.processing_retry_after.clone(),
            },
            OperationStatus::Succeeded => StoredResponse::new(
                if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                ticket_json(ticket),
            ),
            OperationStatus::Rejected => {
                StoredResponse::error(StatusCode::CONFLICT, "operation_already_rejected")
            }
        }
    }

    fn lookup_response(&self, op_index: usize) -> StoredResponse {
        let op = &self.operations[op_index];
        let ticket = &self.tickets[op.ticket];
        let resource_id = match ticket.status {
            OperationStatus::Succeeded => Some(ticket.id.as_str()),
            OperationStatus::Processing | OperationStatus::Rejected => None,
        };
        let mut body = json!({
            "operation_id": op.operation_id,
            "status": ticket.status.as_str(),
            "resource_id": resource_id,
            "state_version": op.state_version,
        });
        if let (Some(reason), Some(map)) = (&op.reason, body.as_object_mut()) {
            map.insert("reason".to_owned(), Value::String(reason.clone()));
        }
        StoredResponse {
            status: StatusCode::OK,
            body,
            retry_after: match ticket.status {
                OperationStatus::Processing => self.config.processing_retry_after.clone(),
                OperationStatus::Succeeded | OperationStatus::Rejected => None,
            },
        }
    }
}

fn answer(response: StoredResponse) -> PostOutcome {
    PostOutcome::Answer {
        response,
        replayed: false,
    }
}

/// The JSON a create returns for a ticket.
pub(crate) fn ticket_json(ticket: &Ticket) -> Value {
    json!({
        "id": ticket.id,
        "operation_id": ticket.operation_id,
        "device_id": ticket.device_id,
        "status": ticket.status.as_str(),
    })
}

/// SHA-256 over a canonical JSON form (object keys sorted, no whitespace), so two bodies that
/// differ only in key order or spacing are the same payload.
pub(crate) fn payload_hash(value: &Value) -> [u8; 32] {
    let mut canonical = Vec::new();
    write_canonical(value, &mut canonical);
    Sha256::digest(&canonical).into()
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(key, out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::String(s) => write_string(s, out),
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    // Serialising a `Value::String` cannot fail; an empty string marks the impossible case.
    let encoded = serde_json::to_string(s).unwrap_or_default();
    out.extend_from_slice(encoded.as_bytes());
}
