//! The in-memory ledger: tests and examples.
//!
//! It keeps the same semantics as the durable backends in every respect (it runs the same
//! conformance suite): the compare-and-swap of [`Ledger::apply`], the sticky "may have applied"
//! fact, the refusal of an attempt-level `REJECTED`, claim and sweep ordering, evidence order.
//! Nothing survives the process.
//!
//! [`Ledger::apply`]: super::Ledger::apply
//!
//! It keeps every row until a purge removes it (about 1.4 KB for a small write: a slot in a
//! chunk of rows, and the row's own strings). A purge frees a row's strings and leaves its slot
//! for the next row: the chunks are never freed.

mod ledger_impl;
mod listing;
mod recovery;
mod retention;
mod slots;
mod tables;
#[cfg(all(test, feature = "test-util"))]
mod tests;
mod write;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use self::tables::Tables;
use super::LedgerError;

/// An in-memory [`Ledger`](super::Ledger). Cloning gives another handle to the same data.
///
/// ```
/// use recoverable_write::ledger::MemoryLedger;
///
/// let ledger = MemoryLedger::new();
/// let shared = ledger.clone(); // same operations, same evidence
/// ledger.set_unavailable(true); // every call now fails with `LedgerError::Unavailable`
/// # let _ = shared;
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryLedger {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    unavailable: AtomicBool,
    // Never held across an `.await`: every method does its work synchronously, inside the
    // returned future (nothing happens until it is polled, as with the SQL backends).
    tables: Mutex<Tables>,
}

/// The error behind `LedgerError::Unavailable` while an outage is simulated.
#[derive(Debug, thiserror::Error)]
#[error("memory ledger is set unavailable (simulated outage)")]
struct SimulatedOutage;

impl MemoryLedger {
    /// A new, empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a store outage: while set, every call fails with
    /// [`LedgerError::Unavailable`] and changes nothing.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.inner.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// Whether an outage is being simulated.
    pub fn is_unavailable(&self) -> bool {
        self.inner.unavailable.load(Ordering::SeqCst)
    }

    /// Number of operations stored (all tenants), outage or not.
    pub fn len(&self) -> usize {
        self.inner
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .operations
            .len()
    }

    /// Whether no operation is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tables(&self) -> Result<MutexGuard<'_, Tables>, LedgerError> {
        if self.is_unavailable() {
            return Err(LedgerError::Unavailable(Box::new(SimulatedOutage)));
        }
        // A panic while holding the lock cannot leave a half-applied change behind: every
        // mutation below is computed first and written with infallible assignments.
        Ok(self
            .inner
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}
