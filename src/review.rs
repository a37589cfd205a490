//! Manual review: the handoff package, the reviewer's claim, and the resolutions.
//!
//! When evidence runs out the recovery engine moves an operation to `MANUAL_REVIEW` and stops
//! granting automatic send rights. A reviewer then:
//!
//! 1. reads the [`HandoffPackage`] ([`Reviews::handoff`]): the operation, a redacted parameter
//!    summary, every attempt with its id and time, all evidence, the budget used and the current
//!    authorization state;
//! 2. claims it ([`Reviews::claim_with_reason`], or [`Reviews::claim`] without a reason) with a
//!    compare-and-swap on the state version it read. A claim also works on an operation that is
//!    not yet in review (an `UNKNOWN` one the engine is about to replay): it revokes automatic
//!    send rights at once and fences out the engine's generation;
//! 3. resolves it ([`Reviews::resolve_with_reason`] or [`Reviews::resolve`]): confirmed
//!    succeeded (with the vendor's reference), confirmed not executed and re-approved (back to
//!    `RETRY_READY` under a fresh budget, same key and bytes), or keep pending.
//!
//! Every claim and resolution appends an audit entry to the operation's evidence (kinds
//! `review_claimed` and `review`): who, when (the entry's time), the version transition and the
//! reason ([`audit_note`]); [`operator::audit_trail`](crate::operator::audit_trail) reads them
//! back.
//!
//! A row this version cannot decode is quarantined by the recovery engine and skipped until a
//! person looks: [`Reviews::quarantine_package`] shows it by its raw columns (redacted like the
//! handoff package), and [`Reviews::release_quarantined`] gives it back to recovery once a
//! version that can read it runs (audited as `quarantine_released`).
//!
//! Late responses and reconciler answers after the claim are appended as evidence and published
//! as [`Notice::LateEvidence`](crate::Notice::LateEvidence); they never restore automatic sends.
//!
//! A finished operation can be in the queue too: one whose final state a vendor's later word
//! contradicted (see [`contradiction`](crate::contradiction)). It stays final; a person checks
//! what happened at the vendor (a second charge, a refund to make) and then acknowledges it
//! ([`Reviews::acknowledge_contradiction`]), which takes it out of the queue.
//! Seed 000: a reviewer must not take `MANUAL_REVIEW` as proof that the old request was
//! cancelled — the vendor's deduplication stays essential.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::authorize::Access;
use crate::contradiction::CONTRADICTION_ACKNOWLEDGED;
use crate::core::Shared;
use crate::core::engine::{self, Applied, Extras};
use crate::encoding::first_chars;
use crate::evidence::Evidence;
use crate::ledger::{Ledger, LedgerError, NewEvidence, OperationRecord};
use crate::operation::{OperationId, Tenant};
use crate::state::{Event, Refused, ReviewDecision, State};

pub(crate) mod quarantine;
pub use quarantine::{QuarantinePackage, RawParameters, UnreadableColumn, quarantine_problem};

