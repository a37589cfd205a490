//! The conservative default mapping of responses to evidence, one row of the table at a time.

use super::*;

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
