//! The readers of a file ledger: up to `max_readers` connections of their own, used from
//! Tokio's blocking threads. In WAL mode a reader sees every committed write and never waits
//! for the writer, nor the writer for it.

use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use super::conn::{Conn, Opener};
use super::writer::closed;
use crate::ledger::LedgerError;

/// A pool of reader connections, opened on first use and kept.
#[derive(Debug)]
pub(super) struct Readers {
    opener: Opener,
    /// Connections not in use.
    idle: Mutex<Vec<Conn>>,
    /// One permit per connection the pool may have; closed with the pool.
    permits: Arc<Semaphore>,
    runtime: tokio::runtime::Handle,
}

impl Readers {
    pub(super) fn new(opener: Opener, max: u32, runtime: tokio::runtime::Handle) -> Self {
        Self {
            opener,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(max as usize)),
            runtime,
        }
    }

    /// Runs `read` on a reader connection, on a blocking thread.
    pub(super) async fn read<T, F>(self: &Arc<Self>, read: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Conn) -> Result<T, LedgerError> + Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| closed())?;
        let pool = self.clone();
        let task = self.runtime.spawn_blocking(move || {
            let _permit = permit;
            let taken = pool.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let mut conn = match taken {
                Some(conn) => conn,
                None => pool.opener.reader()?,
            };
            let result = read(&mut conn);
            // A connection left inside a transaction (a statement failed halfway) is dropped,
            // not reused.
            if !conn.in_transaction() && !pool.permits.is_closed() {
                pool.idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(conn);
            }
            result
        });
        task.await
            .map_err(|e| LedgerError::Unavailable(Box::new(e)))?
    }

    /// Closes every idle connection; reads after this fail.
    pub(super) fn close(&self) {
        self.permits.close();
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
