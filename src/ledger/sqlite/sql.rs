//! The SQL text of the SQLite ledger, and how each statement's parameters are bound.

use sqlx::sqlite::{SqliteArguments, SqliteConnection};

use super::unavailable;
use crate::ledger::codec::{
    CallbackEventColumns, EvidenceColumns, QuarantinedCallbackColumns, RowColumns, UpdateColumns,
    evidence_columns, frozen_columns, mutable_columns, prepared_columns,
};
use crate::ledger::{LedgerError, OperationId, Tenant};

// The `state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY')` and `state = 'IN_FLIGHT'` terms repeat
// the WHERE clauses of the partial indexes verbatim: SQLite only uses a partial index when the
// query contains its condition as a term.

/// Inserts a new operation and, only if the row was inserted (`changes() = 1` after the
/// `ON CONFLICT DO NOTHING`), its `created` entry; the entry's id comes back as the one row.
/// One round trip to the connection's thread instead of two. Parameters ?1..?14: see
/// [`bind_prepared`]; ?15..?22 are the evidence columns after tenant and operation id (see
/// [`bind_evidence`]).
pub(super) const INSERT_OPERATION: &str = concat!(
    "INSERT INTO rw_operations (",
    frozen_columns!(),
    ", ",
    prepared_columns!(),
    ")
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,
        'PREPARED', 0, 0, 0, 0, 0, ?14, ?14)
ON CONFLICT DO NOTHING;
INSERT INTO rw_evidence (",
    evidence_columns!(),
    ")
SELECT ?1, ?2, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22 WHERE changes() = 1
RETURNING id"
);

