//! The reqwest-middleware adapter: same ledger, contracts and recovery engine as the tower
//! layer, against the fake vendor over real TCP.
#![cfg(feature = "reqwest")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use recoverable_write::reqwest::{
    RecoverableWriteMiddleware, RecoverableWriteStrategy, SendOnceMiddleware, client_builder,
    error, outcome as error_outcome,
};
use recoverable_write::{Error, Operation, Outcome, State};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;

fn client(
    drill: &Drill,
    strategy_default: bool,
    guard: &SendOnceMiddleware,
) -> ClientWithMiddleware {
    let policy = ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(1), Duration::from_millis(5))
        .build_with_max_retries(3);
    let base = client_builder().build().expect("reqwest client");
    let builder = ClientBuilder::new(base).with(RecoverableWriteMiddleware::new(&drill.layer));
    let builder = if strategy_default {
        // A user who kept reqwest-retry's default strategy: it WILL try to re-send.
        builder.with(RetryTransientMiddleware::new_with_policy(policy))
    } else {
        builder.with(RetryTransientMiddleware::new_with_policy_and_strategy(
            policy,
            RecoverableWriteStrategy::new(),
        ))
    };
    builder.with(guard.clone()).build()
}

async fn create(
    client: &ClientWithMiddleware,
    drill: &Drill,
    op: &Operation,
    device: &str,
) -> reqwest_middleware::Result<reqwest::Response> {
    client
        .post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .header("authorization", CREDENTIAL)
        .with_extension(op.clone())
        .body(ticket_body(op, device))
        .send()
        .await
}

#[tokio::test]
async fn reqwest_write_succeeds_with_an_outcome_and_is_answered_from_the_ledger_after() {
    let drill = Drill::start().await;
    let guard = SendOnceMiddleware::new();
    let client = client(&drill, false, &guard);
    let op = new_op("reqwest-ok");
    let res = create(&client, &drill, &op, "E17").await.expect("created");
    assert_eq!(res.status(), 201);
    let o = res.extensions().get::<Outcome>().cloned().expect("outcome");
    assert_eq!(o.state, State::Succeeded);
    assert_eq!(o.remote_ref.as_deref(), Some("W731"));
    let body: serde_json::Value = res.json_or_text().await;
    assert_eq!(body["id"], "W731");

    // Same operation again: the stored response, nothing sent.
    let again = create(&client, &drill, &op, "E17").await.expect("stored");
    assert_eq!(again.status(), 201);
    assert!(again.extensions().get::<Outcome>().unwrap().from_ledger);
    assert_eq!(drill.vendor.posts_received(), 1);
    // Another payload for the same operation: conflict, nothing sent.
    let err = create(&client, &drill, &op, "E18")
        .await
        .expect_err("conflict");
    assert!(
        matches!(error(&err), Some(Error::Conflict { .. })),
        "{err:?}"
    );
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.record(op.id()).await.state, State::Succeeded);
}

/// The issue's test: a chain with reqwest-retry in it still produces one send at the vendor when
/// the response is lost — with the recoverable strategy (no retry at all) and with reqwest-retry's
/// default strategy, which re-sends on a 5xx (the guard refuses the copy locally).
#[tokio::test]
async fn reqwest_retry_in_the_chain_never_causes_a_second_send() {
    for (strategy_default, gateway_error) in
        [(false, false), (false, true), (true, false), (true, true)]
    {
        let case = format!("default strategy: {strategy_default}, 502: {gateway_error}");
        let drill = Drill::start().await;
        let guard = SendOnceMiddleware::new();
        let stats = guard.stats();
        let client = client(&drill, strategy_default, &guard);
        let op = new_op("reqwest-lost");
        if gateway_error {
            drill
                .vendor
                .faults()
                .status_after_commit(http::StatusCode::BAD_GATEWAY, 1);
        } else {
            drill.vendor.faults().drop_after_commit(1);
        }
        let err = create(&client, &drill, &op, "E17").await.expect_err(&case);
        let o = error_outcome(&err).expect("names the operation");
        assert_eq!(o.state, State::Unknown, "{case}");
        assert!(o.message.contains("do not create it again"));
        assert_eq!(drill.vendor.posts_received(), 1, "{case}");
        assert_eq!(stats.passed(), 1, "{case}");
        if strategy_default && gateway_error {
            assert!(
                stats.refused_duplicates() >= 1,
                "reqwest-retry re-sent and was refused"
            );
        } else {
            assert_eq!(stats.refused_duplicates(), 0, "{case}");
        }
        // The same recovery engine resolves it.
        let row = drill
            .recover_until(op.id(), |r| r.state == State::Succeeded)
            .await;
        assert_eq!(row.remote_ref.as_deref(), Some("W731"), "{case}");
        assert_eq!(drill.vendor.tickets_created(), 1, "{case}");
    }
}

