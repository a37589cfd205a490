//! Applying a plan: each planned resolution through [`Reviews::resolve_with_reason`] at the
//! version the plan read (a compare-and-swap), with an audit reason naming the export file,
//! its digest and the row; what happened to each row.

use serde::{Deserialize, Serialize};

use super::plan::BulkPlan;
use super::{BulkError, Reviews};
use crate::operation::OperationId;
use crate::review::ReviewError;
use crate::state::{ReviewDecision, State};

/// What happened to one planned resolution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RowOutcome {
    /// Resolved as succeeded with the row's reference.
    Applied {
        /// The version after.
        version: u64,
    },
    /// The operation changed since the plan read it (evidence arrived, someone acted):
    /// skipped. Plan again and look at it.
    Stale {
        /// The version the plan read.
        planned: u64,
        /// The version now.
        current: u64,
    },
    /// Another reviewer holds the operation: skipped.
    ClaimedByOther {
        /// Who.
        holder: String,
    },
    /// Refused (its state no longer allows it, or it is gone): skipped.
    Refused {
        /// Why.
        why: String,
    },
}

/// One planned resolution and what happened to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedRow {
    /// The export row.
    pub row: usize,
    /// The operation.
    pub operation_id: OperationId,
    /// The reference recorded (or that would have been).
    pub reference: String,
    /// What happened.
    pub outcome: RowOutcome,
}

/// What [`Reviews::bulk_apply`] did, row by row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkReport {
    /// The export's file name.
    pub file_name: String,
    /// The export's SHA-256.
    pub sha256: String,
    /// Every planned resolution, in export order.
    pub rows: Vec<AppliedRow>,
}

impl BulkReport {
    /// How many rows were applied.
    pub fn applied(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| matches!(r.outcome, RowOutcome::Applied { .. }))
            .count()
    }

    /// The rows that were skipped (stale, claimed by another reviewer, refused).
    pub fn skipped(&self) -> impl Iterator<Item = &AppliedRow> {
        self.rows
            .iter()
            .filter(|r| !matches!(r.outcome, RowOutcome::Applied { .. }))
    }
}

/// The audit reason of a bulk resolution: the reviewer's reason, then the export's file
/// name, SHA-256 and row (so the trail names exactly the evidence used).
pub fn bulk_reason(reason: &str, file_name: &str, sha256: &str, row: usize) -> String {
    let file: String = file_name
        .chars()
        .map(|c| if c.is_control() || c == ';' { '_' } else { c })
        .take(120)
        .collect();
    format!(
        "{} (vendor export {file}, sha256 {sha256}, row {row})",
        reason.trim()
    )
}

impl Reviews {
    /// Carries out `plan`'s resolutions ([`BulkPlan::to_resolve`]) as `reviewer`: each is
    /// [`resolve_with_reason`](Self::resolve_with_reason) with
    /// [`ReviewDecision::ConfirmedSucceeded`] and the row's reference, at the version the plan
    /// read, with the reason `{reason} (vendor export {file}, sha256 {digest}, row {n})`.
    /// A row whose operation changed since the plan (new evidence, another decision) is
    /// reported [`RowOutcome::Stale`] and skipped, one another reviewer holds
    /// [`RowOutcome::ClaimedByOther`], one the state machine refuses [`RowOutcome::Refused`];
    /// the others are applied. Nothing is ever resolved as not executed.
    ///
    /// # Errors
    ///
    /// [`BulkError::ReasonRequired`] if `reason` is blank (nothing done);
    /// [`BulkError::Ledger`] if the ledger fails (the rows before it stay applied: plan again
    /// to see where things stand).
    pub async fn bulk_apply(
        &self,
        plan: &BulkPlan,
        reviewer: &str,
        reason: &str,
    ) -> Result<BulkReport, BulkError> {
        if reason.trim().is_empty() {
            return Err(BulkError::ReasonRequired);
        }
        let mut rows = Vec::new();
        for r in plan.to_resolve() {
            let (Some(op), Some(version)) = (&r.operation_id, r.version) else {
                continue;
            };
            let why = bulk_reason(reason, &plan.file_name, &plan.sha256, r.row);
            let result = self
                .resolve_with_reason(
                    &plan.tenant,
                    op,
                    reviewer,
                    &why,
                    version,
                    ReviewDecision::ConfirmedSucceeded {
                        remote_ref: Some(r.reference.clone()),
                    },
                )
                .await;
            let outcome = match result {
                Ok(done) => RowOutcome::Applied {
                    version: done.version,
                },
                Err(ReviewError::VersionMismatch { current, .. }) => RowOutcome::Stale {
                    planned: version,
                    current,
                },
                Err(ReviewError::ClaimedByOther { holder, .. }) => {
                    RowOutcome::ClaimedByOther { holder }
                }
                Err(ReviewError::Ledger(e)) => return Err(BulkError::Ledger(e)),
                Err(e @ ReviewError::NotFound { .. }) => RowOutcome::Refused { why: e.to_string() },
                Err(ReviewError::Refused(r)) => RowOutcome::Refused {
                    why: format!("{r} (not {})", State::ManualReview),
                },
                Err(e) => RowOutcome::Refused { why: e.to_string() },
            };
            rows.push(AppliedRow {
                row: r.row,
                operation_id: op.clone(),
                reference: r.reference.clone(),
                outcome,
            });
        }
        Ok(BulkReport {
            file_name: plan.file_name.clone(),
            sha256: plan.sha256.clone(),
            rows,
        })
    }
}
