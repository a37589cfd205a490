//! The [`Ledger`], [`ListingLedger`], [`CallbackLedger`] and [`RetentionLedger`]
//! implementations of [`SqliteLedger`].

use super::conn::{Args, Conn};
use super::sql::{
    ACKNOWLEDGE_CONTRADICTION, APPEND_EVIDENCE, APPLY, Append, CLAIM_DUE, CLAIM_PREPARED,
    INSERT_CALLBACK_EVENT, INSERT_CALLBACK_QUARANTINE, INSERT_CLAIMED, INSERT_EVIDENCE,
    INSERT_OPERATION, MARK_CONTRADICTION, OPERATION_EXISTS, SELECT_BY_ID,
    SELECT_BY_IDEMPOTENCY_KEY, SELECT_BY_REMOTE_REF, SELECT_CALLBACK_QUARANTINE, SELECT_EVIDENCE,
    SELECT_OTHER_TENANT_BY_ID, SELECT_OTHER_TENANT_BY_REMOTE_REF, SELECT_QUARANTINED,
    SELECT_TENANT_CALLBACK_QUARANTINE, SWEEP_EXPIRED, Statement, bind_callback_event,
    bind_prepared, bind_quarantined_callback, bind_row, compare_and_swap, evidence,
};
use super::steps::{callback_seen, key_args, log_returned, recording, values};
use super::writer::{Detached, Finish, Job, closed};
use super::{
    IN_FLIGHT_ROWS, QUARANTINED_ROWS, SQLITE, SqliteLedger, decode_activity, decode_counts,
    decode_evidence, decode_operation, decode_page, decode_quarantined,
    decode_quarantined_callback,
};
use crate::ledger::callback::{check_effect, outcome};
use crate::ledger::codec::{
    CallbackEventColumns, EvidenceColumns, QuarantinedCallbackColumns, RowColumns, UpdateColumns,
};
use crate::ledger::{
    Activity, ActivityWindow, BoxFuture, CallbackApplied, CallbackDelivery, CallbackEffect,
    CallbackLedger, CallbackPurge, CallbackQuarantined, CallbackRecorded, Created, EvidenceEntry,
    Housekeeping, IgnoredCallback, Ledger, LedgerError, ListingLedger, NewEvidence, NewOperation,
    OperationQuery, OperationRecord, Page, ProbeBy, PurgeBatch, Purged, QuarantinedCallback,
    QuarantinedRow, Recorded, Released, RetentionLedger, Settled, StateCounts, TenantScope, Update,
    WorkerHeartbeat, check_first_update, first_applied, store_entries,
};
use crate::operation::{OperationId, Tenant};
use std::sync::Arc;

