//! The embedded durable ledger: one SQLite file, WAL, `synchronous=FULL` by default.
//!
//! # Layout
//!
//! - **One writer task, group commit.** Every write (create, apply, claim, sweep, append) is
//!   queued to a single task that owns the write path. It takes whatever is queued (up to
//!   [`SqliteLedgerOptions::max_batch`]), runs all of it in one `BEGIN IMMEDIATE` transaction,
//!   commits once, and only then releases each caller with its own result. See
//!   [Group commit](#group-commit).
//! - A **writer pool of one connection**, used only by that task. `BEGIN IMMEDIATE` takes the
//!   write lock up front, so a transaction never fails halfway with `SQLITE_BUSY` on a lock
//!   upgrade.
//! - A **reader pool** of up to [`SqliteLedgerOptions::max_readers`] connections. In WAL mode
//!   readers never block the writer, and see every committed write.
//! - Migrations are embedded in the crate (`migrations/sqlite/`) and run at open, inside a
//!   `BEGIN IMMEDIATE` transaction, so two processes opening one new file do not race. Their
//!   bookkeeping lives in `rw_schema_migrations`, so the ledger may share a file with an
//!   application's own sqlx migrations.
//!
//! # Group commit
//!
//! With `synchronous=FULL` a commit costs an fsync (about 0.25 ms on a typical cloud disk), and a
//! transaction of 64 rows costs about the same as one of a single row. Concurrent requests each
//! need a durable claim before they may send, so committing them one by one would serialize
//! every request in the process behind the disk. Instead:
//!
//! - The writer task takes what is queued *now* and commits it: there is no timer waiting for a
//!   batch to fill, so a lone caller pays one commit, exactly as without batching, while
//!   callers arriving during a commit share the next one.
//! - The requests of a batch run one after the other in one transaction, in queue order: later
//!   requests see the changes of earlier ones, exactly as if they had committed one after the
//!   other. A request whose precondition fails (a conditional `UPDATE` that matched nothing, an
//!   insert that conflicted) changed nothing and is answered with its own result.
//! - A request whose statements fail (a constraint, a corrupt row) may have changed something
//!   before failing. Instead of a `SAVEPOINT` per request (a round trip to the connection's
//!   thread each, for a rare case), the whole transaction is rolled back and the batch runs
//!   again without that request, which is answered with its own error: the others are
//!   neither failed nor lost, and nothing is half-applied. Every request does the same thing
//!   each time it runs.
//! - Every caller is released only after the batch's `COMMIT` returned, i.e. after the fsync:
//!   the "register, then send" rule holds for each claim in the batch. If the `COMMIT` itself
//!   fails, every caller in the batch gets [`LedgerError::Unavailable`] (nothing is reported as
//!   done, not even a refused precondition, which may have been computed against a row another
//!   request of the failed batch had changed). The writer task then goes on with the next
//!   batch by itself: after a full disk or an I/O error SQLite may have ended the transaction
//!   on its own, so a connection left with a transaction open is closed and replaced (for a
//!   file ledger) instead of failing every later write. Once there is room again, writes
//!   succeed on the same handle, without reopening.
//! - A caller that stopped waiting (its future was dropped) before its request was taken is
//!   skipped; once taken, the request completes and commits like the others (as a single
//!   transaction would once its `COMMIT` had been sent).
//!
//! The writer task runs on the Tokio runtime that opened the ledger and ends when the last
//! handle is dropped. If that runtime shuts down, later calls fail with
//! [`LedgerError::Unavailable`].
//!
//! # Compare-and-swap in the store
//!
//! [`Ledger::apply`] is one conditional `UPDATE ... WHERE state = ? AND generation = ? AND
//! version = ? ... RETURNING *`. A decision computed from a stale read matches no row and is
//! refused by SQLite itself; the evidence entry is inserted in the same transaction only when the
//! row changed. The sticky "may have applied" fact and the refusal of an attempt-level
//! `REJECTED` are part of the same statement.
//!
//! # Durability
//!
//! `synchronous=FULL` (the default) makes every commit durable before it returns: the pre-send
//! claim (`IN_FLIGHT` with this attempt) must survive a power cut before any byte leaves the
//! process. [`Synchronous::Normal`] is faster in WAL mode but a power loss may roll back the last
//! commits, which can forget that an attempt was sent: only use it when the host's storage makes
//! that acceptable.
//!
//! Only the claim has to be durable before bytes leave. A result recorded after the response
//! ([`Ledger::record`]) does not wait for the disk: a batch that holds only such results is
//! committed at `synchronous = NORMAL` (switched in the same round trip as its `BEGIN`), which
//! in WAL mode writes the WAL without an fsync; it survives the process dying, and a later
//! durable commit's fsync covers it. A batch with any claim commits at the configured level.
//! A result lost anyway (a power cut, or the process dying before the commit) leaves the row
//! `IN_FLIGHT`; its lease expires, the sweeper moves it to `UNKNOWN` and reconciliation asks
//! the vendor. It never becomes a second send (`tests/sqlite_group_commit.rs` kills a process
//! between the two). [`SqliteLedger::relaxed_commits`] counts those commits.
//!
//! # Errors
//!
//! Connection, statement and commit failures are [`LedgerError::Unavailable`] (nothing was
//! changed). A row that cannot be decoded (an unknown state name, bad JSON, a malformed attempt
//! id) is [`LedgerError::Corrupt`], never a panic, when it is read by itself. A claim or sweep
//! that meets one quarantines it in the same transaction (its `quarantine_reason` column holds
//! the decode error, listed by [`Ledger::quarantined`]) and goes on with the healthy rows; a
//! quarantined row is never claimed or swept again. A budget stored by a newer version, with
//! fields this one does not know, is read with those fields ignored.

