//! The shared ledger for many workers on many machines: PostgreSQL over sqlx. See
//! [`PostgresLedger`].

mod quarantine;
mod retention;
mod sql;
#[cfg(test)]
mod tests;
mod writer;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Row};

use super::callback::check_effect;
use super::codec::{Dialect, EvidenceColumns, RowColumns, to_json};
use super::*;
use sql::{DB_NOW, Statements};
use writer::finish;

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
/// [`Ledger::record`], the result written after the send, commits without waiting for the WAL
/// flush (`SET LOCAL` for its own transaction): losing it costs a lookup, never a duplicate.
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
}

/// Whose clock leases and due times are read on. See [`PostgresLedger`'s docs](PostgresLedger#clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockSource {
    /// The database server's clock (`clock_timestamp()`): one clock for every worker, whatever
    /// their own clocks say. Caller-computed absolute times in
    /// [`Changes`](crate::ledger::backend::Changes) are translated as offsets from
    /// [`Changes::now_ms`](crate::ledger::backend::Changes::now_ms). The default.
    #[default]
    Database,
    /// The times passed by the caller, verbatim (as `SqliteLedger` and [`MemoryLedger`] do). For tests with synthetic times, or fleets with trusted clocks.
    Caller,
}

/// Options for [`PostgresLedger::connect_with`] and [`PostgresLedger::from_pool`].
///
/// ```
/// use std::time::Duration;
/// use recoverable_write::ledger::{ClockSource, PostgresLedgerOptions};
///
/// let options = PostgresLedgerOptions::new()
///     .schema("billing_ledger")
///     .expect("a valid schema name")
///     .max_connections(4)
///     .acquire_timeout(Duration::from_secs(2));
/// assert_eq!(options.schema, "billing_ledger");
/// assert_eq!(options.clock, ClockSource::Database);
/// assert!(PostgresLedgerOptions::new().schema("Robert'); DROP TABLE students;--").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresLedgerOptions {
    /// The schema holding the ledger's tables, created if missing. Default `public`.
    /// Set it with [`schema`](Self::schema), which validates it.
    pub schema: String,
    /// Whose clock leases and due times use. Default [`ClockSource::Database`].
    pub clock: ClockSource,
    /// Most connections in the pool ([`connect_with`](PostgresLedger::connect_with) only).
    /// Default 8; at least 1.
    pub max_connections: u32,
    /// How long a call waits for a free connection before failing with
    /// [`LedgerError::Unavailable`] ([`connect_with`](PostgresLedger::connect_with) only).
    /// Default 5 s.
    pub acquire_timeout: Duration,
    /// Ping a pooled connection before every use ([`connect_with`](PostgresLedger::connect_with)
    /// only). Default `false`: a ping is a round trip before every ledger statement (it doubled
    /// the round trips of a write). Without it, a connection the server dropped fails its next
    /// statement with [`LedgerError::Unavailable`] and is discarded; before a send, that write
    /// fails with nothing sent, exactly as when the database is down.
    pub test_before_acquire: bool,
}

impl Default for PostgresLedgerOptions {
    fn default() -> Self {
        Self {
            schema: "public".to_owned(),
            clock: ClockSource::Database,
            max_connections: 8,
            acquire_timeout: Duration::from_secs(5),
            test_before_acquire: false,
        }
    }
}

impl PostgresLedgerOptions {
    /// The defaults: schema `public`, the database clock, 8 connections, a 5 s acquire timeout,
    /// no ping before each use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the schema. It must match `^[a-z_][a-z0-9_]{0,62}$` and not start with `pg_`
    /// (reserved by PostgreSQL); anything else is [`LedgerError::Config`].
    pub fn schema(mut self, schema: impl Into<String>) -> Result<Self, LedgerError> {
        let schema = schema.into();
        validate_schema(&schema)?;
        self.schema = schema;
        Ok(self)
    }

    /// Sets whose clock leases and due times use.
    pub fn clock(mut self, clock: ClockSource) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the pool size (at least 1).
    pub fn max_connections(mut self, max_connections: u32) -> Self {
        self.max_connections = max_connections;
        self
    }