/// Why a review action failed. Nothing changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReviewError {
    /// No such operation for this tenant.
    #[error("no operation {operation} for tenant {tenant}")]
    NotFound {
        /// The tenant.
        tenant: Tenant,
        /// The operation.
        operation: OperationId,
    },
    /// The operation changed since the reviewer read it: read the package again.
    #[error("{operation} changed since it was read (version {expected}, now {current})")]
    VersionMismatch {
        /// The operation.
        operation: OperationId,
        /// The version the reviewer acted on.
        expected: u64,
        /// The version now.
        current: u64,
    },
    /// Another reviewer holds the operation (their claim is the latest and nothing resolved it
    /// since): their claim is exclusive. Take it over explicitly with [`Reviews::take_over`],
    /// an audited action that names both of you.
    #[error("{operation} is claimed by {holder}: take it over explicitly to act on it")]
    ClaimedByOther {
        /// The operation.
        operation: OperationId,
        /// The reviewer who holds it.
        holder: String,
    },
    /// The state machine does not allow this in the operation's state.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// [`Reviews::release_quarantined`] of an operation that is not quarantined (never was, or
    /// was released already). Nothing changed.
    #[error("{operation} is not quarantined: there is nothing to release")]
    NotQuarantined {
        /// The operation.
        operation: OperationId,
    },
    /// [`Reviews::release_quarantined`] of a row this version still cannot decode: it stays
    /// quarantined and nothing changed. Upgrade to a version that can read it, then release it.
    #[error(
        "{operation} still cannot be read by this version ({}): it stays quarantined; upgrade \
         to a version that can read it, then release it",
        quarantine::what_is_wrong(.column.as_deref(), .detail)
    )]
    StillUndecodable {
        /// The operation.
        operation: OperationId,
        /// The column that cannot be read.
        column: Option<String>,
        /// What is wrong with it.
        detail: String,
    },
    /// A review action asked for a reason ([`Reviews::claim_with_reason`],
    /// [`Reviews::resolve_with_reason`], [`Reviews::release_quarantined`]) and got an empty
    /// one. Nothing changed.
    #[error("a reason is required: say why, it goes into the operation's audit trail")]
    ReasonRequired,
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Everything a reviewer needs, assembled from the ledger. Serializable for tickets and
/// dashboards. It contains no credentials, and no body value but one: the answer of a lookup
/// that resolved the operation, kept as its evidence entry's note with the contract's secret
/// answer fields replaced by `[redacted]` (see
/// [`Contract::secret_response_fields`](crate::Contract::secret_response_fields)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffPackage {
    /// Tenant.
    pub tenant: Tenant,
    /// Operation id.
    pub operation_id: OperationId,
    /// Action name.
    pub action: String,
    /// The caller's intent reference.
    pub intent_ref: String,
    /// State now.
    pub state: State,
    /// Business result kept while in review.
    pub last_result: Option<State>,
    /// Why it was escalated (or the last reason recorded).
    pub reason: Option<String>,
    /// The state version to pass to [`Reviews::claim`] and [`Reviews::resolve`].
    pub version: u64,
    /// Created (ms since the Unix epoch).
    #[serde(default)]
    pub created_ms: i64,
    /// Last changed (ms since the Unix epoch).
    #[serde(default)]
    pub updated_ms: i64,
    /// When the engine looks next, if it will (ms since the Unix epoch).
    #[serde(default)]
    pub next_check_ms: Option<i64>,
    /// When the current attempt's or the recovery claim's lease runs out (ms since the Unix
    /// epoch).
    #[serde(default)]
    pub lease_until_ms: Option<i64>,
    /// Sticky: some attempt may have been applied by the vendor (its bytes may have arrived).
    #[serde(default)]
    pub may_have_applied: bool,
    /// The generation (fence) now.
    pub generation: u64,
    /// The vendor's reference, if known.
    pub remote_ref: Option<String>,
    /// When evidence contradicting the operation's final state was first recorded, while
    /// nobody has acknowledged it ([`Reviews::acknowledge_contradiction`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contradiction_ms: Option<i64>,
    /// The write as sent, redacted.
    pub parameters: ParameterSummary,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptSummary>,
    /// The whole evidence log, in order.
    pub evidence: Vec<EvidenceSummary>,
    /// What the recovery budget used.
    pub budget: BudgetUsed,
    /// Whether writes and queries are authorized now.
    pub authorization: AuthorizationState,
}

/// The frozen request without values: enough to recognise it, nothing to leak.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParameterSummary {
    /// HTTP method.
    pub method: String,
    /// URL with query values replaced by `…` (and secret path segments stored as
    /// `[redacted]`).
    pub url: String,
    /// Names of the stored (non-secret) headers.
    pub header_names: Vec<String>,
    /// Body size in bytes.
    pub body_bytes: usize,
    /// For a JSON object body: its top-level field names.
    pub body_fields: Vec<String>,
    /// The payload hash the operation is bound to.
    pub payload_hash: String,
    /// The contract name and content hash.
    pub contract: String,
}

/// One send.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptSummary {
    /// Attempt id.
    pub attempt_id: String,
    /// Generation that held send rights.
    pub generation: u64,
    /// When it was registered (ms since the Unix epoch).
    pub registered_ms: i64,
    /// What it produced, if recorded.
    pub result: Option<Evidence>,
}

/// One evidence log entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceSummary {
    /// Position in the log.
    pub seq: i64,
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
    /// What happened.
    pub kind: String,
    /// State before, after.
    pub transition: Option<(Option<State>, Option<State>)>,
    /// The attempt concerned.
    pub attempt_id: Option<String>,
    /// Generation of the writer.
    pub generation: u64,
    /// The classified observation.
    pub evidence: Option<Evidence>,
    /// Notes: the engine's, a reviewer's reason, or the answer of a lookup that resolved the
    /// operation (`lookup answer: …`, at most 16 KiB, secret answer fields `[redacted]`). Never
    /// a credential.
    pub note: Option<String>,
}

