//! The retention purges: the details and identity stages of finished operations, and old
//! callback records; with the bytes each frees, counted as the SQL backends count them.

use std::sync::Arc;

use bytes::Bytes;

use super::MemoryLedger;
use super::slots::Hashing;
use super::tables::{Key, Row};
use crate::ledger::{
    CallbackPurge, CallbackRecords, CallbackScope, LedgerError, OperationRecord, PurgeBatch,
    PurgeScope, PurgeStage, Purged, QuarantinedCallback,
};
use crate::operation::Tenant;

impl MemoryLedger {
    pub(super) fn purge_now(&self, batch: &PurgeBatch) -> Result<Purged, LedgerError> {
        let mut guard = self.tables()?;
        let t = &mut *guard;
        let mut victims: Vec<(i64, u64, Key)> = t
            .operations
            .rows()
            .filter(|row| purgeable(&row.record, batch))
            .map(|row| (row.record.updated_ms, row.created_seq, row.key()))
            .collect();
        victims.sort();
        if !batch.dry_run {
            victims.truncate(batch.limit as usize);
        }
        let mut purged = Purged::default();
        for (_, _, key) in victims {
            let row = t
                .operations
                .get_mut(&key.0, &key.1)
                .expect("victim listed under the lock");
            let bytes = match batch.stage {
                PurgeStage::Details => detail_bytes(row),
                PurgeStage::Identity => row_bytes(row),
            };
            purged = purged.plus(Purged::new(1, bytes));
            if batch.dry_run {
                continue;
            }
            match batch.stage {
                PurgeStage::Details => slim(row, batch.now_ms),
                PurgeStage::Identity => {
                    let row = t
                        .operations
                        .remove(&key.0, &key.1)
                        .expect("victim listed under the lock");
                    let r = &row.record;
                    let hash = Hashing::get().intent(&r.tenant, &r.action, &r.intent_ref);
                    t.intents.remove(hash, &r.operation_id);
                }
            }
        }
        Ok(purged)
    }

    pub(super) fn purge_callbacks_now(&self, batch: &CallbackPurge) -> Result<Purged, LedgerError> {
        let mut guard = self.tables()?;
        let t = &mut *guard;
        let matches = |tenant: Option<&Tenant>, received_ms: i64| match &batch.scope {
            CallbackScope::ReceivedBefore(before) => received_ms < *before,
            CallbackScope::Tenant(want) => tenant == Some(want),
        };
        let limit = if batch.dry_run {
            usize::MAX
        } else {
            batch.limit as usize
        };
        match batch.records {
            CallbackRecords::Deliveries => {
                let mut victims: Vec<(i64, (String, String))> = t
                    .callback_events
                    .iter()
                    .filter(|(_, d)| matches(d.tenant.as_ref(), d.received_ms))
                    .map(|(k, d)| (d.received_ms, k.clone()))
                    .collect();
                victims.sort();
                victims.truncate(limit);
                let bytes = victims
                    .iter()
                    .map(|(_, (v, e))| (v.len() + e.len()) as u64)
                    .sum();
                let rows = victims.len() as u64;
                if !batch.dry_run {
                    for (_, key) in victims {
                        t.callback_events.remove(&key);
                    }
                }
                Ok(Purged::new(rows, bytes))
            }
            CallbackRecords::Quarantine => {
                let mut purged = Purged::default();
                // In order, so the oldest go first; a dry run keeps everything.
                t.callback_quarantine.retain(|q| {
                    let gone = (purged.rows as usize) < limit
                        && matches(q.tenant.as_ref(), q.received_at_ms);
                    if gone {
                        purged = purged.plus(Purged::new(1, quarantined_bytes(q)));
                    }
                    !gone || batch.dry_run
                });
                Ok(purged)
            }
        }
    }
}

/// Whether `r` is a finished, decodable row `batch` covers.
fn purgeable(r: &OperationRecord, batch: &PurgeBatch) -> bool {
    if !r.state.is_terminal() {
        return false;
    }
    if batch.stage == PurgeStage::Details && r.details_removed_ms.is_some() {
        return false;
    }
    match &batch.scope {
        PurgeScope::FinishedBefore {
            contract,
            before_ms,
        } => *r.contract.name == **contract && r.updated_ms < *before_ms,
        PurgeScope::Tenant(tenant) => r.tenant == *tenant,
        PurgeScope::Operation {
            tenant,
            operation_id,
        } => r.tenant == *tenant && r.operation_id == *operation_id,
    }
}

fn json_len<T: serde::Serialize>(v: &T) -> u64 {
    serde_json::to_vec(v).map_or(0, |b| b.len() as u64)
}

/// The bytes the details stage drops from `row` (as the SQL backends count them).
fn detail_bytes(row: &Row) -> u64 {
    let r = &row.record;
    let response = r
        .response
        .as_ref()
        .map_or(0, |resp| json_len(&resp.headers) + resp.body.len() as u64);
    let evidence: u64 = row
        .evidence
        .iter()
        .map(|e| {
            e.entry.evidence.as_ref().map_or(0, json_len)
                + e.entry.note.as_ref().map_or(0, |n| n.len() as u64)
        })
        .sum();
    json_len(&r.request.headers)
        + r.request.body.len() as u64
        + response
        + r.reason.as_ref().map_or(0, |s| s.len() as u64)
        + evidence
}

/// The bytes the identity stage drops with `row`: its details and its identity columns.
fn row_bytes(row: &Row) -> u64 {
    let r = &row.record;
    detail_bytes(row)
        + (r.tenant.as_str().len()
            + r.operation_id.as_str().len()
            + r.action.len()
            + r.intent_ref.len()
            + r.idempotency_key.as_str().len()
            + r.payload_hash.as_str().len()
            + r.request.method.as_str().len()
            + r.request.url.len()
            + r.remote_ref.as_ref().map_or(0, String::len)) as u64
}

fn quarantined_bytes(q: &QuarantinedCallback) -> u64 {
    (q.vendor.len()
        + q.event_id.len()
        + q.event_type.len()
        + q.match_value.as_ref().map_or(0, String::len)
        + q.reason.len()) as u64
        + q.evidence.as_ref().map_or(0, json_len)
}

/// The details stage on one row.
fn slim(row: &mut Row, now_ms: i64) {
    let r = &mut row.record;
    r.request = Arc::new(crate::operation::FrozenRequest {
        method: r.request.method.clone(),
        url: r.request.url.clone(),
        headers: crate::operation::FrozenHeaders::new(),
        body: Bytes::new(),
    });
    r.response = None;
    r.reason = None;
    r.details_removed_ms = Some(now_ms);
    for e in &mut row.evidence {
        e.entry.evidence = None;
        e.entry.note = None;
    }
}
