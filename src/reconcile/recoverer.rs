//! The recovery engine.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::Reconciler;
use crate::engine::{self, Applied, Extras};
use crate::evidence::Evidence;
use crate::ledger::{Ledger, LedgerError, OperationRecord};
use crate::state::{Event, State, transition};

/// What one pass of the [`Recoverer`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// `IN_FLIGHT` attempts whose lease expired, moved to `UNKNOWN`.
    pub swept: usize,
    /// Due operations claimed (new generation, lease).
    pub claimed: usize,
    /// Claimed operations that reached `SUCCEEDED` or `REJECTED`.
    pub resolved: usize,
    /// Claimed operations still `UNKNOWN` or `PROCESSING`, with a next check scheduled.
    pub pending: usize,
    /// Operations escalated to `MANUAL_REVIEW`.
    pub escalated: usize,
    /// Claimed operations that proved safe to resend (`RETRY_READY`).
    pub retry_ready: usize,
    /// Results refused because the operation moved on meanwhile (a reviewer, another worker).
    pub stale: usize,
}

/// The recovery engine: the single owner of every retry.
///
/// Each [`run_once`](Recoverer::run_once) pass:
/// 1. sweeps `IN_FLIGHT` operations whose lease expired to `UNKNOWN` (never back to `PREPARED`);
/// 2. claims due `UNKNOWN`/`PROCESSING` operations, each with a new generation and a lease, so
///    that any number of recoverers (tasks, processes, machines) can share one ledger;
/// 3. asks the operation's [`Reconciler`] what happened, query-first, and applies the answer
///    through the state machine with a compare-and-swap on the claimed generation;
/// 4. escalates to `MANUAL_REVIEW` when the window or query budget is spent, or no reconciler
///    exists for the operation's contract.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use recoverable_write::{Recoverer, HttpLookup, MemoryLedger, ledger::Ledger};
/// # fn client() -> tower::util::BoxCloneSyncService<http::Request<http_body_util::Full<bytes::Bytes>>, http::Response<http_body_util::Full<bytes::Bytes>>, recoverable_write::BoxError> { unimplemented!() }
/// # async fn run() {
/// let ledger: Arc<dyn Ledger> = Arc::new(MemoryLedger::new());
/// let handle = Recoverer::new(ledger)
///     .reconciler(HttpLookup::new(client(), "http://vendor.test/operations/{operation_id}"))
///     .spawn();
/// // ... on shutdown:
/// handle.shutdown().await;
/// # }
/// ```
#[derive(Clone)]
pub struct Recoverer {
    ledger: Arc<dyn Ledger>,
    default_reconciler: Option<Arc<dyn Reconciler>>,
    by_contract: HashMap<String, Arc<dyn Reconciler>>,
    batch: u32,
    lease: Duration,
    interval: Duration,
}

impl fmt::Debug for Recoverer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recoverer")
            .field("ledger", &self.ledger)
            .field("default_reconciler", &self.default_reconciler)
            .field("by_contract", &self.by_contract.keys().collect::<Vec<_>>())
            .field("batch", &self.batch)
            .field("lease", &self.lease)
            .field("interval", &self.interval)
            .finish()
    }
}

impl Recoverer {
    /// A recoverer over `ledger` with no reconciler: every due operation escalates until one is
    /// configured.
    pub fn new(ledger: Arc<dyn Ledger>) -> Self {
        Self {
            ledger,
            default_reconciler: None,
            by_contract: HashMap::new(),
            batch: 32,
            lease: Duration::from_secs(30),
            interval: Duration::from_millis(250),
        }
    }

    /// The reconciler for operations whose contract has no specific one.
    pub fn reconciler(mut self, r: impl Reconciler) -> Self {
        self.default_reconciler = Some(Arc::new(r));
        self
    }

    /// The reconciler for operations made under the contract named `contract`.
    pub fn reconciler_for(mut self, contract: impl Into<String>, r: impl Reconciler) -> Self {
        self.by_contract.insert(contract.into(), Arc::new(r));
        self
    }

    /// How many due operations one pass claims (default 32).
    pub fn batch_size(mut self, n: u32) -> Self {
        self.batch = n.max(1);
        self
    }

