//! The in-memory ledger: tests and examples.
//!
//! It keeps the same semantics as the durable backends in every respect (it runs the same
//! conformance suite): the compare-and-swap of [`Ledger::apply`], the sticky "may have applied"
//! fact, the refusal of an attempt-level `REJECTED`, claim and sweep ordering, evidence order.
//! Nothing survives the process.
//!
//! It keeps every row until a purge removes it (about 1.4 KB for a small write: a slot in a
//! chunk of rows, and the row's own strings). A purge frees a row's strings and leaves its slot
//! for the next row: the chunks are never freed.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::callback::{IGNORED, QUARANTINED, check_effect, outcome};
use super::*;
use super::{check_first_update, first_applied, store_entries};

/// An in-memory [`Ledger`]. Cloning gives another handle to the same data.
///
/// ```
/// use recoverable_write::ledger::MemoryLedger;
///
/// let ledger = MemoryLedger::new();
/// let shared = ledger.clone(); // same operations, same evidence
/// ledger.set_unavailable(true); // every call now fails with `LedgerError::Unavailable`
/// # let _ = shared;
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryLedger {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    unavailable: AtomicBool,
    // Never held across an `.await`: every method does its work synchronously, inside the
    // returned future (nothing happens until it is polled, as with the SQL backends).
    tables: Mutex<Tables>,
}

#[derive(Debug, Default)]
struct Tables {
    operations: Operations,
    /// `(tenant, action, intent_ref)` → operation id: the uniqueness of an approved intent.
    intents: Intents,
    /// Creation counter, the equivalent of SQLite's rowid: breaks ties in claim order.
    next_row: u64,
    /// Evidence sequence, global and increasing like an autoincrement id.
    next_seq: i64,
    /// The callback dedupe table: `(vendor, event id)` → what the event did, and when.
    callback_events: HashMap<(String, String), Delivery>,
    /// Quarantined callback events, in the order they were stored.
    callback_quarantine: Vec<QuarantinedCallback>,
}

type Key = (Tenant, OperationId);

/// A dedupe record of a vendor event.
#[derive(Debug)]
struct Delivery {
    /// What it did (kept to mirror the SQL tables; the memory ledger never reads it back).
    #[allow(dead_code)]
    outcome: &'static str,
    tenant: Option<Tenant>,
    received_ms: i64,
}

#[derive(Debug)]
struct Row {
    created_seq: u64,
    record: OperationRecord,
    /// The operation's evidence log, oldest first (kept with the row: one map lookup per
    /// change instead of two). The first three entries (a write that succeeds at once logs
    /// three: created, its claim, its result) live in the row's own allocation.
    evidence: smallvec::SmallVec<[EvidenceEntry; 3]>,
}

/// The error behind `LedgerError::Unavailable` while an outage is simulated.
#[derive(Debug, thiserror::Error)]
#[error("memory ledger is set unavailable (simulated outage)")]
struct SimulatedOutage;

impl MemoryLedger {
    /// A new, empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a store outage: while set, every call fails with
    /// [`LedgerError::Unavailable`] and changes nothing.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.inner.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// Whether an outage is being simulated.
    pub fn is_unavailable(&self) -> bool {
        self.inner.unavailable.load(Ordering::SeqCst)
    }

    /// Number of operations stored (all tenants), outage or not.
    pub fn len(&self) -> usize {
        self.inner
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .operations
            .len()
    }

