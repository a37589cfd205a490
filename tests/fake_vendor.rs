//! The fake vendor itself, over real TCP: its idempotency semantics, its exact side-effect
//! counts, and every fault the drills stage.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use recoverable_write::testing::{FakeVendor, OperationStatus, Rejection};
use serde_json::{Value, json};

const BODY: &str = r#"{"operation_id":"op-204","device_id":"E17","priority":"P2"}"#;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client that never re-sends on its own, so every send in a test is one we made.
fn client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http()
}

/// A client that opens a new connection for every request.
fn unpooled_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .pool_max_idle_per_host(0)
        .build_http()
}

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Reply {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

async fn send(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> Result<Reply, hyper_util::client::legacy::Error> {
    let response = client.request(request).await?;
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

async fn try_create(
    client: &HttpClient,
    vendor: &FakeVendor,
    key: Option<&str>,
    tenant: Option<&str>,
    body: &str,
) -> Result<Reply, hyper_util::client::legacy::Error> {
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(vendor.url("/tickets"))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        builder = builder.header("Idempotency-Key", key);
    }
    if let Some(tenant) = tenant {
        builder = builder.header("X-Tenant", tenant);
    }
    let request = builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    send(client, request).await
}

async fn create(client: &HttpClient, vendor: &FakeVendor, key: &str, body: &str) -> Reply {
    try_create(client, vendor, Some(key), None, body)
        .await
        .unwrap()
}

async fn get(client: &HttpClient, vendor: &FakeVendor, path: &str, tenant: Option<&str>) -> Reply {
    let mut builder = Request::builder().method(Method::GET).uri(vendor.url(path));
    if let Some(tenant) = tenant {
        builder = builder.header("X-Tenant", tenant);
    }
    send(client, builder.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn create_returns_201_and_counts_one_ticket() {
    let vendor = FakeVendor::start().await;
    let client = client();

    let reply = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(
        reply.body,
        json!({"id":"W731","operation_id":"op-204","device_id":"E17","status":"SUCCEEDED"})
    );
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 1);
    let tickets = vendor.tickets();
    assert_eq!(tickets[0].id, "W731");
    assert_eq!(tickets[0].tenant, "default");
    assert_eq!(tickets[0].operation_id.as_deref(), Some("op-204"));
    assert_eq!(tickets[0].device_id, "E17");
    assert_eq!(tickets[0].payload["priority"], "P2");
    assert_eq!(tickets[0].status, OperationStatus::Succeeded);
    assert!(vendor.base_url().starts_with("http://127.0.0.1:"));
}

#[tokio::test]
async fn same_key_same_payload_replays_the_stored_first_response() {
    let vendor = FakeVendor::start().await;
    let client = client();

    let first = create(&client, &vendor, "k-204", BODY).await;
    // Same payload, other key order and spacing: the canonical digest is the same.
    let reordered = r#"{ "priority": "P2", "device_id": "E17", "operation_id": "op-204" }"#;
    let replay = create(&client, &vendor, "k-204", reordered).await;

    assert_eq!(replay.status, first.status);
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert!(!first.headers.contains_key("idempotent-replayed"));
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 2);
}

#[tokio::test]
async fn same_key_with_another_payload_is_422_and_creates_nothing() {
    let vendor = FakeVendor::start().await;
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;

    let e18 = r#"{"operation_id":"op-204","device_id":"E18","priority":"P2"}"#;
    let reply = create(&client, &vendor, "k-204", e18).await;

    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reply.code(), "idempotency_key_mismatch");
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn same_key_while_the_first_is_executing_is_409() {
    let vendor = FakeVendor::start().await;
    vendor
        .faults()
        .delay_response(Duration::from_millis(300), 1);
    let client = client();

    let first = {
        let (client, vendor) = (client.clone(), vendor.clone());
        tokio::spawn(async move { create(&client, &vendor, "k-204", BODY).await })
    };
    while vendor.tickets_created() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(second.status, StatusCode::CONFLICT);
    assert_eq!(second.code(), "idempotency_key_in_use");
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    // Once finished, the key replays the stored 201.
    let third = create(&client, &vendor, "k-204", BODY).await;
    assert_eq!(third.status, StatusCode::CREATED);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_same_key_creates_make_exactly_one_ticket() {
    let vendor = FakeVendor::start().await;
    vendor
        .faults()
        .delay_response(Duration::from_millis(200), 1);
    let client = client();

    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, vendor) = (client.clone(), vendor.clone());
        tasks.push(tokio::spawn(async move {
            create(&client, &vendor, "k-204", BODY).await.status
        }));
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }

    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(vendor.posts_received(), 8);
    let created = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    let in_use = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    // The creator gets 201; the others 409 while it runs (or the replayed 201 after).
    assert!(created >= 1, "{statuses:?}");
    assert_eq!(created + in_use, 8, "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_one_operation_under_different_keys_make_one_ticket() {
    let vendor = FakeVendor::start().await;
    let client = client();

    let mut tasks = Vec::new();
    for i in 0..8 {
        let (client, vendor) = (client.clone(), vendor.clone());
        tasks.push(tokio::spawn(async move {
            create(&client, &vendor, &format!("k-{i}"), BODY).await
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert!(reply.status.is_success(), "{reply:?}");
        ids.push(reply.body["id"].clone());
    }

    assert_eq!(vendor.tickets_created(), 1);
    assert!(ids.iter().all(|id| id == "W731"), "{ids:?}");
}

#[tokio::test]
async fn missing_key_is_400_and_creates_nothing() {
    let vendor = FakeVendor::start().await;
    let client = client();

    let reply = try_create(&client, &vendor, None, None, BODY)
        .await
        .unwrap();

    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.code(), "missing_idempotency_key");
    assert_eq!(vendor.tickets_created(), 0);
    assert_eq!(vendor.posts_received(), 1);
}

#[tokio::test]
async fn without_required_keys_every_create_is_a_new_ticket() {
    let vendor = FakeVendor::builder()
        .require_idempotency_key(false)
        .dedupe_by_operation_id(false)
        .start()
        .await
        .unwrap();
    let client = client();

    let body = r#"{"device_id":"E17"}"#;
    try_create(&client, &vendor, None, None, body)
        .await
        .unwrap();
    try_create(&client, &vendor, None, None, body)
        .await
        .unwrap();

    assert_eq!(vendor.tickets_created(), 2);
}

#[tokio::test]
async fn validation_failure_is_400_and_not_stored_against_the_key() {
    let vendor = FakeVendor::start().await;
    let client = client();

    let invalid = create(&client, &vendor, "k-204", "{not json").await;
    let no_device = create(&client, &vendor, "k-204", r#"{"operation_id":"op-204"}"#).await;
    // The key was not consumed by the failures: a valid create with it executes.
    let valid = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(invalid.status, StatusCode::BAD_REQUEST);
    assert_eq!(invalid.code(), "validation_error");
    assert_eq!(no_device.status, StatusCode::BAD_REQUEST);
    assert_eq!(no_device.code(), "validation_error");
    assert_eq!(valid.status, StatusCode::CREATED);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_after_commit_loses_the_response_but_the_ticket_exists() {
    let vendor = FakeVendor::start().await;
    vendor.faults().drop_after_commit(1);
    let client = client();

    let lost = try_create(&client, &vendor, Some("k-204"), None, BODY).await;

    let error = lost.expect_err("the vendor answered instead of dropping the connection");
    assert!(!error.is_connect(), "the request was sent: {error:?}");
    assert_eq!(vendor.tickets_created(), 1);

    let by_id = get(&client, &vendor, "/operations/op-204", None).await;
    assert_eq!(by_id.status, StatusCode::OK);
    assert_eq!(
        by_id.body,
        json!({"operation_id":"op-204","status":"SUCCEEDED","resource_id":"W731","state_version":1})
    );
    let by_key = get(&client, &vendor, "/operations/by-key/k-204", None).await;
    assert_eq!(by_key.body, by_id.body);
    assert_eq!(vendor.lookups_received(), 2);

    // The fault was used up; the key stored the real first response.
    let replay = create(&client, &vendor, "k-204", BODY).await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.body["id"], "W731");
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn gateway_504_after_commit_still_created_one_ticket() {
    let vendor = FakeVendor::start().await;
    vendor
        .faults()
        .status_after_commit(StatusCode::GATEWAY_TIMEOUT, 1);
    let client = client();

    let reply = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(reply.code(), "gateway_timeout");
    assert_eq!(vendor.tickets_created(), 1);
    // Not cached: the key holds the vendor's real answer, which the gateway lost.
    let replay = create(&client, &vendor, "k-204", BODY).await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn cached_500_is_replayed_for_the_same_key() {
    let vendor = FakeVendor::start().await;
    vendor.faults().cache_error_response(true);
    vendor
        .faults()
        .status_after_commit(StatusCode::INTERNAL_SERVER_ERROR, 1);
    let client = client();

    let first = create(&client, &vendor, "k-204", BODY).await;
    let replay = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(replay.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(vendor.tickets_created(), 1);
    // Only the lookup tells the truth.
    let lookup = get(&client, &vendor, "/operations/op-204", None).await;
    assert_eq!(lookup.body["status"], "SUCCEEDED");
    assert_eq!(lookup.body["resource_id"], "W731");
}

#[tokio::test]
async fn lookup_not_found_once_then_the_record_appears() {
    let vendor = FakeVendor::start().await;
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;
    vendor.faults().lookup_not_found(1);

    let first = get(&client, &vendor, "/operations/op-204", None).await;
    let second = get(&client, &vendor, "/operations/op-204", None).await;

    assert_eq!(first.status, StatusCode::NOT_FOUND);
    assert_eq!(first.code(), "not_found");
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.body["resource_id"], "W731");
    assert_eq!(vendor.lookups_received(), 2);
}

#[tokio::test]
async fn lookup_delay_makes_a_lookup_slow() {
    let vendor = FakeVendor::start().await;
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;
    vendor.faults().lookup_delay(Duration::from_millis(300), 1);

    let slow = tokio::time::timeout(
        Duration::from_millis(50),
        get(&client, &vendor, "/operations/op-204", None),
    )
    .await;
    let fast = tokio::time::timeout(
        Duration::from_millis(1000),
        get(&unpooled_client(), &vendor, "/operations/op-204", None),
    )
    .await;

    assert!(slow.is_err(), "the lookup should have timed out");
    assert_eq!(fast.unwrap().status, StatusCode::OK);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn processing_answers_202_then_completes_without_a_second_ticket() {
    let vendor = FakeVendor::start().await;
    vendor.faults().hold_processing(true);
    let client = client();

    let accepted = create(&client, &vendor, "k-204", BODY).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    assert_eq!(
        accepted.body,
        json!({"operation_id":"op-204","status":"PROCESSING"})
    );
    assert_eq!(accepted.headers[header::RETRY_AFTER], "1");
    assert_eq!(vendor.tickets_created(), 1);

    let processing = get(&client, &vendor, "/operations/op-204", None).await;
    assert_eq!(processing.body["status"], "PROCESSING");
    assert_eq!(processing.body["resource_id"], Value::Null);
    assert_eq!(processing.headers[header::RETRY_AFTER], "1");

    assert_eq!(vendor.faults().complete_processing(), 1);
    vendor.faults().hold_processing(false);

    let done = get(&client, &vendor, "/operations/op-204", None).await;
    assert_eq!(
        done.body,
        json!({"operation_id":"op-204","status":"SUCCEEDED","resource_id":"W731","state_version":2})
    );
    assert_eq!(vendor.tickets_created(), 1);
    // Completing again moves nothing: a finished operation never goes back.
    assert_eq!(vendor.faults().complete_processing(), 0);
    assert_eq!(vendor.tickets()[0].status, OperationStatus::Succeeded);
}

#[tokio::test]
async fn failed_processing_gives_explicit_rejection_evidence() {
    let vendor = FakeVendor::start().await;
    vendor.faults().hold_processing(true);
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(vendor.faults().fail_processing("device_retired"), 1);

    let lookup = get(&client, &vendor, "/operations/op-204", None).await;
    assert_eq!(lookup.body["status"], "REJECTED");
    assert_eq!(lookup.body["resource_id"], Value::Null);
    assert_eq!(lookup.body["reason"], "device_retired");
    assert_eq!(lookup.body["state_version"], 2);
}

#[tokio::test]
async fn rejected_429_creates_nothing_and_a_same_key_retry_creates_once() {
    let vendor = FakeVendor::start().await;
    vendor
        .faults()
        .reject_next(StatusCode::TOO_MANY_REQUESTS, "rate_limited", 1);
    let client = client();

    let limited = create(&client, &vendor, "k-204", BODY).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.code(), "rate_limited");
    assert_eq!(limited.headers[header::RETRY_AFTER], "1");
    assert_eq!(vendor.tickets_created(), 0);

    let retry = create(&client, &vendor, "k-204", BODY).await;
    let again = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(again.body, retry.body);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn rejection_carries_custom_retry_after_and_vendor_headers() {
    let vendor = FakeVendor::start().await;
    vendor.faults().reject_next_with(
        Rejection::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited")
            .retry_after("Wed, 21 Oct 2015 07:28:00 GMT")
            .header("Stripe-Should-Retry", "false"),
        2,
    );
    let client = client();

    let first = create(&client, &vendor, "k-1", BODY).await;
    let second = create(&client, &vendor, "k-2", BODY).await;
    let third = create(&client, &vendor, "k-3", BODY).await;

    assert_eq!(
        first.headers[header::RETRY_AFTER],
        "Wed, 21 Oct 2015 07:28:00 GMT"
    );
    assert_eq!(first.headers["stripe-should-retry"], "false");
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    // Two used up: the third create goes through.
    assert_eq!(third.status, StatusCode::CREATED);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn setting_a_counted_fault_to_zero_clears_it() {
    let vendor = FakeVendor::start().await;
    vendor
        .faults()
        .reject_next(StatusCode::UNAUTHORIZED, "unauthorized", 3);
    vendor
        .faults()
        .reject_next(StatusCode::UNAUTHORIZED, "unauthorized", 0);
    let client = client();

    let reply = create(&client, &vendor, "k-1", BODY).await;

    assert_eq!(reply.status, StatusCode::CREATED);
}

#[tokio::test]
async fn unauthorized_creates_nothing() {
    let vendor = FakeVendor::start().await;
    vendor
        .faults()
        .reject_next(StatusCode::UNAUTHORIZED, "invalid_credentials", 1);
    let client = client();

    let reply = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(!reply.headers.contains_key(header::RETRY_AFTER));
    assert_eq!(vendor.tickets_created(), 0);
}

#[tokio::test]
async fn expired_key_with_operation_record_returns_the_same_ticket() {
    let vendor = FakeVendor::start().await;
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;

    vendor.faults().expire_keys();
    let resumed = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(resumed.status, StatusCode::OK);
    assert_eq!(resumed.body["id"], "W731");
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn expired_key_and_cleaned_records_create_a_second_ticket() {
    let vendor = FakeVendor::start().await;
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;

    vendor.faults().expire_keys();
    vendor.faults().clean_operation_records();
    let lookup = get(&client, &vendor, "/operations/op-204", None).await;
    let duplicate = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(lookup.status, StatusCode::NOT_FOUND);
    // The unsafe path a drill must never take: the vendor happily duplicates.
    assert_eq!(duplicate.status, StatusCode::CREATED);
    assert_eq!(duplicate.body["id"], "W732");
    assert_eq!(vendor.tickets_created(), 2);
}

#[tokio::test]
async fn used_operation_marker_refuses_a_replay_after_records_are_cleaned() {
    let vendor = FakeVendor::builder()
        .remember_used_operations(true)
        .start()
        .await
        .unwrap();
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;

    vendor.faults().expire_keys();
    vendor.faults().clean_operation_records();
    let replay = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(replay.status, StatusCode::CONFLICT);
    assert_eq!(replay.code(), "operation_already_used");
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn without_operation_dedupe_an_expired_key_duplicates() {
    let vendor = FakeVendor::builder()
        .dedupe_by_operation_id(false)
        .start()
        .await
        .unwrap();
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;

    vendor.faults().expire_keys();
    let duplicate = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(duplicate.status, StatusCode::CREATED);
    assert_eq!(vendor.tickets_created(), 2);
}

#[tokio::test]
async fn key_retention_runs_out_by_itself() {
    let vendor = FakeVendor::builder()
        .key_retention(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let client = client();
    let no_operation = r#"{"device_id":"E17"}"#;
    create(&client, &vendor, "k-9", no_operation).await;

    tokio::time::sleep(Duration::from_millis(250)).await;
    let after = create(&client, &vendor, "k-9", no_operation).await;

    assert_eq!(after.status, StatusCode::CREATED);
    assert!(!after.headers.contains_key("idempotent-replayed"));
    assert_eq!(vendor.tickets_created(), 2);
}

#[tokio::test]
async fn slow_vendor_commits_late_after_the_client_gave_up() {
    let vendor = FakeVendor::start().await;
    vendor
        .faults()
        .delay_before_commit(Duration::from_millis(200), 1);
    let client = client();

    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        try_create(&client, &vendor, Some("k-204"), None, BODY),
    )
    .await;
    assert!(gave_up.is_err(), "the create should still be running");
    let during = get(&client, &vendor, "/operations/op-204", None).await;
    assert_eq!(during.status, StatusCode::NOT_FOUND);
    assert_eq!(vendor.tickets_created(), 0);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while vendor.tickets_created() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = get(&client, &vendor, "/operations/op-204", None).await;

    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!(after.body["resource_id"], "W731");
    // The late commit stored its response against the key.
    let replay = create(&client, &vendor, "k-204", BODY).await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn replay_after_processing_completes_returns_the_stored_202() {
    let vendor = FakeVendor::start().await;
    vendor.faults().hold_processing(true);
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;
    vendor.faults().complete_processing();

    let replay = create(&client, &vendor, "k-204", BODY).await;
    let other_key = create(&client, &vendor, "k-other", BODY).await;

    // Stored first response, as Stripe v1 does; only the lookup tells it finished.
    assert_eq!(replay.status, StatusCode::ACCEPTED);
    // A new key for the same operation is deduplicated by operation id.
    assert_eq!(other_key.status, StatusCode::OK);
    assert_eq!(other_key.body["id"], "W731");
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn operations_and_keys_are_tenant_scoped() {
    let vendor = FakeVendor::start().await;
    let client = client();
    let created = try_create(&client, &vendor, Some("k-204"), Some("tenant-a"), BODY)
        .await
        .unwrap();
    assert_eq!(created.status, StatusCode::CREATED);

    let own = get(&client, &vendor, "/operations/op-204", Some("tenant-a")).await;
    let other = get(&client, &vendor, "/operations/op-204", Some("tenant-b")).await;
    let other_by_key = get(
        &client,
        &vendor,
        "/operations/by-key/k-204",
        Some("tenant-b"),
    )
    .await;
    let default = get(&client, &vendor, "/operations/op-204", None).await;

    assert_eq!(own.body["resource_id"], "W731");
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert_eq!(other_by_key.status, StatusCode::NOT_FOUND);
    assert_eq!(default.status, StatusCode::NOT_FOUND);

    // The same key in another tenant is another request.
    let b = try_create(&client, &vendor, Some("k-204"), Some("tenant-b"), BODY)
        .await
        .unwrap();
    assert_eq!(b.status, StatusCode::CREATED);
    assert_eq!(b.body["id"], "W732");
    assert_eq!(vendor.tickets_created(), 2);

    let list_a = get(&client, &vendor, "/tickets", Some("tenant-a")).await;
    assert_eq!(list_a.body["tickets"].as_array().unwrap().len(), 1);
    assert_eq!(list_a.body["tickets"][0]["id"], "W731");
    assert_eq!(vendor.tickets()[1].tenant, "tenant-b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_resume_on_the_same_port() {
    let vendor = FakeVendor::start().await;
    let client = unpooled_client();
    let addr = vendor.addr();

    vendor.faults().refuse_connections(true).unwrap();
    let refused = tokio::net::TcpStream::connect(addr).await;
    let error = try_create(&client, &vendor, Some("k-204"), None, BODY)
        .await
        .expect_err("the vendor accepted a connection while refusing");

    assert_eq!(
        refused.unwrap_err().kind(),
        std::io::ErrorKind::ConnectionRefused
    );
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(vendor.posts_received(), 0);

    vendor.faults().refuse_connections(false).unwrap();
    let reply = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(vendor.addr(), addr);
    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn refusing_closes_pooled_connections_too() {
    let vendor = FakeVendor::start().await;
    let client = client();
    create(&client, &vendor, "k-1", BODY).await;

    vendor.faults().refuse_connections(true).unwrap();
    // Give the pool a moment to see its idle connection closed.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let error = try_create(&client, &vendor, Some("k-2"), None, BODY)
        .await
        .expect_err("a pooled connection survived the refusal");

    assert!(error.is_connect(), "{error:?}");
    assert_eq!(vendor.tickets_created(), 1);
    vendor.faults().clear().unwrap();
    let other_operation = r#"{"operation_id":"op-205","device_id":"E17"}"#;
    assert_eq!(
        create(&client, &vendor, "k-2", other_operation)
            .await
            .status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn every_request_is_recorded_with_its_raw_key_and_body_bytes() {
    let vendor = FakeVendor::start().await;
    let client = client();
    create(&client, &vendor, "k-204", BODY).await;
    create(&client, &vendor, "k-204", BODY).await;
    get(&client, &vendor, "/operations/op-204", None).await;

    let seen = vendor.requests();

    assert_eq!(seen.len(), 3);
    let posts: Vec<_> = seen.iter().filter(|r| r.method == Method::POST).collect();
    assert_eq!(posts.len(), 2);
    for post in &posts {
        assert_eq!(post.path, "/tickets");
        assert_eq!(post.idempotency_key.as_deref(), Some("k-204"));
        assert_eq!(post.tenant, "default");
        assert_eq!(post.body, Bytes::from_static(BODY.as_bytes()));
    }
    assert!(posts[0].at <= posts[1].at);
    assert_eq!(seen[2].path, "/operations/op-204");
    assert!(seen[2].body.is_empty());
}

#[tokio::test]
async fn quoted_structured_field_key_is_the_same_key() {
    let vendor = FakeVendor::start().await;
    let client = client();

    create(&client, &vendor, "\"k-204\"", BODY).await;
    let replay = create(&client, &vendor, "k-204", BODY).await;

    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(vendor.tickets_created(), 1);
    // The raw header value is kept as sent.
    assert_eq!(
        vendor.requests()[0].idempotency_key.as_deref(),
        Some("\"k-204\"")
    );
}

#[tokio::test]
async fn custom_headers_are_honoured() {
    let vendor = FakeVendor::builder()
        .idempotency_key_header(http::HeaderName::from_static("paypal-request-id"))
        .tenant_header(http::HeaderName::from_static("x-account"))
        .first_ticket_number(1)
        .start()
        .await
        .unwrap();
    let client = client();

    let request = Request::post(vendor.url("/tickets"))
        .header("PayPal-Request-Id", "r-1")
        .header("X-Account", "acme")
        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .unwrap();
    let reply = send(&client, request).await.unwrap();

    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(reply.body["id"], "W1");
    assert_eq!(vendor.tickets()[0].tenant, "acme");
    assert_eq!(vendor.tickets()[0].idempotency_key.as_deref(), Some("r-1"));
}

#[tokio::test]
async fn shutdown_and_drop_close_the_port() {
    let vendor = FakeVendor::start().await;
    let addr = vendor.addr();
    vendor.shutdown();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    assert!(vendor.faults().refuse_connections(false).is_err());

    let vendor = FakeVendor::start().await;
    let addr = vendor.addr();
    let clone = vendor.clone();
    drop(vendor);
    // A clone keeps it running.
    assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
    drop(clone);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn unknown_paths_are_404_and_recorded() {
    let vendor = FakeVendor::start().await;
    let client = client();

    let reply = get(&client, &vendor, "/nowhere?x=1", None).await;

    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.code(), "not_found");
    assert_eq!(vendor.requests()[0].path, "/nowhere?x=1");
    assert_eq!(vendor.lookups_received(), 0);
}
