//! A contract's rules (first match wins, header and body conditions) and the remote reference a success must carry.

use super::*;

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