    /// Sets how long a call waits for a free connection.
    pub fn acquire_timeout(mut self, acquire_timeout: Duration) -> Self {
        self.acquire_timeout = acquire_timeout;
        self
    }

    /// Sets whether a pooled connection is pinged before every use (see
    /// [`test_before_acquire`](Self::test_before_acquire)).
    pub fn test_before_acquire(mut self, test: bool) -> Self {
        self.test_before_acquire = test;
        self
    }
}

/// Checks a schema name: `^[a-z_][a-z0-9_]{0,62}$`, and not `pg_*`.
fn validate_schema(schema: &str) -> Result<(), LedgerError> {
    let bytes = schema.as_bytes();
    let valid = matches!(bytes.first(), Some(b'a'..=b'z' | b'_'))
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'));
    if !valid {
        return Err(LedgerError::Config(format!(
            "invalid schema name {schema:?}: use 1 to 63 characters of [a-z0-9_], not starting \
             with a digit"
        )));
    }
    if schema.starts_with("pg_") {
        return Err(LedgerError::Config(format!(
            "invalid schema name {schema:?}: names starting with pg_ are reserved by PostgreSQL"
        )));
    }
    Ok(())
}

impl PostgresLedger {
    /// Connects to `url` with the default options (schema `public`, database clock) and runs
    /// the embedded migrations.
    pub async fn connect(url: &str) -> Result<Self, LedgerError> {
        Self::connect_with(url, PostgresLedgerOptions::default()).await
    }

    /// Connects to `url` with a pool of [`PostgresLedgerOptions::max_connections`], creates the
    /// schema if needed and runs the embedded migrations. The pool's connections use
    /// `plan_cache_mode = force_custom_plan`: a generic plan made while the ledger was empty
    /// would scan the whole table on every write. A pool passed to [`from_pool`](Self::from_pool)
    /// should do the same (`PgConnectOptions::options`).
    pub async fn connect_with(
        url: &str,
        options: PostgresLedgerOptions,
    ) -> Result<Self, LedgerError> {
        validate_schema(&options.schema)?;
        if options.max_connections == 0 {
            return Err(LedgerError::Config(
                "max_connections must be at least 1".to_owned(),
            ));
        }
        let connect: PgConnectOptions = url
            .parse()
            .map_err(|e| LedgerError::Config(format!("invalid PostgreSQL URL: {e}")))?;
        // Every ledger statement is prepared once per connection. After five executions
        // PostgreSQL may switch to a generic plan chosen from the table's size at that moment;
        // chosen while the table was empty (a new or truncated ledger, before any ANALYZE), it
        // scans the whole table on every write for as long as the connection lives (measured
        // here with autovacuum off: 9 ms per request at concurrency 1 instead of 0.9 ms). Custom
        // plans are made for the actual key every time: a little planning per statement, no
        // cliff.
        //
        // `synchronous_commit = on` in the startup packet overrides an `ALTER ROLE` or
        // `ALTER DATABASE ... SET synchronous_commit = off`: a claim must be flushed before its
        // bytes are sent (see "Durability" in the type's docs).
        let connect = connect.options([
            ("plan_cache_mode", "force_custom_plan"),
            ("synchronous_commit", "on"),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(options.test_before_acquire)
            .connect_with(connect)
            .await
            .map_err(unavailable)?;
        match Self::from_pool(pool.clone(), options).await {
            Ok(ledger) => Ok(ledger),
            Err(e) => {
                // Nobody else holds this pool: close its connections now rather than leave them
                // to the runtime.
                pool.close().await;
                Err(e)
            }
        }
    }

    /// A ledger over an existing pool (the application's own, for instance). Creates the schema
    /// if needed and runs the embedded migrations; the pool-size options are not used.
    ///
    /// The pool's sessions must commit synchronously: build it with
    /// `PgConnectOptions::options([("synchronous_commit", "on")])` if the role or database
    /// defaults to `off`. See [Durability](Self#durability).
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] if the server is a hot standby (in recovery) or a session of the
    /// pool has `synchronous_commit = off`.
    pub async fn from_pool(
        pool: PgPool,
        options: PostgresLedgerOptions,
    ) -> Result<Self, LedgerError> {
        validate_schema(&options.schema)?;
        check_durability(&pool).await?;
        migrate(&pool, &options.schema).await?;
        Ok(Self {
            sql: Arc::new(Statements::new(&options.schema)),
            schema: Arc::from(options.schema.as_str()),
            clock: options.clock,
            pool,
            vacuumed: Arc::default(),
        })
    }

    /// The pool this ledger uses: begin the outbox transaction on it (see
    /// [`create_in`](Self::create_in)).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding the ledger's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Whose clock this ledger reads leases and due times on.
    pub fn clock_source(&self) -> ClockSource {
        self.clock
    }

    /// The database clock, in milliseconds since the Unix epoch: the clock leases and due times
    /// are on with [`ClockSource::Database`].
    pub async fn database_now_ms(&self) -> Result<i64, LedgerError> {
        sqlx::query_scalar(DB_NOW)
            .fetch_one(&self.pool)
            .await
            .map_err(unavailable)
    }

    /// Closes the pool, waiting for connections in use to be returned. Afterwards every call
    /// on this ledger (and its clones) fails with [`LedgerError::Unavailable`].
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.pool.is_closed()
    }

