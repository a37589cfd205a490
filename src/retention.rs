//! Retention: the ledger stays bounded without forgetting what it must remember.
//!
//! Every operation keeps its frozen request (up to the request body limit), its stored response
//! and its evidence log. Kept forever, they fill the disk and hold business data (payloads that
//! may carry personal data) far longer than anyone needs it. Deleted too early, they cost a
//! duplicate: a caller repeating an intent the ledger has forgotten gets a new operation with a
//! new key, and the vendor creates the write again. So retention has two clocks, both started
//! when an operation **finished** (`SUCCEEDED` or `REJECTED`):
//!
//! | stage | default | what goes | what stays |
//! |---|---|---|---|
//! | details ([`Retention::details`], contract `keep_details_secs`) | 7 days | the frozen request's headers and body, the stored response, the reason, the evidence details (observations and notes) | the identity (tenant, operation id, action, intent, idempotency key, payload hash, method and URL), the final state, the remote reference, the times, and each evidence entry's kind, states and time |
//! | identity ([`Retention::identity`], contract `keep_identity_secs`) | 35 days, and at least the vendor's key retention | the row and its evidence log | nothing |
//!
//! After the details stage a repeat call still gets its outcome (the documented synthesized
//! answer, [`crate::responses`]) and sends nothing, and a repeat with another payload is still
//! a [`Conflict`](crate::Error::Conflict): the payload hash is kept. After the identity stage a
//! repeat is a new operation: **the identity clock is the window within which a repeated intent
//! is guaranteed not to be sent again.**
//!
//! Operations in any other state (`PREPARED`, `IN_FLIGHT`, `UNKNOWN`, `PROCESSING`,
//! `RETRY_READY`, `MANUAL_REVIEW`) are never purged, whatever their age; nor are rows the store
//! quarantined as undecodable. Vendor callback records have their own clocks: the dedupe records
//! of delivered events ([`Retention::callback_deliveries`], default 35 days: keep them longer
//! than any vendor redelivers) and quarantined events ([`Retention::quarantined_callbacks`],
//! default 90 days).
//!
//! Configuration that sets an identity clock shorter than the details clock, or shorter than
//! a vendor's documented key retention, is refused by
//! [`Builder::build`](crate::Builder::build).
//!
//! Purging runs in bounded batches through partial indexes (see
//! [`Ledger::purge`](crate::Ledger::purge)): the [`Recoverer`](crate::Recoverer) runs it every
//! [`Retention::interval`] (default 10 minutes) in a task of its own, and [`Purger::run`] runs
//! it on demand; [`Purger::preview`] counts what a run would drop. [`Purger::plan`] counts it
//! contract by contract with the clocks each one gets, for a person to read before
//! [`Purger::run_plan`] drops what was due at the plan's time (the command line's `purge`).
//! [`Purger::erase_tenant`] and [`Purger::erase_details`] are the right-to-erasure path.
//!
//! ```
//! use std::time::Duration;
//! use recoverable_write::retention::Retention;
//! use recoverable_write::{MemoryLedger, RecoverableWrite};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = RecoverableWrite::builder(MemoryLedger::new())
//!     .retention(
//!         Retention::new()
//!             .details(Duration::from_secs(24 * 3600))
//!             .identity(Duration::from_secs(40 * 24 * 3600)),
//!     )
//!     .build()?;
//! let purger = config.purger();
//! let preview = purger.preview().await?; // what a run would drop; nothing changes
//! let done = purger.run().await?;
//! println!("{} rows slimmed, {} deleted", done.details.rows, done.identity.rows);
//! # let _ = preview;
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::contract::{Contract, MAX_KEEP_SECS};
use crate::core::Shared;
use crate::ledger::{
    CallbackPurge, CallbackRecords, CallbackScope, LedgerError, OPEN_STATES, OperationRecord,
    PurgeBatch, PurgeScope, PurgeStage, Purged, TenantScope,
};
use crate::operation::{OperationId, Tenant};
use crate::state::State;