impl EvidenceSummary {
    /// The summary of one stored entry.
    pub fn of(e: &crate::ledger::EvidenceEntry) -> Self {
        Self {
            seq: e.seq,
            at_ms: e.entry.at_ms,
            kind: e.entry.kind.to_string(),
            transition: (e.entry.from_state.is_some() || e.entry.to_state.is_some())
                .then_some((e.entry.from_state, e.entry.to_state)),
            attempt_id: e.entry.attempt_id.map(|a| a.to_string()),
            generation: e.entry.generation.0,
            evidence: e.entry.evidence.clone(),
            note: e.entry.note.clone(),
        }
    }
}

/// Budget consumption.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetUsed {
    /// Write attempts used / allowed.
    pub attempts_used: u32,
    /// Allowed write attempts.
    pub max_attempts: u32,
    /// Queries used.
    pub queries_used: u32,
    /// Allowed queries.
    pub max_queries: u32,
    /// End of the recovery window (ms since the Unix epoch).
    pub deadline_ms: Option<i64>,
}

/// Permissions as the [`Authorizer`](crate::Authorizer) answers now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationState {
    /// `None` when writes are allowed, else the reason they are not.
    pub write_denied: Option<String>,
    /// `None` when queries are allowed, else the reason they are not.
    pub query_denied: Option<String>,
}

/// Review operations over a ledger. Get one from
/// [`Handle::reviews`](crate::Handle::reviews) (shares the
/// authorizer and notifier) or [`Reviews::new`].
#[derive(Clone, Debug)]
pub struct Reviews {
    shared: Arc<Shared>,
}

impl Reviews {
    /// Reviews over `ledger`, with no authorizer (everything allowed) and its own notifier.
    pub fn new(ledger: Arc<dyn Ledger>) -> Self {
        Self {
            shared: Arc::new(Shared::new(ledger)),
        }
    }

    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    async fn read(
        &self,
        tenant: &Tenant,
        op: &OperationId,
    ) -> Result<OperationRecord, ReviewError> {
        self.shared
            .ledger
            .get(tenant, op)
            .await?
            .ok_or_else(|| ReviewError::NotFound {
                tenant: tenant.clone(),
                operation: op.clone(),
            })
    }