mod retention;
mod sql;
#[cfg(test)]
mod tests;
mod writer;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::Row;
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool,
    SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use tokio::sync::{mpsc, oneshot};

use super::callback::{check_effect, outcome};
use super::codec::{
    CallbackEventColumns, Dialect, EvidenceColumns, QuarantinedCallbackColumns, RowColumns,
    UpdateColumns,
};
use super::*;
use sql::*;
use writer::{Durability, Finish, PendingWrite, Queued, WriterStats, run_writer, writer_stopped};

/// How this backend encodes values.
const SQLITE: Dialect = Dialect::Sqlite;

/// The SQLite [`Ledger`]. Cloning gives another handle to the same pools.
///
/// ```no_run
/// # async fn demo() -> Result<(), recoverable_write::ledger::LedgerError> {
/// use recoverable_write::ledger::{SqliteLedger, SqliteLedgerOptions, Synchronous};
///
/// let ledger = SqliteLedger::open("/var/lib/my-app/ledger.db").await?;
///
/// // Or with options:
/// let options = SqliteLedgerOptions::new()
///     .synchronous(Synchronous::Full)
///     .max_readers(8);
/// let other = SqliteLedger::open_with("/var/lib/my-app/other.db", options).await?;
/// # let _ = (ledger, other);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteLedger {
    /// Exactly one connection, used only by the writer task.
    writer: SqlitePool,
    /// Read-only work (`get`, `evidence`). The same pool as `writer` for an in-memory ledger.
    reader: SqlitePool,
    /// The queue of the writer task (group commit).
    queue: mpsc::UnboundedSender<Box<dyn PendingWrite>>,
    /// What the writer task did, for tests and diagnostics.
    stats: Arc<WriterStats>,
}

/// How durably SQLite commits (`PRAGMA synchronous`).
///
/// See <https://www.sqlite.org/pragma.html#pragma_synchronous>.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit is on disk before it returns. The default, and what the "register, then
    /// send" rule needs.
    #[default]
    Full,
    /// In WAL mode, commits survive a process crash, but a power loss or OS crash may roll back
    /// the most recent ones.
    Normal,
    /// No syncs at all. Tests and throwaway data only.
    Off,
}

impl Synchronous {
    /// The pragma value (`FULL`, `NORMAL`, `OFF`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
            Synchronous::Off => "OFF",
        }
    }

    fn to_sqlx(self) -> SqliteSynchronous {
        match self {
            Synchronous::Full => SqliteSynchronous::Full,
            Synchronous::Normal => SqliteSynchronous::Normal,
            Synchronous::Off => SqliteSynchronous::Off,
        }
    }
}

/// Options for [`SqliteLedger::open_with`].
///
/// ```
/// use std::time::Duration;
/// use recoverable_write::ledger::{SqliteLedgerOptions, Synchronous};
///
/// let options = SqliteLedgerOptions::new()
///     .synchronous(Synchronous::Full)
///     .busy_timeout(Duration::from_secs(2))
///     .max_readers(4);
/// assert_eq!(options.max_readers, 4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteLedgerOptions {
    /// `PRAGMA synchronous`. Default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// How long a connection waits for a lock held by another process before failing with
    /// [`LedgerError::Unavailable`]. Default 5 s.
    pub busy_timeout: Duration,
    /// Most connections in the reader pool. Default 4; at least 1.
    pub max_readers: u32,
    /// Most write requests committed in one transaction by the writer task (group commit).
    /// Default [`SqliteLedgerOptions::DEFAULT_MAX_BATCH`]; at least 1 (1 turns group commit off: one transaction per
    /// request).
    pub max_batch: usize,
}

