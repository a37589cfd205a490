//! Every send of an operation — the first included — is built from what is frozen on its row:
//! the contract, the key placement, the bytes, every header byte and the host; credentials are
//! never frozen and come from the caller (first send) or the replay stack (replays).
//! Issue 10 items 2, 3, 4 and 13. Each test checks the ledger row and the vendor's own record of
//! what it received.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::Full;
use recoverable_write::RecoverableWrite;
use recoverable_write::contract::{KeyPlacement, Target};
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::{Ledger, MemoryLedger};
use recoverable_write::testing::FakeVendor;
use recoverable_write::{Contract, Contracts, Error, RecoverableWriteLayer, State, Tenant};
use tower::ServiceBuilder;

fn named(mut contract: Contract, name: &str) -> Contract {
    contract.name = name.to_owned();
    contract
}

fn writer_over(layer: &RecoverableWriteLayer, drill: &Drill) -> Writer {
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(drill.guard.clone())
        .service(authed_client(drill.credential.clone()));
    collected(svc)
}

/// Item 2: an outbox row (or one created by an instance still running the old configuration)
/// is sent with the contract and the bytes frozen on it, not with this call's contract and
/// bytes, even when this call's payload hashes the same.
#[tokio::test]
async fn the_first_send_of_an_existing_prepared_row_uses_its_frozen_contract_and_bytes() {
    let vendor = FakeVendor::builder()
        .idempotency_key_header(HeaderName::from_static("x-key-a"))
        .start()
        .await
        .unwrap();
    let drill = Drill::with_vendor(vendor).await;
    let old = named(Contract::conservative(), "vendor-a").key(KeyPlacement::Header {
        name: "X-Key-A".into(),
        format: Default::default(),
    });
    let new = named(Contract::conservative(), "vendor-b").key(KeyPlacement::Header {
        name: "X-Key-B".into(),
        format: Default::default(),
    });
    let op = new_op("intent-outbox");
    let frozen_body = ticket_body(&op, "E17");

    // The outbox: the row is made under the old configuration, in the caller's transaction.
    let old_layer = RecoverableWrite::builder(drill.ledger.clone())
        .budget(fast_policy())
        .contract(old.clone())
        .build()
        .expect("a valid configuration")
        .layer();
    let outbox_req = Request::post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .body(Bytes::from(frozen_body.clone()))
        .unwrap();
    let created = drill
        .ledger
        .create_or_get(old_layer.new_operation(&op, &outbox_req))
        .await
        .unwrap()
        .into_record();
    assert_eq!(created.state, State::Prepared);

    // The sender runs the new configuration (which still knows the old contract for the rows
    // made under it) and presents an equivalent payload: same fields, other order and spacing.
    let contracts = Contracts::new(new).route(Target::host("old-contract.example"), old);
    let new_layer = RecoverableWrite::builder(drill.ledger.clone())
        .budget(fast_policy())
        .contracts(contracts)
        .build()
        .expect("a valid configuration")
        .layer();
    let mut svc = writer_over(&new_layer, &drill);
    let reordered = format!(
        r#"{{ "priority": "P2", "device_id": "E17",  "operation_id": "{}" }}"#,
        op.id()
    );
    assert_ne!(reordered, frozen_body);
    let mut req = Request::post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .body(Full::new(Bytes::from(reordered)))
        .unwrap();
    req.extensions_mut().insert(op.clone());
    let res = send(&mut svc, req).await.expect("sent once, answered");
    assert_eq!(res.status(), StatusCode::CREATED);

    let seen = drill.vendor.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, Bytes::from(frozen_body), "the frozen bytes");
    assert_eq!(
        seen[0].headers.get("x-key-a").map(HeaderValue::as_bytes),
        Some(created.idempotency_key.as_str().as_bytes()),
        "the key where the frozen contract puts it"
    );
    assert!(seen[0].headers.get("x-key-b").is_none());
    assert_eq!(drill.vendor.tickets_created(), 1);
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.contract, created.contract);
}

/// Item 2: a row whose frozen contract is no longer configured is not sent under another one.
#[tokio::test]
async fn a_prepared_row_whose_contract_is_gone_is_not_sent() {
    let drill = Drill::start().await;
    let op = new_op("intent-gone");
    let old = named(Contract::conservative(), "retired");
    let old_layer = RecoverableWrite::builder(drill.ledger.clone())
        .contract(old)
        .build()
        .expect("a valid configuration")
        .layer();
    let req = Request::post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .body(Bytes::from(ticket_body(&op, "E17")))
        .unwrap();
    drill
        .ledger
        .create_or_get(old_layer.new_operation(&op, &req))
        .await
        .unwrap();
    let mut svc = drill.writer();
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::ContractUnavailable { contract, .. } if contract == "retired"),
        "{err:?}"
    );
    assert!(err.nothing_sent());
    assert_eq!(drill.vendor.posts_received(), 0);
    assert_eq!(drill.record(op.id()).await.state, State::Prepared);
}

