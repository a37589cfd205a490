//! `Retry-After` (RFC 9110 §10.2.3) and `retry-after-ms`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};

/// The longest hint returned. A longer one (or a date further away) is clamped: a hint that long
/// is past every recovery window anyway, and the clamp keeps deadline arithmetic from overflowing.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Parses a `Retry-After` value: delay-seconds, or an HTTP-date in any of the three formats
/// RFC 9110 §5.6.7 says recipients must accept (IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`,
/// the obsolete RFC 850 form `Sunday, 06-Nov-94 08:49:37 GMT`, and asctime
/// `Sun Nov  6 08:49:37 1994`).
///
/// A date is turned into the time left from `now`; a date in the past gives
/// [`Duration::ZERO`]. Anything else (a negative or fractional number, a malformed date, a date
/// whose weekday does not match) gives `None`. Results are clamped to [`MAX_RETRY_AFTER`].
///
///
/// (`Sunday, 06-Nov-94 08:49:37 GMT` read at 08:48:37 that day is 60 s.)
pub(crate) fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let s = value.to_str().ok()?.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        // Only an overflow can fail here: such a delay is "longer than anything".
        let secs = s.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    // httpdate tries IMF-fixdate, then RFC 850, then asctime, and checks the weekday.
    let at = httpdate::parse_http_date(s).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

/// The server's hint in a response, from the first of:
///
/// 1. `retry-after-ms` (milliseconds, sent by some APIs for sub-second precision), when valid;
/// 2. `Retry-After` ([`parse_retry_after`]: delay-seconds or any of the three HTTP-date forms);
/// 3. `x-ratelimit-remaining: 0` with `x-ratelimit-reset` (epoch seconds): the time left until
///    the reset. GitHub sends its primary rate limit this way, often as a 403 without
///    `Retry-After`; a reset in the past gives [`Duration::ZERO`].
pub(crate) fn retry_after_from_headers(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let ms = headers.get("retry-after-ms").and_then(|v| {
        let s = v.to_str().ok()?.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let ms = s.parse::<u64>().unwrap_or(u64::MAX);
        Some(Duration::from_millis(ms).min(MAX_RETRY_AFTER))
    });
    ms.or_else(|| parse_retry_after(headers.get(http::header::RETRY_AFTER)?, now))
        .or_else(|| rate_limit_reset(headers, now))
}

/// `x-ratelimit-reset` (epoch seconds) when `x-ratelimit-remaining` is `0`.
fn rate_limit_reset(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let remaining = headers.get("x-ratelimit-remaining")?.to_str().ok()?.trim();
    if remaining != "0" {
        return None;
    }
    let reset = headers.get("x-ratelimit-reset")?.to_str().ok()?.trim();
    if reset.is_empty() || !reset.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let reset = reset.parse::<u64>().ok()?;
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(reset.saturating_sub(now)).min(MAX_RETRY_AFTER))
}
