-- recoverable-write ledger, PostgreSQL schema v12 (runs with `search_path` set to the ledger's
-- schema, see 0001): group commit (issue 29).
--
-- Under concurrency, the ledger gathers the claims that arrive while others are being written
-- into one statement and one commit, and likewise the results recorded after the send (see
-- src/ledger/postgres/group.rs). Per request, a claim and a result each cost a statement, a
-- commit and a round trip; measured at concurrency 64 on 2 cores, most of the server's time
-- per request was spent in what is paid once per statement (the function call, executor start,
-- the commit), not in the rows and index entries.
--
-- Each function takes one array per column of the single-row function it batches (0009), in
-- the same order, element i of every array being request i, and does exactly what that
-- function does for each element; a request alone still goes through the single-row function.

-- `rw_claim_batch`: `rw_claim_new` for many rows. A row whose identity or intent already exists
-- (in the table or earlier in the same batch) is skipped by ON CONFLICT DO NOTHING and not
-- returned: its caller reads what exists, as after `rw_claim_new` returned nothing. No table is
-- scanned: the INSERT's conflicts are found through the unique indexes, and the join that gives
-- each inserted row its two entries is between the inserted rows and the arrays.
CREATE FUNCTION rw_claim_batch(
    p_now bigint[], p_created bigint[],
    p_tenant text[], p_operation_id text[], p_action text[], p_intent_ref text[],
    p_idempotency_key text[], p_payload_hash text[], p_request_method text[],
    p_request_url text[], p_request_headers text[], p_request_body bytea[],
    p_contract_name text[], p_contract_hash text[], p_budget_policy text[],
    p_state text[], p_last_result text[], p_generation bigint[], p_attempts_used bigint[],
    p_queries_used bigint[], p_may_have_applied boolean[], p_current_attempt text[],
    p_lease_until_ms bigint[], p_next_check_ms bigint[], p_deadline_ms bigint[],
    p_remote_ref text[], p_reason text[], p_response_status integer[],
    p_response_headers text[], p_response_body bytea[], p_updated_ms bigint[],
    a_attempt_id text[], a_generation bigint[], a_kind text[], a_from_state text[],
    a_to_state text[], a_evidence text[], a_note text[], a_at_ms bigint[],
    b_attempt_id text[], b_generation bigint[], b_kind text[], b_from_state text[],
    b_to_state text[], b_evidence text[], b_note text[], b_at_ms bigint[]
) RETURNS SETOF rw_operations
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_clock bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
BEGIN
    RETURN QUERY
    WITH r AS MATERIALIZED (
        SELECT u.*, COALESCE(u.now_ms, v_clock) AS v_now
        FROM unnest(
            p_now, p_created, p_tenant, p_operation_id, p_action, p_intent_ref,
            p_idempotency_key, p_payload_hash, p_request_method, p_request_url,
            p_request_headers, p_request_body, p_contract_name, p_contract_hash,
            p_budget_policy, p_state, p_last_result, p_generation, p_attempts_used,
            p_queries_used, p_may_have_applied, p_current_attempt, p_lease_until_ms,
            p_next_check_ms, p_deadline_ms, p_remote_ref, p_reason, p_response_status,
            p_response_headers, p_response_body, p_updated_ms,
            a_attempt_id, a_generation, a_kind, a_from_state, a_to_state, a_evidence, a_note,
            a_at_ms,
            b_attempt_id, b_generation, b_kind, b_from_state, b_to_state, b_evidence, b_note,
            b_at_ms
        ) WITH ORDINALITY AS u(
            now_ms, created, tenant, operation_id, action, intent_ref, idempotency_key,
            payload_hash, request_method, request_url, request_headers, request_body,
            contract_name, contract_hash, budget_policy, state, last_result, generation,
            attempts_used, queries_used, may_have_applied, current_attempt, lease_until_ms,
            next_check_ms, deadline_ms, remote_ref, reason, response_status, response_headers,
            response_body, updated_ms,
            a_attempt_id, a_generation, a_kind, a_from_state, a_to_state, a_evidence, a_note,
            a_at_ms,
            b_attempt_id, b_generation, b_kind, b_from_state, b_to_state, b_evidence, b_note,
            b_at_ms, ord
        )
    ),
    ins AS (
        INSERT INTO rw_operations (
            tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
            request_method, request_url, request_headers, request_body,
            contract_name, contract_hash, budget_policy,
            state, last_result, generation, version, attempts_used, queries_used,
            may_have_applied, current_attempt, lease_until_ms, next_check_ms, deadline_ms,
            remote_ref, reason, response_status, response_headers, response_body,
            created_ms, updated_ms
        )
        SELECT
            r.tenant, r.operation_id, r.action, r.intent_ref, r.idempotency_key, r.payload_hash,
            r.request_method, r.request_url, r.request_headers, r.request_body,
            r.contract_name, r.contract_hash, r.budget_policy,
            r.state, r.last_result, r.generation, 1, r.attempts_used, r.queries_used,
            r.may_have_applied, r.current_attempt,
            r.v_now + (r.lease_until_ms - r.created), r.v_now + (r.next_check_ms - r.created),
            r.v_now + (r.deadline_ms - r.created),
            r.remote_ref, r.reason, r.response_status, r.response_headers, r.response_body,
            r.v_now, r.v_now + (r.updated_ms - r.created)
        FROM r
        ORDER BY r.ord
        ON CONFLICT DO NOTHING
        RETURNING *
    ),
    ev AS (
        INSERT INTO rw_evidence (
            tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence,
            note, at_ms
        )
        SELECT ins.tenant, ins.operation_id, e.attempt_id, e.generation, e.kind, e.from_state,
               e.to_state, e.evidence, e.note, ins.created_ms + (e.at_ms - r.created)
        FROM ins
        JOIN r ON r.tenant = ins.tenant AND r.operation_id = ins.operation_id,
        LATERAL (VALUES
            (1, r.a_attempt_id, r.a_generation, r.a_kind, r.a_from_state, r.a_to_state,
             r.a_evidence, r.a_note, r.a_at_ms),
            (2, r.b_attempt_id, r.b_generation, r.b_kind, r.b_from_state, r.b_to_state,
             r.b_evidence, r.b_note, r.b_at_ms)
        ) AS e(ord, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms)
        ORDER BY r.ord, e.ord
    )
    SELECT * FROM ins;
