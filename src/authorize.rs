//! Permission checks before every send and every query.
//!
//! Seed 000: "Query permission and write permission must be separate. The task may have been
//! authorized to create tickets, but on recovery that authorization could be revoked." An
//! [`Authorizer`] is consulted by the layer before the first send, and by the recovery engine
//! before every replay ([`Access::Write`]) and every lookup ([`Access::Query`]). When write
//! permission is revoked the engine keeps querying but never sends.

use std::fmt;

use crate::ledger::{BoxFuture, OperationRecord};

/// What the caller wants to do with an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Send the write (first send or a replay).
    Write,
    /// Ask the vendor about it.
    Query,
}

/// A refused permission check. Nothing is sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{access:?} access denied: {reason}")]
pub struct Denied {
    /// What was asked.
    pub access: Access,
    /// Why it was refused (no credentials in here).
    pub reason: String,
}

impl Denied {
    /// A refusal of `access` for `reason`.
    pub fn new(access: Access, reason: impl Into<String>) -> Self {
        Self {
            access,
            reason: reason.into(),
        }
    }
}

/// Decides whether an operation may be sent or queried now.
///
/// Implemented for closures `Fn(&OperationRecord, Access) -> Result<(), Denied>`:
///
/// ```
/// use recoverable_write::authorize::{Access, Denied};
/// use recoverable_write::ledger::OperationRecord;
///
/// let revoked_for_tenant_b = |op: &OperationRecord, access: Access| {
///     if access == Access::Write && op.tenant.as_str() == "tenant-b" {
///         Err(Denied::new(access, "write permission revoked"))
///     } else {
///         Ok(())
///     }
/// };
/// # fn takes(_: impl recoverable_write::authorize::Authorizer) {}
/// # takes(revoked_for_tenant_b);
/// ```
pub trait Authorizer: Send + Sync + 'static {
    /// Checks `access` for `op`.
    fn check<'a>(
        &'a self,
        op: &'a OperationRecord,
        access: Access,
    ) -> BoxFuture<'a, Result<(), Denied>>;
}

impl<F> Authorizer for F
where
    F: Fn(&OperationRecord, Access) -> Result<(), Denied> + Send + Sync + 'static,
{
    fn check<'a>(
        &'a self,
        op: &'a OperationRecord,
        access: Access,
    ) -> BoxFuture<'a, Result<(), Denied>> {
        let r = self(op, access);
        Box::pin(std::future::ready(r))
    }
}

/// An authorizer shared by the layer and the recoverer (allows everything when unset).
#[derive(Clone, Default)]
pub(crate) struct SharedAuthorizer(Option<std::sync::Arc<dyn Authorizer>>);

impl SharedAuthorizer {
    pub(crate) fn new(a: impl Authorizer) -> Self {
        Self(Some(std::sync::Arc::new(a)))
    }

    /// Whether no authorizer is set: every access is allowed without a call.
    pub(crate) fn is_open(&self) -> bool {
        self.0.is_none()
    }

    // A plain fn returning a boxed future (not an `async fn`): keeps the callers' futures
    // `Send` for every lifetime, which `tokio::spawn` needs.
    pub(crate) fn check<'a>(
        &'a self,
        op: &'a OperationRecord,
        access: Access,
    ) -> BoxFuture<'a, Result<(), Denied>> {
        match &self.0 {
            Some(a) => a.check(op, access),
            None => Box::pin(std::future::ready(Ok(()))),
        }
    }
}

impl fmt::Debug for SharedAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Authorizer(custom)"
        } else {
            "Authorizer(allow all)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorizer_is_object_safe() {
        fn _assert(_: &dyn Authorizer) {}
    }
}
