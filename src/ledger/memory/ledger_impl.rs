//! The [`Ledger`], [`ListingLedger`], [`CallbackLedger`] and [`RetentionLedger`]
//! implementations of [`MemoryLedger`].

use std::sync::Arc;

use super::MemoryLedger;
use super::tables::{Delivery, apply_to};
use crate::ledger::callback::{IGNORED, QUARANTINED, check_effect, outcome};
use crate::ledger::{
    Activity, ActivityWindow, BoxFuture, CallbackApplied, CallbackDelivery, CallbackEffect,
    CallbackLedger, CallbackPurge, CallbackQuarantined, CallbackRecorded, Created, EvidenceEntry,
    Housekeeping, IgnoredCallback, Ledger, LedgerError, ListingLedger, NewEvidence, NewOperation,
    OperationQuery, OperationRecord, Page, ProbeBy, PurgeBatch, Purged, QuarantinedCallback,
    Recorded, RetentionLedger, StateCounts, TenantScope, Update, WorkerHeartbeat,
};
use crate::operation::{OperationId, Tenant};

impl Ledger for MemoryLedger {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move { self.create_or_get_now(new) })
    }

    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move { self.create_and_apply_now(new, first) })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.operations.get(tenant, id).map(|row| row.record.clone()))
        })
    }

    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move { self.apply_now(update) })
    }

    fn record_unread(&self, update: Update) -> BoxFuture<'_, Result<Recorded, LedgerError>> {
        Box::pin(async move { self.record_unread_now(update) })
    }

    fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move { self.claim_due_now(now_ms, lease_ms, limit) })
    }

    fn claim_prepared(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move { self.claim_prepared_now(now_ms, older_than_ms, lease_ms, limit) })
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move { self.sweep_expired_now(now_ms) })
    }

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move { self.append_evidence_now(tenant, id, entry) })
    }

    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.operations
                .get(tenant, id)
                .map(|row| row.evidence.to_vec())
                .unwrap_or_default())
        })
    }

    // `quarantined`: the provided empty list. Rows here are typed values, never undecodable.

    fn housekeeping(self: Arc<Self>) -> Housekeeping {
        Housekeeping::default()
            .listing(self.clone())
            .retention(self)
    }
}

impl ListingLedger for MemoryLedger {
    fn activity<'a>(
        &'a self,
        scope: &'a TenantScope,
        window: ActivityWindow,
    ) -> BoxFuture<'a, Result<Activity, LedgerError>> {
        Box::pin(async move { self.activity_now(scope, window) })
    }

    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>> {
        Box::pin(async move { self.list_now(query) })
    }

    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>> {
        Box::pin(async move { self.count_now(scope) })
    }

    fn record_heartbeat(&self, beat: WorkerHeartbeat) -> BoxFuture<'_, Result<(), LedgerError>> {
        Box::pin(async move { self.record_heartbeat_now(beat) })
    }

    fn heartbeats(&self) -> BoxFuture<'_, Result<Vec<WorkerHeartbeat>, LedgerError>> {
        Box::pin(async move { self.heartbeats_now() })
    }

    fn count_overdue<'a>(
        &'a self,
        scope: &'a TenantScope,
        checked_before_ms: i64,
    ) -> BoxFuture<'a, Result<u64, LedgerError>> {
        Box::pin(async move { self.count_overdue_now(scope, checked_before_ms) })
    }

    fn acknowledge_contradiction<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let mut guard = self.tables()?;
            let t = &mut *guard;
            let Some(row) = t.operations.get_mut(tenant, id) else {
                return Ok(None);
            };
            if row.record.version != expected_version || row.record.contradiction_ms.is_none() {
                return Ok(None);
            }
            row.append(&mut t.next_seq, entry);
            row.record.contradiction_ms = None;
            Ok(Some(row.record.clone()))
        })
    }

    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.oldest_where(tenant, |r| r.remote_ref.as_deref() == Some(remote_ref)))
        })
    }

    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.oldest_where(tenant, |r| r.idempotency_key.as_str() == key))
        })
    }
}

