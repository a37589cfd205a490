//! A contract's lookup by the operation's remote reference (issue 11 item 2): `{remote_ref}` in
//! the URL template. An operation with no remote reference yet gets no lookup (no evidence, the
//! operation stays unresolved, nothing is sent twice); one whose reference is known is found by
//! it, and the URL alone identifies it. A lookup answer that resolves an operation is kept in
//! the evidence log, bounded and without the contract's secret body fields (issue 11 item 4).

mod common;

use std::time::Duration;

use common::*;
use http::HeaderName;
use recoverable_write::Ledger;
use recoverable_write::RecoverableWrite as RecoverableWriteService;
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
    tickets_contract(&format!(
        r#"lookup = {{ kind = "http_get", url_template = "{lookup_base}/tickets/{{remote_ref}}", answer = {{ remote_ref = "/id", succeeded = ["open"] }} }}"#
    ))
}

#[tokio::test]
async fn a_remote_ref_lookup_without_a_reference_is_not_made_and_resolves_nothing() {
    let vendor = FakeVendor::start().await;
    let lookup_base = tickets_by_id(&vendor).await;
    let (rw, svc) = configured(contracts(&lookup_base));
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
    let (rw, svc) = configured(contracts(&lookup_base));
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
    let (rw, svc) = configured(Contracts::from_toml_str(&toml, "contracts.toml").unwrap());
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
    // A secret body field is secret in an answer too: its value is replaced, its name kept.
    assert_eq!(
        kept,
        serde_json::json!({"id": "W731", "status": "open", "client_secret": "[redacted]"})
    );
    assert!(!note.contains("cs_live"), "{note}");
}

// ---------------------------------------------------------------------------------------------
// Issue 11 item 2: `list_by_reference` lookups and what a 404 means, from the contract alone.
// ---------------------------------------------------------------------------------------------

/// The fake vendor's tickets contract from TOML, with `lookup_and_more` after `extends`. Its
/// replay is unsafe: no same-key replay either, so only the lookup (or its proof that nothing
/// ran) moves an operation on.
fn tickets_contract(lookup_and_more: &str) -> Contracts {
    let toml = format!(
        r#"
[[route]]
host = "127.0.0.1"
contract = "tickets"

[contracts.tickets]
extends = "ietf-draft"
replay = "unsafe"
{lookup_and_more}
"#
    );
    Contracts::from_toml_str(&toml, "contracts.toml").expect("valid contracts")
}

/// The list lookup the fake vendor offers: its search by operation id, items under `/tickets`,
/// each carrying the operation id at `/operation_id` and the ticket id at `/id`.
const LIST_LOOKUP: &str = r#"lookup = { kind = "list_by_reference", url_template = "/tickets?operation_id={operation_id}", items_pointer = "/tickets", reference_pointer = "/operation_id", answer = { remote_ref = "/id" } }"#;

/// The configuration over `contracts`, and the writer (the layer over the guard and client).
fn configured(
    contracts: Contracts,
) -> (
    recoverable_write::Handle<MemoryLedger>,
    RecoverableWriteService<recoverable_write::SendOnceGuard<HttpClient>>,
) {
    let below = ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new())
        .service(http_client());
    let rw = RecoverableWrite::builder(MemoryLedger::new())
        .contracts(contracts)
        .budget(fast_policy())
        .transport(below.clone())
        .lookup_tenant_header(HeaderName::from_static("x-tenant"))
        .lookup_timeout(Duration::from_millis(500))
        .recovery_lease(Duration::from_secs(2))
        .build()
        .expect("valid configuration");
    let svc = ServiceBuilder::new().layer(rw.layer()).service(below);
    (rw, svc)
}

async fn row_of(
    rw: &recoverable_write::Handle<MemoryLedger>,
    op: &recoverable_write::Operation,
) -> recoverable_write::ledger::OperationRecord {
    rw.ledger()
        .get(op.tenant(), op.id())
        .await
        .unwrap()
        .unwrap()
}

