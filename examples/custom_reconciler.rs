//! A custom [`Reconciler`] for a vendor whose only lookup is a search: find the ticket a lost
//! create made by listing the tenant's tickets and looking for the operation's reference.
//!
//! ```text
//! cargo run --example custom_reconciler
//! ```
//!
//! The fake vendor commits a ticket and drops the connection before answering (a lost
//! response). The layer records the operation as `UNKNOWN`; the recovery engine, given
//! [`TicketSearch`] for the operation's contract, runs passes until the search identifies the
//! ticket and the operation is `SUCCEEDED`. The example prints the evidence log, what the search
//! says about look-alike operations, and `tickets created: 1`, and exits non-zero otherwise.
//!
//! # Why a search is weaker than a lookup by id
//!
//! `GET /operations/{id}` asks the vendor's record of *this* operation. A list or search
//! (`GET /tickets`, Stripe's search API, EC2's `DescribeInstances` filtered by client token)
//! asks an index, and indexes lag:
//!
//! - **Eventual consistency.** A search may not show an object for seconds (Stripe search) or
//!   minutes (EC2) after the write committed. A miss inside that window is not even weak
//!   evidence. The contract says how long the window is with [`Contract::settle_secs`];
//!   [`TicketSearch`] reads it and words its answer accordingly. Either way, a miss is
//!   [`Evidence::Unknown`], never [`Evidence::NotExecuted`]: an index that does not show an
//!   object has not proven that it does not exist. Only the budget's window then ends the
//!   search (in manual review, never in a resend).
//! - **Identification.** A list answers with many objects. Only an item that carries this
//!   operation's reference counts, and only if its business fields (here the device) match the
//!   frozen request too: a reference copied onto the wrong ticket must not "confirm" it. Two
//!   items carrying the reference are a duplicate a person has to look at, not a success.
//! - **Pagination and filters.** A real list pages; a reconciler must follow pages or filter on
//!   the reference server-side. A page that does not contain the item proves nothing.

use std::error::Error as StdError;
use std::fmt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use recoverable_write::RecoverableWrite;
use recoverable_write::contract::Lookup;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::{BoxFuture, Ledger, OperationRecord};
use recoverable_write::testing::FakeVendor;
use recoverable_write::{
    Contract, Error, Evidence, MemoryLedger, Operation, OperationId, Reconciler,
    SendOnceGuardLayer, State,
};
use serde_json::{Value, json};
use tower::{ServiceBuilder, ServiceExt};

type BoxError = Box<dyn StdError + Send + Sync>;
type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Largest search answer read.
const MAX_ANSWER: usize = 1024 * 1024;

/// Looks an operation up with `GET {list_url}` (the tenant's tickets, tenant in `x-tenant`) and
/// identifies the ticket whose `operation_id` is the operation's id and whose `device_id` is the
/// one in the frozen request.
struct TicketSearch {
    client: HttpClient,
    list_url: String,
    /// How long after the write the list may still miss it: the contract's `settle_secs`.
    settle: Duration,
    timeout: Duration,
}

impl fmt::Debug for TicketSearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketSearch")
            .field("list_url", &self.list_url)
            .field("settle", &self.settle)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl TicketSearch {
    /// A search for operations made under `contract`, reading its settle time.
    fn for_contract(client: HttpClient, list_url: impl Into<String>, contract: &Contract) -> Self {
        Self {
            client,
            list_url: list_url.into(),
            settle: Duration::from_secs(contract.settle_secs.unwrap_or(0)),
            timeout: Duration::from_secs(5),
        }
    }

    /// Whether the list has had time to show a write made when `op` was created.
    fn settled(&self, op: &OperationRecord) -> bool {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        now_ms - op.created_ms >= self.settle.as_millis() as i64
    }

    async fn list(&self, op: &OperationRecord) -> Result<Value, BoxError> {
        // Queries only: a reconciler never sends a write.
        let req = Request::get(self.list_url.as_str())
            .header("x-tenant", op.tenant.as_str())
            .header(header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))?;
        let res = self.client.request(req).await?;
        let status = res.status();
        if !status.is_success() {
            return Err(format!("ticket search answered {status}").into());
        }
        let body = Limited::new(res.into_body(), MAX_ANSWER)
            .collect()
            .await?
            .to_bytes();
        Ok(serde_json::from_slice(&body)?)
    }
}

