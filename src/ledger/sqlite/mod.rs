//! The embedded durable ledger: one SQLite file, WAL, `synchronous=FULL` by default.
//!
//! # Layout
//!
//! - **One writer thread, group commit.** Every write (create, apply, claim, sweep, append) is
//!   queued to a single dedicated thread that owns the write connection. It takes whatever is
//!   queued (up to [`SqliteLedgerOptions::max_batch`]), runs all of it in one
//!   `BEGIN IMMEDIATE` transaction, commits once, and only then releases each caller with its
//!   own result. See [Group commit](#group-commit).
//! - SQLite is driven directly (`rusqlite`, bundled SQLite): every statement is prepared once
//!   and kept, and a batch's statements run back to back on the writer thread, with no
//!   hand-off per statement. The only wake-ups per write are its enqueue and its answer.
//!   `BEGIN IMMEDIATE` takes the write lock up front, so a transaction never fails halfway
//!   with `SQLITE_BUSY` on a lock upgrade.
//! - **Readers on their own connections**, up to [`SqliteLedgerOptions::max_readers`], used
//!   from Tokio's blocking threads. In WAL mode readers never wait for the writer, nor the
//!   writer for them, and they see every committed write. The one wait is deliberate: a read
//!   of an operation waits for that operation's results queued without waiting (see
//!   [Detached results](#detached-results)).
//! - Migrations are embedded in the crate (`migrations/sqlite/`) and run at open, inside a
//!   `BEGIN IMMEDIATE` transaction, so two processes opening one new file do not race. Their
//!   bookkeeping lives in `rw_schema_migrations`, in the format sqlx's migrator uses, so the
//!   ledger may share a file with an application's own sqlx migrations.
//!
//! # Group commit
//!
//! With `synchronous=FULL` a commit costs an fsync (about 0.25 ms on a typical cloud disk), and a
//! transaction of 64 rows costs about the same as one of a single row. Concurrent requests each
//! need a durable claim before they may send, so committing them one by one would serialize
//! every request in the process behind the disk. Instead:
//!
//! - The writer thread takes what is queued *now* and commits it: there is no timer waiting for a
//!   batch to fill, so a lone caller pays one commit, exactly as without batching, while
//!   callers arriving during a commit share the next one.
//! - The requests of a batch run one after the other in one transaction, in queue order: later
//!   requests see the changes of earlier ones, exactly as if they had committed one after the
//!   other. A request whose precondition fails (a conditional `UPDATE` that matched nothing, an
//!   insert that conflicted) changed nothing and is answered with its own result.
//! - A request whose statements fail (a constraint, a corrupt row) may have changed something
//!   before failing. Instead of a `SAVEPOINT` and its release around every request (for a
//!   rare case), the whole transaction is rolled back and the batch runs
//!   again without that request, which is answered with its own error: the others are
//!   neither failed nor lost, and nothing is half-applied. Every request does the same thing
//!   each time it runs.
//! - Every caller is released only after the batch's `COMMIT` returned, i.e. after the fsync:
//!   the "register, then send" rule holds for each claim in the batch. If the `COMMIT` itself
//!   fails, every caller in the batch gets [`LedgerError::Unavailable`] (nothing is reported as
//!   done, not even a refused precondition, which may have been computed against a row another
//!   request of the failed batch had changed). The writer then goes on with the next batch by
//!   itself: after a full disk or an I/O error SQLite may have ended the transaction on its
//!   own, or left it open; what is left is rolled back, and a connection that cannot even do
//!   that is replaced (for a file ledger) instead of failing every later write. Once there is
//!   room again, writes succeed on the same handle, without reopening.
//! - A caller that stopped waiting (its future was dropped) before its request was taken is
//!   skipped; once taken, the request completes and commits like the others (as a single
//!   transaction would once its `COMMIT` had been sent).
//!
//! The writer thread ends when the last handle is dropped (or at [`SqliteLedger::close`]),
//! closing its connection. Reads run on the blocking threads of the Tokio runtime that opened
//! the ledger.
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
//! committed at `synchronous = NORMAL` (switched just before its `BEGIN`), which
//! in WAL mode writes the WAL without an fsync; it survives the process dying, and a later
//! durable commit's fsync covers it. A batch with any claim commits at the configured level.
//! A result lost anyway (a power cut, or the process dying before the commit) leaves the row
//! `IN_FLIGHT`; its lease expires, the sweeper moves it to `UNKNOWN` and reconciliation asks
//! the vendor. It never becomes a second send (`tests/sqlite_group_commit.rs` kills a process
//! between the two). [`SqliteLedger::relaxed_commits`] counts those commits.
//!
//! # Detached results
//!
//! By default the layer does not wait for a result at all ([`Ledger::record_detached`],
//! [`SqliteLedgerOptions::detached_results`]): it queues the result for the writer thread and
//! hands the vendor's answer to its caller at once; the caller waited for its claim's commit
//! only. The writer runs writes in the order they were queued, and a read of an operation
//! ([`Ledger::get`], [`Ledger::evidence`]) waits for that operation's results queued before it
//! (a lookup by vendor reference or idempotency key waits for every queued result), so every
//! later call about the operation (the caller asking again, a reviewer, the recovery engine)
//! sees the result as if the caller had waited. Reads of other operations by their id never
//! wait for it; listings and counts ([`Ledger::list`], [`Ledger::count_by_state`]) do not, and
//! may show an operation as it was until its result lands, a batch later
//! ([`SqliteLedger::wait_for_results`] waits for every queued result). A result whose
//! precondition fails (the operation was taken over while the attempt was on the wire) is
//! appended as `late_evidence` instead, in the same transaction.
//!
//! Dropping the last handle of the ledger waits (at most 10 s, then gives up with a warning)
//! until every queued result is written, and [`SqliteLedger::close`] returns only once the
//! results queued before the call are written, so a normal exit loses none. The window this
//! opens is the one above: a process that dies (or exits without dropping the ledger, with
//! `std::process::exit`) after answering its caller and before the commit leaves the row
//! `IN_FLIGHT` although its caller was told the vendor's answer (the second SIGKILL test of
//! `tests/sqlite_group_commit.rs`). Recovery then runs as for any lost answer: a lookup where
//! the contract has one; for a contract that makes a same-key replay safe (`stripe-v1`), a
//! second request with the same key, answered from the vendor's stored first response; with
//! neither, a human, with no evidence of the success. Until then a repeat of the intent is
//! answered `Error::Unknown`, saying that the last attempt's result was not recorded and that
//! an answer already given for it stands. If the result cannot be written (a full
//! disk), the same: the caller already has the vendor's answer, and the row stays `IN_FLIGHT`
//! for recovery. Another process that opens the same file sees the result once it is
//! committed, a batch later.
//!
//! # Errors
//!
//! Connection, statement and commit failures are [`LedgerError::Unavailable`] (nothing was
//! changed). A row that cannot be decoded (an unknown state name, bad JSON, a malformed attempt
//! id) is [`LedgerError::Corrupt`], never a panic, when it is read by itself. A claim or sweep
//! that meets one quarantines it in the same transaction (its `quarantine_reason` column holds
//! the decode error, listed by [`Ledger::quarantined`]) and goes on with the healthy rows; a
//! quarantined row is never claimed or swept again until [`Ledger::release_quarantined`] finds
//! that this version decodes it. Counting and listing quarantined rows read the partial index
//! `rw_operations_quarantined` (`INDEXED BY`): there are few, and a tenant's finished rows are
//! never scanned to find them. A budget stored by a newer version, with
//! fields this one does not know, is read with those fields ignored.

