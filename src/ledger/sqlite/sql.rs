//! The SQL text of the SQLite ledger, and how each statement's parameters are bound.

use rusqlite::types::Value;

use super::conn::{Args, Conn, SqlRow};
use crate::ledger::codec::{
    CallbackEventColumns, EvidenceColumns, QuarantinedCallbackColumns, RowColumns, UpdateColumns,
    evidence_columns, frozen_columns, mutable_columns, prepared_columns,
};
use crate::ledger::{LedgerError, OperationId, Tenant};

// The `state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY')` and `state = 'IN_FLIGHT'` terms repeat
// the WHERE clauses of the partial indexes verbatim: SQLite only uses a partial index when the
// query contains its condition as a term.

/// Inserts a new operation; conflicts (the same id, the same intent) insert nothing. Parameters
/// ?1..?14: see [`bind_prepared`]. Its `created` entry follows ([`INSERT_EVIDENCE`]) only if
/// the row was inserted.
pub(super) const INSERT_OPERATION: &str = concat!(
    "INSERT INTO rw_operations (",
    frozen_columns!(),
    ", ",
    prepared_columns!(),
    ")
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,
        'PREPARED', 0, 0, 0, 0, 0, ?14, ?14)
ON CONFLICT DO NOTHING"
);

/// [`Ledger::create_and_apply`](crate::ledger::Ledger::create_and_apply): inserts the claimed
/// row whole (parameters: see [`bind_row`]); conflicts insert nothing. The `created` entry and
/// the first update's entry follow only if the row was inserted.
pub(super) const INSERT_CLAIMED: &str = concat!(
    "INSERT INTO rw_operations (",
    frozen_columns!(),
    ", ",
    mutable_columns!(),
    ")
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
        ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31)
ON CONFLICT DO NOTHING"
);

pub(super) const SELECT_BY_ID: &str =
    "SELECT * FROM rw_operations WHERE tenant = ?1 AND operation_id = ?2";

pub(super) const SELECT_BY_INTENT: &str =
    "SELECT * FROM rw_operations WHERE tenant = ?1 AND action = ?2 AND intent_ref = ?3";

/// The compare-and-swap: the changed row comes back, or nothing if a precondition refused it.
/// Parameters: see [`bind_apply`]. Its evidence entry follows ([`INSERT_EVIDENCE`]) only if the
/// row changed.
pub(super) const APPLY: &str = concat!(apply_update!(), "\nRETURNING *");

/// [`APPLY`] without reading the row back
/// ([`Ledger::record_unread`](crate::ledger::Ledger::record_unread)): whether it changed is
/// SQLite's count of changed rows.
pub(super) const APPLY_UNREAD: &str = apply_update!();

/// The `UPDATE` of [`APPLY`] and [`APPLY_UNREAD`].
macro_rules! apply_update {
    () => {
        "
UPDATE rw_operations SET
    state = ?1,
    last_result = ?2,
    generation = ?3,
    attempts_used = ?4,
    queries_used = ?5,
    may_have_applied = CASE WHEN ?6 THEN ?7 ELSE MAX(may_have_applied, ?7) END,
    current_attempt = ?8,
    lease_until_ms = ?9,
    next_check_ms = ?10,
    deadline_ms = ?11,
    remote_ref = ?12,
    reason = ?13,
    response_status = ?14,
    response_headers = ?15,
    response_body = ?16,
    updated_ms = ?17,
    version = version + 1
WHERE tenant = ?18 AND operation_id = ?19
  AND state = ?20 AND generation = ?21 AND version = ?22
  AND NOT (?1 = 'REJECTED' AND may_have_applied = 1 AND ?23 = 0)"
    };
}
use apply_update;

// The claims and the sweep name their partial index (INDEXED BY): without statistics
// (no ANALYZE) the planner would rather take the listing index `rw_operations_by_state` for
// their `state` terms, then sort every row of those states instead of reading only the due ones.
pub(super) const CLAIM_DUE: &str = "
UPDATE rw_operations SET
    generation = generation + 1,
    version = version + 1,
    lease_until_ms = ?2,
    updated_ms = ?1
WHERE rowid IN (
    SELECT rowid FROM rw_operations INDEXED BY rw_operations_due
    WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY')
      AND next_check_ms <= ?1
      AND (lease_until_ms IS NULL OR lease_until_ms <= ?1)
      AND quarantine_reason IS NULL
    ORDER BY next_check_ms, rowid
    LIMIT ?3
)
RETURNING rowid AS rw_rowid, *";