impl Default for SqliteLedgerOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            max_readers: 4,
            max_batch: Self::DEFAULT_MAX_BATCH,
        }
    }
}

impl SqliteLedgerOptions {
    /// Default of [`max_batch`](Self::max_batch): 64 requests per commit.
    pub const DEFAULT_MAX_BATCH: usize = 64;

    /// The defaults: `synchronous=FULL`, a 5 s busy timeout, 4 readers, batches of up to 64
    /// writes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `PRAGMA synchronous`.
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets how long to wait for a lock held by another process.
    pub fn busy_timeout(mut self, busy_timeout: Duration) -> Self {
        self.busy_timeout = busy_timeout;
        self
    }

    /// Sets the size limit of the reader pool (at least 1).
    pub fn max_readers(mut self, max_readers: u32) -> Self {
        self.max_readers = max_readers;
        self
    }

    /// Sets the most write requests committed together (at least 1).
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }
}

impl SqliteLedger {
    /// Opens (creating it if needed) the ledger file at `path` with the default options, and
    /// runs the embedded migrations.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        Self::open_with(path, SqliteLedgerOptions::default()).await
    }

    /// Opens (creating it if needed) the ledger file at `path`, and runs the embedded
    /// migrations. The file is put in WAL mode with foreign keys on.
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: SqliteLedgerOptions,
    ) -> Result<Self, LedgerError> {
        if options.max_readers == 0 {
            return Err(LedgerError::Config(
                "max_readers must be at least 1".to_owned(),
            ));
        }
        if options.max_batch == 0 {
            return Err(LedgerError::Config(
                "max_batch must be at least 1".to_owned(),
            ));
        }
        let path = path.as_ref();
        if path.as_os_str().is_empty() {
            return Err(LedgerError::Config("empty ledger path".to_owned()));
        }
        let base = SqliteConnectOptions::new()
            .filename(path)
            .foreign_keys(true)
            .busy_timeout(options.busy_timeout)
            .synchronous(options.synchronous.to_sqlx());
        // Only the writer sets the journal mode: WAL is persistent in the file, and switching it
        // needs an exclusive lock that readers have no business taking.
        let writer_options = base
            .clone()
            .create_if_missing(true)
            // Space freed by retention goes back to the file system a bounded step at a time
            // (`Ledger::reclaim_space`). Takes effect when the file is created; set before the
            // journal mode, as SQLite requires.
            .auto_vacuum(SqliteAutoVacuum::Incremental)
            .journal_mode(SqliteJournalMode::Wal)
            // SQLite keeps the page images a statement may need to restore on an error inside a
            // transaction in a statement journal, which spills to a temporary *file* after
            // 64 KiB: with it in memory, a batch costs memcpys, not a temp file's open, writes
            // and close.
            .pragma("temp_store", "MEMORY");
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            // Keep the one writer connection: reconnecting costs a WAL recovery check, and the
            // last connection closing would checkpoint and remove the WAL under the readers.
            .idle_timeout(None)
            .max_lifetime(None)
            // A local file connection does not go stale; the default ping before every
            // acquire would add a round trip to the connection's thread to every batch.
            .test_before_acquire(false)
            .connect_with(writer_options)
            .await
            .map_err(unavailable)?;
        migrate(&writer).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(options.max_readers)
            .test_before_acquire(false)
            .connect_with(base)
            .await
            .map_err(unavailable)?;
        let sync = Durability::new(options.synchronous, true);
        Self::start(writer, reader, options.max_batch, true, sync)
    }

    /// Starts the writer task on the current Tokio runtime. `keep_connection`: whether the task
    /// may keep the writer pool's connection between batches (not when readers share it).
    fn start(
        writer: SqlitePool,
        reader: SqlitePool,
        max_batch: usize,
        keep_connection: bool,
        sync: Durability,
    ) -> Result<Self, LedgerError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            LedgerError::Config(format!(
                "the SQLite ledger must be opened inside a Tokio runtime: {e}"
            ))
        })?;
        let (queue, pending) = mpsc::unbounded_channel();
        let stats = Arc::new(WriterStats::default());
        runtime.spawn(run_writer(
            writer.clone(),
            pending,
            max_batch,
            keep_connection,
            sync,
            stats.clone(),
        ));
        Ok(Self {
            writer,
            reader,
            queue,
            stats,
        })
    }

    /// A private in-memory ledger on one connection, for tests. Nothing is durable; each call
    /// makes a new, empty database.
    pub async fn in_memory() -> Result<Self, LedgerError> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:")
            .map_err(|e| LedgerError::Config(e.to_string()))?
            .foreign_keys(true)
            .pragma("temp_store", "MEMORY");
        // The database lives as long as its connection: never let the pool recycle it.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(unavailable)?;
        migrate(&pool).await?;
        // Readers share the one connection: the writer task must give it back after each batch.
        Self::start(
            pool.clone(),
            pool,
            SqliteLedgerOptions::DEFAULT_MAX_BATCH,
            false,
            // Nothing to sync: SQLite's default level, never switched.
            Durability::new(Synchronous::Full, false),
        )
    }

    /// Closes both pools, waiting for connections in use to be returned. Afterwards every call
    /// on this ledger (and its clones) fails with [`LedgerError::Unavailable`].
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.writer.is_closed()
    }

    /// Transactions committed by the writer task so far (all handles of this ledger).
    ///
    /// With [`committed_writes`](Self::committed_writes), shows how well group commit batches:
    /// their ratio is the mean number of requests per commit (fsync).
    pub fn commits(&self) -> u64 {
        self.stats.commits.load(Ordering::Relaxed)
    }

    /// Transactions committed so far without waiting for the disk because every write in them
    /// was a result recorded after its send ([`Ledger::record`]): with `synchronous = FULL`
    /// they commit at `NORMAL`. Claims are always committed at the configured level.
    pub fn relaxed_commits(&self) -> u64 {
        self.stats.relaxed_commits.load(Ordering::Relaxed)
    }

    /// Write requests answered from committed transactions so far (all handles of this ledger),
    /// including those whose precondition failed or that failed on their own inside a
    /// committed batch.
    pub fn committed_writes(&self) -> u64 {
        self.stats.committed_requests.load(Ordering::Relaxed)
    }

    /// Queues `op` for the writer task and waits until its batch is committed.
    ///
    /// Every write goes through here. `op` runs inside the batch's transaction; what it returns
    /// is handed back only after the `COMMIT` succeeded. An error fails this write alone: the
    /// batch is rolled back and the other writes run again without it. So `op` may run more
    /// than once (each time in a fresh transaction, never twice in one): it must do the same
    /// thing every time it is called.
    async fn write<T, F>(&self, op: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c mut SqliteConnection) -> BoxFuture<'c, Result<Finish<T>, LedgerError>>
            + Send
            + 'static,
    {
        self.write_as(false, op).await
    }

    /// [`write`](Self::write), committed without an fsync if every write of its batch is
    /// `relaxed` (see [`Ledger::record`]).
    async fn write_as<T, F>(&self, relaxed: bool, op: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c mut SqliteConnection) -> BoxFuture<'c, Result<Finish<T>, LedgerError>>
            + Send
            + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Box::new(Queued {
                op,
                relaxed,
                result: None,
                reply,
            }))
            .map_err(|_| writer_stopped())?;
        answer.await.map_err(|_| writer_stopped())?
    }

    /// Runs `pragma` (such as `PRAGMA max_page_count = 1`) on the writer task's connection,
    /// between batches. A fault-injection hook for tests (a full disk without a full disk); not
    /// part of the API.
    #[doc(hidden)]
    pub async fn pragma_on_writer_for_tests(
        &self,
        pragma: &'static str,
    ) -> Result<(), LedgerError> {
        self.write(move |conn| {
            Box::pin(async move {
                sqlx::query(pragma)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(unavailable)?;
                // A connection setting, not a change: nothing to commit.
                Ok(Finish::Unchanged(()))
            })
        })
        .await
    }

    #[cfg(test)]
    fn writer_pool(&self) -> &SqlitePool {
        &self.writer
    }
}