mod conn;
mod migrate;
mod quarantine;
mod reader;
mod retention;
mod sql;
#[cfg(test)]
mod tests;
mod writer;

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use tokio::sync::oneshot;

use super::callback::{check_effect, outcome};
use super::codec::{
    CallbackEventColumns, Dialect, EvidenceColumns, QuarantinedCallbackColumns, RowColumns,
    UpdateColumns,
};
use super::*;
use conn::{Args, Conn, FromCell, Opener, SqlRow};
use reader::Readers;
use sql::*;
use writer::{
    Checkpointer, Detached, Durability, Finish, Job, Landing, PendingWrite, Queued, Writer,
    WriterStats, closed, writer_stopped,
};

/// How this backend encodes values.
const SQLITE: Dialect = Dialect::Sqlite;

/// The operations table read through its partial index of quarantined rows (migration 0002):
/// what counts and lists them. There are few; without `INDEXED BY` the planner (no statistics)
/// may prefer a tenant's whole range.
const QUARANTINED_ROWS: &str = "rw_operations INDEXED BY rw_operations_quarantined";

/// The SQLite [`Ledger`]. Cloning gives another handle to the same ledger (the same writer
/// thread and readers).
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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The writer thread: the one thread dropping the last handle must not wait on.
    writer_thread: std::thread::ThreadId,
    /// The queue of the writer thread (group commit).
    queue: mpsc::Sender<Job>,
    /// Where reads run.
    reads: Reads,
    /// What the writer thread did, for tests and diagnostics.
    stats: Arc<WriterStats>,
    /// Set by [`SqliteLedger::close`].
    closed: AtomicBool,
    /// Results queued without waiting ([`Ledger::record_detached`]) and how many landed: what
    /// reads wait for. `None`: results are not detached.
    detached: Option<Arc<Landing>>,
}

impl Drop for Inner {
    /// The last handle is gone: results queued without waiting are written before the handle
    /// is (a normal exit must not leave answered operations `IN_FLIGHT`). The writer thread
    /// runs on its own; this waits for it, at most [`LANDING_ON_DROP`].
    fn drop(&mut self) {
        // On the writer thread itself (a `settled` that owned the last handle), waiting would
        // only stall the thread that writes them.
        if std::thread::current().id() == self.writer_thread {
            return;
        }
        if let Some(landing) = &self.detached
            && !landing.landed_within(LANDING_ON_DROP)
        {
            tracing::warn!(
                "the SQLite ledger was dropped with results still queued; they will be written if the process lives on, or reconciled after their leases"
            );
        }
    }
}

/// How long dropping the last handle of a ledger waits for its queued results.
const LANDING_ON_DROP: Duration = Duration::from_secs(10);

/// Where reads run.
#[derive(Debug)]
enum Reads {
    /// On reader connections of their own (a file ledger).
    Pool(Arc<Readers>),
    /// Through the writer thread, between writes (an in-memory ledger: its database lives in
    /// the writer's one connection).
    Writer,
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

