//! The recovery engine.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};
use tracing::Instrument;

use super::Reconciler;
use crate::authorize::Access;
use crate::budget::ReplayLimiter;
use crate::contract::Contract;
use crate::core::engine::{self, Applied, Extras};
use crate::core::outgoing;
use crate::core::{AttemptCtx, Observed, Shared, record_attempt};
use crate::evidence::Evidence;
use crate::guard::AttemptToken;
use crate::ledger::{
    Ledger, LedgerError, OldestPerState, OperationRecord, StateCounts, TenantScope, WATCHED_STATES,
};
use crate::operation::AttemptId;
use crate::review::{self, EvidenceSummary};
use crate::state::{Event, State, Transition, transition};
use tower::BoxError;

/// The service replays are sent through: the stack below the layer (guard, client).
pub(crate) type ReplayService =
    BoxCloneSyncService<Request<Full<Bytes>>, Response<UnsyncBoxBody<Bytes, BoxError>>, BoxError>;

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
    shared: Arc<Shared>,
    default_reconciler: Option<Arc<dyn Reconciler>>,
    by_contract: HashMap<String, Arc<dyn Reconciler>>,
    replay: Option<ReplayService>,
    limiter: Option<Arc<ReplayLimiter>>,
    prepared_after: Option<Duration>,
    gauges_every: Option<Duration>,
    batch: u32,
    lease: Duration,
    interval: Duration,
    skew_margin: Duration,
}

impl fmt::Debug for Recoverer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recoverer")
            .field("shared", &self.shared)
            .field("default_reconciler", &self.default_reconciler)
            .field("by_contract", &self.by_contract.keys().collect::<Vec<_>>())
            .field("replay", &self.replay.is_some())
            .field("limiter", &self.limiter)
            .field("prepared_after", &self.prepared_after)
            .field("gauges_every", &self.gauges_every)
            .field("batch", &self.batch)
            .field("lease", &self.lease)
            .field("interval", &self.interval)
            .field("skew_margin", &self.skew_margin)
            .finish()
    }
}

impl Recoverer {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            default_reconciler: None,
            by_contract: HashMap::new(),
            replay: None,
            limiter: None,
            prepared_after: Some(Duration::from_secs(60)),
            gauges_every: Some(Duration::from_secs(15)),
            batch: 32,
            lease: Duration::from_secs(30),
            interval: Duration::from_millis(250),
            skew_margin: Duration::from_secs(5),
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

    /// Reads the queue the operators own, across tenants (counts of the open states and of the
    /// quarantined rows, and the oldest operation of `UNKNOWN`, `PROCESSING`, `MANUAL_REVIEW`
    /// and `PREPARED`), and exports it through the `metrics` facade (feature `metrics`):
    ///
    /// - `recoverable_write_operations{state}`: how many operations are in each open state;
    /// - `recoverable_write_quarantined_operations`: how many rows are quarantined (this
    ///   version could not decode them, so recovery skips them until a person releases them;
    ///   in no state's count). Alert on anything above 0;
    /// - `recoverable_write_oldest_age_seconds{state}`: how long ago the oldest operation in that
    ///   state was created (0 when there is none), so an alert can fire on "the review queue is
    ///   older than N minutes".
    ///
    /// Two indexed reads, flat in the number of finished operations.
    pub async fn export_gauges(&self) -> Result<(StateCounts, OldestPerState), LedgerError> {
        let counts = self
            .ledger()
            .count_by_state(&TenantScope::AllTenants)
            .await?;
        let oldest = self
            .ledger()
            .oldest(&TenantScope::AllTenants, &WATCHED_STATES)
            .await?;
        #[cfg(feature = "metrics")]
        {
            let now = self.shared.clock.now_ms();
            for (state, n) in counts.iter() {
                metrics::gauge!("recoverable_write_operations", "state" => state.as_str())
                    .set(n as f64);
            }
            metrics::gauge!("recoverable_write_quarantined_operations")
                .set(counts.quarantined() as f64);
            for (state, row) in oldest.iter() {
                let age = row.map_or(0.0, |r| (now - r.created_ms).max(0) as f64 / 1000.0);
                metrics::gauge!("recoverable_write_oldest_age_seconds", "state" => state.as_str())
                    .set(age);
            }
        }
        Ok((counts, oldest))
    }

