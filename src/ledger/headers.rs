//! [`StoredHeaders`]: a stored response's headers in one allocation.
//!
//! The layer stores the chosen headers of every authoritative vendor response, and the ledger
//! clones rows often. As a `Vec<(String, String)>` that cost one allocation for the vector and
//! two per header, at every store and every clone. Here every name and value shares one
//! `String`, each pair prefixed by the byte lengths of its name and value in decimal:
//!
//! ```text
//! 12:16:content-typeapplication/json4:29:dateTue, 01 Jul 2025 10:00:00 GMT
//! ```
//!
//! The lengths say where each string ends, so a name or value may hold any character (a `:`,
//! digits, a comma, a quote, a newline) without being mistaken for a boundary. The buffer is
//! private and only [`StoredHeaders::push`] writes it, so what is read back is always what
//! was pushed. Serialized, the headers are the same JSON array of `[name, value]` pairs the
//! `Vec<(String, String)>` produced, so stored rows read back unchanged.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::iter::FusedIterator;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde::ser::{Serialize, Serializer};

/// The headers kept with a [`StoredResponse`](super::StoredResponse): `(name, value)` pairs in
/// the order they came, duplicates kept, all in one heap buffer.
///
/// Any strings are accepted. Built once per stored response, read back when a caller asks
/// again. Serialized as a JSON array of `[name, value]` pairs, exactly as a
/// `Vec<(String, String)>` is.
///
/// Build one with [`push`](Self::push), [`collect`](Iterator::collect) or `From<Vec<(String,
/// String)>>`:
///
/// ```
/// use recoverable_write::ledger::StoredHeaders;
///
/// let mut headers = StoredHeaders::new();
/// headers.push("content-type", "application/json");
/// headers.push("request-id", "req_1");
/// headers.push("request-id", "req_2");
///
/// let same: StoredHeaders = [
///     ("content-type", "application/json"),
///     ("request-id", "req_1"),
///     ("request-id", "req_2"),
/// ]
/// .into_iter()
/// .collect();
/// assert_eq!(headers, same);
///
/// assert_eq!(headers.len(), 3);
/// assert_eq!(headers.get("Request-Id"), Some("req_1"));
/// let values: Vec<_> = headers.iter().map(|(_, v)| v).collect();
/// assert_eq!(values, ["application/json", "req_1", "req_2"]);
///
/// // The JSON a `Vec<(String, String)>` gives.
/// let json = serde_json::to_string(&headers).unwrap();
/// assert_eq!(
///     json,
///     r#"[["content-type","application/json"],["request-id","req_1"],["request-id","req_2"]]"#
/// );
/// assert_eq!(serde_json::from_str::<StoredHeaders>(&json).unwrap(), headers);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct StoredHeaders {
    /// For each pair: `{name length}:{value length}:{name}{value}`, lengths in bytes and in
    /// decimal. Equal sequences of pairs give equal buffers, and only equal ones.
    buf: String,
    /// Number of pairs.
    len: usize,
}

impl StoredHeaders {
    /// No headers, and no allocation.
    ///
    /// ```
    /// use recoverable_write::ledger::StoredHeaders;
    ///
    /// let headers = StoredHeaders::new();
    /// assert!(headers.is_empty());
    /// assert_eq!(serde_json::to_string(&headers).unwrap(), "[]");
    /// ```
    pub const fn new() -> Self {
        Self {
            buf: String::new(),
            len: 0,
        }
    }

    /// No headers yet, with room for `count` pairs whose names and values total `bytes` bytes:
    /// pushing them allocates once, here (nothing when both are 0).
    ///
    /// ```
    /// use recoverable_write::ledger::StoredHeaders;
    ///
    /// let pairs = [("content-type", "application/json"), ("date", "Tue, 01 Jul 2025 10:00:00 GMT")];
    /// let bytes = pairs.iter().map(|(n, v)| n.len() + v.len()).sum();
    /// let mut headers = StoredHeaders::with_capacity(pairs.len(), bytes);
    /// for (name, value) in pairs {
    ///     headers.push(name, value);
    /// }
    /// assert_eq!(headers.len(), 2);
    /// ```
    pub fn with_capacity(count: usize, bytes: usize) -> Self {
        // Each pair adds its two lengths (neither longer than `bytes`) and two `:`.
        let per_pair = 2 + 2 * decimal_digits(bytes);
        Self {
            buf: String::with_capacity(bytes.saturating_add(count.saturating_mul(per_pair))),
            len: 0,
        }
    }