// ── group commit ────────────────────────────────────────────────────────────────────────────────

async fn migrate(pool: &SqlitePool) -> Result<(), LedgerError> {
    let mut migrator = sqlx::migrate!("./migrations/sqlite");
    migrator.dangerous_set_table_name("rw_schema_migrations");
    // Holding the write lock for the whole run makes a concurrent open by another process wait
    // (busy timeout) instead of applying the same migration twice. Each migration runs in a
    // savepoint inside this transaction.
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(unavailable)?;
    migrator.run(&mut *tx).await.map_err(|e| match e {
        sqlx::migrate::MigrateError::Execute(e)
        | sqlx::migrate::MigrateError::ExecuteMigration(e, _) => unavailable(e),
        other => LedgerError::Config(format!("ledger schema migration failed: {other}")),
    })?;
    tx.commit().await.map_err(unavailable)
}

fn unavailable(e: sqlx::Error) -> LedgerError {
    LedgerError::Unavailable(Box::new(e))
}

impl Ledger for SqliteLedger {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            let created = EvidenceColumns::encode(store_entries::created(new.now_ms), SQLITE)?;
            let row = new.into_prepared();
            let columns = RowColumns::encode(&row, SQLITE)?;
            let insert = Statement::new(INSERT_OPERATION, |query| {
                bind_evidence(bind_prepared(query, columns), created)
            })?;
            // The row holds exactly what is bound: no need to read it back.
            self.insert_or_get(insert, row).await
        })
    }

    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            check_first_update(&new, &first)?;
            let created = EvidenceColumns::encode(store_entries::created(new.now_ms), SQLITE)?;
            // The claimed row goes in directly (one INSERT, no UPDATE), then the `created`
            // entry and `first`'s entry, in that order: both only if the row was inserted.
            let (row, entry) = first_applied(new, first);
            let entry = EvidenceColumns::encode(entry, SQLITE)?;
            let columns = RowColumns::encode(&row, SQLITE)?;
            let insert = Statement::new(INSERT_CLAIMED, |query| {
                let query = query
                    .bind(row.tenant.as_str().to_owned())
                    .bind(row.operation_id.as_str().to_owned());
                bind_row(bind_evidence(bind_evidence(query, created), entry), columns)
            })?;
            self.insert_or_get(insert, row).await
        })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let row = sqlx::query(SELECT_BY_ID)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_optional(&self.reader)
                .await
                .map_err(unavailable)?;
            row.as_ref().map(decode_operation).transpose()
        })
    }

    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.apply_as(false, update))
    }

    /// A result written after the bytes left: the same compare-and-swap as
    /// [`apply`](Ledger::apply), committed at `synchronous = NORMAL` when its batch holds no
    /// claim (in WAL mode: written to the WAL, surviving the process dying, without waiting for
    /// the disk). A power cut may lose it: the row is then still `IN_FLIGHT`, and its lease
    /// turns it into a lookup, never a second send.
    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.apply_as(true, update))
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
            self.write(move |conn| {
                Box::pin(async move {
                    let rows = sqlx::query(CLAIM_DUE)
                        .bind(now_ms)
                        .bind(now_ms.saturating_add(lease_ms))
                        .bind(i64::from(limit))
                        .fetch_all(&mut *conn)
                        .await
                        .map_err(unavailable)?;
                    // RETURNING gives no order guarantee: restore the claim order.
                    let claimed = log_returned(
                        conn,
                        &rows,
                        now_ms,
                        "claim_due",
                        |rowid, r| (r.next_check_ms, rowid),
                        store_entries::recovery_claimed,
                    )
                    .await?;
                    Ok(Finish::Commit(claimed))
                })
            })
            .await
        })
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            self.write(move |conn| {
                Box::pin(async move {
                    let rows = sqlx::query(SWEEP_EXPIRED)
                        .bind(now_ms)
                        .bind(store_entries::LEASE_EXPIRED_REASON)
                        .fetch_all(&mut *conn)
                        .await
                        .map_err(unavailable)?;
                    // In creation order, as the memory ledger does.
                    let swept = log_returned(
                        conn,
                        &rows,
                        now_ms,
                        "sweep_expired",
                        |rowid, _| (None, rowid),
                        store_entries::lease_expired,
                    )
                    .await?;
                    Ok(Finish::Commit(swept))
                })
            })
            .await
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
            self.write(move |conn| {
                Box::pin(async move {
                    let rows = sqlx::query(CLAIM_PREPARED)
                        .bind(now_ms)
                        .bind(now_ms.saturating_add(lease_ms))
                        .bind(now_ms.saturating_sub(older_than_ms))
                        .bind(i64::from(limit))
                        .fetch_all(&mut *conn)
                        .await
                        .map_err(unavailable)?;
                    // Oldest first, as claimed.
                    let claimed = log_returned(
                        conn,
                        &rows,
                        now_ms,
                        "claim_prepared",
                        |rowid, r| (Some(r.created_ms), rowid),
                        store_entries::recovery_claimed,
                    )
                    .await?;
                    Ok(Finish::Commit(claimed))
                })
            })
            .await
        })
    }

    fn quarantined(&self, limit: u32) -> BoxFuture<'_, Result<Vec<QuarantinedRow>, LedgerError>> {
        Box::pin(async move {
            let rows = sqlx::query(SELECT_QUARANTINED)
                .bind(i64::from(limit))
                .fetch_all(&self.reader)
                .await
                .map_err(unavailable)?;
            rows.iter().map(decode_quarantined).collect()
        })
    }

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move {
            let entry = EvidenceColumns::encode(entry, SQLITE)?;
            let append = Statement::new(APPEND_EVIDENCE, |query| {
                let query = query
                    .bind(tenant.as_str().to_owned())
                    .bind(id.as_str().to_owned());
                bind_evidence(query, entry)
            })?;
            self.write(move |conn| {
                let query = append.query();
                Box::pin(async move {
                    query.execute(&mut *conn).await.map_err(unavailable)?;
                    Ok(Finish::Commit(()))
                })
            })
            .await
        })
    }

    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>> {
        Box::pin(async move {
            let sql = super::query::list_sql(query, "rw_operations", "rowid", '?')?;
            let rows = bind_args(sqlx::query(sqlx::AssertSqlSafe(sql.text)), sql.args)
                .fetch_all(&self.reader)
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
            let sql = super::query::count_sql(scope, "rw_operations", '?')?;
            let rows = bind_args(sqlx::query(sqlx::AssertSqlSafe(sql.text)), sql.args)
                .fetch_all(&self.reader)
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
            let rows = sqlx::query(SELECT_EVIDENCE)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_all(&self.reader)
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
            let record = CallbackEventColumns::delivery(&delivery, outcome(&effect), SQLITE);
            let seen = callback_seen(&delivery.vendor, &delivery.event_id)?;
            let record = Statement::new(INSERT_CALLBACK_EVENT, |q| bind_callback_event(q, record))?;
            let key = |q: SqliteQuery| {
                q.bind(delivery.tenant.as_str().to_owned())
                    .bind(delivery.operation_id.as_str().to_owned())
            };
            let exists = Statement::new(OPERATION_EXISTS, key)?;
            let (change, moves) = match effect {
                CallbackEffect::Apply(update) => {
                    let columns = UpdateColumns::encode(update, SQLITE)?;
                    (Statement::new(APPLY, |q| bind_apply(q, columns))?, true)
                }
                CallbackEffect::Append(entry) => {
                    let entry = EvidenceColumns::encode(entry, SQLITE)?;
                    let append = Statement::new(APPEND_EVIDENCE, |q| bind_evidence(key(q), entry))?;
                    (append, false)
                }
            };
            self.write(move |conn| {
                let (seen, change, record, exists) =
                    (seen.query(), change.query(), record.query(), exists.query());
                Box::pin(async move {
                    // The writer task runs one transaction at a time (`BEGIN IMMEDIATE`): the
                    // check, the change and the record below are atomic together.
                    let dup = seen.fetch_optional(&mut *conn).await.map_err(unavailable)?;
                    if dup.is_some() {
                        return Ok(Finish::Unchanged(CallbackApplied::Duplicate));
                    }
                    let applied = if moves {
                        let rows = change.fetch_all(&mut *conn).await.map_err(unavailable)?;
                        match rows.first() {
                            Some(row) => CallbackApplied::Applied(decode_operation(row)?),
                            None => {
                                let found = exists
                                    .fetch_optional(&mut *conn)
                                    .await
                                    .map_err(unavailable)?;
                                return Ok(Finish::Unchanged(match found {
                                    Some(_) => CallbackApplied::Stale,
                                    None => CallbackApplied::NoOperation,
                                }));
                            }
                        }
                    } else {
                        let done = change.execute(&mut *conn).await.map_err(unavailable)?;
                        if done.rows_affected() == 0 {
                            return Ok(Finish::Unchanged(CallbackApplied::NoOperation));
                        }
                        CallbackApplied::Appended
                    };
                    record.execute(&mut *conn).await.map_err(unavailable)?;
                    Ok(Finish::Commit(applied))
                })
            })
            .await
        })
    }

    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        Box::pin(async move {
            let seen = callback_seen(&event.vendor, &event.event_id)?;
            let record = CallbackEventColumns::quarantined(&event, SQLITE);
            let record = Statement::new(INSERT_CALLBACK_EVENT, |q| bind_callback_event(q, record))?;
            let columns = QuarantinedCallbackColumns::encode(event, SQLITE)?;
            let store = Statement::new(INSERT_CALLBACK_QUARANTINE, |q| {
                bind_quarantined_callback(q, columns)
            })?;
            self.write(move |conn| {
                let (seen, record, store) = (seen.query(), record.query(), store.query());
                Box::pin(async move {
                    let dup = seen.fetch_optional(&mut *conn).await.map_err(unavailable)?;
                    if dup.is_some() {
                        return Ok(Finish::Unchanged(CallbackQuarantined::Duplicate));
                    }
                    record.execute(&mut *conn).await.map_err(unavailable)?;
                    store.execute(&mut *conn).await.map_err(unavailable)?;
                    Ok(Finish::Commit(CallbackQuarantined::Stored))
                })
            })
            .await
        })
    }

    fn quarantined_callbacks(
        &self,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<QuarantinedCallback>, LedgerError>> {
        Box::pin(async move {
            let rows = sqlx::query(SELECT_CALLBACK_QUARANTINE)
                .bind(i64::from(limit))
                .fetch_all(&self.reader)
                .await
                .map_err(unavailable)?;
            rows.iter().map(decode_quarantined_callback).collect()
        })
    }

    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.find_one(SELECT_BY_REMOTE_REF, tenant, remote_ref))
    }

    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(self.find_one(SELECT_BY_IDEMPOTENCY_KEY, tenant, key))
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