    /// How many due operations one pass claims (default 32).
    pub fn batch_size(mut self, n: u32) -> Self {
        self.batch = n.max(1);
        self
    }

    /// The lease taken on each claimed operation (default 30 s). A lookup is abandoned at half
    /// of it, so the recoverer's own work is over before another worker may claim.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Pause between passes in [`run`](Recoverer::run) (default 250 ms).
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

    fn ledger(&self) -> &dyn Ledger {
        &*self.shared.ledger
    }

    /// One pass: sweep, claim, reconcile, replay, record.
    pub async fn run_once(&self) -> Result<RecoveryReport, LedgerError> {
        let mut report = RecoveryReport::default();
        let now = self.shared.clock.now_ms();
        let swept = self.ledger().sweep_expired(now).await?;
        for row in &swept {
            tracing::info!(
                operation = %row.operation_id,
                tenant = %row.tenant,
                generation = %row.generation,
                "attempt lease expired; operation is UNKNOWN"
            );
            engine::publish(&self.shared, row);
        }
        report.swept = swept.len();

        // Taken before the claim: the store sets each lease from a reading taken after this
        // one (its own clock, with PostgreSQL's database clock), so `claimed_at + lease` never
        // ends later than the stored lease. Leases are compared on this monotonic clock, never
        // on the worker's wall clock against the ledger's (a worker clock ahead of the
        // database's would otherwise see every lease it just took as nearly spent).
        let claimed_at = tokio::time::Instant::now();
        let claimed = self
            .ledger()
            .claim_due(now, self.lease.as_millis() as i64, self.batch)
            .await?;
        report.claimed = claimed.len();
        // PREPARED rows nobody sent (the process died after an outbox commit, or the caller was
        // refused permission and never came back): never sent, so a first send is safe. Only
        // claimed when this recoverer can send.
        let prepared = match (self.prepared_after, &self.replay) {
            (Some(age), Some(_)) => {
                self.ledger()
                    .claim_prepared(
                        now,
                        i64::try_from(age.as_millis()).unwrap_or(i64::MAX),
                        self.lease.as_millis() as i64,
                        self.batch,
                    )
                    .await?
            }
            _ => Vec::new(),
        };
        report.claimed_prepared = prepared.len();
        for row in claimed.into_iter().chain(prepared) {
            // Rows are worked one after another; a row whose lease is too close to its end to
            // fit a lookup is left alone (counted stale) for a later claim, rather than worked
            // past its lease (safe thanks to fencing, but wasted).
            if claimed_at.elapsed() > self.lease / 2 {
                report.stale += 1;
                continue;
            }
            let span = tracing::info_span!(
                "recover",
                operation = %row.operation_id,
                tenant = %row.tenant,
                generation = %row.generation,
                state = %row.state,
            );
            #[cfg(feature = "metrics")]
            let (before, first_sent) = (row.state, first_sent_ms(&row));
            match self.recover(row, &mut report).instrument(span).await? {
                Some(r) if r.state.is_terminal() => {
                    report.resolved += 1;
                    #[cfg(feature = "metrics")]
                    if let Some(t0) = first_sent {
                        metrics::histogram!(
                            "recoverable_write_resolution_seconds",
                            "from" => before.as_str(),
                            "to" => r.state.as_str(),
                        )
                        .record((self.shared.clock.now_ms() - t0).max(0) as f64 / 1000.0);
                    }
                }
                Some(r) if r.state == State::ManualReview => report.escalated += 1,
                Some(_) => report.pending += 1,
                None => report.stale += 1,
            }
        }
        Ok(report)
    }

