//! Connecting a PostgreSQL ledger (or taking an existing pool), checking that its sessions
//! commit durably, and the handle's accessors and closing.

use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::migrate::migrate;
use super::options::validate_schema;
use super::sql::{DB_NOW, Statements};
use super::{ClockSource, Groups, PostgresLedger, PostgresLedgerOptions, unavailable};
use crate::ledger::LedgerError;

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
        // cliff. The two statements of every request are the exception: they run in functions
        // (migration 0009) that use generic plans for their own statements, shaped so that no
        // generic plan can pick a wrong index, and the connections the write path keeps plan
        // the calls themselves once (see "Plans" in the type's docs and `group::WriteConn`).
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
        let sql = Statements::new(&options.schema);
        Ok(Self {
            groups: Arc::new(Groups::new(&pool, &sql)),
            sql: Arc::new(sql),
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
        // The connections the write path keeps (see `group::Warm`) are closed first.
        for keeper in self.groups.keepers() {
            keeper.close_kept();
        }
        self.pool.close().await;
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.pool.is_closed()
    }
}

/// Refuses a server or session that cannot make a claim durable before its send: a hot
/// standby (it cannot take writes, and a promoted one would be another question), or a session
/// that commits without waiting for the WAL flush.
pub(super) async fn check_durability(pool: &PgPool) -> Result<(), LedgerError> {
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
