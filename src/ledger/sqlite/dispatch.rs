//! How a handle's calls reach the writer thread (group commit) and the readers, the writer's
//! counters, and the hooks tests use to hold or configure the writer.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::conn::{Conn, SqlRow};
use super::writer::{Finish, Job, PendingWrite, Queued, closed, writer_stopped};
use super::{Reads, SqliteLedger};
use crate::ledger::LedgerError;

impl SqliteLedger {
    /// Transactions committed by the writer thread so far (all handles of this ledger).
    ///
    /// With [`committed_writes`](Self::committed_writes), shows how well group commit batches:
    /// their ratio is the mean number of requests per commit (fsync).
    pub fn commits(&self) -> u64 {
        self.inner.stats.commits.load(Ordering::Relaxed)
    }

    /// Transactions committed so far without waiting for the disk because every write in them
    /// was one no send depends on ([`Ledger::record`]: a result recorded after its send, what
    /// a recovery lookup found): with `synchronous = FULL`
    /// they commit at `NORMAL`. Claims are always committed at the configured level.
    ///
    /// [`Ledger::record`]: crate::ledger::Ledger::record
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
    ///
    /// [`Ledger::record_detached`]: crate::ledger::Ledger::record_detached
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
    pub(super) async fn write<T, F>(&self, op: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: Fn(&mut Conn) -> Result<Finish<T>, LedgerError> + Send + 'static,
    {
        self.write_as(false, op).await
    }

    /// [`write`](Self::write), committed without an fsync if every write of its batch is
    /// `relaxed` (see [`Ledger::record`]).
    ///
    /// [`Ledger::record`]: crate::ledger::Ledger::record
    pub(super) async fn write_as<T, F>(&self, relaxed: bool, op: F) -> Result<T, LedgerError>
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
    pub(super) async fn read<T, F>(&self, read: F) -> Result<T, LedgerError>
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
    pub(super) async fn read_rows(
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
