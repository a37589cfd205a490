-- recoverable-write ledger, SQLite schema v7: contradictions of a final state.
--
-- `SUCCEEDED` and `REJECTED` are final: nothing moves an operation out of them. A verified
-- callback that arrives afterwards and says otherwise (a success after `REJECTED`, a failure
-- after `SUCCEEDED`, another vendor reference than the recorded one) is appended to the
-- operation's evidence as a `contradiction` entry, and the row is marked with the time of the
-- first one until a person acknowledges it (`Ledger::acknowledge_contradiction`). The mark is
-- what the review queue lists (`OperationQuery::contradicted`): without it, a contradiction
-- would be one line in the log of a finished operation that nobody opens again.
ALTER TABLE rw_operations ADD COLUMN contradiction_ms INTEGER;

-- The contradicted operations, across tenants and for one tenant, in listing order. Partial:
-- only marked rows (a handful) are in them, so they cost nothing on the write path of the
-- others and their reads do not grow with the history.
CREATE INDEX rw_operations_contradicted
    ON rw_operations (created_ms)
    WHERE contradiction_ms IS NOT NULL;

CREATE INDEX rw_operations_contradicted_by_tenant
    ON rw_operations (tenant, created_ms)
    WHERE contradiction_ms IS NOT NULL;
