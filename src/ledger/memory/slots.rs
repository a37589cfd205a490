//! How rows are stored: fixed chunks of slots that never move, hash tables of key hashes for
//! operations and intents, and the process's one hasher.

use std::hash::BuildHasher;

use super::tables::Row;
use crate::ledger::OperationRecord;
use crate::operation::{OperationId, Tenant};

/// The hash function of the memory ledgers' tables (foldhash, seeded at random once per
/// process). Keys are hashed before the lock is taken, and each table keeps the hash beside its
/// entry, so that neither a lookup under the lock nor the table's growth hashes a string.
#[derive(Debug, Default)]
pub(super) struct Hashing(hashbrown::DefaultHashBuilder);

impl Hashing {
    /// The process's one instance.
    pub(super) fn get() -> &'static Hashing {
        static HASHING: std::sync::LazyLock<Hashing> = std::sync::LazyLock::new(Hashing::default);
        &HASHING
    }

    /// The hash of an operation's key.
    pub(super) fn operation(&self, tenant: &Tenant, id: &OperationId) -> u64 {
        self.0.hash_one((tenant.as_str(), id.as_str()))
    }

    /// The hash of an intent.
    pub(super) fn intent(&self, tenant: &Tenant, action: &str, intent_ref: &str) -> u64 {
        self.0.hash_one((tenant.as_str(), action, intent_ref))
    }
}

/// Rows per chunk of [`Operations`]' store (about 250 KB).
pub(super) const CHUNK: usize = 256;

/// A chunk of row slots, every one written once (as `None`) when it was made.
pub(super) type Chunk = Box<[Option<Row>]>;

/// A chunk whose pages have all been written: made outside the ledger's lock, so that storing
/// a row under the lock never waits on the kernel for a fresh page.
pub(super) fn touched_chunk() -> Chunk {
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
pub(super) struct Operations {
    table: hashbrown::HashTable<(u64, usize)>,
    pub(super) chunks: Vec<Chunk>,
    /// Slots emptied by a purge, reused first.
    free: Vec<usize>,
    /// Slots handed out so far, free ones included: the next never-used slot.
    pub(super) used: usize,
    /// The next chunk, made outside the lock.
    pub(super) spare: Option<Chunk>,
    /// A caller has been asked to make the spare chunk.
    spare_asked: bool,
}

impl Operations {
    pub(super) fn len(&self) -> usize {
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
    pub(super) fn get_hashed(&self, hash: u64, tenant: &Tenant, id: &OperationId) -> Option<&Row> {
        self.slot(hash, tenant, id)
            .map(|slot| Self::at(&self.chunks, slot))
    }

    pub(super) fn get(&self, tenant: &Tenant, id: &OperationId) -> Option<&Row> {
        self.get_hashed(Hashing::get().operation(tenant, id), tenant, id)
    }

    pub(super) fn get_mut(&mut self, tenant: &Tenant, id: &OperationId) -> Option<&mut Row> {
        let slot = self.slot(Hashing::get().operation(tenant, id), tenant, id)?;
        self.cell(slot).as_mut()
    }

    /// Stores a row whose key (hashing to `hash`) is not stored yet.
    pub(super) fn insert_new(&mut self, hash: u64, row: Row) {
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
    pub(super) fn wants_spare(&mut self) -> bool {
        let ask = self.spare.is_none()
            && !self.spare_asked
            && self.free.is_empty()
            && self.used + CHUNK / 2 >= self.chunks.len() * CHUNK;
        self.spare_asked |= ask;
        ask
    }

    /// Keeps `chunk` for the next growth.
    pub(super) fn give_spare(&mut self, chunk: Chunk) {
        self.spare.get_or_insert(chunk);
    }

    pub(super) fn remove(&mut self, tenant: &Tenant, id: &OperationId) -> Option<Row> {
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
    pub(super) fn rows(&self) -> impl Iterator<Item = &Row> {
        self.chunks.iter().flat_map(|chunk| chunk.iter().flatten())
    }
}

/// The intent index, `(tenant, action, intent_ref)` → operation id, keyed by a hash of the
/// three so that neither a lookup nor an insert copies the strings: the row the id names holds
/// them, and every hit is checked against it (ids whose intents share a hash, never in
/// practice, are separate entries under the same hash).
#[derive(Debug, Default)]
pub(super) struct Intents {
    table: hashbrown::HashTable<(u64, OperationId)>,
}

impl Intents {
    /// The row of the intent's operation (the intent hashing to `hash`), through `row` (which
    /// reads a row by id).
    pub(super) fn find<'r>(
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
    pub(super) fn insert(&mut self, hash: u64, id: OperationId) {
        self.table.insert_unique(hash, (hash, id), |(h, _)| *h);
    }

    /// Forgets the operation `id` of the intent hashing to `hash`.
    pub(super) fn remove(&mut self, hash: u64, id: &OperationId) {
        if let Ok(entry) = self
            .table
            .find_entry(hash, |(h, other)| *h == hash && other == id)
        {
            entry.remove();
        }
    }
}
