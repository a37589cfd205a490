//! The ledger: where operations, their budgets and their evidence live.
//!
//! A ledger is one small async trait per capability, each object safe:
//!
//! - [`Ledger`]: the write path and recovery (create, the compare-and-swap, results, claims,
//!   the sweep, evidence, quarantined rows). All the layer and the recoverer need.
//! - [`ListingLedger`]: the operators' queue (listing, counts, the oldest rows, the lookups by
//!   vendor reference and idempotency key, acknowledging contradictions) and the recoverer
//!   workers' heartbeats ([`WorkerHeartbeat`]) with the count of overdue checks. The reviews, the
//!   review page and the recoverer's queue gauges need it.
//! - [`CallbackLedger`]: vendor callbacks stored exactly once, and their quarantine. The
//!   callbacks receiver needs it.
//! - [`RetentionLedger`]: purges of finished operations and callback records. The purger and
//!   the recoverer's periodic purge need it.
//! - [`FullLedger`]: all of them, for `Arc<dyn FullLedger>`.
//!
//! A backend implements what it can; a missing capability is a compile error where it is
//! needed ([`Handle`](crate::Handle) hands out the reviews and the purger only for a ledger
//! with theirs), never an error at run time. The recoverer reaches its housekeeping through
//! [`Ledger::housekeeping`] ([`Housekeeping`]). `Arc<L>` forwards every trait `L` implements.
//!
//! Every state change goes through [`Ledger::apply`], a compare-and-swap the store performs in
//! one statement: it succeeds only if the row is still in the expected state, at the expected
//! generation and version. A decision computed from a stale read is refused by the store, never
//! by a read-compare-write in Rust.
//!
//! # The fencing rule
//!
//! Every decision about an operation (a reviewer's claim or resolution, a replay's claim of
//! send rights, a callback's effect, an escalation) is made on a view of the row and names that
//! view: its `version`. The version advances at every change **and at every evidence entry
//! appended on its own** ([`Ledger::append_evidence`], the late entry of
//! [`Ledger::record_detached`], [`CallbackEffect::Append`]). So a decision made on a view older
//! than any evidence is refused as stale, whatever the evidence's source, and the decider reads
//! again. A replay also reads the evidence recorded since the decision that made the row
//! sendable and is not sent if any of it says the write may have applied
//! ([`review::says_may_have_applied`](crate::review::says_may_have_applied)).
//!
//! Backends:
//! - [`MemoryLedger`]: tests and examples.
//! - [`SqliteLedger`] (feature `sqlite`, default): the embedded durable default.
//! - `PostgresLedger` (feature `postgres`): many workers on many machines, and the outbox.
//!
//! Every backend runs the same conformance suite ([`conformance`], feature `test-util`).
//!
//! Applications read operations and evidence here and never write rows themselves: every
//! change is computed by the [state machine](crate::state). The row-writing types a backend
//! receives (`Update`, `Changes`, `NewEvidence`) live in [`backend`], for backend implementers.
//!
//! Rows this version cannot decode are quarantined by the claim or sweep that meets them, then
//! counted, listed and released once a version that can read them runs: see
//! [`Ledger::quarantined`] and [`Ledger::release_quarantined`].
//!
//! Vendor callbacks (webhooks) are stored through [`CallbackLedger::apply_callback`] (the dedupe
//! record, the compare-and-swap and the evidence in one transaction),
//! [`CallbackLedger::quarantine_callback`] and the lookups
//! [`ListingLedger::find_by_remote_ref`] and [`ListingLedger::find_by_idempotency_key`].

use std::future::Future;
use std::pin::Pin;

// The names the backends and the other submodules take from here (`use super::*`,
// `crate::ledger::Tenant`).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use bytes::Bytes;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::operation::{AttemptId, FrozenRequest, Generation, IdempotencyKey, PayloadHash};
use crate::operation::{OperationId, Tenant};
use crate::state::State;

mod activity;
pub use activity::{Activity, ActivityBucket, ActivityWindow, MAX_BUCKETS};
pub mod backend;
mod callback;
pub(crate) use backend::{NewEvidence, Update};
pub(crate) use backend::{check_first_update, first_applied, store_entries};
pub use callback::{
    CallbackApplied, CallbackDelivery, CallbackEffect, CallbackQuarantined, CallbackRecorded,
    IgnoredCallback, ProbeBy, QuarantinedCallback,
};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod codec;
mod forward;
mod headers;
pub use headers::{StoredHeaders, StoredHeadersIter};
mod heartbeat;
pub use heartbeat::{
    DEAD_WORKER_RETENTION_MS, MAX_ERROR_CHARS, MAX_WORKERS_LISTED, MISSED_BEATS, WorkerHeartbeat,
};
mod memory;
pub use memory::MemoryLedger;
mod quarantine;
mod query;
mod retention;
pub(crate) use quarantine::split_column as split_decode_error;
pub use quarantine::{QUARANTINE_RELEASED, RawColumns, Released};
pub use query::{
    Cursor, DEFAULT_LIMIT, MAX_LIMIT, OPEN_STATES, OldestPerState, OldestRow, OperationQuery,
    Order, Page, SkippedRow, StateCounts, TenantScope, TextMatch, WATCHED_STATES,
};
pub use retention::{
    CallbackPurge, CallbackRecords, CallbackScope, PurgeBatch, PurgeScope, PurgeStage, Purged,
};

#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteLedger, SqliteLedgerOptions, Synchronous};

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
pub use postgres::{ClockSource, PostgresLedger, PostgresLedgerOptions};

mod callback_ledger;
#[cfg(feature = "test-util")]
pub mod conformance;
mod error;
mod full_ledger;
mod ledger_trait;
mod listing_ledger;
mod record;
mod retention_ledger;
pub use callback_ledger::CallbackLedger;
pub use error::LedgerError;
pub use full_ledger::{FullLedger, Housekeeping};
pub use ledger_trait::Ledger;
pub use listing_ledger::ListingLedger;
pub use record::{
    Created, EvidenceEntry, NewOperation, OperationRecord, QuarantinedRow, Recorded, Settled,
    StoredResponse,
};
pub use retention_ledger::RetentionLedger;

/// A boxed, `Send` future, as returned by [`Ledger`] methods (the trait stays object safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub use crate::contract::ContractRef;