/// [`Ledger::claim_prepared`]: ?1 now, ?2 the new lease end, ?3 the latest creation time that
/// is old enough, ?4 the limit.
pub(super) const CLAIM_PREPARED: &str = "
UPDATE rw_operations SET
    generation = generation + 1,
    version = version + 1,
    lease_until_ms = ?2,
    updated_ms = ?1
WHERE rowid IN (
    SELECT rowid FROM rw_operations INDEXED BY rw_operations_prepared
    WHERE state = 'PREPARED'
      AND created_ms <= ?3
      AND (lease_until_ms IS NULL OR lease_until_ms <= ?1)
      AND quarantine_reason IS NULL
    ORDER BY created_ms, rowid
    LIMIT ?4
)
RETURNING rowid AS rw_rowid, *";

/// Sets a row that could not be decoded aside: ?1 the reason, ?2 now, ?3 its rowid.
pub(super) const QUARANTINE: &str =
    "UPDATE rw_operations SET quarantine_reason = ?1, quarantined_ms = ?2 WHERE rowid = ?3";

pub(super) const SELECT_QUARANTINED: &str = "
SELECT tenant, operation_id, quarantine_reason, quarantined_ms FROM rw_operations
WHERE quarantine_reason IS NOT NULL
ORDER BY quarantined_ms, rowid
LIMIT ?1";

pub(super) const SWEEP_EXPIRED: &str = "
UPDATE rw_operations INDEXED BY rw_operations_in_flight_lease SET
    state = 'UNKNOWN',
    generation = generation + 1,
    version = version + 1,
    may_have_applied = 1,
    next_check_ms = ?1,
    lease_until_ms = NULL,
    reason = ?2,
    updated_ms = ?1
WHERE state = 'IN_FLIGHT' AND lease_until_ms < ?1 AND quarantine_reason IS NULL
RETURNING rowid AS rw_rowid, *";

pub(super) const INSERT_EVIDENCE: &str = concat!(
    "INSERT INTO rw_evidence (",
    evidence_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
);

pub(super) const APPEND_EVIDENCE: &str = concat!(
    "INSERT INTO rw_evidence (",
    evidence_columns!(),
    ")
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10
WHERE EXISTS (SELECT 1 FROM rw_operations WHERE tenant = ?1 AND operation_id = ?2)"
);

/// Advances the version of an operation that an entry is appended to on its own: every decision
/// made on the row as it was before the entry is then refused as stale (the fencing rule).
pub(super) const BUMP_VERSION: &str =
    "UPDATE rw_operations SET version = version + 1 WHERE tenant = ?1 AND operation_id = ?2";

/// An evidence entry appended on its own (late evidence, callbacks, reviewers' notes): the
/// operation's version advances and the entry is inserted, in the caller's transaction.
#[derive(Debug)]
pub(super) struct Append {
    bump: Statement,
    insert: Statement,
}

impl Append {
    /// The entry `e` for operation (`tenant`, `id`).
    pub(super) fn new(tenant: &Tenant, id: &OperationId, e: EvidenceColumns) -> Self {
        Self {
            bump: Statement::new(BUMP_VERSION, |a| {
                a.push(tenant.as_str()).push(id.as_str());
            }),
            insert: evidence(APPEND_EVIDENCE, tenant, id, e),
        }
    }

    /// Runs it; the number of entries appended (0: no such operation, nothing changed).
    pub(super) fn execute(&self, conn: &Conn) -> Result<usize, LedgerError> {
        if self.bump.execute(conn)? == 0 {
            return Ok(0);
        }
        self.insert.execute(conn)
    }
}

pub(super) const SELECT_EVIDENCE: &str = concat!(
    "SELECT id, ",
    evidence_columns!(),
    " FROM rw_evidence WHERE tenant = ?1 AND operation_id = ?2 ORDER BY id"
);

/// A statement with its arguments, kept so that its write can run again (a write runs once
/// more for every failed write before it in its batch, see `run_batch`).
#[derive(Debug)]
pub(super) struct Statement {
    pub(super) sql: &'static str,
    pub(super) args: Vec<Value>,
}

impl Statement {
    /// `sql` with the arguments `bind` gives it.
    pub(super) fn new(sql: &'static str, bind: impl FnOnce(&mut Args)) -> Self {
        let mut args = Args::with_capacity(32);
        bind(&mut args);
        Self { sql, args: args.0 }
    }

    /// Runs it; the number of rows it changed.
    pub(super) fn execute(&self, conn: &Conn) -> Result<usize, LedgerError> {
        conn.execute(self.sql, &self.args)
    }

    /// Runs it and reads the rows it returns.
    pub(super) fn rows(&self, conn: &mut Conn) -> Result<Vec<SqlRow>, LedgerError> {
        conn.rows(self.sql, &self.args)
    }

