//! Property tests for the parsers and classifiers that see input from outside: contract files
//! (TOML and JSON), vendor responses under every built-in profile, and the canonical JSON digest
//! (issue 10, "property-based or fuzz tests"). Retry-After values, parsed by a crate-private
//! function, are tested the same way in `src/contract/tests/retry_after_properties.rs`.
//!
//! The default case counts suit CI. The long run (at least 100,000 cases per property):
//!
//! ```text
//! PROPTEST_CASES=100000 cargo test --release --test properties
//! ```
//!
//! `PROPTEST_CASES` sets every property's case count here (the file reads it itself, so the
//! per-property defaults below do not override it).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::Config;
use recoverable_write::contract::{Contracts, profiles};
use recoverable_write::operation::{PayloadDigest, PayloadHash};
use serde_json::{Map, Value};

/// `PROPTEST_CASES` when set, else `default`.
fn cases(default: u32) -> Config {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Config {
        cases: n,
        // Shrinking a 100,000-case run can take long; a failure is reported either way.
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}

/// A fixed "now" so dates in the past and future are both exercised deterministically.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_780_000_000)
}

/// A valid configuration to mutate: routes, `extends` chains, rules, digest, lookup.
const CONFIG_TOML: &str = r#"
[[route]]
host = "api.stripe.com"
path_prefix = "/v1/refunds"
method = "POST"
contract = "refunds"

[[route]]
host = "tickets.example"
contract = "tickets"

[contracts.base]
extends = "stripe-v1"
secret_headers = ["Stripe-Account"]
retention_secs = 3600

[contracts.refunds]
extends = "base"
digest = { mode = "fields", pointers = ["/amount", "/currency"] }
[[contracts.refunds.extra_rules]]
status = 402
body = { pointer = "/error/code", equals = "card_declined" }
evidence = "rejected"

[contracts.tickets]
key = { in = "header", name = "Idempotency-Key" }
replay = "stored_first_response"
lookup = { kind = "http_get", url_template = "/operations/{operation_id}" }
[[contracts.tickets.rules]]
status = "5xx"
evidence = "unknown"
"#;

/// One edit to a text: delete a span, insert a token, or duplicate a span.
fn mutate(text: &str, at: usize, len: usize, insert: &str, dup: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = at.min(chars.len());
    let end = (at + len).min(chars.len());
    let mut out: Vec<char> = chars[..at].to_vec();
    if dup {
        out.extend_from_slice(&chars[at..end]);
        out.extend_from_slice(&chars[at..end]);
    } else {
        out.extend(insert.chars());
    }
    out.extend_from_slice(&chars[end..]);
    out.into_iter().collect()
}

/// Tokens that are likely to reach deep into the loader once spliced in.
fn config_token() -> impl Strategy<Value = String> {
    prop_oneof![
        "[\\[\\]{}=\"#.,a-z0-9_ \n-]{0,16}",
        Just("18446744073709551615".to_owned()),
        Just("-1".to_owned()),
        Just("\"\\u0000\"".to_owned()),
        Just("extends = \"refunds\"\n".to_owned()),
        Just("extends = \"base\"\n".to_owned()),
        Just("status = \"999\"".to_owned()),
        Just("retention_secs = 1e308\n".to_owned()),
        Just("max_key_len = 0\n".to_owned()),
        Just("[[contracts.base.rules]]\n".to_owned()),
        Just("pointers = [\"\", \"/~2\", \"x\"]".to_owned()),
        Just("replay = \"maybe\"\n".to_owned()),
        Just("settle_secs = 18446744073709551615\n".to_owned()),
    ]
}

