//! The right to erasure: a tenant's finished operations and callback records, or one
//! operation's details, whatever their age.

use super::pass::count;
use super::{PurgeReport, Purger, RetentionError};
use crate::ledger::{
    CallbackPurge, CallbackRecords, CallbackScope, OPEN_STATES, PurgeBatch, PurgeScope, PurgeStage,
    Purged, TenantScope,
};
use crate::operation::{OperationId, Tenant};

impl Purger {
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
        let ledger = &*self.listing;
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
        let purges = &self.purges;
        let now = purges.shared.clock.now_ms();
        let batch = purges.shared.retention.batch;
        let mut report = PurgeReport::default();
        report.identity.add(
            purges
                .drain(PurgeBatch {
                    stage: PurgeStage::Identity,
                    scope: PurgeScope::Tenant(tenant.clone()),
                    limit: batch,
                    dry_run: false,
                    now_ms: now,
                })
                .await?,
        );
        for records in [CallbackRecords::Deliveries, CallbackRecords::Quarantine] {
            let done = purges
                .drain_callbacks(CallbackPurge {
                    records,
                    scope: CallbackScope::Tenant(tenant.clone()),
                    limit: batch,
                    dry_run: false,
                })
                .await?;
            report.add_callbacks(records, done);
        }
        report.space_reclaimed = purges.reclaim().await?;
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
        let ledger = &*self.listing;
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
        let done = self
            .purges
            .ledger()
            .purge(PurgeBatch {
                stage: PurgeStage::Details,
                scope: PurgeScope::Operation {
                    tenant: tenant.clone(),
                    operation_id: operation.clone(),
                },
                limit: 1,
                dry_run: false,
                now_ms: self.purges.shared.clock.now_ms(),
            })
            .await?;
        count(PurgeStage::Details.as_str(), done);
        Ok(done)
    }
}
