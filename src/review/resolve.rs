//! Resolutions: a reviewer's decision on an operation in review (confirmed succeeded,
//! confirmed not executed and re-approved, kept pending), and the acknowledgement of a
//! contradiction recorded on a finished one.

use super::audit::{clean, required};
use super::claim::check_holder;
use super::{ReviewError, Reviews, audit_note, check_version};
use crate::contradiction::CONTRADICTION_ACKNOWLEDGED;
use crate::ledger::{NewEvidence, OperationRecord};
use crate::operation::{OperationId, Tenant};
use crate::state::{Event, Refused, ReviewDecision, State};

impl Reviews {
    /// Resolves a `MANUAL_REVIEW` operation. `KeepPending` appends a note and changes nothing but
    /// the version (forms read before the note are then stale).
    ///
    /// Fenced twice: the operation must still be at `expected_version` (evidence appended since,
    /// such as a late success, advanced it), and no other reviewer may hold it
    /// ([`ReviewError::ClaimedByOther`]).
    ///
    /// The audit entry (evidence kind `review`) records who, when, the decision and the version
    /// transition, but no reason: prefer [`resolve_with_reason`](Self::resolve_with_reason).
    pub async fn resolve(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        expected_version: u64,
        decision: ReviewDecision,
    ) -> Result<OperationRecord, ReviewError> {
        self.resolve_inner(tenant, op, reviewer, None, expected_version, decision)
            .await
    }

    /// [`resolve`](Self::resolve), with the reviewer's reason recorded in the audit entry, e.g.
    /// `confirmed succeeded (W731) by {reviewer}; version {n} -> {n+1}; reason: {reason}`
    /// (evidence kind `review`; a kept-pending note also advances the version, so every form
    /// read before it is stale). [`operator::audit_trail`](crate::operator::audit_trail) reads it back.
    ///
    /// # Errors
    ///
    /// [`ReviewError::ReasonRequired`] if `reason` is blank; otherwise as
    /// [`resolve`](Self::resolve).
    pub async fn resolve_with_reason(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        reason: &str,
        expected_version: u64,
        decision: ReviewDecision,
    ) -> Result<OperationRecord, ReviewError> {
        let reason = required(reason)?;
        self.resolve_inner(
            tenant,
            op,
            reviewer,
            Some(&reason),
            expected_version,
            decision,
        )
        .await
    }

    async fn resolve_inner(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        reason: Option<&str>,
        expected_version: u64,
        decision: ReviewDecision,
    ) -> Result<OperationRecord, ReviewError> {
        let (row, holder) = self.read_with_holder(tenant, op).await?;
        let reviewer = clean(reviewer);
        check_version(&row, expected_version)?;
        check_holder(&row, holder.as_deref(), &reviewer)?;
        if decision == ReviewDecision::KeepPending {
            return self
                .keep_pending(&row, &reviewer, reason, expected_version)
                .await;
        }
        let action = match &decision {
            ReviewDecision::ConfirmedSucceeded { remote_ref } => format!(
                "confirmed succeeded ({}) by {reviewer}",
                remote_ref
                    .as_deref()
                    .map_or_else(|| "no reference".into(), clean)
            ),
            ReviewDecision::ConfirmedNotExecuted => {
                format!("confirmed not executed and re-approved by {reviewer}")
            }
            ReviewDecision::KeepPending => unreachable!("handled above"),
        };
        self.apply(
            &row,
            expected_version,
            Event::Review(decision),
            "review",
            audit_note(
                &action,
                expected_version,
                Some(expected_version + 1),
                reason,
            ),
        )
        .await
    }

    /// A kept-pending note: the operation stays in review, and the note advances its version.
    async fn keep_pending(
        &self,
        row: &OperationRecord,
        reviewer: &str,
        reason: Option<&str>,
        expected_version: u64,
    ) -> Result<OperationRecord, ReviewError> {
        if row.state != State::ManualReview {
            return Err(ReviewError::Refused(Refused {
                from: row.state,
                event: "review",
                detail: Some("only an operation in MANUAL_REVIEW can be kept pending".into()),
            }));
        }
        self.shared
            .ledger
            .append_evidence(
                &row.tenant,
                &row.operation_id,
                NewEvidence {
                    attempt_id: None,
                    generation: row.generation,
                    kind: "review".into(),
                    from_state: None,
                    to_state: None,
                    evidence: None,
                    note: Some(audit_note(
                        &format!("kept pending by {reviewer}"),
                        expected_version,
                        Some(expected_version + 1),
                        reason,
                    )),
                    at_ms: self.shared.clock.now_ms(),
                },
            )
            .await?;
        // The note advanced the version: every form read before it is now stale, so no one
        // acts without having seen it.
        self.read(&row.tenant, &row.operation_id).await
    }

    /// Acknowledges the contradictions recorded on an operation (evidence that arrived after
    /// its final state and says otherwise), if it is still at `expected_version`: the reviewer
    /// has seen them and dealt with what they mean at the vendor. The operation leaves the
    /// review queue; its state does not change (a final state stays final). The audit entry
    /// (evidence kind `contradiction_acknowledged`) reads `contradiction acknowledged by
    /// {reviewer}; version {n} -> {n+1}; reason: {reason}`.
    ///
    /// Fenced by the version: a contradiction that arrived after the reviewer read the
    /// operation advanced it, so the acknowledgement is refused as stale and the reviewer sees
    /// the new one first.
    ///
    /// # Errors
    ///
    /// [`ReviewError::ReasonRequired`] if `reason` is blank; [`ReviewError::NotFound`];
    /// [`ReviewError::VersionMismatch`] if the operation moved; [`ReviewError::Refused`] if it
    /// carries no contradiction to acknowledge.
    pub async fn acknowledge_contradiction(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        reason: &str,
        expected_version: u64,
    ) -> Result<OperationRecord, ReviewError> {
        let reason = required(reason)?;
        let row = self.read(tenant, op).await?;
        check_version(&row, expected_version)?;
        if row.contradiction_ms.is_none() {
            return Err(ReviewError::Refused(Refused {
                from: row.state,
                event: "acknowledge_contradiction",
                detail: Some("the operation carries no contradiction to acknowledge".into()),
            }));
        }
        let reviewer = clean(reviewer);
        let entry = NewEvidence {
            attempt_id: None,
            generation: row.generation,
            kind: CONTRADICTION_ACKNOWLEDGED.into(),
            from_state: Some(row.state),
            to_state: Some(row.state),
            evidence: None,
            note: Some(audit_note(
                &format!("contradiction acknowledged by {reviewer}"),
                expected_version,
                Some(expected_version + 1),
                Some(&reason),
            )),
            at_ms: self.shared.clock.now_ms(),
        };
        match self
            .listing
            .acknowledge_contradiction(tenant, op, expected_version, entry)
            .await?
        {
            Some(done) => Ok(done),
            None => {
                let now = self.read(tenant, op).await?;
                Err(ReviewError::VersionMismatch {
                    operation: op.clone(),
                    expected: expected_version,
                    current: now.version,
                })
            }
        }
    }
}