proptest! {
    #![proptest_config(cases(1_000))]

    /// A mutated TOML configuration loads or fails with a typed error naming its origin; one
    /// that loads validates.
    #[test]
    fn mutated_toml_loads_or_fails_with_a_typed_error(
        at in 0usize..CONFIG_TOML.len(),
        len in 0usize..60,
        insert in config_token(),
        dup in any::<bool>(),
    ) {
        let text = mutate(CONFIG_TOML, at, len, &insert, dup);
        match Contracts::from_toml_str(&text, "m.toml") {
            Ok(cs) => prop_assert!(cs.validate().is_ok()),
            Err(e) => prop_assert!(e.to_string().starts_with("m.toml"), "{}", e),
        }
    }

    /// The same configuration as JSON, mutated: the same guarantee.
    #[test]
    fn mutated_json_loads_or_fails_with_a_typed_error(
        at in 0usize..2_000,
        len in 0usize..60,
        insert in config_token(),
        dup in any::<bool>(),
    ) {
        let json = config_json();
        let text = mutate(&json, at % json.len().max(1), len, &insert, dup);
        match Contracts::from_json_str(&text, "m.json") {
            Ok(cs) => prop_assert!(cs.validate().is_ok()),
            Err(e) => prop_assert!(e.to_string().starts_with("m.json"), "{}", e),
        }
    }

    /// Arbitrary text, TOML and JSON: never a panic.
    #[test]
    fn arbitrary_config_text_never_panics(text in "\\PC{0,300}") {
        let _ = Contracts::from_toml_str(&text, "a.toml");
        let _ = Contracts::from_json_str(&text, "a.json");
    }

    /// Arbitrary JSON values in a contract table: never a panic.
    #[test]
    fn arbitrary_json_contract_values_never_panic(value in json_value(3)) {
        let doc = serde_json::json!({ "contracts": { "c": value.clone() } });
        let _ = Contracts::from_json_str(&doc.to_string(), "v.json");
        let doc = serde_json::json!({ "route": [value], "contracts": {} });
        let _ = Contracts::from_json_str(&doc.to_string(), "v.json");
    }
}

/// [`CONFIG_TOML`] as JSON.
fn config_json() -> String {
    let v: toml::Value = toml::from_str(CONFIG_TOML).expect("the sample parses");
    serde_json::to_string_pretty(&v).expect("serializes")
}

#[test]
fn the_sample_configuration_loads() {
    Contracts::from_toml_str(CONFIG_TOML, "sample.toml").unwrap();
    Contracts::from_json_str(&config_json(), "sample.json").unwrap();
}

/// Arbitrary JSON values of bounded depth.
fn json_value(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(("[a-z_/~0-9]{0,8}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Statuses any vendor might send, the odd ones included.
fn status() -> impl Strategy<Value = StatusCode> {
    (100u16..1000).prop_map(|s| StatusCode::from_u16(s).expect("100..999 is valid"))
}

/// Retry-After strings: numbers of any size, signed, fractional, dates valid and odd, garbage.
fn retry_after_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[0-9]{18,60}",
        "[ \t]{0,3}[0-9]{1,12}[ \t]{0,3}",
        "[0-9]{1,6}\\.[0-9]{1,6}",
        "[+-]?[0-9]{1,10}[a-z]{0,3}",
        any::<u32>().prop_map(|secs| {
            httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(u64::from(secs) * 2))
        }),
        (
            "(Mon|Tue|Wed|Thu|Fri|Sat|Sun|Xyz)",
            0u32..40,
            "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec|Foo)",
            0u32..100_000,
            0u32..30,
            0u32..70,
            0u32..70,
        )
            .prop_map(|(wd, d, m, y, h, mi, s)| format!(
                "{wd}, {d:02} {m} {y:04} {h:02}:{mi:02}:{s:02} GMT"
            )),
        "(Sunday|Monday), [0-9]{2}-[A-Za-z]{3}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
        "[A-Za-z]{3} [A-Za-z]{3} [ 0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}",
        "\\PC{0,40}",
    ]
}