/// [`Ledger::create_and_apply`](crate::ledger::Ledger::create_and_apply): inserts the claimed
/// row whole and, only if it was inserted, the `created` entry and then `first`'s entry, each
/// guarded by `changes() = 1` of the statement before it. The last entry's id comes back as the
/// one row iff the operation was created.
///
/// Parameters: ?1 tenant, ?2 operation id, ?3..?10 the `created` entry and ?11..?18 `first`'s
/// entry (see [`bind_evidence`]), ?19..?47 the other columns of the row (see [`bind_row`]).
/// The entries come first on purpose: sqlx binds a statement's *unused* parameter slots below
/// its highest one from a running counter, and stops binding (leaving NULLs) once that counter
/// passes the number of arguments; small gaps keep it in range.
pub(super) const INSERT_CLAIMED: &str = concat!(
    "INSERT INTO rw_operations (",
    frozen_columns!(),
    ", ",
    mutable_columns!(),
    ")
VALUES (?1, ?2, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33,
        ?34, ?35, ?36, ?37, ?38, ?39, ?40, ?41, ?42, ?43, ?44, ?45, ?46, ?47)
ON CONFLICT DO NOTHING;
INSERT INTO rw_evidence (",
    evidence_columns!(),
    ")
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 WHERE changes() = 1;
INSERT INTO rw_evidence (",
    evidence_columns!(),
    ")
SELECT ?1, ?2, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18 WHERE changes() = 1
RETURNING id"
);

pub(super) const SELECT_BY_ID: &str =
    "SELECT * FROM rw_operations WHERE tenant = ?1 AND operation_id = ?2";

pub(super) const SELECT_BY_INTENT: &str =
    "SELECT * FROM rw_operations WHERE tenant = ?1 AND action = ?2 AND intent_ref = ?3";

/// The compare-and-swap, and in the same round trip its evidence entry, inserted only if the
/// row changed (`changes() = 1` after the `UPDATE`). Parameters: see [`bind_apply`]; ?24..?31
/// are the evidence columns after tenant and operation id (see [`bind_evidence`]).
pub(super) const APPLY: &str = concat!(
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
  AND NOT (?1 = 'REJECTED' AND may_have_applied = 1 AND ?23 = 0)
RETURNING *;
INSERT INTO rw_evidence (",
    evidence_columns!(),
    ")
SELECT ?18, ?19, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31 WHERE changes() = 1"
);

// The claims and the sweep name their partial index (INDEXED BY): without statistics
// (no ANALYZE) the planner would rather take the listing index `rw_operations_by_state` for
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

pub(super) const SELECT_EVIDENCE: &str = concat!(
    "SELECT id, ",
    evidence_columns!(),
    " FROM rw_evidence WHERE tenant = ?1 AND operation_id = ?2 ORDER BY id"
);

/// A statement with its arguments, kept so that its write can run again (a write runs once
/// more for every failed write before it in its batch, see `run_batch`).
pub(super) struct Statement {
    sql: &'static str,
    arguments: SqliteArguments,
}

impl Statement {
    /// `sql` with the arguments `bind` gives it.
    pub(super) fn new(
        sql: &'static str,
        bind: impl FnOnce(SqliteQuery) -> SqliteQuery,
    ) -> Result<Self, LedgerError> {
        Self::try_new(sql, |query| Ok(bind(query)))
    }

    /// `sql` with the arguments `bind` gives it, if it can.
    pub(super) fn try_new(
        sql: &'static str,
        bind: impl FnOnce(SqliteQuery) -> Result<SqliteQuery, LedgerError>,
    ) -> Result<Self, LedgerError> {
        let mut query = bind(sqlx::query(sql))?;
        let arguments = sqlx::Execute::take_arguments(&mut query)
            .map_err(LedgerError::Unavailable)?
            .unwrap_or_default();
        Ok(Self { sql, arguments })
    }

    /// The query, ready to run (the arguments are reference counted: cloning them is cheap).
    pub(super) fn query(&self) -> SqliteQuery {
        sqlx::query_with(self.sql, self.arguments.clone())
    }
}

/// A query with owned arguments.
pub(super) type SqliteQuery = sqlx::query::Query<'static, sqlx::Sqlite, SqliteArguments>;

/// Binds an evidence entry's columns after tenant and operation id, in table order (eight
/// parameters).
pub(super) fn bind_evidence(query: SqliteQuery, e: EvidenceColumns) -> SqliteQuery {
    query
        .bind(e.attempt_id)
        .bind(e.generation)
        .bind(e.kind)
        .bind(e.from_state)
        .bind(e.to_state)
        .bind(e.evidence)
        .bind(e.note)
        .bind(e.at_ms)
}

/// Inserts an evidence entry with `sql` ([`INSERT_EVIDENCE`] or [`APPEND_EVIDENCE`]).
pub(super) async fn insert_evidence(
    e: EvidenceColumns,
    sql: &'static str,
    conn: &mut SqliteConnection,
    tenant: &Tenant,
    id: &OperationId,
) -> Result<(), LedgerError> {
    let query = sqlx::query(sql)
        .bind(tenant.as_str().to_owned())
        .bind(id.as_str().to_owned());
    bind_evidence(query, e)
        .execute(conn)
        .await
        .map_err(unavailable)?;
    Ok(())
}

/// Binds a new row's frozen columns and its creation time: ?1..?14 of [`INSERT_OPERATION`].
pub(super) fn bind_prepared(query: SqliteQuery, r: RowColumns) -> SqliteQuery {
    query
        .bind(r.tenant)
        .bind(r.operation_id)
        .bind(r.action)
        .bind(r.intent_ref)
        .bind(r.idempotency_key)
        .bind(r.payload_hash)
        .bind(r.request_method)
        .bind(r.request_url)
        .bind(r.request_headers)
        .bind(r.request_body)
        .bind(r.contract_name)
        .bind(r.contract_hash)
        .bind(r.budget_policy)
        .bind(r.created_ms)
}

/// Binds every column of a row after tenant and operation id, in table order (29 parameters,
/// see [`INSERT_CLAIMED`]).
pub(super) fn bind_row(query: SqliteQuery, r: RowColumns) -> SqliteQuery {
    query
        .bind(r.action)
        .bind(r.intent_ref)
        .bind(r.idempotency_key)
        .bind(r.payload_hash)
        .bind(r.request_method)
        .bind(r.request_url)
        .bind(r.request_headers)
        .bind(r.request_body)
        .bind(r.contract_name)
        .bind(r.contract_hash)
        .bind(r.budget_policy)
        .bind(r.state)
        .bind(r.last_result)
        .bind(r.generation)
        .bind(r.version)
        .bind(r.attempts_used)
        .bind(r.queries_used)
        .bind(i64::from(r.may_have_applied))
        .bind(r.current_attempt)
        .bind(r.lease_until_ms)
        .bind(r.next_check_ms)
        .bind(r.deadline_ms)
        .bind(r.remote_ref)
        .bind(r.reason)
        .bind(r.response.status.map(i64::from))
        .bind(r.response.headers)
        .bind(r.response.body)
        .bind(r.created_ms)
        .bind(r.updated_ms)
}

/// Binds all the parameters of [`APPLY`] (31).
pub(super) fn bind_apply(query: SqliteQuery, u: UpdateColumns) -> SqliteQuery {
    let query = query
        .bind(u.state)
        .bind(u.last_result)
        .bind(u.generation)
        .bind(u.attempts_used)
        .bind(u.queries_used)
        .bind(i64::from(u.reset_may_have_applied))
        .bind(i64::from(u.may_have_applied))
        .bind(u.current_attempt)
        .bind(u.lease_until_ms)
        .bind(u.next_check_ms)
        .bind(u.deadline_ms)
        .bind(u.remote_ref)
        .bind(u.reason)
        .bind(u.response.status.map(i64::from))
        .bind(u.response.headers)
        .bind(u.response.body)
        .bind(u.now_ms)
        .bind(u.tenant)
        .bind(u.operation_id)
        .bind(u.expect_state)
        .bind(u.expect_generation)
        .bind(u.expect_version)
        .bind(i64::from(u.operation_level));
    bind_evidence(query, u.evidence)
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

pub(super) const SELECT_CALLBACK_QUARANTINE: &str = "
SELECT vendor, event_id, event_type, tenant, match_by, match_value, reason, evidence, received_ms
FROM rw_callback_quarantine ORDER BY id LIMIT ?1";

/// Whether an operation exists: ?1 tenant, ?2 operation id.
pub(super) const OPERATION_EXISTS: &str =
    "SELECT 1 FROM rw_operations WHERE tenant = ?1 AND operation_id = ?2";

/// The oldest operation of ?1 with the vendor reference ?2 (index `rw_operations_by_remote_ref`).
pub(super) const SELECT_BY_REMOTE_REF: &str = "
SELECT * FROM rw_operations WHERE tenant = ?1 AND remote_ref = ?2
ORDER BY created_ms, rowid LIMIT 1";

/// The oldest operation of ?1 with the idempotency key ?2 (index
/// `rw_operations_by_idempotency_key`).
pub(super) const SELECT_BY_IDEMPOTENCY_KEY: &str = "
SELECT * FROM rw_operations WHERE tenant = ?1 AND idempotency_key = ?2
ORDER BY created_ms, rowid LIMIT 1";

/// Binds the seven parameters of [`INSERT_CALLBACK_EVENT`].
pub(super) fn bind_callback_event(query: SqliteQuery, e: CallbackEventColumns) -> SqliteQuery {
    query
        .bind(e.vendor)
        .bind(e.event_id)
        .bind(e.event_type)
        .bind(e.tenant)
        .bind(e.operation_id)
        .bind(e.outcome)
        .bind(e.received_ms)
}

/// Binds the nine parameters of [`INSERT_CALLBACK_QUARANTINE`].
pub(super) fn bind_quarantined_callback(
    query: SqliteQuery,
    q: QuarantinedCallbackColumns,
) -> SqliteQuery {
    query
        .bind(q.vendor)
        .bind(q.event_id)
        .bind(q.event_type)
        .bind(q.tenant)
        .bind(q.match_by)
        .bind(q.match_value)
        .bind(q.reason)
        .bind(q.evidence)
        .bind(q.received_ms)
}
