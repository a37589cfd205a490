//! The shared ledger for many workers on many machines: PostgreSQL over sqlx. See
//! [`PostgresLedger`].

mod connect;
mod group;
mod ledger_impl;
mod migrate;
mod options;
mod outbox;
mod quarantine;
mod retention;
mod sql;
#[cfg(test)]
mod tests;
mod text;
mod workers;
mod writer;

use std::str::FromStr;
use std::sync::Arc;

use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};

use super::codec::{Dialect, EvidenceColumns};
// The row decoder below (`row_decoder!`) names the ledger's types as this module sees them.
use super::*;
pub use options::{ClockSource, PostgresLedgerOptions};
use sql::Statements;
// What the other submodules take from here (`super::check_key`, `super::pg_text`).
use text::{check_key, pg_text};

/// How this backend encodes values.
const POSTGRES: Dialect = Dialect::Postgres;

/// The PostgreSQL [`Ledger`]: many workers on many machines, and the outbox. Cloning gives
/// another handle to the same pool.
///
/// # When to use it
///
/// Several processes (or machines) send writes and run [`Recoverer`](crate::Recoverer)s against
/// one set of operations; or the application already keeps its business rows in PostgreSQL and
/// wants the operation to commit or roll back with them (the outbox, [`PostgresLedger::create_in`]).
/// For one process, the embedded `SqliteLedger` is simpler.
///
/// # Compare-and-swap in the store
///
/// Every state change is **one** conditional statement, never a read-compare-write in Rust:
///
/// - [`Ledger::apply`] is `UPDATE ... WHERE state = $s AND generation = $g AND version = $v
///   AND NOT (<attempt-level REJECTED after a possible apply>) RETURNING ...`, with the evidence
///   row inserted by a data-modifying CTE that reads the `UPDATE`'s output: if the precondition
///   fails, no row is returned and no evidence is written, in the same statement. Under
///   `READ COMMITTED`, a concurrent writer that changed the row first makes PostgreSQL re-check
///   the `WHERE` against the new row version, so exactly one of two racing updates wins.
/// - [`Ledger::claim_due`] selects due rows `FOR UPDATE SKIP LOCKED` in a CTE and bumps their
///   generation and lease in the same statement: concurrent workers never claim the same row
///   and never wait for each other. The `recovery_claimed` entries are inserted in the same
///   transaction.
/// - [`Ledger::sweep_expired`] does the same for `IN_FLIGHT` rows whose lease ran out.
///
/// # Clock
///
/// Leases and due times decide who may act, so every worker must read them on one clock. By
/// default ([`ClockSource::Database`]) the store compares and stamps times with the database's
/// clock, `(extract(epoch from clock_timestamp()) * 1000)::bigint`, and ignores the workers'
/// clocks:
///
/// - `claim_due` and `sweep_expired` compare with the database clock and set leases from it (the
///   `now_ms` argument is ignored; `lease_ms` is a duration and is used as is);
/// - `create_or_get` stamps `created_ms`/`updated_ms` with it; `append_evidence` stamps `at_ms`;
/// - `apply` stamps `updated_ms` with it and **translates** the absolute times the caller
///   computed (`lease_until_ms`, `next_check_ms`, `deadline_ms`, the evidence's `at_ms`) as
///   offsets from [`Changes::now_ms`](crate::ledger::backend::Changes::now_ms) onto the
///   database clock: a lease "15 s from now" computed on a worker whose clock is an hour fast
///   is stored as 15 s from the database's now. A time equal to the row's current value is
///   kept as stored (it was carried over, not computed).
///
/// [`ClockSource::Caller`] uses the times passed in verbatim, exactly like the other backends
/// (the conformance suite runs with it, on synthetic times). Use it only when every worker's
/// clock is trusted to agree.
///
/// The store only decides who may act and when. Decisions the state machine takes in the worker
/// (is the recovery window over? is a `Retry-After` past the deadline?) still compare the
/// worker's clock with the stored deadline, so keep workers' clocks synchronized (NTP) all the
/// same: a skewed worker can escalate early or late, but never breaks a lease or a fence.
///
/// # Durability
///
/// Every statement that must be durable before a request is sent (`create_or_get`,
/// `create_and_apply`, `apply`, `claim_due`, `claim_prepared`, `sweep_expired`,
/// `append_evidence`, and the outbox commit of [`create_in`](Self::create_in) on a
/// transaction begun on [`pool`](Self::pool)) runs with `synchronous_commit = on`: the pool made by
/// [`connect_with`](Self::connect_with) sets it for every session at connect time, which
/// overrides an `ALTER ROLE` or `ALTER DATABASE ... SET synchronous_commit = off`, and
/// [`from_pool`](Self::from_pool) refuses a pool whose sessions have it `off`. Only
/// [`Ledger::record`] (the result written after the send, what a recovery lookup found, a
/// deferral) commits without waiting for the WAL flush (`SET LOCAL` for its own transaction):
/// losing it costs a lookup, never a duplicate, and the next durable commit flushes it first.
/// Connecting to a hot standby (a server in recovery) is refused with [`LedgerError::Config`].
///
/// What the crate guarantees is a flush on the server it talks to, before the send. Whether a
/// commit also waits for a replica is the operator's choice (`synchronous_standby_names`, and
/// `synchronous_commit = on` or `remote_apply` are then honoured as configured): with only
/// asynchronous replicas, a failover to a replica that had not received the last commits can
/// lose a claim whose request was already sent, and a replay of it may then duplicate the write.
/// Run the ledger on a primary with at least one synchronous standby if failover must not lose
/// claims. The `'on'` set at connect never weakens a stronger server setting (`remote_apply`
/// differs from `on` only in read visibility on the standby, which the ledger does not use).
///
/// # Schema and migrations
///
/// Everything lives in one schema ([`PostgresLedgerOptions::schema`], default `public`): the
/// tables `rw_operations`, `rw_evidence` and the migration bookkeeping `rw_schema_migrations`,
/// so the ledger can share a database with the application's own sqlx migrations. The migrations
/// are embedded in the crate (`migrations/postgres/`) and run at connect inside one transaction
/// holding `pg_advisory_xact_lock` on a key derived from the schema name: processes that start
/// at once queue on the lock, and the later ones find the work done. Every statement is
/// schema-qualified; the schema name is validated (`^[a-z_][a-z0-9_]{0,62}$`, not `pg_*`), never
/// spliced from untrusted input.
///
/// # Indexes
///
/// Two partial indexes hold only live work: `rw_operations_due (next_check_ms, seq) WHERE state
/// IN ('UNKNOWN','PROCESSING','RETRY_READY')` and `rw_operations_in_flight_lease (lease_until_ms) WHERE state =
/// 'IN_FLIGHT'`. The claim reads the first in order and stops after `limit` claimable rows; the
/// sweep reads only expired leases. Finished operations, the bulk of the table, are never read.
/// [`Ledger::claim_prepared`] reads `rw_operations_prepared (created_ms, seq) WHERE state =
/// 'PREPARED'` in order, with `FOR UPDATE SKIP LOCKED` like the claim of due work.
///
/// # Plans
///
/// The pool's sessions use `plan_cache_mode = force_custom_plan` (see
/// [`connect_with`](Self::connect_with)), except the two statements of every request: the claim
/// of [`Ledger::create_and_apply`] and the compare-and-swap of [`Ledger::apply`] and
/// [`Ledger::record`] run in the functions `rw_claim_new` and `rw_apply` (migration 0009), whose
/// own statements use generic plans, planned once per connection instead of at every
/// execution. Their shape makes a generic plan safe whatever the statistics say: the claim is an
/// `INSERT`, and the compare-and-swap finds its row through the primary key's leading column,
/// the operation id, alone (its tenant and state terms cannot serve as index conditions).
/// The connections the write path keeps between its statements (with a pool of 4 or more) set
/// `plan_cache_mode = force_generic_plan` for their session (and, for the results',
/// `synchronous_commit = off`): on them the claim and the result of a request alone run as
/// the functions' bodies, plain statements planned once per connection, which saves the call
/// (a PL/pgSQL frame, its settings set and reset, its result kept in a tuplestore); only the
/// statement's clock or a count comes back, never the row. The settings are reset before such
/// a connection goes back to the pool, and one whose statement failed or was abandoned is
/// closed instead.
///
/// Under concurrency, the claims that arrive while others are being written share one
/// statement and one commit (`rw_claim_batch`, migration 0012), and so do the results recorded
/// after the send (`rw_record_batch`); a request alone uses the single-row functions. Every
/// caller still waits for its own group's commit: a claim is durable before its request is
/// sent.
///
/// # Errors
///
/// Connection, statement and commit failures are [`LedgerError::Unavailable`] (nothing was
/// changed). A row that cannot be decoded is [`LedgerError::Corrupt`], never a panic; a claim
/// or sweep that meets one quarantines it in the same transaction and goes on with the healthy
/// rows (see [`Ledger::quarantined`]); [`Ledger::release_quarantined`] gives it back to recovery
/// once this version decodes it. A bad
/// schema name, or migrations that do not match the database's history, is
/// [`LedgerError::Config`].
///
/// Free text the database cannot hold (a NUL character in a reason, note or remote reference) is
/// stored with U+FFFD in its place, so a vendor's odd answer never makes a result unrecordable.
/// A NUL in a key field (tenant, operation id, action, intent, idempotency key, the request's
/// method or URL, the contract's name or hash) is refused before any statement with a
/// [`LedgerError::Config`] that names the field.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> Result<(), recoverable_write::ledger::LedgerError> {
/// use recoverable_write::ledger::{ClockSource, PostgresLedger, PostgresLedgerOptions};
///
/// let ledger = PostgresLedger::connect("postgres://app@db.internal/app").await?;
///
/// // Or in a schema of its own, with a bigger pool:
/// let options = PostgresLedgerOptions::new()
///     .schema("recoverable_write")?
///     .max_connections(16)
///     .clock(ClockSource::Database);
/// let other = PostgresLedger::connect_with("postgres://app@db.internal/app", options).await?;
/// # let _ = (ledger, other);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresLedger {
    pool: PgPool,
    schema: Arc<str>,
    clock: ClockSource,
    sql: Arc<Statements>,
    /// When this ledger (any clone) last vacuumed its tables itself (see `reclaim_space`).
    vacuumed: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    /// Group commit of concurrent claims and results (see `group`).
    groups: Arc<Groups>,
}