    /// Whether it returns a row.
    pub(super) fn exists(&self, conn: &Conn) -> Result<bool, LedgerError> {
        conn.exists(self.sql, &self.args)
    }
}

/// Binds an evidence entry's columns after tenant and operation id, in table order (eight
/// parameters).
pub(super) fn bind_evidence(a: &mut Args, e: EvidenceColumns) {
    a.push(e.attempt_id)
        .push(e.generation)
        .push(e.kind)
        .push(e.from_state)
        .push(e.to_state)
        .push(e.evidence)
        .push(e.note)
        .push(e.at_ms);
}

/// An evidence entry of operation (`tenant`, `id`), for [`INSERT_EVIDENCE`] or
/// [`APPEND_EVIDENCE`].
pub(super) fn evidence(
    sql: &'static str,
    tenant: &Tenant,
    id: &OperationId,
    e: EvidenceColumns,
) -> Statement {
    Statement::new(sql, |a| {
        a.push(tenant.as_str()).push(id.as_str());
        bind_evidence(a, e);
    })
}

/// Binds a row's frozen columns, in table order (13 parameters), taking them out of `r`.
fn bind_frozen(a: &mut Args, r: &mut RowColumns) {
    use std::mem::take;
    a.push(take(&mut r.tenant))
        .push(take(&mut r.operation_id))
        .push(take(&mut r.action))
        .push(take(&mut r.intent_ref))
        .push(take(&mut r.idempotency_key))
        .push(take(&mut r.payload_hash))
        .push(take(&mut r.request_method))
        .push(take(&mut r.request_url))
        .push(take(&mut r.request_headers))
        .push(take(&mut r.request_body))
        .push(take(&mut r.contract_name))
        .push(take(&mut r.contract_hash))
        .push(take(&mut r.budget_policy));
}

/// Binds a new row's frozen columns and its creation time: ?1..?14 of [`INSERT_OPERATION`].
pub(super) fn bind_prepared(a: &mut Args, mut r: RowColumns) {
    bind_frozen(a, &mut r);
    a.push(r.created_ms);
}

/// Binds every column of a row in table order (31 parameters, see [`INSERT_CLAIMED`]).
pub(super) fn bind_row(a: &mut Args, mut r: RowColumns) {
    bind_frozen(a, &mut r);
    a.push(r.state)
        .push(r.last_result)
        .push(r.generation)
        .push(r.version)
        .push(r.attempts_used)
        .push(r.queries_used)
        .push(r.may_have_applied)
        .push(r.current_attempt)
        .push(r.lease_until_ms)
        .push(r.next_check_ms)
        .push(r.deadline_ms)
        .push(r.remote_ref)
        .push(r.reason)
        .push(r.response.status.map(i64::from))
        .push(r.response.headers)
        .push(r.response.body)
        .push(r.created_ms)
        .push(r.updated_ms);
}

/// The compare-and-swap `sql` ([`APPLY`] or [`APPLY_UNREAD`]) of `u`, and the insert of its
/// evidence entry, to run once the swap changed the row.
pub(super) fn compare_and_swap(sql: &'static str, u: UpdateColumns) -> (Statement, Statement) {
    let mut entry = Args::with_capacity(10);
    entry.push(u.tenant.as_str()).push(u.operation_id.as_str());
    let mut swap = Args::with_capacity(23);
    bind_evidence(&mut entry, bind_apply(&mut swap, u));
    (
        Statement { sql, args: swap.0 },
        Statement {
            sql: INSERT_EVIDENCE,
            args: entry.0,
        },
    )
}

/// Binds all the parameters of [`APPLY`] (23); returns the evidence entry.
fn bind_apply(a: &mut Args, u: UpdateColumns) -> EvidenceColumns {
    a.push(u.state)
        .push(u.last_result)
        .push(u.generation)
        .push(u.attempts_used)
        .push(u.queries_used)
        .push(u.reset_may_have_applied)
        .push(u.may_have_applied)
        .push(u.current_attempt)
        .push(u.lease_until_ms)
        .push(u.next_check_ms)
        .push(u.deadline_ms)
        .push(u.remote_ref)
        .push(u.reason)
        .push(u.response.status.map(i64::from))
        .push(u.response.headers)
        .push(u.response.body)
        .push(u.now_ms)
        .push(u.tenant)
        .push(u.operation_id)
        .push(u.expect_state)
        .push(u.expect_generation)
        .push(u.expect_version)
        .push(u.operation_level);
    u.evidence
}

// ── vendor callbacks ────────────────────────────────────────────────────────────────────────────

/// Whether an event is in the dedupe table: ?1 vendor, ?2 event id.
pub(super) const SELECT_CALLBACK_EVENT: &str =
    "SELECT 1 FROM rw_callback_events WHERE vendor = ?1 AND event_id = ?2";

