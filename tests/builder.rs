//! The one entry point (issue 11): one validated configuration hands out the layer, the
//! recoverer, the reviews and the reqwest middleware; a contract's `lookup` from TOML is the
//! reconciler, with no reconciler code; reqwest users recover over their own client.

mod common;

use std::time::Duration;

use common::*;
use http::HeaderName;
use recoverable_write::Ledger;
use recoverable_write::testing::FakeVendor;
use recoverable_write::{
    BudgetPolicy, BuildError, Builder, Contracts, Error, Handle, MemoryLedger, Operation,
    RecoverableWrite, SendOnceGuard, SendOnceGuardLayer, State, Tenant,
};
use tower::ServiceBuilder;

/// The fake vendor's contract, from TOML only: its lookup is a path on the write's own host.
fn contracts_toml() -> Contracts {
    let toml = r#"
[[route]]
host = "127.0.0.1"
contract = "tickets"

[contracts.tickets]
extends = "ietf-draft"
lookup = { kind = "http_get", url_template = "/operations/{operation_id}" }
"#;
    Contracts::from_toml_str(toml, "contracts.toml").expect("valid contracts")
}

/// The stack below the layer: the send-once guard over the plain client.
fn below() -> SendOnceGuard<HttpClient> {
    ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new())
        .service(http_client())
}

/// A builder over `ledger` with the TOML contracts, whose lookups go through `below`.
fn toml_builder<L: Ledger>(ledger: L, below: &SendOnceGuard<HttpClient>) -> Builder<L> {
    RecoverableWrite::builder(ledger)
        .contracts(contracts_toml())
        .budget(fast_policy())
        .transport(below.clone())
        .lookup_tenant_header(HeaderName::from_static("x-tenant"))
        .lookup_timeout(Duration::from_millis(500))
        .recovery_lease(Duration::from_secs(2))
}

/// Sends `op`'s ticket through `rw`'s layer over `below` while the vendor drops the response
/// after committing: the caller is told the outcome is unknown.
async fn lose_the_response<L: Ledger>(
    rw: &Handle<L>,
    below: SendOnceGuard<HttpClient>,
    vendor: &FakeVendor,
    op: &Operation,
) {
    let svc = ServiceBuilder::new().layer(rw.layer()).service(below);
    vendor.faults().drop_after_commit(1);
    let err = tower::ServiceExt::oneshot(svc, ticket_request(vendor, op, "E17"))
        .await
        .expect_err("the response is lost");
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");
}

