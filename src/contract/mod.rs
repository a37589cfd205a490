//! Per-target contracts: how a vendor dedupes, and how its answers map to evidence.
//!
//! A [`Contract`] is plain data (serde, loadable from JSON or TOML) describing one vendor
//! endpoint family:
//!
//! - where the idempotency key goes ([`KeyPlacement`]) and how long it may be;
//! - how long the vendor keeps keys and what a same-key replay returns ([`Replay`]);
//! - how responses map to [`Evidence`] ([`Rule`]s, then conservative defaults);
//! - where the created object's id sits ([`RemoteRef`]) and whether success needs it;
//! - which headers, query parameters, body fields and path segments of a request are secret
//!   (never stored), which fields of the vendor's answers are (stored as `[redacted]`), and
//!   which body fields define the payload;
//! - how an operation can be looked up at the vendor ([`Lookup`]), and how long an eventually
//!   consistent lookup needs before "not found" means anything (`settle_secs`).
//!
//! Built-in vendor [`profiles`] follow the vendors' documentation; a set of routes and contracts
//! can be read from a TOML or JSON file ([`Contracts::from_toml_str`], [`Contracts::load`]).
//!
//! [`Contracts`] chooses one per request by [`Target`] (host, optional path prefix and method).
//! The contract an operation started with is frozen on its row by [`Contract::reference`] (name
//! and content hash), so recovery uses the same rules even after the configuration changes.
//!
//! # Classification
//!
//! [`Contract::classify_response`] works like the smithy-rs retry classifiers: sources run in
//! priority order and the first one with an opinion decides.
//!
//! 1. The contract's [`Rule`]s, first match wins. A rule matches a status (or a range), and
//!    optionally a response header value and a body field reached by JSON pointer, so vendor
//!    signals such as `Stripe-Should-Retry: false`, Adyen's `Transient-Error: true` or Stripe's
//!    `idempotency_key_in_use` code override the status.
//! 2. The conservative defaults, for a vendor nobody documented:
//!
//!    | status | evidence |
//!    |---|---|
//!    | 202 | `Processing` |
//!    | other 2xx | `Succeeded` (see 3) |
//!    | 1xx, 3xx (redirects are never followed), 408, 421, 425, 429, 5xx, anything else | `Unknown` |
//!    | 409 | `Conflict { InFlight }` |
//!    | other 4xx (400, 401, 403, 404, 422, ...) | `Rejected` |
//!
//!    429 and 503 are `Unknown` by default: only a contract that documents them as "not executed"
//!    (Stripe's 429) turns them into `NotExecuted`. `Retry-After` (and `retry-after-ms`, or a
//!    spent `x-ratelimit-remaining` with its `x-ratelimit-reset`) fills `retry_after` on `Processing`, `NotExecuted` and
//!    `Unknown`.
//! 3. A success must carry the remote reference when the contract requires one: a 2xx without
//!    it (an empty body, a missing field) is `Unknown`, because it does not positively identify
//!    the created object.
//!
//! Reasons quote the status and at most a short vendor error code found at a common place
//! (`/error/code`, `/error/type`, `/code`, ..., or an XML error's `<Code>`), never the body.
//!
//! [`Contract::classify_error`] handles transport errors: only errors that prove the request
//! never left (a refusal by the send-once guard, a connect error, a refused connection) are
//! `NotExecuted`; timeouts, resets and everything else are `Unknown`.
//!
//! # Differences from tower-http's `classify`
//!
//! tower-http classifies for metrics and tracing ("was it a failure?"). Here the question is
//! "what do we now *know* about a write that may have executed?", so the answer has more classes,
//! and the default for anything undocumented is "unknown", never "failed".

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};

use crate::evidence::Evidence;
use crate::operation::{IdempotencyKey, PayloadDigest};

mod classify;
pub(crate) use classify::sanitize as sanitize_urls;
pub mod config;
mod error;
mod key;
mod lookup;
pub(crate) use key::key_header;
pub mod profiles;
mod reference;
mod registry;
mod retry_after;
mod rules;
mod validate;

#[cfg(test)]
mod tests;

pub use config::{ConfigError, ConfigErrorKind};
pub use error::{ContractError, ContractErrorKind};
pub use key::{KeyFormat, KeyPlacement};
pub use lookup::{AnswerFormat, Lookup, LookupAnswer, NotFound};
pub use reference::ContractRef;
pub use registry::{Contracts, Target};
#[cfg(test)]
use retry_after::retry_after_from_headers;
pub(crate) use retry_after::{MAX_RETRY_AFTER, parse_retry_after};
pub use rules::{BodyMatch, EvidenceClass, HeaderMatch, Rule, StatusMatch, XmlMatch};