/// The default details clock: 7 days after an operation finished.
pub const DEFAULT_KEEP_DETAILS: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The default identity clock: 35 days after an operation finished (longer than every
/// documented vendor key retention of the built-in profiles, 31 days at most), and never less
/// than a contract's own `retention_secs`.
pub const DEFAULT_KEEP_IDENTITY: Duration = Duration::from_secs(35 * 24 * 60 * 60);
/// The default clock of callback dedupe records: 35 days after the event was received.
pub const DEFAULT_KEEP_CALLBACK_DELIVERIES: Duration = Duration::from_secs(35 * 24 * 60 * 60);
/// The default clock of quarantined callback events: 90 days after they were received.
pub const DEFAULT_KEEP_QUARANTINED_CALLBACKS: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// The ledger-wide retention settings (per-contract clocks override the two operation clocks:
/// `keep_details_secs`, `keep_identity_secs`). Set with
/// [`Builder::retention`](crate::Builder::retention); see the [module
/// docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Retention {
    enabled: bool,
    details: Duration,
    identity: Option<Duration>,
    callback_deliveries: Duration,
    quarantined_callbacks: Option<Duration>,
    interval: Option<Duration>,
    batch: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Self::new()
    }
}

/// A retention setting out of bounds: which one, and what is wrong. The builder reports it as
/// [`BuildError::Invalid`](crate::BuildError::Invalid).
#[derive(Debug)]
pub(crate) struct InvalidSetting {
    pub(crate) field: &'static str,
    pub(crate) problem: String,
}

impl Retention {
    /// The defaults: details 7 days, identity 35 days (at least each vendor's key retention),
    /// callback dedupe records 35 days, quarantined callbacks 90 days; purged every 10 minutes
    /// in batches of 500.
    pub fn new() -> Self {
        Self {
            enabled: true,
            details: DEFAULT_KEEP_DETAILS,
            identity: None,
            callback_deliveries: DEFAULT_KEEP_CALLBACK_DELIVERIES,
            quarantined_callbacks: Some(DEFAULT_KEEP_QUARANTINED_CALLBACKS),
            interval: Some(Duration::from_secs(600)),
            batch: 500,
        }
    }

    /// Never purge anything: every operation, with its request, response and evidence, is
    /// kept forever (the ledger grows without bound). [`Purger::erase_tenant`] and
    /// [`Purger::erase_details`] still work.
    pub fn keep_forever() -> Self {
        Self {
            enabled: false,
            ..Self::new()
        }
    }

    /// The details clock: how long after it finished an operation keeps its request, response
    /// and evidence details (default 7 days). Contracts override it with `keep_details_secs`.
    pub fn details(mut self, keep: Duration) -> Self {
        self.details = keep;
        self
    }

    /// The identity clock: how long after it finished an operation's row is kept (default
    /// 35 days, raised to a contract's `retention_secs` where that is longer). Within it, a
    /// repeat of the intent sends nothing. Contracts override it with `keep_identity_secs`.
    pub fn identity(mut self, keep: Duration) -> Self {
        self.identity = Some(keep);
        self
    }

    /// How long the dedupe record of a vendor event is kept after it was received (default
    /// 35 days). A redelivery after that is treated as a new event: keep it longer than the
    /// vendor redelivers.
    pub fn callback_deliveries(mut self, keep: Duration) -> Self {
        self.callback_deliveries = keep;
        self
    }

    /// How long a quarantined callback event is kept after it was received (default 90 days;
    /// `None`: until erased).
    pub fn quarantined_callbacks(mut self, keep: Option<Duration>) -> Self {
        self.quarantined_callbacks = keep;
        self
    }

    /// How often the [`Recoverer`](crate::Recoverer) runs a purge (default 10 minutes; `None`:
    /// only on demand, with [`Purger::run`]).
    pub fn interval(mut self, every: Option<Duration>) -> Self {
        self.interval = every;
        self
    }

    /// Operations (or callback records) per purge batch, one transaction each (default 500).
    pub fn batch_size(mut self, n: u32) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Whether purging is on (not [`keep_forever`](Self::keep_forever)).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// How often the recoverer purges, if it does.
    pub fn purge_interval(&self) -> Option<Duration> {
        self.interval.filter(|_| self.enabled)
    }

