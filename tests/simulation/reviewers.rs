//! People at the review queue, as people are: each reads an operation's handoff package and the
//! vendor's own records at one moment and decides at a later one, naming the version it read.
//! Two of them may work the same queue: claims are exclusive, and a take-over says why.
//!
//! A reviewer is honest about what it saw: "confirmed not executed" only if the vendor had no
//! side effect for the operation when it looked, "confirmed succeeded" with the vendor's
//! reference when it had one. In `Stale` mode it decides on what it saw at the moment it read
//! (which may be wrong by the time it decides: exactly the view the crate must refuse when
//! evidence arrived in between); in `Fresh` mode it looks at the vendor again just before
//! deciding, but still names the version of the package it read.
//!
//! Every claim and decision is recorded ([`Decision`]) with the last evidence entry its view
//! held, so [`check`](crate::check) can tell whether one took effect on a view older than the
//! evidence.

use std::sync::{Arc, Mutex};

use recoverable_write::ledger::FullLedger;
use recoverable_write::review::{ReviewError, Reviews};
use recoverable_write::state::ReviewDecision;
use recoverable_write::{Ledger, OperationId, State, Tenant};

use crate::vendor::SimVendor;
use crate::world::Rng;
use crate::{Stats, TENANT};

/// One claim or resolution a reviewer asked for.
#[derive(Clone, Debug)]
pub(crate) struct Decision {
    pub(crate) op: OperationId,
    pub(crate) reviewer: &'static str,
    /// The evidence kind its audit entry has: `review_claimed` or `review`.
    pub(crate) kind: &'static str,
    /// What it was, for messages.
    pub(crate) what: String,
    /// The last evidence entry of the view it was decided on.
    pub(crate) view_seq: i64,
    /// The version the reviewer's own claim was made at, after its view: that claim's entry is
    /// not news to it.
    pub(crate) own_claim: Option<u64>,
    /// The version the request named.
    pub(crate) named: u64,
}

/// The planted bug `RW_SIM_PLANT=stale-review` (issue 27 item 1 back): a reviewer names the
/// version it re-reads at the moment it decides, not the version of the view it decided on.
/// That is what the crate did before the fencing rule, when appending evidence did not move the
/// version a decision names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Versions {
    OfTheView,
    ReReadAtDecision,
}

pub(crate) struct Reviewer {
    pub(crate) name: &'static str,
    pub(crate) reviews: Reviews,
    pub(crate) ledger: Arc<dyn FullLedger>,
    pub(crate) vendor: SimVendor,
    pub(crate) ids: Vec<OperationId>,
    pub(crate) rng: Rng,
    pub(crate) versions: Versions,
    pub(crate) decisions: Arc<Mutex<Vec<Decision>>>,
    pub(crate) stats: Arc<Stats>,
}

/// What the reviewer saw at the moment it read.
struct View {
    version: u64,
    last_seq: i64,
    state: State,
    effects: Vec<String>,
}

