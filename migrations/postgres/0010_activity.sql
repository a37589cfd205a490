-- recoverable-write ledger, PostgreSQL schema v10 (runs with `search_path` set to the ledger's
-- schema, see 0001): activity over time.
--
-- The review page's charts (`ListingLedger::activity`) count, per interval of the last day,
-- the operations created, finished and escalated to review, from the evidence log's own times.
-- Partial: only the entries that change a state (and the `created` entries), by time, so the
-- day's changes are one range of this index and never a scan of the whole log; the notes,
-- claims for recovery and late evidence that change no state are not in it.
CREATE INDEX rw_evidence_state_changes
    ON rw_evidence (at_ms)
    WHERE kind = 'created' OR from_state <> to_state;
