//! Retention on the SQLite ledger: purge batches run as ordinary jobs of the group-commit
//! writer (so they interleave with the requests' claims and never hold the write lock for
//! longer than one bounded batch), victims read through the partial indexes of migration 0005,
//! and space given back with `incremental_vacuum`.

use rusqlite::types::Value;

use super::conn::{Conn, SqlRow};
use super::writer::Finish;
use super::{SqliteLedger, values};
use crate::ledger::query::Arg;
use crate::ledger::{
    CallbackPurge, CallbackRecords, CallbackScope, LedgerError, PurgeBatch, PurgeScope, PurgeStage,
    Purged,
};

/// The terms every purge of operations repeats: finished, not quarantined. They are the WHERE
/// clause of `rw_operations_finished`, verbatim (SQLite only uses a partial index when the query
/// contains its condition's terms).
const FINISHED: &str = "o.state IN ('SUCCEEDED', 'REJECTED') AND o.quarantine_reason IS NULL";

/// The bytes of what the details stage drops from row `o`, its evidence included.
const DETAIL_BYTES: &str = "length(CAST(o.request_headers AS BLOB)) + length(o.request_body)
    + ifnull(length(CAST(o.response_headers AS BLOB)), 0) + ifnull(length(o.response_body), 0)
    + ifnull(length(CAST(o.reason AS BLOB)), 0)
    + (SELECT ifnull(sum(ifnull(length(CAST(e.evidence AS BLOB)), 0)
                         + ifnull(length(CAST(e.note AS BLOB)), 0)), 0)
       FROM rw_evidence AS e WHERE e.tenant = o.tenant AND e.operation_id = o.operation_id)";

/// The bytes of the identity columns the identity stage drops on top of the details.
const IDENTITY_BYTES: &str = "length(CAST(o.tenant AS BLOB)) + length(CAST(o.operation_id AS BLOB))
    + length(CAST(o.action AS BLOB)) + length(CAST(o.intent_ref AS BLOB))
    + length(CAST(o.idempotency_key AS BLOB)) + length(CAST(o.payload_hash AS BLOB))
    + length(CAST(o.request_method AS BLOB)) + length(CAST(o.request_url AS BLOB))
    + ifnull(length(CAST(o.remote_ref AS BLOB)), 0)";

/// The victims of `batch` (rowid and bytes), oldest finish first; the last parameter is the
/// limit.
fn victims(batch: &PurgeBatch) -> (String, Vec<Arg>) {
    let (index, scope, mut args) = match &batch.scope {
        PurgeScope::FinishedBefore {
            contract,
            before_ms,
        } => (
            match batch.stage {
                PurgeStage::Details => "INDEXED BY rw_operations_details_due",
                PurgeStage::Identity => "INDEXED BY rw_operations_finished",
            },
            "o.contract_name = ? AND o.updated_ms < ?",
            vec![Arg::Text(contract.clone()), Arg::Int(*before_ms)],
        ),
        PurgeScope::Tenant(tenant) => (
            "",
            "o.tenant = ?",
            vec![Arg::Text(tenant.as_str().to_owned())],
        ),
        PurgeScope::Operation {
            tenant,
            operation_id,
        } => (
            "",
            "o.tenant = ? AND o.operation_id = ?",
            vec![
                Arg::Text(tenant.as_str().to_owned()),
                Arg::Text(operation_id.as_str().to_owned()),
            ],
        ),
    };
    let (stage, bytes) = match batch.stage {
        PurgeStage::Details => (" AND o.details_removed_ms IS NULL", DETAIL_BYTES.to_owned()),
        PurgeStage::Identity => ("", format!("{DETAIL_BYTES} + {IDENTITY_BYTES}")),
    };
    // Oldest finish first by age; an erasure takes everything, in any order (no sort).
    let order = match batch.scope {
        PurgeScope::FinishedBefore { .. } => " ORDER BY o.updated_ms",
        _ => "",
    };
    args.push(Arg::Int(if batch.dry_run {
        -1
    } else {
        i64::from(batch.limit)
    }));
    (
        format!(
            "SELECT o.rowid AS id, {bytes} AS bytes FROM rw_operations AS o {index}
             WHERE {scope} AND {FINISHED}{stage}{order} LIMIT ?"
        ),
        args,
    )
}

