//! The embedded migrations, run at connect under a transaction-scoped advisory lock per schema.

use sha2::{Digest, Sha256};
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgConnection, PgPool};

use super::unavailable;
use crate::ledger::LedgerError;

/// The advisory lock key that serializes migrations of one schema: the first 8 bytes of a
/// SHA-256 over a crate-specific prefix and the schema name, the same in every process.
fn migration_lock_key(schema: &str) -> i64 {
    let digest = Sha256::digest(format!("recoverable-write/migrate/{schema}").as_bytes());
    let mut key = [0_u8; 8];
    key.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(key)
}

pub(super) async fn migrate(pool: &PgPool, schema: &str) -> Result<(), LedgerError> {
    let mut migrator = sqlx::migrate!("./migrations/postgres");
    // Our transaction-scoped advisory lock replaces sqlx's session lock, which is per database
    // (it would serialize unrelated schemas) and outlives a crashed migration's transaction.
    migrator.set_locking(false);
    migrator.dangerous_set_table_name(format!("\"{schema}\".rw_schema_migrations"));

    let mut tx = pool.begin().await.map_err(unavailable)?;
    match migrate_in(&mut tx, schema, &migrator).await {
        Ok(()) => tx.commit().await.map_err(unavailable),
        Err(e) => {
            // Release the advisory lock now; a failed rollback ends with the connection.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn migrate_in(
    tx: &mut PgConnection,
    schema: &str,
    migrator: &sqlx::migrate::Migrator,
) -> Result<(), LedgerError> {
    // Processes migrating at once queue here; the later ones find the work done. The lock is
    // released by the commit or rollback, even if this process dies.
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(migration_lock_key(schema))
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
    // Look before creating: `CREATE SCHEMA IF NOT EXISTS` still needs the CREATE privilege on
    // the database, which a role that only owns an existing schema may lack.
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&mut *tx)
            .await
            .map_err(unavailable)?;
    if !exists {
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
    }
    // The migration files name their tables unqualified: they land in this schema.
    sqlx::query(AssertSqlSafe(format!(
        "SET LOCAL search_path TO \"{schema}\""
    )))
    .execute(&mut *tx)
    .await
    .map_err(unavailable)?;
    // Each migration runs in a savepoint inside this transaction. `run_direct` is `run` without
    // the `Acquire` indirection, whose higher-ranked bound makes the future unusable in
    // `tokio::spawn` (sqlx's own comment on `run_direct` says as much).
    migrator
        .run_direct(None, tx, false)
        .await
        .map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(e)
            | sqlx::migrate::MigrateError::ExecuteMigration(e, _) => unavailable(e),
            other => LedgerError::Config(format!("ledger schema migration failed: {other}")),
        })
}