/// The length of a generated key (a hyphenated UUID v4): the smallest `max_key_len` allowed.
pub const GENERATED_KEY_LEN: usize = 36;

/// The `max_key_len` assumed when a contract does not say (the smallest limit among the
/// documented vendors, Adyen and EC2).
pub const DEFAULT_MAX_KEY_LEN: usize = 64;

/// The longest `retention_secs` a contract may state: 365 days. A longer retention makes no
/// difference to recovery (its window is at most
/// [`BudgetPolicy::MAX_WINDOW_MS`](crate::BudgetPolicy::MAX_WINDOW_MS), 30 days), and the bound
/// keeps retention arithmetic in milliseconds far from overflowing.
pub const MAX_RETENTION_SECS: u64 = 365 * 24 * 60 * 60;

/// The longest `keep_details_secs` or `keep_identity_secs` a contract (or the ledger's
/// default) may state: 10 years. Keeps retention arithmetic in milliseconds far from
/// overflowing.
pub const MAX_KEEP_SECS: u64 = 10 * 365 * 24 * 60 * 60;

/// The longest `settle_secs` a contract may state: 30 days, the longest recovery window (a
/// lookup that settles later than that can never count).
pub const MAX_SETTLE_SECS: u64 = 30 * 24 * 60 * 60;

/// The largest `max_key_len` a contract may state: 8 KiB, about the most any HTTP server
/// accepts in one header line.
pub const MAX_KEY_LEN_LIMIT: usize = 8 * 1024;

