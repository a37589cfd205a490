//! The main job: drill D1 ("lost response") run visibly on a SQLite ledger file.
//!
//! ```text
//! cargo run --example drill            # runs D1
//! cargo run --example drill -- --list  # lists the scenarios
//! ```
//!
//! A fake vendor on 127.0.0.1 creates ticket W731 and then drops the connection before
//! answering. The layer records UNKNOWN and tells the caller not to create it again; the
//! recoverer asks the vendor by operation id and records SUCCEEDED with W731. The vendor's own
//! count of tickets must be exactly 1, or the process exits non-zero.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, Request};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use recoverable_write::ledger::{EvidenceEntry, Ledger};
use recoverable_write::testing::FakeVendor;
use recoverable_write::{
    BudgetPolicy, HttpLookup, Operation, Outcome, RecoverableWriteLayer, Recoverer,
    SendOnceGuardLayer, SqliteLedger, State,
};
use tower::{Service, ServiceBuilder, ServiceExt};

const SCENARIOS: &[(&str, &str)] = &[(
    "d1",
    "lost response: the vendor creates W731, then drops the connection before answering",
)];

#[tokio::main]
async fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    match arg.as_deref() {
        Some("--list") => {
            for (name, what) in SCENARIOS {
                println!("{name:4} {what}");
            }
            ExitCode::SUCCESS
        }
        None | Some("d1") => match d1_lost_response().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("DRILL FAILED: {e}");
                ExitCode::FAILURE
            }
        },
        Some(other) => {
            eprintln!("unknown scenario {other:?}; try --list");
            ExitCode::from(2)
        }
    }
}

async fn d1_lost_response() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("recoverable-write-drill.db");
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&db).await?);
    let vendor = FakeVendor::start().await;
    println!("drill D1: lost response");
    println!("  vendor  {}", vendor.base_url());
    println!("  ledger  {} (SQLite, WAL, synchronous=FULL)", db.display());

    let policy = BudgetPolicy {
        attempt_timeout_ms: 2_000,
        query_backoff_base_ms: 20,
        query_backoff_cap_ms: 200,
        ..BudgetPolicy::default()
    };
    let client = Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http::<Full<Bytes>>();
    let mut service = ServiceBuilder::new()
        .layer(RecoverableWriteLayer::from_arc(ledger.clone()).budget(policy))
        .layer(SendOnceGuardLayer::new())
        .service(client.clone());
    let recoverer = Recoverer::new(ledger.clone()).reconciler(
        HttpLookup::new(
            client,
            format!("{}/operations/{{operation_id}}", vendor.base_url()),
        )
        .tenant_header(HeaderName::from_static("x-tenant")),
    );

    // The user approved "create a fault ticket for device E17" for tenant A.
    let op = Operation::new("tenant-a", "create_ticket", "approved-intent-17");
    let request = || {
        let mut req = Request::post(vendor.url("/tickets"))
            .header("content-type", "application/json")
            .header("x-tenant", "tenant-a")
            .body(Full::new(Bytes::from(format!(
                r#"{{"operation_id":"{}","device_id":"E17","priority":"P2"}}"#,
                op.id()
            ))))
            .expect("valid request");
        req.extensions_mut().insert(op.clone());
        req
    };
    println!("  operation {} (tenant-a, create_ticket)\n", op.id());

    vendor.faults().drop_after_commit(1);
    let mut printed = 0;
    match service.ready().await?.call(request()).await {
        Ok(res) => return Err(format!("expected a lost response, got {}", res.status()).into()),
        Err(e) => {
            printed = print_new(&*ledger, &op, printed).await?;
            println!("  caller <- {e}\n");
        }
    }

    // A second call naming the same operation: answered from the ledger, nothing sent.
    if let Err(e) = service.ready().await?.call(request()).await {
        println!("  caller asks again <- {e} (nothing sent)\n");
    }

    let deadline = Instant::now() + Duration::from_secs(20);
    let row = loop {
        recoverer.run_once().await?;
        printed = print_new(&*ledger, &op, printed).await?;
        let row = ledger
            .get(op.tenant(), op.id())
            .await?
            .ok_or("operation vanished")?;
        if row.state.is_terminal() || row.state == State::ManualReview {
            break row;
        }
        if Instant::now() > deadline {
            return Err(format!("still {} after 20 s", row.state).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let res = service.ready().await?.call(request()).await?;
    let outcome = res
        .extensions()
        .get::<Outcome>()
        .ok_or("response without an outcome")?;
    println!("\n  caller asks again <- {}", outcome.message);
    println!(
        "  outcome as handed to a model: {}",
        serde_json::to_string(outcome)?
    );

    let tickets = vendor.tickets_created();
    println!(
        "\nfinal state: {}  remote reference: {}  attempts: {}  queries: {}",
        row.state,
        row.remote_ref.as_deref().unwrap_or("-"),
        row.attempts_used,
        row.queries_used
    );
    println!("tickets created: {tickets}");
    if row.state != State::Succeeded || tickets != 1 || row.remote_ref.is_none() {
        return Err("expected SUCCEEDED with a remote reference and exactly one ticket".into());
    }
    Ok(())
}

async fn print_new(
    ledger: &dyn Ledger,
    op: &Operation,
    already: usize,
) -> Result<usize, Box<dyn std::error::Error>> {
    let entries = ledger.evidence(op.tenant(), op.id()).await?;
    let origin = entries.first().map_or(0, |e| e.entry.at_ms);
    for EvidenceEntry { entry, .. } in entries.iter().skip(already) {
        let transition = match (entry.from_state, entry.to_state) {
            (Some(a), Some(b)) => format!("{a} -> {b}"),
            (None, Some(b)) => format!("-> {b}"),
            _ => String::new(),
        };
        let evidence = entry
            .evidence
            .as_ref()
            .map(|e| serde_json::to_string(e).unwrap_or_default())
            .unwrap_or_default();
        println!(
            "  [{:>5} ms] {:<20} {:<26} g{:<2} {}{}",
            entry.at_ms - origin,
            entry.kind,
            transition,
            entry.generation.0,
            evidence,
            // The note repeats the evidence's reason when there is evidence.
            match (&entry.evidence, entry.note.as_deref()) {
                (None, Some(n)) => format!(" ({n})"),
                _ => String::new(),
            }
        );
    }
    Ok(entries.len())
}