/// Recovery passes until `done` holds for the row (at most about 4 s).
async fn recover_until(
    rw: &recoverable_write::Handle<MemoryLedger>,
    op: &recoverable_write::Operation,
    done: impl Fn(&recoverable_write::ledger::OperationRecord) -> bool,
) -> recoverable_write::ledger::OperationRecord {
    let recoverer = rw.recoverer();
    for _ in 0..200 {
        let row = row_of(rw, op).await;
        if done(&row) {
            return row;
        }
        recoverer.run_once().await.expect("pass");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "never reached the expected state: {:?}",
        row_of(rw, op).await
    );
}

fn posts(vendor: &FakeVendor) -> usize {
    vendor
        .requests()
        .iter()
        .filter(|r| r.method == http::Method::POST)
        .count()
}

#[tokio::test]
async fn a_list_by_reference_lookup_from_toml_only_recovers_a_lost_response_to_one_ticket() {
    let vendor = FakeVendor::start().await;
    let (rw, svc) = configured(tickets_contract(LIST_LOOKUP));
    let op = new_op("intent-list-lookup");
    vendor.faults().drop_after_commit(1);
    let err = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17"))
        .await
        .expect_err("the response is lost");
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");

    let row = recover_until(&rw, &op, |r| r.state == State::Succeeded).await;
    assert_eq!(
        row.remote_ref.as_deref(),
        Some("W731"),
        "read at the item's /id"
    );
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 1);
    assert!(vendor.lookups_received() >= 1, "the search was asked");
    // The search was scoped (tenant header) and filtered by the operation's own id.
    let search = vendor
        .requests()
        .into_iter()
        .find(|r| r.method == http::Method::GET)
        .expect("a lookup");
    assert_eq!(search.path, format!("/tickets?operation_id={}", op.id()));
    assert_eq!(search.tenant, op.tenant().as_str());
    // The item that resolved it is kept in the evidence log.
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    let note = log
        .iter()
        .find(|e| e.entry.kind == "lookup" && e.entry.to_state == Some(State::Succeeded))
        .and_then(|e| e.entry.note.clone())
        .unwrap_or_else(|| panic!("no resolving lookup: {log:?}"));
    assert!(note.contains("\"W731\""), "{note}");
}

#[tokio::test]
async fn an_empty_list_before_settle_is_no_evidence_and_after_it_still_no_proof_of_non_execution() {
    let vendor = FakeVendor::start().await;
    let (rw, svc) = configured(tickets_contract(&format!("settle_secs = 2\n{LIST_LOOKUP}")));
    let op = new_op("intent-list-empty");
    // The vendor holds the create far beyond the attempt's timeout (600 ms): the write's
    // outcome is unknown and the vendor's search finds nothing.
    vendor
        .faults()
        .delay_before_commit(Duration::from_secs(120), 1);
    let err = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17"))
        .await
        .expect_err("the attempt times out");
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");

    // Before the settle time: the miss is no evidence at all, and uses no query.
    let log_has_deferral = |log: &[recoverable_write::ledger::EvidenceEntry]| {
        log.iter().any(|e| {
            e.entry.kind == "deferred" && e.entry.note.as_deref().unwrap_or("").contains("settle")
        })
    };
    let recoverer = rw.recoverer();
    let mut deferred = false;
    for _ in 0..40 {
        recoverer.run_once().await.expect("pass");
        let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
        if log_has_deferral(&log) {
            deferred = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(deferred, "the early miss was deferred");
    let row = row_of(&rw, &op).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.queries_used, 0, "an early miss counts no query");
    assert!(vendor.lookups_received() >= 1, "the search was asked");

    // After the settle time: an empty list is weak evidence, never proof that nothing ran.
    let row = recover_until(&rw, &op, |r| r.queries_used >= 1).await;
    assert_eq!(
        row.state,
        State::Unknown,
        "an empty list is not NOT_EXECUTED"
    );
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == "lookup"
            && matches!(&e.entry.evidence, Some(Evidence::Unknown { why, .. })
                if why.contains("no item carrying the reference"))),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|e| matches!(
            e.entry.evidence,
            Some(Evidence::NotExecuted { .. } | Evidence::Succeeded { .. })
        )),
        "{log:?}"
    );
    // Nothing was sent again.
    assert_eq!(vendor.posts_received(), 1);
    assert_eq!(posts(&vendor), 1);
    assert_eq!(
        vendor.tickets_created(),
        0,
        "the held create has not committed"
    );
}

