//! Contract validation: bounds, duplicate fields, built-in profiles, errors that name the field.

use super::*;

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
