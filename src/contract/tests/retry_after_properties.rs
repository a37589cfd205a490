//! Property tests for `Retry-After` (moved from `tests/properties.rs` when the parser became
//! crate-private): any header value, no panic, and a result never beyond the documented bound.
//! `PROPTEST_CASES` sets the case count (the long run: `PROPTEST_CASES=100000`).

use super::*;

/// `PROPTEST_CASES` when set, else `default`.
fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases: n,
        // Shrinking a 100,000-case run can take long; a failure is reported either way.
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

/// A fixed "now" (2026) so dates in the past and future are both exercised deterministically.
fn later() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_780_000_000)
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

proptest! {
    #![proptest_config(cases(2_000))]

    /// Any header value: no panic, and a result never beyond the documented bound.
    #[test]
    fn retry_after_is_bounded_and_never_panics(
        text in retry_after_text(),
        raw in proptest::collection::vec(any::<u8>(), 0..48),
        now_secs in any::<u64>(),
    ) {
        let nows = [later(), UNIX_EPOCH, UNIX_EPOCH + Duration::from_secs(now_secs % (1 << 40))];
        for now in nows {
            if let Ok(v) = HeaderValue::from_str(&text) {
                if let Some(d) = parse_retry_after(&v, now) {
                    prop_assert!(d <= MAX_RETRY_AFTER, "{text:?} gave {d:?}");
                }
                let mut headers = HeaderMap::new();
                headers.insert(http::header::RETRY_AFTER, v);
                if let Some(d) = retry_after_from_headers(&headers, now) {
                    prop_assert!(d <= MAX_RETRY_AFTER);
                }
            }
            if let Ok(v) = HeaderValue::from_bytes(&raw)
                && let Some(d) = parse_retry_after(&v, now)
            {
                prop_assert!(d <= MAX_RETRY_AFTER);
            }
        }
    }

    /// A plain number of seconds means that many seconds, clamped to the bound.
    #[test]
    fn retry_after_seconds_are_read_as_seconds(secs in any::<u64>()) {
        let v = HeaderValue::from_str(&secs.to_string()).unwrap();
        prop_assert_eq!(
            parse_retry_after(&v, later()),
            Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
        );
    }
}
