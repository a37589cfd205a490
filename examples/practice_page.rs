//! The review page over a SQLite ledger file, for rehearsing the runbook on the practice ledger
//! (`cargo run --example drill -- --practice practice.db`).
//!
//! ```text
//! cargo run --example practice_page --features review-ui -- practice.db
//! cargo run --example practice_page --features review-ui -- practice.db --tenant tenant-a --addr 127.0.0.1:8080
//! ```
//!
//! It serves `http://ADDR/ops` as the reviewer `practice` (who may resolve): there is no login,
//! so it listens on the loopback address only. An application mounts the page behind its own
//! authentication instead (`docs/operators.md`).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use clap::Parser;
use recoverable_write::ledger::ListingLedger;
use recoverable_write::review_ui::{self, ReviewUiOptions, ReviewerIdentity};
use recoverable_write::{SqliteLedger, Tenant};

#[derive(Parser)]
#[command(about = "Serve the review page over a SQLite ledger file (practice only: no login)")]
struct Args {
    /// The SQLite ledger file (it must exist).
    path: std::path::PathBuf,
    /// The tenant whose operations to show.
    #[arg(long, default_value = "tenant-a")]
    tenant: String,
    /// Where to listen: a loopback address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
}

/// Every request is the practice reviewer's.
async fn practice_reviewer(mut req: Request, next: Next) -> Response {
    req.extensions_mut()
        .insert(ReviewerIdentity::resolver("practice"));
    next.run(req).await
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if !args.addr.ip().is_loopback() {
        eprintln!(
            "{}: listen on a loopback address only (the page has no login here)",
            args.addr
        );
        return ExitCode::from(2);
    }
    if !args.path.is_file() {
        eprintln!(
            "no ledger file at {}: write one with `cargo run --example drill -- --practice {}`",
            args.path.display(),
            args.path.display()
        );
        return ExitCode::from(2);
    }
    let ledger: Arc<dyn ListingLedger> = match SqliteLedger::open(&args.path).await {
        Ok(l) => Arc::new(l),
        Err(e) => {
            eprintln!("cannot open {}: {e}", args.path.display());
            return ExitCode::FAILURE;
        }
    };
    let page = ReviewUiOptions::for_tenant(ledger, Tenant::new(args.tenant.as_str()));
    let app = Router::new()
        .nest_service("/ops", review_ui::router(page))
        .layer(middleware::from_fn(practice_reviewer));
    let listener = match tokio::net::TcpListener::bind(args.addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot listen on {}: {e}", args.addr);
            return ExitCode::FAILURE;
        }
    };
    println!(
        "the review page of {} (tenant {}): http://{}/ops  (Ctrl-C to stop)",
        args.path.display(),
        args.tenant,
        args.addr
    );
    match axum::serve(listener, app).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("the server stopped: {e}");
            ExitCode::FAILURE
        }
    }
}