    /// Creates an operation on the caller's connection, inside the caller's transaction: the
    /// outbox. The business row and the operation commit together or not at all; nothing is
    /// visible to the layer or to recoverers before the commit.
    ///
    /// Same result as [`Ledger::create_or_get`]: [`Created::Existing`] when the operation id or
    /// the `(tenant, action, intent_ref)` is already taken (compare the payload hash). After the
    /// commit, send the request through the [`RecoverableWriteLayer`](crate::RecoverableWriteLayer)
    /// with the same [`Operation`](crate::Operation): the layer finds the `PREPARED` row (the
    /// same operation id and payload hash) and sends it. Build the [`NewOperation`] the way the
    /// layer does, so the payload hashes match (see `examples/outbox_axum.rs`).
    ///
    /// If the transaction is rolled back, the operation never existed.
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     ledger: recoverable_write::ledger::PostgresLedger,
    /// #     new: recoverable_write::ledger::NewOperation,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = ledger.pool().begin().await?;
    /// sqlx::query("INSERT INTO support_requests (id, device) VALUES ($1, $2)")
    ///     .bind("req-17")
    ///     .bind("E17")
    ///     .execute(&mut *tx)
    ///     .await?;
    /// let created = ledger.create_in(&mut tx, new).await?;
    /// tx.commit().await?; // both rows, or neither
    /// # let _ = created;
    /// # Ok(()) }
    /// ```
    pub async fn create_in(
        &self,
        conn: &mut PgConnection,
        new: NewOperation,
    ) -> Result<Created, LedgerError> {
        check_new(&new)?;
        let headers = to_json("request headers", &new.request.headers)?;
        let policy = to_json("budget policy", &new.policy)?;
        let created = EvidenceColumns::encode(store_entries::created(new.now_ms), POSTGRES)?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.insert_operation.clone()))
            .bind(self.caller_now(new.now_ms))
            .bind(new.tenant.as_str())
            .bind(new.operation_id.as_str())
            .bind(&*new.action)
            .bind(&*new.intent_ref)
            .bind(new.idempotency_key.as_str())
            .bind(new.payload_hash.as_str())
            .bind(new.request.method.as_str())
            .bind(new.request.url.as_str())
            .bind(headers)
            .bind(new.request.body.as_ref())
            .bind(&*new.contract.name)
            .bind(&*new.contract.hash)
            .bind(policy)
            .bind(created.attempt_id)
            .bind(created.generation)
            .bind(created.kind)
            .bind(created.from_state)
            .bind(created.to_state)
            .bind(created.evidence)
            .bind(created.note)
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
        if let Some(row) = rows.first() {
            return Ok(Created::New(decode_operation(row)?));
        }
        self.existing(
            conn,
            &new.tenant,
            &new.operation_id,
            &new.action,
            &new.intent_ref,
        )
        .await
    }

    /// After an insert conflicted (waiting for the other writer to commit): the row with the same
    /// id first, then the one with the same intent.
    async fn existing(
        &self,
        conn: &mut PgConnection,
        tenant: &Tenant,
        id: &OperationId,
        action: &str,
        intent_ref: &str,
    ) -> Result<Created, LedgerError> {
        let by_id = sqlx::query(AssertSqlSafe(self.sql.select_by_id.clone()))
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(unavailable)?;
        let existing = match by_id {
            Some(row) => Some(row),
            None => sqlx::query(AssertSqlSafe(self.sql.select_by_intent.clone()))
                .bind(tenant.as_str())
                .bind(action)
                .bind(intent_ref)
                .fetch_optional(&mut *conn)
                .await
                .map_err(unavailable)?,
        };
        match existing {
            Some(row) => Ok(Created::Existing(decode_operation(&row)?)),
            None => Err(LedgerError::Corrupt {
                operation: id.to_string(),
                detail: "insert conflicted but no row has this id or intent".into(),
            }),
        }
    }

    /// The caller's time, or `None` to let the statement read the database clock.
    fn caller_now(&self, now_ms: i64) -> Option<i64> {
        match self.clock {
            ClockSource::Database => None,
            ClockSource::Caller => Some(now_ms),
        }
    }
}