    /// Works on one claimed row. `None`: the row moved on and our result was refused.
    async fn recover(
        &self,
        row: OperationRecord,
        report: &mut RecoveryReport,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        if matches!(row.state, State::RetryReady | State::Prepared) {
            return self.replay(row, report).await;
        }
        // Budget and window first: the pure function says whether recovery may go on.
        if let Ok(t) = transition(
            &row.snapshot(),
            &Event::ClaimRecovery,
            engine::clock(&self.shared),
        ) && t.to == State::ManualReview
        {
            let reason = t.reason.unwrap_or_else(|| "recovery budget spent".into());
            return self.escalate(&row, reason).await;
        }
        let contract = self.contract_for(&row);
        let reconciler = self
            .by_contract
            .get(&*row.contract.name)
            .or(self.default_reconciler.as_ref())
            .cloned();

        let mut row = row;
        if let Some(reconciler) = &reconciler {
            if let Err(denied) = self.shared.authorizer.check(&row, Access::Query).await {
                return self
                    .escalate(&row, format!("lookup not authorized: {}", denied.reason))
                    .await;
            }
            let looked_up = reconciler.reconcile_with_answer(&row);
            let (evidence, answer) = match tokio::time::timeout(self.lease / 2, looked_up).await {
                Ok(answered) => answered,
                Err(_) => (
                    Evidence::unknown("lookup abandoned at half the recovery lease"),
                    None,
                ),
            };
            report.lookups += 1;
            tracing::info!(evidence = evidence.label(), "lookup answered");
            // An eventually consistent lookup (a list, a search) may miss a write that happened:
            // before the contract's settle time a miss is no evidence at all, and uses no query.
            if matches!(evidence, Evidence::Unknown { .. })
                && let Some(settled_at) = settle_end(&row, contract.as_deref())
                && self.shared.clock.now_ms() < settled_at
            {
                return self
                    .defer(
                        &row,
                        settled_at,
                        "the lookup found nothing before the contract's settle time: no evidence yet",
                    )
                    .await;
            }
            let applied = engine::apply_event(
                &self.shared,
                &row,
                Event::LookupResult(evidence.clone()),
                "lookup",
                // The vendor's own answer, when it resolves the operation (bounded, redacted).
                Extras {
                    note: answer,
                    ..Extras::default()
                },
            )
            .await?;
            row = match applied {
                Applied::Done(r) => r,
                other => return self.settle(&row, other, evidence).await,
            };
            match row.state {
                State::RetryReady => return self.replay(row, report).await,
                State::Unknown => {}
                _ => return Ok(Some(row)),
            }
        }

        // Still unknown. Path (b): a same-key replay the contract makes safe. Only from
        // UNKNOWN: the vendor said a PROCESSING write was accepted, so resending it proves
        // nothing (and the state machine refuses it: offering it every pass would append a
        // refusal to the log every lease period).
        if row.state == State::Unknown
            && let (Some(reason), Some(_)) =
                (self.replay_safe(&row, contract.as_deref()), &self.replay)
        {
            match self.shared.authorizer.check(&row, Access::Write).await {
                Ok(()) => {
                    let applied = engine::apply_event(
                        &self.shared,
                        &row,
                        Event::ReplaySafe {
                            reason: reason.clone(),
                        },
                        "replay_safe",
                        Extras::default(),
                    )
                    .await?;
                    return match applied {
                        Applied::Done(r) if r.state == State::RetryReady => {
                            self.replay(r, report).await
                        }
                        Applied::Done(r) => Ok(Some(r)),
                        other => {
                            self.settle(&row, other, Evidence::unknown(reason.clone()))
                                .await
                        }
                    };
                }
                Err(denied) => {
                    // Queries go on; nothing is sent (D25).
                    tracing::warn!(%denied, "replay would be safe but write permission is revoked");
                }
            }
        }
        if reconciler.is_none() {
            return self
                .escalate(
                    &row,
                    format!(
                        "no lookup for contract {:?} and no safe same-key replay",
                        row.contract.name
                    ),
                )
                .await;
        }
        Ok(Some(row))
    }

    /// The contract the operation started with, found by name and content hash.
    fn contract_for(&self, row: &OperationRecord) -> Option<Arc<Contract>> {
        let found = self.shared.contracts.find(&row.contract).cloned();
        if found.is_none() {
            tracing::warn!(
                contract = %row.contract.name,
                "the operation's contract is no longer configured with the same content; no replay path"
            );
        }
        found
    }

    /// Path (b): why a same-key replay is safe now, or `None`.
    fn replay_safe(&self, row: &OperationRecord, contract: Option<&Contract>) -> Option<String> {
        let contract = contract?;
        if !contract.replay.is_safe() {
            return None;
        }
        // Unknown retention: not safe (the key may already be pruned and the replay run anew).
        let retention_ms = i64::try_from(contract.retention_secs?)
            .ok()?
            .saturating_mul(1000);
        let first_sent = first_sent_ms(row)?;
        let must_finish_by = self.shared.clock.now_ms()
            + row.policy.attempt_timeout_ms as i64
            + self.skew_margin.as_millis() as i64;
        if must_finish_by >= first_sent + retention_ms {
            return None;
        }
        Some(format!(
            "contract {} replays the same key ({:?}) within its {} s retention",
            contract.name,
            contract.replay,
            retention_ms / 1000
        ))
    }

