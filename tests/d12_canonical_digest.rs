//! Drill D12 (seed 004): a canonical digest over the business-invariant fields.
//!
//! An agent whose write timed out or succeeded retries on its next turn with a new tool-call id
//! and a reworded free-text memo. With the contract's digest naming only the business fields
//! (`/amount`, `/currency`, `/device_id`), the reworded retry is the same operation: nothing is
//! sent, the stored result comes back. A changed amount is a `Conflict`, and nothing is sent
//! either. Run over real TCP against the fake vendor, on a SQLite ledger file.

mod common;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use recoverable_write::contract::profiles;
use recoverable_write::contract::{Contract, Contracts, RemoteRef};
use recoverable_write::operation::{PayloadDigest, PayloadHash};
use recoverable_write::{Error, Operation, State};

/// The step the agent is executing: the same intent on every turn (seed 004's step tuple).
const INTENT: &str = "run-42/step-3/device-E17/create_ticket";

fn business_fields() -> PayloadDigest {
    PayloadDigest::Fields(vec![
        "/amount".into(),
        "/currency".into(),
        "/device_id".into(),
    ])
}

/// The fake vendor speaks the IETF draft; the digest is the option under test.
fn contract_with_field_digest() -> Contract {
    profiles::ietf_draft()
        .named("tickets-d12")
        .retention_secs(24 * 3600)
        .remote_ref(RemoteRef::required("/id"))
        .digest(business_fields())
}

/// Each agent turn names the same intent but gets a fresh operation id (a new tool-call id).
fn turn() -> Operation {
    Operation::new(TENANT, "create_ticket", INTENT)
}

fn body(amount: u64, currency: &str, memo: &str) -> String {
    format!(
        r#"{{"device_id":"E17","amount":{amount},"currency":"{currency}","memo":"{memo}","priority":"P2"}}"#
    )
}

fn request(drill: &Drill, op: &Operation, body: String) -> Request<Full<Bytes>> {
    let mut req = Request::post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", TENANT)
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    req.extensions_mut().insert(op.clone());
    req
}

async fn drill_with(contract: Contract) -> Drill {
    let mut drill = Drill::start().await;
    drill.layer = drill
        .builder()
        .contract(contract)
        .build()
        .expect("a valid configuration")
        .layer();
    drill
}

