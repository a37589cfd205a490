//! Contracts as configuration: routes and contracts read from TOML or JSON.
//!
//! # Shape
//!
//! ```toml
//! # Optional: the contract for requests no route matches. Absent: the conservative default.
//! # A table (a contract, as below) or the name of a contract: `default = "ietf-draft"`.
//! [default]
//! extends = "conservative"
//!
//! # Routes: the most specific matching one wins (see `Target`).
//! [[route]]
//! host = "api.stripe.com"
//! path_prefix = "/v1"          # optional, segment-aware
//! method = "POST"              # optional
//! contract = "stripe-charges"  # a contract of this file, or a built-in profile name
//!
//! [contracts.stripe-charges]
//! extends = "stripe-v1"        # a built-in profile or another contract of this file
//! remote_ref = { pointer = "/id", required = true }
//! digest = { mode = "fields", pointers = ["/amount", "/currency", "/customer"] }
//!
//! [[contracts.stripe-charges.extra_rules]]   # tried before the inherited rules
//! status = 402
//! body = { pointer = "/error/code", equals = "card_declined" }
//! evidence = "rejected"
//! ```
//!
//! JSON has the same shape (`{"default": {...}, "route": [...], "contracts": {...}}`; `routes`
//! is accepted for `route`).
//!
//! # Merging with `extends`
//!
//! A contract starts from the contract it `extends` (from [`conservative`] when it names none)
//! and each key it sets replaces the inherited value as a whole: `key`, `remote_ref`, `digest`
//! and `lookup` are not merged field by field, and `rules` replaces the inherited rules. Some keys
//! add instead of replacing:
//!
//! - `extra_rules` are put *before* the rules (inherited or given), so they are tried first and
//!   override the profile for the responses they match;
//! - the secrets (`secret_headers`, `secret_query_params`, `secret_body_fields`,
//!   `secret_response_fields`, `secret_path_segments`) are added to the inherited ones: an
//!   override can never turn a secret back into a stored value.
//!
//! The contract's `name` (frozen on every operation row) is the table's key unless `name` is
//! given. `extends` names a contract of the file first, then a built-in profile
//! ([`profiles::by_name`]); a contract that extends its own table key
//! (`[contracts.stripe-v1] extends = "stripe-v1"`) means the built-in one; extending its own
//! name when there is no such built-in is refused ([`ConfigErrorKind::ExtendsItself`]). Cycles
//! are refused, and so is a chain of more than [`MAX_EXTENDS_DEPTH`] contracts of the file
//! (resolution is iterative: a long chain is an error, never a stack overflow).
//!
//! # Size
//!
//! Loading is linear in the size of the file: each contract is resolved once, and routes that
//! name the same contract share it (and its [reference](super::Contract::reference)).
//! Selection looks only at the routes that can match: the request's host and the wildcards of
//! its parent domains, under the path's own segment prefixes (see [`Contracts`]).
//!
//! # Errors
//!
//! Loading never panics. Every [`ConfigError`] names the origin (the file path, or the origin
//! string given), the key path (`contracts.stripe-charges.rules[1].status`) and what is wrong;
//! syntax errors carry the line and column. A JSON object with the same key twice is refused
//! with the key path and position (TOML parsers refuse duplicates themselves), and so is a JSON
//! `null` (TOML has none: leave the key out). The file is read by serde derives (each table
//! refuses unknown keys and names the ones it takes) through `serde_path_to_error` (the key path). Every resulting contract is
//! [validated](super::Contract::validate), and an `aws-ec2` contract with a field digest must
//! keep the zone in it ([`EC2_SCOPE_POINTERS`](super::profiles::EC2_SCOPE_POINTERS)).
//!
//! [`conservative`]: super::profiles::conservative

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use http::Method;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_path_to_error::Segment;

use super::ContractRef;
use super::error::ContractErrorKind;
use super::profiles;
use super::registry::{Contracts, Target};
use super::rules::Rule;
use super::{Contract, KeyPlacement, Lookup, RemoteRef, Replay};
use crate::operation::PayloadDigest;

/// The longest `extends` chain of a file's contracts, the contract itself included (built-in
/// profiles are not counted). Deeper nesting is refused with [`ConfigErrorKind::ExtendsTooDeep`].
pub const MAX_EXTENDS_DEPTH: usize = 32;

