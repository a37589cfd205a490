//! Reconciliation: asking the vendor what really happened before anything is sent again.
//!
//! A [`Reconciler`] turns an operation record into [`Evidence`] about the operation itself. The
//! [`Recoverer`] is the recovery engine: it sweeps attempts whose lease expired to `UNKNOWN`,
//! claims due `UNKNOWN`/`PROCESSING` operations with a lease and a new generation, runs the
//! reconciler, and applies what it learns through the state machine.
//!
//! Built-in reconcilers: [`HttpLookup`], a `GET` by URL template such as
//! `https://vendor.example/operations/{operation_id}`, and [`ListLookup`], a list or search
//! filtered by a reference the client attached, such as
//! `https://vendor.example/tickets?operation_id={operation_id}`. A contract's `lookup` builds
//! either (see [`Builder`](crate::Builder)).

mod answer;
mod beat;
pub mod health;
mod http_lookup;
mod list_lookup;
mod pass;
mod recover;
mod recoverer;
mod replay;
mod settle;
mod transport;
mod worker;

pub use self::health::EngineHealth;
pub use self::http_lookup::{HttpLookup, LookupStatuses};
pub use self::list_lookup::ListLookup;
pub use self::recoverer::{Recoverer, RecoveryReport};
pub use self::worker::RecovererHandle;
pub use crate::contract::NotFound;
/// The stack lookups and replays go through, boxed.
pub(crate) type Transport = self::transport::ReplayService;
pub(crate) use self::http_lookup::{fill, lookup_url};
pub(crate) use self::transport::boxed_transport;

use crate::evidence::Evidence;
use crate::ledger::{BoxFuture, OperationRecord};

/// Asks the vendor about one operation.
///
/// Given the operation record (the frozen request without credentials, the idempotency key, the
/// tenant), return evidence about the operation itself:
/// - [`Evidence::Succeeded`] only when the answer positively identifies this operation (its
///   reference or key) — an empty 2xx proves nothing;
/// - [`Evidence::Processing`] with the vendor's interval;
/// - [`Evidence::Rejected`] for an authoritative refusal of the operation;
/// - [`Evidence::NotExecuted`] only when the vendor's authoritative record says it never ran;
/// - [`Evidence::Unknown`] for everything else, including "not found": a 404 is weak evidence
///   (replica lag, a wrong tenant, a record cleaned up, a request still in flight).
///
/// Implementations must not send writes: queries only.
///
/// ```
/// use recoverable_write::{Evidence, Reconciler};
/// use recoverable_write::ledger::{BoxFuture, OperationRecord};
///
/// #[derive(Debug)]
/// struct AskTheHuman;
///
/// impl Reconciler for AskTheHuman {
///     fn reconcile<'a>(&'a self, _op: &'a OperationRecord) -> BoxFuture<'a, Evidence> {
///         Box::pin(async { Evidence::unknown("no lookup available") })
///     }
/// }
/// ```
pub trait Reconciler: Send + Sync + std::fmt::Debug + 'static {
    /// Looks the operation up.
    fn reconcile<'a>(&'a self, op: &'a OperationRecord) -> BoxFuture<'a, Evidence>;

    /// [`reconcile`](Self::reconcile), with the vendor's answer for the evidence log: the
    /// recovery engine stores it as the note of the `lookup` entry, and the review page and the
    /// CLI's `show` display it. Only for an answer that resolves the operation, bounded and
    /// without secrets: the built-in lookups keep at most [`HttpLookup::MAX_KEPT_ANSWER`] bytes,
    /// with the values of the contract's secret response fields and secret body fields replaced
    /// by `[redacted]`; an implementation of your own must redact what it returns itself.
    /// Provided: no answer kept.
    fn reconcile_with_answer<'a>(
        &'a self,
        op: &'a OperationRecord,
    ) -> BoxFuture<'a, (Evidence, Option<String>)> {
        Box::pin(async move { (self.reconcile(op).await, None) })
    }
}

impl<R: Reconciler + ?Sized> Reconciler for std::sync::Arc<R> {
    fn reconcile<'a>(&'a self, op: &'a OperationRecord) -> BoxFuture<'a, Evidence> {
        (**self).reconcile(op)
    }

    fn reconcile_with_answer<'a>(
        &'a self,
        op: &'a OperationRecord,
    ) -> BoxFuture<'a, (Evidence, Option<String>)> {
        (**self).reconcile_with_answer(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciler_is_object_safe() {
        fn _assert(_: &dyn Reconciler) {}
    }
}
