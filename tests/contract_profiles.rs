//! The built-in vendor profiles fed the vendors' real answers (status codes, headers, error
//! bodies), the five pitfalls of VENDOR_CONTRACTS.md, key placement and limits per profile, and
//! contracts loaded from TOML and JSON.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use proptest::prelude::*;
use recoverable_write::contract::profiles::{self, PayPalApi};
use recoverable_write::contract::{
    ConfigErrorKind, Contract, ContractErrorKind, Contracts, EvidenceClass, KeyFormat,
    KeyPlacement, Lookup, Replay, Rule, Target,
};
use recoverable_write::operation::{PayloadDigest, PayloadHash};
use recoverable_write::{ConflictKind, Evidence, IdempotencyKey};

/// Sun, 06 Nov 1994 08:48:37 GMT: one minute before the RFC 9110 example date.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(784_111_717)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
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

fn label(c: &Contract, status: u16, hdrs: &[(&str, &str)], body: &str) -> &'static str {
    classify(c, status, hdrs, body).label()
}

const IN_FLIGHT: Evidence = Evidence::Conflict {
    conflict: ConflictKind::InFlight,
};
const MISMATCH: Evidence = Evidence::Conflict {
    conflict: ConflictKind::Mismatch,
};

fn parts(uri: &str) -> http::request::Parts {
    http::Request::post(uri).body(()).unwrap().into_parts().0
}

fn uuid_key() -> IdempotencyKey {
    IdempotencyKey::from_stored("8e03978e-40d5-43e8-bc93-6894a57f9324")
}