/// Refuses a server or session that cannot make a claim durable before its send: a hot
/// standby (it cannot take writes, and a promoted one would be another question), or a session
/// that commits without waiting for the WAL flush.
async fn check_durability(pool: &PgPool) -> Result<(), LedgerError> {
    let (in_recovery, synchronous_commit): (bool, String) =
        sqlx::query_as("SELECT pg_is_in_recovery(), current_setting('synchronous_commit')")
            .fetch_one(pool)
            .await
            .map_err(unavailable)?;
    if in_recovery {
        return Err(LedgerError::Config(
            "the PostgreSQL server is a hot standby (in recovery): the ledger needs the primary"
                .to_owned(),
        ));
    }
    if synchronous_commit == "off" {
        return Err(LedgerError::Config(
            "the pool's sessions run with synchronous_commit = off, which can lose a claim \
             after its request was sent: connect with synchronous_commit = on \
             (PgConnectOptions::options) or use PostgresLedger::connect_with"
                .to_owned(),
        ));
    }
    Ok(())
}

// ── migrations ──────────────────────────────────────────────────────────────────────────────────

/// The advisory lock key that serializes migrations of one schema: the first 8 bytes of a
/// SHA-256 over a crate-specific prefix and the schema name, the same in every process.
fn migration_lock_key(schema: &str) -> i64 {
    let digest = Sha256::digest(format!("recoverable-write/migrate/{schema}").as_bytes());
    let mut key = [0_u8; 8];
    key.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(key)
}

async fn migrate(pool: &PgPool, schema: &str) -> Result<(), LedgerError> {
    let mut migrator = sqlx::migrate!("./migrations/postgres");
    // Our transaction-scoped advisory lock replaces sqlx's session lock, which is per database
    // (it would serialize unrelated schemas) and outlives a crashed migration's transaction.
    migrator.set_locking(false);
    migrator.dangerous_set_table_name(format!("\"{schema}\".rw_schema_migrations"));

    let mut tx = pool.begin().await.map_err(unavailable)?;
    match migrate_in(&mut tx, schema, &migrator).await {
        Ok(()) => tx.commit().await.map_err(unavailable),
        Err(e) => {
            // Release the advisory lock now; a failed rollback ends with the connection.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn migrate_in(
    tx: &mut PgConnection,
    schema: &str,
    migrator: &sqlx::migrate::Migrator,
) -> Result<(), LedgerError> {
    // Processes migrating at once queue here; the later ones find the work done. The lock is
    // released by the commit or rollback, even if this process dies.
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(migration_lock_key(schema))
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
    // Look before creating: `CREATE SCHEMA IF NOT EXISTS` still needs the CREATE privilege on
    // the database, which a role that only owns an existing schema may lack.
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&mut *tx)
            .await
            .map_err(unavailable)?;
    if !exists {
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
    }
    // The migration files name their tables unqualified: they land in this schema.
    sqlx::query(AssertSqlSafe(format!(
        "SET LOCAL search_path TO \"{schema}\""
    )))
    .execute(&mut *tx)
    .await
    .map_err(unavailable)?;
    // Each migration runs in a savepoint inside this transaction. `run_direct` is `run` without
    // the `Acquire` indirection, whose higher-ranked bound makes the future unusable in
    // `tokio::spawn` (sqlx's own comment on `run_direct` says as much).
    migrator
        .run_direct(None, tx, false)
        .await
        .map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(e)
            | sqlx::migrate::MigrateError::ExecuteMigration(e, _) => unavailable(e),
            other => LedgerError::Config(format!("ledger schema migration failed: {other}")),
        })
}