    /// Sends a `RETRY_READY` operation again: same key, same bytes, registered first.
    async fn replay(
        &self,
        row: OperationRecord,
        report: &mut RecoveryReport,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let Some(service) = self.replay.clone() else {
            tracing::warn!("resend is safe but no replay service is configured");
            return self
                .wait_or_escalate(&row, "no replay service configured")
                .await;
        };
        if let Err(denied) = self.shared.authorizer.check(&row, Access::Write).await {
            if row.state == State::Prepared {
                // Its caller was refused (or died) and never came back: a person decides.
                return self
                    .escalate(
                        &row,
                        format!(
                            "recorded, never sent, and its first send is not authorized: {}",
                            denied.reason
                        ),
                    )
                    .await;
            }
            tracing::warn!(%denied, "resend is safe but write permission is revoked");
            return self
                .wait_or_escalate(&row, &format!("write not authorized: {}", denied.reason))
                .await;
        }
        let target = engine::target_of(&row);
        if let Some(limiter) = &self.limiter
            && !limiter.try_acquire(&target)
        {
            tracing::info!(%target, "replay limited for this target; next pass");
            return self.wait_or_escalate(&row, "replay rate limit").await;
        }
        let Some(contract) = self.contract_for(&row) else {
            return self
                .escalate(
                    &row,
                    "the operation's contract is no longer configured".into(),
                )
                .await;
        };
        // A replay made safe by the contract alone (path (b): the first attempt may have
        // applied) is only safe while the vendor still holds the key. The decision may have been
        // taken long ago (a rate limit, an authorizer, a restart): check again now, right before
        // the claim; the skew margin covers the claim itself.
        if row.state == State::RetryReady
            && row.may_have_applied
            && self.replay_safe(&row, Some(&contract)).is_none()
        {
            return self
                .escalate(
                    &row,
                    "a same-key replay is no longer covered by the vendor's key retention".into(),
                )
                .await;
        }
        // The fencing rule: the decision that made the row sendable (a lookup's "not executed",
        // a reviewer's re-approval, a safe same-key replay) was made on a view of the
        // operation. Evidence recorded since (a verified success callback, a late response) that
        // says the write may have applied stops the replay; and the claim below names the
        // version this read saw, so evidence landing after it makes the claim stale.
        if let Some(why) = self.contradicted(&row).await? {
            return self.escalate(&row, why).await;
        }
        // The exact request, key placed, before send rights are claimed: one that cannot be
        // built leaves nothing claimed.
        let request = match outgoing::build(
            &row.request,
            &contract,
            &row.idempotency_key,
            outgoing::Carried::nothing(),
        ) {
            Ok(r) => r,
            Err(e) => {
                let why = match e {
                    outgoing::BuildError::Key(e) => format!("the key cannot be placed: {e}"),
                    outgoing::BuildError::Frozen(e) => {
                        format!("the frozen request does not rebuild: {e}")
                    }
                    outgoing::BuildError::Secrets(which) => which.why_not_replayed().to_owned(),
                };
                return self
                    .escalate(&row, format!("{why}; nothing was sent"))
                    .await;
            }
        };

        let attempt = AttemptId::generate();
        let lease_until = self.shared.clock.now_ms() + row.policy.lease().as_millis() as i64;
        let applied = engine::apply_event(
            &self.shared,
            &row,
            Event::ClaimSend,
            "attempt_registered",
            Extras {
                attempt: Some(attempt),
                lease_until_ms: Some(lease_until),
                ..Extras::default()
            },
        )
        .await?;
        let claimed = match applied {
            Applied::Done(r) if r.state == State::InFlight => r,
            // The claim escalated (attempts or window spent).
            Applied::Done(r) => return Ok(Some(r)),
            other => return self.settle(&row, other, Evidence::unknown("replay")).await,
        };

        // The attempt is durable; send the bytes built above.
        let deadline = tokio::time::Instant::now() + claimed.policy.attempt_timeout();
        let token = AttemptToken::new(claimed.operation_id.clone(), attempt);
        let (mut parts, body) = request.into_parts();
        parts.extensions.insert(token.clone());
        let request = Request::from_parts(parts, Full::new(body));
        report.replays += 1;
        tracing::info!(attempt = %attempt, generation = %claimed.generation, "replaying with the same key and bytes");
        let observed: Observed<UnsyncBoxBody<Bytes, BoxError>> =
            match tokio::time::timeout_at(deadline, service.oneshot(request)).await {
                Ok(Ok(res)) => Observed::Response(res),
                Ok(Err(e)) => Observed::Failed(e),
                Err(_) => Observed::TimedOut,
            };
        let ctx = AttemptCtx {
            shared: self.shared.clone(),
            contract,
            record: claimed.clone(),
            attempt,
            token,
            deadline,
        };
        // The caller-facing result is irrelevant here; the ledger holds the outcome. (Boxed as a
        // `Send` future here, with concrete types, so the spawned engine stays `Send`.)
        let recording: crate::ledger::BoxFuture<'static, _> =
            Box::pin(record_attempt(ctx, observed));
        let _ = recording.await;
        self.ledger()
            .get(&claimed.tenant, &claimed.operation_id)
            .await
    }

