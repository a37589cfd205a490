-- recoverable-write ledger, SQLite schema v15 (the numbers name one schema version across the
-- backends; 12 and 13 are PostgreSQL's alone, 14 was withdrawn before any release): the review
-- queue's indexes leave out the two states every request passes through (issue 29).
--
-- Every request inserts its row as IN_FLIGHT and, when the vendor answers, updates it to
-- SUCCEEDED (or another state). `rw_operations_by_state` and `rw_operations_by_tenant_state`
-- (0003) held every row, so each request wrote an entry into both at its claim, and moved
-- both at its result: pages of two more b-trees in each of the request's two commits, for
-- listings and counts that read the open states and the rejected ones, never IN_FLIGHT rows
-- through them and rarely the succeeded history. Partial, they hold the rows a queue reads:
-- - the listings by state(s) other than IN_FLIGHT and SUCCEEDED, and the counts of the open
--   states, read them as before (the statements carry the predicate as a term of their own,
--   see `QUEUE_INDEX_PREDICATE` in src/ledger/query.rs: SQLite uses a partial index only then);
-- - IN_FLIGHT rows are counted and listed from `rw_operations_in_flight_lease` (0001), whose
--   rows are exactly the requests in flight;
-- - a listing of SUCCEEDED rows reads the table, like a listing of every state already did.
DROP INDEX rw_operations_by_state;
CREATE INDEX rw_operations_by_state
    ON rw_operations (state, created_ms)
    WHERE state NOT IN ('IN_FLIGHT', 'SUCCEEDED');

DROP INDEX rw_operations_by_tenant_state;
CREATE INDEX rw_operations_by_tenant_state
    ON rw_operations (tenant, state, created_ms)
    WHERE state NOT IN ('IN_FLIGHT', 'SUCCEEDED');
