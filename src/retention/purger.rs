//! The [`Purger`]: retention run over one configuration's ledger and contracts, and what it
//! tells about one operation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::pass::Purges;
use super::report::millis;
use super::{Clocks, PurgePlan, PurgeReport, Retention, RetentionDates, RetentionError};
use crate::core::Shared;
use crate::ledger::{ListingLedger, OperationRecord, RetentionLedger};

/// Runs retention over one configuration's ledger and contracts: from
/// [`Handle::purger`](crate::Handle::purger), for a ledger with retention and listing (the
/// right to erasure counts a tenant's open operations first). Cheap to clone.
#[derive(Clone)]
pub struct Purger {
    /// The purges, through the ledger's retention.
    pub(super) purges: Purges,
    /// The same ledger's listing.
    pub(super) listing: Arc<dyn ListingLedger>,
}

impl fmt::Debug for Purger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purger")
            .field("retention", &self.purges.shared.retention)
            .finish_non_exhaustive()
    }
}

impl Purger {
    /// A purger over `shared`, whose ledger is `retention` and `listing`.
    pub(crate) fn from_parts(
        shared: Arc<Shared>,
        retention: Arc<dyn RetentionLedger>,
        listing: Arc<dyn ListingLedger>,
    ) -> Self {
        Self {
            purges: Purges::new(shared, retention),
            listing,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Retention {
        &self.purges.shared.retention
    }

    /// The clocks of operations frozen with contract `name`.
    pub fn clocks(&self, contract: &str) -> Clocks {
        self.purges.clocks(contract)
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
        self.purges.run().await
    }

    /// What [`run`](Self::run) would drop now, counted; nothing changes.
    ///
    /// # Errors
    ///
    /// [`RetentionError::Ledger`].
    pub async fn preview(&self) -> Result<PurgeReport, RetentionError> {
        let now = self.purges.shared.clock.now_ms();
        self.purges.pass(true, now, None).await
    }

    /// What [`run`](Self::run) would drop now, contract by contract, with the clocks each
    /// contract gets; nothing changes. Show it to the person who confirms a purge, then
    /// [`run_plan`](Self::run_plan) it.
    ///
    /// # Errors
    ///
    /// [`RetentionError::Ledger`].
    pub async fn plan(&self) -> Result<PurgePlan, RetentionError> {
        let now = self.purges.shared.clock.now_ms();
        let mut contracts = Vec::new();
        let total = self.purges.pass(true, now, Some(&mut contracts)).await?;
        let settings = &self.purges.shared.retention;
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
        self.purges.pass(false, plan.as_of_ms, None).await
    }
}
