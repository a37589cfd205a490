-- recoverable-write ledger, PostgreSQL schema v8 (runs with `search_path` set to the ledger's
-- schema, see 0001): the recoverer workers' heartbeats.
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
    started_ms        BIGINT NOT NULL,
    interval_ms       BIGINT NOT NULL,
    pass_started_ms   BIGINT NOT NULL,
    pass_finished_ms  BIGINT NOT NULL,
    claimed_last_pass BIGINT NOT NULL,
    claimed_total     BIGINT NOT NULL,
    errors            BIGINT NOT NULL,
    last_error        TEXT
);

-- The prune on every beat (`pass_finished_ms < $1`) and the listing, most recent beat first.
CREATE INDEX rw_workers_by_beat ON rw_workers (pass_finished_ms);