// ── helpers ─────────────────────────────────────────────────────────────────────────────────────

fn unavailable(e: sqlx::Error) -> LedgerError {
    LedgerError::Unavailable(Box::new(e))
}

/// PostgreSQL text cannot hold NUL. A key field with one could never be stored nor found, so it
/// is refused before any statement, with an error that names the field (the server's own error
/// would read as an outage).
fn no_nul(field: &str, value: &str) -> Result<(), LedgerError> {
    if value.contains('\0') {
        return Err(LedgerError::Config(format!(
            "{field} contains a NUL byte, which PostgreSQL text cannot store"
        )));
    }
    Ok(())
}

/// [`no_nul`] for the key of an operation.
fn check_key(tenant: &Tenant, id: &OperationId) -> Result<(), LedgerError> {
    no_nul("tenant", tenant.as_str())?;
    no_nul("operation id", id.as_str())
}

/// [`no_nul`] for every text column of a new operation that is not free text.
fn check_new(new: &NewOperation) -> Result<(), LedgerError> {
    check_key(&new.tenant, &new.operation_id)?;
    no_nul("action", &new.action)?;
    no_nul("intent", &new.intent_ref)?;
    no_nul("idempotency key", new.idempotency_key.as_str())?;
    no_nul("request method", new.request.method.as_str())?;
    no_nul("request URL", &new.request.url)?;
    no_nul("contract name", &new.contract.name)?;
    no_nul("contract hash", &new.contract.hash)
}

/// PostgreSQL text cannot hold NUL: free text keeps everything else and shows U+FFFD there.
fn pg_text(s: Option<&str>) -> Option<String> {
    POSTGRES.opt_text(s)
}

