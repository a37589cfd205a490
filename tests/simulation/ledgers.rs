//! Ledger wrappers: process crashes (and results lost after the caller was answered), the
//! archive that keeps what retention drops, and the planted bugs.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::RetentionLedger;
use recoverable_write::ledger::backend::{NewEvidence, Update};
use recoverable_write::ledger::conformance::rewrite_changes;
use recoverable_write::ledger::{
    BoxFuture, EvidenceEntry, LedgerError, OperationRecord, PurgeBatch, PurgeScope, PurgeStage,
    Purged, Recorded, Settled,
};
use recoverable_write::testing::{ForwardingLedger, LedgerCall};
use recoverable_write::{Ledger, MemoryLedger, OperationId, State, Tenant};
use tokio::sync::Notify;

use crate::Stats;

/// One process incarnation's view of the shared store: its `crash_at`-th write goes through,
/// then the process is dead and every later call fails.
///
/// With `detached`, it records an attempt's result as the SQLite ledger does by default
/// ([`Ledger::record_detached`]): the caller is answered at once and the result lands a moment
/// later, in order (every later call of this incarnation waits for it, as SQLite's one writer
/// thread runs writes in the order they were queued). If the process dies at that write (the
/// `crash_at`-th, or the `crash_at_result`-th result), the caller was answered and the result is
/// lost: the row stays `IN_FLIGHT` under its lease.
#[derive(Debug)]
pub(crate) struct CrashLedger {
    pub(crate) inner: Arc<dyn FullLedger>,
    pub(crate) writes: AtomicU64,
    /// The write after which the process dies (0: never; the harness disarms it when the
    /// schedule ends).
    pub(crate) crash_at: Arc<AtomicU64>,
    pub(crate) dead: Arc<AtomicBool>,
    pub(crate) died: Arc<Notify>,
    pub(crate) detached: bool,
    /// The detached result at which the process dies (0: none).
    pub(crate) crash_at_result: Arc<AtomicU64>,
    pub(crate) results: AtomicU64,
    /// Detached results not yet landed.
    pub(crate) pending: Arc<AtomicU64>,
    /// When the crash comes at a write the store may acknowledge before it is durable
    /// ([`Ledger::record`]: what an attempt produced, what a lookup found or deferred), the
    /// store acknowledges it and the crash loses it (PostgreSQL's `synchronous_commit = off`,
    /// SQLite's `synchronous = NORMAL`, then the power goes): the caller goes on with the row
    /// as the write would have left it, while every later call fails.
    pub(crate) lose_relaxed: bool,
    pub(crate) stats: Arc<Stats>,
}

impl CrashLedger {
    fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.died.notify_one();
    }

    /// What every call goes through first: it sees the detached results queued before it,
    /// and fails once the process is dead.
    async fn admit(&self) -> Result<(), LedgerError> {
        while self.pending.load(Ordering::SeqCst) > 0 {
            tokio::task::yield_now().await;
        }
        if self.dead.load(Ordering::SeqCst) {
            return Err(gone());
        }
        Ok(())
    }
}

/// Writes a detached result as the store would: the compare-and-swap, or the late entry in its
/// place when the row moved on.
async fn land(
    inner: &dyn Ledger,
    update: Update,
    late: NewEvidence,
) -> Result<Recorded, LedgerError> {
    let (tenant, id) = (update.tenant().clone(), update.operation_id().clone());
    match inner.record_unread(update).await? {
        Recorded::Stale => {
            inner.append_evidence(&tenant, &id, late).await?;
            Ok(Recorded::Stale)
        }
        done => Ok(done),
    }
}

pub(crate) fn gone() -> LedgerError {
    LedgerError::Unavailable("process crashed".into())
}

impl ForwardingLedger for CrashLedger {
    fn inner(&self) -> &dyn FullLedger {
        &*self.inner
    }

    /// Every call fails once the process is dead; the `crash_at`-th write goes through, then
    /// the process dies before it hears the answer.
    fn around<'a, T, F>(&'a self, call: LedgerCall, f: F) -> BoxFuture<'a, Result<T, LedgerError>>
    where
        T: Send + 'a,
        F: FnOnce(&'a dyn FullLedger) -> BoxFuture<'a, Result<T, LedgerError>> + Send + 'a,
    {
        Box::pin(async move {
            self.admit().await?;
            if !call.writes() {
                return f(&*self.inner).await;
            }
            let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
            let r = f(&*self.inner).await;
            if self.crash_at.load(Ordering::SeqCst) == n {
                self.die();
                return Err(gone());
            }
            r
        })
    }

    fn detaches_results(&self) -> bool {
        self.detached
    }

    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        if !self.lose_relaxed {
            return self.around(LedgerCall::Record, move |l| l.record(update));
        }
        Box::pin(async move {
            self.admit().await?;
            let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
            if self.crash_at.load(Ordering::SeqCst) != n {
                return self.inner.record(update).await;
            }
            // Acknowledged as the store would have answered, never landed.
            self.stats.bump_owned(format!(
                "relaxed commits acknowledged, then lost in a crash: {}",
                update.evidence().kind
            ));
            let acked = self
                .inner
                .get(update.tenant(), update.operation_id())
                .await?
                .filter(|row| update.holds_for(row))
                .map(|mut row| {
                    row.set_changes(update.into_parts().0);
                    row
                });
            self.die();
            Ok(acked)
        })
    }

    fn record_detached(
        &self,
        update: Update,
        late: NewEvidence,
        settled: Settled,
    ) -> Result<(), LedgerError> {
        if self.dead.load(Ordering::SeqCst) {
            // Nothing queued: the store is closed.
            return Err(gone());
        }
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let r = self.results.fetch_add(1, Ordering::SeqCst) + 1;
        if self.crash_at.load(Ordering::SeqCst) == n
            || self.crash_at_result.load(Ordering::SeqCst) == r
        {
            // The caller is answered; the process dies before its writer commits the result.
            self.stats.bump("detached results lost in a crash");
            self.die();
            tokio::spawn(async move { settled(Err(gone())) });
            return Ok(());
        }
        self.pending.fetch_add(1, Ordering::SeqCst);
        let (inner, dead, pending) = (self.inner.clone(), self.dead.clone(), self.pending.clone());
        tokio::spawn(async move {
            // Lands after the caller moved on, before anything else this process does.
            tokio::task::yield_now().await;
            let r = if dead.load(Ordering::SeqCst) {
                Err(gone())
            } else {
                land(&*inner, update, late).await
            };
            pending.fetch_sub(1, Ordering::SeqCst);
            settled(r);
        });
        Ok(())
    }
}

