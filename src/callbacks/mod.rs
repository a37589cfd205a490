//! Vendor callbacks (webhooks) as evidence (feature `callbacks`).
//!
//! A vendor that calls back ("your payment succeeded") resolves an operation faster than any
//! lookup, and for some vendors (Adyen, Square) it is the only lookup. A delivery goes through
//! five steps, in this order:
//!
//! 1. **Verify** ([`Verifier`]): the signature is checked over the raw bytes before anything is
//!    parsed. An unverified delivery changes nothing, is counted, and is answered 4xx.
//! 2. **Parse** ([`parse`] with a [`CallbackMapping`]): the delivery becomes one or more
//!    [`ParsedEvent`]s, each with the vendor's event id, what to match the operation by, the
//!    vendor account and the [`Evidence`](crate::Evidence) it carries (none for ignored types).
//! 3. **Deduplicate** ([`CallbackLedger::callback_seen`](crate::ledger::CallbackLedger::callback_seen)): an
//!    event seen before is answered at once, before any matching; an event of an ignored type
//!    is recorded for this and nothing else.
//! 4. **Match** ([`AccountTenants`], [`Matcher`]): the account maps to a tenant, and the
//!    operation is looked up in that tenant only, by the echoed idempotency key, the operation
//!    id or the vendor's reference, each through an index.
//! 5. **Apply** ([`CallbackLedger::apply_callback`](crate::ledger::CallbackLedger::apply_callback)): in one
//!    ledger transaction the event id is recorded and its evidence goes through the same pure
//!    transition and compare-and-swap as a lookup answer; a second delivery of one event
//!    changes nothing. Evidence that contradicts a final state raises an alarm
//!    ([`contradiction`](crate::contradiction)). No match, a match in another tenant, or a
//!    never-sent (`PREPARED`) operation: quarantined
//!    ([`CallbackLedger::quarantine_callback`](crate::ledger::CallbackLedger::quarantine_callback)).
//!
//! [`CallbackReceiver`] runs the five steps for one vendor over a [`Handle`](crate::Handle):
//! [`receive`](CallbackReceiver::receive) takes the raw headers and body (any framework), and
//! [`router`](CallbackReceiver::router) mounts it in axum (feature `axum`). What each event
//! came to is a [`DeliveryOutcome`]; the answer to the vendor is [`batch_status`] of them.
//!
//! Verification and parsing alone:
//!
//! ```
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//! use recoverable_write::callbacks::{parse, CallbackMapping, Secret, StripeSignature, Verifier};
//!
//! let secret = Secret::new("whsec_example_not_a_real_secret")?;
//! let verifier = StripeSignature::new(secret.clone());
//! let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}"#;
//! let now = SystemTime::now();
//! let t = now.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
//! let mut headers = http::HeaderMap::new();
//! headers.insert("stripe-signature", StripeSignature::sign(&secret, t, body).parse().unwrap());
//!
//! let delivery = verifier.verify(&headers, body, now).unwrap();
//! let events = parse(&CallbackMapping::stripe(), &delivery).unwrap();
//! assert_eq!(events[0].event_id, "evt_1");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;

use http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::operation::{OperationId, Tenant};

mod builtin;
mod mapping;
mod receiver;
mod verify;

pub use crate::secret::{KeyError, Secret};
pub use mapping::{
    CallbackMapping, EventRule, MatchBy, MatchField, Matcher, ParseError, ParsedEvent, StatusRule,
    parse,
};
pub use receiver::{CALLBACK_KIND, CallbackReceiver, Receipt};
pub use verify::{
    AdyenHmac, DEFAULT_TOLERANCE, Encoding, HmacHeader, PayPalUnsupported, SquareSignature,
    StripeSignature, VerifiedDelivery, Verifier, VerifyError,
};

/// Which tenant each vendor account belongs to. A delivery is matched only against operations
/// of the tenant its account maps to; an account that maps to no tenant is quarantined.
///
/// Vendors whose events name no account (PayPal) use the endpoint's default tenant, the one
/// the endpoint was mounted for; with no default, such events are quarantined.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountTenants {
    /// Vendor account (`acct_...`, a merchant account code, a Square merchant id) to tenant.
    #[serde(default)]
    pub accounts: HashMap<String, String>,
    /// The tenant of events that carry no account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_tenant: Option<String>,
}

impl AccountTenants {
    /// Maps the vendor account `account` to `tenant`.
    pub fn account(mut self, account: impl Into<String>, tenant: impl Into<String>) -> Self {
        self.accounts.insert(account.into(), tenant.into());
        self
    }