impl Reviewer {
    pub(crate) async fn run(mut self) {
        let tenant = Tenant::new(TENANT);
        loop {
            tokio::time::sleep(self.rng.ms(100, 1_200)).await;
            let Some((id, state)) = self.pick(&tenant).await else {
                continue;
            };
            // Claim first (the runbook's order), or read first and claim when deciding.
            let claim_first = self.rng.chance(0.5);
            let must_claim = state != State::ManualReview || self.rng.chance(0.5);
            let mut own_claim = None;
            if claim_first && must_claim {
                let Some(view) = self.view(&tenant, &id).await else {
                    continue;
                };
                if self.claim(&tenant, &id, &view).await.is_none() {
                    continue;
                }
            }
            let Some(view) = self.view(&tenant, &id).await else {
                continue;
            };
            // Thinking, asking the vendor's support, lunch.
            tokio::time::sleep(self.rng.ms(0, 1_500)).await;
            let mut named = view.version;
            if !claim_first && must_claim {
                let Some(at) = self.claim(&tenant, &id, &view).await else {
                    continue;
                };
                own_claim = Some(at);
                named = at + 1;
            } else if view.state != State::ManualReview {
                continue;
            }
            let fresh = self.rng.chance(0.4);
            let effects = if fresh {
                self.vendor.effects(id.as_str())
            } else {
                view.effects.clone()
            };
            let decision = if self.rng.chance(0.15) {
                ReviewDecision::KeepPending
            } else if let Some(t) = effects.first() {
                ReviewDecision::ConfirmedSucceeded {
                    remote_ref: Some(t.clone()),
                }
            } else {
                ReviewDecision::ConfirmedNotExecuted
            };
            let named = self.version(&tenant, &id, named).await;
            let what = match &decision {
                ReviewDecision::ConfirmedSucceeded { remote_ref } => {
                    format!(
                        "\"confirmed succeeded ({})\"",
                        remote_ref.as_deref().unwrap_or("")
                    )
                }
                ReviewDecision::ConfirmedNotExecuted => "\"confirmed not executed\"".into(),
                ReviewDecision::KeepPending => "\"keep pending\"".into(),
            };
            if decision != ReviewDecision::KeepPending {
                // A note decides nothing; the rest is checked against the evidence.
                self.decisions.lock().unwrap().push(Decision {
                    op: id.clone(),
                    reviewer: self.name,
                    kind: "review",
                    what: format!("{what} ({} view)", if fresh { "fresh" } else { "stale" }),
                    view_seq: view.last_seq,
                    own_claim,
                    named,
                });
            }
            let r = self
                .reviews
                .resolve_with_reason(
                    &tenant,
                    &id,
                    self.name,
                    "checked the vendor",
                    named,
                    decision,
                )
                .await;
            self.count("resolve", &r);
        }
    }

    /// An open operation, preferring one whose attempt may still be on the wire.
    async fn pick(&mut self, tenant: &Tenant) -> Option<(OperationId, State)> {
        let mut rows = Vec::new();
        for id in &self.ids {
            if let Ok(Some(row)) = self.ledger.get(tenant, id).await {
                rows.push((row.operation_id.clone(), row.state));
            }
        }
        let live: Vec<_> = rows.iter().filter(|r| r.1 == State::InFlight).collect();
        let open: Vec<_> = rows
            .iter()
            .filter(|r| !r.1.is_terminal() && r.1 != State::Prepared)
            .collect();
        let pick = if !live.is_empty() && self.rng.chance(0.5) {
            live[self.rng.range(0, live.len() as u64 - 1) as usize]
        } else if !open.is_empty() {
            open[self.rng.range(0, open.len() as u64 - 1) as usize]
        } else {
            return None;
        };
        Some(pick.clone())
    }

    /// The handoff package and the vendor's records, read now.
    async fn view(&self, tenant: &Tenant, id: &OperationId) -> Option<View> {
        let pkg = self.reviews.handoff(tenant, id).await.ok()?;
        Some(View {
            version: pkg.version,
            last_seq: pkg.evidence.last().map_or(0, |e| e.seq),
            state: pkg.state,
            effects: self.vendor.effects(id.as_str()),
        })
    }

    /// The version to name: the view's, or (planted) the one read now.
    async fn version(&self, tenant: &Tenant, id: &OperationId, of_view: u64) -> u64 {
        match self.versions {
            Versions::OfTheView => of_view,
            Versions::ReReadAtDecision => match self.ledger.get(tenant, id).await {
                Ok(Some(row)) => row.version,
                _ => of_view,
            },
        }
    }

    /// Claims at the view's version, taking over from another reviewer now and then; the
    /// version the claim was made at, if it was.
    async fn claim(&mut self, tenant: &Tenant, id: &OperationId, view: &View) -> Option<u64> {
        let at = self.version(tenant, id, view.version).await;
        let mut decision = Decision {
            op: id.clone(),
            reviewer: self.name,
            kind: "review_claimed",
            what: "claim".into(),
            view_seq: view.last_seq,
            own_claim: None,
            named: at,
        };
        self.decisions.lock().unwrap().push(decision.clone());
        let r = self
            .reviews
            .claim_with_reason(tenant, id, self.name, "checking the vendor", at)
            .await;
        self.count("claim", &r);
        match r {
            Ok(_) => Some(at),
            Err(ReviewError::ClaimedByOther { .. }) if self.rng.chance(0.4) => {
                decision.what = "take-over".into();
                self.decisions.lock().unwrap().push(decision);
                let r = self
                    .reviews
                    .take_over(tenant, id, self.name, "the other reviewer is off shift", at)
                    .await;
                self.count("take-over", &r);
                r.ok().map(|_| at)
            }
            Err(_) => None,
        }
    }

