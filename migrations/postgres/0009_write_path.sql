-- recoverable-write ledger, PostgreSQL schema v9 (runs with `search_path` set to the ledger's
-- schema, see 0001): the write path at the database's speed (issue 29).
--
-- Measured per request (a claim then its result), backend CPU time, before this migration:
-- about 1.4 ms, of which about 0.85 ms was planning. The pool runs with
-- `plan_cache_mode = force_custom_plan` (see `PostgresLedger::connect_with`: a generic plan made
-- while the table was empty can pick an index that reads every row of a tenant), so every
-- execution of the two write statements was planned afresh against the table's 16 indexes, and
-- so was the foreign key's check of each evidence row (three per request: the check is a
-- cached query of its own, planned like the session's). A minimal ledger doing the same work on
-- one table takes about 0.2 ms.
--
-- 1. The evidence log's foreign key goes. Every evidence row is inserted by a statement that
--    takes its (tenant, operation_id) from the operation row it inserts or updates in the same
--    statement (the data-modifying CTEs below and in src/ledger/postgres/sql.rs), or from rows
--    a claim locked in the same transaction; purges delete the evidence with its row. The
--    check added a planned query per evidence row and, under a generic plan, the same cliff.
ALTER TABLE rw_evidence DROP CONSTRAINT IF EXISTS rw_evidence_tenant_operation_id_fkey;

