//! A shared ledger is a ledger: `Arc<L>` (and `Arc<dyn Ledger>`, `Arc<dyn FullLedger>`, …)
//! forwards every method of every capability trait `L` implements to the ledger it holds, so
//! one ledger can be handed to the builder, the test kit and the operator tools while each
//! sees the backend's own implementation of every method.

use std::sync::Arc;

use super::*;

impl<L: Ledger + ?Sized> Ledger for Arc<L> {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        (**self).create_or_get(new)
    }

    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        (**self).create_and_apply(new, first)
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        (**self).get(tenant, id)
    }

    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        (**self).apply(update)
    }

    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        (**self).record(update)
    }

    fn record_unread(&self, update: Update) -> BoxFuture<'_, Result<Recorded, LedgerError>> {
        (**self).record_unread(update)
    }

    fn detaches_results(&self) -> bool {
        (**self).detaches_results()
    }

    fn record_detached(
        &self,
        update: Update,
        late: NewEvidence,
        settled: Settled,
    ) -> Result<(), LedgerError> {
        (**self).record_detached(update, late, settled)
    }

    fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        (**self).claim_due(now_ms, lease_ms, limit)
    }

    fn claim_prepared(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        (**self).claim_prepared(now_ms, older_than_ms, lease_ms, limit)
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        (**self).sweep_expired(now_ms)
    }

    fn quarantined(&self, limit: u32) -> BoxFuture<'_, Result<Vec<QuarantinedRow>, LedgerError>> {
        (**self).quarantined(limit)
    }

    fn release_quarantined<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        note: Option<String>,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Released, LedgerError>> {
        (**self).release_quarantined(tenant, id, expected_version, note, now_ms)
    }

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        (**self).append_evidence(tenant, id, entry)
    }

    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>> {
        (**self).evidence(tenant, id)
    }

    fn housekeeping(self: Arc<Self>) -> Housekeeping {
        L::housekeeping(Arc::clone(&*self))
    }
}

impl<L: ListingLedger + ?Sized> ListingLedger for Arc<L> {
    fn activity<'a>(
        &'a self,
        scope: &'a TenantScope,
        window: ActivityWindow,
    ) -> BoxFuture<'a, Result<Activity, LedgerError>> {
        (**self).activity(scope, window)
    }

    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>> {
        (**self).list(query)
    }

    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>> {
        (**self).count_by_state(scope)
    }

    fn oldest<'a>(
        &'a self,
        scope: &'a TenantScope,
        states: &'a [State],
    ) -> BoxFuture<'a, Result<OldestPerState, LedgerError>> {
        (**self).oldest(scope, states)
    }

    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        (**self).find_by_remote_ref(tenant, remote_ref)
    }

    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        (**self).find_by_idempotency_key(tenant, key)
    }

    fn acknowledge_contradiction<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        (**self).acknowledge_contradiction(tenant, id, expected_version, entry)
    }

    fn record_heartbeat(&self, beat: WorkerHeartbeat) -> BoxFuture<'_, Result<(), LedgerError>> {
        (**self).record_heartbeat(beat)
    }

    fn heartbeats(&self) -> BoxFuture<'_, Result<Vec<WorkerHeartbeat>, LedgerError>> {
        (**self).heartbeats()
    }

    fn count_overdue<'a>(
        &'a self,
        scope: &'a TenantScope,
        checked_before_ms: i64,
    ) -> BoxFuture<'a, Result<u64, LedgerError>> {
        (**self).count_overdue(scope, checked_before_ms)
    }
}

impl<L: CallbackLedger + ?Sized> CallbackLedger for Arc<L> {
    fn apply_callback(
        &self,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> BoxFuture<'_, Result<CallbackApplied, LedgerError>> {
        (**self).apply_callback(delivery, effect)
    }

    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        (**self).quarantine_callback(event)
    }

    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>> {
        (**self).quarantined_callbacks(scope, limit)
    }

    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        (**self).callback_seen(vendor, event_id)
    }

    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>> {
        (**self).record_ignored_callback(event)
    }

    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        (**self).other_tenant_with(tenant, by, value)
    }
}

impl<L: RetentionLedger + ?Sized> RetentionLedger for Arc<L> {
    fn finished_contracts(&self) -> BoxFuture<'_, Result<Vec<String>, LedgerError>> {
        (**self).finished_contracts()
    }

    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        (**self).purge(batch)
    }

    fn purge_callbacks(&self, batch: CallbackPurge) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        (**self).purge_callbacks(batch)
    }

    fn reclaim_space(&self) -> BoxFuture<'_, Result<u64, LedgerError>> {
        (**self).reclaim_space()
    }
}
