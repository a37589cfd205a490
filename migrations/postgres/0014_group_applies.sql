-- recoverable-write ledger, PostgreSQL schema v14 (runs with `search_path` set to the ledger's
-- schema, see 0001): group commit of every compare-and-swap (issue 29).
--
-- 0012 grouped the results recorded after the send; the other compare-and-swaps (`apply`: the
-- recoverer's claims' outcomes, a reviewer's resolution, a replay's claim) were still one
-- statement and one durable commit each, so recovery workers running side by side each waited
-- for their own. `rw_apply_batch` is `rw_apply` for many requests, durable or (with
-- `p_relaxed`, for `record`) committed without waiting for the WAL flush, answering the rows
-- as changed; the ledger matches them to its requests by (tenant, operation id) and never puts
-- two requests for one operation in one group. It replaces `rw_record_batch`.
DROP FUNCTION rw_record_batch(
    bigint[], bigint[], text[], text[], bigint[], bigint[], bigint[], boolean[], boolean[],
    text[], bigint[], bigint[], bigint[], text[], text[], integer[], text[], bytea[], text[],
    text[], text[], bigint[], bigint[], boolean[], text[], bigint[], text[], text[], text[],
    text[], text[], bigint[]
);

CREATE FUNCTION rw_apply_batch(
    p_now bigint[], p_caller_now bigint[],
    p_state text[], p_last_result text[], p_generation bigint[], p_attempts_used bigint[],
    p_queries_used bigint[], p_reset_may_have_applied boolean[], p_may_have_applied boolean[],
    p_current_attempt text[], p_lease_until_ms bigint[], p_next_check_ms bigint[],
    p_deadline_ms bigint[], p_remote_ref text[], p_reason text[], p_response_status integer[],
    p_response_headers text[], p_response_body bytea[],
    p_tenant text[], p_operation_id text[], p_expect_state text[], p_expect_generation bigint[],
    p_expect_version bigint[], p_operation_level boolean[],
    e_attempt_id text[], e_generation bigint[], e_kind text[], e_from_state text[],
    e_to_state text[], e_evidence text[], e_note text[], e_at_ms bigint[],
    p_relaxed boolean
) RETURNS SETOF rw_operations
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
    IF p_relaxed THEN
        -- Until the end of the calling statement's transaction, as in `rw_apply`.
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
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
        RETURNING u.ord, o AS r
    ),
    ev AS (
        INSERT INTO rw_evidence (
            tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence,
            note, at_ms
        )
        SELECT (upd.r).tenant, (upd.r).operation_id, u.e_attempt_id, u.e_generation, u.e_kind,
               u.e_from_state, u.e_to_state, u.e_evidence, u.e_note,
               u.v_now + (u.e_at_ms - u.caller_now)
        FROM upd JOIN u ON u.ord = upd.ord
        ORDER BY upd.ord
    )
    SELECT (upd.r).* FROM upd ORDER BY upd.ord;
END
$fn$;
