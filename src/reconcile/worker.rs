//! The recovery engine's worker loop: passes one after another (each its own task, so a panic
//! is reported and the next pass runs), the retention purge beside them, the queue gauges, and
//! the handle that stops it.

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::beat::{Beats, failure};
use super::health::{EngineHealth, grace_for, promised_interval_ms};
use super::recoverer::{Recoverer, RecoveryReport};
use crate::ledger::{LedgerError, OldestPerState, StateCounts, TenantScope, WATCHED_STATES};
use crate::retention::Purges;

impl Recoverer {
    /// Reads the queue the operators own, across tenants (counts of the open states and of the
    /// quarantined rows, and the oldest operation of `UNKNOWN`, `PROCESSING`, `MANUAL_REVIEW`
    /// and `PREPARED`), and exports it through the `metrics` facade (feature `metrics`):
    ///
    /// - `recoverable_write_operations{state}`: how many operations are in each open state;
    /// - `recoverable_write_quarantined_operations`: how many rows are quarantined (this
    ///   version could not decode them, so recovery skips them until a person releases them;
    ///   in no state's count). Alert on anything above 0;
    /// - `recoverable_write_oldest_age_seconds{state}`: how long ago the oldest operation in that
    ///   state was created (0 when there is none), so an alert can fire on "the review queue is
    ///   older than N minutes";
    /// - `recoverable_write_live_workers`: how many recoverer workers beat within three of
    ///   their promised intervals ([`WorkerHeartbeat`](crate::ledger::WorkerHeartbeat)). Every
    ///   worker exports it: alert on its maximum across workers being 0;
    /// - `recoverable_write_last_pass_age_seconds`: how long ago any worker's last pass
    ///   finished;
    /// - `recoverable_write_overdue_operations`: operations in `UNKNOWN` or `RETRY_READY` whose
    ///   next check passed more than the grace ago ([`EngineHealth::grace_ms`]): nobody looked at
    ///   them. Alert on anything above 0.
    ///
    /// Four indexed reads (and the heartbeats), flat in the number of finished operations. `None` when the ledger
    /// has no listing ([`Ledger::housekeeping`](crate::ledger::Ledger::housekeeping) gives
    /// none): there is nothing to count through, and nothing is exported.
    pub async fn export_gauges(
        &self,
    ) -> Result<Option<(StateCounts, OldestPerState)>, LedgerError> {
        let Some(ledger) = self.housekeeping.listing_ledger() else {
            return Ok(None);
        };
        let counts = ledger.count_by_state(&TenantScope::AllTenants).await?;
        let oldest = ledger
            .oldest(&TenantScope::AllTenants, &WATCHED_STATES)
            .await?;
        let now = self.shared.clock.now_ms();
        let workers = ledger.heartbeats().await?;
        let checked_before = now.saturating_sub(grace_for(&workers, now));
        let overdue = ledger
            .count_overdue(&TenantScope::AllTenants, checked_before)
            .await?;
        let health = EngineHealth::from_parts(workers, &counts, overdue, now);
        #[cfg(not(feature = "metrics"))]
        let _ = (health, now);
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!("recoverable_write_live_workers").set(health.alive as f64);
            metrics::gauge!("recoverable_write_overdue_operations").set(health.overdue as f64);
            let last_pass = health
                .last_pass_ms
                .map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0);
            metrics::gauge!("recoverable_write_last_pass_age_seconds").set(last_pass);
            for (state, n) in counts.iter() {
                metrics::gauge!("recoverable_write_operations", "state" => state.as_str())
                    .set(n as f64);
            }
            metrics::gauge!("recoverable_write_quarantined_operations")
                .set(counts.quarantined() as f64);
            for (state, row) in oldest.iter() {
                let age = row.map_or(0.0, |r| (now - r.created_ms).max(0) as f64 / 1000.0);
                metrics::gauge!("recoverable_write_oldest_age_seconds", "state" => state.as_str())
                    .set(age);
            }
        }
        Ok(Some((counts, oldest)))
    }

    /// Runs passes until `shutdown` completes. Ledger errors are logged and retried on the next
    /// pass.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut gauges_at: Option<tokio::time::Instant> = None;
        // Retention runs in a task of its own: a backlog of purges never delays recovery. A
        // ledger without retention has nothing to purge through.
        let purges = self
            .housekeeping
            .retention_ledger()
            .map(|ledger| Purges::new(self.shared.clone(), ledger.clone()));
        let mut purged_at: Option<tokio::time::Instant> = None;
        let mut purging: Option<AbortOnDrop> = None;
        let mut beats = Beats::new(
            self.worker_id.as_deref(),
            self.shared.clock.now_ms(),
            promised_interval_ms(self.interval, self.lease),
        );
        loop {
            if let Some(purges) = &purges
                && let Some(every) = self.shared.retention.purge_interval()
                && purging.as_ref().is_none_or(|task| task.0.is_finished())
                && purged_at.is_none_or(|at| at.elapsed() >= every)
            {
                purged_at = Some(tokio::time::Instant::now());
                purging = Some(spawn_purge(purges.clone()));
            }
            if let Some(every) = self.gauges_every
                && self.housekeeping.counts()
                && gauges_at.is_none_or(|at| at.elapsed() >= every)
            {
                gauges_at = Some(tokio::time::Instant::now());
                if let Err(e) = self.export_gauges().await {
                    tracing::warn!(error = %e, "queue gauges not read; next time");
                }
            }
            // Each pass runs as its own task, so a panic in it (a reconciler's bug, say) is
            // caught, reported and counted, and the next pass runs: a recovery engine that died
            // silently would leave every unknown operation unowned.
            let started_ms = self.shared.clock.now_ms();
            let pass = tokio::spawn({
                let this = self.clone();
                async move { this.run_once().await }
            });
            let pass = pass.await;
            let outcome = match &pass {
                Ok(Ok(report)) => Ok(report),
                Ok(Err(e)) => Err(failure(e)),
                Err(e) if e.is_panic() => Err("the pass panicked (see the worker's log)".into()),
                Err(_) => Err("the pass was cancelled".into()),
            };
            let beat = beats.after_pass(started_ms, self.shared.clock.now_ms(), outcome);
            if let Some(ledger) = self.housekeeping.listing_ledger()
                && let Err(e) = ledger.record_heartbeat(beat).await
            {
                tracing::warn!(error = %e, "worker heartbeat not recorded; next pass");
            }
            // After a full pass that worked all its rows, more may be due at once (a backlog):
            // no pause, but a look at `shutdown` first.
            let pause = if report_pass(pass).is_some_and(|r| r.was_full(self.batch)) {
                std::time::Duration::ZERO
            } else {
                self.interval
            };
            tokio::select! {
                biased;
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(pause) => {}
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

/// Runs one retention purge in a task of its own, and reports what it did.
fn spawn_purge(purges: Purges) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        match purges.run().await {
            Ok(report) if !report.is_empty() => {
                tracing::info!(
                    details = report.details.rows,
                    deleted = report.identity.rows,
                    callback_records =
                        report.callback_deliveries.rows + report.quarantined_callbacks.rows,
                    space_reclaimed = report.space_reclaimed,
                    "retention purge"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention purge failed; next time"),
        }
    }))
}

/// Reports how a pass ended: what it did, its ledger error, or its panic (counted in
/// `recoverable_write_recovery_panics_total`, feature `metrics`); what it did, if it ended.
fn report_pass(
    pass: Result<Result<RecoveryReport, LedgerError>, tokio::task::JoinError>,
) -> Option<RecoveryReport> {
    match pass {
        Ok(Ok(report)) => {
            if report != RecoveryReport::default() {
                tracing::debug!(?report, "recovery pass");
            }
            return Some(report);
        }
        Ok(Err(e)) => tracing::error!(error = %e, "recovery pass failed; retrying"),
        Err(e) if e.is_panic() => {
            let panic = e.into_panic();
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".into());
            #[cfg(feature = "metrics")]
            metrics::counter!("recoverable_write_recovery_panics_total").increment(1);
            tracing::error!(
                panic = %crate::error::Short(&what),
                "recovery pass panicked; the rows it held are retried after their lease"
            );
        }
        Err(e) => tracing::error!(error = %e, "recovery pass was cancelled"),
    }
    None
}

/// Aborts the retention task when the run loop ends.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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