    /// The statement that sets this level on a connection.
    const fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "PRAGMA synchronous = FULL",
            Synchronous::Normal => "PRAGMA synchronous = NORMAL",
            Synchronous::Off => "PRAGMA synchronous = OFF",
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
    /// Most write requests committed in one transaction by the writer thread (group commit).
    /// Default [`SqliteLedgerOptions::DEFAULT_MAX_BATCH`]; at least 1 (1 turns group commit off: one transaction per
    /// request).
    pub max_batch: usize,
    /// Whether the layer's results are recorded without waiting for the writer
    /// ([`Ledger::record_detached`]): the caller gets the vendor's answer as soon as it is
    /// read, and the result is committed with the next batch. Default `true`. Only the claim
    /// must be durable before a send; a result that never lands leaves the row `IN_FLIGHT`
    /// under its lease, then `UNKNOWN`: recovered by a lookup, a same-key replay where the
    /// contract makes one safe (a second request, deduplicated by the vendor), or a person,
    /// although the caller was already answered. A read of an operation
    /// through this ledger waits for that operation's results queued before it.
    ///
    /// Dropping the last handle of the ledger (waiting at most 10 s) or [`SqliteLedger::close`]
    /// writes the queued results first; a process that dies before leaves their rows to
    /// recovery.
    ///
    /// With `false`, the layer waits for each result's commit (at `synchronous = NORMAL` when
    /// its batch holds no claim), and the [`Outcome`](crate::Outcome) it returns reflects a
    /// takeover that happened while the attempt was on the wire.
    pub detached_results: bool,
}

impl Default for SqliteLedgerOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            max_readers: 4,
            max_batch: Self::DEFAULT_MAX_BATCH,
            detached_results: true,
        }
    }
}

impl SqliteLedgerOptions {
    /// Default of [`max_batch`](Self::max_batch): 64 requests per commit.
    pub const DEFAULT_MAX_BATCH: usize = 64;

    /// The defaults: `synchronous=FULL`, a 5 s busy timeout, 4 readers, batches of up to 64
    /// writes, results recorded detached.
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

    /// Sets whether the layer's results are recorded without waiting for the writer (see
    /// [`detached_results`](Self::detached_results)).
    pub fn detached_results(mut self, detached: bool) -> Self {
        self.detached_results = detached;
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
        let runtime = current_runtime()?;
        let opener = Opener {
            path: path.to_owned(),
            busy_timeout: options.busy_timeout,
            synchronous: options.synchronous,
        };
        let readers = Readers::new(opener.clone(), options.max_readers, runtime);
        let (checkpointer, checkpoint) = Checkpointer::new(opener.clone());
        std::thread::Builder::new()
            .name("rw-sqlite-checkpoint".to_owned())
            .spawn(move || checkpointer.run())
            .map_err(|e| LedgerError::Unavailable(Box::new(e)))?;
        let open = move || {
            let mut conn = opener.writer()?;
            migrate::run(&mut conn)?;
            Ok((conn, Some(opener)))
        };
        let sync = Durability::new(options.synchronous, true);
        let reads = Reads::Pool(Arc::new(readers));
        Self::start(
            open,
            reads,
            options.max_batch,
            sync,
            Some(checkpoint),
            options.detached_results,
        )
        .await
    }

    /// A private in-memory ledger on one connection, for tests. Nothing is durable; each call
    /// makes a new, empty database.
    pub async fn in_memory() -> Result<Self, LedgerError> {
        current_runtime()?;
        let open = || {
            let mut conn = conn::in_memory()?;
            migrate::run(&mut conn)?;
            Ok((conn, None))
        };
        Self::start(
            open,
            Reads::Writer,
            SqliteLedgerOptions::DEFAULT_MAX_BATCH,
            // Nothing to sync: SQLite's default level, never switched.
            Durability::new(Synchronous::Full, false),
            None,
            SqliteLedgerOptions::default().detached_results,
        )
        .await
    }

    /// Starts the writer thread, which opens the connection with `open` (and migrates it)
    /// before it takes any write.
    async fn start<F>(
        open: F,
        reads: Reads,
        max_batch: usize,
        sync: Durability,
        checkpoint: Option<writer::CheckpointHandle>,
        detached_results: bool,
    ) -> Result<Self, LedgerError>
    where
        F: FnOnce() -> Result<(Conn, Option<Opener>), LedgerError> + Send + 'static,
    {
        let (queue, pending) = mpsc::channel();
        let stats = Arc::new(WriterStats::default());
        let (opened, open_result) = oneshot::channel();
        let writer_stats = stats.clone();
        let writer = std::thread::Builder::new()
            .name("rw-sqlite-writer".to_owned())
            .spawn(move || match open() {
                Ok((conn, reopen)) => {
                    let _ = opened.send(Ok(()));
                    Writer {
                        conn: Some(conn),
                        reopen,
                        max_batch,
                        sync,
                        stats: writer_stats,
                        checkpoint,
                    }
                    .run(pending);
                }
                Err(e) => {
                    let _ = opened.send(Err(e));
                }
            })
            .map_err(|e| LedgerError::Unavailable(Box::new(e)))?;
        let writer_thread = writer.thread().id();
        open_result.await.map_err(|_| writer_stopped())??;
        Ok(Self {
            inner: Arc::new(Inner {
                writer_thread,
                queue,
                reads,
                stats,
                closed: AtomicBool::new(false),
                detached: detached_results.then(|| Arc::new(Landing::default())),
            }),
        })
    }

