//! The [`Ledger`], [`ListingLedger`], [`CallbackLedger`] and [`RetentionLedger`]
//! implementations of [`PostgresLedger`].

use sqlx::AssertSqlSafe;

use super::group::{ClaimJob, RecordJob};
use super::text::{check_key, check_new};
use super::writer::{claimed_row, finish};
use super::{
    BindEntry, POSTGRES, PostgresLedger, bind_args, decode_activity, decode_counts,
    decode_evidence, decode_operation, decode_page, decode_quarantined,
    decode_quarantined_callback, unavailable,
};
use crate::ledger::callback::check_effect;
use crate::ledger::codec::{EvidenceColumns, RowColumns, UpdateColumns};
use crate::ledger::{
    Activity, ActivityWindow, BoxFuture, CallbackApplied, CallbackDelivery, CallbackEffect,
    CallbackLedger, CallbackPurge, CallbackQuarantined, CallbackRecorded, Created, EvidenceEntry,
    Housekeeping, IgnoredCallback, Ledger, LedgerError, ListingLedger, NewEvidence, NewOperation,
    OperationQuery, OperationRecord, Page, ProbeBy, PurgeBatch, Purged, QuarantinedCallback,
    QuarantinedRow, Recorded, Released, RetentionLedger, StateCounts, TenantScope, Update,
    WorkerHeartbeat, check_first_update, first_applied, store_entries,
};
use crate::operation::{OperationId, Tenant};
use std::sync::Arc;

impl Ledger for PostgresLedger {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(unavailable)?;
            // Outside a transaction each statement commits on its own: the insert and its
            // `created` entry are one statement.
            self.create_in(&mut conn, new).await
        })
    }

    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            check_first_update(&new, &first)?;
            check_new(&new)?;
            let created_at = new.now_ms;
            let created = EvidenceColumns::encode(store_entries::created(created_at), POSTGRES)?;
            let (row, entry) = first_applied(new, first);
            let claimed = EvidenceColumns::encode(entry, POSTGRES)?;
            let job = ClaimJob {
                now: self.caller_now(created_at),
                created_at,
                row: RowColumns::encode(&row, POSTGRES)?,
                created,
                claimed,
            };
            // Alone, the single-row statement; under load, with the claims around it in one
            // statement and one commit (see `group`).
            let inserted = self
                .groups
                .claims
                .run(job, |job| self.claim_alone(job))
                .await?;
            match inserted {
                Some(created_ms) => Ok(Created::New(claimed_row(row, created_at, created_ms))),
                None => {
                    let mut conn = self.pool.acquire().await.map_err(unavailable)?;
                    self.existing(
                        &mut conn,
                        &row.tenant,
                        &row.operation_id,
                        &row.action,
                        &row.intent_ref,
                    )
                    .await
                }
            }
        })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            check_key(tenant, id)?;
            let row = sqlx::query(AssertSqlSafe(self.sql.select_by_id.clone()))
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
            row.as_ref().map(decode_operation).transpose()
        })
    }

    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.apply_with(&self.pool, self.sql.apply.clone(), update))
    }

    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.apply_with(&self.pool, self.sql.apply_after_send.clone(), update))
    }

    fn record_unread(&self, update: Update) -> BoxFuture<'_, Result<Recorded, LedgerError>> {
        Box::pin(async move {
            check_key(&update.tenant, &update.operation_id)?;
            let update = UpdateColumns::encode(update, POSTGRES)?;
            let job = RecordJob {
                now: self.caller_now(update.now_ms),
                update,
            };
            let applied = self
                .groups
                .records
                .run(job, |job| self.record_counted(job))
                .await?;
            Ok(if applied {
                Recorded::Applied
            } else {
                Recorded::Stale
            })
        })
    }

    fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let claimed = self.claim_in(&mut tx, now_ms, lease_ms, limit).await;
            finish(tx, claimed).await
        })
    }

    fn claim_prepared(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let claimed = self
                .claim_prepared_in(&mut tx, now_ms, older_than_ms, lease_ms, limit)
                .await;
            finish(tx, claimed).await
        })
    }

    fn quarantined(&self, limit: u32) -> BoxFuture<'_, Result<Vec<QuarantinedRow>, LedgerError>> {
        Box::pin(async move {
            let rows = sqlx::query(AssertSqlSafe(self.sql.select_quarantined.clone()))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            rows.iter().map(decode_quarantined).collect()
        })
    }

    fn release_quarantined<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        note: Option<String>,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Released, LedgerError>> {
        Box::pin(self.release_now(tenant, id, expected_version, note, now_ms))
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let swept = self.sweep_in(&mut tx, now_ms).await;
            finish(tx, swept).await
        })
    }

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move {
            check_key(tenant, id)?;
            let at_ms = self.caller_now(entry.at_ms);
            let e = EvidenceColumns::encode(entry, POSTGRES)?;
            sqlx::query(AssertSqlSafe(self.sql.append_evidence.clone()))
                .bind(at_ms)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .bind_entry(e)
                .execute(&self.pool)
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>> {
        Box::pin(async move {
            check_key(tenant, id)?;
            let rows = sqlx::query(AssertSqlSafe(self.sql.select_evidence.clone()))
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            rows.iter().map(|row| decode_evidence(row, id)).collect()
        })
    }

    fn housekeeping(self: Arc<Self>) -> Housekeeping {
        Housekeeping::default()
            .listing(self.clone())
            .retention(self)
    }
}