/// A row retention deleted, as it was just before.
#[derive(Clone, Debug)]
pub(crate) struct Deletion {
    pub(crate) row: OperationRecord,
}

#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// Every evidence entry as first seen (before a details purge dropped its observation and
    /// note), per operation id.
    pub(crate) log: HashMap<OperationId, BTreeMap<i64, EvidenceEntry>>,
    pub(crate) deletions: Vec<Deletion>,
    /// Retention that touched what it must not (an open row, a row within its clock).
    pub(crate) violations: Vec<String>,
    pub(crate) slimmed: u64,
    /// When a tenant was erased (its quarantined callbacks go with it).
    pub(crate) erasures: Vec<tokio::time::Instant>,
}

/// The store under every incarnation, over the seed's [`MemoryLedger`]: before each purge it
/// keeps a copy of every operation's evidence (so the invariants read the audit trail whole
/// after retention dropped details or rows), and after it checks what went: only finished
/// rows, only past their clock (or erased).
#[derive(Debug)]
pub(crate) struct Archive {
    pub(crate) inner: Arc<MemoryLedger>,
    pub(crate) tenant: Tenant,
    pub(crate) ids: Vec<OperationId>,
    /// The two clocks of the seed's one contract, in ms.
    pub(crate) details_ms: i64,
    pub(crate) identity_ms: i64,
    pub(crate) kept: Mutex<Kept>,
}

impl Archive {
    async fn keep(&self) -> Vec<Option<OperationRecord>> {
        let mut rows = Vec::new();
        for id in &self.ids {
            let log = self
                .inner
                .evidence(&self.tenant, id)
                .await
                .unwrap_or_default();
            {
                let mut kept = self.kept.lock().unwrap();
                let mine = kept.log.entry(id.clone()).or_default();
                for e in log {
                    mine.entry(e.seq).or_insert(e);
                }
            }
            rows.push(self.inner.get(&self.tenant, id).await.ok().flatten());
        }
        rows
    }

    /// The whole audit trail of `id` (every row it had), oldest first.
    pub(crate) async fn log(&self, id: &OperationId) -> Vec<EvidenceEntry> {
        let now = self
            .inner
            .evidence(&self.tenant, id)
            .await
            .unwrap_or_default();
        let mut all = self
            .kept
            .lock()
            .unwrap()
            .log
            .get(id)
            .cloned()
            .unwrap_or_default();
        for e in now {
            all.entry(e.seq).or_insert(e);
        }
        all.into_values().collect()
    }

    fn judge(&self, batch: &PurgeBatch, before: &OperationRecord, after: Option<&OperationRecord>) {
        let id = &before.operation_id;
        let mut kept = self.kept.lock().unwrap();
        let gone = after.is_none();
        let slimmed = after.is_some_and(|a| a.details_removed_ms.is_some())
            && before.details_removed_ms.is_none();
        if !gone && !slimmed {
            return;
        }
        let what = if gone { "deleted" } else { "slimmed" };
        if !before.state.is_terminal() {
            kept.violations.push(format!(
                "{id}: retention {what} an operation in {} ({:?})",
                before.state, batch.scope
            ));
        }
        let clock = match batch.stage {
            PurgeStage::Details => self.details_ms,
            _ => self.identity_ms,
        };
        if let PurgeScope::FinishedBefore { before_ms, .. } = batch.scope
            && (before_ms > batch.now_ms - clock || before.updated_ms >= before_ms)
        {
            kept.violations.push(format!(
                "{id}: retention {what} it {} ms after it finished, its clock is {clock} ms",
                batch.now_ms - before.updated_ms
            ));
        }
        if gone {
            kept.deletions.push(Deletion {
                row: before.clone(),
            });
        } else {
            kept.slimmed += 1;
        }
    }
}

impl ForwardingLedger for Archive {
    fn inner(&self) -> &dyn FullLedger {
        &*self.inner
    }

    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(async move {
            if batch.dry_run {
                return self.inner.purge(batch).await;
            }
            if matches!(batch.scope, PurgeScope::Tenant(_)) {
                self.kept
                    .lock()
                    .unwrap()
                    .erasures
                    .push(tokio::time::Instant::now());
            }
            let before = self.keep().await;
            let done = self.inner.purge(batch.clone()).await;
            for (id, before) in self.ids.iter().zip(before) {
                let Some(before) = before else { continue };
                let after = self.inner.get(&self.tenant, id).await.ok().flatten();
                self.judge(&batch, &before, after.as_ref());
            }
            done
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
    pub(crate) inner: Arc<dyn FullLedger>,
    pub(crate) mode: TamperMode,
}

impl ForwardingLedger for Tamper {
    fn inner(&self) -> &dyn FullLedger {
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