/// The details stage on the picked operations: their evidence details, then the rows.
const SLIM_EVIDENCE: &str = "UPDATE rw_evidence SET evidence = NULL, note = NULL
WHERE (tenant, operation_id) IN (SELECT tenant, operation_id FROM rw_operations
                                 WHERE rowid IN (SELECT value FROM json_each(?1)))
  AND (evidence IS NOT NULL OR note IS NOT NULL)";
const SLIM_OPERATIONS: &str = "UPDATE rw_operations
SET request_headers = '[]', request_body = X'', response_status = NULL,
    response_headers = NULL, response_body = NULL, reason = NULL, details_removed_ms = ?2
WHERE rowid IN (SELECT value FROM json_each(?1))";
/// The identity stage on the picked operations: their evidence, then the rows.
const DELETE_EVIDENCE: &str = "DELETE FROM rw_evidence
WHERE (tenant, operation_id) IN (SELECT tenant, operation_id FROM rw_operations
                                 WHERE rowid IN (SELECT value FROM json_each(?1)))";
const DELETE_OPERATIONS: &str =
    "DELETE FROM rw_operations WHERE rowid IN (SELECT value FROM json_each(?1))";

/// An integer column of a row the retention statements return (a count, a byte sum, a rowid);
/// never negative.
fn int(row: &SqlRow, column: &str) -> Result<i64, LedgerError> {
    row.try_get::<Option<i64>>(column)
        .map(|v| v.unwrap_or_default().max(0))
        .map_err(|e| LedgerError::Corrupt {
            operation: "<retention>".to_owned(),
            detail: format!("column {column}: {e}"),
        })
}

/// What a dry run counts: `count(*)` as `n`, the bytes as `bytes`.
async fn counted(
    ledger: &SqliteLedger,
    sql: String,
    args: Vec<Value>,
) -> Result<Purged, LedgerError> {
    let rows = ledger
        .read(move |conn| conn.rows_dynamic(&sql, &args))
        .await?;
    let row = rows.first().ok_or_else(|| LedgerError::Corrupt {
        operation: "<retention>".to_owned(),
        detail: "a count returned no row".to_owned(),
    })?;
    Ok(Purged::new(
        int(row, "n")? as u64,
        int(row, "bytes")? as u64,
    ))
}

/// The rowids as the JSON array `json_each` reads.
fn json_ids(ids: &[i64]) -> String {
    let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("[{}]", ids.join(","))
}

impl SqliteLedger {
    pub(super) async fn finished_contracts_now(&self) -> Result<Vec<String>, LedgerError> {
        // A loose index scan of `rw_operations_finished`: one probe per distinct name, each
        // after the last one found.
        let first = format!(
            "SELECT min(o.contract_name) FROM rw_operations AS o INDEXED BY rw_operations_finished
             WHERE {FINISHED}"
        );
        let next = format!("{first} AND o.contract_name > ?1");
        self.read(move |conn: &mut Conn| {
            let mut names: Vec<String> = Vec::new();
            loop {
                let rows = match names.last() {
                    None => conn.rows_dynamic(&first, &[])?,
                    Some(last) => conn.rows_dynamic(&next, &[Value::Text(last.clone())])?,
                };
                let found = rows
                    .first()
                    .map(|r| r.try_get_at::<Option<String>>(0))
                    .transpose()
                    .map_err(|e| LedgerError::Corrupt {
                        operation: "<retention>".to_owned(),
                        detail: format!("contract name: {e}"),
                    })?
                    .flatten();
                match found {
                    Some(name) => names.push(name),
                    None => return Ok(names),
                }
            }
        })
        .await
    }