#[tokio::test]
async fn two_items_carrying_the_reference_are_unknown_and_nothing_is_sent() {
    // A vendor that does not dedupe by operation id: someone created a second ticket under the
    // same operation id (another key) after the first one's answer was lost.
    let vendor = FakeVendor::builder()
        .dedupe_by_operation_id(false)
        .start()
        .await
        .expect("vendor");
    let (rw, svc) = configured(tickets_contract(LIST_LOOKUP));
    let op = new_op("intent-list-two");
    vendor.faults().drop_after_commit(1);
    let _ = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17")).await;
    let other = http::Request::post(vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .header("idempotency-key", "k-someone-else")
        .body(http_body_util::Full::new(bytes::Bytes::from(ticket_body(
            &op, "E17",
        ))))
        .unwrap();
    let res = tower::ServiceExt::oneshot(http_client(), other)
        .await
        .unwrap();
    assert_eq!(res.status(), http::StatusCode::CREATED);
    assert_eq!(vendor.tickets_created(), 2);

    let row = recover_until(&rw, &op, |r| r.queries_used >= 1).await;
    assert_eq!(row.state, State::Unknown, "none of the two is picked");
    assert_eq!(row.remote_ref, None);
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == "lookup"
            && matches!(&e.entry.evidence, Some(Evidence::Unknown { why, .. })
                if why.contains("2 items carrying the reference"))),
        "{log:?}"
    );
    // Nothing was sent by recovery: the two POSTs are the lost write and the other one.
    assert_eq!(vendor.posts_received(), 2);
    assert_eq!(posts(&vendor), 2);
    assert_eq!(vendor.tickets_created(), 2);
}

const GET_LOOKUP: &str =
    r#"lookup = { kind = "http_get", url_template = "/operations/{operation_id}" }"#;

#[tokio::test]
async fn a_404_is_unknown_by_default_and_nothing_is_replayed() {
    let vendor = FakeVendor::start().await;
    let (rw, svc) = configured(tickets_contract(GET_LOOKUP));
    let op = new_op("intent-404-default");
    vendor
        .faults()
        .delay_before_commit(Duration::from_secs(120), 1);
    let _ = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17")).await;

    let row = recover_until(&rw, &op, |r| r.queries_used >= 2).await;
    assert_eq!(row.state, State::Unknown, "a 404 proves nothing");
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == "lookup"
            && matches!(&e.entry.evidence, Some(Evidence::Unknown { why, .. })
                if why.contains("404"))),
        "{log:?}"
    );
    assert_eq!(vendor.posts_received(), 1, "no replay");
    assert_eq!(posts(&vendor), 1);
    assert_eq!(vendor.tickets_created(), 0);
}

#[tokio::test]
async fn a_404_the_contract_reads_as_not_executed_replays_a_write_lost_before_commit_once() {
    let vendor = FakeVendor::start().await;
    let (rw, svc) = configured(tickets_contract(
        r#"lookup = { kind = "http_get", url_template = "/operations/{operation_id}", answer = { not_found = "not_executed" } }"#,
    ));
    let op = new_op("intent-404-not-executed");
    // Lost before the commit: the vendor holds the create far beyond the attempt's timeout.
    vendor
        .faults()
        .delay_before_commit(Duration::from_secs(120), 1);
    let err = tower::ServiceExt::oneshot(svc, ticket_request(&vendor, &op, "E17"))
        .await
        .expect_err("the attempt times out");
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");
    assert_eq!(vendor.tickets_created(), 0);

    let row = recover_until(&rw, &op, |r| r.state == State::Succeeded).await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    // The 404 was read as "never registered": RETRY_READY, then one replay with the same key.
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == "lookup"
            && e.entry.to_state == Some(State::RetryReady)
            && matches!(&e.entry.evidence, Some(Evidence::NotExecuted { why, .. })
                if why.contains("404"))),
        "{log:?}"
    );
    assert_eq!(vendor.tickets_created(), 1, "exactly one ticket");
    let keys: Vec<_> = vendor
        .requests()
        .into_iter()
        .filter(|r| r.method == http::Method::POST)
        .map(|r| r.idempotency_key)
        .collect();
    assert_eq!(keys.len(), 2, "the held write and its one replay");
    assert_eq!(keys[0], keys[1], "the replay carries the same key");
}