/// Response headers with names profiles look at, and junk.
fn headers() -> impl Strategy<Value = HeaderMap> {
    let name = prop_oneof![
        Just("retry-after".to_owned()),
        Just("idempotent-replayed".to_owned()),
        Just("content-type".to_owned()),
        Just("x-amzn-errortype".to_owned()),
        Just("x-request-id".to_owned()),
        "[a-z-]{1,16}",
    ];
    let value = prop_oneof![
        retry_after_text(),
        Just("application/json".to_owned()),
        Just("application/xml".to_owned()),
        Just("true".to_owned()),
        "[ -~]{0,24}",
    ];
    proptest::collection::vec((name, value), 0..6).prop_map(|kvs| {
        let mut map = HeaderMap::new();
        for (k, v) in kvs {
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(&v),
            ) {
                map.append(k, v);
            }
        }
        map
    })
}

/// Bodies: JSON error shapes the profiles match on, XML, raw bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        json_value(3).prop_map(|v| v.to_string().into_bytes()),
        (
            "[a-z_]{0,20}",
            "[a-z_.]{0,20}",
            "\\PC{0,20}"
        )
            .prop_map(|(code, ty, msg)| serde_json::json!({
                "error": { "code": code, "type": ty, "message": msg },
                "id": "x1", "status": code, "name": ty, "errors": [{ "code": code }]
            })
            .to_string()
            .into_bytes()),
        ("[A-Za-z.]{0,24}", "\\PC{0,16}").prop_map(|(code, msg)| format!(
            "<Response><Errors><Error><Code>{code}</Code><Message>{msg}</Message></Error></Errors></Response>"
        )
        .into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..200),
    ]
}

proptest! {
    #![proptest_config(cases(1_000))]

    /// Every built-in profile classifies any status, headers and body without panicking, and a
    /// 2xx is never classified as "not executed" or "rejected" by the conservative default.
    #[test]
    fn every_profile_classifies_anything(status in status(), headers in headers(), body in body()) {
        for contract in profiles::all() {
            let _ = contract.classify_response(status, &headers, &body, now());
            let _ = contract.classify_response(status, &headers, &body, UNIX_EPOCH);
        }
        let e = profiles::conservative().classify_response(status, &headers, &body, now());
        if status.is_success() {
            prop_assert!(
                !matches!(
                    e,
                    recoverable_write::Evidence::NotExecuted { .. }
                        | recoverable_write::Evidence::Rejected { .. }
                ),
                "{status}: {e:?}"
            );
        }
    }
}

