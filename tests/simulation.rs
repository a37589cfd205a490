//! A seeded, deterministic simulation of the whole system (issues 10 and 27): writers calling
//! through the layer, several [`Recoverer`] workers, reviewers, retention, a vendor that calls
//! back, and a ledger that "crashes" between any two writes. Time is tokio's paused clock: every
//! seed runs on its own current-thread runtime whose clock only moves when every task is idle,
//! and the crate reads that clock through [`SimClock`], so leases, backoffs, windows and
//! retention clocks are virtual and a seed's run is reproducible. Everything is built from one
//! [`Handle`] per process incarnation, as an application builds it.
//!
//! What one seed does:
//! - a [`SimVendor`] (an in-process tower service, no TCP) dedupes creates by idempotency key
//!   within a retention, answers `GET /operations/{operation_id}` lookups, and keeps its own
//!   authoritative count of side effects per operation and key. Its faults: connection refused,
//!   request dropped before applying, applied then response dropped, delays before applying
//!   (always shorter than the attempt timeout) and before answering, 500 after applying, 503 and
//!   429 with `Retry-After` before applying, validation 400s, restarts that forget idempotency
//!   keys (but keep operation records) and restarts that keep everything, lookups that 404 for
//!   a while. Half of the vendors protect keys in progress (409); the others only dedupe
//!   completed keys, so two concurrent attempts of one operation execute twice (the crate must
//!   never send them).
//! - most vendors call back: signed events for each side effect (`ticket.created`, sometimes a
//!   PROCESSING update first and, where the vendor documents that a failure is not final, a
//!   REJECTED update for an object that then succeeds; the application's mapping reads it as
//!   final, as the built-in Stripe mapping reads `payment_failed`, or as processing), delivered
//!   through the crate's real
//!   [`CallbackReceiver`](recoverable_write::callbacks::CallbackReceiver) at least once, late,
//!   duplicated and in any order, again until accepted (a deferral, a dead process); a forger
//!   without the secret posts now and then (`callbacks.rs`).
//! - "process incarnations": each incarnation has its own configuration, layer, recoverer
//!   workers, writers, reviewers, purger and callback endpoint over a [`CrashLedger`] that lets
//!   its N-th write through and then fails every later call; the harness then aborts the
//!   incarnation's tasks (requests already handed to the vendor still complete there) and
//!   starts the next incarnation over the same store, whose writers submit every operation
//!   again (the caller's own retry after a restart). Half of the seeds record results detached,
//!   as the SQLite ledger does: the caller is answered before the result is written, and a crash
//!   at that write loses it (the detached-result window). In half of the incarnations a crash at
//!   a write the store may acknowledge before it is durable (`Ledger::record`: an attempt's
//!   result, what a lookup found, a deferral) is acknowledged and lost: the process goes on
//!   with the row the write would have left, and the next incarnation finds the store without
//!   it.
//! - one recoverer worker may run with a skewed clock (within the documented bound: less than
//!   the lease margin); a second worker works its claimed batch side by side
//!   (`Recoverer::concurrency`, the whole batch at once); in some seeds an approval step denies
//!   replays for a while, so a row waits `RETRY_READY` while evidence arrives.
//! - up to two reviewers work the queue as people do (`reviewers.rs`): each reads the handoff
//!   package and the vendor at one moment, decides at a later one naming the version it read,
//!   claims exclusively and sometimes takes over from the other.
//! - in half of the seeds retention runs with short clocks while writers repeat their intents:
//!   purges of details and of rows, the erasure of an operation's details, and now and then the
//!   erasure of the whole tenant.
//!
//! At the end: faults stop, recovery and the vendor's deliveries run to quiescence (bounded),
//! and the invariants are checked (see `check.rs`: no side effect twice; no decision on a view
//! older than the evidence; every operation terminal, in review, visibly pending, purged after
//! it finished, or quarantined and counted; contradictions recorded, never silent). A failing
//! seed prints `SIM FAILED seed=<n>: <invariant>` and the command that re-runs it alone.
//!
//! Not modelled: rows the store cannot decode (a [`MemoryLedger`] holds only rows it can
//! decode, so the "quarantined and counted" branch of the check never runs here); several
//! processes at once over one store (incarnations follow each other); real TCP.
//!
//! ```text
//! cargo test --all-features --test simulation -- --nocapture                  # CI: 5,000 seeds
//! RW_SIM_SEED=1234 cargo test --all-features --test simulation -- --nocapture # one seed, traced
//! RW_SIM_START=0 RW_SIM_SEEDS=100000 cargo test --release --all-features --test simulation simulation_seeds -- --nocapture
//! RW_SIM_PLANT=stale-review RW_SIM_SEED=4 cargo test --all-features --test simulation simulation_seeds -- --nocapture
//! ```
//!
//! `RW_SIM_THREADS` sets how many seeds run at once (default 2). `RW_SIM_PLANT` plants an old
//! bug back: `live-lease` (issue 10 item 1; also `RW_SIM_PLANTED=1`) or `stale-review` (issue 27
//! item 1).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use recoverable_write::RecoverableWrite;
use recoverable_write::contract::{EvidenceClass, KeyPlacement, RemoteRef, Replay, Rule};
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::OperationRecord;
use recoverable_write::retention::{Retention, RetentionError};
use recoverable_write::review::Reviews;
use recoverable_write::state::ReviewDecision;
use recoverable_write::{
    Access, BudgetPolicy, Contract, Denied, Handle, HttpLookup, Ledger, MemoryLedger, Operation,
    OperationId, Outcome, SendOnceGuardLayer, State, Tenant,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

#[path = "simulation/callbacks.rs"]
mod callbacks;
#[path = "simulation/check.rs"]
mod check;
#[path = "simulation/ledgers.rs"]
mod ledgers;
#[path = "simulation/reviewers.rs"]
mod reviewers;
#[path = "simulation/vendor.rs"]
mod vendor;
#[path = "simulation/world.rs"]
mod world;

use callbacks::{DeliveryPlan, Mailer};
use check::{check, trace};
use ledgers::{Archive, CrashLedger, Tamper, TamperMode};
use reviewers::{BulkReconciler, Decision, Reviewer, Versions};
use vendor::{EventPlan, Gate, SimVendor, VendorConfig};
use world::{Rng, SimClock};

pub(crate) const TENANT: &str = "tenant-sim";
/// Sent in the `Authorization` header by the stack below the layer; must never be stored.
pub(crate) const AUTH_SECRET: &str = "SIMSECRETauth";
/// Sent as `?api_key=`; must never be stored (issue 10 item 13).
pub(crate) const QUERY_SECRET: &str = "SIMSECRETquery";
const VENDOR: &str = "http://vendor.sim";

// ---------------------------------------------------------------------------------------------
// One seed
// ---------------------------------------------------------------------------------------------

/// Counters of what a seed exercised (summed over a run and printed with it).
#[derive(Debug, Default)]
pub(crate) struct Stats(Mutex<BTreeMap<String, u64>>);

impl Stats {
    pub(crate) fn add(&self, what: &str, n: u64) {
        if n > 0 {
            *self.0.lock().unwrap().entry(what.to_owned()).or_default() += n;
        }
    }
    pub(crate) fn bump(&self, what: &str) {
        self.add(what, 1);
    }
    pub(crate) fn bump_owned(&self, what: String) {
        *self.0.lock().unwrap().entry(what).or_default() += 1;
    }
    fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// What a seed found.
#[derive(Debug, Default)]
struct SeedResult {
    /// Invariant violations (the seed fails).
    violations: Vec<String>,
    /// `?api_key=` stored (issue 10 item 13).
    query_secret_stored: bool,
    /// Duplicates on operations whose applied key a vendor restart forgot (the vendor broke its
    /// promise; not held against the crate).
    exempt_duplicates: usize,
    /// Findings excused because the vendor broke its key promise (printed, not failed).
    notes: Vec<String>,
    /// Operations still pending (with a next check) after the bounded quiescence.
    pending: usize,
    crashes: usize,
    ops: usize,
    succeeded: usize,
    manual: usize,
    /// Operations retention deleted after they finished.
    purged: usize,
    /// Rows the store could not decode, set aside and counted.
    quarantined: usize,
    /// Vendor events that matched no operation, quarantined and listed.
    quarantined_callbacks: usize,
    stats: BTreeMap<String, u64>,
}

/// An old bug planted back, to show the simulation finds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Plant {
    #[default]
    None,
    /// Issue 10 item 1: a reviewer's "confirmed not executed" ignores a live attempt's lease
    /// ([`TamperMode::PlantItem1`]).
    LiveLease,
    /// Issue 27 item 1: a reviewer's decision names the version re-read when it decides, not
    /// the version of the view it decided on ([`Versions::ReReadAtDecision`]).
    StaleReview,
}

impl Plant {
    fn from_env() -> Self {
        match std::env::var("RW_SIM_PLANT").as_deref() {
            Ok("stale-review") => Self::StaleReview,
            Ok("live-lease") => Self::LiveLease,
            Ok(other) if !other.is_empty() => {
                panic!("RW_SIM_PLANT={other}: live-lease or stale-review")
            }
            _ if std::env::var("RW_SIM_PLANTED").is_ok_and(|v| v == "1") => Self::LiveLease,
            _ => Self::None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Options {
    plant: Plant,
    /// See [`TamperMode::KeepLeaseOnReclaim`].
    workaround: bool,
    /// Print the vendor's log and every operation's evidence (a single seed).
    trace: bool,
}

fn policy() -> BudgetPolicy {
    BudgetPolicy {
        max_attempts: 4,
        max_queries: 30,
        window_ms: 40_000,
        attempt_timeout_ms: 1_000,
        lease_margin_ms: 500,
        query_backoff_base_ms: 50,
        query_backoff_cap_ms: 1_000,
    }
}

fn replay_safe_contract(retention_secs: u64) -> Contract {
    Contract::new("sim-vendor-v1", KeyPlacement::header("Idempotency-Key"))
        .replay(Replay::StoredFirstResponse)
        .retention_secs(retention_secs)
        .rule(Rule::new(429u16, EvidenceClass::NotExecuted))
        .remote_ref(RemoteRef::optional("/id"))
}

fn request(op: &Operation) -> Request<Full<Bytes>> {
    let body = format!(
        r#"{{"operation_id":"{}","device_id":"D-{}","priority":"P2"}}"#,
        op.id(),
        op.intent_ref()
    );
    let mut req = Request::post(format!("{VENDOR}/tickets?api_key={QUERY_SECRET}&v=1"))
        .header("content-type", "application/json")
        .header("x-tenant", TENANT)
        .header("authorization", format!("Bearer {AUTH_SECRET}"))
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    req.extensions_mut().insert(op.clone());
    req
}

/// A caller was answered `SUCCEEDED`.
#[derive(Clone, Debug)]
pub(crate) struct Told {
    pub(crate) op: OperationId,
    pub(crate) remote_ref: Option<String>,
    pub(crate) at_ms: u128,
}

/// Everything the invariants read once a seed has run.
pub(crate) struct Run {
    pub(crate) mem: Arc<MemoryLedger>,
    pub(crate) archive: Arc<Archive>,
    pub(crate) vendor: SimVendor,
    pub(crate) ops: Vec<Operation>,
    pub(crate) reviews: Reviews,
    pub(crate) mailer: Option<Arc<Mailer>>,
    pub(crate) decisions: Arc<Mutex<Vec<Decision>>>,
    pub(crate) told: Arc<Mutex<Vec<Told>>>,
    /// The vendor sends failure events that a success may follow, and the application's
    /// mapping reads them as final (`REJECTED`).
    pub(crate) failures_read_as_final: bool,
    pub(crate) stats: Arc<Stats>,
}

struct Incarnation {
    tasks: Vec<JoinHandle<()>>,
    recoverers: Vec<JoinHandle<()>>,
}

fn abort_all(handles: &[JoinHandle<()>]) {
    for h in handles {
        h.abort();
    }
}

/// Aborted tasks end cancelled; a panic in any of them is a finding.
async fn joined(handles: Vec<JoinHandle<()>>, what: &str, violations: &mut Vec<String>) {
    for h in handles {
        if let Err(e) = h.await
            && e.is_panic()
        {
            violations.push(format!("a {what} task panicked: {e}"));
        }
    }
}

/// An approval step that denies replays (writes of `RETRY_READY` rows) now and then: the
/// decision that made a row sendable is taken, its send waits, and evidence may arrive
/// meanwhile (issue 27 item 2).
fn approvals(rng: Rng) -> impl Fn(&OperationRecord, Access) -> Result<(), Denied> + Send + Sync {
    let rng = Mutex::new(rng);
    move |op: &OperationRecord, access: Access| {
        if access == Access::Write
            && op.state == State::RetryReady
            && rng.lock().unwrap().chance(0.6)
        {
            Err(Denied::new(access, "approval pending"))
        } else {
            Ok(())
        }
    }
}

/// Retention while writers repeat their intents: purges (the recoverer's periodic run), the
/// erasure of one operation's details, and now and then of the whole tenant.
async fn retention_runs(
    config: Handle<Arc<dyn FullLedger>>,
    ids: Vec<OperationId>,
    erase_tenant: bool,
    mut r: Rng,
    stats: Arc<Stats>,
) {
    let purger = config.purger();
    let tenant = Tenant::new(TENANT);
    loop {
        tokio::time::sleep(r.ms(200, 1_500)).await;
        if purger.run().await.is_ok() {
            stats.bump("retention: purge runs");
        }
        if r.chance(0.2) {
            let id = &ids[r.range(0, ids.len() as u64 - 1) as usize];
            let how = match purger.erase_details(&tenant, id).await {
                Ok(_) => "erased",
                Err(RetentionError::NotFinished { .. }) => "refused: not finished",
                Err(RetentionError::NotFound { .. }) => "refused: deleted",
                Err(_) => "failed",
            };
            stats.bump_owned(format!("retention: details erasure {how}"));
        }
        if erase_tenant && r.chance(0.05) {
            let how = match purger.erase_tenant(&tenant).await {
                Ok(_) => "erased",
                Err(RetentionError::OpenOperations { .. }) => "refused: open operations",
                Err(_) => "failed",
            };
            stats.bump_owned(format!("retention: tenant erasure {how}"));
        }
    }
}

async fn run_seed(seed: u64, opts: Options) -> SeedResult {
    let mut rng = Rng::new(seed);
    let origin = Instant::now();
    let mut result = SeedResult::default();
    let stats = Arc::new(Stats::default());

    let replay_safe = rng.chance(0.6);
    let retention_secs = if rng.chance(0.3) { 20 } else { 86_400 };
    let contract = if replay_safe {
        replay_safe_contract(retention_secs)
    } else {
        Contract::conservative()
    };
    let policy = policy();
    let events = rng.chance(0.7).then(|| EventPlan {
        contradictions: rng.chance(0.4),
        processing: 0.2,
    });
    let vendor_cfg = VendorConfig {
        protect_in_progress: rng.chance(0.5),
        retention: Duration::from_secs(retention_secs),
        max_pre_apply: Duration::from_millis(policy.attempt_timeout_ms * 8 / 10),
        max_response_delay: Duration::from_millis(policy.attempt_timeout_ms * 3 / 2),
        faults: [0.3, 1.0, 1.0, 2.0][rng.range(0, 3) as usize],
        force_pre_apply: None,
        events,
    };
    let vendor = SimVendor::new(rng.fork(), vendor_cfg);
    let mailer = events.map(|_| {
        let plan = DeliveryPlan {
            max_delay: rng.ms(0, 3_000),
            late: 0.15,
            duplicate: 0.3,
            forge: 0.05,
        };
        let mailer = Mailer::new(plan, rng.fork());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        vendor.call_back_to(tx);
        mailer.start(rx);
        mailer
    });

    let n_ops = rng.range(3, 7) as usize;
    let ops: Vec<Operation> = (0..n_ops)
        .map(|i| Operation::new(TENANT, "create_ticket", format!("s{seed}-i{i}")))
        .collect();
    let ids: Vec<OperationId> = ops.iter().map(|o| o.id().clone()).collect();
    result.ops = n_ops;
    let crashes = rng.range(0, 3) as usize;
    let reviewers = [0, 1, 1, 2, 2][rng.range(0, 4) as usize];
    let workers = rng.range(1, 3) as usize;
    // Documented bound: skew below the lease margin is safe.
    let skew_ms = if rng.chance(0.3) {
        let m = policy.lease_margin_ms as i64 * 8 / 10;
        rng.range(0, 2 * m as u64) as i64 - m
    } else {
        0
    };
    let schedule_end = Duration::from_millis(rng.range(3_000, 8_000));
    let detached = rng.chance(0.5);
    let hold_replays = rng.chance(0.3);
    // Short retention clocks in half of the seeds. The identity clock may not be shorter than
    // the vendor's key retention, so only a vendor with no documented retention gets a short one.
    let retention_on = rng.chance(0.5);
    let details = rng.ms(200, 3_000);
    let mut retention = Retention::new().details(details).interval(None);
    if !replay_safe && rng.chance(0.6) {
        retention = retention.identity(details + rng.ms(0, 4_000));
    }
    let erase_tenant = rng.chance(0.15);
    // How the application maps the vendor's failure events (see `callbacks::receiver`).
    let failures_final = rng.chance(0.5);

    let mem = Arc::new(MemoryLedger::new());
    let clocks = retention.clocks_for(Some(&contract));
    let archive = Arc::new(Archive {
        inner: mem.clone(),
        tenant: Tenant::new(TENANT),
        ids: ids.clone(),
        details_ms: clocks.details.as_millis() as i64,
        identity_ms: clocks.identity.as_millis() as i64,
        kept: Mutex::default(),
    });
    let store: Arc<dyn FullLedger> = match (opts.plant, opts.workaround) {
        (Plant::LiveLease, _) => Arc::new(Tamper {
            inner: archive.clone(),
            mode: TamperMode::PlantItem1,
        }),
        (_, true) => Arc::new(Tamper {
            inner: archive.clone(),
            mode: TamperMode::KeepLeaseOnReclaim,
        }),
        _ => archive.clone(),
    };
    let versions = if opts.plant == Plant::StaleReview {
        Versions::ReReadAtDecision
    } else {
        Versions::OfTheView
    };
    let decisions: Arc<Mutex<Vec<Decision>>> = Arc::default();
    let told: Arc<Mutex<Vec<Told>>> = Arc::default();

    // Vendor restarts at seeded times.
    let restarts = {
        let v = vendor.clone();
        let mut r = rng.fork();
        let n = if r.chance(0.3) { r.range(1, 2) } else { 0 };
        let forget = r.chance(0.3);
        tokio::spawn(async move {
            for _ in 0..n {
                tokio::time::sleep(r.ms(200, 6_000)).await;
                v.restart(forget, r.ms(0, 500));
            }
        })
    };

    let make_clock = |skew: i64, r: &mut Rng| SimClock {
        origin,
        skew_ms: skew,
        jitter: Mutex::new(r.fork()),
    };

    let mut inc_no = 0;
    loop {
        let last = inc_no == crashes;
        let dead = Arc::new(AtomicBool::new(false));
        let died = Arc::new(Notify::new());
        let crash_at = Arc::new(AtomicU64::new(if last { 0 } else { rng.range(1, 80) }));
        // In detached seeds the process often dies right after answering a caller.
        let crash_at_result = Arc::new(AtomicU64::new(if !last && detached && rng.chance(0.5) {
            rng.range(1, 4)
        } else {
            0
        }));
        let ledger: Arc<dyn FullLedger> = Arc::new(CrashLedger {
            inner: store.clone(),
            writes: AtomicU64::new(0),
            crash_at: crash_at.clone(),
            dead: dead.clone(),
            died: died.clone(),
            detached,
            crash_at_result: crash_at_result.clone(),
            results: AtomicU64::new(0),
            pending: Arc::default(),
            lose_relaxed: rng.chance(0.5),
            stats: stats.clone(),
        });
        let mut builder = RecoverableWrite::builder(ledger.clone())
            .contract(contract.clone())
            .budget(policy.clone())
            .clock(make_clock(0, &mut rng))
            .retention(retention.clone());
        if hold_replays {
            builder = builder.authorizer(approvals(rng.fork()));
        }
        let config = builder.build().expect("a valid configuration");
        let layer = config.layer();
        let gate = Gate {
            vendor: vendor.clone(),
            dead: dead.clone(),
        };
        let guard = SendOnceGuardLayer::new();
        let writer = tower::ServiceBuilder::new()
            .layer(layer.clone())
            .layer(guard.clone())
            .service(gate.clone());
        if let Some(m) = &mailer {
            m.endpoint(Some(callbacks::receiver(&config, failures_final)));
        }
        let mut inc = Incarnation {
            tasks: Vec::new(),
            recoverers: Vec::new(),
        };
        for w in 0..workers {
            let skew = if w == 0 { skew_ms } else { 0 };
            let lookup = HttpLookup::new(
                gate.clone(),
                format!("{VENDOR}/operations/{{operation_id}}"),
            )
            .tenant_header(http::HeaderName::from_static("x-tenant"))
            .timeout(Duration::from_millis(800));
            let batch = rng.range(1, 4) as u32;
            // Worker 0 (the one that may be skewed) one row at a time, the others their whole
            // batch side by side; no draw of the seed's is spent on it.
            let side_by_side = if w == 0 { 1 } else { batch as usize };
            let rec = config
                .recoverer()
                .reconciler(lookup)
                .replay_through(guard.layer(gate.clone()))
                .lease(Duration::from_secs(2))
                .interval(Duration::from_millis(100))
                .batch_size(batch)
                .concurrency(side_by_side)
                .skew_margin(Duration::from_millis(100))
                .clock(make_clock(skew, &mut rng));
            let pause = rng.ms(50, 300);
            inc.recoverers.push(tokio::spawn(async move {
                loop {
                    let _ = rec.run_once().await;
                    tokio::time::sleep(pause).await;
                }
            }));
        }
        if retention_on {
            inc.recoverers.push(tokio::spawn(retention_runs(
                config.clone(),
                ids.clone(),
                erase_tenant,
                rng.fork(),
                stats.clone(),
            )));
        }
        // Writers: the first incarnation sends each operation once (some twice, some
        // concurrently); later ones submit every operation again, as a caller does on restart.
        for op in &ops {
            let mut r = rng.fork();
            let start = if inc_no == 0 {
                r.ms(0, 1_500)
            } else {
                r.ms(0, 300)
            };
            let copies = if r.chance(0.2) { 2 } else { 1 };
            for c in 0..copies {
                let mut svc = writer.clone();
                let op = op.clone();
                let told = told.clone();
                let later = if c > 0 && r.chance(0.5) {
                    r.ms(0, 1_500)
                } else {
                    Duration::ZERO
                };
                inc.tasks.push(tokio::spawn(async move {
                    tokio::time::sleep(start + later).await;
                    if let Ok(s) = svc.ready().await
                        && let Ok(res) = s.call(request(&op)).await
                        && let Some(o) = res.extensions().get::<Outcome>()
                        && o.state == State::Succeeded
                    {
                        told.lock().unwrap().push(Told {
                            op: op.id().clone(),
                            remote_ref: o.remote_ref.clone(),
                            at_ms: origin.elapsed().as_millis(),
                        });
                    }
                }));
            }
        }
        for name in ["alice", "bob"].into_iter().take(reviewers) {
            inc.tasks.push(tokio::spawn(
                Reviewer {
                    name,
                    reviews: config.reviews(),
                    ledger: ledger.clone(),
                    vendor: vendor.clone(),
                    ids: ids.clone(),
                    rng: rng.fork(),
                    versions,
                    decisions: decisions.clone(),
                    stats: stats.clone(),
                }
                .run(),
            ));
        }
        // The bulk reconciler works the same queue (forked last: the seeds' other draws stay).
        if reviewers > 0 {
            inc.tasks.push(tokio::spawn(
                BulkReconciler {
                    reviews: config.reviews(),
                    vendor: vendor.clone(),
                    ids: ids.clone(),
                    rng: rng.fork(),
                    decisions: decisions.clone(),
                    stats: stats.clone(),
                }
                .run(),
            ));
        }

        // Run until this incarnation dies or the schedule ends.
        let end = origin + schedule_end;
        let crashed = tokio::select! {
            _ = died.notified() => true,
            _ = tokio::time::sleep_until(end) => false,
        };
        if crashed {
            result.crashes += 1;
            if let Some(m) = &mailer {
                m.endpoint(None);
            }
            abort_all(&inc.tasks);
            abort_all(&inc.recoverers);
            joined(inc.tasks, "writer/reviewer", &mut result.violations).await;
            joined(inc.recoverers, "recoverer", &mut result.violations).await;
            tokio::time::sleep(rng.ms(0, 500)).await;
            inc_no += 1;
            continue;
        }
        // Faults stop (no more crashes either); recovery runs to quiescence (bounded).
        crash_at.store(0, Ordering::SeqCst);
        crash_at_result.store(0, Ordering::SeqCst);
        abort_all(&inc.tasks);
        joined(inc.tasks, "writer/reviewer", &mut result.violations).await;
        restarts.abort();
        vendor.calm();
        // The last incarnation's writers may have been cut short: submit once more.
        for op in &ops {
            let mut svc = writer.clone();
            if let Ok(s) = svc.ready().await {
                let _ = s.call(request(op)).await;
            }
        }
        let tenant = Tenant::new(TENANT);
        let outstanding = || mailer.as_ref().map_or(0, |m| m.outstanding());
        for _ in 0..600 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut open = outstanding() > 0;
            for op in &ops {
                if let Ok(Some(row)) = mem.get(&tenant, op.id()).await
                    && !row.state.is_terminal()
                    && row.state != State::ManualReview
                {
                    open = true;
                }
            }
            if !open {
                break;
            }
        }
        abort_all(&inc.recoverers);
        joined(inc.recoverers, "recoverer", &mut result.violations).await;
        // Let every request the vendor still holds finish, and its events arrive.
        tokio::time::sleep(Duration::from_secs(5)).await;
        for _ in 0..300 {
            if outstanding() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let run = Run {
            mem,
            archive,
            vendor,
            ops,
            reviews: config.reviews(),
            mailer,
            decisions,
            told,
            failures_read_as_final: failures_final && events.is_some_and(|e| e.contradictions),
            stats,
        };
        check(&run, &mut result).await;
        if opts.trace {
            eprintln!(
                "seed {seed}: replay-safe {replay_safe} (retention {retention_secs} s), events {events:?}, \
                 failures read as final {failures_final}, detached {detached}, \
                 hold replays {hold_replays}, reviewers {reviewers}, \
                 retention {} (clocks {clocks:?}, erase tenant {erase_tenant}), plant {:?}",
                retention_on, opts.plant
            );
            trace(&run).await;
        }
        result.stats = run.stats.take();
        return result;
    }
}

/// Runs one seed on its own paused current-thread runtime.
fn run_one(seed: u64, opts: Options) -> SeedResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(run_seed(seed, opts))
}

/// Whether a stored `?api_key=` value fails the seed (issue 10 item 13, fixed):
/// `RW_SIM_QUERY_SECRETS=0` only reports it.
fn query_secrets_strict() -> bool {
    std::env::var("RW_SIM_QUERY_SECRETS").map_or(true, |v| v != "0")
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[derive(Debug, Default)]
struct Summary {
    seeds: u64,
    failed: Vec<(u64, Vec<String>)>,
    query_secret_seeds: Vec<u64>,
    exempt: usize,
    pending: usize,
    crashes: usize,
    ops: usize,
    succeeded: usize,
    manual: usize,
    purged: usize,
    quarantined: usize,
    quarantined_callbacks: usize,
    stats: BTreeMap<String, u64>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} seeds, {} failed; {} operations ({} succeeded, {} in review, {} still pending, \
             {} purged after they finished, {} quarantined rows); {} process crashes; \
             {} findings excused (vendor forgot a key); {} callbacks quarantined; \
             ?api_key stored in {} seeds",
            self.seeds,
            self.failed.len(),
            self.ops,
            self.succeeded,
            self.manual,
            self.pending,
            self.purged,
            self.quarantined,
            self.crashes,
            self.exempt,
            self.quarantined_callbacks,
            self.query_secret_seeds.len()
        )?;
        for (what, n) in &self.stats {
            write!(f, "\n  {n:>9}  {what}")?;
        }
        Ok(())
    }
}

/// Runs `seeds` on `threads` OS threads (each seed on its own runtime).
fn run_many(seeds: Vec<u64>, opts: Options, threads: usize, stop_at_first: bool) -> Summary {
    let seeds = Arc::new(Mutex::new(seeds.into_iter()));
    let summary = Arc::new(Mutex::new(Summary::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let strict = query_secrets_strict();
    let handles: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let (seeds, summary, stop) = (seeds.clone(), summary.clone(), stop.clone());
            std::thread::spawn(move || {
                loop {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Some(seed) = seeds.lock().unwrap().next() else {
                        return;
                    };
                    let mut r = run_one(seed, opts);
                    if strict && r.query_secret_stored {
                        r.violations.push("an ?api_key= value is stored".into());
                    }
                    let mut s = summary.lock().unwrap();
                    s.seeds += 1;
                    s.exempt += r.exempt_duplicates;
                    s.pending += r.pending;
                    s.crashes += r.crashes;
                    s.ops += r.ops;
                    s.succeeded += r.succeeded;
                    s.manual += r.manual;
                    s.purged += r.purged;
                    s.quarantined += r.quarantined;
                    s.quarantined_callbacks += r.quarantined_callbacks;
                    for (what, n) in std::mem::take(&mut r.stats) {
                        *s.stats.entry(what).or_default() += n;
                    }
                    if r.query_secret_stored {
                        s.query_secret_seeds.push(seed);
                    }
                    for n in &r.notes {
                        eprintln!("SIM NOTE seed={seed}: {n}");
                    }
                    if !r.violations.is_empty() {
                        if opts.plant == Plant::None || opts.trace {
                            for v in &r.violations {
                                eprintln!("SIM FAILED seed={seed}: {v}");
                            }
                            eprintln!(
                                "  re-run: RW_SIM_SEED={seed} cargo test --all-features --test simulation simulation_seeds -- --nocapture"
                            );
                        }
                        s.failed.push((seed, r.violations));
                        if stop_at_first {
                            stop.store(true, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a simulation thread panicked");
    }
    Arc::try_unwrap(summary)
        .expect("threads joined")
        .into_inner()
        .unwrap()
}

fn threads() -> usize {
    env_u64("RW_SIM_THREADS").map_or(2, |n| n as usize)
}

/// The CI run: 5,000 seeds by default (`RW_SIM_SEEDS`, `RW_SIM_START`, `RW_SIM_SEED`,
/// `RW_SIM_PLANT`).
#[test]
fn simulation_seeds() {
    let mut opts = Options {
        plant: Plant::from_env(),
        workaround: std::env::var("RW_SIM_WORKAROUND").is_ok_and(|v| v == "1"),
        ..Options::default()
    };
    let seeds: Vec<u64> = match env_u64("RW_SIM_SEED") {
        Some(s) => {
            opts.trace = true;
            vec![s]
        }
        None => {
            let start = env_u64("RW_SIM_START").unwrap_or(0);
            let count = env_u64("RW_SIM_SEEDS").unwrap_or(5_000);
            (start..start + count).collect()
        }
    };
    let t0 = std::time::Instant::now();
    let summary = run_many(seeds, opts, threads(), false);
    eprintln!("simulation: {summary}\nin {:.1?}", t0.elapsed());
    if !summary.query_secret_seeds.is_empty() {
        eprintln!(
            "simulation: the ?api_key= query credential is stored (issue 10 item 13; first \
             seeds: {:?})",
            &summary.query_secret_seeds[..summary.query_secret_seeds.len().min(5)]
        );
    }
    assert!(
        summary.failed.is_empty(),
        "{} seeds failed (first: {:?})",
        summary.failed.len(),
        summary.failed.first()
    );
}

/// Runs seeds from 0 with `plant` until one fails with a violation containing `finding`.
fn catch(plant: Plant, bound: u64, finding: &str) -> (Summary, Option<(u64, Vec<String>)>) {
    let summary = run_many(
        (0..bound).collect(),
        Options {
            plant,
            ..Options::default()
        },
        threads(),
        true,
    );
    let found = summary
        .failed
        .iter()
        .find(|(_, v)| v.iter().any(|m| m.contains(finding)))
        .cloned();
    (summary, found)
}

/// A simulation that never finds anything is suspicious: with issue 10 item 1 planted back
/// (a reviewer's "confirmed not executed" ignores a live attempt's lease), the same harness must
/// find a duplicate side effect within a bounded number of seeds.
#[test]
fn simulation_catches_the_planted_item_1() {
    let bound = env_u64("RW_SIM_PLANTED_SEEDS").unwrap_or(1_000);
    let t0 = std::time::Instant::now();
    let (summary, found) = catch(Plant::LiveLease, bound, "side effects at the vendor");
    eprintln!(
        "planted live lease: {} seeds run in {:.1?}; found: {:?}",
        summary.seeds,
        t0.elapsed(),
        found
    );
    assert!(
        found.is_some(),
        "the simulation did not catch the planted duplicate within {bound} seeds"
    );
}

/// Issue 27 item 1 planted back: a reviewer's decision names the version it re-reads when it
/// decides instead of the version of the view it decided on, so a "not executed" read before
/// the vendor's success arrived is accepted. The invariant "no decision takes effect on a view
/// older than the evidence" must catch it within a bounded number of seeds.
#[test]
fn planted_stale_review_is_caught() {
    let bound = env_u64("RW_SIM_PLANTED_SEEDS").unwrap_or(2_000);
    let t0 = std::time::Instant::now();
    let (summary, found) = catch(
        Plant::StaleReview,
        bound,
        "took effect on a view older than the evidence",
    );
    eprintln!(
        "planted stale review: {} seeds run in {:.1?}; found: {:?}",
        summary.seeds,
        t0.elapsed(),
        found
    );
    assert!(
        found.is_some(),
        "the simulation did not catch the planted stale review within {bound} seeds"
    );
}

/// The simulation's first finding, reduced to one schedule (seeds 44, 1536, 2040, ...): a reviewer
/// claims an in-flight operation and confirms it not executed (the attempt's lease is kept), then
/// claims the `RETRY_READY` row again and confirms again. The second claim must keep the live
/// attempt's lease too; otherwise the recoverer replays while the first attempt is still on the
/// wire, and a vendor that only dedupes completed keys executes the write twice.
#[test]
fn a_second_review_cycle_keeps_the_live_attempts_lease() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let origin = Instant::now();
        let clock = || SimClock {
            origin,
            skew_ms: 0,
            jitter: Mutex::new(Rng::new(1)),
        };
        let vendor = SimVendor::new(
            Rng::new(1),
            VendorConfig {
                protect_in_progress: false,
                retention: Duration::from_secs(86_400),
                max_pre_apply: Duration::from_millis(800),
                max_response_delay: Duration::ZERO,
                faults: 0.0,
                force_pre_apply: Some(Duration::from_millis(800)),
                events: None,
            },
        );
        let mem = Arc::new(MemoryLedger::new());
        let rw = RecoverableWrite::builder(mem.clone())
            .contract(replay_safe_contract(86_400))
            .budget(policy())
            .clock(clock())
            .build()
            .expect("a valid configuration");
        let layer = rw.layer();
        let gate = Gate {
            vendor: vendor.clone(),
            dead: Arc::new(AtomicBool::new(false)),
        };
        let guard = SendOnceGuardLayer::new();
        let writer = tower::ServiceBuilder::new()
            .layer(layer.clone())
            .layer(guard.clone())
            .service(gate.clone());
        let recoverer = rw
            .recoverer()
            .reconciler(HttpLookup::new(
                gate.clone(),
                format!("{VENDOR}/operations/{{operation_id}}"),
            ))
            .replay_through(guard.layer(gate.clone()))
            .lease(Duration::from_secs(2));
        let reviews = rw.reviews();
        let tenant = Tenant::new(TENANT);
        let op = Operation::new(TENANT, "create_ticket", "second-review");
        let id = op.id().clone();

        let first = tokio::spawn({
            let mut svc = writer.clone();
            let op = op.clone();
            async move {
                let _ = svc.ready().await.expect("ready").call(request(&op)).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Two review cycles while the first attempt waits at the vendor, unapplied.
        for _ in 0..2 {
            let row = mem.get(&tenant, &id).await.unwrap().unwrap();
            let row = reviews
                .claim(&tenant, &id, "reviewer", row.version)
                .await
                .expect("claim");
            assert!(vendor.effects(id.as_str()).is_empty());
            reviews
                .resolve(
                    &tenant,
                    &id,
                    "reviewer",
                    row.version,
                    ReviewDecision::ConfirmedNotExecuted,
                )
                .await
                .expect("resolve");
        }
        // The first attempt is still live: nothing may be sent now.
        recoverer.run_once().await.expect("pass");
        tokio::time::sleep(Duration::from_secs(3)).await;
        for _ in 0..20 {
            recoverer.run_once().await.expect("pass");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = first.await;
        let row = mem.get(&tenant, &id).await.unwrap().unwrap();
        assert_eq!(
            vendor.effects(id.as_str()).len(),
            1,
            "one side effect, found {:?}; row {}",
            vendor.effects(id.as_str()),
            row.state
        );
    });
}
