//! The [`Ledger`] trait: durable storage for operations, their evidence, vendor callbacks and
//! retention, behind one object-safe async trait.

use std::fmt;

use super::{
    BoxFuture, CallbackApplied, CallbackDelivery, CallbackEffect, CallbackPurge,
    CallbackQuarantined, CallbackRecorded, Created, EvidenceEntry, IgnoredCallback, LedgerError,
    NewEvidence, NewOperation, OldestPerState, OperationQuery, OperationRecord, Page, ProbeBy,
    PurgeBatch, Purged, QuarantinedCallback, QuarantinedRow, Recorded, Released, Settled,
    StateCounts, TenantScope, Update, callback, check_first_update, quarantine, query, retention,
};
use crate::operation::{OperationId, Tenant};
use crate::state::State;

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

    /// Clears the operation's unacknowledged contradiction ([`OperationRecord::contradiction_ms`])
    /// and appends `entry` (the person's audit note), advancing the version, in one transaction,
    /// if the row is still at `expected_version`: an acknowledgement names the view it was made
    /// on, so one made before another contradiction arrived is refused ([the fencing
    /// rule](super#the-fencing-rule)). Nothing else changes. `Ok(None)`: the row moved (or does
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
    ///
    /// [`OPEN_STATES`]: super::OPEN_STATES
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
    ///
    /// [`WATCHED_STATES`]: super::WATCHED_STATES
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
    ///
    /// [`PurgeStage`]: super::PurgeStage
    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        let _ = batch;
        Box::pin(async { Err(retention::retention_unsupported()) })
    }

    /// Deletes one bounded batch of callback records ([`CallbackRecords`]): dedupe records of
    /// vendor events, or quarantined events, oldest first.
    ///
    /// The provided implementation returns [`LedgerError::Config`], as
    /// [`finished_contracts`](Self::finished_contracts).
    ///
    /// [`CallbackRecords`]: super::CallbackRecords
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
