//! The ledger's tables under its lock (operations, intents, the callback dedupe and quarantine),
//! a row with its evidence log, and the compare-and-swap on one row.

use std::collections::HashMap;

use super::slots::{Intents, Operations};
use crate::ledger::{
    EvidenceEntry, NewEvidence, OperationRecord, QuarantinedCallback, Update, WorkerHeartbeat,
    store_entries,
};
use crate::operation::{OperationId, Tenant};

#[derive(Debug, Default)]
pub(super) struct Tables {
    pub(super) operations: Operations,
    /// `(tenant, action, intent_ref)` → operation id: the uniqueness of an approved intent.
    pub(super) intents: Intents,
    /// Creation counter, the equivalent of SQLite's rowid: breaks ties in claim order.
    pub(super) next_row: u64,
    /// Evidence sequence, global and increasing like an autoincrement id.
    pub(super) next_seq: i64,
    /// The callback dedupe table: `(vendor, event id)` → what the event did, and when.
    pub(super) callback_events: HashMap<(String, String), Delivery>,
    /// Quarantined callback events, in the order they were stored.
    pub(super) callback_quarantine: Vec<QuarantinedCallback>,
    /// The recoverer workers' heartbeats, by worker id.
    pub(super) workers: HashMap<String, WorkerHeartbeat>,
}

pub(super) type Key = (Tenant, OperationId);

/// A dedupe record of a vendor event.
#[derive(Debug)]
pub(super) struct Delivery {
    /// What it did (kept to mirror the SQL tables; the memory ledger never reads it back).
    #[allow(dead_code)]
    pub(super) outcome: &'static str,
    pub(super) tenant: Option<Tenant>,
    pub(super) received_ms: i64,
}

#[derive(Debug)]
pub(super) struct Row {
    pub(super) created_seq: u64,
    pub(super) record: OperationRecord,
    /// The operation's evidence log, oldest first (kept with the row: one map lookup per
    /// change instead of two). The first three entries (a write that succeeds at once logs
    /// three: created, its claim, its result) live in the row's own allocation.
    pub(super) evidence: smallvec::SmallVec<[EvidenceEntry; 3]>,
}

impl Tables {
    /// The oldest operation of `tenant` that `pick` picks (a scan: the memory ledger holds
    /// tests' and examples' rows).
    pub(super) fn oldest_where(
        &self,
        tenant: &Tenant,
        pick: impl Fn(&OperationRecord) -> bool,
    ) -> Option<OperationRecord> {
        self.operations
            .rows()
            .filter(|row| row.record.tenant == *tenant && pick(&row.record))
            .min_by_key(|row| row.created_seq)
            .map(|row| row.record.clone())
    }

    /// The stored operation with `fresh`'s id, or else with its intent.
    pub(super) fn existing(&self, fresh: &Fresh) -> Option<&OperationRecord> {
        let new = &fresh.row.record;
        if let Some(row) = self
            .operations
            .get_hashed(fresh.hash, &new.tenant, &new.operation_id)
        {
            return Some(&row.record);
        }
        self.intents.find(
            fresh.intent_hash,
            (&new.tenant, &new.action, &new.intent_ref),
            |id| self.operations.get(&new.tenant, id).map(|row| &row.record),
        )
    }

    /// Stores a fresh row (whose id and intent are not stored), logged `created` (then its
    /// first entry, if any); returns its copy.
    pub(super) fn insert(&mut self, fresh: Fresh) -> OperationRecord {
        let Fresh {
            hash,
            intent_hash,
            mut row,
            first,
            copy,
        } = fresh;
        row.created_seq = self.next_row;
        self.next_row += 1;
        self.intents
            .insert(intent_hash, row.record.operation_id.clone());
        row.log(
            &mut self.next_seq,
            store_entries::created(row.record.created_ms),
        );
        if let Some(entry) = first {
            row.log(&mut self.next_seq, entry);
        }
        self.operations.insert_new(hash, row);
        copy
    }
}

/// A new operation's row, made before the lock is taken: the hashes of its key and of its
/// intent, the row (numbered, and logged, once under the lock) and the copy handed back.
pub(super) struct Fresh {
    pub(super) hash: u64,
    pub(super) intent_hash: u64,
    pub(super) row: Row,
    pub(super) first: Option<NewEvidence>,
    pub(super) copy: OperationRecord,
}

impl Row {
    /// The row's key.
    pub(super) fn key(&self) -> Key {
        (self.record.tenant.clone(), self.record.operation_id.clone())
    }

    /// Appends `entry` to this operation's log under the next number of the ledger-wide
    /// evidence sequence.
    /// Appends evidence that changes nothing else: the version advances, so that every decision
    /// made on the row as it was before this entry is refused as stale (the fencing rule).
    pub(super) fn append(&mut self, next_seq: &mut i64, entry: NewEvidence) {
        self.record.version += 1;
        self.log(next_seq, entry);
    }

    pub(super) fn log(&mut self, next_seq: &mut i64, entry: NewEvidence) {
        *next_seq += 1;
        self.evidence.push(EvidenceEntry {
            seq: *next_seq,
            entry,
        });
    }
}

/// The compare-and-swap of [`Ledger::apply`] on one row: applies `update` and logs its
/// evidence if the precondition holds.
pub(super) fn apply_to<'r>(
    row: &'r mut Row,
    update: Update,
    next_seq: &mut i64,
) -> Option<&'r OperationRecord> {
    if !update.holds_for(&row.record) {
        return None;
    }
    row.record.set_changes(update.changes);
    row.log(next_seq, update.evidence);
    Some(&row.record)
}
