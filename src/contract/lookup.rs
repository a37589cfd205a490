//! How an operation whose outcome is unknown is looked up at the vendor ([`Lookup`]), and how
//! the vendor's answer is read ([`LookupAnswer`], [`NotFound`], [`AnswerFormat`]).

use std::fmt;

use serde::{Deserialize, Serialize};

/// How an operation whose outcome is unknown can be looked up at the vendor.
///
/// This is data: it describes the vendor, and the recovery engine chooses the
/// [`Reconciler`](crate::reconcile::Reconciler) from it. URL templates take the placeholders
/// `{operation_id}`, `{idempotency_key}`, `{tenant}` and `{remote_ref}` (the last one is only
/// known once a response named the created object). A template starting with `/` or `?` is
/// relative to the operation's own URL (same scheme and host: for a regional API, the same
/// region).
///
/// In JSON or TOML the lookup is tagged by `kind`:
/// `{ kind = "http_get", url_template = "/operations/{operation_id}" }`,
/// `{ kind = "list_by_reference", url_template = "/v1/charges?limit=100", items_pointer = "/data",
/// reference_pointer = "/metadata/operation_id" }`, `{ kind = "same_key_replay" }`,
/// `{ kind = "webhooks", events = ["payment.created"] }`, `{ kind = "unavailable" }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Lookup {
    /// `GET` one resource by a template naming the operation or its key, e.g.
    /// `https://vendor.example/operations/{operation_id}`. A 404 proves nothing.
    ///
    /// Placeholders (values percent-encoded): `{operation_id}`, `{idempotency_key}`,
    /// `{tenant}`, and `{remote_ref}`, the vendor's reference of the created object as recorded
    /// on the operation from its own earlier evidence. A URL holding `{operation_id}`,
    /// `{idempotency_key}` or `{remote_ref}` identifies the operation (see
    /// [`LookupAnswer::operation_id`]). While the operation has no remote reference, a
    /// `{remote_ref}` lookup is not made: its answer is [`Evidence::Unknown`](crate::Evidence)
    /// (nothing proven, never a miss that could mean "not executed"), and the operation stays
    /// `UNKNOWN`. Today the engine records a remote reference only with a success, so a
    /// `{remote_ref}` lookup serves operations whose reference is put on the row by other
    /// evidence; pair it with a lookup by id or key for lost responses.
    HttpGet {
        /// The URL template.
        url_template: String,
        /// How the answer is read (defaults documented on [`LookupAnswer`]).
        #[serde(default, skip_serializing_if = "LookupAnswer::is_default")]
        answer: LookupAnswer,
    },
    /// `GET` a list or search filtered by a reference the client attached (Stripe metadata,
    /// EC2's `client-token` filter) and find the item carrying it. Only an item that carries the
    /// reference identifies the operation; an empty list proves nothing, and nothing at all
    /// before `settle_secs` when the list is eventually consistent. Several items carrying the
    /// reference prove nothing either (none is picked). The answer is JSON, or XML with
    /// `answer.format = "xml"` (EC2's `DescribeInstances`). Built as a
    /// [`ListLookup`](crate::reconcile::ListLookup).
    ListByReference {
        /// The list URL template (the filter, if the vendor has one, goes in the query).
        url_template: String,
        /// Where the items are in the answer (e.g. `/data`; in XML, a path such as
        /// `/DescribeInstancesResponse/reservationSet/item`); `None`: the answer is the array
        /// of items (in XML, the root element's children are).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        items_pointer: Option<String>,
        /// Where an item carries the reference (e.g. `/metadata/operation_id`); `None` when
        /// the filter in the URL already matches on it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reference_pointer: Option<String>,
        /// The reference value, a template (default `{operation_id}`; EC2: `{idempotency_key}`).
        #[serde(default = "default_reference")]
        reference: String,
        /// How the item carrying the reference is read (defaults documented on
        /// [`LookupAnswer`], pointers relative to the item). `not_found` must stay `unknown`:
        /// an empty list or a 404 never proves that a write was not executed.
        #[serde(default, skip_serializing_if = "LookupAnswer::is_default")]
        answer: LookupAnswer,
    },
    /// Send the frozen request again with the same key inside the retention window: the vendor
    /// answers with the first result or the current state, never a second execution. Only for a
    /// contract whose [`Replay`](super::Replay) is safe.
    SameKeyReplay,
    /// No lookup API: the vendor announces outcomes by webhook (Adyen, Square). Until an event
    /// arrives the operation stays unknown, and goes to manual review when the window ends.
    Webhooks {
        /// The events that report the outcome (e.g. `payment.created`), for the handoff.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        events: Vec<String>,
    },
    /// The vendor offers no way to find out: an unknown outcome goes to manual review.
    Unavailable,
}

