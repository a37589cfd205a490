//! The rows of the ledger as callers see them: a new operation, the operation record, the
//! stored response and evidence entry, and what creating and recording return.

use std::sync::Arc;

use bytes::Bytes;

use super::{LedgerError, NewEvidence, StoredHeaders};
use crate::budget::BudgetPolicy;
use crate::contract::ContractRef;
use crate::operation::{
    AttemptId, FrozenRequest, Generation, IdempotencyKey, OperationId, PayloadHash, Tenant,
};
use crate::state::State;

/// The vendor's response kept for callers that ask again (status, chosen headers, bounded body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status code.
    pub status: u16,
    /// Selected non-secret headers, in the vendor's order (one buffer for all of them).
    pub headers: StoredHeaders,
    /// The body, with the contract's secret answer fields replaced by `[redacted]`, then
    /// truncated to the layer's stored-body limit.
    pub body: Bytes,
}

impl StoredResponse {
    /// Whether the body was cut to the layer's stored-body limit: the layer then keeps the
    /// header `recoverable-write-truncated: true` with the response
    /// ([`TRUNCATED_HEADER`](crate::layer::TRUNCATED_HEADER)).
    pub fn is_truncated(&self) -> bool {
        self.headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case(TRUNCATED) && v == "true")
    }
}

/// The name of [`TRUNCATED_HEADER`](crate::layer::TRUNCATED_HEADER), known to the ledger so a
/// stored response can say it was cut without the layer.
const TRUNCATED: &str = "recoverable-write-truncated";

/// Everything needed to insert a new operation (state `PREPARED`, generation 0, version 0).
#[derive(Clone, Debug)]
pub struct NewOperation {
    /// Tenant.
    pub tenant: Tenant,
    /// Operation id (primary key with the tenant).
    pub operation_id: OperationId,
    /// Action name; `(tenant, action, intent_ref)` is unique. Shared (`Arc<str>`): rows are
    /// cloned often and the name never changes.
    pub action: Arc<str>,
    /// The caller's intent reference (shared like `action`).
    pub intent_ref: Arc<str>,
    /// The idempotency key, made once here.
    pub idempotency_key: IdempotencyKey,
    /// Hash of the frozen payload.
    pub payload_hash: PayloadHash,
    /// The frozen request (shared: rows are cloned often, the request never changes).
    pub request: Arc<FrozenRequest>,
    /// The contract frozen on the row.
    pub contract: ContractRef,
    /// The budget frozen on the row.
    pub policy: BudgetPolicy,
    /// Creation time, ms since the Unix epoch.
    pub now_ms: i64,
}

/// One operation row.
///
/// Its fields are public to read — by authorizers, reconcilers, notifiers and operators' tools —
/// and the struct is `#[non_exhaustive]` (as `http::request::Parts` is): a later version can add
/// a field without breaking them, and code outside this crate cannot build a row from nothing.
/// A backend makes a new row with [`NewOperation::into_prepared`] and keeps it current with the
/// [`Update`](crate::ledger::backend::Update)s the engine hands it (see [`backend`](crate::ledger::backend)).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OperationRecord {
    /// Tenant.
    pub tenant: Tenant,
    /// Operation id.
    pub operation_id: OperationId,
    /// Action name (shared: rows are cloned often and the name never changes).
    pub action: Arc<str>,
    /// The caller's intent reference (shared like `action`).
    pub intent_ref: Arc<str>,
    /// The idempotency key sent on every attempt.
    pub idempotency_key: IdempotencyKey,
    /// Hash of the frozen payload.
    pub payload_hash: PayloadHash,
    /// The frozen request (credentials never included; shared, it never changes).
    pub request: Arc<FrozenRequest>,
    /// The contract the operation started with.
    pub contract: ContractRef,
    /// The budget the operation started with.
    pub policy: BudgetPolicy,
    /// Current state.
    pub state: State,
    /// The business result kept while in `MANUAL_REVIEW`, and for terminal states.
    pub last_result: Option<State>,
    /// The fence: incremented at every claim.
    pub generation: Generation,
    /// Incremented at every change and at every evidence entry appended on its own: the
    /// compare-and-swap token every decision names (see
    /// [the fencing rule](super#the-fencing-rule)).
    pub version: u64,
    /// Write attempts used, including the first.
    pub attempts_used: u32,
    /// Queries used.
    pub queries_used: u32,
    /// Sticky: some attempt may have been applied by the vendor.
    pub may_have_applied: bool,
    /// The attempt that holds (or last held) send rights.
    pub current_attempt: Option<AttemptId>,
    /// When the current lease runs out (ms since epoch).
    pub lease_until_ms: Option<i64>,
    /// When the engine should look next (ms since epoch).
    pub next_check_ms: Option<i64>,
    /// End of the recovery window (ms since epoch).
    pub deadline_ms: Option<i64>,
    /// The vendor's reference of the created object.
    pub remote_ref: Option<String>,
    /// Rejection or escalation reason.
    pub reason: Option<String>,
    /// The first authoritative response, for callers that ask again.
    pub response: Option<StoredResponse>,
    /// Creation time (ms since epoch).
    pub created_ms: i64,
    /// Last change (ms since epoch). For a finished operation, when it finished: nothing
    /// changes a finished row's state again, and the retention stages do not move this time.
    pub updated_ms: i64,
    /// When the retention's details stage dropped this operation's request, response and
    /// evidence details ([`PurgeStage::Details`]); `None` while they are kept.
    ///
    /// [`PurgeStage::Details`]: super::PurgeStage::Details
    pub details_removed_ms: Option<i64>,
    /// When evidence contradicting this operation's final state was first recorded
    /// ([`CallbackEffect::Contradiction`]: a success after `REJECTED`, a failure after
    /// `SUCCEEDED`, another vendor reference), while no person has acknowledged it
    /// ([`ListingLedger::acknowledge_contradiction`]); `None` otherwise. Such operations are listed by
    /// [`OperationQuery::contradicted`].
    ///
    /// [`CallbackEffect::Contradiction`]: super::CallbackEffect::Contradiction
    /// [`ListingLedger::acknowledge_contradiction`]: super::ListingLedger::acknowledge_contradiction
    /// [`OperationQuery::contradicted`]: super::OperationQuery::contradicted
    pub contradiction_ms: Option<i64>,
}

