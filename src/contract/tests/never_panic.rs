//! Property tests: classification never panics, whatever the response.

use super::*;

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
