//! The SQL text of the PostgreSQL ledger, schema-qualified once per ledger.

use std::sync::Arc;

use crate::ledger::codec::{evidence_columns, frozen_columns, prepared_columns};

// ── SQL ─────────────────────────────────────────────────────────────────────────────────────────

/// The database clock in ms since the Unix epoch.
pub(super) const DB_NOW: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The statements, schema-qualified once at construction (the schema name is validated).
///
/// Every writing statement starts with the `clock` CTE: `$1` is the caller's time with
/// [`ClockSource::Caller`], or NULL to read the database clock once for the whole statement.
#[derive(Debug)]
pub(super) struct Statements {
    /// The schema-qualified operations table, for the listing statements (built per query:
    /// their filters vary).
    pub(super) operations: String,
    /// The schema-qualified evidence table, for the activity statement.
    pub(super) evidence: String,
    pub(super) insert_operation: Arc<str>,
    /// The claim of `create_and_apply` alone: the call of `rw_claim_new`, answering the
    /// statement's clock (`created_ms`) when it inserted (the caller holds the row).
    pub(super) insert_claimed: Arc<str>,
    /// `insert_claimed` as one statement, for a connection that plans generically.
    pub(super) insert_claimed_direct: Arc<str>,
    pub(super) select_by_id: Arc<str>,
    pub(super) select_by_intent: Arc<str>,
    pub(super) apply: Arc<str>,
    pub(super) apply_after_send: Arc<str>,
    /// `apply_after_send` answering only how many rows it changed (0 or 1).
    pub(super) record_unread: Arc<str>,
    /// `record_unread` as one statement, for a connection that plans generically and commits
    /// without waiting for the WAL flush (its session says so: see `group::Mode::RECORDS`).
    pub(super) record_unread_direct: Arc<str>,
    /// `insert_claimed` for many requests at once (group commit, `rw_claim_batch`, 0012).
    pub(super) claim_batch: Arc<str>,
    /// `record_unread` for many requests at once (group commit, `rw_record_batch`, 0012).
    pub(super) record_batch: Arc<str>,
    pub(super) claim_due: Arc<str>,
    pub(super) claim_prepared: Arc<str>,
    pub(super) sweep_expired: Arc<str>,
    pub(super) quarantine: Arc<str>,
    pub(super) select_quarantined: Arc<str>,
    pub(super) select_for_release: Arc<str>,
    pub(super) release: Arc<str>,
    pub(super) insert_evidence_batch: Arc<str>,
    pub(super) append_evidence: Arc<str>,
    pub(super) select_evidence: Arc<str>,
    pub(super) insert_callback_event: Arc<str>,
    pub(super) insert_callback_quarantine: Arc<str>,
    pub(super) select_callback_quarantine: Arc<str>,
    pub(super) select_tenant_callback_quarantine: Arc<str>,
    pub(super) select_callback_event: Arc<str>,
    pub(super) other_tenant_by_id: Arc<str>,
    pub(super) other_tenant_by_remote_ref: Arc<str>,
    pub(super) append_contradiction: Arc<str>,
    pub(super) acknowledge_contradiction: Arc<str>,
    pub(super) operation_exists: Arc<str>,
    pub(super) select_by_remote_ref: Arc<str>,
    pub(super) select_by_idempotency_key: Arc<str>,
}

/// `clock` CTE: one reading of the chosen clock per statement.
const CLOCK_CTE: &str = "clock AS (
    SELECT COALESCE($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now_ms
)";

