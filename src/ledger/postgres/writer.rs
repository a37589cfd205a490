//! The write path: the compare-and-swap and the claims and sweeps, each one statement or one
//! transaction on a pooled connection, with the evidence entries in the same transaction.

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{AssertSqlSafe, Row};

use super::group::{ClaimJob, RecordJob};
use super::{
    BindEntry, Columns, POSTGRES, PostgresLedger, check_key, decode_operation, pg_text, unavailable,
};
use crate::ledger::callback::outcome;
use crate::ledger::codec::{
    CallbackEventColumns, EvidenceColumns, QuarantinedCallbackColumns, UpdateColumns,
};
use crate::ledger::{
    CallbackApplied, CallbackDelivery, CallbackEffect, CallbackQuarantined, CallbackRecorded,
    IgnoredCallback, QuarantinedCallback, Tenant,
};
use crate::ledger::{LedgerError, NewEvidence, OperationRecord, Update, store_entries};
use std::sync::Arc;

impl PostgresLedger {
    /// [`CallbackLedger::apply_callback`](crate::ledger::CallbackLedger::apply_callback) on one transaction,
    /// left to the caller to commit (`Applied`, `Appended`) or roll back (anything else).
    pub(super) async fn apply_callback_in(
        &self,
        tx: &mut PgConnection,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> Result<CallbackApplied, LedgerError> {
        let record = CallbackEventColumns::delivery(&delivery, outcome(&effect), POSTGRES);
        if !self.record_callback(tx, record).await? {
            return Ok(CallbackApplied::Duplicate);
        }
        match effect {
            CallbackEffect::Apply(update) => {
                let sql = self.sql.apply.clone();
                if let Some(row) = self.apply_with(&mut *tx, sql, update).await? {
                    return Ok(CallbackApplied::Applied(row));
                }
                let exists = sqlx::query(AssertSqlSafe(self.sql.operation_exists.clone()))
                    .bind(delivery.tenant.as_str())
                    .bind(delivery.operation_id.as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(unavailable)?;
                Ok(match exists {
                    Some(_) => CallbackApplied::Stale,
                    None => CallbackApplied::NoOperation,
                })
            }
            CallbackEffect::Append(entry) => {
                let sql = self.sql.append_evidence.clone();
                self.append_in(tx, sql, &delivery, entry).await
            }
            CallbackEffect::Contradiction(entry) => {
                let sql = self.sql.append_contradiction.clone();
                self.append_in(tx, sql, &delivery, entry).await
            }
        }
    }

    /// Appends `entry` to the delivery's operation with `sql` (the plain append, or the one
    /// that also marks a contradiction), advancing its version.
    async fn append_in(
        &self,
        tx: &mut PgConnection,
        sql: Arc<str>,
        delivery: &CallbackDelivery,
        entry: NewEvidence,
    ) -> Result<CallbackApplied, LedgerError> {
        let at_ms = self.caller_now(entry.at_ms);
        let e = EvidenceColumns::encode(entry, POSTGRES)?;
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(at_ms)
            .bind(delivery.tenant.as_str())
            .bind(delivery.operation_id.as_str())
            .bind_entry(e)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        Ok(if done.rows_affected() == 0 {
            CallbackApplied::NoOperation
        } else {
            CallbackApplied::Appended
        })
    }

    /// [`CallbackLedger::record_ignored_callback`](crate::ledger::CallbackLedger::record_ignored_callback): the
    /// dedupe record alone, one statement.
    pub(super) async fn record_ignored_in(
        &self,
        tx: &mut PgConnection,
        event: IgnoredCallback,
    ) -> Result<CallbackRecorded, LedgerError> {
        let record = CallbackEventColumns::ignored(&event, POSTGRES);
        Ok(if self.record_callback(tx, record).await? {
            CallbackRecorded::Recorded
        } else {
            CallbackRecorded::Duplicate
        })
    }

    /// [`CallbackLedger::quarantine_callback`](crate::ledger::CallbackLedger::quarantine_callback) on one
    /// transaction.
    pub(super) async fn quarantine_callback_in(
        &self,
        tx: &mut PgConnection,
        event: QuarantinedCallback,
    ) -> Result<CallbackQuarantined, LedgerError> {
        let record = CallbackEventColumns::quarantined(&event, POSTGRES);
        if !self.record_callback(tx, record).await? {
            return Ok(CallbackQuarantined::Duplicate);
        }
        let q = QuarantinedCallbackColumns::encode(event, POSTGRES)?;
        sqlx::query(AssertSqlSafe(self.sql.insert_callback_quarantine.clone()))
            .bind(q.vendor)
            .bind(q.event_id)
            .bind(q.event_type)
            .bind(q.tenant)
            .bind(q.match_by)
            .bind(q.match_value)
            .bind(q.reason)
            .bind(q.evidence)
            .bind(q.received_ms)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        Ok(CallbackQuarantined::Stored)
    }

    /// Inserts a dedupe record; `false` if the event was recorded before (by a transaction
    /// that committed: a concurrent one is waited for).
    async fn record_callback(
        &self,
        tx: &mut PgConnection,
        e: CallbackEventColumns,
    ) -> Result<bool, LedgerError> {
        let inserted = sqlx::query(AssertSqlSafe(self.sql.insert_callback_event.clone()))
            .bind(e.vendor)
            .bind(e.event_id)
            .bind(e.event_type)
            .bind(e.tenant)
            .bind(e.operation_id)
            .bind(e.outcome)
            .bind(e.received_ms)
            .fetch_optional(&mut *tx)
            .await
            .map_err(unavailable)?;
        Ok(inserted.is_some())
    }

    /// The one row `sql` (a lookup by tenant `$1` and a value `$2`) finds. A value with a NUL
    /// byte cannot be stored, so it finds nothing.
    pub(super) async fn find_one(
        &self,
        sql: Arc<str>,
        tenant: &Tenant,
        value: &str,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        if tenant.as_str().contains('\0') || value.contains('\0') {
            return Ok(None);
        }
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(value)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        row.as_ref().map(decode_operation).transpose()
    }

    /// The compare-and-swap of `apply`, with `sql`: the plain statement, or the one that commits
    /// without waiting for the WAL flush (`record`), on `executor` (the pool; a transaction in
    /// tests).
    pub(super) async fn apply_with<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        sql: Arc<str>,
        update: Update,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        check_key(&update.tenant, &update.operation_id)?;
        let u = UpdateColumns::encode(update, POSTGRES)?;
        let rows = update_query(sql, self.caller_now(u.now_ms), u)
            .fetch_all(executor)
            .await
            .map_err(unavailable)?;
        rows.first().map(decode_operation).transpose()
    }

    /// `record` without reading the row back (`Ledger::record_unread`), alone: whether the
    /// update applied, from the count of rows it changed. On a kept connection, the statement
    /// itself; elsewhere the call of `rw_apply` (see `Statements::record_unread_direct`).
    pub(super) async fn record_counted(&self, job: RecordJob) -> Result<bool, LedgerError> {
        let (direct, call) = (
            self.sql.record_unread_direct.clone(),
            self.sql.record_unread.clone(),
        );
        let (now, update) = (job.now, job.update);
        let row = self
            .groups
            .records_warm
            .run(async |c, generic| {
                let sql = if generic { direct } else { call };
                update_query(sql, now, update).fetch_one(c).await
            })
            .await?;
        let changed: i64 = row.try_get(0).map_err(unavailable)?;
        Ok(changed == 1)
    }

    /// `create_and_apply`'s claim alone: the row and both entries in one statement; the
    /// statement's clock (`created_ms`) when it inserted, `None` when the identity or the
    /// intent exists already. On a kept connection, the statement itself; elsewhere the call
    /// of `rw_claim_new` (see `Statements::insert_claimed_direct`).
    pub(super) async fn claim_alone(&self, job: ClaimJob) -> Result<Option<i64>, LedgerError> {
        let (direct, call) = (
            self.sql.insert_claimed_direct.clone(),
            self.sql.insert_claimed.clone(),
        );
        self.groups
            .claims_warm
            .run(async |c, generic| {
                let sql = if generic { direct } else { call };
                claim_query(sql, job).fetch_optional(c).await
            })
            .await?
            .map(|row| row.try_get::<i64, _>(0).map_err(unavailable))
            .transpose()
    }

    /// The claim statement and its `recovery_claimed` entries, on one transaction.
    pub(super) async fn claim_in(
        &self,
        tx: &mut PgConnection,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> Result<Vec<OperationRecord>, LedgerError> {
        let rows = sqlx::query(AssertSqlSafe(self.sql.claim_due.clone()))
            .bind(self.caller_now(now_ms))
            .bind(lease_ms)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(unavailable)?;
        // RETURNING gives no order guarantee: restore the claim order.
        self.log_returned(
            tx,
            &rows,
            "claim_due",
            |seq, r| (r.next_check_ms, seq),
            store_entries::recovery_claimed,
        )
        .await
    }

    /// The sweep statement and its `lease_expired` entries, on one transaction.
    pub(super) async fn sweep_in(
        &self,
        tx: &mut PgConnection,
        now_ms: i64,
    ) -> Result<Vec<OperationRecord>, LedgerError> {
        let rows = sqlx::query(AssertSqlSafe(self.sql.sweep_expired.clone()))
            .bind(self.caller_now(now_ms))
            .bind(store_entries::LEASE_EXPIRED_REASON)
            .fetch_all(&mut *tx)
            .await
            .map_err(unavailable)?;
        // In creation order, as the other ledgers do.
        self.log_returned(
            tx,
            &rows,
            "sweep_expired",
            |seq, _| (None, seq),
            store_entries::lease_expired,
        )
        .await
    }

    /// The `claim_prepared` statement and its `recovery_claimed` entries, on one transaction.
    pub(super) async fn claim_prepared_in(
        &self,
        tx: &mut PgConnection,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> Result<Vec<OperationRecord>, LedgerError> {
        let rows = sqlx::query(AssertSqlSafe(self.sql.claim_prepared.clone()))
            .bind(self.caller_now(now_ms))
            .bind(lease_ms)
            .bind(older_than_ms)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(unavailable)?;
        // Oldest first, as claimed.
        self.log_returned(
            tx,
            &rows,
            "claim_prepared",
            |seq, r| (Some(r.created_ms), seq),
            store_entries::recovery_claimed,
        )
        .await
    }

    /// The rows a claim or sweep statement returned, decoded (a row that cannot be is
    /// quarantined, the others are kept), put in `order` and logged with `entry`, on the same
    /// transaction.
    async fn log_returned(
        &self,
        tx: &mut PgConnection,
        rows: &[PgRow],
        during: &'static str,
        order: impl Fn(i64, &OperationRecord) -> (Option<i64>, i64),
        entry: fn(&OperationRecord, i64) -> NewEvidence,
    ) -> Result<Vec<OperationRecord>, LedgerError> {
        let mut rows = self.decode_or_quarantine(tx, rows, during).await?;
        rows.sort_by_key(|(seq, _, r)| order(*seq, r));
        let entries = rows.iter().map(|(_, at, r)| entry(r, *at)).collect();
        let rows: Vec<OperationRecord> = rows.into_iter().map(|(_, _, r)| r).collect();
        self.insert_entries(tx, &rows, entries).await?;
        Ok(rows)
    }

    /// Decodes rows a claim or sweep returned with `seq` and `rw_now` (the statement's clock):
    /// `(seq, now, row)`. A row that cannot be decoded is quarantined in the same transaction
    /// and left out: one bad row must not stop the recovery of the others.
    async fn decode_or_quarantine(
        &self,
        tx: &mut PgConnection,
        rows: &[PgRow],
        during: &'static str,
    ) -> Result<Vec<(i64, i64, OperationRecord)>, LedgerError> {
        let mut decoded = Vec::with_capacity(rows.len());
        let (mut keys, mut reasons, mut at) = (Vec::new(), Vec::new(), Vec::new());
        for row in rows {
            let c = Columns::new(row, "<claimed row>");
            let (seq, now) = (c.get::<i64>("seq")?, c.get::<i64>("rw_now")?);
            match decode_operation(row) {
                Ok(record) => decoded.push((seq, now, record)),
                Err(e) => {
                    // Text columns of the primary key: PostgreSQL only stores valid text.
                    let tenant = c.get::<String>("tenant")?;
                    let id = c.get::<String>("operation_id")?;
                    let reason =
                        crate::ledger::codec::quarantine(Some(&tenant), Some(&id), during, &e);
                    keys.push((tenant, id));
                    reasons.push(pg_text(Some(&reason)).unwrap_or_default());
                    at.push(now);
                }
            }
        }
        if !keys.is_empty() {
            let (tenants, ids): (Vec<String>, Vec<String>) = keys.into_iter().unzip();
            sqlx::query(AssertSqlSafe(self.sql.quarantine.clone()))
                .bind(tenants)
                .bind(ids)
                .bind(reasons)
                .bind(at)
                .execute(&mut *tx)
                .await
                .map_err(unavailable)?;
        }
        Ok(decoded)
    }

    /// Inserts the evidence entries of rows claimed or swept by one statement, in the same
    /// transaction.
    async fn insert_entries(
        &self,
        conn: &mut PgConnection,
        rows: &[OperationRecord],
        entries: Vec<NewEvidence>,
    ) -> Result<(), LedgerError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut cols = EvidenceArrays::default();
        for (row, entry) in rows.iter().zip(entries) {
            cols.push(row, EvidenceColumns::encode(entry, POSTGRES)?);
        }
        sqlx::query(AssertSqlSafe(self.sql.insert_evidence_batch.clone()))
            .bind(cols.tenant)
            .bind(cols.operation_id)
            .bind(cols.attempt_id)
            .bind(cols.generation)
            .bind(cols.kind)
            .bind(cols.from_state)
            .bind(cols.to_state)
            .bind(cols.evidence)
            .bind(cols.note)
            .bind(cols.at_ms)
            .execute(conn)
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

/// Commits after success; rolls back at once after a failure (so the connection goes back to
/// the pool clean, not with a rollback left for later).
pub(super) async fn finish<T>(
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    result: Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    match result {
        Ok(value) => {
            tx.commit().await.map_err(unavailable)?;
            Ok(value)
        }
        Err(e) => {
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

/// Evidence entries as column arrays, for one `INSERT ... SELECT * FROM UNNEST(...)`.
#[derive(Default)]
struct EvidenceArrays {
    tenant: Vec<String>,
    operation_id: Vec<String>,
    attempt_id: Vec<Option<String>>,
    generation: Vec<i64>,
    kind: Vec<String>,
    from_state: Vec<Option<&'static str>>,
    to_state: Vec<Option<&'static str>>,
    evidence: Vec<Option<String>>,
    note: Vec<Option<String>>,
    at_ms: Vec<i64>,
}

impl EvidenceArrays {
    fn push(&mut self, row: &OperationRecord, e: EvidenceColumns) {
        self.tenant.push(row.tenant.as_str().to_owned());
        self.operation_id.push(row.operation_id.as_str().to_owned());
        self.attempt_id.push(e.attempt_id);
        self.generation.push(e.generation);
        self.kind.push(e.kind);
        self.from_state.push(e.from_state);
        self.to_state.push(e.to_state);
        self.evidence.push(e.evidence);
        self.note.push(e.note);
        self.at_ms.push(e.at_ms);
    }
}

/// The row a claim inserted, from the row its caller sent (`row`, made at the caller's
/// `created_at`) and the statement's clock (`created_ms`): the statement moves every time the
/// caller computed onto its clock as an offset from `created_at` (`rw_claim_new`,
/// `rw_claim_batch` and `Statements::insert_claimed_direct` alike), and stores every other
/// column as sent. With the caller's clock the two are equal and nothing moves.
pub(super) fn claimed_row(
    mut row: OperationRecord,
    created_at: i64,
    created_ms: i64,
) -> OperationRecord {
    let moved = |t: i64| created_ms + (t - created_at);
    row.created_ms = created_ms;
    row.updated_ms = moved(row.updated_ms);
    row.lease_until_ms = row.lease_until_ms.map(moved);
    row.next_check_ms = row.next_check_ms.map(moved);
    row.deadline_ms = row.deadline_ms.map(moved);
    row
}

/// The single-row claim in `sql` (the call of `rw_claim_new`, or the statement it runs) with
/// `job`'s columns bound in its order.
fn claim_query(
    sql: Arc<str>,
    job: ClaimJob,
) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let (r, created, claimed) = (job.row, job.created, job.claimed);
    sqlx::query(AssertSqlSafe(sql))
        .bind(job.now)
        .bind(job.created_at)
        .bind(r.tenant)
        .bind(r.operation_id)
        .bind(r.action)
        .bind(r.intent_ref)
        .bind(r.idempotency_key)
        .bind(r.payload_hash)
        .bind(r.request_method)
        .bind(r.request_url)
        .bind(r.request_headers)
        .bind(r.request_body)
        .bind(r.contract_name)
        .bind(r.contract_hash)
        .bind(r.budget_policy)
        .bind(r.state)
        .bind(r.last_result)
        .bind(r.generation)
        .bind(r.attempts_used)
        .bind(r.queries_used)
        .bind(r.may_have_applied)
        .bind(r.current_attempt)
        .bind(r.lease_until_ms)
        .bind(r.next_check_ms)
        .bind(r.deadline_ms)
        .bind(r.remote_ref)
        .bind(r.reason)
        .bind(r.response.status.map(i32::from))
        .bind(r.response.headers)
        .bind(r.response.body)
        .bind(r.updated_ms)
        .bind_entry_at(created)
        .bind_entry_at(claimed)
}

/// The compare-and-swap in `sql` (a call of `rw_apply`, or the statement it runs) with `u`'s
/// columns bound in its order; `now` is the caller's time, or `None` for the database clock.
pub(super) fn update_query(
    sql: Arc<str>,
    now: Option<i64>,
    u: UpdateColumns,
) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let e = u.evidence;
    sqlx::query(AssertSqlSafe(sql))
        .bind(now)
        .bind(u.now_ms)
        .bind(u.state)
        .bind(u.last_result)
        .bind(u.generation)
        .bind(u.attempts_used)
        .bind(u.queries_used)
        .bind(u.reset_may_have_applied)
        .bind(u.may_have_applied)
        .bind(u.current_attempt)
        .bind(u.lease_until_ms)
        .bind(u.next_check_ms)
        .bind(u.deadline_ms)
        .bind(u.remote_ref)
        .bind(u.reason)
        .bind(u.response.status.map(i32::from))
        .bind(u.response.headers)
        .bind(u.response.body)
        .bind(u.tenant)
        .bind(u.operation_id)
        .bind(u.expect_state)
        .bind(u.expect_generation)
        .bind(u.expect_version)
        .bind(u.operation_level)
        .bind_entry_at(e)
}
