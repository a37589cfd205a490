//! Placing the idempotency key in a request: where it goes ([`KeyPlacement`], [`KeyFormat`]),
//! its length check, and writing it into a header, a JSON or form body, or the query.

use std::fmt;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::uri::PathAndQuery;
use http::{HeaderName, HeaderValue, Uri};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Contract;
use super::error::{ContractError, ContractErrorKind as Kind};
use crate::encoding::{decode_component, encode_component};

/// Where the idempotency key goes in the request.
///
/// In JSON or TOML the placement is tagged by `in`:
/// `{ "in": "header", "name": "Idempotency-Key", "format": "quoted" }`,
/// `{ "in": "json_body", "pointer": "/idempotency_key" }`, `{ "in": "query", "name": "requestId" }`,
/// `{ "in": "form_body", "name": "ClientToken" }`, `{ "in": "none" }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "in", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum KeyPlacement {
    /// A request header (Stripe, Adyen, PayPal, the IETF draft). An existing header of the same
    /// name is replaced.
    Header {
        /// Header name, e.g. `Idempotency-Key` or `PayPal-Request-Id`.
        name: String,
        /// How the value is written.
        #[serde(default)]
        format: KeyFormat,
    },
    /// A string field in a JSON object body (Square's `idempotency_key`). Intermediate objects
    /// are created when missing; a body that is not a JSON object is refused.
    JsonBody {
        /// RFC 6901 pointer to the field, e.g. `/idempotency_key` or `/meta/request_id`.
        pointer: String,
    },
    /// A query parameter (Google's `requestId`), percent-encoded and appended to the query;
    /// other parameters are kept as they are.
    Query {
        /// Parameter name.
        name: String,
    },
    /// A field of an `application/x-www-form-urlencoded` body (the EC2 Query API's
    /// `ClientToken`), percent-encoded and appended; other fields are kept as they are.
    FormBody {
        /// Field name.
        name: String,
    },
    /// No key is sent: the vendor has no idempotency (Twilio's outbound API). The operation
    /// still has a key in the ledger; it protects nothing at the vendor, so such a contract's
    /// replay must be [`Replay::Unsafe`](super::Replay::Unsafe). In JSON or TOML: `{ "in": "none" }`.
    #[serde(rename = "none", alias = "omitted")]
    Omitted,
}

impl KeyPlacement {
    /// The key in a header, written as is.
    pub fn header(name: impl Into<String>) -> Self {
        Self::Header {
            name: name.into(),
            format: KeyFormat::Plain,
        }
    }

    /// The key in a JSON body field at `pointer` (Square: `/idempotency_key`).
    pub fn json_body(pointer: impl Into<String>) -> Self {
        Self::JsonBody {
            pointer: pointer.into(),
        }
    }

    /// The key in a query parameter (Google: `requestId`).
    pub fn query(name: impl Into<String>) -> Self {
        Self::Query { name: name.into() }
    }

    /// The key in a form body field (EC2: `ClientToken`).
    pub fn form_body(name: impl Into<String>) -> Self {
        Self::FormBody { name: name.into() }
    }
}

impl fmt::Display for KeyPlacement {
    /// A short description: `header Idempotency-Key`, `header Idempotency-Key (quoted)`,
    /// `json body /idempotency_key`, `query requestId`, `form body ClientToken`, `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header {
                name,
                format: KeyFormat::Plain,
            } => write!(f, "header {name}"),
            Self::Header {
                name,
                format: KeyFormat::Quoted,
            } => write!(f, "header {name} (quoted)"),
            Self::JsonBody { pointer } => write!(f, "json body {pointer}"),
            Self::Query { name } => write!(f, "query {name}"),
            Self::FormBody { name } => write!(f, "form body {name}"),
            Self::Omitted => f.write_str("none"),
        }
    }
}

/// How a key is written into a header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KeyFormat {
    /// The key as is: `Idempotency-Key: 8e03...` (Stripe, Adyen, PayPal).
    #[default]
    Plain,
    /// An RFC 8941 sf-string, quoted: `Idempotency-Key: "8e03..."` (the IETF draft).
    Quoted,
}