impl Ledger for SqliteLedger {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            let created = EvidenceColumns::encode(store_entries::created(new.now_ms), SQLITE)?;
            let row = new.into_prepared();
            let columns = RowColumns::encode(&row, SQLITE)?;
            let insert = Statement::new(INSERT_OPERATION, |a| bind_prepared(a, columns));
            let created = evidence(INSERT_EVIDENCE, &row.tenant, &row.operation_id, created);
            // The row holds exactly what is bound: no need to read it back.
            self.insert_or_get(insert, vec![created], row).await
        })
    }

    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            check_first_update(&new, &first)?;
            let created = EvidenceColumns::encode(store_entries::created(new.now_ms), SQLITE)?;
            // The claimed row goes in directly (one INSERT, no UPDATE), then the `created`
            // entry and `first`'s entry, in that order: both only if the row was inserted.
            let (row, entry) = first_applied(new, first);
            let entry = EvidenceColumns::encode(entry, SQLITE)?;
            let columns = RowColumns::encode(&row, SQLITE)?;
            let insert = Statement::new(INSERT_CLAIMED, |a| bind_row(a, columns));
            let entries = vec![
                evidence(INSERT_EVIDENCE, &row.tenant, &row.operation_id, created),
                evidence(INSERT_EVIDENCE, &row.tenant, &row.operation_id, entry),
            ];
            self.insert_or_get(insert, entries, row).await
        })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            self.landed(tenant, id).await;
            let rows = self
                .read_rows(SELECT_BY_ID, key_args(tenant, id.as_str()))
                .await?;
            rows.first().map(decode_operation).transpose()
        })
    }

    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.apply_as(false, update))
    }

    /// A result written after the bytes left: the same compare-and-swap as
    /// [`apply`](Ledger::apply), committed at `synchronous = NORMAL` when its batch holds no
    /// claim (in WAL mode: written to the WAL, surviving the process dying, without waiting for
    /// the disk). A power cut may lose it: the row is then still `IN_FLIGHT`, and its lease
    /// turns it into a lookup, never a second send.
    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.apply_as(true, update))
    }

    /// [`record`](Ledger::record) without reading the row back: the writer thread does no
    /// decoding, and the caller writes the changes into the row it holds.
    fn record_unread(&self, update: Update) -> BoxFuture<'_, Result<Recorded, LedgerError>> {
        Box::pin(async move { self.write_as(true, recording(update)?).await })
    }

    fn detaches_results(&self) -> bool {
        self.inner.detached.is_some()
    }

    /// [`record_unread`](Ledger::record_unread) queued for the writer thread without waiting:
    /// the same statements, in the same kind of batch, run in the order writes were queued.
    /// A read of the operation waits for its results queued before it.
    fn record_detached(
        &self,
        update: Update,
        late: NewEvidence,
        settled: Settled,
    ) -> Result<(), LedgerError> {
        let Some(landing) = &self.inner.detached else {
            return Err(LedgerError::Config(
                "this SQLite ledger was opened with detached_results(false)".to_owned(),
            ));
        };
        if self.is_closed() {
            return Err(closed());
        }
        let (tenant, id) = (update.tenant.clone(), update.operation_id.clone());
        let (tenant_key, id_key) = (tenant.clone(), id.clone());
        let record = recording(update)?;
        // `late` is encoded on the writer thread, and only if it is needed (rarely).
        let op = move |conn: &mut Conn| match record(conn)? {
            // Nothing changed but the log.
            Finish::Unchanged(Recorded::Stale) => {
                // Appended only if the row still exists (it may have been purged meanwhile):
                // a late observation of a gone operation changes nothing.
                let columns = EvidenceColumns::encode(late.clone(), SQLITE)?;
                Append::new(&tenant, &id, columns).execute(conn)?;
                Ok(Finish::Commit(Recorded::Stale))
            }
            done => Ok(done),
        };
        // Numbered as it is queued: a read of this operation that starts once this returns
        // waits for it. If the writer thread is gone, the write comes back and is dropped
        // unanswered, which lands it and hands `settled` the writer's error: once queued,
        // every outcome goes there.
        let unsent = landing.queue((tenant_key, id_key), |lands| {
            let write = Box::new(Detached::new(op, settled, lands));
            self.inner.queue.send(Job::Write(write)).err()
        });
        // Dropped here, once the numbering's lock is released (landing takes it again).
        drop(unsent);
        Ok(())
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
            let mut a = Args::with_capacity(3);
            a.push(now_ms)
                .push(now_ms.saturating_add(lease_ms))
                .push(i64::from(limit));
            let args = a.0;
            self.write(move |conn| {
                let rows = conn.rows(CLAIM_DUE, &args)?;
                // RETURNING gives no order guarantee: restore the claim order.
                let claimed = log_returned(
                    conn,
                    &rows,
                    now_ms,
                    "claim_due",
                    |rowid, r| (r.next_check_ms, rowid),
                    store_entries::recovery_claimed,
                )?;
                Ok(Finish::Commit(claimed))
            })
            .await
        })
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let mut a = Args::with_capacity(2);
            a.push(now_ms).push(store_entries::LEASE_EXPIRED_REASON);
            let args = a.0;
            self.write(move |conn| {
                let rows = conn.rows(SWEEP_EXPIRED, &args)?;
                // In creation order, as the memory ledger does.
                let swept = log_returned(
                    conn,
                    &rows,
                    now_ms,
                    "sweep_expired",
                    |rowid, _| (None, rowid),
                    store_entries::lease_expired,
                )?;
                Ok(Finish::Commit(swept))
            })
            .await
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
            let mut a = Args::with_capacity(4);
            a.push(now_ms)
                .push(now_ms.saturating_add(lease_ms))
                .push(now_ms.saturating_sub(older_than_ms))
                .push(i64::from(limit));
            let args = a.0;
            self.write(move |conn| {
                let rows = conn.rows(CLAIM_PREPARED, &args)?;
                // Oldest first, as claimed.
                let claimed = log_returned(
                    conn,
                    &rows,
                    now_ms,
                    "claim_prepared",
                    |rowid, r| (Some(r.created_ms), rowid),
                    store_entries::recovery_claimed,
                )?;
                Ok(Finish::Commit(claimed))
            })
            .await
        })
    }

    fn quarantined(&self, limit: u32) -> BoxFuture<'_, Result<Vec<QuarantinedRow>, LedgerError>> {
        Box::pin(async move {
            let rows = self
                .read_rows(SELECT_QUARANTINED, vec![i64::from(limit).into()])
                .await?;
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

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move {
            let entry = EvidenceColumns::encode(entry, SQLITE)?;
            let append = Append::new(tenant, id, entry);
            self.write(move |conn| {
                append.execute(conn)?;
                Ok(Finish::Commit(()))
            })
            .await
        })
    }

    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>> {
        Box::pin(async move {
            self.landed(tenant, id).await;
            let rows = self
                .read_rows(SELECT_EVIDENCE, key_args(tenant, id.as_str()))
                .await?;
            rows.iter().map(|row| decode_evidence(row, id)).collect()
        })
    }

    fn housekeeping(self: Arc<Self>) -> Housekeeping {
        Housekeeping::default()
            .listing(self.clone())
            .retention(self)
    }
}