    fn count<T>(&self, what: &str, r: &Result<T, ReviewError>) {
        let how = match r {
            Ok(_) => "accepted",
            Err(ReviewError::VersionMismatch { .. }) => "refused: stale view",
            Err(ReviewError::ClaimedByOther { .. }) => "refused: claimed by another",
            Err(ReviewError::Refused(_)) => "refused by the state machine",
            Err(ReviewError::NotFound { .. }) => "refused: deleted",
            Err(_) => "failed",
        };
        self.stats.bump_owned(format!("review: {what} {how}"));
    }
}

/// The bulk reconciler (issue 30 item 6): an operator who downloads the vendor's export at
/// one moment (one row per side effect the vendor has, in Stripe's layout: the object id and
/// the operation id the request carried), plans from it, and applies the plan later with the
/// versions the plan read. Each planned resolution is recorded as a [`Decision`] on the view
/// the plan read, so [`check`](crate::check) finds any that took effect over evidence that
/// arrived after the plan.
pub(crate) struct BulkReconciler {
    pub(crate) reviews: Reviews,
    pub(crate) vendor: SimVendor,
    pub(crate) ids: Vec<OperationId>,
    pub(crate) rng: Rng,
    pub(crate) decisions: Arc<Mutex<Vec<Decision>>>,
    pub(crate) stats: Arc<Stats>,
}

impl BulkReconciler {
    pub(crate) async fn run(mut self) {
        use recoverable_write::review::bulk::{ExportMapping, RowOutcome, VendorExport};
        let tenant = Tenant::new(TENANT);
        loop {
            tokio::time::sleep(self.rng.ms(400, 2_000)).await;
            let mut csv = String::from("id,Amount,operation_id (metadata)\n");
            for id in &self.ids {
                for t in self.vendor.effects(id.as_str()) {
                    csv.push_str(&format!("{t},12.00,{id}\n"));
                }
            }
            let Ok(export) =
                VendorExport::parse("sim-export.csv", csv.as_bytes(), &ExportMapping::stripe())
            else {
                continue;
            };
            let plan = match self.reviews.bulk_plan(&tenant, &export).await {
                Ok(p) => p,
                Err(e) => {
                    self.stats.bump_owned(format!("bulk: plan refused ({e})"));
                    continue;
                }
            };
            // The export is read, the plan printed; the operator reads it, then applies.
            tokio::time::sleep(self.rng.ms(0, 1_500)).await;
            {
                let mut d = self.decisions.lock().unwrap();
                for r in plan.to_resolve() {
                    let (Some(op), Some(version)) = (&r.operation_id, r.version) else {
                        continue;
                    };
                    d.push(Decision {
                        op: op.clone(),
                        reviewer: "bulk",
                        kind: "review",
                        what: format!("bulk \"confirmed succeeded ({})\"", r.reference),
                        view_seq: r.last_evidence_seq.unwrap_or(0),
                        own_claim: None,
                        named: version,
                    });
                }
            }
            match self
                .reviews
                .bulk_apply(&plan, "bulk", "the vendor's export")
                .await
            {
                Ok(report) => {
                    for r in &report.rows {
                        let how = match r.outcome {
                            RowOutcome::Applied { .. } => "applied",
                            RowOutcome::Stale { .. } => "skipped: stale",
                            RowOutcome::ClaimedByOther { .. } => "skipped: claimed by another",
                            RowOutcome::Refused { .. } => "skipped: refused",
                        };
                        self.stats.bump_owned(format!("bulk: row {how}"));
                    }
                }
                Err(e) => self.stats.bump_owned(format!("bulk: apply failed ({e})")),
            }
        }
    }
}
