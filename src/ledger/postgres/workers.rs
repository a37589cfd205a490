//! The recoverer workers' heartbeats (`rw_workers`, migration 8) and the count of overdue
//! checks, for [`ListingLedger`](crate::ledger::ListingLedger).

use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, Row};

use super::{PostgresLedger, unavailable};
use crate::ledger::heartbeat::{checked, most_recent_first};
use crate::ledger::{
    DEAD_WORKER_RETENTION_MS, LedgerError, MAX_WORKERS_LISTED, TenantScope, WorkerHeartbeat,
};

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn decode(row: &PgRow) -> Result<WorkerHeartbeat, LedgerError> {
    let corrupt = |e: sqlx::Error| LedgerError::Corrupt {
        operation: "<worker heartbeat>".to_owned(),
        detail: e.to_string(),
    };
    let count = |c: &str| {
        row.try_get::<i64, _>(c)
            .map(|v| u64::try_from(v).unwrap_or(0))
            .map_err(corrupt)
    };
    Ok(WorkerHeartbeat {
        worker_id: row.try_get("worker_id").map_err(corrupt)?,
        host: row.try_get("host").map_err(corrupt)?,
        version: row.try_get("version").map_err(corrupt)?,
        started_ms: row.try_get("started_ms").map_err(corrupt)?,
        interval_ms: row.try_get("interval_ms").map_err(corrupt)?,
        pass_started_ms: row.try_get("pass_started_ms").map_err(corrupt)?,
        pass_finished_ms: row.try_get("pass_finished_ms").map_err(corrupt)?,
        claimed_last_pass: count("claimed_last_pass")?,
        claimed_total: count("claimed_total")?,
        errors: count("errors")?,
        last_error: row.try_get("last_error").map_err(corrupt)?,
    })
}

impl PostgresLedger {
    fn workers_table(&self) -> String {
        format!("\"{}\".rw_workers", self.schema())
    }

    pub(super) async fn record_heartbeat_now(
        &self,
        beat: WorkerHeartbeat,
    ) -> Result<(), LedgerError> {
        let b = checked(beat)?;
        let horizon = b.pass_finished_ms.saturating_sub(DEAD_WORKER_RETENTION_MS);
        let table = self.workers_table();
        // One statement: the prune and the upsert (a CTE), one round trip per beat.
        let sql = format!(
            "WITH pruned AS (DELETE FROM {table} WHERE pass_finished_ms < $12 \
               AND worker_id <> $1) \
             INSERT INTO {table} (worker_id, host, version, started_ms, interval_ms, \
               pass_started_ms, pass_finished_ms, claimed_last_pass, claimed_total, errors, \
               last_error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (worker_id) DO UPDATE SET host = excluded.host, \
               version = excluded.version, started_ms = excluded.started_ms, \
               interval_ms = excluded.interval_ms, pass_started_ms = excluded.pass_started_ms, \
               pass_finished_ms = excluded.pass_finished_ms, \
               claimed_last_pass = excluded.claimed_last_pass, \
               claimed_total = excluded.claimed_total, errors = excluded.errors, \
               last_error = excluded.last_error"
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(b.worker_id)
            .bind(b.host)
            .bind(b.version)
            .bind(b.started_ms)
            .bind(b.interval_ms)
            .bind(b.pass_started_ms)
            .bind(b.pass_finished_ms)
            .bind(int(b.claimed_last_pass))
            .bind(int(b.claimed_total))
            .bind(int(b.errors))
            .bind(b.last_error)
            .bind(horizon)
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    pub(super) async fn heartbeats_now(&self) -> Result<Vec<WorkerHeartbeat>, LedgerError> {
        let sql = format!(
            "SELECT worker_id, host, version, started_ms, interval_ms, pass_started_ms, \
             pass_finished_ms, claimed_last_pass, claimed_total, errors, last_error \
             FROM {} ORDER BY pass_finished_ms DESC, worker_id LIMIT $1",
            self.workers_table()
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(i64::from(MAX_WORKERS_LISTED))
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        let beats = rows.iter().map(decode).collect::<Result<Vec<_>, _>>()?;
        Ok(most_recent_first(beats))
    }

    pub(super) async fn count_overdue_now(
        &self,
        scope: &TenantScope,
        checked_before_ms: i64,
    ) -> Result<u64, LedgerError> {
        // The due-work index's predicate, so the planner reads that partial index.
        let mut sql = format!(
            "SELECT count(*) FROM {} WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY') \
             AND next_check_ms < $1 AND state <> 'PROCESSING' AND quarantine_reason IS NULL",
            self.sql.operations
        );
        let tenant = match scope {
            TenantScope::Tenant(t) => Some(t.as_str().to_owned()),
            TenantScope::AllTenants => None,
        };
        if tenant.is_some() {
            sql.push_str(" AND tenant = $2");
        }
        let mut q = sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql)).bind(checked_before_ms);
        if let Some(t) = tenant {
            q = q.bind(t);
        }
        let n = q.fetch_one(&self.pool).await.map_err(unavailable)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
