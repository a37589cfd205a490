//! Identities and the frozen request.
//!
//! Four identities are involved in one recoverable write, and they are never mixed
//! (DESIGN.md, seed 000):
//!
//! | identity | type | made when | purpose |
//! |---|---|---|---|
//! | operation id | [`OperationId`] | when the caller approves the intent | names the business intent; resume and query by it |
//! | idempotency key | [`IdempotencyKey`] | once, with the operation | lets the vendor dedupe; never regenerated |
//! | attempt id | [`AttemptId`] | each time bytes are handed to the network | troubleshooting; the send-once guard |
//! | generation | [`Generation`] | at every claim of send or recovery rights | fences out stale workers |
//!
//! The payload is frozen when the operation is created: method, URL, the non-secret headers and
//! the body bytes. Every send of the operation, replays included, uses exactly these bytes and the
//! same key. A SHA-256 over a canonical form of the payload ([`PayloadHash`]) binds the operation
//! to its content: the same operation presented with another payload is a conflict and nothing is
//! sent.

use std::sync::Arc;

use http::{Method, Uri};
use sha2::{Digest, Sha256};

mod canonical;
mod digest;
mod frozen;
mod headers;
mod ids;
mod redaction;

pub use crate::redact::REDACTED;
pub use digest::{PayloadDigest, PayloadHash};
pub use frozen::FrozenRequest;
pub(crate) use frozen::is_unfrozen;
pub use headers::{FrozenHeaders, FrozenHeadersIter, HeaderBytes};
pub use ids::{AttemptId, Generation, IdempotencyKey, OperationId, Tenant};
pub use redaction::{DEFAULT_SECRET_HEADERS, DEFAULT_SECRET_QUERY_PARAMS, SecretNames};
pub(crate) use redaction::{
    SECRET_SEGMENT, has_redacted_segment, is_secret, is_secret_param, redact_body, redacted_path,
    redacted_uri,
};

/// The caller's identification of a write, carried in the request extensions.
///
/// ```
/// use recoverable_write::Operation;
///
/// // The user approved "create a fault ticket for device E17" as intent 7781 of tenant A.
/// let op = Operation::new("tenant-a", "create_ticket", "intent-7781");
/// let mut req = http::Request::post("http://vendor.test/tickets").body(()).unwrap();
/// req.extensions_mut().insert(op.clone());
///
/// // Later, resume by operation id alone: returns its state or stored result, never a create.
/// let resume = Operation::resume("tenant-a", op.id().clone());
/// # let _ = resume;
/// ```
///
/// `(tenant, action, intent_ref)` is unique in the ledger, so the same approved intent can never
/// become two operations even if a second operation id is generated for it. A genuinely new intent
/// (a second ticket the user really wants) takes a new `intent_ref`. Content similarity is never
/// the test.
///
/// A write that reaches the layer without an `Operation` passes through untracked (nothing is
/// stored: an OAuth token request through an app-wide client must not end up in the ledger).
/// With [`Builder::track_all_writes`](crate::Builder::track_all_writes)
/// it gets a generated one (tenant [`Tenant::DEFAULT`], action `"<METHOD> <host><path>"`, a fresh
/// intent): it is protected against lost responses, inner retries and crashes, but a caller that
/// retries at a higher level without naming the operation creates a new intent. Name the
/// operation to get resumption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    tenant: Tenant,
    id: OperationId,
    action: Arc<str>,
    intent_ref: Arc<str>,
    /// Made by [`Operation::resume`]: the operation must already exist.
    existing_only: bool,
}

/// `parts` joined into a shared string with one allocation: on the stack first when short, so
/// only the `Arc` allocates.
fn arc_concat(parts: &[&str]) -> Arc<str> {
    let mut buf = [0u8; 256];
    let mut n = 0;
    for p in parts {
        let Some(dst) = buf.get_mut(n..n + p.len()) else {
            return Arc::from(parts.concat());
        };
        dst.copy_from_slice(p.as_bytes());
        n += p.len();
    }
    // Whole strings joined: always UTF-8.
    match std::str::from_utf8(&buf[..n]) {
        Ok(s) => Arc::from(s),
        Err(_) => Arc::from(parts.concat()),
    }
}

