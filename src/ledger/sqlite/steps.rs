//! The steps the [`Ledger`] implementation is made of: the compare-and-swap and the recording
//! of a result, insert-or-get, lookups by one key, the claimed rows decoded (or quarantined)
//! and logged, and the arguments of lookups and listings.
//!
//! [`Ledger`]: crate::ledger::Ledger

use std::sync::Arc;

use super::conn::{Args, Conn, SqlRow};
use super::sql::{
    APPLY, APPLY_UNREAD, INSERT_EVIDENCE, QUARANTINE, SELECT_BY_ID, SELECT_BY_INTENT,
    SELECT_CALLBACK_EVENT, Statement, compare_and_swap, evidence,
};
use super::writer::Finish;
use super::{Columns, Reads, SQLITE, SqliteLedger, decode_operation};
use crate::ledger::codec::{EvidenceColumns, UpdateColumns};
use crate::ledger::{Created, LedgerError, NewEvidence, OperationRecord, Recorded, Update};
use crate::operation::{OperationId, Tenant};

/// The writer's work for a result written after the send ([`Ledger::record_unread`]): the
/// compare-and-swap, then its evidence entry if it applied.
///
/// [`Ledger::record_unread`]: crate::ledger::Ledger::record_unread
pub(super) fn recording(
    update: Update,
) -> Result<impl Fn(&mut Conn) -> Result<Finish<Recorded>, LedgerError> + Send + 'static, LedgerError>
{
    let (apply, entry) = compare_and_swap(APPLY_UNREAD, UpdateColumns::encode(update, SQLITE)?);
    Ok(move |conn: &mut Conn| {
        if apply.execute(conn)? == 0 {
            return Ok(Finish::Unchanged(Recorded::Stale));
        }
        entry.execute(conn)?;
        Ok(Finish::Commit(Recorded::Applied))
    })
}

/// The arguments (tenant, value) of a lookup.
pub(super) fn key_args(tenant: &Tenant, value: &str) -> Vec<rusqlite::types::Value> {
    let mut a = Args::with_capacity(2);
    a.push(tenant.as_str()).push(value);
    a.0
}

/// A listing's arguments as values.
pub(super) fn values(args: Vec<crate::ledger::query::Arg>) -> Vec<rusqlite::types::Value> {
    args.into_iter()
        .map(|a| match a {
            crate::ledger::query::Arg::Text(t) => rusqlite::types::Value::Text(t),
            crate::ledger::query::Arg::Int(i) => rusqlite::types::Value::Integer(i),
        })
        .collect()
}

impl SqliteLedger {
    pub(super) async fn apply_as(
        &self,
        relaxed: bool,
        update: Update,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let (apply, entry) = compare_and_swap(APPLY, UpdateColumns::encode(update, SQLITE)?);
        self.write_as(relaxed, move |conn| {
            let rows = apply.rows(conn)?;
            let Some(row) = rows.first() else {
                return Ok(Finish::Unchanged(None));
            };
            entry.execute(conn)?;
            // A row that cannot be decoded fails this request: its update and evidence are
            // undone with the batch's transaction, and the batch runs again without it.
            Ok(Finish::Commit(Some(decode_operation(row)?)))
        })
        .await
    }

    /// The one row `sql` (a lookup by tenant `?1` and a value `?2`) finds, on a reader.
    pub(super) async fn find_one(
        &self,
        sql: &'static str,
        tenant: &Tenant,
        value: &str,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        // Which operation the value names is not known yet: wait for every queued result.
        self.wait_for_results().await;
        let rows = self.read_rows(sql, key_args(tenant, value)).await?;
        rows.first().map(decode_operation).transpose()
    }

    /// Waits until the results of operation (`tenant`, `id`) queued before this call have
    /// landed (see [Detached results](super#detached-results)). Only reads on reader connections
    /// need it: an in-memory ledger reads on the writer thread, in queue order (its lookups by
    /// another key wait anyway, harmlessly).
    pub(super) async fn landed(&self, tenant: &Tenant, id: &OperationId) {
        if let (Some(landing), Reads::Pool(_)) = (&self.inner.detached, &self.inner.reads) {
            landing.wait_for(&(tenant.clone(), id.clone())).await;
        }
    }

