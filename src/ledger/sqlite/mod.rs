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
//! Only the claim has to be durable before bytes leave. A result recorded after the response,
//! or what a recovery lookup found ([`Ledger::record`]), does not wait for the disk: a batch
//! that holds only such writes is committed at `synchronous = NORMAL` (switched just before
//! its `BEGIN`), which in WAL mode writes the WAL without an fsync; it survives the process
//! dying, and a later durable commit's fsync covers it. A batch with any claim commits at the configured level.
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
//! wait for it; listings and counts ([`ListingLedger::list`], [`ListingLedger::count_by_state`]) do not, and
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
mod dispatch;
mod ledger_impl;
mod migrate;
mod open;
mod options;
mod quarantine;
mod reader;
mod retention;
mod sql;
mod steps;
#[cfg(test)]
mod tests;
mod workers;
mod writer;

use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use super::codec::Dialect;
// The row decoder below (`row_decoder!`) names the ledger's types as this module sees them.
use super::*;
use conn::{FromCell, SqlRow};
pub use options::{SqliteLedgerOptions, Synchronous};
use reader::Readers;
// What the other submodules take from here (`super::key_args`, `super::values`).
use steps::{key_args, values};
use writer::{Job, Landing, WriterStats};

/// How this backend encodes values.
const SQLITE: Dialect = Dialect::Sqlite;

/// The operations table read through its partial index of quarantined rows (migration 0002):
/// what counts and lists them. There are few; without `INDEXED BY` the planner (no statistics)
/// may prefer a tenant's whole range.
const QUARANTINED_ROWS: &str = "rw_operations INDEXED BY rw_operations_quarantined";

/// The operations table read through its send-lease index (migration 0001), whose rows are the
/// requests in flight: what counts and lists them, as the state indexes leave them out
/// (migration 0015). Without `INDEXED BY` the planner (no statistics) may prefer a tenant's
/// whole range.
const IN_FLIGHT_ROWS: &str = "rw_operations INDEXED BY rw_operations_in_flight_lease";

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