/// Records an event in the dedupe table (see [`bind_callback_event`]).
pub(super) const INSERT_CALLBACK_EVENT: &str = "
INSERT INTO rw_callback_events (
    vendor, event_id, event_type, tenant, operation_id, outcome, received_ms
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// Stores a quarantined event (see [`bind_quarantined_callback`]).
pub(super) const INSERT_CALLBACK_QUARANTINE: &str = "
INSERT INTO rw_callback_quarantine (
    vendor, event_id, event_type, tenant, match_by, match_value, reason, evidence, received_ms
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

/// Every tenant's quarantined events, oldest first: ?1 limit.
pub(super) const SELECT_CALLBACK_QUARANTINE: &str = "
SELECT vendor, event_id, event_type, tenant, match_by, match_value, reason, evidence, received_ms
FROM rw_callback_quarantine ORDER BY id LIMIT ?1";

/// One tenant's quarantined events, oldest first (index `rw_callback_quarantine_by_tenant`,
/// whose entries are in `id` order for one tenant): ?1 tenant, ?2 limit.
pub(super) const SELECT_TENANT_CALLBACK_QUARANTINE: &str = "
SELECT vendor, event_id, event_type, tenant, match_by, match_value, reason, evidence, received_ms
FROM rw_callback_quarantine WHERE tenant = ?1 ORDER BY id LIMIT ?2";

/// A tenant other than ?2 with an operation whose id is ?1 (index
/// `rw_operations_by_operation_id`).
pub(super) const SELECT_OTHER_TENANT_BY_ID: &str =
    "SELECT tenant FROM rw_operations WHERE operation_id = ?1 AND tenant <> ?2 LIMIT 1";

/// A tenant other than ?2 with an operation whose vendor reference is ?1 (index
/// `rw_operations_by_remote_ref`, led by the reference).
pub(super) const SELECT_OTHER_TENANT_BY_REMOTE_REF: &str =
    "SELECT tenant FROM rw_operations WHERE remote_ref = ?1 AND tenant <> ?2 LIMIT 1";

/// Marks a contradiction of operation (?1, ?2) at ?3, keeping the first one's time; the
/// version is advanced by the entry's [`Append`].
pub(super) const MARK_CONTRADICTION: &str = "
UPDATE rw_operations SET contradiction_ms = COALESCE(contradiction_ms, ?3)
WHERE tenant = ?1 AND operation_id = ?2";

/// Clears the contradiction of operation (?1, ?2) if it is still at version ?3 and carries one;
/// the version advances (the acknowledgement's entry is inserted with it).
pub(super) const ACKNOWLEDGE_CONTRADICTION: &str = "
UPDATE rw_operations SET contradiction_ms = NULL, version = version + 1
WHERE tenant = ?1 AND operation_id = ?2 AND version = ?3 AND contradiction_ms IS NOT NULL
RETURNING *";

/// Whether an operation exists: ?1 tenant, ?2 operation id.
pub(super) const OPERATION_EXISTS: &str =
    "SELECT 1 FROM rw_operations WHERE tenant = ?1 AND operation_id = ?2";

/// The oldest operation of ?1 with the vendor reference ?2 (index `rw_operations_by_remote_ref`,
/// both its columns equal).
pub(super) const SELECT_BY_REMOTE_REF: &str = "
SELECT * FROM rw_operations WHERE tenant = ?1 AND remote_ref = ?2
ORDER BY created_ms, rowid LIMIT 1";

/// The oldest operation of ?1 with the idempotency key ?2 (index
/// `rw_operations_by_idempotency_key`).
pub(super) const SELECT_BY_IDEMPOTENCY_KEY: &str = "
SELECT * FROM rw_operations WHERE tenant = ?1 AND idempotency_key = ?2
ORDER BY created_ms, rowid LIMIT 1";

/// Binds the seven parameters of [`INSERT_CALLBACK_EVENT`].
pub(super) fn bind_callback_event(a: &mut Args, e: CallbackEventColumns) {
    a.push(e.vendor)
        .push(e.event_id)
        .push(e.event_type)
        .push(e.tenant)
        .push(e.operation_id)
        .push(e.outcome)
        .push(e.received_ms);
}

/// Binds the nine parameters of [`INSERT_CALLBACK_QUARANTINE`].
pub(super) fn bind_quarantined_callback(a: &mut Args, q: QuarantinedCallbackColumns) {
    a.push(q.vendor)
        .push(q.event_id)
        .push(q.event_type)
        .push(q.tenant)
        .push(q.match_by)
        .push(q.match_value)
        .push(q.reason)
        .push(q.evidence)
        .push(q.received_ms);
}
