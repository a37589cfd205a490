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

// ---------------------------------------------------------------------------------------------
// Default mapping, one row at a time.

#[test]
fn default_2xx_is_succeeded_with_optional_id() {
    assert_eq!(
        classify(&Contract::conservative(), 200, &[], r#"{"id":"t_1"}"#),
        Evidence::Succeeded {
            remote_ref: Some("t_1".into())
        }
    );
    assert_eq!(
        classify(&Contract::conservative(), 201, &[], r#"{"id":42}"#),
        Evidence::Succeeded {
            remote_ref: Some("42".into())
        }
    );
    for status in [200, 201, 204, 206] {
        assert_eq!(
            default_class(status),
            Evidence::Succeeded { remote_ref: None },
            "{status}"
        );
    }
}

#[test]
fn default_202_is_processing_with_retry_after() {
    assert_eq!(
        default_class(202),
        Evidence::Processing {
            retry_after: None,
            remote_ref: None
        }
    );
    assert_eq!(
        classify(&Contract::conservative(), 202, &[("retry-after", "5")], ""),
        Evidence::Processing {
            retry_after: Some(Duration::from_secs(5)),
            remote_ref: None,
        }
    );
    // A 202 that names its object keeps the reference (issue 27 item 11).
    assert_eq!(
        classify(&Contract::conservative(), 202, &[], r#"{"id":"job_7"}"#),
        Evidence::Processing {
            retry_after: None,
            remote_ref: Some("job_7".into()),
        }
    );
}

#[test]
fn default_1xx_3xx_408_5xx_and_odd_codes_are_unknown() {
    for status in [
        100, 101, 103, 300, 301, 302, 303, 304, 307, 308, 408, 421, 425, 429, 500, 501, 502, 503,
        504, 599, 600, 999,
    ] {
        let e = default_class(status);
        assert_eq!(e.label(), "unknown", "{status}: {e:?}");
    }
    let Evidence::Unknown { why, .. } = default_class(307) else {
        panic!()
    };
    assert!(
        why.contains("307") && why.contains("redirect not followed"),
        "{why}"
    );
}

#[test]
fn default_4xx_are_rejected_except_408_409_429() {
    for status in [400, 401, 402, 403, 404, 405, 410, 413, 415, 422, 451, 499] {
        let e = default_class(status);
        assert_eq!(e.label(), "rejected", "{status}: {e:?}");
    }
    assert_eq!(
        default_class(409),
        Evidence::Conflict {
            conflict: ConflictKind::InFlight
        }
    );
}

#[test]
fn default_429_and_503_are_unknown_with_retry_after() {
    for status in [429, 503] {
        let e = classify(
            &Contract::conservative(),
            status,
            &[("Retry-After", "30")],
            "",
        );
        let Evidence::Unknown { retry_after, .. } = e else {
            panic!("{status}: {e:?}")
        };
        assert_eq!(retry_after, Some(Duration::from_secs(30)));
    }
}

#[test]
fn rejected_reason_quotes_status_and_code_never_the_body() {
    let body = r#"{"error":{"code":"card_declined","type":"card_error",
        "message":"card 4242 4242 4242 4242 of jane@example.com declined"}}"#;
    let Evidence::Rejected { reason } = classify(&Contract::conservative(), 402, &[], body) else {
        panic!()
    };
    assert_eq!(reason, "HTTP 402 Payment Required [card_declined]");
    // Other common places.
    for (body, code) in [
        (
            r#"{"error":{"type":"invalid_request_error"}}"#,
            "invalid_request_error",
        ),
        (r#"{"code":20429,"message":"Too Many Requests"}"#, "20429"),
        (r#"{"errorCode":"704","message":"x"}"#, "704"),
        (
            r#"{"errors":[{"code":"IDEMPOTENCY_KEY_REUSED","detail":"x"}]}"#,
            "IDEMPOTENCY_KEY_REUSED",
        ),
        (r#"{"error":"invalid_grant"}"#, "invalid_grant"),
    ] {
        let Evidence::Rejected { reason } = classify(&Contract::conservative(), 400, &[], body)
        else {
            panic!()
        };
        assert_eq!(reason, format!("HTTP 400 Bad Request [{code}]"));
    }
    // Free text at a code's place is not quoted.
    let body = r#"{"error":"the card of Jane Doe was declined"}"#;
    let Evidence::Rejected { reason } = classify(&Contract::conservative(), 400, &[], body) else {
        panic!()
    };
    assert_eq!(reason, "HTTP 400 Bad Request");
    let Evidence::Rejected { reason } = classify(
        &Contract::conservative(),
        403,
        &[],
        "<html>secret stuff</html>",
    ) else {
        panic!()
    };
    assert_eq!(reason, "HTTP 403 Forbidden");
}

// ---------------------------------------------------------------------------------------------
// Rules.

#[test]
fn stripe_like_429_is_not_executed_with_retry_after() {
    let e = classify(&stripe_like(), 429, &[("retry-after", "2")], "{}");
    let Evidence::NotExecuted { why, retry_after } = e else {
        panic!("{e:?}")
    };
    assert_eq!(retry_after, Some(Duration::from_secs(2)));
    assert_eq!(
        why,
        "HTTP 429 Too Many Requests: rate limited before idempotency runs"
    );
}

#[test]
fn stripe_like_body_codes_select_conflicts() {
    let c = stripe_like();
    assert_eq!(
        classify(
            &c,
            409,
            &[],
            r#"{"error":{"code":"idempotency_key_in_use"}}"#
        ),
        Evidence::Conflict {
            conflict: ConflictKind::InFlight
        }
    );
    assert_eq!(
        classify(
            &c,
            400,
            &[],
            r#"{"error":{"type":"idempotency_error","message":"..."}}"#
        ),
        Evidence::Conflict {
            conflict: ConflictKind::Mismatch
        }
    );
    // A plain validation 400 falls through to the default.
    let e = classify(
        &c,
        400,
        &[],
        r#"{"error":{"type":"invalid_request_error","code":"parameter_missing"}}"#,
    );
    assert_eq!(
        e,
        Evidence::Rejected {
            reason: "HTTP 400 Bad Request [parameter_missing]".into()
        }
    );
    // A non-JSON body never matches a body condition.
    assert_eq!(
        classify(&c, 400, &[], "idempotency_error").label(),
        "rejected"
    );
}

#[test]
fn stripe_should_retry_header_overrides_the_status() {
    let c = stripe_like();
    let e = classify(&c, 500, &[("Stripe-Should-Retry", "FALSE")], "");
    assert_eq!(
        e,
        Evidence::Rejected {
            reason: "HTTP 500 Internal Server Error: Stripe-Should-Retry: false".into()
        }
    );
    // Without the header, or with `true`, the 500 stays indeterminate.
    assert_eq!(classify(&c, 500, &[], "").label(), "unknown");
    assert_eq!(
        classify(&c, 500, &[("stripe-should-retry", "true")], "").label(),
        "unknown"
    );
}

#[test]
fn first_matching_rule_wins() {
    let c = Contract::conservative()
        .rule(
            Rule::new(StatusMatch::range(500, 599), EvidenceClass::Unknown)
                .header("Transient-Error", "true"),
        )
        .rule(Rule::new(500, EvidenceClass::Rejected));
    // Several header values: any may match.
    let e = classify(
        &c,
        500,
        &[("transient-error", "false"), ("transient-error", " True ")],
        "",
    );
    let Evidence::Unknown { why, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(why, "HTTP 500 Internal Server Error (contract rule 0)");
    assert_eq!(classify(&c, 500, &[], "").label(), "rejected");
    assert_eq!(classify(&c, 502, &[], "").label(), "unknown");
}

#[test]
fn body_condition_compares_numbers_and_strings_by_text() {
    let c = Contract::conservative().rule(
        Rule::new(
            StatusMatch::range(400, 499),
            EvidenceClass::ConflictInFlight,
        )
        .body("/errorCode", "704"),
    );
    for body in [r#"{"errorCode":"704"}"#, r#"{"errorCode":704}"#] {
        assert_eq!(
            classify(&c, 422, &[], body).label(),
            "conflict_in_flight",
            "{body}"
        );
    }
    assert_eq!(
        classify(&c, 422, &[], r#"{"errorCode":"705"}"#).label(),
        "rejected"
    );
}

#[test]
fn rules_can_yield_every_class() {
    let cases = [
        (EvidenceClass::Succeeded, "succeeded"),
        (EvidenceClass::Processing, "processing"),
        (EvidenceClass::Rejected, "rejected"),
        (EvidenceClass::NotExecuted, "not_executed"),
        (EvidenceClass::Unknown, "unknown"),
        (EvidenceClass::ConflictMismatch, "conflict_mismatch"),
        (EvidenceClass::ConflictInFlight, "conflict_in_flight"),
    ];
    for (class, label) in cases {
        let c = Contract::conservative().rule(Rule::new(418, class));
        assert_eq!(classify(&c, 418, &[], "").label(), label);
    }
}

#[test]
fn an_invalid_rule_never_panics() {
    let c = Contract::conservative()
        .rule(Rule::new(500, EvidenceClass::Rejected).header("Bad Header", "x"))
        .rule(Rule::new(500, EvidenceClass::Rejected).body("no-slash", "x"))
        .rule(Rule::new(500, EvidenceClass::NotExecuted).reason("  "));
    let e = classify(&c, 500, &[("x", "y")], r#"{"a":1}"#);
    let Evidence::NotExecuted { why, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(why, "HTTP 500 Internal Server Error (contract rule 2)");
}

#[test]
fn a_rule_without_status_never_matches() {
    let mut c = Contract::conservative();
    c.rules.push(Rule {
        status: None,
        header: None,
        body: None,
        xml: None,
        evidence: EvidenceClass::Succeeded,
        reason: None,
    });
    assert_eq!(default_class(500), classify(&c, 500, &[], ""));
}

// ---------------------------------------------------------------------------------------------
// Remote reference.

#[test]
fn success_requires_the_remote_reference_when_configured() {
    let c = stripe_like();
    assert_eq!(
        classify(&c, 200, &[], r#"{"id":"ch_1","object":"charge"}"#),
        Evidence::Succeeded {
            remote_ref: Some("ch_1".into())
        }
    );
    for body in [
        "",
        "OK",
        "{}",
        r#"{"id":null}"#,
        r#"{"id":""}"#,
        r#"{"id":{"x":1}}"#,
        "[1,2]",
    ] {
        let e = classify(&c, 200, &[], body);
        assert_eq!(
            e,
            Evidence::Unknown {
                why: "success response without a remote reference".into(),
                retry_after: None
            },
            "{body:?}"
        );
    }
    // Also when a rule says succeeded.
    let c = c.rule(Rule::new(299, EvidenceClass::Succeeded));
    assert_eq!(classify(&c, 299, &[], "").label(), "unknown");
    // 202 is processing, never subject to the reference.
    assert_eq!(classify(&stripe_like(), 202, &[], "").label(), "processing");
}

#[test]
fn nested_remote_ref_pointer() {
    let c = Contract::conservative().remote_ref(RemoteRef::required("/data/ticket/number"));
    assert_eq!(
        classify(&c, 201, &[], r#"{"data":{"ticket":{"number":731}}}"#),
        Evidence::Succeeded {
            remote_ref: Some("731".into())
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Retry-After.

fn ra(s: &str) -> Option<Duration> {
    parse_retry_after(&HeaderValue::from_str(s).unwrap(), now())
}

#[test]
fn example_date_is_what_the_tests_assume() {
    assert_eq!(
        httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap(),
        at(EXAMPLE_SECS)
    );
}

#[test]
fn retry_after_delay_seconds() {
    assert_eq!(ra("120"), Some(Duration::from_secs(120)));
    assert_eq!(ra("0"), Some(Duration::ZERO));
    assert_eq!(ra(" 7 "), Some(Duration::from_secs(7)));
    assert_eq!(ra("99999999999999999999999"), Some(MAX_RETRY_AFTER));
    assert_eq!(ra("1000000000000"), Some(MAX_RETRY_AFTER));
    let h = headers(&[("retry-after-ms", "18446744073709551615")]);
    assert_eq!(retry_after_from_headers(&h, now()), Some(MAX_RETRY_AFTER));
}

#[test]
fn retry_after_all_three_date_formats() {
    // now() is 60 s before the example date.
    assert_eq!(
        ra("Sun, 06 Nov 1994 08:49:37 GMT"),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        ra("Sunday, 06-Nov-94 08:49:37 GMT"),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        ra("Sun Nov  6 08:49:37 1994"),
        Some(Duration::from_secs(60))
    );
}

#[test]
fn retry_after_past_date_is_zero() {
    assert_eq!(ra("Sat, 05 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
    assert_eq!(ra("Thu, 01 Jan 1970 00:00:00 GMT"), Some(Duration::ZERO));
}

#[test]
fn retry_after_far_date_is_clamped() {
    assert_eq!(ra("Fri, 31 Dec 9999 23:59:59 GMT"), Some(MAX_RETRY_AFTER));
    let h = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "18446744073709551615"),
    ]);
    assert_eq!(retry_after_from_headers(&h, now()), Some(MAX_RETRY_AFTER));
}

#[test]
fn retry_after_garbage_is_none() {
    for s in [
        "",
        "soon",
        "-5",
        "+5",
        "1.5",
        "5s",
        "Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 32 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37",
    ] {
        assert_eq!(ra(s), None, "{s:?}");
    }
    let opaque = HeaderValue::from_bytes(b"\xff\xfe").unwrap();
    assert_eq!(parse_retry_after(&opaque, now()), None);
}

#[test]
fn retry_after_ms_is_preferred() {
    let h = headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]);
    assert_eq!(
        retry_after_from_headers(&h, now()),
        Some(Duration::from_millis(1500))
    );
    let h = headers(&[("retry-after-ms", "soon"), ("retry-after", "9")]);
    assert_eq!(
        retry_after_from_headers(&h, now()),
        Some(Duration::from_secs(9))
    );
}

// ---------------------------------------------------------------------------------------------
// Key placement.

#[test]
fn key_in_plain_header_replaces_an_existing_one() {
    let c = Contract::conservative();
    let mut p = parts("https://api.test/tickets");
    p.headers
        .insert("idempotency-key", HeaderValue::from_static("other"));
    let body = c
        .attach_key(&mut p, Bytes::from_static(b"{}"), &key())
        .unwrap();
    assert_eq!(body, Bytes::from_static(b"{}"));
    let all: Vec<_> = p.headers.get_all("Idempotency-Key").iter().collect();
    assert_eq!(all, [key().as_str()]);
}

#[test]
fn key_in_quoted_header_is_an_sf_string() {
    let c = Contract::ietf_draft();
    let mut p = parts("https://api.test/tickets");
    c.attach_key(&mut p, Bytes::new(), &key()).unwrap();
    assert_eq!(
        p.headers["idempotency-key"],
        format!("\"{}\"", key().as_str()).as_str()
    );
    let odd = IdempotencyKey::from_stored(r#"a"b\c-0000-0000-0000-000000000000"#);
    c.attach_key(&mut p, Bytes::new(), &odd).unwrap();
    assert_eq!(
        p.headers["idempotency-key"],
        r#""a\"b\\c-0000-0000-0000-000000000000""#
    );
}

#[test]
fn header_keys_must_be_printable_ascii() {
    for bad in ["clé-0000", "tab\tkey", " lead", "trail "] {
        let err = Contract::conservative()
            .attach_key(
                &mut parts("https://a.test/"),
                Bytes::new(),
                &IdempotencyKey::from_stored(bad),
            )
            .unwrap_err();
        assert!(
            matches!(err.kind(), ContractErrorKind::KeyNotEncodable(_)),
            "{bad:?}: {err}"
        );
    }
}

fn json_contract(pointer: &str) -> Contract {
    Contract::new(
        "json",
        KeyPlacement::JsonBody {
            pointer: pointer.into(),
        },
    )
}

#[test]
fn key_in_json_body_top_level_keeps_the_callers_bytes() {
    let c = json_contract("/idempotency_key");
    let mut p = parts("https://connect.test/v2/payments");
    let body = Bytes::from_static(b"  { \"amount\": 100,\n \"memo\": \"x\" }");
    let out = c.attach_key(&mut p, body, &key()).unwrap();
    assert_eq!(
        out,
        format!(
            "  {{\"idempotency_key\":\"{}\", \"amount\": 100,\n \"memo\": \"x\" }}",
            key().as_str()
        )
    );
    // Attaching again changes nothing.
    let again = c.attach_key(&mut p, out.clone(), &key()).unwrap();
    assert_eq!(again, out);
    // An empty object.
    let out = c
        .attach_key(&mut p, Bytes::from_static(b"{}"), &key())
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["idempotency_key"], key().as_str());
}

#[test]
fn key_in_json_body_nested_pointer() {
    let c = json_contract("/meta/request~1id");
    let mut p = parts("https://api.test/x");
    let out = c
        .attach_key(
            &mut p,
            Bytes::from_static(br#"{"amount":100,"meta":{"a":1}}"#),
            &key(),
        )
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v.pointer("/meta/request~1id").unwrap(), key().as_str());
    assert_eq!(v["meta"]["a"], 1);
    assert_eq!(v["amount"], 100);
    assert_eq!(c.attach_key(&mut p, out.clone(), &key()).unwrap(), out);
    // Missing intermediate objects are created.
    let out = c
        .attach_key(&mut p, Bytes::from_static(b"{}"), &key())
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["meta"]["request/id"], key().as_str());
    // An existing different value is replaced.
    let c = json_contract("/idempotency_key");
    let out = c
        .attach_key(
            &mut p,
            Bytes::from_static(br#"{"idempotency_key":"old","b":2}"#),
            &key(),
        )
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["idempotency_key"], key().as_str());
    assert_eq!(v["b"], 2);
}

#[test]
fn key_in_json_body_updates_content_length() {
    let c = json_contract("/idempotency_key");
    let mut p = parts("https://api.test/x");
    p.headers
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(2));
    let out = c
        .attach_key(&mut p, Bytes::from_static(b"{}"), &key())
        .unwrap();
    assert_eq!(
        p.headers[http::header::CONTENT_LENGTH],
        out.len().to_string().as_str()
    );
}

#[test]
fn key_in_json_body_needs_an_object() {
    let c = json_contract("/idempotency_key");
    for body in ["", "[1]", "\"x\"", "42", "not json", "{\"a\":"] {
        let err = c
            .attach_key(&mut parts("https://a.test/"), Bytes::from(body), &key())
            .unwrap_err();
        assert_eq!(
            err.kind(),
            &ContractErrorKind::BodyNotJsonObject,
            "{body:?}"
        );
        assert_eq!(err.field(), "key.pointer");
    }
    let err = json_contract("/meta/id")
        .attach_key(
            &mut parts("https://a.test/"),
            Bytes::from(r#"{"meta":"x"}"#),
            &key(),
        )
        .unwrap_err();
    assert_eq!(
        err.kind(),
        &ContractErrorKind::PointerBlocked {
            pointer: "/meta/id".into(),
            at: "/meta".into()
        }
    );
}

fn query_contract() -> Contract {
    Contract::new(
        "query",
        KeyPlacement::Query {
            name: "requestId".into(),
        },
    )
}

#[test]
fn key_in_query_keeps_the_existing_query() {
    let c = query_contract();
    let mut p = parts("https://compute.test/v1/instances?a=1&b=two%20words");
    c.attach_key(&mut p, Bytes::new(), &key()).unwrap();
    assert_eq!(
        p.uri.to_string(),
        format!(
            "https://compute.test/v1/instances?a=1&b=two%20words&requestId={}",
            key().as_str()
        )
    );
    // Idempotent.
    let before = p.uri.clone();
    c.attach_key(&mut p, Bytes::new(), &key()).unwrap();
    assert_eq!(p.uri, before);
    // No query yet, no path.
    let mut p = parts("https://compute.test");
    c.attach_key(&mut p, Bytes::new(), &key()).unwrap();
    assert_eq!(
        p.uri.to_string(),
        format!("https://compute.test/?requestId={}", key().as_str())
    );
    // A different existing value is replaced.
    let mut p = parts("https://compute.test/x?requestId=old&z=9");
    c.attach_key(&mut p, Bytes::new(), &key()).unwrap();
    assert_eq!(
        p.uri.query(),
        Some(format!("z=9&requestId={}", key().as_str()).as_str())
    );
}

#[test]
fn key_in_query_is_percent_encoded() {
    let c = Contract::new(
        "q",
        KeyPlacement::Query {
            name: "client token".into(),
        },
    );
    let mut p = parts("https://a.test/x?y=1");
    let odd = IdempotencyKey::from_stored("a b&c=d/é+%");
    c.attach_key(&mut p, Bytes::new(), &odd).unwrap();
    assert_eq!(
        p.uri.query(),
        Some("y=1&client%20token=a%20b%26c%3Dd%2F%C3%A9%2B%25")
    );
    let before = p.uri.clone();
    c.attach_key(&mut p, Bytes::new(), &odd).unwrap();
    assert_eq!(p.uri, before);
}

#[test]
fn key_in_form_body() {
    let c = Contract::new(
        "form",
        KeyPlacement::FormBody {
            name: "ClientToken".into(),
        },
    );
    let mut p = parts("https://ec2.test/");
    let out = c
        .attach_key(
            &mut p,
            Bytes::from_static(b"Action=RunInstances&ImageId=ami-1"),
            &key(),
        )
        .unwrap();
    assert_eq!(
        out,
        format!(
            "Action=RunInstances&ImageId=ami-1&ClientToken={}",
            key().as_str()
        )
    );
    assert_eq!(c.attach_key(&mut p, out.clone(), &key()).unwrap(), out);
    let err = c
        .attach_key(&mut p, Bytes::from_static(b"\xff\xfe"), &key())
        .unwrap_err();
    assert_eq!(err.kind(), &ContractErrorKind::BodyNotForm);
}

#[test]
fn oversize_and_empty_keys_are_refused() {
    let c = Contract::conservative().max_key_len(40);
    let long = IdempotencyKey::from_stored("k".repeat(41));
    let err = c
        .attach_key(&mut parts("https://a.test/"), Bytes::new(), &long)
        .unwrap_err();
    assert_eq!(
        err.kind(),
        &ContractErrorKind::KeyTooLong { len: 41, max: 40 }
    );
    assert_eq!(err.field(), "key");
    assert!(
        c.check_key(&IdempotencyKey::from_stored("k".repeat(40)))
            .is_ok()
    );
    assert!(c.check_key(&IdempotencyKey::generate()).is_ok());
    let err = c.check_key(&IdempotencyKey::from_stored("")).unwrap_err();
    assert_eq!(err.kind(), &ContractErrorKind::Empty);
    // validate refuses a maximum that cannot hold a generated key.
    let err = Contract::conservative()
        .max_key_len(35)
        .validate()
        .unwrap_err();
    assert_eq!(
        err.kind(),
        &ContractErrorKind::MaxKeyLenTooSmall { value: 35, min: 36 }
    );
    assert_eq!(err.field(), "max_key_len");
}

// ---------------------------------------------------------------------------------------------
// Validation.

#[track_caller]
fn invalid(c: Contract, field: &str, kind: ContractErrorKind) {
    let err = c.validate().unwrap_err();
    assert_eq!((err.field(), err.kind()), (field, &kind), "{err}");
    let text = err.to_string();
    assert!(text.contains(field) && text.contains(&c.name), "{text}");
}

#[test]
fn numeric_fields_beyond_their_bounds_are_refused() {
    // A huge retention passed validation and later overflowed `retention_secs * 1000` inside
    // a spawned recoverer.
    for (c, field) in [
        (
            Contract::ietf_draft().retention_secs(u64::MAX),
            "retention_secs",
        ),
        (
            Contract::ietf_draft().retention_secs(MAX_RETENTION_SECS + 1),
            "retention_secs",
        ),
        (Contract::ietf_draft().settle_secs(u64::MAX), "settle_secs"),
        (
            Contract::ietf_draft().settle_secs(MAX_SETTLE_SECS + 1),
            "settle_secs",
        ),
        (
            Contract::ietf_draft().max_key_len(usize::MAX),
            "max_key_len",
        ),
    ] {
        let err = c.validate().unwrap_err();
        assert_eq!(err.field(), field, "{err}");
        assert!(
            matches!(err.kind(), ContractErrorKind::TooLarge { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("at most"), "{err}");
    }
    // The bounds themselves are fine.
    Contract::ietf_draft()
        .retention_secs(MAX_RETENTION_SECS)
        .settle_secs(MAX_SETTLE_SECS)
        .max_key_len(MAX_KEY_LEN_LIMIT)
        .validate()
        .unwrap();
    // From JSON, the error names the field too.
    let err = Contract::from_json(
        r#"{"name":"x","key":{"in":"header","name":"Idempotency-Key"},"retention_secs":18446744073709551615}"#,
    )
    .unwrap_err();
    assert_eq!(err.field(), "retention_secs");
    assert_eq!(
        err.to_string(),
        "contract `x`, retention_secs: 18446744073709551615 is too large: at most 31536000 (365 days)"
    );
}

#[test]
fn contract_from_json_refuses_duplicate_fields() {
    // serde's derived structs refuse a repeated field (a map would keep the last silently).
    for (text, field) in [
        (
            r#"{"name":"x","key":{"in":"header","name":"Idempotency-Key"},"retention_secs":86400,"retention_secs":1}"#,
            "retention_secs",
        ),
        (
            r#"{"name":"x","key":{"in":"header","in":"query","name":"Idempotency-Key"}}"#,
            "in",
        ),
        (
            r#"{"name":"x","key":{"in":"header","name":"Idempotency-Key"},"remote_ref":{"pointer":"/id","pointer":"/x"}}"#,
            "pointer",
        ),
    ] {
        let err = Contract::from_json(text).unwrap_err();
        let ContractErrorKind::Parse(why) = err.kind() else {
            panic!("{err:?}")
        };
        assert!(why.contains(&format!("duplicate field `{field}`")), "{why}");
    }
}

#[test]
fn builtin_profiles_are_valid() {
    Contract::conservative().validate().unwrap();
    Contract::ietf_draft().validate().unwrap();
    stripe_like().validate().unwrap();
    Contracts::default().validate().unwrap();
    let all = profiles::all();
    assert_eq!(all.len(), profiles::NAMES.len());
    for c in &all {
        c.validate().unwrap_or_else(|e| panic!("{}: {e}", c.name));
        // Round trip through JSON: what a configuration file can say, a profile can be.
        let back = Contract::from_json(&serde_json::to_string(c).unwrap()).unwrap();
        assert_eq!(&back, c);
    }
}

#[test]
fn invalid_contracts_name_the_field() {
    invalid(
        Contract::conservative().named(" "),
        "name",
        ContractErrorKind::Empty,
    );
    invalid(
        Contract::conservative().key(KeyPlacement::header("Idempotency Key")),
        "key.name",
        ContractErrorKind::InvalidHeaderName("Idempotency Key".into()),
    );
    invalid(
        json_contract("idempotency_key"),
        "key.pointer",
        ContractErrorKind::InvalidPointer("idempotency_key".into()),
    );
    invalid(
        json_contract(""),
        "key.pointer",
        ContractErrorKind::EmptyPointer,
    );
    invalid(
        Contract::new(
            "q",
            KeyPlacement::Query {
                name: String::new(),
            },
        ),
        "key.name",
        ContractErrorKind::Empty,
    );
    invalid(
        stripe_like().rule(Rule::new(
            StatusMatch::range(600, 700),
            EvidenceClass::Unknown,
        )),
        "rules[4].status",
        ContractErrorKind::InvalidStatusRange { lo: 600, hi: 700 },
    );
    invalid(
        Contract::conservative().rule(Rule::new(
            StatusMatch::range(599, 500),
            EvidenceClass::Unknown,
        )),
        "rules[0].status",
        ContractErrorKind::InvalidStatusRange { lo: 599, hi: 500 },
    );
    invalid(
        Contract::conservative().rule(Rule::new(99, EvidenceClass::Unknown)),
        "rules[0].status",
        ContractErrorKind::InvalidStatusRange { lo: 99, hi: 99 },
    );
    let mut empty_rule = Contract::conservative().rule(Rule::new(500, EvidenceClass::Unknown));
    empty_rule.rules.push(Rule {
        status: None,
        header: None,
        body: None,
        xml: None,
        evidence: EvidenceClass::Unknown,
        reason: None,
    });
    invalid(
        empty_rule,
        "rules[1].status",
        ContractErrorKind::MissingStatus,
    );
    invalid(
        Contract::conservative()
            .rule(Rule::new(500, EvidenceClass::Unknown).header("Bad Header", "x")),
        "rules[0].header.name",
        ContractErrorKind::InvalidHeaderName("Bad Header".into()),
    );
    invalid(
        Contract::conservative().rule(Rule::new(500, EvidenceClass::Unknown).body("/a~2", "x")),
        "rules[0].body.pointer",
        ContractErrorKind::InvalidPointer("/a~2".into()),
    );
    invalid(
        Contract::conservative().remote_ref(RemoteRef::required("id")),
        "remote_ref.pointer",
        ContractErrorKind::InvalidPointer("id".into()),
    );
    invalid(
        Contract::conservative()
            .secret_header("X-Api-Key")
            .secret_header("bad:name"),
        "secret_headers[1]",
        ContractErrorKind::InvalidHeaderName("bad:name".into()),
    );
    invalid(
        Contract::conservative().digest(PayloadDigest::Fields(vec![
            "/amount".into(),
            "currency".into(),
        ])),
        "digest.pointers[1]",
        ContractErrorKind::InvalidPointer("currency".into()),
    );
}

#[test]
fn error_display_names_contract_field_and_problem() {
    let err = Contract::conservative()
        .named("acme")
        .rule(Rule::new(
            StatusMatch::range(500, 700),
            EvidenceClass::Unknown,
        ))
        .validate()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "contract `acme`, rules[0].status: status range 500-700 is invalid: codes must be within 100..=599 and the low end must not exceed the high end"
    );
}

// ---------------------------------------------------------------------------------------------
// Serialization and reference.

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

#[test]
fn contract_reads_from_json() {
    let c = Contract::from_json(STRIPE_JSON).unwrap();
    assert_eq!(c.name, "stripe-v1");
    assert_eq!(c.max_key_len, 255);
    assert_eq!(c.replay, Replay::StoredFirstResponse);
    assert_eq!(c.rules.len(), 3);
    assert_eq!(c.rules[2].status, Some(StatusMatch::range(500, 599)));
    assert_eq!(c.remote_ref, Some(RemoteRef::required("/id")));
    // Round trip.
    let back: Contract = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    // Minimal: defaults fill the rest.
    let min = Contract::from_json(r#"{"name":"m","key":{"in":"header","name":"X-Key"}}"#).unwrap();
    assert_eq!(min.max_key_len, DEFAULT_MAX_KEY_LEN);
    assert_eq!(min.replay, Replay::Unsafe);
    assert_eq!(
        min.key,
        KeyPlacement::Header {
            name: "X-Key".into(),
            format: KeyFormat::Plain
        }
    );
    // Other placements.
    let q = Contract::from_json(
        r#"{"name":"g","key":{"in":"query","name":"requestId"},"replay":"none"}"#,
    )
    .unwrap();
    assert_eq!(q.replay, Replay::Unsafe);
    let j = Contract::from_json(r#"{"name":"sq","key":{"in":"json_body","pointer":"/idempotency_key"},"replay":"current_state"}"#).unwrap();
    assert!(j.replay.is_safe());
}

#[test]
fn status_forms_in_json() {
    let rule = |s: &str| {
        serde_json::from_str::<Rule>(&format!(r#"{{"status":{s},"evidence":"unknown"}}"#))
    };
    assert_eq!(rule("429").unwrap().status, Some(StatusMatch::code(429)));
    assert_eq!(
        rule("\"429\"").unwrap().status,
        Some(StatusMatch::code(429))
    );
    assert_eq!(
        rule("\"5xx\"").unwrap().status,
        Some(StatusMatch::range(500, 599))
    );
    assert_eq!(
        rule("\"4XX\"").unwrap().status,
        Some(StatusMatch::range(400, 499))
    );
    assert_eq!(
        rule("\" 500 - 504 \"").unwrap().status,
        Some(StatusMatch::range(500, 504))
    );
    for bad in [
        "\"abc\"", "-1", "70000", "\"5000\"", "\"x-1\"", "1.5", "\"\"",
    ] {
        assert!(rule(bad).is_err(), "{bad}");
    }
    // Serialized: a number for one code, "lo-hi" for a range.
    let json = serde_json::to_string(&Rule::new(
        StatusMatch::range(500, 599),
        EvidenceClass::Unknown,
    ))
    .unwrap();
    assert_eq!(json, r#"{"status":"500-599","evidence":"unknown"}"#);
    let json = serde_json::to_string(&Rule::new(429, EvidenceClass::NotExecuted)).unwrap();
    assert_eq!(json, r#"{"status":429,"evidence":"not_executed"}"#);
}

#[test]
fn unknown_fields_and_bad_values_are_refused() {
    for bad in [
        r#"{"name":"x","key":{"in":"header","name":"K"},"retenton_secs":5}"#,
        r#"{"name":"x","key":{"in":"header","name":"K","fromat":"quoted"}}"#,
        r#"{"name":"x","key":{"in":"cookie","name":"K"}}"#,
        r#"{"name":"x","key":{"in":"header","name":"K"},"rules":[{"status":500,"evidence":"unknown","headr":{}}]}"#,
        r#"{"name":"x","key":{"in":"header","name":"K"},"rules":[{"status":500,"evidence":"maybe"}]}"#,
        r#"{"name":"x","key":{"in":"header","name":"K"},"remote_ref":{"pointer":"/id","requried":true}}"#,
        r#"{"name":"x","key":{"in":"header","name":"K"},"replay":"sometimes"}"#,
        "not json",
    ] {
        let err = Contract::from_json(bad).unwrap_err();
        assert!(
            matches!(err.kind(), ContractErrorKind::Parse(_)),
            "{bad}: {err}"
        );
    }
    // Parsed but invalid: an empty rule.
    let err = Contract::from_json(
        r#"{"name":"x","key":{"in":"header","name":"K"},"rules":[{"evidence":"unknown"}]}"#,
    )
    .unwrap_err();
    assert_eq!(err.kind(), &ContractErrorKind::MissingStatus);
    assert_eq!(err.field(), "rules[0].status");
}

#[test]
fn canonical_json_of_the_conservative_default_is_pinned() {
    // Changing this changes the hash frozen on every operation row that uses the default: do it
    // only on purpose.
    assert_eq!(
        Contract::conservative().canonical_json(),
        r#"{"digest":{"mode":"full"},"key":{"format":"plain","in":"header","name":"Idempotency-Key"},"max_key_len":64,"name":"default","remote_ref":{"pointer":"/id","required":false},"replay":"unsafe"}"#
    );
}

#[test]
fn reference_is_stable_and_order_independent() {
    let a = Contract::from_json(STRIPE_JSON).unwrap();
    let r = a.reference();
    assert_eq!(&*r.name, "stripe-v1");
    assert_eq!(r.hash.len(), 64);
    assert!(r.hash.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(a.clone().reference(), r);
    // Same contract, fields in another order and other whitespace.
    let reordered = r#"{"digest":{"mode":"full"},"secret_headers":["Stripe-Account"],
        "remote_ref":{"required":true,"pointer":"/id"},
        "rules":[{"evidence":"not_executed","reason":"rate limited before idempotency","status":"429"},
                 {"evidence":"conflict_in_flight","body":{"equals":"idempotency_key_in_use","pointer":"/error/code"},"status":409},
                 {"evidence":"unknown","header":{"value":"false","name":"Stripe-Should-Retry"},"status":"5xx"}],
        "replay":"stored_first_response","retention_secs":86400,"max_key_len":255,
        "key":{"format":"plain","name":"Idempotency-Key","in":"header"},"name":"stripe-v1"}"#;
    assert_eq!(Contract::from_json(reordered).unwrap().reference(), r);
    // The hash is the SHA-256 of the canonical JSON.
    use sha2::Digest as _;
    assert_eq!(
        &*r.hash,
        crate::operation::hex(&sha2::Sha256::digest(a.canonical_json().as_bytes()))
    );
}

#[test]
fn reference_changes_when_any_field_changes() {
    let base = Contract::from_json(STRIPE_JSON).unwrap();
    let h = base.reference().hash;
    let variants: Vec<Contract> = vec![
        base.clone().named("stripe-v1b"),
        base.clone().key(KeyPlacement::Header {
            name: "Idempotency-Key".into(),
            format: KeyFormat::Quoted,
        }),
        base.clone().max_key_len(254),
        base.clone().retention_secs(86401),
        base.clone().replay(Replay::CurrentState),
        base.clone().rule(Rule::new(418, EvidenceClass::Rejected)),
        {
            let mut c = base.clone();
            c.rules[0].reason = None;
            c
        },
        {
            let mut c = base.clone();
            c.rules[1].body = Some(BodyMatch {
                pointer: "/error/code".into(),
                equals: "other".into(),
            });
            c
        },
        base.clone().remote_ref(RemoteRef::optional("/id")),
        base.clone().secret_header("X-Other"),
        base.clone()
            .digest(PayloadDigest::Fields(vec!["/amount".into()])),
    ];
    let mut seen = std::collections::HashSet::new();
    seen.insert(h);
    for v in variants {
        assert!(seen.insert(v.reference().hash), "{v:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Target selection.

fn uri(s: &str) -> Uri {
    s.parse().unwrap()
}

fn named(name: &str) -> Contract {
    Contract::conservative().named(name)
}

#[test]
fn select_by_host_ignores_case_port_and_trailing_dot() {
    let cs = Contracts::default().route(Target::host("api.stripe.com"), named("stripe"));
    for u in [
        "https://api.stripe.com/v1/charges",
        "https://API.Stripe.COM:443/v1/charges",
        "http://api.stripe.com:8080/",
        "https://api.stripe.com./v1",
    ] {
        assert_eq!(cs.select(&Method::POST, &uri(u)).name, "stripe", "{u}");
    }
    assert_eq!(
        cs.select(&Method::POST, &uri("https://stripe.com/v1")).name,
        "default"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://xapi.stripe.com/"))
            .name,
        "default"
    );
    // A relative URI has no host: the default.
    assert_eq!(
        cs.select(&Method::POST, &uri("/v1/charges")).name,
        "default"
    );
}

#[test]
fn select_with_port_matches_only_that_port() {
    let cs = Contracts::default()
        .route(Target::host("api.test:8443"), named("8443"))
        .route(Target::host("web.test:443"), named("443"))
        .route(Target::host("[::1]:8080"), named("v6"));
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test:8443/x"))
            .name,
        "8443"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/x")).name,
        "default"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://web.test/x")).name,
        "443"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("http://web.test/x")).name,
        "default"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("http://[::1]:8080/x")).name,
        "v6"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("http://[::1]:8081/x")).name,
        "default"
    );
}

#[test]
fn select_path_prefix_is_segment_aware() {
    let cs = Contracts::default().route(Target::host("api.test").path_prefix("/v1"), named("v1"));
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v1")).name,
        "v1"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v1/charges"))
            .name,
        "v1"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v1/?a=1"))
            .name,
        "v1"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v10/charges"))
            .name,
        "default"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/")).name,
        "default"
    );
    // A trailing slash in the prefix means the same.
    let cs = Contracts::default().route(Target::host("api.test").path_prefix("/v1/"), named("v1"));
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v1/charges"))
            .name,
        "v1"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v10")).name,
        "default"
    );
}

#[test]
fn select_most_specific_wins() {
    let cs = Contracts::default()
        .route(Target::host("*.stripe.com"), named("wild"))
        .route(Target::host("api.stripe.com"), named("host"))
        .route(
            Target::host("api.stripe.com").path_prefix("/v1"),
            named("v1"),
        )
        .route(
            Target::host("api.stripe.com")
                .path_prefix("/v1")
                .method(Method::POST),
            named("v1-post"),
        )
        .route(
            Target::host("api.stripe.com").path_prefix("/v1/refunds"),
            named("refunds"),
        )
        .route(
            Target::host("api.stripe.com")
                .path_prefix("/v2")
                .method(Method::POST),
            named("v2-post"),
        );
    let pick = |m: Method, u: &str| cs.select(&m, &uri(u)).name.clone();
    assert_eq!(
        pick(Method::POST, "https://api.stripe.com/v1/charges"),
        "v1-post"
    );
    assert_eq!(
        pick(Method::DELETE, "https://api.stripe.com/v1/charges"),
        "v1"
    );
    // A longer prefix beats a method.
    assert_eq!(
        pick(Method::POST, "https://api.stripe.com/v1/refunds/re_1"),
        "refunds"
    );
    assert_eq!(pick(Method::DELETE, "https://api.stripe.com/v2/x"), "host");
    assert_eq!(pick(Method::POST, "https://api.stripe.com/v2/x"), "v2-post");
    assert_eq!(
        pick(Method::POST, "https://files.stripe.com/v1/files"),
        "wild"
    );
    // A wildcard does not match the apex.
    assert_eq!(pick(Method::POST, "https://stripe.com/v1"), "default");
}

#[test]
fn registering_an_equal_target_replaces_it() {
    let cs = Contracts::default()
        .route(Target::host("a.test"), named("first"))
        .route(Target::host("a.test"), named("second"));
    assert_eq!(cs.routes().count(), 1);
    assert_eq!(
        cs.select(&Method::POST, &uri("https://a.test/")).name,
        "second"
    );
}

#[test]
fn get_and_find_by_reference() {
    let stripe = Contract::from_json(STRIPE_JSON).unwrap();
    let cs = Contracts::default().route(Target::host("api.stripe.com"), stripe.clone());
    assert_eq!(cs.get("default").unwrap().name, "default");
    assert_eq!(cs.get("stripe-v1").unwrap().as_ref(), &stripe);
    assert!(cs.get("nope").is_none());
    assert_eq!(cs.find(&stripe.reference()).unwrap().as_ref(), &stripe);
    let changed = stripe.clone().max_key_len(100).reference();
    assert!(cs.find(&changed).is_none());
}

#[test]
fn registry_validation() {
    let cs = Contracts::default()
        .route(Target::host("a.test"), named("same"))
        .route(Target::host("b.test"), named("same"));
    cs.validate().unwrap();
    let cs = cs.route(Target::host("c.test"), named("same").max_key_len(100));
    let err = cs.validate().unwrap_err();
    assert_eq!(err.kind(), &ContractErrorKind::DuplicateName("same".into()));
    for bad in [
        Target::host(""),
        Target::host("a.test/v1"),
        Target::host("a.test:http"),
        Target::host("a.test").path_prefix("v1"),
    ] {
        let err = Contracts::default()
            .route(bad.clone(), named("x"))
            .validate()
            .unwrap_err();
        assert!(
            matches!(err.kind(), ContractErrorKind::InvalidTarget(_)),
            "{bad:?}"
        );
    }
}

/// The selection rule written as the plain scan it replaced: every route, the highest rank,
/// the first registered on a tie.
fn select_by_scan<'a>(cs: &'a Contracts, method: &Method, u: &Uri) -> &'a str {
    let mut best: Option<(super::registry::Rank, &str)> = None;
    for (target, contract) in cs.routes() {
        if let Some(rank) = target.specificity(method, u)
            && best.is_none_or(|(b, _)| rank > b)
        {
            best = Some((rank, &contract.name));
        }
    }
    best.map_or(&cs.default_contract().name, |(_, name)| name)
}

fn arb_target() -> impl Strategy<Value = Target> {
    let host = prop::sample::select(vec![
        "a.test",
        "A.test",
        "a.test.",
        "b.a.test",
        "*.test",
        "*.a.test",
        "*.A.TEST",
        "*.b.a.test",
        "a.test:8443",
        "a.test:443",
        "*.test:80",
        "[::1]",
        "[::1]:8080",
        "x",
        "*.",
        "",
    ]);
    let prefix = prop::option::of(prop::sample::select(vec![
        "", "/", "//", "/v1", "/v1/", "/v1//", "/v1/x", "/v10", "/V1", "v1", "/v1/x/",
    ]));
    let method = prop::option::of(prop::sample::select(vec![Method::POST, Method::GET]));
    (host, prefix, method).prop_map(|(h, p, m)| {
        let mut t = Target::host(h);
        if let Some(p) = p {
            t = t.path_prefix(p);
        }
        if let Some(m) = m {
            t = t.method(m);
        }
        t
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// The host index narrows the candidates and nothing else: selection equals the plain scan.
    #[test]
    fn indexed_selection_equals_the_scan(
        targets in prop::collection::vec(arb_target(), 0..24),
        host in prop::sample::select(vec![
            "a.test", "A.TEST", "a.test.", "b.a.test", "c.b.a.test", "test", "x.test", "a..test",
            "[::1]", "x", ".a.test",
        ]),
        port in prop::option::of(prop::sample::select(vec![80u16, 443, 8080, 8443])),
        scheme in prop::sample::select(vec!["http", "https"]),
        path in prop::sample::select(vec![
            "/", "/v1", "/v1/", "/v1/x", "/v10", "/v1/x/y", "/w", "//", "/v1//x", "/V1/x",
        ]),
        method in prop::sample::select(vec![Method::POST, Method::GET, Method::PUT]),
    ) {
        let mut cs = Contracts::default();
        for (i, t) in targets.into_iter().enumerate() {
            cs = cs.route(t, named(&format!("r{i}")));
        }
        let authority = match port {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        let Ok(u) = format!("{scheme}://{authority}{path}").parse::<Uri>() else {
            return Ok(());
        };
        prop_assert_eq!(
            cs.select(&method, &u).name.as_str(),
            select_by_scan(&cs, &method, &u),
            "{}", u
        );
    }
}

#[test]
fn target_serde() {
    let t: Target =
        serde_json::from_str(r#"{"host":"api.test","path_prefix":"/v1","method":"POST"}"#).unwrap();
    assert_eq!(
        t,
        Target::host("api.test")
            .path_prefix("/v1")
            .method(Method::POST)
    );
    assert_eq!(
        serde_json::to_string(&t).unwrap(),
        r#"{"host":"api.test","path_prefix":"/v1","method":"POST"}"#
    );
    assert!(serde_json::from_str::<Target>(r#"{"host":"a","hots":"b"}"#).is_err());
    let t: Target = serde_json::from_str(r#"{"host":"api.test","method":"post"}"#).unwrap();
    assert!(t.matches(&Method::POST, &uri("https://api.test/x")));
}

// ---------------------------------------------------------------------------------------------
// Transport errors.

#[derive(Debug)]
struct Wrapper {
    msg: &'static str,
    source: Box<dyn StdError + Send + Sync>,
}

impl fmt::Display for Wrapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.msg)
    }
}

impl StdError for Wrapper {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

fn wrap(msg: &'static str, source: impl StdError + Send + Sync + 'static) -> Wrapper {
    Wrapper {
        msg,
        source: Box::new(source),
    }
}

#[test]
fn send_refused_is_not_executed() {
    let refused = SendRefused::Duplicate {
        operation: OperationId::new("op-1"),
        attempt: AttemptId::generate(),
    };
    let c = Contract::conservative();
    assert_eq!(c.classify_error(&refused).label(), "not_executed");
    let boxed: crate::BoxError = Box::new(wrap("service error", refused));
    let e = c.classify_error(&*boxed);
    let Evidence::NotExecuted { why, .. } = e else {
        panic!("{e:?}")
    };
    assert!(why.contains("send-once guard"), "{why}");
}

#[test]
fn connection_refused_anywhere_in_the_chain_is_not_executed() {
    let c = Contract::conservative();
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let e = c.classify_error(&wrap(
        "error sending request",
        wrap("client error (Connect)", refused),
    ));
    let Evidence::NotExecuted { why, .. } = e else {
        panic!("{e:?}")
    };
    assert!(
        why.starts_with("connection refused, the request was never sent: error sending request"),
        "{why}"
    );
    // Inside an io::Error wrapping a custom error (io::Error::source skips the custom error).
    let inner = wrap(
        "connect failed",
        std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
    );
    let outer = std::io::Error::other(inner);
    assert_eq!(c.classify_error(&outer).label(), "not_executed");
}

#[test]
fn timeouts_resets_and_unknown_errors_are_unknown() {
    let c = Contract::conservative();
    for kind in [
        std::io::ErrorKind::TimedOut,
        std::io::ErrorKind::ConnectionReset,
        std::io::ErrorKind::BrokenPipe,
        std::io::ErrorKind::UnexpectedEof,
    ] {
        let err = wrap("error sending request", std::io::Error::from(kind));
        assert_eq!(c.classify_error(&err).label(), "unknown", "{kind:?}");
    }
    let e = c.classify_error(&wrap(
        "request timed out",
        wrap("deadline has elapsed", std::fmt::Error),
    ));
    assert_eq!(
        e,
        Evidence::unknown(
            "request timed out: deadline has elapsed: an error occurred when formatting an argument"
        )
    );
}

#[test]
fn error_why_is_short_and_without_url_credentials() {
    #[derive(Debug)]
    struct Long;
    impl fmt::Display for Long {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "error for url (https://user:pw@api.test/x?api_key=sk_live_1) {}",
                "x".repeat(500)
            )
        }
    }
    impl StdError for Long {}
    let Evidence::Unknown { why, .. } = Contract::conservative().classify_error(&Long) else {
        panic!()
    };
    assert!(why.chars().count() <= 201, "{}", why.len());
    assert!(!why.contains("pw") && !why.contains("sk_live"), "{why}");
    assert!(
        why.starts_with("error for url (https://api.test/x?…)"),
        "{why}"
    );
}

#[test]
fn a_cyclic_error_chain_terminates() {
    #[derive(Debug)]
    struct Cyclic;
    impl fmt::Display for Cyclic {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cyclic")
        }
    }
    impl StdError for Cyclic {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(self)
        }
    }
    assert_eq!(
        Contract::conservative().classify_error(&Cyclic),
        Evidence::unknown("cyclic")
    );
}

#[tokio::test]
async fn hyper_util_connect_errors_are_not_executed() {
    use http_body_util::Empty;
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    // A closed port: connect error with a ConnectionRefused inside.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = http::Request::post(format!("http://127.0.0.1:{port}/x"))
        .body(Empty::new())
        .unwrap();
    let err = client.request(req).await.unwrap_err();
    assert!(err.is_connect());
    assert_eq!(
        Contract::conservative().classify_error(&err).label(),
        "not_executed"
    );

    // A connector refusing the scheme: a connect error with no I/O error at all.
    let client =
        Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(HttpConnector::new());
    let req = http::Request::post("https://127.0.0.1:1/x")
        .body(Empty::new())
        .unwrap();
    let err = client.request(req).await.unwrap_err();
    assert!(err.is_connect());
    let e = Contract::conservative().classify_error(&err);
    let Evidence::NotExecuted { why, .. } = e else {
        panic!("{e:?}")
    };
    assert!(
        why.starts_with("connect error, the request was never sent"),
        "{why}"
    );
}

// ---------------------------------------------------------------------------------------------
// Never panic.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn classify_response_never_panics(
        status in 100u16..1000,
        body in proptest::collection::vec(any::<u8>(), 0..256),
        json_code in "[ -~]{0,80}",
        hv in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&hv) {
            h.insert("retry-after", v.clone());
            h.insert("stripe-should-retry", v.clone());
            h.insert("retry-after-ms", v);
        }
        let status = StatusCode::from_u16(status).unwrap();
        for c in [Contract::conservative(), Contract::ietf_draft(), stripe_like()] {
            let _ = c.classify_response(status, &h, &body, now());
            let json = serde_json::json!({"id": json_code, "error": {"code": json_code, "type": json_code}});
            let e = c.classify_response(status, &h, json.to_string().as_bytes(), now());
            if let Evidence::Rejected { reason } = &e {
                // At most a short code is quoted.
                prop_assert!(reason.len() < 120, "{}", reason);
            }
        }
    }

    #[test]
    fn parse_retry_after_never_panics(s in proptest::collection::vec(any::<u8>(), 0..40), secs in any::<u64>()) {
        if let Ok(v) = HeaderValue::from_bytes(&s) {
            let _ = parse_retry_after(&v, now());
            let _ = parse_retry_after(&v, at(secs % 400_000_000_000));
        }
    }

    #[test]
    fn attach_key_never_panics_and_is_idempotent(
        body in proptest::collection::vec(any::<u8>(), 0..128),
        key in "[ -~]{1,40}",
        obj in "\\{( *\"[a-z]{1,3}\" *: *(1|\"x\"|\\{\\}) *,)* *\"z\" *: *2 *\\}",
    ) {
        let key = IdempotencyKey::from_stored(key);
        let contracts = [
            Contract::conservative(),
            Contract::ietf_draft(),
            json_contract("/idempotency_key"),
            json_contract("/a/b"),
            query_contract(),
            Contract::new("f", KeyPlacement::FormBody { name: "t".into() }),
        ];
        for c in &contracts {
            for b in [Bytes::from(body.clone()), Bytes::from(obj.clone())] {
                let mut p = parts("https://a.test/x?q=1");
                if let Ok(out) = c.attach_key(&mut p, b, &key) {
                    let uri = p.uri.clone();
                    let again = c.attach_key(&mut p, out.clone(), &key);
                    prop_assert_eq!(again.ok(), Some(out));
                    prop_assert_eq!(&p.uri, &uri);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration read by serde derives (issue 11 item 6): the same errors as the hand walker.

#[track_caller]
fn config_err(text: &str, json: bool) -> ConfigError {
    if json {
        Contracts::from_json_str(text, "c.json").unwrap_err()
    } else {
        Contracts::from_toml_str(text, "c.toml").unwrap_err()
    }
}

#[test]
fn config_tables_given_as_arrays_or_nulls_are_refused_not_read_by_position() {
    // A derived struct would read `["stripe-v1"]` as `extends = "stripe-v1"`, and `null` as
    // "not set": both refused, at the key.
    for (text, key, needle) in [
        (
            r#"{"contracts": {"c": ["stripe-v1"]}}"#,
            "contracts.c",
            "expected a table",
        ),
        (
            r#"{"route": [["a.test", "/v1", "POST", "github"]]}"#,
            "route[0]",
            "expected a table",
        ),
        (
            r#"{"contracts": {"c": {"rules": [[500]]}}}"#,
            "contracts.c.rules[0]",
            "expected a table",
        ),
        (
            r#"{"contracts": {"c": {"retention_secs": null}}}"#,
            "contracts.c.retention_secs",
            "`null` at line 1, column 43: leave the key out",
        ),
        (r#"{"default": null}"#, "default", "`null`"),
        (
            r#"{"route": [{"host": "a.test", "method": null}]}"#,
            "route[0].method",
            "`null`",
        ),
        (
            r#"[{"contracts": {}}]"#,
            "",
            "invalid type: array, expected a table",
        ),
    ] {
        let err = config_err(text, true);
        assert_eq!(err.key(), key, "{text}: {err}");
        let ConfigErrorKind::Invalid(what) = err.kind() else {
            panic!("{text}: {err:?}")
        };
        assert!(what.contains(needle), "{text}: {what}");
    }
}

#[test]
fn config_errors_inside_nested_tables_name_the_key() {
    let cases: &[(&str, &str, ConfigErrorKind)] = &[
        // Unknown keys of a `default` table and of a digest, with the keys allowed there.
        (
            "[default]\nextends = \"github\"\nretention = 5",
            "default.retention",
            ConfigErrorKind::UnknownKey {
                expected: "extends, name, key, max_key_len, retention_secs, replay, rules, extra_rules, remote_ref, secret_headers, secret_query_params, secret_body_fields, replay_supplies_body_secrets, secret_response_fields, secret_path_segments, replay_supplies_path_secrets, digest, lookup, settle_secs, keep_details_secs, keep_identity_secs".into(),
            },
        ),
        (
            "[contracts.c.remote_ref]\npointer = \"/id\"\nrequird = true",
            "contracts.c.remote_ref.requird",
            ConfigErrorKind::UnknownKey {
                expected: "pointer, required".into(),
            },
        ),
        (
            "[contracts.c]\ndigest = { mode = \"fields\" }",
            "contracts.c.digest.pointers",
            ConfigErrorKind::Missing,
        ),
        (
            "[contracts.c]\nremote_ref = { required = true }",
            "contracts.c.remote_ref.pointer",
            ConfigErrorKind::Missing,
        ),
        (
            "[contracts.c]\nlookup = { kind = \"http_get\" }",
            "contracts.c.lookup.url_template",
            ConfigErrorKind::Missing,
        ),
        (
            "[[route]]\nhost = \"a.test\"\ncontract = \"github\"\n[[route]]\nhost = 5\ncontract = \"github\"",
            "route[1].host",
            ConfigErrorKind::Invalid("invalid type: integer `5`, expected a string".into()),
        ),
    ];
    for (text, key, kind) in cases {
        let err = config_err(text, false);
        assert_eq!((err.key(), err.kind()), (*key, kind), "{text}: {err}");
        assert!(
            err.to_string().starts_with(&format!("c.toml: {key}: ")),
            "{err}"
        );
    }
    // A digest's `pointers` belong to `mode = "fields"` only.
    let err = config_err(
        "[contracts.c]\ndigest = { mode = \"full\", pointers = [\"/a\"] }",
        false,
    );
    assert_eq!(err.key(), "contracts.c.digest", "{err}");
    // A key of a lookup's `answer` (read whole, as a tagged enum's content) is named by the
    // serde message, at the lookup.
    let err = config_err(
        "[contracts.c]\nlookup = { kind = \"http_get\", url_template = \"/o/{operation_id}\", answer = { stat = \"/s\" } }",
        false,
    );
    assert_eq!(err.key(), "contracts.c.lookup", "{err}");
    assert!(err.to_string().contains("unknown field `stat`"), "{err}");
}

#[test]
fn config_lookup_and_settle_secs_are_read_and_merged() {
    let cs = Contracts::from_toml_str(
        r#"
        default = "child"
        [contracts.base]
        extends = "stripe-v1"
        secret_headers = ["Stripe-Account"]
        settle_secs = 30
        lookup = { kind = "http_get", url_template = "/ops/{operation_id}", answer = { status = "/state", succeeded = ["open"] } }
        [contracts.child]
        extends = "base"
        secret_headers = ["X-Extra", "stripe-account"]
        "#,
        "l.toml",
    )
    .unwrap();
    let child = cs.default_contract();
    assert_eq!(child.name, "child");
    assert_eq!(child.settle_secs, Some(30));
    let Some(Lookup::HttpGet {
        url_template,
        answer,
    }) = &child.lookup
    else {
        panic!("{:?}", child.lookup)
    };
    assert_eq!(url_template, "/ops/{operation_id}");
    assert_eq!(answer.status.as_deref(), Some("/state"));
    assert_eq!(answer.succeeded.as_deref(), Some(&["open".to_owned()][..]));
    // Added to the inherited ones, case-insensitively.
    assert_eq!(child.secret_headers, ["Stripe-Account", "X-Extra"]);
}
