-- recoverable-write ledger, PostgreSQL schema v2 (runs with `search_path` set to the ledger's
-- schema, see 0001).
--
-- Quarantine: a row that cannot be decoded (garbage in a column, a value a newer version wrote)
-- is set aside by the claim or sweep that met it, with the decode error, instead of failing
-- every recovery pass. Claims and sweeps skip rows with a quarantine reason.
ALTER TABLE rw_operations
    ADD COLUMN quarantine_reason TEXT,
    ADD COLUMN quarantined_ms    BIGINT;

CREATE INDEX rw_operations_quarantined
    ON rw_operations (quarantined_ms)
    WHERE quarantine_reason IS NOT NULL;

-- PREPARED rows waiting for an owner (`claim_prepared`): `state = 'PREPARED' AND created_ms <= now
-- - age ORDER BY created_ms, seq`. Partial, so the scan is proportional to unsent work only.
CREATE INDEX rw_operations_prepared
    ON rw_operations (created_ms, seq)
    WHERE state = 'PREPARED';
