//! Contracts in JSON, and their reference: the canonical JSON and its pinned hash.

use super::*;

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