pub(super) fn check_len(contract: &Contract, key: &str) -> Result<(), ContractError> {
    let err = |kind| ContractError::new(&contract.name, "key", kind);
    if key.is_empty() {
        return Err(err(Kind::Empty));
    }
    let len = key.chars().count();
    if len > contract.max_key_len {
        return Err(err(Kind::KeyTooLong {
            len,
            max: contract.max_key_len,
        }));
    }
    Ok(())
}

/// The header most contracts place the key in, lower case.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header a [`KeyPlacement::Header`] named `name` puts the key in, if `name` is a valid
/// header name. The usual name is a static one (no copy of it per request).
pub(crate) fn key_header(name: &str) -> Option<HeaderName> {
    if name.eq_ignore_ascii_case(IDEMPOTENCY_KEY) {
        Some(HeaderName::from_static(IDEMPOTENCY_KEY))
    } else {
        HeaderName::from_bytes(name.as_bytes()).ok()
    }
}

pub(super) fn attach(
    contract: &Contract,
    parts: &mut http::request::Parts,
    body: Bytes,
    key: &str,
) -> Result<Bytes, ContractError> {
    check_len(contract, key)?;
    let err = |field: &str, kind| ContractError::new(&contract.name, format!("key.{field}"), kind);
    match &contract.key {
        KeyPlacement::Header { name, format } => {
            let header = key_header(name)
                .ok_or_else(|| err("name", Kind::InvalidHeaderName(name.clone())))?;
            let value = header_value(key, *format).map_err(|k| err("format", k))?;
            parts.headers.insert(header, value);
            Ok(body)
        }
        KeyPlacement::JsonBody { pointer } => {
            let new = set_json_field(&body, pointer, key).map_err(|k| err("pointer", k))?;
            Ok(replace_body(parts, body, new))
        }
        KeyPlacement::Query { name } => {
            if name.is_empty() {
                return Err(err("name", Kind::Empty));
            }
            let path = parts.uri.path();
            let query = parts.uri.query().unwrap_or("");
            if let Some(new_query) = set_pair(query, name, key) {
                parts.uri = with_query(&parts.uri, path, &new_query)
                    .map_err(|why| err("name", Kind::InvalidUri(why)))?;
            }
            Ok(body)
        }
        KeyPlacement::FormBody { name } => {
            if name.is_empty() {
                return Err(err("name", Kind::Empty));
            }
            let form = std::str::from_utf8(&body).map_err(|_| err("name", Kind::BodyNotForm))?;
            match set_pair(form, name, key) {
                Some(new) => Ok(replace_body(parts, body, Bytes::from(new))),
                None => Ok(body),
            }
        }
        // The vendor has no idempotency: nothing to place.
        KeyPlacement::Omitted => Ok(body),
    }
}

/// Keeps `Content-Length` right when the body changed.
fn replace_body(parts: &mut http::request::Parts, old: Bytes, new: Bytes) -> Bytes {
    if new.len() != old.len() && parts.headers.contains_key(CONTENT_LENGTH) {
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(new.len()));
    }
    new
}

fn header_value(key: &str, format: KeyFormat) -> Result<HeaderValue, Kind> {
    // Receivers trim surrounding whitespace, so such a key would not arrive intact.
    let printable = |b: u8| (0x20..0x7f).contains(&b);
    if !key.bytes().all(printable) {
        return Err(Kind::KeyNotEncodable(
            "a header carries only printable ASCII characters",
        ));
    }
    if key.starts_with(' ') || key.ends_with(' ') {
        return Err(Kind::KeyNotEncodable(
            "a header value cannot start or end with a space",
        ));
    }
    let text = match format {
        KeyFormat::Plain => std::borrow::Cow::Borrowed(key),
        // RFC 8941 §3.3.3 sf-string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE.
        KeyFormat::Quoted => {
            let mut s = String::with_capacity(key.len() + 2);
            s.push('"');
            for c in key.chars() {
                if matches!(c, '"' | '\\') {
                    s.push('\\');
                }
                s.push(c);
            }
            s.push('"');
            std::borrow::Cow::Owned(s)
        }
    };
    HeaderValue::from_str(&text).map_err(|_| Kind::KeyNotEncodable("not a valid header value"))
}

