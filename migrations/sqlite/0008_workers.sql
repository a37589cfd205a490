-- recoverable-write ledger, SQLite schema v8: the recoverer workers' heartbeats.
--
-- Every recoverer worker replaces its own row after each pass (`ListingLedger::record_heartbeat`),
-- so the operators' tools can say whether the engine is running: the workers alive (a beat
-- within 3 of the intervals the worker promises), the last pass, what it claimed, its errors.
-- One row per worker id; rows of workers silent for 7 days are deleted by the next beat of any
-- worker, so the table holds the fleet of the last week, never a history.
CREATE TABLE rw_workers (
    worker_id         TEXT PRIMARY KEY,
    host              TEXT NOT NULL,
    version           TEXT NOT NULL,
    started_ms        INTEGER NOT NULL,
    interval_ms       INTEGER NOT NULL,
    pass_started_ms   INTEGER NOT NULL,
    pass_finished_ms  INTEGER NOT NULL,
    claimed_last_pass INTEGER NOT NULL,
    claimed_total     INTEGER NOT NULL,
    errors            INTEGER NOT NULL,
    last_error        TEXT
) STRICT;

-- The prune on every beat (`pass_finished_ms < ?`) and the listing, most recent beat first.
CREATE INDEX rw_workers_by_beat ON rw_workers (pass_finished_ms);
