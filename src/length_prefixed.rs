//! `(name, value)` pairs in one buffer, each pair prefixed by its lengths: the layout shared by
//! [`StoredHeaders`](crate::ledger::StoredHeaders) (text values, in a `String`) and
//! [`FrozenHeaders`](crate::operation::FrozenHeaders) (byte values, in a `Vec<u8>`).
//!
//! A `Vec<(String, String)>` costs one allocation for the vector and two per pair, at every
//! build and every clone. Here every name and value shares one buffer, each pair written as
//! `{name length}:{value length}:{name}{value}`, lengths in bytes and in decimal:
//!
//! ```text
//! 12:16:content-typeapplication/json4:29:dateTue, 01 Jul 2025 10:00:00 GMT
//! ```
//!
//! The lengths say where each name and value ends, so either may hold any character or byte
//! (a `:`, digits, a comma, a quote, a newline, a NUL) without being mistaken for a boundary.
//! The buffer is private to [`LengthPrefixed`] and only [`LengthPrefixed::push`] writes it, so
//! what is read back is always what was pushed, and equal sequences of pairs give equal
//! buffers (and only equal ones).
//!
//! Also here, for the two types' serde forms (a sequence of `[name, value]` pairs, as the
//! `Vec` of tuples each replaces): [`deserialize_pairs`] and [`Text`].

use std::borrow::Cow;
use std::fmt;
use std::iter::FusedIterator;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

/// What a pair's name or value is read back as: `str` or `[u8]`.
pub(crate) trait Piece {
    /// Its bytes.
    fn byte_slice(&self) -> &[u8];
    /// Split after `mid` bytes; `None` past the end (or, for a `str`, inside a character).
    fn split(&self, mid: usize) -> Option<(&Self, &Self)>;
}

impl Piece for str {
    fn byte_slice(&self) -> &[u8] {
        self.as_bytes()
    }

    fn split(&self, mid: usize) -> Option<(&Self, &Self)> {
        self.split_at_checked(mid)
    }
}

impl Piece for [u8] {
    fn byte_slice(&self) -> &[u8] {
        self
    }

    fn split(&self, mid: usize) -> Option<(&Self, &Self)> {
        self.split_at_checked(mid)
    }
}

/// A buffer pairs are written into: `String` (of `str` pieces) or `Vec<u8>` (of `[u8]`).
pub(crate) trait Buffer: Default {
    /// What it holds.
    type Piece: Piece + ?Sized;
    /// An empty buffer with room for `bytes` bytes.
    fn with_capacity(bytes: usize) -> Self;
    /// Appends `{name}:{value}:`, the two numbers in decimal.
    fn push_lengths(&mut self, name: usize, value: usize);
    /// Appends `piece`.
    fn push_piece(&mut self, piece: &Self::Piece);
    /// All of it.
    fn as_piece(&self) -> &Self::Piece;
    /// Bytes it has room for.
    #[cfg(test)]
    fn capacity(&self) -> usize;
}

impl Buffer for String {
    type Piece = str;

    fn with_capacity(bytes: usize) -> Self {
        String::with_capacity(bytes)
    }

    fn push_lengths(&mut self, name: usize, value: usize) {
        let mut digits = itoa::Buffer::new();
        self.push_str(digits.format(name));
        self.push(':');
        self.push_str(digits.format(value));
        self.push(':');
    }

    fn push_piece(&mut self, piece: &str) {
        self.push_str(piece);
    }

    fn as_piece(&self) -> &str {
        self
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        String::capacity(self)
    }
}

impl Buffer for Vec<u8> {
    type Piece = [u8];

    fn with_capacity(bytes: usize) -> Self {
        Vec::with_capacity(bytes)
    }

    fn push_lengths(&mut self, name: usize, value: usize) {
        let mut digits = itoa::Buffer::new();
        self.extend_from_slice(digits.format(name).as_bytes());
        self.push(b':');
        self.extend_from_slice(digits.format(value).as_bytes());
        self.push(b':');
    }

