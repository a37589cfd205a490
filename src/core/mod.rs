//! The write path every adapter calls: freeze, claim, send once, record, wait.
//!
//! The tower layer ([`crate::layer`]), the reqwest middleware and the recoverer are thin adapters
//! over this module: they hand it a request (or a row) and it decides, with the ledger and the
//! state machine, what may be sent and records what came back. Nothing here knows about any of
//! the adapters.
//!
//! - `shared`: the configuration every adapter shares, and the one place an operation row is
//!   made from a write;
//! - `prepare`: freeze the request, record the operation, claim send rights;
//! - `record`: read, classify and record what an attempt produced, and answer the caller;
//! - `stored`: the responses the ledger keeps and gives back (stored or synthesized);
//! - `wait`: waiting, bounded, for the recovery engine to resolve an operation;
//! - `body`: bounded body reads; `engine`: the state machine's glue to the ledger;
//!   `outgoing`: the exact request an attempt sends; `trace`: the write's and the recovery's
//!   `tracing` spans.

mod body;
pub(crate) mod engine;
pub(crate) mod outgoing;
mod prepare;
mod record;
mod shared;
mod stored;
pub(crate) mod trace;
mod wait;

#[cfg(feature = "reqwest")]
pub(crate) use self::body::collect;
pub(crate) use self::body::collect_limited;
pub(crate) use self::prepare::{AttemptCtx, Step, prepare_inner};
pub(crate) use self::record::{Observed, record_attempt};
pub(crate) use self::shared::Shared;
pub use self::shared::{DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_RESPONSE_BODY, DEFAULT_STORED_BODY};
pub use self::stored::{OUTCOME_HEADER, REMOTE_REF_HEADER, STATUS_CLASS_HEADER, TRUNCATED_HEADER};
pub(crate) use self::wait::await_resolution;
pub(crate) use crate::error::{Error, Outcome};
