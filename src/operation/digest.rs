//! The payload hash: SHA-256 over the method, the normalized URL and the canonical body,
//! which binds an operation to its content ([`PayloadHash`], [`PayloadDigest`]).

use std::fmt;

use http::{Method, Uri};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::canonical::{self, write_canonical};
use super::hex;
use crate::inline_str::InlineStr;

/// Which parts of a JSON body define the business payload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", content = "pointers")]
pub enum PayloadDigest {
    /// The whole body (JSON bodies canonicalized: keys sorted, insignificant whitespace removed).
    #[default]
    Full,
    /// Only the named JSON pointers (RFC 6901), e.g. `["/amount", "/currency", "/device_id"]`:
    /// a reworded free-text memo does not make a different operation, a changed amount does.
    Fields(Vec<String>),
}

/// SHA-256 over the canonical form of a payload, lower-case hex.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
// SHA-256 in hex (64 characters) is kept inline: no allocation per write.
pub struct PayloadHash(InlineStr<64>);

impl PayloadHash {
    /// Computes the hash of `method`, the normalized `url` and the canonical `body`.
    ///
    /// JSON bodies (any body that parses as JSON) are canonicalized; with
    /// [`PayloadDigest::Fields`] only the named fields count (a missing field hashes as absent).
    /// Other bodies are hashed byte for byte.
    pub fn compute(method: &str, url: &str, body: &[u8], digest: &PayloadDigest) -> Self {
        let normalized = match url.parse::<Uri>() {
            Ok(uri) => normalize_uri(&uri),
            Err(_) => url.to_owned(),
        };
        Self::digest(&method.to_ascii_uppercase(), &normalized, body, digest)
    }

    /// [`compute`](Self::compute) from the request's parsed method and URI (the layer's path:
    /// no re-parse of the URL). The same value as `compute(method.as_str(), &uri.to_string(),
    /// ..)`.
    pub(crate) fn compute_for(
        method: &Method,
        uri: &Uri,
        body: &[u8],
        digest: &PayloadDigest,
    ) -> Self {
        // Methods are case-sensitive tokens; the standard ones are upper case already.
        let upper;
        let method = if method.as_str().bytes().any(|b| b.is_ascii_lowercase()) {
            upper = method.as_str().to_ascii_uppercase();
            upper.as_str()
        } else {
            method.as_str()
        };
        Self::digest_with(method, |h| write_normalized_uri(uri, h), body, digest)
    }

    fn digest(method: &str, normalized_url: &str, body: &[u8], digest: &PayloadDigest) -> Self {
        Self::digest_with(
            method,
            |h| h.update(normalized_url.as_bytes()),
            body,
            digest,
        )
    }

    /// The digest, with the normalized URL written into the hasher by `url`.
    fn digest_with(
        method: &str,
        url: impl FnOnce(&mut Sha256),
        body: &[u8],
        digest: &PayloadDigest,
    ) -> Self {
        let mut h = Sha256::new();
        h.update(method.as_bytes());
        h.update(b"\n");
        url(&mut h);
        h.update(b"\n");
        if matches!(digest, PayloadDigest::Full) && !body.is_empty() {
            // The common case, without building a `Value`: the same bytes hashed.
            let mut direct = h.clone();
            direct.update(b"json:");
            if canonical::write_direct(body, &mut direct) {
                return Self(hex_inline(&direct.finalize()));
            }
        }
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(value) if !body.is_empty() => {
                h.update(b"json:");
                match digest {
                    PayloadDigest::Full => write_canonical(&value, &mut h),
                    PayloadDigest::Fields(pointers) => {
                        for p in pointers {
                            h.update(p.as_bytes());
                            h.update(b"=");
                            match crate::encoding::json_pointer(&value, p) {
                                Some(v) => write_canonical(v, &mut h),
                                None => h.update(b"<absent>"),
                            }
                            h.update(b";");
                        }
                    }
                }
            }
            _ => {
                h.update(b"raw:");
                h.update(body);
            }
        }
        Self(hex_inline(&h.finalize()))
    }

    /// Restores a hash read back from a ledger.
    pub fn from_stored(s: impl Into<String>) -> Self {
        Self(InlineStr::from_string(s.into()))
    }

    /// The hash as lower-case hex.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for PayloadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// [`normalize_uri`] written straight into the hasher (no string).
