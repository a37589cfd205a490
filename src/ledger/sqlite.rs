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
//! and then lost (the process dies before the commit) leaves the row `IN_FLIGHT`; its lease
//! expires, the sweeper moves it to `UNKNOWN` and reconciliation asks the vendor. It never
//! becomes a second send (`tests/sqlite_group_commit.rs` kills a process between the two).
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

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool,
    SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row, Sqlite};
use tokio::sync::{mpsc, oneshot};

use super::*;
use super::{check_first_update, first_applied, store_entries};

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

/// What a write did, inside its batch's transaction.
enum Finish<T> {
    /// It changed the database: keep the changes (commit) and return the value.
    Commit(T),
    /// It changed nothing (a precondition refused it: an `UPDATE` that matched no row, an
    /// `INSERT ... ON CONFLICT DO NOTHING` that conflicted): return the value. There is nothing
    /// to undo, so a write that did change something must never return this.
    Unchanged(T),
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
        Self::start(writer, reader, options.max_batch, true)
    }

    /// Starts the writer task on the current Tokio runtime. `keep_connection`: whether the task
    /// may keep the writer pool's connection between batches (not when readers share it).
    fn start(
        writer: SqlitePool,
        reader: SqlitePool,
        max_batch: usize,
        keep_connection: bool,
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
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Box::new(Queued {
                op,
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

/// Counters of the writer task.
#[derive(Debug, Default)]
struct WriterStats {
    /// Transactions the writer task committed.
    commits: AtomicU64,
    /// Requests answered from committed transactions.
    committed_requests: AtomicU64,
}

/// One caller's write, waiting in the queue of the writer task.
trait PendingWrite: Send {
    /// Whether the caller stopped waiting (its future was dropped). Such a write is skipped if
    /// it was not started yet.
    fn abandoned(&self) -> bool;

    /// Runs the caller's statements inside the batch's transaction and keeps the result for
    /// [`answer`](Self::answer) (replacing that of an earlier run, undone since). The caller is
    /// not answered yet: that waits for the commit.
    fn run<'c>(&'c mut self, conn: &'c mut SqliteConnection) -> BoxFuture<'c, Ran>;

    /// Answers the caller: with the result of the last run, or with `batch_failed` if given
    /// (also when it never ran).
    fn answer(self: Box<Self>, batch_failed: Option<LedgerError>);
}

/// What one run of a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ran {
    /// It changed the database (`Finish::Commit`).
    Changed,
    /// It changed nothing (`Finish::Unchanged`).
    Unchanged,
    /// It failed: what it did must be undone, with the whole transaction.
    Failed,
}

/// A typed request: the statements to run and where its answer goes.
struct Queued<T, F> {
    op: F,
    result: Option<Result<T, LedgerError>>,
    reply: oneshot::Sender<Result<T, LedgerError>>,
}

impl<T, F> PendingWrite for Queued<T, F>
where
    T: Send + 'static,
    F: for<'c> Fn(&'c mut SqliteConnection) -> BoxFuture<'c, Result<Finish<T>, LedgerError>>
        + Send
        + 'static,
{
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run<'c>(&'c mut self, conn: &'c mut SqliteConnection) -> BoxFuture<'c, Ran> {
        Box::pin(async move {
            let (ran, result) = match (self.op)(conn).await {
                Ok(Finish::Commit(value)) => (Ran::Changed, Ok(value)),
                Ok(Finish::Unchanged(value)) => (Ran::Unchanged, Ok(value)),
                Err(e) => (Ran::Failed, Err(e)),
            };
            self.result = Some(result);
            ran
        })
    }

    fn answer(self: Box<Self>, batch_failed: Option<LedgerError>) {
        let Queued { op, result, reply } = *self;
        // Whatever the write shares with its caller is released before the caller wakes.
        drop(op);
        let result = match (batch_failed, result) {
            (Some(e), _) => Err(e),
            (None, Some(result)) => result,
            // Unreachable: a write is answered without an error only after it ran.
            (None, None) => Err(writer_stopped()),
        };
        // A caller that stopped waiting is not an error.
        let _ = reply.send(result);
    }
}

/// Why a whole batch was not committed; every caller in it gets this as the source of its
/// [`LedgerError::Unavailable`].
#[derive(Debug, thiserror::Error)]
#[error("the write batch was not committed: {0}")]
struct BatchFailed(#[source] Arc<sqlx::Error>);

/// The writer task is gone (its runtime shut down, or it panicked).
#[derive(Debug, thiserror::Error)]
#[error("the SQLite ledger's writer task has stopped")]
struct WriterStopped;

fn writer_stopped() -> LedgerError {
    LedgerError::Unavailable(Box::new(WriterStopped))
}

fn batch_failed(e: &Arc<sqlx::Error>) -> LedgerError {
    LedgerError::Unavailable(Box::new(BatchFailed(e.clone())))
}

/// The writer task: takes what is queued (never waiting for more), commits it as one
/// transaction, answers, repeats. Ends when every ledger handle is gone.
///
/// With `keep_connection`, it keeps the pool's one connection between batches: giving it back
/// costs a spawned task and a ping (a round trip to the connection's thread) that the next
/// batch would wait for. It gives it back when the pool is closed (so [`SqliteLedger::close`]
/// completes and later writes fail) and after a batch that failed as a whole (so the pool
/// checks the connection).
async fn run_writer(
    pool: SqlitePool,
    mut queue: mpsc::UnboundedReceiver<Box<dyn PendingWrite>>,
    max_batch: usize,
    keep_connection: bool,
    stats: Arc<WriterStats>,
) {
    let mut batch: Vec<Box<dyn PendingWrite>> = Vec::with_capacity(max_batch);
    let mut conn: Option<PoolConnection<Sqlite>> = None;
    let mut closed = std::pin::pin!(pool.close_event());
    let mut pool_closed = false;
    loop {
        let received = if conn.is_some() && !pool_closed {
            tokio::select! {
                biased;
                () = &mut closed => {
                    pool_closed = true;
                    conn = None;
                    continue;
                }
                received = queue.recv_many(&mut batch, max_batch) => received,
            }
        } else {
            queue.recv_many(&mut batch, max_batch).await
        };
        if received == 0 {
            break;
        }
        batch.retain(|w| !w.abandoned());
        if batch.is_empty() {
            continue;
        }
        if pool.is_closed() {
            conn = None;
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match pool.acquire().await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    let e = Arc::new(e);
                    for w in batch.drain(..) {
                        w.answer(Some(batch_failed(&e)));
                    }
                    continue;
                }
            },
        };
        let committed = run_batch(c, &mut batch, &stats).await;
        // After a failed COMMIT or ROLLBACK (a full disk, an I/O error) SQLite may have rolled
        // the transaction back by itself while sqlx still counts it as open: every later
        // `BEGIN` would then fail. Such a connection is closed and the pool opens a fresh one.
        // An in-memory database lives only in its connection, so it is never closed.
        if !committed && keep_connection && !still_usable(c).await {
            c.close_on_drop();
        }
        if !committed || !keep_connection {
            conn = None;
        }
        batch.clear();
    }
}

