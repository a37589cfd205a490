//! Releasing a quarantined row on the PostgreSQL ledger: one transaction that locks the row
//! (`FOR UPDATE`), decodes it and, only if it decodes, clears its quarantine and appends the
//! `quarantine_released` entry in one statement.

use sqlx::AssertSqlSafe;
use sqlx::postgres::PgConnection;

use super::writer::finish;
use super::{
    BindEntry, Columns, POSTGRES, PostgresLedger, check_key, decode_operation, unavailable,
};
use crate::ledger::codec::EvidenceColumns;
use crate::ledger::quarantine::{released_entry, undecodable};
use crate::ledger::{LedgerError, OperationId, Released, Tenant};

impl PostgresLedger {
    /// [`Ledger::release_quarantined`](crate::ledger::Ledger::release_quarantined).
    pub(super) async fn release_now(
        &self,
        tenant: &Tenant,
        id: &OperationId,
        expected_version: u64,
        note: Option<String>,
        now_ms: i64,
    ) -> Result<Released, LedgerError> {
        check_key(tenant, id)?;
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let released = self
            .release_in(&mut tx, tenant, id, expected_version, note, now_ms)
            .await;
        finish(tx, released).await
    }

    async fn release_in(
        &self,
        tx: &mut PgConnection,
        tenant: &Tenant,
        id: &OperationId,
        expected_version: u64,
        note: Option<String>,
        now_ms: i64,
    ) -> Result<Released, LedgerError> {
        let row = sqlx::query(AssertSqlSafe(self.sql.select_for_release.clone()))
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(unavailable)?;
        let Some(row) = row else {
            return Ok(Released::NotFound);
        };
        let c = Columns::new(&row, id.as_str());
        if c.get::<Option<String>>("quarantine_reason")?.is_none() {
            return Ok(Released::NotQuarantined);
        }
        let current = c.get::<i64>("version")?;
        // No stored version is beyond i64: such an expectation is stale.
        let Some(expected) = i64::try_from(expected_version)
            .ok()
            .filter(|v| *v == current)
        else {
            return Ok(Released::Stale {
                current: u64::try_from(current).unwrap_or_default(),
            });
        };
        let decoded = match decode_operation(&row) {
            Ok(r) => r,
            Err(e) => return Ok(undecodable(&e)),
        };
        let e = EvidenceColumns::encode(released_entry(&decoded, note, now_ms), POSTGRES)?;
        let released = sqlx::query(AssertSqlSafe(self.sql.release.clone()))
            .bind(self.caller_now(now_ms))
            .bind(tenant.as_str())
            .bind(id.as_str())
            .bind_entry(e)
            .bind(expected)
            .fetch_optional(&mut *tx)
            .await
            .map_err(unavailable)?;
        match released {
            Some(row) => Ok(Released::Row(decode_operation(&row)?)),
            // Locked since it was read: the row cannot have moved.
            None => Err(LedgerError::Corrupt {
                operation: id.to_string(),
                detail: "a quarantined row read for its release could not be released".into(),
            }),
        }
    }
}