    fn push_piece(&mut self, piece: &[u8]) {
        self.extend_from_slice(piece);
    }

    fn as_piece(&self) -> &[u8] {
        self
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        Vec::capacity(self)
    }
}

/// `(name, value)` pairs in order, duplicates kept, in one buffer `B` (see the module docs).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct LengthPrefixed<B> {
    /// For each pair: `{name length}:{value length}:{name}{value}`.
    buf: B,
    /// Number of pairs.
    len: usize,
}

impl<B> LengthPrefixed<B> {
    /// No pairs, in `empty` (which is empty): no allocation when `empty` has none.
    pub(crate) const fn new(empty: B) -> Self {
        Self { buf: empty, len: 0 }
    }

    /// Number of pairs.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no pairs.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<B: Buffer> LengthPrefixed<B> {
    /// No pairs yet, with room for `count` pairs whose names and values total `bytes` bytes:
    /// pushing them allocates once, here (nothing when both are 0).
    pub(crate) fn with_capacity(count: usize, bytes: usize) -> Self {
        // Each pair adds its two lengths (neither longer than `bytes`) and two `:`.
        let per_pair = 2 + 2 * decimal_digits(bytes);
        Self {
            buf: B::with_capacity(bytes.saturating_add(count.saturating_mul(per_pair))),
            len: 0,
        }
    }

    /// The pairs `pairs()` yields, in a buffer sized once: `pairs` is called twice, first to
    /// sum the lengths.
    pub(crate) fn sized<'p, I>(pairs: impl Fn() -> I) -> Self
    where
        I: Iterator<Item = (&'p B::Piece, &'p B::Piece)>,
        B::Piece: 'p,
    {
        let (count, bytes) = pairs().fold((0, 0), |(count, bytes), (name, value)| {
            (
                count + 1,
                bytes + name.byte_slice().len() + value.byte_slice().len(),
            )
        });
        let mut sized = Self::with_capacity(count, bytes);
        for (name, value) in pairs() {
            sized.push(name, value);
        }
        sized
    }

    /// Appends a pair after those already there.
    pub(crate) fn push(&mut self, name: &B::Piece, value: &B::Piece) {
        self.buf
            .push_lengths(name.byte_slice().len(), value.byte_slice().len());
        self.buf.push_piece(name);
        self.buf.push_piece(value);
        self.len += 1;
    }

    /// The pairs in the order they were pushed.
    pub(crate) fn iter(&self) -> Pairs<'_, B::Piece> {
        Pairs {
            rest: self.buf.as_piece(),
            remaining: self.len,
        }
    }

    /// The value of the first pair named `name`, compared ASCII case-insensitively.
    pub(crate) fn get(&self, name: &[u8]) -> Option<&B::Piece> {
        self.iter()
            .find(|(n, _)| n.byte_slice().eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Bytes the buffer has room for.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

/// `n`'s number of decimal digits.
fn decimal_digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// A length written by [`LengthPrefixed::push`] and what follows its `:`.
fn split_len<P: Piece + ?Sized>(s: &P) -> Option<(usize, &P)> {
    let colon = s.byte_slice().iter().position(|&b| b == b':')?;
    let len = std::str::from_utf8(&s.byte_slice()[..colon])
        .ok()?
        .parse()
        .ok()?;
    // `:` is one byte, so this splits between characters.
    let (_, rest) = s.split(colon + 1)?;
    Some((len, rest))
}

/// The first pair [`LengthPrefixed::push`] wrote at the start of `s`, and what follows it.
fn next_pair<P: Piece + ?Sized>(s: &P) -> Option<(&P, &P, &P)> {
    let (name_len, rest) = split_len(s)?;
    let (value_len, rest) = split_len(rest)?;
    let (name, rest) = rest.split(name_len)?;
    let (value, rest) = rest.split(value_len)?;
    Some((name, value, rest))
}

/// The pairs of a [`LengthPrefixed`], in order ([`LengthPrefixed::iter`]).
#[derive(Debug)]
pub(crate) struct Pairs<'a, P: ?Sized> {
    rest: &'a P,
    remaining: usize,
}

impl<P: ?Sized> Pairs<'_, P> {
    /// Yields nothing more.
    pub(crate) fn end(&mut self) {
        self.remaining = 0;
    }
}

