//! The group-commit writer: one dedicated thread owns the write connection, runs whatever is
//! queued in one `BEGIN IMMEDIATE` transaction, commits once and only then answers each caller
//! (see [Group commit](super#group-commit)).
//!
//! The thread calls SQLite directly: a batch of 64 writes is 64 × a few statements executed
//! back to back, with no hand-off per statement, and the only wake-ups are the caller's enqueue
//! and the reply after the commit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use tokio::sync::{oneshot, watch};

use super::Synchronous;
use super::conn::{Conn, Opener};
use crate::ledger::{LedgerError, Recorded, Settled};
use crate::operation::{OperationId, Tenant};

/// What a write did, inside its batch's transaction.
pub(super) enum Finish<T> {
    /// It changed the database: keep the changes (commit) and return the value.
    Commit(T),
    /// It changed nothing (a precondition refused it: an `UPDATE` that matched no row, an
    /// `INSERT ... ON CONFLICT DO NOTHING` that conflicted): return the value. There is nothing
    /// to undo, so a write that did change something must never return this.
    Unchanged(T),
}

/// Counters of the writer thread.
#[derive(Debug, Default)]
pub(super) struct WriterStats {
    /// Transactions the writer committed.
    pub(super) commits: AtomicU64,
    /// Requests answered from committed transactions.
    pub(super) committed_requests: AtomicU64,
    /// Transactions committed without an fsync because they held only results.
    pub(super) relaxed_commits: AtomicU64,
}

/// One caller's write, waiting in the queue of the writer thread.
pub(super) trait PendingWrite: Send {
    /// Whether the caller stopped waiting (its future was dropped). Such a write is skipped if
    /// it was not started yet.
    fn abandoned(&self) -> bool;

    /// Runs the caller's statements inside the batch's transaction and keeps the result for
    /// [`answer`](Self::answer) (replacing that of an earlier run, undone since). The caller is
    /// not answered yet: that waits for the commit.
    fn run(&mut self, conn: &mut Conn) -> Ran;

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
    F: Fn(&mut Conn) -> Result<Finish<T>, LedgerError> + Send + 'static,
{
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn relaxed(&self) -> bool {
        self.relaxed
    }

    fn run(&mut self, conn: &mut Conn) -> Ran {
        let (ran, result) = finish((self.op)(conn));
        self.result = Some(result);
        ran
    }

    fn answer(self: Box<Self>, batch_failed: Option<LedgerError>) {
        let Queued {
            op, result, reply, ..
        } = *self;
        // Whatever the write shares with its caller is released before the caller wakes.
        drop(op);
        // A caller that stopped waiting is not an error.
        let _ = reply.send(outcome(batch_failed, result));
    }
}

/// What one run of a write did, and its value.
fn finish<T>(run: Result<Finish<T>, LedgerError>) -> (Ran, Result<T, LedgerError>) {
    match run {
        Ok(Finish::Commit(value)) => (Ran::Changed, Ok(value)),
        Ok(Finish::Unchanged(value)) => (Ran::Unchanged, Ok(value)),
        Err(e) => (Ran::Failed, Err(e)),
    }
}

/// A write's answer: the batch's failure if it failed, else the result of the write's last run.
fn outcome<T>(
    batch_failed: Option<LedgerError>,
    result: Option<Result<T, LedgerError>>,
) -> Result<T, LedgerError> {
    match (batch_failed, result) {
        (Some(e), _) => Err(e),
        (None, Some(result)) => result,
        // Unreachable: a write is answered without an error only after it ran.
        (None, None) => Err(writer_stopped()),
    }
}

/// Results queued without waiting ([`Ledger::record_detached`](crate::ledger::Ledger::record_detached)),
/// numbered in queue order, and how many of them landed (were answered: committed, refused or
/// failed). A read of one operation waits for that operation's results queued before it, so a
/// caller's later read sees its own result; reads of other operations do not wait.
///
/// The writer answers a batch's writes only after its `COMMIT`, and batches in queue order: once
/// `n` results have landed, every result numbered `n` or less is in a committed batch.
#[derive(Debug)]
pub(crate) struct Landing {
    queued: Mutex<Numbering>,
    landed: watch::Sender<u64>,
}

/// The numbering of detached results.
#[derive(Debug, Default)]
struct Numbering {
    /// The number of the last result queued.
    last: u64,
    /// Per operation, the number of its last result not known to have landed.
    pending: HashMap<(Tenant, OperationId), u64>,
}

impl Default for Landing {
    fn default() -> Self {
        Self {
            queued: Mutex::new(Numbering::default()),
            landed: watch::Sender::new(0),
        }
    }
}

impl Landing {
    /// Numbers the result of operation `key` and queues it with `send`, under one lock so that
    /// the numbers follow the queue's order.
    pub(super) fn queue<T>(
        self: &Arc<Self>,
        key: (Tenant, OperationId),
        send: impl FnOnce(Lands) -> T,
    ) -> T {
        let mut q = self.lock();
        q.last += 1;
        let number = q.last;
        q.pending.insert(key.clone(), number);
        send(Lands {
            landing: self.clone(),
            key,
            number,
        })
    }