    /// Runs `insert` (a row, see [`INSERT_OPERATION`] and [`INSERT_CLAIMED`]) and, if it
    /// inserted the row, `entries`, as one write: [`Created::New`] with `row`, the row it
    /// inserts, or [`Created::Existing`] with the row it conflicted with (then it inserted
    /// nothing).
    ///
    /// [`INSERT_OPERATION`]: super::sql::INSERT_OPERATION
    /// [`INSERT_CLAIMED`]: super::sql::INSERT_CLAIMED
    pub(super) async fn insert_or_get(
        &self,
        insert: Statement,
        entries: Vec<Statement>,
        row: OperationRecord,
    ) -> Result<Created, LedgerError> {
        // Shared with the write, which may run more than once and needs the keys on a
        // conflict; the write is dropped before its caller is answered, so the row comes back
        // without a copy.
        let row = Arc::new(row);
        let key = row.clone();
        let existing = self
            .write(move |conn| {
                if insert.execute(conn)? == 1 {
                    for e in &entries {
                        e.execute(conn)?;
                    }
                    return Ok(Finish::Commit(None));
                }
                let r = &*key;
                let found = existing(conn, &r.tenant, &r.operation_id, &r.action, &r.intent_ref)?;
                Ok(Finish::Unchanged(Some(found)))
            })
            .await?;
        Ok(match existing {
            Some(found) => Created::Existing(found),
            None => Created::New(Arc::try_unwrap(row).unwrap_or_else(|row| (*row).clone())),
        })
    }
}

/// The dedupe check of an event: [`SELECT_CALLBACK_EVENT`].
///
/// [`SELECT_CALLBACK_EVENT`]: super::sql::SELECT_CALLBACK_EVENT
pub(super) fn callback_seen(vendor: &str, event_id: &str) -> Statement {
    Statement::new(SELECT_CALLBACK_EVENT, |a| {
        a.push(vendor).push(event_id);
    })
}

/// The row an insert of `(tenant, operation_id)` for `(action, intent_ref)` conflicted with:
/// the same id first, then the same intent.
fn existing(
    conn: &mut Conn,
    tenant: &Tenant,
    id: &OperationId,
    action: &str,
    intent_ref: &str,
) -> Result<OperationRecord, LedgerError> {
    let mut row = conn.row(SELECT_BY_ID, &key_args(tenant, id.as_str()))?;
    if row.is_none() {
        let mut a = Args::with_capacity(3);
        a.push(tenant.as_str()).push(action).push(intent_ref);
        row = conn.row(SELECT_BY_INTENT, &a.0)?;
    }
    match row {
        Some(row) => decode_operation(&row),
        None => Err(LedgerError::Corrupt {
            operation: id.to_string(),
            detail: "insert conflicted but no row has this id or intent".into(),
        }),
    }
}

/// The rows a claim or sweep statement returned, decoded (a row that cannot be is quarantined,
/// the others are kept), put in `order` and logged with `entry`, in the same transaction.
pub(super) fn log_returned(
    conn: &mut Conn,
    rows: &[SqlRow],
    now_ms: i64,
    during: &'static str,
    order: impl Fn(i64, &OperationRecord) -> (Option<i64>, i64),
    entry: fn(&OperationRecord, i64) -> NewEvidence,
) -> Result<Vec<OperationRecord>, LedgerError> {
    let mut rows = decode_or_quarantine(conn, rows, now_ms, during)?;
    rows.sort_by_key(|(rowid, r)| order(*rowid, r));
    let rows: Vec<OperationRecord> = rows.into_iter().map(|(_, r)| r).collect();
    for r in &rows {
        let e = EvidenceColumns::encode(entry(r, now_ms), SQLITE)?;
        evidence(INSERT_EVIDENCE, &r.tenant, &r.operation_id, e).execute(conn)?;
    }
    Ok(rows)
}

fn decode_or_quarantine(
    conn: &mut Conn,
    rows: &[SqlRow],
    now_ms: i64,
    during: &'static str,
) -> Result<Vec<(i64, OperationRecord)>, LedgerError> {
    let mut decoded = Vec::with_capacity(rows.len());
    for row in rows {
        let rowid = Columns::new(row, "<claimed row>").get::<i64>("rw_rowid")?;
        match decode_operation(row) {
            Ok(record) => decoded.push((rowid, record)),
            Err(e) => {
                let tenant = row.try_get::<String>("tenant").ok();
                let id = row.try_get::<String>("operation_id").ok();
                let reason =
                    crate::ledger::codec::quarantine(tenant.as_deref(), id.as_deref(), during, &e);
                let mut a = Args::with_capacity(3);
                a.push(reason).push(now_ms).push(rowid);
                conn.execute(QUARANTINE, &a.0)?;
            }
        }
    }
    Ok(decoded)
}

/// A raw statement through the writer thread, for the conformance suite's corrupt-row checks:
/// `sql` with the tenant as `?1` and the operation id as `?2`.
#[cfg(feature = "test-util")]
impl SqliteLedger {
    pub(crate) async fn exec_for_conformance(
        &self,
        sql: String,
        tenant: &Tenant,
        id: &OperationId,
    ) -> Result<(), LedgerError> {
        let args = key_args(tenant, id.as_str());
        self.write(move |conn| {
            conn.execute(&sql, &args)?;
            Ok(Finish::Commit(()))
        })
        .await
    }
}
