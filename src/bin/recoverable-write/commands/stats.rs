//! `stats`: counts by state and target, the oldest stuck items, review resolution times.

use std::collections::BTreeMap;

use recoverable_write::ledger::{EvidenceEntry, OPEN_STATES, OperationQuery, WATCHED_STATES};
use recoverable_write::reconcile::EngineHealth;
use recoverable_write::state::State;

use super::{Ctx, host_of, to_json};
use crate::args::StatsArgs;
use crate::error::CliError;
use crate::render;

/// Open operations per state, contract and target, as far as the scan limit read.
struct OpenByTarget {
    /// Keyed by the state's position in `State::ALL` (states have no order of their own).
    counts: BTreeMap<(usize, String, String), u64>,
    scanned: usize,
    truncated: bool,
}

/// The durations of the reviews resolved, and of the operations finished, within the period.
#[derive(Default)]
struct Durations {
    /// Escalation (or claim) to a person's resolution.
    review_ms: Vec<i64>,
    /// Escalation to the first claim.
    claim_ms: Vec<i64>,
    /// Creation to the final state.
    total_ms: Vec<i64>,
    truncated: bool,
}

impl Ctx {
    pub(super) async fn stats(&self, a: StatsArgs) -> Result<String, CliError> {
        let counts = self
            .ledger
            .count_by_state(&self.scope)
            .await
            .map_err(CliError::ledger)?;
        let oldest = self
            .ledger
            .oldest(&self.scope, &WATCHED_STATES)
            .await
            .map_err(CliError::ledger)?;
        let engine = EngineHealth::read(&*self.ledger, &self.scope, self.now_ms)
            .await
            .map_err(CliError::ledger)?;
        let open = self.open_by_target(a.scan_limit).await?;
        let since_ms = self
            .now_ms
            .saturating_sub(i64::try_from(a.since.as_millis()).unwrap_or(i64::MAX));
        let durations = self.durations_since(since_ms, a.scan_limit).await?;
        let stats = render::Stats {
            engine: render::Engine::of(engine),
            counts: counts
                .iter()
                .map(|(state, n)| (state.as_str(), n))
                .chain(std::iter::once((render::QUARANTINED, counts.quarantined())))
                .collect(),
            quarantined: counts.quarantined(),
            by_target: open
                .counts
                .into_iter()
                .map(|((state, contract, target), count)| render::TargetCount {
                    state: State::ALL[state],
                    contract,
                    target,
                    count,
                })
                .collect(),
            oldest: oldest
                .iter()
                .map(|(state, o)| render::Oldest {
                    state,
                    operation_id: o.map(|o| o.operation_id.as_str().to_owned()),
                    tenant: o.map(|o| o.tenant.as_str().to_owned()),
                    created_ms: o.map(|o| o.created_ms),
                    age_ms: o.map(|o| self.now_ms - o.created_ms),
                })
                .collect(),
            since_ms,
            review_resolution: render::Spread::of(durations.review_ms),
            time_to_claim: render::Spread::of(durations.claim_ms),
            first_send_to_final: render::Spread::of(durations.total_ms),
            open_scanned: open.scanned,
            truncated: open.truncated || durations.truncated,
            now_ms: self.now_ms,
        };
        if self.json {
            return to_json(&stats);
        }
        Ok(render::stats(&stats))
    }

    /// Counts the open operations per state, contract and target, reading at most about
    /// `scan_limit` of them (whole pages).
    async fn open_by_target(&self, scan_limit: usize) -> Result<OpenByTarget, CliError> {
        let mut open = OpenByTarget {
            counts: BTreeMap::new(),
            scanned: 0,
            truncated: false,
        };
        let mut q = OperationQuery::scoped(self.scope.clone())
            .states(OPEN_STATES)
            .limit(1000);
        loop {
            let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
            for r in &page.rows {
                *open
                    .counts
                    .entry((
                        State::ALL.iter().position(|s| *s == r.state).unwrap_or(0),
                        r.contract.name.to_string(),
                        host_of(&r.request.url),
                    ))
                    .or_default() += 1;
            }
            open.scanned += page.rows.len();
            match page.next {
                Some(next) if open.scanned < scan_limit => q = q.after(next),
                Some(_) => {
                    open.truncated = true;
                    break;
                }
                None => break,
            }
        }
        Ok(open)
    }

    /// The resolution times of the reviews resolved since `since_ms`, and the creation to final
    /// state of the operations finished since then, over at most `scan_limit` operations.
    async fn durations_since(
        &self,
        since_ms: i64,
        scan_limit: usize,
    ) -> Result<Durations, CliError> {
        let mut d = Durations::default();
        let mut q = OperationQuery::scoped(self.scope.clone())
            .states([State::Succeeded, State::Rejected, State::RetryReady])
            .updated_after(since_ms)
            .limit(200);
        let mut read = 0usize;
        'pages: loop {
            let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
            for r in &page.rows {
                if read >= scan_limit {
                    d.truncated = true;
                    break 'pages;
                }
                read += 1;
                if r.state.is_terminal() {
                    d.total_ms.push(r.updated_ms - r.created_ms);
                }
                let log = self
                    .ledger
                    .evidence(&r.tenant, &r.operation_id)
                    .await
                    .map_err(CliError::ledger)?;
                review_times(&log, &mut d);
            }
            match page.next {
                Some(next) => q = q.after(next),
                None => break,
            }
        }
        Ok(d)
    }
}

/// Adds the review times of one operation's evidence log: escalation to the first claim, and
/// escalation to each resolution that took it out of `MANUAL_REVIEW`.
fn review_times(log: &[EvidenceEntry], d: &mut Durations) {
    let mut handed_over: Option<i64> = None;
    let mut claimed: Option<i64> = None;
    for e in log {
        let into_review = e.entry.to_state == Some(State::ManualReview)
            && e.entry.from_state != Some(State::ManualReview);
        if into_review {
            handed_over.get_or_insert(e.entry.at_ms);
        }
        match &*e.entry.kind {
            "review_claimed" => {
                let start = *handed_over.get_or_insert(e.entry.at_ms);
                if claimed.is_none() {
                    claimed = Some(e.entry.at_ms);
                    d.claim_ms.push(e.entry.at_ms - start);
                }
            }
            "review" if e.entry.to_state.is_some_and(|s| s != State::ManualReview) => {
                if let Some(start) = handed_over.take() {
                    d.review_ms.push(e.entry.at_ms - start);
                }
                claimed = None;
            }
            _ => {}
        }
    }
}
