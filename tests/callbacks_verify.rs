//! Signature verification of vendor callbacks: Stripe, generic HMAC, Square, Adyen, PayPal.
#![cfg(feature = "callbacks")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use recoverable_write::callbacks::{
    AdyenHmac, Encoding, HmacHeader, KeyError, PayPalUnsupported, Secret, SquareSignature,
    StripeSignature, Verifier, VerifyError,
};
use serde_json::json;

const SECRET: &str = "whsec_test_secret_4c0ffee";
const OTHER: &str = "whsec_rotated_secret_b00b5";
/// A Square signature key's shape (22 characters).
const SQUARE_KEY: &str = "sq0wbs-4Kx9dVb2Tm7QeW1";
/// An Adyen HMAC key as its Customer Area shows it: 64 hex digits, 32 bytes.
const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const BODY: &[u8] = br#"{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_3MtwBwLkdIwHu7ix28a3tqPa","metadata":{"operation_id":"op-7"}}}}"#;

// Stripe's documented example header shape (docs.stripe.com/webhooks#verify-manually), with the
// example's timestamp: `t=1492774577,v1=<hex>,v0=<hex>`.
const DOC_T: i64 = 1_492_774_577;

fn at(t: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(t as u64)
}

fn headers(name: &str, value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        HeaderName::from_bytes(name.as_bytes()).unwrap(),
        HeaderValue::from_str(value).unwrap(),
    );
    h
}

/// A key the tests know to be long enough.
fn secret(key: &str) -> Secret {
    Secret::new(key).expect("a test key of at least 16 bytes")
}

fn stripe_header(key: &str, t: i64, body: &[u8]) -> String {
    StripeSignature::sign(&secret(key), t, body)
}

/// Hex of HMAC-SHA256, computed independently of the crate through the documented recipe
/// `HMAC(secret, "{t}.{body}")` by signing through the generic scheme with an explicit prefix.
fn v1_of(key: &str, t: i64, body: &[u8]) -> String {
    let scheme = HmacHeader::new(HeaderName::from_static("x"), Encoding::Hex, secret(key))
        .signed_prefix(format!("{t}.").into_bytes());
    scheme.sign(&secret(key), None, body)
}

#[test]
fn stripe_documented_format_is_accepted() {
    let v1 = v1_of(SECRET, DOC_T, BODY);
    assert_eq!(v1.len(), 64);
    assert_eq!(
        stripe_header(SECRET, DOC_T, BODY),
        format!("t={DOC_T},v1={v1}")
    );
    // The v0 entry (test-mode scheme) is ignored; a v1 from another secret is tolerated.
    let header = format!(
        "t={DOC_T},v1={},v1={v1},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
        v1_of("whsec_someone_else", DOC_T, BODY)
    );
    let delivery = StripeSignature::new(secret(SECRET))
        .verify(&headers("Stripe-Signature", &header), BODY, at(DOC_T + 10))
        .unwrap();
    assert_eq!(delivery.body(), BODY);
    assert_eq!(delivery.scheme(), "stripe");
    assert_eq!(delivery.signed_at(), Some(at(DOC_T)));
}

#[test]
fn stripe_rotation_accepts_the_second_secret() {
    let verifier = StripeSignature::new(secret(SECRET)).secret(secret(OTHER));
    let h = headers("stripe-signature", &stripe_header(OTHER, DOC_T, BODY));
    assert!(verifier.verify(&h, BODY, at(DOC_T)).is_ok());
    // Without the rotated secret the same delivery is refused.
    assert!(matches!(
        StripeSignature::new(secret(SECRET)).verify(&h, BODY, at(DOC_T)),
        Err(VerifyError::NoMatchingSignature { .. })
    ));
}

