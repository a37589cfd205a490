//! Many workers on one PostgreSQL ledger: drills D16, D17 and D18 from DRILLS.md, against the
//! real server (127.0.0.1:5432 or `RW_POSTGRES_URL`) and the fake vendor over real TCP.
//!
//! Every worker has its own connection pool, as a worker on another machine would; some tests
//! run workers as separate OS processes (this test binary re-executed with
//! `--exact child_worker_process --ignored`). Every drill asserts both the ledger and the
//! vendor's own count of side effects.
//!
//! Each test works in a schema of its own (`rw_test_<uuid>`, dropped at the end). Without a
//! reachable server the tests print why and pass, except in CI (`CI=true`).
#![cfg(feature = "postgres")]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::backend::Update;
use recoverable_write::ledger::{
    BoxFuture, ClockSource, Created, Ledger, LedgerError, NewOperation, OperationRecord,
    PostgresLedger, PostgresLedgerOptions,
};
use recoverable_write::operation::{FrozenRequest, PayloadHash};
use recoverable_write::reconcile::RecoveryReport;
use recoverable_write::state::State;
use recoverable_write::testing::drill::collected;
use recoverable_write::testing::{FakeVendor, ForwardingLedger};
use recoverable_write::{
    BudgetPolicy, Contract, Error, HttpLookup, IdempotencyKey, Operation, OperationId,
    RecoverableWrite, RecoverableWriteLayer, Recoverer, SendOnceGuardLayer, Tenant,
};
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Connection};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder, ServiceExt};

// ── PostgreSQL test harness (shared with tests/postgres_ledger.rs) ──────────────────────────────

#[path = "common/postgres.rs"]
mod pg;
use pg::{Schema, pg_url};

impl Schema {
    /// A new ledger with a pool of its own (one per worker, as on separate machines).
    async fn ledger(&self, connections: u32) -> PostgresLedger {
        connect(&self.url, &self.name, connections).await
    }
}

async fn connect(url: &str, schema: &str, connections: u32) -> PostgresLedger {
    let options = PostgresLedgerOptions::new()
        .schema(schema)
        .expect("valid schema name")
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(30))
        .clock(ClockSource::Database);
    PostgresLedger::connect_with(url, options)
        .await
        .expect("connect the PostgreSQL ledger")
}

// ── drill harness: layer → guard → hyper-util client; recoverers with an HTTP lookup ────────────

const TENANT: &str = "tenant-a";

type Writer = BoxCloneSyncService<Request<Full<Bytes>>, Response<Bytes>, Error>;

/// Short windows so drills run in milliseconds. The attempt timeout is long enough for a
/// loaded 2-core machine; leases follow from it.
fn fast_policy() -> BudgetPolicy {
    BudgetPolicy {
        max_attempts: 3,
        max_queries: 20,
        window_ms: 60_000,
        attempt_timeout_ms: 3_000,
        lease_margin_ms: 300,
        query_backoff_base_ms: 5,
        query_backoff_cap_ms: 40,
    }
}

fn http_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        // One retry owner: the recovery engine.
        .retry_canceled_requests(false)
        .build_http()
}

fn layer(ledger: Arc<dyn FullLedger>, policy: BudgetPolicy) -> RecoverableWriteLayer {
    RecoverableWrite::builder(ledger)
        .budget(policy)
        .build()
        .expect("a valid configuration")
        .layer()
}

/// The full client stack: layer → guard → hyper-util client, bodies collected.
fn writer(layer: &RecoverableWriteLayer) -> Writer {
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(SendOnceGuardLayer::new())
        .service(http_client());
    collected(svc)
}

fn recoverer(ledger: Arc<dyn FullLedger>, vendor_base: &str, lease: Duration) -> Recoverer {
    let lookup = HttpLookup::new(
        http_client(),
        format!("{vendor_base}/operations/{{operation_id}}"),
    )
    .tenant_header(HeaderName::from_static("x-tenant"))
    .timeout(Duration::from_secs(2));
    RecoverableWrite::builder(ledger)
        .build()
        .expect("a valid configuration")
        .recoverer()
        .reconciler(lookup)
        .lease(lease)
        .batch_size(16)
}

fn op(n: usize) -> Operation {
    Operation::new(TENANT, "create_ticket", format!("intent-{n}"))
        .with_id(OperationId::new(format!("op-{n:05}")))
}

