//! Placing the idempotency key: plain and quoted headers, JSON bodies, the query, form bodies, length checks.

use super::*;

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