impl SqliteLedger {
    async fn apply_as(
        &self,
        relaxed: bool,
        update: Update,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let columns = UpdateColumns::encode(update, SQLITE)?;
        let apply = Statement::new(APPLY, |query| bind_apply(query, columns))?;
        self.write_as(relaxed, move |conn| {
            let query = apply.query();
            Box::pin(async move {
                // `fetch_all`, not `fetch_optional`: both statements run to completion, so
                // nothing is left in progress when the transaction commits.
                let rows = query.fetch_all(&mut *conn).await.map_err(unavailable)?;
                let Some(row) = rows.first() else {
                    return Ok(Finish::Unchanged(None));
                };
                // A row that cannot be decoded fails this request: its update and evidence
                // are undone with the batch's transaction, and the batch runs again
                // without it.
                Ok(Finish::Commit(Some(decode_operation(row)?)))
            })
        })
        .await
    }
}

impl SqliteLedger {
    /// The one row `sql` (a lookup by tenant `?1` and a value `?2`) finds, on a reader.
    async fn find_one(
        &self,
        sql: &'static str,
        tenant: &Tenant,
        value: &str,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let row = sqlx::query(sql)
            .bind(tenant.as_str())
            .bind(value)
            .fetch_optional(&self.reader)
            .await
            .map_err(unavailable)?;
        row.as_ref().map(decode_operation).transpose()
    }

