//! The naive in-memory reference: the work the layer's semantics ask of a write when the ledger
//! is the process's memory, written plainly without the crate's code or types. **Not a limit**:
//! it measured slower than `layer_memory` (51-57% of `bare` at concurrency 64 against the
//! layer's 62-65%), so it bounds nothing; it shows what that work costs written the obvious
//! way, beside `bare` and the layer.
//!
//! Per request, as `minimal_sqlite` does it (and with its helpers): the request's body is read
//! and frozen (method, URL, headers and body in one buffer), the payload hashed, an operation
//! id (a UUID v7, as the crate) and a key and attempt id (random UUID v4s) made; the **claim**
//! (one row: identity, key, payload hash, frozen request, the claim's evidence) is inserted
//! before the send, under one lock, refused if the operation id exists; the key goes
//! out as the `idempotency-key` header; the response's body is read, and the **result**
//! (status and body) written into the row after. Every row is kept, as a ledger keeps its rows
//! until retention drops them: the memory a row takes is part of the semantics.
//!
//! One `std::sync::Mutex` over rows in chunks that never move and a `HashMap` from operation
//! id to row, sized up front (a first version with two growing maps, rows by id and ids by
//! key, ran at 51% of `bare` against the layer's 62%: rehashing, not the semantics); the result
//! goes to the slot the claim returned. No evidence log, no version, no tracing, no timers, no
//! send-once guard (the bare client does not retry).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::minimal_sqlite::Claim;
use crate::sqlite_references::ReferenceStore;

/// One operation's row. Kept, never read back here: the bench answers no repeat, but the row
/// must hold what would answer one.
#[allow(dead_code)]
struct Row {
    claim: Claim,
    status: Option<u16>,
    response: Option<Bytes>,
}

/// Rows in chunks that never move (a chunk is allocated at its full size and only appended
/// to), and the operation ids' index, sized up front for a bench's rows so that it does not
/// rehash while measured.
struct Rows {
    chunks: Vec<Vec<Row>>,
    by_id: HashMap<String, (u32, u32)>,
}

/// Rows per chunk.
const CHUNK: usize = 1 << 16;

impl Default for Rows {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            by_id: HashMap::with_capacity(1 << 21),
        }
    }
}

/// The reference's store (cloned freely: one store behind one lock).
#[derive(Clone, Default)]
pub struct NaiveMemory(Arc<Mutex<Rows>>);

impl ReferenceStore for NaiveMemory {
    type Slot = (u32, u32);

    /// Inserts the claim's row; where it is, or `None` if its operation id exists. The key is
    /// a fresh random UUID, unique by construction: no index of keys is needed to keep it so.
    async fn claim(&self, claim: Claim) -> Option<(u32, u32)> {
        let mut rows = self.0.lock().expect("not poisoned");
        if rows.by_id.contains_key(&claim.operation_id) {
            return None;
        }
        if rows.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            rows.chunks.push(Vec::with_capacity(CHUNK));
        }
        let chunk = rows.chunks.len() - 1;
        let at = (chunk as u32, rows.chunks[chunk].len() as u32);
        rows.by_id.insert(claim.operation_id.clone(), at);
        rows.chunks[chunk].push(Row {
            claim,
            status: None,
            response: None,
        });
        Some(at)
    }

    /// Writes the result into the claimed row.
    fn record(&self, (chunk, i): (u32, u32), status: u16, response: Bytes) {
        let mut rows = self.0.lock().expect("not poisoned");
        let row = &mut rows.chunks[chunk as usize][i as usize];
        row.status = Some(status);
        row.response = Some(response);
    }
}
