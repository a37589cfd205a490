-- recoverable-write ledger, SQLite schema v3.
--
-- Listing (`Ledger::list`, `count_by_state`, `oldest`): an operator's queue, e.g. the review
-- queue `state = 'MANUAL_REVIEW' ORDER BY created_ms, rowid`, for one tenant or all, and counts
-- of the open states. Keyed by state first, so a listing or count of open work reads only that
-- state's range, never the terminal rows that make up the bulk of the table. The rowid is the
-- implicit last column of every index: the listing's tie-break comes for free.
CREATE INDEX rw_operations_by_state
    ON rw_operations (state, created_ms);

CREATE INDEX rw_operations_by_tenant_state
    ON rw_operations (tenant, state, created_ms);
