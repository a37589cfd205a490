//! The group-commit writer task: one task owns the write path, runs whatever is queued in one
//! `BEGIN IMMEDIATE` transaction, commits once and only then answers each caller (see
//! [Group commit](super#group-commit)).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnection, SqlitePool};
use sqlx::{Connection, Sqlite};
use tokio::sync::{mpsc, oneshot};

use super::Synchronous;
use crate::ledger::{BoxFuture, LedgerError};

/// What a write did, inside its batch's transaction.
pub(super) enum Finish<T> {
    /// It changed the database: keep the changes (commit) and return the value.
    Commit(T),
    /// It changed nothing (a precondition refused it: an `UPDATE` that matched no row, an
    /// `INSERT ... ON CONFLICT DO NOTHING` that conflicted): return the value. There is nothing
    /// to undo, so a write that did change something must never return this.
    Unchanged(T),
}

/// Counters of the writer task.
#[derive(Debug, Default)]
pub(super) struct WriterStats {
    /// Transactions the writer task committed.
    pub(super) commits: AtomicU64,
    /// Requests answered from committed transactions.
    pub(super) committed_requests: AtomicU64,
    /// Transactions committed without an fsync because they held only results.
    pub(super) relaxed_commits: AtomicU64,
}

/// One caller's write, waiting in the queue of the writer task.
pub(super) trait PendingWrite: Send {
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

    /// Whether this write may be committed without an fsync: a result recorded after the bytes
    /// left ([`Ledger::record`](crate::ledger::Ledger::record)). Only the claim must be durable
    /// before a send; a result lost to a power cut leaves the row `IN_FLIGHT`, which its lease
    /// turns into a lookup, never a second send.
    fn relaxed(&self) -> bool;
}

/// What one run of a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ran {
    /// It changed the database (`Finish::Commit`).
    Changed,
    /// It changed nothing (`Finish::Unchanged`).
    Unchanged,
    /// It failed: what it did must be undone, with the whole transaction.
    Failed,
}

/// A typed request: the statements to run and where its answer goes.
pub(super) struct Queued<T, F> {
    pub(super) op: F,
    pub(super) relaxed: bool,
    pub(super) result: Option<Result<T, LedgerError>>,
    pub(super) reply: oneshot::Sender<Result<T, LedgerError>>,
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

    fn relaxed(&self) -> bool {
        self.relaxed
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
        let Queued {
            op, result, reply, ..
        } = *self;
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

pub(super) fn writer_stopped() -> LedgerError {
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
pub(super) async fn run_writer(
    pool: SqlitePool,
    mut queue: mpsc::UnboundedReceiver<Box<dyn PendingWrite>>,
    max_batch: usize,
    keep_connection: bool,
    sync: Durability,
    stats: Arc<WriterStats>,
) {
    let mut batch: Vec<Box<dyn PendingWrite>> = Vec::with_capacity(max_batch);
    let mut conn: Option<PoolConnection<Sqlite>> = None;
    // The `synchronous` level the writer's connection is known to be at (`None`: not known, so
    // the next batch sets it); switched in the same round trip as a batch's `BEGIN`.
    let mut level: Option<Synchronous> = None;
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
                Ok(c) => {
                    // A fresh (or returned) connection: at the level it was configured with,
                    // or at the one this task left it at; set it again to be sure.
                    level = None;
                    conn.insert(c)
                }
                Err(e) => {
                    let e = Arc::new(e);
                    for w in batch.drain(..) {
                        w.answer(Some(batch_failed(&e)));
                    }
                    continue;
                }
            },
        };
        let want = if batch.iter().all(|w| w.relaxed()) {
            sync.relaxed
        } else {
            sync.durable
        };
        let begin = if level == Some(want) {
            "BEGIN IMMEDIATE"
        } else {
            Durability::begin(want)
        };
        let committed = run_batch(c, &mut batch, begin, &stats).await;
        if committed && want != sync.durable {
            stats.relaxed_commits.fetch_add(1, Ordering::Relaxed);
        }
        level = committed.then_some(want);
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

/// The writer's `synchronous` levels: for batches with a claim (the configured level) and for
/// batches of results only (at most `NORMAL`: in WAL mode, a commit that survives the process
/// dying, written to the WAL without waiting for the disk).
#[derive(Clone, Copy, Debug)]
pub(super) struct Durability {
    durable: Synchronous,
    relaxed: Synchronous,
}

impl Durability {
    /// The levels for a ledger configured with `configured`. `relax`: whether results may be
    /// committed at `NORMAL` (a file ledger in WAL mode).
    pub(super) fn new(configured: Synchronous, relax: bool) -> Self {
        let relaxed = if relax && configured == Synchronous::Full {
            Synchronous::Normal
        } else {
            configured
        };
        Self {
            durable: configured,
            relaxed,
        }
    }

    /// The `BEGIN` of a batch that switches the connection to `level` first, in one round trip.
    fn begin(level: Synchronous) -> &'static str {
        match level {
            Synchronous::Full => "PRAGMA synchronous = FULL; BEGIN IMMEDIATE",
            Synchronous::Normal => "PRAGMA synchronous = NORMAL; BEGIN IMMEDIATE",
            Synchronous::Off => "PRAGMA synchronous = OFF; BEGIN IMMEDIATE",
        }
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
    begin: &'static str,
    stats: &WriterStats,
) -> bool {
    let mut failed: Vec<Box<dyn PendingWrite>> = Vec::new();
    let finished = loop {
        let mut tx = match conn.begin_with(begin).await {
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