fn write_normalized_uri(uri: &Uri, h: &mut Sha256) {
    normalized_uri_into(uri, &mut |bytes| h.update(bytes));
}

/// The normalized form of `uri` (see [`normalize_uri`]), written piece by piece into `out`.
fn normalized_uri_into(uri: &Uri, out: &mut impl FnMut(&[u8])) {
    let lower = |s: &str, out: &mut dyn FnMut(&[u8])| {
        for chunk in s.as_bytes().chunks(64) {
            let mut buf = [0u8; 64];
            let buf = &mut buf[..chunk.len()];
            buf.copy_from_slice(chunk);
            buf.make_ascii_lowercase();
            out(buf);
        }
    };
    if let Some(s) = uri.scheme_str() {
        lower(s, out);
        out(b"://");
    }
    if let Some(host) = uri.host() {
        lower(host, out);
    }
    if let Some(p) = non_default_port(uri) {
        let mut buf = [0u8; 6];
        let mut n = p;
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        i -= 1;
        buf[i] = b':';
        out(&buf[i..]);
    }
    out(uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .as_bytes());
}

/// The port of `uri` unless it is the default one of its scheme.
fn non_default_port(uri: &Uri) -> Option<u16> {
    let default_port = match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") => Some(80),
        Some(s) if s.eq_ignore_ascii_case("https") => Some(443),
        _ => None,
    };
    uri.port_u16().filter(|p| Some(*p) != default_port)
}

