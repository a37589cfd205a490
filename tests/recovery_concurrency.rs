//! A recoverer working its claimed rows side by side (`Recoverer::concurrency`) over SQLite,
//! against the fake vendor over real TCP: a backlog of lost responses is recovered with exactly
//! one ticket per operation at the vendor, every operation `SUCCEEDED`, and the lookups' results
//! share the writer's commits. And a recoverer spawned over a backlog larger than its batch
//! drains it without waiting its interval between full passes.
#![cfg(feature = "sqlite")]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use recoverable_write::ledger::{FullLedger, Ledger, ListingLedger, TenantScope};
use recoverable_write::state::State;
use recoverable_write::testing::FakeVendor;
use recoverable_write::testing::drill::collected;
use recoverable_write::{
    BudgetPolicy, Error, HttpLookup, Operation, OperationId, RecoverableWrite, Recoverer,
    SendOnceGuardLayer, SqliteLedger,
};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder, ServiceExt};

const TENANT: &str = "tenant-a";

type Writer = BoxCloneSyncService<Request<Full<Bytes>>, Response<Bytes>, Error>;

fn http_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http()
}

fn policy() -> BudgetPolicy {
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

fn op(n: usize) -> Operation {
    Operation::new(TENANT, "create_ticket", format!("intent-{n}"))
        .with_id(OperationId::new(format!("op-{n:05}")))
}

fn ticket_request(base: &str, op: &Operation) -> Request<Full<Bytes>> {
    let body = format!(
        r#"{{"operation_id":"{}","device_id":"E17","priority":"P2"}}"#,
        op.id()
    );
    let mut req = Request::post(format!("{base}/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    req.extensions_mut().insert(op.clone());
    req
}

/// Sends operations `0..n`, every response lost after the vendor committed: `n` `UNKNOWN`
/// operations, `n` tickets.
async fn lose_responses(vendor: &FakeVendor, ledger: Arc<dyn FullLedger>, n: usize) {
    vendor.faults().drop_after_commit(n as u64);
    let layer = RecoverableWrite::builder(ledger)
        .budget(policy())
        .build()
        .expect("a valid configuration")
        .layer();
    let mut tasks = Vec::new();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..8 {
        let svc = ServiceBuilder::new()
            .layer(layer.clone())
            .layer(SendOnceGuardLayer::new())
            .service(http_client());
        let mut svc: Writer = collected(svc);
        let (next, base) = (next.clone(), vendor.base_url());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= n {
                    return;
                }
                let sent = svc
                    .ready()
                    .await
                    .expect("ready")
                    .call(ticket_request(&base, &op(i)))
                    .await;
                assert!(
                    matches!(sent, Err(Error::Unknown { .. })),
                    "op {i}: expected a lost response, got {sent:?}"
                );
            }
        }));
    }
    for t in tasks {
        t.await.expect("sender");
    }
    assert_eq!(vendor.tickets_created(), n as u64);
}

fn recoverer(ledger: Arc<dyn FullLedger>, vendor: &FakeVendor) -> Recoverer {
    let lookup = HttpLookup::new(
        http_client(),
        format!("{}/operations/{{operation_id}}", vendor.base_url()),
    )
    .tenant_header(HeaderName::from_static("x-tenant"))
    .timeout(Duration::from_secs(2));
    RecoverableWrite::builder(ledger)
        .budget(policy())
        .build()
        .expect("a valid configuration")
        .recoverer()
        .reconciler(lookup)
        .lease(Duration::from_secs(10))
}

async fn count(ledger: &SqliteLedger, state: State) -> u64 {
    ledger.wait_for_results().await;
    ledger
        .count_by_state(&TenantScope::AllTenants)
        .await
        .expect("count")
        .get(state)
        .expect("an open state")
}

async fn succeeded(ledger: &SqliteLedger, n: usize) -> usize {
    let mut done = 0;
    for i in 0..n {
        let row = ledger
            .get(
                &recoverable_write::Tenant::new(TENANT),
                &OperationId::new(format!("op-{i:05}")),
            )
            .await
            .expect("get")
            .expect("row");
        if row.state == State::Succeeded {
            done += 1;
        }
    }
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recoverer_working_16_rows_at_once_recovers_each_lost_response_with_one_ticket() {
    const N: usize = 200;
    let dir = tempfile::tempdir().expect("dir");
    let ledger = SqliteLedger::open(dir.path().join("l.db"))
        .await
        .expect("ledger");
    let vendor = FakeVendor::start().await;
    lose_responses(&vendor, Arc::new(ledger.clone()), N).await;
    assert_eq!(count(&ledger, State::Unknown).await, N as u64);

    let recoverer = recoverer(Arc::new(ledger.clone()), &vendor)
        .batch_size(64)
        .concurrency(16);
    let (commits_before, writes_before) = (ledger.commits(), ledger.committed_writes());
    let mut resolved = 0;
    let mut lookups = 0;
    for _ in 0..20 {
        let report = recoverer.run_once().await.expect("pass");
        resolved += report.resolved;
        lookups += report.lookups;
        if report.claimed == 0 {
            break;
        }
    }
    let (commits, writes) = (
        ledger.commits() - commits_before,
        ledger.committed_writes() - writes_before,
    );
    assert_eq!(resolved, N);
    assert_eq!(lookups, N);
    assert_eq!(succeeded(&ledger, N).await, N);
    assert_eq!(count(&ledger, State::Unknown).await, 0);
    // The vendor's own count: recovery asked, it never sent again.
    assert_eq!(vendor.tickets_created(), N as u64);
    assert_eq!(vendor.posts_received(), N as u64);
    assert!(vendor.lookups_received() >= N as u64);
    // Side by side, the results of one pass share commits (one after another, each would be
    // committed alone: at least one commit per row).
    assert!(
        commits < writes,
        "{commits} commits for {writes} writes: the results never shared a commit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_recoverer_drains_a_backlog_larger_than_its_batch_without_its_interval() {
    const N: usize = 60;
    let dir = tempfile::tempdir().expect("dir");
    let ledger = SqliteLedger::open(dir.path().join("l.db"))
        .await
        .expect("ledger");
    let vendor = FakeVendor::start().await;
    lose_responses(&vendor, Arc::new(ledger.clone()), N).await;

    // Batches of 10 and an hour between idle passes: only passing at once after a full pass
    // drains the 60 operations.
    let handle = recoverer(Arc::new(ledger.clone()), &vendor)
        .batch_size(10)
        .interval(Duration::from_secs(3600))
        .gauge_interval(None)
        .spawn();
    let mut left = N as u64;
    for _ in 0..600 {
        left = count(&ledger, State::Unknown).await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await;
    assert_eq!(left, 0, "the backlog was not drained");
    assert_eq!(succeeded(&ledger, N).await, N);
    assert_eq!(vendor.tickets_created(), N as u64);
    assert_eq!(vendor.posts_received(), N as u64);
}
