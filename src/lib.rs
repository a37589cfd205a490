//! placeholder crate docs (rewritten below once the layer lands)
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod budget;
pub mod contract;
mod engine;
pub mod evidence;
pub mod guard;
pub mod layer;
pub mod ledger;
pub mod operation;
pub mod reconcile;
pub mod state;
#[cfg(feature = "test-util")]
pub mod testing;

pub use budget::BudgetPolicy;
pub use contract::{Contract, Contracts};
pub use evidence::{ConflictKind, Evidence};
pub use guard::{SendOnceGuard, SendOnceGuardLayer};
pub use layer::{Error, Outcome, RecoverableWrite, RecoverableWriteLayer};
pub use ledger::{Ledger, MemoryLedger};
#[cfg(feature = "sqlite")]
pub use ledger::SqliteLedger;
pub use operation::{AttemptId, Generation, IdempotencyKey, Operation, OperationId, Tenant};
pub use reconcile::{HttpLookup, Reconciler, Recoverer};
pub use state::State;

/// A type-erased error, as used across the tower ecosystem.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