/// Lower-cases scheme and host and drops a default port; path and query are kept as given
/// (their case and order can be significant to the vendor).
fn normalize_uri(uri: &Uri) -> String {
    let mut out = Vec::with_capacity(uri.host().map_or(0, str::len) + 32);
    normalized_uri_into(uri, &mut |bytes| out.extend_from_slice(bytes));
    // A `Uri` holds ASCII only; should that change, nothing panics here.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A SHA-256 digest as lower-case hex, written on the stack and shared (one allocation).
fn hex_inline(digest: &[u8]) -> InlineStr<64> {
    let mut buf = [0u8; 64];
    if let Some(out) = buf.get_mut(..2 * digest.len())
        && ::hex::encode_to_slice(digest, out).is_ok()
        && let Ok(s) = std::str::from_utf8(out)
    {
        return InlineStr::new(s);
    }
    // Longer than a SHA-256 digest: not inline.
    InlineStr::from_string(hex(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_hash_canonically() {
        let a = PayloadHash::compute(
            "post",
            "HTTP://Vendor.test:80/tickets",
            br#"{"device_id":"E17","priority":"P2"}"#,
            &PayloadDigest::Full,
        );
        let b = PayloadHash::compute(
            "POST",
            "http://vendor.test/tickets",
            b"{ \"priority\": \"P2\",\n \"device_id\": \"E17\" }",
            &PayloadDigest::Full,
        );
        assert_eq!(a, b);
        let c = PayloadHash::compute(
            "POST",
            "http://vendor.test/tickets",
            br#"{"device_id":"E18","priority":"P2"}"#,
            &PayloadDigest::Full,
        );
        assert_ne!(a, c);
    }

    #[test]
    fn field_digest_ignores_free_text() {
        let fields = PayloadDigest::Fields(vec!["/amount".into(), "/currency".into()]);
        let a = PayloadHash::compute(
            "POST",
            "http://v/p",
            br#"{"amount":100,"currency":"eur","memo":"for the order"}"#,
            &fields,
        );
        let b = PayloadHash::compute(
            "POST",
            "http://v/p",
            br#"{"amount":100,"currency":"eur","memo":"order payment"}"#,
            &fields,
        );
        let c = PayloadHash::compute(
            "POST",
            "http://v/p",
            br#"{"amount":101,"currency":"eur","memo":"for the order"}"#,
            &fields,
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// Inputs whose hashes are pinned: a stored operation's payload hash is compared with a
    /// recomputed one after upgrades, so the canonical form must never change.
    pub(super) fn cases() -> Vec<(&'static str, &'static str, &'static [u8], PayloadDigest)> {
        vec![
            (
                "post",
                "HTTPS://Vendor.Test:443/v1/tickets?b=2&a=1",
                br#"{"z":1,"a":{"y":[1,2.5,-3e2,true,null],"x":"\u00e9\"\n"},"m":"\ud83d\ude00"}"#,
                PayloadDigest::Full,
            ),
            (
                "POST",
                "http://vendor.test:8080/t",
                b" { \"b\" : 18446744073709551615 , \"a\" : -1.0e-7 } ",
                PayloadDigest::Full,
            ),
            (
                "PUT",
                "http://vendor.test/t",
                br#"{"amount":100,"memo":"hi","nested":{"k":"v"}}"#,
                PayloadDigest::Fields(vec!["/amount".into(), "/nested".into(), "/missing".into()]),
            ),
            (
                "POST",
                "/relative/path",
                b"not json at all \xff\x00",
                PayloadDigest::Full,
            ),
            ("POST", "http://vendor.test", b"", PayloadDigest::Full),
            (
                "PATCH",
                "http://vendor.test/x",
                b"[{\"b\":[],\"a\":{}},\"s\",0]",
                PayloadDigest::Full,
            ),
        ]
    }

    /// The hashes the canonical form gave when it was first written (v0.1): they must never
    /// change, or every stored operation would conflict with its own retry.
    const PINNED: [&str; 6] = [
        "f6cc26b69a269ded865fc1e60abc449099691d16be1c7757f22ca9c5fc118793",
        "d3f4e8c0e3e9d4e4f3d14f96deb38055ffba1cc5c05a856efe53aae04a7d81b0",
        "5d888fc326865adc0355665fd0b4efa0388dd4d61c3a5008e48a0962dce8a896",
        "9f17ef9cf89338e4960a8e1130579934f1bb09adb688393cbc3e58fa682d8ea7",
        "392830e2b46710a9d9d4cd6cdc1deb2b09ad90589075d298f8433d0d3cc43e2c",
        "1c2d304326c8b8549fff000ecdec9ad3ad52fefd3e90d20b71209f220574522b",
    ];

    #[test]
    fn payload_hashes_never_change() {
        for ((m, u, b, d), pinned) in cases().into_iter().zip(PINNED) {
            assert_eq!(
                PayloadHash::compute(m, u, b, &d).as_str(),
                pinned,
                "{m} {u}"
            );
            if let Ok(uri) = u.parse::<Uri>() {
                let method = Method::from_bytes(m.to_ascii_uppercase().as_bytes()).unwrap();
                assert_eq!(
                    PayloadHash::compute_for(&method, &uri, b, &d).as_str(),
                    pinned,
                    "{m} {u} from the parsed request"
                );
            }
        }
    }

    /// The normalized URL hashed in place is the normalized URL.
    #[test]
    fn normalized_uri_written_into_the_hasher_is_the_normalized_uri() {
        for u in [
            "HTTPS://Vendor.Test:443/v1/tickets?b=2&a=1",
            "http://vendor.test:8080/t",
            "http://VENDOR.test:80",
            "http://[::1]:65535/x?Y=Z",
            "/relative/Path?q=1",
            "https://v.test:0/",
            "custom://Host.Example:443/a",
            "http://Ünicode.test/ä",
        ] {
            let Ok(uri) = u.parse::<Uri>() else { continue };
            let (mut a, mut b) = (Sha256::new(), Sha256::new());
            write_normalized_uri(&uri, &mut a);
            b.update(normalize_uri(&uri).as_bytes());
            assert_eq!(a.finalize(), b.finalize(), "{u}");
        }
    }
}