/// Item 3: the request is built, key placed, before anything is written: a JSON-body key with
/// a body that is not JSON is a typed error, and the ledger holds nothing (not a claimed row in
/// review telling the caller "do not create it again" for a write never sent).
#[tokio::test]
async fn a_key_that_cannot_be_placed_leaves_nothing_recorded_or_sent() {
    let drill = Drill::start().await;
    let ledger: Arc<dyn FullLedger> = Arc::new(MemoryLedger::new());
    let layer = RecoverableWrite::builder(ledger.clone())
        .contract(Contract::conservative().key(KeyPlacement::JsonBody {
            pointer: "/idempotency_key".into(),
        }))
        .build()
        .expect("a valid configuration")
        .layer();
    let mut svc = writer_over(&layer, &drill);
    let op = new_op("intent-not-json");
    let mut req = Request::post(drill.vendor.url("/tickets"))
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(b"device E17, priority P2")))
        .unwrap();
    req.extensions_mut().insert(op.clone());
    let err = send(&mut svc, req).await.unwrap_err();
    assert!(matches!(err, Error::KeyPlacement { .. }), "{err:?}");
    assert!(err.nothing_sent());
    assert_eq!(
        ledger.get(op.tenant(), op.id()).await.unwrap(),
        None,
        "nothing claimed, nothing recorded"
    );
    assert_eq!(drill.vendor.posts_received(), 0);
}

/// Item 4: a replay is byte-identical to the first send — header values that are not visible
/// ASCII included, and the `Host` the write was addressed to — except for the credentials the
/// replay stack applies.
#[tokio::test]
async fn a_replay_is_byte_identical_to_the_first_send() {
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-bytes");
    drill
        .vendor
        .faults()
        .reject_next(StatusCode::TOO_MANY_REQUESTS, "rate_limited", 1);
    let mut req = drill.ticket_request(&op, "E17");
    let host = format!("tickets.vendor.test:{}", drill.vendor.addr().port());
    req.headers_mut()
        .insert("host", HeaderValue::from_str(&host).unwrap());
    req.headers_mut().insert(
        "x-requester",
        HeaderValue::from_bytes("Zoë Ångström".as_bytes()).unwrap(),
    );
    req.headers_mut()
        .insert("x-legacy", HeaderValue::from_bytes(b"caf\xe9").unwrap());
    let _ = send(&mut svc, req).await;
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    let posts: Vec<_> = drill
        .vendor
        .requests()
        .into_iter()
        .filter(|r| r.method == http::Method::POST)
        .collect();
    assert_eq!(posts.len(), 2, "the refused first send and one replay");
    let (first, replay) = (&posts[0], &posts[1]);
    assert_eq!(first.body, replay.body);
    assert_eq!(first.path, replay.path);
    for name in [
        "host",
        "x-requester",
        "x-legacy",
        "content-type",
        "x-tenant",
    ] {
        assert_eq!(
            first.headers.get(name),
            replay.headers.get(name),
            "header {name} differs"
        );
        assert!(replay.headers.get(name).is_some(), "{name} missing");
    }
    assert_eq!(replay.headers["host"].as_bytes(), host.as_bytes());
    assert_eq!(replay.headers["x-legacy"].as_bytes(), b"caf\xe9");
    assert_eq!(
        replay.idempotency_key.as_deref(),
        Some(row.idempotency_key.as_str())
    );
    assert_eq!(drill.vendor.tickets_created(), 1);
}

/// Item 13: userinfo and secret query parameters reach the vendor on the first send, and are
/// stored nowhere: not in the row, not in the evidence, not in the handoff package.
#[tokio::test]
async fn url_credentials_are_sent_but_never_stored() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-url-secrets");
    let addr = drill.vendor.addr();
    let mut req = Request::post(format!(
        "http://svc-user:URLPASS9@{addr}/tickets?api_key=QUERYSECRET7&mode=fast"
    ))
    .header("content-type", "application/json")
    .header("x-tenant", op.tenant().as_str())
    .body(Full::new(Bytes::from(ticket_body(&op, "E17"))))
    .unwrap();
    req.extensions_mut().insert(op.clone());
    let res = send(&mut svc, req).await.expect("answered");
    assert_eq!(res.status(), StatusCode::CREATED);
    let seen = drill.vendor.requests();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].path.contains("api_key=QUERYSECRET7") && seen[0].path.contains("mode=fast"),
        "the first send carries the caller's query: {}",
        seen[0].path
    );

    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    let stored = format!(
        "{:?} {:?} {:?}",
        row,
        drill.evidence(op.id()).await,
        drill
            .rw
            .reviews()
            .handoff(&Tenant::new(TENANT), op.id())
            .await
            .unwrap()
    );
    for secret in ["URLPASS9", "QUERYSECRET7", "svc-user"] {
        assert!(!stored.contains(secret), "{secret} was stored");
    }
    assert!(
        row.request.url.ends_with("/tickets?mode=fast"),
        "{}",
        row.request.url
    );
    assert_eq!(drill.vendor.tickets_created(), 1);
}

