//! Text shared by the operator tools (the command line and the review page) and by the engine's
//! own messages: ages and durations in two units, UTC times, and parsing of durations typed by
//! a person. A leaf: it names nothing else of the crate.

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

/// `1 lookup`, `2 lookups`.
pub(crate) fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// An age or a span in its two largest units: `850ms`, `12s`, `12m 34s`, `3h 5m`, `2d 4h`.
/// Negative spans (clock skew) show as `0ms`.
pub fn format_age(ms: i64) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// [`format_age`] of a [`Duration`].
pub fn format_duration(d: Duration) -> String {
    format_age(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A time (ms since the Unix epoch) in UTC: `2026-11-30 23:06:09.123Z` (RFC 3339 with a space,
/// by `humantime`). Times before the epoch show as the epoch.
pub fn format_time(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(at)
        .to_string()
        .replacen('T', " ", 1)
}

/// A duration as text that [`parse_duration`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseDurationError(String);

impl fmt::Display for ParseDurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid duration {:?}: use a number and a unit, e.g. 90s, 10m, 1h30m, 2d \
             (units: ms, s, m, h, d, w)",
            self.0
        )
    }
}

impl std::error::Error for ParseDurationError {}

/// Parses `10m`, `1h30m`, `1h 30m`, `90s`, `500ms`, `2d`, `1w` (`humantime`'s grammar). A bare
/// number is refused: its unit would be a guess.
///
/// # Errors
///
/// [`ParseDurationError`] for anything else.
pub fn parse_duration(text: &str) -> Result<Duration, ParseDurationError> {
    humantime::parse_duration(text.trim()).map_err(|_| ParseDurationError(text.to_owned()))
}
