//! The recovery engine's face: [`Recoverer`], its configuration, and what a pass reports.
//!
//! The work is in the files beside this one: `pass` (one pass: sweep, claim, work each row),
//! `recover` (query first: a lookup, then a safe same-key replay), `replay` (sending a replay
//! through the transport), `settle` (leaving a row deferred, escalated, or its refused result
//! as late evidence) and `worker` (the loop, its gauges and its handle).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use tower::{BoxError, Service};

use super::Reconciler;
use super::transport::{ReplayService, boxed_transport};
use crate::budget::ReplayLimiter;
use crate::core::Shared;
use crate::ledger::{Housekeeping, Ledger, OperationRecord};

/// What one pass of the [`Recoverer`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// `IN_FLIGHT` attempts whose lease expired, moved to `UNKNOWN`.
    pub swept: usize,
    /// Due operations claimed (new generation, lease).
    pub claimed: usize,
    /// Lookups made.
    pub lookups: usize,
    /// Replays sent (same key, same bytes).
    pub replays: usize,
    /// Claimed operations that reached `SUCCEEDED` or `REJECTED`.
    pub resolved: usize,
    /// Claimed operations still `UNKNOWN`, `PROCESSING` or `RETRY_READY`, with a next check.
    pub pending: usize,
    /// Operations escalated to `MANUAL_REVIEW`.
    pub escalated: usize,
    /// `PREPARED` operations nobody sent, claimed to make their first send (see
    /// [`Recoverer::send_prepared_after`]).
    pub claimed_prepared: usize,
    /// Results refused because the operation moved on meanwhile (a reviewer, another worker).
    pub stale: usize,
}

impl RecoveryReport {
    /// Adds what `other` (the work of one row) counted.
    pub(super) fn absorb(&mut self, other: RecoveryReport) {
        self.swept += other.swept;
        self.claimed += other.claimed;
        self.lookups += other.lookups;
        self.replays += other.replays;
        self.resolved += other.resolved;
        self.pending += other.pending;
        self.escalated += other.escalated;
        self.claimed_prepared += other.claimed_prepared;
        self.stale += other.stale;
    }

    /// Whether the pass claimed as many rows as it may (`batch`) and worked every one of them:
    /// more may be due at once, and this recoverer keeps up with its leases. A pass that left
    /// rows stale (its lease too short for its batch) is followed by the pause: passing again
    /// at once would only claim rows it cannot work in time, each claim spending their budget.
    pub(super) fn was_full(&self, batch: u32) -> bool {
        self.claimed + self.claimed_prepared >= batch as usize && self.stale == 0
    }
}