fn ticket_request(vendor_base: &str, op: &Operation) -> Request<Full<Bytes>> {
    let body = format!(
        r#"{{"operation_id":"{}","device_id":"E17","priority":"P2"}}"#,
        op.id()
    );
    let mut req = Request::post(format!("{vendor_base}/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .header("authorization", "Bearer sk_test_secret")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    req.extensions_mut().insert(op.clone());
    req
}

async fn send(svc: &mut Writer, req: Request<Full<Bytes>>) -> Result<Response<Bytes>, Error> {
    svc.ready().await?.call(req).await
}

/// Sends operations `0..n` through one layer with `concurrency` callers at once, each
/// response lost after the vendor committed: `n` UNKNOWN operations, `n` tickets.
async fn lose_responses(
    vendor: &FakeVendor,
    ledger: Arc<dyn FullLedger>,
    n: usize,
    concurrency: usize,
) -> Duration {
    let started = Instant::now();
    vendor.faults().drop_after_commit(n as u64);
    let layer = layer(ledger, fast_policy());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (mut svc, next, base) = (writer(&layer), next.clone(), vendor.base_url());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= n {
                    return;
                }
                match send(&mut svc, ticket_request(&base, &op(i))).await {
                    Err(Error::Unknown { .. }) => {}
                    other => panic!("op {i}: expected a lost response, got {other:?}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("sender task");
    }
    assert_eq!(vendor.tickets_created(), n as u64);
    started.elapsed()
}

/// Operations per state, over the whole schema.
async fn states(schema: &Schema) -> BTreeMap<String, i64> {
    let mut conn = schema.raw().await;
    let rows: Vec<(String, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT state, count(*) FROM \"{}\".rw_operations GROUP BY state",
        schema.name
    )))
    .fetch_all(&mut conn)
    .await
    .expect("states");
    let _ = conn.close().await;
    rows.into_iter().collect()
}

/// Operations that still need recovery work (in flight, unknown, processing) in `schema`.
async fn open_work(url: &str, schema: &str) -> i64 {
    let mut conn = PgConnection::connect(url).await.expect("raw connection");
    let n = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{schema}\".rw_operations \
         WHERE state IN ('IN_FLIGHT', 'UNKNOWN', 'PROCESSING', 'RETRY_READY')"
    )))
    .fetch_one(&mut conn)
    .await
    .expect("open work");
    let _ = conn.close().await;
    n
}

/// Every evidence entry of the schema, per operation id.
async fn all_evidence(schema: &Schema) -> HashMap<String, Vec<(String, i64, Option<String>)>> {
    let mut conn = schema.raw().await;
    let rows: Vec<(String, String, i64, Option<String>)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT operation_id, kind, generation, note FROM \"{}\".rw_evidence ORDER BY id",
        schema.name
    )))
    .fetch_all(&mut conn)
    .await
    .expect("evidence");
    let _ = conn.close().await;
    let mut by_op: HashMap<String, Vec<(String, i64, Option<String>)>> = HashMap::new();
    for (op, kind, generation, note) in rows {
        by_op.entry(op).or_default().push((kind, generation, note));
    }
    by_op
}

/// Runs a recoverer until no operation needs work (bounded), summing its reports.
async fn drain(recoverer: Recoverer, url: String, schema: String) -> RecoveryReport {
    let mut total = RecoveryReport::default();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r = recoverer.run_once().await.expect("recovery pass");
        total.swept += r.swept;
        total.claimed += r.claimed;
        total.resolved += r.resolved;
        total.pending += r.pending;
        total.escalated += r.escalated;
        total.lookups += r.lookups;
        total.replays += r.replays;
        total.stale += r.stale;
        if r.claimed == 0 && r.swept == 0 {
            if open_work(&url, &schema).await == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(Instant::now() < deadline, "recovery did not finish in 90 s");
    }
    total
}

