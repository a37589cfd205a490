//! The configuration as written: what serde reads (tables refused in any other form, unknown
//! keys refused), before `extends` is resolved, and serde's errors turned into key paths.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_path_to_error::Segment;

use super::error::{ConfigError, ConfigErrorKind};
use super::key_segment;
use crate::contract::rules::Rule;
use crate::contract::{KeyPlacement, Lookup, RemoteRef, Replay};
use crate::operation::PayloadDigest;

/// A configuration as written: what serde reads, before `extends` is resolved.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSpec {
    pub(super) default: Option<DefaultSpec>,
    #[serde(default, deserialize_with = "some_tables")]
    pub(super) route: Option<Vec<RouteSpec>>,
    #[serde(default, deserialize_with = "some_tables")]
    pub(super) routes: Option<Vec<RouteSpec>>,
    #[serde(default, deserialize_with = "named_tables")]
    pub(super) contracts: BTreeMap<String, ContractSpec>,
}

/// A route as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RouteSpec {
    pub(super) host: String,
    pub(super) path_prefix: Option<String>,
    pub(super) method: Option<String>,
    pub(super) contract: String,
}

/// A contract table as written: every key optional, each one set replaces (or, for
/// `extra_rules` and the secrets, adds to) what the table `extends`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContractSpec {
    pub(super) extends: Option<String>,
    pub(super) name: Option<String>,
    pub(super) key: Option<KeyPlacement>,
    pub(super) max_key_len: Option<usize>,
    pub(super) retention_secs: Option<u64>,
    pub(super) replay: Option<Replay>,
    #[serde(default, deserialize_with = "some_tables")]
    pub(super) rules: Option<Vec<Rule>>,
    #[serde(default, deserialize_with = "tables")]
    pub(super) extra_rules: Vec<Rule>,
    pub(super) remote_ref: Option<RemoteRef>,
    #[serde(default)]
    pub(super) secret_headers: Vec<String>,
    #[serde(default)]
    pub(super) secret_query_params: Vec<String>,
    #[serde(default)]
    pub(super) secret_body_fields: Vec<String>,
    pub(super) replay_supplies_body_secrets: Option<bool>,
    #[serde(default)]
    pub(super) secret_response_fields: Vec<String>,
    #[serde(default)]
    pub(super) secret_path_segments: Vec<String>,
    pub(super) replay_supplies_path_secrets: Option<bool>,
    #[serde(default, deserialize_with = "digest")]
    pub(super) digest: Option<PayloadDigest>,
    pub(super) lookup: Option<Lookup>,
    pub(super) settle_secs: Option<u64>,
    pub(super) keep_details_secs: Option<u64>,
    pub(super) keep_identity_secs: Option<u64>,
}

/// `default`: a contract table, or the name of a contract.
pub(super) enum DefaultSpec {
    Name(String),
    Table(Box<ContractSpec>),
}

impl<'de> Deserialize<'de> for DefaultSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DefaultSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a contract table or a contract name")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<DefaultSpec, E> {
                Ok(DefaultSpec::Name(v.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DefaultSpec, A::Error> {
                let table = ContractSpec::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(DefaultSpec::Table(Box::new(table)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A table, refused in any other form (a derived struct would also take an array, by position).
struct Table<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Table<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Table<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Table<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Table)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// Tables, read as a list of [`Table`]s.
fn tables<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    let list = Vec::<Table<T>>::deserialize(d)?;
    Ok(list.into_iter().map(|t| t.0).collect())
}

/// [`tables`], for a key that may be absent.
fn some_tables<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    tables(d).map(Some)
}

/// Named tables (`contracts`), sorted by name: the order in which contracts are resolved (and
/// errors found) is stable.
fn named_tables<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<BTreeMap<String, T>, D::Error> {
    let map = BTreeMap::<String, Table<T>>::deserialize(d)?;
    Ok(map.into_iter().map(|(k, t)| (k, t.0)).collect())
}

/// A digest as written: `{ mode = "full" }` or `{ mode = "fields", pointers = [...] }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DigestSpec {
    mode: DigestMode,
    pointers: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum DigestMode {
    Full,
    Fields,
}

/// A [`DigestSpec`] into a [`PayloadDigest`].
fn digest<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PayloadDigest>, D::Error> {
    let spec = Table::<DigestSpec>::deserialize(d)?.0;
    match (spec.mode, spec.pointers) {
        (DigestMode::Full, None) => Ok(Some(PayloadDigest::Full)),
        (DigestMode::Fields, Some(p)) => Ok(Some(PayloadDigest::Fields(p))),
        (DigestMode::Fields, None) => Err(de::Error::missing_field("pointers")),
        (DigestMode::Full, Some(_)) => Err(de::Error::custom(
            "`pointers` is only for `mode = \"fields\"`",
        )),
    }
}

/// Reads the parsed text into its spec; a serde error becomes a [`ConfigError`] with the key
/// path where it happened.
pub(super) fn read_spec(value: Value, origin: &str) -> Result<FileSpec, ConfigError> {
    serde_path_to_error::deserialize(value)
        .map(|t: Table<FileSpec>| t.0)
        .map_err(|e| {
            let mut path = String::new();
            let mut last = None;
            for segment in e.path() {
                match segment {
                    Segment::Seq { index } => path.push_str(&format!("[{index}]")),
                    Segment::Map { key } => {
                        if !path.is_empty() {
                            path.push('.');
                        }
                        path.push_str(&key_segment(key));
                    }
                    Segment::Enum { .. } | Segment::Unknown => {}
                }
                last = Some(segment);
            }
            let message = serde_message(e.inner());
            // "missing field `x`": reported at the table; the key path names the field.
            if let Some((name, "")) = message.strip_prefix("missing field ").and_then(quoted) {
                let key = join(&path, name);
                return ConfigError::new(origin, key, ConfigErrorKind::Missing);
            }
            // "unknown field `x`, expected one of `a`, `b`": the path ends at the key when the
            // table was read key by key (a tagged enum's content is read whole: its path stops at
            // the enum, and the serde message, which names the key, is kept as it is).
            if let Some((name, rest)) = message.strip_prefix("unknown field ").and_then(quoted)
                && matches!(last, Some(Segment::Map { key }) if key == name)
            {
                let expected = rest
                    .trim_start_matches(", expected ")
                    .trim_start_matches("one of ")
                    .split(['`', ','])
                    .map(str::trim)
                    .filter(|s| !s.is_empty() && *s != "or")
                    .collect::<Vec<_>>()
                    .join(", ");
                return ConfigError::new(origin, path, ConfigErrorKind::UnknownKey { expected });
            }
            ConfigError::new(origin, path, ConfigErrorKind::Invalid(message))
        })
}

/// "`name`rest" into `name` and the rest.
fn quoted(s: &str) -> Option<(&str, &str)> {
    s.strip_prefix('`')?.split_once('`')
}

/// `path.name` (or `name` at the top level).
fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        key_segment(name)
    } else {
        format!("{path}.{}", key_segment(name))
    }
}

/// A serde message in the configuration's words: without a position suffix (positions in a
/// re-read value mean nothing), with TOML's names for arrays and tables.
fn serde_message(e: &serde_json::Error) -> String {
    let m = e.to_string();
    let m = m.rsplit_once(" at line ").map_or(m.as_str(), |(m, _)| m);
    let m = m
        .replace("invalid type: sequence", "invalid type: array")
        .replace("invalid type: map", "invalid type: table")
        .replace("expected a sequence", "expected an array")
        .replace("expected a map", "expected a table");
    crate::contract::classify::truncate(&m, 512)
}
