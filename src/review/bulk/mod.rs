//! Bulk reconciliation from a vendor's export: after an outage, hundreds of operations sit in
//! review while the vendor's dashboard can export what it actually created.
//!
//! 1. [`VendorExport::parse`] reads the export (CSV or JSON lines) through an
//!    [`ExportMapping`] (built in for Stripe, Adyen, Square and PayPal exports, or
//!    [`ExportMapping::generic`] with the columns named), and digests it (SHA-256);
//! 2. [`Reviews::bulk_plan`] matches each row to the tenant's operation and says what it
//!    would do: resolve as succeeded with which reference (operations in `MANUAL_REVIEW`), or
//!    nothing (already recorded, not in review, conflicting rows, a duplicate, no match); and
//!    lists the operations in review that no row names, to resolve by hand;
//! 3. [`Reviews::bulk_apply`] carries out the resolutions, each a compare-and-swap at the
//!    version the plan read, audited with the export's name, digest and row.
//!
//! What it never does: resolve an operation as not executed (absence from an export proves
//! nothing: exports are filtered, paginated and late); act on an operation whose evidence
//! changed since the plan (it is reported stale); accept a mapping under which one row names
//! two operations ([`BulkError::RowMatchesTwo`], the whole plan is refused).

mod apply;
mod export;
mod mapping;
mod plan;

pub use self::apply::{AppliedRow, BulkReport, RowOutcome, bulk_reason};
pub use self::export::{ExportError, ExportRow, MAX_EXPORT_BYTES, VendorExport};
pub use self::mapping::{Column, ExportMapping, MappingError, MatchBy};
pub use self::plan::{BulkPlan, MAX_REVIEW_SCAN, PlanAction, PlanRow, UnmatchedOperation};

use super::Reviews;
use crate::ledger::LedgerError;
use crate::operation::OperationId;

/// Why a bulk reconciliation was refused as a whole. Nothing changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BulkError {
    /// One export row names two operations: the mapping (or the ledger) is wrong, and no row
    /// of this export is trusted.
    #[error(
        "row {row} (reference {reference}) matches two operations, {first} and {second}: \
         {why}. The mapping is refused as a whole; nothing was changed"
    )]
    RowMatchesTwo {
        /// The row.
        row: usize,
        /// Its reference.
        reference: String,
        /// One operation.
        first: OperationId,
        /// The other.
        second: OperationId,
        /// How.
        why: String,
    },
    /// Apply needs a reason for the audit trail.
    #[error("a reason is required: say why, it goes into every operation's audit trail")]
    ReasonRequired,
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}
