//! [`StoredHeaders`]: a stored response's headers in one allocation.
//!
//! The layer stores the chosen headers of every authoritative vendor response, and the ledger
//! clones rows often. As a `Vec<(String, String)>` that cost one allocation for the vector and
//! two per header, at every store and every clone. Here every name and value shares one
//! `String`, each pair prefixed by the byte lengths of its name and value in decimal (the
//! layout [`FrozenHeaders`](crate::operation::FrozenHeaders) uses too):
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

use std::fmt;
use std::iter::FusedIterator;

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};

use crate::length_prefixed::{LengthPrefixed, Pairs, Text, deserialize_pairs};

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
pub struct StoredHeaders(LengthPrefixed<String>);

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
        Self(LengthPrefixed::new(String::new()))
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
        Self(LengthPrefixed::with_capacity(count, bytes))
    }

    /// The pairs `pairs()` yields, in a buffer sized once: `pairs` is called twice, first to
    /// sum the lengths.
    pub(crate) fn sized<'p, I: Iterator<Item = (&'p str, &'p str)>>(pairs: impl Fn() -> I) -> Self {
        Self(LengthPrefixed::sized(pairs))
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
        self.0.push(name, value);
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
        StoredHeadersIter(self.0.iter())
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
        self.0.len()
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
        self.0.is_empty()
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
        self.0.get(name.as_bytes())
    }
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
pub struct StoredHeadersIter<'a>(Pairs<'a, str>);

impl<'a> Iterator for StoredHeadersIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
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
        Self::sized(|| pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())))
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
        deserialize_pairs(
            deserializer,
            Self::new(),
            |headers, Text(name), Text(value)| headers.push(&name, &value),
        )
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
        assert_eq!(h.0.capacity(), 0);
        assert_eq!(h, StoredHeaders::default());
        assert_eq!(h, StoredHeaders::from(Vec::new()));
        assert_eq!(StoredHeaders::with_capacity(0, 0).0.capacity(), 0);
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
            let capacity = h.0.capacity();
            h.extend(vec.iter().map(|(n, v)| (n, v)));
            assert_eq!(h.0.capacity(), capacity, "reallocated");
            assert_eq!(StoredHeaders::from(vec.clone()).0.capacity(), capacity);
        }
    }
}
