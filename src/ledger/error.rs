//! Why a ledger call failed.

/// Why a ledger call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The store could not be reached or the statement failed. Nothing was changed.
    #[error("ledger unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A stored row could not be decoded.
    #[error("corrupt ledger row for {operation}: {detail}")]
    Corrupt {
        /// The row's operation id.
        operation: String,
        /// What is wrong.
        detail: String,
    },
    /// Bad configuration (table name, path, options).
    #[error("invalid ledger configuration: {0}")]
    Config(String),
}
