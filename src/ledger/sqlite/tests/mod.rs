//! Unit tests of the SQLite ledger, by topic, and the helpers they share.

use super::*;
use conn::Conn;
use sql::*;
use writer::Finish;

mod connections;
mod detached;
mod durability;
mod evidence_rowid;
mod group_commit;
mod query_plans;
mod wal_frames;

/// The value of `pragma` on the writer's connection, between batches.
async fn writer_pragma(ledger: &SqliteLedger, pragma: &'static str) -> String {
    ledger
        .write(move |conn| {
            let rows = conn.rows_dynamic(pragma, &[])?;
            let v = match rows[0].try_get_at::<Option<String>>(0) {
                Ok(Some(s)) => s,
                _ => rows[0].try_get_at::<i64>(0).unwrap().to_string(),
            };
            Ok(Finish::Unchanged(v))
        })
        .await
        .unwrap()
}

/// The value of `pragma` on a reader's connection.
async fn reader_pragma(ledger: &SqliteLedger, pragma: &'static str) -> i64 {
    ledger
        .read(move |conn| conn.scalar_i64(pragma, &[]))
        .await
        .unwrap()
        .unwrap()
}

async fn count(ledger: &SqliteLedger, sql: &'static str) -> i64 {
    ledger
        .read(move |conn| conn.scalar_i64(sql, &[]))
        .await
        .unwrap()
        .unwrap()
}

/// A raw write through the writer thread: inserts a bare operation row named `id`.
fn insert_row(
    id: &'static str,
) -> impl Fn(&mut Conn) -> Result<Finish<()>, LedgerError> + Send + 'static {
    move |conn| {
        conn.execute(
            "INSERT INTO rw_operations (tenant, operation_id, action, intent_ref, \
             idempotency_key, payload_hash, request_method, request_url, \
             request_headers, request_body, contract_name, contract_hash, budget_policy, \
             state, created_ms, updated_ms) VALUES ('t', ?1, 'a', ?1, 'k', 'h', 'POST', \
             'http://v/', '[]', x'', 'c', 'h', '{}', 'PREPARED', 0, 0)",
            &[rusqlite::types::Value::Text(id.to_owned())],
        )?;
        Ok(Finish::Commit(()))
    }
}

/// Runs `writes` (futures that each queue their write when first polled, such as a
/// `tokio::join!` of `SqliteLedger::write` calls) so that they are all committed in one batch:
/// the writer is held until every one was queued.
async fn in_one_batch<F: std::future::Future>(ledger: &SqliteLedger, writes: F) -> F::Output {
    let gate = ledger.hold_writer_for_tests().await.unwrap();
    let release = async move {
        // Pending once: by the time this runs again, `writes` was polled and queued all.
        tokio::task::yield_now().await;
        drop(gate);
    };
    let (out, ()) = tokio::join!(writes, release);
    out
}

/// The plan of `explain` (an `EXPLAIN QUERY PLAN` statement) with `args`.
async fn plan_with(
    ledger: &SqliteLedger,
    explain: String,
    args: Vec<rusqlite::types::Value>,
) -> String {
    let rows = ledger
        .read(move |conn| conn.rows_dynamic(&explain, &args))
        .await
        .unwrap();
    rows.iter()
        .map(|r| r.try_get::<String>("detail").unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The plan of a listing or counting statement, its arguments bound.
pub(super) async fn plan_of(ledger: &SqliteLedger, sql: crate::ledger::query::Sql) -> String {
    let explain = format!("EXPLAIN QUERY PLAN {}", sql.text);
    plan_with(ledger, explain, values(sql.args)).await
}

/// The claim of send rights on the fresh row of `new`, as the layer builds it.
#[cfg(feature = "test-util")]
fn first_claim(new: &NewOperation) -> Update {
    use crate::state::{Event, Tick, transition};
    let now = new.now_ms;
    let clock = Tick {
        now_ms: now,
        jitter: 0.0,
    };
    let t = transition(&new.snapshot(), &Event::ClaimSend, clock).unwrap();
    new.first_update(
        &t,
        Some(AttemptId::generate()),
        Some(now + 30_000),
        crate::ledger::conformance::evidence_entry("attempt_registered", now),
        now,
    )
}