#[test]
fn what_a_404_means_is_validated_and_named_by_its_key() {
    use recoverable_write::contract::{ConfigErrorKind, ContractErrorKind};
    let load = |lookup_and_more: &str| {
        let toml = format!("[contracts.tickets]\nextends = \"ietf-draft\"\n{lookup_and_more}\n");
        Contracts::from_toml_str(&toml, "contracts.toml")
    };
    // An unknown value: a typed error naming the key and the values it takes.
    let err = load(
        r#"lookup = { kind = "http_get", url_template = "/o/{operation_id}", answer = { not_found = "gone" } }"#,
    )
    .expect_err("refused");
    assert_eq!(
        err.key(),
        "contracts.tickets.lookup.answer.not_found",
        "{err}"
    );
    assert!(
        matches!(err.kind(), ConfigErrorKind::Contract(ContractErrorKind::InvalidChoice { value, .. }) if value == "gone"),
        "{err:?}"
    );
    assert!(err.to_string().contains("unknown, not_executed"), "{err}");
    // A lookup that may lag, or a list, can never prove that a write was not executed.
    for refused in [
        "settle_secs = 5\nlookup = { kind = \"http_get\", url_template = \"/o/{operation_id}\", answer = { not_found = \"not_executed\" } }",
        &LIST_LOOKUP.replace("answer = {", "answer = { not_found = \"not_executed\","),
    ] {
        let err = load(refused).expect_err("refused");
        assert_eq!(
            err.key(),
            "contracts.tickets.lookup.answer.not_found",
            "{err}"
        );
        assert!(
            matches!(
                err.kind(),
                ConfigErrorKind::Contract(ContractErrorKind::NotFoundCannotProve(_))
            ),
            "{err:?}"
        );
    }
    // The defaults change no contract's hash: they are left out of the canonical form.
    let cs = load(&format!("{GET_LOOKUP}\n")).unwrap();
    let json = cs.default_contract().canonical_json();
    assert!(
        !json.contains("not_found") && !json.contains("answer"),
        "{json}"
    );
    // A profile's own answer settings are in its hash; the defaults it leaves are not.
    let ec2 = recoverable_write::contract::profiles::aws_ec2().canonical_json();
    assert!(ec2.contains(r#""format":"xml""#), "{ec2}");
    assert!(
        !ec2.contains("not_found") && !ec2.contains("operation_id\""),
        "{ec2}"
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 27, "Evidence a built-in profile promises": the `aws-ec2` profile looks a launch up with
// `DescribeInstances` filtered by `client-token`, and EC2 answers XML. The lookup reads it.
// ---------------------------------------------------------------------------------------------

/// A recorded `DescribeInstances` answer (one reservation, one running instance) and the same
/// call's answer when the filter matches nothing.
const DESCRIBE: &str = include_str!("fixtures/ec2_describe_instances.xml");
const DESCRIBE_EMPTY: &str = include_str!("fixtures/ec2_describe_instances_empty.xml");
/// The client token in the recorded answer, replaced by the launch's own.
const RECORDED_TOKEN: &str = "xMcwG14507example";

/// What the in-process EC2 endpoint does.
#[derive(Clone, Copy, PartialEq)]
enum Ec2Launch {
    /// `RunInstances` launches, and its answer is lost (a reset after the launch).
    LaunchedAnswerLost,
    /// The connection resets before anything is launched: nothing to find.
    NeverLaunched,
}

/// An EC2 regional endpoint in process: `RunInstances` (form body) and `DescribeInstances`
/// filtered by `client-token` (query), answering the recorded XML. Records every request.
#[derive(Clone)]
struct Ec2 {
    launch: Ec2Launch,
    /// Answer `DescribeInstances` with this text instead (a malformed document).
    describe_as: Option<&'static str>,
    tokens: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    received: std::sync::Arc<std::sync::Mutex<Vec<(http::Method, String)>>>,
}

type Ec2Service = tower::util::BoxCloneSyncService<
    http::Request<http_body_util::Full<bytes::Bytes>>,
    http::Response<http_body_util::Full<bytes::Bytes>>,
    tower::BoxError,
>;

impl Ec2 {
    fn new(launch: Ec2Launch) -> Self {
        Self {
            launch,
            describe_as: None,
            tokens: Default::default(),
            received: Default::default(),
        }
    }

    fn service(&self) -> Ec2Service {
        use http_body_util::BodyExt;
        let ec2 = self.clone();
        tower::util::BoxCloneSyncService::new(tower::service_fn(
            move |req: http::Request<http_body_util::Full<bytes::Bytes>>| {
                let ec2 = ec2.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body.collect().await?.to_bytes();
                    ec2.handle(&parts.method, &parts.uri, &body)
                }
            },
        ))
    }

    fn handle(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        body: &[u8],
    ) -> Result<http::Response<http_body_util::Full<bytes::Bytes>>, tower::BoxError> {
        self.received
            .lock()
            .unwrap()
            .push((method.clone(), uri.to_string()));
        let param = |list: &str, name: &str| {
            list.split('&')
                .find_map(|p| p.strip_prefix(&format!("{name}=")).map(str::to_owned))
        };
        if method == http::Method::POST {
            let form = std::str::from_utf8(body).unwrap();
            assert_eq!(param(form, "Action").as_deref(), Some("RunInstances"));
            let token = param(form, "ClientToken").expect("the ClientToken is sent");
            if self.launch == Ec2Launch::LaunchedAnswerLost {
                self.tokens.lock().unwrap().push(token);
            }
            return Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into());
        }
        let query = uri.query().unwrap_or("");
        assert_eq!(param(query, "Action").as_deref(), Some("DescribeInstances"));
        assert_eq!(
            param(query, "Filter.1.Name").as_deref(),
            Some("client-token")
        );
        let token = param(query, "Filter.1.Value.1").unwrap_or_default();
        let xml = match self.describe_as {
            Some(text) => text.to_owned(),
            None if self.tokens.lock().unwrap().contains(&token) => {
                DESCRIBE.replace(RECORDED_TOKEN, &token)
            }
            None => DESCRIBE_EMPTY.to_owned(),
        };
        Ok(http::Response::builder()
            .header("content-type", "text/xml;charset=UTF-8")
            .body(http_body_util::Full::new(bytes::Bytes::from(xml)))?)
    }

    fn requests(&self, method: http::Method) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| *m == method)
            .map(|(_, u)| u.clone())
            .collect()
    }
}