    /// Assembles the handoff package.
    pub async fn handoff(
        &self,
        tenant: &Tenant,
        op: &OperationId,
    ) -> Result<HandoffPackage, ReviewError> {
        let row = self.read(tenant, op).await?;
        let log = self.shared.ledger.evidence(tenant, op).await?;
        let mut attempts: Vec<AttemptSummary> = Vec::new();
        for e in &log {
            let Some(attempt) = e.entry.attempt_id else {
                continue;
            };
            let id = attempt.to_string();
            match &*e.entry.kind {
                "attempt_registered" => attempts.push(AttemptSummary {
                    attempt_id: id,
                    generation: e.entry.generation.0,
                    registered_ms: e.entry.at_ms,
                    result: None,
                }),
                "attempt_result" | "late_evidence" => {
                    if let Some(a) = attempts.iter_mut().rev().find(|a| a.attempt_id == id)
                        && a.result.is_none()
                    {
                        a.result = e.entry.evidence.clone();
                    }
                }
                _ => {}
            }
        }
        let evidence = log.iter().map(EvidenceSummary::of).collect();
        let authorization = AuthorizationState {
            write_denied: self
                .shared
                .authorizer
                .check(&row, Access::Write)
                .await
                .err()
                .map(|d| d.reason),
            query_denied: self
                .shared
                .authorizer
                .check(&row, Access::Query)
                .await
                .err()
                .map(|d| d.reason),
        };
        Ok(HandoffPackage {
            parameters: summarize(&row),
            budget: BudgetUsed {
                attempts_used: row.attempts_used,
                max_attempts: row.policy.max_attempts,
                queries_used: row.queries_used,
                max_queries: row.policy.max_queries,
                deadline_ms: row.deadline_ms,
            },
            tenant: row.tenant,
            operation_id: row.operation_id,
            action: row.action.to_string(),
            intent_ref: row.intent_ref.to_string(),
            state: row.state,
            last_result: row.last_result,
            reason: row.reason,
            version: row.version,
            created_ms: row.created_ms,
            updated_ms: row.updated_ms,
            next_check_ms: row.next_check_ms,
            lease_until_ms: row.lease_until_ms,
            may_have_applied: row.may_have_applied,
            generation: row.generation.0,
            remote_ref: row.remote_ref,
            contradiction_ms: row.contradiction_ms,
            attempts,
            evidence,
            authorization,
        })
    }

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
    /// `review_claimed`, at the time of the claim). See [`audit_note`].
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
    async fn read_with_holder(
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
    /// read before it is stale). See [`audit_note`].
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
                    tenant,
                    op,
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
            return self.read(tenant, op).await;
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
            .shared
            .ledger
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

    async fn apply(
        &self,
        row: &OperationRecord,
        expected_version: u64,
        event: Event,
        kind: &'static str,
        note: String,
    ) -> Result<OperationRecord, ReviewError> {
        check_version(row, expected_version)?;
        let applied = engine::apply_event(
            &self.shared,
            row,
            event,
            kind,
            Extras {
                note: Some(note),
                ..Extras::default()
            },
        )
        .await?;
        match applied {
            Applied::Done(r) => Ok(r),
            Applied::Refused(r) => Err(ReviewError::Refused(r)),
            Applied::Stale => {
                let now = self.read(&row.tenant, &row.operation_id).await?;
                Err(ReviewError::VersionMismatch {
                    operation: row.operation_id.clone(),
                    expected: expected_version,
                    current: now.version,
                })
            }
        }
    }
}

/// Longest reason kept in an audit entry, in characters (the rest is cut, marked with `…`).
pub const MAX_REASON_CHARS: usize = 500;

/// The audit note of a review action: `{action}; version {from} -> {to}` (or
/// `version {from} (unchanged)` when `to` is `None`), then `; reason: {reason}` when there is
/// one. [`operator::AuditEntry::parse`](crate::operator::AuditEntry::parse) reads it back.
pub fn audit_note(action: &str, from: u64, to: Option<u64>, reason: Option<&str>) -> String {
    let mut note = match to {
        Some(to) => format!("{action}; version {from} -> {to}"),
        None => format!("{action}; version {from} (unchanged)"),
    };
    if let Some(reason) = reason {
        note.push_str("; reason: ");
        note.push_str(reason);
    }
    note
}

/// A reviewer's text on one line: control characters (newlines included) become spaces and
/// `;` (the audit note's separator) becomes `,`.
fn clean(text: &str) -> String {
    text.trim()
        .chars()
        .map(|c| match c {
            c if c.is_control() => ' ',
            ';' => ',',
            c => c,
        })
        .collect()
}

/// A non-blank reason on one line, at most [`MAX_REASON_CHARS`] characters.
fn required(reason: &str) -> Result<String, ReviewError> {
    let one_line: String = reason
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.is_empty() {
        return Err(ReviewError::ReasonRequired);
    }
    if one_line.chars().count() > MAX_REASON_CHARS {
        Ok(format!("{}…", first_chars(&one_line, MAX_REASON_CHARS)))
    } else {
        Ok(one_line)
    }
}

/// The entry of the claim that holds an operation in `state` now, given its log: the latest
/// entry that put the operation in (or kept it in) `MANUAL_REVIEW`, if that was a reviewer's
/// claim or take-over. `None` when the operation is not in review, or the engine escalated it
/// and nobody has claimed it since. A resolution moves the operation out of review, which
/// ends the claim; a kept-pending note does not.
pub fn claim_holder(state: State, log: &[EvidenceSummary]) -> Option<&EvidenceSummary> {
    if state != State::ManualReview {
        return None;
    }
    log.iter()
        .rev()
        .find(|e| matches!(e.transition, Some((_, Some(State::ManualReview)))))
        .filter(|e| e.kind == "review_claimed")
}

/// The vendor's evidence recorded after the decision the operation's state rests on (the
/// latest entry that changed its state: the escalation into review, the lookup or the
/// reviewer's decision that made it sendable, ...), oldest first. The state did not take it
/// into account: a person deciding must see it first, and a replay must not go out on a
/// decision it contradicts (see [`says_may_have_applied`]). Entries that carry no observation
/// (claims, notes, deferrals) are left out.
pub fn evidence_since_decision(log: &[EvidenceSummary]) -> Vec<&EvidenceSummary> {
    let decided = log
        .iter()
        .rposition(|e| matches!(e.transition, Some((from, Some(to))) if from != Some(to)))
        .map_or(0, |i| i + 1);
    log[decided..]
        .iter()
        .filter(|e| e.evidence.is_some())
        .collect()
}

/// Whether an entry says the write may have been applied at the vendor: a success, an
/// accepted write still processing, the vendor busy with the same key, or the unknown outcome
/// of an attempt (its bytes may have arrived). A lookup that found nothing, or a note about
/// the engine's own bookkeeping, says nothing either way.
pub fn says_may_have_applied(e: &EvidenceSummary) -> bool {
    match &e.evidence {
        Some(Evidence::Succeeded { .. } | Evidence::Processing { .. }) => true,
        Some(Evidence::Conflict { conflict }) => {
            *conflict == crate::evidence::ConflictKind::InFlight
        }
        Some(Evidence::Unknown { .. }) => e.attempt_id.is_some(),
        _ => false,
    }
}

/// The latest conclusive success that arrived when it could no longer change the operation
/// (kind `late_evidence`: a verified callback, a response or a lookup answer after the
/// operation went to review or was made sendable), if any. On an operation in review it is
/// shown first and offered to the reviewer as the resolution.
pub fn late_success(log: &[EvidenceSummary]) -> Option<&EvidenceSummary> {
    log.iter().rev().find(|e| {
        e.kind == "late_evidence" && matches!(e.evidence, Some(Evidence::Succeeded { .. }))
    })
}

/// The reviewer named by a claim's audit note ([`audit_note`]: `claimed by {reviewer}; …` or
/// `taken over from {holder} by {reviewer}; …`).
fn reviewer_of(claim: &EvidenceSummary) -> Option<String> {
    let note = claim.note.as_deref()?;
    let head = note.split_once("; version ").map_or(note, |(h, _)| h);
    head.rsplit_once(" by ").map(|(_, who)| who.to_owned())
}

/// A claim is exclusive: only its holder acts on the operation, or someone who takes it over.
fn check_holder(
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

fn check_version(row: &OperationRecord, expected: u64) -> Result<(), ReviewError> {
    if row.version == expected {
        Ok(())
    } else {
        Err(ReviewError::VersionMismatch {
            operation: row.operation_id.clone(),
            expected,
            current: row.version,
        })
    }
}

fn summarize(row: &OperationRecord) -> ParameterSummary {
    ParameterSummary {
        method: row.request.method.to_string(),
        url: redacted_url(&row.request.url),
        header_names: row
            .request
            .headers
            .iter()
            .map(|(k, _)| k.to_owned())
            .collect(),
        body_bytes: row.request.body.len(),
        body_fields: body_fields(&row.request.body),
        payload_hash: row.payload_hash.to_string(),
        contract: contract_label(&row.contract.name, &row.contract.hash),
    }
}

/// A URL with its query values replaced by `…` (the names kept).
fn redacted_url(url: &str) -> String {
    match url.split_once('?') {
        Some((base, query)) => {
            let names: Vec<String> = query
                .split('&')
                .map(|kv| format!("{}=…", kv.split('=').next().unwrap_or_default()))
                .collect();
            format!("{base}?{}", names.join("&"))
        }
        None => url.to_owned(),
    }
}

/// The top-level field names of a JSON object body (none for any other body): never a value.
fn body_fields(body: &[u8]) -> Vec<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()))
        .unwrap_or_default()
}

