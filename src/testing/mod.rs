//! A fake ticket vendor on real TCP, with fault injection, for drills (feature `test-util`).
//!
//! Drills prove recovery against the vendor's own count of side effects, not against HTTP logs:
//! [`FakeVendor::tickets_created`] is that count, kept exactly under a mutex. The vendor speaks
//! the ticket API of seed 000 with real idempotency semantics (Stripe v1 stored responses, the
//! IETF draft's 400/409/422 codes, tenant-scoped operation lookups), and [`Faults`] makes it
//! misbehave in the ways the drills need: lost responses after commit, gateway errors, cached
//! 500s, slow or empty lookups, PROCESSING, refusals before execution, expired keys, cleaned
//! operation records, refused connections.
//!
//! ```no_run
//! use recoverable_write::testing::FakeVendor;
//!
//! # async fn drill() {
//! let vendor = FakeVendor::start().await;
//! // The next create commits W731 and then drops the connection without answering.
//! vendor.faults().drop_after_commit(1);
//! // ... run the write through the layer against vendor.url("/tickets") ...
//! assert_eq!(vendor.tickets_created(), 1);
//! # }
//! ```
//!
//! # Differences from a real vendor
//!
//! - Everything lives in memory; time is tokio's clock, so retention follows
//!   `tokio::time::pause`/`advance` too.
//! - Faults are deterministic and counted, never random.
//! - HTTP/1 only.

#[cfg(feature = "callbacks")]
pub mod callbacks;
#[cfg(feature = "sqlite")]
pub mod drill;
mod faults;
mod forwarding;
#[cfg(feature = "sqlite")]
pub mod practice;
mod server;
mod store;
mod vendor;

pub use faults::{Faults, Rejection};
pub use forwarding::{ForwardingLedger, LedgerCall};
pub use store::{OperationStatus, SeenRequest, Ticket};
pub use vendor::{FakeVendor, FakeVendorBuilder};