async fn run_until(
    recoverer: &recoverable_write::Recoverer,
    ledger: &impl recoverable_write::Ledger,
    op: &recoverable_write::Operation,
    done: impl Fn(State) -> bool,
) -> recoverable_write::ledger::OperationRecord {
    for _ in 0..200 {
        recoverer.run_once().await.expect("pass");
        let row = ledger.get(op.tenant(), op.id()).await.unwrap().unwrap();
        if done(row.state) {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never reached the expected state");
}

/// Done-means of issue 11: a vendor contract whose lookup comes only from TOML recovers a lost
/// response to exactly one ticket.
#[tokio::test]
async fn a_contract_lookup_from_toml_recovers_a_lost_response_with_no_reconciler_code() {
    let vendor = FakeVendor::start().await;
    let below = below();
    let rw = toml_builder(MemoryLedger::new(), &below)
        .build()
        .expect("valid configuration");
    let op = new_op("intent-toml-lookup");
    lose_the_response(&rw, below, &vendor, &op).await;

    let row = run_until(&rw.recoverer(), rw.ledger(), &op, |s| s == State::Succeeded).await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(&*row.contract.name, "tickets");
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 1);
    assert!(vendor.lookups_received() >= 1);
}

/// A reqwest user recovers and replays over their own reqwest client: no hyper-util stack.
#[cfg(feature = "reqwest")]
#[tokio::test]
async fn a_reqwest_user_recovers_and_replays_over_their_own_client() {
    use recoverable_write::reqwest::{SendOnceMiddleware, client_builder, transport};
    let vendor = FakeVendor::start().await;
    let below = reqwest_middleware::ClientBuilder::new(client_builder().build().unwrap())
        .with(SendOnceMiddleware::new())
        .build();
    let rw = RecoverableWrite::builder(MemoryLedger::new())
        .contracts(contracts_toml())
        .budget(fast_policy())
        .transport(transport(below.clone()))
        .lookup_tenant_header(HeaderName::from_static("x-tenant"))
        .lookup_timeout(Duration::from_millis(500))
        .recovery_lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let client = reqwest_middleware::ClientBuilder::new(client_builder().build().unwrap())
        .with(rw.reqwest_middleware())
        .with(SendOnceMiddleware::new())
        .build();
    let recoverer = rw.recoverer();
    let send = |op: &recoverable_write::Operation| {
        client
            .post(vendor.url("/tickets"))
            .header("content-type", "application/json")
            .header("x-tenant", op.tenant().as_str())
            .with_extension(op.clone())
            .body(ticket_body(op, "E17"))
            .send()
    };

    // A lost response, recovered by the contract's lookup over the reqwest transport.
    let lost = new_op("intent-reqwest-lost");
    vendor.faults().drop_after_commit(1);
    assert!(send(&lost).await.is_err());
    let row = run_until(&recoverer, rw.ledger(), &lost, |s| s == State::Succeeded).await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));

    // A refused connection (provably unsent), replayed over the reqwest transport.
    let refused = new_op("intent-reqwest-refused");
    vendor.faults().refuse_connections(true).unwrap();
    assert!(send(&refused).await.is_err());
    vendor.faults().refuse_connections(false).unwrap();
    let row = run_until(&recoverer, rw.ledger(), &refused, |s| s == State::Succeeded).await;
    assert_eq!(row.attempts_used, 2);
    assert_eq!(vendor.tickets_created(), 2, "one ticket per operation");
    let keys: Vec<_> = vendor
        .requests()
        .into_iter()
        .filter(|r| r.method == http::Method::POST)
        .map(|r| r.idempotency_key)
        .collect();
    assert_eq!(keys.len(), 2, "the refused send never reached the vendor");
}

/// Validation errors are typed and name the field; nothing is built.
#[tokio::test]
async fn invalid_settings_are_refused_by_name() {
    let err = RecoverableWrite::builder(MemoryLedger::new())
        .budget(BudgetPolicy {
            max_attempts: 0,
            ..BudgetPolicy::default()
        })
        .build()
        .unwrap_err();
    assert!(matches!(err, BuildError::Budget(_)), "{err:?}");
    assert!(err.to_string().contains("max_attempts"), "{err}");

    let err = RecoverableWrite::builder(MemoryLedger::new())
        .max_request_body(0)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            BuildError::Invalid {
                field: "max_request_body",
                ..
            }
        ),
        "{err:?}"
    );

    let err = RecoverableWrite::builder(MemoryLedger::new())
        .recovery_lease(Duration::from_secs(1))
        .lookup_timeout(Duration::from_secs(10))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            BuildError::Invalid {
                field: "recovery_lease",
                ..
            }
        ),
        "{err:?}"
    );
}

/// Every face of one configuration shares its ledger: what the layer records, the reviews and
/// the recoverer see.
#[tokio::test]
async fn the_faces_of_one_configuration_share_the_ledger() {
    let rw = RecoverableWrite::builder(MemoryLedger::new())
        .build()
        .unwrap();
    let layer_ledger = rw.layer().ledger().clone();
    assert!(std::ptr::addr_eq(
        std::sync::Arc::as_ptr(&layer_ledger),
        std::sync::Arc::as_ptr(rw.ledger())
    ));
    let missing = rw
        .reviews()
        .handoff(
            &Tenant::new("t"),
            &recoverable_write::OperationId::new("op-x"),
        )
        .await;
    assert!(missing.is_err());
}