    /// Runs `insert` (a row, then its evidence, see [`INSERT_OPERATION`] and
    /// [`INSERT_CLAIMED`]) as one write: [`Created::New`] with `row`, the row it inserts, or
    /// [`Created::Existing`] with the row it conflicted with (then it inserted nothing).
    async fn insert_or_get(
        &self,
        insert: Statement,
        row: OperationRecord,
    ) -> Result<Created, LedgerError> {
        // Shared with the write, which may run more than once and needs the keys on a conflict.
        let row = Arc::new(row);
        let key = row.clone();
        let existing = self
            .write(move |conn| {
                let (query, key) = (insert.query(), key.clone());
                Box::pin(async move {
                    let inserted = query.fetch_all(&mut *conn).await.map_err(unavailable)?;
                    if !inserted.is_empty() {
                        return Ok(Finish::Commit(None));
                    }
                    let r = &*key;
                    let found =
                        existing(conn, &r.tenant, &r.operation_id, &r.action, &r.intent_ref)
                            .await?;
                    Ok(Finish::Unchanged(Some(found)))
                })
            })
            .await?;
        Ok(match existing {
            Some(found) => Created::Existing(found),
            None => Created::New(Arc::try_unwrap(row).unwrap_or_else(|row| (*row).clone())),
        })
    }
}