/// The recovery engine: the single owner of every retry.
///
/// Each [`run_once`](Recoverer::run_once) pass:
/// 1. sweeps `IN_FLIGHT` operations whose lease expired to `UNKNOWN` (never back to `PREPARED`);
/// 2. claims due `UNKNOWN`, `PROCESSING` and `RETRY_READY` operations, each with a new
///    generation and a lease, so any number of recoverers (tasks, processes, machines) can share
///    one ledger;
/// 3. **query first**: asks the operation's [`Reconciler`] what happened (with query
///    permission) and applies the answer through the state machine with a compare-and-swap;
/// 4. replays only when evidence allows it, through the stack below the layer, with the stored
///    key and the stored bytes, registered `IN_FLIGHT` (new attempt, new generation) before it is
///    sent, and only with write permission:
///    - (a) the attempt provably did not execute (connect refused, a status the contract
///      documents as not executed, the vendor's own record says so), or
///    - (b) the result is still unknown but the contract makes a same-key replay safe and the
///      vendor's retention window still covers the replay's timeout plus a clock-skew margin;
/// 5. escalates to `MANUAL_REVIEW` when the window, the write attempts or the queries are spent,
///    when a hint lands past the window, or when there is no safe path at all;
/// 6. makes the first send of `PREPARED` operations nobody sent once they are old enough
///    ([`send_prepared_after`](Recoverer::send_prepared_after)).
///
/// Rows a store cannot decode are quarantined by the store and skipped; the others are
/// recovered. A pass that panics is reported and counted, and the next one runs.
///
/// Beside the passes, [`run`](Recoverer::run) records the worker's heartbeat after each pass
/// ([`WorkerHeartbeat`](crate::ledger::WorkerHeartbeat), see [`worker_id`](Self::worker_id)),
/// exports the queue gauges and runs the periodic retention purge, through what the ledger's
/// [`Ledger::housekeeping`] gives: over a ledger without listing there is nothing to count or
/// beat through, over one without retention nothing to
/// purge through, and the recoverer skips that housekeeping. Recovery itself needs only
/// [`Ledger`].
///
/// There is no constructor of its own: a recoverer comes from the configuration its operations
/// were made under ([`Handle::recoverer`](crate::Handle::recoverer), or
/// [`Handle::recoverer`](crate::Handle::recoverer)), so it always
/// has their contracts, budget, authorizer, notifier and transport. A recoverer over a bare
/// ledger does not compile:
///
/// ```compile_fail
/// # use std::sync::Arc;
/// # use recoverable_write::{MemoryLedger, Recoverer};
/// let recoverer = Recoverer::new(Arc::new(MemoryLedger::new()));
/// ```
///
/// ```no_run
/// # use recoverable_write::{HttpLookup, MemoryLedger, RecoverableWrite};
/// # fn client() -> tower::util::BoxCloneSyncService<http::Request<http_body_util::Full<bytes::Bytes>>, http::Response<http_body_util::Full<bytes::Bytes>>, recoverable_write::BoxError> { unimplemented!() }
/// # async fn run() -> Result<(), recoverable_write::BuildError> {
/// let rw = RecoverableWrite::builder(MemoryLedger::new())
///     .transport(client()) // lookups and replays go through it
///     .reconciler(HttpLookup::new(client(), "http://vendor.test/operations/{operation_id}"))
///     .build()?;
/// let handle = rw.recoverer().spawn();
/// // ... on shutdown:
/// handle.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Recoverer {
    pub(super) shared: Arc<Shared>,
    /// What the gauges and the periodic purge run through (from [`Ledger::housekeeping`]).
    pub(super) housekeeping: Housekeeping,
    pub(super) default_reconciler: Option<Arc<dyn Reconciler>>,
    pub(super) by_contract: HashMap<String, Arc<dyn Reconciler>>,
    pub(super) replay: Option<ReplayService>,
    pub(super) limiter: Option<Arc<ReplayLimiter>>,
    pub(super) prepared_after: Option<Duration>,
    pub(super) gauges_every: Option<Duration>,
    pub(super) batch: u32,
    pub(super) concurrency: usize,
    pub(super) lease: Duration,
    pub(super) interval: Duration,
    pub(super) skew_margin: Duration,
    /// The name this worker's heartbeat carries (a random id per run when `None`).
    pub(super) worker_id: Option<Arc<str>>,
}

impl fmt::Debug for Recoverer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recoverer")
            .field("shared", &self.shared)
            .field("housekeeping", &self.housekeeping)
            .field("default_reconciler", &self.default_reconciler)
            .field("by_contract", &self.by_contract.keys().collect::<Vec<_>>())
            .field("replay", &self.replay.is_some())
            .field("limiter", &self.limiter)
            .field("prepared_after", &self.prepared_after)
            .field("gauges_every", &self.gauges_every)
            .field("batch", &self.batch)
            .field("concurrency", &self.concurrency)
            .field("lease", &self.lease)
            .field("interval", &self.interval)
            .field("skew_margin", &self.skew_margin)
            .field("worker_id", &self.worker_id)
            .finish()
    }
}

