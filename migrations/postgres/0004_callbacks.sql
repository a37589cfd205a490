-- recoverable-write ledger, PostgreSQL schema v4 (runs with `search_path` set to the ledger's
-- schema, see 0001): vendor callbacks (webhooks).
--
-- Dedupe: one row per vendor event ever accepted, keyed by (vendor, event id); a redelivery of
-- the same event finds it and changes nothing. The row is inserted in the same transaction as
-- the state change and the evidence the event caused (`Ledger::apply_callback`), or as its
-- quarantine entry (`Ledger::quarantine_callback`). `received_ms` is there for retention: rows
-- are kept at least as long as the vendor may redeliver. The payload is never stored.
CREATE TABLE rw_callback_events (
    vendor        TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    event_type    TEXT    NOT NULL,
    tenant        TEXT,
    operation_id  TEXT,
    -- What the event did: 'applied', 'appended' (late evidence) or 'quarantined'.
    outcome       TEXT    NOT NULL,
    received_ms   BIGINT  NOT NULL,
    PRIMARY KEY (vendor, event_id)
);

CREATE INDEX rw_callback_events_received
    ON rw_callback_events (received_ms);

-- Verified events that matched no operation of their tenant (or named an unknown account):
-- kept for a human, never applied, never dropped.
CREATE TABLE rw_callback_quarantine (
    id            BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    vendor        TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    event_type    TEXT    NOT NULL,
    tenant        TEXT,
    -- What the event was to be matched by, e.g. 'remote_ref' and its value.
    match_by      TEXT,
    match_value   TEXT,
    -- Why it was quarantined (no operation, unknown account, ...). Never the payload.
    reason        TEXT    NOT NULL,
    -- The classified observation it carried, JSON.
    evidence      TEXT,
    received_ms   BIGINT  NOT NULL
);

-- Matching a callback by the vendor's reference (`Ledger::find_by_remote_ref`) or by the key
-- echoed back (`Ledger::find_by_idempotency_key`), within one tenant.
CREATE INDEX rw_operations_by_remote_ref
    ON rw_operations (tenant, remote_ref)
    WHERE remote_ref IS NOT NULL;

CREATE INDEX rw_operations_by_idempotency_key
    ON rw_operations (tenant, idempotency_key);