/// The evidence log read through its partial index of state changes by time (without the
/// hint, SQLite could pick a tenant's whole log through `rw_evidence_by_operation`).
pub(super) const STATE_CHANGES: &str = "rw_evidence INDEXED BY rw_evidence_state_changes";

impl ListingLedger for SqliteLedger {
    fn activity<'a>(
        &'a self,
        scope: &'a TenantScope,
        window: ActivityWindow,
    ) -> BoxFuture<'a, Result<Activity, LedgerError>> {
        Box::pin(async move {
            let sql = crate::ledger::activity::activity_sql(
                scope,
                window,
                "rw_operations",
                STATE_CHANGES,
                '?',
            )?;
            let (text, args) = (sql.text, values(sql.args));
            let rows = self
                .read(move |conn| conn.rows_dynamic(&text, &args))
                .await?;
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
            // Quarantined rows and the requests in flight are few: read them through their
            // partial indexes, never through a tenant's or a state's whole range.
            let table = if query.is_quarantined_only() {
                QUARANTINED_ROWS
            } else if query.is_in_flight_only() {
                IN_FLIGHT_ROWS
            } else {
                "rw_operations"
            };
            let sql = crate::ledger::query::list_sql(query, table, "rowid", '?')?;
            let (text, args) = (sql.text, values(sql.args));
            let rows = self
                .read(move |conn| conn.rows_dynamic(&text, &args))
                .await?;
            decode_page(&rows, query.page_size())
        })
    }

    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>> {
        Box::pin(async move {
            let sql = crate::ledger::query::count_sql(
                scope,
                "rw_operations",
                IN_FLIGHT_ROWS,
                QUARANTINED_ROWS,
                '?',
            )?;
            let (text, args) = (sql.text, values(sql.args));
            let rows = self
                .read(move |conn| conn.rows_dynamic(&text, &args))
                .await?;
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
            let version = i64::try_from(expected_version).map_err(|_| {
                LedgerError::Config(format!("version {expected_version} out of range"))
            })?;
            let clear = Statement::new(ACKNOWLEDGE_CONTRADICTION, |a| {
                a.push(tenant.as_str()).push(id.as_str()).push(version);
            });
            let entry = evidence(
                APPEND_EVIDENCE,
                tenant,
                id,
                EvidenceColumns::encode(entry, SQLITE)?,
            );
            self.write(move |conn| {
                let Some(row) = clear.rows(conn)?.into_iter().next() else {
                    return Ok(Finish::Unchanged(None));
                };
                entry.execute(conn)?;
                Ok(Finish::Commit(Some(decode_operation(&row)?)))
            })
            .await
        })
    }

    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.find_one(SELECT_BY_REMOTE_REF, tenant, remote_ref))
    }

    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.find_one(SELECT_BY_IDEMPOTENCY_KEY, tenant, key))
    }
}