/// A vendor contract: how one target dedupes writes and how its answers map to evidence.
///
/// Build one from a [profile](profiles) and adjust it, or read it from JSON with
/// [`Contract::from_json`]. A contract read from JSON looks like this:
///
/// ```json
/// {
///   "name": "stripe-v1",
///   "key": { "in": "header", "name": "Idempotency-Key", "format": "plain" },
///   "max_key_len": 255,
///   "retention_secs": 86400,
///   "replay": "stored_first_response",
///   "rules": [
///     { "status": 429, "evidence": "not_executed", "reason": "rate limited before idempotency" },
///     { "status": 409, "body": { "pointer": "/error/code", "equals": "idempotency_key_in_use" },
///       "evidence": "conflict_in_flight" },
///     { "status": "500-599", "header": { "name": "Stripe-Should-Retry", "value": "false" },
///       "evidence": "unknown" }
///   ],
///   "remote_ref": { "pointer": "/id", "required": true },
///   "secret_headers": ["Stripe-Account"],
///   "digest": { "mode": "full" }
/// }
/// ```
///
/// Unknown fields are refused, so a misspelt field cannot silently fall back to a default.
/// Call [`Contract::validate`] (or load with [`Contract::from_json`], which does) before use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Contract {
    /// The contract's name, frozen on every operation row (e.g. `stripe-v1`).
    pub name: String,
    /// Where the idempotency key goes.
    pub key: KeyPlacement,
    /// The longest key the vendor accepts. At least [`GENERATED_KEY_LEN`]; defaults to
    /// [`DEFAULT_MAX_KEY_LEN`].
    #[serde(default = "default_max_key_len")]
    pub max_key_len: usize,
    /// How long the vendor keeps keys, in seconds (a documented minimum); `None` when unknown.
    /// Same-key replay is only considered inside this window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_secs: Option<u64>,
    /// What a same-key replay inside the retention window does.
    #[serde(default)]
    pub replay: Replay,
    /// Classification rules, tried in order before the defaults; the first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// Where the created object's id sits in a success body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_ref: Option<RemoteRef>,
    /// Headers never stored in the ledger, beyond `Authorization`, `Cookie` and
    /// `Proxy-Authorization` (case-insensitive names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_headers: Vec<String>,
    /// Query parameters never stored in the ledger, beyond
    /// [`DEFAULT_SECRET_QUERY_PARAMS`](crate::operation::DEFAULT_SECRET_QUERY_PARAMS)
    /// (case-insensitive names). The first send carries the caller's values; replays get them
    /// from the stack they are sent through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_query_params: Vec<String>,
    /// Body fields never stored in the ledger: JSON pointers (`/client_secret`) for JSON bodies,
    /// field names (`client_secret`) for form bodies. The first send carries the caller's
    /// values; a replay has none, so a contract that names any refuses replays (the operation
    /// goes to a human) unless [`replay_supplies_body_secrets`](Self::replay_supplies_body_secrets)
    /// says the replay stack puts them back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_body_fields: Vec<String>,
    /// The stack replays are sent through re-inserts the [`secret_body_fields`](Self::secret_body_fields)
    /// (default `false`: such replays are refused).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replay_supplies_body_secrets: bool,
    /// Fields of the vendor's answers never stored: a bare name (`client_secret`: every member
    /// of that name, at any depth) or a JSON pointer (`/client_secret`: that place only). In
    /// the first response kept for callers that ask again, and in a lookup's answer kept as
    /// evidence (and shown to reviewers), each value becomes the string
    /// [`REDACTED`](crate::operation::REDACTED); the caller's own first response is never
    /// changed. An XML answer is read the same way (a path of element names, or an element
    /// name). An answer that may hold such a field but is neither JSON nor XML is not stored
    /// (a caller asking again gets the synthesized answer). The
    /// [`secret_body_fields`](Self::secret_body_fields) are secret in answers too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_response_fields: Vec<String>,
    /// Segments of the request URL's path never stored, as path templates: `/services/*/*/{secret}`
    /// (Slack's webhook URLs), `/api/webhooks/*/{secret}` (Discord's). Each segment of a
    /// template is a literal, `*` (any one segment, kept) or `{secret}` (any one segment,
    /// stored as [`REDACTED`](crate::operation::REDACTED)); a template applies to a path that
    /// starts with its segments. The first send carries the caller's URL; a replay has only
    /// the stored one, so a contract that names any refuses replays (the operation goes to a
    /// human) unless [`replay_supplies_path_secrets`](Self::replay_supplies_path_secrets)
    /// says the replay stack puts them back. The payload hash is over the stored URL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_path_segments: Vec<String>,
    /// The stack replays are sent through replaces each path segment
    /// [`REDACTED`](crate::operation::REDACTED) with the secret it stands for (default
    /// `false`: such replays are refused).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replay_supplies_path_secrets: bool,
    /// Which parts of the body define the payload (for the payload hash).
    #[serde(default)]
    pub digest: PayloadDigest,
    /// How an operation can be looked up at the vendor when its outcome is unknown; `None` when
    /// the contract does not say (the reconciler registered with the recovery engine decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookup: Option<Lookup>,
    /// How long, in seconds after a send, the vendor's lookup may still miss the operation
    /// (an eventually consistent list or search, such as EC2's `DescribeInstances`). A lookup
    /// that finds nothing before this time has elapsed is not even weak evidence. `None`: the
    /// lookup is consistent right after the write answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_secs: Option<u64>,
    /// How long after an operation of this contract finished the ledger keeps its details (the
    /// frozen request, the stored response, the evidence details), in seconds: the details
    /// clock of [retention](crate::retention). `None`: the ledger's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_details_secs: Option<u64>,
    /// How long after an operation of this contract finished the ledger keeps its row (its
    /// identity: a repeat of the intent within this time sends nothing), in seconds: the
    /// identity clock of [retention](crate::retention). At least the vendor's
    /// [`retention_secs`](Self::retention_secs) and `keep_details_secs`. `None`: the ledger's
    /// default, raised to the vendor's retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_identity_secs: Option<u64>,
}

fn default_max_key_len() -> usize {
    DEFAULT_MAX_KEY_LEN
}

/// What a same-key replay inside the retention window does at the vendor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Replay {
    /// The vendor stores the first response and returns it for every replay, errors included
    /// (Stripe v1 even for a 500, the IETF draft). A replay re-fetches the first result; it never
    /// re-runs the work, so a stored 500 stays indeterminate.
    StoredFirstResponse,
    /// The vendor returns the current state of the first request (PayPal: 201 first, 200 on a
    /// duplicate; Stripe v2 drives failed work to completion).
    CurrentState,
    /// No documented idempotency: a replay may execute the write again, so it is never replayed
    /// automatically. The default for an unknown vendor.
    #[default]
    #[serde(alias = "none")]
    Unsafe,
}

impl Replay {
    /// Whether a same-key replay inside the retention window cannot execute the write twice.
    pub fn is_safe(self) -> bool {
        matches!(self, Self::StoredFirstResponse | Self::CurrentState)
    }