    /// Why the decision that made `row` sendable no longer holds, if evidence recorded after it
    /// says the write may have applied ([`review::says_may_have_applied`]).
    async fn contradicted(&self, row: &OperationRecord) -> Result<Option<String>, LedgerError> {
        let log: Vec<EvidenceSummary> = self
            .ledger()
            .evidence(&row.tenant, &row.operation_id)
            .await?
            .iter()
            .map(EvidenceSummary::of)
            .collect();
        Ok(review::evidence_since_decision(&log)
            .into_iter()
            .find(|e| review::says_may_have_applied(e))
            .map(|e| {
                format!(
                    "not sent: evidence recorded after the decision that made it sendable says                      the write may have applied ({}, {} entry #{})",
                    e.evidence.as_ref().map_or("evidence", |ev| ev.label()),
                    e.kind,
                    e.seq
                )
            }))
    }

    /// A resend that cannot go now waits for the next pass, or hands over once the window can
    /// no longer fit an attempt.
    async fn wait_or_escalate(
        &self,
        row: &OperationRecord,
        why: &str,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let now = self.shared.clock.now_ms();
        let fits = row
            .deadline_ms
            .is_none_or(|d| d - now >= row.policy.attempt_timeout_ms as i64);
        if !fits {
            return self
                .escalate(row, format!("{why}; the recovery window is spent"))
                .await;
        }
        let next = now
            + row
                .policy
                .query_delay(row.queries_used, None, self.shared.clock.jitter())
                .max(Duration::from_millis(row.policy.query_backoff_base_ms))
                .as_millis() as i64;
        self.defer(row, next, why).await
    }

    /// Leaves the operation as it is until `next_ms`, with a `deferred` entry saying why: no
    /// state change, no budget used.
    async fn defer(
        &self,
        row: &OperationRecord,
        next_ms: i64,
        why: &str,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let now = self.shared.clock.now_ms();
        let t = Transition {
            to: row.state,
            bump_generation: false,
            may_have_applied: row.may_have_applied,
            attempts_used: row.attempts_used,
            queries_used: row.queries_used,
            deadline_ms: row.deadline_ms,
            next_check_ms: Some(next_ms),
            last_result: None,
            remote_ref: None,
            reason: None,
            operation_level: false,
            keep_lease: false,
        };
        let entry = crate::ledger::NewEvidence {
            attempt_id: None,
            generation: row.generation,
            kind: "deferred".into(),
            from_state: None,
            to_state: None,
            evidence: None,
            note: Some(why.to_owned()),
            at_ms: now,
        };
        let update = row.update_for(&t, None, None, None, entry, now);
        self.ledger().apply(update).await
    }

    async fn escalate(
        &self,
        row: &OperationRecord,
        reason: String,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        tracing::warn!(operation = %row.operation_id, %reason, "escalating to manual review");
        let applied = engine::apply_event(
            &self.shared,
            row,
            Event::Escalate {
                reason: reason.clone(),
            },
            "escalated",
            Extras::default(),
        )
        .await?;
        self.settle(row, applied, Evidence::unknown(reason)).await
    }

    async fn settle(
        &self,
        row: &OperationRecord,
        applied: Applied,
        evidence: Evidence,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        match applied {
            Applied::Done(r) => Ok(Some(r)),
            Applied::Refused(refused) => {
                tracing::warn!(%refused, "state machine refused the recovery result");
                engine::append_late(&self.shared, row, None, evidence, refused.to_string()).await?;
                Ok(None)
            }
            Applied::Stale => {
                engine::append_late(
                    &self.shared,
                    row,
                    None,
                    evidence,
                    "recovery result refused: the operation moved on (stale generation)".into(),
                )
                .await?;
                Ok(None)
            }
        }
    }