impl<P: ?Sized> Clone for Pairs<'_, P> {
    fn clone(&self) -> Self {
        Self {
            rest: self.rest,
            remaining: self.remaining,
        }
    }
}

impl<'a, P: Piece + ?Sized> Iterator for Pairs<'a, P> {
    type Item = (&'a P, &'a P);

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

impl<P: Piece + ?Sized> ExactSizeIterator for Pairs<'_, P> {}

impl<P: Piece + ?Sized> FusedIterator for Pairs<'_, P> {}

/// Reads what a `Vec<(N, V)>` accepts, a sequence of two-element sequences, handing each
/// `(name, value)` to `push` on `out` in order.
pub(crate) fn deserialize_pairs<'de, D, N, V, T>(
    deserializer: D,
    out: T,
    push: fn(&mut T, N, V),
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    N: Deserialize<'de>,
    V: Deserialize<'de>,
{
    struct PairsVisitor<N, V, T> {
        out: T,
        push: fn(&mut T, N, V),
        _pair: PhantomData<fn() -> (N, V)>,
    }

    impl<'de, N: Deserialize<'de>, V: Deserialize<'de>, T> Visitor<'de> for PairsVisitor<N, V, T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence of [name, value] pairs")
        }

        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<T, A::Error> {
            while let Some((name, value)) = seq.next_element::<(N, V)>()? {
                (self.push)(&mut self.out, name, value);
            }
            Ok(self.out)
        }
    }

    deserializer.deserialize_seq(PairsVisitor {
        out,
        push,
        _pair: PhantomData,
    })
}

/// A string borrowed from the input when it can be (no escapes), owned otherwise: decoding
/// copies each name and value once, into the buffer.
pub(crate) struct Text<'de>(pub(crate) Cow<'de, str>);

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

    #[test]
    fn decimal_digits_counts() {
        for (n, d) in [(0, 1), (9, 1), (10, 2), (99, 2), (100, 3), (usize::MAX, 20)] {
            assert_eq!(decimal_digits(n), d, "{n}");
            assert_eq!(n.to_string().len(), d, "{n}");
        }
    }

    #[test]
    fn both_buffers_hold_the_same_layout() {
        let mut text = LengthPrefixed::new(String::new());
        let mut bytes = LengthPrefixed::new(Vec::new());
        for (n, v) in [
            ("content-type", "application/json"),
            ("3:4:", "5:6:"),
            ("", "é"),
        ] {
            text.push(n, v);
            bytes.push(n.as_bytes(), v.as_bytes());
        }
        assert_eq!(text.buf.as_bytes(), &bytes.buf[..]);
        assert_eq!(
            text.buf,
            "12:16:content-typeapplication/json4:4:3:4:5:6:0:2:é"
        );
        let back: Vec<_> = bytes.iter().collect();
        assert_eq!(
            back,
            [
                (&b"content-type"[..], &b"application/json"[..]),
                (b"3:4:", b"5:6:"),
                (b"", "é".as_bytes()),
            ]
        );
    }

    #[test]
    fn a_malformed_buffer_ends_the_pairs() {
        for bad in ["", "x", "1:", "1:1:a", "2:0:a", "a:0:", "1:1:ab2:"] {
            let pairs = Pairs {
                rest: bad,
                remaining: 2,
            };
            assert!(pairs.clone().count() <= 1, "{bad}");
            let mut pairs = pairs;
            while pairs.next().is_some() {}
            assert_eq!(pairs.len(), 0, "{bad}");
            assert_eq!(pairs.next(), None);
        }
        // A length that splits a character is refused by `str`, not read as a wrong pair.
        let split_char = Pairs {
            rest: "1:0:é",
            remaining: 1,
        };
        assert_eq!(split_char.count(), 0);
    }
}
