//! The ledger: where operations, their budgets and their evidence live.
//!
//! [`Ledger`] is one small async trait. Every state change goes through [`Ledger::apply`], a
//! compare-and-swap the store performs in one statement: it succeeds only if the row is still in
//! the expected state, at the expected generation and version. A decision computed from a stale
//! read is refused by the store, never by a read-compare-write in Rust.
//!
//! # The fencing rule
//!
//! Every decision about an operation (a reviewer's claim or resolution, a replay's claim of
//! send rights, a callback's effect, an escalation) is made on a view of the row and names that
//! view: its `version`. The version advances at every change **and at every evidence entry
//! appended on its own** ([`Ledger::append_evidence`], the late entry of
//! [`Ledger::record_detached`], [`CallbackEffect::Append`]). So a decision made on a view older
//! than any evidence is refused as stale, whatever the evidence's source, and the decider reads
//! again. A replay also reads the evidence recorded since the decision that made the row
//! sendable and is not sent if any of it says the write may have applied
//! ([`review::says_may_have_applied`](crate::review::says_may_have_applied)).
//!
//! Backends:
//! - [`MemoryLedger`]: tests and examples.
//! - [`SqliteLedger`] (feature `sqlite`, default): the embedded durable default.
//! - `PostgresLedger` (feature `postgres`): many workers on many machines, and the outbox.
//!
//! Every backend runs the same conformance suite ([`conformance`], feature `test-util`).
//!
//! Applications read operations and evidence here and never write rows themselves: every
//! change is computed by the [state machine](crate::state). The row-writing types a backend
//! receives (`Update`, `Changes`, `NewEvidence`) live in [`backend`], for backend implementers.
//!
//! Rows this version cannot decode are quarantined by the claim or sweep that meets them, then
//! counted, listed and released once a version that can read them runs: see
//! [`Ledger::quarantined`] and [`Ledger::release_quarantined`].
//!
//! Vendor callbacks (webhooks) are stored through [`Ledger::apply_callback`] (the dedupe
//! record, the compare-and-swap and the evidence in one transaction),
//! [`Ledger::quarantine_callback`] and the lookups [`Ledger::find_by_remote_ref`] and
//! [`Ledger::find_by_idempotency_key`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

use crate::budget::BudgetPolicy;

use crate::operation::{
    AttemptId, FrozenRequest, Generation, IdempotencyKey, OperationId, PayloadHash, Tenant,
};
use crate::state::State;

pub mod backend;
mod callback;
pub(crate) use backend::{NewEvidence, Update};
pub(crate) use backend::{check_first_update, first_applied, store_entries};
pub use callback::{
    CallbackApplied, CallbackDelivery, CallbackEffect, CallbackQuarantined, CallbackRecorded,
    IgnoredCallback, ProbeBy, QuarantinedCallback,
};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod codec;
mod forward;
mod headers;
pub use headers::{StoredHeaders, StoredHeadersIter};
mod memory;
pub use memory::MemoryLedger;
mod quarantine;
mod query;
mod retention;
pub(crate) use quarantine::split_column as split_decode_error;
pub use quarantine::{QUARANTINE_RELEASED, RawColumns, Released};
pub use query::{
    Cursor, DEFAULT_LIMIT, MAX_LIMIT, OPEN_STATES, OldestPerState, OldestRow, OperationQuery,
    Order, Page, SkippedRow, StateCounts, TenantScope, TextMatch, WATCHED_STATES,
};
pub use retention::{
    CallbackPurge, CallbackRecords, CallbackScope, PurgeBatch, PurgeScope, PurgeStage, Purged,
};

#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteLedger, SqliteLedgerOptions, Synchronous};

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
pub use postgres::{ClockSource, PostgresLedger, PostgresLedgerOptions};

#[cfg(feature = "test-util")]
pub mod conformance;

