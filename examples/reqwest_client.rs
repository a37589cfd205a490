//! An existing reqwest client, made recoverable with reqwest-middleware.
//!
//! ```text
//! cargo run --example reqwest_client --features reqwest
//! ```
//!
//! The chain keeps reqwest-retry (as many codebases do) but wraps it: the recoverable-write
//! middleware outermost, the send-once guard innermost. The fake vendor loses the response to a
//! ticket create; the caller is told to wait; the recovery engine (sharing the layer's ledger)
//! looks the operation up and records SUCCEEDED. Exits non-zero unless exactly one ticket exists.

use std::time::Duration;

use recoverable_write::State;
use recoverable_write::reqwest::{
    RecoverableWriteMiddleware, RecoverableWriteStrategy, SendOnceMiddleware, client_builder,
    outcome,
};
use recoverable_write::testing::drill::{CREDENTIAL, Drill, new_op, ticket_body};
use reqwest_middleware::ClientBuilder;
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The fake vendor, a SQLite ledger file, the layer and its recovery engine.
    let drill = Drill::start().await;
    // client_builder(): redirects and reqwest's own retries off (a followed 307 re-sends the write).
    let client = ClientBuilder::new(client_builder().build()?)
        .with(RecoverableWriteMiddleware::new(&drill.layer))
        .with(RetryTransientMiddleware::new_with_policy_and_strategy(
            ExponentialBackoff::builder().build_with_max_retries(3),
            RecoverableWriteStrategy::new(),
        ))
        .with(SendOnceMiddleware::new())
        .build();

    let op = new_op("approved-intent-17");
    drill.vendor.faults().drop_after_commit(1);
    let sent = client
        .post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .bearer_auth(CREDENTIAL.trim_start_matches("Bearer "))
        .with_extension(op.clone())
        .body(ticket_body(&op, "E17"))
        .send()
        .await;
    match &sent {
        Ok(res) => return Err(format!("expected a lost response, got {}", res.status()).into()),
        Err(e) => println!(
            "caller <- {}",
            outcome(e).map_or_else(|| e.to_string(), |o| o.message.clone())
        ),
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let row = loop {
        drill.recoverer.run_once().await?;
        let row = drill.record(op.id()).await;
        if row.state.is_terminal() || row.state == State::ManualReview {
            break row;
        }
        if tokio::time::Instant::now() > deadline {
            return Err("not resolved in 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "recovered: {} {}",
        row.state,
        row.remote_ref.as_deref().unwrap_or("-")
    );

    // Asking again through reqwest: answered from the ledger, nothing sent.
    let res = client
        .post(drill.vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .with_extension(op.clone())
        .body(ticket_body(&op, "E17"))
        .send()
        .await?;
    println!(
        "caller asks again <- {} {}",
        res.status(),
        res.text().await?
    );
    let tickets = drill.vendor.tickets_created();
    println!(
        "sends seen by the vendor: {}",
        drill.vendor.posts_received()
    );
    println!("tickets created: {tickets}");
    if row.state != State::Succeeded || tickets != 1 {
        return Err("expected SUCCEEDED and exactly one ticket".into());
    }
    Ok(())
}
