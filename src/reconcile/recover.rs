//! Query first: what the engine does with one claimed operation whose outcome is unknown. Its
//! budget and window first; then a lookup through its [`Reconciler`], applied through the state
//! machine; then, still unknown, a same-key replay the contract makes safe; and a person when
//! there is no safe path at all.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::Reconciler;
use super::recoverer::{Recoverer, RecoveryReport, first_sent_ms};
use crate::authorize::Access;
use crate::contract::Contract;
use crate::core::engine::{self, Applied, Commit, Extras};
use crate::evidence::Evidence;
use crate::ledger::{LedgerError, OperationRecord};
use crate::state::{Event, State, transition};

impl Recoverer {
    /// Works on one claimed row. `None`: the row moved on and our result was refused.
    pub(super) async fn recover(
        &self,
        row: OperationRecord,
        report: &mut RecoveryReport,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        if matches!(row.state, State::RetryReady | State::Prepared) {
            return self.replay(row, report).await;
        }
        // Budget and window first: the pure function says whether recovery may go on.
        if let Some(reason) = self.recovery_spent(&row) {
            return self.escalate(&row, reason).await;
        }
        let contract = self.contract_for(&row);
        let reconciler = self.reconciler_of(&row);

        let mut row = row;
        if let Some(reconciler) = &reconciler {
            row = match self
                .look_up(row, &**reconciler, contract.as_deref(), report)
                .await?
            {
                ControlFlow::Continue(still_unknown) => still_unknown,
                ControlFlow::Break(done) => return Ok(done),
            };
        }
        row = match self
            .replay_if_safe(row, contract.as_deref(), report)
            .await?
        {
            ControlFlow::Continue(row) => row,
            ControlFlow::Break(done) => return Ok(done),
        };
        if reconciler.is_none() {
            return self
                .escalate(
                    &row,
                    format!(
                        "no lookup for contract {:?} and no safe same-key replay",
                        row.contract.name
                    ),
                )
                .await;
        }
        Ok(Some(row))
    }

    /// Why recovery may not go on (its budget or window is spent), as the state machine says.
    fn recovery_spent(&self, row: &OperationRecord) -> Option<String> {
        match transition(
            &row.snapshot(),
            &Event::ClaimRecovery,
            engine::clock(&self.shared),
        ) {
            Ok(t) if t.to == State::ManualReview => {
                Some(t.reason.unwrap_or_else(|| "recovery budget spent".into()))
            }
            _ => None,
        }
    }

    /// The contract the operation started with, found by name and content hash.
    pub(super) fn contract_for(&self, row: &OperationRecord) -> Option<Arc<Contract>> {
        let found = self.shared.contracts.find(&row.contract).cloned();
        if found.is_none() {
            tracing::warn!(
                contract = %row.contract.name,
                "the operation's contract is no longer configured with the same content; no replay path"
            );
        }
        found
    }

    /// The reconciler for the operation's contract, or the default one.
    fn reconciler_of(&self, row: &OperationRecord) -> Option<Arc<dyn Reconciler>> {
        self.by_contract
            .get(&*row.contract.name)
            .or(self.default_reconciler.as_ref())
            .cloned()
    }