/// The two kinds of grouped writes, and the connections each keeps.
#[derive(Debug)]
struct Groups {
    claims: group::Group<group::ClaimWrite>,
    claims_warm: Arc<group::Warm>,
    records: group::Group<group::RecordWrite>,
    records_warm: Arc<group::Warm>,
}

impl Groups {
    /// A quarter of the pool per kind writes its groups (at least one task) and may be kept
    /// warm between statements (none under a pool of 4), so claims and results under load
    /// never wait for each other's connections. A connection is kept only while the pool has
    /// one to spare, so the ledger's other statements never wait for a kept one.
    fn new(pool: &PgPool, sql: &Statements) -> Self {
        let quarter = pool.options().get_max_connections() as usize / 4;
        let share = quarter.max(1);
        let claims_warm = group::Warm::new(pool.clone(), quarter, group::Mode::CLAIMS);
        let records_warm = group::Warm::new(pool.clone(), quarter, group::Mode::RECORDS);
        Self {
            claims: group::Group::new(
                group::ClaimWrite {
                    warm: claims_warm.clone(),
                    sql: sql.claim_batch.clone(),
                },
                share,
            ),
            claims_warm,
            records: group::Group::new(
                group::RecordWrite {
                    warm: records_warm.clone(),
                    sql: sql.record_batch.clone(),
                },
                share,
            ),
            records_warm,
        }
    }

