//! How a SQLite ledger is opened: [`SqliteLedgerOptions`] and the commit durability
//! ([`Synchronous`]).

use std::time::Duration;

/// How durably SQLite commits (`PRAGMA synchronous`).
///
/// See <https://www.sqlite.org/pragma.html#pragma_synchronous>.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit is on disk before it returns. The default, and what the "register, then
    /// send" rule needs.
    #[default]
    Full,
    /// In WAL mode, commits survive a process crash, but a power loss or OS crash may roll back
    /// the most recent ones.
    Normal,
    /// No syncs at all. Tests and throwaway data only.
    Off,
}

impl Synchronous {
    /// The pragma value (`FULL`, `NORMAL`, `OFF`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
            Synchronous::Off => "OFF",
        }
    }

    /// The statement that sets this level on a connection.
    pub(super) const fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "PRAGMA synchronous = FULL",
            Synchronous::Normal => "PRAGMA synchronous = NORMAL",
            Synchronous::Off => "PRAGMA synchronous = OFF",
        }
    }
}
/// Options for [`SqliteLedger::open_with`].
///
/// ```
/// use std::time::Duration;
/// use recoverable_write::ledger::{SqliteLedgerOptions, Synchronous};
///
/// let options = SqliteLedgerOptions::new()
///     .synchronous(Synchronous::Full)
///     .busy_timeout(Duration::from_secs(2))
///     .max_readers(4);
/// assert_eq!(options.max_readers, 4);
/// ```
///
/// [`SqliteLedger::open_with`]: super::SqliteLedger::open_with
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteLedgerOptions {
    /// `PRAGMA synchronous`. Default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// How long a connection waits for a lock held by another process before failing with
    /// [`LedgerError::Unavailable`]. Default 5 s.
    ///
    /// [`LedgerError::Unavailable`]: crate::ledger::LedgerError::Unavailable
    pub busy_timeout: Duration,
    /// Most connections in the reader pool. Default 4; at least 1.
    pub max_readers: u32,
    /// Most write requests committed in one transaction by the writer thread (group commit).
    /// Default [`SqliteLedgerOptions::DEFAULT_MAX_BATCH`]; at least 1 (1 turns group commit off: one transaction per
    /// request).
    pub max_batch: usize,
    /// Whether the layer's results are recorded without waiting for the writer
    /// ([`Ledger::record_detached`]): the caller gets the vendor's answer as soon as it is
    /// read, and the result is committed with the next batch. Default `true`. Only the claim
    /// must be durable before a send; a result that never lands leaves the row `IN_FLIGHT`
    /// under its lease, then `UNKNOWN`: recovered by a lookup, a same-key replay where the
    /// contract makes one safe (a second request, deduplicated by the vendor), or a person,
    /// although the caller was already answered. A read of an operation
    /// through this ledger waits for that operation's results queued before it.
    ///
    /// Dropping the last handle of the ledger (waiting at most 10 s) or [`SqliteLedger::close`]
    /// writes the queued results first; a process that dies before leaves their rows to
    /// recovery.
    ///
    /// With `false`, the layer waits for each result's commit (at `synchronous = NORMAL` when
    /// its batch holds no claim), and the [`Outcome`](crate::Outcome) it returns reflects a
    /// takeover that happened while the attempt was on the wire.
    ///
    /// [`Ledger::record_detached`]: crate::ledger::Ledger::record_detached
    /// [`SqliteLedger::close`]: super::SqliteLedger::close
    pub detached_results: bool,
}

impl Default for SqliteLedgerOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            max_readers: 4,
            max_batch: Self::DEFAULT_MAX_BATCH,
            detached_results: true,
        }
    }
}

impl SqliteLedgerOptions {
    /// Default of [`max_batch`](Self::max_batch): 64 requests per commit.
    pub const DEFAULT_MAX_BATCH: usize = 64;

    /// The defaults: `synchronous=FULL`, a 5 s busy timeout, 4 readers, batches of up to 64
    /// writes, results recorded detached.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `PRAGMA synchronous`.
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets how long to wait for a lock held by another process.
    pub fn busy_timeout(mut self, busy_timeout: Duration) -> Self {
        self.busy_timeout = busy_timeout;
        self
    }

    /// Sets the size limit of the reader pool (at least 1).
    pub fn max_readers(mut self, max_readers: u32) -> Self {
        self.max_readers = max_readers;
        self
    }

    /// Sets the most write requests committed together (at least 1).
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }

    /// Sets whether the layer's results are recorded without waiting for the writer (see
    /// [`detached_results`](Self::detached_results)).
    pub fn detached_results(mut self, detached: bool) -> Self {
        self.detached_results = detached;
        self
    }
}
