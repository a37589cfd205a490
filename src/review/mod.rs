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
//! reason (a fixed wording); [`operator::audit_trail`](crate::operator::audit_trail) reads them
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

// Here: `Reviews` and `ReviewError`. Beside it: `package` (the handoff package a reviewer
// reads), `claim` (claims and take-overs), `resolve` (resolutions and acknowledgements), `audit`
// (the audit notes), `evidence` (reading the log for a decision: what arrived since it),
// `vendor` (where the vendor holds a write: its reference, the contract's lookup), and
// `quarantine` (rows this version cannot decode).

use std::sync::Arc;

use crate::core::Shared;
use crate::core::engine::{self, Applied, Extras};
use crate::ledger::{LedgerError, ListingLedger, OperationRecord};
use crate::operation::{OperationId, Tenant};
use crate::state::{Event, Refused};

mod audit;
pub mod bulk;
mod claim;
mod evidence;
mod package;
pub(crate) mod quarantine;
mod resolve;
mod vendor;

pub use self::audit::MAX_REASON_CHARS;
pub(crate) use self::audit::audit_note;
use self::audit::{clean, required};
pub(crate) use self::claim::claim_holder;
pub(crate) use self::evidence::evidence_since_decision;
pub use self::evidence::{late_success, says_may_have_applied};
pub use self::package::{
    AttemptSummary, AuthorizationState, BudgetUsed, EvidenceSummary, HandoffPackage,
    ParameterSummary,
};
use self::package::{body_fields, contract_label, redacted_url};
pub use self::vendor::VendorReference;
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

/// Review operations over a ledger. Get one from
/// [`Handle::reviews`](crate::Handle::reviews) (shares the
/// authorizer and notifier) or [`Reviews::new`].
#[derive(Clone, Debug)]
pub struct Reviews {
    shared: Arc<Shared>,
    /// The same ledger as `shared.ledger`, with its listing (quarantined rows, contradictions).
    listing: Arc<dyn ListingLedger>,
}

impl Reviews {
    /// Reviews over `ledger`, with no authorizer (everything allowed) and its own notifier.
    pub fn new(ledger: Arc<dyn ListingLedger>) -> Self {
        Self {
            shared: Arc::new(Shared::new(ledger.clone())),
            listing: ledger,
        }
    }

    /// Reviews over `shared`, whose ledger is `listing`.
    pub(crate) fn from_parts(shared: Arc<Shared>, listing: Arc<dyn ListingLedger>) -> Self {
        Self { shared, listing }
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

/// A review action acts on the version of the operation the reviewer read, or not at all.
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

#[cfg(test)]
mod tests {
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
}
