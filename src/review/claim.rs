//! Claims and take-overs: a reviewer takes an operation (an exclusive claim, fenced by the
//! version read), or takes it over from the reviewer who holds it, audited with both names.

use super::audit::{clean, required};
use super::{EvidenceSummary, ReviewError, Reviews, audit_note, check_version};
use crate::ledger::OperationRecord;
use crate::operation::{OperationId, Tenant};
use crate::state::{Event, State};

impl Reviews {
    /// Takes the operation over for `reviewer`, if it is still at `expected_version`. From any
    /// non-terminal state: automatic send eligibility is revoked and the engine's generation is
    /// fenced out. Attempts already on the wire cannot be recalled; their results are appended as
    /// evidence.
    ///
    /// The audit entry (evidence kind `review_claimed`) records who, when and the version
    /// transition, but no reason: prefer [`claim_with_reason`](Self::claim_with_reason).
    pub async fn claim(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        expected_version: u64,
    ) -> Result<OperationRecord, ReviewError> {
        self.claim_inner(tenant, op, reviewer, None, expected_version, false)
            .await
    }

    /// [`claim`](Self::claim), with the reviewer's reason recorded in the audit entry:
    /// `claimed by {reviewer}; version {n} -> {n+1}; reason: {reason}` (evidence kind
    /// `review_claimed`, at the time of the claim). [`operator::audit_trail`](crate::operator::audit_trail) reads it back.
    ///
    /// # Errors
    ///
    /// [`ReviewError::ReasonRequired`] if `reason` is blank; otherwise as [`claim`](Self::claim).
    pub async fn claim_with_reason(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        reason: &str,
        expected_version: u64,
    ) -> Result<OperationRecord, ReviewError> {
        let reason = required(reason)?;
        self.claim_inner(tenant, op, reviewer, Some(&reason), expected_version, false)
            .await
    }

    /// Takes over an operation another reviewer holds, if it is still at `expected_version`:
    /// their claim ends and the operation is yours, as after [`claim`](Self::claim). The audit
    /// entry names both: `taken over from {holder} by {reviewer}; version {n} -> {n+1};
    /// reason: {reason}`. On an operation nobody else holds it is a plain claim.
    ///
    /// # Errors
    ///
    /// [`ReviewError::ReasonRequired`] if `reason` is blank (a take-over must say why);
    /// otherwise as [`claim`](Self::claim).
    pub async fn take_over(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        reason: &str,
        expected_version: u64,
    ) -> Result<OperationRecord, ReviewError> {
        let reason = required(reason)?;
        self.claim_inner(tenant, op, reviewer, Some(&reason), expected_version, true)
            .await
    }

    /// A claim, or with `take_over` a take-over of another reviewer's claim (audited with both
    /// names); without it, another reviewer's claim refuses this one.
    async fn claim_inner(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        reason: Option<&str>,
        expected_version: u64,
        take_over: bool,
    ) -> Result<OperationRecord, ReviewError> {
        let (row, holder) = self.read_with_holder(tenant, op).await?;
        let reviewer = clean(reviewer);
        check_version(&row, expected_version)?;
        let action = match holder {
            Some(holder) if holder != reviewer && take_over => {
                format!("taken over from {holder} by {reviewer}")
            }
            other => {
                check_holder(&row, other.as_deref(), &reviewer)?;
                format!("claimed by {reviewer}")
            }
        };
        self.apply(
            &row,
            expected_version,
            Event::ReviewClaim {
                reviewer: reviewer.clone(),
            },
            "review_claimed",
            audit_note(
                &action,
                expected_version,
                Some(expected_version + 1),
                reason,
            ),
        )
        .await
    }

    /// The operation and the reviewer who holds it now, if anyone does (see [`claim_holder`]).
    pub(super) async fn read_with_holder(
        &self,
        tenant: &Tenant,
        op: &OperationId,
    ) -> Result<(OperationRecord, Option<String>), ReviewError> {
        let row = self.read(tenant, op).await?;
        if row.state != State::ManualReview {
            return Ok((row, None));
        }
        let log: Vec<EvidenceSummary> = self
            .shared
            .ledger
            .evidence(tenant, op)
            .await?
            .iter()
            .map(EvidenceSummary::of)
            .collect();
        let holder = claim_holder(row.state, &log).and_then(reviewer_of);
        Ok((row, holder))
    }
}

/// The entry of the claim that holds an operation in `state` now, given its log: the latest
/// entry that put the operation in (or kept it in) `MANUAL_REVIEW`, if that was a reviewer's
/// claim or take-over. `None` when the operation is not in review, or the engine escalated it
/// and nobody has claimed it since. A resolution moves the operation out of review, which
/// ends the claim; a kept-pending note does not.
pub(crate) fn claim_holder(state: State, log: &[EvidenceSummary]) -> Option<&EvidenceSummary> {
    if state != State::ManualReview {
        return None;
    }
    log.iter()
        .rev()
        .find(|e| matches!(e.transition, Some((_, Some(State::ManualReview)))))
        .filter(|e| e.kind == "review_claimed")
}

/// The reviewer named by a claim's audit note ([`audit_note`]: `claimed by {reviewer}; …` or
/// `taken over from {holder} by {reviewer}; …`).
fn reviewer_of(claim: &EvidenceSummary) -> Option<String> {
    let note = claim.note.as_deref()?;
    let head = note.split_once("; version ").map_or(note, |(h, _)| h);
    head.rsplit_once(" by ").map(|(_, who)| who.to_owned())
}

/// A claim is exclusive: only its holder acts on the operation, or someone who takes it over.
pub(super) fn check_holder(
    row: &OperationRecord,
    holder: Option<&str>,
    reviewer: &str,
) -> Result<(), ReviewError> {
    match holder {
        Some(holder) if holder != reviewer => Err(ReviewError::ClaimedByOther {
            operation: row.operation_id.clone(),
            holder: holder.to_owned(),
        }),
        _ => Ok(()),
    }
}
