//! The canonical form of a JSON body, written straight into the hasher: object keys sorted,
//! no whitespace, serde_json's own escaping.
//!
//! The direct writer ([`write_direct`]) takes documents whose objects already have their keys
//! in strictly increasing order (no repeats) and no escaped key: no `serde_json::Value`, no
//! string per token. Any other document (not JSON, keys out of order or repeated, an escaped
//! key) is refused and hashed through a `Value` ([`write_canonical`]), which sorts keys and
//! keeps the last of repeated ones.

use std::fmt;

use serde::Serialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use sha2::{Digest as _, Sha256};

/// Writes the canonical form of `body` into `h`; `false` if it must go through a `Value`
/// (`h` then holds a partial write and must be dropped).
pub(super) fn write_direct(body: &[u8], h: &mut Sha256) -> bool {
    let mut de = serde_json::Deserializer::from_slice(body);
    Canon(h).deserialize(&mut de).is_ok() && de.end().is_ok()
}

/// Writes one JSON value as the `Value` it parses into serializes.
struct Canon<'h>(&'h mut Sha256);

impl<'de> DeserializeSeed<'de> for Canon<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canon<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.update(b"null");
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        write_json(&v, self.0);
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        write_json(&v, self.0);
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        write_json(&v, self.0);
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        // As `Value`: a number that is not finite is `null`.
        write_json(&serde_json::Number::from_f64(v), self.0);
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        write_json(v, self.0);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.update(b"[");
        let mut first = true;
        // The separator is written by the element's seed: only when there is an element.
        while seq
            .next_element_seed(Element {
                h: &mut *self.0,
                first,
            })?
            .is_some()
        {
            first = false;
        }
        self.0.update(b"]");
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.update(b"{");
        let mut prev: Option<&'de str> = None;
        // Borrowed keys only: an escaped key fails here, and the document takes the
        // `Value` path.
        while let Some(key) = map.next_key::<&'de str>()? {
            // In order and unique, as a sorted map iterates them; serde_json's private keys
            // (arbitrary precision numbers, raw values) make a `Value` that differs.
            if prev.is_some_and(|p| p >= key) || key.starts_with("$serde_json::private::") {
                return Err(A::Error::custom("not in canonical key order"));
            }
            if prev.is_some() {
                self.0.update(b",");
            }
            write_json(key, self.0);
            self.0.update(b":");
            map.next_value_seed(Canon(&mut *self.0))?;
            prev = Some(key);
        }
        self.0.update(b"}");
        Ok(())
    }
}

/// One element of an array: its separator, then the value.
struct Element<'h> {
    h: &'h mut Sha256,
    first: bool,
}

impl<'de> DeserializeSeed<'de> for Element<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if !self.first {
            self.h.update(b",");
        }
        Canon(self.h).deserialize(d)
    }
}

/// Writes a JSON value in canonical form: object keys sorted, no whitespace. Keys and scalars
/// are written with serde_json's own escaping straight into the hasher (no string per token).
pub(super) fn write_canonical(value: &serde_json::Value, h: &mut Sha256) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let member = |i: usize, k: &String, v: &Value, h: &mut Sha256| {
                if i > 0 {
                    h.update(b",");
                }
                write_json(k, h);
                h.update(b":");
                write_canonical(v, h);
            };
            h.update(b"{");
            // serde_json's map iterates in key order unless its `preserve_order` feature is on
            // somewhere in the build: sort only when it does not.
            if map.keys().is_sorted() {
                for (i, (k, v)) in map.iter().enumerate() {
                    member(i, k, v, h);
                }
            } else {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                members.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (i, (k, v)) in members.into_iter().enumerate() {
                    member(i, k, v, h);
                }
            }
            h.update(b"}");
        }
        Value::Array(items) => {
            h.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    h.update(b",");
                }
                write_canonical(v, h);
            }
            h.update(b"]");
        }
        scalar => write_json(scalar, h),
    }
}

/// Serializes `v` as compact JSON into the hasher (`Sha256` is an `io::Write`).
fn write_json<T: Serialize + ?Sized>(v: &T, h: &mut Sha256) {
    // Writing into a hasher cannot fail, and these values always serialize.
    let _ = serde_json::to_writer(h, v);
}

#[cfg(test)]
mod tests {
    use sha2::Digest;

    use super::*;
    use crate::operation::{PayloadDigest, PayloadHash, canonical, hex};

    /// The direct canonical writer hashes every document it accepts exactly as the `Value`
    /// path does, and refuses those it cannot (keys out of order, repeated or escaped).
    #[test]
    fn direct_canonical_form_is_the_value_form() {
        let docs: &[(&[u8], bool)] = &[
            (br#"{"device_id":"E17","priority":"P2"}"#, true),
            (
                br#" { "a" : [ 1 , -2 , 3.5 , -0.0 , 1e2 , 18446744073709551615 , -9223372036854775808 ] } "#,
                true,
            ),
            (br#"{"a":{"b":{"c":[{},[],"",null,true,false]}},"b":0}"#, true),
            (
                r#"{"s":"\u00e9\"\n\t\\/ \ud83d\ude00 \u0001","t":"zoë"}"#.as_bytes(),
                true,
            ),
            (br#"[1,"x",{"a":1},[[]]]"#, true),
            (br#""just a string""#, true),
            (b"12.50e-3", true),
            (b"null", true),
            (br#"{"":1,"a":2}"#, true),
            // Out of order, repeated, escaped keys: the `Value` path.
            (br#"{"z":1,"a":2}"#, false),
            (br#"{"a":1,"a":2}"#, false),
            (br#"{"a":1,"b":{"d":1,"c":2}}"#, false),
            (br#"{"\u0061":1}"#, false),
            (br#"{"$serde_json::private::Number":"1"}"#, false),
            // Not JSON.
            (br#"{"a":1} trailing"#, false),
            (br#"{"a":"#, false),
            (b"not json \xff", false),
        ];
        for (doc, direct) in docs {
            let text = String::from_utf8_lossy(doc);
            let mut h = Sha256::new();
            let accepted = canonical::write_direct(doc, &mut h);
            assert_eq!(accepted, *direct, "{text}");
            if accepted {
                let value: serde_json::Value = serde_json::from_slice(doc).unwrap();
                let mut v = Sha256::new();
                write_canonical(&value, &mut v);
                assert_eq!(h.finalize(), v.finalize(), "{text}");
            }
            // Through `compute`, whichever path is taken, the hash of the `Value` form.
            let hash =
                PayloadHash::compute("POST", "http://vendor.test/t", doc, &PayloadDigest::Full);
            let mut via_value = Sha256::new();
            via_value.update(b"POST\nhttp://vendor.test/t\n");
            match serde_json::from_slice::<serde_json::Value>(doc) {
                Ok(value) => {
                    via_value.update(b"json:");
                    write_canonical(&value, &mut via_value);
                }
                Err(_) => {
                    via_value.update(b"raw:");
                    via_value.update(doc);
                }
            }
            assert_eq!(hash.as_str(), hex(&via_value.finalize()), "{text}");
        }
    }
}
