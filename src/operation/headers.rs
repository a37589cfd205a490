//! [`FrozenHeaders`]: a frozen request's headers in one allocation, and [`HeaderBytes`], one
//! frozen value on its own.
//!
//! Every write freezes the non-secret headers of its request. As a `Vec<(String,
//! HeaderBytes)>` that cost one allocation for the vector and two per header (the name, a copy
//! of the value). [`FrozenHeaders`] keeps every name and value in one `Vec<u8>`, each pair
//! prefixed by the byte lengths of its name and value, the layout
//! [`StoredHeaders`](crate::ledger::StoredHeaders) uses for a stored response's headers. The
//! lengths say where each name and value ends, so a value may hold any byte (a Latin-1 `é`, a
//! `:`, a quote) and comes back exactly as it was frozen.
//!
//! Serialized, the headers are the JSON array of `[name, value]` pairs the `Vec` produced (a
//! value is a string when it is UTF-8, `{"hex": "…"}` otherwise), so stored rows (the ledgers'
//! `request_headers` column) read back unchanged.

use std::borrow::Cow;
use std::fmt;
use std::iter::FusedIterator;

use bytes::Bytes;
use serde::de::{self, Deserializer};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use super::{hex, unhex};
use crate::length_prefixed::{LengthPrefixed, Pairs, Text, deserialize_pairs};

/// A frozen header value: its exact bytes.
///
/// Stored as a JSON string when the bytes are UTF-8 (every visible-ASCII value, and text such
/// as `Zoë`), otherwise as `{"hex": "…"}`, so that no value is lost or altered on a replay.
///
/// A [`FrozenRequest`](super::FrozenRequest) keeps its values in [`FrozenHeaders`], which
/// serializes each one exactly as this type does; `HeaderBytes` remains for one value on its
/// own, and for building [`FrozenHeaders`] from the `Vec<(String, HeaderBytes)>` that held
/// them before.
///
/// ```
/// use recoverable_write::operation::HeaderBytes;
///
/// let latin1 = HeaderBytes::from(&http::HeaderValue::from_bytes(b"caf\xe9").unwrap());
/// assert_eq!(latin1.to_str(), None);
/// assert_eq!(serde_json::to_string(&latin1).unwrap(), r#"{"hex":"636166e9"}"#);
/// assert_eq!(serde_json::to_string(&HeaderBytes::from("Zoë")).unwrap(), r#""Zoë""#);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderBytes(Bytes);

impl HeaderBytes {
    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The value as text, when it is UTF-8.
    pub fn to_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }
}

impl AsRef<[u8]> for HeaderBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for HeaderBytes {
    fn from(s: &str) -> Self {
        Self(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<&http::HeaderValue> for HeaderBytes {
    fn from(v: &http::HeaderValue) -> Self {
        Self(Bytes::copy_from_slice(v.as_bytes()))
    }
}

impl fmt::Debug for HeaderBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&Value(&self.0), f)
    }
}

impl Serialize for HeaderBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Value(&self.0).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for HeaderBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let ValueBytes(bytes) = ValueBytes::deserialize(deserializer)?;
        Ok(Self(Bytes::from(bytes.into_owned())))
    }
}

/// One value, written as [`HeaderBytes`] writes it: JSON and `Debug`.
struct Value<'a>(&'a [u8]);

impl fmt::Debug for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(self.0) {
            Ok(s) => fmt::Debug::fmt(s, f),
            Err(_) => write!(f, "hex:{}", hex(self.0)),
        }
    }
}

impl Serialize for Value<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(self.0) {
            Ok(s) => serializer.serialize_str(s),
            Err(_) => StoredValue::Raw {
                hex: Cow::Owned(hex(self.0)),
            }
            .serialize(serializer),
        }
    }
}

/// A value's stored form: a string when it is UTF-8, `{"hex": "…"}` otherwise.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum StoredValue<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Raw {
        #[serde(borrow)]
        hex: Cow<'a, str>,
    },
}

