//! [`ListingLedger`]: the operators' queue (listing, counts, the oldest rows, the lookups by
//! vendor reference and idempotency key, and the acknowledgement of contradictions).

use super::{
    Activity, ActivityWindow, BoxFuture, Ledger, LedgerError, NewEvidence, OldestPerState,
    OperationQuery, OperationRecord, Page, StateCounts, TenantScope, WorkerHeartbeat, query,
};
use crate::operation::{OperationId, Tenant};
use crate::state::State;

/// The operators' queue, over a [`Ledger`]: what the [reviews](crate::review), the purger's
/// right to erasure, the review page, the command line, the callbacks receiver's lookups and
/// the recoverer's queue gauges read. Object safe: use it as `Arc<dyn ListingLedger>`.
///
/// A backend without it still takes writes and recovers them (the layer and the recoverer
/// need only [`Ledger`]); asking it for [`Handle::reviews`](crate::Handle::reviews) does not
/// compile.
pub trait ListingLedger: Ledger {
    /// One page of the operations matching `query`, in its order, with a keyset cursor to the
    /// next page. Only rows in the query's [`TenantScope`] ever come back. Quarantined rows are
    /// left out unless [`OperationQuery::include_quarantined`] or
    /// [`OperationQuery::quarantined_only`], and then reported by their raw columns in
    /// [`Page::skipped`] (never in [`Page::rows`], even if this version reads them now); a row
    /// that cannot be decoded is reported there too and logged, never failing the page. A
    /// read: the bundled backends never take the write path for it.
    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>>;

    /// The number of operations in each open state ([`OPEN_STATES`]) within `scope`, and the
    /// number of quarantined rows within `scope` ([`StateCounts::quarantined`]), counted apart
    /// and in no state's count. Terminal states are not counted (they would make every scan
    /// read the whole history).
    ///
    /// [`OPEN_STATES`]: super::OPEN_STATES
    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>>;

    /// The oldest operation (by creation time) in each of `states` within `scope`
    /// ([`WATCHED_STATES`] for the gauges), quarantined rows left out.
    ///
    /// The provided implementation reads the first page of [`list`](Self::list) for each
    /// state, oldest first, one row each.
    ///
    /// [`WATCHED_STATES`]: super::WATCHED_STATES
    fn oldest<'a>(
        &'a self,
        scope: &'a TenantScope,
        states: &'a [State],
    ) -> BoxFuture<'a, Result<OldestPerState, LedgerError>> {
        Box::pin(query::oldest_via_list(self, scope, states))
    }

    /// The operation of `tenant` whose vendor reference ([`OperationRecord::remote_ref`]) is
    /// `remote_ref`, read through an index on `(tenant, remote_ref)`. Never another tenant's.
    /// If several carry it (a vendor that reuses references), the oldest.
    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>>;

    /// The operation of `tenant` whose idempotency key is `key` (a key a vendor echoes back in
    /// a callback), read through an index on `(tenant, idempotency_key)`. Never another
    /// tenant's. If several carry it, the oldest.
    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>>;

    /// Clears the operation's unacknowledged contradiction ([`OperationRecord::contradiction_ms`])
    /// and appends `entry` (the person's audit note), advancing the version, in one transaction,
    /// if the row is still at `expected_version`: an acknowledgement names the view it was made
    /// on, so one made before another contradiction arrived is refused ([the fencing
    /// rule](super#the-fencing-rule)). Nothing else changes. `Ok(None)`: the row moved (or does
    /// not exist, or carries no contradiction) and nothing changed.
    fn acknowledge_contradiction<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>>;

    /// What happened in `window` within `scope`, per interval: operations created, finished
    /// (`SUCCEEDED` or `REJECTED`) and escalated (entered `MANUAL_REVIEW`), and the review
    /// backlog at each interval's end, read from the ledger's own times: the evidence log's
    /// state changes. The backlog is walked back from today's (quarantined rows left out).
    ///
    /// The bundled SQL backends read the window's state changes through a partial index on
    /// the evidence time (one aggregate statement, never the whole history). Operations
    /// already purged (retention's identity stage) are no longer counted.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] for a window [`ActivityWindow::new`] refuses;
    /// [`LedgerError::Unavailable`] if the store does not answer.
    fn activity<'a>(
        &'a self,
        scope: &'a TenantScope,
        window: ActivityWindow,
    ) -> BoxFuture<'a, Result<Activity, LedgerError>>;

    /// Records `beat` as its worker's heartbeat ([`WorkerHeartbeat::worker_id`]), replacing the
    /// one it recorded before (one row per worker), and deletes the heartbeats of workers
    /// silent for more than [`DEAD_WORKER_RETENTION_MS`](super::DEAD_WORKER_RETENTION_MS)
    /// before `beat`'s own time. Cheap (an upsert on a table of one row per worker); a lost
    /// beat is harmless (the next pass writes another), so a backend may commit it without
    /// waiting for the disk.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] for an empty worker id or a text with a NUL character;
    /// [`LedgerError::Unavailable`] when the store does not answer.
    fn record_heartbeat(&self, beat: WorkerHeartbeat) -> BoxFuture<'_, Result<(), LedgerError>>;

    /// Every recorded heartbeat (at most [`MAX_WORKERS_LISTED`](super::MAX_WORKERS_LISTED)),
    /// the most recent beat first: the workers alive and the ones that stopped within the
    /// retention ([`WorkerHeartbeat::alive_at`] tells them apart). Not scoped to a tenant: a
    /// worker recovers every tenant's operations.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Unavailable`] when the store does not answer; [`LedgerError::Corrupt`]
    /// for a row that cannot be read.
    fn heartbeats(&self) -> BoxFuture<'_, Result<Vec<WorkerHeartbeat>, LedgerError>>;

    /// The number of operations within `scope` in `UNKNOWN` or `RETRY_READY` whose next check
    /// ([`OperationRecord::next_check_ms`]) is before `checked_before_ms` (the caller passes
    /// now minus its grace): work the engine should have looked at and has not. Quarantined
    /// rows are left out (recovery skips them by design; they have their own count). Read
    /// through the due-work index, so the count costs the overdue rows, not the history.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Unavailable`] when the store does not answer.
    fn count_overdue<'a>(
        &'a self,
        scope: &'a TenantScope,
        checked_before_ms: i64,
    ) -> BoxFuture<'a, Result<u64, LedgerError>>;
}