    pub(super) async fn purge_now(&self, batch: PurgeBatch) -> Result<Purged, LedgerError> {
        let (sql, args) = victims(&batch);
        let args = values(args);
        if batch.dry_run {
            let total =
                format!("SELECT count(*) AS n, ifnull(sum(bytes), 0) AS bytes FROM ({sql})");
            return counted(self, total, args).await;
        }
        if batch.limit == 0 {
            return Ok(Purged::default());
        }
        let (stage, now_ms) = (batch.stage, batch.now_ms);
        self.write(move |conn| {
            let rows = conn.rows_dynamic(&sql, &args)?;
            if rows.is_empty() {
                return Ok(Finish::Unchanged(Purged::default()));
            }
            let mut bytes = 0u64;
            let mut ids = Vec::with_capacity(rows.len());
            for row in &rows {
                ids.push(int(row, "id")?);
                bytes += int(row, "bytes")? as u64;
            }
            let picked = Value::Text(json_ids(&ids));
            match stage {
                PurgeStage::Details => {
                    conn.execute(SLIM_EVIDENCE, std::slice::from_ref(&picked))?;
                    conn.execute(SLIM_OPERATIONS, &[picked, Value::Integer(now_ms)])?;
                }
                PurgeStage::Identity => {
                    conn.execute(DELETE_EVIDENCE, std::slice::from_ref(&picked))?;
                    conn.execute(DELETE_OPERATIONS, &[picked])?;
                }
            }
            Ok(Finish::Commit(Purged::new(ids.len() as u64, bytes)))
        })
        .await
    }

