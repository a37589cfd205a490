//! Drives the axum example app (`examples/axum_app.rs`) over real HTTP against the fake vendor.
//!
//! Each test has its own world: a fake vendor, a SQLite ledger in a temp dir, the app bound on
//! 127.0.0.1:0. The recovery engine is not spawned: tests run its passes themselves, so they can
//! look at the app while the operation is still unknown. Assertions check the app's answers, the
//! ledger, and the vendor's own count of side effects.

#[allow(dead_code)] // the example's `main` and demo are not used here
#[path = "../examples/axum_app.rs"]
mod axum_app;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::Ledger;
use recoverable_write::testing::FakeVendor;
use recoverable_write::testing::drill::fast_policy;
use recoverable_write::{OperationId, Recoverer, SqliteLedger, State, Tenant};
use serde_json::{Value, json};

struct World {
    vendor: FakeVendor,
    ledger: Arc<dyn FullLedger>,
    recoverer: Recoverer,
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
    _dir: tempfile::TempDir,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl World {
    async fn start() -> Self {
        let vendor = FakeVendor::start().await;
        let dir = tempfile::tempdir().unwrap();
        let ledger: Arc<dyn FullLedger> =
            Arc::new(SqliteLedger::open(dir.path().join("ops.db")).await.unwrap());
        let app = axum_app::build(&vendor.base_url(), ledger.clone(), fast_policy());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app.router).await });
        Self {
            vendor,
            ledger,
            recoverer: app.recoverer,
            base,
            http: Client::builder(TokioExecutor::new()).build_http(),
            _dir: dir,
        }
    }

    async fn request(&self, method: &str, path: &str, tenant: Option<&str>, body: &str) -> Answer {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(header::CONTENT_TYPE, "application/json");
        // The app takes the tenant from the caller's API key, never from a header.
        if let Some(t) = tenant {
            req = req.header(header::AUTHORIZATION, format!("Bearer demo-key-{t}"));
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        let res = self.http.request(req).await.unwrap();
        let (parts, body) = res.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    /// `POST /support-requests/{request}/ticket` as `tenant`.
    async fn create(&self, tenant: &str, request: &str, device: &str) -> Answer {
        let body = json!({ "device_id": device, "priority": "P2" }).to_string();
        self.request(
            "POST",
            &format!("/support-requests/{request}/ticket"),
            Some(tenant),
            &body,
        )
        .await
    }

    /// `GET /operations/{op}` as `tenant`.
    async fn status(&self, tenant: &str, op: &str) -> Answer {
        self.request("GET", &format!("/operations/{op}"), Some(tenant), "")
            .await
    }

    async fn state(&self, tenant: &str, op: &str) -> State {
        self.ledger
            .get(&Tenant::new(tenant), &OperationId::new(op))
            .await
            .unwrap()
            .unwrap()
            .state
    }

    /// Runs recovery passes until the operation is neither UNKNOWN nor PROCESSING (bounded).
    async fn recover(&self, tenant: &str, op: &str) -> State {
        for _ in 0..300 {
            self.recoverer.run_once().await.unwrap();
            let state = self.state(tenant, op).await;
            if !matches!(state, State::Unknown | State::Processing) {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{op} was never resolved");
    }
}

#[tokio::test]
async fn happy_path_answers_201_with_the_vendors_ticket_and_creates_one() {
    let w = World::start().await;

    let a = w.create("tenant-a", "sr-1", "E17").await;

    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    assert_eq!(a.body["status"], "SUCCEEDED");
    assert_eq!(a.body["ticket_id"], "W731");
    assert_eq!(a.body["from_ledger"], false);
    assert_eq!(a.body["ticket"]["id"], "W731");
    assert_eq!(a.body["ticket"]["device_id"], "E17");
    let op = a.body["operation_id"].as_str().unwrap();
    assert_eq!(w.state("tenant-a", op).await, State::Succeeded);
    assert_eq!(w.vendor.tickets_created(), 1);
    assert_eq!(w.vendor.posts_received(), 1);

    let s = w.status("tenant-a", op).await;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.body["status"], "SUCCEEDED");
    assert_eq!(s.body["ticket_id"], "W731");
    assert_eq!(s.body["attempts"], 1);
}

#[tokio::test]
async fn lost_response_answers_202_and_the_status_endpoint_follows_recovery() {
    let w = World::start().await;
    w.vendor.faults().drop_after_commit(1);

    let a = w.create("tenant-a", "sr-2", "E17").await;

    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
    assert_eq!(a.body["status"], "UNKNOWN");
    let op = a.body["operation_id"].as_str().unwrap().to_owned();
    let message = a.body["message"].as_str().unwrap();
    assert!(message.contains("do not create it again"), "{message}");
    assert!(!message.to_lowercase().contains("retry"), "{message}");
    assert_eq!(
        a.headers[header::LOCATION],
        format!("/operations/{op}").as_str()
    );
    // The vendor did create it: only its answer was lost.
    assert_eq!(w.vendor.tickets_created(), 1);

    let s = w.status("tenant-a", &op).await;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.body["status"], "UNKNOWN");
    assert_eq!(s.body["ticket_id"], Value::Null);

    // The caller asks again before recovery: told the same thing, nothing sent.
    let posts = w.vendor.posts_received();
    let again = w.create("tenant-a", "sr-2", "E17").await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{}", again.body);
    assert_eq!(again.body["operation_id"], op.as_str());
    assert_eq!(w.vendor.posts_received(), posts);

    assert_eq!(w.recover("tenant-a", &op).await, State::Succeeded);
    let s = w.status("tenant-a", &op).await;
    assert_eq!(s.body["status"], "SUCCEEDED");
    assert_eq!(s.body["ticket_id"], "W731");
    assert_eq!(s.body["attempts"], 1, "recovered by lookup, never resent");
    assert_eq!(w.vendor.tickets_created(), 1);

    // After recovery: 201 from the ledger, still nothing sent.
    let after = w.create("tenant-a", "sr-2", "E17").await;
    assert_eq!(after.status, StatusCode::CREATED, "{}", after.body);
    assert_eq!(after.body["ticket_id"], "W731");
    assert_eq!(after.body["from_ledger"], true);
    assert_eq!(w.vendor.posts_received(), posts);
    assert_eq!(w.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn the_same_support_request_again_answers_201_from_the_stored_result() {
    let w = World::start().await;
    let first = w.create("tenant-a", "sr-3", "E17").await;
    assert_eq!(first.status, StatusCode::CREATED);
    let posts = w.vendor.posts_received();

    let again = w.create("tenant-a", "sr-3", "E17").await;

    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    assert_eq!(again.body["operation_id"], first.body["operation_id"]);
    assert_eq!(again.body["from_ledger"], true);
    // The vendor's first response was stored, so the repeat carries the ticket itself.
    assert_eq!(again.body["ticket"], first.body["ticket"]);
    assert_eq!(w.vendor.posts_received(), posts);
    assert_eq!(w.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn the_same_request_id_with_another_device_is_409_and_nothing_is_sent() {
    let w = World::start().await;
    let first = w.create("tenant-a", "sr-4", "E17").await;
    assert_eq!(first.status, StatusCode::CREATED);
    let op = first.body["operation_id"].as_str().unwrap();
    let posts = w.vendor.posts_received();

    let other = w.create("tenant-a", "sr-4", "E18").await;

    assert_eq!(other.status, StatusCode::CONFLICT, "{}", other.body);
    assert_eq!(other.body["operation_id"], op);
    assert!(
        other.body["message"]
            .as_str()
            .unwrap()
            .contains("nothing was sent")
    );
    assert_eq!(w.vendor.posts_received(), posts);
    assert_eq!(w.vendor.tickets_created(), 1);
    let s = w.status("tenant-a", op).await;
    assert_eq!(s.body["status"], "SUCCEEDED");
    assert_eq!(s.body["ticket_id"], "W731");
}

#[tokio::test]
async fn a_conflicting_request_while_the_outcome_is_unknown_is_409_too() {
    let w = World::start().await;
    w.vendor.faults().drop_after_commit(1);
    let first = w.create("tenant-a", "sr-5", "E17").await;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    let posts = w.vendor.posts_received();

    let other = w.create("tenant-a", "sr-5", "E18").await;

    assert_eq!(other.status, StatusCode::CONFLICT, "{}", other.body);
    assert_eq!(w.vendor.posts_received(), posts);
    let op = first.body["operation_id"].as_str().unwrap();
    assert_eq!(w.state("tenant-a", op).await, State::Unknown);
}

#[tokio::test]
async fn status_is_404_for_an_unknown_id_and_for_another_tenants_operation() {
    let w = World::start().await;
    let a = w.create("tenant-a", "sr-6", "E17").await;
    assert_eq!(a.status, StatusCode::CREATED);
    let op = a.body["operation_id"].as_str().unwrap();

    assert_eq!(
        w.status("tenant-a", "op-nobody-made").await.status,
        StatusCode::NOT_FOUND
    );
    let foreign = w.status("tenant-b", op).await;
    assert_eq!(foreign.status, StatusCode::NOT_FOUND);
    assert_eq!(foreign.body["ticket_id"], Value::Null);
    assert_eq!(w.status("tenant-a", op).await.status, StatusCode::OK);
}

#[tokio::test]
async fn another_tenant_with_the_same_request_id_gets_its_own_ticket() {
    let w = World::start().await;

    let a = w.create("tenant-a", "sr-7", "E17").await;
    let b = w.create("tenant-b", "sr-7", "E17").await;

    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(b.status, StatusCode::CREATED, "{}", b.body);
    assert_eq!(b.body["from_ledger"], false);
    assert_ne!(a.body["ticket_id"], b.body["ticket_id"]);
    assert_eq!(w.vendor.tickets_created(), 2);
}

#[tokio::test]
async fn a_documented_vendor_rejection_is_422_and_final() {
    let w = World::start().await;
    w.vendor
        .faults()
        .reject_next(StatusCode::BAD_REQUEST, "validation_error", 1);

    let a = w.create("tenant-a", "sr-8", "E17").await;

    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert_eq!(a.body["status"], "REJECTED");
    assert_eq!(a.body["vendor_status"], 400);
    assert_eq!(a.body["vendor_error"]["error"]["code"], "validation_error");
    assert_eq!(w.vendor.tickets_created(), 0);
    let op = a.body["operation_id"].as_str().unwrap();
    assert_eq!(w.state("tenant-a", op).await, State::Rejected);
}

#[tokio::test]
async fn requests_without_a_tenant_are_refused_before_anything_is_recorded_or_sent() {
    let w = World::start().await;

    let body = json!({ "device_id": "E17", "priority": "P2" }).to_string();
    let a = w
        .request("POST", "/support-requests/sr-9/ticket", None, &body)
        .await;
    let bad_id = w
        .request(
            "POST",
            "/support-requests/sr%2F9/ticket",
            Some("tenant-a"),
            &body,
        )
        .await;

    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert_eq!(bad_id.status, StatusCode::BAD_REQUEST);
    assert_eq!(w.vendor.posts_received(), 0);
    let missing = w
        .ledger
        .get(
            &Tenant::new("tenant-a"),
            &axum_app::ticket_operation_id("sr-9"),
        )
        .await
        .unwrap();
    assert!(missing.is_none());
}

#[tokio::test]
async fn a_caller_hanging_up_does_not_cancel_the_write_on_the_wire() {
    let w = World::start().await;
    // The vendor commits at once and answers 200 ms later; the caller gives up after 50 ms.
    w.vendor
        .faults()
        .delay_response(Duration::from_millis(200), 1);

    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        w.create("tenant-a", "sr-10", "E17"),
    )
    .await;
    assert!(gave_up.is_err(), "the caller was supposed to hang up first");

    // The write finishes in its own task and records the vendor's answer: no lease expiry, no
    // recovery pass needed (none runs here).
    let op = axum_app::ticket_operation_id("sr-10");
    let mut state = State::InFlight;
    for _ in 0..100 {
        state = w.state("tenant-a", op.as_str()).await;
        if state != State::InFlight {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(state, State::Succeeded);
    assert_eq!(w.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn a_slow_vendor_is_timed_out_below_the_layer_and_recorded_unknown_at_once() {
    let w = World::start().await;
    // Longer than the stack's timeout (4/5 of the 600 ms attempt timeout of the fast policy).
    w.vendor
        .faults()
        .delay_response(Duration::from_millis(1_000), 1);

    let a = w.create("tenant-a", "sr-11", "E17").await;

    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
    let op = a.body["operation_id"].as_str().unwrap().to_owned();
    // Recorded by the layer from the stack's timeout error ("request timed out", tower's
    // `Elapsed`), before the layer's own attempt deadline ("attempt timed out after 600 ms") and
    // long before the lease would expire.
    let s = w.status("tenant-a", &op).await;
    assert_eq!(s.body["status"], "UNKNOWN");
    assert_eq!(s.body["reason"], "request timed out", "{}", s.body);

    assert_eq!(w.recover("tenant-a", &op).await, State::Succeeded);
    assert_eq!(w.vendor.tickets_created(), 1);
}