#[tokio::test]
async fn reqwest_connect_refused_is_not_executed_and_resent_by_the_engine() {
    let drill = Drill::start().await;
    let guard = SendOnceMiddleware::new();
    let client = client(&drill, false, &guard);
    let op = new_op("reqwest-refused");
    drill.vendor.faults().refuse_connections(true).unwrap();
    let err = create(&client, &drill, &op, "E17")
        .await
        .expect_err("refused");
    assert!(
        matches!(error(&err), Some(Error::RetryScheduled { .. })),
        "a connect error proves the attempt unsent: {err:?}"
    );
    drill.vendor.faults().refuse_connections(false).unwrap();
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.attempts_used, 2);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn reqwest_untracked_reads_pass_and_writes_without_the_layer_are_refused() {
    let drill = Drill::start().await;
    let guard = SendOnceMiddleware::new();
    let bare = ClientBuilder::new(client_builder().build().unwrap())
        .with(guard.clone())
        .build();
    let res = bare
        .get(drill.vendor.url("/tickets"))
        .send()
        .await
        .expect("reads pass");
    assert!(res.status().is_success());
    let err = bare
        .post(drill.vendor.url("/tickets"))
        .header("idempotency-key", "k-1")
        .body(r#"{"device_id":"E1"}"#)
        .send()
        .await
        .expect_err("untracked write");
    assert!(err.to_string().contains("untracked"), "{err}");
    assert_eq!(drill.vendor.posts_received(), 0);
    let _ = Arc::clone(&guard.stats());
}

/// Issue 10 item 15, through reqwest: a write without an `Operation` is neither stored nor
/// refused by the strict guard, and is sent once; `track_all_writes(true)` tracks it.
#[tokio::test]
async fn reqwest_write_without_an_operation_is_not_stored_unless_opted_in() {
    let vendor = recoverable_write::testing::FakeVendor::start().await;
    let ledger = recoverable_write::MemoryLedger::new();
    let guard = SendOnceMiddleware::new();
    let stats = guard.stats();
    let send = |layer: recoverable_write::RecoverableWriteLayer| {
        let client = ClientBuilder::new(client_builder().build().expect("client"))
            .with(RecoverableWriteMiddleware::new(&layer))
            .with(guard.clone())
            .build();
        let url = vendor.url("/tickets");
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .header("idempotency-key", "k-app-wide")
                .body(r#"{"device_id":"E1","client_secret":"cs_live_s3cr3t"}"#)
                .send()
                .await
        }
    };

    let layer = recoverable_write::RecoverableWrite::builder(ledger.clone())
        .build()
        .expect("a valid configuration")
        .layer();
    let res = send(layer).await.expect("an untracked write is sent");
    assert_eq!(res.status(), 201);
    assert!(res.extensions().get::<Outcome>().is_none());
    assert!(ledger.is_empty(), "nothing stored");
    assert_eq!(vendor.posts_received(), 1);
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!((stats.passed(), stats.refused_untracked()), (1, 0));

    let layer = recoverable_write::RecoverableWrite::builder(ledger.clone())
        .track_all_writes(true)
        .build()
        .expect("a valid configuration")
        .layer();
    let res = send(layer).await.expect("a tracked write is sent");
    let o = res.extensions().get::<Outcome>().cloned().expect("tracked");
    assert_eq!(o.state, State::Succeeded);
    assert_eq!(ledger.len(), 1);
    // The request's own key is adopted, never replaced: the vendor dedupes it, one ticket.
    assert_eq!(vendor.posts_received(), 2);
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!((stats.passed(), stats.refused_untracked()), (2, 0));
}

/// A server on 127.0.0.1 that answers every `POST /old/tickets` with a 307 to `target`.
async fn redirecting_to(target: String) -> String {
    let app = axum::Router::new().route(
        "/old/tickets",
        axum::routing::post(move || {
            let target = target.clone();
            async move {
                (
                    http::StatusCode::TEMPORARY_REDIRECT,
                    [(http::header::LOCATION, target)],
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/old/tickets")
}

/// Issue 10 item 5: a client keeping reqwest's default redirect policy re-sends the POST to the
/// 307's target below the middleware. The write happened (at the other URL); the attempt is
/// recorded UNKNOWN, never SUCCEEDED from the redirected response, and reconciliation settles it.
#[tokio::test]
async fn reqwest_client_following_a_307_records_unknown_not_succeeded() {
    let drill = Drill::start().await;
    let old = redirecting_to(drill.vendor.url("/tickets")).await;
    let guard = SendOnceMiddleware::new();
    let client = ClientBuilder::new(reqwest::Client::new()) // default policy: follows redirects
        .with(RecoverableWriteMiddleware::new(&drill.layer))
        .with(guard.clone())
        .build();
    let op = new_op("reqwest-redirect");
    let res = client
        .post(&old)
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .with_extension(op.clone())
        .body(ticket_body(&op, "E17"))
        .send()
        .await;
    let err = res
        .map(|r| r.status())
        .expect_err("a followed redirect is not a success");
    let o = error_outcome(&err).expect("names the operation");
    assert_eq!(o.state, State::Unknown);
    assert!(
        o.message.contains("do not create it again"),
        "{}",
        o.message
    );

    // The vendor did create the ticket, at the redirect's target.
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
    assert_eq!(guard.stats().passed(), 1);
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Unknown);
    assert!(row.remote_ref.is_none());
    let log = format!("{:?}", drill.evidence(op.id()).await);
    assert!(
        log.contains("redirect"),
        "the evidence names the redirect: {log}"
    );

    // The lookup finds the ticket: one side effect, resolved without a second send.
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

trait JsonOrText {
    async fn json_or_text(self) -> serde_json::Value;
}

impl JsonOrText for reqwest::Response {
    async fn json_or_text(self) -> serde_json::Value {
        let bytes = self.bytes().await.expect("body");
        serde_json::from_slice(&bytes).expect("json body")
    }
}

/// A contract that places the key in the query: the request that leaves carries it there (the
/// URL changes below this middleware, the body and headers are the caller's), the vendor sees
/// one request whose key is the operation's, and the caller's response keeps the URL it asked
/// for.
#[tokio::test]
async fn reqwest_key_placed_in_the_query_is_sent_there_once() {
    use recoverable_write::contract::KeyPlacement;
    use recoverable_write::ledger::Ledger;
    use recoverable_write::{Contract, MemoryLedger};

    // A vendor that records what it received.
    let seen: Arc<std::sync::Mutex<Vec<(String, String, String)>>> = Arc::default();
    let app = axum::Router::new().route(
        "/charges",
        axum::routing::post({
            let seen = seen.clone();
            move |uri: http::Uri, headers: http::HeaderMap, body: String| async move {
                let ct = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                seen.lock().unwrap().push((uri.to_string(), ct, body));
                (http::StatusCode::CREATED, r#"{"id":"Q1"}"#)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let ledger = Arc::new(MemoryLedger::new());
    let layer = recoverable_write::RecoverableWrite::builder(ledger.clone())
        .contract(Contract::conservative().key(KeyPlacement::query("rid")))
        .build()
        .expect("a valid configuration")
        .layer();
    let client = ClientBuilder::new(client_builder().build().expect("reqwest client"))
        .with(RecoverableWriteMiddleware::new(&layer))
        .with(SendOnceMiddleware::new())
        .build();
    let op = Operation::new("tenant-q", "create_charge", "charge-1");
    let asked = format!("http://{addr}/charges?currency=eur");
    let res = client
        .post(&asked)
        .header("content-type", "application/json")
        .with_extension(op.clone())
        .body(r#"{"amount":100}"#)
        .send()
        .await
        .expect("created");
    assert_eq!(res.status(), 201);
    assert_eq!(
        res.url().as_str(),
        asked,
        "the caller's URL, not the sent one"
    );
    let outcome = res.extensions().get::<Outcome>().cloned().expect("outcome");
    assert_eq!(outcome.state, State::Succeeded);

    let row = ledger
        .get(op.tenant(), op.id())
        .await
        .expect("ledger up")
        .expect("row");
    assert_eq!(row.state, State::Succeeded);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one request at the vendor: {seen:?}");
    assert_eq!(
        seen[0],
        (
            format!("/charges?currency=eur&rid={}", row.idempotency_key.as_str()),
            "application/json".to_owned(),
            r#"{"amount":100}"#.to_owned()
        )
    );
}
