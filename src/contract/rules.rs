//! Classification rules: data describing vendor signals.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One classification rule: when the response matches, it yields an evidence class.
///
/// A rule must constrain the status; header and body conditions narrow it further. All given
/// conditions must hold. In JSON or TOML:
///
/// ```toml
/// [[rules]]
/// status = 409
/// body = { pointer = "/error/code", equals = "idempotency_key_in_use" }
/// evidence = "conflict_in_flight"
///
/// [[rules]]
/// status = "500-599"
/// header = { name = "Stripe-Should-Retry", value = "false" }
/// evidence = "unknown"
/// reason = "Stripe advises not to retry"
/// ```
///
/// Built in code:
///
/// ```
/// use recoverable_write::contract::{EvidenceClass, Rule, StatusMatch};
///
/// let in_flight = Rule::new(409, EvidenceClass::ConflictInFlight)
///     .body("/error/code", "idempotency_key_in_use");
/// let no_retry = Rule::new(StatusMatch::range(500, 599), EvidenceClass::Unknown)
///     .header("Stripe-Should-Retry", "false");
/// # let _ = (in_flight, no_retry);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Rule {
    /// The status code or range the rule applies to. Required: a rule without it is refused by
    /// [`Contract::validate`](super::Contract::validate) and never matches.
    #[serde(default)]
    pub status: Option<StatusMatch>,
    /// A response header that must have a given value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderMatch>,
    /// A field of the JSON response body that must have a given value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<BodyMatch>,
    /// An element of an XML response body that must have a given text (the AWS Query APIs
    /// answer errors in XML: `<Code>IdempotentParameterMismatch</Code>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xml: Option<XmlMatch>,
    /// What a matching response proves.
    pub evidence: EvidenceClass,
    /// A short explanation, quoted in the evidence's reason (never a body or a credential).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Rule {
    /// A rule matching `status` (a code, or a [`StatusMatch::range`]) that yields `evidence`.
    pub fn new(status: impl Into<StatusMatch>, evidence: EvidenceClass) -> Self {
        Self {
            status: Some(status.into()),
            header: None,
            body: None,
            xml: None,
            evidence,
            reason: None,
        }
    }

    /// Also requires the response header `name` to equal `value` (both case-insensitive).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.header = Some(HeaderMatch {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Also requires the JSON body field at `pointer` to equal `equals` (a string, or the
    /// decimal form of a number or boolean).
    pub fn body(mut self, pointer: impl Into<String>, equals: impl Into<String>) -> Self {
        self.body = Some(BodyMatch {
            pointer: pointer.into(),
            equals: equals.into(),
        });
        self
    }

    /// Also requires the first XML element named `element` in the body to have the text
    /// `equals` (surrounding whitespace ignored, case-sensitive).
    pub fn xml(mut self, element: impl Into<String>, equals: impl Into<String>) -> Self {
        self.xml = Some(XmlMatch {
            element: element.into(),
            equals: equals.into(),
        });
        self
    }

    /// Sets the explanation quoted in the evidence.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// A response header condition: the header is present with this value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatch {
    /// Header name (case-insensitive).
    pub name: String,
    /// Expected value, compared case-insensitively after trimming whitespace. Any of several
    /// values of the header may match. `*` matches any value: the header is present.
    pub value: String,
}

/// A JSON body condition: the field at `pointer` has this value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BodyMatch {
    /// RFC 6901 pointer, e.g. `/error/type`.
    pub pointer: String,
    /// Expected value: equal to a string field (case-sensitive, vendor codes are), or to the
    /// decimal form of a number or boolean field (`"704"` matches both `704` and `"704"`).
    pub equals: String,
}

/// An XML body condition: the first element named `element` has the text `equals`.
///
/// A deliberately small matcher, enough for the error documents of the AWS Query APIs
/// (`<Response><Errors><Error><Code>IdempotentParameterMismatch</Code>...`): the element is
/// found by name (a namespace prefix is allowed: `<ec2:Code>`), its text is compared after
/// trimming, and entities are not decoded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XmlMatch {
    /// The element name, e.g. `Code`.
    pub element: String,
    /// The expected text, e.g. `IdempotentParameterMismatch` (case-sensitive).
    pub equals: String,
}

