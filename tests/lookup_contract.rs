//! A contract's lookup by the operation's remote reference (issue 11 item 2): `{remote_ref}` in
//! the URL template. An operation with no remote reference yet gets no lookup (no evidence, the
//! operation stays unresolved, nothing is sent twice); one whose reference is known is found by
//! it, and the URL alone identifies it. A lookup answer that resolves an operation is kept in
//! the evidence log, bounded and without the contract's secret body fields (issue 11 item 4).

mod common;

use std::time::Duration;

use common::*;
use http::HeaderName;
use recoverable_write::testing::FakeVendor;
use recoverable_write::{
    Contracts, Error, Evidence, HttpLookup, MemoryLedger, Reconciler, RecoverableWrite,
    SendOnceGuardLayer, State,
};
use tower::ServiceBuilder;

/// The fake vendor's tickets, by their id: `GET /tickets/{id}` answers
/// `{"id":"W…","status":"open"}`, 404 for an unknown id; by operation: `GET /by-op/{id}`
/// answers the same with a `client_secret` field. Returns the base URL.
async fn tickets_by_id(vendor: &FakeVendor) -> String {
    let tickets = vendor.clone();
    let by_op = vendor.clone();
    let app = axum::Router::new().route(
        "/by-op/{id}",
        axum::routing::get(
            move |axum::extract::Path(id): axum::extract::Path<String>| {
                let tickets = by_op.clone();
                async move {
                    match tickets
                        .tickets()
                        .into_iter()
                        .find(|t| t.operation_id.as_deref() == Some(id.as_str()))
                    {
                        Some(t) => (
                            http::StatusCode::OK,
                            axum::Json(serde_json::json!({
                                "id": t.id, "status": "open", "client_secret": "cs_live_hush"
                            })),
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
    let app = app.route(
        "/tickets/{id}",
        axum::routing::get(
            move |axum::extract::Path(id): axum::extract::Path<String>| {
                let tickets = tickets.clone();
                async move {
                    match tickets.tickets().into_iter().find(|t| t.id == id) {
                        Some(t) => (
                            http::StatusCode::OK,
                            axum::Json(serde_json::json!({"id": t.id, "status": "open"})),
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

fn contracts(lookup_base: &str) -> Contracts {
    // `replay = "unsafe"`: no same-key replay either, so the lookup is the only way on.
    let toml = format!(
        r#"
[[route]]
host = "127.0.0.1"
contract = "tickets"

[contracts.tickets]
extends = "ietf-draft"
replay = "unsafe"
lookup = {{ kind = "http_get", url_template = "{lookup_base}/tickets/{{remote_ref}}", answer = {{ remote_ref = "/id", succeeded = ["open"] }} }}
"#
    );
    Contracts::from_toml_str(&toml, "contracts.toml").expect("valid contracts")
}

#[tokio::test]
async fn a_remote_ref_lookup_without_a_reference_is_not_made_and_resolves_nothing() {
    let vendor = FakeVendor::start().await;
    let lookup_base = tickets_by_id(&vendor).await;
    let below = ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new())
        .service(http_client());
    let rw = RecoverableWrite::builder(MemoryLedger::new())
        .contracts(contracts(&lookup_base))
        .budget(fast_policy())
        .transport(below.clone())
        .lookup_tenant_header(HeaderName::from_static("x-tenant"))
        .lookup_timeout(Duration::from_millis(500))
        .recovery_lease(Duration::from_secs(2))
        .build()
        .expect("valid configuration");
    let svc = ServiceBuilder::new().layer(rw.layer()).service(below);
    let op = new_op("intent-remote-ref-none");
    vendor.faults().drop_after_commit(1);
    let err = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17"))
        .await
        .expect_err("the response is lost");
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");

    let recoverer = rw.recoverer();
    for _ in 0..5 {
        recoverer.run_once().await.expect("pass");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let row = rw
        .ledger()
        .get(op.tenant(), op.id())
        .await
        .unwrap()
        .unwrap();
    // Not resolved by it: no reference, no lookup, no evidence either way.
    assert!(
        matches!(row.state, State::Unknown | State::ManualReview),
        "{:?}",
        row.state
    );
    assert_eq!(row.remote_ref, None);
    // Nothing was sent twice, and no lookup request left.
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 1);
    assert!(
        vendor
            .requests()
            .iter()
            .all(|r| r.method == http::Method::POST),
        "{:?}",
        vendor.requests()
    );
    // The evidence log says why: the template needs a value the operation does not have.
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == "lookup"
            && matches!(&e.entry.evidence, Some(Evidence::Unknown { why, .. })
                if why.contains("lookup not made") && why.contains("{remote_ref}"))),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|e| matches!(
            e.entry.evidence,
            Some(Evidence::Succeeded { .. } | Evidence::NotExecuted { .. })
        )),
        "{log:?}"
    );
}

/// The engine records a remote reference only with a success today, so this drives the lookup
/// the contract describes directly, on the real row with the reference it would carry.
#[tokio::test]
async fn a_remote_ref_lookup_finds_the_operation_whose_reference_is_known() {
    let vendor = FakeVendor::start().await;
    let lookup_base = tickets_by_id(&vendor).await;
    let below = ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new())
        .service(http_client());
    let rw = RecoverableWrite::builder(MemoryLedger::new())
        .contracts(contracts(&lookup_base))
        .budget(fast_policy())
        .transport(below.clone())
        .build()
        .expect("valid configuration");
    let svc = ServiceBuilder::new().layer(rw.layer()).service(below);
    let op = new_op("intent-remote-ref-known");
    vendor.faults().drop_after_commit(1);
    let _ = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17")).await;
    let mut row = rw
        .ledger()
        .get(op.tenant(), op.id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state, State::Unknown);
    let ticket = vendor
        .tickets()
        .pop()
        .expect("the vendor created the ticket");

    // As the builder reads the contract: the URL holds `{remote_ref}`, so it identifies the
    // operation and the answer need not repeat the operation id.
    let lookup = HttpLookup::new(
        http_client(),
        format!("{lookup_base}/tickets/{{remote_ref}}"),
    )
    .id_pointer(None)
    .remote_ref_pointer("/id")
    .statuses(recoverable_write::reconcile::LookupStatuses {
        succeeded: vec!["open".into()],
        ..Default::default()
    });
    // Without a reference: no request, nothing proven.
    let before = vendor.requests().len();
    assert!(matches!(
        lookup.reconcile(&row).await,
        Evidence::Unknown { .. }
    ));
    // With the reference: found.
    row.remote_ref = Some(ticket.id.clone());
    let evidence = lookup.reconcile(&row).await;
    assert_eq!(
        evidence,
        Evidence::Succeeded {
            remote_ref: Some(ticket.id.clone())
        }
    );
    // Another reference is not this operation's: a 404, weak evidence only.
    row.remote_ref = Some("W999999".into());
    assert!(matches!(
        lookup.reconcile(&row).await,
        Evidence::Unknown { .. }
    ));
    // The lookups went to the lookup host; the vendor saw one POST and nothing more.
    assert_eq!(vendor.requests().len(), before);
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 1);
    let stored = rw
        .ledger()
        .get(op.tenant(), op.id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.state,
        State::Unknown,
        "a direct lookup writes nothing"
    );
}

#[tokio::test]
async fn a_resolving_lookup_answer_is_kept_in_the_evidence_without_its_secrets() {
    let vendor = FakeVendor::start().await;
    let lookup_base = tickets_by_id(&vendor).await;
    let toml = format!(
        r#"
[[route]]
host = "127.0.0.1"
contract = "tickets"

[contracts.tickets]
extends = "ietf-draft"
secret_body_fields = ["/client_secret"]
lookup = {{ kind = "http_get", url_template = "{lookup_base}/by-op/{{operation_id}}", answer = {{ remote_ref = "/id", succeeded = ["open"] }} }}
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
        .expect("valid configuration");
    let svc = ServiceBuilder::new().layer(rw.layer()).service(below);
    let op = new_op("intent-lookup-body");
    vendor.faults().drop_after_commit(1);
    let _ = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17")).await;
    let recoverer = rw.recoverer();
    let mut row = rw
        .ledger()
        .get(op.tenant(), op.id())
        .await
        .unwrap()
        .unwrap();
    for _ in 0..50 {
        if row.state == State::Succeeded {
            break;
        }
        recoverer.run_once().await.expect("pass");
        tokio::time::sleep(Duration::from_millis(10)).await;
        row = rw
            .ledger()
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 1);

    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    let lookup = log
        .iter()
        .find(|e| {
            e.entry.kind == "lookup" && matches!(e.entry.evidence, Some(Evidence::Succeeded { .. }))
        })
        .unwrap_or_else(|| panic!("no resolving lookup entry: {log:?}"));
    let note = lookup.entry.note.as_deref().unwrap_or("");
    assert!(note.starts_with("lookup answer: "), "{note}");
    let kept: serde_json::Value =
        serde_json::from_str(note.trim_start_matches("lookup answer: ")).unwrap();
    assert_eq!(kept, serde_json::json!({"id": "W731", "status": "open"}));
    assert!(!note.contains("cs_live"), "{note}");
}
