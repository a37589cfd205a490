//! Recovery's claims (`claim_due`, `claim_prepared`) and the sweep of expired leases.

use super::MemoryLedger;
use super::tables::Key;
use crate::ledger::{LedgerError, OperationRecord, store_entries};
use crate::state::State;

impl MemoryLedger {
    pub(super) fn claim_due_now(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> Result<Vec<OperationRecord>, LedgerError> {
        self.claim_where(now_ms, lease_ms, limit, |r| {
            let next = r.next_check_ms?;
            (r.state.is_due_work() && next <= now_ms).then_some(next)
        })
    }

    pub(super) fn claim_prepared_now(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> Result<Vec<OperationRecord>, LedgerError> {
        let created_by = now_ms.saturating_sub(older_than_ms);
        self.claim_where(now_ms, lease_ms, limit, |r| {
            (r.state == State::Prepared && r.created_ms <= created_by).then_some(r.created_ms)
        })
    }

    /// Claims up to `limit` unleased rows that `due` picks (with the time they sort by, earliest
    /// first, then in creation order): generation and version +1, a lease, a `recovery_claimed`
    /// entry. The one claim behind `claim_due` and `claim_prepared`.
    fn claim_where(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
        due: impl Fn(&OperationRecord) -> Option<i64>,
    ) -> Result<Vec<OperationRecord>, LedgerError> {
        let mut guard = self.tables()?;
        let t = &mut *guard;
        let mut picked: Vec<(i64, u64, Key)> = t
            .operations
            .rows()
            .filter_map(|row| {
                let r = &row.record;
                let unleased = r.lease_until_ms.is_none_or(|l| l <= now_ms);
                let at = due(r).filter(|_| unleased)?;
                Some((at, row.created_seq, row.key()))
            })
            .collect();
        picked.sort();
        picked.truncate(limit as usize);
        let lease_until = now_ms.saturating_add(lease_ms);
        let mut claimed = Vec::with_capacity(picked.len());
        for (_, _, key) in picked {
            let Some(row) = t.operations.get_mut(&key.0, &key.1) else {
                continue;
            };
            let r = &mut row.record;
            r.generation = r.generation.next();
            r.version += 1;
            r.lease_until_ms = Some(lease_until);
            r.updated_ms = now_ms;
            let out = r.clone();
            row.log(
                &mut t.next_seq,
                store_entries::recovery_claimed(&out, now_ms),
            );
            claimed.push(out);
        }
        Ok(claimed)
    }

    pub(super) fn sweep_expired_now(
        &self,
        now_ms: i64,
    ) -> Result<Vec<OperationRecord>, LedgerError> {
        let mut guard = self.tables()?;
        let t = &mut *guard;
        let mut expired: Vec<(u64, Key)> = t
            .operations
            .rows()
            .filter(|row| {
                row.record.state == State::InFlight
                    && row.record.lease_until_ms.is_some_and(|l| l < now_ms)
            })
            .map(|row| (row.created_seq, row.key()))
            .collect();
        expired.sort();
        let mut swept = Vec::with_capacity(expired.len());
        for (_, key) in expired {
            let Some(row) = t.operations.get_mut(&key.0, &key.1) else {
                continue;
            };
            let r = &mut row.record;
            r.state = State::Unknown;
            r.generation = r.generation.next();
            r.version += 1;
            r.may_have_applied = true;
            r.next_check_ms = Some(now_ms);
            r.lease_until_ms = None;
            r.reason = Some(store_entries::LEASE_EXPIRED_REASON.to_owned());
            r.updated_ms = now_ms;
            let out = r.clone();
            row.log(&mut t.next_seq, store_entries::lease_expired(&out, now_ms));
            swept.push(out);
        }
        Ok(swept)
    }
}
