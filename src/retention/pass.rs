//! One purge pass: every stage, contract by contract, in bounded batches, then the space given
//! back; and the counters of what went.

use std::sync::Arc;
use std::time::Duration;

use super::report::millis;
use super::{Clocks, ContractPlan, PurgeReport, RetentionError};
use crate::core::Shared;
use crate::ledger::{
    CallbackPurge, CallbackRecords, CallbackScope, LedgerError, PurgeBatch, PurgeScope, PurgeStage,
    Purged, RetentionLedger,
};

/// Batches per stage and contract in one run before it moves on (a backlog is finished by the
/// next runs; each batch is its own transaction).
const MAX_BATCHES: u32 = 10_000;

/// The purges of one configuration, through its ledger's retention: what a
/// [`Purger`](super::Purger) runs, and the recoverer's periodic purge (which needs no more of
/// the ledger than its retention).
#[derive(Clone)]
pub(crate) struct Purges {
    pub(super) shared: Arc<Shared>,
    ledger: Arc<dyn RetentionLedger>,
}

impl Purges {
    /// The purges over `shared`, whose ledger is `ledger`.
    pub(crate) fn new(shared: Arc<Shared>, ledger: Arc<dyn RetentionLedger>) -> Self {
        Self { shared, ledger }
    }

    /// The ledger the purges run through.
    pub(super) fn ledger(&self) -> &dyn RetentionLedger {
        &*self.ledger
    }

    /// The clocks of operations frozen with contract `name`.
    pub(super) fn clocks(&self, contract: &str) -> Clocks {
        let c = self.shared.contracts.get(contract).map(|c| &**c);
        self.shared.retention.clocks_for(c)
    }

    /// Purges everything due now: [`Purger::run`](super::Purger::run).
    pub(crate) async fn run(&self) -> Result<PurgeReport, RetentionError> {
        self.pass(false, self.shared.clock.now_ms(), None).await
    }

    /// One pass over every stage with the cutoffs of `now`; `lines` collects each contract's
    /// counts and clocks.
    pub(super) async fn pass(
        &self,
        dry_run: bool,
        now: i64,
        mut lines: Option<&mut Vec<ContractPlan>>,
    ) -> Result<PurgeReport, RetentionError> {
        let mut report = PurgeReport::default();
        if !self.shared.retention.enabled {
            return Ok(report);
        }
        for contract in self.ledger.finished_contracts().await? {
            let clocks = self.clocks(&contract);
            let (deleted, slimmed) = self.purge_contract(&contract, clocks, dry_run, now).await?;
            report.identity.add(deleted);
            report.details.add(slimmed);
            if let Some(lines) = lines.as_deref_mut() {
                lines.push(self.plan_line(contract, clocks, deleted, slimmed));
            }
        }
        self.purge_callbacks(dry_run, now, &mut report).await?;
        if !dry_run && !report.is_empty() {
            report.space_reclaimed = self.reclaim().await?;
        }
        Ok(report)
    }

    /// Both stages for the finished operations of `contract` under its `clocks`: the rows
    /// deleted and the rows slimmed (a dry run counts each row once, in the stage that takes
    /// it).
    async fn purge_contract(
        &self,
        contract: &str,
        clocks: Clocks,
        dry_run: bool,
        now: i64,
    ) -> Result<(Purged, Purged), RetentionError> {
        let batch = |stage, keep| PurgeBatch {
            stage,
            scope: PurgeScope::FinishedBefore {
                contract: contract.to_owned(),
                before_ms: cutoff(now, keep),
            },
            limit: self.shared.retention.batch,
            dry_run,
            now_ms: now,
        };
        // Identity first: a row due for deletion need not be slimmed on the way.
        let deleted = self
            .drain(batch(PurgeStage::Identity, clocks.identity))
            .await?;
        let mut slimmed = self
            .drain(batch(PurgeStage::Details, clocks.details))
            .await?;
        if dry_run && deleted.rows > 0 {
            // Counted, not done: the rows the identity stage deletes are still there and
            // were counted again as details due (the identity clock is never the shorter).
            let again = self
                .drain(batch(PurgeStage::Details, clocks.identity))
                .await?;
            slimmed = Purged::new(
                slimmed.rows.saturating_sub(again.rows),
                slimmed.bytes.saturating_sub(again.bytes),
            );
        }
        Ok((deleted, slimmed))
    }

