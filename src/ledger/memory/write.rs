//! Storing and changing operations: create (or find), the compare-and-swap of `apply`, and
//! evidence appended on its own.

use super::MemoryLedger;
use super::slots::{Hashing, touched_chunk};
use super::tables::{Fresh, Row, apply_to};
use crate::ledger::{
    Created, LedgerError, NewEvidence, NewOperation, OperationRecord, Recorded, Update,
    check_first_update, first_applied,
};
use crate::operation::{OperationId, Tenant};

impl MemoryLedger {
    pub(super) fn create_or_get_now(&self, new: NewOperation) -> Result<Created, LedgerError> {
        self.create(self.fresh(new.into_prepared(), None))
    }

    /// Stores `fresh` unless its id or intent is stored; then, if asked, makes the next chunk
    /// of row slots with the lock released ([`Operations::wants_spare`]).
    fn create(&self, fresh: Fresh) -> Result<Created, LedgerError> {
        let mut t = self.tables()?;
        if let Some(existing) = t.existing(&fresh) {
            return Ok(Created::Existing(existing.clone()));
        }
        let created = t.insert(fresh);
        if t.operations.wants_spare() {
            drop(t);
            let chunk = touched_chunk();
            // An outage simulated meanwhile only loses the spare: the next chunk is then made
            // under the lock, as the first one is.
            if let Ok(mut t) = self.tables() {
                t.operations.give_spare(chunk);
            }
        }
        Ok(Created::New(created))
    }

    /// A new operation's row and everything about it that needs no lock (wasted only when the
    /// operation turns out to exist).
    fn fresh(&self, record: OperationRecord, first: Option<NewEvidence>) -> Fresh {
        let hashing = Hashing::get();
        Fresh {
            hash: hashing.operation(&record.tenant, &record.operation_id),
            intent_hash: hashing.intent(&record.tenant, &record.action, &record.intent_ref),
            copy: record.clone(),
            row: Row {
                created_seq: 0,
                record,
                evidence: smallvec::SmallVec::new(),
            },
            first,
        }
    }

    pub(super) fn create_and_apply_now(
        &self,
        new: NewOperation,
        first: Update,
    ) -> Result<Created, LedgerError> {
        check_first_update(&new, &first)?;
        // The claimed row goes in directly, logged `created` then `first`'s entry.
        let (record, entry) = first_applied(new, first);
        self.create(self.fresh(record, Some(entry)))
    }

    /// Runs the compare-and-swap `update` and hands the changed row, if any, to `then`.
    fn apply_with<T>(
        &self,
        update: Update,
        then: impl FnOnce(Option<&OperationRecord>) -> T,
    ) -> Result<T, LedgerError> {
        let mut guard = self.tables()?;
        let t = &mut *guard;
        let row = t.operations.get_mut(&update.tenant, &update.operation_id);
        Ok(then(
            row.and_then(|row| apply_to(row, update, &mut t.next_seq)),
        ))
    }

    pub(super) fn apply_now(&self, update: Update) -> Result<Option<OperationRecord>, LedgerError> {
        self.apply_with(update, |row| row.cloned())
    }

    /// [`apply_now`](Self::apply_now) without copying the row out: the caller holds the row
    /// the update was computed from, and the compare-and-swap matched its version.
    pub(super) fn record_unread_now(&self, update: Update) -> Result<Recorded, LedgerError> {
        self.apply_with(update, |row| match row {
            Some(_) => Recorded::Applied,
            None => Recorded::Stale,
        })
    }
}

impl MemoryLedger {
    pub(super) fn append_evidence_now(
        &self,
        tenant: &Tenant,
        id: &OperationId,
        entry: NewEvidence,
    ) -> Result<(), LedgerError> {
        let mut guard = self.tables()?;
        let t = &mut *guard;
        if let Some(row) = t.operations.get_mut(tenant, id) {
            row.append(&mut t.next_seq, entry);
        }
        Ok(())
    }
}