/// The built-in `aws-ec2` profile (with `more` settings) on the EC2 endpoint in process, and the
/// writer over it.
fn ec2_configured(
    ec2: &Ec2,
    more: &str,
) -> (
    recoverable_write::Handle<MemoryLedger>,
    RecoverableWriteService<recoverable_write::SendOnceGuard<Ec2Service>>,
) {
    let contracts = Contracts::from_toml_str(
        &format!(
            "[[route]]\nhost = \"ec2.eu-west-1.amazonaws.com\"\ncontract = \"ec2\"\n\n[contracts.ec2]\nextends = \"aws-ec2\"\n{more}\n"
        ),
        "contracts.toml",
    )
    .expect("valid contracts");
    let below = ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new())
        .service(ec2.service());
    let rw = RecoverableWrite::builder(MemoryLedger::new())
        .contracts(contracts)
        .budget(fast_policy())
        .transport(below.clone())
        .lookup_timeout(Duration::from_millis(500))
        .recovery_lease(Duration::from_secs(2))
        .build()
        .expect("valid configuration");
    let svc = ServiceBuilder::new().layer(rw.layer()).service(below);
    (rw, svc)
}

fn run_instances(
    op: &recoverable_write::Operation,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut req = http::Request::post("https://ec2.eu-west-1.amazonaws.com/")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"Action=RunInstances&ImageId=ami-0abc&InstanceType=t3.micro&MinCount=1&MaxCount=1&Placement.AvailabilityZone=eu-west-1a&Version=2016-11-15",
        )))
        .unwrap();
    req.extensions_mut().insert(op.clone());
    req
}

