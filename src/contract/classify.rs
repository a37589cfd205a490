//! Responses and transport errors to evidence.

use std::cell::OnceCell;
use std::error::Error as StdError;
use std::time::SystemTime;

use http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::rules::{EvidenceClass, Rule};
use super::{Contract, retry_after};
use crate::evidence::{ConflictKind, Evidence};
use crate::guard::SendRefused;

/// The longest `why` taken from an error's text.
const MAX_WHY: usize = 200;

/// The longest vendor error code quoted in a reason.
const MAX_CODE: usize = 64;

/// Where vendors commonly put a short error code, tried in order.
const CODE_POINTERS: &[&str] = &[
    "/error/code",    // Stripe, many others
    "/error/type",    // Stripe
    "/code",          // Twilio, generic
    "/errorCode",     // Adyen
    "/errors/0/code", // Square
    "/error",         // OAuth-style `{"error": "invalid_grant"}`
];

/// The response body, parsed as JSON at most once and only when something needs it.
struct Body<'a> {
    raw: &'a [u8],
    json: OnceCell<Option<Value>>,
}

impl<'a> Body<'a> {
    fn new(raw: &'a [u8]) -> Self {
        Self {
            raw,
            json: OnceCell::new(),
        }
    }

    fn json(&self) -> Option<&Value> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.raw).ok())
            .as_ref()
    }

    fn pointer(&self, pointer: &str) -> Option<&Value> {
        crate::encoding::json_pointer(self.json()?, pointer)
    }

    /// A short vendor error code at a common place, if it looks like a code (not free text):
    /// a JSON field, or the `<Code>` element of an XML error (AWS Query APIs).
    fn vendor_code(&self) -> Option<String> {
        if self.json().is_some() {
            return CODE_POINTERS
                .iter()
                .filter_map(|p| self.pointer(p))
                .find_map(short_code);
        }
        xml_element_text(self.raw, "Code").and_then(|t| short_code(&Value::String(t.to_owned())))
    }
}

/// The trimmed text of the first element named `name` (with or without a namespace prefix),
/// if the body is UTF-8 and the element is closed. Entities are not decoded.
pub(super) fn xml_element_text<'a>(raw: &'a [u8], name: &str) -> Option<&'a str> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let end = after.find('>')?;
        let tag = &after[..end];
        rest = &after[end + 1..];
        // `<Code>` or `<ns:Code>`, no attributes-less guessing beyond a simple name.
        let tag_name = tag.split_whitespace().next().unwrap_or("");
        let local = tag_name.rsplit_once(':').map_or(tag_name, |(_, l)| l);
        if local != name || tag.ends_with('/') {
            continue;
        }
        let close = rest.find("</")?;
        return Some(rest[..close].trim());
    }
    None
}

fn short_code(v: &Value) -> Option<String> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        _ => return None,
    };
    let looks_like_code = !s.is_empty()
        && s.len() <= MAX_CODE
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    looks_like_code.then_some(s)
}

