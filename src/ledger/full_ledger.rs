//! [`FullLedger`]: every capability at once, and [`Housekeeping`]: the capabilities the
//! recoverer's background work runs through.

use std::fmt;
use std::sync::Arc;

use super::{CallbackLedger, ListingLedger, RetentionLedger};

/// A ledger with every capability: the write path ([`Ledger`](super::Ledger)), the operators'
/// queue ([`ListingLedger`]), vendor callbacks ([`CallbackLedger`]) and retention
/// ([`RetentionLedger`]). Implemented for every type that implements the three; it has no
/// methods of its own.
///
/// `Arc<dyn FullLedger>` is what code that picks its backend at run time holds (the command
/// line, the test kit, an application that opens SQLite or PostgreSQL from its settings): it
/// is a ledger of every capability, and converts to `Arc<dyn ListingLedger>` or any other of
/// them.
///
/// ```
/// use std::sync::Arc;
/// use recoverable_write::ledger::{FullLedger, ListingLedger, MemoryLedger};
///
/// let ledger: Arc<dyn FullLedger> = Arc::new(MemoryLedger::new());
/// let listing: Arc<dyn ListingLedger> = ledger.clone();
/// # let _ = listing;
/// ```
pub trait FullLedger: ListingLedger + CallbackLedger + RetentionLedger {}

impl<L: ListingLedger + CallbackLedger + RetentionLedger + ?Sized> FullLedger for L {}

/// The capabilities the recoverer's background housekeeping runs through, as a ledger gives
/// them in [`Ledger::housekeeping`](super::Ledger::housekeeping): the queue gauges (through
/// [`ListingLedger`]) and the periodic retention purge (through [`RetentionLedger`]).
///
/// Absent means there is nothing to count or purge through; the recoverer skips that
/// housekeeping.
///
/// ```
/// use std::sync::Arc;
/// use recoverable_write::ledger::{Housekeeping, MemoryLedger};
///
/// let ledger = Arc::new(MemoryLedger::new());
/// let housekeeping = Housekeeping::default().listing(ledger.clone()).retention(ledger);
/// assert!(housekeeping.counts() && housekeeping.purges());
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Housekeeping {
    listing: Option<Arc<dyn ListingLedger>>,
    retention: Option<Arc<dyn RetentionLedger>>,
}

impl Housekeeping {
    /// The queue gauges read through `ledger`.
    pub fn listing(mut self, ledger: Arc<dyn ListingLedger>) -> Self {
        self.listing = Some(ledger);
        self
    }

    /// The periodic retention purge runs through `ledger`.
    pub fn retention(mut self, ledger: Arc<dyn RetentionLedger>) -> Self {
        self.retention = Some(ledger);
        self
    }

    /// Whether the queue gauges can be read.
    pub fn counts(&self) -> bool {
        self.listing.is_some()
    }

    /// Whether the periodic retention purge can run.
    pub fn purges(&self) -> bool {
        self.retention.is_some()
    }

    /// The ledger the queue gauges are read through.
    pub(crate) fn listing_ledger(&self) -> Option<&Arc<dyn ListingLedger>> {
        self.listing.as_ref()
    }

    /// The ledger the periodic purge runs through.
    pub(crate) fn retention_ledger(&self) -> Option<&Arc<dyn RetentionLedger>> {
        self.retention.as_ref()
    }
}

impl fmt::Debug for Housekeeping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Housekeeping")
            .field("counts", &self.counts())
            .field("purges", &self.purges())
            .finish()
    }
}