/// A configuration that cannot be loaded: where, which key, and what is wrong.
///
/// Displayed as `contracts.toml: contracts.stripe-charges.rules[1].status: <what is wrong>`,
/// or `contracts.toml:3:7: <syntax error>` for a syntax error. It never quotes a value longer
/// than a name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    origin: String,
    key: String,
    kind: ConfigErrorKind,
}

/// What is wrong, for [`ConfigError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file could not be read.
    #[error("cannot read the file: {0}")]
    Io(String),
    /// The file name does not end in `.toml` or `.json`.
    #[error("unknown configuration format `{0}`: the file name must end in `.toml` or `.json`")]
    UnknownFormat(String),
    /// The text is not valid TOML or JSON.
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A key that the configuration does not know (a typo would otherwise fall back silently).
    #[error("unknown key; expected one of: {expected}")]
    UnknownKey {
        /// The keys allowed here.
        expected: String,
    },
    /// A required key is absent.
    #[error("missing required key")]
    Missing,
    /// A value of the wrong type or form.
    #[error("invalid value: {0}")]
    Invalid(String),
    /// A name that is neither a contract of the file nor a built-in profile.
    #[error(
        "no contract named `{name}` in this file and no such built-in profile (built-in: {builtin})"
    )]
    UnknownContract {
        /// The name given.
        name: String,
        /// The built-in profile names.
        builtin: String,
    },
    /// Contracts that extend each other in a circle.
    #[error("`extends` forms a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    /// A contract that extends its own name when no built-in profile has that name.
    #[error(
        "contract `{name}` extends itself: a contract may extend its own name only to refine the built-in profile of that name (built-in: {builtin})"
    )]
    ExtendsItself {
        /// The contract's name.
        name: String,
        /// The built-in profile names.
        builtin: String,
    },
    /// An `extends` chain with more than [`MAX_EXTENDS_DEPTH`] contracts of the file.
    #[error(
        "the `extends` chain is more than {limit} contracts deep: {} -> ...",
        .chain.join(" -> ")
    )]
    ExtendsTooDeep {
        /// The chain from the contract at fault down, its first `limit + 1` names.
        chain: Vec<String>,
        /// The limit, [`MAX_EXTENDS_DEPTH`].
        limit: usize,
    },
    /// The resulting contract is not usable.
    #[error("{0}")]
    Contract(ContractErrorKind),
    /// A route's target is malformed.
    #[error("invalid target: {0}")]
    InvalidTarget(String),
    /// A JSON object with the same key twice (JSON parsers keep one of the values silently).
    /// The error's key path names the repeated key.
    #[error(
        "duplicate key at line {line}, column {column}: only one value would be kept, silently"
    )]
    DuplicateKey {
        /// 1-based line of the second occurrence.
        line: usize,
        /// 1-based column just after it.
        column: usize,
    },
    /// Two routes with the same target.
    #[error("the same target as route[{0}]")]
    DuplicateRoute(usize),
    /// Two different contracts with the same name (recovery finds a frozen contract by name).
    #[error("the name `{0}` is used by two different contracts")]
    DuplicateName(String),
    /// An `aws-ec2` contract whose field digest leaves the zone out of the operation identity.
    #[error(
        "an aws-ec2 field digest must include {} (the ClientToken is zonal: a failover to another zone must not look like the same operation)",
        .0.join(" and ")
    )]
    Ec2ScopeMissing(Vec<String>),
}

impl ConfigError {
    fn new(origin: &str, key: impl Into<String>, kind: ConfigErrorKind) -> Self {
        Self {
            origin: origin.to_owned(),
            key: key.into(),
            kind,
        }
    }

    /// The file path or origin string the configuration came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The key path at fault (`contracts.stripe-charges.rules[1].status`, `route[0].host`);
    /// empty for an error about the whole text (a syntax error, an unreadable file).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// What is wrong.
    pub fn kind(&self) -> &ConfigErrorKind {
        &self.kind
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ConfigErrorKind::Syntax {
                line,
                column,
                message,
            } => write!(
                f,
                "{}:{line}:{column}: syntax error: {message}",
                self.origin
            ),
            kind if self.key.is_empty() => write!(f, "{}: {kind}", self.origin),
            kind => write!(f, "{}: {}: {kind}", self.origin, self.key),
        }
    }
}

