//! Guides: how a write is recovered, vendor contracts, lookups, callbacks, operating the
//! queue, retention, clocks, ledgers and testing.
//!
//! These are the pages of the repository's `docs/` directory, included here so that they are
//! on docs.rs beside the API and every snippet in them is compiled as a doctest. Each module is
//! empty: it holds only its page. Start with the README's quick starts, then:
//!
//! - [`recovery`]: what the layer does with each write, the states, the recovery engine and
//!   its budget, manual review;
//! - [`contracts`]: the built-in vendor profiles and contracts files;
//! - [`lookups`]: how the engine asks the vendor what happened;
//! - `callbacks`: vendor webhooks as evidence, and how the operation id reaches the vendor
//!   (features `callbacks` and `axum`);
//! - [`runbook`]: stuck operations, for the people who own the queue;
//! - `operators`: the review page and metrics (feature `review-ui`);
//! - [`retention_and_privacy`]: what is never stored, what is kept and for how long;
//! - [`clocks_and_failure_modes`]: leases, clock skew, and what each failure sends;
//! - `ledgers`: SQLite, memory and PostgreSQL (feature `postgres`);
//! - [`testing`]: drills, the seeded simulation, crashes and properties.
//!
//! The performance journal is `benches/README.md` in the repository.

#[doc = include_str!("../docs/recovery.md")]
pub mod recovery {}

#[doc = include_str!("../docs/contracts.md")]
pub mod contracts {}

#[doc = include_str!("../docs/lookups.md")]
pub mod lookups {}

// The snippets of the guides below need their features; docs.rs builds with all of them.
#[cfg(all(feature = "callbacks", feature = "axum"))]
#[doc = include_str!("../docs/callbacks.md")]
pub mod callbacks {}

#[doc = include_str!("../docs/runbook.md")]
pub mod runbook {}

#[cfg(feature = "review-ui")]
#[doc = include_str!("../docs/operators.md")]
pub mod operators {}

#[doc = include_str!("../docs/retention-and-privacy.md")]
pub mod retention_and_privacy {}

#[doc = include_str!("../docs/clocks-and-failure-modes.md")]
pub mod clocks_and_failure_modes {}

#[cfg(feature = "postgres")]
#[doc = include_str!("../docs/ledgers.md")]
pub mod ledgers {}

#[doc = include_str!("../docs/testing.md")]
pub mod testing {}