    /// Asks the vendor (with query permission) and applies the answer through the state
    /// machine. `Continue`: the row, still `UNKNOWN`; `Break`: what the engine did with it (a
    /// replay the answer allowed, an escalation, a deferral, or the row as the answer left it).
    async fn look_up(
        &self,
        row: OperationRecord,
        reconciler: &dyn Reconciler,
        contract: Option<&Contract>,
        report: &mut RecoveryReport,
    ) -> Result<ControlFlow<Option<OperationRecord>, OperationRecord>, LedgerError> {
        if let Err(denied) = self.shared.authorizer.check(&row, Access::Query).await {
            return self
                .escalate(&row, format!("lookup not authorized: {}", denied.reason))
                .await
                .map(ControlFlow::Break);
        }
        tracing::debug!("looking the operation up");
        let looked_up = reconciler.reconcile_with_answer(&row);
        let (evidence, answer) = match tokio::time::timeout(self.lease / 2, looked_up).await {
            Ok(answered) => answered,
            Err(_) => (
                Evidence::unknown("lookup abandoned at half the recovery lease"),
                None,
            ),
        };
        report.lookups += 1;
        tracing::info!(evidence = evidence.label(), "lookup answered");
        // An eventually consistent lookup (a list, a search) may miss a write that happened:
        // before the contract's settle time a miss is no evidence at all, and uses no query.
        if matches!(evidence, Evidence::Unknown { .. })
            && let Some(settled_at) = settle_end(&row, contract)
            && self.shared.clock.now_ms() < settled_at
        {
            return self
                .defer(
                    &row,
                    settled_at,
                    "the lookup found nothing before the contract's settle time: no evidence yet",
                )
                .await
                .map(ControlFlow::Break);
        }
        // What the lookup found lets no byte leave: a replay it allows is sent only after a
        // durable claim of its own, which commits this first. Committed without waiting for
        // durability, as an attempt's result is; a crash that loses it costs a second lookup.
        let applied = engine::apply_event_as(
            &self.shared,
            &row,
            Event::LookupResult(evidence.clone()),
            "lookup",
            // The vendor's own answer, when it resolves the operation (bounded, redacted).
            Extras {
                note: answer,
                ..Extras::default()
            },
            Commit::Relaxed,
        )
        .await?;
        let row = match applied {
            Applied::Done(r) => r,
            other => {
                return self
                    .settle(&row, other, evidence)
                    .await
                    .map(ControlFlow::Break);
            }
        };
        tracing::info!(state = %row.state, "decision recorded");
        match row.state {
            State::RetryReady => self.replay(row, report).await.map(ControlFlow::Break),
            State::Unknown => Ok(ControlFlow::Continue(row)),
            _ => Ok(ControlFlow::Break(Some(row))),
        }
    }

    /// Path (b), for a row still unknown: a same-key replay the contract makes safe, if this
    /// recoverer can send and may write. Only from `UNKNOWN`: the vendor said a `PROCESSING`
    /// write was accepted, so resending it proves nothing (and the state machine refuses it:
    /// offering it every pass would append a refusal to the log every lease period).
    /// `Continue`: no such replay, the row as it was.
    async fn replay_if_safe(
        &self,
        row: OperationRecord,
        contract: Option<&Contract>,
        report: &mut RecoveryReport,
    ) -> Result<ControlFlow<Option<OperationRecord>, OperationRecord>, LedgerError> {
        if row.state != State::Unknown {
            return Ok(ControlFlow::Continue(row));
        }
        let (Some(reason), Some(_)) = (self.replay_safe(&row, contract), &self.replay) else {
            return Ok(ControlFlow::Continue(row));
        };
        if let Err(denied) = self.shared.authorizer.check(&row, Access::Write).await {
            // Queries go on; nothing is sent (D25).
            tracing::warn!(%denied, "replay would be safe but write permission is revoked");
            return Ok(ControlFlow::Continue(row));
        }
        let applied = engine::apply_event(
            &self.shared,
            &row,
            Event::ReplaySafe {
                reason: reason.clone(),
            },
            "replay_safe",
            Extras::default(),
        )
        .await?;
        if let Applied::Done(r) = &applied {
            tracing::info!(state = %r.state, %reason, "decision recorded");
        }
        match applied {
            Applied::Done(r) if r.state == State::RetryReady => self.replay(r, report).await,
            Applied::Done(r) => Ok(Some(r)),
            other => {
                self.settle(&row, other, Evidence::unknown(reason.clone()))
                    .await
            }
        }
        .map(ControlFlow::Break)
    }
}

/// When the contract's settle time after the first send ends, if it has one (a replay's own miss
/// after it is weak evidence and uses a query: safe, if not thrifty).
fn settle_end(row: &OperationRecord, contract: Option<&Contract>) -> Option<i64> {
    let settle = i64::try_from(contract?.settle_secs?)
        .ok()?
        .saturating_mul(1000);
    Some(first_sent_ms(row)?.saturating_add(settle))
}