#[tokio::test]
async fn d12_reworded_memo_is_the_same_operation_and_a_changed_amount_is_a_conflict() {
    let drill = drill_with(contract_with_field_digest()).await;
    let mut svc = drill.writer();

    // Turn 1: the create succeeds.
    let first = turn();
    let first_body = body(100, "eur", "for the order");
    let res = send(&mut svc, request(&drill, &first, first_body.clone()))
        .await
        .expect("created");
    let o = outcome(&res);
    assert_eq!(o.state, State::Succeeded);
    assert_eq!(o.remote_ref.as_deref(), Some("W731"));
    assert!(!o.from_ledger);
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
    let row = drill.record(first.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.attempts_used, 1);
    assert_eq!(row.contract, contract_with_field_digest().reference());
    assert_eq!(
        row.payload_hash,
        PayloadHash::compute(
            "POST",
            &drill.vendor.url("/tickets"),
            first_body.as_bytes(),
            &business_fields()
        )
    );
    let version = row.version;

    // Turn 2: a new tool-call id, the memo reworded, the business fields unchanged.
    let reworded = turn();
    assert_ne!(reworded.id(), first.id());
    let res = send(
        &mut svc,
        request(
            &drill,
            &reworded,
            body(100, "eur", "as discussed, for order 77"),
        ),
    )
    .await
    .expect("the same operation: its stored result");
    let o = outcome(&res);
    assert_eq!(
        o.operation_id,
        *first.id(),
        "resolved to the first operation"
    );
    assert_eq!(o.state, State::Succeeded);
    assert_eq!(o.remote_ref.as_deref(), Some("W731"));
    assert!(o.from_ledger, "answered from the ledger");
    let stored: serde_json::Value = serde_json::from_slice(res.body()).expect("stored JSON body");
    assert_eq!(stored["id"], "W731");
    assert_eq!(drill.vendor.posts_received(), 1, "nothing was sent");
    assert_eq!(drill.vendor.tickets_created(), 1);
    let row = drill.record(first.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.attempts_used, 1);
    assert_eq!(row.version, version, "the row did not move");
    assert_eq!(
        row.request.body,
        Bytes::from(first_body.clone()),
        "the first bytes stay frozen"
    );
    assert!(
        drill
            .ledger
            .get(&recoverable_write::Tenant::new(TENANT), reworded.id())
            .await
            .expect("ledger get")
            .is_none(),
        "no second operation was created"
    );

    // Turn 3: the model changed the amount mid-step. Conflict, nothing sent.
    let changed = turn();
    let err = send(
        &mut svc,
        request(&drill, &changed, body(101, "eur", "for the order")),
    )
    .await
    .expect_err("another amount is another payload");
    match &err {
        Error::Conflict { operation } => assert_eq!(operation, first.id()),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert!(err.nothing_sent());
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
    let row = drill.record(first.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.version, version);
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));

    // Another currency is another payload too.
    let err = send(
        &mut svc,
        request(&drill, &turn(), body(100, "usd", "for the order")),
    )
    .await
    .expect_err("another currency");
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d12_while_unknown_the_reworded_retry_waits_and_the_changed_amount_conflicts() {
    let drill = drill_with(contract_with_field_digest()).await;
    let mut svc = drill.writer();
    drill.vendor.faults().drop_after_commit(1);

    let first = turn();
    let err = send(
        &mut svc,
        request(&drill, &first, body(100, "eur", "for the order")),
    )
    .await
    .expect_err("the response was lost");
    assert_unknown(&err, first.id());
    assert_eq!(drill.vendor.tickets_created(), 1);

    // The reworded retry on the next turn: told to wait, nothing sent.
    let err = send(
        &mut svc,
        request(&drill, &turn(), body(100, "eur", "retrying the order")),
    )
    .await
    .expect_err("still being verified");
    assert_unknown(&err, first.id());
    assert!(err.nothing_sent());
    // The changed amount: a conflict, nothing sent.
    let err = send(
        &mut svc,
        request(&drill, &turn(), body(250, "eur", "for the order")),
    )
    .await
    .expect_err("another amount");
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
    let row = drill.record(first.id()).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.attempts_used, 1);
}

/// The failure seed 004 warns about: hashing the whole body makes a reworded memo look like a
/// different payload.
#[tokio::test]
async fn d12_without_the_field_digest_a_reworded_memo_is_refused() {
    let drill = drill_with(contract_with_field_digest().digest(PayloadDigest::Full)).await;
    let mut svc = drill.writer();
    send(
        &mut svc,
        request(&drill, &turn(), body(100, "eur", "for the order")),
    )
    .await
    .expect("created");
    let err = send(
        &mut svc,
        request(&drill, &turn(), body(100, "eur", "as discussed")),
    )
    .await
    .expect_err("the full digest sees the memo");
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert_eq!(drill.vendor.tickets_created(), 1);
}

/// The same digest, configured in a file: `digest = { mode = "fields", ... }`.
#[tokio::test]
async fn d12_field_digest_from_a_toml_configuration() {
    let contracts = Contracts::from_toml_str(
        r#"
        [[route]]
        host = "127.0.0.1"
        path_prefix = "/tickets"
        method = "POST"
        contract = "tickets-d12"

        [contracts.tickets-d12]
        extends = "ietf-draft"
        retention_secs = 86400
        remote_ref = { pointer = "/id", required = true }
        digest = { mode = "fields", pointers = ["/amount", "/currency", "/device_id"] }
        "#,
        "d12.toml",
    )
    .expect("valid configuration");
    let mut drill = Drill::start().await;
    drill.layer = drill
        .builder()
        .contracts(contracts)
        .build()
        .expect("a valid configuration")
        .layer();
    let mut svc = drill.writer();

    let first = turn();
    send(
        &mut svc,
        request(&drill, &first, body(100, "eur", "for the order")),
    )
    .await
    .expect("created");
    let row = drill.record(first.id()).await;
    assert_eq!(row.contract, contract_with_field_digest().reference());
    let res = send(
        &mut svc,
        request(&drill, &turn(), body(100, "eur", "reworded")),
    )
    .await
    .expect("same operation");
    assert!(outcome(&res).from_ledger);
    let err = send(
        &mut svc,
        request(&drill, &turn(), body(101, "eur", "for the order")),
    )
    .await
    .expect_err("changed amount");
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}
