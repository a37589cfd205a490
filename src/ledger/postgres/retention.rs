//! Retention on the PostgreSQL ledger: each purge batch is one statement (pick, drop or delete
//! the evidence, slim or delete the rows) whose victims are picked through the partial indexes
//! of migration 0005 with `FOR UPDATE SKIP LOCKED` and then changed by their `ctid` (a TID
//! scan: the rows are locked by the same statement, so they cannot move), so workers purging at the same time take
//! different rows instead of waiting for each other, and a row a request holds is left for the
//! next pass. Autovacuum makes the space of deleted rows reusable; where the server runs without
//! it, [`reclaim_space`](crate::ledger::RetentionLedger::reclaim_space) runs a plain `VACUUM` of the
//! ledger's tables.
//!
//! Cut-offs are the caller's times. With [`ClockSource::Database`](super::ClockSource) the rows'
//! times are the database's; a skew of seconds is immaterial to retention clocks of hours or
//! days.

use sqlx::{AssertSqlSafe, Row};

use super::{PostgresLedger, bind_args, unavailable};
use crate::ledger::query::Arg;
use crate::ledger::{
    CallbackPurge, CallbackRecords, CallbackScope, LedgerError, PurgeBatch, PurgeScope, PurgeStage,
    Purged,
};

/// Finished and not quarantined: the terms of the partial indexes' conditions.
const FINISHED: &str = "o.state IN ('SUCCEEDED', 'REJECTED') AND o.quarantine_reason IS NULL";

/// A `count, bytes` row as what a purge dropped (or would drop).
fn counted(row: &sqlx::postgres::PgRow) -> Purged {
    Purged::new(
        row.get::<i64, _>(0).max(0) as u64,
        row.get::<i64, _>(1).max(0) as u64,
    )
}

impl PostgresLedger {
    fn table(&self, name: &str) -> String {
        format!("\"{}\".{name}", self.schema())
    }

    pub(super) async fn finished_contracts_now(&self) -> Result<Vec<String>, LedgerError> {
        sqlx::query_scalar(AssertSqlSafe(self.finished_contracts_statement()))
            .fetch_all(self.pool())
            .await
            .map_err(unavailable)
    }