/// Whether the writer's connection can start the next batch after one that failed as a whole:
/// it answers, and no transaction is left open on it (the rollback sqlx queued when the failed
/// transaction was dropped runs before the probe, in order).
async fn still_usable(conn: &mut SqliteConnection) -> bool {
    sqlx::raw_sql("SELECT 1").execute(&mut *conn).await.is_ok() && !conn.is_in_transaction()
}

/// Runs `writes` in one transaction and answers each caller after the commit.
///
/// A write that fails (a statement error, a row that cannot be decoded) may have changed
/// something before it failed, and SQLite can only undo it with everything after the last
/// savepoint. Rather than paying a savepoint round trip for every write, the whole transaction
/// is rolled back and the batch runs again without the failed write, which gets its own error.
/// A refused precondition changed nothing and needs no undo. Every write is answered only after
/// the transaction that holds its final run was committed.
///
/// Returns `false` if the batch failed as a whole (`BEGIN`, `ROLLBACK` or `COMMIT` failed).
async fn run_batch(
    conn: &mut SqliteConnection,
    writes: &mut Vec<Box<dyn PendingWrite>>,
    stats: &WriterStats,
) -> bool {
    let mut failed: Vec<Box<dyn PendingWrite>> = Vec::new();
    let finished = loop {
        let mut tx = match conn.begin_with("BEGIN IMMEDIATE").await {
            Ok(tx) => tx,
            Err(e) => break Err(e),
        };
        let mut changed = false;
        let mut failure = None;
        for (i, w) in writes.iter_mut().enumerate() {
            match w.run(&mut tx).await {
                Ran::Changed => changed = true,
                Ran::Unchanged => {}
                Ran::Failed => {
                    failure = Some(i);
                    break;
                }
            }
        }
        match failure {
            None if changed => break tx.commit().await.map(|()| true),
            // Nothing to keep: no commit, no fsync.
            None => break tx.rollback().await.map(|()| false),
            Some(i) => {
                // Undo the failed write and everything before it; if even that fails (SQLite
                // already rolled back after an I/O error, say), the batch is lost as a whole.
                if let Err(e) = tx.rollback().await {
                    break Err(e);
                }
                failed.push(writes.remove(i));
                if writes.is_empty() {
                    break Ok(false);
                }
            }
        }
    };
    match finished {
        Ok(committed) => {
            if committed {
                stats.commits.fetch_add(1, Ordering::Relaxed);
                stats
                    .committed_requests
                    .fetch_add((writes.len() + failed.len()) as u64, Ordering::Relaxed);
            }
            for w in writes.drain(..).chain(failed) {
                w.answer(None);
            }
            true
        }
        Err(e) => {
            // Dropping an unfinished transaction rolls it back. Not even a failed write gets its
            // own error: it may rest on a change of the lost batch.
            let e = Arc::new(e);
            for w in writes.drain(..).chain(failed) {
                w.answer(Some(batch_failed(&e)));
            }
            false
        }
    }
}

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

fn to_i64(what: &str, v: u64) -> Result<i64, LedgerError> {
    i64::try_from(v).map_err(|_| {
        LedgerError::Config(format!("{what} {v} exceeds the range of a SQLite integer"))
    })
}

