//! Built-in contracts.
//!
//! Each profile cites its source and the date it was checked. Where a source is silent
//! (UNCONFIRMED), the profile takes the conservative choice: treat the answer as indeterminate
//! and reconcile. A profile is a starting point: adjust it with the `with_*` methods of
//! [`Contract`] or write the whole contract in JSON.
//!
//! Vendor profiles (Stripe, Adyen, PayPal, Square, EC2, ...) are added here as functions of the
//! same shape.

use super::rules::{EvidenceClass, Rule};
use super::{Contract, KeyFormat, KeyPlacement, RemoteRef, Replay};

/// The date the built-in profiles were last checked against their sources.
pub const CHECKED: &str = "2026-11-30";

/// The contract for a vendor nobody documented. Name: `default`.
///
/// - Key: header `Idempotency-Key`, plain; at most 64 characters.
/// - Replay: [`Replay::Unsafe`]. Nothing says the vendor dedupes, so a same-key replay could
///   execute the write twice; only proof of non-execution allows a resend.
/// - Retention: unknown.
/// - Rules: none; the conservative defaults of the [module docs](super) apply (every 5xx, 408,
///   429, 503, 3xx is `Unknown`; 400/401/403/422 are `Rejected`; 409 is `Conflict`; 202 is
///   `Processing`).
/// - Remote reference: `/id` is taken when present, but success does not require it.
///
/// Source: DESIGN.md ("Classification"), RFC 9110 §9.2.2 (a client SHOULD NOT automatically
/// retry a non-idempotent request unless it knows the semantics are idempotent or can detect
/// that the original was never applied). Checked 2026-11-30.
pub fn conservative() -> Contract {
    Contract::new("default", KeyPlacement::header("Idempotency-Key"))
        .with_remote_ref(RemoteRef::optional("/id"))
}

/// The IETF HTTPAPI `Idempotency-Key` header draft. Name: `ietf-draft`.
///
/// - Key: header `Idempotency-Key`, an RFC 8941 sf-string, so quoted: `Idempotency-Key: "8e03..."`.
///   No length limit is given; 64 characters is assumed.
/// - Missing key: 400 (`Rejected`). Same key with another payload: 422 (`Conflict { Mismatch }`).
///   Same key while the first request still runs: 409 (`Conflict { InFlight }`).
/// - Replay: after completion the server returns the earlier result, success or error:
///   [`Replay::StoredFirstResponse`].
/// - Retention: published by each resource ("the resource publishes its expiry"), so unknown
///   here.
/// - Remote reference: `/id` is taken when present, but success does not require it.
///
/// Source: datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header (draft -07,
/// October 2025, expired). Checked 2026-11-30.
pub fn ietf_draft() -> Contract {
    Contract::new(
        "ietf-draft",
        KeyPlacement::Header {
            name: "Idempotency-Key".to_owned(),
            format: KeyFormat::Quoted,
        },
    )
    .with_replay(Replay::StoredFirstResponse)
    .with_rule(Rule::new(400, EvidenceClass::Rejected).reason(
        "missing or malformed Idempotency-Key, or invalid request (draft, \"Error Scenarios\")",
    ))
    .with_rule(
        Rule::new(422, EvidenceClass::ConflictMismatch)
            .reason("Idempotency-Key reused with another payload (draft, \"Error Scenarios\")"),
    )
    .with_rule(Rule::new(409, EvidenceClass::ConflictInFlight).reason(
        "a request with this Idempotency-Key is still being processed (draft, \"Error Scenarios\")",
    ))
    .with_remote_ref(RemoteRef::optional("/id"))
}