    /// Runs passes until `shutdown` completes. Ledger errors are logged and retried on the next
    /// pass.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut gauges_at: Option<tokio::time::Instant> = None;
        // Retention runs in a task of its own: a backlog of purges never delays recovery.
        let purger = crate::retention::Purger::from_shared(self.shared.clone());
        let mut purged_at: Option<tokio::time::Instant> = None;
        let mut purging: Option<AbortOnDrop> = None;
        loop {
            if let Some(every) = self.shared.retention.purge_interval()
                && purging.as_ref().is_none_or(|task| task.0.is_finished())
                && purged_at.is_none_or(|at| at.elapsed() >= every)
            {
                purged_at = Some(tokio::time::Instant::now());
                let purger = purger.clone();
                purging = Some(AbortOnDrop(tokio::spawn(async move {
                    match purger.run().await {
                        Ok(report) if !report.is_empty() => {
                            tracing::info!(
                                details = report.details.rows,
                                deleted = report.identity.rows,
                                callback_records = report.callback_deliveries.rows
                                    + report.quarantined_callbacks.rows,
                                space_reclaimed = report.space_reclaimed,
                                "retention purge"
                            );
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "retention purge failed; next time"),
                    }
                })));
            }
            if let Some(every) = self.gauges_every
                && gauges_at.is_none_or(|at| at.elapsed() >= every)
            {
                gauges_at = Some(tokio::time::Instant::now());
                if let Err(e) = self.export_gauges().await {
                    tracing::warn!(error = %e, "queue gauges not read; next time");
                }
            }
            // Each pass runs as its own task, so a panic in it (a reconciler's bug, say) is
            // caught, reported and counted, and the next pass runs: a recovery engine that died
            // silently would leave every unknown operation unowned.
            let pass = tokio::spawn({
                let this = self.clone();
                async move { this.run_once().await }
            });
            match pass.await {
                Ok(Ok(report)) if report != RecoveryReport::default() => {
                    tracing::debug!(?report, "recovery pass");
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "recovery pass failed; retrying"),
                Err(e) if e.is_panic() => {
                    let panic = e.into_panic();
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a non-string panic payload".into());
                    #[cfg(feature = "metrics")]
                    metrics::counter!("recoverable_write_recovery_panics_total").increment(1);
                    tracing::error!(
                        panic = %crate::error::Short(&what),
                        "recovery pass panicked; the rows it held are retried after their lease"
                    );
                }
                Err(e) => tracing::error!(error = %e, "recovery pass was cancelled"),
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }

    /// Spawns [`run`](Recoverer::run) on the current tokio runtime.
    pub fn spawn(self) -> RecovererHandle {
        let (tx, mut rx) = watch::channel(false);
        let task = tokio::spawn(self.run(async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }));
        RecovererHandle { stop: tx, task }
    }
}

/// Aborts the retention task when the run loop ends.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `service` as the boxed stack lookups and replays go through.
pub(crate) fn boxed_transport<S, RB>(service: S) -> ReplayService
where
    S: Service<Request<Full<Bytes>>, Response = Response<RB>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let svc = service
        .map_err(Into::into)
        .map_response(|res: Response<RB>| res.map(|b| b.map_err(Into::into).boxed_unsync()));
    BoxCloneSyncService::new(svc)
}

/// When the contract's settle time after the first send ends, if it has one (a replay's own miss
/// after it is weak evidence and uses a query: safe, if not thrifty).
fn settle_end(row: &OperationRecord, contract: Option<&Contract>) -> Option<i64> {
    let settle = i64::try_from(contract?.settle_secs?)
        .ok()?
        .saturating_mul(1000);
    Some(first_sent_ms(row)?.saturating_add(settle))
}

/// When the first attempt was sent: the window's start.
fn first_sent_ms(row: &OperationRecord) -> Option<i64> {
    row.deadline_ms.map(|d| d - row.policy.window_ms as i64)
}

/// Controls a spawned [`Recoverer`].
#[derive(Debug)]
pub struct RecovererHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RecovererHandle {
    /// Stops after the current pass and waits for it.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
