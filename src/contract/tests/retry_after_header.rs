//! `Retry-After` and its relatives: delay seconds, the three date formats, clamping, garbage.

use super::*;

fn ra(s: &str) -> Option<Duration> {
    parse_retry_after(&HeaderValue::from_str(s).unwrap(), now())
}

#[test]
fn example_date_is_what_the_tests_assume() {
    assert_eq!(
        httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap(),
        at(EXAMPLE_SECS)
    );
}

#[test]
fn retry_after_delay_seconds() {
    assert_eq!(ra("120"), Some(Duration::from_secs(120)));
    assert_eq!(ra("0"), Some(Duration::ZERO));
    assert_eq!(ra(" 7 "), Some(Duration::from_secs(7)));
    assert_eq!(ra("99999999999999999999999"), Some(MAX_RETRY_AFTER));
    assert_eq!(ra("1000000000000"), Some(MAX_RETRY_AFTER));
    let h = headers(&[("retry-after-ms", "18446744073709551615")]);
    assert_eq!(retry_after_from_headers(&h, now()), Some(MAX_RETRY_AFTER));
}

#[test]
fn retry_after_all_three_date_formats() {
    // now() is 60 s before the example date.
    assert_eq!(
        ra("Sun, 06 Nov 1994 08:49:37 GMT"),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        ra("Sunday, 06-Nov-94 08:49:37 GMT"),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        ra("Sun Nov  6 08:49:37 1994"),
        Some(Duration::from_secs(60))
    );
}

#[test]
fn retry_after_past_date_is_zero() {
    assert_eq!(ra("Sat, 05 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
    assert_eq!(ra("Thu, 01 Jan 1970 00:00:00 GMT"), Some(Duration::ZERO));
}

#[test]
fn retry_after_far_date_is_clamped() {
    assert_eq!(ra("Fri, 31 Dec 9999 23:59:59 GMT"), Some(MAX_RETRY_AFTER));
    let h = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "18446744073709551615"),
    ]);
    assert_eq!(retry_after_from_headers(&h, now()), Some(MAX_RETRY_AFTER));
}

#[test]
fn retry_after_garbage_is_none() {
    for s in [
        "",
        "soon",
        "-5",
        "+5",
        "1.5",
        "5s",
        "Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 32 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37",
    ] {
        assert_eq!(ra(s), None, "{s:?}");
    }
    let opaque = HeaderValue::from_bytes(b"\xff\xfe").unwrap();
    assert_eq!(parse_retry_after(&opaque, now()), None);
}

#[test]
fn retry_after_ms_is_preferred() {
    let h = headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]);
    assert_eq!(
        retry_after_from_headers(&h, now()),
        Some(Duration::from_millis(1500))
    );
    let h = headers(&[("retry-after-ms", "soon"), ("retry-after", "9")]);
    assert_eq!(
        retry_after_from_headers(&h, now()),
        Some(Duration::from_secs(9))
    );
}

#[test]
fn the_documented_examples_hold() {
    let now = UNIX_EPOCH + Duration::from_secs(784_111_717); // Sun, 06 Nov 1994 08:48:37 GMT
    let v = HeaderValue::from_static("120");
    assert_eq!(parse_retry_after(&v, now), Some(Duration::from_secs(120)));
    let v = HeaderValue::from_static("Sunday, 06-Nov-94 08:49:37 GMT");
    assert_eq!(parse_retry_after(&v, now), Some(Duration::from_secs(60)));
}