impl Statements {
    pub(super) fn new(schema: &str) -> Self {
        let ops = format!("\"{schema}\".rw_operations");
        let ev = format!("\"{schema}\".rw_evidence");
        let ev_columns = evidence_columns!();
        let frozen = frozen_columns!();
        let insert_operation = format!(
            "WITH {CLOCK_CTE},
ins AS (
    INSERT INTO {ops} (
        {frozen},
        {prepared}
    )
    SELECT $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
           'PREPARED', 0, 0, 0, 0, FALSE, clock.now_ms, clock.now_ms
    FROM clock
    ON CONFLICT DO NOTHING
    RETURNING *
),
ev AS (
    INSERT INTO {ev} ({ev_columns})
    SELECT ins.tenant, ins.operation_id, $15, $16, $17, $18, $19, $20, $21, ins.created_ms
    FROM ins
)
SELECT * FROM ins",
            prepared = prepared_columns!(),
        );
        // The claimed row of `create_and_apply` and its two entries in one statement: the
        // function `rw_claim_new` (migration 0009), whose statements use generic plans, planned
        // once per connection. Caller-computed times are moved onto the statement's clock as
        // offsets from the caller's creation time ($2), like `apply` does. Only the statement's
        // clock comes back: the caller holds the row it sent and moves its times itself
        // (`writer::claimed_row`), so no column of the row is sent back nor decoded.
        let insert_claimed = format!(
            "SELECT created_ms FROM \"{schema}\".rw_claim_new(
    $1::bigint, $2::bigint,
    $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text, $10::text, $11::text,
    $12::bytea, $13::text, $14::text, $15::text,
    $16::text, $17::text, $18::bigint, $19::bigint, $20::bigint, $21::boolean, $22::text,
    $23::bigint, $24::bigint, $25::bigint, $26::text, $27::text, $28::integer, $29::text,
    $30::bytea, $31::bigint,
    $32::text, $33::bigint, $34::text, $35::text, $36::text, $37::text, $38::text, $39::bigint,
    $40::text, $41::bigint, $42::text, $43::text, $44::text, $45::text, $46::text, $47::bigint
)"
        );
        // The same claim as one statement, the function's body with its parameters in the same
        // order: on a connection that plans generically (the write path's kept ones, see
        // `group::Warm`) it costs no planning, and it saves the function's call (a PL/pgSQL
        // frame, its settings set and reset, its result kept in a tuplestore): about 45 us of
        // the server's time per statement at concurrency 1 (benches/README.md, 2026-12-03,
        // third session). Elsewhere the call above is used: a custom plan of this statement
        // would cost more than the call.
        let insert_claimed_direct = format!(
            "WITH {CLOCK_CTE},
ins AS (
    INSERT INTO {ops} (
        {frozen},
        state, last_result, generation, version, attempts_used, queries_used,
        may_have_applied, current_attempt, lease_until_ms, next_check_ms, deadline_ms,
        remote_ref, reason, response_status, response_headers, response_body,
        created_ms, updated_ms
    )
    SELECT $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text, $10::text,
           $11::text, $12::bytea, $13::text, $14::text, $15::text,
           $16::text, $17::text, $18::bigint, 1, $19::bigint, $20::bigint,
           $21::boolean, $22::text, clock.now_ms + ($23::bigint - $2::bigint),
           clock.now_ms + ($24::bigint - $2::bigint), clock.now_ms + ($25::bigint - $2::bigint),
           $26::text, $27::text, $28::integer, $29::text, $30::bytea,
           clock.now_ms, clock.now_ms + ($31::bigint - $2::bigint)
    FROM clock
    ON CONFLICT DO NOTHING
    RETURNING tenant, operation_id, created_ms
),
ev AS (
    INSERT INTO {ev} ({ev_columns})
    SELECT ins.tenant, ins.operation_id, e.attempt_id, e.generation, e.kind, e.from_state,
           e.to_state, e.evidence, e.note, ins.created_ms + (e.at_ms - $2::bigint)
    FROM ins, (VALUES
        (1, $32::text, $33::bigint, $34::text, $35::text, $36::text, $37::text, $38::text,
         $39::bigint),
        (2, $40::text, $41::bigint, $42::text, $43::text, $44::text, $45::text, $46::text,
         $47::bigint)
    ) AS e(ord, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms)
    ORDER BY e.ord
)
SELECT created_ms FROM ins"
        );
        let select_by_id = format!("SELECT * FROM {ops} WHERE tenant = $1 AND operation_id = $2");
        let select_by_intent =
            format!("SELECT * FROM {ops} WHERE tenant = $1 AND action = $2 AND intent_ref = $3");
        // `apply`, and `record`'s variant: the function `rw_apply` (migration 0009), the
        // conditional UPDATE and its entry in one statement, with a generic plan that finds the
        // row by its operation id; `record`'s call commits without waiting for the WAL flush
        // (`p_relaxed`: `set_config('synchronous_commit', 'off', true)` for the statement's own
        // implicit transaction).
        let apply_call = |select: &str, relaxed: bool| {
            format!(
                "SELECT {select} FROM \"{schema}\".rw_apply(
    $1::bigint, $2::bigint,
    $3::text, $4::text, $5::bigint, $6::bigint, $7::bigint, $8::boolean, $9::boolean, $10::text,
    $11::bigint, $12::bigint, $13::bigint, $14::text, $15::text, $16::integer, $17::text,
    $18::bytea, $19::text, $20::text, $21::text, $22::bigint, $23::bigint, $24::boolean,
    $25::text, $26::bigint, $27::text, $28::text, $29::text, $30::text, $31::text, $32::bigint,
    {relaxed}
)"
            )
        };
        let apply = apply_call("*", false);
        let apply_after_send = apply_call("*", true);
        // `record_unread`: the same call, answering only whether it applied (the caller holds
        // the row and writes the changes in itself).
        let record_unread = apply_call("count(*)", true);
        // The same as one statement, the body of `rw_apply` with its parameters in the same
        // order (as `insert_claimed_direct`, for connections that plan generically); it
        // commits without waiting for the WAL flush because the session it runs on says so.
        // The row is found by its operation id alone (the other terms are `IS TRUE`, which no
        // index can serve), as in the function: a generic plan is safe whatever the table's
        // statistics.
        let record_unread_direct = format!(
            "WITH {CLOCK_CTE},
upd AS (
    UPDATE {ops} AS o SET
        state = $3::text,
        last_result = $4::text,
        generation = $5::bigint,
        attempts_used = $6::bigint,
        queries_used = $7::bigint,
        may_have_applied = CASE WHEN $8::boolean THEN $9::boolean
                                ELSE (o.may_have_applied OR $9::boolean) END,
        current_attempt = $10::text,
        lease_until_ms = CASE WHEN $11::bigint IS NOT DISTINCT FROM o.lease_until_ms
                              THEN o.lease_until_ms
                              ELSE clock.now_ms + ($11::bigint - $2::bigint) END,
        next_check_ms = CASE WHEN $12::bigint IS NOT DISTINCT FROM o.next_check_ms
                             THEN o.next_check_ms
                             ELSE clock.now_ms + ($12::bigint - $2::bigint) END,
        deadline_ms = CASE WHEN $13::bigint IS NOT DISTINCT FROM o.deadline_ms
                           THEN o.deadline_ms
                           ELSE clock.now_ms + ($13::bigint - $2::bigint) END,
        remote_ref = $14::text,
        reason = $15::text,
        response_status = $16::integer,
        response_headers = $17::text,
        response_body = $18::bytea,
        updated_ms = clock.now_ms,
        version = o.version + 1
    FROM clock
    WHERE o.operation_id = $20::text
      AND (o.tenant = $19::text) IS TRUE
      AND (o.state = $21::text) IS TRUE
      AND o.generation = $22::bigint AND o.version = $23::bigint
      AND NOT ($3::text = 'REJECTED' AND o.may_have_applied AND NOT $24::boolean)
    RETURNING o.tenant, o.operation_id, clock.now_ms
),
ev AS (
    INSERT INTO {ev} ({ev_columns})
    SELECT upd.tenant, upd.operation_id, $25::text, $26::bigint, $27::text, $28::text,
           $29::text, $30::text, $31::text, upd.now_ms + ($32::bigint - $2::bigint)
    FROM upd
)
SELECT count(*) FROM upd"
        );
        // Group commit (migration 0012): the same two calls with one array per parameter.
        let claim_batch = format!(
            "SELECT tenant, operation_id, created_ms FROM \"{schema}\".rw_claim_batch(
    $1::bigint[], $2::bigint[],
    $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
    $10::text[], $11::text[], $12::bytea[], $13::text[], $14::text[], $15::text[],
    $16::text[], $17::text[], $18::bigint[], $19::bigint[], $20::bigint[], $21::boolean[],
    $22::text[], $23::bigint[], $24::bigint[], $25::bigint[], $26::text[], $27::text[],
    $28::integer[], $29::text[], $30::bytea[], $31::bigint[],
    $32::text[], $33::bigint[], $34::text[], $35::text[], $36::text[], $37::text[], $38::text[],
    $39::bigint[],
    $40::text[], $41::bigint[], $42::text[], $43::text[], $44::text[], $45::text[], $46::text[],
    $47::bigint[]
)"
        );
        let record_batch = format!(
            "SELECT * FROM \"{schema}\".rw_record_batch(
    $1::bigint[], $2::bigint[],
    $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::boolean[],
    $9::boolean[], $10::text[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[],
    $15::text[], $16::integer[], $17::text[], $18::bytea[], $19::text[], $20::text[],
    $21::text[], $22::bigint[], $23::bigint[], $24::boolean[],
    $25::text[], $26::bigint[], $27::text[], $28::text[], $29::text[], $30::text[],
    $31::text[], $32::bigint[]
)"
        );
        // The `state IN (...)` / `state = 'IN_FLIGHT'` terms repeat the partial indexes' WHERE
        // clauses, and the clock is an InitPlan (`(SELECT now_ms FROM clock)`), so the bound is
        // an index condition.
        let claim_due = format!(
            "WITH {CLOCK_CTE},
due AS (
    SELECT o.tenant, o.operation_id
    FROM {ops} AS o
    WHERE o.state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY')
      AND o.next_check_ms <= (SELECT now_ms FROM clock)
      AND (o.lease_until_ms IS NULL OR o.lease_until_ms <= (SELECT now_ms FROM clock))
      AND o.quarantine_reason IS NULL
    ORDER BY o.next_check_ms, o.seq
    LIMIT $3
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {ops} AS o SET
    generation = o.generation + 1,
    version = o.version + 1,
    lease_until_ms = clock.now_ms + $2::bigint,
    updated_ms = clock.now_ms
FROM due, clock
WHERE o.tenant = due.tenant AND o.operation_id = due.operation_id
RETURNING o.*, clock.now_ms AS rw_now"
        );
        let sweep_expired = format!(
            "WITH {CLOCK_CTE},
expired AS (
    SELECT o.tenant, o.operation_id
    FROM {ops} AS o
    WHERE o.state = 'IN_FLIGHT' AND o.lease_until_ms < (SELECT now_ms FROM clock)
      AND o.quarantine_reason IS NULL
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {ops} AS o SET
    state = 'UNKNOWN',
    generation = o.generation + 1,
    version = o.version + 1,
    may_have_applied = TRUE,
    next_check_ms = clock.now_ms,
    lease_until_ms = NULL,
    reason = $2::text,
    updated_ms = clock.now_ms
FROM expired, clock
WHERE o.tenant = expired.tenant AND o.operation_id = expired.operation_id
RETURNING o.*, clock.now_ms AS rw_now"
        );
        // `$3` is the age in ms: rows created at or before `now - $3` are old enough.
        let claim_prepared = format!(
            "WITH {CLOCK_CTE},
old AS (
    SELECT o.tenant, o.operation_id
    FROM {ops} AS o
    WHERE o.state = 'PREPARED'
      AND o.created_ms <= (SELECT now_ms FROM clock) - $3::bigint
      AND (o.lease_until_ms IS NULL OR o.lease_until_ms <= (SELECT now_ms FROM clock))
      AND o.quarantine_reason IS NULL
    ORDER BY o.created_ms, o.seq
    LIMIT $4
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {ops} AS o SET
    generation = o.generation + 1,
    version = o.version + 1,
    lease_until_ms = clock.now_ms + $2::bigint,
    updated_ms = clock.now_ms
FROM old, clock
WHERE o.tenant = old.tenant AND o.operation_id = old.operation_id
RETURNING o.*, clock.now_ms AS rw_now"
        );
        let quarantine = format!(
            "UPDATE {ops} AS o SET quarantine_reason = q.reason, quarantined_ms = q.at_ms
FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[]) AS q(tenant, operation_id, reason, at_ms)
WHERE o.operation_id = q.operation_id AND o.tenant = q.tenant"
        );
        let select_quarantined = format!(
            "SELECT tenant, operation_id, quarantine_reason, quarantined_ms FROM {ops}
WHERE quarantine_reason IS NOT NULL
ORDER BY quarantined_ms, seq
LIMIT $1"
        );
        // Releasing a quarantined row: read and lock it, decode it in Rust, then (only if it
        // decodes) clear the quarantine, drop the lease the quarantining claim left (unless the
        // row is IN_FLIGHT: the sweeper owns it), advance the version and append the entry, in
        // one statement. $1 the caller's time or NULL, $2 tenant, $3 operation id, $4..$10 the
        // entry, $11 the version expected.
        let select_for_release =
            format!("SELECT * FROM {ops} WHERE tenant = $1 AND operation_id = $2 FOR UPDATE");
        let release = format!(
            "WITH released AS (
    UPDATE {ops} SET
        quarantine_reason = NULL,
        quarantined_ms = NULL,
        lease_until_ms = CASE WHEN state = 'IN_FLIGHT' THEN lease_until_ms END,
        version = version + 1
    WHERE tenant = $2::text AND operation_id = $3::text AND quarantine_reason IS NOT NULL
      AND version = $11::bigint
    RETURNING *
),
ev AS (
    INSERT INTO {ev} ({ev_columns})
    SELECT released.tenant, released.operation_id, $4::text, $5::bigint, $6::text, $7::text,
           $8::text, $9::text, $10::text,
           COALESCE($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    FROM released
)
SELECT * FROM released"
        );
        let insert_evidence_batch = format!(
            "INSERT INTO {ev} ({ev_columns})
SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::bigint[])"
        );
        // An entry appended on its own advances the operation's version in the same statement:
        // every decision made on the row as it was before the entry is refused as stale (the
        // fencing rule). No operation, no entry.
        let append_evidence = format!(
            "WITH bumped AS (
    UPDATE {ops} SET version = version + 1
    WHERE tenant = $2::text AND operation_id = $3::text
    RETURNING 1
)
INSERT INTO {ev} ({ev_columns})
SELECT $2::text, $3::text, $4::text, $5::bigint, $6::text, $7::text, $8::text, $9::text,
       $10::text,
       COALESCE($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
FROM bumped"
        );
        // A contradiction of a final state: the entry as above, and the row marked with the
        // time of the first one (the statement's time, as the entry's).
        let append_contradiction = format!(
            "WITH bumped AS (
    UPDATE {ops} SET version = version + 1,
        contradiction_ms = COALESCE(
            contradiction_ms,
            $1::bigint,
            (extract(epoch FROM clock_timestamp()) * 1000)::bigint
        )
    WHERE tenant = $2::text AND operation_id = $3::text
    RETURNING 1
)
INSERT INTO {ev} ({ev_columns})
SELECT $2::text, $3::text, $4::text, $5::bigint, $6::text, $7::text, $8::text, $9::text,
       $10::text,
       COALESCE($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
FROM bumped"
        );
        // A person's acknowledgement of a contradiction, fenced by the version they read: the
        // mark is cleared, the version advances and their entry is inserted, or nothing at all.
        let acknowledge_contradiction = format!(
            "WITH cleared AS (
    UPDATE {ops} SET contradiction_ms = NULL, version = version + 1
    WHERE tenant = $2::text AND operation_id = $3::text AND version = $11::bigint
      AND contradiction_ms IS NOT NULL
    RETURNING *
), entry AS (
    INSERT INTO {ev} ({ev_columns})
    SELECT $2::text, $3::text, $4::text, $5::bigint, $6::text, $7::text, $8::text, $9::text,
           $10::text,
           COALESCE($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    FROM cleared
)
SELECT * FROM cleared"
        );
        let select_evidence = format!(
            "SELECT id, {ev_columns} FROM {ev} WHERE tenant = $1 AND operation_id = $2 ORDER BY id"
        );
        // Vendor callbacks. The dedupe insert takes the key's unique-index lock: a concurrent
        // transaction inserting the same event waits for this one, then finds it (conflict,
        // nothing inserted) if it committed, or inserts it if it rolled back.
        let cb = format!("\"{schema}\".rw_callback_events");
        let cq = format!("\"{schema}\".rw_callback_quarantine");
        let insert_callback_event = format!(
            "INSERT INTO {cb} (vendor, event_id, event_type, tenant, operation_id, outcome, received_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT DO NOTHING
RETURNING event_id"
        );
        let insert_callback_quarantine = format!(
            "INSERT INTO {cq} (
    vendor, event_id, event_type, tenant, match_by, match_value, reason, evidence, received_ms
) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        );
        let select_callback_quarantine = format!(
            "SELECT vendor, event_id, event_type, tenant, match_by, match_value, reason, evidence,
       received_ms
FROM {cq} ORDER BY id LIMIT $1"
        );
        let select_tenant_callback_quarantine = format!(
            "SELECT vendor, event_id, event_type, tenant, match_by, match_value, reason, evidence,
       received_ms
FROM {cq} WHERE tenant = $1 ORDER BY id LIMIT $2"
        );
        let select_callback_event =
            format!("SELECT 1 FROM {cb} WHERE vendor = $1 AND event_id = $2");
        // Probes across tenants (the primary key, led by the operation id since 0013, and
        // `rw_operations_by_remote_ref`, each led by the probed column): at most one row read.
        let other_tenant_by_id =
            format!("SELECT tenant FROM {ops} WHERE operation_id = $1 AND tenant <> $2 LIMIT 1");
        let other_tenant_by_remote_ref =
            format!("SELECT tenant FROM {ops} WHERE remote_ref = $1 AND tenant <> $2 LIMIT 1");
        let operation_exists =
            format!("SELECT 1 FROM {ops} WHERE tenant = $1 AND operation_id = $2");
        let select_by_remote_ref = format!(
            "SELECT * FROM {ops} WHERE tenant = $1 AND remote_ref = $2 ORDER BY created_ms, seq LIMIT 1"
        );
        let select_by_idempotency_key = format!(
            "SELECT * FROM {ops} WHERE tenant = $1 AND idempotency_key = $2
ORDER BY created_ms, seq LIMIT 1"
        );
        Self {
            insert_callback_event: insert_callback_event.into(),
            insert_callback_quarantine: insert_callback_quarantine.into(),
            select_callback_quarantine: select_callback_quarantine.into(),
            select_tenant_callback_quarantine: select_tenant_callback_quarantine.into(),
            select_callback_event: select_callback_event.into(),
            other_tenant_by_id: other_tenant_by_id.into(),
            other_tenant_by_remote_ref: other_tenant_by_remote_ref.into(),
            append_contradiction: append_contradiction.into(),
            acknowledge_contradiction: acknowledge_contradiction.into(),
            operation_exists: operation_exists.into(),
            select_by_remote_ref: select_by_remote_ref.into(),
            select_by_idempotency_key: select_by_idempotency_key.into(),
            evidence: format!("\"{schema}\".rw_evidence"),
            operations: ops,
            insert_operation: insert_operation.into(),
            insert_claimed: insert_claimed.into(),
            insert_claimed_direct: insert_claimed_direct.into(),
            select_by_id: select_by_id.into(),
            select_by_intent: select_by_intent.into(),
            apply: apply.into(),
            apply_after_send: apply_after_send.into(),
            record_unread: record_unread.into(),
            record_unread_direct: record_unread_direct.into(),
            claim_batch: claim_batch.into(),
            record_batch: record_batch.into(),
            claim_due: claim_due.into(),
            claim_prepared: claim_prepared.into(),
            sweep_expired: sweep_expired.into(),
            quarantine: quarantine.into(),
            select_quarantined: select_quarantined.into(),
            select_for_release: select_for_release.into(),
            release: release.into(),
            insert_evidence_batch: insert_evidence_batch.into(),
            append_evidence: append_evidence.into(),
            select_evidence: select_evidence.into(),
        }
    }
}
