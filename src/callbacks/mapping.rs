//! Where a vendor's callback payload says what happened, and to which operation.
//!
//! A [`CallbackMapping`] is data (TOML or JSON, like contracts): JSON pointers for the event id,
//! the event type, an optional status, the fields that identify the operation, the remote
//! reference and the account, and the event types (optionally with a status) that mean
//! succeeded, rejected, processing or inconclusive. Every other event type is *ignored*: it
//! still yields a [`ParsedEvent`] with its event id, so it is deduplicated and recorded, but
//! carries no evidence. Which events a mapping may read as final: [Final and not
//! final](CallbackMapping#final-and-not-final).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::verify::VerifiedDelivery;
use crate::evidence::Evidence;

/// What a delivery names to find its operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchBy {
    /// The idempotency key the crate sent, echoed back by the vendor.
    IdempotencyKey,
    /// The operation id the crate attached (metadata, merchant reference, custom id).
    OperationId,
    /// The vendor's reference of the created object (`pi_...`, a pspReference, a payment id).
    RemoteRef,
}

/// One place to look for the operation: a JSON pointer and what its value is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchField {
    /// JSON pointer (RFC 6901) into the event.
    pub pointer: String,
    /// What the value found there identifies.
    pub by: MatchBy,
}

/// An event type, optionally narrowed to one status value, that means one outcome.
///
/// In TOML either a plain string (`"payment_intent.succeeded"`) or a table
/// (`{ event_type = "AUTHORISATION", status = "true" }`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EventRule {
    /// Any event of this type.
    Type(String),
    /// Events of this type whose status (see [`CallbackMapping::status`]) equals `status`.
    WithStatus(StatusRule),
}

/// An event type with a status value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRule {
    /// The event type.
    pub event_type: String,
    /// The status value, compared as text (`true`, `COMPLETED`).
    pub status: String,
}

impl EventRule {
    fn matches(&self, event_type: &str, status: Option<&str>) -> bool {
        match self {
            Self::Type(t) => t == event_type,
            Self::WithStatus(r) => r.event_type == event_type && Some(r.status.as_str()) == status,
        }
    }
}

/// How to read one vendor's callbacks. Loadable from TOML or JSON; unknown fields are refused.
///
/// # Final and not final
///
/// `succeeded` and `rejected` are final readings: they end the operation (`SUCCEEDED`,
/// `REJECTED`), and nothing moves it again. Put an event there only where the vendor documents
/// that its object cannot change any more. A refusal the vendor may still follow with a success
/// (a declined payment attempt on an object that stays open, an outcome the vendor may resend
/// differently) goes in `inconclusive`: it is recorded on the operation as "nothing proven"
/// ([`Evidence::Unknown`]), so lookups, later events or a person decide. Reading such an event
/// as a rejection tells the application the write had no effect; it writes again under a new
/// intent, and when the first one succeeds after all, the customer pays twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallbackMapping {
    /// The vendor's name, scoping event ids in the dedupe table (`stripe`, `adyen`, ...).
    ///
    /// The dedupe key is `(vendor, event id)`, across tenants: the event id must be unique for
    /// the whole vendor (Stripe `evt_…`, Square's `event_id`, PayPal `WH-…`, Adyen's
    /// `pspReference` are). A vendor whose event ids are unique only within one merchant
    /// account needs one mapping per account, each with its own `vendor` name
    /// (`acme-shop-a`, ...), or an `event_id` that includes the account pointer; otherwise a
    /// second account's event with the same id would be answered as a duplicate and never
    /// applied.
    pub vendor: String,
    /// Pointer to an array of events when one delivery batches several (Adyen's
    /// `/notificationItems`); every other pointer is then relative to one element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<String>,
    /// Pointers whose values, joined with `:`, form the event id (one pointer for most vendors;
    /// several where the vendor sends no single id). Every one must be present.
    pub event_id: Vec<String>,
    /// Pointer to the event type.
    pub event_type: String,
    /// Pointer to a status that refines the event type (Adyen `success`, Square payment status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Where to find the operation, tried in order; the first present wins.
    pub matchers: Vec<MatchField>,
    /// Pointers to the remote reference, tried in order.
    #[serde(default)]
    pub remote_ref: Vec<String>,
    /// Pointer to the vendor account, mapped to a tenant by
    /// [`AccountTenants`](super::AccountTenants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Pointers to a rejection reason (a code, never free text with personal data), in order.
    #[serde(default)]
    pub reason: Vec<String>,
    /// Event types that mean the write succeeded.
    #[serde(default)]
    pub succeeded: Vec<EventRule>,
    /// Event types that mean the write was rejected (had no effect) **for good**: only those
    /// the vendor documents as final (the object can never succeed afterwards). See [Final and
    /// not final](CallbackMapping#final-and-not-final).
    #[serde(default)]
    pub rejected: Vec<EventRule>,
    /// Event types that mean the write is accepted, not finished.
    #[serde(default)]
    pub processing: Vec<EventRule>,
    /// Event types that report a failure the vendor does not document as final: recorded on
    /// the operation as unknown evidence (nothing proven, never a rejection), the reason kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inconclusive: Vec<EventRule>,
}

