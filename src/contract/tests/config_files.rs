//! Configuration read by serde derives (issue 11 item 6): the same errors as the hand walker.

use super::*;

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
