//! The outbox on PostgreSQL: an axum handler that records a support request and the ticket
//! create it approves in ONE transaction, then sends the create through the layer.
//!
//! If the transaction rolls back, neither the business row nor the operation exists and nothing
//! is ever sent. If the process dies after the commit, the operation is durable (`PREPARED`):
//! calling again with the same operation sends it exactly once, and an attempt that was on the
//! wire is reconciled by the recoverer, never re-created.
//!
//! Runs against a local PostgreSQL (`RW_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`) and the crate's fake vendor on 127.0.0.1, in a
//! schema of its own that it drops at the end. Exits 0 on success.
//!
//! ```sh
//! cargo run --example outbox_axum --features postgres
//! ```

use std::sync::Arc;

use axum::extract::State as AxumState;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use recoverable_write::RecoverableWrite;
use recoverable_write::ledger::{Created, Ledger, PostgresLedgerOptions};
use recoverable_write::testing::FakeVendor;
use recoverable_write::testing::drill::{Writer, collected};
use recoverable_write::{
    BudgetPolicy, Contract, Operation, Outcome, PostgresLedger, RecoverableWriteLayer,
    SendOnceGuardLayer, State, Tenant,
};
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;
use tower::{ServiceBuilder, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const SCHEMA: &str = "rw_outbox_example";
const TENANT: &str = "acme";

#[derive(Clone)]
struct App {
    ledger: PostgresLedger,
    /// layer → send-once guard → hyper-util client (no client retries).
    writer: Writer,
    /// Builds the outbox operation exactly as a call through it would.
    layer: RecoverableWriteLayer,
    vendor: String,
}

#[derive(serde::Deserialize)]
struct NewSupportRequest {
    device_id: String,
    summary: String,
}

/// `POST /support-requests`: one transaction for the business row and the ticket create, then
/// the create goes out through the layer.
async fn create_support_request(
    AxumState(app): AxumState<App>,
    Json(input): Json<NewSupportRequest>,
) -> (StatusCode, Json<Value>) {
    match handle(&app, input).await {
        Ok(answer) => answer,
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        ),
    }
}

async fn handle(
    app: &App,
    input: NewSupportRequest,
) -> Result<(StatusCode, Json<Value>), BoxError> {
    let request_id = uuid::Uuid::new_v4().to_string();
    // The approved intent is this support request: retries of this handler reuse it.
    let op = Operation::new(
        TENANT,
        "create_ticket",
        format!("support-request/{request_id}"),
    );
    let body = json!({
        "operation_id": op.id().as_str(),
        "device_id": input.device_id,
        "priority": "P2",
    });
    let vendor_req = http::Request::post(format!("{}/tickets", app.vendor))
        .header("content-type", "application/json")
        .header("x-tenant", TENANT)
        .body(Bytes::from(serde_json::to_vec(&body)?))?;

    // 1. The business row and the operation, together.
    let mut tx = app.ledger.pool().begin().await?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {SCHEMA}.support_requests (id, device_id, summary, operation_id) \
         VALUES ($1, $2, $3, $4)"
    )))
    .bind(&request_id)
    .bind(&input.device_id)
    .bind(&input.summary)
    .bind(op.id().as_str())
    .execute(&mut *tx)
    .await?;
    let created = app
        .ledger
        .create_in(&mut tx, app.layer.new_operation(&op, &vendor_req))
        .await?;
    if !matches!(created, Created::New(_)) {
        return Err("a fresh support request must create a fresh operation".into());
    }
    if input.summary.trim().is_empty() {
        // A business rule fails after both inserts: roll back, and neither exists.
        tx.rollback().await?;
        return Ok((
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "error": "summary is required" })),
        ));
    }
    tx.commit().await?;

    // 2. Send it: the layer finds the PREPARED operation (same id, same payload hash), claims
    //    send rights durably, and sends once with the operation's key.
    let (parts, bytes) = vendor_req.into_parts();
    let mut req = http::Request::from_parts(parts, Full::new(bytes));
    req.extensions_mut().insert(op.clone());
    match app.writer.clone().oneshot(req).await {
        Ok(res) => {
            let outcome = res.extensions().get::<Outcome>().cloned();
            let ticket = outcome.as_ref().and_then(|o| o.remote_ref.clone());
            sqlx::query(AssertSqlSafe(format!(
                "UPDATE {SCHEMA}.support_requests SET ticket = $1 WHERE id = $2"
            )))
            .bind(&ticket)
            .bind(&request_id)
            .execute(app.ledger.pool())
            .await?;
            Ok((
                StatusCode::CREATED,
                Json(json!({
                    "support_request": request_id,
                    "operation_id": op.id().as_str(),
                    "ticket": ticket,
                })),
            ))
        }
        // The outcome is unknown or in progress: the operation is recorded and will be
        // verified; tell the caller not to create it again.
        Err(e) => Ok((
            StatusCode::ACCEPTED,
            Json(json!({
                "support_request": request_id,
                "operation_id": op.id().as_str(),
                "status": e.to_string(),
            })),
        )),
    }
}

