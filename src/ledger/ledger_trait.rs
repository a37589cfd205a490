//! The [`Ledger`] trait: the write path and recovery (create, compare-and-swap, record, claim,
//! sweep, evidence, quarantine), behind one object-safe async trait.

use std::fmt;
use std::sync::Arc;

use super::{
    BoxFuture, Created, EvidenceEntry, Housekeeping, LedgerError, NewEvidence, NewOperation,
    OperationRecord, QuarantinedRow, Recorded, Released, Settled, Update, check_first_update,
    quarantine,
};
use crate::operation::{OperationId, Tenant};

/// Durable storage for operations: what the write path (the layer) and recovery (the
/// recoverer) need. Object safe: use it as `Arc<dyn Ledger>`.
///
/// The other capabilities are traits of their own that a backend implements when it can:
/// [`ListingLedger`](super::ListingLedger) (the operators' queue),
/// [`CallbackLedger`](super::CallbackLedger) (vendor callbacks) and
/// [`RetentionLedger`](super::RetentionLedger) (purges); [`FullLedger`](super::FullLedger) is all
/// of them. A missing capability is a compile error where it is needed, never an error at run
/// time.
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

    /// [`apply`](Self::apply) for a change no send depends on: what an attempt produced,
    /// written after its bytes left, and what the recovery engine's lookup found (or its
    /// deferral to a later pass). The same compare-and-swap, but the backend may answer before
    /// the change is durable.
    ///
    /// Only a claim must be durable before a byte is sent. If a recorded result is lost in a
    /// crash, the row is still `IN_FLIGHT` under its lease; the sweeper moves it to `UNKNOWN`
    /// and it is recovered as any write whose answer was lost: a lookup, or a same-key replay
    /// where the contract makes one safe (a second request, deduplicated by the vendor), or a
    /// person. No side effect twice, but not free, and a caller that was already answered finds
    /// it `UNKNOWN` meanwhile. A lost lookup finding leaves the row as it was claimed: it is
    /// looked up again once the recovery lease ends. A store that commits in order (both
    /// built-in ones) makes such a change durable with the next durable commit, so a replay
    /// the finding allowed, whose claim is durable, never rests on a lost finding.
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
    ///
    /// [`MemoryLedger`]: super::MemoryLedger
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
    ///
    /// [`SqliteLedger`]: super::SqliteLedger
    /// [`SqliteLedgerOptions::detached_results`]: super::SqliteLedgerOptions::detached_results
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
    ///
    /// [`SqliteLedger`]: super::SqliteLedger
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
    /// Quarantined rows stay visible: [`count_by_state`](super::ListingLedger::count_by_state)
    /// counts them ([`StateCounts::quarantined`](super::StateCounts::quarantined)),
    /// [`list`](super::ListingLedger::list) lists them by their raw columns
    /// ([`OperationQuery::quarantined_only`](super::OperationQuery::quarantined_only),
    /// [`Page::skipped`](super::Page::skipped)), and
    /// [`release_quarantined`](Self::release_quarantined) gives one back to recovery once a
    /// version that can read it runs (typically: the row was written by a newer version during
    /// a rolling deploy, and every worker is now upgraded).
    ///
    /// The provided implementation returns an empty list: right for a store that can only hold
    /// rows it can decode ([`MemoryLedger`]). A backend whose rows can become undecodable must
    /// quarantine them and override this, [`count_by_state`](super::ListingLedger::count_by_state),
    /// [`list`](super::ListingLedger::list) and [`release_quarantined`](Self::release_quarantined).
    ///
    /// [`MemoryLedger`]: super::MemoryLedger
    fn quarantined(&self, limit: u32) -> BoxFuture<'_, Result<Vec<QuarantinedRow>, LedgerError>> {
        let _ = limit;
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Gives a quarantined row back to recovery, if this version can decode it now, and if it
    /// is still at `expected_version` (the version the person releasing it read: a row that got
    /// evidence since is read again first, as [the fencing rule](super#the-fencing-rule) wants).
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
    ///
    /// [`QUARANTINE_RELEASED`]: super::QUARANTINE_RELEASED
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
    /// rule](super#the-fencing-rule)). Evidence for an operation that does not exist (another
    /// tenant's, or an unknown id) is not stored: nothing changes and `Ok(())` is returned;
    /// callers that must tell the two apart read the operation first.
    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>>;

    /// The evidence log of one operation, oldest first.
    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>>;

    /// The capabilities the recoverer's background housekeeping runs through: the queue
    /// gauges ([`ListingLedger`](super::ListingLedger): counts and the oldest rows) and the
    /// periodic retention purge ([`RetentionLedger`](super::RetentionLedger)). The recoverer is
    /// available over every ledger, so it asks here rather than in its type.
    ///
    /// Absent means there is nothing to count or purge through; the recoverer skips that
    /// housekeeping. The provided implementation returns [`Housekeeping::default`] (neither).
    /// A backend that implements the capability traits returns itself for each:
    ///
    /// ```ignore
    /// fn housekeeping(self: Arc<Self>) -> Housekeeping {
    ///     Housekeeping::default().listing(self.clone()).retention(self)
    /// }
    /// ```
    fn housekeeping(self: Arc<Self>) -> Housekeeping {
        Housekeeping::default()
    }
}