/// Issue 10 item 17: the layer's own budget setter validates too (it used to store anything:
/// `max_attempts: 0` sent every write to review unsent; values near `u64::MAX` overflowed).
#[test]
fn the_layer_refuses_an_invalid_budget_by_name() {
    for (policy, field) in [
        (
            BudgetPolicy {
                max_attempts: 0,
                ..BudgetPolicy::default()
            },
            "max_attempts",
        ),
        (
            BudgetPolicy {
                window_ms: u64::MAX,
                ..BudgetPolicy::default()
            },
            "window_ms",
        ),
    ] {
        let err = RecoverableWrite::builder(MemoryLedger::new())
            .budget(policy)
            .build()
            .unwrap_err();
        let BuildError::Budget(err) = err else {
            panic!("a budget error: {err}");
        };
        assert_eq!(err.field(), field, "{err}");
    }
}

/// A vendor whose lookup answers in its own shape: `GET /by-op/{operation_id}` gives
/// `{"state":"open","ticket":{"id":"W…"}}` for a ticket the fake vendor holds, 404 otherwise;
/// its search lags: the first `lagging` lookups miss.
async fn own_shape_lookup(vendor: &FakeVendor, lagging: usize) -> String {
    let tickets = vendor.clone();
    let lag = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(lagging));
    let app = axum::Router::new().route(
        "/by-op/{id}",
        axum::routing::get(
            move |axum::extract::Path(id): axum::extract::Path<String>| {
                let (tickets, lag) = (tickets.clone(), lag.clone());
                async move {
                    let lagging = lag
                        .fetch_update(
                            std::sync::atomic::Ordering::SeqCst,
                            std::sync::atomic::Ordering::SeqCst,
                            |n| n.checked_sub(1),
                        )
                        .is_ok();
                    match tickets
                        .tickets()
                        .into_iter()
                        .find(|t| !lagging && t.operation_id.as_deref() == Some(id.as_str()))
                    {
                        Some(t) => (
                            http::StatusCode::OK,
                            axum::Json(
                                serde_json::json!({"state": "open", "ticket": {"id": t.id}}),
                            ),
                        ),
                        None => (
                            http::StatusCode::NOT_FOUND,
                            axum::Json(serde_json::json!({"error": "no such ticket"})),
                        ),
                    }
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// Issue 11 item 2: how a lookup's answer is read is configured in the contract, and a
/// search-style lookup's settle time makes an early miss no evidence at all.
#[tokio::test]
async fn the_contract_says_how_to_read_the_answer_and_honours_its_settle_time() {
    let vendor = FakeVendor::start().await;
    let lookup_base = own_shape_lookup(&vendor, 1).await;
    let toml = format!(
        r#"
[[route]]
host = "127.0.0.1"
contract = "tickets"

[contracts.tickets]
extends = "ietf-draft"
settle_secs = 1
lookup = {{ kind = "http_get", url_template = "{lookup_base}/by-op/{{operation_id}}", answer = {{ status = "/state", remote_ref = "/ticket/id", succeeded = ["open", "closed"] }} }}
"#
    );
    let below = ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new())
        .service(http_client());
    let rw = RecoverableWrite::builder(MemoryLedger::new())
        .contracts(Contracts::from_toml_str(&toml, "contracts.toml").unwrap())
        .budget(fast_policy())
        .transport(below.clone())
        .lookup_timeout(Duration::from_millis(500))
        .recovery_lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let svc = ServiceBuilder::new().layer(rw.layer()).service(below);
    let op = new_op("intent-own-shape");
    // The vendor creates the ticket and loses the answer; its search lags (the first lookup
    // misses).
    vendor.faults().drop_after_commit(1);
    let _ = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17")).await;
    let row = run_until(&rw.recoverer(), rw.ledger(), &op, |s| s == State::Succeeded).await;
    assert_eq!(
        row.remote_ref.as_deref(),
        Some("W731"),
        "read at /ticket/id"
    );
    // The miss before the settle time was no evidence: deferred, no query used for it.
    assert_eq!(row.queries_used, 1, "only the lookup that found it counts");
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == "deferred"
            && e.entry.note.as_deref().unwrap_or("").contains("settle")),
        "{log:?}"
    );
    assert_eq!(vendor.tickets_created(), 1);
}

/// A ledger with the write path and recovery only ([`Ledger`]): no listing, no callbacks, no
/// retention. It forwards to a memory ledger.
#[derive(Debug, Default)]
struct WritePathOnly(MemoryLedger);

impl Ledger for WritePathOnly {
    fn create_or_get(
        &self,
        new: recoverable_write::ledger::NewOperation,
    ) -> recoverable_write::ledger::BoxFuture<
        '_,
        Result<recoverable_write::ledger::Created, recoverable_write::ledger::LedgerError>,
    > {
        self.0.create_or_get(new)
    }

    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a recoverable_write::OperationId,
    ) -> recoverable_write::ledger::BoxFuture<
        'a,
        Result<
            Option<recoverable_write::ledger::OperationRecord>,
            recoverable_write::ledger::LedgerError,
        >,
    > {
        self.0.get(tenant, id)
    }

    fn apply(
        &self,
        update: recoverable_write::ledger::backend::Update,
    ) -> recoverable_write::ledger::BoxFuture<
        '_,
        Result<
            Option<recoverable_write::ledger::OperationRecord>,
            recoverable_write::ledger::LedgerError,
        >,
    > {
        self.0.apply(update)
    }

    fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> recoverable_write::ledger::BoxFuture<
        '_,
        Result<
            Vec<recoverable_write::ledger::OperationRecord>,
            recoverable_write::ledger::LedgerError,
        >,
    > {
        self.0.claim_due(now_ms, lease_ms, limit)
    }

    fn claim_prepared(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> recoverable_write::ledger::BoxFuture<
        '_,
        Result<
            Vec<recoverable_write::ledger::OperationRecord>,
            recoverable_write::ledger::LedgerError,
        >,
    > {
        self.0
            .claim_prepared(now_ms, older_than_ms, lease_ms, limit)
    }

    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> recoverable_write::ledger::BoxFuture<
        '_,
        Result<
            Vec<recoverable_write::ledger::OperationRecord>,
            recoverable_write::ledger::LedgerError,
        >,
    > {
        self.0.sweep_expired(now_ms)
    }

    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a recoverable_write::OperationId,
        entry: recoverable_write::ledger::backend::NewEvidence,
    ) -> recoverable_write::ledger::BoxFuture<'a, Result<(), recoverable_write::ledger::LedgerError>>
    {
        self.0.append_evidence(tenant, id, entry)
    }

    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a recoverable_write::OperationId,
    ) -> recoverable_write::ledger::BoxFuture<
        'a,
        Result<
            Vec<recoverable_write::ledger::EvidenceEntry>,
            recoverable_write::ledger::LedgerError,
        >,
    > {
        self.0.evidence(tenant, id)
    }
}