/// A boxed, `Send` future, as returned by [`Ledger`] methods (the trait stays object safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub use crate::contract::ContractRef;

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
#[derive(Clone, Debug, PartialEq)]
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
    /// compare-and-swap token every decision names (see [the fencing rule](self#the-fencing-rule)).
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
    pub details_removed_ms: Option<i64>,
    /// When evidence contradicting this operation's final state was first recorded
    /// ([`CallbackEffect::Contradiction`]: a success after `REJECTED`, a failure after
    /// `SUCCEEDED`, another vendor reference), while no person has acknowledged it
    /// ([`Ledger::acknowledge_contradiction`]); `None` otherwise. Such operations are listed by
    /// [`OperationQuery::contradicted`].
    pub contradiction_ms: Option<i64>,
}

/// What [`Ledger::create_or_get`] found.
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

/// Why a ledger call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The store could not be reached or the statement failed. Nothing was changed.
    #[error("ledger unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A stored row could not be decoded.
    #[error("corrupt ledger row for {operation}: {detail}")]
    Corrupt {
        /// The row's operation id.
        operation: String,
        /// What is wrong.
        detail: String,
    },
    /// Bad configuration (table name, path, options).
    #[error("invalid ledger configuration: {0}")]
    Config(String),
}

/// Durable storage for operations. Object safe: use it as `Arc<dyn Ledger>`.
///
/// All times are milliseconds since the Unix epoch supplied by the caller; a backend with a
/// shared clock (PostgreSQL) may use its own clock instead, and documents it.
pub trait Ledger: Send + Sync + fmt::Debug + 'static {
    /// Inserts a `PREPARED` operation, or returns the existing one with the same
    /// `(tenant, operation_id)` or the same `(tenant, action, intent_ref)`. Atomic: two concurrent
    /// calls for one intent yield one row.
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>>;

    /// Inserts a `PREPARED` operation and applies `first` to it in one atomic step; or, when the
    /// operation already exists (the same `(tenant, operation_id)` or the same
    /// `(tenant, action, intent_ref)`), returns it untouched as [`Created::Existing`] without
    /// applying `first`.
    ///
    /// `first` names the new operation and expects the fresh row (`PREPARED`, generation 0,
    /// version 0); build it with [`NewOperation::first_update_on`]. The layer claims a write's
    /// first send this way: one ledger round trip (one transaction, one fsync) instead of two.
    /// [`Created::New`] holds the row after `first`; the evidence log holds the `created` entry,
    /// then `first`'s entry.
    ///
    /// The provided implementation calls [`create_or_get`](Self::create_or_get), then
    /// [`apply`](Self::apply): the same result, in two steps. If another caller moves the row
    /// between the two, the row as it then is comes back as [`Created::Existing`]. The bundled
    /// backends do both in one transaction.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] if `first` names another operation or does not expect a fresh
    /// row; nothing is written then. Otherwise as [`create_or_get`](Self::create_or_get) and
    /// [`apply`](Self::apply).
    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            check_first_update(&new, &first)?;
            let (tenant, id) = (new.tenant.clone(), new.operation_id.clone());
            match self.create_or_get(new).await? {
                Created::New(_) => match self.apply(first).await? {
                    Some(row) => Ok(Created::New(row)),
                    None => match self.get(&tenant, &id).await? {
                        Some(row) => Ok(Created::Existing(row)),
                        None => Err(LedgerError::Corrupt {
                            operation: id.to_string(),
                            detail: "operation vanished right after it was created".into(),
                        }),
                    },
                },
                existing => Ok(existing),
            }
        })
    }

    /// Reads one operation.
    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>>;

    /// Applies a conditional update and appends its evidence, atomically. `Ok(None)`: the
    /// precondition failed and nothing changed.
    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>>;

    /// [`apply`](Self::apply) for what an attempt produced, written after its bytes left: the
    /// same compare-and-swap, but the backend may answer before the change is durable.
    ///
    /// Only the claim must be durable before a byte is sent. If a recorded result is lost in a
    /// crash, the row is still `IN_FLIGHT` under its lease; the sweeper moves it to `UNKNOWN`
    /// and it is recovered as any write whose answer was lost: a lookup, or a same-key replay
    /// where the contract makes one safe (a second request, deduplicated by the vendor), or a
    /// person. No side effect twice, but not free, and a caller that was already answered finds
    /// it `UNKNOWN` meanwhile.
    /// `PostgresLedger` commits these without waiting for the WAL flush
    /// (`synchronous_commit = off` for that transaction); `SqliteLedger` commits a batch of
    /// them without an fsync (`synchronous = NORMAL` in WAL mode); the provided implementation,
    /// and `MemoryLedger`, call [`apply`](Self::apply).
    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        self.apply(update)
    }

    /// [`record`](Self::record) for a caller that holds the row `update` was computed from
    /// (the layer, recording what an attempt produced) and can write the update's changes into
    /// it itself ([`OperationRecord::set_changes`]): the store may then skip reading its row
    /// back. The same compare-and-swap, evidence and durability as `record`.
    ///
    /// The provided implementation calls `record` and returns its row
    /// ([`Recorded::Row`]). [`MemoryLedger`] answers [`Recorded::Applied`] instead of copying
    /// its row out.
    fn record_unread(&self, update: Update) -> BoxFuture<'_, Result<Recorded, LedgerError>> {
        let written = self.record(update);
        Box::pin(async move {
            Ok(match written.await? {
                Some(row) => Recorded::Row(row),
                None => Recorded::Stale,
            })
        })
    }

    /// Whether this store takes [`record_detached`](Self::record_detached): results handed to
    /// it without waiting for the store. The provided implementation answers `false`;
    /// [`SqliteLedger`] answers `true` unless
    /// [`SqliteLedgerOptions::detached_results`] turned it off.
    fn detaches_results(&self) -> bool {
        false
    }

    /// [`record_unread`](Self::record_unread) for a caller that does not wait for the store:
    /// the update is queued and this returns at once. What `record_unread` would have
    /// answered goes to `settled` instead, once the store's transaction ended (called exactly
    /// once, on a thread of the store's: it must not block).
    ///
    /// The layer records what an attempt produced this way when the store takes it: only the
    /// claim must be durable before a byte is sent, so the caller gets the vendor's answer
    /// without waiting for its result to be written. A result that never lands (a crash, a
    /// failed batch) leaves the row `IN_FLIGHT` under its lease, then `UNKNOWN`: recovered as
    /// any lost answer (see [`record`](Self::record)).
    ///
    /// If the precondition fails (the operation was taken over meanwhile), nothing changes but
    /// the log and the version: `late` (the same observation, as a `late_evidence` entry) is
    /// appended in the same transaction, as [`append_evidence`](Self::append_evidence) does,
    /// and `settled` gets [`Recorded::Stale`].
    ///
    /// A store that implements it must keep the order: every later call about this operation
    /// on this ledger (and its clones), read or write, sees the update as applied or refused,
    /// exactly as if this call had waited. Listings and counts may lag by the time it takes
    /// to land. [`SqliteLedger`] has one writer thread that runs writes in the order they were
    /// queued, and a read of an operation waits for that operation's results queued before it.
    ///
    /// `settled` must not own a handle of this ledger: dropping the last one from the store's
    /// own thread cannot wait for what that thread has still to write.
    ///
    /// `Err` only when nothing was queued (the ledger is closed, the update cannot be
    /// encoded); `settled` is then dropped without a call. Once queued, every outcome, a
    /// failure included, goes to `settled`. The provided implementation fails with
    /// [`LedgerError::Config`]: ask [`detaches_results`](Self::detaches_results) first.
    fn record_detached(
        &self,
        update: Update,
        late: NewEvidence,
        settled: Settled,
    ) -> Result<(), LedgerError> {
        let _ = (update, late, settled);
        Err(LedgerError::Config(
            "this ledger does not record results detached (see Ledger::detaches_results)"
                .to_owned(),
        ))
    }

    /// Claims up to `limit` operations in `UNKNOWN`, `PROCESSING` or `RETRY_READY` whose next
    /// check is due and
    /// whose lease (if any) has expired: increments each one's generation and version, sets
    /// `lease_until_ms`, appends a `recovery_claimed` entry. Returns the claimed rows, earliest
    /// next check first (ties in creation order).
    ///
    /// One row that cannot be decoded does not stop recovery: it is quarantined in the same
    /// transaction (see [`quarantined`](Self::quarantined)) and the healthy rows are claimed
    /// and returned as usual.
    fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>>;

    /// Claims up to `limit` `PREPARED` operations created at least `older_than_ms` ago (on the
    /// ledger's clock) whose lease, if any, has expired: generation and version +1, lease set to
    /// now + `lease_ms`, state stays `PREPARED`, a `recovery_claimed` entry appended. Oldest first.
    ///
    /// A `PREPARED` row was never sent, so whoever holds it may make the first send: with
    /// [`apply`](Self::apply), a `PREPARED` → `IN_FLIGHT` compare-and-swap at the claimed
    /// generation. The claim fences out the creator's own first claim (which expects generation
    /// 0) and every other claimer until the lease runs out. Rows that cannot be decoded are
    /// quarantined, as in [`claim_due`](Self::claim_due).
    fn claim_prepared(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>>;

    /// Moves every `IN_FLIGHT` operation whose lease has expired to `UNKNOWN`: generation and
    /// version incremented, `may_have_applied` set, next check due now, a `lease_expired` entry
    /// appended. Returns the swept rows, in creation order.
    ///
    /// A row that cannot be decoded (garbage in a column, a value written by a newer version
    /// that this one cannot read) is swept like the others, then quarantined in the same
    /// transaction instead of failing the sweep; see [`quarantined`](Self::quarantined).
    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>>;

    /// Rows the store could not decode while claiming or sweeping, oldest quarantine first, at
    /// most `limit`, across tenants. A quarantined row is never claimed or swept again, by any
    /// version: it needs a human. Claims and sweeps skip such a row, log it with
    /// `tracing::error!` (its tenant, operation id and the decode error, never its body) and go
    /// on with the healthy rows.
    ///
    /// Quarantined rows stay visible: [`count_by_state`](Self::count_by_state) counts them
    /// ([`StateCounts::quarantined`]), [`list`](Self::list) lists them by their raw columns
    /// ([`OperationQuery::quarantined_only`], [`Page::skipped`]), and
    /// [`release_quarantined`](Self::release_quarantined) gives one back to recovery once a
    /// version that can read it runs (typically: the row was written by a newer version during
    /// a rolling deploy, and every worker is now upgraded).
    ///
    /// The provided implementation returns an empty list: right for a store that can only hold
    /// rows it can decode ([`MemoryLedger`]). A backend whose rows can become undecodable must
    /// quarantine them and override this, [`count_by_state`](Self::count_by_state),
    /// [`list`](Self::list) and [`release_quarantined`](Self::release_quarantined).
    fn quarantined(&self, limit: u32) -> BoxFuture<'_, Result<Vec<QuarantinedRow>, LedgerError>> {
        let _ = limit;
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Gives a quarantined row back to recovery, if this version can decode it now, and if it
    /// is still at `expected_version` (the version the person releasing it read: a row that got
    /// evidence since is read again first, as [the fencing rule](self#the-fencing-rule) wants).
    ///
    /// In one transaction the store reads the row and decodes it. If it decodes, its
    /// quarantine is cleared, a [`QUARANTINE_RELEASED`] entry (with `note`: who and why) is
    /// appended and its version advanced; the lease left by the claim that quarantined it
    /// (which gave the row to nobody) is dropped, unless the row is `IN_FLIGHT`. Nothing else
    /// changes: the state, generation, budget and next check are what they were, so the next
    /// claim or sweep picks the row up like any other ([`Released::Row`]). If it still cannot
    /// be decoded, it stays quarantined and nothing changes ([`Released::Undecodable`], naming
    /// the column).
    ///
    /// The provided implementation is right for a store that never quarantines (every row it
    /// holds decodes): [`Released::NotQuarantined`] for an operation it has,
    /// [`Released::NotFound`] otherwise.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Unavailable`] if the store failed (nothing changed).
    fn release_quarantined<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        note: Option<String>,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Released, LedgerError>> {
        let _ = (expected_version, note, now_ms);
        Box::pin(quarantine::nothing_to_release(self, tenant, id))
    }

    /// Appends an evidence entry (late responses, late callbacks, reviewer notes) and advances
    /// the row's version in the same transaction, changing nothing else: every decision made
    /// on the row as it was before the entry is then refused as stale ([the fencing
    /// rule](self#the-fencing-rule)). Evidence for an operation that does not exist (another
    /// tenant's, or an unknown id) is not stored: nothing changes and `Ok(())` is returned;
    /// callers that must tell the two apart read the operation first.
    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>>;

    /// Clears the operation's unacknowledged contradiction ([`OperationRecord::contradiction_ms`])
    /// and appends `entry` (the person's audit note), advancing the version, in one transaction,
    /// if the row is still at `expected_version`: an acknowledgement names the view it was made
    /// on, so one made before another contradiction arrived is refused ([the fencing
    /// rule](self#the-fencing-rule)). Nothing else changes. `Ok(None)`: the row moved (or does
    /// not exist, or carries no contradiction) and nothing changed.
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`apply_callback`](Self::apply_callback).
    fn acknowledge_contradiction<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        let _ = (tenant, id, expected_version, entry);
        Box::pin(async { Err(callback::callbacks_unsupported()) })
    }

    /// The evidence log of one operation, oldest first.
    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>>;

    /// One page of the operations matching `query`, in its order, with a keyset cursor to the
    /// next page. Only rows in the query's [`TenantScope`] ever come back. Quarantined rows are
    /// left out unless [`OperationQuery::include_quarantined`] or
    /// [`OperationQuery::quarantined_only`], and then reported by their raw columns in
    /// [`Page::skipped`] (never in [`Page::rows`], even if this version reads them now); a row
    /// that cannot be decoded is reported there too and logged, never failing the page. A
    /// read: the bundled backends never take the write path for it.
    ///
    /// The provided implementation returns [`LedgerError::Config`] ("listing not supported by
    /// this ledger"): a third-party backend keeps compiling, and overrides it to support
    /// listing. Every bundled backend implements it.
    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>> {
        let _ = query;
        Box::pin(async { Err(listing_unsupported()) })
    }

    /// The number of operations in each open state ([`OPEN_STATES`]) within `scope`, and the
    /// number of quarantined rows within `scope` ([`StateCounts::quarantined`]), counted apart
    /// and in no state's count. Terminal states are not counted (they would make every scan
    /// read the whole history).
    ///
    /// The provided implementation returns [`LedgerError::Config`], as [`list`](Self::list).
    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>> {
        let _ = scope;
        Box::pin(async { Err(listing_unsupported()) })
    }

    /// The oldest operation (by creation time) in each of `states` within `scope`
    /// ([`WATCHED_STATES`] for the gauges), quarantined rows left out.
    ///
    /// The provided implementation reads the first page of [`list`](Self::list) for each
    /// state, oldest first, one row each; so a backend without listing returns its error.
    fn oldest<'a>(
        &'a self,
        scope: &'a TenantScope,
        states: &'a [State],
    ) -> BoxFuture<'a, Result<OldestPerState, LedgerError>> {
        Box::pin(query::oldest_via_list(self, scope, states))
    }

    /// Applies one verified vendor event to the operation it was matched to, exactly once, in
    /// **one transaction**:
    ///
    /// 1. records `(delivery.vendor, delivery.event_id)` in the dedupe table, with the event
    ///    type, the operation and the received time; if it is already there (an earlier
    ///    delivery, by this or any other instance), nothing else happens:
    ///    [`CallbackApplied::Duplicate`];
    /// 2. [`CallbackEffect::Apply`]: the compare-and-swap of [`apply`](Self::apply) with its
    ///    evidence entry; if the row moved since it was read, the whole transaction is undone
    ///    (the dedupe record too) and [`CallbackApplied::Stale`] asks the caller to read the
    ///    operation again and retry. [`CallbackEffect::Append`]: the entry is appended as late
    ///    evidence, the row unchanged;
    /// 3. commits: [`CallbackApplied::Applied`] with the moved row, or
    ///    [`CallbackApplied::Appended`].
    ///
    /// So two deliveries of one event produce one state change and one evidence entry, even
    /// when several application instances receive them at the same moment: the dedupe record
    /// and the change commit together or not at all. An operation that does not exist in the
    /// delivery's tenant stores nothing ([`CallbackApplied::NoOperation`]): quarantine the event
    /// with [`quarantine_callback`](Self::quarantine_callback).
    ///
    /// The provided implementation returns [`LedgerError::Config`] ("vendor callbacks not
    /// supported by this ledger"): a third-party backend keeps compiling. Every bundled backend
    /// implements it.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] if the update names another operation than the delivery (nothing
    /// is written); [`LedgerError::Unavailable`] if the store failed (nothing is written: the
    /// vendor should redeliver).
    fn apply_callback(
        &self,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> BoxFuture<'_, Result<CallbackApplied, LedgerError>> {
        let _ = (delivery, effect);
        Box::pin(async { Err(callback::callbacks_unsupported()) })
    }

    /// Stores a verified event that matched no operation of its tenant (or one of another
    /// tenant, or named an unknown account) in the callback quarantine, and records it in the
    /// dedupe table, in one transaction: a redelivery is [`CallbackQuarantined::Duplicate`] and
    /// stores nothing twice. A quarantined event is never applied, and kept until retention
    /// removes it; list them with [`quarantined_callbacks`](Self::quarantined_callbacks).
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`apply_callback`](Self::apply_callback).
    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        let _ = event;
        Box::pin(async { Err(callback::callbacks_unsupported()) })
    }

    /// The quarantined callback events within `scope`, oldest first (in the order they were
    /// stored), at most `limit`. The limit applies after the scope: a tenant's first `limit`
    /// events, never the first `limit` of every tenant filtered down. An event whose account
    /// mapped to no tenant belongs to no tenant: only [`TenantScope::AllTenants`] lists it.
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`apply_callback`](Self::apply_callback).
    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>> {
        let _ = (scope, limit);
        Box::pin(async { Err(callback::callbacks_unsupported()) })
    }

    /// Whether the vendor event `(vendor, event_id)` is in the dedupe table already: a read
    /// through its primary key, so a delivery seen before is answered before any matching (a
    /// redelivered or replayed event costs one probe, whatever the ledger holds). Only a
    /// shortcut: [`apply_callback`](Self::apply_callback),
    /// [`quarantine_callback`](Self::quarantine_callback) and
    /// [`record_ignored_callback`](Self::record_ignored_callback) still check the dedupe table
    /// in their own transaction, which is what makes an event count once.
    ///
    /// The provided implementation answers `false` (every event then goes on to those
    /// methods, which deduplicate it).
    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        let _ = (vendor, event_id);
        Box::pin(async { Ok(false) })
    }

    /// Records a verified event of a type its mapping ignores in the dedupe table, and nothing
    /// else (no payload, no quarantine): a redelivery is [`CallbackRecorded::Duplicate`].
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`apply_callback`](Self::apply_callback).
    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>> {
        let _ = event;
        Box::pin(async { Err(callback::callbacks_unsupported()) })
    }

    /// A tenant other than `tenant` with an operation whose id (or vendor reference, as `by`
    /// says) is `value`, if any: how a callback that matched nothing in its own tenant is told
    /// apart from one that names another tenant's operation. Read through an index on that
    /// column alone (at most one row is read), never a listing: an unmatched callback costs
    /// the same on a ledger of a thousand rows as on one of a million.
    ///
    /// The provided implementation answers `None` (the event is quarantined either way, with
    /// a less precise reason).
    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        let _ = (tenant, by, value);
        Box::pin(async { Ok(None) })
    }

    /// The operation of `tenant` whose vendor reference ([`OperationRecord::remote_ref`]) is
    /// `remote_ref`, read through an index on `(tenant, remote_ref)`. Never another tenant's.
    /// If several carry it (a vendor that reuses references), the oldest.
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`apply_callback`](Self::apply_callback).
    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        let _ = (tenant, remote_ref);
        Box::pin(async { Err(callback::callbacks_unsupported()) })
    }

    /// The operation of `tenant` whose idempotency key is `key` (a key a vendor echoes back in
    /// a callback), read through an index on `(tenant, idempotency_key)`. Never another
    /// tenant's. If several carry it, the oldest.
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`apply_callback`](Self::apply_callback).
    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        let _ = (tenant, key);
        Box::pin(async { Err(callback::callbacks_unsupported()) })
    }
    /// The names of the contracts frozen on finished (`SUCCEEDED` or `REJECTED`) operations
    /// that are not quarantined, in name order: what a retention pass must visit. Read through
    /// an index (one probe per name), never a scan of the rows.
    ///
    /// The provided implementation returns [`LedgerError::Config`] ("retention not supported
    /// by this ledger"): a third-party backend keeps compiling, and its rows are kept forever.
    /// Every bundled backend implements it.
    fn finished_contracts(&self) -> BoxFuture<'_, Result<Vec<String>, LedgerError>> {
        Box::pin(async { Err(retention::retention_unsupported()) })
    }

    /// Runs one bounded batch of a retention stage ([`PurgeStage`]) over the finished
    /// operations `batch.scope` names, oldest finish first, at most `batch.limit` of them, in
    /// one transaction. Operations in any other state, and quarantined rows, are never
    /// touched, whatever their age. The details stage skips rows already slimmed; it leaves
    /// `state`, `version` and `updated_ms` as they are. The identity stage deletes the rows and
    /// their evidence together.
    ///
    /// With `batch.dry_run`, nothing changes and every matching row is counted.
    ///
    /// Returns what was dropped. A batch that returns fewer rows than its limit found no more.
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`finished_contracts`](Self::finished_contracts).
    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        let _ = batch;
        Box::pin(async { Err(retention::retention_unsupported()) })
    }

    /// Deletes one bounded batch of callback records ([`CallbackRecords`]): dedupe records of
    /// vendor events, or quarantined events, oldest first.
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`finished_contracts`](Self::finished_contracts).
    fn purge_callbacks(&self, batch: CallbackPurge) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        let _ = batch;
        Box::pin(async { Err(retention::retention_unsupported()) })
    }

    /// Gives the space freed by purges back to the file system where the store does not do
    /// it by itself, a bounded amount per call; returns the bytes given back. SQLite runs an
    /// incremental vacuum (files created by this version use `auto_vacuum = INCREMENTAL`) of
    /// the free pages beyond a quarter of the file (those are kept for the next rows).
    /// PostgreSQL's autovacuum makes the space reusable without help; on a server where it is
    /// off, `PostgresLedger` runs a plain `VACUUM` of its tables (no blocking lock).
    ///
    /// The provided implementation does nothing and returns 0.
    fn reclaim_space(&self) -> BoxFuture<'_, Result<u64, LedgerError>> {
        Box::pin(async { Ok(0) })
    }
}

/// The error of the provided [`Ledger::list`] and [`Ledger::count_by_state`].
fn listing_unsupported() -> LedgerError {
    LedgerError::Config("listing not supported by this ledger".to_owned())
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
    pub fn snapshot(&self) -> crate::state::Snapshot<'_> {
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
    pub fn snapshot(&self) -> crate::state::Snapshot<'_> {
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
