-- recoverable-write ledger, SQLite schema v11: the evidence log without AUTOINCREMENT.
--
-- `AUTOINCREMENT` made every commit that appends evidence (every claim, every result) rewrite
-- the `sqlite_sequence` row of `rw_evidence`: one more page per commit in the WAL, carried by
-- the claim's fsync and copied back by the checkpointer (21 frames per lifecycle, 19 without
-- it). What it guaranteed beyond a plain rowid alias is that an id is never reused after the
-- row holding the largest one is deleted. Nothing needs that: an entry's id is compared only
-- with the ids of the same operation's entries (`EvidenceEntry::seq`, "position in the log of
-- this operation"); evidence rows are deleted only with their operation (retention's identity
-- stage, erasure), never one by one; a live operation's entries are all below the table's
-- largest id, and a new entry takes that id plus one, so its log stays increasing. Fencing
-- compares the operation's `version`, never an evidence id.
--
-- SQLite cannot drop `AUTOINCREMENT` in place: the table is rebuilt, every row copied with its
-- id, in the migration's transaction (all or nothing). `sqlite_sequence`'s row for the old
-- table goes with it.
CREATE TABLE rw_evidence_v11 (
    id            INTEGER PRIMARY KEY,
    tenant        TEXT    NOT NULL,
    operation_id  TEXT    NOT NULL,
    attempt_id    TEXT,
    generation    INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    from_state    TEXT,
    to_state      TEXT,
    -- The classified observation, JSON (tagged by "kind").
    evidence      TEXT,
    note          TEXT,
    at_ms         INTEGER NOT NULL,
    FOREIGN KEY (tenant, operation_id) REFERENCES rw_operations (tenant, operation_id)
) STRICT;

INSERT INTO rw_evidence_v11
    (id, tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence,
     note, at_ms)
SELECT id, tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence,
       note, at_ms
FROM rw_evidence;

DROP TABLE rw_evidence;

ALTER TABLE rw_evidence_v11 RENAME TO rw_evidence;

CREATE INDEX rw_evidence_by_operation
    ON rw_evidence (tenant, operation_id, id);

-- The activity charts' partial index (0010) goes with the old table: made again.
CREATE INDEX rw_evidence_state_changes
    ON rw_evidence (at_ms)
    WHERE kind = 'created' OR from_state <> to_state;
