//! What retention tells: when one operation's details and row go ([`RetentionDates`]), and
//! what a purge did or would do ([`PurgeReport`], [`PurgePlan`]).

use std::time::Duration;

use crate::ledger::{CallbackRecords, Purged};

/// When one finished operation's details go and when its row goes (ms since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RetentionDates {
    /// When it finished (its last change).
    pub finished_ms: i64,
    /// From when its details may be dropped (or when they were, if they are gone).
    pub details_until_ms: i64,
    /// Whether they already are.
    pub details_removed: bool,
    /// From when its row may be deleted: until then a repeat of its intent sends nothing.
    pub identity_until_ms: i64,
}

impl RetentionDates {
    /// One line for operators: when the details and the row go (UTC).
    pub fn describe(&self) -> String {
        let at = crate::text::format_time;
        let details = if self.details_removed {
            format!(
                "request, response and evidence details erased {}",
                at(self.details_until_ms)
            )
        } else {
            format!("details kept until {}", at(self.details_until_ms))
        };
        format!(
            "finished {}; {details}; the record (and the guarantee that a repeat sends nothing) \
             kept until {}",
            at(self.finished_ms),
            at(self.identity_until_ms)
        )
    }

    /// What operators are told about an operation that is not finished.
    pub const UNFINISHED: &'static str = "kept whatever its age while it is not finished";
}

/// What one purge run did (or, previewed, would do), per stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Operations whose details were dropped.
    pub details: PurgedCount,
    /// Operations deleted.
    pub identity: PurgedCount,
    /// Callback dedupe records deleted.
    pub callback_deliveries: PurgedCount,
    /// Quarantined callback events deleted.
    pub quarantined_callbacks: PurgedCount,
    /// Bytes the store gave back to the file system (SQLite incremental vacuum; 0 elsewhere
    /// and in a preview).
    pub space_reclaimed: u64,
}

/// Rows and bytes of one stage (see [`Purged`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PurgedCount {
    /// Rows slimmed or deleted.
    pub rows: u64,
    /// Bytes of stored values dropped.
    pub bytes: u64,
}

impl PurgedCount {
    pub(super) fn add(&mut self, p: Purged) {
        self.rows += p.rows;
        self.bytes += p.bytes;
    }
}

impl PurgeReport {
    /// Adds what a batch of `records` dropped to its line.
    pub(super) fn add_callbacks(&mut self, records: CallbackRecords, done: Purged) {
        match records {
            CallbackRecords::Deliveries => self.callback_deliveries.add(done),
            CallbackRecords::Quarantine => self.quarantined_callbacks.add(done),
        }
    }

    /// Whether nothing was (or would be) dropped.
    pub fn is_empty(&self) -> bool {
        *self == PurgeReport::default()
    }
}

/// What a purge would drop, contract by contract, with the clocks it applies: what a person
/// reads before confirming (from [`Purger::plan`](super::Purger::plan);
/// [`Purger::run_plan`](super::Purger::run_plan) then drops what was due at
/// [`as_of_ms`](Self::as_of_ms) and nothing that became due after it).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PurgePlan {
    /// When the plan was made (ms since the Unix epoch): every cutoff is counted from it.
    pub as_of_ms: i64,
    /// One line per contract the ledger has finished operations of.
    pub contracts: Vec<ContractPlan>,
    /// How long callback dedupe records are kept, in ms.
    pub keep_callback_deliveries_ms: u64,
    /// How long quarantined callback events are kept, in ms (`None`: until erased).
    pub keep_quarantined_callbacks_ms: Option<u64>,
    /// Every line added up (callback records included): what
    /// [`Purger::preview`](super::Purger::preview) answers.
    pub total: PurgeReport,
}

/// One contract's line of a [`PurgePlan`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ContractPlan {
    /// The contract name frozen on the operations.
    pub contract: String,
    /// Whether the configuration knows the contract. When it does not (another contracts file
    /// than the application's?), the ledger-wide clocks apply.
    pub configured: bool,
    /// How long after it finished an operation keeps its details, in ms.
    pub keep_details_ms: u64,
    /// How long after it finished an operation keeps its row, in ms.
    pub keep_identity_ms: u64,
    /// Operations whose details would be dropped (those kept; not those deleted).
    pub details: PurgedCount,
    /// Operations that would be deleted.
    pub identity: PurgedCount,
}

/// `d` in milliseconds, saturated.
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