    /// One contract's line of a plan.
    fn plan_line(
        &self,
        contract: String,
        clocks: Clocks,
        deleted: Purged,
        slimmed: Purged,
    ) -> ContractPlan {
        let mut line = ContractPlan {
            configured: self.shared.contracts.get(&contract).is_some(),
            keep_details_ms: millis(clocks.details),
            keep_identity_ms: millis(clocks.identity),
            contract,
            ..ContractPlan::default()
        };
        line.details.add(slimmed);
        line.identity.add(deleted);
        line
    }

    /// The callback records' own clocks: dedupe records of delivered events, and quarantined
    /// events (unless they are kept until erased).
    async fn purge_callbacks(
        &self,
        dry_run: bool,
        now: i64,
        report: &mut PurgeReport,
    ) -> Result<(), RetentionError> {
        let settings = &self.shared.retention;
        for (records, keep) in [
            (
                CallbackRecords::Deliveries,
                Some(settings.callback_deliveries),
            ),
            (CallbackRecords::Quarantine, settings.quarantined_callbacks),
        ] {
            let Some(keep) = keep else { continue };
            let done = self
                .drain_callbacks(CallbackPurge {
                    records,
                    scope: CallbackScope::ReceivedBefore(cutoff(now, keep)),
                    limit: settings.batch,
                    dry_run,
                })
                .await?;
            report.add_callbacks(records, done);
        }
        Ok(())
    }

    /// Runs `batch` until a batch finds less than its limit (a dry run counts once).
    pub(super) async fn drain(&self, batch: PurgeBatch) -> Result<Purged, RetentionError> {
        let (label, limit, dry_run) = (batch.stage.as_str(), batch.limit, batch.dry_run);
        let ledger = &*self.ledger;
        drain(label, limit, dry_run, || ledger.purge(batch.clone())).await
    }

    pub(super) async fn drain_callbacks(
        &self,
        batch: CallbackPurge,
    ) -> Result<Purged, RetentionError> {
        let (label, limit, dry_run) = (batch.records.as_str(), batch.limit, batch.dry_run);
        let ledger = &*self.ledger;
        drain(label, limit, dry_run, || {
            ledger.purge_callbacks(batch.clone())
        })
        .await
    }

    /// Gives freed space back, a bounded step at a time, until the store has none left to give.
    pub(super) async fn reclaim(&self) -> Result<u64, RetentionError> {
        let mut total = 0;
        for _ in 0..MAX_BATCHES {
            let step = self.ledger.reclaim_space().await?;
            if step == 0 {
                break;
            }
            total += step;
            tokio::task::yield_now().await;
        }
        #[cfg(feature = "metrics")]
        metrics::counter!("recoverable_write_retention_space_reclaimed_bytes_total")
            .increment(total);
        Ok(total)
    }
}

/// The cut-off `keep` before `now`: what finished (or was received) earlier is due.
fn cutoff(now: i64, keep: Duration) -> i64 {
    now.saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX))
}

/// Runs `batch()` until one finds less than `limit` rows, counting each (a dry run counts
/// everything at once and changes nothing).
async fn drain<'a>(
    label: &'static str,
    limit: u32,
    dry_run: bool,
    batch: impl Fn() -> crate::ledger::BoxFuture<'a, Result<Purged, LedgerError>>,
) -> Result<Purged, RetentionError> {
    if dry_run {
        return Ok(batch().await?);
    }
    let mut total = Purged::default();
    for _ in 0..MAX_BATCHES {
        let done = batch().await?;
        count(label, done);
        total = total.plus(done);
        if done.rows < u64::from(limit) {
            break;
        }
        // Let the requests' writes in between batches.
        tokio::task::yield_now().await;
    }
    Ok(total)
}

/// The retention counters.
pub(super) fn count(stage: &'static str, done: Purged) {
    #[cfg(feature = "metrics")]
    if done.rows > 0 {
        metrics::counter!("recoverable_write_retention_rows_total", "stage" => stage)
            .increment(done.rows);
        metrics::counter!("recoverable_write_retention_bytes_total", "stage" => stage)
            .increment(done.bytes);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (stage, done);
}