impl Reconciler for TicketSearch {
    fn reconcile<'a>(&'a self, op: &'a OperationRecord) -> BoxFuture<'a, Evidence> {
        Box::pin(async move {
            let settled = self.settled(op);
            match tokio::time::timeout(self.timeout, self.list(op)).await {
                Ok(Ok(answer)) => identify(op, &answer, settled),
                // An HTTP error, a refused connection, a body that is not JSON: nothing is
                // learnt about the operation.
                Ok(Err(e)) => Evidence::unknown(format!("ticket search failed: {e}")),
                Err(_) => Evidence::unknown("ticket search timed out"),
            }
        })
    }
}

/// Judges one search answer. Pure, so each rule is easy to read (and to test).
fn identify(op: &OperationRecord, answer: &Value, settled: bool) -> Evidence {
    let id = op.operation_id.as_str();
    let Some(device) = frozen_field(op, "/device_id") else {
        return Evidence::unknown(
            "the frozen request has no device_id: no ticket can be positively identified",
        );
    };
    let Some(items) = answer.pointer("/tickets").and_then(Value::as_array) else {
        return Evidence::unknown("ticket search answer has no /tickets list");
    };
    let named: Vec<&Value> = items
        .iter()
        .filter(|t| t.pointer("/operation_id").and_then(Value::as_str) == Some(id))
        .collect();
    let ticket = match named.as_slice() {
        [] if !settled => {
            return Evidence::unknown(format!(
                "no ticket names {id} yet, inside the search's settle time: no evidence at all"
            ));
        }
        [] => {
            return Evidence::unknown(format!(
                "no ticket names {id}: a search miss is weak evidence, never proof that it was not created"
            ));
        }
        [one] => *one,
        many => {
            return Evidence::unknown(format!(
                "{} tickets name {id}: a duplicate for a person to look at, not a success",
                many.len()
            ));
        }
    };
    let listed_device = ticket.pointer("/device_id").and_then(Value::as_str);
    if listed_device != Some(device.as_str()) {
        return Evidence::unknown(format!(
            "a ticket names {id} but for device {}, not {device}: not positively identified",
            listed_device.unwrap_or("(none)")
        ));
    }
    let Some(ticket_id) = ticket.pointer("/id").and_then(Value::as_str) else {
        return Evidence::unknown(format!("the ticket naming {id} has no id"));
    };
    match ticket.pointer("/status").and_then(Value::as_str) {
        Some("SUCCEEDED") => Evidence::Succeeded {
            remote_ref: Some(ticket_id.to_owned()),
        },
        Some("PROCESSING") => Evidence::processing(),
        Some("REJECTED") => Evidence::Rejected {
            reason: format!("ticket {ticket_id} is listed as REJECTED"),
        },
        other => Evidence::unknown(format!("ticket {ticket_id} has status {other:?}")),
    }
}

/// A string field of the frozen request body (the exact bytes every attempt sent).
fn frozen_field(op: &OperationRecord, pointer: &str) -> Option<String> {
    let body: Value = serde_json::from_slice(&op.request.body).ok()?;
    body.pointer(pointer)?.as_str().map(str::to_owned)
}