/// The evidence class a [`Rule`] yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EvidenceClass {
    /// Authoritative success (the remote reference is still required when the contract says so).
    Succeeded,
    /// Accepted, not finished.
    Processing,
    /// A documented rejection with no side effect.
    Rejected,
    /// Documented as not executed (Stripe's 429): a resend with the same key is safe.
    NotExecuted,
    /// Nothing proven.
    Unknown,
    /// The key was used with another payload.
    ConflictMismatch,
    /// The first request with this key is still running.
    ConflictInFlight,
}

/// A status code or an inclusive range of codes.
///
/// In JSON or TOML: a number (`429`), a string code (`"429"`), a range (`"500-599"`) or a class
/// (`"5xx"`). It serializes as a number for a single code and as `"lo-hi"` otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StatusMatch {
    lo: u16,
    hi: u16,
}

impl StatusMatch {
    /// Exactly this code.
    pub const fn code(code: u16) -> Self {
        Self { lo: code, hi: code }
    }

    /// Every code from `lo` to `hi`, inclusive.
    pub const fn range(lo: u16, hi: u16) -> Self {
        Self { lo, hi }
    }

    /// The low end.
    pub const fn lo(self) -> u16 {
        self.lo
    }

    /// The high end.
    pub const fn hi(self) -> u16 {
        self.hi
    }

    /// Whether `code` is in the range.
    pub const fn contains(self, code: u16) -> bool {
        self.lo <= code && code <= self.hi
    }

    /// Whether the range is well-formed: within `100..=599`, low end not above the high end.
    pub const fn is_valid(self) -> bool {
        self.lo >= 100 && self.hi <= 599 && self.lo <= self.hi
    }

    fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if let Some((lo, hi)) = s.split_once('-') {
            return Some(Self::range(parse_code(lo)?, parse_code(hi)?));
        }
        let b = s.as_bytes();
        if b.len() == 3 && b[1].eq_ignore_ascii_case(&b'x') && b[2].eq_ignore_ascii_case(&b'x') {
            let class = u16::from(b[0].checked_sub(b'0').filter(|d| *d <= 9)?);
            return Some(Self::range(class * 100, class * 100 + 99));
        }
        parse_code(s).map(Self::code)
    }
}

fn parse_code(s: &str) -> Option<u16> {
    let s = s.trim();
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for EvidenceClass {
    /// The name used in JSON and TOML (`not_executed`, `conflict_in_flight`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Succeeded => "succeeded",
            Self::Processing => "processing",
            Self::Rejected => "rejected",
            Self::NotExecuted => "not_executed",
            Self::Unknown => "unknown",
            Self::ConflictMismatch => "conflict_mismatch",
            Self::ConflictInFlight => "conflict_in_flight",
        })
    }
}

impl From<u16> for StatusMatch {
    fn from(code: u16) -> Self {
        Self::code(code)
    }
}

impl From<http::StatusCode> for StatusMatch {
    fn from(code: http::StatusCode) -> Self {
        Self::code(code.as_u16())
    }
}

impl fmt::Display for StatusMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

impl Serialize for StatusMatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.lo == self.hi {
            s.serialize_u16(self.lo)
        } else {
            s.collect_str(self)
        }
    }
}

impl<'de> Deserialize<'de> for StatusMatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXPECTED: &str = "a status code (429), a range (\"500-599\") or a class (\"5xx\")";

        impl Visitor<'_> for V {
            type Value = StatusMatch;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTED)
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StatusMatch, E> {
                u16::try_from(v)
                    .ok()
                    .filter(|c| *c <= 999)
                    .map(StatusMatch::code)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Unsigned(v), &EXPECTED))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StatusMatch, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &EXPECTED)),
                }
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<StatusMatch, E> {
                StatusMatch::parse(v)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &EXPECTED))
            }
        }

        d.deserialize_any(V)
    }
}