/// The invariants of a multi-worker run over operations `0..n`, from the ledger and the
/// vendor's own request log. Returns the printable figures.
async fn assert_one_send_per_operation_and_none_lost(
    schema: &Schema,
    ledger: &PostgresLedger,
    vendor: &FakeVendor,
    n: usize,
) -> String {
    // No operation lost: each ends resolved, escalated, or still UNKNOWN with a due check.
    let tenant = Tenant::new(TENANT);
    let mut keys = HashMap::new();
    let mut by_state: BTreeMap<&'static str, usize> = BTreeMap::new();
    for i in 0..n {
        let id = op(i).id().clone();
        let row = ledger
            .get(&tenant, &id)
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("operation {id} lost"));
        match row.state {
            State::Succeeded => {
                assert!(row.remote_ref.is_some(), "{id} succeeded without a ticket");
            }
            State::Rejected | State::ManualReview => {}
            State::Unknown => assert!(row.next_check_ms.is_some(), "{id} UNKNOWN, never checked"),
            other => panic!("{id} ended in {other}"),
        }
        assert_eq!(row.attempts_used, 1, "{id}: one write attempt");
        *by_state.entry(row.state.as_str()).or_default() += 1;
        keys.insert(row.idempotency_key.as_str().to_owned(), id);
    }
    assert_eq!(keys.len(), n, "one idempotency key per operation");

    // The vendor's log: exactly one POST per operation, every one carrying its key.
    let mut posts_per_key: HashMap<String, usize> = HashMap::new();
    for req in vendor.requests() {
        if req.method == http::Method::POST {
            let key = req.idempotency_key.expect("every POST carries a key");
            *posts_per_key.entry(key).or_default() += 1;
        }
    }
    let duplicates: usize = posts_per_key.values().map(|c| c.saturating_sub(1)).sum();
    assert_eq!(duplicates, 0, "a key was sent twice");
    assert_eq!(posts_per_key.len(), n, "every operation was sent once");
    for key in posts_per_key.keys() {
        assert!(keys.contains_key(key), "a POST with a key no operation has");
    }
    assert_eq!(vendor.tickets_created(), n as u64);
    let ticket_ops: HashSet<_> = vendor
        .tickets()
        .into_iter()
        .filter_map(|t| t.operation_id)
        .collect();
    assert_eq!(ticket_ops.len(), n, "one ticket per operation");

    // The evidence log: one send registered per operation and generation, one claim per
    // generation, at most one applied lookup per generation.
    let evidence = all_evidence(schema).await;
    let mut claims = 0;
    let mut stale = 0;
    for (id, entries) in &evidence {
        let mut seen: HashSet<(&str, i64)> = HashSet::new();
        let mut registered = 0;
        for (kind, generation, note) in entries {
            match kind.as_str() {
                "attempt_registered" => registered += 1,
                "recovery_claimed" => claims += 1,
                "late_evidence" => {
                    if note
                        .as_deref()
                        .is_some_and(|n| n.contains("stale generation"))
                    {
                        stale += 1;
                    }
                    continue;
                }
                _ => {}
            }
            assert!(
                seen.insert((kind.as_str(), *generation)),
                "{id}: two {kind} entries at generation {generation}"
            );
        }
        assert_eq!(registered, 1, "{id}: exactly one send registered");
    }
    format!(
        "operations={n} states={by_state:?} vendor_posts={} distinct_keys={} duplicates={duplicates} \
         tickets={} claims={claims} stale_results_refused={stale}",
        posts_per_key.values().sum::<usize>(),
        posts_per_key.len(),
        vendor.tickets_created(),
    )
}

// ── D16: crash after the send, before the result is recorded (a real process, killed) ──────────