impl Contracts {
    /// Reads routes and contracts from TOML text. `origin` names the text in errors (a file
    /// path, `"env CONTRACTS"`, ...). See the [module docs](crate::contract::config) for the shape.
    ///
    /// ```
    /// use http::{Method, Uri};
    /// use recoverable_write::contract::Contracts;
    ///
    /// let contracts = Contracts::from_toml_str(
    ///     r#"
    ///     [[route]]
    ///     host = "api.stripe.com"
    ///     method = "POST"
    ///     contract = "charges"
    ///
    ///     [contracts.charges]
    ///     extends = "stripe-v1"
    ///     digest = { mode = "fields", pointers = ["/amount", "/currency"] }
    ///     "#,
    ///     "inline",
    /// )?;
    /// let uri: Uri = "https://api.stripe.com/v1/charges".parse()?;
    /// let charges = contracts.select(&Method::POST, &uri);
    /// assert_eq!(charges.name, "charges");
    /// assert_eq!(charges.retention_secs, Some(86_400)); // from stripe-v1
    ///
    /// let err = Contracts::from_toml_str("[contracts.x]\nretenton_secs = 5", "inline").unwrap_err();
    /// assert_eq!(err.key(), "contracts.x.retenton_secs");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let value: Value = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map_or((1, 1), |span| line_column(text, span.start));
            ConfigError::new(
                origin,
                "",
                ConfigErrorKind::Syntax {
                    line,
                    column,
                    message: e.message().trim().to_owned(),
                },
            )
        })?;
        build(value, origin)
    }

    /// Reads routes and contracts from JSON text, in the same shape as
    /// [`Contracts::from_toml_str`].
    ///
    /// An object with the same key twice is refused ([`ConfigErrorKind::DuplicateKey`], with the
    /// key path and position), where a JSON parser would keep one of the values silently; so is
    /// a `null` (no key takes one, and TOML has none: leave the key out).
    pub fn from_json_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let value: Value = strict_json::parse(text).map_err(|(e, refused)| {
            let (line, column) = (e.line(), e.column());
            match refused {
                Some(Refused::Duplicate(key)) => {
                    let kind = ConfigErrorKind::DuplicateKey { line, column };
                    return ConfigError::new(origin, key, kind);
                }
                Some(Refused::Null(key)) => {
                    let why = format!("`null` at line {line}, column {column}: leave the key out");
                    return ConfigError::new(origin, key, ConfigErrorKind::Invalid(why));
                }
                None => {}
            }
            let message = e.to_string();
            // serde_json appends " at line L column C"; the position is kept separately.
            let message = message
                .rsplit_once(" at line ")
                .map_or(message.as_str(), |(m, _)| m)
                .to_owned();
            ConfigError::new(
                origin,
                "",
                ConfigErrorKind::Syntax {
                    line: e.line(),
                    column: e.column(),
                    message,
                },
            )
        })?;
        build(value, origin)
    }

    /// Reads a `.toml` or `.json` file (chosen by the extension). Errors name the path.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let text = |origin: &str| {
            std::fs::read_to_string(path)
                .map_err(|e| ConfigError::new(origin, "", ConfigErrorKind::Io(e.to_string())))
        };
        match ext.as_deref() {
            Some("toml") => Self::from_toml_str(&text(&origin)?, &origin),
            Some("json") => Self::from_json_str(&text(&origin)?, &origin),
            other => Err(ConfigError::new(
                &origin,
                "",
                ConfigErrorKind::UnknownFormat(other.unwrap_or("").to_owned()),
            )),
        }
    }
}

mod strict_json;

use strict_json::Refused;

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit_once('\n')
        .map_or(before, |(_, l)| l)
        .chars()
        .count()
        + 1;
    (line, column)
}

/// A configuration as written: what serde reads, before `extends` is resolved.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    default: Option<DefaultSpec>,
    #[serde(default, deserialize_with = "some_tables")]
    route: Option<Vec<RouteSpec>>,
    #[serde(default, deserialize_with = "some_tables")]
    routes: Option<Vec<RouteSpec>>,
    #[serde(default, deserialize_with = "named_tables")]
    contracts: BTreeMap<String, ContractSpec>,
}

/// A route as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteSpec {
    host: String,
    path_prefix: Option<String>,
    method: Option<String>,
    contract: String,
}

