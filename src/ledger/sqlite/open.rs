//! Opening a SQLite ledger (a file or a private in-memory database), starting its writer
//! thread, and closing it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use tokio::sync::oneshot;

use super::conn::{Conn, Opener};
use super::reader::Readers;
use super::writer::{Checkpointer, Durability, Job, Landing, Writer, WriterStats, writer_stopped};
use super::{Inner, Reads, SqliteLedger, SqliteLedgerOptions, Synchronous};
use crate::ledger::LedgerError;

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
            super::migrate::run(&mut conn)?;
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
            let mut conn = super::conn::in_memory()?;
            super::migrate::run(&mut conn)?;
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
        checkpoint: Option<super::writer::CheckpointHandle>,
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
}

/// The runtime reads will run on; opening outside one is a configuration error.
pub(super) fn current_runtime() -> Result<tokio::runtime::Handle, LedgerError> {
    tokio::runtime::Handle::try_current().map_err(|e| {
        LedgerError::Config(format!(
            "the SQLite ledger must be opened inside a Tokio runtime: {e}"
        ))
    })
}