/// One value read back: borrowed from the input when it is a string without escapes.
struct ValueBytes<'de>(Cow<'de, [u8]>);

impl<'de> Deserialize<'de> for ValueBytes<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self(match StoredValue::deserialize(deserializer)? {
            StoredValue::Text(Cow::Borrowed(s)) => Cow::Borrowed(s.as_bytes()),
            StoredValue::Text(Cow::Owned(s)) => Cow::Owned(s.into_bytes()),
            StoredValue::Raw { hex } => Cow::Owned(
                unhex(&hex).ok_or_else(|| de::Error::custom("header value: invalid hex"))?,
            ),
        }))
    }
}

/// The headers of a [`FrozenRequest`](super::FrozenRequest): `(name, value)` pairs in the order
/// they came, duplicates kept, every name and value in one heap buffer.
///
/// Names are text (lower case when [`FrozenRequest::freeze`](super::FrozenRequest::freeze)
/// made them); values are their exact bytes, UTF-8 or not. Serialized as a JSON array of
/// `[name, value]` pairs, exactly as a `Vec<(String, HeaderBytes)>` is.
///
/// Build one with [`push`](Self::push), [`collect`](Iterator::collect) or `From<Vec<(String,
/// HeaderBytes)>>`:
///
/// ```
/// use recoverable_write::operation::FrozenHeaders;
///
/// let mut headers = FrozenHeaders::new();
/// headers.push("content-type", b"application/json");
/// headers.push("x-requester", "Zoë".as_bytes());
/// headers.push("x-legacy", b"caf\xe9");
///
/// let same: FrozenHeaders = [
///     ("content-type", &b"application/json"[..]),
///     ("x-requester", "Zoë".as_bytes()),
///     ("x-legacy", b"caf\xe9"),
/// ]
/// .into_iter()
/// .collect();
/// assert_eq!(headers, same);
///
/// assert_eq!(headers.len(), 3);
/// assert_eq!(headers.get("X-Legacy"), Some(&b"caf\xe9"[..]));
/// let names: Vec<_> = headers.iter().map(|(name, _)| name).collect();
/// assert_eq!(names, ["content-type", "x-requester", "x-legacy"]);
///
/// // The JSON a `Vec<(String, HeaderBytes)>` gives.
/// let json = serde_json::to_string(&headers).unwrap();
/// assert_eq!(
///     json,
///     r#"[["content-type","application/json"],["x-requester","Zoë"],["x-legacy",{"hex":"636166e9"}]]"#
/// );
/// assert_eq!(serde_json::from_str::<FrozenHeaders>(&json).unwrap(), headers);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct FrozenHeaders(LengthPrefixed<Vec<u8>>);

impl FrozenHeaders {
    /// No headers, and no allocation.
    ///
    /// ```
    /// use recoverable_write::operation::FrozenHeaders;
    ///
    /// let headers = FrozenHeaders::new();
    /// assert!(headers.is_empty());
    /// assert_eq!(serde_json::to_string(&headers).unwrap(), "[]");
    /// ```
    pub const fn new() -> Self {
        Self(LengthPrefixed::new(Vec::new()))
    }

    /// No headers yet, with room for `count` pairs whose names and values total `bytes` bytes:
    /// pushing them allocates once, here (nothing when both are 0).
    ///
    /// ```
    /// use recoverable_write::operation::FrozenHeaders;
    ///
    /// let pairs = [("content-type", &b"application/json"[..]), ("x-legacy", b"caf\xe9")];
    /// let bytes = pairs.iter().map(|(n, v)| n.len() + v.len()).sum();
    /// let mut headers = FrozenHeaders::with_capacity(pairs.len(), bytes);
    /// for (name, value) in pairs {
    ///     headers.push(name, value);
    /// }
    /// assert_eq!(headers.len(), 2);
    /// ```
    pub fn with_capacity(count: usize, bytes: usize) -> Self {
        Self(LengthPrefixed::with_capacity(count, bytes))
    }

