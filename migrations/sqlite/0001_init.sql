-- recoverable-write ledger, SQLite schema v1.
--
-- One row per operation (a business intent) and an append-only evidence log. Every state change
-- is a conditional UPDATE on (state, generation, version); see src/ledger/sqlite.rs.
-- Times are milliseconds since the Unix epoch, supplied by the caller.

CREATE TABLE rw_operations (
    tenant            TEXT    NOT NULL,
    operation_id      TEXT    NOT NULL,
    action            TEXT    NOT NULL,
    intent_ref        TEXT    NOT NULL,
    idempotency_key   TEXT    NOT NULL,
    payload_hash      TEXT    NOT NULL,
    -- The frozen request (credentials are never stored). Headers: JSON [[name, value], ...].
    request_method    TEXT    NOT NULL,
    request_url       TEXT    NOT NULL,
    request_headers   TEXT    NOT NULL,
    request_body      BLOB    NOT NULL,
    -- The contract and budget the operation started with, frozen.
    contract_name     TEXT    NOT NULL,
    contract_hash     TEXT    NOT NULL,
    budget_policy     TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    last_result       TEXT,
    generation        INTEGER NOT NULL DEFAULT 0,
    version           INTEGER NOT NULL DEFAULT 0,
    attempts_used     INTEGER NOT NULL DEFAULT 0,
    queries_used      INTEGER NOT NULL DEFAULT 0,
    may_have_applied  INTEGER NOT NULL DEFAULT 0,
    current_attempt   TEXT,
    lease_until_ms    INTEGER,
    next_check_ms     INTEGER,
    deadline_ms       INTEGER,
    remote_ref        TEXT,
    reason            TEXT,
    -- The first authoritative response (status, chosen headers as JSON, bounded body).
    response_status   INTEGER,
    response_headers  TEXT,
    response_body     BLOB,
    created_ms        INTEGER NOT NULL,
    updated_ms        INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation_id),
    -- The same approved intent can never become two operations.
    UNIQUE (tenant, action, intent_ref)
) STRICT;

-- Due recovery work: `state IN ('UNKNOWN','PROCESSING','RETRY_READY') AND next_check_ms <= ?`. Partial, so the
-- scan is proportional to due work, not to the history of finished operations. Queries must
-- repeat the WHERE term verbatim for SQLite to use it.
CREATE INDEX rw_operations_due
    ON rw_operations (next_check_ms)
    WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY');

-- Expired send leases: `state = 'IN_FLIGHT' AND lease_until_ms < ?`.
CREATE INDEX rw_operations_in_flight_lease
    ON rw_operations (lease_until_ms)
    WHERE state = 'IN_FLIGHT';

CREATE TABLE rw_evidence (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
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

CREATE INDEX rw_evidence_by_operation
    ON rw_evidence (tenant, operation_id, id);
