//! Ledger wrappers: process crashes, and the planted bugs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use recoverable_write::ledger::backend::Update;
use recoverable_write::ledger::conformance::rewrite_changes;
use recoverable_write::ledger::{BoxFuture, LedgerError, OperationRecord};
use recoverable_write::testing::{ForwardingLedger, LedgerCall};
use recoverable_write::{Ledger, State};
use tokio::sync::Notify;

/// One process incarnation's view of the shared store: its `crash_at`-th write goes through,
/// then the process is dead and every later call fails.
#[derive(Debug)]
pub(crate) struct CrashLedger {
    pub(crate) inner: Arc<dyn Ledger>,
    pub(crate) writes: AtomicU64,
    /// The write after which the process dies (0: never; the harness disarms it when the
    /// schedule ends).
    pub(crate) crash_at: Arc<AtomicU64>,
    pub(crate) dead: Arc<AtomicBool>,
    pub(crate) died: Arc<Notify>,
}

pub(crate) fn gone() -> LedgerError {
    LedgerError::Unavailable("process crashed".into())
}

impl ForwardingLedger for CrashLedger {
    fn inner(&self) -> &dyn Ledger {
        &*self.inner
    }

    /// Every call fails once the process is dead; the `crash_at`-th write goes through, then
    /// the process dies before it hears the answer.
    fn around<'a, T, F>(&'a self, call: LedgerCall, f: F) -> BoxFuture<'a, Result<T, LedgerError>>
    where
        T: Send + 'a,
        F: FnOnce(&'a dyn Ledger) -> BoxFuture<'a, Result<T, LedgerError>> + Send + 'a,
    {
        Box::pin(async move {
            if self.dead.load(Ordering::SeqCst) {
                return Err(gone());
            }
            if !call.writes() {
                return f(&*self.inner).await;
            }
            let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
            let r = f(&*self.inner).await;
            if self.crash_at.load(Ordering::SeqCst) == n {
                self.dead.store(true, Ordering::SeqCst);
                self.died.notify_one();
                return Err(gone());
            }
            r
        })
    }
}

/// What [`Tamper`] changes in the updates it passes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TamperMode {
    /// The planted bug (issue 10 item 1 reintroduced): a reviewer's "confirmed not executed"
    /// makes the operation sendable at once, ignoring the lease of an attempt that may still be
    /// on the wire.
    PlantItem1,
    /// An exploration aid (`RW_SIM_WORKAROUND=1`) until the crate fixes the simulation's first
    /// finding: a reviewer's claim of a `RETRY_READY` row keeps the live lease it carries, so
    /// the simulation can look past that finding for the next one.
    KeepLeaseOnReclaim,
}

/// A ledger that rewrites some updates on their way to the store (see [`TamperMode`]).
#[derive(Debug)]
pub(crate) struct Tamper {
    pub(crate) inner: Arc<dyn Ledger>,
    pub(crate) mode: TamperMode,
}

impl ForwardingLedger for Tamper {
    fn inner(&self) -> &dyn Ledger {
        &*self.inner
    }

    fn apply(
        &self,
        mut update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            match self.mode {
                TamperMode::PlantItem1 => {
                    if update.expect_state() == State::ManualReview
                        && update.changes().state() == State::RetryReady
                    {
                        update = rewrite_changes(update, |c| {
                            c.lease_until_ms = None;
                            c.next_check_ms = Some(c.now_ms);
                        });
                    }
                }
                TamperMode::KeepLeaseOnReclaim => {
                    if update.expect_state() == State::RetryReady
                        && update.changes().state() == State::ManualReview
                        && update.changes().lease_until_ms().is_none()
                        && let Some(row) = self
                            .inner
                            .get(update.tenant(), update.operation_id())
                            .await?
                    {
                        update = rewrite_changes(update, |c| c.lease_until_ms = row.lease_until_ms);
                    }
                }
            }
            self.inner.apply(update).await
        })
    }
}