END
$fn$;

-- `rw_record_batch`: `rw_apply` with `p_relaxed` for many rows (`Ledger::record_unread`, the
-- result after the send), committed without waiting for the WAL flush. Answers the ordinals
-- (1-based) of the requests whose compare-and-swap applied. Each row is found by its operation
-- id through `rw_operations_by_operation_id`, one index probe per request: the function's own
-- settings leave the generic plan no other path (no sequential scan, hash or merge join, whose
-- cost would grow with the table).
CREATE FUNCTION rw_record_batch(
    p_now bigint[], p_caller_now bigint[],
    p_state text[], p_last_result text[], p_generation bigint[], p_attempts_used bigint[],
    p_queries_used bigint[], p_reset_may_have_applied boolean[], p_may_have_applied boolean[],
    p_current_attempt text[], p_lease_until_ms bigint[], p_next_check_ms bigint[],
    p_deadline_ms bigint[], p_remote_ref text[], p_reason text[], p_response_status integer[],
    p_response_headers text[], p_response_body bytea[],
    p_tenant text[], p_operation_id text[], p_expect_state text[], p_expect_generation bigint[],
    p_expect_version bigint[], p_operation_level boolean[],
    e_attempt_id text[], e_generation bigint[], e_kind text[], e_from_state text[],
    e_to_state text[], e_evidence text[], e_note text[], e_at_ms bigint[]
) RETURNS SETOF bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_clock bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
BEGIN
    -- Until the end of the calling statement's transaction, as in `rw_apply`.
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH u AS MATERIALIZED (
        SELECT x.*, COALESCE(x.now_ms, v_clock) AS v_now
        FROM unnest(
            p_now, p_caller_now, p_state, p_last_result, p_generation, p_attempts_used,
            p_queries_used, p_reset_may_have_applied, p_may_have_applied, p_current_attempt,
            p_lease_until_ms, p_next_check_ms, p_deadline_ms, p_remote_ref, p_reason,
            p_response_status, p_response_headers, p_response_body, p_tenant, p_operation_id,
            p_expect_state, p_expect_generation, p_expect_version, p_operation_level,
            e_attempt_id, e_generation, e_kind, e_from_state, e_to_state, e_evidence, e_note,
            e_at_ms
        ) WITH ORDINALITY AS x(
            now_ms, caller_now, state, last_result, generation, attempts_used, queries_used,
            reset_may_have_applied, may_have_applied, current_attempt, lease_until_ms,
            next_check_ms, deadline_ms, remote_ref, reason, response_status, response_headers,
            response_body, tenant, operation_id, expect_state, expect_generation,
            expect_version, operation_level,
            e_attempt_id, e_generation, e_kind, e_from_state, e_to_state, e_evidence, e_note,
            e_at_ms, ord
        )
    ),
    upd AS (
        UPDATE rw_operations AS o SET
            state = u.state,
            last_result = u.last_result,
            generation = u.generation,
            attempts_used = u.attempts_used,
            queries_used = u.queries_used,
            may_have_applied = CASE WHEN u.reset_may_have_applied THEN u.may_have_applied
                                    ELSE (o.may_have_applied OR u.may_have_applied) END,
            current_attempt = u.current_attempt,
            lease_until_ms = CASE WHEN u.lease_until_ms IS NOT DISTINCT FROM o.lease_until_ms
                                  THEN o.lease_until_ms
                                  ELSE u.v_now + (u.lease_until_ms - u.caller_now) END,
            next_check_ms = CASE WHEN u.next_check_ms IS NOT DISTINCT FROM o.next_check_ms
                                 THEN o.next_check_ms
                                 ELSE u.v_now + (u.next_check_ms - u.caller_now) END,
            deadline_ms = CASE WHEN u.deadline_ms IS NOT DISTINCT FROM o.deadline_ms
                               THEN o.deadline_ms
                               ELSE u.v_now + (u.deadline_ms - u.caller_now) END,
            remote_ref = u.remote_ref,
            reason = u.reason,
            response_status = u.response_status,
            response_headers = u.response_headers,
            response_body = u.response_body,
            updated_ms = u.v_now,
            version = o.version + 1
        FROM u
        WHERE o.operation_id = u.operation_id
          AND (o.tenant = u.tenant) IS TRUE
          AND (o.state = u.expect_state) IS TRUE
          AND o.generation = u.expect_generation AND o.version = u.expect_version
          AND NOT (u.state = 'REJECTED' AND o.may_have_applied AND NOT u.operation_level)
        RETURNING u.ord, o.tenant, o.operation_id
    ),
    ev AS (
        INSERT INTO rw_evidence (
            tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence,
            note, at_ms
        )
        SELECT upd.tenant, upd.operation_id, u.e_attempt_id, u.e_generation, u.e_kind,
               u.e_from_state, u.e_to_state, u.e_evidence, u.e_note,
               u.v_now + (u.e_at_ms - u.caller_now)
        FROM upd JOIN u ON u.ord = upd.ord
        ORDER BY upd.ord
    )
    SELECT upd.ord FROM upd;
END
$fn$;
