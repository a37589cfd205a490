-- recoverable-write ledger, PostgreSQL schema v1.
--
-- Runs with `search_path` set to the ledger's schema (see src/ledger/postgres.rs), so the names
-- below are created in that schema; the crate's own statements are always schema-qualified.
--
-- One row per operation (a business intent) and an append-only evidence log. Every state change
-- is a conditional UPDATE on (state, generation, version). Times are milliseconds since the Unix
-- epoch: the database clock by default (ClockSource::Database), or the caller's.

CREATE TABLE rw_operations (
    -- Creation order: ties in the due-work order, and the order of swept rows.
    seq               BIGINT  GENERATED ALWAYS AS IDENTITY,
    tenant            TEXT    NOT NULL,
    operation_id      TEXT    NOT NULL,
    action            TEXT    NOT NULL,
    intent_ref        TEXT    NOT NULL,
    idempotency_key   TEXT    NOT NULL,
    payload_hash      TEXT    NOT NULL,
    -- The frozen request (credentials are never stored). Headers: JSON [[name, value], ...].
    -- JSON columns are TEXT written by serde_json (which escapes NUL; JSONB refuses \u0000).
    request_method    TEXT    NOT NULL,
    request_url       TEXT    NOT NULL,
    request_headers   TEXT    NOT NULL,
    request_body      BYTEA   NOT NULL,
    -- The contract and budget the operation started with, frozen.
    contract_name     TEXT    NOT NULL,
    contract_hash     TEXT    NOT NULL,
    budget_policy     TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    last_result       TEXT,
    generation        BIGINT  NOT NULL DEFAULT 0,
    version           BIGINT  NOT NULL DEFAULT 0,
    attempts_used     BIGINT  NOT NULL DEFAULT 0,
    queries_used      BIGINT  NOT NULL DEFAULT 0,
    -- Sticky: some attempt may have been applied by the vendor.
    may_have_applied  BOOLEAN NOT NULL DEFAULT FALSE,
    current_attempt   TEXT,
    lease_until_ms    BIGINT,
    next_check_ms     BIGINT,
    deadline_ms       BIGINT,
    remote_ref        TEXT,
    reason            TEXT,
    -- The first authoritative response (status, chosen headers, bounded body).
    response_status   INTEGER,
    response_headers  TEXT,
    response_body     BYTEA,
    created_ms        BIGINT  NOT NULL,
    updated_ms        BIGINT  NOT NULL,
    PRIMARY KEY (tenant, operation_id),
    -- The same approved intent can never become two operations.
    UNIQUE (tenant, action, intent_ref),
    UNIQUE (seq)
);

-- Due recovery work: `state IN ('UNKNOWN','PROCESSING','RETRY_READY') AND next_check_ms <= now ORDER BY
-- next_check_ms, seq`. Partial, so finished operations (the bulk of the table) are not in it:
-- the claim reads the index in order and stops after `limit` claimable rows.
CREATE INDEX rw_operations_due
    ON rw_operations (next_check_ms, seq)
    WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY');

-- Expired send leases: `state = 'IN_FLIGHT' AND lease_until_ms < now`.
CREATE INDEX rw_operations_in_flight_lease
    ON rw_operations (lease_until_ms)
    WHERE state = 'IN_FLIGHT';

CREATE TABLE rw_evidence (
    id            BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant        TEXT    NOT NULL,
    operation_id  TEXT    NOT NULL,
    attempt_id    TEXT,
    generation    BIGINT  NOT NULL,
    kind          TEXT    NOT NULL,
    from_state    TEXT,
    to_state      TEXT,
    -- The classified observation (tagged by "kind").
    evidence      TEXT,
    note          TEXT,
    at_ms         BIGINT  NOT NULL,
    FOREIGN KEY (tenant, operation_id) REFERENCES rw_operations (tenant, operation_id)
);

CREATE INDEX rw_evidence_by_operation
    ON rw_evidence (tenant, operation_id, id);
