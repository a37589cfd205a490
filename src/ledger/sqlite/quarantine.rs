//! Releasing a quarantined row on the SQLite ledger: one write of the group-commit writer that
//! reads the row, decodes it and, only if it decodes, clears its quarantine and appends the
//! `quarantine_released` entry, all in the batch's transaction.

use super::conn::Args;
use super::sql::{INSERT_EVIDENCE, SELECT_BY_ID, evidence};
use super::writer::Finish;
use super::{SQLITE, SqliteLedger, decode_operation, key_args};
use crate::ledger::codec::EvidenceColumns;
use crate::ledger::quarantine::{released_entry, undecodable};
use crate::ledger::{LedgerError, OperationId, Released, Tenant};

/// Clears the quarantine of ?1 tenant, ?2 operation id if it is still at version ?3, drops the
/// lease the quarantining claim left (unless the row is `IN_FLIGHT`: then the sweeper owns
/// it), advances the version, and returns the row.
const RELEASE: &str = "
UPDATE rw_operations SET
    quarantine_reason = NULL,
    quarantined_ms = NULL,
    lease_until_ms = CASE WHEN state = 'IN_FLIGHT' THEN lease_until_ms END,
    version = version + 1
WHERE tenant = ?1 AND operation_id = ?2 AND quarantine_reason IS NOT NULL AND version = ?3
RETURNING *";

impl SqliteLedger {
    /// [`Ledger::release_quarantined`](crate::ledger::Ledger::release_quarantined).
    pub(super) async fn release_now(
        &self,
        tenant: &Tenant,
        id: &OperationId,
        expected_version: u64,
        note: Option<String>,
        now_ms: i64,
    ) -> Result<Released, LedgerError> {
        // No stored version is beyond i64: such an expectation is stale.
        let expected = i64::try_from(expected_version).ok();
        let (tenant, id) = (tenant.clone(), id.clone());
        self.write(move |conn| {
            let key = key_args(&tenant, id.as_str());
            let Some(row) = conn.row(SELECT_BY_ID, &key)? else {
                return Ok(Finish::Unchanged(Released::NotFound));
            };
            let c = super::Columns::new(&row, id.as_str());
            if c.get::<Option<String>>("quarantine_reason")?.is_none() {
                return Ok(Finish::Unchanged(Released::NotQuarantined));
            }
            let current = c.get::<i64>("version")?;
            let Some(expected) = expected.filter(|v| *v == current) else {
                return Ok(Finish::Unchanged(Released::Stale {
                    current: u64::try_from(current).unwrap_or_default(),
                }));
            };
            let decoded = match decode_operation(&row) {
                Ok(r) => r,
                Err(e) => return Ok(Finish::Unchanged(undecodable(&e))),
            };
            let mut a = Args::with_capacity(3);
            a.push(tenant.as_str()).push(id.as_str()).push(expected);
            let Some(released) = conn.row(RELEASE, &a.0)? else {
                // Read and changed in one transaction: the row cannot have moved.
                return Err(LedgerError::Corrupt {
                    operation: id.to_string(),
                    detail: "a quarantined row read for its release could not be released".into(),
                });
            };
            let entry = released_entry(&decoded, note.clone(), now_ms);
            evidence(
                INSERT_EVIDENCE,
                &tenant,
                &id,
                EvidenceColumns::encode(entry, SQLITE)?,
            )
            .execute(conn)?;
            Ok(Finish::Commit(Released::Row(decode_operation(&released)?)))
        })
        .await
    }
}