    /// Appends `name: value` after the pairs already there (a repeated name is kept).
    ///
    /// ```
    /// use recoverable_write::ledger::StoredHeaders;
    ///
    /// let mut headers = StoredHeaders::new();
    /// headers.push("x-note", "a: 1, \"b\"\n");
    /// headers.push("x-note", "déjà vu");
    /// let pairs: Vec<_> = headers.iter().collect();
    /// assert_eq!(pairs, [("x-note", "a: 1, \"b\"\n"), ("x-note", "déjà vu")]);
    /// ```
    pub fn push(&mut self, name: &str, value: &str) {
        // Writing to a `String` cannot fail.
        let _ = write!(self.buf, "{}:{}:", name.len(), value.len());
        self.buf.push_str(name);
        self.buf.push_str(value);
        self.len += 1;
    }

    /// The `(name, value)` pairs in the order they were pushed.
    ///
    /// ```
    /// use recoverable_write::ledger::StoredHeaders;
    ///
    /// let headers = StoredHeaders::from(vec![("date".to_owned(), "today".to_owned())]);
    /// let mut it = headers.iter();
    /// assert_eq!(it.len(), 1);
    /// assert_eq!(it.next(), Some(("date", "today")));
    /// assert_eq!(it.next(), None);
    /// ```
    pub fn iter(&self) -> StoredHeadersIter<'_> {
        StoredHeadersIter {
            rest: &self.buf,
            remaining: self.len,
        }
    }

    /// Number of pairs (a repeated name counts once per value).
    ///
    /// ```
    /// use recoverable_write::ledger::StoredHeaders;
    ///
    /// let headers: StoredHeaders = [("a", "1"), ("a", "2")].into_iter().collect();
    /// assert_eq!(headers.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no pairs.
    ///
    /// ```
    /// use recoverable_write::ledger::StoredHeaders;
    ///
    /// assert!(StoredHeaders::default().is_empty());
    /// assert!(!StoredHeaders::from(vec![("a".to_owned(), String::new())]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first value stored under `name`, compared ASCII case-insensitively.
    ///
    /// ```
    /// use recoverable_write::ledger::StoredHeaders;
    ///
    /// let headers: StoredHeaders = [("request-id", "req_1"), ("Request-Id", "req_2")]
    ///     .into_iter()
    ///     .collect();
    /// assert_eq!(headers.get("REQUEST-ID"), Some("req_1"));
    /// assert_eq!(headers.get("date"), None);
    /// ```
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

/// `n`'s number of decimal digits.
fn decimal_digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// A length written by [`StoredHeaders::push`] and what follows its `:`.
fn split_len(s: &str) -> Option<(usize, &str)> {
    let (digits, rest) = s.split_once(':')?;
    Some((digits.parse().ok()?, rest))
}

/// The first pair [`StoredHeaders::push`] wrote at the start of `s`, and what follows it.
fn next_pair(s: &str) -> Option<(&str, &str, &str)> {
    let (name_len, rest) = split_len(s)?;
    let (value_len, rest) = split_len(rest)?;
    let (name, rest) = rest.split_at_checked(name_len)?;
    let (value, rest) = rest.split_at_checked(value_len)?;
    Some((name, value, rest))
}

/// The pairs of a [`StoredHeaders`], in order ([`StoredHeaders::iter`]).
///
/// ```
/// use recoverable_write::ledger::StoredHeaders;
///
/// let headers: StoredHeaders = [("a", "1"), ("b", "2")].into_iter().collect();
/// let names: Vec<&str> = (&headers).into_iter().map(|(name, _)| name).collect();
/// assert_eq!(names, ["a", "b"]);
/// ```
#[derive(Clone, Debug)]
pub struct StoredHeadersIter<'a> {
    rest: &'a str,
    remaining: usize,
}