async fn call(router: &Router, body: Value) -> Result<(StatusCode, Value), BoxError> {
    let req = http::Request::post("/support-requests")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(serde_json::to_vec(&body)?))?;
    let res = router.clone().oneshot(req).await?;
    let status = res.status();
    let bytes = res.into_body().collect().await?.to_bytes();
    Ok((status, serde_json::from_slice(&bytes)?))
}

async fn count(ledger: &PostgresLedger, sql: String) -> Result<i64, BoxError> {
    Ok(sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(ledger.pool())
        .await?)
}

async fn run(ledger: &PostgresLedger) -> Result<(), BoxError> {
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE IF NOT EXISTS {SCHEMA}.support_requests (
            id TEXT PRIMARY KEY,
            device_id TEXT NOT NULL,
            summary TEXT NOT NULL,
            operation_id TEXT NOT NULL,
            ticket TEXT
        )"
    )))
    .execute(ledger.pool())
    .await?;

    let vendor = FakeVendor::start().await;
    let contract = Arc::new(Contract::conservative());
    let policy = BudgetPolicy::default();
    let layer = RecoverableWrite::builder(ledger.clone())
        .contract((*contract).clone())
        .budget(policy.clone())
        .build()
        .expect("a valid configuration")
        .layer();
    let client = Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false) // one retry owner: the recovery engine
        .build_http::<Full<Bytes>>();
    let stack = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(SendOnceGuardLayer::new())
        .service(client);
    // The stack with response bodies collected, as the drills build theirs.
    let writer: Writer = collected(stack);
    let app = App {
        ledger: ledger.clone(),
        writer,
        layer,
        vendor: vendor.base_url(),
    };
    let router = Router::new()
        .route("/support-requests", post(create_support_request))
        .with_state(app);

    // A request that commits: one business row, one operation, one ticket.
    let (status, body) = call(
        &router,
        json!({ "device_id": "E17", "summary": "fan noise" }),
    )
    .await?;
    println!("POST /support-requests -> {status} {body}");
    if status != StatusCode::CREATED || body["ticket"] != "W731" {
        return Err(format!("expected 201 with ticket W731, got {status} {body}").into());
    }
    let op_id = body["operation_id"].as_str().unwrap_or_default().to_owned();
    let row = ledger
        .get(
            &Tenant::new(TENANT),
            &recoverable_write::OperationId::new(op_id),
        )
        .await?
        .ok_or("the operation is in the ledger")?;
    println!(
        "operation {}: {} (generation {}, attempts {}, remote ref {:?})",
        row.operation_id, row.state, row.generation, row.attempts_used, row.remote_ref
    );
    if row.state != State::Succeeded || row.attempts_used != 1 {
        return Err(format!("unexpected operation state {row:?}").into());
    }

    // A request whose transaction rolls back: neither row exists, nothing is sent.
    let (status, body) = call(&router, json!({ "device_id": "E18", "summary": " " })).await?;
    println!("POST /support-requests -> {status} {body}");
    let business = count(
        ledger,
        format!("SELECT count(*) FROM {SCHEMA}.support_requests"),
    )
    .await?;
    let operations = count(
        ledger,
        format!("SELECT count(*) FROM {SCHEMA}.rw_operations"),
    )
    .await?;
    println!(
        "support requests: {business}, operations: {operations}, tickets created: {}, creates \
         received: {}",
        vendor.tickets_created(),
        vendor.posts_received()
    );
    if status != StatusCode::UNPROCESSABLE_ENTITY
        || business != 1
        || operations != 1
        || vendor.tickets_created() != 1
        || vendor.posts_received() != 1
    {
        return Err("the rolled-back request left something behind".into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("RW_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let options = PostgresLedgerOptions::new()
        .schema(SCHEMA)?
        .max_connections(4);
    let ledger = PostgresLedger::connect_with(&url, options).await?;
    let result = run(&ledger).await;
    // A demo: leave nothing behind.
    sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {SCHEMA} CASCADE")))
        .execute(ledger.pool())
        .await?;
    ledger.close().await;
    result?;
    println!("ok: the business row and the operation committed together; one ticket");
    Ok(())
}