/// The dedupe check of an event: [`SELECT_CALLBACK_EVENT`].
fn callback_seen(vendor: &str, event_id: &str) -> Result<Statement, LedgerError> {
    let (vendor, event_id) = (vendor.to_owned(), event_id.to_owned());
    Statement::new(SELECT_CALLBACK_EVENT, |q| q.bind(vendor).bind(event_id))
}

/// The row an insert of `(tenant, operation_id)` for `(action, intent_ref)` conflicted with:
/// the same id first, then the same intent.
async fn existing(
    conn: &mut SqliteConnection,
    tenant: &Tenant,
    id: &OperationId,
    action: &str,
    intent_ref: &str,
) -> Result<OperationRecord, LedgerError> {
    let by_id = sqlx::query(SELECT_BY_ID)
        .bind(tenant.as_str().to_owned())
        .bind(id.as_str().to_owned())
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?;
    let row = match by_id {
        Some(row) => Some(row),
        None => sqlx::query(SELECT_BY_INTENT)
            .bind(tenant.as_str().to_owned())
            .bind(action.to_owned())
            .bind(intent_ref.to_owned())
            .fetch_optional(&mut *conn)
            .await
            .map_err(unavailable)?,
    };
    match row {
        Some(row) => decode_operation(&row),
        None => Err(LedgerError::Corrupt {
            operation: id.to_string(),
            detail: "insert conflicted but no row has this id or intent".into(),
        }),
    }
}