    /// The pairs `pairs()` yields, in a buffer sized once: `pairs` is called twice, first to
    /// sum the lengths.
    pub(crate) fn sized<'p, I: Iterator<Item = (&'p str, &'p [u8])>>(
        pairs: impl Fn() -> I,
    ) -> Self {
        Self(LengthPrefixed::sized(|| {
            pairs().map(|(name, value)| (name.as_bytes(), value))
        }))
    }

    /// Appends `name: value` after the pairs already there (a repeated name is kept).
    ///
    /// ```
    /// use recoverable_write::operation::FrozenHeaders;
    ///
    /// let mut headers = FrozenHeaders::new();
    /// headers.push("x-note", b"a: 1, \"b\"\n");
    /// headers.push("x-note", b"\xff\x00");
    /// let pairs: Vec<_> = headers.iter().collect();
    /// assert_eq!(pairs, [("x-note", &b"a: 1, \"b\"\n"[..]), ("x-note", b"\xff\x00")]);
    /// ```
    pub fn push(&mut self, name: &str, value: &[u8]) {
        self.0.push(name.as_bytes(), value);
    }

    /// The `(name, value)` pairs in the order they were pushed.
    ///
    /// ```
    /// use recoverable_write::operation::FrozenHeaders;
    ///
    /// let headers: FrozenHeaders = [("host", "vendor.test")].into_iter().collect();
    /// let mut it = headers.iter();
    /// assert_eq!(it.len(), 1);
    /// assert_eq!(it.next(), Some(("host", &b"vendor.test"[..])));
    /// assert_eq!(it.next(), None);
    /// ```
    pub fn iter(&self) -> FrozenHeadersIter<'_> {
        FrozenHeadersIter(self.0.iter())
    }

    /// Number of pairs (a repeated name counts once per value).
    ///
    /// ```
    /// use recoverable_write::operation::FrozenHeaders;
    ///
    /// let headers: FrozenHeaders = [("a", "1"), ("a", "2")].into_iter().collect();
    /// assert_eq!(headers.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no pairs.
    ///
    /// ```
    /// use recoverable_write::operation::FrozenHeaders;
    ///
    /// assert!(FrozenHeaders::default().is_empty());
    /// assert!(!FrozenHeaders::from_iter([("a", "")]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first value stored under `name`, compared ASCII case-insensitively.
    ///
    /// ```
    /// use recoverable_write::operation::FrozenHeaders;
    ///
    /// let headers: FrozenHeaders = [("x-trace", "a"), ("X-Trace", "b")].into_iter().collect();
    /// assert_eq!(headers.get("X-TRACE"), Some(&b"a"[..]));
    /// assert_eq!(headers.get("host"), None);
    /// ```
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.0.get(name.as_bytes())
    }
}

/// The pairs of a [`FrozenHeaders`], in order ([`FrozenHeaders::iter`]).
///
/// ```
/// use recoverable_write::operation::FrozenHeaders;
///
/// let headers: FrozenHeaders = [("a", "1"), ("b", "2")].into_iter().collect();
/// let names: Vec<&str> = (&headers).into_iter().map(|(name, _)| name).collect();
/// assert_eq!(names, ["a", "b"]);
/// ```
#[derive(Clone, Debug)]
pub struct FrozenHeadersIter<'a>(Pairs<'a, [u8]>);

