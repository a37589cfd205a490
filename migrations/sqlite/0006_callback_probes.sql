-- recoverable-write ledger, SQLite schema v6: bounded work for callbacks that match nothing.
--
-- A verified callback that matches no operation of its tenant is quarantined, with a reason
-- that says whether another tenant holds what it names (an account mapped to the wrong tenant,
-- or a foreign tenant's id). That check is one probe by the operation id, or by the vendor's
-- reference, across tenants (`Ledger::other_tenant_with`), so it needs an index led by that
-- column: without one it scans every row, and unmatched events are normal traffic (a vendor's
-- events for objects this application did not create through the crate).
--
-- By vendor reference: the per-tenant index of v4 is replaced by one led by the reference and
-- then the tenant. It serves both the per-tenant match (`find_by_remote_ref`: both columns
-- equal) and the probe across tenants (the reference alone), so the write path keeps one index
-- on the column, not two.
DROP INDEX rw_operations_by_remote_ref;

CREATE INDEX rw_operations_by_remote_ref
    ON rw_operations (remote_ref, tenant)
    WHERE remote_ref IS NOT NULL;

-- By operation id: the primary key is led by the tenant, so it cannot serve a probe by the id
-- alone. This is the one index the probe adds to every insert.
CREATE INDEX rw_operations_by_operation_id
    ON rw_operations (operation_id);