pub(super) fn response(
    contract: &Contract,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Evidence {
    let body = Body::new(body);
    let evidence = match contract
        .rules
        .iter()
        .enumerate()
        .find(|(_, rule)| rule_matches(rule, status, headers, &body))
    {
        Some((index, rule)) => from_rule(contract, index, rule, status, &body),
        None => default(contract, status, &body),
    };
    let mut evidence = require_remote_ref(contract, evidence);
    // The server's hint, read only for the evidence that carries one (not for a success).
    if let Evidence::Processing { retry_after, .. }
    | Evidence::NotExecuted { retry_after, .. }
    | Evidence::Unknown { retry_after, .. } = &mut evidence
    {
        *retry_after = retry_after::retry_after_from_headers(headers, now);
    }
    evidence
}

fn rule_matches(rule: &Rule, status: StatusCode, headers: &HeaderMap, body: &Body<'_>) -> bool {
    // A rule without a status is invalid; it never matches, so the defaults decide.
    let Some(range) = rule.status else {
        return false;
    };
    if !range.contains(status.as_u16()) {
        return false;
    }
    if let Some(h) = &rule.header {
        let expected = h.value.trim();
        let found = headers.get_all(h.name.as_str()).iter().any(|v| {
            expected == "*"
                || v.to_str()
                    .is_ok_and(|v| v.trim().eq_ignore_ascii_case(expected))
        });
        if !found {
            return false;
        }
    }
    if let Some(b) = &rule.body {
        let found = body.pointer(&b.pointer).is_some_and(|v| match v {
            Value::String(s) => *s == b.equals,
            Value::Number(n) => n.to_string() == b.equals,
            Value::Bool(x) => x.to_string() == b.equals,
            _ => false,
        });
        if !found {
            return false;
        }
    }
    if let Some(x) = &rule.xml
        && xml_element_text(body.raw, &x.element) != Some(x.equals.as_str())
    {
        return false;
    }
    true
}

/// `HTTP 429 Too Many Requests [rate_limit]`.
fn describe(status: StatusCode, body: &Body<'_>) -> String {
    let mut s = format!("HTTP {}", status.as_u16());
    if let Some(reason) = status.canonical_reason() {
        s.push(' ');
        s.push_str(reason);
    }
    if let Some(code) = body.vendor_code() {
        s.push_str(" [");
        s.push_str(&code);
        s.push(']');
    }
    s
}

fn from_rule(
    contract: &Contract,
    index: usize,
    rule: &Rule,
    status: StatusCode,
    body: &Body<'_>,
) -> Evidence {
    let text = || {
        let base = describe(status, body);
        match &rule.reason {
            Some(reason) if !reason.trim().is_empty() => {
                format!("{base}: {}", truncate(reason.trim(), MAX_WHY))
            }
            _ => format!("{base} (contract rule {index})"),
        }
    };
    match rule.evidence {
        EvidenceClass::Succeeded => Evidence::Succeeded {
            remote_ref: remote_ref(contract, body),
        },
        EvidenceClass::Processing => Evidence::Processing {
            retry_after: None,
            remote_ref: remote_ref(contract, body),
        },
        EvidenceClass::Rejected => Evidence::Rejected { reason: text() },
        EvidenceClass::NotExecuted => Evidence::NotExecuted {
            why: text(),
            retry_after: None,
        },
        EvidenceClass::Unknown => Evidence::Unknown {
            why: text(),
            retry_after: None,
        },
        EvidenceClass::ConflictMismatch => Evidence::Conflict {
            conflict: ConflictKind::Mismatch,
        },
        EvidenceClass::ConflictInFlight => Evidence::Conflict {
            conflict: ConflictKind::InFlight,
        },
    }
}

/// The conservative defaults (DESIGN.md, "Classification"). The server's retry hint is filled
/// in by [`response`].
fn default(contract: &Contract, status: StatusCode, body: &Body<'_>) -> Evidence {
    let unknown = |note: &str| Evidence::Unknown {
        why: if note.is_empty() {
            describe(status, body)
        } else {
            format!("{}: {note}", describe(status, body))
        },
        retry_after: None,
    };
    match status.as_u16() {
        // An accepted write that already names its object: recorded, so a callback or lookup
        // that knows only the vendor's reference finds the operation.
        202 => Evidence::Processing {
            retry_after: None,
            remote_ref: remote_ref(contract, body),
        },
        200..=299 => Evidence::Succeeded {
            remote_ref: remote_ref(contract, body),
        },
        100..=199 => unknown("informational status as a final answer"),
        300..=399 => unknown("redirect not followed (a write is never re-sent to another URL)"),
        408 => unknown("the server timed out reading the request"),
        409 => Evidence::Conflict {
            conflict: ConflictKind::InFlight,
        },
        421 | 425 => unknown("the server asks for a retry"),
        429 => unknown("rate limited; the contract does not document it as not executed"),
        400..=499 => Evidence::Rejected {
            reason: describe(status, body),
        },
        500..=599 => unknown(""),
        _ => unknown("unexpected status"),
    }
}

fn remote_ref(contract: &Contract, body: &Body<'_>) -> Option<String> {
    let pointer = &contract.remote_ref.as_ref()?.pointer;
    if body.json.get().is_none()
        && let Some(found) = top_level_member(body.raw, pointer)
    {
        return found;
    }
    match body.pointer(pointer)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// [`remote_ref`] for the common pointer to a top-level member (`/id`) of a JSON object,
/// without building the whole document: `Some(answer)` when `raw` is a JSON object (the same
/// answer as through `serde_json::Value`: the last member of that name wins, every other value
/// is parsed, numbers included, only not kept), `None` to go the general way.
fn top_level_member(raw: &[u8], pointer: &str) -> Option<Option<String>> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
    use std::fmt;

    let name = pointer.strip_prefix('/')?;
    if name.contains(['/', '~']) {
        return None;
    }

    /// A member name: whether it is the one looked for (no copy of it).
    struct IsName<'n>(&'n str);
    impl<'de> DeserializeSeed<'de> for IsName<'_> {
        type Value = bool;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl Visitor<'_> for IsName<'_> {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a member name")
        }
        fn visit_str<E>(self, v: &str) -> Result<bool, E> {
            Ok(v == self.0)
        }
    }

    /// Any other value: parsed as `Value` parses it (`deserialize_any`: numbers out of range
    /// are errors too), not kept.
    struct Skip;
    impl<'de> DeserializeSeed<'de> for Skip {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(IgnoredAny).map(|_| ())
        }
    }

    /// The object: the value of its last member named `name`, if any.
    struct Object<'n>(&'n str);
    impl<'de> Visitor<'de> for Object<'_> {
        type Value = Option<Value>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
            let mut found = None;
            while let Some(is_it) = map.next_key_seed(IsName(self.0))? {
                if is_it {
                    found = Some(map.next_value::<Value>()?);
                } else {
                    map.next_value_seed(Skip)?;
                }
            }
            Ok(found)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(raw);
    let found = de.deserialize_map(Object(name)).ok()?;
    de.end().ok()?;
    Some(match found {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

fn require_remote_ref(contract: &Contract, evidence: Evidence) -> Evidence {
    let required = contract.remote_ref.as_ref().is_some_and(|r| r.required);
    match evidence {
        Evidence::Succeeded { remote_ref: None } if required => Evidence::Unknown {
            why: "success response without a remote reference".to_owned(),
            retry_after: None,
        },
        other => other,
    }
}

/// How deep an error chain is followed (a badly written error can point at itself).
const MAX_CHAIN: usize = 32;

/// The errors in a chain, outermost first. An `io::Error` wrapping a custom error yields that
/// error next: `io::Error::source` skips it and goes straight to its source.
fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    let mut next = Some(err);
    std::iter::from_fn(move || {
        let cur = next?;
        next = match cur.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn StdError + 'static)),
                None => cur.source(),
            },
            None => cur.source(),
        };
        Some(cur)
    })
    .take(MAX_CHAIN)
}