/// A contract table as written: every key optional, each one set replaces (or, for
/// `extra_rules` and the secrets, adds to) what the table `extends`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContractSpec {
    extends: Option<String>,
    name: Option<String>,
    key: Option<KeyPlacement>,
    max_key_len: Option<usize>,
    retention_secs: Option<u64>,
    replay: Option<Replay>,
    #[serde(default, deserialize_with = "some_tables")]
    rules: Option<Vec<Rule>>,
    #[serde(default, deserialize_with = "tables")]
    extra_rules: Vec<Rule>,
    remote_ref: Option<RemoteRef>,
    #[serde(default)]
    secret_headers: Vec<String>,
    #[serde(default)]
    secret_query_params: Vec<String>,
    #[serde(default)]
    secret_body_fields: Vec<String>,
    replay_supplies_body_secrets: Option<bool>,
    #[serde(default)]
    secret_response_fields: Vec<String>,
    #[serde(default)]
    secret_path_segments: Vec<String>,
    replay_supplies_path_secrets: Option<bool>,
    #[serde(default, deserialize_with = "digest")]
    digest: Option<PayloadDigest>,
    lookup: Option<Lookup>,
    settle_secs: Option<u64>,
    keep_details_secs: Option<u64>,
    keep_identity_secs: Option<u64>,
}

/// `default`: a contract table, or the name of a contract.
enum DefaultSpec {
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
fn read_spec(value: Value, origin: &str) -> Result<FileSpec, ConfigError> {
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
    super::classify::truncate(&m, 512)
}

/// The loader's working state.
struct Loader<'a> {
    origin: &'a str,
    tables: &'a BTreeMap<String, ContractSpec>,
    resolved: HashMap<String, Resolved>,
    /// Contracts named by routes (or `default`), with their reference computed once: thousands
    /// of routes usually share a few contracts, and hashing each would dominate loading.
    shared: HashMap<String, (Arc<Contract>, ContractRef)>,
}

/// A contract of the file, resolved, with what the checks need to know about it.
#[derive(Clone)]
struct Resolved {
    contract: Arc<Contract>,
    /// Whether it descends from the built-in `aws-ec2` profile.
    ec2: bool,
    /// How many contracts of the file its `extends` chain holds, itself included (0 for a
    /// built-in profile).
    depth: usize,
    /// The contract of the file it extends, if any.
    parent: Option<String>,
}

/// What a contract table starts from.
enum Base<'a> {
    /// Another contract of the file (its table key).
    File(&'a str),
    /// A built-in profile, or the conservative default when `extends` is absent.
    Builtin(Resolved),
}

