//! Why a retention action failed ([`RetentionError`]).

use crate::ledger::LedgerError;
use crate::state::State;

/// Why a retention action failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetentionError {
    /// The ledger failed; what earlier batches did is committed, the rest was not done.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// No such operation in the tenant.
    #[error("no operation {operation} in tenant {tenant}")]
    NotFound {
        /// The tenant.
        tenant: String,
        /// The operation id.
        operation: String,
    },
    /// The operation is not finished: its details and row are what keeps it from being sent
    /// twice. Resolve it first (an operator can, in `MANUAL_REVIEW`).
    #[error(
        "operation {operation} is {state}, not finished: it cannot be erased until it is SUCCEEDED or REJECTED"
    )]
    NotFinished {
        /// The operation id.
        operation: String,
        /// Its state.
        state: State,
    },
    /// The tenant has operations that are not finished; nothing was erased.
    #[error(
        "tenant {tenant} has {open} operation(s) not finished (e.g. {example}); nothing was erased: resolve them first"
    )]
    OpenOperations {
        /// The tenant.
        tenant: String,
        /// How many are open.
        open: u64,
        /// One of them.
        example: String,
    },
}