    /// Waits until every result of operation `key` queued before this call has landed.
    pub(super) async fn wait_for(&self, key: &(Tenant, OperationId)) {
        let Some(number) = self.lock().pending.get(key).copied() else {
            return;
        };
        self.wait_until(number).await;
    }

    /// Waits until every result queued before this call has landed, whatever its operation
    /// (for lookups by another key than the operation's).
    pub(super) async fn wait_all(&self) {
        let number = self.lock().last;
        self.wait_until(number).await;
    }

    /// Blocks this thread until every result queued so far has landed, for at most `limit`;
    /// whether they all did.
    pub(super) fn landed_within(&self, limit: std::time::Duration) -> bool {
        let number = self.lock().last;
        let start = std::time::Instant::now();
        while *self.landed.borrow() < number {
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        true
    }

    async fn wait_until(&self, number: u64) {
        if *self.landed.borrow() >= number {
            return;
        }
        let mut landed = self.landed.subscribe();
        // The sender lives as long as `self`: this cannot fail while it is borrowed.
        let _ = landed.wait_for(|n| *n >= number).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Numbering> {
        self.queued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One queued result's place in its [`Landing`]: counted as landed once, when it is answered
/// or dropped unanswered.
pub(super) struct Lands {
    landing: Arc<Landing>,
    key: (Tenant, OperationId),
    number: u64,
}

impl Drop for Lands {
    fn drop(&mut self) {
        self.landing.landed.send_modify(|n| *n += 1);
        let mut q = self.landing.lock();
        if q.pending.get(&self.key) == Some(&self.number) {
            q.pending.remove(&self.key);
        }
    }
}

/// A result queued without a caller waiting: its answer goes to `settled`, on this thread.
pub(super) struct Detached<F> {
    op: F,
    result: Option<Result<Recorded, LedgerError>>,
    /// `None` once answered.
    settled: Option<(Settled, Lands)>,
}

impl<F> Detached<F> {
    pub(super) fn new(op: F, settled: Settled, lands: Lands) -> Self {
        Self {
            op,
            result: None,
            settled: Some((settled, lands)),
        }
    }

    /// Counts the result as landed and hands `result` to `settled` (once). A panic in `settled`
    /// is caught: it must not take the writer thread down.
    fn settle(&mut self, result: Result<Recorded, LedgerError>) {
        if let Some((settled, lands)) = self.settled.take() {
            // Landed first: what `settled` starts (a read of the row) must not wait for itself.
            drop(lands);
            let caught =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || settled(result)));
            if caught.is_err() {
                tracing::error!("a detached result's callback panicked on the SQLite writer");
            }
        }
    }
}

impl<F> PendingWrite for Detached<F>
where
    F: Fn(&mut Conn) -> Result<Finish<Recorded>, LedgerError> + Send + 'static,
{
    /// Nobody waits for it; it always runs.
    fn abandoned(&self) -> bool {
        false
    }

    fn relaxed(&self) -> bool {
        true
    }

    fn run(&mut self, conn: &mut Conn) -> Ran {
        let (ran, result) = finish((self.op)(conn));
        self.result = Some(result);
        ran
    }

    fn answer(mut self: Box<Self>, batch_failed: Option<LedgerError>) {
        let result = outcome(batch_failed, self.result.take());
        self.settle(result);
    }
}

impl<F> Drop for Detached<F> {
    /// Dropped unanswered (the writer thread is gone): the result did not land.
    fn drop(&mut self) {
        self.settle(Err(writer_stopped()));
    }
}

/// What the writer thread is asked to do.
pub(super) enum Job {
    /// Run a write in the next batch.
    Write(Box<dyn PendingWrite>),
    /// Finish what was queued before, close the connection, and fail everything after.
    Close(oneshot::Sender<()>),
}

/// Why a whole batch was not committed; every caller in it gets this as the source of its
/// [`LedgerError::Unavailable`].
#[derive(Debug, thiserror::Error)]
#[error("the write batch was not committed: {0}")]
struct BatchFailed(#[source] Arc<rusqlite::Error>);

/// The writer thread is gone (it panicked, or the ledger was closed).
#[derive(Debug, thiserror::Error)]
#[error("the SQLite ledger's writer has stopped")]
struct WriterStopped;

/// The ledger was closed.
#[derive(Debug, thiserror::Error)]
#[error("the SQLite ledger is closed")]
struct Closed;

pub(super) fn writer_stopped() -> LedgerError {
    LedgerError::Unavailable(Box::new(WriterStopped))
}

pub(super) fn closed() -> LedgerError {
    LedgerError::Unavailable(Box::new(Closed))
}

fn batch_failed(e: &Arc<rusqlite::Error>) -> LedgerError {
    LedgerError::Unavailable(Box::new(BatchFailed(e.clone())))
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
}

/// The WAL size (pages) from which the writer has the checkpointer copy what is committed:
/// SQLite's default automatic checkpoint threshold (about 4 MB).
const CHECKPOINT_PAGES: i32 = 1000;

/// The WAL size from which the writer, once the checkpointer is idle, finishes the copy itself
/// so that the WAL starts over (about 32 MB). Finishing costs the writer an fsync of
/// the WAL and of the database, whatever is left to copy: doing it every 8000 pages rather
/// than every 1000 is an eighth of that cost.
const RESET_PAGES: i32 = 8 * CHECKPOINT_PAGES;

/// The WAL size from which the writer waits for the checkpointer (it cannot keep up with the
/// writer: a slow disk) before it finishes the copy itself: about 64 MB, the most the WAL holds.
const BACKSTOP_PAGES: i32 = 16 * CHECKPOINT_PAGES;

/// Copies the WAL back into the database file on a thread and a connection of its own, so the
/// writer's commits do not wait for the bulk of it (SQLite would otherwise run the whole copy,
/// and its fsyncs, inside the commit that crossed the threshold).
///
/// A checkpoint that runs while the writer keeps committing can never catch up with the WAL's
/// end, and the WAL only starts over from its beginning when a write transaction begins with
/// every frame copied. So the work is split: each time the WAL has grown by another
/// [`CHECKPOINT_PAGES`], the checkpointer copies what is committed (`PASSIVE`: it never blocks
/// the writer or the readers). Once the WAL holds [`RESET_PAGES`], the writer stops asking and,
/// as soon as the checkpointer is idle, copies what is left itself, between two batches: its
/// next transaction starts the WAL over. The two never checkpoint at once (the second would
/// find the checkpoint lock taken and copy nothing).
pub(super) struct Checkpointer {
    opener: Opener,
    asked: mpsc::Receiver<()>,
    running: Arc<AtomicBool>,
}

/// The writer's side of the [`Checkpointer`].
pub(super) struct CheckpointHandle {
    ask: mpsc::SyncSender<()>,
    /// Whether the checkpointer is copying now.
    running: Arc<AtomicBool>,
    /// The WAL size, in [`CHECKPOINT_PAGES`], at the last request.
    asked_at: i32,
}

impl Checkpointer {
    /// A checkpointer for the ledger `opener` opens, and the handle the writer asks it with.
    pub(super) fn new(opener: Opener) -> (Self, CheckpointHandle) {
        // One request pending at most: asking again while one waits changes nothing.
        let (ask, asked) = mpsc::sync_channel(1);
        let running = Arc::new(AtomicBool::new(false));
        let handle = CheckpointHandle {
            ask,
            running: running.clone(),
            asked_at: 0,
        };
        (
            Self {
                opener,
                asked,
                running,
            },
            handle,
        )
    }

    /// Checkpoints each time it is asked, until the writer is gone.
    pub(super) fn run(self) {
        let mut conn: Option<Conn> = None;
        while self.asked.recv().is_ok() {
            if conn.is_none() {
                conn = self.opener.reader().ok();
            }
            let Some(c) = &conn else { continue };
            self.running.store(true, Ordering::Release);
            let copied = c.checkpoint();
            self.running.store(false, Ordering::Release);
            if copied.is_err() {
                // Opened again for the next one.
                conn = None;
            }
        }
    }
}

impl CheckpointHandle {
    /// After a commit that left `pages` in the WAL: asks for a checkpoint each time the WAL
    /// grew by another [`CHECKPOINT_PAGES`] (as often as SQLite's automatic checkpoint would
    /// run: a checkpoint fsyncs the database file, which competes with the writer's commits
    /// for the disk), or finishes the copy on `conn` once the WAL holds [`RESET_PAGES`].
    fn after_commit(&mut self, conn: &Conn, pages: i32) {
        let level = pages / CHECKPOINT_PAGES;
        if level == 0 {
            // The WAL started over.
            self.asked_at = 0;
            return;
        }
        if pages >= RESET_PAGES {
            if pages >= BACKSTOP_PAGES {
                // The checkpointer cannot keep up (a slow disk): the writer waits for it, as
                // SQLite's own automatic checkpoint would make it, so the WAL stays bounded.
                let waited = std::time::Instant::now();
                while self.running.load(Ordering::Acquire)
                    && waited.elapsed() < std::time::Duration::from_secs(10)
                {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            if !self.running.load(Ordering::Acquire) {
                // Logged; the writer tries again after its next commit.
                let _ = conn.checkpoint();
            }
        } else if level > self.asked_at {
            self.asked_at = level;
            let _ = self.ask.try_send(());
        }
    }
}

/// The writer thread's state.
pub(super) struct Writer {
    /// The connection; `None` after a close, or while a file connection is to be reopened.
    pub(super) conn: Option<Conn>,
    /// How to open a fresh connection after one was left unusable (a file ledger only: an
    /// in-memory database lives in its one connection).
    pub(super) reopen: Option<Opener>,
    pub(super) max_batch: usize,
    pub(super) sync: Durability,
    pub(super) stats: Arc<WriterStats>,
    /// The checkpointer's handle (a file ledger).
    pub(super) checkpoint: Option<CheckpointHandle>,
}

impl Writer {
    /// Takes what is queued (never waiting for more), commits it as one transaction, answers,
    /// repeats. Ends when every ledger handle is gone.
    pub(super) fn run(mut self, queue: mpsc::Receiver<Job>) {
        let mut batch: Vec<Box<dyn PendingWrite>> = Vec::with_capacity(self.max_batch);
        // The `synchronous` level the connection is known to be at.
        let mut level = Some(self.sync.durable);
        let mut closing: Option<oneshot::Sender<()>> = None;
        let mut is_closed = false;
        while let Ok(first) = queue.recv() {
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Write(w) => batch.push(w),
                    Job::Close(done) => {
                        closing = Some(done);
                        break;
                    }
                }
                if batch.len() < self.max_batch {
                    next = queue.try_recv().ok();
                }
            }
            batch.retain(|w| !w.abandoned());
            if is_closed {
                for w in batch.drain(..) {
                    w.answer(Some(closed()));
                }
            } else if !batch.is_empty() {
                self.run_batch(&mut batch, &mut level);
            }
            if let Some(done) = closing.take() {
                // Closing the connection checkpoints the WAL (the last connection to the file
                // removes it): do it before the closer is answered.
                self.conn = None;
                self.reopen = None;
                self.checkpoint = None;
                is_closed = true;
                let _ = done.send(());
            }
        }
    }

    fn run_batch(
        &mut self,
        batch: &mut Vec<Box<dyn PendingWrite>>,
        level: &mut Option<Synchronous>,
    ) {
        if self.conn.is_none() {
            match self.reopen.as_ref().map(Opener::writer) {
                Some(Ok(conn)) => {
                    self.conn = Some(conn);
                    *level = Some(self.sync.durable);
                }
                Some(Err(e)) => {
                    for w in batch.drain(..) {
                        w.answer(Some(reopen_failed(&e)));
                    }
                    return;
                }
                None => {
                    for w in batch.drain(..) {
                        w.answer(Some(writer_stopped()));
                    }
                    return;
                }
            }
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let want = if batch.iter().all(|w| w.relaxed()) {
            self.sync.relaxed
        } else {
            self.sync.durable
        };
        if *level != Some(want) {
            if let Err(e) = conn.run(want.pragma()) {
                let e = Arc::new(e);
                for w in batch.drain(..) {
                    w.answer(Some(batch_failed(&e)));
                }
                *level = None;
                return;
            }
            *level = Some(want);
        }
        let committed = run_batch(conn, batch, want != self.sync.durable, &self.stats);
        if let (Some(true), Some(checkpoint)) = (committed, &mut self.checkpoint) {
            checkpoint.after_commit(conn, super::conn::wal_pages());
        }
        if committed.is_none() {
            // After a failed COMMIT or ROLLBACK (a full disk, an I/O error) SQLite may have
            // ended the transaction by itself, or left it open: roll back what is left, and if
            // even that fails, open a fresh connection (a file ledger) for the next batch.
            if conn.in_transaction() && conn.run("ROLLBACK").is_err() && self.reopen.is_some() {
                self.conn = None;
            }
        }
    }
}

/// Why a fresh writer connection could not be opened.
fn reopen_failed(e: &LedgerError) -> LedgerError {
    LedgerError::Unavailable(Box::new(ReopenFailed(e.to_string())))
}

#[derive(Debug, thiserror::Error)]
#[error("the SQLite ledger's writer connection could not be reopened: {0}")]
struct ReopenFailed(String);

/// Runs `writes` in one transaction and answers each caller after the commit.
///
/// A write that fails (a statement error, a row that cannot be decoded) may have changed
/// something before it failed, and SQLite can only undo it with everything after the last
/// savepoint. Rather than a savepoint for every write, the whole transaction is rolled back and
/// the batch runs again without the failed write, which gets its own error. A refused
/// precondition changed nothing and needs no undo. Every write is answered only after the
/// transaction that holds its final run was committed.
///
/// Returns whether it committed (`Some(false)`: nothing to commit), or `None` if the batch
/// failed as a whole (`BEGIN`, `ROLLBACK` or `COMMIT` failed). `relaxed`: whether the commit
/// is one without an fsync (counted as such).
fn run_batch(
    conn: &mut Conn,
    writes: &mut Vec<Box<dyn PendingWrite>>,
    relaxed: bool,
    stats: &WriterStats,
) -> Option<bool> {
    let mut failed: Vec<Box<dyn PendingWrite>> = Vec::new();
    let finished = loop {
        if let Err(e) = conn.run("BEGIN IMMEDIATE") {
            break Err(e);
        }
        let mut changed = false;
        let mut failure = None;
        for (i, w) in writes.iter_mut().enumerate() {
            match w.run(conn) {
                Ran::Changed => changed = true,
                Ran::Unchanged => {}
                Ran::Failed => {
                    failure = Some(i);
                    break;
                }
            }
        }
        match failure {
            None if changed => break conn.run("COMMIT").map(|()| true),
            // Nothing to keep: no commit, no fsync.
            None => break conn.run("ROLLBACK").map(|()| false),
            Some(i) => {
                // Undo the failed write and everything before it; if even that fails (SQLite
                // already rolled back after an I/O error, say), the batch is lost as a whole.
                if let Err(e) = conn.run("ROLLBACK") {
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
            // Counted before any caller is answered: a caller sees its own commit counted.
            if committed {
                stats.commits.fetch_add(1, Ordering::Relaxed);
                if relaxed {
                    stats.relaxed_commits.fetch_add(1, Ordering::Relaxed);
                }
                stats
                    .committed_requests
                    .fetch_add((writes.len() + failed.len()) as u64, Ordering::Relaxed);
            }
            for w in writes.drain(..).chain(failed) {
                w.answer(None);
            }
            Some(committed)
        }
        Err(e) => {
            // Not even a failed write gets its own error: it may rest on a change of the lost
            // batch.
            let e = Arc::new(e);
            for w in writes.drain(..).chain(failed) {
                w.answer(Some(batch_failed(&e)));
            }
            None
        }
    }
}
