//! The recoverer workers' heartbeats (`rw_workers`, migration 8) and the count of overdue
//! checks, for [`ListingLedger`](crate::ledger::ListingLedger).

use rusqlite::types::Value;

use super::SqliteLedger;
use super::conn::SqlRow;
use super::writer::Finish;
use crate::ledger::heartbeat::{checked, most_recent_first};
use crate::ledger::{
    DEAD_WORKER_RETENTION_MS, LedgerError, MAX_WORKERS_LISTED, TenantScope, WorkerHeartbeat,
};

/// Replaces one worker's row.
pub(super) const UPSERT_WORKER: &str = "INSERT INTO rw_workers (worker_id, host, version, \
     started_ms, interval_ms, pass_started_ms, pass_finished_ms, claimed_last_pass, \
     claimed_total, errors, last_error) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
     ON CONFLICT (worker_id) DO UPDATE SET host = excluded.host, version = excluded.version, \
     started_ms = excluded.started_ms, interval_ms = excluded.interval_ms, \
     pass_started_ms = excluded.pass_started_ms, pass_finished_ms = excluded.pass_finished_ms, \
     claimed_last_pass = excluded.claimed_last_pass, claimed_total = excluded.claimed_total, \
     errors = excluded.errors, last_error = excluded.last_error";

/// Deletes the rows of workers silent since before `?1`.
pub(super) const PRUNE_WORKERS: &str = "DELETE FROM rw_workers WHERE pass_finished_ms < ?1";

/// Every worker, most recent beat first.
pub(super) const SELECT_WORKERS: &str = "SELECT worker_id, host, version, started_ms, \
     interval_ms, pass_started_ms, pass_finished_ms, claimed_last_pass, claimed_total, errors, \
     last_error FROM rw_workers ORDER BY pass_finished_ms DESC, worker_id LIMIT ?1";

/// `UNKNOWN` and `RETRY_READY` rows whose next check is before `?1`, across tenants: the
/// due-work index's own WHERE term, repeated verbatim so SQLite may use it (see 0001), and
/// named: with the planner's statistics of a young table it would rather read each state's
/// whole range, on-time rows included.
pub(super) const COUNT_OVERDUE: &str = "SELECT count(*) FROM rw_operations \
     INDEXED BY rw_operations_due \
     WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY') AND next_check_ms < ?1 \
       AND state <> 'PROCESSING' AND quarantine_reason IS NULL";

/// [`COUNT_OVERDUE`] for one tenant (`?2`).
pub(super) const COUNT_OVERDUE_FOR_TENANT: &str = "SELECT count(*) FROM rw_operations \
     INDEXED BY rw_operations_due \
     WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY') AND next_check_ms < ?1 \
       AND state <> 'PROCESSING' AND quarantine_reason IS NULL AND tenant = ?2";

fn int(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

fn decode(row: &SqlRow) -> Result<WorkerHeartbeat, LedgerError> {
    let corrupt = |detail: String| LedgerError::Corrupt {
        operation: "<worker heartbeat>".to_owned(),
        detail,
    };
    let n = |i: usize| row.try_get_at::<i64>(i).map_err(corrupt);
    let count = |i: usize| n(i).map(|v| u64::try_from(v).unwrap_or(0));
    Ok(WorkerHeartbeat {
        worker_id: row.try_get_at(0).map_err(corrupt)?,
        host: row.try_get_at(1).map_err(corrupt)?,
        version: row.try_get_at(2).map_err(corrupt)?,
        started_ms: n(3)?,
        interval_ms: n(4)?,
        pass_started_ms: n(5)?,
        pass_finished_ms: n(6)?,
        claimed_last_pass: count(7)?,
        claimed_total: count(8)?,
        errors: count(9)?,
        last_error: row.try_get_at(10).map_err(corrupt)?,
    })
}

impl SqliteLedger {
    pub(super) async fn record_heartbeat_now(
        &self,
        beat: WorkerHeartbeat,
    ) -> Result<(), LedgerError> {
        let b = checked(beat)?;
        let horizon = b.pass_finished_ms.saturating_sub(DEAD_WORKER_RETENTION_MS);
        let args = vec![
            Value::Text(b.worker_id),
            Value::Text(b.host),
            Value::Text(b.version),
            Value::Integer(b.started_ms),
            Value::Integer(b.interval_ms),
            Value::Integer(b.pass_started_ms),
            Value::Integer(b.pass_finished_ms),
            int(b.claimed_last_pass),
            int(b.claimed_total),
            int(b.errors),
            b.last_error.map_or(Value::Null, Value::Text),
        ];
        // Relaxed: a beat lost in a crash is replaced by the next pass's; it never costs an
        // fsync of its own.
        self.write_as(true, move |conn| {
            conn.execute(PRUNE_WORKERS, &[Value::Integer(horizon)])?;
            conn.execute(UPSERT_WORKER, &args)?;
            Ok(Finish::Commit(()))
        })
        .await
    }

    pub(super) async fn heartbeats_now(&self) -> Result<Vec<WorkerHeartbeat>, LedgerError> {
        let rows = self
            .read(move |conn| {
                conn.rows_dynamic(
                    SELECT_WORKERS,
                    &[Value::Integer(i64::from(MAX_WORKERS_LISTED))],
                )
            })
            .await?;
        let beats = rows.iter().map(decode).collect::<Result<Vec<_>, _>>()?;
        Ok(most_recent_first(beats))
    }

    pub(super) async fn count_overdue_now(
        &self,
        scope: &TenantScope,
        checked_before_ms: i64,
    ) -> Result<u64, LedgerError> {
        let (sql, args) = match scope {
            TenantScope::Tenant(t) => (
                COUNT_OVERDUE_FOR_TENANT,
                vec![
                    Value::Integer(checked_before_ms),
                    Value::Text(t.as_str().to_owned()),
                ],
            ),
            TenantScope::AllTenants => (COUNT_OVERDUE, vec![Value::Integer(checked_before_ms)]),
        };
        let n = self
            .read(move |conn| conn.scalar_i64(sql, &args))
            .await?
            .unwrap_or(0);
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn plan(ledger: &SqliteLedger, sql: &str, args: Vec<Value>) -> String {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let rows = ledger
            .read(move |conn| conn.rows_dynamic(&explain, &args))
            .await
            .unwrap();
        rows.iter()
            .map(|r| r.try_get::<String>("detail").unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The overdue count reads the due-work partial index (never the history), for all tenants
    /// and for one; the prune on every beat reads the heartbeats' own index.
    #[tokio::test]
    async fn overdue_counts_and_the_prune_read_their_indexes() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let all = plan(&ledger, COUNT_OVERDUE, vec![Value::Integer(0)]).await;
        assert!(all.contains("rw_operations_due (next_check_ms<?)"), "{all}");
        let one = plan(
            &ledger,
            COUNT_OVERDUE_FOR_TENANT,
            vec![Value::Integer(0), Value::Text("t".into())],
        )
        .await;
        assert!(one.contains("rw_operations_due"), "{one}");
        let prune = plan(&ledger, PRUNE_WORKERS, vec![Value::Integer(0)]).await;
        assert!(prune.contains("rw_workers_by_beat"), "{prune}");
    }
}