    /// The name used in JSON and TOML (`stored_first_response`, `current_state`, `unsafe`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StoredFirstResponse => "stored_first_response",
            Self::CurrentState => "current_state",
            Self::Unsafe => "unsafe",
        }
    }
}
/// Where the created object's id (the remote reference) sits in a success body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteRef {
    /// RFC 6901 pointer into the JSON body, e.g. `/id` or `/data/ticket/number`. A string or a
    /// number is taken.
    pub pointer: String,
    /// A 2xx without the reference is `Unknown`, not `Succeeded`.
    #[serde(default)]
    pub required: bool,
}

impl RemoteRef {
    /// A reference taken when present; success does not depend on it.
    pub fn optional(pointer: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            required: false,
        }
    }

    /// A reference every success must carry.
    pub fn required(pointer: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            required: true,
        }
    }
}

impl Contract {
    /// The conservative default for a vendor nobody documented; see
    /// [`profiles::conservative`]. Its name is `default`.
    pub fn conservative() -> Self {
        profiles::conservative()
    }

    /// The IETF `Idempotency-Key` header draft; see [`profiles::ietf_draft`]. Its name is
    /// `ietf-draft`.
    pub fn ietf_draft() -> Self {
        profiles::ietf_draft()
    }

    /// A contract with the given name and key placement, and the conservative settings for
    /// everything else (no rules, replay unsafe, no remote reference).
    pub fn new(name: impl Into<String>, key: KeyPlacement) -> Self {
        Self {
            name: name.into(),
            key,
            max_key_len: DEFAULT_MAX_KEY_LEN,
            retention_secs: None,
            replay: Replay::Unsafe,
            rules: Vec::new(),
            remote_ref: None,
            secret_headers: Vec::new(),
            secret_query_params: Vec::new(),
            secret_body_fields: Vec::new(),
            replay_supplies_body_secrets: false,
            secret_response_fields: Vec::new(),
            secret_path_segments: Vec::new(),
            replay_supplies_path_secrets: false,
            digest: PayloadDigest::Full,
            lookup: None,
            settle_secs: None,
            keep_details_secs: None,
            keep_identity_secs: None,
        }
    }

    /// Reads a contract from JSON and [validates](Contract::validate) it.
    pub fn from_json(text: &str) -> Result<Self, ContractError> {
        let contract: Self = serde_json::from_str(text)
            .map_err(|e| ContractError::new("", "", ContractErrorKind::Parse(e.to_string())))?;
        contract.validate()?;
        Ok(contract)
    }

    /// Renames the contract.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets where the key goes.
    pub fn key(mut self, key: KeyPlacement) -> Self {
        self.key = key;
        self
    }

    /// Sets the longest key the vendor accepts.
    pub fn max_key_len(mut self, max_key_len: usize) -> Self {
        self.max_key_len = max_key_len;
        self
    }

    /// Sets the vendor's key retention, in seconds.
    pub fn retention_secs(mut self, secs: u64) -> Self {
        self.retention_secs = Some(secs);
        self
    }

    /// Sets what a same-key replay does.
    pub fn replay(mut self, replay: Replay) -> Self {
        self.replay = replay;
        self
    }

    /// Appends a classification rule (tried after the rules already present).
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Sets where the remote reference sits.
    pub fn remote_ref(mut self, remote_ref: RemoteRef) -> Self {
        self.remote_ref = Some(remote_ref);
        self
    }

    /// Marks one more header as secret.
    pub fn secret_header(mut self, name: impl Into<String>) -> Self {
        self.secret_headers.push(name.into());
        self
    }

    /// Marks one more query parameter as secret.
    pub fn secret_query_param(mut self, name: impl Into<String>) -> Self {
        self.secret_query_params.push(name.into());
        self
    }

    /// Marks one more body field as secret (a JSON pointer, or a form field name).
    pub fn secret_body_field(mut self, field: impl Into<String>) -> Self {
        self.secret_body_fields.push(field.into());
        self
    }

    /// Says the replay stack re-inserts the secret body fields (see
    /// [`replay_supplies_body_secrets`](Self::replay_supplies_body_secrets)).
    pub fn replay_supplied_body_secrets(mut self, supplied: bool) -> Self {
        self.replay_supplies_body_secrets = supplied;
        self
    }

    /// Marks one more field of the vendor's answers as secret (a bare name, or a JSON pointer;
    /// see [`secret_response_fields`](Self::secret_response_fields)).
    pub fn secret_response_field(mut self, field: impl Into<String>) -> Self {
        self.secret_response_fields.push(field.into());
        self
    }