#[tokio::test]
async fn an_ec2_launch_whose_answer_was_lost_is_found_by_its_client_token_in_xml() {
    let ec2 = Ec2::new(Ec2Launch::LaunchedAnswerLost);
    // The profile as it is: its 300 s settle time does not delay a lookup that finds the launch.
    let (rw, svc) = ec2_configured(&ec2, "");
    let op = new_op("intent-ec2-found");
    let err = tower::ServiceExt::oneshot(svc, run_instances(&op))
        .await
        .expect_err("the answer is lost");
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");

    let row = recover_until(&rw, &op, |r| r.state == State::Succeeded).await;
    assert_eq!(row.remote_ref.as_deref(), Some("i-1234567890abcdef0"));
    // One launch; the lookup asked for exactly this launch's client token.
    assert_eq!(ec2.requests(http::Method::POST).len(), 1);
    let describe = ec2.requests(http::Method::GET);
    assert!(!describe.is_empty());
    assert!(
        describe[0].ends_with(&format!(
            "&Filter.1.Value.1={}",
            row.idempotency_key.as_str()
        )),
        "{describe:?}"
    );
    assert_eq!(
        *ec2.tokens.lock().unwrap(),
        [row.idempotency_key.as_str().to_owned()]
    );
    // The reservation that resolved it is kept as evidence.
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    let note = log
        .iter()
        .find(|e| e.entry.kind == "lookup" && e.entry.to_state == Some(State::Succeeded))
        .and_then(|e| e.entry.note.clone())
        .unwrap_or_else(|| panic!("no resolving lookup: {log:?}"));
    assert!(
        note.contains("<instanceId>i-1234567890abcdef0</instanceId>"),
        "{note}"
    );
}

#[tokio::test]
async fn an_empty_reservation_set_is_no_evidence_before_settle_and_weak_evidence_after() {
    let ec2 = Ec2::new(Ec2Launch::NeverLaunched);
    let (rw, svc) = ec2_configured(&ec2, "settle_secs = 1");
    let op = new_op("intent-ec2-empty");
    let _ = tower::ServiceExt::oneshot(svc, run_instances(&op)).await;

    // Before the settle time: the miss is no evidence and uses no query.
    let recoverer = rw.recoverer();
    let mut deferred = false;
    for _ in 0..40 {
        recoverer.run_once().await.expect("pass");
        let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
        if log.iter().any(|e| {
            e.entry.kind == "deferred" && e.entry.note.as_deref().unwrap_or("").contains("settle")
        }) {
            deferred = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(deferred, "the early miss was deferred");
    let row = row_of(&rw, &op).await;
    assert_eq!((row.state, row.queries_used), (State::Unknown, 0));
    assert!(
        !ec2.requests(http::Method::GET).is_empty(),
        "DescribeInstances was asked"
    );

    // After it: an empty reservation set is weak evidence; the operation stays unknown.
    let row = recover_until(&rw, &op, |r| r.queries_used >= 1).await;
    assert_eq!(
        row.state,
        State::Unknown,
        "nothing found is not NOT_EXECUTED"
    );
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == "lookup"
            && matches!(&e.entry.evidence, Some(Evidence::Unknown { why, .. })
                if why.contains("no item carrying the reference"))),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|e| matches!(
            e.entry.evidence,
            Some(Evidence::NotExecuted { .. } | Evidence::Succeeded { .. })
        )),
        "{log:?}"
    );
    assert_eq!(
        ec2.requests(http::Method::POST).len(),
        1,
        "nothing launched again"
    );
}

#[tokio::test]
async fn a_malformed_describe_instances_answer_is_unknown_not_a_panic() {
    let mut ec2 = Ec2::new(Ec2Launch::LaunchedAnswerLost);
    ec2.describe_as = Some(&DESCRIBE[..1200]);
    let (rw, svc) = ec2_configured(&ec2, "settle_secs = 0");
    let op = new_op("intent-ec2-malformed");
    let _ = tower::ServiceExt::oneshot(svc, run_instances(&op)).await;

    let row = recover_until(&rw, &op, |r| r.queries_used >= 2).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.remote_ref, None);
    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == "lookup"
            && matches!(&e.entry.evidence, Some(Evidence::Unknown { why, .. })
                if why.contains("well-formed XML"))),
        "{log:?}"
    );
    assert_eq!(
        ec2.requests(http::Method::POST).len(),
        1,
        "nothing launched again"
    );
}
