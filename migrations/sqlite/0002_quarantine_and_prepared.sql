-- recoverable-write ledger, SQLite schema v2.
--
-- Quarantine: a row that cannot be decoded (garbage in a column, a value a newer version wrote)
-- is set aside by the claim or sweep that met it, with the decode error, instead of failing
-- every recovery pass. Claims and sweeps skip rows with a quarantine reason.
ALTER TABLE rw_operations ADD COLUMN quarantine_reason TEXT;
ALTER TABLE rw_operations ADD COLUMN quarantined_ms INTEGER;

CREATE INDEX rw_operations_quarantined
    ON rw_operations (quarantined_ms)
    WHERE quarantine_reason IS NOT NULL;

-- PREPARED rows waiting for an owner (`claim_prepared`): `state = 'PREPARED' AND created_ms <= ?`,
-- oldest first. Partial, so the scan is proportional to unsent work only.
CREATE INDEX rw_operations_prepared
    ON rw_operations (created_ms)
    WHERE state = 'PREPARED';
