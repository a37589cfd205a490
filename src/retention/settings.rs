//! The retention settings ([`Retention`]): the ledger-wide clocks, the clocks each contract
//! gets ([`Clocks`]), and their checks against the contracts.

use std::time::Duration;

use crate::contract::{Contract, MAX_KEEP_SECS};

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
/// docs](super).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Retention {
    pub(super) enabled: bool,
    pub(super) details: Duration,
    pub(super) identity: Option<Duration>,
    pub(super) callback_deliveries: Duration,
    pub(super) quarantined_callbacks: Option<Duration>,
    pub(super) interval: Option<Duration>,
    pub(super) batch: u32,
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
    /// kept forever (the ledger grows without bound).
    /// [`Purger::erase_tenant`](super::Purger::erase_tenant) and
    /// [`Purger::erase_details`](super::Purger::erase_details) still work.
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
    /// only on demand, with [`Purger::run`](super::Purger::run)).
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