impl ListingLedger for PostgresLedger {
    fn activity<'a>(
        &'a self,
        scope: &'a TenantScope,
        window: ActivityWindow,
    ) -> BoxFuture<'a, Result<Activity, LedgerError>> {
        Box::pin(async move {
            let sql = crate::ledger::activity::activity_sql(
                scope,
                window,
                &self.sql.operations,
                &self.sql.evidence,
                '$',
            )?;
            let rows = bind_args(sqlx::query(sqlx::AssertSqlSafe(sql.text)), sql.args)
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            decode_activity(&rows, window)
        })
    }

    fn record_heartbeat(&self, beat: WorkerHeartbeat) -> BoxFuture<'_, Result<(), LedgerError>> {
        Box::pin(self.record_heartbeat_now(beat))
    }

    fn heartbeats(&self) -> BoxFuture<'_, Result<Vec<WorkerHeartbeat>, LedgerError>> {
        Box::pin(self.heartbeats_now())
    }

    fn count_overdue<'a>(
        &'a self,
        scope: &'a TenantScope,
        checked_before_ms: i64,
    ) -> BoxFuture<'a, Result<u64, LedgerError>> {
        Box::pin(self.count_overdue_now(scope, checked_before_ms))
    }

    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>> {
        Box::pin(async move {
            let sql = crate::ledger::query::list_sql(query, &self.sql.operations, "seq", '$')?;
            let rows = bind_args(sqlx::query(sqlx::AssertSqlSafe(sql.text)), sql.args)
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            decode_page(&rows, query.page_size())
        })
    }

    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>> {
        Box::pin(async move {
            let ops = &self.sql.operations;
            let sql = crate::ledger::query::count_sql(scope, ops, ops, ops, '$')?;
            let rows = bind_args(sqlx::query(sqlx::AssertSqlSafe(sql.text)), sql.args)
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            decode_counts(&rows)
        })
    }

    fn acknowledge_contradiction<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            check_key(tenant, id)?;
            let version = i64::try_from(expected_version).map_err(|_| {
                LedgerError::Config(format!("version {expected_version} out of range"))
            })?;
            let at_ms = self.caller_now(entry.at_ms);
            let e = EvidenceColumns::encode(entry, POSTGRES)?;
            let row = sqlx::query(AssertSqlSafe(self.sql.acknowledge_contradiction.clone()))
                .bind(at_ms)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .bind_entry(e)
                .bind(version)
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
            row.as_ref().map(decode_operation).transpose()
        })
    }

    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.find_one(self.sql.select_by_remote_ref.clone(), tenant, remote_ref))
    }

    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.find_one(self.sql.select_by_idempotency_key.clone(), tenant, key))
    }
}

impl CallbackLedger for PostgresLedger {
    fn apply_callback(
        &self,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> BoxFuture<'_, Result<CallbackApplied, LedgerError>> {
        Box::pin(async move {
            check_effect(&delivery, &effect)?;
            check_key(&delivery.tenant, &delivery.operation_id)?;
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let applied = self.apply_callback_in(&mut tx, delivery, effect).await;
            match applied {
                Ok(applied @ (CallbackApplied::Applied(_) | CallbackApplied::Appended)) => {
                    tx.commit().await.map_err(unavailable)?;
                    Ok(applied)
                }
                // Stale or no operation: the dedupe record goes with the rest.
                other => {
                    let _ = tx.rollback().await;
                    other
                }
            }
        })
    }

    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        Box::pin(async move {
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let stored = self.quarantine_callback_in(&mut tx, event).await;
            finish(tx, stored).await
        })
    }

    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>> {
        Box::pin(async move {
            let query = match scope {
                TenantScope::AllTenants => {
                    sqlx::query(AssertSqlSafe(self.sql.select_callback_quarantine.clone()))
                }
                TenantScope::Tenant(t) if t.as_str().contains('\0') => return Ok(Vec::new()),
                TenantScope::Tenant(t) => sqlx::query(AssertSqlSafe(
                    self.sql.select_tenant_callback_quarantine.clone(),
                ))
                .bind(t.as_str()),
            };
            let rows = query
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            rows.iter().map(decode_quarantined_callback).collect()
        })
    }

    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        Box::pin(async move {
            // A text with a NUL byte cannot be stored, so it was never recorded.
            if vendor.contains('\0') || event_id.contains('\0') {
                return Ok(false);
            }
            let row = sqlx::query(AssertSqlSafe(self.sql.select_callback_event.clone()))
                .bind(vendor)
                .bind(event_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
            Ok(row.is_some())
        })
    }

    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(unavailable)?;
            self.record_ignored_in(&mut conn, event).await
        })
    }

    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        Box::pin(async move {
            if tenant.as_str().contains('\0') || value.contains('\0') {
                return Ok(None);
            }
            let sql = match by {
                ProbeBy::OperationId => self.sql.other_tenant_by_id.clone(),
                ProbeBy::RemoteRef => self.sql.other_tenant_by_remote_ref.clone(),
            };
            let found: Option<String> = sqlx::query_scalar(AssertSqlSafe(sql))
                .bind(value)
                .bind(tenant.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
            Ok(found.map(Tenant::new))
        })
    }
}

impl RetentionLedger for PostgresLedger {
    fn finished_contracts(&self) -> BoxFuture<'_, Result<Vec<String>, LedgerError>> {
        Box::pin(self.finished_contracts_now())
    }

    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(self.purge_now(batch))
    }

    fn purge_callbacks(&self, batch: CallbackPurge) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(self.purge_callbacks_now(batch))
    }

    fn reclaim_space(&self) -> BoxFuture<'_, Result<u64, LedgerError>> {
        Box::pin(self.reclaim_space_now())
    }
}
