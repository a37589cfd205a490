//! Large ledgers made quickly (shared by `recovery_scan` and `recovery_throughput`): rows
//! inserted by one `INSERT ... SELECT` over a recursive CTE in one transaction, through a raw
//! sqlx connection at `synchronous=OFF`, in a file the crate's ledger migrated.
#![allow(dead_code)]

use sqlx::Connection as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

/// Fills `rows` finished operations, 10 due `UNKNOWN` rows (`op-due-*`) and 10 rows the sweep
/// benchmark uses (`op-sweep-*`, finished until it resets them).
pub const FILL: &str = "
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
INSERT INTO rw_operations (
    tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
    request_method, request_url, request_headers, request_body,
    contract_name, contract_hash, budget_policy,
    state, last_result, generation, version, attempts_used, queries_used, may_have_applied,
    current_attempt, lease_until_ms, next_check_ms, deadline_ms, remote_ref, reason,
    response_status, response_headers, response_body, created_ms, updated_ms
)
SELECT 'tenant-a', printf('op-%08d', i), 'create_ticket', printf('intent-%08d', i),
       printf('%08d-0000-4000-8000-000000000000', i),
       printf('%064d', i),
       'POST', 'http://vendor.test/tickets',
       '[[\"content-type\",\"application/json\"]]',
       CAST('{\"device_id\":\"E17\",\"priority\":\"P2\"}' AS BLOB),
       'default', printf('%064d', 0), ?2,
       CASE WHEN i % 10 = 0 THEN 'REJECTED' ELSE 'SUCCEEDED' END,
       CASE WHEN i % 10 = 0 THEN 'REJECTED' ELSE 'SUCCEEDED' END,
       1, 2, 1, 0, CASE WHEN i % 10 = 0 THEN 0 ELSE 1 END,
       NULL, NULL, NULL, 1700000060000 + i, printf('W%d', i), NULL,
       CASE WHEN i % 10 = 0 THEN 400 ELSE 201 END,
       '[[\"content-type\",\"application/json\"]]', CAST('{\"id\":\"W1\"}' AS BLOB),
       1700000000000 + i, 1700000000000 + i
FROM n";

/// Turns every row of the file into an `UNKNOWN` operation due now: the state a vendor outage
/// leaves behind (the first attempt sent, its answer lost). Its window ends an hour from
/// `now_ms`, no query used yet, the request's URL `url`.
pub const MAKE_UNKNOWN: &str = "
UPDATE rw_operations SET state = 'UNKNOWN', last_result = NULL, next_check_ms = 0,
       lease_until_ms = NULL, current_attempt = NULL, deadline_ms = ?1 + 3600000,
       queries_used = 0, attempts_used = 1, may_have_applied = 1, remote_ref = NULL,
       response_status = NULL, response_headers = NULL, response_body = NULL,
       request_url = ?2, created_ms = ?1, updated_ms = ?1";

pub async fn raw(path: &std::path::Path) -> SqliteConnection {
    SqliteConnection::connect_with(
        &SqliteConnectOptions::new()
            .filename(path)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Off),
    )
    .await
    .expect("raw connection")
}

/// `rows` `UNKNOWN` operations (tenant `tenant-a`, ids `op-00000001`...) in a fresh ledger file
/// at `path`, made by [`FILL`] then [`MAKE_UNKNOWN`] (see there).
pub async fn sqlite_unknown(path: &std::path::Path, rows: u64, url: &str, now_ms: i64) {
    use sqlx::Connection;
    recoverable_write::SqliteLedger::open_with(
        path,
        recoverable_write::ledger::SqliteLedgerOptions::new(),
    )
    .await
    .expect("create ledger")
    .close()
    .await;
    let policy =
        serde_json::to_string(&recoverable_write::BudgetPolicy::default()).expect("policy json");
    let mut conn = raw(path).await;
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query(FILL)
        .bind(rows as i64)
        .bind(policy)
        .execute(&mut *tx)
        .await
        .expect("fill");
    sqlx::query(MAKE_UNKNOWN)
        .bind(now_ms)
        .bind(url)
        .execute(&mut *tx)
        .await
        .expect("unknown");
    tx.commit().await.expect("commit");
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await
        .expect("checkpoint");
    conn.close().await.expect("close");
}

/// `rows` `UNKNOWN` operations, as [`sqlite_unknown`] makes them, in a fresh PostgreSQL schema
/// `schema` (dropped first) of a ledger with a pool of `pool` connections.
#[cfg(feature = "postgres")]
pub async fn pg_unknown(
    url: &str,
    schema: &str,
    pool: u32,
    rows: u64,
    request_url: &str,
    now_ms: i64,
) -> recoverable_write::ledger::PostgresLedger {
    use recoverable_write::ledger::{PostgresLedger, PostgresLedgerOptions};
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&mut conn)
    .await
    .expect("drop old schema");
    conn.close().await.expect("close");
    let options = PostgresLedgerOptions::new()
        .schema(schema.to_owned())
        .expect("schema")
        .max_connections(pool);
    let ledger = PostgresLedger::connect_with(url, options)
        .await
        .expect("connect ledger");
    let policy =
        serde_json::to_string(&recoverable_write::BudgetPolicy::default()).expect("policy json");
    let fill = format!(
        "INSERT INTO \"{schema}\".rw_operations (
            tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
            request_method, request_url, request_headers, request_body,
            contract_name, contract_hash, budget_policy, state, last_result,
            generation, version, attempts_used, queries_used, may_have_applied,
            next_check_ms, deadline_ms, created_ms, updated_ms)
         SELECT 'tenant-a', 'op-' || lpad(i::text, 8, '0'), 'create_ticket',
                'intent-' || lpad(i::text, 8, '0'),
                md5(i::text), md5('h' || i::text), 'POST', $3,
                '[[\"content-type\",\"application/json\"]]',
                convert_to('{{\"device_id\":\"E17\",\"priority\":\"P2\"}}', 'UTF8'),
                'default', repeat('0', 64), $1, 'UNKNOWN', NULL,
                1, 2, 1, 0, TRUE, 0, $4 + 3600000, $4, $4
         FROM generate_series(1, $2::bigint) AS i"
    );
    sqlx::query(sqlx::AssertSqlSafe(fill))
        .bind(policy)
        .bind(rows as i64)
        .bind(request_url)
        .bind(now_ms)
        .execute(ledger.pool())
        .await
        .expect("fill");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ANALYZE \"{schema}\".rw_operations"
    )))
    .execute(ledger.pool())
    .await
    .expect("analyze");
    ledger
}
