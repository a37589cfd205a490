//! [`InlineStr`]: a string of at most `N` bytes kept inline, without a heap allocation; a
//! longer one is shared behind an `Arc`.
//!
//! The identifiers the layer mints for every write (a 36-character idempotency key, a
//! 64-character payload hash) have a fixed length. Kept inline they cost no allocation when
//! made, and a copy is a plain copy of the bytes. Values of another length (a caller's own key,
//! a hash read back from an older row) are accepted as they are and shared.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::ser::{Serialize, Serializer};

/// A string kept inline up to `N` bytes (`N` at most 255), shared beyond. Compared, ordered,
/// hashed and serialized as its text, whichever way it is kept.
#[derive(Clone)]
pub(crate) enum InlineStr<const N: usize> {
    Inline { len: u8, buf: [u8; N] },
    Shared(Arc<str>),
}

impl<const N: usize> InlineStr<N> {
    /// `s`, inline when it fits.
    pub(crate) fn new(s: &str) -> Self {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= N => {
                let mut buf = [0u8; N];
                buf[..s.len()].copy_from_slice(s.as_bytes());
                Self::Inline { len, buf }
            }
            _ => Self::Shared(Arc::from(s)),
        }
    }

    /// `s`, inline when it fits; a longer one keeps its allocation (moved into the `Arc`).
    pub(crate) fn from_string(s: String) -> Self {
        if s.len() <= N {
            Self::new(&s)
        } else {
            Self::Shared(Arc::from(s))
        }
    }

    /// The text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Always whole: the bytes were copied from a `&str`.
            Self::Inline { len, buf } => {
                std::str::from_utf8(&buf[..usize::from(*len)]).unwrap_or_default()
            }
            Self::Shared(s) => s,
        }
    }
}

impl<const N: usize> std::ops::Deref for InlineStr<N> {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> PartialEq for InlineStr<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> Eq for InlineStr<N> {}

impl<const N: usize> PartialOrd for InlineStr<N> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for InlineStr<N> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl<const N: usize> Hash for InlineStr<N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl<const N: usize> fmt::Debug for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> Serialize for InlineStr<N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de, const N: usize> Deserialize<'de> for InlineStr<N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text<const N: usize>;

        impl<const N: usize> Visitor<'_> for Text<N> {
            type Value = InlineStr<N>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(InlineStr::new(v))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(InlineStr::from_string(v))
            }
        }

        deserializer.deserialize_str(Text::<N>)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;

    use super::*;

    fn hash_of(v: &impl Hash) -> u64 {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn short_strings_are_inline_and_long_ones_shared() {
        assert!(matches!(
            InlineStr::<4>::new("abcd"),
            InlineStr::Inline { .. }
        ));
        assert!(matches!(InlineStr::<4>::new(""), InlineStr::Inline { .. }));
        assert!(matches!(InlineStr::<4>::new("abcde"), InlineStr::Shared(_)));
        assert!(matches!(
            InlineStr::<4>::from_string("abcde".into()),
            InlineStr::Shared(_)
        ));
        // Past what a `u8` length holds: shared, never truncated.
        let long = "x".repeat(300);
        let s = InlineStr::<300>::new(&long);
        assert!(matches!(s, InlineStr::Shared(_)));
        assert_eq!(s.as_str(), long);
    }

    #[test]
    fn equality_order_and_hash_follow_the_text_not_the_representation() {
        let inline = InlineStr::<8>::new("zoë-1");
        let shared: InlineStr<8> = InlineStr::Shared(Arc::from("zoë-1"));
        assert_eq!(inline, shared);
        assert_eq!(hash_of(&inline), hash_of(&shared));
        assert_eq!(inline.as_str(), "zoë-1");
        assert!(InlineStr::<8>::new("a") < InlineStr::<8>::Shared(Arc::from("b")));
        assert_ne!(inline, InlineStr::<8>::new("zoë-2"));
    }

    #[test]
    fn serializes_as_its_text_and_reads_escaped_strings() {
        let s = InlineStr::<8>::new("a\"b");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#""a\"b""#);
        let back: InlineStr<8> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        let long: InlineStr<2> = serde_json::from_str(r#""abc""#).unwrap();
        assert_eq!(long.as_str(), "abc");
        assert!(serde_json::from_str::<InlineStr<8>>("12").is_err());
    }
}