/// What a 404 or 410 from a lookup means (the contract's `answer.not_found`).
///
/// The default, [`NotFound::Unknown`], is the only safe reading for most vendors: a lookup that
/// is eventually consistent, scoped by tenant, or whose record is written after the side effect
/// answers 404 for a write that happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotFound {
    /// Weak evidence: the operation stays unknown (`unknown`).
    #[default]
    Unknown,
    /// The vendor guarantees that a 404 means the write was never registered (`not_executed`).
    ///
    /// **Dangerous**: the operation becomes `RETRY_READY` and is replayed with the same key. If
    /// the vendor did execute the write (a lagging replica, a record cleaned up early, another
    /// tenant scope), the replay executes it a second time. Only for a lookup endpoint whose
    /// record is written atomically with the side effect and read from the primary.
    NotExecuted,
}

impl NotFound {
    /// The values a contract may give, as an error names them.
    pub const EXPECTED: &'static str = "unknown, not_executed";

    /// Reads the contract's value (`unknown` or `not_executed`, exactly).
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "unknown" => Some(Self::Unknown),
            "not_executed" => Some(Self::NotExecuted),
            _ => None,
        }
    }

    /// The contract's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::NotExecuted => "not_executed",
        }
    }
}

/// How the answer of an [`Lookup::HttpGet`] (or the item of a [`Lookup::ListByReference`]) is
/// read. Every field is optional; in TOML:
/// `answer = { status = "/state", remote_ref = "/ticket/id", succeeded = ["OPEN", "CLOSED"] }`.
///
/// | field | default | meaning |
/// |---|---|---|
/// | `format` | `json` | how the answer is parsed: `json` or `xml` (see below) |
/// | `status` | `/status` | JSON pointer to the status |
/// | `remote_ref` | `/resource_id` | JSON pointer to the created object's reference |
/// | `operation_id` | none when the URL template holds `{operation_id}` or `{idempotency_key}` (the URL identifies the operation), else `/operation_id` | JSON pointer where the answer must repeat the operation id for it to count |
/// | `succeeded` | `SUCCEEDED`, `SUCCESS`, `COMPLETED`, `DONE` | statuses meaning done |
/// | `processing` | `PROCESSING`, `PENDING`, `IN_PROGRESS`, `RUNNING` | still running |
/// | `rejected` | `REJECTED`, `FAILED`, `DECLINED` | refused, no side effect |
/// | `not_executed` | `NOT_EXECUTED` | the vendor's record says it never ran |
/// | `not_found` | `unknown` | what a 404/410 means: `unknown` (weak evidence: the operation stays unknown) or `not_executed` |
///
/// Statuses compare case-insensitively; any other status is weak evidence. A 404 is never
/// proof of anything by default: a vendor whose lookup is eventually consistent, or whose record
/// is written after the side effect, answers 404 for a write that happened.
///
/// `not_found = "not_executed"` is only for a vendor whose lookup endpoint **guarantees** that a
/// 404 means the write was never registered (the record is written atomically with the side
/// effect, read from the primary, kept at least as long as the recovery window). It is
/// dangerous: a 404 read as "not executed" authorises a replay with the same key, and if the
/// vendor did execute the write (its record lagging, cleaned up, or kept elsewhere) the replay
/// executes it a second time. It is refused with `settle_secs` (a lookup that may lag cannot
/// prove absence) and on a `list_by_reference` lookup (an empty list never proves it).
///
/// For a [`Lookup::ListByReference`] the pointers are relative to the item carrying the
/// reference, and `operation_id` has no default (the reference identifies the item).
///
/// `format = "xml"` reads an XML answer (the AWS Query APIs): every pointer of the lookup is
/// then a path of element names, written like a pointer. From the answer it starts at the root
/// element (`/DescribeInstancesResponse/reservationSet/item`); from an item, at the item's
/// children (`/instancesSet/item/instanceId`). Names are compared without their namespace, a
/// step takes every element of its name (a list's items), and a value is the trimmed text of the
/// first element the path selects. An answer that is not well-formed XML (or holds a DTD) proves
/// nothing: [`Evidence::Unknown`](crate::Evidence).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupAnswer {
    /// How the answer is parsed: `json` (the default) or `xml`.
    #[serde(default, skip_serializing_if = "AnswerFormat::is_json")]
    pub format: AnswerFormat,
    /// JSON pointer to the status (default `/status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// JSON pointer to the remote reference (default `/resource_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_ref: Option<String>,
    /// JSON pointer where the answer names the operation (see the table for the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// Statuses meaning done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<Vec<String>>,
    /// Statuses meaning still running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing: Option<Vec<String>>,
    /// Statuses meaning refused with no side effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<Vec<String>>,
    /// Statuses meaning never executed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_executed: Option<Vec<String>>,
    /// What a 404 or 410 means: `unknown` (the default: weak evidence) or `not_executed`
    /// (see the danger above; parsed by [`NotFound::parse`]).
    /// Any other value is refused by [`Contract::validate`](super::Contract::validate), naming `lookup.answer.not_found`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_found: Option<String>,
}