impl CallbackLedger for MemoryLedger {
    fn apply_callback(
        &self,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> BoxFuture<'_, Result<CallbackApplied, LedgerError>> {
        Box::pin(async move {
            check_effect(&delivery, &effect)?;
            let mut guard = self.tables()?;
            let t = &mut *guard;
            let key = (delivery.vendor.clone(), delivery.event_id.clone());
            if t.callback_events.contains_key(&key) {
                return Ok(CallbackApplied::Duplicate);
            }
            let done = outcome(&effect);
            // Under the one lock: the record and the change happen together or not at all.
            let Some(row) = t
                .operations
                .get_mut(&delivery.tenant, &delivery.operation_id)
            else {
                return Ok(CallbackApplied::NoOperation);
            };
            let applied = match effect {
                CallbackEffect::Apply(update) => match apply_to(row, update, &mut t.next_seq) {
                    Some(r) => CallbackApplied::Applied(r.clone()),
                    None => return Ok(CallbackApplied::Stale),
                },
                CallbackEffect::Append(entry) => {
                    row.append(&mut t.next_seq, entry);
                    CallbackApplied::Appended
                }
                CallbackEffect::Contradiction(entry) => {
                    let at = entry.at_ms;
                    row.append(&mut t.next_seq, entry);
                    row.record.contradiction_ms.get_or_insert(at);
                    CallbackApplied::Appended
                }
            };
            t.callback_events.insert(
                key,
                Delivery {
                    outcome: done,
                    tenant: Some(delivery.tenant.clone()),
                    received_ms: delivery.received_at_ms,
                },
            );
            Ok(applied)
        })
    }

    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        Box::pin(async move {
            let mut t = self.tables()?;
            let key = (event.vendor.clone(), event.event_id.clone());
            if t.callback_events.contains_key(&key) {
                return Ok(CallbackQuarantined::Duplicate);
            }
            t.callback_events.insert(
                key,
                Delivery {
                    outcome: QUARANTINED,
                    tenant: event.tenant.clone(),
                    received_ms: event.received_at_ms,
                },
            );
            t.callback_quarantine.push(event);
            Ok(CallbackQuarantined::Stored)
        })
    }

    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            let all = *scope == TenantScope::AllTenants;
            Ok(t.callback_quarantine
                .iter()
                .filter(|q| all || q.tenant.as_ref().is_some_and(|t| scope.contains(t)))
                .take(limit as usize)
                .cloned()
                .collect())
        })
    }

    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.callback_events
                .contains_key(&(vendor.to_owned(), event_id.to_owned())))
        })
    }

    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>> {
        Box::pin(async move {
            let mut t = self.tables()?;
            let key = (event.vendor, event.event_id);
            if t.callback_events.contains_key(&key) {
                return Ok(CallbackRecorded::Duplicate);
            }
            t.callback_events.insert(
                key,
                Delivery {
                    outcome: IGNORED,
                    tenant: event.tenant,
                    received_ms: event.received_at_ms,
                },
            );
            Ok(CallbackRecorded::Recorded)
        })
    }

    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            // A scan: the memory ledger holds tests' and examples' rows.
            Ok(t.operations
                .rows()
                .map(|row| &row.record)
                .find(|r| {
                    r.tenant != *tenant
                        && match by {
                            ProbeBy::OperationId => r.operation_id.as_str() == value,
                            ProbeBy::RemoteRef => r.remote_ref.as_deref() == Some(value),
                        }
                })
                .map(|r| r.tenant.clone()))
        })
    }
}

// `reclaim_space`: the provided 0. Freed rows leave their slots for the next rows.
impl RetentionLedger for MemoryLedger {
    fn finished_contracts(&self) -> BoxFuture<'_, Result<Vec<String>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            let names: std::collections::BTreeSet<String> = t
                .operations
                .rows()
                .filter(|row| row.record.state.is_terminal())
                .map(|row| row.record.contract.name.to_string())
                .collect();
            Ok(names.into_iter().collect())
        })
    }

    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(async move { self.purge_now(&batch) })
    }

    fn purge_callbacks(&self, batch: CallbackPurge) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(async move { self.purge_callbacks_now(&batch) })
    }
}