/// The rows a claim or sweep statement returned, decoded (a row that cannot be is quarantined,
/// the others are kept), put in `order` and logged with `entry`, in the same transaction.
async fn log_returned(
    conn: &mut SqliteConnection,
    rows: &[SqliteRow],
    now_ms: i64,
    during: &'static str,
    order: impl Fn(i64, &OperationRecord) -> (Option<i64>, i64),
    entry: fn(&OperationRecord, i64) -> NewEvidence,
) -> Result<Vec<OperationRecord>, LedgerError> {
    let mut rows = decode_or_quarantine(conn, rows, now_ms, during).await?;
    rows.sort_by_key(|(rowid, r)| order(*rowid, r));
    let rows: Vec<OperationRecord> = rows.into_iter().map(|(_, r)| r).collect();
    for r in &rows {
        let e = EvidenceColumns::encode(entry(r, now_ms), SQLITE)?;
        insert_evidence(e, INSERT_EVIDENCE, conn, &r.tenant, &r.operation_id).await?;
    }
    Ok(rows)
}

async fn decode_or_quarantine(
    conn: &mut SqliteConnection,
    rows: &[SqliteRow],
    now_ms: i64,
    during: &'static str,
) -> Result<Vec<(i64, OperationRecord)>, LedgerError> {
    let mut decoded = Vec::with_capacity(rows.len());
    for row in rows {
        let rowid = Columns::new(row, "<claimed row>").get::<i64>("rw_rowid")?;
        match decode_operation(row) {
            Ok(record) => decoded.push((rowid, record)),
            Err(e) => {
                let tenant = row.try_get::<String, _>("tenant").ok();
                let id = row.try_get::<String, _>("operation_id").ok();
                let reason = super::codec::quarantine(tenant.as_deref(), id.as_deref(), during, &e);
                sqlx::query(QUARANTINE)
                    .bind(reason)
                    .bind(now_ms)
                    .bind(rowid)
                    .execute(&mut *conn)
                    .await
                    .map_err(unavailable)?;
            }
        }
    }
    Ok(decoded)
}

/// A raw statement through the writer task, for the conformance suite's corrupt-row checks:
/// `sql` with the tenant as `?1` and the operation id as `?2`.
#[cfg(feature = "test-util")]
impl SqliteLedger {
    pub(crate) async fn exec_for_conformance(
        &self,
        sql: String,
        tenant: &Tenant,
        id: &OperationId,
    ) -> Result<(), LedgerError> {
        let (tenant, id) = (tenant.as_str().to_owned(), id.as_str().to_owned());
        self.write(move |conn| {
            let (sql, tenant, id) = (sql.clone(), tenant.clone(), id.clone());
            Box::pin(async move {
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(tenant)
                    .bind(id)
                    .execute(&mut *conn)
                    .await
                    .map_err(unavailable)?;
                Ok(Finish::Commit(()))
            })
        })
        .await
    }
}

super::codec::row_decoder!(SqliteRow, sqlx::Sqlite, sqlx::sqlite::SqliteArguments);

impl Columns<'_> {
    fn flag(&self, column: &str) -> Result<bool, LedgerError> {
        match self.get::<i64>(column)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.corrupt(format!("column {column}: {v} is not 0 or 1"))),
        }
    }

    fn status(&self, column: &str) -> Result<Option<u16>, LedgerError> {
        self.get::<Option<i64>>(column)?
            .map(|v| {
                u16::try_from(v)
                    .map_err(|_| self.corrupt(format!("column {column}: {v} out of range")))
            })
            .transpose()
    }
}