fn build(root: Value, origin: &str) -> Result<Contracts, ConfigError> {
    let err = |key: &str, kind| ConfigError::new(origin, key, kind);
    let spec = read_spec(root, origin)?;
    let (route_key, routes) = match (spec.route, spec.routes) {
        (Some(_), Some(_)) => {
            return Err(err(
                "routes",
                ConfigErrorKind::Invalid("give `route` or `routes`, not both".into()),
            ));
        }
        (Some(r), None) => ("route", r),
        (None, r) => ("routes", r.unwrap_or_default()),
    };

    let tables = &spec.contracts;
    let mut loader = Loader {
        origin,
        tables,
        resolved: HashMap::new(),
        shared: HashMap::new(),
    };
    // Every contract of the file is resolved and validated, routed or not.
    for name in tables.keys() {
        loader.resolve_named(name, &contract_path(name))?;
    }

    // Where each used contract came from, for the duplicate-name check.
    let mut used: Vec<(String, Arc<Contract>)> = Vec::new();

    let default = match &spec.default {
        None => Arc::new(profiles::conservative()),
        Some(DefaultSpec::Name(name)) => loader.by_reference(name, "default")?.0,
        Some(DefaultSpec::Table(table)) => {
            loader.resolve_table(table, "default", "default")?.contract
        }
    };
    used.push(("default".to_owned(), Arc::clone(&default)));
    let mut contracts = Contracts::new(Arc::unwrap_or_clone(default));

    // Each target's first route, for the duplicate check (a scan per route was quadratic).
    let mut targets: HashMap<Target, usize> = HashMap::with_capacity(routes.len());
    for (i, route) in routes.into_iter().enumerate() {
        let path = format!("{route_key}[{i}]");
        let mut target = Target::host(route.host);
        if let Some(prefix) = route.path_prefix {
            target = target.path_prefix(prefix);
        }
        if let Some(method) = route.method {
            let method =
                Method::from_bytes(method.to_ascii_uppercase().as_bytes()).map_err(|e| {
                    err(
                        &format!("{path}.method"),
                        ConfigErrorKind::Invalid(e.to_string()),
                    )
                })?;
            target = target.method(method);
        }
        target
            .validate()
            .map_err(|why| err(&format!("{path}.host"), ConfigErrorKind::InvalidTarget(why)))?;
        if let Some(&j) = targets.get(&target) {
            return Err(err(&path, ConfigErrorKind::DuplicateRoute(j)));
        }
        let contract_key = format!("{path}.contract");
        let (contract, reference) = loader.by_reference(&route.contract, &contract_key)?;
        used.push((contract_key, Arc::clone(&contract)));
        targets.insert(target.clone(), i);
        contracts = contracts.route_shared(target, contract, reference);
    }

    // Recovery finds the frozen contract by name: one name, one contract. Each against the
    // first of its name: the same first error as comparing every pair, in linear time.
    let mut first: HashMap<&str, &Arc<Contract>> = HashMap::new();
    for (key, a) in &used {
        let b = *first.entry(a.name.as_str()).or_insert(a);
        if !Arc::ptr_eq(a, b) && **a != **b {
            return Err(err(key, ConfigErrorKind::DuplicateName(a.name.clone())));
        }
    }
    Ok(contracts)
}

impl<'a> Loader<'a> {
    fn err(&self, key: &str, kind: ConfigErrorKind) -> ConfigError {
        ConfigError::new(self.origin, key, kind)
    }

    /// A contract named by a route or `default`: the file's, else a built-in profile; shared
    /// between the routes that name it, with its reference.
    fn by_reference(
        &mut self,
        name: &str,
        key: &str,
    ) -> Result<(Arc<Contract>, ContractRef), ConfigError> {
        if let Some(done) = self.shared.get(name) {
            return Ok(done.clone());
        }
        let contract = if self.tables.contains_key(name) {
            self.resolve_named(name, &contract_path(name))?.contract
        } else {
            builtin(name)
                .ok_or_else(|| self.err(key, unknown_contract(name)))?
                .contract
        };
        let out = (Arc::clone(&contract), contract.reference());
        self.shared.insert(name.to_owned(), out.clone());
        Ok(out)
    }

