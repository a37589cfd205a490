//! The SQLite schema migrations: embedded in the crate (`migrations/sqlite/`), run at open.
//!
//! Their bookkeeping is the table `rw_schema_migrations`, in the format of sqlx's migrator
//! (version, description, success, SHA-384 checksum of the script, execution time), which the
//! ledger used before it drove SQLite itself: a file migrated by either is read by the other,
//! and the ledger may share a file with an application's own sqlx migrations (their table is
//! `_sqlx_migrations`).

use std::time::Instant;

use rusqlite::types::Value;
use sha2::{Digest, Sha384};

use super::conn::{Conn, unavailable};
use crate::ledger::LedgerError;

/// One embedded migration.
pub(super) struct Migration {
    /// Its number, from its file name.
    pub(super) version: i64,
    /// Its file name's words, as sqlx wrote them (`quarantine and prepared`).
    pub(super) description: &'static str,
    /// The script.
    pub(super) sql: &'static str,
}

impl Migration {
    /// What sqlx recorded as its checksum: the SHA-384 of the script.
    pub(super) fn checksum(&self) -> Vec<u8> {
        Sha384::digest(self.sql.as_bytes()).to_vec()
    }
}

/// An embedded migration: its number, its description and its file under `migrations/sqlite/`.
macro_rules! migration {
    ($version:literal, $description:literal, $file:literal) => {
        Migration {
            version: $version,
            description: $description,
            sql: include_str!(concat!("../../../migrations/sqlite/", $file)),
        }
    };
}

/// Every migration, in order.
pub(super) const MIGRATIONS: &[Migration] = &[
    migration!(1, "init", "0001_init.sql"),
    migration!(
        2,
        "quarantine and prepared",
        "0002_quarantine_and_prepared.sql"
    ),
    migration!(3, "listing", "0003_listing.sql"),
    migration!(4, "callbacks", "0004_callbacks.sql"),
    migration!(5, "retention", "0005_retention.sql"),
    migration!(6, "callback probes", "0006_callback_probes.sql"),
    migration!(7, "contradictions", "0007_contradictions.sql"),
    migration!(8, "workers", "0008_workers.sql"),
    migration!(10, "activity", "0010_activity.sql"),
    migration!(11, "evidence rowid", "0011_evidence_rowid.sql"),
    migration!(15, "queue indexes", "0015_queue_indexes.sql"),
];

const TABLE: &str = "
CREATE TABLE IF NOT EXISTS rw_schema_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    success BOOLEAN NOT NULL,
    checksum BLOB NOT NULL,
    execution_time BIGINT NOT NULL
)";

/// Brings the schema up to date. Holding the write lock (`BEGIN IMMEDIATE`) for the whole run
/// makes a concurrent open by another process wait (busy timeout) instead of applying the same
/// migration twice; either every pending migration is applied, or none.
pub(super) fn run(conn: &mut Conn) -> Result<(), LedgerError> {
    conn.run("BEGIN IMMEDIATE").map_err(unavailable)?;
    match apply_pending(conn) {
        Ok(()) => conn.run("COMMIT").map_err(unavailable),
        Err(e) => {
            // Nothing of a failed run is kept.
            let _ = conn.run("ROLLBACK");
            Err(e)
        }
    }
}

fn apply_pending(conn: &mut Conn) -> Result<(), LedgerError> {
    conn.raw().execute_batch(TABLE).map_err(unavailable)?;
    let applied = {
        let mut stmt = conn
            .raw()
            .prepare("SELECT version, checksum, success FROM rw_schema_migrations ORDER BY version")
            .map_err(unavailable)?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    row.get::<_, bool>(2)?,
                ))
            })
            .map_err(unavailable)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(unavailable)?
    };
    for (version, checksum, success) in &applied {
        if !success {
            return Err(schema(format!(
                "migration {version} was left unfinished (dirty); repair the file by hand"
            )));
        }
        match MIGRATIONS.iter().find(|m| m.version == *version) {
            None => {
                return Err(schema(format!(
                    "the file was migrated to version {version} by a newer version of \
                     recoverable-write, which this one does not know"
                )));
            }
            Some(m) if m.checksum() != *checksum => {
                return Err(schema(format!(
                    "migration {version} ({}) applied to this file differs from the one \
                     embedded in this version",
                    m.description
                )));
            }
            Some(_) => {}
        }
    }
    for m in MIGRATIONS {
        if applied.iter().any(|(v, ..)| *v == m.version) {
            continue;
        }
        let started = Instant::now();
        conn.raw().execute_batch(m.sql).map_err(unavailable)?;
        let elapsed = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
        conn.execute(
            "INSERT INTO rw_schema_migrations (version, description, success, checksum, execution_time)
             VALUES (?1, ?2, TRUE, ?3, ?4)",
            &[
                Value::Integer(m.version),
                Value::Text(m.description.to_owned()),
                Value::Blob(m.checksum()),
                Value::Integer(elapsed),
            ],
        )?;
    }
    Ok(())
}

fn schema(detail: String) -> LedgerError {
    LedgerError::Config(format!("ledger schema migration failed: {detail}"))
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    /// The embedded list is every file of `migrations/sqlite/`, numbered and described as sqlx
    /// numbered and described them (the bookkeeping of files migrated before must match).
    #[test]
    fn every_migration_file_is_embedded_with_sqlx_numbering() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        assert_eq!(files.len(), MIGRATIONS.len());
        for (file, m) in files.iter().zip(MIGRATIONS) {
            let stem = file.trim_end_matches(".sql");
            let (number, words) = stem.split_once('_').unwrap();
            assert_eq!(number.parse::<i64>().unwrap(), m.version, "{file}");
            assert_eq!(words.replace('_', " "), m.description, "{file}");
            let on_disk = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
            assert_eq!(on_disk, m.sql, "{file}");
        }
    }
}