    /// The tenant of events that name no account.
    pub fn default_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.default_tenant = Some(tenant.into());
        self
    }

    /// The tenant an event belongs to: its account's, or the default when it names none. An
    /// event naming an unknown account never falls back to the default (that is how a foreign
    /// tenant's event would slip in).
    pub fn tenant_for(&self, account: Option<&str>) -> Option<Tenant> {
        match account {
            Some(a) => self.accounts.get(a).map(|t| Tenant::new(t.as_str())),
            None => self.default_tenant.as_deref().map(Tenant::new),
        }
    }
}

/// What became of one event. A delivery batching several events answers the most urgent status
/// among them (a 5xx if any needs a retry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DeliveryOutcome {
    /// The evidence moved the operation (through the state machine's compare-and-swap).
    Applied {
        /// The operation it moved.
        operation_id: OperationId,
    },
    /// The event was seen before: nothing changed.
    Duplicate,
    /// The operation had already moved past what the event says (a `processing` after
    /// `succeeded`), or is in `MANUAL_REVIEW`: appended as late evidence and surfaced, nothing
    /// more.
    Late {
        /// The operation it was appended to.
        operation_id: OperationId,
    },
    /// The event contradicts the final state the operation reached (a success after
    /// `REJECTED`, a failure after `SUCCEEDED`, another vendor reference): appended as a
    /// `contradiction` entry, the operation marked for the review queue, an alarm raised
    /// ([`Notice::Contradiction`](crate::Notice::Contradiction)). The state is unchanged.
    Contradiction {
        /// The operation it contradicts.
        operation_id: OperationId,
    },
    /// Verified, but matched no operation of its tenant (or matched one of another tenant, or
    /// named an unknown account): stored in quarantine, never applied, never dropped on receipt
    /// (kept for [`Retention::quarantined_callbacks`](crate::retention::Retention::quarantined_callbacks)).
    Quarantined {
        /// Why, without the payload.
        why: String,
    },
    /// An event type the mapping does not map: recorded for dedupe
    /// ([`CallbackLedger::record_ignored_callback`](crate::ledger::CallbackLedger::record_ignored_callback)),
    /// nothing applied.
    Ignored,
    /// The signature did not verify: nothing was read or recorded.
    Unverified {
        /// The verification error's text (never the secret or the body).
        why: String,
    },
    /// Verified but unparseable (no event id, not JSON): refused, nothing recorded.
    Unparseable {
        /// The parse error's text.
        why: String,
    },
    /// The ledger or the dedupe table is down: nothing was recorded, the vendor must retry.
    StoreUnavailable,
    /// The operation's attempt is still on the wire (`IN_FLIGHT`): its own result decides
    /// first. Nothing was recorded; the vendor delivers the event again later (503).
    Deferred {
        /// The operation it matched.
        operation_id: OperationId,
    },
}

impl DeliveryOutcome {
    /// The HTTP status to answer the vendor with.
    ///
    /// 2xx whenever retrying cannot help (applied, duplicate, late, contradiction, quarantined,
    /// ignored: all durably recorded); 4xx for what the vendor or an attacker sent wrong (unverified:
    /// 401, unparseable: 400; vendors retry 4xx for a while and then give up, which is right for a
    /// misconfigured secret too); 503 only when the vendor should retry because the store is
    /// down.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Applied { .. }
            | Self::Duplicate
            | Self::Late { .. }
            | Self::Contradiction { .. }
            | Self::Quarantined { .. }
            | Self::Ignored => StatusCode::OK,
            Self::Unverified { .. } => StatusCode::UNAUTHORIZED,
            Self::Unparseable { .. } => StatusCode::BAD_REQUEST,
            Self::StoreUnavailable | Self::Deferred { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// A short label, for metrics (`callbacks_total{outcome=...}`).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Applied { .. } => "applied",
            Self::Duplicate => "duplicate",
            Self::Late { .. } => "late",
            Self::Contradiction { .. } => "contradiction",
            Self::Quarantined { .. } => "quarantined",
            Self::Ignored => "ignored",
            Self::Unverified { .. } => "unverified",
            Self::Unparseable { .. } => "unparseable",
            Self::StoreUnavailable => "store_unavailable",
            Self::Deferred { .. } => "deferred",
        }
    }
}

/// The one status answering a delivery that carried several events (Adyen batches): 503 if any
/// event needs the vendor to retry (a redelivery is deduplicated, so the accepted ones are not
/// applied twice), else the first 4xx, else 200. An empty batch is 400.
pub fn batch_status(outcomes: &[DeliveryOutcome]) -> StatusCode {
    let statuses: Vec<StatusCode> = outcomes.iter().map(DeliveryOutcome::status).collect();
    if statuses.iter().any(StatusCode::is_server_error) {
        StatusCode::SERVICE_UNAVAILABLE
    } else if let Some(s) = statuses.iter().find(|s| s.is_client_error()) {
        *s
    } else if statuses.is_empty() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    }
}