    /// The two clocks of an operation of `contract` (`None`: a contract the configuration no
    /// longer knows: the ledger defaults).
    pub fn clocks_for(&self, contract: Option<&Contract>) -> Clocks {
        let secs = |s: u64| Duration::from_secs(s);
        let details = contract
            .and_then(|c| c.keep_details_secs)
            .map_or(self.details, secs);
        let vendor = contract
            .and_then(|c| c.retention_secs)
            .map_or(Duration::ZERO, secs);
        let identity = match contract.and_then(|c| c.keep_identity_secs) {
            Some(s) => secs(s),
            None => self
                .identity
                .unwrap_or(DEFAULT_KEEP_IDENTITY)
                .max(vendor)
                .max(details),
        };
        Clocks { details, identity }
    }

    /// Checks the settings against the contracts: every clock within bounds, no identity clock
    /// shorter than its details clock or than the vendor's key retention.
    pub(crate) fn validate(&self, contracts: &crate::Contracts) -> Result<(), InvalidSetting> {
        let invalid = |field, problem: String| InvalidSetting { field, problem };
        let max = Duration::from_secs(MAX_KEEP_SECS);
        for (field, d) in [
            ("retention.details", Some(self.details)),
            ("retention.identity", self.identity),
            (
                "retention.callback_deliveries",
                Some(self.callback_deliveries),
            ),
            (
                "retention.quarantined_callbacks",
                self.quarantined_callbacks,
            ),
        ] {
            if let Some(d) = d
                && d > max
            {
                return Err(invalid(
                    field,
                    format!(
                        "{} s is too long: at most {} s (10 years)",
                        d.as_secs(),
                        MAX_KEEP_SECS
                    ),
                ));
            }
        }
        if self.interval.is_some_and(|i| i.is_zero()) {
            return Err(invalid("retention.interval", "must be positive".into()));
        }
        if let Some(identity) = self.identity
            && identity < self.details
        {
            return Err(invalid(
                "retention.identity",
                format!(
                    "{} s is shorter than retention.details ({} s): a row cannot outlive itself",
                    identity.as_secs(),
                    self.details.as_secs()
                ),
            ));
        }
        for contract in contracts.all() {
            if let (Some(identity), Some(vendor), None) = (
                self.identity,
                contract.retention_secs,
                contract.keep_identity_secs,
            ) && identity < Duration::from_secs(vendor)
            {
                return Err(invalid(
                    "retention.identity",
                    format!(
                        "contract `{}`: retention.identity ({} s) is shorter than the vendor's key retention ({vendor} s): \
                         a repeat after the ledger forgot the operation would be a new write; \
                         raise it, or set the contract's keep_identity_secs",
                        contract.name,
                        identity.as_secs()
                    ),
                ));
            }
            // A contract's own identity clock was checked against its vendor's retention and
            // its own details clock when the contracts were validated; left: the ledger's
            // details clock it inherits.
            let clocks = self.clocks_for(Some(contract));
            if clocks.identity < clocks.details {
                return Err(invalid(
                    "retention.identity",
                    format!(
                        "contract `{}`: its keep_identity_secs ({} s) is shorter than its details clock, retention.details ({} s)",
                        contract.name,
                        clocks.identity.as_secs(),
                        clocks.details.as_secs()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The two retention clocks of one contract's operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Clocks {
    /// How long after it finished an operation keeps its details.
    pub details: Duration,
    /// How long after it finished an operation keeps its row.
    pub identity: Duration,
}

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
    fn add(&mut self, p: Purged) {
        self.rows += p.rows;
        self.bytes += p.bytes;
    }
}

impl PurgeReport {
    /// Adds what a batch of `records` dropped to its line.
    fn add_callbacks(&mut self, records: CallbackRecords, done: Purged) {
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
/// reads before confirming (from [`Purger::plan`]; [`Purger::run_plan`] then drops what was due
/// at [`as_of_ms`](Self::as_of_ms) and nothing that became due after it).
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
    /// Every line added up (callback records included): what [`Purger::preview`] answers.
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

/// Runs retention over one configuration's ledger and contracts: from
/// [`Handle::purger`](crate::Handle::purger). Cheap to clone.
#[derive(Clone)]
pub struct Purger {
    shared: Arc<Shared>,
}

impl fmt::Debug for Purger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purger")
            .field("retention", &self.shared.retention)
            .finish_non_exhaustive()
    }
}

/// Batches per stage and contract in one run before it moves on (a backlog is finished by the
/// next runs; each batch is its own transaction).
const MAX_BATCHES: u32 = 10_000;

impl Purger {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// The settings.
    pub fn settings(&self) -> &Retention {
        &self.shared.retention
    }

    /// The clocks of operations frozen with contract `name`.
    pub fn clocks(&self, contract: &str) -> Clocks {
        let c = self.shared.contracts.get(contract).map(|c| &**c);
        self.shared.retention.clocks_for(c)
    }

    /// When `record`'s details and row go, if it is finished (`None` otherwise: it is kept
    /// whatever its age).
    pub fn dates(&self, record: &OperationRecord) -> Option<RetentionDates> {
        if !record.state.is_terminal() {
            return None;
        }
        let clocks = self.clocks(&record.contract.name);
        let at = |d: Duration| {
            record
                .updated_ms
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        };
        Some(RetentionDates {
            finished_ms: record.updated_ms,
            details_until_ms: record.details_removed_ms.unwrap_or(at(clocks.details)),
            details_removed: record.details_removed_ms.is_some(),
            identity_until_ms: at(clocks.identity),
        })
    }

    /// Purges everything due now, stage by stage, in bounded batches; then gives space back.
    /// Counted in `recoverable_write_retention_rows_total{stage}` and
    /// `recoverable_write_retention_bytes_total{stage}` (feature `metrics`). Does nothing under
    /// [`Retention::keep_forever`].
    ///
    /// # Errors
    ///
    /// [`RetentionError::Ledger`]: the batches before the failure are committed.
    pub async fn run(&self) -> Result<PurgeReport, RetentionError> {
        self.pass(false, self.shared.clock.now_ms(), None).await
    }

    /// What [`run`](Self::run) would drop now, counted; nothing changes.
    ///
    /// # Errors
    ///
    /// [`RetentionError::Ledger`].
    pub async fn preview(&self) -> Result<PurgeReport, RetentionError> {
        self.pass(true, self.shared.clock.now_ms(), None).await
    }

    /// What [`run`](Self::run) would drop now, contract by contract, with the clocks each
    /// contract gets; nothing changes. Show it to the person who confirms a purge, then
    /// [`run_plan`](Self::run_plan) it.
    ///
    /// # Errors
    ///
    /// [`RetentionError::Ledger`].
    pub async fn plan(&self) -> Result<PurgePlan, RetentionError> {
        let now = self.shared.clock.now_ms();
        let mut contracts = Vec::new();
        let total = self.pass(true, now, Some(&mut contracts)).await?;
        let settings = &self.shared.retention;
        Ok(PurgePlan {
            as_of_ms: now,
            contracts,
            keep_callback_deliveries_ms: millis(settings.callback_deliveries),
            keep_quarantined_callbacks_ms: settings.quarantined_callbacks.map(millis),
            total,
        })
    }

    /// Purges what was due when `plan` (made by this purger) was made: what it showed, and
    /// nothing that became due while a person read it (a row another purge took meanwhile is
    /// simply not found again). Like [`run`](Self::run) otherwise.
    ///
    /// # Errors
    ///
    /// [`RetentionError::Ledger`]: the batches before the failure are committed.
    pub async fn run_plan(&self, plan: &PurgePlan) -> Result<PurgeReport, RetentionError> {
        self.pass(false, plan.as_of_ms, None).await
    }

    /// One pass over every stage with the cutoffs of `now`; `lines` collects each contract's
    /// counts and clocks.
    async fn pass(
        &self,
        dry_run: bool,
        now: i64,
        mut lines: Option<&mut Vec<ContractPlan>>,
    ) -> Result<PurgeReport, RetentionError> {
        let mut report = PurgeReport::default();
        let settings = &self.shared.retention;
        if !settings.enabled {
            return Ok(report);
        }
        let before =
            |d: Duration| now.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let ledger = &*self.shared.ledger;
        for contract in ledger.finished_contracts().await? {
            let clocks = self.clocks(&contract);
            let batch = |stage, keep| PurgeBatch {
                stage,
                scope: PurgeScope::FinishedBefore {
                    contract: contract.clone(),
                    before_ms: before(keep),
                },
                limit: settings.batch,
                dry_run,
                now_ms: now,
            };
            // Identity first: a row due for deletion need not be slimmed on the way.
            let deleted = self
                .drain(batch(PurgeStage::Identity, clocks.identity))
                .await?;
            let mut slimmed = self
                .drain(batch(PurgeStage::Details, clocks.details))
                .await?;
            if dry_run && deleted.rows > 0 {
                // Counted, not done: the rows the identity stage deletes are still there and
                // were counted again as details due (the identity clock is never the shorter).
                let again = self
                    .drain(batch(PurgeStage::Details, clocks.identity))
                    .await?;
                slimmed = Purged::new(
                    slimmed.rows.saturating_sub(again.rows),
                    slimmed.bytes.saturating_sub(again.bytes),
                );
            }
            report.identity.add(deleted);
            report.details.add(slimmed);
            if let Some(lines) = lines.as_deref_mut() {
                let mut line = ContractPlan {
                    configured: self.shared.contracts.get(&contract).is_some(),
                    keep_details_ms: millis(clocks.details),
                    keep_identity_ms: millis(clocks.identity),
                    contract,
                    ..ContractPlan::default()
                };
                line.details.add(slimmed);
                line.identity.add(deleted);
                lines.push(line);
            }
        }
        for (records, keep) in [
            (
                CallbackRecords::Deliveries,
                Some(settings.callback_deliveries),
            ),
            (CallbackRecords::Quarantine, settings.quarantined_callbacks),
        ] {
            let Some(keep) = keep else { continue };
            let done = self
                .drain_callbacks(CallbackPurge {
                    records,
                    scope: CallbackScope::ReceivedBefore(before(keep)),
                    limit: settings.batch,
                    dry_run,
                })
                .await?;
            report.add_callbacks(records, done);
        }
        if !dry_run && !report.is_empty() {
            report.space_reclaimed = self.reclaim().await?;
        }
        Ok(report)
    }

    /// Runs `batch` until a batch finds less than its limit (a dry run counts once).
    async fn drain(&self, batch: PurgeBatch) -> Result<Purged, RetentionError> {
        let (label, limit, dry_run) = (batch.stage.as_str(), batch.limit, batch.dry_run);
        let ledger = &*self.shared.ledger;
        drain(label, limit, dry_run, || ledger.purge(batch.clone())).await
    }

    async fn drain_callbacks(&self, batch: CallbackPurge) -> Result<Purged, RetentionError> {
        let (label, limit, dry_run) = (batch.records.as_str(), batch.limit, batch.dry_run);
        let ledger = &*self.shared.ledger;
        drain(label, limit, dry_run, || {
            ledger.purge_callbacks(batch.clone())
        })
        .await
    }

    /// Gives freed space back, a bounded step at a time, until the store has none left to give.
    async fn reclaim(&self) -> Result<u64, RetentionError> {
        let mut total = 0;
        for _ in 0..MAX_BATCHES {
            let step = self.shared.ledger.reclaim_space().await?;
            if step == 0 {
                break;
            }
            total += step;
            tokio::task::yield_now().await;
        }
        #[cfg(feature = "metrics")]
        metrics::counter!("recoverable_write_retention_space_reclaimed_bytes_total")
            .increment(total);
        Ok(total)
    }

    /// The right to erasure for a tenant: deletes every finished operation of `tenant` (rows
    /// and evidence) and its callback records (dedupe records and quarantined events), whatever
    /// their age and whatever the retention settings.
    ///
    /// # Errors
    ///
    /// [`RetentionError::OpenOperations`] if the tenant has operations that are not finished:
    /// nothing is erased (their rows are what keeps them from being sent twice; resolve them
    /// first). [`RetentionError::Ledger`]: the batches before the failure are committed; run it
    /// again.
    pub async fn erase_tenant(&self, tenant: &Tenant) -> Result<PurgeReport, RetentionError> {
        let ledger = &*self.shared.ledger;
        let scope = TenantScope::Tenant(tenant.clone());
        let counts = ledger.count_by_state(&scope).await?;
        let open: u64 = counts.iter().map(|(_, n)| n).sum();
        if open > 0 {
            let oldest = ledger.oldest(&scope, &OPEN_STATES).await?;
            let example = oldest
                .iter()
                .find_map(|(_, row)| row.map(|r| r.operation_id.as_str().to_owned()))
                .unwrap_or_default();
            return Err(RetentionError::OpenOperations {
                tenant: tenant.as_str().to_owned(),
                open,
                example,
            });
        }
        let now = self.shared.clock.now_ms();
        let batch = self.shared.retention.batch;
        let mut report = PurgeReport::default();
        report.identity.add(
            self.drain(PurgeBatch {
                stage: PurgeStage::Identity,
                scope: PurgeScope::Tenant(tenant.clone()),
                limit: batch,
                dry_run: false,
                now_ms: now,
            })
            .await?,
        );
        for records in [CallbackRecords::Deliveries, CallbackRecords::Quarantine] {
            let done = self
                .drain_callbacks(CallbackPurge {
                    records,
                    scope: CallbackScope::Tenant(tenant.clone()),
                    limit: batch,
                    dry_run: false,
                })
                .await?;
            report.add_callbacks(records, done);
        }
        report.space_reclaimed = self.reclaim().await?;
        tracing::info!(
            tenant = %tenant.as_str(),
            operations = report.identity.rows,
            callback_records = report.callback_deliveries.rows + report.quarantined_callbacks.rows,
            "tenant erased"
        );
        Ok(report)
    }

    /// The right to erasure for one operation's details: drops its request, response and
    /// evidence details now, whatever its age. Its identity stays (a repeat still sends
    /// nothing). Returns what was dropped (0 rows if they already were).
    ///
    /// # Errors
    ///
    /// [`RetentionError::NotFound`]; [`RetentionError::NotFinished`] if it is not `SUCCEEDED`
    /// or `REJECTED` (nothing changes); [`RetentionError::Ledger`].
    pub async fn erase_details(
        &self,
        tenant: &Tenant,
        operation: &OperationId,
    ) -> Result<Purged, RetentionError> {
        let ledger = &*self.shared.ledger;
        let Some(row) = ledger.get(tenant, operation).await? else {
            return Err(RetentionError::NotFound {
                tenant: tenant.as_str().to_owned(),
                operation: operation.as_str().to_owned(),
            });
        };
        if !row.state.is_terminal() {
            return Err(RetentionError::NotFinished {
                operation: operation.as_str().to_owned(),
                state: row.state,
            });
        }
        let done = ledger
            .purge(PurgeBatch {
                stage: PurgeStage::Details,
                scope: PurgeScope::Operation {
                    tenant: tenant.clone(),
                    operation_id: operation.clone(),
                },
                limit: 1,
                dry_run: false,
                now_ms: self.shared.clock.now_ms(),
            })
            .await?;
        count(PurgeStage::Details.as_str(), done);
        Ok(done)
    }
}

/// Runs `batch()` until one finds less than `limit` rows, counting each (a dry run counts
/// everything at once and changes nothing).
async fn drain<'a>(
    label: &'static str,
    limit: u32,
    dry_run: bool,
    batch: impl Fn() -> crate::ledger::BoxFuture<'a, Result<Purged, LedgerError>>,
) -> Result<Purged, RetentionError> {
    if dry_run {
        return Ok(batch().await?);
    }
    let mut total = Purged::default();
    for _ in 0..MAX_BATCHES {
        let done = batch().await?;
        count(label, done);
        total = total.plus(done);
        if done.rows < u64::from(limit) {
            break;
        }
        // Let the requests' writes in between batches.
        tokio::task::yield_now().await;
    }
    Ok(total)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The retention counters.
fn count(stage: &'static str, done: Purged) {
    #[cfg(feature = "metrics")]
    if done.rows > 0 {
        metrics::counter!("recoverable_write_retention_rows_total", "stage" => stage)
            .increment(done.rows);
        metrics::counter!("recoverable_write_retention_bytes_total", "stage" => stage)
            .increment(done.bytes);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (stage, done);
}