    pub(super) fn finished_contracts_statement(&self) -> String {
        let ops = self.table("rw_operations");
        // A loose index scan of `rw_operations_finished`: one probe per distinct name.
        format!(
            "WITH RECURSIVE c(name) AS (
                 SELECT min(o.contract_name) FROM {ops} AS o WHERE {FINISHED}
                 UNION ALL
                 SELECT (SELECT min(o.contract_name) FROM {ops} AS o
                         WHERE {FINISHED} AND o.contract_name > c.name)
                 FROM c WHERE c.name IS NOT NULL
             )
             SELECT name FROM c WHERE name IS NOT NULL"
        )
    }

    pub(super) async fn purge_now(&self, batch: PurgeBatch) -> Result<Purged, LedgerError> {
        let Some((sql, args)) = self.purge_statement(&batch) else {
            return Ok(Purged::default());
        };
        let row = bind_args(sqlx::query(AssertSqlSafe(sql)), args)
            .fetch_one(self.pool())
            .await
            .map_err(unavailable)?;
        Ok(counted(&row))
    }

    /// The one statement of `batch` (`None`: a batch of nothing), answering one row: rows
    /// purged (or counted), bytes.
    pub(super) fn purge_statement(&self, batch: &PurgeBatch) -> Option<(String, Vec<Arg>)> {
        let (ops, ev) = (self.table("rw_operations"), self.table("rw_evidence"));
        let (scope, mut args) = match &batch.scope {
            PurgeScope::FinishedBefore {
                contract,
                before_ms,
            } => (
                "o.contract_name = $1 AND o.updated_ms < $2",
                vec![Arg::Text(contract.clone()), Arg::Int(*before_ms)],
            ),
            PurgeScope::Tenant(tenant) => {
                ("o.tenant = $1", vec![Arg::Text(tenant.as_str().to_owned())])
            }
            PurgeScope::Operation {
                tenant,
                operation_id,
            } => (
                "o.tenant = $1 AND o.operation_id = $2",
                vec![
                    Arg::Text(tenant.as_str().to_owned()),
                    Arg::Text(operation_id.as_str().to_owned()),
                ],
            ),
        };
        let detail_bytes = format!(
            "octet_length(o.request_headers) + octet_length(o.request_body)
             + coalesce(octet_length(o.response_headers), 0)
             + coalesce(octet_length(o.response_body), 0) + coalesce(octet_length(o.reason), 0)
             + (SELECT coalesce(sum(coalesce(octet_length(e.evidence), 0)
                                    + coalesce(octet_length(e.note), 0)), 0)
                FROM {ev} AS e WHERE e.tenant = o.tenant AND e.operation_id = o.operation_id)"
        );
        let (stage, bytes) = match batch.stage {
            PurgeStage::Details => (" AND o.details_removed_ms IS NULL", detail_bytes),
            PurgeStage::Identity => (
                "",
                format!(
                    "{detail_bytes} + octet_length(o.tenant) + octet_length(o.operation_id)
                     + octet_length(o.action) + octet_length(o.intent_ref)
                     + octet_length(o.idempotency_key) + octet_length(o.payload_hash)
                     + octet_length(o.request_method) + octet_length(o.request_url)
                     + coalesce(octet_length(o.remote_ref), 0)"
                ),
            ),
        };
        let pick = format!(
            "SELECT o.ctid AS row_id, o.tenant, o.operation_id, ({bytes})::bigint AS bytes
             FROM {ops} AS o
             WHERE {scope} AND {FINISHED}{stage}"
        );
        // Oldest finish first by age; an erasure takes everything, in any order (no sort).
        let order = match batch.scope {
            PurgeScope::FinishedBefore { .. } => " ORDER BY o.updated_ms, o.seq",
            _ => "",
        };
        // The limit and the time follow the scope's parameters.
        let (limit, now) = (args.len() + 1, args.len() + 2);
        let sql = if batch.dry_run {
            format!("SELECT count(*)::bigint, coalesce(sum(bytes), 0)::bigint FROM ({pick}) AS v")
        } else {
            if batch.limit == 0 {
                return None;
            }
            let (evidence, operations) = match batch.stage {
                PurgeStage::Details => (
                    format!(
                        "UPDATE {ev} AS e SET evidence = NULL, note = NULL FROM victims AS v
                         WHERE e.tenant = v.tenant AND e.operation_id = v.operation_id
                           AND (e.evidence IS NOT NULL OR e.note IS NOT NULL)"
                    ),
                    format!(
                        "UPDATE {ops} AS o SET request_headers = '[]', request_body = ''::bytea,
                             response_status = NULL, response_headers = NULL,
                             response_body = NULL, reason = NULL, details_removed_ms = ${now}
                         WHERE o.ctid = ANY (ARRAY(SELECT row_id FROM victims))"
                    ),
                ),
                PurgeStage::Identity => (
                    format!(
                        "DELETE FROM {ev} AS e USING victims AS v
                         WHERE e.tenant = v.tenant AND e.operation_id = v.operation_id"
                    ),
                    format!(
                        "DELETE FROM {ops} AS o
                         WHERE o.ctid = ANY (ARRAY(SELECT row_id FROM victims))"
                    ),
                ),
            };
            args.push(Arg::Int(i64::from(batch.limit)));
            args.push(Arg::Int(batch.now_ms));
            format!(
                "WITH victims AS ({pick}{order} LIMIT ${limit}
                                  FOR UPDATE OF o SKIP LOCKED),
                 ev AS ({evidence}),
                 ops AS ({operations} RETURNING 1)
                 SELECT (SELECT count(*) FROM ops)::bigint,
                        coalesce((SELECT sum(bytes) FROM victims), 0)::bigint"
            )
        };
        Some((sql, args))
    }

    pub(super) async fn purge_callbacks_now(
        &self,
        batch: CallbackPurge,
    ) -> Result<Purged, LedgerError> {
        let (table, bytes) = match batch.records {
            CallbackRecords::Deliveries => (
                self.table("rw_callback_events"),
                "octet_length(vendor) + octet_length(event_id) + octet_length(event_type)
                 + coalesce(octet_length(tenant), 0) + coalesce(octet_length(operation_id), 0)",
            ),
            CallbackRecords::Quarantine => (
                self.table("rw_callback_quarantine"),
                "octet_length(vendor) + octet_length(event_id) + octet_length(event_type)
                 + coalesce(octet_length(match_value), 0) + octet_length(reason)
                 + coalesce(octet_length(evidence), 0)",
            ),
        };
        let (filter, arg) = match &batch.scope {
            CallbackScope::ReceivedBefore(before) => ("received_ms < $1", Arg::Int(*before)),
            CallbackScope::Tenant(t) => ("tenant = $1", Arg::Text(t.as_str().to_owned())),
        };
        let sql = if batch.dry_run {
            format!(
                "SELECT count(*)::bigint, coalesce(sum({bytes}), 0)::bigint FROM {table}
                 WHERE {filter}"
            )
        } else {
            if batch.limit == 0 {
                return Ok(Purged::default());
            }
            format!(
                "WITH gone AS (
                     DELETE FROM {table} WHERE ctid = ANY (ARRAY(
                         SELECT ctid FROM {table} WHERE {filter}
                         ORDER BY received_ms LIMIT $2 FOR UPDATE SKIP LOCKED))
                     RETURNING ({bytes})::bigint AS bytes)
                 SELECT count(*)::bigint, coalesce(sum(bytes), 0)::bigint FROM gone"
            )
        };
        let mut args = vec![arg];
        if !batch.dry_run {
            args.push(Arg::Int(i64::from(batch.limit)));
        }
        let row = bind_args(sqlx::query(AssertSqlSafe(sql)), args)
            .fetch_one(self.pool())
            .await
            .map_err(unavailable)?;
        Ok(counted(&row))
    }

    /// At most one `VACUUM` of the ledger's tables per this much time, from all clones of a
    /// ledger: autovacuum's own default pause between runs.
    const VACUUM_PAUSE: std::time::Duration = std::time::Duration::from_secs(60);

    /// Makes the space of purged rows reusable when the server's autovacuum is off (it is on by
    /// default, and then this does nothing): a plain `VACUUM` of the ledger's tables, which
    /// takes no lock that blocks reads or writes, at most once a minute (as autovacuum would).
    /// Returns the bytes the tables shrank by (a plain `VACUUM` only gives back empty pages at a
    /// table's end; the rest is reused).
    pub(super) async fn reclaim_space_now(&self) -> Result<u64, LedgerError> {
        {
            let mut last = self
                .vacuumed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < Self::VACUUM_PAUSE) {
                return Ok(0);
            }
            // Taken now, so a concurrent purger of this process does not vacuum too.
            *last = Some(std::time::Instant::now());
        }
        let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
            .fetch_one(self.pool())
            .await
            .map_err(unavailable)?;
        if autovacuum == "on" {
            return Ok(0);
        }
        let tables = [
            "rw_operations",
            "rw_evidence",
            "rw_callback_events",
            "rw_callback_quarantine",
        ]
        .map(|t| self.table(t));
        let size = format!(
            "SELECT ({})::bigint",
            tables
                .iter()
                .map(|t| format!("pg_total_relation_size('{t}')"))
                .collect::<Vec<_>>()
                .join(" + ")
        );
        let before: i64 = sqlx::query_scalar(AssertSqlSafe(size.clone()))
            .fetch_one(self.pool())
            .await
            .map_err(unavailable)?;
        sqlx::raw_sql(AssertSqlSafe(format!("VACUUM {}", tables.join(", "))))
            .execute(self.pool())
            .await
            .map_err(unavailable)?;
        let after: i64 = sqlx::query_scalar(AssertSqlSafe(size))
            .fetch_one(self.pool())
            .await
            .map_err(unavailable)?;
        Ok((before - after).max(0) as u64)
    }
}
