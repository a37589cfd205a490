//! Unit tests of contracts, by topic; the helpers they share (a fixed clock, a Stripe-like
//! contract, classification shortcuts) are here.

use std::error::Error as StdError;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use proptest::prelude::*;

use super::*;
use crate::evidence::{ConflictKind, Evidence};
use crate::guard::SendRefused;
use crate::operation::{AttemptId, IdempotencyKey, OperationId, PayloadDigest};

mod classify_rules;
mod config_files;
mod default_mapping;
mod key_placement;
mod never_panic;
mod retry_after_header;
mod retry_after_properties;
mod serialization;
mod target_selection;
mod transport_errors;
mod validation;

/// Sun, 06 Nov 1994 08:49:37 GMT, the RFC 9110 example date.
const EXAMPLE_SECS: u64 = 784_111_777;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn now() -> SystemTime {
    at(EXAMPLE_SECS - 60)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn classify(c: &Contract, status: u16, hdrs: &[(&str, &str)], body: &str) -> Evidence {
    c.classify_response(
        StatusCode::from_u16(status).unwrap(),
        &headers(hdrs),
        body.as_bytes(),
        now(),
    )
}

fn default_class(status: u16) -> Evidence {
    classify(&Contract::conservative(), status, &[], "")
}

fn key() -> IdempotencyKey {
    IdempotencyKey::from_stored("8e03978e-40d5-43e8-bc93-6894a57f9324")
}

fn parts(uri: &str) -> http::request::Parts {
    http::Request::post(uri).body(()).unwrap().into_parts().0
}

/// A Stripe-v1-like contract, built inline (the real profile comes with the vendor profiles).
fn stripe_like() -> Contract {
    Contract::new("stripe-like", KeyPlacement::header("Idempotency-Key"))
        .max_key_len(255)
        .retention_secs(24 * 3600)
        .replay(Replay::StoredFirstResponse)
        .rule(
            Rule::new(429, EvidenceClass::NotExecuted)
                .reason("rate limited before idempotency runs"),
        )
        .rule(
            Rule::new(409, EvidenceClass::ConflictInFlight)
                .body("/error/code", "idempotency_key_in_use"),
        )
        .rule(
            Rule::new(400, EvidenceClass::ConflictMismatch)
                .body("/error/type", "idempotency_error"),
        )
        .rule(
            Rule::new(StatusMatch::range(500, 599), EvidenceClass::Rejected)
                .header("Stripe-Should-Retry", "false")
                .reason("Stripe-Should-Retry: false"),
        )
        .remote_ref(RemoteRef::required("/id"))
}

fn json_contract(pointer: &str) -> Contract {
    Contract::new(
        "json",
        KeyPlacement::JsonBody {
            pointer: pointer.into(),
        },
    )
}

fn query_contract() -> Contract {
    Contract::new(
        "query",
        KeyPlacement::Query {
            name: "requestId".into(),
        },
    )
}

const STRIPE_JSON: &str = r#"{
  "name": "stripe-v1",
  "key": { "in": "header", "name": "Idempotency-Key", "format": "plain" },
  "max_key_len": 255,
  "retention_secs": 86400,
  "replay": "stored_first_response",
  "rules": [
    { "status": 429, "evidence": "not_executed", "reason": "rate limited before idempotency" },
    { "status": 409, "body": { "pointer": "/error/code", "equals": "idempotency_key_in_use" },
      "evidence": "conflict_in_flight" },
    { "status": "500-599", "header": { "name": "Stripe-Should-Retry", "value": "false" },
      "evidence": "unknown" }
  ],
  "remote_ref": { "pointer": "/id", "required": true },
  "secret_headers": ["Stripe-Account"],
  "digest": { "mode": "full" }
}"#;