pub(super) fn error(err: &(dyn StdError + 'static)) -> Evidence {
    for e in chain(err) {
        if let Some(refusal) = e.downcast_ref::<SendRefused>() {
            return Evidence::not_executed(truncate(&sanitize(&refusal.to_string()), MAX_WHY));
        }
    }
    let proof = chain(err).find_map(|e| {
        if e.downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(|h| h.is_connect())
        {
            return Some("connect error, the request was never sent");
        }
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return Some("connection refused, the request was never sent");
        }
        None
    });
    let what = describe_error(err);
    match proof {
        Some(proof) => Evidence::not_executed(truncate(&format!("{proof}: {what}"), MAX_WHY)),
        None => Evidence::unknown(truncate(&what, MAX_WHY)),
    }
}

/// The chain's messages joined by `: `, skipping a message already contained in the previous
/// one (many errors repeat their source's text), with URL credentials and queries removed.
fn describe_error(err: &(dyn StdError + 'static)) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for e in chain(err) {
        let msg = e.to_string();
        if msg.is_empty() || last.contains(&msg) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
        if out.len() > MAX_WHY * 2 {
            break;
        }
        last = msg;
    }
    if out.is_empty() {
        out.push_str("transport error");
    }
    sanitize(&out)
}

/// Removes what could be a credential from URLs quoted in an error message: the userinfo
/// (`user:pass@`) and the query (`?api_key=...`).
pub(crate) fn sanitize(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(idx) = rest.find("://") {
        let (head, tail) = rest.split_at(idx + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ','))
            .unwrap_or(tail.len());
        let (url, after) = tail.split_at(end);
        let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
        let (authority, path) = url.split_at(authority_end);
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        out.push_str(host);
        match path.find(['?', '#']) {
            Some(q) => {
                out.push_str(&path[..q]);
                out.push_str("?…");
            }
            None => out.push_str(path),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// At most `max` bytes, cut at a character boundary, with `…` when cut.
pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn sanitize_drops_userinfo_and_query() {
        assert_eq!(
            sanitize(
                "error sending request for url (https://u:p@api.test/v1/x?api_key=sk_1): timed out"
            ),
            "error sending request for url (https://api.test/v1/x?…): timed out"
        );
        assert_eq!(sanitize("no url here"), "no url here");
        assert_eq!(sanitize("http://"), "http://");
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("ééé", 3), "é…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}

#[cfg(test)]
mod top_level_member_tests {
    use super::*;

    /// What `remote_ref` answers through the whole parsed document.
    fn through_value(raw: &[u8], pointer: &str) -> Option<String> {
        match serde_json::from_slice::<Value>(raw)
            .ok()?
            .pointer(pointer)?
        {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    #[test]
    fn the_fast_path_answers_as_the_parsed_document_does() {
        let bodies: &[&str] = &[
            r#"{"id":"W1"}"#,
            r#"{"id":""}"#,
            r#"{"id":17}"#,
            r#"{"id":-1.5e3}"#,
            r#"{"id":null}"#,
            r#"{"id":{"x":1}}"#,
            r#"{"id":"a","id":"b"}"#,
            r#"{"id":"a","id":7}"#,
            r#"{"other":"x"}"#,
            r#"{"\u0069d":"escaped name"}"#,
            r#"{"id":"W\n2","n":[1,{"a":true}]}"#,
            r#"{"id":"W1","big":1e400}"#,
            r#"{"id":"W1"} trailing"#,
            r#"{"id":"W1"}   "#,
            r#"{"id":"W1""#,
            r#"["W1"]"#,
            r#""W1""#,
            "",
            "not json",
            r#"{"id":"W1","bad":"\ud800"}"#,
        ];
        for body in bodies {
            for pointer in ["/id", "/other", "/i", "/"] {
                let fast = top_level_member(body.as_bytes(), pointer);
                if let Some(answer) = fast {
                    assert_eq!(
                        answer,
                        through_value(body.as_bytes(), pointer),
                        "{body} {pointer}"
                    );
                }
            }
        }
        assert_eq!(
            top_level_member(br#"{"id":"W1"}"#, "/id"),
            Some(Some("W1".into()))
        );
        assert_eq!(top_level_member(br#"{"x":1}"#, "/id"), Some(None));
        assert_eq!(top_level_member(br#"{"a":{"b":1}}"#, "/a/b"), None);
    }
}