#[test]
fn stripe_forged_signature_is_refused() {
    let verifier = StripeSignature::new(secret(SECRET));
    // Signed with a secret we do not hold.
    let h = headers(
        "stripe-signature",
        &stripe_header("whsec_attacker_secret", DOC_T, BODY),
    );
    assert!(matches!(
        verifier.verify(&h, BODY, at(DOC_T)),
        Err(VerifyError::NoMatchingSignature { .. })
    ));
    // Genuine signature, body altered.
    let h = headers("stripe-signature", &stripe_header(SECRET, DOC_T, BODY));
    let altered = String::from_utf8(BODY.to_vec())
        .unwrap()
        .replace("succeeded", "payment_failed");
    assert!(matches!(
        verifier.verify(&h, altered.as_bytes(), at(DOC_T)),
        Err(VerifyError::NoMatchingSignature { .. })
    ));
    // Genuine signature, timestamp altered (the timestamp is signed).
    let v1 = v1_of(SECRET, DOC_T, BODY);
    let h = headers("stripe-signature", &format!("t={},v1={v1}", DOC_T + 1));
    assert!(verifier.verify(&h, BODY, at(DOC_T)).is_err());
}

#[test]
fn stripe_replayed_old_timestamp_is_refused() {
    let verifier = StripeSignature::new(secret(SECRET));
    let h = headers("stripe-signature", &stripe_header(SECRET, DOC_T, BODY));
    assert!(verifier.verify(&h, BODY, at(DOC_T + 300)).is_ok());
    assert_eq!(
        verifier.verify(&h, BODY, at(DOC_T + 301)).unwrap_err(),
        VerifyError::TimestampOutsideTolerance {
            skew_secs: -301,
            tolerance_secs: 300
        }
    );
    // A wider tolerance is configurable.
    let lenient = StripeSignature::new(secret(SECRET)).tolerance(Duration::from_secs(3600));
    assert!(lenient.verify(&h, BODY, at(DOC_T + 301)).is_ok());
}

#[test]
fn stripe_future_timestamp_beyond_tolerance_is_refused() {
    let verifier = StripeSignature::new(secret(SECRET));
    let h = headers("stripe-signature", &stripe_header(SECRET, DOC_T, BODY));
    assert!(verifier.verify(&h, BODY, at(DOC_T - 300)).is_ok());
    assert_eq!(
        verifier.verify(&h, BODY, at(DOC_T - 301)).unwrap_err(),
        VerifyError::TimestampOutsideTolerance {
            skew_secs: 301,
            tolerance_secs: 300
        }
    );
}

#[test]
fn stripe_malformed_headers_are_typed_errors() {
    let verifier = StripeSignature::new(secret(SECRET));
    let now = at(DOC_T);
    assert_eq!(
        verifier.verify(&HeaderMap::new(), BODY, now).unwrap_err(),
        VerifyError::MissingHeader {
            header: "stripe-signature".into()
        }
    );
    let v1 = v1_of(SECRET, DOC_T, BODY);
    for (value, why) in [
        ("garbage", "an element is not key=value"),
        (&format!("v1={v1}") as &str, "no t element"),
        (&format!("t=soon,v1={v1}"), "t is not an integer"),
        (&format!("t={DOC_T}"), "no v1 signature"),
        (&format!("t={DOC_T},t={DOC_T},v1={v1}"), "more than one t"),
    ] {
        assert_eq!(
            verifier
                .verify(&headers("stripe-signature", value), BODY, now)
                .unwrap_err(),
            VerifyError::Malformed {
                header: "stripe-signature".into(),
                why
            },
            "{value}"
        );
    }
    let mut h = HeaderMap::new();
    h.insert(
        "stripe-signature",
        HeaderValue::from_bytes(b"t=1,v1=\xff").unwrap(),
    );
    assert!(matches!(
        verifier.verify(&h, BODY, now),
        Err(VerifyError::Malformed { .. })
    ));
    // A v1 that is not hex cannot match: refused as unsigned, not accepted.
    assert!(matches!(
        verifier.verify(
            &headers("stripe-signature", &format!("t={DOC_T},v1=zz")),
            BODY,
            now
        ),
        Err(VerifyError::NoMatchingSignature { .. })
    ));
}