/// A worker process sends the write, the vendor commits, and the process is killed (SIGKILL)
/// before the response arrives: the row stays IN_FLIGHT until its lease expires on the database
/// clock, the sweep makes it UNKNOWN (never PREPARED), and another worker's lookup finds the
/// ticket. One ticket, one POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d16_crash_after_send_before_record_is_swept_to_unknown_and_recovered_with_one_ticket() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(2).await;
    let vendor = FakeVendor::start().await;
    // The vendor commits at once and holds the answer long after the child is dead.
    vendor.faults().delay_response(Duration::from_secs(30), 1);
    let mut child = child(&schema, &vendor, "send")
        .spawn()
        .expect("spawn the sending process");
    let started = Instant::now();
    while vendor.tickets_created() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the child never sent"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The vendor has committed; the sender dies before anything is recorded.
    child.kill().await.expect("kill the sender");
    let id = op(0).id().clone();
    let tenant = Tenant::new(TENANT);
    let row = ledger.get(&tenant, &id).await.expect("get").expect("row");
    assert_eq!(row.state, State::InFlight, "registered before the send");
    assert_eq!(row.attempts_used, 1);
    let lease_until = row.lease_until_ms.expect("a lease");

    // Before the lease is over nobody may act: the sweep leaves it alone.
    let worker: Arc<dyn FullLedger> = Arc::new(schema.ledger(2).await);
    let recoverer = recoverer(worker.clone(), &vendor.base_url(), Duration::from_secs(5));
    let early = recoverer.run_once().await.expect("pass");
    assert_eq!(early.swept, 0, "the lease still runs");
    assert_eq!(
        ledger
            .get(&tenant, &id)
            .await
            .expect("get")
            .map(|r| r.state),
        Some(State::InFlight)
    );

    // After it: swept to UNKNOWN, then claimed and looked up.
    while ledger.database_now_ms().await.expect("clock") <= lease_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let swept = worker.sweep_expired(0).await.expect("sweep");
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].state, State::Unknown);
    assert!(swept[0].may_have_applied);
    assert!(swept[0].generation > row.generation);
    let mut resolved = None;
    for _ in 0..200 {
        recoverer.run_once().await.expect("pass");
        let r = ledger.get(&tenant, &id).await.expect("get").expect("row");
        if r.state == State::Succeeded {
            resolved = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let row = resolved.expect("recovered");
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(row.attempts_used, 1);
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 1);
    let kinds: Vec<String> = ledger
        .evidence(&tenant, &id)
        .await
        .expect("evidence")
        .into_iter()
        .map(|e| e.entry.kind.into_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "created",
            "attempt_registered",
            "lease_expired",
            "recovery_claimed",
            "lookup"
        ]
    );
}

// ── D17: a paused old worker wakes after its lease expired ─────────────────────────────────────

/// A [`Ledger`] that stops one worker between its lookup and recording the answer, the way a
/// GC pause, a stopped VM or a descheduled container would.
#[derive(Debug)]
struct PausingLedger {
    inner: PostgresLedger,
    paused: tokio::sync::Notify,
    release: tokio::sync::Notify,
    armed: std::sync::atomic::AtomicBool,
}

impl ForwardingLedger for PausingLedger {
    fn inner(&self) -> &dyn FullLedger {
        &self.inner
    }

    // What a lookup found is committed through `record` (it lets no byte leave); the pause
    // sits on that write.
    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        Box::pin(async move {
            if update.evidence().kind == "lookup"
                && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                self.paused.notify_one();
                self.release.notified().await;
            }
            self.inner.record(update).await
        })
    }
}

/// Worker A claims the unknown operation (generation g) and pauses before recording its lookup.
/// Its lease expires; worker B claims it (g+1) and resolves it. A wakes: its result and a claim
/// computed from its old read are both refused by the generation, its answer is kept as late
/// evidence, and the vendor has one ticket.
/// A worker clock ten seconds ahead of the database's: more than half the 5 s recovery lease,
/// well inside the 60 s recovery window.
#[derive(Debug)]
struct TenSecondsAhead;
impl recoverable_write::clock::Clock for TenSecondsAhead {
    fn now_ms(&self) -> i64 {
        recoverable_write::clock::ProcessClock.now_ms() + 10_000
    }
}

