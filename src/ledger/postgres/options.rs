//! How a PostgreSQL ledger connects: [`PostgresLedgerOptions`] (schema, clock, pool) and
//! [`ClockSource`], whose clock leases and due times are read on.

use std::time::Duration;

use crate::ledger::LedgerError;

/// Whose clock leases and due times are read on. See
/// [`PostgresLedger`'s docs](super::PostgresLedger#clock).
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
    ///
    /// [`MemoryLedger`]: crate::ledger::MemoryLedger
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
///
/// [`PostgresLedger::connect_with`]: super::PostgresLedger::connect_with
/// [`PostgresLedger::from_pool`]: super::PostgresLedger::from_pool
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresLedgerOptions {
    /// The schema holding the ledger's tables, created if missing. Default `public`.
    /// Set it with [`schema`](Self::schema), which validates it.
    pub schema: String,
    /// Whose clock leases and due times use. Default [`ClockSource::Database`].
    pub clock: ClockSource,
    /// Most connections in the pool ([`connect_with`](super::PostgresLedger::connect_with) only).
    /// Default 8; at least 1.
    pub max_connections: u32,
    /// How long a call waits for a free connection before failing with
    /// [`LedgerError::Unavailable`] ([`connect_with`](super::PostgresLedger::connect_with) only).
    /// Default 5 s.
    pub acquire_timeout: Duration,
    /// Ping a pooled connection before every use ([`connect_with`](super::PostgresLedger::connect_with)
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
pub(super) fn validate_schema(schema: &str) -> Result<(), LedgerError> {
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