    /// The lease taken on each claimed operation (default 30 s). A lookup is abandoned at half
    /// of it, so the recoverer's own work is over before another worker may claim.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Pause between passes in [`run`](Recoverer::run) (default 250 ms).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// One pass: sweep, claim, reconcile, record.
    pub async fn run_once(&self) -> Result<RecoveryReport, LedgerError> {
        let mut report = RecoveryReport::default();
        let now = engine::now_ms();
        let swept = self.ledger.sweep_expired(now).await?;
        for row in &swept {
            tracing::info!(
                operation = %row.operation_id,
                tenant = %row.tenant,
                generation = %row.generation,
                "attempt lease expired; operation is UNKNOWN"
            );
        }
        report.swept = swept.len();

        let claimed = self
            .ledger
            .claim_due(now, self.lease.as_millis() as i64, self.batch)
            .await?;
        report.claimed = claimed.len();
        for row in claimed {
            match self.recover(row).await? {
                Some(r) if r.state.is_terminal() => report.resolved += 1,
                Some(r) if r.state == State::ManualReview => report.escalated += 1,
                Some(r) if r.state == State::RetryReady => report.retry_ready += 1,
                Some(_) => report.pending += 1,
                None => report.stale += 1,
            }
        }
        Ok(report)
    }

    /// Works on one claimed row. `None`: the row moved on and our result was refused.
    async fn recover(&self, row: OperationRecord) -> Result<Option<OperationRecord>, LedgerError> {
        let span = tracing::info_span!(
            "recover",
            operation = %row.operation_id,
            tenant = %row.tenant,
            generation = %row.generation
        );
        self.recover_in_span(row).instrument(span).await
    }

    async fn recover_in_span(
        &self,
        row: OperationRecord,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        // Budget and window first: the pure function says whether recovery may go on.
        if let Ok(t) = transition(&row.snapshot(), &Event::ClaimRecovery, engine::clock())
            && t.to == State::ManualReview
        {
            let reason = t.reason.unwrap_or_else(|| "recovery budget spent".into());
            return self.escalate(&row, reason).await;
        }
        let reconciler = self
            .by_contract
            .get(&row.contract.name)
            .or(self.default_reconciler.as_ref());
        let Some(reconciler) = reconciler else {
            return self
                .escalate(
                    &row,
                    format!("no reconciler for contract {:?}", row.contract.name),
                )
                .await;
        };
        let evidence = match tokio::time::timeout(self.lease / 2, reconciler.reconcile(&row)).await
        {
            Ok(e) => e,
            Err(_) => Evidence::unknown("lookup abandoned at half the recovery lease"),
        };
        tracing::info!(evidence = evidence.label(), "lookup answered");
        let applied = engine::apply_event(
            &*self.ledger,
            &row,
            Event::LookupResult(evidence.clone()),
            "lookup",
            Extras::default(),
        )
        .await?;
        self.settle(&row, applied, evidence).await
    }

    async fn escalate(
        &self,
        row: &OperationRecord,
        reason: String,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        tracing::warn!(operation = %row.operation_id, %reason, "escalating to manual review");
        let applied = engine::apply_event(
            &*self.ledger,
            row,
            Event::Escalate {
                reason: reason.clone(),
            },
            "escalated",
            Extras::default(),
        )
        .await?;
        self.settle(row, applied, Evidence::unknown(reason)).await
    }

    async fn settle(
        &self,
        row: &OperationRecord,
        applied: Applied,
        evidence: Evidence,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        match applied {
            Applied::Done(r) => Ok(Some(*r)),
            Applied::Refused(refused) => {
                tracing::warn!(%refused, "state machine refused the recovery result");
                engine::append_late(&*self.ledger, row, None, evidence, refused.to_string())
                    .await?;
                Ok(None)
            }
            Applied::Stale => {
                engine::append_late(
                    &*self.ledger,
                    row,
                    None,
                    evidence,
                    "recovery result refused: the operation moved on (stale generation)".into(),
                )
                .await?;
                Ok(None)
            }
        }
    }

    /// Runs passes until `shutdown` completes. Ledger errors are logged and retried on the next
    /// pass.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            match self.run_once().await {
                Ok(report) if report != RecoveryReport::default() => {
                    tracing::debug!(?report, "recovery pass");
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "recovery pass failed; retrying"),
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }

    /// Spawns [`run`](Recoverer::run) on the current tokio runtime.
    pub fn spawn(self) -> RecovererHandle {
        let (tx, mut rx) = watch::channel(false);
        let task = tokio::spawn(self.run(async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }));
        RecovererHandle { stop: tx, task }
    }
}

/// Controls a spawned [`Recoverer`].
#[derive(Debug)]
pub struct RecovererHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RecovererHandle {
    /// Stops after the current pass and waits for it.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