    /// Closes the ledger: writes queued before are committed, then the writer's connection and
    /// the readers' are closed (readers in use are closed when their read ends). Afterwards
    /// every call on this ledger (and its clones) fails with [`LedgerError::Unavailable`].
    pub async fn close(&self) {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Reads::Pool(readers) = &self.inner.reads {
            readers.close();
        }
        let (done, closed) = oneshot::channel();
        if self.inner.queue.send(Job::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Transactions committed by the writer thread so far (all handles of this ledger).
    ///
    /// With [`committed_writes`](Self::committed_writes), shows how well group commit batches:
    /// their ratio is the mean number of requests per commit (fsync).
    pub fn commits(&self) -> u64 {
        self.inner.stats.commits.load(Ordering::Relaxed)
    }

    /// Transactions committed so far without waiting for the disk because every write in them
    /// was a result recorded after its send ([`Ledger::record`]): with `synchronous = FULL`
    /// they commit at `NORMAL`. Claims are always committed at the configured level.
    pub fn relaxed_commits(&self) -> u64 {
        self.inner.stats.relaxed_commits.load(Ordering::Relaxed)
    }

    /// Write requests answered from committed transactions so far (all handles of this ledger),
    /// including those whose precondition failed or that failed on their own inside a
    /// committed batch.
    pub fn committed_writes(&self) -> u64 {
        self.inner.stats.committed_requests.load(Ordering::Relaxed)
    }

    /// Waits until every result queued so far with [`Ledger::record_detached`] has landed
    /// (committed, refused or failed), whatever its operation: for a listing or a count that
    /// must include them, or a benchmark that counts their writing. Reads of one operation do
    /// not need it: they wait for that operation's results by themselves.
    ///
    /// ```no_run
    /// # async fn demo(ledger: recoverable_write::SqliteLedger) {
    /// ledger.wait_for_results().await;
    /// # }
    /// ```
    pub async fn wait_for_results(&self) {
        if let Some(landing) = &self.inner.detached {
            landing.wait_all().await;
        }
    }

    /// Queues `op` for the writer thread and waits until its batch is committed.
    ///
    /// Every write goes through here. `op` runs inside the batch's transaction; what it returns
    /// is handed back only after the `COMMIT` succeeded. An error fails this write alone: the
    /// batch is rolled back and the other writes run again without it. So `op` may run more
    /// than once (each time in a fresh transaction, never twice in one): it must do the same
    /// thing every time it is called.
    async fn write<T, F>(&self, op: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: Fn(&mut Conn) -> Result<Finish<T>, LedgerError> + Send + 'static,
    {
        self.write_as(false, op).await
    }

    /// [`write`](Self::write), committed without an fsync if every write of its batch is
    /// `relaxed` (see [`Ledger::record`]).
    async fn write_as<T, F>(&self, relaxed: bool, op: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: Fn(&mut Conn) -> Result<Finish<T>, LedgerError> + Send + 'static,
    {
        if self.is_closed() {
            return Err(closed());
        }
        let (reply, answer) = oneshot::channel();
        let write: Box<dyn PendingWrite> = Box::new(Queued {
            op,
            relaxed,
            result: None,
            reply,
        });
        self.inner
            .queue
            .send(Job::Write(write))
            .map_err(|_| writer_stopped())?;
        answer.await.map_err(|_| writer_stopped())?
    }

    /// Runs `read` on a reader connection (or, for an in-memory ledger, on the writer thread
    /// between writes). It changes nothing; it may run more than once.
    async fn read<T, F>(&self, read: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: Fn(&mut Conn) -> Result<T, LedgerError> + Send + 'static,
    {
        if self.is_closed() {
            return Err(closed());
        }
        match &self.inner.reads {
            Reads::Pool(readers) => readers.read(read).await,
            Reads::Writer => {
                self.write(move |conn| read(conn).map(Finish::Unchanged))
                    .await
            }
        }
    }

    /// The rows of `sql` with `args`, on a reader.
    async fn read_rows(
        &self,
        sql: &'static str,
        args: Vec<rusqlite::types::Value>,
    ) -> Result<Vec<SqlRow>, LedgerError> {
        self.read(move |conn| conn.rows(sql, &args)).await
    }

    /// Runs `pragma` (such as `PRAGMA max_page_count = 1`) on the writer thread's connection,
    /// between batches. A fault-injection hook for tests (a full disk without a full disk); not
    /// part of the API.
    #[doc(hidden)]
    pub async fn pragma_on_writer_for_tests(
        &self,
        pragma: &'static str,
    ) -> Result<(), LedgerError> {
        self.write(move |conn| {
            conn.rows_dynamic(pragma, &[])?;
            // A connection setting, not a change: nothing to commit.
            Ok(Finish::Unchanged(()))
        })
        .await
    }
}

impl SqliteLedger {
    /// Holds the writer thread inside a batch of its own (which changes nothing) until the
    /// returned value is dropped: writes queued meanwhile are committed together in the next
    /// batch. A hook for tests of group commit; not part of the API.
    #[doc(hidden)]
    pub async fn hold_writer_for_tests(&self) -> Result<impl Send + use<>, LedgerError> {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let wait = std::sync::Mutex::new(wait);
        let (inside, entered) = oneshot::channel::<()>();
        let inside = std::sync::Mutex::new(Some(inside));
        let (reply, answer) = oneshot::channel();
        let hold: Box<dyn PendingWrite> = Box::new(Queued {
            op: move |_: &mut Conn| {
                if let Some(inside) = inside.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = inside.send(());
                }
                // Returns when `release` is dropped.
                let _ = wait.lock().unwrap_or_else(|p| p.into_inner()).recv();
                Ok(Finish::Unchanged(()))
            },
            relaxed: false,
            result: None,
            reply,
        });
        self.inner
            .queue
            .send(Job::Write(hold))
            .map_err(|_| writer_stopped())?;
        if entered.await.is_err() {
            // The hold never ran: the ledger is closed, or its batch failed.
            answer.await.map_err(|_| writer_stopped())??;
            return Err(writer_stopped());
        }
        Ok(release)
    }
}

/// The runtime reads will run on; opening outside one is a configuration error.
fn current_runtime() -> Result<tokio::runtime::Handle, LedgerError> {
    tokio::runtime::Handle::try_current().map_err(|e| {
        LedgerError::Config(format!(
            "the SQLite ledger must be opened inside a Tokio runtime: {e}"
        ))
    })
}

/// The writer's work for a result written after the send ([`Ledger::record_unread`]): the
/// compare-and-swap, then its evidence entry if it applied.
fn recording(
    update: Update,
) -> Result<impl Fn(&mut Conn) -> Result<Finish<Recorded>, LedgerError> + Send + 'static, LedgerError>
{
    let (apply, entry) = compare_and_swap(APPLY_UNREAD, UpdateColumns::encode(update, SQLITE)?);
    Ok(move |conn: &mut Conn| {
        if apply.execute(conn)? == 0 {
            return Ok(Finish::Unchanged(Recorded::Stale));
        }
        entry.execute(conn)?;
        Ok(Finish::Commit(Recorded::Applied))
    })
}

/// The arguments (tenant, value) of a lookup.
fn key_args(tenant: &Tenant, value: &str) -> Vec<rusqlite::types::Value> {
    let mut a = Args::with_capacity(2);
    a.push(tenant.as_str()).push(value);
    a.0
}

impl Ledger for SqliteLedger {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move {
            let created = EvidenceColumns::encode(store_entries::created(new.now_ms), SQLITE)?;
            let row = new.into_prepared();
            let columns = RowColumns::encode(&row, SQLITE)?;
            let insert = Statement::new(INSERT_OPERATION, |a| bind_prepared(a, columns));
            let created = evidence(INSERT_EVIDENCE, &row.tenant, &row.operation_id, created);
            // The row holds exactly what is bound: no need to read it back.
            self.insert_or_get(insert, vec![created], row).await
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
            let insert = Statement::new(INSERT_CLAIMED, |a| bind_row(a, columns));
            let entries = vec![
                evidence(INSERT_EVIDENCE, &row.tenant, &row.operation_id, created),
                evidence(INSERT_EVIDENCE, &row.tenant, &row.operation_id, entry),
            ];
            self.insert_or_get(insert, entries, row).await
        })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            self.landed(tenant, id).await;
            let rows = self
                .read_rows(SELECT_BY_ID, key_args(tenant, id.as_str()))
                .await?;
            rows.first().map(decode_operation).transpose()
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

    /// [`record`](Ledger::record) without reading the row back: the writer thread does no
    /// decoding, and the caller writes the changes into the row it holds.
    fn record_unread(&self, update: Update) -> BoxFuture<'_, Result<Recorded, LedgerError>> {
        Box::pin(async move { self.write_as(true, recording(update)?).await })
    }

    fn detaches_results(&self) -> bool {
        self.inner.detached.is_some()
    }

    /// [`record_unread`](Ledger::record_unread) queued for the writer thread without waiting:
    /// the same statements, in the same kind of batch, run in the order writes were queued.
    /// A read of the operation waits for its results queued before it.
    fn record_detached(
        &self,
        update: Update,
        late: NewEvidence,
        settled: Settled,
    ) -> Result<(), LedgerError> {
        let Some(landing) = &self.inner.detached else {
            return Err(LedgerError::Config(
                "this SQLite ledger was opened with detached_results(false)".to_owned(),
            ));
        };
        if self.is_closed() {
            return Err(closed());
        }
        let (tenant, id) = (update.tenant.clone(), update.operation_id.clone());
        let (tenant_key, id_key) = (tenant.clone(), id.clone());
        let record = recording(update)?;
        // `late` is encoded on the writer thread, and only if it is needed (rarely).
        let op = move |conn: &mut Conn| match record(conn)? {
            // Nothing changed but the log.
            Finish::Unchanged(Recorded::Stale) => {
                // Appended only if the row still exists (it may have been purged meanwhile):
                // a late observation of a gone operation changes nothing.
                let columns = EvidenceColumns::encode(late.clone(), SQLITE)?;
                Append::new(&tenant, &id, columns).execute(conn)?;
                Ok(Finish::Commit(Recorded::Stale))
            }
            done => Ok(done),
        };
        // Numbered as it is queued: a read of this operation that starts once this returns
        // waits for it. If the writer thread is gone, the write comes back and is dropped
        // unanswered, which lands it and hands `settled` the writer's error: once queued,
        // every outcome goes there.
        let unsent = landing.queue((tenant_key, id_key), |lands| {
            let write = Box::new(Detached::new(op, settled, lands));
            self.inner.queue.send(Job::Write(write)).err()
        });
        // Dropped here, once the numbering's lock is released (landing takes it again).
        drop(unsent);
        Ok(())
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
            let mut a = Args::with_capacity(3);
            a.push(now_ms)
                .push(now_ms.saturating_add(lease_ms))
                .push(i64::from(limit));
            let args = a.0;
            self.write(move |conn| {
                let rows = conn.rows(CLAIM_DUE, &args)?;
                // RETURNING gives no order guarantee: restore the claim order.
                let claimed = log_returned(
                    conn,
                    &rows,
                    now_ms,
                    "claim_due",
                    |rowid, r| (r.next_check_ms, rowid),
                    store_entries::recovery_claimed,
                )?;
                Ok(Finish::Commit(claimed))
            })
            .await
        })
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let mut a = Args::with_capacity(2);
            a.push(now_ms).push(store_entries::LEASE_EXPIRED_REASON);
            let args = a.0;
            self.write(move |conn| {
                let rows = conn.rows(SWEEP_EXPIRED, &args)?;
                // In creation order, as the memory ledger does.
                let swept = log_returned(
                    conn,
                    &rows,
                    now_ms,
                    "sweep_expired",
                    |rowid, _| (None, rowid),
                    store_entries::lease_expired,
                )?;
                Ok(Finish::Commit(swept))
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
            let mut a = Args::with_capacity(4);
            a.push(now_ms)
                .push(now_ms.saturating_add(lease_ms))
                .push(now_ms.saturating_sub(older_than_ms))
                .push(i64::from(limit));
            let args = a.0;
            self.write(move |conn| {
                let rows = conn.rows(CLAIM_PREPARED, &args)?;
                // Oldest first, as claimed.
                let claimed = log_returned(
                    conn,
                    &rows,
                    now_ms,
                    "claim_prepared",
                    |rowid, r| (Some(r.created_ms), rowid),
                    store_entries::recovery_claimed,
                )?;
                Ok(Finish::Commit(claimed))
            })
            .await
        })
    }