/// Issue 10 item 11: with the database clock, a worker whose own clock runs ahead of the
/// database's by more than half a lease claimed rows and then skipped each one as "lease nearly
/// spent" (its clock against a database-clock lease): nothing was ever recovered, and other
/// workers were fenced out by its claims. Lease comparisons now use the ledger's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_clock_ahead_of_the_database_by_more_than_half_a_lease_still_recovers() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger: Arc<dyn FullLedger> = Arc::new(schema.ledger(2).await);
    let vendor = FakeVendor::start().await;
    lose_responses(&vendor, ledger.clone(), 3, 1).await;

    let skewed = recoverer(ledger.clone(), &vendor.base_url(), Duration::from_secs(5))
        .clock(TenSecondsAhead);
    let mut passes = 0;
    while open_work(&url, &schema.name).await > 0 {
        passes += 1;
        assert!(
            passes <= 200,
            "the skewed worker never recovered: {:?}",
            states(&schema).await
        );
        let report = skewed.run_once().await.expect("pass");
        assert_eq!(
            report.stale, 0,
            "no fresh claim is skipped as nearly spent: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        vendor.tickets_created(),
        3,
        "recovered by lookup, nothing re-sent"
    );
    assert_eq!(vendor.posts_received(), 3);
    assert_eq!(states(&schema).await.get("SUCCEEDED"), Some(&3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d17_paused_old_worker_is_refused_by_the_generation_after_a_new_worker_resumed() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(2).await;
    let vendor = FakeVendor::start().await;
    lose_responses(&vendor, Arc::new(ledger.clone()), 1, 1).await;
    let tenant = Tenant::new(TENANT);
    let id = op(0).id().clone();

    let lease = Duration::from_millis(1_500);
    let a_ledger = Arc::new(PausingLedger {
        inner: schema.ledger(2).await,
        paused: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
        armed: std::sync::atomic::AtomicBool::new(true),
    });
    let a = recoverer(a_ledger.clone(), &vendor.base_url(), lease);
    let a_pass = tokio::spawn(async move { a.run_once().await });
    tokio::time::timeout(Duration::from_secs(10), a_ledger.paused.notified())
        .await
        .expect("worker A reached its pause");
    let held_by_a = ledger.get(&tenant, &id).await.expect("get").expect("row");
    let g = held_by_a.generation;
    let a_lease_until = held_by_a.lease_until_ms.expect("A holds a lease");

    // While A's lease runs, B cannot claim.
    let b_ledger: Arc<dyn FullLedger> = Arc::new(schema.ledger(2).await);
    let b = recoverer(b_ledger.clone(), &vendor.base_url(), lease);
    assert_eq!(b.run_once().await.expect("pass").claimed, 0);
    while ledger.database_now_ms().await.expect("clock") <= a_lease_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = b.run_once().await.expect("pass");
    assert_eq!((report.claimed, report.resolved), (1, 1), "{report:?}");
    let resolved = ledger.get(&tenant, &id).await.expect("get").expect("row");
    assert_eq!(resolved.state, State::Succeeded);
    assert_eq!(resolved.generation, g.next());

    // A wakes up.
    a_ledger.release.notify_one();
    let a_report = a_pass.await.expect("task").expect("pass");
    assert_eq!(a_report.claimed, 1);
    assert_eq!(
        a_report.stale, 1,
        "A's result must be refused: {a_report:?}"
    );
    assert_eq!(a_report.resolved, 0);
    // A claim (a generation bump) computed from A's old read is refused too.
    let stale_claim = recoverable_write::ledger::conformance::update_of(
        &held_by_a,
        recoverable_write::ledger::conformance::RawChanges {
            generation: g.next(),
            ..recoverable_write::ledger::conformance::keep(
                &held_by_a,
                State::Unknown,
                held_by_a.updated_ms + 1,
            )
        },
        "recovery_claimed",
    );
    assert_eq!(b_ledger.apply(stale_claim).await.expect("apply"), None);

    let row = ledger.get(&tenant, &id).await.expect("get").expect("row");
    // A's refused result is appended as late evidence, which advances the version.
    let mut expected = resolved.clone();
    expected.version += 1;
    assert_eq!(row, expected, "A changed nothing but the log");
    let log = ledger.evidence(&tenant, &id).await.expect("evidence");
    let story: Vec<(&str, u64)> = log
        .iter()
        .map(|e| (&*e.entry.kind, e.entry.generation.0))
        .collect();
    assert_eq!(
        story,
        [
            ("created", 0),
            ("attempt_registered", 1),
            ("attempt_result", 1),
            ("recovery_claimed", g.0),
            ("recovery_claimed", g.0 + 1),
            ("lookup", g.0 + 1),
            ("late_evidence", g.0),
        ]
    );
    let late = &log[6].entry;
    assert!(
        late.note
            .as_deref()
            .is_some_and(|n| n.contains("stale generation")),
        "{late:?}"
    );
    assert!(matches!(
        late.evidence,
        Some(recoverable_write::Evidence::Succeeded { .. })
    ));
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 1);
}

// ── D18: many workers race for the same operations ──────────────────────────────────────────────

/// 1,000 writes whose responses were lost, recovered by 8 recoverers, each with its own pool,
/// racing over the same due set: the vendor saw exactly one POST per operation, and every
/// operation is accounted for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn d18_eight_workers_recover_1000_lost_responses_with_one_send_each() {
    const OPERATIONS: usize = 1_000;
    const WORKERS: usize = 8;
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(8).await;
    let vendor = FakeVendor::start().await;
    let sending = lose_responses(&vendor, Arc::new(ledger.clone()), OPERATIONS, 16).await;
    assert_eq!(
        states(&schema).await.get("UNKNOWN").copied(),
        Some(OPERATIONS as i64)
    );

    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let own: Arc<dyn FullLedger> = Arc::new(schema.ledger(2).await);
        let r = recoverer(own, &vendor.base_url(), Duration::from_secs(10));
        workers.push(tokio::spawn(drain(
            r,
            schema.url.clone(),
            schema.name.clone(),
        )));
    }
    let mut reports = Vec::new();
    for w in workers {
        reports.push(w.await.expect("worker"));
    }
    let recovering = started.elapsed();

    let figures =
        assert_one_send_per_operation_and_none_lost(&schema, &ledger, &vendor, OPERATIONS).await;
    let claimed: usize = reports.iter().map(|r| r.claimed).sum();
    let resolved: usize = reports.iter().map(|r| r.resolved).sum();
    let per_worker: Vec<usize> = reports.iter().map(|r| r.claimed).collect();
    eprintln!(
        "D18: workers={WORKERS} {figures} claimed_per_worker={per_worker:?} \
         send_phase={sending:?} recovery_phase={recovering:?}"
    );
    assert_eq!(resolved, OPERATIONS, "{reports:?}");
    assert_eq!(
        states(&schema).await.get("SUCCEEDED").copied(),
        Some(OPERATIONS as i64)
    );
    assert!(claimed >= OPERATIONS);
    assert!(
        per_worker.iter().filter(|c| **c > 0).count() >= 2,
        "the work should be shared: {per_worker:?}"
    );
}