impl Operation {
    /// A new operation for an approved intent. The operation id is generated; if the ledger
    /// already holds an operation for `(tenant, action, intent_ref)`, that one is used instead.
    pub fn new(
        tenant: impl Into<String>,
        action: impl Into<String>,
        intent_ref: impl Into<String>,
    ) -> Self {
        Self {
            tenant: Tenant::new(tenant),
            id: OperationId::generate(),
            action: Arc::from(action.into()),
            intent_ref: Arc::from(intent_ref.into()),
            existing_only: false,
        }
    }

    /// Like [`new`](Self::new), with an operation id derived from `(tenant, action, intent_ref)`
    /// (`op-` and 32 hex digits of a SHA-256), so a caller that must put the operation id into
    /// the request body (as seed 000's ticket API does) builds the same body on every call for
    /// the same intent. The id is opaque and reveals nothing of the intent reference.
    ///
    /// ```
    /// use recoverable_write::Operation;
    /// let a = Operation::for_intent("tenant-a", "create_ticket", "sr-1001");
    /// let b = Operation::for_intent("tenant-a", "create_ticket", "sr-1001");
    /// assert_eq!(a.id(), b.id());
    /// assert_ne!(a.id(), Operation::for_intent("tenant-b", "create_ticket", "sr-1001").id());
    /// ```
    pub fn for_intent(
        tenant: impl Into<String>,
        action: impl Into<String>,
        intent_ref: impl Into<String>,
    ) -> Self {
        let (tenant, action, intent_ref) = (tenant.into(), action.into(), intent_ref.into());
        let mut h = Sha256::new();
        for part in [&tenant, &action, &intent_ref] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        let digest = hex(&h.finalize());
        Self {
            tenant: Tenant::new(tenant),
            id: OperationId::new(format!("op-{}", &digest[..32])),
            action: Arc::from(action),
            intent_ref: Arc::from(intent_ref),
            existing_only: false,
        }
    }

    /// Names an existing operation by its id, e.g. to resume `op-204`: a call with it returns the
    /// operation's state or stored result, or sends it if it was recorded and never sent. It
    /// never creates anything: an id the ledger does not hold for this tenant (a typo) is
    /// [`Error::NotFound`](crate::Error::NotFound) and nothing is sent.
    pub fn resume(tenant: impl Into<String>, id: OperationId) -> Self {
        Self {
            tenant: Tenant::new(tenant),
            intent_ref: id.0.clone(),
            id,
            action: Arc::from(""),
            existing_only: true,
        }
    }

    /// Whether this names an existing operation only ([`resume`](Self::resume)).
    pub fn is_resume(&self) -> bool {
        self.existing_only
    }

    /// Sets a caller-chosen operation id.
    pub fn with_id(mut self, id: OperationId) -> Self {
        self.id = id;
        self
    }

    /// An operation for a write that named none (see the type docs).
    pub fn ad_hoc(method: &Method, uri: &Uri) -> Self {
        let id = OperationId::generate();
        Self {
            tenant: Tenant::default(),
            action: arc_concat(&[method.as_str(), " ", uri.host().unwrap_or(""), uri.path()]),
            // The fresh intent is the operation's own id, shared.
            intent_ref: id.0.clone(),
            id,
            existing_only: false,
        }
    }

    /// The tenant.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Tenant, id, action and intent reference, moved out (no copy of the strings).
    pub(crate) fn into_parts(self) -> (Tenant, OperationId, Arc<str>, Arc<str>) {
        (self.tenant, self.id, self.action, self.intent_ref)
    }

    /// The operation id.
    pub fn id(&self) -> &OperationId {
        &self.id
    }

    /// The action, e.g. `create_ticket`.
    pub fn action(&self) -> &str {
        &self.action
    }

    /// The caller's reference to the approved intent.
    pub fn intent_ref(&self) -> &str {
        &self.intent_ref
    }
}

/// Hex digits (either case) to bytes; `None` unless an even number of hex digits.
fn unhex(s: &str) -> Option<Vec<u8>> {
    ::hex::decode(s).ok()
}

/// Bytes as lower-case hex (stored hashes and signatures depend on the case).
pub(crate) fn hex(bytes: &[u8]) -> String {
    ::hex::encode(bytes)
}