    fn quarantined(&self, limit: u32) -> BoxFuture<'_, Result<Vec<QuarantinedRow>, LedgerError>> {
        Box::pin(async move {
            let rows = self
                .read_rows(SELECT_QUARANTINED, vec![i64::from(limit).into()])
                .await?;
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

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move {
            let entry = EvidenceColumns::encode(entry, SQLITE)?;
            let append = Append::new(tenant, id, entry);
            self.write(move |conn| {
                append.execute(conn)?;
                Ok(Finish::Commit(()))
            })
            .await
        })
    }

    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>> {
        Box::pin(async move {
            // Quarantined rows are few: read them through their partial index, never through a
            // tenant's or a state's whole range.
            let table = if query.is_quarantined_only() {
                QUARANTINED_ROWS
            } else {
                "rw_operations"
            };
            let sql = super::query::list_sql(query, table, "rowid", '?')?;
            let (text, args) = (sql.text, values(sql.args));
            let rows = self
                .read(move |conn| conn.rows_dynamic(&text, &args))
                .await?;
            decode_page(&rows, query.page_size())
        })
    }

    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>> {
        Box::pin(async move {
            let sql = super::query::count_sql(scope, "rw_operations", QUARANTINED_ROWS, '?')?;
            let (text, args) = (sql.text, values(sql.args));
            let rows = self
                .read(move |conn| conn.rows_dynamic(&text, &args))
                .await?;
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
            self.landed(tenant, id).await;
            let rows = self
                .read_rows(SELECT_EVIDENCE, key_args(tenant, id.as_str()))
                .await?;
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
            let seen = callback_seen(&delivery.vendor, &delivery.event_id);
            let record = Statement::new(INSERT_CALLBACK_EVENT, |a| bind_callback_event(a, record));
            let exists = Statement {
                sql: OPERATION_EXISTS,
                args: key_args(&delivery.tenant, delivery.operation_id.as_str()),
            };
            enum Change {
                Apply(Statement, Statement),
                Append(Append),
                Contradiction(Append, Statement),
            }
            let change = match effect {
                CallbackEffect::Apply(update) => {
                    let (apply, entry) =
                        compare_and_swap(APPLY, UpdateColumns::encode(update, SQLITE)?);
                    Change::Apply(apply, entry)
                }
                CallbackEffect::Append(entry) => {
                    let entry = EvidenceColumns::encode(entry, SQLITE)?;
                    Change::Append(Append::new(&delivery.tenant, &delivery.operation_id, entry))
                }
                CallbackEffect::Contradiction(entry) => {
                    let at = entry.at_ms;
                    let entry = EvidenceColumns::encode(entry, SQLITE)?;
                    let mark = Statement::new(MARK_CONTRADICTION, |a| {
                        a.push(delivery.tenant.as_str())
                            .push(delivery.operation_id.as_str())
                            .push(at);
                    });
                    Change::Contradiction(
                        Append::new(&delivery.tenant, &delivery.operation_id, entry),
                        mark,
                    )
                }
            };
            self.write(move |conn| {
                // The writer runs one transaction at a time (`BEGIN IMMEDIATE`): the check, the
                // change and the record below are atomic together.
                if seen.exists(conn)? {
                    return Ok(Finish::Unchanged(CallbackApplied::Duplicate));
                }
                let applied = match &change {
                    Change::Apply(apply, entry) => match apply.rows(conn)?.first() {
                        Some(row) => {
                            entry.execute(conn)?;
                            CallbackApplied::Applied(decode_operation(row)?)
                        }
                        None => {
                            return Ok(Finish::Unchanged(if exists.exists(conn)? {
                                CallbackApplied::Stale
                            } else {
                                CallbackApplied::NoOperation
                            }));
                        }
                    },
                    Change::Append(append) => {
                        if append.execute(conn)? == 0 {
                            return Ok(Finish::Unchanged(CallbackApplied::NoOperation));
                        }
                        CallbackApplied::Appended
                    }
                    Change::Contradiction(append, mark) => {
                        if append.execute(conn)? == 0 {
                            return Ok(Finish::Unchanged(CallbackApplied::NoOperation));
                        }
                        mark.execute(conn)?;
                        CallbackApplied::Appended
                    }
                };
                record.execute(conn)?;
                Ok(Finish::Commit(applied))
            })
            .await
        })
    }

    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        Box::pin(async move {
            let seen = callback_seen(&event.vendor, &event.event_id);
            let record = CallbackEventColumns::quarantined(&event, SQLITE);
            let record = Statement::new(INSERT_CALLBACK_EVENT, |a| bind_callback_event(a, record));
            let columns = QuarantinedCallbackColumns::encode(event, SQLITE)?;
            let store = Statement::new(INSERT_CALLBACK_QUARANTINE, |a| {
                bind_quarantined_callback(a, columns)
            });
            self.write(move |conn| {
                if seen.exists(conn)? {
                    return Ok(Finish::Unchanged(CallbackQuarantined::Duplicate));
                }
                record.execute(conn)?;
                store.execute(conn)?;
                Ok(Finish::Commit(CallbackQuarantined::Stored))
            })
            .await
        })
    }

    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>> {
        Box::pin(async move {
            let rows = match scope {
                TenantScope::AllTenants => {
                    self.read_rows(SELECT_CALLBACK_QUARANTINE, vec![i64::from(limit).into()])
                        .await?
                }
                TenantScope::Tenant(t) => {
                    let args = vec![t.as_str().to_owned().into(), i64::from(limit).into()];
                    self.read_rows(SELECT_TENANT_CALLBACK_QUARANTINE, args)
                        .await?
                }
            };
            rows.iter().map(decode_quarantined_callback).collect()
        })
    }

    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        Box::pin(async move {
            let seen = callback_seen(vendor, event_id);
            self.read(move |conn| seen.exists(conn)).await
        })
    }

    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>> {
        Box::pin(async move {
            let seen = callback_seen(&event.vendor, &event.event_id);
            let record = CallbackEventColumns::ignored(&event, SQLITE);
            let record = Statement::new(INSERT_CALLBACK_EVENT, |a| bind_callback_event(a, record));
            self.write(move |conn| {
                if seen.exists(conn)? {
                    return Ok(Finish::Unchanged(CallbackRecorded::Duplicate));
                }
                record.execute(conn)?;
                Ok(Finish::Commit(CallbackRecorded::Recorded))
            })
            .await
        })
    }

    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        Box::pin(async move {
            let sql = match by {
                ProbeBy::OperationId => SELECT_OTHER_TENANT_BY_ID,
                ProbeBy::RemoteRef => SELECT_OTHER_TENANT_BY_REMOTE_REF,
            };
            let args = vec![value.to_owned().into(), tenant.as_str().to_owned().into()];
            let rows = self.read_rows(sql, args).await?;
            rows.first()
                .map(|row| {
                    row.try_get::<String>("tenant")
                        .map(Tenant::new)
                        .map_err(|e| LedgerError::Corrupt {
                            operation: value.to_owned(),
                            detail: format!("column tenant: {e}"),
                        })
                })
                .transpose()
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
            let version = i64::try_from(expected_version).map_err(|_| {
                LedgerError::Config(format!("version {expected_version} out of range"))
            })?;
            let clear = Statement::new(ACKNOWLEDGE_CONTRADICTION, |a| {
                a.push(tenant.as_str()).push(id.as_str()).push(version);
            });
            let entry = evidence(
                APPEND_EVIDENCE,
                tenant,
                id,
                EvidenceColumns::encode(entry, SQLITE)?,
            );
            self.write(move |conn| {
                let Some(row) = clear.rows(conn)?.into_iter().next() else {
                    return Ok(Finish::Unchanged(None));
                };
                entry.execute(conn)?;
                Ok(Finish::Commit(Some(decode_operation(&row)?)))
            })
            .await
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

/// A listing's arguments as values.
fn values(args: Vec<super::query::Arg>) -> Vec<rusqlite::types::Value> {
    args.into_iter()
        .map(|a| match a {
            super::query::Arg::Text(t) => rusqlite::types::Value::Text(t),
            super::query::Arg::Int(i) => rusqlite::types::Value::Integer(i),
        })
        .collect()
}

impl SqliteLedger {
    async fn apply_as(
        &self,
        relaxed: bool,
        update: Update,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let (apply, entry) = compare_and_swap(APPLY, UpdateColumns::encode(update, SQLITE)?);
        self.write_as(relaxed, move |conn| {
            let rows = apply.rows(conn)?;
            let Some(row) = rows.first() else {
                return Ok(Finish::Unchanged(None));
            };
            entry.execute(conn)?;
            // A row that cannot be decoded fails this request: its update and evidence are
            // undone with the batch's transaction, and the batch runs again without it.
            Ok(Finish::Commit(Some(decode_operation(row)?)))
        })
        .await
    }

    /// The one row `sql` (a lookup by tenant `?1` and a value `?2`) finds, on a reader.
    async fn find_one(
        &self,
        sql: &'static str,
        tenant: &Tenant,
        value: &str,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        // Which operation the value names is not known yet: wait for every queued result.
        self.wait_for_results().await;
        let rows = self.read_rows(sql, key_args(tenant, value)).await?;
        rows.first().map(decode_operation).transpose()
    }

    /// Waits until the results of operation (`tenant`, `id`) queued before this call have
    /// landed (see [Detached results](self#detached-results)). Only reads on reader connections
    /// need it: an in-memory ledger reads on the writer thread, in queue order (its lookups by
    /// another key wait anyway, harmlessly).
    async fn landed(&self, tenant: &Tenant, id: &OperationId) {
        if let (Some(landing), Reads::Pool(_)) = (&self.inner.detached, &self.inner.reads) {
            landing.wait_for(&(tenant.clone(), id.clone())).await;
        }
    }

    /// Runs `insert` (a row, see [`INSERT_OPERATION`] and [`INSERT_CLAIMED`]) and, if it
    /// inserted the row, `entries`, as one write: [`Created::New`] with `row`, the row it
    /// inserts, or [`Created::Existing`] with the row it conflicted with (then it inserted
    /// nothing).
    async fn insert_or_get(
        &self,
        insert: Statement,
        entries: Vec<Statement>,
        row: OperationRecord,
    ) -> Result<Created, LedgerError> {
        // Shared with the write, which may run more than once and needs the keys on a
        // conflict; the write is dropped before its caller is answered, so the row comes back
        // without a copy.
        let row = Arc::new(row);
        let key = row.clone();
        let existing = self
            .write(move |conn| {
                if insert.execute(conn)? == 1 {
                    for e in &entries {
                        e.execute(conn)?;
                    }
                    return Ok(Finish::Commit(None));
                }
                let r = &*key;
                let found = existing(conn, &r.tenant, &r.operation_id, &r.action, &r.intent_ref)?;
                Ok(Finish::Unchanged(Some(found)))
            })
            .await?;
        Ok(match existing {
            Some(found) => Created::Existing(found),
            None => Created::New(Arc::try_unwrap(row).unwrap_or_else(|row| (*row).clone())),
        })
    }
}

/// The dedupe check of an event: [`SELECT_CALLBACK_EVENT`].
fn callback_seen(vendor: &str, event_id: &str) -> Statement {
    Statement::new(SELECT_CALLBACK_EVENT, |a| {
        a.push(vendor).push(event_id);
    })
}

/// The row an insert of `(tenant, operation_id)` for `(action, intent_ref)` conflicted with:
/// the same id first, then the same intent.
fn existing(
    conn: &mut Conn,
    tenant: &Tenant,
    id: &OperationId,
    action: &str,
    intent_ref: &str,
) -> Result<OperationRecord, LedgerError> {
    let mut row = conn.row(SELECT_BY_ID, &key_args(tenant, id.as_str()))?;
    if row.is_none() {
        let mut a = Args::with_capacity(3);
        a.push(tenant.as_str()).push(action).push(intent_ref);
        row = conn.row(SELECT_BY_INTENT, &a.0)?;
    }
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
fn log_returned(
    conn: &mut Conn,
    rows: &[SqlRow],
    now_ms: i64,
    during: &'static str,
    order: impl Fn(i64, &OperationRecord) -> (Option<i64>, i64),
    entry: fn(&OperationRecord, i64) -> NewEvidence,
) -> Result<Vec<OperationRecord>, LedgerError> {
    let mut rows = decode_or_quarantine(conn, rows, now_ms, during)?;
    rows.sort_by_key(|(rowid, r)| order(*rowid, r));
    let rows: Vec<OperationRecord> = rows.into_iter().map(|(_, r)| r).collect();
    for r in &rows {
        let e = EvidenceColumns::encode(entry(r, now_ms), SQLITE)?;
        evidence(INSERT_EVIDENCE, &r.tenant, &r.operation_id, e).execute(conn)?;
    }
    Ok(rows)
}

fn decode_or_quarantine(
    conn: &mut Conn,
    rows: &[SqlRow],
    now_ms: i64,
    during: &'static str,
) -> Result<Vec<(i64, OperationRecord)>, LedgerError> {
    let mut decoded = Vec::with_capacity(rows.len());
    for row in rows {
        let rowid = Columns::new(row, "<claimed row>").get::<i64>("rw_rowid")?;
        match decode_operation(row) {
            Ok(record) => decoded.push((rowid, record)),
            Err(e) => {
                let tenant = row.try_get::<String>("tenant").ok();
                let id = row.try_get::<String>("operation_id").ok();
                let reason = super::codec::quarantine(tenant.as_deref(), id.as_deref(), during, &e);
                let mut a = Args::with_capacity(3);
                a.push(reason).push(now_ms).push(rowid);
                conn.execute(QUARANTINE, &a.0)?;
            }
        }
    }
    Ok(decoded)
}

/// A raw statement through the writer thread, for the conformance suite's corrupt-row checks:
/// `sql` with the tenant as `?1` and the operation id as `?2`.
#[cfg(feature = "test-util")]
impl SqliteLedger {
    pub(crate) async fn exec_for_conformance(
        &self,
        sql: String,
        tenant: &Tenant,
        id: &OperationId,
    ) -> Result<(), LedgerError> {
        let args = key_args(tenant, id.as_str());
        self.write(move |conn| {
            conn.execute(&sql, &args)?;
            Ok(Finish::Commit(()))
        })
        .await
    }
}

super::codec::row_decoder!(SqlRow);

impl Columns<'_> {
    fn get<T: FromCell>(&self, column: &str) -> Result<T, LedgerError> {
        self.row
            .try_get::<T>(column)
            .map_err(|e| self.corrupt(format!("column {column}: {e}")))
    }

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