/// Eight workers with their own pools call `claim_due` on the same due set over and over, with a
/// zero lease so every row is claimable again at once: each (operation, generation) is claimed
/// by exactly one worker, and the ledger's log agrees with what the workers got.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn d18_concurrent_claims_give_each_generation_to_exactly_one_worker() {
    const ROWS: usize = 300;
    const WORKERS: usize = 8;
    const ROUNDS: usize = 30;
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(4).await;
    // Due UNKNOWN rows, created through the ledger API.
    let mut tasks = Vec::new();
    for chunk in 0..4 {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            for i in (chunk..ROWS).step_by(4) {
                let r = ledger
                    .create_or_get(new_op(i))
                    .await
                    .expect("create")
                    .into_record();
                let now = r.created_ms;
                let changes = recoverable_write::ledger::conformance::RawChanges {
                    next_check_ms: Some(now - 1_000),
                    ..recoverable_write::ledger::conformance::keep(&r, State::Unknown, now)
                };
                ledger
                    .apply(recoverable_write::ledger::conformance::update_of(
                        &r, changes, "setup",
                    ))
                    .await
                    .expect("apply")
                    .expect("applied");
            }
        }));
    }
    for t in tasks {
        t.await.expect("setup");
    }

    // Round 1 with a long lease: every row exactly once, no waiting.
    let barrier = Arc::new(tokio::sync::Barrier::new(WORKERS));
    let mut handles = Vec::new();
    for _ in 0..WORKERS {
        let (own, barrier) = (schema.ledger(1).await, barrier.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut got = Vec::new();
            loop {
                let batch = own.claim_due(0, 60_000, 7).await.expect("claim");
                if batch.is_empty() {
                    return got;
                }
                got.extend(batch.into_iter().map(|r| (r.operation_id, r.generation)));
            }
        }));
    }
    let mut once: Vec<(OperationId, recoverable_write::Generation)> = Vec::new();
    let mut workers_with_claims = 0;
    for h in handles {
        let got = h.await.expect("worker");
        workers_with_claims += usize::from(!got.is_empty());
        once.extend(got);
    }
    assert_eq!(once.len(), ROWS, "every due row claimed exactly once");
    let distinct: HashSet<_> = once.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(distinct.len(), ROWS);
    assert!(workers_with_claims >= 2);

    // Make everything due again (a human pulls the leases), then race with zero leases.
    let mut conn = schema.raw().await;
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{}\".rw_operations SET lease_until_ms = NULL",
        schema.name
    )))
    .execute(&mut conn)
    .await
    .expect("reset leases");
    let _ = conn.close().await;
    let barrier = Arc::new(tokio::sync::Barrier::new(WORKERS));
    let mut handles = Vec::new();
    for _ in 0..WORKERS {
        let (own, barrier) = (schema.ledger(1).await, barrier.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut got = Vec::new();
            for _ in 0..ROUNDS {
                let batch = own.claim_due(0, 0, 25).await.expect("claim");
                got.extend(batch.into_iter().map(|r| (r.operation_id, r.generation)));
            }
            got
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.push(h.await.expect("worker"));
    }
    let mut owner: HashMap<(OperationId, recoverable_write::Generation), usize> = HashMap::new();
    for (worker, got) in all.iter().enumerate() {
        for key in got {
            if let Some(other) = owner.insert(key.clone(), worker) {
                panic!("{key:?} claimed by workers {other} and {worker}");
            }
        }
    }
    let total: usize = all.iter().map(Vec::len).sum();
    let evidence = all_evidence(&schema).await;
    let logged: usize = evidence
        .values()
        .map(|e| e.iter().filter(|(k, _, _)| k == "recovery_claimed").count())
        .sum();
    assert_eq!(logged, ROWS + total, "one log entry per claim");
    // Per operation, the claimed generations are consecutive: none skipped, none repeated.
    let mut per_op: HashMap<&OperationId, Vec<u64>> = HashMap::new();
    for (id, g) in owner.keys() {
        per_op.entry(id).or_default().push(g.0);
    }
    for (id, gens) in per_op.iter_mut() {
        gens.sort_unstable();
        let first = gens[0];
        assert_eq!(
            *gens,
            (first..first + gens.len() as u64).collect::<Vec<_>>(),
            "{id}"
        );
    }
    eprintln!(
        "D18 claim race: rows={ROWS} workers={WORKERS} rounds={ROUNDS} claims={total} \
         duplicates=0 per_worker={:?}",
        all.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

/// A `NewOperation` for the claim race (no vendor involved).
fn new_op(i: usize) -> NewOperation {
    recoverable_write::ledger::conformance::new_operation(
        TENANT,
        op(i).id().as_str(),
        &format!("intent-{i}"),
    )
}

/// The same operations created through the outbox (PREPARED, committed with a business row),
/// then sent by eight layer stacks at once, each with its own pool: per operation exactly one
/// stack sends, the others are told it is in flight or get the stored result.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn d18_eight_senders_race_for_each_outbox_operation_and_exactly_one_sends() {
    const OPERATIONS: usize = 60;
    const SENDERS: usize = 8;
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(4).await;
    let vendor = FakeVendor::start().await;
    let contract = Contract::conservative();
    for i in 0..OPERATIONS {
        let req = ticket_request(&vendor.base_url(), &op(i));
        let (parts, body) = req.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        let frozen = FrozenRequest::freeze(
            &parts.method,
            &parts.uri,
            &parts.headers,
            body,
            contract.secrets(),
        );
        let hash = PayloadHash::compute(
            frozen.method.as_str(),
            &frozen.url,
            &frozen.body,
            &contract.digest,
        );
        let o = op(i);
        let mut tx = ledger.pool().begin().await.expect("begin");
        let created = ledger
            .create_in(
                &mut tx,
                NewOperation {
                    tenant: o.tenant().clone(),
                    operation_id: o.id().clone(),
                    action: o.action().into(),
                    intent_ref: o.intent_ref().into(),
                    idempotency_key: IdempotencyKey::generate(),
                    payload_hash: hash,
                    request: frozen.into(),
                    contract: contract.reference(),
                    policy: fast_policy(),
                    now_ms: 0,
                },
            )
            .await
            .expect("create_in");
        assert!(matches!(created, Created::New(_)));
        tx.commit().await.expect("commit");
    }

    let mut stacks = Vec::new();
    for _ in 0..SENDERS {
        let own: Arc<dyn FullLedger> = Arc::new(schema.ledger(2).await);
        stacks.push(writer(&layer(own, fast_policy())));
    }
    let mut tasks = Vec::new();
    for (s, stack) in stacks.into_iter().enumerate() {
        let base = vendor.base_url();
        tasks.push(tokio::spawn(async move {
            let mut svc = stack;
            let mut sent_ok = 0;
            // Each sender walks the operations from a different starting point.
            for k in 0..OPERATIONS {
                let i = (k + s * 7) % OPERATIONS;
                match send(&mut svc, ticket_request(&base, &op(i))).await {
                    Ok(res) => {
                        assert!(res.status().is_success(), "{res:?}");
                        sent_ok += 1;
                    }
                    Err(e) => {
                        assert!(e.nothing_sent(), "op {i}: {e:?}");
                        let state = e.outcome().map(|o| o.state);
                        assert_eq!(state, Some(State::InFlight), "op {i}: {e:?}");
                    }
                }
            }
            sent_ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.expect("sender");
    }
    assert!(ok >= OPERATIONS);
    let figures =
        assert_one_send_per_operation_and_none_lost(&schema, &ledger, &vendor, OPERATIONS).await;
    assert_eq!(
        states(&schema).await.get("SUCCEEDED").copied(),
        Some(OPERATIONS as i64)
    );
    eprintln!("D18 send race: senders={SENDERS} {figures}");
}

// ── D18 across OS processes ─────────────────────────────────────────────────────────────────────

const WORKER_PROCESSES: usize = 4;

/// The child command: this test binary, running only [`child_worker_process`].
fn child(schema: &Schema, vendor: &FakeVendor, role: &str) -> tokio::process::Command {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([
        "--exact",
        "child_worker_process",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("RW_CHILD_ROLE", role)
    .env("RW_CHILD_URL", &schema.url)
    .env("RW_CHILD_SCHEMA", &schema.name)
    .env("RW_CHILD_VENDOR", vendor.base_url())
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    cmd
}

/// 300 lost responses recovered by four worker processes racing over one schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d18_worker_processes_race_over_one_schema_and_each_operation_is_sent_once() {
    const OPERATIONS: usize = 300;
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(4).await;
    let vendor = FakeVendor::start().await;
    lose_responses(&vendor, Arc::new(ledger.clone()), OPERATIONS, 8).await;
    // Slow lookups make the processes overlap, as on real machines.
    vendor
        .faults()
        .lookup_delay(Duration::from_millis(15), OPERATIONS as u64);

    let mut children = Vec::new();
    for _ in 0..WORKER_PROCESSES {
        let cmd = child(&schema, &vendor, "recover")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn a worker process");
        children.push(cmd);
    }
    let mut per_process = Vec::new();
    for c in children {
        let out = tokio::time::timeout(Duration::from_secs(120), c.wait_with_output())
            .await
            .expect("worker process finished in time")
            .expect("worker process output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "worker process failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let report = stdout
            .lines()
            .find_map(|l| l.split_once("RW_CHILD_REPORT ").map(|(_, r)| r))
            .unwrap_or_else(|| panic!("no report from a worker process:\n{stdout}"));
        let field = |name: &str| -> usize {
            report
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {report}"))
        };
        per_process.push((field("claimed"), field("resolved"), field("stale")));
    }
    let figures =
        assert_one_send_per_operation_and_none_lost(&schema, &ledger, &vendor, OPERATIONS).await;
    let resolved: usize = per_process.iter().map(|p| p.1).sum();
    eprintln!(
        "D18 processes: processes={WORKER_PROCESSES} {figures} (claimed, resolved, stale) per \
         process={per_process:?}"
    );
    assert_eq!(resolved, OPERATIONS);
    assert!(
        per_process.iter().filter(|p| p.0 > 0).count() >= 2,
        "more than one process should have worked: {per_process:?}"
    );
}

/// Not a test of its own: the body of the worker processes the tests above start. Run alone (no
/// `RW_CHILD_ROLE`), it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process started by the multi-process tests"]
async fn child_worker_process() {
    let Ok(role) = std::env::var("RW_CHILD_ROLE") else {
        eprintln!("not started as a worker process; nothing to do");
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"));
    let (url, schema, vendor) = (
        var("RW_CHILD_URL"),
        var("RW_CHILD_SCHEMA"),
        var("RW_CHILD_VENDOR"),
    );
    let ledger: Arc<dyn FullLedger> = Arc::new(connect(&url, &schema, 2).await);
    match role.as_str() {
        // Send one write and wait for its answer; the parent kills us before it comes (D16).
        "send" => {
            let mut svc = writer(&layer(ledger, fast_policy()));
            let result = send(&mut svc, ticket_request(&vendor, &op(0))).await;
            println!("\nRW_CHILD_SENT {:?}", result.map(|r| r.status()));
        }
        // Recover until nothing is left.
        "recover" => {
            let r = recoverer(ledger, &vendor, Duration::from_secs(10));
            let total = drain(r, url, schema).await;
            println!(
                "\nRW_CHILD_REPORT claimed={} resolved={} stale={} swept={}",
                total.claimed, total.resolved, total.stale, total.swept
            );
        }
        other => panic!("unknown worker role {other:?}"),
    }
}
