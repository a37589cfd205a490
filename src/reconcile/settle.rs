//! How the recovery engine leaves a row it could not finish: deferred to a later pass (no
//! state change, no budget used), escalated to a person, or, when the row moved on meanwhile,
//! with its refused result kept as late evidence.

use std::time::Duration;

use super::recoverer::Recoverer;
use crate::core::engine::{self, Applied, Extras};
use crate::evidence::Evidence;
use crate::ledger::{LedgerError, OperationRecord};
use crate::state::{Event, Transition};

impl Recoverer {
    /// A resend that cannot go now waits for the next pass, or hands over once the window can
    /// no longer fit an attempt.
    pub(super) async fn wait_or_escalate(
        &self,
        row: &OperationRecord,
        why: &str,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let now = self.shared.clock.now_ms();
        let fits = row
            .deadline_ms
            .is_none_or(|d| d - now >= row.policy.attempt_timeout_ms as i64);
        if !fits {
            return self
                .escalate(row, format!("{why}; the recovery window is spent"))
                .await;
        }
        let next = now
            + row
                .policy
                .query_delay(row.queries_used, None, self.shared.clock.jitter())
                .max(Duration::from_millis(row.policy.query_backoff_base_ms))
                .as_millis() as i64;
        self.defer(row, next, why).await
    }

    /// Leaves the operation as it is until `next_ms`, with a `deferred` entry saying why: no
    /// state change, no budget used. Committed without waiting for durability
    /// ([`Commit::Relaxed`](engine::Commit::Relaxed)): a lost deferral only brings the next
    /// check forward.
    pub(super) async fn defer(
        &self,
        row: &OperationRecord,
        next_ms: i64,
        why: &str,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let now = self.shared.clock.now_ms();
        tracing::debug!(in_ms = next_ms - now, %why, "deferred to a later pass");
        let t = Transition {
            to: row.state,
            bump_generation: false,
            may_have_applied: row.may_have_applied,
            attempts_used: row.attempts_used,
            queries_used: row.queries_used,
            deadline_ms: row.deadline_ms,
            next_check_ms: Some(next_ms),
            last_result: None,
            remote_ref: None,
            reason: None,
            operation_level: false,
            keep_lease: false,
        };
        let entry = crate::ledger::NewEvidence {
            attempt_id: None,
            generation: row.generation,
            kind: "deferred".into(),
            from_state: None,
            to_state: None,
            evidence: None,
            note: Some(why.to_owned()),
            at_ms: now,
        };
        let update = row.update_for(&t, None, None, None, entry, now);
        self.ledger().record(update).await
    }

    pub(super) async fn escalate(
        &self,
        row: &OperationRecord,
        reason: String,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        tracing::warn!(operation = %row.operation_id, %reason, "escalating to manual review");
        let applied = engine::apply_event(
            &self.shared,
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

    pub(super) async fn settle(
        &self,
        row: &OperationRecord,
        applied: Applied,
        evidence: Evidence,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        match applied {
            Applied::Done(r) => Ok(Some(r)),
            Applied::Refused(refused) => {
                tracing::warn!(%refused, "state machine refused the recovery result");
                engine::append_late(&self.shared, row, None, evidence, refused.to_string()).await?;
                Ok(None)
            }
            Applied::Stale => {
                engine::append_late(
                    &self.shared,
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
}