    /// Whether no operation is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tables(&self) -> Result<MutexGuard<'_, Tables>, LedgerError> {
        if self.is_unavailable() {
            return Err(LedgerError::Unavailable(Box::new(SimulatedOutage)));
        }
        // A panic while holding the lock cannot leave a half-applied change behind: every
        // mutation below is computed first and written with infallible assignments.
        Ok(self
            .inner
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    fn create_or_get_now(&self, new: NewOperation) -> Result<Created, LedgerError> {
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

    fn create_and_apply_now(
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

    fn apply_now(&self, update: Update) -> Result<Option<OperationRecord>, LedgerError> {
        self.apply_with(update, |row| row.cloned())
    }

    /// [`apply_now`](Self::apply_now) without copying the row out: the caller holds the row
    /// the update was computed from, and the compare-and-swap matched its version.
    fn record_unread_now(&self, update: Update) -> Result<Recorded, LedgerError> {
        self.apply_with(update, |row| match row {
            Some(_) => Recorded::Applied,
            None => Recorded::Stale,
        })
    }

    fn claim_due_now(
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

    fn claim_prepared_now(
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

    fn sweep_expired_now(&self, now_ms: i64) -> Result<Vec<OperationRecord>, LedgerError> {
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

    fn list_now(&self, q: &OperationQuery) -> Result<Page, LedgerError> {
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

    fn count_now(&self, scope: &TenantScope) -> Result<StateCounts, LedgerError> {
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

    fn append_evidence_now(
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

impl MemoryLedger {
    fn purge_now(&self, batch: &PurgeBatch) -> Result<Purged, LedgerError> {
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

    fn purge_callbacks_now(&self, batch: &CallbackPurge) -> Result<Purged, LedgerError> {
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

/// The hash function of the memory ledgers' tables (foldhash, seeded at random once per
/// process). Keys are hashed before the lock is taken, and each table keeps the hash beside its
/// entry, so that neither a lookup under the lock nor the table's growth hashes a string.
#[derive(Debug, Default)]
struct Hashing(hashbrown::DefaultHashBuilder);

impl Hashing {
    /// The process's one instance.
    fn get() -> &'static Hashing {
        static HASHING: std::sync::LazyLock<Hashing> = std::sync::LazyLock::new(Hashing::default);
        &HASHING
    }

    /// The hash of an operation's key.
    fn operation(&self, tenant: &Tenant, id: &OperationId) -> u64 {
        self.0.hash_one((tenant.as_str(), id.as_str()))
    }

    /// The hash of an intent.
    fn intent(&self, tenant: &Tenant, action: &str, intent_ref: &str) -> u64 {
        self.0.hash_one((tenant.as_str(), action, intent_ref))
    }
}

/// Rows per chunk of [`Operations`]' store (about 250 KB).
const CHUNK: usize = 256;

/// A chunk of row slots, every one written once (as `None`) when it was made.
type Chunk = Box<[Option<Row>]>;

/// A chunk whose pages have all been written: made outside the ledger's lock, so that storing
/// a row under the lock never waits on the kernel for a fresh page.
fn touched_chunk() -> Chunk {
    std::iter::repeat_with(|| None).take(CHUNK).collect()
}

/// The operations by `(tenant, operation id)`: the rows in fixed chunks of slots (slots freed
/// by a purge are reused), and a hash table of `(key hash, slot)`.
///
/// A memory ledger keeps every row, so how rows are stored decides the memory path's speed
/// under load (issue #14, profiled at concurrency 64):
/// - one allocation per row (about 1 KB) grew the allocator's per-thread heaps page by page
///   under their locks, and the other worker thread waited on them;
/// - one growing vector of rows (a `slab::Slab`, the version before this one) moved that cost
///   under the ledger's own lock: storing a row in a page never written before waits for the
///   kernel to fault it in, and growing the vector moves it, while every other caller waits.
///
/// So rows go into chunks of [`CHUNK`] slots that never move, and the next chunk is made,
/// every page written, by a caller outside the lock before the last one fills
/// ([`Operations::wants_spare`]). Growing the hash table moves 16 bytes per row and hashes no
/// string.
#[derive(Debug, Default)]
struct Operations {
    table: hashbrown::HashTable<(u64, usize)>,
    chunks: Vec<Chunk>,
    /// Slots emptied by a purge, reused first.
    free: Vec<usize>,
    /// Slots handed out so far, free ones included: the next never-used slot.
    used: usize,
    /// The next chunk, made outside the lock.
    spare: Option<Chunk>,
    /// A caller has been asked to make the spare chunk.
    spare_asked: bool,
}

impl Operations {
    fn len(&self) -> usize {
        self.table.len()
    }

    /// The row in `slot` of `chunks` (a slot the table names always holds one).
    fn at(chunks: &[Chunk], slot: usize) -> &Row {
        chunks[slot / CHUNK][slot % CHUNK]
            .as_ref()
            .expect("a slot in the table holds a row")
    }

    /// The cell of `slot`, to store a row in or take it out of.
    fn cell(&mut self, slot: usize) -> &mut Option<Row> {
        &mut self.chunks[slot / CHUNK][slot % CHUNK]
    }

    /// Whether a table entry is the row of `(tenant, id)` (borrowing the chunks only, so that
    /// the table can be borrowed mutably beside it).
    fn is<'a>(
        chunks: &'a [Chunk],
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> impl Fn(&(u64, usize)) -> bool + 'a {
        move |&(_, slot)| {
            let r = &Self::at(chunks, slot).record;
            r.operation_id == *id && r.tenant == *tenant
        }
    }

    /// The slot of `(tenant, id)`, whose hash is `hash`.
    fn slot(&self, hash: u64, tenant: &Tenant, id: &OperationId) -> Option<usize> {
        self.table
            .find(hash, Self::is(&self.chunks, tenant, id))
            .map(|&(_, slot)| slot)
    }

    /// The row of `(tenant, id)`, whose hash is `hash`.
    fn get_hashed(&self, hash: u64, tenant: &Tenant, id: &OperationId) -> Option<&Row> {
        self.slot(hash, tenant, id)
            .map(|slot| Self::at(&self.chunks, slot))
    }

    fn get(&self, tenant: &Tenant, id: &OperationId) -> Option<&Row> {
        self.get_hashed(Hashing::get().operation(tenant, id), tenant, id)
    }

    fn get_mut(&mut self, tenant: &Tenant, id: &OperationId) -> Option<&mut Row> {
        let slot = self.slot(Hashing::get().operation(tenant, id), tenant, id)?;
        self.cell(slot).as_mut()
    }

    /// Stores a row whose key (hashing to `hash`) is not stored yet.
    fn insert_new(&mut self, hash: u64, row: Row) {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                if self.used == self.chunks.len() * CHUNK {
                    // Nobody made the spare in time (or this is the first row): made here.
                    let chunk = self.spare.take().unwrap_or_else(touched_chunk);
                    self.chunks.push(chunk);
                    self.spare_asked = false;
                }
                self.used += 1;
                self.used - 1
            }
        };
        *self.cell(slot) = Some(row);
        self.table.insert_unique(hash, (hash, slot), |&(h, _)| h);
    }

    /// Whether the caller should make the next chunk ([`touched_chunk`], outside the lock) and
    /// hand it to [`give_spare`](Self::give_spare): half of the last chunk is used, no spare is
    /// ready and no other caller was asked.
    fn wants_spare(&mut self) -> bool {
        let ask = self.spare.is_none()
            && !self.spare_asked
            && self.free.is_empty()
            && self.used + CHUNK / 2 >= self.chunks.len() * CHUNK;
        self.spare_asked |= ask;
        ask
    }

    /// Keeps `chunk` for the next growth.
    fn give_spare(&mut self, chunk: Chunk) {
        self.spare.get_or_insert(chunk);
    }

    fn remove(&mut self, tenant: &Tenant, id: &OperationId) -> Option<Row> {
        let hash = Hashing::get().operation(tenant, id);
        let entry = self
            .table
            .find_entry(hash, Self::is(&self.chunks, tenant, id))
            .ok()?;
        let ((_, slot), _) = entry.remove();
        self.free.push(slot);
        self.cell(slot).take()
    }

    /// Every row, in no particular order.
    fn rows(&self) -> impl Iterator<Item = &Row> {
        self.chunks.iter().flat_map(|chunk| chunk.iter().flatten())
    }
}

/// The intent index, `(tenant, action, intent_ref)` → operation id, keyed by a hash of the
/// three so that neither a lookup nor an insert copies the strings: the row the id names holds
/// them, and every hit is checked against it (ids whose intents share a hash, never in
/// practice, are separate entries under the same hash).
#[derive(Debug, Default)]
struct Intents {
    table: hashbrown::HashTable<(u64, OperationId)>,
}

impl Intents {
    /// The row of the intent's operation (the intent hashing to `hash`), through `row` (which
    /// reads a row by id).
    fn find<'r>(
        &self,
        hash: u64,
        (tenant, action, intent_ref): (&Tenant, &str, &str),
        row: impl Fn(&OperationId) -> Option<&'r OperationRecord>,
    ) -> Option<&'r OperationRecord> {
        let is_it = |r: &&OperationRecord| {
            r.tenant == *tenant && &*r.action == action && &*r.intent_ref == intent_ref
        };
        self.table
            .iter_hash(hash)
            .filter(|(h, _)| *h == hash)
            .find_map(|(_, id)| row(id).filter(is_it))
    }

    /// Indexes a new operation under its intent's hash (the intent is not indexed yet: the
    /// caller checked).
    fn insert(&mut self, hash: u64, id: OperationId) {
        self.table.insert_unique(hash, (hash, id), |(h, _)| *h);
    }

    /// Forgets the operation `id` of the intent hashing to `hash`.
    fn remove(&mut self, hash: u64, id: &OperationId) {
        if let Ok(entry) = self
            .table
            .find_entry(hash, |(h, other)| *h == hash && other == id)
        {
            entry.remove();
        }
    }
}

impl Tables {
    /// The oldest operation of `tenant` that `pick` picks (a scan: the memory ledger holds
    /// tests' and examples' rows).
    fn oldest_where(
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
    fn existing(&self, fresh: &Fresh) -> Option<&OperationRecord> {
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
    fn insert(&mut self, fresh: Fresh) -> OperationRecord {
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
struct Fresh {
    hash: u64,
    intent_hash: u64,
    row: Row,
    first: Option<NewEvidence>,
    copy: OperationRecord,
}

impl Row {
    /// The row's key.
    fn key(&self) -> Key {
        (self.record.tenant.clone(), self.record.operation_id.clone())
    }

    /// Appends `entry` to this operation's log under the next number of the ledger-wide
    /// evidence sequence.
    /// Appends evidence that changes nothing else: the version advances, so that every decision
    /// made on the row as it was before this entry is refused as stale (the fencing rule).
    fn append(&mut self, next_seq: &mut i64, entry: NewEvidence) {
        self.record.version += 1;
        self.log(next_seq, entry);
    }

    fn log(&mut self, next_seq: &mut i64, entry: NewEvidence) {
        *next_seq += 1;
        self.evidence.push(EvidenceEntry {
            seq: *next_seq,
            entry,
        });
    }
}

/// The compare-and-swap of [`Ledger::apply`] on one row: applies `update` and logs its
/// evidence if the precondition holds.
fn apply_to<'r>(
    row: &'r mut Row,
    update: Update,
    next_seq: &mut i64,
) -> Option<&'r OperationRecord> {
    let r = &row.record;
    if r.state != update.expect_state
        || r.generation != update.expect_generation
        || r.version != update.expect_version
    {
        return None;
    }
    // Once any attempt may have applied, only evidence about the operation itself rejects it.
    if update.changes.state == State::Rejected && r.may_have_applied && !update.operation_level {
        return None;
    }
    row.record.set_changes(update.changes);
    row.log(next_seq, update.evidence);
    Some(&row.record)
}

impl Ledger for MemoryLedger {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move { self.create_or_get_now(new) })
    }

    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        Box::pin(async move { self.create_and_apply_now(new, first) })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.operations.get(tenant, id).map(|row| row.record.clone()))
        })
    }

    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move { self.apply_now(update) })
    }

    fn record_unread(&self, update: Update) -> BoxFuture<'_, Result<Recorded, LedgerError>> {
        Box::pin(async move { self.record_unread_now(update) })
    }

    fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move { self.claim_due_now(now_ms, lease_ms, limit) })
    }

    fn claim_prepared(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move { self.claim_prepared_now(now_ms, older_than_ms, lease_ms, limit) })
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        Box::pin(async move { self.sweep_expired_now(now_ms) })
    }

    // `quarantined`: the provided empty list. Rows here are typed values, never undecodable.

    fn list<'a>(&'a self, query: &'a OperationQuery) -> BoxFuture<'a, Result<Page, LedgerError>> {
        Box::pin(async move { self.list_now(query) })
    }

    fn count_by_state<'a>(
        &'a self,
        scope: &'a TenantScope,
    ) -> BoxFuture<'a, Result<StateCounts, LedgerError>> {
        Box::pin(async move { self.count_now(scope) })
    }

    fn oldest<'a>(
        &'a self,
        scope: &'a TenantScope,
        states: &'a [State],
    ) -> BoxFuture<'a, Result<OldestPerState, LedgerError>> {
        Box::pin(super::query::oldest_via_list(self, scope, states))
    }

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move { self.append_evidence_now(tenant, id, entry) })
    }

    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.operations
                .get(tenant, id)
                .map(|row| row.evidence.to_vec())
                .unwrap_or_default())
        })
    }

    fn apply_callback(
        &self,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> BoxFuture<'_, Result<CallbackApplied, LedgerError>> {
        Box::pin(async move {
            check_effect(&delivery, &effect)?;
            let mut guard = self.tables()?;
            let t = &mut *guard;
            let key = (delivery.vendor.clone(), delivery.event_id.clone());
            if t.callback_events.contains_key(&key) {
                return Ok(CallbackApplied::Duplicate);
            }
            let done = outcome(&effect);
            // Under the one lock: the record and the change happen together or not at all.
            let Some(row) = t
                .operations
                .get_mut(&delivery.tenant, &delivery.operation_id)
            else {
                return Ok(CallbackApplied::NoOperation);
            };
            let applied = match effect {
                CallbackEffect::Apply(update) => match apply_to(row, update, &mut t.next_seq) {
                    Some(r) => CallbackApplied::Applied(r.clone()),
                    None => return Ok(CallbackApplied::Stale),
                },
                CallbackEffect::Append(entry) => {
                    row.append(&mut t.next_seq, entry);
                    CallbackApplied::Appended
                }
                CallbackEffect::Contradiction(entry) => {
                    let at = entry.at_ms;
                    row.append(&mut t.next_seq, entry);
                    row.record.contradiction_ms.get_or_insert(at);
                    CallbackApplied::Appended
                }
            };
            t.callback_events.insert(
                key,
                Delivery {
                    outcome: done,
                    tenant: Some(delivery.tenant.clone()),
                    received_ms: delivery.received_at_ms,
                },
            );
            Ok(applied)
        })
    }

    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>> {
        Box::pin(async move {
            let mut t = self.tables()?;
            let key = (event.vendor.clone(), event.event_id.clone());
            if t.callback_events.contains_key(&key) {
                return Ok(CallbackQuarantined::Duplicate);
            }
            t.callback_events.insert(
                key,
                Delivery {
                    outcome: QUARANTINED,
                    tenant: event.tenant.clone(),
                    received_ms: event.received_at_ms,
                },
            );
            t.callback_quarantine.push(event);
            Ok(CallbackQuarantined::Stored)
        })
    }

    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            let all = *scope == TenantScope::AllTenants;
            Ok(t.callback_quarantine
                .iter()
                .filter(|q| all || q.tenant.as_ref().is_some_and(|t| scope.contains(t)))
                .take(limit as usize)
                .cloned()
                .collect())
        })
    }

    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.callback_events
                .contains_key(&(vendor.to_owned(), event_id.to_owned())))
        })
    }

    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>> {
        Box::pin(async move {
            let mut t = self.tables()?;
            let key = (event.vendor, event.event_id);
            if t.callback_events.contains_key(&key) {
                return Ok(CallbackRecorded::Duplicate);
            }
            t.callback_events.insert(
                key,
                Delivery {
                    outcome: IGNORED,
                    tenant: event.tenant,
                    received_ms: event.received_at_ms,
                },
            );
            Ok(CallbackRecorded::Recorded)
        })
    }

    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            // A scan: the memory ledger holds tests' and examples' rows.
            Ok(t.operations
                .rows()
                .map(|row| &row.record)
                .find(|r| {
                    r.tenant != *tenant
                        && match by {
                            ProbeBy::OperationId => r.operation_id.as_str() == value,
                            ProbeBy::RemoteRef => r.remote_ref.as_deref() == Some(value),
                        }
                })
                .map(|r| r.tenant.clone()))
        })
    }

    fn acknowledge_contradiction<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let mut guard = self.tables()?;
            let t = &mut *guard;
            let Some(row) = t.operations.get_mut(tenant, id) else {
                return Ok(None);
            };
            if row.record.version != expected_version || row.record.contradiction_ms.is_none() {
                return Ok(None);
            }
            row.append(&mut t.next_seq, entry);
            row.record.contradiction_ms = None;
            Ok(Some(row.record.clone()))
        })
    }

    fn find_by_remote_ref<'a>(
        &'a self,
        tenant: &'a Tenant,
        remote_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.oldest_where(tenant, |r| r.remote_ref.as_deref() == Some(remote_ref)))
        })
    }

    fn find_by_idempotency_key<'a>(
        &'a self,
        tenant: &'a Tenant,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            Ok(t.oldest_where(tenant, |r| r.idempotency_key.as_str() == key))
        })
    }

    fn finished_contracts(&self) -> BoxFuture<'_, Result<Vec<String>, LedgerError>> {
        Box::pin(async move {
            let t = self.tables()?;
            let names: std::collections::BTreeSet<String> = t
                .operations
                .rows()
                .filter(|row| row.record.state.is_terminal())
                .map(|row| row.record.contract.name.to_string())
                .collect();
            Ok(names.into_iter().collect())
        })
    }

    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(async move { self.purge_now(&batch) })
    }

    fn purge_callbacks(&self, batch: CallbackPurge) -> BoxFuture<'_, Result<Purged, LedgerError>> {
        Box::pin(async move { self.purge_callbacks_now(&batch) })
    }
}

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use super::*;
    use crate::ledger::conformance::{T0, keep, new_operation, run, update_of};

    /// The id of [`test_row`] `i`.
    fn test_id(i: usize) -> OperationId {
        OperationId::new(format!("op-{i}"))
    }

    /// Row `i` of `tenant-a`, numbered `i`, with an empty log.
    fn test_row(i: usize) -> Row {
        Row {
            created_seq: i as u64,
            record: new_operation("tenant-a", &format!("op-{i}"), &format!("intent-{i}"))
                .into_prepared(),
            evidence: smallvec::SmallVec::new(),
        }
    }

    /// Slots freed by a purge are reused, and every row is still found under its own key
    /// afterwards, with its own content (the chunks and the table agree).
    #[test]
    fn operations_reuse_purged_slots_and_keep_every_key() {
        let (tenant, id, row) = (Tenant::new("tenant-a"), test_id, test_row);
        let mut ops = Operations::default();
        for i in 0..100 {
            ops.insert_new(Hashing::get().operation(&tenant, &id(i)), row(i));
        }
        for i in (0..100).step_by(3) {
            let removed = ops.remove(&tenant, &id(i)).expect("stored");
            assert_eq!(removed.created_seq, i as u64);
            assert!(ops.remove(&tenant, &id(i)).is_none(), "removed once");
        }
        let slots = (ops.chunks.len(), ops.used);
        for i in 100..134 {
            ops.insert_new(Hashing::get().operation(&tenant, &id(i)), row(i));
        }
        assert_eq!(
            (ops.chunks.len(), ops.used),
            slots,
            "the 34 purged slots were reused"
        );
        assert_eq!(ops.len(), 100);
        for i in 0..134 {
            match ops.get(&tenant, &id(i)) {
                Some(r) => {
                    assert!(i >= 100 || i % 3 != 0, "op-{i} was purged");
                    assert_eq!((r.created_seq, &r.record.operation_id), (i as u64, &id(i)));
                }
                None => assert!(i < 100 && i % 3 == 0, "op-{i} is lost"),
            }
        }
        ops.get_mut(&tenant, &id(101)).expect("stored").created_seq = 7;
        assert_eq!(ops.get(&tenant, &id(101)).map(|r| r.created_seq), Some(7));
        assert_eq!(ops.rows().count(), 100);
    }

    /// Rows fill chunk after chunk; the spare is asked of one caller at a time, once half of
    /// the last chunk is used, and is what the next chunk is made of. Rows stay where they are.
    #[test]
    fn operations_grow_by_chunks_made_outside_the_lock() {
        let (tenant, id) = (Tenant::new("tenant-a"), test_id);
        let mut ops = Operations::default();
        let (mut asked, mut given) = (Vec::new(), Vec::new());
        for i in 0..3 * CHUNK + 1 {
            ops.insert_new(Hashing::get().operation(&tenant, &id(i)), test_row(i));
            if ops.wants_spare() {
                asked.push(i);
                assert!(!ops.wants_spare(), "asked of one caller at a time");
                // The spare for the second chunk is never given: that chunk is made under the
                // lock, and the third is asked for again.
                if asked.len() != 2 {
                    let spare = touched_chunk();
                    given.push(spare.as_ptr());
                    ops.give_spare(spare);
                }
            }
        }
        // Asked once a chunk's half is used (row CHUNK / 2 - 1 fills it).
        let half = CHUNK / 2 - 1;
        assert_eq!(asked, [half, CHUNK + half, 2 * CHUNK + half]);
        assert_eq!(ops.chunks.len(), 4, "the fourth holds the last row");
        assert!(
            ops.spare.is_none(),
            "the third spare became the fourth chunk"
        );
        let chunks: Vec<_> = ops.chunks.iter().map(|c| c.as_ptr()).collect();
        assert_eq!(
            [chunks[1], chunks[3]],
            [given[0], given[1]],
            "spares used as given"
        );
        for i in 0..3 * CHUNK + 1 {
            let row = ops.get(&tenant, &id(i)).expect("stored");
            assert_eq!(
                (row.created_seq, &row.record.operation_id),
                (i as u64, &id(i))
            );
        }
    }

    /// `record_unread` makes the same change as `record` without copying the row out: the
    /// caller's row with the update's changes written in is the row as stored.
    #[test]
    fn record_unread_applies_without_reading_back() {
        run(async {
            let ledger = MemoryLedger::new();
            let created = match ledger
                .create_or_get(new_operation("tenant-a", "op-1", "intent-1"))
                .await
            {
                Ok(Created::New(r)) => r,
                other => panic!("unexpected {other:?}"),
            };
            let done = crate::ledger::conformance::RawChanges {
                remote_ref: Some("W731".to_owned()),
                response: Some(StoredResponse {
                    status: 201,
                    headers: [("content-type", "application/json")].into_iter().collect(),
                    body: Bytes::from_static(b"{\"id\":\"W731\"}"),
                }),
                ..keep(&created, State::Succeeded, T0 + 20)
            };
            let mut stale = update_of(&created, done.clone(), "attempt_result");
            stale.expect_version += 1;
            assert_eq!(
                ledger.record_unread(stale).await.ok(),
                Some(Recorded::Stale)
            );
            let unchanged = ledger.get(&created.tenant, &created.operation_id).await;
            assert_eq!(unchanged.ok().flatten().as_ref(), Some(&created));

            let update = update_of(&created, done, "attempt_result");
            let (changes, _) = update.clone().into_parts();
            assert_eq!(
                ledger.record_unread(update).await.ok(),
                Some(Recorded::Applied)
            );
            let mut expected = created.clone();
            expected.set_changes(changes);
            let stored = ledger.get(&created.tenant, &created.operation_id).await;
            assert_eq!(stored.ok().flatten(), Some(expected));
            let log = ledger
                .evidence(&created.tenant, &created.operation_id)
                .await;
            let kinds: Vec<String> = log
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.entry.kind.into_owned())
                .collect();
            assert_eq!(kinds, ["created", "attempt_result"]);
        });
    }
}