#[test]
fn the_secret_never_appears_in_errors_or_debug() {
    let stripe = StripeSignature::new(secret(SECRET)).secret(secret(OTHER));
    let body_marker = "pi_3MtwBwLkdIwHu7ix28a3tqPa";
    let now = at(DOC_T);
    let v1 = v1_of(SECRET, DOC_T, BODY);
    let cases = [
        HeaderMap::new(),
        headers("stripe-signature", "garbage"),
        headers("stripe-signature", &format!("t={DOC_T}")),
        headers(
            "stripe-signature",
            &stripe_header("whsec_unknown_secret", DOC_T, BODY),
        ),
        headers("stripe-signature", &format!("t={},v1={v1}", DOC_T - 10_000)),
    ];
    let mut errors: Vec<VerifyError> = cases
        .iter()
        .map(|h| stripe.verify(h, BODY, now).unwrap_err())
        .collect();
    let square = SquareSignature::new("https://example.com/cb", secret(SECRET));
    errors.push(square.verify(&HeaderMap::new(), BODY, now).unwrap_err());
    errors.push(
        square
            .verify(&headers(SquareSignature::HEADER, "AAAA"), BODY, now)
            .unwrap_err(),
    );
    assert_eq!(errors.len(), 7);
    for e in &errors {
        for text in [e.to_string(), format!("{e:?}")] {
            assert!(!text.contains(SECRET) && !text.contains(OTHER), "{text}");
            assert!(!text.contains(body_marker), "{text}");
            assert!(!text.contains(&v1), "{text}");
        }
    }
    for text in [format!("{stripe:?}"), format!("{square:?}")] {
        assert!(!text.contains(SECRET) && !text.contains(OTHER), "{text}");
        assert!(text.contains("***"), "{text}");
    }
    assert_eq!(format!("{:?}", secret(SECRET)), "***");
}

