-- recoverable-write ledger, PostgreSQL schema v15 (runs with `search_path` set to the ledger's
-- schema, see 0001): the review queue's indexes leave out the two states every request passes
-- through (issue 29). Version 14 is not used: a grouped compare-and-swap numbered 14 was
-- measured and withdrawn before any release.
--
-- Every request inserts its row as IN_FLIGHT and, when the vendor answers, updates it to
-- SUCCEEDED (or another state). The state is indexed, so that update is never HOT, and every
-- index whose predicate the row meets gets an entry for the insert and another for the update.
-- `rw_operations_by_state` and `rw_operations_by_tenant_state` (0003) held every row: four
-- entries per request, for listings and counts that read the open states and the rejected
-- ones, never IN_FLIGHT rows through them and rarely the succeeded history. Partial, they hold
-- the rows a queue reads:
-- - the listings by state(s) other than IN_FLIGHT and SUCCEEDED, and the counts of the open
--   states, read them as before (the statements name the predicate, see
--   `QUEUE_INDEX_PREDICATE` in src/ledger/query.rs);
-- - IN_FLIGHT rows are counted and listed from `rw_operations_in_flight_lease` (0001), whose
--   rows are exactly the requests in flight;
-- - a listing of SUCCEEDED rows reads the table, like a listing of every state already did.
DROP INDEX rw_operations_by_state;
CREATE INDEX rw_operations_by_state
    ON rw_operations (state, created_ms, seq)
    WHERE state NOT IN ('IN_FLIGHT', 'SUCCEEDED');

DROP INDEX rw_operations_by_tenant_state;
CREATE INDEX rw_operations_by_tenant_state
    ON rw_operations (tenant, state, created_ms, seq)
    WHERE state NOT IN ('IN_FLIGHT', 'SUCCEEDED');
