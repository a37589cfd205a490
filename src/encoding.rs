//! Percent-encoding for query strings, form bodies and URL templates, on the `percent-encoding`
//! crate (one place, instead of a hand-written copy per module).

use std::borrow::Cow;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode, utf8_percent_encode};

/// Everything but the RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`) is encoded.
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `s` with everything but the unreserved characters percent-encoded (a query or form value, a
/// path segment).
pub(crate) fn encode_component(s: &str) -> Cow<'_, str> {
    utf8_percent_encode(s, NOT_UNRESERVED).into()
}

/// The bytes of a query or form component: `%XX` escapes decoded and `+` read as a space
/// (malformed escapes stay as they are).
pub(crate) fn decode_component(s: &str) -> Cow<'_, [u8]> {
    if s.contains('+') {
        Cow::Owned(percent_decode(s.replace('+', " ").as_bytes()).collect())
    } else {
        percent_decode(s.as_bytes()).into()
    }
}

/// [`decode_component`] as text (invalid UTF-8 replaced).
pub(crate) fn decode_component_str(s: &str) -> String {
    String::from_utf8_lossy(&decode_component(s)).into_owned()
}

/// The first `n` characters of `s` (all of it when shorter). Stored strings may hold anything:
/// a byte count could cut inside a character and panic (`floor_char_boundary` is unstable).
pub(crate) fn first_chars(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(end, _)| &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_form_spaces() {
        assert_eq!(encode_component("a b/c~d-é"), "a%20b%2Fc~d-%C3%A9");
        assert_eq!(&*decode_component("a%20b+c%2B%zz"), b"a b c+%zz");
        assert_eq!(decode_component_str("client%5Fsecret"), "client_secret");
    }
}

/// `value.pointer(pointer)` (RFC 6901, serde_json's semantics exactly) without a string per
/// token: only a token with an escape (`~0`, `~1`) is unescaped into a new string.
pub(crate) fn json_pointer<'v>(
    value: &'v serde_json::Value,
    pointer: &str,
) -> Option<&'v serde_json::Value> {
    use serde_json::Value;
    if pointer.is_empty() {
        return Some(value);
    }
    if !pointer.starts_with('/') {
        return None;
    }
    pointer.split('/').skip(1).try_fold(value, |target, token| {
        let unescaped;
        let token = if token.contains('~') {
            unescaped = token.replace("~1", "/").replace("~0", "~");
            unescaped.as_str()
        } else {
            token
        };
        match target {
            Value::Object(map) => map.get(token),
            Value::Array(list) => {
                if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
                    return None;
                }
                token.parse::<usize>().ok().and_then(|i| list.get(i))
            }
            _ => None,
        }
    })
}

#[cfg(test)]
mod json_pointer_tests {
    use super::json_pointer;

    #[test]
    fn it_agrees_with_serde_json() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"a":{"b/c":[1,{"d~e":"x"}],"":{"":2}},"01":3,"1":4,"arr":[5,6]}"#,
        )
        .unwrap();
        for p in [
            "",
            "/",
            "//",
            "/a",
            "/a/b~1c",
            "/a/b~1c/0",
            "/a/b~1c/1/d~0e",
            "/a/b~1c/01",
            "/a/b~1c/+1",
            "/a/b~1c/2",
            "/01",
            "/1",
            "/arr/1",
            "/arr/-",
            "a",
            "/a/b~1c/1/d~e",
            "/missing/x",
            "/arr/0/x",
        ] {
            assert_eq!(json_pointer(&v, p), v.pointer(p), "{p:?}");
        }
    }
}