-- 2. The two statements of every request run in functions whose own statements use generic
--    plans (planned once per connection, not per execution), shaped so that a generic plan is
--    safe whatever the table's statistics say:
--    - the claim is an INSERT: no scan to choose;
--    - the compare-and-swap finds its row by `operation_id` alone as an index condition (the
--      tenant and state terms are written `(... ) IS TRUE`, which no index can serve), so the
--      only index paths are the ones led by `operation_id` (`rw_operations_by_operation_id`,
--      at most a handful of rows per id); a sequential scan is estimated dearer even on an
--      empty, never analyzed table (the planner then assumes 10 pages).
--    The session's `force_custom_plan` still holds for every other statement.
--
-- `rw_claim_new`: `Ledger::create_and_apply`, the claimed row and its two entries in one
-- statement. Parameters in the order of the statement it replaces: the caller's time or NULL
-- for the database clock, the caller's creation time (caller-computed times are moved onto the
-- statement's clock as offsets from it), the row, then the two entries.
CREATE FUNCTION rw_claim_new(
    p_now bigint, p_created bigint,
    p_tenant text, p_operation_id text, p_action text, p_intent_ref text,
    p_idempotency_key text, p_payload_hash text, p_request_method text, p_request_url text,
    p_request_headers text, p_request_body bytea, p_contract_name text, p_contract_hash text,
    p_budget_policy text,
    p_state text, p_last_result text, p_generation bigint, p_attempts_used bigint,
    p_queries_used bigint, p_may_have_applied boolean, p_current_attempt text,
    p_lease_until_ms bigint, p_next_check_ms bigint, p_deadline_ms bigint, p_remote_ref text,
    p_reason text, p_response_status integer, p_response_headers text, p_response_body bytea,
    p_updated_ms bigint,
    a_attempt_id text, a_generation bigint, a_kind text, a_from_state text, a_to_state text,
    a_evidence text, a_note text, a_at_ms bigint,
    b_attempt_id text, b_generation bigint, b_kind text, b_from_state text, b_to_state text,
    b_evidence text, b_note text, b_at_ms bigint
) RETURNS SETOF rw_operations
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_now bigint := COALESCE(p_now, (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
BEGIN
    RETURN QUERY
    WITH ins AS (
        INSERT INTO rw_operations (
            tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
            request_method, request_url, request_headers, request_body,
            contract_name, contract_hash, budget_policy,
            state, last_result, generation, version, attempts_used, queries_used,
            may_have_applied, current_attempt, lease_until_ms, next_check_ms, deadline_ms,
            remote_ref, reason, response_status, response_headers, response_body,
            created_ms, updated_ms
        )
        VALUES (
            p_tenant, p_operation_id, p_action, p_intent_ref, p_idempotency_key, p_payload_hash,
            p_request_method, p_request_url, p_request_headers, p_request_body,
            p_contract_name, p_contract_hash, p_budget_policy,
            p_state, p_last_result, p_generation, 1, p_attempts_used, p_queries_used,
            p_may_have_applied, p_current_attempt,
            v_now + (p_lease_until_ms - p_created), v_now + (p_next_check_ms - p_created),
            v_now + (p_deadline_ms - p_created),
            p_remote_ref, p_reason, p_response_status, p_response_headers, p_response_body,
            v_now, v_now + (p_updated_ms - p_created)
        )
        ON CONFLICT DO NOTHING
        RETURNING *
    ),
    ev AS (
        INSERT INTO rw_evidence (
            tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence,
            note, at_ms
        )
        SELECT ins.tenant, ins.operation_id, e.attempt_id, e.generation, e.kind, e.from_state,
               e.to_state, e.evidence, e.note, ins.created_ms + (e.at_ms - p_created)
        FROM ins, (VALUES
            (1, a_attempt_id, a_generation, a_kind, a_from_state, a_to_state, a_evidence,
             a_note, a_at_ms),
            (2, b_attempt_id, b_generation, b_kind, b_from_state, b_to_state, b_evidence,
             b_note, b_at_ms)
        ) AS e(ord, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms)
        ORDER BY e.ord
    )
    SELECT * FROM ins;
END
$fn$;

-- `rw_apply`: `Ledger::apply` and `Ledger::record`, the conditional UPDATE (state, generation
-- and version as read) and its entry, in one statement; with `p_relaxed`, the statement's
-- transaction commits without waiting for the WAL flush (`record`: the result after the send).
-- Parameters in the order of the statement it replaces, then `p_relaxed`.
CREATE FUNCTION rw_apply(
    p_now bigint, p_caller_now bigint,
    p_state text, p_last_result text, p_generation bigint, p_attempts_used bigint,
    p_queries_used bigint, p_reset_may_have_applied boolean, p_may_have_applied boolean,
    p_current_attempt text, p_lease_until_ms bigint, p_next_check_ms bigint,
    p_deadline_ms bigint, p_remote_ref text, p_reason text, p_response_status integer,
    p_response_headers text, p_response_body bytea,
    p_tenant text, p_operation_id text, p_expect_state text, p_expect_generation bigint,
    p_expect_version bigint, p_operation_level boolean,
    e_attempt_id text, e_generation bigint, e_kind text, e_from_state text, e_to_state text,
    e_evidence text, e_note text, e_at_ms bigint,
    p_relaxed boolean
) RETURNS SETOF rw_operations
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_now bigint := COALESCE(p_now, (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
BEGIN
    IF p_relaxed THEN
        -- Until the end of the calling statement's transaction (a SET LOCAL of a variable the
        -- function does not SET itself outlives the function).
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN QUERY
    WITH upd AS (
        UPDATE rw_operations AS o SET
            state = p_state,
            last_result = p_last_result,
            generation = p_generation,
            attempts_used = p_attempts_used,
            queries_used = p_queries_used,
            may_have_applied = CASE WHEN p_reset_may_have_applied THEN p_may_have_applied
                                    ELSE (o.may_have_applied OR p_may_have_applied) END,
            current_attempt = p_current_attempt,
            -- A caller-computed absolute time, moved onto the statement's clock as an offset
            -- from the caller's now; kept as stored when it equals the row's current value.
            lease_until_ms = CASE WHEN p_lease_until_ms IS NOT DISTINCT FROM o.lease_until_ms
                                  THEN o.lease_until_ms
                                  ELSE v_now + (p_lease_until_ms - p_caller_now) END,
            next_check_ms = CASE WHEN p_next_check_ms IS NOT DISTINCT FROM o.next_check_ms
                                 THEN o.next_check_ms
                                 ELSE v_now + (p_next_check_ms - p_caller_now) END,
            deadline_ms = CASE WHEN p_deadline_ms IS NOT DISTINCT FROM o.deadline_ms
                               THEN o.deadline_ms
                               ELSE v_now + (p_deadline_ms - p_caller_now) END,
            remote_ref = p_remote_ref,
            reason = p_reason,
            response_status = p_response_status,
            response_headers = p_response_headers,
            response_body = p_response_body,
            updated_ms = v_now,
            version = o.version + 1
        WHERE o.operation_id = p_operation_id
          AND (o.tenant = p_tenant) IS TRUE
          AND (o.state = p_expect_state) IS TRUE
          AND o.generation = p_expect_generation AND o.version = p_expect_version
          AND NOT (p_state = 'REJECTED' AND o.may_have_applied AND NOT p_operation_level)
        RETURNING o.*
    ),
    ev AS (
        INSERT INTO rw_evidence (
            tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence,
            note, at_ms
        )
        SELECT upd.tenant, upd.operation_id, e_attempt_id, e_generation, e_kind, e_from_state,
               e_to_state, e_evidence, e_note, v_now + (e_at_ms - p_caller_now)
        FROM upd
    )
    SELECT * FROM upd;
END
$fn$;