/// What to look the operation up by, and the value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Matcher {
    /// What `value` identifies.
    pub by: MatchBy,
    /// The value found in the event.
    pub value: String,
}

/// One event of a verified delivery, ready to be deduplicated, matched and applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParsedEvent {
    /// The vendor's event id (the dedupe key, with the vendor).
    pub event_id: String,
    /// The vendor's event type.
    pub event_type: String,
    /// What to find the operation by; `None` when the event names none of the mapping's
    /// fields (it can only be quarantined).
    pub matcher: Option<Matcher>,
    /// The vendor account the event belongs to, when the mapping names one and it is present.
    pub account: Option<String>,
    /// The evidence it carries; `None` for ignored event types.
    pub evidence: Option<Evidence>,
}

/// Why a verified delivery could not be parsed. Never carries the body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The body is not JSON.
    #[error("the delivery is not JSON")]
    NotJson,
    /// The mapping's `items` pointer does not name a non-empty array.
    #[error("no events at `{pointer}`")]
    NoItems {
        /// The pointer.
        pointer: String,
    },
    /// An event has no id, so it cannot be deduplicated.
    #[error("event {index} has no id at `{pointer}`")]
    MissingEventId {
        /// Index of the event in the delivery.
        index: usize,
        /// The missing pointer.
        pointer: String,
    },
    /// An event has no type.
    #[error("event {index} has no type at `{pointer}`")]
    MissingEventType {
        /// Index of the event in the delivery.
        index: usize,
        /// The missing pointer.
        pointer: String,
    },
}

/// Parses a verified delivery into its events (several for a batching vendor, in order).
pub fn parse(
    mapping: &CallbackMapping,
    delivery: &VerifiedDelivery,
) -> Result<Vec<ParsedEvent>, ParseError> {
    let json: Value = serde_json::from_slice(delivery.body()).map_err(|_| ParseError::NotJson)?;
    let items: Vec<&Value> = match &mapping.items {
        None => vec![&json],
        Some(p) => json
            .pointer(p)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| ParseError::NoItems { pointer: p.clone() })?
            .iter()
            .collect(),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| mapping.parse_one(index, item))
        .collect()
}

/// A scalar as text; objects, arrays, null and empty strings count as absent.
fn text(v: &Value, pointer: &str) -> Option<String> {
    match v.pointer(pointer)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn first(v: &Value, pointers: &[String]) -> Option<String> {
    pointers.iter().find_map(|p| text(v, p))
}

impl CallbackMapping {
    /// Reads a mapping from TOML.
    pub fn from_toml(s: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(s)
    }

    /// Reads a mapping from JSON.
    pub fn from_json(s: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(s)
    }

    fn parse_one(&self, index: usize, item: &Value) -> Result<ParsedEvent, ParseError> {
        let mut id_parts = Vec::with_capacity(self.event_id.len());
        for p in &self.event_id {
            id_parts.push(text(item, p).ok_or_else(|| ParseError::MissingEventId {
                index,
                pointer: p.clone(),
            })?);
        }
        if id_parts.is_empty() {
            return Err(ParseError::MissingEventId {
                index,
                pointer: String::new(),
            });
        }
        let event_type =
            text(item, &self.event_type).ok_or_else(|| ParseError::MissingEventType {
                index,
                pointer: self.event_type.clone(),
            })?;
        let status = self.status.as_deref().and_then(|p| text(item, p));
        let is = |rules: &[EventRule]| {
            rules
                .iter()
                .any(|r| r.matches(&event_type, status.as_deref()))
        };
        let reason = || {
            first(item, &self.reason)
                .map_or_else(|| event_type.clone(), |r| format!("{event_type}: {r}"))
        };
        // Inconclusive is checked first, then rejected before succeeded, so that an overlapping
        // configuration errs on the side that claims the least: nothing, then no success.
        let evidence = if is(&self.inconclusive) {
            Some(Evidence::unknown(format!(
                "{}; not final at the vendor",
                reason()
            )))
        } else if is(&self.rejected) {
            Some(Evidence::Rejected { reason: reason() })
        } else if is(&self.succeeded) {
            Some(Evidence::Succeeded {
                remote_ref: first(item, &self.remote_ref),
            })
        } else if is(&self.processing) {
            Some(Evidence::Processing {
                retry_after: None,
                remote_ref: first(item, &self.remote_ref),
            })
        } else {
            None
        };
        let matcher = self
            .matchers
            .iter()
            .find_map(|m| text(item, &m.pointer).map(|value| Matcher { by: m.by, value }));
        Ok(ParsedEvent {
            event_id: id_parts.join(":"),
            event_type,
            matcher,
            account: self.account.as_deref().and_then(|p| text(item, p)),
            evidence,
        })
    }
}