impl<'a> Iterator for StoredHeadersIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        match next_pair(self.rest) {
            Some((name, value, rest)) => {
                self.rest = rest;
                self.remaining -= 1;
                Some((name, value))
            }
            // `push` wrote the buffer, so it always parses; were it ever not to, stop rather
            // than yield a wrong pair.
            None => {
                self.remaining = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for StoredHeadersIter<'_> {}

impl FusedIterator for StoredHeadersIter<'_> {}

impl<'a> IntoIterator for &'a StoredHeaders {
    type Item = (&'a str, &'a str);
    type IntoIter = StoredHeadersIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Debug for StoredHeaders {
    /// As the `Vec<(String, String)>` it replaces: `[("content-type", "application/json")]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Extend<(K, V)> for StoredHeaders {
    /// Pushes every pair, in order.
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        for (name, value) in pairs {
            self.push(name.as_ref(), value.as_ref());
        }
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for StoredHeaders {
    /// The pairs in order; the buffer grows as they come (see
    /// [`with_capacity`](StoredHeaders::with_capacity) to size it once).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut headers = Self::new();
        headers.extend(pairs);
        headers
    }
}

impl From<Vec<(String, String)>> for StoredHeaders {
    /// The same pairs in the same order, in a buffer sized once.
    fn from(pairs: Vec<(String, String)>) -> Self {
        let bytes = pairs.iter().map(|(n, v)| n.len() + v.len()).sum();
        let mut headers = Self::with_capacity(pairs.len(), bytes);
        headers.extend(pairs);
        headers
    }
}

impl Serialize for StoredHeaders {
    /// `[["name","value"],...]`, as `Vec<(String, String)>`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for StoredHeaders {
    /// What `Vec<(String, String)>` accepts: a sequence of two-element sequences of strings.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs;

        impl<'de> Visitor<'de> for Pairs {
            type Value = StoredHeaders;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence of [name, value] pairs")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut headers = StoredHeaders::new();
                while let Some((Text(name), Text(value))) = seq.next_element()? {
                    headers.push(&name, &value);
                }
                Ok(headers)
            }
        }

        deserializer.deserialize_seq(Pairs)
    }
}