/// RFC 6901 reference tokens, unescaped. `None` for a malformed pointer.
pub(super) fn pointer_tokens(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return None,
                    }
                } else {
                    out.push(c);
                }
            }
            Some(out)
        })
        .collect()
}

fn set_json_field(body: &Bytes, pointer: &str, key: &str) -> Result<Bytes, Kind> {
    let tokens = pointer_tokens(pointer).ok_or_else(|| Kind::InvalidPointer(pointer.to_owned()))?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err(Kind::EmptyPointer);
    };
    let mut doc: Value = serde_json::from_slice(body).map_err(|_| Kind::BodyNotJsonObject)?;
    let Some(root) = doc.as_object() else {
        return Err(Kind::BodyNotJsonObject);
    };
    // Already there (the body was frozen after a previous attach): keep the exact bytes.
    if doc.pointer(pointer).and_then(Value::as_str) == Some(key) {
        return Ok(body.clone());
    }
    // A new top-level field: insert it textually, so the caller's bytes are kept as they are.
    if parents.is_empty() && !root.contains_key(last) {
        let start = body
            .iter()
            .position(|b| *b == b'{')
            .ok_or(Kind::BodyNotJsonObject)?;
        let field = serde_json::to_string(last).map_err(|_| Kind::BodyNotJsonObject)?;
        let value = serde_json::to_string(key).map_err(|_| Kind::BodyNotJsonObject)?;
        let mut out = Vec::with_capacity(body.len() + field.len() + value.len() + 2);
        out.extend_from_slice(&body[..=start]);
        out.extend_from_slice(field.as_bytes());
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
        if !root.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(&body[start + 1..]);
        return Ok(Bytes::from(out));
    }
    let mut cur = &mut doc;
    let mut at = String::new();
    for token in parents {
        at.push('/');
        at.push_str(&token.replace('~', "~0").replace('/', "~1"));
        let Some(obj) = cur.as_object_mut() else {
            return Err(Kind::PointerBlocked {
                pointer: pointer.to_owned(),
                at,
            });
        };
        cur = obj
            .entry(token.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    let Some(obj) = cur.as_object_mut() else {
        return Err(Kind::PointerBlocked {
            pointer: pointer.to_owned(),
            at,
        });
    };
    obj.insert(last.clone(), Value::String(key.to_owned()));
    serde_json::to_vec(&doc)
        .map(Bytes::from)
        .map_err(|_| Kind::BodyNotJsonObject)
}

/// Sets `name=value` in an `&`-separated, percent-encoded list (a query or a form body).
/// Returns `None` when it already holds exactly that pair once; otherwise drops every pair named
/// `name` and appends the new one, keeping the other pairs byte for byte.
fn set_pair(list: &str, name: &str, value: &str) -> Option<String> {
    let is_ours = |pair: &str| {
        let raw_name = pair.split_once('=').map_or(pair, |(n, _)| n);
        *decode_component(raw_name) == *name.as_bytes()
    };
    let ours: Vec<&str> = list.split('&').filter(|p| is_ours(p)).collect();
    if let [only] = ours.as_slice() {
        let raw_value = only.split_once('=').map_or("", |(_, v)| v);
        if *decode_component(raw_value) == *value.as_bytes() {
            return None;
        }
    }
    let mut out: String = list
        .split('&')
        .filter(|p| !p.is_empty() && !is_ours(p))
        .collect::<Vec<_>>()
        .join("&");
    if !out.is_empty() {
        out.push('&');
    }
    out.push_str(&encode_component(name));
    out.push('=');
    out.push_str(&encode_component(value));
    Some(out)
}

fn with_query(uri: &Uri, path: &str, query: &str) -> Result<Uri, String> {
    let path = if path.is_empty() { "/" } else { path };
    let pq = PathAndQuery::try_from(format!("{path}?{query}")).map_err(|e| e.to_string())?;
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq);
    Uri::from_parts(parts).map_err(|e| e.to_string())
}