fn to_json<T: serde::Serialize>(what: &str, v: &T) -> Result<String, LedgerError> {
    serde_json::to_string(v)
        .map_err(|e| LedgerError::Config(format!("cannot serialize {what}: {e}")))
}

// ── SQL ─────────────────────────────────────────────────────────────────────────────────────────
//
// The `state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY')` and `state = 'IN_FLIGHT'` terms repeat the WHERE
// clauses of the partial indexes verbatim: SQLite only uses a partial index when the query
// contains its condition as a term.

/// Inserts a new operation and, only if the row was inserted (`changes() = 1` after the
/// `ON CONFLICT DO NOTHING`), its `created` entry; the entry's id comes back as the one row.
/// One round trip to the connection's thread instead of two. Parameters ?15..?22 are the
/// evidence columns after tenant and operation id (see [`EvidenceColumns::bind`]).
const INSERT_OPERATION: &str = "
INSERT INTO rw_operations (
    tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
    request_method, request_url, request_headers, request_body,
    contract_name, contract_hash, budget_policy,
    state, generation, version, attempts_used, queries_used, may_have_applied,
    created_ms, updated_ms
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,
          'PREPARED', 0, 0, 0, 0, 0, ?14, ?14)
ON CONFLICT DO NOTHING;
INSERT INTO rw_evidence (
    tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms
) SELECT ?1, ?2, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22 WHERE changes() = 1
RETURNING id";

/// [`Ledger::create_and_apply`]: inserts the claimed row whole and, only if it was inserted, the
/// `created` entry and then `first`'s entry, each guarded by `changes() = 1` of the statement
/// before it. The last entry's id comes back as the one row iff the operation was created.
///
/// Parameters: ?1 tenant, ?2 operation id, ?3..?10 the `created` entry and ?11..?18 `first`'s
/// entry (see [`EvidenceColumns::bind`]), ?19..?47 the other columns of the row (see
/// [`bind_operation`]). The entries come first on purpose: sqlx binds a statement's *unused*
/// parameter slots below its highest one from a running counter, and stops binding (leaving
/// NULLs) once that counter passes the number of arguments; small gaps keep it in range.
const INSERT_CLAIMED: &str = "
INSERT INTO rw_operations (
    tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
    request_method, request_url, request_headers, request_body,
    contract_name, contract_hash, budget_policy,
    state, last_result, generation, version, attempts_used, queries_used, may_have_applied,
    current_attempt, lease_until_ms, next_check_ms, deadline_ms, remote_ref, reason,
    response_status, response_headers, response_body,
    created_ms, updated_ms
) VALUES (?1, ?2, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33,
          ?34, ?35, ?36, ?37, ?38, ?39, ?40, ?41, ?42, ?43, ?44, ?45, ?46, ?47)
ON CONFLICT DO NOTHING;
INSERT INTO rw_evidence (
    tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms
) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 WHERE changes() = 1;
INSERT INTO rw_evidence (
    tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms
) SELECT ?1, ?2, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18 WHERE changes() = 1
RETURNING id";

const SELECT_BY_ID: &str = "SELECT * FROM rw_operations WHERE tenant = ?1 AND operation_id = ?2";

const SELECT_BY_INTENT: &str =
    "SELECT * FROM rw_operations WHERE tenant = ?1 AND action = ?2 AND intent_ref = ?3";

/// The compare-and-swap, and in the same round trip its evidence entry, inserted only if the
/// row changed (`changes() = 1` after the `UPDATE`). Parameters ?24..?31 are the evidence
/// columns after tenant and operation id (see [`EvidenceColumns::bind`]).
const APPLY: &str = "
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
INSERT INTO rw_evidence (
    tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms
) SELECT ?18, ?19, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31 WHERE changes() = 1";

// The claims and the sweep name their partial index (INDEXED BY): without statistics
// (no ANALYZE) the planner would rather take the listing index `rw_operations_by_state` for
// their `state` terms, then sort every row of those states instead of reading only the due ones.
const CLAIM_DUE: &str = "
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
const CLAIM_PREPARED: &str = "
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
const QUARANTINE: &str =
    "UPDATE rw_operations SET quarantine_reason = ?1, quarantined_ms = ?2 WHERE rowid = ?3";

const SELECT_QUARANTINED: &str = "
SELECT tenant, operation_id, quarantine_reason, quarantined_ms FROM rw_operations
WHERE quarantine_reason IS NOT NULL
ORDER BY quarantined_ms, rowid
LIMIT ?1";

const SWEEP_EXPIRED: &str = "
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

