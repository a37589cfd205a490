//! Retention: the ledger stays bounded without forgetting what it must remember.
//!
//! Every operation keeps its frozen request (up to the request body limit), its stored response
//! and its evidence log. Kept forever, they fill the disk and hold business data (payloads that
//! may carry personal data) far longer than anyone needs it. Deleted too early, they cost a
//! duplicate: a caller repeating an intent the ledger has forgotten gets a new operation with a
//! new key, and the vendor creates the write again. So retention has two clocks, both started
//! when an operation **finished** (`SUCCEEDED` or `REJECTED`):
//!
//! | stage | default | what goes | what stays |
//! |---|---|---|---|
//! | details ([`Retention::details`], contract `keep_details_secs`) | 7 days | the frozen request's headers and body, the stored response, the reason, the evidence details (observations and notes) | the identity (tenant, operation id, action, intent, idempotency key, payload hash, method and URL), the final state, the remote reference, the times, and each evidence entry's kind, states and time |
//! | identity ([`Retention::identity`], contract `keep_identity_secs`) | 35 days, and at least the vendor's key retention | the row and its evidence log | nothing |
//!
//! After the details stage a repeat call still gets its outcome (the documented synthesized
//! answer, [`crate::responses`]) and sends nothing, and a repeat with another payload is still
//! a [`Conflict`](crate::Error::Conflict): the payload hash is kept. After the identity stage a
//! repeat is a new operation: **the identity clock is the window within which a repeated intent
//! is guaranteed not to be sent again.**
//!
//! Operations in any other state (`PREPARED`, `IN_FLIGHT`, `UNKNOWN`, `PROCESSING`,
//! `RETRY_READY`, `MANUAL_REVIEW`) are never purged, whatever their age; nor are rows the store
//! quarantined as undecodable. Vendor callback records have their own clocks: the dedupe records
//! of delivered events ([`Retention::callback_deliveries`], default 35 days: keep them longer
//! than any vendor redelivers) and quarantined events ([`Retention::quarantined_callbacks`],
//! default 90 days).
//!
//! Configuration that sets an identity clock shorter than the details clock, or shorter than
//! a vendor's documented key retention, is refused by
//! [`Builder::build`](crate::Builder::build).
//!
//! Purging runs in bounded batches through partial indexes (see
//! [`RetentionLedger::purge`](crate::RetentionLedger::purge)): the [`Recoverer`](crate::Recoverer) runs it every
//! [`Retention::interval`] (default 10 minutes) in a task of its own, and [`Purger::run`] runs
//! it on demand; [`Purger::preview`] counts what a run would drop. [`Purger::plan`] counts it
//! contract by contract with the clocks each one gets, for a person to read before
//! [`Purger::run_plan`] drops what was due at the plan's time (the command line's `purge`).
//! [`Purger::erase_tenant`] and [`Purger::erase_details`] are the right-to-erasure path.
//!
//! ```
//! use std::time::Duration;
//! use recoverable_write::retention::Retention;
//! use recoverable_write::{MemoryLedger, RecoverableWrite};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = RecoverableWrite::builder(MemoryLedger::new())
//!     .retention(
//!         Retention::new()
//!             .details(Duration::from_secs(24 * 3600))
//!             .identity(Duration::from_secs(40 * 24 * 3600)),
//!     )
//!     .build()?;
//! let purger = config.purger();
//! let preview = purger.preview().await?; // what a run would drop; nothing changes
//! let done = purger.run().await?;
//! println!("{} rows slimmed, {} deleted", done.details.rows, done.identity.rows);
//! # let _ = preview;
//! # Ok(()) }
//! ```

// Here: the module's face. Beside it: `settings` (`Retention`, its clocks and checks), `purger`
// (`Purger` and what it tells), `pass` (one purge pass in bounded batches), `erase` (the right
// to erasure), `report` (what a purge did or would do) and `error`.

mod erase;
mod error;
mod pass;
mod purger;
mod report;
mod settings;

pub use self::error::RetentionError;
pub(crate) use self::pass::Purges;
pub use self::purger::Purger;
pub use self::report::{ContractPlan, PurgePlan, PurgeReport, PurgedCount, RetentionDates};
pub use self::settings::{
    Clocks, DEFAULT_KEEP_CALLBACK_DELIVERIES, DEFAULT_KEEP_DETAILS, DEFAULT_KEEP_IDENTITY,
    DEFAULT_KEEP_QUARANTINED_CALLBACKS, Retention,
};