/// A string borrowed from the input when it can be (no escapes), owned otherwise: decoding
/// copies each name and value once, into the buffer.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;

        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(s)))
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }

            fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }

        deserializer.deserialize_str(TextVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names and values a `,`/`:`/quote/digit separator scheme would trip over.
    fn awkward() -> Vec<(String, String)> {
        [
            ("content-type", "application/json"),
            ("x-list", "a, b, \"c, d\""),
            ("x-colon", "12:34:56"),
            ("3:4:", "5:6:"),
            ("", ""),
            ("x-empty", ""),
            ("x-unicode", "déjà vu — 東京 🦀"),
            ("x-escapes", "tab\there\nnewline\\back\u{0}nul"),
            ("x-list", "repeated"),
            ("X-List", "REPEATED"),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
    }

    fn pairs(h: &StoredHeaders) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn serializes_byte_for_byte_as_the_vec_it_replaces() {
        for vec in [Vec::new(), awkward()] {
            let old = serde_json::to_string(&vec).unwrap();
            let headers = StoredHeaders::from(vec.clone());
            assert_eq!(serde_json::to_string(&headers).unwrap(), old);
            assert_eq!(
                serde_json::to_value(&headers).unwrap(),
                serde_json::to_value(&vec).unwrap()
            );
            // What was stored as a Vec reads back as the same pairs, and round-trips.
            let decoded: StoredHeaders = serde_json::from_str(&old).unwrap();
            assert_eq!(decoded, headers);
            assert_eq!(pairs(&decoded), vec);
            assert_eq!(serde_json::to_string(&decoded).unwrap(), old);
            // From a reader (no borrowing possible) too.
            let read: StoredHeaders = serde_json::from_reader(old.as_bytes()).unwrap();
            assert_eq!(read, headers);
        }
    }

    #[test]
    fn decodes_a_stored_row() {
        let stored = r#"[["content-type","application/json"],["x-quote","say \"hi\", \u00e9"]]"#;
        let headers: StoredHeaders = serde_json::from_str(stored).unwrap();
        assert_eq!(
            pairs(&headers),
            [
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-quote".to_owned(), "say \"hi\", é".to_owned()),
            ]
        );
    }

    #[test]
    fn refuses_what_the_vec_refused() {
        for bad in [
            "{}",
            "[[\"a\"]]",
            "[[\"a\",\"b\",\"c\"]]",
            "[[\"a\",1]]",
            "[\"a\"]",
            "null",
        ] {
            assert!(
                serde_json::from_str::<StoredHeaders>(bad).is_err(),
                "{bad} accepted"
            );
            assert!(
                serde_json::from_str::<Vec<(String, String)>>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn empty_has_no_pairs_and_no_buffer() {
        let h = StoredHeaders::new();
        assert!(h.is_empty());
        assert_eq!(h.len(), 0);
        assert_eq!(h.iter().next(), None);
        assert_eq!(h.get(""), None);
        assert_eq!(h.buf.capacity(), 0);
        assert_eq!(h, StoredHeaders::default());
        assert_eq!(h, StoredHeaders::from(Vec::new()));
        assert_eq!(StoredHeaders::with_capacity(0, 0).buf.capacity(), 0);
        assert_eq!(format!("{h:?}"), "[]");
    }

    #[test]
    fn any_characters_come_back_as_pushed_in_order_with_duplicates() {
        let vec = awkward();
        let mut h = StoredHeaders::new();
        for (n, v) in &vec {
            h.push(n, v);
        }
        assert_eq!(h.len(), vec.len());
        assert_eq!(h.iter().len(), vec.len());
        assert_eq!(pairs(&h), vec);
        assert_eq!(h, vec.iter().map(|(n, v)| (n, v)).collect());
        assert_eq!(format!("{h:?}"), format!("{vec:?}"));
    }

    #[test]
    fn get_is_ascii_case_insensitive_and_returns_the_first() {
        let h = StoredHeaders::from(awkward());
        assert_eq!(h.get("Content-Type"), Some("application/json"));
        assert_eq!(h.get("X-LIST"), Some("a, b, \"c, d\""));
        assert_eq!(h.get("x-empty"), Some(""));
        assert_eq!(h.get(""), Some(""));
        assert_eq!(h.get("3:4:"), Some("5:6:"));
        assert_eq!(h.get("x-missing"), None);
        // Only ASCII folds: `É` is not `é`.
        let u: StoredHeaders = [("é", "1")].into_iter().collect();
        assert_eq!(u.get("É"), None);
        assert_eq!(u.get("é"), Some("1"));
    }

    #[test]
    fn equality_is_that_of_the_pairs() {
        let a: StoredHeaders = [("ab", "c")].into_iter().collect();
        let b: StoredHeaders = [("a", "bc")].into_iter().collect();
        assert_ne!(a, b);
        let one: StoredHeaders = [("a", "b")].into_iter().collect();
        let two: StoredHeaders = [("a", "b"), ("a", "b")].into_iter().collect();
        assert_ne!(one, two);
        let mut grown = StoredHeaders::with_capacity(10, 1000);
        grown.push("a", "b");
        assert_eq!(grown, one);
    }

    #[test]
    fn with_capacity_is_enough_for_what_it_was_sized_for() {
        for vec in [awkward(), vec![("n".repeat(9), "v".repeat(991))]] {
            let bytes = vec.iter().map(|(n, v)| n.len() + v.len()).sum();
            let mut h = StoredHeaders::with_capacity(vec.len(), bytes);
            let capacity = h.buf.capacity();
            h.extend(vec.iter().map(|(n, v)| (n, v)));
            assert_eq!(h.buf.capacity(), capacity, "reallocated");
            assert_eq!(StoredHeaders::from(vec.clone()).buf.capacity(), capacity);
        }
    }

    #[test]
    fn decimal_digits_counts() {
        for (n, d) in [(0, 1), (9, 1), (10, 2), (99, 2), (100, 3), (usize::MAX, 20)] {
            assert_eq!(decimal_digits(n), d, "{n}");
            assert_eq!(n.to_string().len(), d, "{n}");
        }
    }
}