const INSERT_EVIDENCE: &str = "
INSERT INTO rw_evidence (
    tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

const APPEND_EVIDENCE: &str = "
INSERT INTO rw_evidence (
    tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms
) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10
WHERE EXISTS (SELECT 1 FROM rw_operations WHERE tenant = ?1 AND operation_id = ?2)";

const SELECT_EVIDENCE: &str = "
SELECT id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms
FROM rw_evidence WHERE tenant = ?1 AND operation_id = ?2 ORDER BY id";

/// An evidence entry encoded for its columns.
struct EvidenceColumns {
    attempt_id: Option<String>,
    generation: i64,
    kind: String,
    from_state: Option<&'static str>,
    to_state: Option<&'static str>,
    evidence: Option<String>,
    note: Option<String>,
    at_ms: i64,
}

impl EvidenceColumns {
    fn encode(e: NewEvidence) -> Result<Self, LedgerError> {
        Ok(Self {
            attempt_id: e.attempt_id.map(|a| a.to_stored()),
            generation: to_i64("generation", e.generation.0)?,
            kind: e.kind,
            from_state: e.from_state.map(State::as_str),
            to_state: e.to_state.map(State::as_str),
            evidence: e
                .evidence
                .as_ref()
                .map(|ev| to_json("evidence", ev))
                .transpose()?,
            note: e.note,
            at_ms: e.at_ms,
        })
    }

    /// Binds the columns after tenant and operation id, in table order (eight parameters).
    fn bind(self, query: SqliteQuery) -> SqliteQuery {
        query
            .bind(self.attempt_id)
            .bind(self.generation)
            .bind(self.kind)
            .bind(self.from_state)
            .bind(self.to_state)
            .bind(self.evidence)
            .bind(self.note)
            .bind(self.at_ms)
    }

    async fn insert(
        self,
        sql: &'static str,
        conn: &mut SqliteConnection,
        tenant: &Tenant,
        id: &OperationId,
    ) -> Result<(), LedgerError> {
        sqlx::query(sql)
            .bind(tenant.as_str())
            .bind(id.as_str())
            .bind(self.attempt_id)
            .bind(self.generation)
            .bind(self.kind)
            .bind(self.from_state)
            .bind(self.to_state)
            .bind(self.evidence)
            .bind(self.note)
            .bind(self.at_ms)
            .execute(conn)
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

impl Ledger for SqliteLedger {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            let headers = to_json("request headers", &new.request.headers)?;
            let policy = to_json("budget policy", &new.policy)?;
            let created = EvidenceColumns::encode(store_entries::created(new.now_ms))?;
            let insert = Statement::new(INSERT_OPERATION, |query| {
                created.bind(
                    query
                        .bind(new.tenant.as_str().to_owned())
                        .bind(new.operation_id.as_str().to_owned())
                        .bind(new.action.clone())
                        .bind(new.intent_ref.clone())
                        .bind(new.idempotency_key.as_str().to_owned())
                        .bind(new.payload_hash.as_str().to_owned())
                        .bind(new.request.method.clone())
                        .bind(new.request.url.clone())
                        .bind(headers)
                        .bind(new.request.body.to_vec())
                        .bind(new.contract.name.clone())
                        .bind(new.contract.hash.clone())
                        .bind(policy)
                        .bind(new.now_ms),
                )
            })?;
            // The row holds exactly what is bound: no need to read it back.
            self.insert_or_get(insert, new.into_prepared()).await
        })
    }

    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            check_first_update(&new, &first)?;
            let created = EvidenceColumns::encode(store_entries::created(new.now_ms))?;
            // The claimed row goes in directly (one INSERT, no UPDATE), then the `created`
            // entry and `first`'s entry, in that order: both only if the row was inserted.
            let (row, entry) = first_applied(new, first);
            let entry = EvidenceColumns::encode(entry)?;
            let insert = Statement::try_new(INSERT_CLAIMED, |query| {
                let query = query
                    .bind(row.tenant.as_str().to_owned())
                    .bind(row.operation_id.as_str().to_owned());
                bind_operation(entry.bind(created.bind(query)), &row)
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
        Box::pin(async move {
            let c = &update.changes;
            let (response_status, response_headers, response_body) = match &c.response {
                Some(r) => (
                    Some(i64::from(r.status)),
                    Some(to_json("response headers", &r.headers)?),
                    Some(r.body.to_vec()),
                ),
                None => (None, None, None),
            };
            let evidence = EvidenceColumns::encode(update.evidence)?;
            let apply = Statement::try_new(APPLY, |query| {
                let query = query
                    .bind(c.state.as_str())
                    .bind(c.last_result.map(State::as_str))
                    .bind(to_i64("generation", c.generation.0)?)
                    .bind(i64::from(c.attempts_used))
                    .bind(i64::from(c.queries_used))
                    .bind(i64::from(c.reset_may_have_applied))
                    .bind(i64::from(c.may_have_applied))
                    .bind(c.current_attempt.map(|a| a.to_stored()))
                    .bind(c.lease_until_ms)
                    .bind(c.next_check_ms)
                    .bind(c.deadline_ms)
                    .bind(c.remote_ref.clone())
                    .bind(c.reason.clone())
                    .bind(response_status)
                    .bind(response_headers)
                    .bind(response_body)
                    .bind(c.now_ms)
                    .bind(update.tenant.as_str())
                    .bind(update.operation_id.as_str())
                    .bind(update.expect_state.as_str())
                    .bind(to_i64("generation", update.expect_generation.0)?)
                    .bind(to_i64("version", update.expect_version)?)
                    .bind(i64::from(update.operation_level));
                Ok(evidence.bind(query))
            })?;
            self.write(move |conn| {
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
        })
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
            let entry = EvidenceColumns::encode(entry)?;
            let append = Statement::new(APPEND_EVIDENCE, |query| {
                entry.bind(
                    query
                        .bind(tenant.as_str().to_owned())
                        .bind(id.as_str().to_owned()),
                )
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
}

impl SqliteLedger {
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

/// A statement with its arguments, kept so that its write can run again (a write runs once
/// more for every failed write before it in its batch, see [`run_batch`]).
struct Statement {
    sql: &'static str,
    arguments: SqliteArguments,
}

impl Statement {
    /// `sql` with the arguments `bind` gives it.
    fn new(
        sql: &'static str,
        bind: impl FnOnce(SqliteQuery) -> SqliteQuery,
    ) -> Result<Self, LedgerError> {
        Self::try_new(sql, |query| Ok(bind(query)))
    }

    /// `sql` with the arguments `bind` gives it, if it can.
    fn try_new(
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
    fn query(&self) -> SqliteQuery {
        sqlx::query_with(self.sql, self.arguments.clone())
    }
}

/// A query with owned arguments.
type SqliteQuery = sqlx::query::Query<'static, sqlx::Sqlite, SqliteArguments>;

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

/// Binds the columns of `r` after tenant and operation id, in table order (29 parameters, see
/// [`INSERT_CLAIMED`]).
fn bind_operation(
    query: sqlx::query::Query<'static, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    r: &OperationRecord,
) -> Result<sqlx::query::Query<'static, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>, LedgerError> {
    let (response_status, response_headers, response_body) = match &r.response {
        Some(resp) => (
            Some(i64::from(resp.status)),
            Some(to_json("response headers", &resp.headers)?),
            Some(resp.body.to_vec()),
        ),
        None => (None, None, None),
    };
    Ok(query
        .bind(r.action.clone())
        .bind(r.intent_ref.clone())
        .bind(r.idempotency_key.as_str().to_owned())
        .bind(r.payload_hash.as_str().to_owned())
        .bind(r.request.method.clone())
        .bind(r.request.url.clone())
        .bind(to_json("request headers", &r.request.headers)?)
        .bind(r.request.body.to_vec())
        .bind(r.contract.name.clone())
        .bind(r.contract.hash.clone())
        .bind(to_json("budget policy", &r.policy)?)
        .bind(r.state.as_str())
        .bind(r.last_result.map(State::as_str))
        .bind(to_i64("generation", r.generation.0)?)
        .bind(to_i64("version", r.version)?)
        .bind(i64::from(r.attempts_used))
        .bind(i64::from(r.queries_used))
        .bind(i64::from(r.may_have_applied))
        .bind(r.current_attempt.map(|a| a.to_stored()))
        .bind(r.lease_until_ms)
        .bind(r.next_check_ms)
        .bind(r.deadline_ms)
        .bind(r.remote_ref.clone())
        .bind(r.reason.clone())
        .bind(response_status)
        .bind(response_headers)
        .bind(response_body)
        .bind(r.created_ms)
        .bind(r.updated_ms))
}

// ── decoding ────────────────────────────────────────────────────────────────────────────────────

/// Decodes rows a claim or sweep returned with `rowid AS rw_rowid`, each with its rowid
/// (creation order). A row that cannot be decoded is quarantined in the same transaction and
/// left out: one bad row must not stop the recovery of the others.
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
        EvidenceColumns::encode(entry(r, now_ms))?
            .insert(INSERT_EVIDENCE, conn, &r.tenant, &r.operation_id)
            .await?;
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
                let reason =
                    super::decode::quarantine(tenant.as_deref(), id.as_deref(), during, &e);
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

fn decode_quarantined(row: &SqliteRow) -> Result<QuarantinedRow, LedgerError> {
    let c = Columns::new(row, "<quarantined row>");
    Ok(QuarantinedRow {
        tenant: Tenant::new(c.text("tenant")?),
        operation_id: OperationId::new(c.text("operation_id")?),
        error: c.text("quarantine_reason")?,
        at_ms: c.get::<Option<i64>>("quarantined_ms")?.unwrap_or_default(),
    })
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

super::decode::row_decoder!(SqliteRow, sqlx::Sqlite);

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

/// Binds a listing statement's arguments in order.
fn bind_args(
    mut query: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    args: Vec<super::query::Arg>,
) -> sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    for a in args {
        query = match a {
            super::query::Arg::Text(t) => query.bind(t),
            super::query::Arg::Int(i) => query.bind(i),
        };
    }
    query
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pragmas_are_set_on_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
            .await
            .unwrap();
        let pool = ledger.writer_pool();
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(mode.to_ascii_lowercase(), "wal");
        // 2 = FULL.
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(sync, 2);
        let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(fk, 1);
        // 2 = MEMORY: statement journals never spill to a temporary file.
        let temp_store: i64 = sqlx::query_scalar("PRAGMA temp_store")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(temp_store, 2);
        let reader_sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&ledger.reader)
            .await
            .unwrap();
        assert_eq!(reader_sync, 2);
    }

    #[tokio::test]
    async fn synchronous_normal_is_configurable() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = SqliteLedger::open_with(
            dir.path().join("ledger.db"),
            SqliteLedgerOptions::new().synchronous(Synchronous::Normal),
        )
        .await
        .unwrap();
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(ledger.writer_pool())
            .await
            .unwrap();
        assert_eq!(sync, 1);
    }

    #[tokio::test]
    async fn zero_readers_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = SqliteLedger::open_with(
            dir.path().join("ledger.db"),
            SqliteLedgerOptions::new().max_readers(0),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, LedgerError::Config(_)), "{err:?}");
    }

    async fn count(ledger: &SqliteLedger, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&ledger.reader)
            .await
            .unwrap()
    }

    /// A raw write through the writer task: inserts a bare operation row named `id`.
    fn insert_row(
        id: &'static str,
    ) -> impl for<'c> Fn(&'c mut SqliteConnection) -> BoxFuture<'c, Result<Finish<()>, LedgerError>>
    + Send
    + 'static {
        move |conn| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO rw_operations (tenant, operation_id, action, intent_ref, \
                     idempotency_key, payload_hash, request_method, request_url, \
                     request_headers, request_body, contract_name, contract_hash, budget_policy, \
                     state, created_ms, updated_ms) VALUES ('t', ?1, 'a', ?1, 'k', 'h', 'POST', \
                     'http://v/', '[]', x'', 'c', 'h', '{}', 'PREPARED', 0, 0)",
                )
                .bind(id)
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?;
                Ok(Finish::Commit(()))
            })
        }
    }

    /// Evidence for an operation that does not exist: a foreign key violation.
    const ORPHAN_EVIDENCE: &str = "INSERT INTO rw_evidence (tenant, operation_id, generation, \
         kind, at_ms) VALUES ('t', 'op-missing', 0, 'x', 0)";

    /// A request whose precondition failed: nothing to keep.
    fn refused(_: &mut SqliteConnection) -> BoxFuture<'_, Result<Finish<u8>, LedgerError>> {
        Box::pin(async { Ok(Finish::Unchanged(7)) })
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_request_failing_after_its_first_statement_is_undone_alone() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let commits = ledger.commits();
        // The middle request writes a row, then violates a constraint: its row must go, the
        // others' rows stay, and all three share one commit.
        fn failing(conn: &mut SqliteConnection) -> BoxFuture<'_, Result<Finish<()>, LedgerError>> {
            Box::pin(async move {
                insert_row("op-half")(&mut *conn).await?;
                sqlx::query(ORPHAN_EVIDENCE)
                    .execute(&mut *conn)
                    .await
                    .map_err(unavailable)?;
                Ok(Finish::Commit(()))
            })
        }
        let (a, b, c) = tokio::join!(
            ledger.write(insert_row("op-a")),
            ledger.write(failing),
            ledger.write(insert_row("op-c")),
        );
        assert!(a.is_ok() && c.is_ok(), "{a:?} {c:?}");
        assert!(matches!(b, Err(LedgerError::Unavailable(_))), "{b:?}");
        assert_eq!(ledger.commits() - commits, 1);
        assert_eq!(
            count(
                &ledger,
                "SELECT COUNT(*) FROM rw_operations WHERE operation_id IN ('op-a', 'op-c')"
            )
            .await,
            2
        );
        assert_eq!(
            count(
                &ledger,
                "SELECT COUNT(*) FROM rw_operations WHERE operation_id = 'op-half'"
            )
            .await,
            0
        );
    }

    /// Evidence for `op-a`: fails (foreign key) unless `op-a` exists in this transaction.
    fn evidence_for_a(
        conn: &mut SqliteConnection,
    ) -> BoxFuture<'_, Result<Finish<()>, LedgerError>> {
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO rw_evidence (tenant, operation_id, generation, kind, at_ms) \
                 VALUES ('t', 'op-a', 0, 'x', 0)",
            )
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
            Ok(Finish::Commit(()))
        })
    }

    #[tokio::test(flavor = "current_thread")]
    async fn failed_writes_are_dropped_and_the_others_kept_exactly_once() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let (commits, writes) = (ledger.commits(), ledger.committed_writes());
        // Each failing write inserts a row, then violates a constraint.
        fn failing(
            id: &'static str,
        ) -> impl for<'c> Fn(
            &'c mut SqliteConnection,
        ) -> BoxFuture<'c, Result<Finish<()>, LedgerError>>
        + Send
        + 'static {
            move |conn| {
                Box::pin(async move {
                    insert_row(id)(&mut *conn).await?;
                    sqlx::query(ORPHAN_EVIDENCE)
                        .execute(&mut *conn)
                        .await
                        .map_err(unavailable)?;
                    Ok(Finish::Commit(()))
                })
            }
        }
        // `b` needs `a`'s row, so it must run after `a` in the transaction that commits; `a`
        // and `c` are plain inserts, which would fail if they ran twice in it.
        let (a, f1, b, f2, c) = tokio::join!(
            ledger.write(insert_row("op-a")),
            ledger.write(failing("op-half-1")),
            ledger.write(evidence_for_a),
            ledger.write(failing("op-half-2")),
            ledger.write(insert_row("op-c")),
        );
        assert!(a.is_ok() && b.is_ok() && c.is_ok(), "{a:?} {b:?} {c:?}");
        for failed in [f1, f2] {
            assert!(
                matches!(&failed, Err(LedgerError::Unavailable(e)) if e.to_string().contains("FOREIGN KEY")),
                "{failed:?}"
            );
        }
        assert_eq!(ledger.commits() - commits, 1);
        assert_eq!(ledger.committed_writes() - writes, 5);
        assert_eq!(
            count(
                &ledger,
                "SELECT COUNT(*) FROM rw_operations WHERE operation_id IN ('op-a', 'op-c')"
            )
            .await,
            2
        );
        assert_eq!(
            count(&ledger, "SELECT COUNT(*) FROM rw_operations").await,
            2,
            "nothing of a failed write is kept"
        );
        assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_of_only_failed_writes_commits_nothing() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let commits = ledger.commits();
        // No `op-a`: both fail, alone or after the other was dropped.
        let (x, y) = tokio::join!(ledger.write(evidence_for_a), ledger.write(evidence_for_a));
        assert!(x.is_err() && y.is_err(), "{x:?} {y:?}");
        assert_eq!(ledger.commits(), commits);
        assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 0);
        // The ledger keeps working afterwards.
        ledger.write(insert_row("op-a")).await.unwrap();
        ledger.write(evidence_for_a).await.unwrap();
        assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_commit_fails_every_caller_and_keeps_nothing() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let commits = ledger.commits();
        // A deferred foreign key violation passes every statement and fails the COMMIT.
        fn poison(conn: &mut SqliteConnection) -> BoxFuture<'_, Result<Finish<()>, LedgerError>> {
            Box::pin(async move {
                for sql in ["PRAGMA defer_foreign_keys = ON", ORPHAN_EVIDENCE] {
                    sqlx::query(sql)
                        .execute(&mut *conn)
                        .await
                        .map_err(unavailable)?;
                }
                Ok(Finish::Commit(()))
            })
        }
        // A request whose precondition "fails" is not reported as refused either: the refusal
        // may rest on a change of the failed batch.
        let (a, b, c, d) = tokio::join!(
            ledger.write(insert_row("op-a")),
            ledger.write(poison),
            ledger.write(insert_row("op-c")),
            ledger.write(refused),
        );
        for (name, result) in [("a", a), ("b", b), ("c", c), ("d", d.map(|_| ()))] {
            assert!(
                matches!(&result, Err(LedgerError::Unavailable(e)) if e.to_string().contains("not committed")),
                "{name}: {result:?}"
            );
        }
        assert_eq!(ledger.commits(), commits);
        assert_eq!(
            count(&ledger, "SELECT COUNT(*) FROM rw_operations").await,
            0
        );
        assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 0);
        // The ledger keeps working afterwards.
        ledger.write(insert_row("op-after")).await.unwrap();
        assert_eq!(
            count(&ledger, "SELECT COUNT(*) FROM rw_operations").await,
            1
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_of_refusals_is_rolled_back_without_a_commit() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let commits = ledger.commits();
        let (a, b) = tokio::join!(ledger.write(refused), ledger.write(refused));
        assert_eq!((a.unwrap(), b.unwrap()), (7, 7));
        assert_eq!(ledger.commits(), commits, "nothing to make durable");
    }

    /// The claim of send rights on the fresh row of `new`, as the layer builds it.
    #[cfg(feature = "test-util")]
    fn first_claim(new: &NewOperation) -> Update {
        use crate::state::{Clock, Event, transition};
        let now = new.now_ms;
        let clock = Clock {
            now_ms: now,
            jitter: 0.0,
        };
        let t = transition(&new.snapshot(), &Event::ClaimSend, clock).unwrap();
        new.first_update(
            &t,
            Some(AttemptId::generate()),
            Some(now + 30_000),
            super::super::conformance::evidence_entry("attempt_registered", now),
            now,
        )
    }

    #[cfg(feature = "test-util")]
    #[tokio::test]
    async fn create_and_apply_is_one_write_and_one_commit() {
        use super::super::conformance::new_operation;
        let dir = tempfile::tempdir().unwrap();
        let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
            .await
            .unwrap();
        let new = new_operation("t", "op-1", "intent-1");
        let (commits, writes) = (ledger.commits(), ledger.committed_writes());
        let created = ledger
            .create_and_apply(new.clone(), first_claim(&new))
            .await
            .unwrap();
        assert!(
            matches!(&created, Created::New(r) if r.state == State::InFlight),
            "{created:?}"
        );
        assert_eq!(
            (
                ledger.commits() - commits,
                ledger.committed_writes() - writes
            ),
            (1, 1)
        );
        // A second call for the same intent changes nothing: no commit at all.
        let again = new_operation("t", "op-2", "intent-1");
        let existing = ledger
            .create_and_apply(again.clone(), first_claim(&again))
            .await
            .unwrap();
        assert_eq!(existing, Created::Existing(created.into_record()));
        assert_eq!(ledger.commits() - commits, 1);
        assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 2);
    }

    #[test]
    fn a_write_after_the_writer_task_stopped_is_unavailable() {
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        // The runtime that opened the ledger, and with it the writer task, is gone.
        let ledger = runtime().block_on(SqliteLedger::in_memory()).unwrap();
        let result = runtime().block_on(ledger.write(insert_row("op-x")));
        assert!(
            matches!(&result, Err(LedgerError::Unavailable(e)) if e.to_string().contains("stopped")),
            "{result:?}"
        );
    }

    async fn plan(ledger: &SqliteLedger, sql: &'static str) -> String {
        let rows = sqlx::query(sql)
            .bind(0_i64)
            .bind(0_i64)
            .bind(10_i64)
            .fetch_all(ledger.writer_pool())
            .await
            .unwrap();
        rows.iter()
            .map(|r| r.get::<String, _>("detail"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn due_work_and_sweep_queries_use_the_partial_indexes() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let claim = plan(
            &ledger,
            "EXPLAIN QUERY PLAN SELECT rowid FROM rw_operations INDEXED BY rw_operations_due \
             WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY') AND next_check_ms <= ?1 \
               AND (lease_until_ms IS NULL OR lease_until_ms <= ?2) \
             ORDER BY next_check_ms, rowid LIMIT ?3",
        )
        .await;
        assert!(claim.contains("rw_operations_due"), "{claim}");
        assert!(!claim.contains("TEMP B-TREE"), "{claim}");
        let sweep = plan(
            &ledger,
            "EXPLAIN QUERY PLAN SELECT rowid FROM rw_operations \
             INDEXED BY rw_operations_in_flight_lease WHERE state = 'IN_FLIGHT' AND lease_until_ms < ?1 AND ?2 = ?2 AND ?3 = ?3",
        )
        .await;
        assert!(sweep.contains("rw_operations_in_flight_lease"), "{sweep}");
        let evidence = plan(
            &ledger,
            "EXPLAIN QUERY PLAN SELECT id FROM rw_evidence \
             WHERE tenant = ?1 AND operation_id = ?2 AND ?3 = ?3 ORDER BY id",
        )
        .await;
        assert!(evidence.contains("rw_evidence_by_operation"), "{evidence}");
        assert!(!evidence.contains("TEMP B-TREE"), "{evidence}");
    }

    #[tokio::test]
    async fn the_real_claim_and_sweep_statements_use_the_partial_indexes() {
        let ledger = SqliteLedger::in_memory().await.unwrap();
        for (sql, index) in [
            (CLAIM_DUE, "rw_operations_due"),
            (SWEEP_EXPIRED, "rw_operations_in_flight_lease"),
            (CLAIM_PREPARED, "rw_operations_prepared"),
        ] {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            let rows = sqlx::query(sqlx::AssertSqlSafe(explain))
                .bind(0_i64)
                .bind(0_i64)
                .bind(10_i64)
                .fetch_all(ledger.writer_pool())
                .await
                .unwrap();
            let plan = rows
                .iter()
                .map(|r| r.get::<String, _>("detail"))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(plan.contains(index), "{sql}\n{plan}");
        }
    }

    /// The plan of a listing or counting statement, its arguments bound.
    async fn plan_of(ledger: &SqliteLedger, sql: super::super::query::Sql) -> String {
        let explain = format!("EXPLAIN QUERY PLAN {}", sql.text);
        let rows = bind_args(sqlx::query(sqlx::AssertSqlSafe(explain)), sql.args)
            .fetch_all(&ledger.reader)
            .await
            .unwrap();
        rows.iter()
            .map(|r| r.get::<String, _>("detail"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn the_review_queue_listing_and_the_counts_read_the_state_indexes() {
        use super::super::query::{count_sql, list_sql};
        let ledger = SqliteLedger::in_memory().await.unwrap();
        let one = OperationQuery::tenant(Tenant::new("t")).state(State::ManualReview);
        let all = OperationQuery::all_tenants().state(State::ManualReview);
        for (q, index) in [
            (one.clone(), "rw_operations_by_tenant_state"),
            (
                one.clone().order(Order::OldestFirst),
                "rw_operations_by_tenant_state",
            ),
            (
                one.after(Cursor::new(5, 7)),
                "rw_operations_by_tenant_state",
            ),
            (all.clone(), "rw_operations_by_state"),
            (
                all.clone()
                    .order(Order::OldestFirst)
                    .after(Cursor::new(5, 7)),
                "rw_operations_by_state",
            ),
        ] {
            let plan = plan_of(
                &ledger,
                list_sql(&q, "rw_operations", "rowid", '?').unwrap(),
            )
            .await;
            assert!(plan.contains(index), "{q:?}\n{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{q:?}\n{plan}");
        }
        for (scope, index) in [
            (
                TenantScope::Tenant(Tenant::new("t")),
                "rw_operations_by_tenant_state",
            ),
            (TenantScope::AllTenants, "rw_operations_by_state"),
        ] {
            let plan = plan_of(&ledger, count_sql(&scope, "rw_operations", '?').unwrap()).await;
            assert!(plan.contains(index), "{scope:?}\n{plan}");
        }
    }
}