/// `name@` and the first 12 characters of the contract's hash.
fn contract_label(name: &str, hash: &str) -> String {
    format!("{name}@{}", first_chars(hash, 12))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::IdempotencyKey;

    #[test]
    fn key_debug_never_cuts_inside_a_character() {
        // A key restored from storage may hold anything; byte 8 is inside the third `€`.
        let key = IdempotencyKey::from_stored("€€€€€");
        assert_eq!(format!("{key:?}"), "IdempotencyKey(€€€€€…)");
        let key = IdempotencyKey::from_stored("aéééééééééé");
        assert_eq!(format!("{key:?}"), "IdempotencyKey(aééééééé…)");
        let key = IdempotencyKey::from_stored("8e03978e-40d5-43e8-bc93-6894a57f9324");
        assert_eq!(format!("{key:?}"), "IdempotencyKey(8e03978e…)");
    }

    /// A row read back from storage holds whatever was stored: a corrupt or hand-edited contract
    /// hash with multi-byte characters must not panic the handoff.
    #[cfg(feature = "test-util")]
    #[tokio::test]
    async fn summary_cuts_a_multibyte_stored_hash_at_a_character_boundary() {
        use crate::ledger::conformance::new_operation;
        use crate::ledger::{Created, MemoryLedger};

        let ledger = MemoryLedger::new();
        let mut new = new_operation("t", "op-1", "intent-1");
        // Byte 12 falls inside the fourth `€`.
        new.contract.hash = format!("a{}", "€".repeat(20)).into();
        let Created::New(row) = ledger.create_or_get(new).await.unwrap() else {
            panic!("not new")
        };
        let s = summarize(&row);
        assert_eq!(s.contract, format!("stripe-v1@a{}", "€".repeat(11)));
        // An ASCII hash keeps its first 12 characters, as before.
        let mut row = row;
        row.contract.hash = "0123456789abcdef".into();
        assert_eq!(summarize(&row).contract, "stripe-v1@0123456789ab");
        row.contract.hash = "éé".into();
        assert_eq!(summarize(&row).contract, "stripe-v1@éé");
    }
}
