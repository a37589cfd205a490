//! What a backend does for retention: bounded purge batches of finished operations and of
//! callback records, and giving freed space back. The policy (which clock applies to which
//! contract, when to run, what to refuse) is in [`crate::retention`]; a backend only runs the
//! batches it is handed.
//!
//! Every purge is bounded (`limit` rows per call), reads its victims through a partial index of
//! finished rows (never a table scan), and never touches an operation that is not finished
//! (`SUCCEEDED` or `REJECTED`) or that was quarantined as undecodable.

use crate::operation::{OperationId, Tenant};

/// The two stages of an operation's retention, both measured from when it finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PurgeStage {
    /// Drops what the operation carried: the frozen request's headers and body, the stored
    /// response, the reason, and the details (observation and note) of its evidence entries.
    /// The row keeps its identity (tenant, operation id, action, intent, idempotency key,
    /// payload hash, method and URL), its final state, its remote reference, its times and
    /// the kind, states and time of each evidence entry; [`details_removed_ms`] is set.
    ///
    /// [`details_removed_ms`]: super::OperationRecord::details_removed_ms
    Details,
    /// Deletes the operation and its evidence log. A repeat of its intent afterwards is a new
    /// operation with a new key.
    Identity,
}

impl PurgeStage {
    /// `details` or `identity` (the `stage` label of the retention counters).
    pub const fn as_str(self) -> &'static str {
        match self {
            PurgeStage::Details => "details",
            PurgeStage::Identity => "identity",
        }
    }
}

/// Which finished operations a [`PurgeBatch`] considers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PurgeScope {
    /// The operations of one contract (by the name frozen on the row) that finished strictly
    /// before `before_ms` (ms since the Unix epoch). For the details stage, only those whose
    /// details are still there.
    FinishedBefore {
        /// The contract name.
        contract: String,
        /// The cut-off: rows whose last change (their finish) is older are purged.
        before_ms: i64,
    },
    /// Every finished operation of one tenant, whatever its age (the right to erasure).
    Tenant(Tenant),
    /// One finished operation, whatever its age.
    Operation {
        /// Its tenant.
        tenant: Tenant,
        /// Its id.
        operation_id: OperationId,
    },
}

/// One bounded batch of one retention stage (see [`RetentionLedger::purge`](super::RetentionLedger::purge)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PurgeBatch {
    /// What to drop.
    pub stage: PurgeStage,
    /// Which finished operations.
    pub scope: PurgeScope,
    /// At most this many operations per call (oldest finish first).
    pub limit: u32,
    /// Count what would be purged (every matching row: `limit` does not apply) and change
    /// nothing.
    pub dry_run: bool,
    /// When the purge runs (ms since the Unix epoch): stored as `details_removed_ms`.
    pub now_ms: i64,
}

/// A callback record kind with its own retention (see
/// [`RetentionLedger::purge_callbacks`](super::RetentionLedger::purge_callbacks)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallbackRecords {
    /// The dedupe records of vendor events (vendor, event id, what it did). Once one is
    /// purged, a redelivery of that event is treated as new: keep them longer than the
    /// vendor redelivers.
    Deliveries,
    /// Verified events that matched no operation, kept for a human.
    Quarantine,
}

impl CallbackRecords {
    /// `callback_deliveries` or `callback_quarantine` (the `stage` label of the counters).
    pub const fn as_str(self) -> &'static str {
        match self {
            CallbackRecords::Deliveries => "callback_deliveries",
            CallbackRecords::Quarantine => "callback_quarantine",
        }
    }
}

/// Which callback records a [`CallbackPurge`] considers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallbackScope {
    /// Those received strictly before `before_ms` (ms since the Unix epoch).
    ReceivedBefore(i64),
    /// Those of one tenant, whatever their age (the right to erasure).
    Tenant(Tenant),
}

/// One bounded batch of callback records to purge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackPurge {
    /// Which records.
    pub records: CallbackRecords,
    /// Which of them.
    pub scope: CallbackScope,
    /// At most this many per call (oldest first).
    pub limit: u32,
    /// Count (every matching record) and change nothing.
    pub dry_run: bool,
}

/// What a purge batch did (or, dry, would do).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Purged {
    /// Rows slimmed or deleted.
    pub rows: u64,
    /// Bytes of stored values dropped (request headers and body, response, reason, evidence
    /// details; the whole row's values for a deletion). What the database gives back to the
    /// file system can differ (pages, indexes).
    pub bytes: u64,
}

impl Purged {
    /// `rows` rows, `bytes` bytes.
    pub const fn new(rows: u64, bytes: u64) -> Self {
        Self { rows, bytes }
    }

    /// Both counts added.
    #[must_use]
    pub const fn plus(self, other: Purged) -> Self {
        Self {
            rows: self.rows + other.rows,
            bytes: self.bytes + other.bytes,
        }
    }
}