impl CallbackLedger for SqliteLedger {
    fn apply_callback(
        &self,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> BoxFuture<'_, Result<CallbackApplied, LedgerError>> {
        Box::pin(async move {
            check_effect(&delivery, &effect)?;
            let record = CallbackEventColumns::delivery(&delivery, outcome(&effect), SQLITE);
            let seen = callback_seen(&delivery.vendor, &delivery.event_id);
            let record = Statement::new(INSERT_CALLBACK_EVENT, |a| bind_callback_event(a, record));
            let exists = Statement {
                sql: OPERATION_EXISTS,
                args: key_args(&delivery.tenant, delivery.operation_id.as_str()),
            };
            enum Change {
                Apply(Statement, Statement),
                Append(Append),
                Contradiction(Append, Statement),
            }
            let change = match effect {
                CallbackEffect::Apply(update) => {
                    let (apply, entry) =
                        compare_and_swap(APPLY, UpdateColumns::encode(update, SQLITE)?);
                    Change::Apply(apply, entry)
                }
                CallbackEffect::Append(entry) => {
                    let entry = EvidenceColumns::encode(entry, SQLITE)?;
                    Change::Append(Append::new(&delivery.tenant, &delivery.operation_id, entry))
                }
                CallbackEffect::Contradiction(entry) => {
                    let at = entry.at_ms;
                    let entry = EvidenceColumns::encode(entry, SQLITE)?;
                    let mark = Statement::new(MARK_CONTRADICTION, |a| {
                        a.push(delivery.tenant.as_str())
                            .push(delivery.operation_id.as_str())
                            .push(at);
                    });
                    Change::Contradiction(
                        Append::new(&delivery.tenant, &delivery.operation_id, entry),
                        mark,
                    )
                }
            };
            self.write(move |conn| {
                // The writer runs one transaction at a time (`BEGIN IMMEDIATE`): the check, the
                // change and the record below are atomic together.
                if seen.exists(conn)? {
                    return Ok(Finish::Unchanged(CallbackApplied::Duplicate));
                }
                let applied = match &change {
                    Change::Apply(apply, entry) => match apply.rows(conn)?.first() {
                        Some(row) => {
                            entry.execute(conn)?;
                            CallbackApplied::Applied(decode_operation(row)?)
                        }
                        None => {
                            return Ok(Finish::Unchanged(if exists.exists(conn)? {
                                CallbackApplied::Stale
                            } else {
                                CallbackApplied::NoOperation
                            }));
                        }
                    },
                    Change::Append(append) => {
                        if append.execute(conn)? == 0 {
                            return Ok(Finish::Unchanged(CallbackApplied::NoOperation));
                        }
                        CallbackApplied::Appended
                    }
                    Change::Contradiction(append, mark) => {
                        if append.execute(conn)? == 0 {
                            return Ok(Finish::Unchanged(CallbackApplied::NoOperation));
                        }
                        mark.execute(conn)?;
                        CallbackApplied::Appended
                    }
                };
                record.execute(conn)?;
                Ok(Finish::Commit(applied))
            })
            .await
        })
    }

    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        Box::pin(async move {
            let seen = callback_seen(&event.vendor, &event.event_id);
            let record = CallbackEventColumns::quarantined(&event, SQLITE);
            let record = Statement::new(INSERT_CALLBACK_EVENT, |a| bind_callback_event(a, record));
            let columns = QuarantinedCallbackColumns::encode(event, SQLITE)?;
            let store = Statement::new(INSERT_CALLBACK_QUARANTINE, |a| {
                bind_quarantined_callback(a, columns)
            });
            self.write(move |conn| {
                if seen.exists(conn)? {
                    return Ok(Finish::Unchanged(CallbackQuarantined::Duplicate));
                }
                record.execute(conn)?;
                store.execute(conn)?;
                Ok(Finish::Commit(CallbackQuarantined::Stored))
            })
            .await
        })
    }

    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>> {
        Box::pin(async move {
            let rows = match scope {
                TenantScope::AllTenants => {
                    self.read_rows(SELECT_CALLBACK_QUARANTINE, vec![i64::from(limit).into()])
                        .await?
                }
                TenantScope::Tenant(t) => {
                    let args = vec![t.as_str().to_owned().into(), i64::from(limit).into()];
                    self.read_rows(SELECT_TENANT_CALLBACK_QUARANTINE, args)
                        .await?
                }
            };
            rows.iter().map(decode_quarantined_callback).collect()
        })
    }

    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        Box::pin(async move {
            let seen = callback_seen(vendor, event_id);
            self.read(move |conn| seen.exists(conn)).await
        })
    }

    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>> {
        Box::pin(async move {
            let seen = callback_seen(&event.vendor, &event.event_id);
            let record = CallbackEventColumns::ignored(&event, SQLITE);
            let record = Statement::new(INSERT_CALLBACK_EVENT, |a| bind_callback_event(a, record));
            self.write(move |conn| {
                if seen.exists(conn)? {
                    return Ok(Finish::Unchanged(CallbackRecorded::Duplicate));
                }
                record.execute(conn)?;
                Ok(Finish::Commit(CallbackRecorded::Recorded))
            })
            .await
        })
    }

    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        Box::pin(async move {
            let sql = match by {
                ProbeBy::OperationId => SELECT_OTHER_TENANT_BY_ID,
                ProbeBy::RemoteRef => SELECT_OTHER_TENANT_BY_REMOTE_REF,
            };
            let args = vec![value.to_owned().into(), tenant.as_str().to_owned().into()];
            let rows = self.read_rows(sql, args).await?;
            rows.first()
                .map(|row| {
                    row.try_get::<String>("tenant")
                        .map(Tenant::new)
                        .map_err(|e| LedgerError::Corrupt {
                            operation: value.to_owned(),
                            detail: format!("column tenant: {e}"),
                        })
                })
                .transpose()
        })
    }
}

impl RetentionLedger for SqliteLedger {
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
