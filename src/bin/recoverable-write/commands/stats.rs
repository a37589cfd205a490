//! `stats`: counts by state and target, the oldest stuck items, review resolution times.

use std::collections::BTreeMap;

use recoverable_write::ledger::{OPEN_STATES, OperationQuery, WATCHED_STATES};
use recoverable_write::state::State;

use super::{Ctx, host_of, to_json};
use crate::args::StatsArgs;
use crate::error::CliError;
use crate::render;

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
        // Open operations per state, contract and target.
        // Keyed by the state's position in `State::ALL` (states have no order of their own).
        let mut by_target: BTreeMap<(usize, String, String), u64> = BTreeMap::new();
        let mut scanned = 0usize;
        let mut truncated = false;
        let mut q = OperationQuery::scoped(self.scope.clone())
            .states(OPEN_STATES)
            .limit(1000);
        loop {
            let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
            for r in &page.rows {
                *by_target
                    .entry((
                        State::ALL.iter().position(|s| *s == r.state).unwrap_or(0),
                        r.contract.name.to_string(),
                        host_of(&r.request.url),
                    ))
                    .or_default() += 1;
            }
            scanned += page.rows.len();
            match page.next {
                Some(next) if scanned < a.scan_limit => q = q.after(next),
                Some(_) => {
                    truncated = true;
                    break;
                }
                None => break,
            }
        }
        // Resolution times of reviews resolved within the period.
        let since_ms = self
            .now_ms
            .saturating_sub(i64::try_from(a.since.as_millis()).unwrap_or(i64::MAX));
        let mut review_ms: Vec<i64> = Vec::new();
        let mut claim_ms: Vec<i64> = Vec::new();
        let mut total_ms: Vec<i64> = Vec::new();
        let mut q = OperationQuery::scoped(self.scope.clone())
            .states([State::Succeeded, State::Rejected, State::RetryReady])
            .updated_after(since_ms)
            .limit(200);
        let mut read = 0usize;
        'pages: loop {
            let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
            for r in &page.rows {
                if read >= a.scan_limit {
                    truncated = true;
                    break 'pages;
                }
                read += 1;
                if r.state.is_terminal() {
                    total_ms.push(r.updated_ms - r.created_ms);
                }
                let log = self
                    .ledger
                    .evidence(&r.tenant, &r.operation_id)
                    .await
                    .map_err(CliError::ledger)?;
                let mut handed_over: Option<i64> = None;
                let mut claimed: Option<i64> = None;
                for e in &log {
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
                                claim_ms.push(e.entry.at_ms - start);
                            }
                        }
                        "review" if e.entry.to_state.is_some_and(|s| s != State::ManualReview) => {
                            if let Some(start) = handed_over.take() {
                                review_ms.push(e.entry.at_ms - start);
                            }
                            claimed = None;
                        }
                        _ => {}
                    }
                }
            }
            match page.next {
                Some(next) => q = q.after(next),
                None => break,
            }
        }
        let stats = render::Stats {
            counts: counts
                .iter()
                .map(|(state, n)| (state.as_str(), n))
                .chain(std::iter::once((render::QUARANTINED, counts.quarantined())))
                .collect(),
            quarantined: counts.quarantined(),
            by_target: by_target
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
            review_resolution: render::Spread::of(review_ms),
            time_to_claim: render::Spread::of(claim_ms),
            first_send_to_final: render::Spread::of(total_ms),
            open_scanned: scanned,
            truncated,
            now_ms: self.now_ms,
        };
        if self.json {
            return to_json(&stats);
        }
        Ok(render::stats(&stats))
    }
}