    /// Every keeper's connections.
    fn keepers(&self) -> [&group::Warm; 2] {
        [&self.claims_warm, &self.records_warm]
    }
}

impl PostgresLedger {
    /// The caller's time, or `None` to let the statement read the database clock.
    fn caller_now(&self, now_ms: i64) -> Option<i64> {
        match self.clock {
            ClockSource::Database => None,
            ClockSource::Caller => Some(now_ms),
        }
    }
}

fn unavailable(e: sqlx::Error) -> LedgerError {
    LedgerError::Unavailable(Box::new(e))
}

// ── decoding ────────────────────────────────────────────────────────────────────────────────────

super::codec::row_decoder!(PgRow);

/// A query binding an evidence entry's columns in the order of `evidence_columns!` after the
/// operation's key: attempt id, generation, kind, from and to state, the evidence, the note.
trait BindEntry<'q> {
    /// The entry's columns, without its time (the statement puts that on its own clock).
    fn bind_entry(self, e: EvidenceColumns) -> Self;
    /// The entry's columns and its time.
    fn bind_entry_at(self, e: EvidenceColumns) -> Self;
}

impl<'q> BindEntry<'q> for sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    fn bind_entry(self, e: EvidenceColumns) -> Self {
        self.bind(e.attempt_id)
            .bind(e.generation)
            .bind(e.kind)
            .bind(e.from_state)
            .bind(e.to_state)
            .bind(e.evidence)
            .bind(e.note)
    }

    fn bind_entry_at(self, e: EvidenceColumns) -> Self {
        let at_ms = e.at_ms;
        self.bind_entry(e).bind(at_ms)
    }
}

/// Binds a listing statement's arguments in order.
fn bind_args(
    mut query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    args: Vec<super::query::Arg>,
) -> sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments> {
    for a in args {
        query = match a {
            super::query::Arg::Text(t) => query.bind(t),
            super::query::Arg::Int(i) => query.bind(i),
        };
    }
    query
}

impl<'r> Columns<'r> {
    fn get<T>(&self, column: &str) -> Result<T, LedgerError>
    where
        T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        self.row
            .try_get::<T, _>(column)
            .map_err(|e| self.corrupt(format!("column {column}: {e}")))
    }
}

impl Columns<'_> {
    fn flag(&self, column: &str) -> Result<bool, LedgerError> {
        self.get::<bool>(column)
    }

    fn status(&self, column: &str) -> Result<Option<u16>, LedgerError> {
        self.get::<Option<i32>>(column)?
            .map(|v| {
                u16::try_from(v)
                    .map_err(|_| self.corrupt(format!("column {column}: {v} out of range")))
            })
            .transpose()
    }
}