/// A contract can name more secret query parameters; they are redacted like the defaults and
/// do not change the payload hash when their value rotates.
#[tokio::test]
async fn contract_secret_query_params_are_redacted_and_do_not_change_the_payload() {
    let drill = Drill::with_options(DrillOptions {
        contract: Contract::conservative().secret_query_param("tenant_secret"),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-rotating-secret");
    let call = |secret: &str| {
        let mut req = Request::post(format!(
            "{}/tickets?tenant_secret={secret}",
            drill.vendor.base_url()
        ))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .body(Full::new(Bytes::from(ticket_body(&op, "E17"))))
        .unwrap();
        req.extensions_mut().insert(op.clone());
        req
    };
    send(&mut svc, call("OLD1")).await.expect("first call");
    // The same intent again after the secret rotated: the stored answer, no conflict, no send.
    let again = send(&mut svc, call("NEW2")).await.expect("second call");
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(drill.vendor.posts_received(), 1);
    let row = drill.record(op.id()).await;
    assert!(!row.request.url.contains("OLD1"), "{}", row.request.url);
}

/// Issue 10 item 15: body fields a contract names secret (here a JSON pointer) reach the vendor
/// on the first send and are stored nowhere; the payload hash ignores them.
#[tokio::test]
async fn secret_body_fields_are_sent_but_never_stored() {
    let drill = Drill::with_options(DrillOptions {
        contract: Contract::conservative().secret_body_field("/client_secret"),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-body-secret");
    let body = format!(
        r#"{{"operation_id":"{}","device_id":"E17","priority":"P2","client_secret":"BODYSECRET5"}}"#,
        op.id()
    );
    let mut req = Request::post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .body(Full::new(Bytes::from(body.clone())))
        .unwrap();
    req.extensions_mut().insert(op.clone());
    send(&mut svc, req).await.expect("answered");
    let seen = drill.vendor.requests();
    assert_eq!(seen[0].body, Bytes::from(body), "the caller's exact bytes");
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    let stored = format!("{:?} {:?}", row, drill.evidence(op.id()).await);
    assert!(!stored.contains("BODYSECRET5"));
    assert_eq!(drill.vendor.tickets_created(), 1);
}

/// A replay has no secret body fields to send: unless the contract says the replay stack puts
/// them back, the operation goes to a human instead of a replay missing them.
#[tokio::test]
async fn a_replay_without_its_secret_body_fields_is_refused() {
    let drill = Drill::with_options(DrillOptions {
        contract: Contract::conservative().secret_body_field("/client_secret"),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-body-secret-replay");
    let body = format!(
        r#"{{"operation_id":"{}","device_id":"E17","client_secret":"BODYSECRET6"}}"#,
        op.id()
    );
    let mut req = Request::post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    req.extensions_mut().insert(op.clone());
    drill.vendor.faults().refuse_connections(true).unwrap();
    let _ = send(&mut svc, req).await;
    drill.vendor.faults().refuse_connections(false).unwrap();
    assert_eq!(drill.record(op.id()).await.state, State::RetryReady);
    let row = drill
        .recover_until(op.id(), |r| r.state == State::ManualReview)
        .await;
    assert!(
        row.reason
            .as_deref()
            .unwrap_or("")
            .contains("secret body fields"),
        "{:?}",
        row.reason
    );
    assert_eq!(
        drill.vendor.posts_received(),
        0,
        "no replay without its secrets"
    );
}

/// Issue 11 (honest answers): a caller's own idempotency key, where the contract places keys,
/// is adopted for a new operation, and a later call carrying another key for the same operation
/// is refused: never silently replaced.
#[tokio::test]
async fn a_callers_own_key_is_adopted_and_never_silently_replaced() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-own-key");
    let mut req = drill.ticket_request(&op, "E17");
    req.headers_mut().insert(
        "idempotency-key",
        HeaderValue::from_static("caller-key-0042"),
    );
    send(&mut svc, req).await.expect("created");
    let row = drill.record(op.id()).await;
    assert_eq!(row.idempotency_key.as_str(), "caller-key-0042");
    assert_eq!(
        drill.vendor.requests()[0].idempotency_key.as_deref(),
        Some("caller-key-0042")
    );

    let mut other = drill.ticket_request(&op, "E17");
    other
        .headers_mut()
        .insert("idempotency-key", HeaderValue::from_static("another-key"));
    let err = send(&mut svc, other).await.expect_err("refused");
    assert!(matches!(err, Error::KeyMismatch { .. }), "{err:?}");
    assert!(err.nothing_sent());
    // The same key, or none, gets the stored answer.
    let mut same = drill.ticket_request(&op, "E17");
    same.headers_mut().insert(
        "idempotency-key",
        HeaderValue::from_static("caller-key-0042"),
    );
    assert_eq!(
        send(&mut svc, same).await.unwrap().status(),
        StatusCode::CREATED
    );
    assert_eq!(
        send(&mut svc, drill.ticket_request(&op, "E17"))
            .await
            .unwrap()
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}
