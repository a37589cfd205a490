//! One pass of the recovery engine: sweep expired attempts to `UNKNOWN`, claim the due
//! operations (and the `PREPARED` ones nobody sent), and work each claimed row while its lease
//! leaves room for it.

use tracing::Instrument;

#[cfg(feature = "metrics")]
use super::recoverer::first_sent_ms;
use super::recoverer::{Recoverer, RecoveryReport};
use crate::core::{engine, trace};
use crate::ledger::{LedgerError, OperationRecord};
use crate::state::State;

impl Recoverer {
    /// One pass: sweep, claim, reconcile, replay, record.
    pub async fn run_once(&self) -> Result<RecoveryReport, LedgerError> {
        let mut report = RecoveryReport::default();
        let now = self.shared.clock.now_ms();
        report.swept = self.sweep(now).await?;

        // Taken before the claim: the store sets each lease from a reading taken after this
        // one (its own clock, with PostgreSQL's database clock), so `claimed_at + lease` never
        // ends later than the stored lease. Leases are compared on this monotonic clock, never
        // on the worker's wall clock against the ledger's (a worker clock ahead of the
        // database's would otherwise see every lease it just took as nearly spent).
        let claimed_at = tokio::time::Instant::now();
        let claimed = self
            .ledger()
            .claim_due(now, self.lease.as_millis() as i64, self.batch)
            .await?;
        report.claimed = claimed.len();
        let prepared = self.claim_unsent(now).await?;
        report.claimed_prepared = prepared.len();
        self.work_all(claimed.into_iter().chain(prepared), claimed_at, &mut report)
            .await?;
        Ok(report)
    }

    /// Works the claimed rows, up to [`concurrency`](Recoverer::concurrency) at once (each row
    /// is its own operation, fenced by its own version: working them side by side changes no
    /// outcome, and lets a group-committing ledger commit their results together). A row whose
    /// lease is too close to its end to fit a lookup is left alone (counted stale) for a later
    /// claim, rather than worked past its lease (safe thanks to fencing, but wasted). The first
    /// ledger error ends the pass once the rows already started are done; the rows not started
    /// are left to their leases.
    async fn work_all(
        &self,
        rows: impl Iterator<Item = OperationRecord>,
        claimed_at: tokio::time::Instant,
        report: &mut RecoveryReport,
    ) -> Result<(), LedgerError> {
        type Working<'a> = std::pin::Pin<
            Box<dyn Future<Output = (Result<(), LedgerError>, RecoveryReport)> + Send + 'a>,
        >;
        let mut rows = rows;
        let mut running: Vec<Working<'_>> = Vec::new();
        let mut failed = None;
        loop {
            while failed.is_none() && running.len() < self.concurrency {
                let Some(row) = rows.next() else { break };
                if claimed_at.elapsed() > self.lease / 2 {
                    report.stale += 1;
                    continue;
                }
                running.push(Box::pin(async move {
                    let mut own = RecoveryReport::default();
                    let done = self.work(row, &mut own).await;
                    (done, own)
                }));
            }
            if running.is_empty() {
                break;
            }
            let (done, own) = std::future::poll_fn(|cx| {
                for i in 0..running.len() {
                    if let std::task::Poll::Ready(out) = running[i].as_mut().poll(cx) {
                        drop(running.swap_remove(i));
                        return std::task::Poll::Ready(out);
                    }
                }
                std::task::Poll::Pending
            })
            .await;
            report.absorb(own);
            if let Err(e) = done {
                failed.get_or_insert(e);
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Moves `IN_FLIGHT` operations whose attempt lease expired to `UNKNOWN`, and tells
    /// whoever waits on them; how many.
    async fn sweep(&self, now: i64) -> Result<usize, LedgerError> {
        let swept = self.ledger().sweep_expired(now).await?;
        for row in &swept {
            tracing::info!(
                operation = %row.operation_id,
                tenant = %row.tenant,
                generation = %row.generation,
                "attempt lease expired; operation is UNKNOWN"
            );
            engine::publish(&self.shared, row);
        }
        Ok(swept.len())
    }

    /// Claims the `PREPARED` rows nobody sent (the process died after an outbox commit, or the
    /// caller was refused permission and never came back): never sent, so a first send is
    /// safe. Only claimed when this recoverer can send.
    async fn claim_unsent(&self, now: i64) -> Result<Vec<OperationRecord>, LedgerError> {
        match (self.prepared_after, &self.replay) {
            (Some(age), Some(_)) => {
                self.ledger()
                    .claim_prepared(
                        now,
                        i64::try_from(age.as_millis()).unwrap_or(i64::MAX),
                        self.lease.as_millis() as i64,
                        self.batch,
                    )
                    .await
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Works one claimed row ([`recover`](Self::recover)) and counts where it left it.
    async fn work(
        &self,
        row: OperationRecord,
        report: &mut RecoveryReport,
    ) -> Result<(), LedgerError> {
        let span = trace::recover_span(&row);
        #[cfg(feature = "metrics")]
        let (before, first_sent) = (row.state, first_sent_ms(&row));
        match self.recover(row, report).instrument(span).await? {
            Some(r) if r.state.is_terminal() => {
                report.resolved += 1;
                #[cfg(feature = "metrics")]
                if let Some(t0) = first_sent {
                    metrics::histogram!(
                        "recoverable_write_resolution_seconds",
                        "from" => before.as_str(),
                        "to" => r.state.as_str(),
                    )
                    .record((self.shared.clock.now_ms() - t0).max(0) as f64 / 1000.0);
                }
            }
            Some(r) if r.state == State::ManualReview => report.escalated += 1,
            Some(_) => report.pending += 1,
            None => report.stale += 1,
        }
        Ok(())
    }
}
