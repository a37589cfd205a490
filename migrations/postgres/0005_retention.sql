-- recoverable-write ledger, PostgreSQL schema v5 (runs with `search_path` set to the ledger's
-- schema, see 0001): retention.
--
-- Two stages, both measured from when an operation finished (`SUCCEEDED` or `REJECTED`; a
-- finished row's `updated_ms` never moves again): the details stage drops the request headers
-- and body, the stored response, the reason and the evidence details, and stamps
-- `details_removed_ms`; the identity stage deletes the row and its evidence. Operations in any
-- other state are never purged. See `Ledger::purge` and src/retention.rs.
ALTER TABLE rw_operations ADD COLUMN details_removed_ms BIGINT;

-- The details stage's work, per contract, oldest finish first: only finished rows that still
-- carry their details, so the scan is proportional to what is due, never to the history.
CREATE INDEX rw_operations_details_due
    ON rw_operations (contract_name, updated_ms, seq)
    WHERE state IN ('SUCCEEDED', 'REJECTED') AND details_removed_ms IS NULL
      AND quarantine_reason IS NULL;

-- The identity stage's work, per contract, oldest finish first; also the index the list of
-- contracts with finished rows is read from (one probe per name).
CREATE INDEX rw_operations_finished
    ON rw_operations (contract_name, updated_ms, seq)
    WHERE state IN ('SUCCEEDED', 'REJECTED') AND quarantine_reason IS NULL;

-- Retention and erasure of callback records: by age, and by tenant.
CREATE INDEX rw_callback_quarantine_received
    ON rw_callback_quarantine (received_ms);

CREATE INDEX rw_callback_quarantine_by_tenant
    ON rw_callback_quarantine (tenant);

CREATE INDEX rw_callback_events_by_tenant
    ON rw_callback_events (tenant);
