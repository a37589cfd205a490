//! Make consequential HTTP writes safe when their result is unknown.
//!
//! When a write (create a ticket, charge a card, launch an instance) times out, the vendor may
//! already have done it: retrying blindly duplicates it, giving up loses it. This crate's
//! [`RecoverableWriteLayer`] wraps any HTTP client service and, for every consequential write:
//!
//! - persists an operation record with a stable, opaque idempotency key **before** the first
//!   byte is sent, bound to a hash of the frozen payload ([`operation`]);
//! - sends it once, and classifies what comes back into evidence (succeeded, processing,
//!   rejected, not executed, unknown, conflict) with a per-target [`Contract`];
//! - suppresses the retries of every layer below it ([`SendOnceGuardLayer`]), so the recovery
//!   engine is the only retry owner, under one persisted [`budget`];
//! - hands unknown outcomes to a [`Reconciler`] run by the [`Recoverer`], which asks the vendor
//!   what really happened before anything is sent again;
//! - keeps the ledger bounded ([`retention`]): finished operations lose their bodies after one
//!   clock and their rows after another, never before a repeat of the intent could be safely
//!   forgotten, and never while they are unfinished.
//!
//! The heart is a pure [state machine](state) applied to a [`Ledger`] with compare-and-swap.
//!
//! # Example
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use recoverable_write::{Operation, RecoverableWrite, SendOnceGuardLayer, SqliteLedger};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // One configuration: the layer, the recoverer, the reviews all share it.
//! let rw = RecoverableWrite::builder(SqliteLedger::open("ops.db").await?).build()?;
//! let _recovery = rw.recoverer().spawn();
//! let client = Client::builder(TokioExecutor::new())
//!     .retry_canceled_requests(false)
//!     .build_http::<Full<Bytes>>();
//! let service = ServiceBuilder::new()
//!     .layer(rw.layer())
//!     .layer(SendOnceGuardLayer::new())
//!     .service(client);
//!
//! let mut req = http::Request::post("https://vendor.example/tickets")
//!     .body(Full::new(Bytes::from(r#"{"device_id":"E17"}"#)))?;
//! req.extensions_mut()
//!     .insert(Operation::new("tenant-a", "create_ticket", "intent-17"));
//! match service.oneshot(req).await {
//!     Ok(res) => println!("done: {:?}", res.extensions().get::<recoverable_write::Outcome>()),
//!     Err(e) => println!("{e}"), // "op-… is being verified; do not create it again"
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Guides
//!
//! How a write is recovered, vendor contracts, lookups, callbacks, the runbook for stuck
//! operations, retention, clocks and failure modes, ledgers and testing: the [`guide`] module.
//!
//! # Features
//!
//! - `sqlite` (default): [`SqliteLedger`], the embedded durable ledger.
//! - `postgres`: `PostgresLedger`, the shared ledger for many workers, with the outbox.
//! - `test-util`: [`testing::FakeVendor`], the drill harness and the ledger conformance suite.
//! - `reqwest`: the reqwest-middleware adapter ([`reqwest`](mod@crate::reqwest)) and the reqwest
//!   transport for recovery.
//! - `axum`: `IntoResponse` for [`Outcome`] and [`Error`] ([`responses`]).
//! - `cli`: the operators' command line, the `recoverable-write` binary (not library API), on a
//!   SQLite file (with `sqlite`) or a PostgreSQL URL (with `postgres`:
//!   `cargo install recoverable-write --features cli,postgres`); see the
//!   [runbook](guide::runbook).
//! - `review-ui`: the embeddable review page, an axum `Router` (`review_ui`).
//! - `callbacks`: verified, deduplicated vendor callbacks as evidence (`callbacks`).
//! - `metrics` (default): counters, histograms and gauges through the `metrics` facade.
//!
//! # Naming
//!
//! One style, as in tower and tower-http: builders and layers are configured by value with
//! setters named after what they set (`contracts(..)`, `budget(..)`, `Contract::lookup(..)`,
//! `StripeSignature::secret(..)`), and read with getters of the same plain kind on the built
//! value (`Handle::ledger()`, `Handle::contracts()`). The one `with_` left is
//! [`Operation::with_id`], where a getter of the same name ([`Operation::id`]) exists.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod authorize;
pub mod budget;
pub mod builder;
#[cfg(feature = "callbacks")]
pub mod callbacks;
pub mod clock;
pub mod contract;
pub mod contradiction;
mod core;
mod encoding;
mod error;
pub mod evidence;
pub mod guard;
pub mod guide;
mod inline_str;
pub mod layer;
pub mod ledger;
mod length_prefixed;
pub mod notify;
pub mod operation;
pub mod operator;
pub mod reconcile;
mod redact;
#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "axum")]
pub mod responses;
pub mod retention;
pub mod review;
#[cfg(feature = "review-ui")]
pub mod review_ui;
#[cfg(any(feature = "callbacks", feature = "review-ui"))]
mod secret;
pub mod state;
#[cfg(feature = "test-util")]
pub mod testing;
mod text;
mod xml;

pub use authorize::{Access, Authorizer, Denied};
pub use budget::{BudgetBound, BudgetError, BudgetPolicy, ReplayLimiter};
pub use builder::{BuildError, Builder, Handle};
pub use contract::{Contract, Contracts};
pub use error::{DeniedFirstSend, Error, Outcome};
pub use evidence::{ConflictKind, Evidence};
pub use guard::{SendOnceGuard, SendOnceGuardLayer};
pub use layer::{RecoverableWrite, RecoverableWriteLayer, ResponseBody};
#[cfg(feature = "postgres")]
pub use ledger::PostgresLedger;
#[cfg(feature = "sqlite")]
pub use ledger::SqliteLedger;
pub use ledger::{
    CallbackLedger, FullLedger, Ledger, ListingLedger, MemoryLedger, RetentionLedger,
};
pub use notify::{Notice, Notifier};
pub use operation::{AttemptId, Generation, IdempotencyKey, Operation, OperationId, Tenant};
pub use reconcile::{HttpLookup, ListLookup, Reconciler, Recoverer};
pub use review::{HandoffPackage, Reviews};
#[cfg(any(feature = "callbacks", feature = "review-ui"))]
pub use secret::{KeyError, Secret};
pub use state::State;

/// A type-erased error, as used across the tower ecosystem: `tower::BoxError`, re-exported so
/// that signatures read the same here and in tower.
pub use tower::BoxError;

/// The README's code blocks, compiled as doctests so the quick starts stay true. They are
/// complete programs (no hidden lines, so they read the same on GitHub and crates.io), and the
/// reqwest and axum ones need those features: the README is tested when all three are on.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "sqlite", feature = "reqwest", feature = "axum"))]
pub struct ReadmeDoctests;