/// Issue 28 item 4: a backend with only the write path ([`Ledger`], no listing, callbacks or
/// retention) still gets the layer and the recoverer. A write whose response is lost is
/// recovered by the spawned recoverer to exactly one ticket; its housekeeping (the gauges and
/// the periodic purge) has nothing to run through and is skipped, not failed.
#[tokio::test]
async fn a_write_path_only_ledger_gets_the_layer_and_the_recoverer() {
    let housekeeping = std::sync::Arc::new(WritePathOnly::default()).housekeeping();
    assert!(!housekeeping.counts() && !housekeeping.purges());
    assert!({
        let full = std::sync::Arc::new(MemoryLedger::new()).housekeeping();
        full.counts() && full.purges()
    });

    let vendor = FakeVendor::start().await;
    let below = below();
    let rw = toml_builder(WritePathOnly::default(), &below)
        .recovery_interval(Duration::from_millis(10))
        .build()
        .expect("valid configuration");
    let op = new_op("intent-write-path-only");
    lose_the_response(&rw, below, &vendor, &op).await;

    let recoverer = rw.recoverer();
    assert_eq!(
        recoverer.export_gauges().await.unwrap(),
        None,
        "nothing to count through"
    );
    let engine = recoverer.spawn();
    let mut row = None;
    for _ in 0..400 {
        let now = rw
            .ledger()
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .unwrap();
        if now.state == State::Succeeded {
            row = Some(now);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    engine.shutdown().await;
    let row = row.expect("recovered by the spawned recoverer");
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(vendor.tickets_created(), 1, "one ticket, never two");
    assert_eq!(vendor.posts_received(), 1);
}