fn why(e: &Evidence) -> String {
    match e {
        Evidence::Unknown { why, .. } | Evidence::NotExecuted { why, .. } => why.clone(),
        Evidence::Rejected { reason } => reason.clone(),
        other => panic!("no reason in {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Stripe v1.

const STRIPE_IN_USE: &str = r#"{"error":{"code":"idempotency_key_in_use","message":"There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): ...","type":"invalid_request_error"}}"#;
const STRIPE_IDEMPOTENCY_ERROR: &str = r#"{"error":{"message":"Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '8e03...' if you meant to execute a different request.","type":"idempotency_error"}}"#;
const STRIPE_API_ERROR: &str =
    r#"{"error":{"message":"An unknown error occurred","type":"api_error"}}"#;

#[test]
fn stripe_v1_429_is_not_executed_because_rate_limits_run_before_idempotency() {
    let e = classify(
        &profiles::stripe_v1(),
        429,
        &[("Retry-After", "2")],
        r#"{"error":{"code":"rate_limit","type":"invalid_request_error"}}"#,
    );
    let Evidence::NotExecuted { why, retry_after } = e else {
        panic!("{e:?}")
    };
    assert_eq!(retry_after, Some(Duration::from_secs(2)));
    assert!(
        why.starts_with("HTTP 429 Too Many Requests [rate_limit]: rate limited before idempotency"),
        "{why}"
    );
}

#[test]
fn stripe_v1_idempotency_conflicts() {
    let c = profiles::stripe_v1();
    assert_eq!(
        classify(&c, 409, &[("Stripe-Should-Retry", "true")], STRIPE_IN_USE),
        IN_FLIGHT
    );
    assert_eq!(
        classify(
            &c,
            400,
            &[("Stripe-Should-Retry", "false")],
            STRIPE_IDEMPOTENCY_ERROR
        ),
        MISMATCH
    );
    // The same body type at another status is not Stripe's documented mismatch.
    assert_eq!(label(&c, 422, &[], STRIPE_IDEMPOTENCY_ERROR), "rejected");
}

#[test]
fn stripe_should_retry_false_on_a_500_stays_unknown_not_rejected() {
    let c = profiles::stripe_v1();
    let e = classify(
        &c,
        500,
        &[("Stripe-Should-Retry", "false")],
        STRIPE_API_ERROR,
    );
    let Evidence::Unknown { why, .. } = &e else {
        panic!("{e:?}")
    };
    assert!(why.contains("Stripe-Should-Retry: false"), "{why}");
    assert!(why.contains("cached"), "{why}");
    // Without the header, or with `true`: the default, unknown.
    assert_eq!(label(&c, 500, &[], STRIPE_API_ERROR), "unknown");
    assert_eq!(
        label(
            &c,
            503,
            &[("Stripe-Should-Retry", "true")],
            STRIPE_API_ERROR
        ),
        "unknown"
    );
}

#[test]
fn stripe_should_retry_true_overrides_a_4xx() {
    let c = profiles::stripe_v1();
    let body = r#"{"error":{"code":"lock_timeout","type":"invalid_request_error"}}"#;
    assert_eq!(
        label(&c, 400, &[("Stripe-Should-Retry", "true")], body),
        "unknown"
    );
    assert_eq!(label(&c, 400, &[], body), "rejected");
}

#[test]
fn stripe_v1_documented_rejections_and_success() {
    let c = profiles::stripe_v1();
    assert_eq!(
        classify(
            &c,
            401,
            &[],
            r#"{"error":{"message":"You did not provide an API key.","type":"invalid_request_error"}}"#
        ),
        Evidence::Rejected {
            reason: "HTTP 401 Unauthorized [invalid_request_error]: authentication failed; nothing was stored".into()
        }
    );
    assert_eq!(
        classify(
            &c,
            400,
            &[("Stripe-Should-Retry", "false")],
            r#"{"error":{"code":"parameter_missing","param":"amount","type":"invalid_request_error"}}"#
        ),
        Evidence::Rejected {
            reason: "HTTP 400 Bad Request [parameter_missing]".into()
        }
    );
    assert_eq!(
        label(
            &c,
            402,
            &[],
            r#"{"error":{"code":"card_declined","decline_code":"insufficient_funds","type":"card_error"}}"#
        ),
        "rejected"
    );
    assert_eq!(
        classify(
            &c,
            200,
            &[("Idempotent-Replayed", "true")],
            r#"{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":100}"#
        ),
        Evidence::Succeeded {
            remote_ref: Some("ch_3MmlLrLkdIwHu7ix0snN0B15".into())
        }
    );
    // A 2xx without the id does not identify the charge.
    assert_eq!(label(&c, 200, &[], "{}"), "unknown");
}

#[test]
fn stripe_v1_contract_shape() {
    let c = profiles::stripe_v1();
    assert_eq!(c.name, "stripe-v1");
    assert_eq!(c.key, KeyPlacement::header("Idempotency-Key"));
    assert_eq!(c.max_key_len, 255);
    assert_eq!(c.retention_secs, Some(24 * 3600));
    assert_eq!(c.replay, Replay::StoredFirstResponse);
    assert_eq!(c.lookup, Some(Lookup::SameKeyReplay));
    assert_eq!(c.settle_secs, None);
}

// ---------------------------------------------------------------------------------------------
// Stripe v2.

#[test]
fn stripe_v2_replays_current_state_for_30_days_and_leaves_unconfirmed_codes_conservative() {
    let c = profiles::stripe_v2();
    assert_eq!(c.replay, Replay::CurrentState);
    assert_eq!(c.retention_secs, Some(30 * 24 * 3600));
    // v1's "429 runs before idempotency" is not documented for v2.
    assert_eq!(label(&c, 429, &[("Retry-After", "1")], "{}"), "unknown");
    // Mismatch and in-flight codes are UNCONFIRMED: a 409 proves nothing either way.
    assert_eq!(classify(&c, 409, &[], "{}"), IN_FLIGHT);
    assert_ne!(classify(&c, 400, &[], STRIPE_IDEMPOTENCY_ERROR), MISMATCH);
    assert_eq!(label(&c, 500, &[], "{}"), "unknown");
    assert_eq!(
        classify(&c, 200, &[], r#"{"id":"v2_obj_1"}"#),
        Evidence::Succeeded {
            remote_ref: Some("v2_obj_1".into())
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Adyen.

#[test]
fn adyen_transient_error_header_decides() {
    let c = profiles::adyen();
    let body = r#"{"status":500,"errorCode":"905","message":"Payment details are not supported","errorType":"configuration"}"#;
    let e = classify(
        &c,
        500,
        &[("Transient-Error", "true"), ("Retry-After", "3")],
        body,
    );
    let Evidence::Unknown { why, retry_after } = &e else {
        panic!("{e:?}")
    };
    assert!(why.contains("Transient-Error: true"), "{why}");
    assert_eq!(*retry_after, Some(Duration::from_secs(3)));
    // Absent or false: "do not retry", which proves nothing: a 5xx stays unknown.
    let e = classify(&c, 500, &[("Transient-Error", "false")], body);
    assert_eq!(e.label(), "unknown");
    assert!(!why_of(&e).contains("Transient-Error"));
    // A 4xx with the header is not a final rejection.
    assert_eq!(
        label(
            &c,
            422,
            &[("Transient-Error", "true")],
            r#"{"status":422,"errorCode":"000"}"#
        ),
        "unknown"
    );
    assert_eq!(
        label(
            &c,
            422,
            &[],
            r#"{"status":422,"errorCode":"010","message":"Not allowed"}"#
        ),
        "rejected"
    );
}

fn why_of(e: &Evidence) -> String {
    why(e)
}

#[test]
fn adyen_704_is_in_flight_at_409_and_at_the_older_422() {
    let c = profiles::adyen();
    let body = r#"{"status":409,"errorCode":"704","message":"request already processed or in progress","errorType":"validation"}"#;
    assert_eq!(classify(&c, 409, &[], body), IN_FLIGHT);
    let old =
        r#"{"status":422,"errorCode":704,"message":"request already processed or in progress"}"#;
    assert_eq!(classify(&c, 422, &[], old), IN_FLIGHT);
}

#[test]
fn adyen_contract_shape() {
    let c = profiles::adyen();
    assert_eq!(c.retention_secs, Some(31 * 24 * 3600));
    assert_eq!(c.max_key_len, 64);
    assert_eq!(c.replay, Replay::StoredFirstResponse);
    assert!(matches!(c.lookup, Some(Lookup::Webhooks { .. })));
    assert_eq!(
        classify(
            &c,
            200,
            &[("Idempotency-Key", "k")],
            r#"{"pspReference":"8835511210681115","resultCode":"Authorised"}"#
        ),
        Evidence::Succeeded {
            remote_ref: Some("8835511210681115".into())
        }
    );
    // 64 characters accepted, 65 refused before anything is sent.
    assert!(
        c.check_key(&IdempotencyKey::from_stored("k".repeat(64)))
            .is_ok()
    );
    let err = c
        .check_key(&IdempotencyKey::from_stored("k".repeat(65)))
        .unwrap_err();
    assert_eq!(
        err.kind(),
        &ContractErrorKind::KeyTooLong { len: 65, max: 64 }
    );
}

// ---------------------------------------------------------------------------------------------
// PayPal.

#[test]
fn paypal_retention_is_per_api() {
    let cases = [
        (PayPalApi::OrdersV2, "paypal-orders-v2", 6 * 3600),
        (PayPalApi::PaymentsV2, "paypal-payments-v2", 45 * 86_400),
        (PayPalApi::Payouts, "paypal-payouts", 30 * 86_400),
        (PayPalApi::Subscriptions, "paypal-subscriptions", 72 * 3600),
    ];
    for (api, name, secs) in cases {
        let c = profiles::paypal(api);
        assert_eq!(c.name, name);
        assert_eq!(c.retention_secs, Some(secs), "{name}");
        assert_eq!(c.replay, Replay::CurrentState, "{name}");
        assert_eq!(c.key, KeyPlacement::header("PayPal-Request-Id"));
        assert_eq!(profiles::by_name(name), Some(c));
    }
    assert_eq!(profiles::paypal(PayPalApi::OrdersV2).max_key_len, 108);
}

#[test]
fn paypal_201_then_200_on_a_duplicate_are_both_success() {
    let c = profiles::paypal(PayPalApi::PaymentsV2);
    let first = r#"{"id":"2GG279541U471931P","status":"COMPLETED","links":[]}"#;
    let dup = r#"{"id":"2GG279541U471931P","status":"COMPLETED","links":[]}"#;
    let expected = Evidence::Succeeded {
        remote_ref: Some("2GG279541U471931P".into()),
    };
    assert_eq!(classify(&c, 201, &[], first), expected);
    assert_eq!(classify(&c, 200, &[], dup), expected);
}

#[test]
fn paypal_previous_request_in_progress_is_in_flight() {
    let c = profiles::paypal(PayPalApi::PaymentsV2);
    let body = r#"{"name":"RESOURCE_CONFLICT","message":"The server has detected a conflict while processing this request.","details":[{"issue":"PREVIOUS_REQUEST_IN_PROGRESS","description":"A previous request on this resource is currently in progress."}],"debug_id":"b1d1f06c7246c"}"#;
    let e = classify(&c, 409, &[], body);
    assert_eq!(e, IN_FLIGHT);
    assert_eq!(
        classify(&c, 409, &[], r#"{"name":"PREVIOUS_REQUEST_IN_PROGRESS"}"#),
        IN_FLIGHT
    );
    // An ordinary validation answer stays a rejection.
    assert_eq!(
        label(
            &c,
            422,
            &[],
            r#"{"name":"UNPROCESSABLE_ENTITY","details":[{"issue":"CAPTURE_ALREADY_COMPLETED"}]}"#
        ),
        "rejected"
    );
}

// ---------------------------------------------------------------------------------------------
// Square.

#[test]
fn square_key_goes_in_the_json_body() {
    let c = profiles::square();
    assert_eq!(c.key, KeyPlacement::json_body("/idempotency_key"));
    let mut p = parts("https://connect.squareup.com/v2/payments");
    let body = Bytes::from_static(
        br#"{"source_id":"cnon:card-nonce-ok","amount_money":{"amount":100,"currency":"USD"}}"#,
    );
    let out = c.attach_key(&mut p, body, &uuid_key()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["idempotency_key"], uuid_key().as_str());
    assert_eq!(v["amount_money"]["amount"], 100);
    assert!(p.headers.get("idempotency-key").is_none());
    // A key the caller put there is replaced by the operation's.
    let out = c
        .attach_key(
            &mut p,
            Bytes::from_static(br#"{"idempotency_key":"callers-own","source_id":"x"}"#),
            &uuid_key(),
        )
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["idempotency_key"], uuid_key().as_str());
}

#[test]
fn square_create_payment_limit_is_45_and_a_uuid_fits() {
    let c = profiles::square();
    assert_eq!(c.max_key_len, 45);
    assert!(c.check_key(&IdempotencyKey::generate()).is_ok());
    assert!(
        c.check_key(&IdempotencyKey::from_stored("k".repeat(45)))
            .is_ok()
    );
    let err = c
        .check_key(&IdempotencyKey::from_stored("k".repeat(46)))
        .unwrap_err();
    assert_eq!(
        err.kind(),
        &ContractErrorKind::KeyTooLong { len: 46, max: 45 }
    );
}

#[test]
fn square_error_codes_decide_whatever_the_status() {
    let c = profiles::square();
    let reused = r#"{"errors":[{"category":"INVALID_REQUEST_ERROR","code":"IDEMPOTENCY_KEY_REUSED","detail":"The idempotency key can only be retried with the same request data."}]}"#;
    for status in [400, 409, 422] {
        assert_eq!(classify(&c, status, &[], reused), MISMATCH, "{status}");
    }
    let temporary = r#"{"errors":[{"category":"API_ERROR","code":"TEMPORARY_ERROR","detail":"A temporary internal error occurred."}]}"#;
    let e = classify(&c, 500, &[], temporary);
    assert!(why(&e).contains("same key"), "{e:?}");
    let rate = r#"{"errors":[{"category":"RATE_LIMIT_ERROR","code":"RATE_LIMITED","detail":"Rate limited"}]}"#;
    // RATE_LIMITED is not documented as "not executed": unknown, never NotExecuted.
    assert_eq!(label(&c, 429, &[], rate), "unknown");
    assert_eq!(label(&c, 400, &[], rate), "unknown");
    let invalid = r#"{"errors":[{"category":"INVALID_REQUEST_ERROR","code":"INVALID_VALUE","field":"amount_money"}]}"#;
    assert_eq!(
        classify(&c, 400, &[], invalid),
        Evidence::Rejected {
            reason: "HTTP 400 Bad Request [INVALID_VALUE]".into()
        }
    );
    assert_eq!(c.retention_secs, None);
    assert_eq!(
        c.lookup,
        Some(Lookup::Webhooks {
            events: vec!["payment.created".into()]
        })
    );
}

// ---------------------------------------------------------------------------------------------
// AWS EC2.

const EC2_MISMATCH: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>IdempotentParameterMismatch</Code><Message>The client token you have provided is associated with a resource that is already deleted.</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"#;

#[test]
fn ec2_client_token_goes_in_the_form_body_or_the_query() {
    let c = profiles::aws_ec2();
    assert_eq!(c.key, KeyPlacement::form_body("ClientToken"));
    assert_eq!(c.max_key_len, 64);
    let mut p = parts("https://ec2.eu-west-1.amazonaws.com/");
    let out = c
        .attach_key(
            &mut p,
            Bytes::from_static(
                b"Action=RunInstances&ImageId=ami-0abc&MinCount=1&MaxCount=1&Version=2016-11-15",
            ),
            &uuid_key(),
        )
        .unwrap();
    assert_eq!(
        out,
        format!(
            "Action=RunInstances&ImageId=ami-0abc&MinCount=1&MaxCount=1&Version=2016-11-15&ClientToken={}",
            uuid_key().as_str()
        )
    );
    let q = profiles::aws_ec2().key(KeyPlacement::query("ClientToken"));
    q.validate().unwrap();
    let mut p = parts("https://ec2.eu-west-1.amazonaws.com/?Action=RunInstances&ImageId=ami-0abc");
    q.attach_key(&mut p, Bytes::new(), &uuid_key()).unwrap();
    assert_eq!(
        p.uri.query(),
        Some(
            format!(
                "Action=RunInstances&ImageId=ami-0abc&ClientToken={}",
                uuid_key().as_str()
            )
            .as_str()
        )
    );
}

#[test]
fn ec2_idempotent_parameter_mismatch_is_a_mismatch_conflict() {
    let c = profiles::aws_ec2();
    assert_eq!(classify(&c, 400, &[], EC2_MISMATCH), MISMATCH);
    let other = EC2_MISMATCH.replace("IdempotentParameterMismatch", "InvalidParameterValue");
    assert_eq!(
        classify(&c, 400, &[], &other),
        Evidence::Rejected {
            reason: "HTTP 400 Bad Request [InvalidParameterValue]".into()
        }
    );
    let throttled = EC2_MISMATCH.replace("IdempotentParameterMismatch", "RequestLimitExceeded");
    assert_eq!(label(&c, 503, &[], &throttled), "unknown");
}

#[test]
fn ec2_lookup_is_eventually_consistent_and_retention_unconfirmed() {
    let c = profiles::aws_ec2();
    assert_eq!(c.retention_secs, None);
    assert_eq!(c.settle_secs, Some(300));
    let Some(Lookup::ListByReference {
        url_template,
        reference,
        ..
    }) = &c.lookup
    else {
        panic!("{:?}", c.lookup)
    };
    assert!(url_template.contains("client-token"));
    assert!(url_template.contains("{idempotency_key}"));
    assert_eq!(reference, "{idempotency_key}");
}

/// "Evidence a built-in profile promises": EC2 answers `DescribeInstances` in XML, so the
/// profile's lookup reads XML, by element paths (the answer itself is read in the lookup tests
/// against a recorded `DescribeInstances` answer).
#[test]
fn ec2_lookup_reads_describe_instances_xml_by_element_paths() {
    use recoverable_write::contract::AnswerFormat;
    let c = profiles::aws_ec2();
    let Some(Lookup::ListByReference {
        items_pointer,
        reference_pointer,
        answer,
        ..
    }) = &c.lookup
    else {
        panic!("{:?}", c.lookup)
    };
    assert_eq!(answer.format, AnswerFormat::Xml);
    assert_eq!(
        items_pointer.as_deref(),
        Some("/DescribeInstancesResponse/reservationSet/item")
    );
    assert_eq!(
        reference_pointer.as_deref(),
        Some("/instancesSet/item/clientToken")
    );
    assert_eq!(
        answer.status.as_deref(),
        Some("/instancesSet/item/instanceState/name")
    );
    assert_eq!(
        answer.remote_ref.as_deref(),
        Some("/instancesSet/item/instanceId")
    );
    assert_eq!(
        answer.succeeded.as_deref(),
        Some(
            &profiles::EC2_LAUNCHED_STATES
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>()[..]
        )
    );
    // An XML path is element names: a step that is no name is refused, naming the key.
    let err = Contracts::from_toml_str(
        r#"
        [contracts.ec2]
        extends = "aws-ec2"
        lookup = { kind = "list_by_reference", url_template = "?Action=DescribeInstances", items_pointer = "/a//item", answer = { format = "xml" } }
        "#,
        "ec2.toml",
    )
    .unwrap_err();
    assert_eq!(err.key(), "contracts.ec2.lookup.items_pointer", "{err}");
    assert!(matches!(
        err.kind(),
        ConfigErrorKind::Contract(ContractErrorKind::InvalidXmlElement(_))
    ));
    let err = Contracts::from_toml_str(
        "[contracts.x]\nlookup = { kind = \"http_get\", url_template = \"/o\", answer = { format = \"yaml\" } }",
        "x.toml",
    )
    .unwrap_err();
    assert!(err.to_string().contains("yaml"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Secrets in answers and in URLs (issue 27 item 8).

/// Stripe's profiles keep the credentials Stripe puts in its answers out of the ledger;
/// `aws-ec2` keeps a `CreateKeyPair` private key out.
#[test]
fn built_in_profiles_name_the_secret_fields_of_their_vendors_answers() {
    for c in [profiles::stripe_v1(), profiles::stripe_v2()] {
        for field in profiles::STRIPE_SECRET_RESPONSE_FIELDS {
            assert!(
                c.secret_response_fields.iter().any(|f| f == field),
                "{}: {field}",
                c.name
            );
        }
        c.validate().unwrap();
    }
    assert!(
        profiles::stripe_v2()
            .secret_response_fields
            .contains(&"signing_secret".to_owned())
    );
    assert_eq!(profiles::aws_ec2().secret_response_fields, ["keyMaterial"]);
    // No other profile has a secret to drop from its answers: none named.
    for name in [
        "adyen",
        "square",
        "google-aip155",
        "ietf-draft",
        "github",
        "conservative",
    ] {
        let c = profiles::by_name(name).unwrap();
        assert!(c.secret_response_fields.is_empty(), "{name}");
        assert!(c.secret_path_segments.is_empty(), "{name}");
    }
}

/// The new keys of a contract table: secrets add to the inherited ones (an override cannot
/// store a secret again), malformed ones are refused naming the key.
#[test]
fn secret_response_fields_and_path_segments_load_from_toml_and_only_accumulate() {
    let contracts = Contracts::from_toml_str(
        r#"
        [[route]]
        host = "api.stripe.test"
        contract = "pay2"

        [contracts.pay]
        extends = "stripe-v1"
        secret_response_fields = ["/next_action/redirect_to_url/url", "client_secret"]
        secret_path_segments = ["/hooks/*/{secret}"]
        replay_supplies_path_secrets = true

        [contracts.pay2]
        extends = "pay"
        secret_response_fields = ["ephemeral"]
        "#,
        "c.toml",
    )
    .unwrap();
    let pay2 = contracts.get("pay2").expect("pay2");
    assert_eq!(
        pay2.secret_response_fields,
        [
            "client_secret",
            "secret",
            "/next_action/redirect_to_url/url",
            "ephemeral"
        ]
    );
    assert_eq!(pay2.secret_path_segments, ["/hooks/*/{secret}"]);
    assert!(pay2.replay_supplies_path_secrets);
    // In the canonical form (and so the hash) only when set.
    assert!(
        !Contract::conservative()
            .canonical_json()
            .contains("secret_")
    );

    for (toml, key, needle) in [
        (
            "secret_response_fields = [\"a/b\"]",
            "contracts.c.secret_response_fields[0]",
            "neither a JSON pointer",
        ),
        (
            "secret_response_fields = [\"\"]",
            "contracts.c.secret_response_fields[0]",
            "neither a JSON pointer",
        ),
        (
            "secret_path_segments = [\"/hooks/x\"]",
            "contracts.c.secret_path_segments[0]",
            "not a path template",
        ),
        (
            "secret_path_segments = [\"hooks/{secret}\"]",
            "contracts.c.secret_path_segments[0]",
            "not a path template",
        ),
        (
            "secret_path_segments = [\"/hooks/t{secret}\"]",
            "contracts.c.secret_path_segments[0]",
            "not a path template",
        ),
    ] {
        let err =
            Contracts::from_toml_str(&format!("[contracts.c]\n{toml}"), "c.toml").expect_err(toml);
        assert_eq!(err.key(), key, "{err}");
        assert!(err.to_string().contains(needle), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// Google AIP-155.

#[test]
fn google_request_id_in_the_query_and_aip194_statuses() {
    let c = profiles::google_aip155();
    let mut p = parts("https://compute.googleapis.com/compute/v1/projects/p/zones/z/instances");
    c.attach_key(&mut p, Bytes::new(), &uuid_key()).unwrap();
    assert_eq!(
        p.uri.query(),
        Some(format!("requestId={}", uuid_key().as_str()).as_str())
    );
    assert_eq!(c.max_key_len, 36);
    assert!(c.check_key(&IdempotencyKey::generate()).is_ok());
    assert_eq!(c.retention_secs, Some(3600));
    assert_eq!(c.replay, Replay::CurrentState);
    for (status, code) in [
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
        (500, "INTERNAL"),
        (500, "UNKNOWN"),
    ] {
        let body = format!(r#"{{"error":{{"code":{status},"message":"x","status":"{code}"}}}}"#);
        let e = classify(&c, status, &[], &body);
        assert!(why(&e).contains(code), "{e:?}");
        assert_eq!(e.label(), "unknown", "{code}");
    }
}

// ---------------------------------------------------------------------------------------------
// IETF draft.

#[test]
fn ietf_draft_quoted_key_and_400_409_422() {
    let c = profiles::ietf_draft();
    let mut p = parts("https://api.example/tickets");
    c.attach_key(&mut p, Bytes::new(), &uuid_key()).unwrap();
    assert_eq!(
        p.headers["idempotency-key"],
        format!("\"{}\"", uuid_key().as_str()).as_str()
    );
    assert_eq!(
        c.key,
        KeyPlacement::Header {
            name: "Idempotency-Key".into(),
            format: KeyFormat::Quoted
        }
    );
    assert_eq!(
        label(&c, 400, &[], r#"{"type":"https://example/missing-key"}"#),
        "rejected"
    );
    assert_eq!(classify(&c, 422, &[], "{}"), MISMATCH);
    assert_eq!(classify(&c, 409, &[], "{}"), IN_FLIGHT);
    assert_eq!(c.replay, Replay::StoredFirstResponse);
    assert_eq!(c.retention_secs, None);
}

// ---------------------------------------------------------------------------------------------
// No idempotency (Twilio-like) and GitHub.

#[test]
fn no_idempotency_sends_no_key_and_never_replays() {
    let c = profiles::no_idempotency();
    assert_eq!(c.replay, Replay::Unsafe);
    assert!(!c.replay.is_safe());
    assert_eq!(c.lookup, Some(Lookup::Unavailable));
    let mut p = parts("https://api.twilio.com/2010-04-01/Accounts/AC1/Messages.json");
    let body = Bytes::from_static(b"To=%2B15558675310&From=%2B15017122661&Body=Hi");
    let out = c.attach_key(&mut p, body.clone(), &uuid_key()).unwrap();
    assert_eq!(out, body);
    assert!(p.headers.is_empty());
    assert_eq!(
        p.uri,
        "https://api.twilio.com/2010-04-01/Accounts/AC1/Messages.json"
    );
    // Such a contract cannot claim a safe replay.
    let err = c
        .clone()
        .replay(Replay::StoredFirstResponse)
        .validate()
        .unwrap_err();
    assert_eq!(err.kind(), &ContractErrorKind::ReplayWithoutKey);
    let err = c.lookup(Lookup::SameKeyReplay).validate().unwrap_err();
    assert_eq!(err.kind(), &ContractErrorKind::ReplayWithoutKey);
}

#[test]
fn twilio_20429_is_not_executed_and_20500_is_unknown() {
    let c = profiles::no_idempotency();
    let e = classify(
        &c,
        429,
        &[("Retry-After", "Sunday, 06-Nov-94 08:49:37 GMT")],
        r#"{"code":20429,"message":"Too Many Requests","more_info":"https://www.twilio.com/docs/errors/20429","status":429}"#,
    );
    let Evidence::NotExecuted { retry_after, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(retry_after, Some(Duration::from_secs(60)));
    // A 429 without Twilio's code is not documented: unknown.
    assert_eq!(label(&c, 429, &[], "{}"), "unknown");
    let e = classify(
        &c,
        500,
        &[],
        r#"{"code":20500,"message":"Internal Server Error","status":500}"#,
    );
    assert!(why(&e).contains("may have executed"), "{e:?}");
}

// ---------------------------------------------------------------------------------------------
// The five pitfalls of VENDOR_CONTRACTS.md.

/// Pitfall 1: Stripe v1 replays 500s: same-key replay re-fetches, it does not re-run. v2 is the opposite.
#[test]
fn pitfall_1_stripe_v1_replay_refetches_a_cached_500_v2_completes_the_work() {
    let v1 = profiles::stripe_v1();
    let v2 = profiles::stripe_v2();
    assert_eq!(v1.replay, Replay::StoredFirstResponse);
    assert_eq!(v2.replay, Replay::CurrentState);
    // The replay of a v1 operation whose first answer was a 500 gets the cached 500 back,
    // `Idempotent-Replayed: true`: still unknown, however often it is replayed.
    for _ in 0..3 {
        assert_eq!(
            label(
                &v1,
                500,
                &[
                    ("Idempotent-Replayed", "true"),
                    ("Stripe-Should-Retry", "false")
                ],
                STRIPE_API_ERROR
            ),
            "unknown"
        );
    }
    // The v2 replay drives the work to completion and answers with the current object.
    assert_eq!(
        classify(&v2, 200, &[], r#"{"id":"obj_1","status":"succeeded"}"#),
        Evidence::Succeeded {
            remote_ref: Some("obj_1".into())
        }
    );
}

/// Pitfall 2: PayPal replays current status (201 then 200), with retention per API, not 24 h.
#[test]
fn pitfall_2_paypal_current_status_and_retention_per_api_not_24h() {
    let retentions: Vec<_> = [
        PayPalApi::OrdersV2,
        PayPalApi::PaymentsV2,
        PayPalApi::Payouts,
        PayPalApi::Subscriptions,
    ]
    .into_iter()
    .map(|api| profiles::paypal(api).retention_secs)
    .collect();
    assert!(
        retentions.iter().all(|r| *r != Some(86_400)),
        "{retentions:?}"
    );
    let mut distinct = retentions.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 4);
    let c = profiles::paypal(PayPalApi::OrdersV2);
    assert_eq!(c.replay, Replay::CurrentState);
    assert_eq!(
        label(&c, 201, &[], r#"{"id":"5O190127TN364715T"}"#),
        "succeeded"
    );
    assert_eq!(
        label(&c, 200, &[], r#"{"id":"5O190127TN364715T"}"#),
        "succeeded"
    );
}

fn ec2_form(zone: &str, subnet: &str) -> String {
    format!(
        "Action=RunInstances&ImageId=ami-0abc&InstanceType=t3.micro&MinCount=1&MaxCount=1&Placement.AvailabilityZone={zone}&SubnetId={subnet}&Version=2016-11-15"
    )
}

fn ec2_json(zone: &str, subnet: &str) -> String {
    format!(
        r#"{{"ImageId":"ami-0abc","InstanceType":"t3.micro","MinCount":1,"MaxCount":1,"Placement":{{"AvailabilityZone":"{zone}"}},"SubnetId":"{subnet}","TagSpecifications":"retry at 10:02"}}"#
    )
}

/// Pitfall 3: EC2 token scope is zonal with a subnet: failover to another AZ duplicates. The zone is
/// part of the operation identity, so the failover is a different payload: a Conflict, not a
/// second launch.
#[test]
fn pitfall_3_ec2_failover_to_another_zone_is_a_different_payload() {
    let c = profiles::aws_ec2();
    let url = "https://ec2.eu-west-1.amazonaws.com/";
    let hash = |url: &str, body: &str, digest: &PayloadDigest| {
        PayloadHash::compute("POST", url, body.as_bytes(), digest)
    };
    let a = hash(url, &ec2_form("eu-west-1a", "subnet-aaa"), &c.digest);
    assert_eq!(
        a,
        hash(url, &ec2_form("eu-west-1a", "subnet-aaa"), &c.digest)
    );
    assert_ne!(
        a,
        hash(url, &ec2_form("eu-west-1b", "subnet-aaa"), &c.digest),
        "another zone"
    );
    assert_ne!(
        a,
        hash(url, &ec2_form("eu-west-1a", "subnet-bbb"), &c.digest),
        "another subnet"
    );
    // Another Region is another endpoint host.
    assert_ne!(
        a,
        hash(
            "https://ec2.eu-central-1.amazonaws.com/",
            &ec2_form("eu-west-1a", "subnet-aaa"),
            &c.digest
        )
    );

    // A JSON front with a field digest must name the scope fields...
    let mut fields: Vec<String> = vec![
        "/ImageId".into(),
        "/InstanceType".into(),
        "/MinCount".into(),
    ];
    fields.extend(profiles::EC2_SCOPE_POINTERS.iter().map(|s| (*s).to_owned()));
    let scoped = PayloadDigest::Fields(fields);
    assert!(profiles::ec2_scope_missing(&scoped).is_empty());
    let j = hash(url, &ec2_json("eu-west-1a", "subnet-aaa"), &scoped);
    assert_eq!(
        j,
        hash(
            url,
            &ec2_json("eu-west-1a", "subnet-aaa").replace("10:02", "10:03"),
            &scoped
        )
    );
    assert_ne!(j, hash(url, &ec2_json("eu-west-1b", "subnet-aaa"), &scoped));
    assert_ne!(j, hash(url, &ec2_json("eu-west-1a", "subnet-bbb"), &scoped));
    // ...because the naive digest makes the failover look like the same operation.
    let naive = PayloadDigest::Fields(vec!["/ImageId".into(), "/InstanceType".into()]);
    assert_eq!(
        hash(url, &ec2_json("eu-west-1a", "subnet-aaa"), &naive),
        hash(url, &ec2_json("eu-west-1b", "subnet-bbb"), &naive)
    );
    assert_eq!(
        profiles::ec2_scope_missing(&naive),
        ["/Placement/AvailabilityZone", "/SubnetId"]
    );
    // And the configuration loader refuses it.
    let err = Contracts::from_toml_str(
        r#"
        [contracts.ec2]
        extends = "aws-ec2"
        digest = { mode = "fields", pointers = ["/ImageId", "/SubnetId"] }
        "#,
        "ec2.toml",
    )
    .unwrap_err();
    assert_eq!(err.key(), "contracts.ec2.digest");
    assert_eq!(
        err.kind(),
        &ConfigErrorKind::Ec2ScopeMissing(vec!["/Placement/AvailabilityZone".into()])
    );
}

/// Pitfall 4: Mismatch and in-flight codes differ per vendor: none is normalised away.
#[test]
fn pitfall_4_each_vendor_keeps_its_own_mismatch_and_in_flight_signals() {
    let stripe = profiles::stripe_v1();
    let ietf = profiles::ietf_draft();
    let ec2 = profiles::aws_ec2();
    let square = profiles::square();
    let adyen = profiles::adyen();
    let square_reused = r#"{"errors":[{"code":"IDEMPOTENCY_KEY_REUSED"}]}"#;

    // Mismatch: 400 idempotency_error / 422 / IdempotentParameterMismatch / IDEMPOTENCY_KEY_REUSED.
    assert_eq!(
        classify(&stripe, 400, &[], STRIPE_IDEMPOTENCY_ERROR),
        MISMATCH
    );
    assert_eq!(classify(&ietf, 422, &[], "{}"), MISMATCH);
    assert_eq!(classify(&ec2, 400, &[], EC2_MISMATCH), MISMATCH);
    assert_eq!(classify(&square, 400, &[], square_reused), MISMATCH);
    // ...and each signal means nothing special to the others.
    assert_eq!(label(&stripe, 422, &[], "{}"), "rejected");
    assert_eq!(label(&ietf, 400, &[], STRIPE_IDEMPOTENCY_ERROR), "rejected");
    assert_eq!(label(&stripe, 400, &[], EC2_MISMATCH), "rejected");
    assert_eq!(label(&ec2, 400, &[], square_reused), "rejected");
    assert_eq!(label(&adyen, 400, &[], square_reused), "rejected");

    // In flight: 409 idempotency_key_in_use / 409 / 409 + 704 (422 + 704 on older Adyen).
    assert_eq!(classify(&stripe, 409, &[], STRIPE_IN_USE), IN_FLIGHT);
    assert_eq!(classify(&ietf, 409, &[], "{}"), IN_FLIGHT);
    assert_eq!(
        classify(&adyen, 422, &[], r#"{"errorCode":"704"}"#),
        IN_FLIGHT
    );
    assert_eq!(
        label(&stripe, 422, &[], r#"{"errorCode":"704"}"#),
        "rejected"
    );
}

/// Pitfall 5: Retry-After may be an obsolete HTTP-date; GitHub limits can come as 403 without it;
/// Twilio has no outbound idempotency at all.
#[test]
fn pitfall_5_obsolete_dates_github_403_limits_and_twilio_without_idempotency() {
    // RFC 850 and asctime dates are honoured, on a documented not-executed 429.
    let stripe = profiles::stripe_v1();
    for date in ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
        let e = classify(&stripe, 429, &[("Retry-After", date)], "{}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(60)), "{date}");
        assert_eq!(e.label(), "not_executed");
    }

    // GitHub: a 403 with the primary limit spent and no Retry-After.
    let reset = (784_111_717 + 120).to_string();
    let limit_headers = [
        ("x-ratelimit-limit", "5000"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", reset.as_str()),
    ];
    let body = r#"{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}"#;
    let github = profiles::github();
    let e = classify(&github, 403, &limit_headers, body);
    assert_eq!(e.label(), "unknown", "{e:?}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(120)));
    // The naive reading of the same answer: a final rejection.
    assert_eq!(
        label(&Contract::conservative(), 403, &limit_headers, body),
        "rejected"
    );
    // A secondary limit with Retry-After.
    let e = classify(
        &github,
        403,
        &[("retry-after", "60")],
        r#"{"message":"You have exceeded a secondary rate limit."}"#,
    );
    assert_eq!(e.label(), "unknown");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(60)));
    // A plain permission error stays a rejection.
    assert_eq!(
        label(
            &github,
            403,
            &[("x-ratelimit-remaining", "4999")],
            r#"{"message":"Resource not accessible by integration"}"#
        ),
        "rejected"
    );

    // Twilio: no key is sent and a replay is never safe.
    let twilio = profiles::no_idempotency();
    assert_eq!(twilio.key, KeyPlacement::Omitted);
    assert_eq!(twilio.replay, Replay::Unsafe);
    assert_eq!(label(&twilio, 500, &[], r#"{"code":20500}"#), "unknown");
}

// ---------------------------------------------------------------------------------------------
// Every profile.

#[test]
fn every_builtin_profile_validates_and_is_found_by_name() {
    for name in profiles::NAMES {
        let c = profiles::by_name(name).unwrap_or_else(|| panic!("{name}"));
        c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        if *name != "conservative" {
            assert_eq!(c.name, *name);
        }
        assert!(c.check_key(&IdempotencyKey::generate()).is_ok(), "{name}");
    }
    assert_eq!(profiles::by_name("default"), Some(Contract::conservative()));
    assert_eq!(profiles::by_name("paypal"), None);
    assert_eq!(profiles::by_name("Stripe-V1"), None);
    // Distinct names, distinct contracts.
    let all = profiles::all();
    let mut refs: Vec<_> = all.iter().map(|c| c.reference()).collect();
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    refs.dedup_by(|a, b| a.hash == b.hash);
    assert_eq!(refs.len(), all.len());
}

#[test]
fn the_conservative_default_is_unchanged() {
    // New contract fields are skipped when empty: the hash frozen on existing rows holds.
    assert_eq!(
        Contract::conservative().canonical_json(),
        r#"{"digest":{"mode":"full"},"key":{"format":"plain","in":"header","name":"Idempotency-Key"},"max_key_len":64,"name":"default","remote_ref":{"pointer":"/id","required":false},"replay":"unsafe"}"#
    );
}

#[test]
fn lookup_and_settle_are_part_of_the_reference() {
    let base = profiles::ietf_draft();
    let h = base.reference().hash;
    assert_ne!(base.clone().settle_secs(1).reference().hash, h);
    assert_ne!(
        base.clone()
            .lookup(Lookup::http_get("/ops/{operation_id}"))
            .reference()
            .hash,
        h
    );
}

#[test]
fn lookup_templates_are_checked() {
    let c = |t: &str| {
        Contract::conservative()
            .lookup(Lookup::http_get(t))
            .validate()
    };
    c("https://vendor.example/operations/{operation_id}").unwrap();
    c("/operations/by-key/{idempotency_key}?tenant={tenant}").unwrap();
    for bad in [
        "",
        "operations/{operation_id}",
        "/ops/{op_id}",
        "/ops/{operation_id",
        "/ops/}x",
    ] {
        let err = c(bad).unwrap_err();
        assert_eq!(err.field(), "lookup.url_template", "{bad}");
    }
    let err = Contract::conservative()
        .lookup(Lookup::SameKeyReplay)
        .validate()
        .unwrap_err();
    assert_eq!(err.kind(), &ContractErrorKind::LookupNeedsSafeReplay);
}

#[test]
fn xml_rules_match_element_text_only() {
    let c = Contract::conservative().rule(
        Rule::new(400, EvidenceClass::ConflictMismatch).xml("Code", "IdempotentParameterMismatch"),
    );
    assert_eq!(classify(&c, 400, &[], EC2_MISMATCH), MISMATCH);
    assert_eq!(
        classify(
            &c,
            400,
            &[],
            "<ec2:Error><ec2:Code> IdempotentParameterMismatch </ec2:Code></ec2:Error>"
        ),
        MISMATCH
    );
    for body in [
        "IdempotentParameterMismatch",
        "<Code>IdempotentParameterMismatchX</Code>",
        "<Code>",
        "<Message>IdempotentParameterMismatch</Message>",
        "",
    ] {
        assert_eq!(label(&c, 400, &[], body), "rejected", "{body}");
    }
    let err = Contract::conservative()
        .rule(Rule::new(400, EvidenceClass::Unknown).xml("<Code>", "x"))
        .validate()
        .unwrap_err();
    assert_eq!(err.field(), "rules[0].xml.element");
}

// ---------------------------------------------------------------------------------------------
// Contracts as configuration.

fn uri(s: &str) -> Uri {
    s.parse().unwrap()
}

#[test]
fn the_example_file_loads() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/contracts.toml");
    let cs = Contracts::load(path).unwrap();
    cs.validate().unwrap();
    let pick = |m: Method, u: &str| cs.select(&m, &uri(u)).clone();
    let fake = pick(Method::POST, "http://127.0.0.1:38111/tickets");
    assert_eq!(fake.name, "fake-tickets");
    assert_eq!(fake.replay, Replay::StoredFirstResponse); // from ietf-draft
    assert_eq!(fake.retention_secs, Some(86_400));
    assert_eq!(
        fake.digest,
        PayloadDigest::Fields(vec!["/device_id".into(), "/priority".into()])
    );
    let charges = pick(Method::POST, "https://api.stripe.com/v1/charges");
    assert_eq!(charges.name, "stripe-charges");
    assert_eq!(charges.rules.len(), profiles::stripe_v1().rules.len() + 1);
    assert_eq!(charges.rules[1..], profiles::stripe_v1().rules[..]);
    assert_eq!(charges.secret_headers, ["Stripe-Account"]);
    assert_eq!(
        pick(Method::POST, "https://api.stripe.com/v2/core/x").name,
        "stripe-v2"
    );
    assert_eq!(
        pick(Method::GET, "https://api.stripe.com/v1/charges").name,
        "default"
    );
    assert_eq!(
        pick(Method::POST, "https://ec2.eu-west-1.amazonaws.com/").name,
        "ec2-eu-west-1"
    );
    assert_eq!(
        pick(Method::POST, "https://api.twilio.com/2010-04-01/x").key,
        KeyPlacement::Omitted
    );
    assert_eq!(
        pick(
            Method::POST,
            "https://api-m.paypal.com/v2/payments/captures/1/refund"
        )
        .retention_secs,
        Some(45 * 86_400)
    );
    assert_eq!(cs.default_contract().as_ref(), &Contract::conservative());
}

const CHAIN: &str = r#"
[[route]]
host = "api.stripe.com"
path_prefix = "/v1/refunds"
method = "POST"
contract = "refunds"

[contracts.base]
extends = "stripe-v1"
secret_headers = ["Stripe-Account"]
retention_secs = 3600

[contracts.charges]
extends = "base"
digest = { mode = "fields", pointers = ["/amount", "/currency"] }
[[contracts.charges.extra_rules]]
status = 402
body = { pointer = "/error/code", equals = "card_declined" }
evidence = "rejected"

[contracts.refunds]
extends = "charges"
name = "stripe-refunds"
secret_headers = ["X-Partner-Token", "stripe-account"]
[[contracts.refunds.rules]]
status = "5xx"
evidence = "unknown"
"#;

#[test]
fn extends_chains_merge_as_documented() {
    let cs = Contracts::from_toml_str(CHAIN, "chain.toml").unwrap();
    let r = cs
        .select(&Method::POST, &uri("https://api.stripe.com/v1/refunds"))
        .clone();
    // The name is given; otherwise it would be the table key.
    assert_eq!(r.name, "stripe-refunds");
    // Inherited through two levels: key and limits from stripe-v1, retention from `base`,
    // digest from `charges`.
    assert_eq!(r.max_key_len, 255);
    assert_eq!(r.retention_secs, Some(3600));
    assert_eq!(r.replay, Replay::StoredFirstResponse);
    assert_eq!(
        r.digest,
        PayloadDigest::Fields(vec!["/amount".into(), "/currency".into()])
    );
    // `rules` replaced everything inherited, `extra_rules` of a parent included.
    assert_eq!(r.rules.len(), 1);
    assert_eq!(r.rules[0].evidence, EvidenceClass::Unknown);
    // Secret headers only ever accumulate (case-insensitively).
    assert_eq!(r.secret_headers, ["Stripe-Account", "X-Partner-Token"]);
    // The route's default is the conservative one.
    assert_eq!(cs.default_contract().name, "default");
}

#[test]
fn extra_rules_are_tried_before_the_inherited_ones() {
    let cs = Contracts::from_toml_str(
        r#"
        default = "tickets"
        [contracts.tickets]
        extends = "stripe-v1"
        [[contracts.tickets.extra_rules]]
        status = 429
        evidence = "unknown"
        reason = "our proxy answers 429 after forwarding"
        "#,
        "x.toml",
    )
    .unwrap();
    let c = cs.default_contract();
    assert_eq!(c.name, "tickets");
    assert_eq!(c.rules.len(), profiles::stripe_v1().rules.len() + 1);
    let e = classify(c, 429, &[], "{}");
    assert!(why(&e).contains("our proxy"), "{e:?}");
}

#[test]
fn a_contract_may_extend_the_builtin_of_its_own_name() {
    let cs = Contracts::from_toml_str(
        r#"
        [[route]]
        host = "checkout-live.adyen.com"
        contract = "adyen"
        [contracts.adyen]
        extends = "adyen"
        remote_ref = { pointer = "/pspReference", required = true }
        "#,
        "adyen.toml",
    )
    .unwrap();
    let c = cs.select(
        &Method::POST,
        &uri("https://checkout-live.adyen.com/v71/payments"),
    );
    assert_eq!(c.name, "adyen");
    assert_eq!(c.retention_secs, Some(31 * 86_400));
    assert!(c.remote_ref.as_ref().unwrap().required);
}

#[test]
fn json_has_the_same_shape() {
    let json = r#"{
      "default": { "extends": "ietf-draft" },
      "routes": [ { "host": "connect.squareup.com", "method": "post", "contract": "sq" } ],
      "contracts": {
        "sq": { "extends": "square", "max_key_len": 64,
                "rules": [ { "status": 400, "body": { "pointer": "/errors/0/code", "equals": "IDEMPOTENCY_KEY_REUSED" }, "evidence": "conflict_mismatch" } ] }
      }
    }"#;
    let cs = Contracts::from_json_str(json, "contracts.json").unwrap();
    assert_eq!(cs.default_contract().name, "default");
    assert_eq!(cs.default_contract().replay, Replay::StoredFirstResponse);
    let sq = cs.select(
        &Method::POST,
        &uri("https://connect.squareup.com/v2/orders"),
    );
    assert_eq!(sq.name, "sq");
    assert_eq!(sq.max_key_len, 64);
    assert_eq!(sq.rules.len(), 1);
    assert_eq!(sq.key, KeyPlacement::json_body("/idempotency_key"));
}

#[test]
fn load_picks_the_format_by_extension_and_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let toml_path = dir.path().join("c.toml");
    std::fs::write(&toml_path, "[contracts.a]\nextends = \"github\"\n").unwrap();
    Contracts::load(&toml_path).unwrap();
    let json_path = dir.path().join("c.json");
    std::fs::write(
        &json_path,
        r#"{"contracts":{"a":{"extends":"github","bogus":1}}}"#,
    )
    .unwrap();
    let err = Contracts::load(&json_path).unwrap_err();
    assert_eq!(err.origin(), json_path.display().to_string());
    assert_eq!(err.key(), "contracts.a.bogus");
    assert!(
        err.to_string().starts_with(&format!(
            "{}: contracts.a.bogus: unknown key",
            json_path.display()
        )),
        "{err}"
    );

    let yaml = dir.path().join("c.yaml");
    std::fs::write(&yaml, "a: 1").unwrap();
    let err = Contracts::load(&yaml).unwrap_err();
    assert_eq!(err.kind(), &ConfigErrorKind::UnknownFormat("yaml".into()));
    let missing = dir.path().join("missing.toml");
    let err = Contracts::load(&missing).unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::Io(_)), "{err}");
    assert!(err.to_string().contains("missing.toml"), "{err}");
}

#[track_caller]
fn config_error(text: &str, key: &str, kind: ConfigErrorKind) {
    let err = Contracts::from_toml_str(text, "bad.toml").unwrap_err();
    assert_eq!((err.key(), err.kind()), (key, &kind), "{err}");
    let shown = err.to_string();
    assert!(shown.starts_with("bad.toml: "), "{shown}");
    assert!(shown.contains(key), "{shown}");
}

#[track_caller]
fn config_error_invalid(text: &str, key: &str, needle: &str) {
    let err = Contracts::from_toml_str(text, "bad.toml").unwrap_err();
    assert_eq!(err.key(), key, "{err}");
    let ConfigErrorKind::Invalid(what) = err.kind() else {
        panic!("{err:?}")
    };
    assert!(what.contains(needle), "{what}");
    assert!(
        err.to_string()
            .starts_with(&format!("bad.toml: {key}: invalid value")),
        "{err}"
    );
}

#[test]
fn every_config_error_names_origin_key_and_problem() {
    let unknown = |expected: &str| ConfigErrorKind::UnknownKey {
        expected: expected.to_owned(),
    };
    config_error(
        "routs = []",
        "routs",
        unknown("default, route, routes, contracts"),
    );
    config_error(
        "[contracts.c]\nretenton_secs = 5",
        "contracts.c.retenton_secs",
        unknown(
            "extends, name, key, max_key_len, retention_secs, replay, rules, extra_rules, remote_ref, secret_headers, secret_query_params, secret_body_fields, replay_supplies_body_secrets, secret_response_fields, secret_path_segments, replay_supplies_path_secrets, digest, lookup, settle_secs, keep_details_secs, keep_identity_secs",
        ),
    );
    config_error(
        "[[route]]\nhost = \"a.test\"\ncontract = \"default\"\npath = \"/x\"",
        "route[0].path",
        unknown("host, path_prefix, method, contract"),
    );
    config_error(
        "[contracts.c]\n[[contracts.c.rules]]\nstatus = 500\nevidence = \"unknown\"\n[[contracts.c.rules]]\nstatus = 429\nevidense = \"unknown\"",
        "contracts.c.rules[1].evidense",
        unknown("status, header, body, xml, evidence, reason"),
    );
    config_error(
        "[contracts.c]\ndigest = { mode = \"fields\", pointer = [\"/a\"] }",
        "contracts.c.digest.pointer",
        unknown("mode, pointers"),
    );
    // Values.
    config_error_invalid(
        "[contracts.c]\nretention_secs = -5",
        "contracts.c.retention_secs",
        "-5",
    );
    config_error_invalid(
        "[contracts.c]\nmax_key_len = \"64\"",
        "contracts.c.max_key_len",
        "expected usize",
    );
    config_error_invalid(
        "[contracts.c]\nreplay = \"sometimes\"",
        "contracts.c.replay",
        "sometimes",
    );
    config_error_invalid(
        "[contracts.c]\nkey = { in = \"cookie\", name = \"k\" }",
        "contracts.c.key.in",
        "cookie",
    );
    config_error_invalid(
        "[contracts.c]\nkey = { in = \"header\", nme = \"k\" }",
        "contracts.c.key",
        "nme",
    );
    config_error_invalid(
        "[contracts.c]\nlookup = { kind = \"carrier_pigeon\" }",
        "contracts.c.lookup.kind",
        "carrier_pigeon",
    );
    config_error_invalid(
        "[contracts.c]\n[[contracts.c.rules]]\nstatus = 500\nevidence = \"unknown\"\n[[contracts.c.rules]]\nstatus = \"5xy\"\nevidence = \"unknown\"",
        "contracts.c.rules[1].status",
        "5xy",
    );
    config_error_invalid(
        "[contracts.c]\n[[contracts.c.rules]]\nstatus = 500\nevidence = \"maybe\"",
        "contracts.c.rules[0].evidence",
        "maybe",
    );
    config_error_invalid("[contracts.c]\nrules = 5", "contracts.c.rules", "array");
    config_error_invalid(
        "[contracts.c]\nextends = 5",
        "contracts.c.extends",
        "string",
    );
    config_error_invalid("contracts = 5", "contracts", "table");
    config_error_invalid("route = { host = \"a\" }", "route", "array");
    config_error_invalid(
        "[[route]]\nhost = \"a.test\"\nmethod = \"GE T\"\ncontract = \"github\"",
        "route[0].method",
        "method",
    );
    config_error_invalid("default = 5", "default", "contract");
    // Missing keys.
    config_error(
        "[[route]]\ncontract = \"stripe-v1\"",
        "route[0].host",
        ConfigErrorKind::Missing,
    );
    config_error(
        "[[route]]\nhost = \"a.test\"",
        "route[0].contract",
        ConfigErrorKind::Missing,
    );
    config_error(
        "[contracts.c]\n[[contracts.c.extra_rules]]\nstatus = 500",
        "contracts.c.extra_rules[0].evidence",
        ConfigErrorKind::Missing,
    );
    config_error(
        "[contracts.c]\n[[contracts.c.rules]]\nevidence = \"unknown\"",
        "contracts.c.rules[0].status",
        ConfigErrorKind::Contract(ContractErrorKind::MissingStatus),
    );
    // Names.
    let builtin = profiles::NAMES.join(", ");
    config_error(
        "[contracts.c]\nextends = \"stripe-v3\"",
        "contracts.c.extends",
        ConfigErrorKind::UnknownContract {
            name: "stripe-v3".into(),
            builtin: builtin.clone(),
        },
    );
    config_error(
        "[[route]]\nhost = \"a.test\"\ncontract = \"nope\"",
        "route[0].contract",
        ConfigErrorKind::UnknownContract {
            name: "nope".into(),
            builtin: builtin.clone(),
        },
    );
    config_error(
        "[contracts.a]\nextends = \"b\"\n[contracts.b]\nextends = \"c\"\n[contracts.c]\nextends = \"a\"",
        "contracts.a.extends",
        ConfigErrorKind::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()]),
    );
    // Validation of the merged contract, with the key that set the value.
    config_error(
        "[contracts.c]\nextends = \"stripe-v1\"\nmax_key_len = 20",
        "contracts.c.max_key_len",
        ConfigErrorKind::Contract(ContractErrorKind::MaxKeyLenTooSmall { value: 20, min: 36 }),
    );
    config_error(
        "[contracts.c]\n[[contracts.c.rules]]\nstatus = 500\nevidence = \"unknown\"\n[[contracts.c.rules]]\nstatus = \"500-700\"\nevidence = \"unknown\"",
        "contracts.c.rules[1].status",
        ConfigErrorKind::Contract(ContractErrorKind::InvalidStatusRange { lo: 500, hi: 700 }),
    );
    config_error(
        "[contracts.c]\n[[contracts.c.extra_rules]]\nstatus = 500\nheader = { name = \"Bad Header\", value = \"x\" }\nevidence = \"unknown\"",
        "contracts.c.extra_rules[0].header.name",
        ConfigErrorKind::Contract(ContractErrorKind::InvalidHeaderName("Bad Header".into())),
    );
    config_error(
        "[contracts.c]\nremote_ref = { pointer = \"id\" }",
        "contracts.c.remote_ref.pointer",
        ConfigErrorKind::Contract(ContractErrorKind::InvalidPointer("id".into())),
    );
    config_error(
        "[contracts.c]\nlookup = { kind = \"http_get\", url_template = \"/x/{op}\" }",
        "contracts.c.lookup.url_template",
        ConfigErrorKind::Contract(ContractErrorKind::InvalidTemplate(
            "unknown placeholder `{op}` (known: {operation_id}, {idempotency_key}, {tenant}, {remote_ref})".into(),
        )),
    );
    config_error(
        "[contracts.c]\nextends = \"no-idempotency\"\nreplay = \"current_state\"",
        "contracts.c.replay",
        ConfigErrorKind::Contract(ContractErrorKind::ReplayWithoutKey),
    );
    config_error(
        "[contracts.c]\nlookup = { kind = \"same_key_replay\" }",
        "contracts.c.lookup",
        ConfigErrorKind::Contract(ContractErrorKind::LookupNeedsSafeReplay),
    );
    // Routes.
    config_error(
        "[[route]]\nhost = \"a.test/v1\"\ncontract = \"github\"",
        "route[0].host",
        ConfigErrorKind::InvalidTarget("host `a.test/v1` is not a host name".into()),
    );
    config_error(
        "[[route]]\nhost = \"a.test\"\ncontract = \"github\"\n[[route]]\nhost = \"A.test\"\ncontract = \"github\"\n[[route]]\nhost = \"a.test\"\ncontract = \"adyen\"",
        "route[2]",
        ConfigErrorKind::DuplicateRoute(0),
    );
    config_error(
        "[[route]]\nhost = \"a.test\"\ncontract = \"stripe-v1\"\n[[route]]\nhost = \"b.test\"\ncontract = \"mine\"\n[contracts.mine]\nname = \"stripe-v1\"\nretention_secs = 1",
        "route[1].contract",
        ConfigErrorKind::DuplicateName("stripe-v1".into()),
    );
    // A key that is not a bare TOML key is quoted in the path.
    let err = Contracts::from_toml_str("[contracts.\"a b\"]\nbogus = 1", "q.toml").unwrap_err();
    assert_eq!(err.key(), "contracts.\"a b\".bogus");
}

#[test]
fn syntax_errors_keep_line_and_column() {
    let err = Contracts::from_toml_str(
        "[contracts.c]\nextends = \"stripe-v1\"\nretention_secs = = 5\n",
        "contracts.toml",
    )
    .unwrap_err();
    let ConfigErrorKind::Syntax { line, column, .. } = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!((*line, *column), (3, 18), "{err}");
    assert_eq!(err.key(), "");
    assert!(
        err.to_string()
            .starts_with("contracts.toml:3:18: syntax error: "),
        "{err}"
    );

    let err = Contracts::from_json_str(
        "{\n  \"contracts\": {\n    \"c\": { \"extends\": }\n  }\n}",
        "c.json",
    )
    .unwrap_err();
    let ConfigErrorKind::Syntax {
        line,
        column,
        message,
    } = err.kind()
    else {
        panic!("{err:?}")
    };
    assert_eq!(*line, 3, "{err}");
    assert!(*column > 10, "{err}");
    assert!(!message.contains(" at line "), "{message}");
    assert!(err.to_string().starts_with("c.json:3:"), "{err}");

    let err = Contracts::from_toml_str("", "empty.toml").map(|c| c.default_contract().name.clone());
    assert_eq!(err.unwrap(), "default");
    let err = Contracts::from_json_str("[1]", "a.json").unwrap_err();
    assert_eq!(err.key(), "");
    assert!(matches!(err.kind(), ConfigErrorKind::Invalid(_)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn loading_random_text_never_panics(text in "\\PC{0,200}") {
        let _ = Contracts::from_toml_str(&text, "random.toml");
        let _ = Contracts::from_json_str(&text, "random.json");
    }

    #[test]
    fn loading_a_mangled_config_never_panics(cut in 0usize..CHAIN.len(), len in 0usize..40, insert in "[\\[\\]{}=\"#.,a-z0-9 \n-]{0,12}") {
        let mut text: Vec<char> = CHAIN.chars().collect();
        let cut = cut.min(text.len());
        let end = (cut + len).min(text.len());
        text.splice(cut..end, insert.chars());
        let text: String = text.into_iter().collect();
        match Contracts::from_toml_str(&text, "mangled.toml") {
            Ok(cs) => prop_assert!(cs.validate().is_ok()),
            Err(e) => {
                let shown = e.to_string();
                prop_assert!(shown.starts_with("mangled.toml"), "{}", shown);
            }
        }
    }

    #[test]
    fn random_values_in_a_contract_table_never_panic(
        field in proptest::sample::select(vec!["key", "max_key_len", "retention_secs", "replay", "rules", "extra_rules", "remote_ref", "secret_headers", "digest", "lookup", "settle_secs", "name", "extends"]),
        value in "[\\[\\]{}=\"a-z0-9_ ,/-]{0,30}",
    ) {
        let text = format!("[contracts.c]\n{field} = {value}\n");
        if let Err(e) = Contracts::from_toml_str(&text, "v.toml") {
            prop_assert!(e.to_string().starts_with("v.toml"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Large and hostile configurations (issue 10 items 18 and 19).

/// `n` contracts, each extending the next: `<prefix>0 -> <prefix>1 -> ... -> stripe-v1`.
fn extends_chain(prefix: &str, n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!("[contracts.{prefix}{i}]\n"));
        if i + 1 < n {
            text.push_str(&format!("extends = \"{prefix}{}\"\n", i + 1));
        } else {
            text.push_str("extends = \"stripe-v1\"\n");
        }
    }
    text
}

#[test]
fn a_700_deep_extends_chain_is_a_typed_error_not_a_stack_overflow() {
    let text = extends_chain("c", 700);
    assert!(text.len() > 20_000, "{} bytes", text.len());
    let err = Contracts::from_toml_str(&text, "deep.toml").unwrap_err();
    let ConfigErrorKind::ExtendsTooDeep { chain, limit } = err.kind() else {
        panic!("{err}")
    };
    assert_eq!(*limit, 32);
    assert_eq!(chain.len(), 33, "{err}");
    // The chain named is a real one: each extends the next.
    for pair in chain.windows(2) {
        let a: usize = pair[0][1..].parse().unwrap();
        let b: usize = pair[1][1..].parse().unwrap();
        assert_eq!(b, a + 1, "{chain:?}");
    }
    assert_eq!(err.key(), format!("contracts.{}.extends", chain[0]));
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!(
            "deep.toml: contracts.{}.extends: the `extends` chain is more than 32 contracts deep: {} -> {}",
            chain[0], chain[0], chain[1]
        )),
        "{shown}"
    );
    // JSON too.
    let mut json = serde_json::Map::new();
    for i in 0..700 {
        let parent = if i + 1 < 700 {
            format!("c{}", i + 1)
        } else {
            "stripe-v1".into()
        };
        json.insert(format!("c{i}"), serde_json::json!({ "extends": parent }));
    }
    let json = serde_json::json!({ "contracts": json }).to_string();
    let err = Contracts::from_json_str(&json, "deep.json").unwrap_err();
    assert!(
        matches!(err.kind(), ConfigErrorKind::ExtendsTooDeep { .. }),
        "{err}"
    );
}

#[test]
fn extends_depth_limit_is_exact_in_either_key_order() {
    // 32 contracts of the file load, 33 do not, whichever contract the loader meets first
    // (`a*` keys sort top-down, `z*`... are renamed so that the bottom sorts first).
    for prefix in ["a", "z"] {
        let text = extends_chain(prefix, 32);
        let cs = Contracts::from_toml_str(
            &format!("{text}[[route]]\nhost = \"x.test\"\ncontract = \"{prefix}0\"\n"),
            "ok.toml",
        )
        .unwrap();
        let c = cs.select(&Method::POST, &"https://x.test/".parse().unwrap());
        assert_eq!(c.name, format!("{prefix}0"));
        assert_eq!(c.retention_secs, Some(86_400), "inherited from stripe-v1");
        let err = Contracts::from_toml_str(&extends_chain(prefix, 33), "deep.toml").unwrap_err();
        let ConfigErrorKind::ExtendsTooDeep { chain, .. } = err.kind() else {
            panic!("{err}")
        };
        assert_eq!(chain.len(), 33, "{err}");
        assert_eq!(chain[0], format!("{prefix}0"), "{err}");
        assert_eq!(err.key(), format!("contracts.{prefix}0.extends"));
    }
    // Reversed numbering: the bottom of the chain sorts first and is resolved first.
    let mut text = String::new();
    for i in 0..33 {
        text.push_str(&format!("[contracts.r{:02}]\n", i));
        if i == 0 {
            text.push_str("extends = \"stripe-v1\"\n");
        } else {
            text.push_str(&format!("extends = \"r{:02}\"\n", i - 1));
        }
    }
    let err = Contracts::from_toml_str(&text, "deep.toml").unwrap_err();
    assert_eq!(err.key(), "contracts.r32.extends", "{err}");
    let ConfigErrorKind::ExtendsTooDeep { chain, .. } = err.kind() else {
        panic!("{err}")
    };
    assert_eq!(chain.first().map(String::as_str), Some("r32"));
    assert_eq!(chain.last().map(String::as_str), Some("r00"));
}

#[test]
fn a_contract_extending_itself_says_so() {
    let builtin = profiles::NAMES.join(", ");
    config_error(
        "[contracts.a]\nextends = \"a\"",
        "contracts.a.extends",
        ConfigErrorKind::ExtendsItself {
            name: "a".into(),
            builtin: builtin.clone(),
        },
    );
    let err = Contracts::from_toml_str("[contracts.a]\nextends = \"a\"", "self.toml").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("self.toml: contracts.a.extends: contract `a` extends itself"),
        "{err}"
    );
    // The `default` table extending itself means the built-in default, as before.
    Contracts::from_toml_str("[default]\nextends = \"default\"", "d.toml").unwrap();
    // A two-step cycle names both.
    config_error(
        "[contracts.a]\nextends = \"b\"\n[contracts.b]\nextends = \"a\"",
        "contracts.a.extends",
        ConfigErrorKind::Cycle(vec!["a".into(), "b".into(), "a".into()]),
    );
    let err = Contracts::from_toml_str(
        "[contracts.a]\nextends = \"b\"\n[contracts.b]\nextends = \"a\"",
        "cycle.toml",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cycle.toml: contracts.a.extends: `extends` forms a cycle: a -> b -> a"
    );
}

#[test]
fn an_error_in_a_parent_names_the_parent_table() {
    // Found while resolving `a` (it sorts first), but the bad key is `b`'s.
    config_error(
        "[contracts.a]\nextends = \"b\"\n[contracts.b]\nextends = \"stripe-v1\"\nmax_key_len = 20",
        "contracts.b.max_key_len",
        ConfigErrorKind::Contract(ContractErrorKind::MaxKeyLenTooSmall { value: 20, min: 36 }),
    );
}

#[test]
fn numeric_contract_fields_over_their_bounds_name_the_key() {
    config_error(
        "[contracts.c]\nextends = \"stripe-v1\"\nretention_secs = 9223372036854775807",
        "contracts.c.retention_secs",
        ConfigErrorKind::Contract(ContractErrorKind::TooLarge {
            value: 9_223_372_036_854_775_807,
            max: 31_536_000,
            unit_secs: true,
        }),
    );
    config_error(
        "[contracts.c]\nsettle_secs = 99999999999",
        "contracts.c.settle_secs",
        ConfigErrorKind::Contract(ContractErrorKind::TooLarge {
            value: 99_999_999_999,
            max: 2_592_000,
            unit_secs: true,
        }),
    );
    let err = Contracts::from_json_str(
        r#"{"contracts":{"c":{"retention_secs":18446744073709551615}}}"#,
        "big.json",
    )
    .unwrap_err();
    assert_eq!(err.key(), "contracts.c.retention_secs");
    assert!(
        err.to_string().contains("at most 31536000 (365 days)"),
        "{err}"
    );
}

#[test]
fn duplicate_json_keys_are_refused_with_the_key_and_position() {
    // serde_json keeps the last of two equal keys: a retention of 1 s would silently win.
    let text = "{\n  \"contracts\": {\n    \"c\": {\n      \"retention_secs\": 86400,\n      \"retention_secs\": 1\n    }\n  }\n}";
    let err = Contracts::from_json_str(text, "dup.json").unwrap_err();
    assert_eq!(err.key(), "contracts.c.retention_secs", "{err}");
    let ConfigErrorKind::DuplicateKey { line, column } = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!(*line, 5, "{err}");
    assert!(*column > 6, "{err}");
    assert!(
        err.to_string()
            .starts_with("dup.json: contracts.c.retention_secs: duplicate key at line 5"),
        "{err}"
    );
    // At the top level, in a route, in an array element and in a whole duplicate contract.
    for (text, key) in [
        (r#"{"route": [], "route": []}"#, "route"),
        (
            r#"{"route": [{"host": "a.test", "host": "b.test", "contract": "github"}]}"#,
            "route[0].host",
        ),
        (
            r#"{"contracts": {"c": {}, "c": {"extends": "github"}}}"#,
            "contracts.c",
        ),
        (
            r#"{"contracts": {"c": {"rules": [{"status": 500, "evidence": "unknown", "evidence": "rejected"}]}}}"#,
            "contracts.c.rules[0].evidence",
        ),
        (
            r#"{"contracts": {"a b": {"name": "x", "name": "y"}}}"#,
            "contracts.\"a b\".name",
        ),
    ] {
        let err = Contracts::from_json_str(text, "dup.json").unwrap_err();
        assert_eq!(err.key(), key, "{text}: {err}");
        assert!(
            matches!(err.kind(), ConfigErrorKind::DuplicateKey { line: 1, .. }),
            "{text}: {err}"
        );
    }
    // Equal keys in different objects are fine.
    Contracts::from_json_str(
        r#"{"contracts": {"a": {"extends": "github"}, "b": {"extends": "github"}}}"#,
        "ok.json",
    )
    .unwrap();
}

#[test]
fn duplicate_toml_keys_are_refused_by_the_parser() {
    for text in [
        "[contracts.c]\nretention_secs = 86400\nretention_secs = 1\n",
        "[contracts.c]\n[contracts.c]\n",
        "[[route]]\nhost = \"a.test\"\nhost = \"b.test\"\ncontract = \"github\"\n",
    ] {
        let err = Contracts::from_toml_str(text, "dup.toml").unwrap_err();
        let ConfigErrorKind::Syntax { message, .. } = err.kind() else {
            panic!("{text}: {err:?}")
        };
        assert!(message.contains("duplicate"), "{text}: {message}");
    }
}

/// 20,000 routes: exact hosts (some with several prefixes and methods), wildcards and ports.
fn many_routes() -> String {
    let mut text = String::new();
    for i in 0..20_000 {
        match i % 10 {
            // A wildcard for a family of hosts.
            0 => text.push_str(&format!(
                "[[route]]\nhost = \"*.w{i}.example.com\"\ncontract = \"c{}\"\n",
                i % 50
            )),
            // A host with a prefix and a method.
            1 => text.push_str(&format!(
                "[[route]]\nhost = \"h{}.example.com\"\npath_prefix = \"/v1\"\nmethod = \"POST\"\ncontract = \"c{}\"\n",
                i - 1,
                i % 50
            )),
            // A port.
            2 => text.push_str(&format!(
                "[[route]]\nhost = \"h{}.example.com:8443\"\ncontract = \"c{}\"\n",
                i - 2,
                i % 50
            )),
            _ => text.push_str(&format!(
                "[[route]]\nhost = \"h{i}.example.com\"\ncontract = \"c{}\"\n",
                i % 50
            )),
        }
    }
    for j in 0..50 {
        text.push_str(&format!(
            "[contracts.c{j}]\nextends = \"stripe-v1\"\nretention_secs = {}\n",
            1_000 + j
        ));
    }
    text
}

#[test]
fn twenty_thousand_routes_load_and_select_the_most_specific() {
    let cs = Contracts::from_toml_str(&many_routes(), "many.toml").unwrap();
    assert_eq!(cs.routes().count(), 20_000);
    cs.validate().unwrap();
    let pick = |m: Method, u: &str| cs.select(&m, &u.parse::<Uri>().unwrap()).name.clone();
    for i in (0..20_000).step_by(10) {
        let c = |k: usize| format!("c{}", k % 50);
        // `h{i}` has no plain route (i % 10 == 0 is a wildcard slot): a prefix+method route and
        // a port route only.
        assert_eq!(
            pick(Method::POST, &format!("https://h{i}.example.com/v1/x")),
            c(i + 1)
        );
        assert_eq!(
            pick(Method::GET, &format!("https://h{i}.example.com/v1/x")),
            "default"
        );
        assert_eq!(
            pick(Method::POST, &format!("https://h{i}.example.com:8443/v1/x")),
            c(i + 1)
        );
        assert_eq!(
            pick(Method::GET, &format!("https://H{i}.example.com:8443/v2")),
            c(i + 2)
        );
        // Wildcards: any subdomain, case-insensitive, not the apex.
        assert_eq!(
            pick(Method::POST, &format!("https://api.w{i}.example.com/")),
            c(i)
        );
        assert_eq!(
            pick(Method::POST, &format!("https://a.b.W{i}.example.com./")),
            c(i)
        );
        assert_eq!(
            pick(Method::POST, &format!("https://w{i}.example.com/")),
            "default"
        );
        // Plain hosts, with a trailing dot and in upper case.
        let p = i + 5;
        assert_eq!(
            pick(Method::DELETE, &format!("https://h{p}.example.com./x")),
            c(p)
        );
        assert_eq!(
            pick(Method::DELETE, &format!("https://H{p}.EXAMPLE.com/x")),
            c(p)
        );
        assert_eq!(
            pick(Method::DELETE, &format!("https://x.h{p}.example.com/x")),
            "default"
        );
    }
    // The selected contract is the loaded one, shared by reference with its routes.
    let c7 = cs.select(&Method::POST, &"https://h7.example.com/".parse().unwrap());
    assert_eq!(c7.retention_secs, Some(1_007));
    assert!(cs.find(&c7.reference()).is_some());
}

#[test]
fn deeply_nested_values_are_syntax_errors_not_stack_overflows() {
    let deep =
        |open: &str, close: &str| format!("{}{}", open.repeat(100_000), close.repeat(100_000));
    let json = format!(
        "{{\"contracts\": {{\"c\": {{\"rules\": {}}}}}}}",
        deep("[", "]")
    );
    let toml = format!("[contracts.c]\nrules = {}\n", deep("[", "]"));
    let dotted = format!("[contracts.c]\n{}b = 1\n", "a.".repeat(100_000));
    for err in [
        Contracts::from_json_str(&json, "deep.json").unwrap_err(),
        Contracts::from_toml_str(&toml, "deep.toml").unwrap_err(),
        Contracts::from_toml_str(&dotted, "deep.toml").unwrap_err(),
    ] {
        assert!(
            matches!(err.kind(), ConfigErrorKind::Syntax { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("recurs"), "{err}");
    }
}

#[test]
fn twenty_thousand_prefixes_of_one_host_select_the_longest() {
    let mut cs = Contracts::default();
    for i in 0..20_000 {
        let c = Contract::conservative().named(format!("p{i}"));
        cs = cs.route(Target::host("api.test").path_prefix(format!("/p{i}")), c);
    }
    cs = cs
        .route(
            Target::host("api.test").path_prefix("/p7/sub/"),
            Contract::conservative().named("p7-sub"),
        )
        .route(
            Target::host("api.test")
                .path_prefix("/p7")
                .method(Method::PUT),
            Contract::conservative().named("p7-put"),
        )
        .route(
            Target::host("API.test"),
            Contract::conservative().named("host"),
        );
    let pick = |m: Method, u: &str| cs.select(&m, &u.parse::<Uri>().unwrap()).name.clone();
    for i in (0..20_000).step_by(97) {
        assert_eq!(
            pick(Method::POST, &format!("https://api.test/p{i}")),
            format!("p{i}")
        );
        assert_eq!(
            pick(Method::POST, &format!("https://api.test/p{i}/x/y")),
            format!("p{i}")
        );
        assert_eq!(
            pick(Method::POST, &format!("https://api.test/p{i}x")),
            "host"
        );
    }
    assert_eq!(pick(Method::POST, "https://api.test/p7/sub"), "p7-sub");
    assert_eq!(pick(Method::POST, "https://api.test/p7/sub/x"), "p7-sub");
    assert_eq!(pick(Method::POST, "https://api.test/p7/subx"), "p7");
    assert_eq!(pick(Method::PUT, "https://api.test/p7/x"), "p7-put");
    assert_eq!(pick(Method::POST, "https://api.test/"), "host");
    assert_eq!(pick(Method::POST, "https://other.test/p7"), "default");
}
