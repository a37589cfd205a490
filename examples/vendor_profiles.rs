//! Vendor contracts as configuration: load `examples/contracts.toml`, print which contract each
//! route gets, then send one write through the layer with the route for the fake vendor.
//!
//! ```text
//! cargo run --example vendor_profiles                 # uses examples/contracts.toml
//! cargo run --example vendor_profiles -- other.toml   # or another file (.toml or .json)
//! ```
//!
//! No network: the fake vendor listens on 127.0.0.1, the ledger is a SQLite file in a temporary
//! directory. The process exits non-zero if the file does not load, the write does not succeed,
//! or the vendor did not create exactly one ticket.

use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use recoverable_write::RecoverableWrite;
use recoverable_write::contract::{Contract, Contracts};
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::Ledger;
use recoverable_write::testing::FakeVendor;
use recoverable_write::{Operation, Outcome, SendOnceGuardLayer, SqliteLedger, State};
use tower::{Service, ServiceBuilder, ServiceExt};

const DEFAULT_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/contracts.toml");

#[tokio::main]
async fn main() -> ExitCode {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| DEFAULT_FILE.to_owned());
    let contracts = match Contracts::load(&path) {
        Ok(c) => c,
        Err(e) => {
            // Names the file, the key and what is wrong.
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    print_table(&path, &contracts);
    match one_write(contracts).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print_table(path: &str, contracts: &Contracts) {
    println!("contracts from {path}\n");
    println!(
        "{:<44} {:<20} {:<34} {:>9} {:<22} lookup",
        "route", "contract", "key", "retention", "replay"
    );
    let rows = contracts
        .routes()
        .map(|(t, c)| (t.to_string(), c.as_ref()))
        .chain(std::iter::once((
            "(default)".to_owned(),
            contracts.default_contract().as_ref(),
        )));
    for (route, c) in rows {
        println!(
            "{:<44} {:<20} {:<34} {:>9} {:<22} {}",
            route,
            c.name,
            c.key.to_string(),
            retention(c),
            c.replay.as_str(),
            lookup(c),
        );
    }
    println!();
}

fn retention(c: &Contract) -> String {
    match c.retention_secs {
        None => "unknown".to_owned(),
        Some(s) if s % 86_400 == 0 => format!("{} d", s / 86_400),
        Some(s) if s % 3_600 == 0 => format!("{} h", s / 3_600),
        Some(s) => format!("{s} s"),
    }
}

fn lookup(c: &Contract) -> String {
    let base = c
        .lookup
        .as_ref()
        .map_or_else(|| "not described".to_owned(), ToString::to_string);
    match c.settle_secs {
        Some(s) => format!("{base} (settles in {s} s)"),
        None => base,
    }
}

async fn one_write(contracts: Contracts) -> Result<(), Box<dyn std::error::Error>> {
    let vendor = FakeVendor::start().await;
    let dir = tempfile::tempdir()?;
    let ledger: Arc<dyn FullLedger> =
        Arc::new(SqliteLedger::open(dir.path().join("vendor-profiles.db")).await?);

    let url = vendor.url("/tickets");
    let chosen = contracts.select(&Method::POST, &url.parse()?).clone();
    println!("POST {url}");
    println!(
        "  contract {} (key: {}, replay: {})",
        chosen.name,
        chosen.key,
        chosen.replay.as_str()
    );
    if chosen.name == "default" {
        return Err("no route of the file matches the fake vendor (127.0.0.1 /tickets)".into());
    }

    let client = Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false) // one retry owner: the recovery engine
        .build_http::<Full<Bytes>>();
    let mut service = ServiceBuilder::new()
        .layer(
            RecoverableWrite::builder(ledger.clone())
                .contracts(contracts)
                .build()
                .expect("a valid configuration")
                .layer(),
        )
        .layer(SendOnceGuardLayer::new())
        .service(client);

    let op = Operation::new("tenant-a", "create_ticket", "intent-vendor-profiles");
    let body = format!(
        r#"{{"operation_id":"{}","device_id":"E17","priority":"P2","note":"fan noise"}}"#,
        op.id()
    );
    let mut req = Request::post(&url)
        .header("content-type", "application/json")
        .header("x-tenant", "tenant-a")
        .body(Full::new(Bytes::from(body)))?;
    req.extensions_mut().insert(op.clone());

    let res = service.ready().await?.call(req).await?;
    let outcome = res
        .extensions()
        .get::<Outcome>()
        .cloned()
        .ok_or("the response carries no Outcome")?;
    let seen = vendor.requests();
    let key = seen
        .first()
        .and_then(|r| r.idempotency_key.clone())
        .unwrap_or_default();
    println!("  status   {}", res.status());
    println!("  outcome  {} ({})", outcome.state, outcome.message);
    println!(
        "  ticket   {}",
        outcome.remote_ref.as_deref().unwrap_or("-")
    );
    println!("  key sent Idempotency-Key: {key}");

    let row = ledger
        .get(op.tenant(), op.id())
        .await?
        .ok_or("the operation is not in the ledger")?;
    println!(
        "  ledger   {} contract {} ({}…)",
        row.state,
        row.contract.name,
        &row.contract.hash[..12.min(row.contract.hash.len())]
    );

    if outcome.state != State::Succeeded || row.state != State::Succeeded {
        return Err(format!("expected SUCCEEDED, got {}", outcome.state).into());
    }
    if vendor.tickets_created() != 1 {
        return Err(format!(
            "the vendor created {} tickets, expected 1",
            vendor.tickets_created()
        )
        .into());
    }
    if !key.starts_with('"') {
        return Err("the ietf-draft contract should send a quoted key".into());
    }
    println!("\nok: one write, one ticket, contract frozen on the row");
    Ok(())
}
