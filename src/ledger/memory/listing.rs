//! Listing and counting operations (the review queue's reads).

use super::MemoryLedger;
use super::tables::Row;
use crate::ledger::activity::{RawBucket, changes_of};
use crate::ledger::heartbeat::{checked, most_recent_first};
use crate::ledger::{
    Activity, ActivityWindow, Cursor, DEAD_WORKER_RETENTION_MS, LedgerError, OPEN_STATES,
    OperationQuery, Order, Page, StateCounts, TenantScope, WorkerHeartbeat,
};
use crate::state::State;

impl MemoryLedger {
    pub(super) fn list_now(&self, q: &OperationQuery) -> Result<Page, LedgerError> {
        q.validate()?;
        let after = q.after.as_ref().map(Cursor::parts).transpose()?;
        let t = self.tables()?;
        let key = |row: &Row| {
            (
                row.record.created_ms,
                i64::try_from(row.created_seq).unwrap_or(i64::MAX),
            )
        };
        let newest = q.order == Order::NewestFirst;
        let mut hits: Vec<(&Row, (i64, i64))> = t
            .operations
            .rows()
            .filter(|row| q.matches(&row.record))
            .map(|row| (row, key(row)))
            .filter(|(_, k)| match after {
                None => true,
                Some(c) if newest => *k < c,
                Some(c) => *k > c,
            })
            .collect();
        hits.sort_by_key(|(_, k)| *k);
        if newest {
            hits.reverse();
        }
        let limit = q.limit as usize;
        let next = (hits.len() > limit).then(|| {
            let (created, k) = hits[limit - 1].1;
            Cursor::new(created, k)
        });
        let rows = hits
            .into_iter()
            .take(limit)
            .map(|(row, _)| row.record.clone())
            .collect();
        Ok(Page::new(rows, next, Vec::new()))
    }

    pub(super) fn count_now(&self, scope: &TenantScope) -> Result<StateCounts, LedgerError> {
        let t = self.tables()?;
        let mut counts = StateCounts::default();
        for state in OPEN_STATES {
            let n = t
                .operations
                .rows()
                .filter(|row| row.record.state == state && scope.contains(&row.record.tenant))
                .count();
            counts.set(state, n as u64);
        }
        Ok(counts)
    }

    /// Every row's log read for the window's state changes: the memory ledger holds tests' and
    /// examples' rows.
    pub(super) fn activity_now(
        &self,
        scope: &TenantScope,
        window: ActivityWindow,
    ) -> Result<Activity, LedgerError> {
        window.validate()?;
        let t = self.tables()?;
        let mut per: std::collections::BTreeMap<i64, RawBucket> = Default::default();
        let mut backlog_now = 0;
        for row in t.operations.rows() {
            if !scope.contains(&row.record.tenant) {
                continue;
            }
            if row.record.state == crate::state::State::ManualReview {
                backlog_now += 1;
            }
            for e in &row.evidence {
                let e = &e.entry;
                if e.at_ms < window.since_ms {
                    continue;
                }
                let index = (e.at_ms - window.since_ms) / window.bucket_ms;
                for change in changes_of(&e.kind, e.from_state, e.to_state) {
                    per.entry(index)
                        .or_insert_with(|| RawBucket {
                            index,
                            ..RawBucket::default()
                        })
                        .count(change);
                }
            }
        }
        Ok(Activity::from_raw(window, backlog_now, per.into_values()))
    }

    pub(super) fn record_heartbeat_now(&self, beat: WorkerHeartbeat) -> Result<(), LedgerError> {
        let beat = checked(beat)?;
        let mut t = self.tables()?;
        let horizon = beat
            .pass_finished_ms
            .saturating_sub(DEAD_WORKER_RETENTION_MS);
        t.workers.retain(|_, w| w.pass_finished_ms >= horizon);
        t.workers.insert(beat.worker_id.clone(), beat);
        Ok(())
    }

    pub(super) fn heartbeats_now(&self) -> Result<Vec<WorkerHeartbeat>, LedgerError> {
        let t = self.tables()?;
        Ok(most_recent_first(t.workers.values().cloned().collect()))
    }

    pub(super) fn count_overdue_now(
        &self,
        scope: &TenantScope,
        checked_before_ms: i64,
    ) -> Result<u64, LedgerError> {
        let t = self.tables()?;
        let n = t
            .operations
            .rows()
            .filter(|row| {
                let r = &row.record;
                matches!(r.state, State::Unknown | State::RetryReady)
                    && r.next_check_ms.is_some_and(|at| at < checked_before_ms)
                    && scope.contains(&r.tenant)
            })
            .count();
        Ok(n as u64)
    }
}