impl Recoverer {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Self {
            housekeeping: Arc::clone(&shared.ledger).housekeeping(),
            shared,
            default_reconciler: None,
            by_contract: HashMap::new(),
            replay: None,
            limiter: None,
            prepared_after: Some(Duration::from_secs(60)),
            gauges_every: Some(Duration::from_secs(15)),
            batch: 32,
            concurrency: 1,
            lease: super::health::DEFAULT_LEASE,
            interval: super::health::DEFAULT_INTERVAL,
            skew_margin: Duration::from_secs(5),
            worker_id: None,
        }
    }

    /// The reconciler for operations whose contract has no specific one.
    pub fn reconciler(mut self, r: impl Reconciler) -> Self {
        self.default_reconciler = Some(Arc::new(r));
        self
    }

    /// The reconciler for operations made under the contract named `contract`.
    pub fn reconciler_for(mut self, contract: impl Into<String>, r: impl Reconciler) -> Self {
        self.by_contract.insert(contract.into(), Arc::new(r));
        self
    }

    /// The service replays go through: the stack *below* the layer (the send-once guard and the
    /// client, which applies credentials). Without it the engine never resends; operations that
    /// would be safe to resend wait in `RETRY_READY` until their window ends.
    pub fn replay_through<S, RB>(mut self, service: S) -> Self
    where
        S: Service<Request<Full<Bytes>>, Response = Response<RB>> + Clone + Send + Sync + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        RB: Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        self.replay = Some(boxed_transport(service));
        self
    }

    pub(crate) fn with_transport(mut self, transport: ReplayService) -> Self {
        self.replay = Some(transport);
        self
    }

    /// Caps replays per target host across this process (see [`ReplayLimiter`]).
    pub fn replay_limiter(mut self, limiter: Arc<ReplayLimiter>) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// Makes the first send of `PREPARED` operations recorded at least `age` ago that nobody sent
    /// (default 60 s; `None` never does). An outbox row whose process died after the commit, or
    /// a write whose caller was refused and never came back, is otherwise never sent: "nothing
    /// lost" would depend on the caller returning. The send goes through the authorizer and the
    /// budget like a replay; a refused one goes to a human. Needs
    /// [`replay_through`](Self::replay_through).
    ///
    /// Choose `age` longer than your callers take between recording an operation and sending it
    /// (the outbox's commit and the call after it); a caller and the recoverer racing for one
    /// row still send it once (the store's compare-and-swap picks one).
    pub fn send_prepared_after(mut self, age: Option<Duration>) -> Self {
        self.prepared_after = age;
        self
    }

    /// How often [`run`](Self::run) exports the queue gauges (default every 15 s; `None` never):
    /// see [`export_gauges`](Self::export_gauges).
    pub fn gauge_interval(mut self, every: Option<Duration>) -> Self {
        self.gauges_every = every;
        self
    }

    /// How many due operations one pass claims (default 32).
    pub fn batch_size(mut self, n: u32) -> Self {
        self.batch = n.max(1);
        self
    }

    /// How many claimed operations one pass works at once (default 1: one after another).
    /// Each is its own operation, fenced by its own version, so working them side by side
    /// changes no outcome; it overlaps their lookups, and lets a group-committing ledger
    /// (SQLite) commit their results together instead of one fsync each: draining a backlog
    /// after an outage, set it to the [`batch_size`](Self::batch_size). The vendor then sees
    /// up to this many lookups at once from each recoverer.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// The lease taken on each claimed operation (default 30 s). A lookup is abandoned at half
    /// of it, so the recoverer's own work is over before another worker may claim.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Pause between passes in [`run`](Recoverer::run) (default 250 ms). A pass that claimed a
    /// full [`batch_size`](Self::batch_size) and worked all of it within its lease is followed at
    /// once by the next: more work may be due, and a backlog drains at the speed of the passes,
    /// not of this pause.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The clock this recoverer reads (default: the layer's; see [`clock`](crate::clock)). A
    /// worker with another clock is how clock skew between workers is tested.
    pub fn clock(mut self, clock: impl crate::clock::Clock) -> Self {
        Arc::make_mut(&mut self.shared).clock = crate::clock::SharedClock::new(clock);
        self
    }

    /// Clock-skew margin between this machine and the vendor, kept free at the end of the
    /// vendor's key retention before a same-key replay is considered safe (default 5 s).
    pub fn skew_margin(mut self, margin: Duration) -> Self {
        self.skew_margin = margin;
        self
    }

    /// The name this worker's heartbeat carries (default: a random id for each
    /// [`run`](Self::run)). Give each worker its own, stable across restarts (`billing-worker-1`),
    /// to see in the review page which one stopped. Two running workers with one name share one
    /// heartbeat row: the page would count them as one.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(Arc::from(id.into()));
        self
    }

    pub(super) fn ledger(&self) -> &dyn Ledger {
        &*self.shared.ledger
    }
}

/// When the first attempt was sent: the window's start.
pub(super) fn first_sent_ms(row: &OperationRecord) -> Option<i64> {
    row.deadline_ms.map(|d| d - row.policy.window_ms as i64)
}