/// What [`Ledger::create_or_get`] found.
///
/// [`Ledger::create_or_get`]: super::Ledger::create_or_get
#[derive(Clone, Debug, PartialEq)]
pub enum Created {
    /// A new row was inserted.
    New(OperationRecord),
    /// An operation with this id, or for this `(tenant, action, intent_ref)`, already existed.
    /// The caller compares payload hashes.
    Existing(OperationRecord),
}

impl Created {
    /// The row, new or existing.
    pub fn record(&self) -> &OperationRecord {
        match self {
            Created::New(r) | Created::Existing(r) => r,
        }
    }

    /// The row, new or existing.
    pub fn into_record(self) -> OperationRecord {
        match self {
            Created::New(r) | Created::Existing(r) => r,
        }
    }
}

/// What [`Ledger::record_unread`] did.
///
/// [`Ledger::record_unread`]: super::Ledger::record_unread
#[derive(Clone, Debug, PartialEq)]
// Unboxed: the row is moved out at once; boxing it would cost the backends that read it back
// an allocation per result.
#[allow(clippy::large_enum_variant)]
pub enum Recorded {
    /// The update applied; the row as the store now holds it.
    Row(OperationRecord),
    /// The update applied: the store now holds the row the update was computed from with the
    /// update's changes written in ([`OperationRecord::set_changes`]). Not read back.
    Applied,
    /// The precondition failed; nothing changed.
    Stale,
}

/// What becomes of a result handed to [`Ledger::record_detached`]: called once with what
/// [`Ledger::record_unread`] would have returned, after the store's transaction ended, on a
/// thread of the store's. Keep it short and non-blocking; spawn a task for anything that waits.
///
/// [`Ledger::record_detached`]: super::Ledger::record_detached
/// [`Ledger::record_unread`]: super::Ledger::record_unread
pub type Settled = Box<dyn FnOnce(Result<Recorded, LedgerError>) + Send>;

/// An evidence log entry as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct EvidenceEntry {
    /// Position in the log of this operation (increasing).
    pub seq: i64,
    /// The entry.
    pub entry: NewEvidence,
}

/// A row the store could not decode, set aside by a claim or a sweep (see
/// [`Ledger::quarantined`]).
///
/// [`Ledger::quarantined`]: super::Ledger::quarantined
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuarantinedRow {
    /// The row's tenant, as stored.
    pub tenant: Tenant,
    /// The row's operation id, as stored.
    pub operation_id: OperationId,
    /// The decode error (which column, and what is wrong with it).
    pub error: String,
    /// When the row was quarantined (ms since epoch, on the ledger's clock).
    pub at_ms: i64,
}

impl NewOperation {
    /// The row a backend stores for this operation: `PREPARED`, generation 0, version 0, no
    /// attempt, no lease, created and updated at `now_ms`.
    pub fn into_prepared(self) -> OperationRecord {
        OperationRecord {
            tenant: self.tenant,
            operation_id: self.operation_id,
            action: self.action,
            intent_ref: self.intent_ref,
            idempotency_key: self.idempotency_key,
            payload_hash: self.payload_hash,
            request: self.request,
            contract: self.contract,
            policy: self.policy,
            state: State::Prepared,
            last_result: None,
            generation: Generation(0),
            version: 0,
            attempts_used: 0,
            queries_used: 0,
            may_have_applied: false,
            current_attempt: None,
            lease_until_ms: None,
            next_check_ms: None,
            deadline_ms: None,
            remote_ref: None,
            reason: None,
            response: None,
            created_ms: self.now_ms,
            updated_ms: self.now_ms,
            details_removed_ms: None,
            contradiction_ms: None,
        }
    }
}

impl NewOperation {
    /// The state-machine view of the row this operation will be once stored (`PREPARED`,
    /// nothing used yet).
    pub(crate) fn snapshot(&self) -> crate::state::Snapshot<'_> {
        crate::state::Snapshot {
            state: State::Prepared,
            may_have_applied: false,
            attempts_used: 0,
            queries_used: 0,
            deadline_ms: None,
            policy: &self.policy,
        }
    }
}

impl OperationRecord {
    /// The state-machine view of this row.
    pub(crate) fn snapshot(&self) -> crate::state::Snapshot<'_> {
        crate::state::Snapshot {
            state: self.state,
            may_have_applied: self.may_have_applied,
            attempts_used: self.attempts_used,
            queries_used: self.queries_used,
            deadline_ms: self.deadline_ms,
            policy: &self.policy,
        }
    }
}