impl Ledger for PostgresLedger {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(unavailable)?;
            // Outside a transaction each statement commits on its own: the insert and its
            // `created` entry are one statement.
            self.create_in(&mut conn, new).await
        })
    }

    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            check_first_update(&new, &first)?;
            check_new(&new)?;
            let created_at = new.now_ms;
            let created = EvidenceColumns::encode(store_entries::created(created_at), POSTGRES)?;
            let (row, entry) = first_applied(new, first);
            let claimed = EvidenceColumns::encode(entry, POSTGRES)?;
            let r = RowColumns::encode(&row, POSTGRES)?;
            let mut conn = self.pool.acquire().await.map_err(unavailable)?;
            // One statement: the row and both entries commit together, or not at all.
            let rows = sqlx::query(AssertSqlSafe(self.sql.insert_claimed.clone()))
                .bind(self.caller_now(created_at))
                .bind(created_at)
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
                .bind(r.state)
                .bind(r.last_result)
                .bind(r.generation)
                .bind(r.attempts_used)
                .bind(r.queries_used)
                .bind(r.may_have_applied)
                .bind(r.current_attempt)
                .bind(r.lease_until_ms)
                .bind(r.next_check_ms)
                .bind(r.deadline_ms)
                .bind(r.remote_ref)
                .bind(r.reason)
                .bind(r.response.status.map(i32::from))
                .bind(r.response.headers)
                .bind(r.response.body)
                .bind(r.updated_ms)
                .bind(created.attempt_id)
                .bind(created.generation)
                .bind(created.kind)
                .bind(created.from_state)
                .bind(created.to_state)
                .bind(created.evidence)
                .bind(created.note)
                .bind(created.at_ms)
                .bind(claimed.attempt_id)
                .bind(claimed.generation)
                .bind(claimed.kind)
                .bind(claimed.from_state)
                .bind(claimed.to_state)
                .bind(claimed.evidence)
                .bind(claimed.note)
                .bind(claimed.at_ms)
                .fetch_all(&mut *conn)
                .await
                .map_err(unavailable)?;
            match rows.first() {
                Some(inserted) => Ok(Created::New(decode_operation(inserted)?)),
                None => {
                    self.existing(
                        &mut conn,
                        &row.tenant,
                        &row.operation_id,
                        &row.action,
                        &row.intent_ref,
                    )
                    .await
                }
            }
        })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            check_key(tenant, id)?;
            let row = sqlx::query(AssertSqlSafe(self.sql.select_by_id.clone()))
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
            row.as_ref().map(decode_operation).transpose()
        })
    }

    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.apply_with(&self.pool, self.sql.apply.clone(), update))
    }

    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.apply_with(&self.pool, self.sql.apply_after_send.clone(), update))
    }

    fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let claimed = self.claim_in(&mut tx, now_ms, lease_ms, limit).await;
            finish(tx, claimed).await
        })
    }

    fn claim_prepared(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let claimed = self
                .claim_prepared_in(&mut tx, now_ms, older_than_ms, lease_ms, limit)
                .await;
            finish(tx, claimed).await
        })
    }

    fn quarantined(&self, limit: u32) -> BoxFuture<'_, Result<Vec<QuarantinedRow>, LedgerError>> {
        Box::pin(async move {
            let rows = sqlx::query(AssertSqlSafe(self.sql.select_quarantined.clone()))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            rows.iter().map(decode_quarantined).collect()
        })
    }

    fn release_quarantined<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        note: Option<String>,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Released, LedgerError>> {
        Box::pin(self.release_now(tenant, id, expected_version, note, now_ms))
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let swept = self.sweep_in(&mut tx, now_ms).await;
            finish(tx, swept).await
        })
    }

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move {
            check_key(tenant, id)?;
            let at_ms = self.caller_now(entry.at_ms);
            let e = EvidenceColumns::encode(entry, POSTGRES)?;
            sqlx::query(AssertSqlSafe(self.sql.append_evidence.clone()))
                .bind(at_ms)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .bind(e.attempt_id)
                .bind(e.generation)
                .bind(e.kind)
                .bind(e.from_state)
                .bind(e.to_state)
                .bind(e.evidence)
                .bind(e.note)
                .execute(&self.pool)
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>> {
        Box::pin(async move {
            let sql = super::query::list_sql(query, &self.sql.operations, "seq", '$')?;
            let rows = bind_args(sqlx::query(sqlx::AssertSqlSafe(sql.text)), sql.args)
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            decode_page(&rows, query.page_size())
        })
    }

    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>> {
        Box::pin(async move {
            let ops = &self.sql.operations;
            let sql = super::query::count_sql(scope, ops, ops, '$')?;
            let rows = bind_args(sqlx::query(sqlx::AssertSqlSafe(sql.text)), sql.args)
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            decode_counts(&rows)
        })
    }

    fn oldest<'a>(
        &'a self,
        scope: &'a TenantScope,
        states: &'a [State],
    ) -> BoxFuture<'a, Result<OldestPerState, LedgerError>> {
        Box::pin(super::query::oldest_via_list(self, scope, states))
    }

    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>> {
        Box::pin(async move {
            check_key(tenant, id)?;
            let rows = sqlx::query(AssertSqlSafe(self.sql.select_evidence.clone()))
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            rows.iter().map(|row| decode_evidence(row, id)).collect()
        })
    }

    fn apply_callback(
        &self,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> BoxFuture<'_, Result<CallbackApplied, LedgerError>> {
        Box::pin(async move {
            check_effect(&delivery, &effect)?;
            check_key(&delivery.tenant, &delivery.operation_id)?;
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let applied = self.apply_callback_in(&mut tx, delivery, effect).await;
            match applied {
                Ok(applied @ (CallbackApplied::Applied(_) | CallbackApplied::Appended)) => {
                    tx.commit().await.map_err(unavailable)?;
                    Ok(applied)
                }
                // Stale or no operation: the dedupe record goes with the rest.
                other => {
                    let _ = tx.rollback().await;
                    other
                }
            }
        })
    }

    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        Box::pin(async move {
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let stored = self.quarantine_callback_in(&mut tx, event).await;
            finish(tx, stored).await
        })
    }

    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>> {
        Box::pin(async move {
            let query = match scope {
                TenantScope::AllTenants => {
                    sqlx::query(AssertSqlSafe(self.sql.select_callback_quarantine.clone()))
                }
                TenantScope::Tenant(t) if t.as_str().contains('\0') => return Ok(Vec::new()),
                TenantScope::Tenant(t) => sqlx::query(AssertSqlSafe(
                    self.sql.select_tenant_callback_quarantine.clone(),
                ))
                .bind(t.as_str()),
            };
            let rows = query
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(unavailable)?;
            rows.iter().map(decode_quarantined_callback).collect()
        })
    }

    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        Box::pin(async move {
            // A text with a NUL byte cannot be stored, so it was never recorded.
            if vendor.contains('\0') || event_id.contains('\0') {
                return Ok(false);
            }
            let row = sqlx::query(AssertSqlSafe(self.sql.select_callback_event.clone()))
                .bind(vendor)
                .bind(event_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
            Ok(row.is_some())
        })
    }

    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(unavailable)?;
            self.record_ignored_in(&mut conn, event).await
        })
    }

    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        Box::pin(async move {
            if tenant.as_str().contains('\0') || value.contains('\0') {
                return Ok(None);
            }
            let sql = match by {
                ProbeBy::OperationId => self.sql.other_tenant_by_id.clone(),
                ProbeBy::RemoteRef => self.sql.other_tenant_by_remote_ref.clone(),
            };
            let found: Option<String> = sqlx::query_scalar(AssertSqlSafe(sql))
                .bind(value)
                .bind(tenant.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
            Ok(found.map(Tenant::new))
        })
    }

    fn acknowledge_contradiction<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            check_key(tenant, id)?;
            let version = i64::try_from(expected_version).map_err(|_| {
                LedgerError::Config(format!("version {expected_version} out of range"))
            })?;
            let at_ms = self.caller_now(entry.at_ms);
            let e = EvidenceColumns::encode(entry, POSTGRES)?;
            let row = sqlx::query(AssertSqlSafe(self.sql.acknowledge_contradiction.clone()))
                .bind(at_ms)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .bind(e.attempt_id)
                .bind(e.generation)
                .bind(e.kind)
                .bind(e.from_state)
                .bind(e.to_state)
                .bind(e.evidence)
                .bind(e.note)
                .bind(version)
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
            row.as_ref().map(decode_operation).transpose()
        })
    }

    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.find_one(self.sql.select_by_remote_ref.clone(), tenant, remote_ref))
    }

    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.find_one(self.sql.select_by_idempotency_key.clone(), tenant, key))
    }

    fn finished_contracts(&self) -> BoxFuture<'_, Result<Vec<String>, LedgerError>> {
        Box::pin(self.finished_contracts_now())
    }

    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(self.purge_now(batch))
    }

    fn purge_callbacks(&self, batch: CallbackPurge) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(self.purge_callbacks_now(batch))
    }

    fn reclaim_space(&self) -> BoxFuture<'_, Result<u64, LedgerError>> {
        Box::pin(self.reclaim_space_now())
    }
}

// ── decoding ────────────────────────────────────────────────────────────────────────────────────

super::codec::row_decoder!(PgRow);

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
