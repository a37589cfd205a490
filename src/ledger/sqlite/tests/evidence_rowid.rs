//! Migration 0011 on a file that holds a ledger: the evidence log is rebuilt without
//! `AUTOINCREMENT`, every entry kept with its id, and an operation's log stays increasing.

use super::*;
use crate::ledger::conformance::{evidence_entry, keep, new_operation, update_of};

/// The evidence table as migrations 0001–0007 left it, with the sequence ahead of the largest
/// id (as after the newest entries were purged), and the file's bookkeeping back at version 7.
const BACK_TO_V7: &str = "
BEGIN IMMEDIATE;
CREATE TABLE rw_evidence_v7 (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant        TEXT    NOT NULL,
    operation_id  TEXT    NOT NULL,
    attempt_id    TEXT,
    generation    INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    from_state    TEXT,
    to_state      TEXT,
    evidence      TEXT,
    note          TEXT,
    at_ms         INTEGER NOT NULL,
    FOREIGN KEY (tenant, operation_id) REFERENCES rw_operations (tenant, operation_id)
) STRICT;
INSERT INTO rw_evidence_v7 SELECT * FROM rw_evidence;
DROP TABLE rw_evidence;
ALTER TABLE rw_evidence_v7 RENAME TO rw_evidence;
CREATE INDEX rw_evidence_by_operation ON rw_evidence (tenant, operation_id, id);
UPDATE sqlite_sequence SET seq = seq + 100 WHERE name = 'rw_evidence';
DELETE FROM rw_schema_migrations WHERE version = 11;
COMMIT;";

#[tokio::test]
async fn migration_0010_keeps_every_entry_and_each_log_stays_increasing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let ledger = SqliteLedger::open(&path).await.unwrap();
    let mut rows = Vec::new();
    for i in 0..3 {
        let r = ledger
            .create_or_get(new_operation("t", &format!("op-{i}"), &format!("i-{i}")))
            .await
            .unwrap()
            .into_record();
        let r = ledger
            .apply(update_of(&r, keep(&r, State::InFlight, 5), "claim"))
            .await
            .unwrap()
            .unwrap();
        ledger
            .append_evidence(&r.tenant, &r.operation_id, evidence_entry("note", 6))
            .await
            .unwrap();
        rows.push(r);
    }
    let mut before = Vec::new();
    for r in &rows {
        before.push(ledger.evidence(&r.tenant, &r.operation_id).await.unwrap());
    }
    drop(ledger);

    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.busy_timeout(Duration::from_secs(10)).unwrap();
    raw.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    raw.execute_batch(BACK_TO_V7).unwrap();
    let sequence: i64 = raw
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'rw_evidence'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    let largest: i64 = raw
        .query_row("SELECT MAX(id) FROM rw_evidence", [], |row| row.get(0))
        .unwrap();
    assert_eq!(sequence, largest + 100, "the file is back at version 7");
    drop(raw);

    let ledger = SqliteLedger::open(&path).await.unwrap();
    for (r, before) in rows.iter().zip(&before) {
        let after = ledger.evidence(&r.tenant, &r.operation_id).await.unwrap();
        assert_eq!(&after, before, "every entry kept, with its id");
        assert_eq!(after.len(), 3);
    }
    let table = count(
        &ledger,
        "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'rw_evidence' AND sql LIKE '%AUTOINCREMENT%'",
    )
    .await;
    assert_eq!(table, 0, "the rebuilt table has no AUTOINCREMENT");
    let sequence = count(
        &ledger,
        "SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'rw_evidence'",
    )
    .await;
    assert_eq!(sequence, 0, "no sequence row is kept (or rewritten) for it");
    assert_eq!(
        count(
            &ledger,
            "SELECT COUNT(*) FROM rw_schema_migrations WHERE version = 11 AND success"
        )
        .await,
        1
    );
    // A new entry follows every entry of its operation's log.
    let r = &rows[1];
    ledger
        .append_evidence(&r.tenant, &r.operation_id, evidence_entry("later", 7))
        .await
        .unwrap();
    let log = ledger.evidence(&r.tenant, &r.operation_id).await.unwrap();
    assert_eq!(log.len(), 4);
    assert!(log.windows(2).all(|w| w[0].seq < w[1].seq), "{log:?}");
    assert_eq!(log[3].seq, largest + 1);
    // The log is still read through its index.
    let plan = plan_with(
        &ledger,
        "EXPLAIN QUERY PLAN SELECT id FROM rw_evidence \
         WHERE tenant = ?1 AND operation_id = ?2 AND ?3 = ?3 ORDER BY id"
            .to_owned(),
        vec![0.into(), 0.into(), 0.into()],
    )
    .await;
    assert!(plan.contains("rw_evidence_by_operation"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "{plan}");
}