/// Log what `RUST_LOG` asks for (`recoverable_write=info`, `debug`, ...), else only warnings.
fn init_tracing() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::WARN));
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer())
        .with(filter)
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let vendor = FakeVendor::builder().start().await?;
    let ledger: Arc<dyn FullLedger> = Arc::new(MemoryLedger::new());
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http();

    // The contract names the lookup the vendor offers. The fake vendor's list is consistent as
    // soon as the create commits, so `settle_secs` stays unset; for a search index that lags,
    // set it (`.settle_secs(60)`) and the reconciler waits that long before a miss counts.
    let contract = Contract::conservative()
        .named("fake-tickets")
        .lookup(Lookup::ListByReference {
            url_template: "/tickets".into(),
            items_pointer: Some("/tickets".into()),
            reference_pointer: Some("/operation_id".into()),
            reference: "{operation_id}".into(),
            answer: Default::default(),
        });
    contract.validate()?;

    let rw = RecoverableWrite::builder(ledger.clone())
        .contract(contract.clone())
        .build()?;
    let layer = rw.layer();
    let guard = SendOnceGuardLayer::new();
    let writer = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(guard.clone())
        .service(client.clone());
    let recoverer = rw
        .recoverer()
        .reconciler_for(
            contract.name.clone(),
            TicketSearch::for_contract(client.clone(), vendor.url("/tickets"), &contract),
        )
        .replay_through(ServiceBuilder::new().layer(guard).service(client));

    // 1. A create whose response is lost after the vendor committed it.
    let op = Operation::new("tenant-a", "create_ticket", "support-request-4711");
    let body = json!({ "operation_id": op.id(), "device_id": "E17", "priority": "P2" });
    let mut req = Request::post(vendor.url("/tickets"))
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-tenant", op.tenant().as_str())
        .body(Full::new(Bytes::from(body.to_string())))?;
    req.extensions_mut().insert(op.clone());
    vendor.faults().drop_after_commit(1);
    println!("create ticket for device E17 ({})", op.id());
    match writer.oneshot(req).await {
        Err(e @ Error::Unknown { .. }) => println!("  -> {e}"),
        Err(e) => return Err(format!("expected an unknown outcome, got: {e}").into()),
        Ok(res) => return Err(format!("expected a lost response, got {}", res.status()).into()),
    }

    // 2. Recovery passes until the search identifies the ticket.
    if let Some(lookup) = &contract.lookup {
        println!("\nrecovery, contract {}: {lookup}", contract.name);
    }
    let row = resolve(&recoverer, &*ledger, &op).await?;

    println!("\nevidence log of {}:", op.id());
    for e in ledger.evidence(op.tenant(), op.id()).await? {
        let entry = e.entry;
        let evidence = entry
            .evidence
            .as_ref()
            .map(|ev| serde_json::to_string(ev).unwrap_or_default())
            .unwrap_or_default();
        println!(
            "  {:>2} {:<20} {:>11} -> {:<11} {evidence}",
            e.seq,
            entry.kind,
            entry.from_state.map_or("", State::as_str),
            entry.to_state.map_or("", State::as_str),
        );
    }
    println!(
        "\n{}: {} {}",
        row.operation_id,
        row.state,
        row.remote_ref.as_deref().unwrap_or("-")
    );

    // 3. What the same search says about look-alikes: never a success, never "not executed".
    println!("\nthe search on look-alike operations:");
    let mut other_device = row.clone();
    std::sync::Arc::make_mut(&mut other_device.request).body = Bytes::from(
        json!({ "operation_id": op.id(), "device_id": "E18", "priority": "P2" }).to_string(),
    );
    let mut never_sent = row.clone();
    never_sent.operation_id = OperationId::new("op-never-sent");
    let search = TicketSearch::for_contract(
        Client::builder(TokioExecutor::new()).build_http(),
        vendor.url("/tickets"),
        &contract,
    );
    for (what, record) in [
        ("same reference, device E18", &other_device),
        ("a reference the vendor never saw", &never_sent),
    ] {
        let evidence = search.reconcile(record).await;
        println!("  {what}: {}", serde_json::to_string(&evidence)?);
        if !matches!(evidence, Evidence::Unknown { .. }) {
            return Err(format!("{what}: expected unknown evidence, got {evidence:?}").into());
        }
    }

    let created = vendor.tickets_created();
    println!("\ntickets created: {created}");
    if row.state != State::Succeeded || row.remote_ref.as_deref() != Some("W731") || created != 1 {
        return Err("expected SUCCEEDED with W731 and exactly one ticket".into());
    }
    Ok(())
}

/// Runs recovery passes until the operation is resolved (bounded), printing what each did.
async fn resolve(
    recoverer: &recoverable_write::Recoverer,
    ledger: &dyn Ledger,
    op: &Operation,
) -> Result<OperationRecord, BoxError> {
    for pass in 1..=200 {
        let report = recoverer.run_once().await?;
        if report.claimed > 0 {
            println!(
                "  pass {pass}: claimed {}, lookups {}, resolved {}, pending {}",
                report.claimed, report.lookups, report.resolved, report.pending
            );
        }
        let row = ledger
            .get(op.tenant(), op.id())
            .await?
            .ok_or("the operation vanished")?;
        match row.state {
            State::Succeeded => return Ok(row),
            State::Unknown | State::Processing | State::InFlight => {}
            other => return Err(format!("operation ended {other}").into()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the operation was not resolved within 10 s".into())
}