impl<'a> Iterator for FrozenHeadersIter<'a> {
    type Item = (&'a str, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (name, value) = self.0.next()?;
        match std::str::from_utf8(name) {
            Ok(name) => Some((name, value)),
            // `push` wrote every name from a `str`; were one ever not text, stop rather than
            // yield a wrong pair.
            Err(_) => {
                self.0.end();
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for FrozenHeadersIter<'_> {}

impl FusedIterator for FrozenHeadersIter<'_> {}

impl<'a> IntoIterator for &'a FrozenHeaders {
    type Item = (&'a str, &'a [u8]);
    type IntoIter = FrozenHeadersIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Debug for FrozenHeaders {
    /// As the `Vec<(String, HeaderBytes)>` it replaces:
    /// `[("content-type", "application/json"), ("x-legacy", hex:636166e9)]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(name, value)| (name, Value(value))))
            .finish()
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>> Extend<(K, V)> for FrozenHeaders {
    /// Pushes every pair, in order.
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        for (name, value) in pairs {
            self.push(name.as_ref(), value.as_ref());
        }
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>> FromIterator<(K, V)> for FrozenHeaders {
    /// The pairs in order; the buffer grows as they come (see
    /// [`with_capacity`](FrozenHeaders::with_capacity) to size it once).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut headers = Self::new();
        headers.extend(pairs);
        headers
    }
}

impl From<Vec<(String, HeaderBytes)>> for FrozenHeaders {
    /// The same pairs in the same order, in a buffer sized once.
    fn from(pairs: Vec<(String, HeaderBytes)>) -> Self {
        Self::sized(|| pairs.iter().map(|(n, v)| (n.as_str(), v.as_bytes())))
    }
}

impl Serialize for FrozenHeaders {
    /// `[["name","value"],["x-legacy",{"hex":"636166e9"}],...]`, as `Vec<(String,
    /// HeaderBytes)>`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(|(name, value)| (name, Value(value))))
    }
}

impl<'de> Deserialize<'de> for FrozenHeaders {
    /// What `Vec<(String, HeaderBytes)>` accepts: a sequence of `[name, value]` pairs, each
    /// value a string or `{"hex": "…"}`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_pairs(
            deserializer,
            Self::new(),
            |headers, Text(name), ValueBytes(value)| headers.push(&name, &value),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the `Vec` held: text values, non-ASCII UTF-8, non-UTF-8 bytes, separators a
    /// `,`/`:`/quote/digit scheme would trip over, empties, repeats.
    fn awkward() -> Vec<(String, HeaderBytes)> {
        [
            ("content-type", &b"application/json"[..]),
            ("x-requester", "Zoë".as_bytes()),
            ("x-latin1", b"caf\xe9"),
            ("x-list", b"a, b, \"c, d\""),
            ("x-colon", b"12:34:56"),
            ("3:4:", b"5:6:"),
            ("", b""),
            ("x-empty", b""),
            ("x-bytes", b"\x00\xff\x80{\"hex\":\"00\"}"),
            ("x-unicode", "déjà vu — 東京 🦀".as_bytes()),
            ("x-escapes", b"tab\there\nnewline\\back"),
            ("x-list", b"repeated"),
            ("X-List", b"REPEATED"),
        ]
        .into_iter()
        // Any bytes: a `NUL` is no valid `http::HeaderValue`, but a stored row may hold one.
        .map(|(n, v)| (n.to_owned(), HeaderBytes(Bytes::copy_from_slice(v))))
        .collect()
    }

    fn pairs(h: &FrozenHeaders) -> Vec<(String, Vec<u8>)> {
        h.iter().map(|(n, v)| (n.to_owned(), v.to_vec())).collect()
    }

    fn vec_pairs(vec: &[(String, HeaderBytes)]) -> Vec<(String, Vec<u8>)> {
        vec.iter()
            .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn serializes_byte_for_byte_as_the_vec_it_replaces() {
        for vec in [Vec::new(), awkward()] {
            let old = serde_json::to_string(&vec).unwrap();
            let headers = FrozenHeaders::from(vec.clone());
            assert_eq!(serde_json::to_string(&headers).unwrap(), old);
            assert_eq!(
                serde_json::to_value(&headers).unwrap(),
                serde_json::to_value(&vec).unwrap()
            );
            // What was stored as a Vec reads back as the same pairs, and round-trips.
            let decoded: FrozenHeaders = serde_json::from_str(&old).unwrap();
            assert_eq!(decoded, headers);
            assert_eq!(pairs(&decoded), vec_pairs(&vec));
            assert_eq!(serde_json::to_string(&decoded).unwrap(), old);
            // What is stored now reads back as the Vec did.
            let as_vec: Vec<(String, HeaderBytes)> = serde_json::from_str(&old).unwrap();
            assert_eq!(as_vec, vec);
            // From a reader (no borrowing possible) too.
            let read: FrozenHeaders = serde_json::from_reader(old.as_bytes()).unwrap();
            assert_eq!(read, headers);
        }
    }

    #[test]
    fn decodes_a_stored_row() {
        let stored = r#"[["content-type","application/json"],["x-requester","Zo\u00eb"],["x-latin1",{"hex":"636166e9"}],["x-upper",{"hex":"CAFE"}],["x-quote","say \"hi\""]]"#;
        let headers: FrozenHeaders = serde_json::from_str(stored).unwrap();
        assert_eq!(
            pairs(&headers),
            [
                ("content-type".to_owned(), b"application/json".to_vec()),
                ("x-requester".to_owned(), "Zoë".as_bytes().to_vec()),
                ("x-latin1".to_owned(), b"caf\xe9".to_vec()),
                ("x-upper".to_owned(), b"\xca\xfe".to_vec()),
                ("x-quote".to_owned(), b"say \"hi\"".to_vec()),
            ]
        );
        let as_vec: Vec<(String, HeaderBytes)> = serde_json::from_str(stored).unwrap();
        assert_eq!(headers, FrozenHeaders::from(as_vec));
        // Written back in today's form: text as text, other bytes in lower-case hex.
        assert_eq!(
            serde_json::to_string(&headers).unwrap(),
            r#"[["content-type","application/json"],["x-requester","Zoë"],["x-latin1",{"hex":"636166e9"}],["x-upper",{"hex":"cafe"}],["x-quote","say \"hi\""]]"#
        );
    }

    #[test]
    fn refuses_what_the_vec_refused() {
        for bad in [
            "{}",
            "[[\"a\"]]",
            "[[\"a\",\"b\",\"c\"]]",
            "[[\"a\",1]]",
            "[[1,\"a\"]]",
            "[[\"a\",{\"hex\":\"abc\"}]]",
            "[[\"a\",{\"hex\":\"zz\"}]]",
            "[[\"a\",{}]]",
            "[[\"a\",null]]",
            "[\"a\"]",
            "null",
        ] {
            assert!(
                serde_json::from_str::<FrozenHeaders>(bad).is_err(),
                "{bad} accepted"
            );
            assert!(
                serde_json::from_str::<Vec<(String, HeaderBytes)>>(bad).is_err(),
                "{bad}"
            );
        }
        let err = serde_json::from_str::<FrozenHeaders>(r#"[["a",{"hex":"zz"}]]"#).unwrap_err();
        assert!(
            err.to_string().contains("header value: invalid hex"),
            "{err}"
        );
    }

    #[test]
    fn empty_has_no_pairs_and_no_buffer() {
        let h = FrozenHeaders::new();
        assert!(h.is_empty());
        assert_eq!(h.len(), 0);
        assert_eq!(h.iter().next(), None);
        assert_eq!(h.get(""), None);
        assert_eq!(h.0.capacity(), 0);
        assert_eq!(h, FrozenHeaders::default());
        assert_eq!(h, FrozenHeaders::from(Vec::new()));
        assert_eq!(FrozenHeaders::with_capacity(0, 0).0.capacity(), 0);
        assert_eq!(format!("{h:?}"), "[]");
        assert_eq!(serde_json::to_string(&h).unwrap(), "[]");
        assert_eq!(serde_json::from_str::<FrozenHeaders>("[]").unwrap(), h);
    }

    #[test]
    fn any_bytes_come_back_as_pushed_in_order_with_duplicates() {
        let vec = awkward();
        let mut h = FrozenHeaders::new();
        for (n, v) in &vec {
            h.push(n, v.as_bytes());
        }
        assert_eq!(h.len(), vec.len());
        assert_eq!(h.iter().len(), vec.len());
        assert_eq!(pairs(&h), vec_pairs(&vec));
        assert_eq!(h, vec.iter().map(|(n, v)| (n, v)).collect());
        assert_eq!(h, FrozenHeaders::from(vec.clone()));
        assert_eq!(format!("{h:?}"), format!("{vec:?}"));
    }

    #[test]
    fn get_is_ascii_case_insensitive_and_returns_the_first() {
        let h = FrozenHeaders::from(awkward());
        assert_eq!(h.get("Content-Type"), Some(&b"application/json"[..]));
        assert_eq!(h.get("X-LATIN1"), Some(&b"caf\xe9"[..]));
        assert_eq!(h.get("x-requester"), Some("Zoë".as_bytes()));
        assert_eq!(h.get("X-LIST"), Some(&b"a, b, \"c, d\""[..]));
        assert_eq!(h.get("x-empty"), Some(&b""[..]));
        assert_eq!(h.get(""), Some(&b""[..]));
        assert_eq!(h.get("3:4:"), Some(&b"5:6:"[..]));
        assert_eq!(h.get("x-missing"), None);
        // Only ASCII folds: `É` is not `é`.
        let u: FrozenHeaders = [("é", "1")].into_iter().collect();
        assert_eq!(u.get("É"), None);
        assert_eq!(u.get("é"), Some(&b"1"[..]));
    }

    #[test]
    fn equality_is_that_of_the_pairs() {
        let a: FrozenHeaders = [("ab", "c")].into_iter().collect();
        let b: FrozenHeaders = [("a", "bc")].into_iter().collect();
        assert_ne!(a, b);
        let one: FrozenHeaders = [("a", "b")].into_iter().collect();
        let two: FrozenHeaders = [("a", "b"), ("a", "b")].into_iter().collect();
        assert_ne!(one, two);
        let mut grown = FrozenHeaders::with_capacity(10, 1000);
        grown.push("a", b"b");
        assert_eq!(grown, one);
    }

    #[test]
    fn sized_allocates_once_and_with_capacity_is_enough() {
        for vec in [
            awkward(),
            vec![("n".repeat(9), HeaderBytes::from(&*"v".repeat(991)))],
        ] {
            let bytes = vec.iter().map(|(n, v)| n.len() + v.as_bytes().len()).sum();
            let mut h = FrozenHeaders::with_capacity(vec.len(), bytes);
            let capacity = h.0.capacity();
            h.extend(vec.iter().map(|(n, v)| (n, v)));
            assert_eq!(h.0.capacity(), capacity, "reallocated");
            assert_eq!(FrozenHeaders::from(vec.clone()).0.capacity(), capacity);
        }
    }

    #[test]
    fn header_bytes_keeps_its_forms() {
        let latin1 = HeaderBytes::from(&http::HeaderValue::from_bytes(b"caf\xe9").unwrap());
        assert_eq!(format!("{latin1:?}"), "hex:636166e9");
        assert_eq!(format!("{:?}", HeaderBytes::from("Zoë")), "\"Zoë\"");
        let json = serde_json::to_string(&latin1).unwrap();
        assert_eq!(json, r#"{"hex":"636166e9"}"#);
        assert_eq!(serde_json::from_str::<HeaderBytes>(&json).unwrap(), latin1);
        assert_eq!(
            serde_json::from_str::<HeaderBytes>(r#""Zo\u00eb""#)
                .unwrap()
                .as_bytes(),
            "Zoë".as_bytes()
        );
    }
}
