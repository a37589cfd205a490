//! [`FrozenRequest`]: the request as frozen when the operation is created, credentials and
//! connection headers left out, and rebuilt byte for byte for every replay.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, Uri};

use super::headers::FrozenHeaders;
use super::redaction::{SecretNames, is_secret, redact_body, redacted_uri};

/// Headers that describe the connection or are recomputed at send time, never frozen. `Host`
/// is frozen: it names the virtual host the write was sent to.
const UNFROZEN_HEADERS: &[&str] = &[
    "content-length",
    "connection",
    "transfer-encoding",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
];

/// The request as frozen when the operation was created: what every attempt sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrozenRequest {
    /// HTTP method (a standard one is stored without a heap allocation).
    pub method: Method,
    /// The URL the write was sent to, without credentials: no userinfo, no secret query
    /// parameter, and each secret path segment replaced by [`REDACTED`](super::REDACTED).
    pub url: String,
    /// Non-secret headers in order (names lower-cased, values as their exact bytes), `Host`
    /// included when the request carried one; all in one buffer.
    pub headers: FrozenHeaders,
    /// The body bytes, before any idempotency key is placed into them.
    pub body: Bytes,
}

impl FrozenRequest {
    /// Freezes a request: drops credentials (`secrets.headers` on top of
    /// [`DEFAULT_SECRET_HEADERS`](super::DEFAULT_SECRET_HEADERS); userinfo and `secrets.query_params` on top of
    /// [`DEFAULT_SECRET_QUERY_PARAMS`](super::DEFAULT_SECRET_QUERY_PARAMS) from the URL, and the path segments
    /// `secrets.path_segments` mark, replaced by [`REDACTED`](super::REDACTED); `secrets.body_fields` from the
    /// body) and connection headers. Every other header value is kept byte for byte, in one
    /// allocation.
    pub fn freeze(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: Bytes,
        secrets: SecretNames<'_>,
    ) -> Self {
        let headers = FrozenHeaders::sized(|| {
            headers
                .iter()
                .filter(|(name, _)| !is_secret(name, secrets.headers) && !is_unfrozen(name))
                .map(|(name, value)| (name.as_str(), value.as_bytes()))
        });
        Self {
            method: method.clone(),
            url: uri_string(&redacted_uri(uri, secrets)),
            headers,
            body: redact_body(&body, secrets.body_fields),
        }
    }

    /// Rebuilds an `http::Request` carrying exactly the frozen bytes (used by replays).
    pub fn to_request(&self) -> Result<http::Request<Bytes>, http::Error> {
        let mut builder = http::Request::builder()
            .method(self.method.as_str())
            .uri(self.url.as_str());
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        builder.body(self.body.clone())
    }
}

/// `uri.to_string()`, written into a string sized up front (one allocation, no growth).
fn uri_string(uri: &Uri) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(
        uri.scheme_str().map_or(0, |s| s.len() + 3)
            + uri.authority().map_or(0, |a| a.as_str().len())
            + uri.path_and_query().map_or(1, |pq| pq.as_str().len()),
    );
    let _ = write!(out, "{uri}");
    out
}

pub(crate) fn is_unfrozen(name: &HeaderName) -> bool {
    UNFROZEN_HEADERS.contains(&name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::HeaderBytes;

    #[test]
    fn freezing_drops_credentials_and_connection_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer sk_live_123".parse().unwrap());
        headers.insert("cookie", "s=1".parse().unwrap());
        headers.insert("x-vendor-secret", "abc".parse().unwrap());
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("content-length", "2".parse().unwrap());
        let f = FrozenRequest::freeze(
            &Method::POST,
            &"http://v/t".parse().unwrap(),
            &headers,
            Bytes::from_static(b"{}"),
            SecretNames {
                headers: &["X-Vendor-Secret".to_owned()],
                ..SecretNames::default()
            },
        );
        assert_eq!(
            f.headers,
            FrozenHeaders::from(vec![(
                "content-type".to_owned(),
                HeaderBytes::from("application/json")
            )])
        );
        let pairs: Vec<_> = f.headers.iter().collect();
        assert_eq!(pairs, [("content-type", &b"application/json"[..])]);
        assert!(!format!("{f:?}").contains("sk_live"));
    }

    /// Issue 10 item 4: header values that are not visible ASCII (UTF-8 text, obs-text bytes)
    /// and the `Host` header are frozen exactly, survive a JSON round trip, and come back.
    #[test]
    fn freezing_keeps_every_header_byte_and_the_host() {
        let mut headers = HeaderMap::new();
        headers.insert("host", "tickets.vendor.test".parse().unwrap());
        headers.insert(
            "x-requester",
            http::HeaderValue::from_bytes("Zoë".as_bytes()).unwrap(),
        );
        headers.insert(
            "x-latin1",
            http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        let f = FrozenRequest::freeze(
            &Method::POST,
            &"http://10.0.0.7/t".parse().unwrap(),
            &headers,
            Bytes::new(),
            SecretNames::default(),
        );
        let json = serde_json::to_string(&f.headers).unwrap();
        assert!(json.contains("Zoë"), "{json}");
        assert!(json.contains(r#"{"hex":"636166e9"}"#), "{json}");
        let back: FrozenHeaders = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f.headers);
        // Stored as the `Vec<(String, HeaderBytes)>` it replaces was, byte for byte.
        let as_vec: Vec<(String, HeaderBytes)> = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&as_vec).unwrap(), json);
        assert_eq!(FrozenHeaders::from(as_vec), f.headers);
        assert_eq!(f.headers.get("x-latin1"), Some(&b"caf\xe9"[..]));
        let req = f.to_request().unwrap();
        assert_eq!(req.headers()["host"], "tickets.vendor.test");
        assert_eq!(req.headers()["x-requester"].as_bytes(), "Zoë".as_bytes());
        assert_eq!(req.headers()["x-latin1"].as_bytes(), b"caf\xe9");
    }
}