    /// What a table starts from: its `extends`, without resolving a parent.
    fn base(
        &self,
        table: &'a ContractSpec,
        own_name: &str,
        path: &str,
    ) -> Result<Base<'a>, ConfigError> {
        let Some(parent) = &table.extends else {
            return Ok(Base::Builtin(Resolved {
                contract: Arc::new(profiles::conservative()),
                ec2: false,
                depth: 0,
                parent: None,
            }));
        };
        let key = format!("{path}.extends");
        let tables: &'a BTreeMap<String, ContractSpec> = self.tables;
        if parent != own_name
            && let Some((name, _)) = tables.get_key_value(parent)
        {
            return Ok(Base::File(name));
        }
        match builtin(parent) {
            Some(b) => Ok(Base::Builtin(b)),
            // `[contracts.a] extends = "a"` with no built-in `a`: say so, not "no contract a".
            None if parent == own_name => Err(self.err(
                &key,
                ConfigErrorKind::ExtendsItself {
                    name: parent.clone(),
                    builtin: profiles::NAMES.join(", "),
                },
            )),
            None => Err(self.err(&key, unknown_contract(parent))),
        }
    }

    /// Resolves the file's contract `name` (`path`: the key that named it, for errors).
    ///
    /// Iterative: it walks the `extends` chain down to a resolved contract or a built-in, then
    /// builds from the bottom up, so a long chain cannot overflow the stack; a walk longer than
    /// [`MAX_EXTENDS_DEPTH`] stops with an error. Every contract is resolved once, so loading
    /// is linear in the number of contracts.
    fn resolve_named(&mut self, name: &str, path: &str) -> Result<Resolved, ConfigError> {
        if let Some(done) = self.resolved.get(name) {
            return Ok(done.clone());
        }
        let tables: &'a BTreeMap<String, ContractSpec> = self.tables;
        let mut chain: Vec<(String, &'a ContractSpec)> = Vec::new();
        let mut cur = name.to_owned();
        let mut named_at = path.to_owned();
        loop {
            let Some(table) = tables.get(&cur) else {
                return Err(self.err(&named_at, unknown_contract(&cur)));
            };
            let own = contract_path(&cur);
            let base = self.base(table, &cur, &own)?;
            chain.push((cur, table));
            let Base::File(parent) = base else { break };
            if self.resolved.contains_key(parent) {
                break;
            }
            if let Some(start) = chain.iter().position(|(n, _)| n == parent) {
                let mut cycle: Vec<String> =
                    chain[start..].iter().map(|(n, _)| n.clone()).collect();
                cycle.push(parent.to_owned());
                let key = format!("{}.extends", contract_path(&chain[start].0));
                return Err(self.err(&key, ConfigErrorKind::Cycle(cycle)));
            }
            if chain.len() > MAX_EXTENDS_DEPTH {
                let mut names: Vec<String> = chain.into_iter().map(|(n, _)| n).collect();
                names.truncate(MAX_EXTENDS_DEPTH + 1);
                return Err(self.err(
                    &format!("{}.extends", contract_path(name)),
                    ConfigErrorKind::ExtendsTooDeep {
                        chain: names,
                        limit: MAX_EXTENDS_DEPTH,
                    },
                ));
            }
            named_at = format!("{own}.extends");
            cur = parent.to_owned();
        }
        for (n, table) in chain.iter().rev() {
            let out = self.resolve_table(table, n, &contract_path(n))?;
            self.resolved.insert(n.clone(), out);
        }
        self.resolved
            .get(name)
            .cloned()
            .ok_or_else(|| self.err(path, unknown_contract(name)))
    }

    /// Builds one contract table: base from `extends`, then the keys it sets. A parent of the
    /// file must already be resolved (or be resolvable without recursion: `default`).
    fn resolve_table(
        &mut self,
        table: &'a ContractSpec,
        own_name: &str,
        path: &str,
    ) -> Result<Resolved, ConfigError> {
        let at = |k: &str| format!("{path}.{k}");

        let (base, parent) = match self.base(table, own_name, path)? {
            Base::Builtin(b) => (b, None),
            Base::File(parent) => (self.resolve_named(parent, &at("extends"))?, Some(parent)),
        };
        let depth = base.depth + 1;
        if depth > MAX_EXTENDS_DEPTH {
            // Name the chain from here down, through the parents already resolved.
            let mut chain = vec![own_name.to_owned()];
            let mut next = parent.map(str::to_owned);
            while let Some(n) = next.filter(|_| chain.len() <= MAX_EXTENDS_DEPTH) {
                next = self.resolved.get(&n).and_then(|r| r.parent.clone());
                chain.push(n);
            }
            return Err(self.err(
                &at("extends"),
                ConfigErrorKind::ExtendsTooDeep {
                    chain,
                    limit: MAX_EXTENDS_DEPTH,
                },
            ));
        }
        let mut c = Arc::unwrap_or_clone(base.contract);
        c.name = table.name.clone().unwrap_or_else(|| own_name.to_owned());
        // Each key set replaces the inherited value as a whole.
        if let Some(v) = &table.key {
            c.key = v.clone();
        }
        if let Some(v) = table.max_key_len {
            c.max_key_len = v;
        }
        if let Some(v) = table.replay {
            c.replay = v;
        }
        if let Some(v) = table.replay_supplies_body_secrets {
            c.replay_supplies_body_secrets = v;
        }
        if let Some(v) = table.replay_supplies_path_secrets {
            c.replay_supplies_path_secrets = v;
        }
        if let Some(v) = &table.digest {
            c.digest = v.clone();
        }
        if table.retention_secs.is_some() {
            c.retention_secs = table.retention_secs;
        }
        if table.settle_secs.is_some() {
            c.settle_secs = table.settle_secs;
        }
        if table.keep_details_secs.is_some() {
            c.keep_details_secs = table.keep_details_secs;
        }
        if table.keep_identity_secs.is_some() {
            c.keep_identity_secs = table.keep_identity_secs;
        }
        if table.remote_ref.is_some() {
            c.remote_ref.clone_from(&table.remote_ref);
        }
        if table.lookup.is_some() {
            c.lookup.clone_from(&table.lookup);
        }
        // Secrets only ever accumulate: an override cannot make a secret stored again.
        for (dst, add) in [
            (&mut c.secret_headers, &table.secret_headers),
            (&mut c.secret_query_params, &table.secret_query_params),
        ] {
            for s in add {
                if !dst.iter().any(|d| d.eq_ignore_ascii_case(s)) {
                    dst.push(s.clone());
                }
            }
        }
        for (dst, add) in [
            (&mut c.secret_body_fields, &table.secret_body_fields),
            (&mut c.secret_response_fields, &table.secret_response_fields),
            (&mut c.secret_path_segments, &table.secret_path_segments),
        ] {
            for f in add {
                if !dst.contains(f) {
                    dst.push(f.clone());
                }
            }
        }
        // Each rule's own checks first, so an error names the rule and the key that set it.
        let own_rules = match &table.rules {
            Some(r) => Some(self.rules(r, &at("rules"))?),
            None => None,
        };
        let extra = self.rules(&table.extra_rules, &at("extra_rules"))?;
        let has_own_rules = own_rules.is_some();
        if let Some(r) = own_rules {
            c.rules = r;
        }
        let extra_len = extra.len();
        c.rules.splice(0..0, extra);

        c.validate().map_err(|e| {
            let field = e.field();
            // `rules[j]` of the merged list back to the key that set it.
            let key = match field
                .strip_prefix("rules[")
                .and_then(|r| r.split_once(']'))
                .and_then(|(n, rest)| Some((n.parse::<usize>().ok()?, rest)))
            {
                Some((j, rest)) if j < extra_len => format!("{path}.extra_rules[{j}]{rest}"),
                Some((j, rest)) if has_own_rules => {
                    format!("{path}.rules[{}]{rest}", j - extra_len)
                }
                _ if field.is_empty() => path.to_owned(),
                _ => format!("{path}.{field}"),
            };
            self.err(&key, ConfigErrorKind::Contract(e.kind().clone()))
        })?;

        let ec2 = base.ec2;
        if ec2 {
            let missing = profiles::ec2_scope_missing(&c.digest);
            if !missing.is_empty() {
                return Err(self.err(
                    &at("digest"),
                    ConfigErrorKind::Ec2ScopeMissing(
                        missing.iter().map(|s| (*s).to_owned()).collect(),
                    ),
                ));
            }
        }
        Ok(Resolved {
            contract: Arc::new(c),
            ec2,
            depth,
            parent: parent.map(str::to_owned),
        })
    }

    /// A list of rules, each checked on its own (status range, header name, pointers) so that
    /// an error names the rule: `path[i]`.
    fn rules(&self, rules: &[Rule], path: &str) -> Result<Vec<Rule>, ConfigError> {
        for (i, rule) in rules.iter().enumerate() {
            profiles::conservative()
                .rule(rule.clone())
                .validate()
                .map_err(|e| {
                    let rest = e.field().strip_prefix("rules[0]").unwrap_or("");
                    self.err(
                        &format!("{path}[{i}]{rest}"),
                        ConfigErrorKind::Contract(e.kind().clone()),
                    )
                })?;
        }
        Ok(rules.to_vec())
    }
}

/// A built-in profile, with its lineage.
fn builtin(name: &str) -> Option<Resolved> {
    profiles::by_name(name).map(|contract| Resolved {
        contract: Arc::new(contract),
        ec2: name == "aws-ec2",
        depth: 0,
        parent: None,
    })
}

/// `contracts.<name>`, the key path of a contract table.
fn contract_path(name: &str) -> String {
    format!("contracts.{}", key_segment(name))
}

fn unknown_contract(name: &str) -> ConfigErrorKind {
    ConfigErrorKind::UnknownContract {
        name: name.to_owned(),
        builtin: profiles::NAMES.join(", "),
    }
}

/// A table key as written in a key path: bare when it is a TOML bare key, quoted otherwise.
fn key_segment(k: &str) -> String {
    let bare = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if bare {
        k.to_owned()
    } else {
        serde_json::to_string(k).unwrap_or_else(|_| "\"?\"".to_owned())
    }
}