    pub(super) async fn purge_callbacks_now(
        &self,
        batch: CallbackPurge,
    ) -> Result<Purged, LedgerError> {
        let (table, key, bytes) = match batch.records {
            CallbackRecords::Deliveries => (
                "rw_callback_events",
                "rowid",
                "length(CAST(vendor AS BLOB)) + length(CAST(event_id AS BLOB))
                 + length(CAST(event_type AS BLOB)) + ifnull(length(CAST(tenant AS BLOB)), 0)
                 + ifnull(length(CAST(operation_id AS BLOB)), 0)",
            ),
            CallbackRecords::Quarantine => (
                "rw_callback_quarantine",
                "id",
                "length(CAST(vendor AS BLOB)) + length(CAST(event_id AS BLOB))
                 + length(CAST(event_type AS BLOB)) + ifnull(length(CAST(match_value AS BLOB)), 0)
                 + length(CAST(reason AS BLOB)) + ifnull(length(CAST(evidence AS BLOB)), 0)",
            ),
        };
        let (filter, arg) = match &batch.scope {
            CallbackScope::ReceivedBefore(before) => ("received_ms < ?1", Arg::Int(*before)),
            CallbackScope::Tenant(t) => ("tenant = ?1", Arg::Text(t.as_str().to_owned())),
        };
        let arg = values(vec![arg]);
        if batch.dry_run {
            let sql = format!(
                "SELECT count(*) AS n, ifnull(sum({bytes}), 0) AS bytes FROM {table} WHERE {filter}"
            );
            return counted(self, sql, arg).await;
        }
        if batch.limit == 0 {
            return Ok(Purged::default());
        }
        let sql = format!(
            "DELETE FROM {table} WHERE {key} IN (
                 SELECT {key} FROM {table} WHERE {filter} ORDER BY received_ms LIMIT ?2)
             RETURNING {bytes} AS bytes"
        );
        let mut args = arg;
        args.push(Value::Integer(i64::from(batch.limit)));
        self.write(move |conn| {
            let rows = conn.rows_dynamic(&sql, &args)?;
            let mut bytes = 0u64;
            for row in &rows {
                bytes += int(row, "bytes")? as u64;
            }
            let purged = Purged::new(rows.len() as u64, bytes);
            Ok(if rows.is_empty() {
                Finish::Unchanged(purged)
            } else {
                Finish::Commit(purged)
            })
        })
        .await
    }

    /// At most this many free pages are given back per call: one bounded step of the writer.
    const VACUUM_PAGES: i64 = 2048;
    /// Free pages up to `page_count / KEEP_FREE_DIVISOR` are kept for reuse.
    const KEEP_FREE_DIVISOR: i64 = 4;

    pub(super) async fn reclaim_space_now(&self) -> Result<u64, LedgerError> {
        let mode = self
            .read(|conn| conn.scalar_i64("PRAGMA auto_vacuum", &[]))
            .await?
            .unwrap_or_default();
        // 2 = INCREMENTAL. A file created before this version (NONE) reuses its free pages for
        // new rows instead: it stops growing, but does not shrink.
        if mode != 2 {
            return Ok(0);
        }
        self.write(|conn| {
            let pragma =
                |sql: &str| Ok::<_, LedgerError>(conn.scalar_i64(sql, &[])?.unwrap_or_default());
            let page = pragma("PRAGMA page_size")?;
            let before = pragma("PRAGMA freelist_count")?;
            let pages = pragma("PRAGMA page_count")?;
            // Up to a quarter of the file stays free for the next rows: giving back pages that
            // the next inserts take again is I/O for nothing, and under a steady load the file
            // stays flat either way.
            let excess = (before - pages / Self::KEEP_FREE_DIVISOR).min(Self::VACUUM_PAGES);
            if excess <= 0 {
                return Ok(Finish::Unchanged(0));
            }
            // `incremental_vacuum` does its work as its rows are stepped through.
            conn.rows_dynamic(&format!("PRAGMA incremental_vacuum({excess})"), &[])?;
            let after = pragma("PRAGMA freelist_count")?;
            Ok(Finish::Commit(((before - after).max(0) * page) as u64))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::{OperationId, Tenant};

    async fn plan(ledger: &SqliteLedger, sql: &str, args: &[Arg]) -> String {
        let sql = crate::ledger::query::Sql {
            text: sql.to_owned(),
            args: args.to_vec(),
        };
        super::super::tests::plan_of(ledger, sql).await
    }

    /// Every purge reads its victims through an index: the partial indexes of finished rows by
    /// contract, a tenant's range (of its keys' index: the state indexes leave its succeeded
    /// rows out since migration 0015) for a tenant's erasure, the primary key for one
    /// operation; the evidence through its index. Never `SCAN rw_operations`.
    #[tokio::test]
    async fn purges_read_their_victims_through_indexes() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let tenant = Tenant::new("t");
        for (stage, scope, index) in [
            (
                PurgeStage::Details,
                PurgeScope::FinishedBefore {
                    contract: "c".into(),
                    before_ms: 5,
                },
                "rw_operations_details_due",
            ),
            (
                PurgeStage::Identity,
                PurgeScope::FinishedBefore {
                    contract: "c".into(),
                    before_ms: 5,
                },
                "rw_operations_finished",
            ),
            (
                PurgeStage::Identity,
                PurgeScope::Tenant(tenant.clone()),
                "rw_operations_by_idempotency_key",
            ),
            (
                PurgeStage::Details,
                PurgeScope::Operation {
                    tenant: tenant.clone(),
                    operation_id: OperationId::new("op"),
                },
                "sqlite_autoindex_rw_operations_1",
            ),
        ] {
            let batch = PurgeBatch {
                stage,
                scope,
                limit: 10,
                dry_run: false,
                now_ms: 0,
            };
            let (sql, args) = victims(&batch);
            let plan = plan(&ledger, &sql, &args).await;
            assert!(plan.contains(index), "{batch:?}\n{plan}");
            assert!(!plan.contains("SCAN o"), "{batch:?}\n{plan}");
            assert!(!plan.contains("SCAN e"), "{batch:?}\n{plan}");
        }
        for sql in [SLIM_EVIDENCE, DELETE_EVIDENCE] {
            let plan = plan(&ledger, sql, &[Arg::Text("[1]".into())]).await;
            assert!(plan.contains("rw_evidence_by_operation"), "{sql}\n{plan}");
            assert!(!plan.contains("SCAN rw_evidence"), "{sql}\n{plan}");
        }
        let contracts = plan(
            &ledger,
            &format!(
                "SELECT min(o.contract_name) FROM rw_operations AS o INDEXED BY rw_operations_finished
                 WHERE {FINISHED} AND o.contract_name > ?1"
            ),
            &[Arg::Text(String::new())],
        )
        .await;
        assert!(contracts.contains("SEARCH"), "{contracts}");
        for (sql, index) in [
            (
                "SELECT rowid FROM rw_callback_events WHERE received_ms < ?1 ORDER BY received_ms LIMIT 5",
                "rw_callback_events_received",
            ),
            (
                "SELECT id FROM rw_callback_quarantine WHERE received_ms < ?1 ORDER BY received_ms LIMIT 5",
                "rw_callback_quarantine_received",
            ),
            (
                "SELECT rowid FROM rw_callback_events WHERE tenant = ?1 ORDER BY received_ms LIMIT 5",
                "rw_callback_events_by_tenant",
            ),
            (
                "SELECT id FROM rw_callback_quarantine WHERE tenant = ?1 ORDER BY received_ms LIMIT 5",
                "rw_callback_quarantine_by_tenant",
            ),
        ] {
            let plan = plan(&ledger, sql, &[Arg::Int(0)]).await;
            assert!(plan.contains(index), "{sql}\n{plan}");
        }
    }

    /// A file created by this version uses `auto_vacuum = INCREMENTAL`, and the space of purged
    /// rows goes back to the file system: the file shrinks.
    #[tokio::test]
    async fn purged_space_is_given_back_to_the_file_system() {
        use crate::ledger::conformance::{keep, new_operation, update_of};
        use crate::ledger::{Ledger, RetentionLedger};
        use crate::state::State;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let ledger = SqliteLedger::open(&path).await.unwrap();
        let mode = ledger
            .read(|conn| conn.scalar_i64("PRAGMA auto_vacuum", &[]))
            .await
            .unwrap();
        assert_eq!(mode, Some(2), "INCREMENTAL");
        for i in 0..300 {
            let mut new = new_operation("t", &format!("op-{i}"), &format!("intent-{i}"));
            let mut request = (*new.request).clone();
            request.body = bytes::Bytes::from(vec![b'x'; 4096]);
            new.request = std::sync::Arc::new(request);
            let r = ledger.create_or_get(new).await.unwrap().into_record();
            let done = update_of(&r, keep(&r, State::Succeeded, 10), "done");
            ledger.apply(done).await.unwrap().unwrap();
        }
        let pages = |l: &SqliteLedger| {
            let l = l.clone();
            async move {
                l.read(|conn| conn.scalar_i64("PRAGMA page_count", &[]))
                    .await
                    .unwrap()
                    .unwrap()
            }
        };
        let before = pages(&ledger).await;
        let purged = ledger
            .purge(PurgeBatch {
                stage: PurgeStage::Identity,
                scope: PurgeScope::FinishedBefore {
                    contract: "stripe-v1".into(),
                    before_ms: 11,
                },
                limit: 1000,
                dry_run: false,
                now_ms: 20,
            })
            .await
            .unwrap();
        assert_eq!(purged.rows, 300);
        assert!(purged.bytes >= 300 * 4096, "{purged:?}");
        let mut reclaimed = 0;
        loop {
            let step = ledger.reclaim_space().await.unwrap();
            if step == 0 {
                break;
            }
            reclaimed += step;
        }
        let after = pages(&ledger).await;
        assert!(reclaimed >= 300 * 4096, "{reclaimed}");
        assert!(after < before / 2, "{before} pages before, {after} after");
    }
}