#[test]
fn generic_hmac_header_github_style() {
    let key = "It's a Secret to Everybody";
    let body = b"Hello, World!";
    let verifier = HmacHeader::github(secret(key)).secret(secret("the older github secret"));
    let mac = verifier.sign(&secret(key), None, body);
    // GitHub's documented test vector (docs.github.com, "Validating webhook deliveries").
    assert_eq!(
        mac,
        "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    );
    let h = headers("X-Hub-Signature-256", &format!("sha256={mac}"));
    assert!(verifier.verify(&h, body, SystemTime::now()).is_ok());
    // The prefix is required when configured.
    assert!(matches!(
        verifier.verify(
            &headers("x-hub-signature-256", &mac),
            body,
            SystemTime::now()
        ),
        Err(VerifyError::Malformed { .. })
    ));
    let nope = secret("nope, not our secret");
    let forged = HmacHeader::github(nope.clone()).sign(&nope, None, body);
    assert!(matches!(
        verifier.verify(
            &headers("x-hub-signature-256", &format!("sha256={forged}")),
            body,
            SystemTime::now()
        ),
        Err(VerifyError::NoMatchingSignature { .. })
    ));
}

#[test]
fn generic_hmac_header_base64_with_timestamp() {
    let ts = HeaderName::from_static("x-webhook-timestamp");
    let verifier = HmacHeader::new(
        HeaderName::from_static("x-webhook-signature"),
        Encoding::Base64,
        secret("k1-of-the-base64-scheme"),
    )
    .timestamp_header(ts, ".", Duration::from_secs(60));
    let mac = verifier.sign(&secret("k1-of-the-base64-scheme"), Some("1700000000"), BODY);
    let mut h = headers("x-webhook-signature", &mac);
    h.insert(
        "x-webhook-timestamp",
        HeaderValue::from_static("1700000000"),
    );
    assert!(verifier.verify(&h, BODY, at(1_700_000_030)).is_ok());
    assert!(matches!(
        verifier.verify(&h, BODY, at(1_700_000_061)),
        Err(VerifyError::TimestampOutsideTolerance { .. })
    ));
    // The timestamp is signed: changing it breaks the signature.
    h.insert(
        "x-webhook-timestamp",
        HeaderValue::from_static("1700000050"),
    );
    assert!(matches!(
        verifier.verify(&h, BODY, at(1_700_000_030)),
        Err(VerifyError::NoMatchingSignature { .. })
    ));
    h.remove("x-webhook-timestamp");
    assert_eq!(
        verifier.verify(&h, BODY, at(1_700_000_030)).unwrap_err(),
        VerifyError::MissingHeader {
            header: "x-webhook-timestamp".into()
        }
    );
}

#[test]
fn square_signs_the_notification_url_and_the_body() {
    let url = "https://example.com/webhooks/square";
    let verifier = SquareSignature::new(url, secret(SQUARE_KEY));
    let sig = verifier.sign(&secret(SQUARE_KEY), BODY);
    // Base64 of a 32-byte MAC.
    assert_eq!(sig.len(), 44);
    let h = headers("x-square-hmacsha256-signature", &sig);
    assert_eq!(
        verifier
            .verify(&h, BODY, SystemTime::now())
            .unwrap()
            .scheme(),
        "square"
    );
    // The same signature for another URL is refused (the URL is signed).
    let elsewhere = SquareSignature::new("https://example.com/other", secret(SQUARE_KEY));
    assert!(matches!(
        elsewhere.verify(&h, BODY, SystemTime::now()),
        Err(VerifyError::NoMatchingSignature { .. })
    ));
}

fn adyen_item(psp: &str, success: &str, key: &Secret) -> serde_json::Value {
    let mut item = json!({
        "amount": {"currency": "EUR", "value": 1130},
        "eventCode": "AUTHORISATION",
        "eventDate": "2026-11-30T12:00:00+01:00",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "op-7",
        "pspReference": psp,
        "reason": if success == "true" { "033899:1111:03/2030" } else { "Refused" },
        "success": success,
        "additionalData": {}
    });
    let sig = AdyenHmac::sign(key, &item);
    item["additionalData"]["hmacSignature"] = json!(sig);
    json!({ "NotificationRequestItem": item })
}

#[test]
fn adyen_hmac_verifies_every_item_of_a_batch() {
    let hex_key = ADYEN_KEY;
    let key = Secret::from_hex(hex_key).unwrap();
    let item = adyen_item("7914073381342284", "true", &key);
    assert_eq!(
        AdyenHmac::signing_string(&item["NotificationRequestItem"]),
        "7914073381342284::TestMerchant:op-7:1130:EUR:AUTHORISATION:true"
    );
    let body = json!({
        "live": "false",
        "notificationItems": [item, adyen_item("8815073381342285", "false", &key)]
    })
    .to_string();
    let verifier = AdyenHmac::new(hex_key).unwrap();
    assert!(
        verifier
            .verify(&HeaderMap::new(), body.as_bytes(), SystemTime::now())
            .is_ok()
    );
    // One item signed with another key refuses the whole batch.
    let other = Secret::from_hex(&"00ff".repeat(16)).unwrap();
    let body = json!({
        "live": "false",
        "notificationItems": [adyen_item("7914073381342284", "true", &key),
                              adyen_item("8815073381342285", "true", &other)]
    })
    .to_string();
    assert!(matches!(
        verifier.verify(&HeaderMap::new(), body.as_bytes(), SystemTime::now()),
        Err(VerifyError::NoMatchingSignature { .. })
    ));
    assert_eq!(AdyenHmac::new("not hex").unwrap_err(), KeyError::NotHex);
}

#[test]
fn paypal_is_unsupported_offline() {
    assert_eq!(
        PayPalUnsupported
            .verify(&HeaderMap::new(), BODY, SystemTime::now())
            .unwrap_err(),
        VerifyError::Unsupported { scheme: "paypal" }
    );
}

#[test]
fn verifiers_are_object_safe() {
    let verifiers: Vec<Box<dyn Verifier>> = vec![
        Box::new(StripeSignature::new(secret(SECRET))),
        Box::new(HmacHeader::github(secret(SECRET))),
        Box::new(SquareSignature::new("https://x", secret(SECRET))),
        Box::new(PayPalUnsupported),
    ];
    for v in &verifiers {
        assert!(
            v.verify(&HeaderMap::new(), BODY, SystemTime::now())
                .is_err()
        );
    }
}

#[test]
fn adyen_hmac_matches_adyens_own_library_vector() {
    // Adyen/adyen-php-api-library, tests/Adyen/Util/HmacSignatureTest.php.
    let item = json!({
        "pspReference": "7914073381342284",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "TestPayment-1407325143704",
        "amount": {"value": 1130, "currency": "EUR"},
        "eventCode": "AUTHORISATION",
        "success": "true"
    });
    let key = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00";
    assert_eq!(
        AdyenHmac::sign(&Secret::from_hex(key).unwrap(), &item),
        "Ny9gS2veKo5E4w8/OL6xz1/wvT/hYkAXy1xNc/QvO4I="
    );
    let mut signed = item.clone();
    signed["additionalData"] =
        json!({"hmacSignature": "Ny9gS2veKo5E4w8/OL6xz1/wvT/hYkAXy1xNc/QvO4I="});
    let body = json!({"live": "false", "notificationItems": [{"NotificationRequestItem": signed}]});
    let verifier = AdyenHmac::new(ADYEN_KEY).unwrap().key(key).unwrap();
    assert!(
        verifier
            .verify(
                &HeaderMap::new(),
                body.to_string().as_bytes(),
                SystemTime::now()
            )
            .is_ok()
    );
}

/// Issue 27 item 9: a verifier cannot be made with an empty or short key. An unset variable read
/// with `unwrap_or_default()` gave `""`, every verifier took it, and anyone could sign with it.
#[test]
fn empty_and_short_keys_are_refused_when_a_verifier_is_made() {
    let stripe = |k: &str| Secret::new(k).map(StripeSignature::new);
    let github = |k: &str| Secret::new(k).map(HmacHeader::github);
    let hmac = |k: &str| {
        Secret::new(k).map(|s| HmacHeader::new(HeaderName::from_static("x-sig"), Encoding::Hex, s))
    };
    let square =
        |k: &str| Secret::new(k).map(|s| SquareSignature::new("https://example.com/cb", s));
    let short = |len| KeyError::TooShort { len, min: 16 };
    for (key, refused) in [
        ("", KeyError::Empty),
        ("whsec_", short(6)),
        ("fifteen bytes!!", short(15)),
    ] {
        assert_eq!(stripe(key).unwrap_err(), refused, "stripe {key:?}");
        assert_eq!(github(key).unwrap_err(), refused, "github {key:?}");
        assert_eq!(hmac(key).unwrap_err(), refused, "hmac header {key:?}");
        assert_eq!(square(key).unwrap_err(), refused, "square {key:?}");
        // Rotation takes a Secret too: no way to add the empty key as a second secret.
        assert_eq!(Secret::new(key).unwrap_err(), refused);
    }
    // Adyen's hex keys: empty, decoding to 2 and to 15 bytes, and as a rotated key.
    assert_eq!(AdyenHmac::new("").unwrap_err(), KeyError::Empty);
    assert_eq!(AdyenHmac::new("00ff").unwrap_err(), short(2));
    assert_eq!(AdyenHmac::new(&"ab".repeat(15)).unwrap_err(), short(15));
    let adyen = AdyenHmac::new(ADYEN_KEY).unwrap();
    assert_eq!(adyen.clone().key("").unwrap_err(), KeyError::Empty);
    assert_eq!(adyen.key("00ff").unwrap_err(), short(2));
    // Sixteen bytes is the floor.
    assert!(stripe("sixteen bytes!!!").is_ok());
    assert!(AdyenHmac::new(&"ab".repeat(16)).is_ok());
    // The refusal names the problem, never the key.
    let e = square("sq0wbs-short").unwrap_err();
    for text in [e.to_string(), format!("{e:?}")] {
        assert!(!text.contains("sq0wbs-short"), "{text}");
    }
}
