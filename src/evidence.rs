//! What one observation tells us about an operation.
//!
//! Every response, transport error and lookup answer is turned into one [`Evidence`] value by the
//! operation's [`Contract`](crate::contract::Contract) or by a
//! [`Reconciler`](crate::reconcile::Reconciler). Only evidence moves an operation on.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The class of one observation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Evidence {
    /// Authoritative success. `remote_ref` is the created object's id at the vendor (e.g. `W731`).
    Succeeded {
        /// The vendor's reference of the created object, when known.
        remote_ref: Option<String>,
    },
    /// Accepted, not finished (202, or a lookup or callback saying PROCESSING).
    Processing {
        /// The server's advice on when to look again.
        #[serde(default, with = "opt_millis", skip_serializing_if = "Option::is_none")]
        retry_after: Option<Duration>,
        /// The vendor's reference of the object being worked on, when the answer names it
        /// (a 202 with an id, a callback about the object). Recorded on the operation, so a
        /// later callback or lookup that names only this reference finds it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remote_ref: Option<String>,
    },
    /// A documented rejection: this request had no side effect (e.g. validation 400, 401/403).
    Rejected {
        /// Why, as the vendor said it (status, error code), never the request body.
        reason: String,
    },
    /// Proof that this attempt was not executed: the connection was never made, the request was
    /// refused before it left the process, or the contract documents the status as not executed
    /// (Stripe's 429).
    NotExecuted {
        /// What proves it.
        why: String,
        /// The server's advice on when a resend may go.
        #[serde(default, with = "opt_millis", skip_serializing_if = "Option::is_none")]
        retry_after: Option<Duration>,
    },
    /// Nothing is proven: timeout, reset, 5xx, gateway errors, an unclear 2xx, a lookup that
    /// found nothing.
    Unknown {
        /// What was observed.
        why: String,
        /// The server's advice on when to look again.
        #[serde(default, with = "opt_millis", skip_serializing_if = "Option::is_none")]
        retry_after: Option<Duration>,
    },
    /// The vendor refused because of its idempotency bookkeeping.
    Conflict {
        /// Which conflict.
        conflict: ConflictKind,
    },
}

/// Why the vendor reported a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictKind {
    /// The key was used with another payload (or on another endpoint).
    Mismatch,
    /// Another request with the same key is still being executed.
    InFlight,
}

impl Evidence {
    /// Unknown evidence with no server hint.
    pub fn unknown(why: impl Into<String>) -> Self {
        Self::Unknown {
            why: why.into(),
            retry_after: None,
        }
    }

    /// Processing evidence with no server hint and no reference.
    pub fn processing() -> Self {
        Self::Processing {
            retry_after: None,
            remote_ref: None,
        }
    }

    /// Not-executed evidence with no server hint.
    pub fn not_executed(why: impl Into<String>) -> Self {
        Self::NotExecuted {
            why: why.into(),
            retry_after: None,
        }
    }

    /// The server's retry/poll advice carried by this evidence, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Processing { retry_after, .. }
            | Self::NotExecuted { retry_after, .. }
            | Self::Unknown { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The vendor's reference this evidence names, if any (a success's, or a processing
    /// answer's).
    pub fn remote_ref(&self) -> Option<&str> {
        match self {
            Self::Succeeded { remote_ref } | Self::Processing { remote_ref, .. } => {
                remote_ref.as_deref()
            }
            _ => None,
        }
    }

    /// A short label (`succeeded`, `processing`, ...), for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Succeeded { .. } => "succeeded",
            Self::Processing { .. } => "processing",
            Self::Rejected { .. } => "rejected",
            Self::NotExecuted { .. } => "not_executed",
            Self::Unknown { .. } => "unknown",
            Self::Conflict {
                conflict: ConflictKind::Mismatch,
            } => "conflict_mismatch",
            Self::Conflict {
                conflict: ConflictKind::InFlight,
            } => "conflict_in_flight",
        }
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_serializes_with_a_kind_tag() {
        let e = Evidence::Processing {
            retry_after: Some(Duration::from_millis(1500)),
            remote_ref: None,
        };
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, r#"{"kind":"processing","retry_after":1500}"#);
        assert_eq!(serde_json::from_str::<Evidence>(&json).unwrap(), e);
        let named = Evidence::Processing {
            retry_after: None,
            remote_ref: Some("pi_1".into()),
        };
        let json = serde_json::to_string(&named).unwrap();
        assert_eq!(json, r#"{"kind":"processing","remote_ref":"pi_1"}"#);
        assert_eq!(serde_json::from_str::<Evidence>(&json).unwrap(), named);
        let c = Evidence::Conflict {
            conflict: ConflictKind::Mismatch,
        };
        assert_eq!(
            serde_json::from_str::<Evidence>(&serde_json::to_string(&c).unwrap()).unwrap(),
            c
        );
    }
}
