//! JSON into a [`Value`], refusing what a JSON parser would accept silently: an object with the
//! same key twice (the parser keeps one of the values), and `null` (no key of the configuration
//! takes one: a `null` would read as "not set", where TOML cannot even say it).

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::key_segment;

/// What the parser refused in valid JSON, at a key path.
pub(super) enum Refused {
    /// The key path names a key seen twice in one object.
    Duplicate(String),
    /// The value at the key path is `null`.
    Null(String),
}

/// Parses `text`. On error, the second item says what was refused in valid JSON, if that is
/// what failed (the serde error then carries its position).
pub(super) fn parse(text: &str) -> Result<Value, (serde_json::Error, Option<Refused>)> {
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let seed = Strict {
        path: String::new(),
        duplicate: &duplicate,
    };
    // serde_json's recursion limit still applies: deep nesting is an error, not a crash.
    let value = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    value.map_err(|e| (e, duplicate.into_inner()))
}

/// Builds a `Value` like serde_json's own, but with the key path of each value so that a
/// duplicate key or a `null` can be named.
struct Strict<'a> {
    path: String,
    duplicate: &'a RefCell<Option<Refused>>,
}

impl Strict<'_> {
    fn at(&self, segment: &str) -> String {
        if self.path.is_empty() {
            segment.to_owned()
        } else {
            format!("{}.{segment}", self.path)
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        *self.duplicate.borrow_mut() = Some(Refused::Null(self.path));
        Err(E::custom("null"))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let seed = Strict {
                path: format!("{}[{}]", self.path, out.len()),
                duplicate: self.duplicate,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = self.at(&key_segment(&key));
            if out.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(Refused::Duplicate(path));
                return Err(de::Error::custom("duplicate key"));
            }
            let value = map.next_value_seed(Strict {
                path,
                duplicate: self.duplicate,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}