    /// Marks the `{secret}` segments of one more path template as secret (see
    /// [`secret_path_segments`](Self::secret_path_segments)).
    pub fn secret_path_segment(mut self, template: impl Into<String>) -> Self {
        self.secret_path_segments.push(template.into());
        self
    }

    /// Says the replay stack puts the secret path segments back (see
    /// [`replay_supplies_path_secrets`](Self::replay_supplies_path_secrets)).
    pub fn replay_supplied_path_secrets(mut self, supplied: bool) -> Self {
        self.replay_supplies_path_secrets = supplied;
        self
    }

    /// The names of the credentials this contract never stores, for
    /// [`FrozenRequest::freeze`](crate::operation::FrozenRequest::freeze).
    pub fn secrets(&self) -> crate::operation::SecretNames<'_> {
        crate::operation::SecretNames {
            headers: &self.secret_headers,
            query_params: &self.secret_query_params,
            body_fields: &self.secret_body_fields,
            path_segments: &self.secret_path_segments,
        }
    }

    /// The fields kept out of every stored answer: the secret response fields, then the secret
    /// body fields (secret in an answer too).
    pub(crate) fn answer_secrets(&self) -> [&[String]; 2] {
        [&self.secret_response_fields, &self.secret_body_fields]
    }

    /// Sets which parts of the body define the payload.
    pub fn digest(mut self, digest: PayloadDigest) -> Self {
        self.digest = digest;
        self
    }

    /// Sets how an operation is looked up at the vendor.
    pub fn lookup(mut self, lookup: Lookup) -> Self {
        self.lookup = Some(lookup);
        self
    }

    /// Sets how long an eventually consistent lookup may miss a fresh operation, in seconds.
    pub fn settle_secs(mut self, secs: u64) -> Self {
        self.settle_secs = Some(secs);
        self
    }

    /// Sets how long after they finished this contract's operations keep their details, in
    /// seconds (see [`keep_details_secs`](Self::keep_details_secs)).
    pub fn keep_details_secs(mut self, secs: u64) -> Self {
        self.keep_details_secs = Some(secs);
        self
    }

    /// Sets how long after they finished this contract's operations keep their row, in
    /// seconds (see [`keep_identity_secs`](Self::keep_identity_secs)).
    pub fn keep_identity_secs(mut self, secs: u64) -> Self {
        self.keep_identity_secs = Some(secs);
        self
    }

    /// Checks that the contract is usable: header names valid, JSON pointers well-formed,
    /// status ranges within `100..=599` and ordered, every rule constrains the status,
    /// `max_key_len` holds a generated key, and the numeric fields are within their bounds
    /// ([`MAX_RETENTION_SECS`], [`MAX_SETTLE_SECS`], [`MAX_KEY_LEN_LIMIT`]). The error names the
    /// field (`rules[2].status`, `retention_secs`).
    pub fn validate(&self) -> Result<(), ContractError> {
        validate::contract(self)
    }

    /// Checks that `key` can be sent under this contract (not empty, not longer than
    /// `max_key_len`).
    pub fn check_key(&self, key: &IdempotencyKey) -> Result<(), ContractError> {
        key::check_len(self, key.as_str())
    }

    /// Places the idempotency key in the request and returns the (possibly rewritten) body.
    ///
    /// Deterministic and idempotent: attaching the same key to the result again changes
    /// nothing. When the body is rewritten and the request carries a `Content-Length`, it is
    /// updated. A JSON body whose top-level key field is missing keeps its bytes and gains the
    /// field at the front; other JSON placements re-serialize the body with sorted keys.
    pub fn attach_key(
        &self,
        parts: &mut http::request::Parts,
        body: Bytes,
        key: &IdempotencyKey,
    ) -> Result<Bytes, ContractError> {
        key::attach(self, parts, body, key.as_str())
    }

    /// Turns a response into evidence. See the [module docs](self) for the order of rules and
    /// defaults. Never panics, whatever the status, headers or body.
    pub fn classify_response(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Evidence {
        classify::response(self, status, headers, body, now)
    }

    /// Turns a transport error into evidence by walking its `source()` chain.
    ///
    /// `NotExecuted` only when the chain proves the request never left: a
    /// [`SendRefused`](crate::guard::SendRefused) from the send-once guard, a hyper-util client
    /// error with `is_connect()`, or an I/O error of kind `ConnectionRefused`. Everything else
    /// (timeouts, resets, incomplete messages, unknown errors) is `Unknown`.
    pub fn classify_error(&self, err: &(dyn std::error::Error + 'static)) -> Evidence {
        classify::error(err)
    }
}
