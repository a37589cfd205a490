-- recoverable-write ledger, PostgreSQL schema v13 (runs with `search_path` set to the ledger's
-- schema, see 0001): fewer index entries per write (issue 29).
--
-- Every request inserts an operation row and three evidence rows and updates the operation
-- once (the state is indexed, so the update is never HOT and every index of the table gets a
-- new entry). Three indexes did work no query needed:
--
-- 1. The evidence log's primary key on `id` alone: no statement looks an entry up by its id;
--    every read is one operation's log in order, `(tenant, operation_id, id)`, which had an
--    index of its own. That index becomes the primary key: one index entry per evidence row
--    instead of two (three per request).
ALTER TABLE rw_evidence DROP CONSTRAINT rw_evidence_pkey;
DROP INDEX rw_evidence_by_operation;
ALTER TABLE rw_evidence ADD CONSTRAINT rw_evidence_pkey PRIMARY KEY (tenant, operation_id, id);

-- 2. The operations' primary key was led by the tenant, so the probes by operation id alone
--    (the compare-and-swap's index path, see 0009, and `other_tenant_with`) needed a second
--    index on `operation_id`. Led by the operation id, the primary key serves both the lookups
--    by (tenant, operation id) and those by the id alone: two entries fewer per request.
ALTER TABLE rw_operations DROP CONSTRAINT rw_operations_pkey;
ALTER TABLE rw_operations ADD CONSTRAINT rw_operations_pkey PRIMARY KEY (operation_id, tenant);
DROP INDEX rw_operations_by_operation_id;

-- 3. The unique index on `seq`: `seq` is an identity column (unique by construction) used to
--    order rows, never looked up alone since quarantining finds its rows by their primary key.
--    Two entries fewer per request.
ALTER TABLE rw_operations DROP CONSTRAINT rw_operations_seq_key;