/// How a lookup's answer is parsed ([`LookupAnswer::format`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AnswerFormat {
    /// A JSON document; pointers are RFC 6901 JSON pointers.
    #[default]
    Json,
    /// An XML document; pointers are paths of element names (see [`LookupAnswer`]).
    Xml,
}

impl AnswerFormat {
    /// Whether it is the default, JSON (left out of the contract's serialization).
    pub fn is_json(&self) -> bool {
        *self == Self::Json
    }
}

impl LookupAnswer {
    /// All defaults (the field is left out of the contract's serialization).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

fn default_reference() -> String {
    "{operation_id}".to_owned()
}

impl Lookup {
    /// A `GET` by URL template, its answer read with the defaults of [`LookupAnswer`].
    pub fn http_get(url_template: impl Into<String>) -> Self {
        Self::HttpGet {
            url_template: url_template.into(),
            answer: LookupAnswer::default(),
        }
    }

    /// The name used in JSON and TOML (`http_get`, `list_by_reference`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::HttpGet { .. } => "http_get",
            Self::ListByReference { .. } => "list_by_reference",
            Self::SameKeyReplay => "same_key_replay",
            Self::Webhooks { .. } => "webhooks",
            Self::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for Lookup {
    /// A short description: `GET /operations/{operation_id}`, `same-key replay`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HttpGet { url_template, .. } => write!(f, "GET {url_template}"),
            Self::ListByReference { url_template, .. } => write!(f, "list {url_template}"),
            Self::SameKeyReplay => f.write_str("same-key replay"),
            Self::Webhooks { events } if events.is_empty() => f.write_str("webhooks"),
            Self::Webhooks { events } => write!(f, "webhooks ({})", events.join(", ")),
            Self::Unavailable => f.write_str("none (manual review)"),
        }
    }
}