/// Serializes `v` with object keys in an order given by `seed`, and optional whitespace.
fn render(v: &Value, seed: u64, spaced: bool, out: &mut String) {
    let ws = |out: &mut String, k: u64| {
        if spaced {
            out.push_str([" ", "\n", "\t ", "\r\n  ", ""][(k % 5) as usize]);
        }
    };
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // A seeded permutation of the keys.
            let n = entries.len();
            let mut s = seed;
            for i in (1..n).rev() {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                entries.swap(i, (s >> 33) as usize % (i + 1));
            }
            out.push('{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(out, seed.wrapping_add(i as u64));
                out.push_str(&Value::String(k.clone()).to_string());
                ws(out, seed >> 3);
                out.push(':');
                ws(out, seed >> 5);
                render(val, seed.rotate_left(7) ^ i as u64, spaced, out);
            }
            ws(out, seed >> 7);
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(out, seed >> (i % 13));
                render(item, seed.rotate_left(11) ^ i as u64, spaced, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Changes one scalar somewhere in `v` (the first one found along `path`); `false` if `v` has
/// no scalar to change.
fn change_one_value(v: &mut Value, path: u64) -> bool {
    match v {
        Value::Object(map) => {
            if map.is_empty() {
                return false;
            }
            let n = map.len();
            let keys: Vec<String> = map.keys().cloned().collect();
            for i in 0..n {
                let k = &keys[(path as usize + i) % n];
                if change_one_value(map.get_mut(k).expect("key exists"), path / 7) {
                    return true;
                }
            }
            false
        }
        Value::Array(items) => {
            let n = items.len();
            for i in 0..n {
                if change_one_value(&mut items[(path as usize + i) % n], path / 5) {
                    return true;
                }
            }
            false
        }
        Value::Null => {
            *v = Value::Bool(true);
            true
        }
        Value::Bool(b) => {
            *b = !*b;
            true
        }
        Value::Number(n) => {
            *v = match n.as_i64() {
                Some(i) if i < i64::MAX => Value::from(i + 1),
                _ => Value::from(0),
            };
            true
        }
        Value::String(s) => {
            s.push('x');
            true
        }
    }
}

fn hash(body: &[u8]) -> PayloadHash {
    PayloadHash::compute(
        "POST",
        "https://vendor.test/v1/tickets?b=2&a=1",
        body,
        &PayloadDigest::Full,
    )
}

proptest! {
    #![proptest_config(cases(2_000))]

    /// The digest of a JSON body does not depend on key order or insignificant whitespace.
    #[test]
    fn digest_is_stable_under_reordering_and_whitespace(v in json_value(4), seed in any::<u64>()) {
        let base = v.to_string();
        let mut reordered = String::new();
        render(&v, seed, false, &mut reordered);
        let mut spaced = String::new();
        render(&v, seed.rotate_left(17), true, &mut spaced);
        // The renderings are the same JSON document (compared as parsed: float text may not
        // round-trip bit for bit, and that is the parser's business, not the digest's).
        prop_assert_eq!(
            serde_json::from_str::<Value>(&spaced).unwrap(),
            serde_json::from_str::<Value>(&base).unwrap()
        );
        let h = hash(base.as_bytes());
        prop_assert_eq!(&h, &hash(reordered.as_bytes()));
        prop_assert_eq!(&h, &hash(spaced.as_bytes()));
    }

    /// Changing any one value changes the digest.
    #[test]
    fn digest_changes_when_a_value_changes(
        v in (json_value(4), any::<i64>()).prop_map(|(v, n)| serde_json::json!({ "v": v, "n": n })),
        path in any::<u64>(),
    ) {
        let mut changed = v.clone();
        prop_assume!(change_one_value(&mut changed, path));
        prop_assume!(changed != v);
        prop_assert_ne!(hash(v.to_string().as_bytes()), hash(changed.to_string().as_bytes()));
    }

    /// With field pointers, only the named fields count: changing another field keeps the
    /// digest, changing a named one changes it.
    #[test]
    fn field_digest_counts_only_named_fields(
        amount in any::<i64>(),
        memo in "\\PC{0,20}",
        other_memo in "\\PC{0,20}",
    ) {
        let digest = PayloadDigest::Fields(vec!["/amount".into()]);
        let h = |amount: i64, memo: &str| {
            let body = serde_json::json!({ "amount": amount, "memo": memo }).to_string();
            PayloadHash::compute("POST", "https://vendor.test/x", body.as_bytes(), &digest)
        };
        prop_assert_eq!(h(amount, &memo), h(amount, &other_memo));
        prop_assert_ne!(h(amount, &memo), h(amount.wrapping_add(1), &memo));
    }

    /// Any bytes, any method and URL text: no panic, and the same input gives the same digest.
    #[test]
    fn digest_of_anything_never_panics(
        method in "[A-Za-z]{0,8}",
        url in "\\PC{0,60}",
        body in proptest::collection::vec(any::<u8>(), 0..300),
        fields in proptest::collection::vec("\\PC{0,10}", 0..4),
    ) {
        for digest in [PayloadDigest::Full, PayloadDigest::Fields(fields.clone())] {
            let a = PayloadHash::compute(&method, &url, &body, &digest);
            let b = PayloadHash::compute(&method, &url, &body, &digest);
            prop_assert_eq!(a, b);
        }
    }
}
