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
//! and `lookup` are not merged field by field, and `rules` replaces the inherited rules. Two keys
//! add instead of replacing:
//!
//! - `extra_rules` are put *before* the rules (inherited or given), so they are tried first and
//!   override the profile for the responses they match;
//! - `secret_headers` are added to the inherited ones: an override can never turn a secret
//!   header back into a stored one.
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
//! with the key path and position (TOML parsers refuse duplicates themselves). Every resulting contract is
//! [validated](super::Contract::validate), and an `aws-ec2` contract with a field digest must
//! keep the zone in it ([`EC2_SCOPE_POINTERS`](super::profiles::EC2_SCOPE_POINTERS)).
//!
//! [`conservative`]: super::profiles::conservative

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::ContractRef;
use super::error::ContractErrorKind;
use super::profiles;
use super::registry::{Contracts, Target};
use super::rules::{BodyMatch, EvidenceClass, HeaderMatch, Rule, StatusMatch, XmlMatch};
use super::{Contract, KeyPlacement, Lookup, RemoteRef, Replay};
use crate::operation::PayloadDigest;

/// The longest `extends` chain of a file's contracts, the contract itself included (built-in
/// profiles are not counted). Deeper nesting is refused with [`ConfigErrorKind::ExtendsTooDeep`].
pub const MAX_EXTENDS_DEPTH: usize = 32;

/// The keys of the file's top level.
const ROOT_KEYS: &[&str] = &["default", "route", "routes", "contracts"];
/// The keys of a route.
const ROUTE_KEYS: &[&str] = &["host", "path_prefix", "method", "contract"];
/// The keys of a contract table.
const CONTRACT_KEYS: &[&str] = &[
    "extends",
    "name",
    "key",
    "max_key_len",
    "retention_secs",
    "replay",
    "rules",
    "extra_rules",
    "remote_ref",
    "secret_headers",
    "secret_query_params",
    "secret_body_fields",
    "replay_supplies_body_secrets",
    "digest",
    "lookup",
    "settle_secs",
];
/// The keys of a rule.
const RULE_KEYS: &[&str] = &["status", "header", "body", "xml", "evidence", "reason"];
/// The keys of a digest.
const DIGEST_KEYS: &[&str] = &["mode", "pointers"];

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
        build(&value, origin)
    }

    /// Reads routes and contracts from JSON text, in the same shape as
    /// [`Contracts::from_toml_str`].
    ///
    /// An object with the same key twice is refused ([`ConfigErrorKind::DuplicateKey`], with the
    /// key path and position), where a JSON parser would keep one of the values silently.
    pub fn from_json_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let value: Value = strict_json::parse(text).map_err(|(e, duplicate)| {
            if let Some(key) = duplicate {
                return ConfigError::new(
                    origin,
                    key,
                    ConfigErrorKind::DuplicateKey {
                        line: e.line(),
                        column: e.column(),
                    },
                );
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
        build(&value, origin)
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

/// JSON into a [`Value`], refusing duplicate keys.
mod strict_json {
    use std::cell::RefCell;
    use std::fmt;

    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Number, Value};

    use super::key_segment;

    /// Parses `text`. On error, the second item is the key path of a duplicate key, if that is
    /// what failed (the serde error then carries its position).
    pub(super) fn parse(text: &str) -> Result<Value, (serde_json::Error, Option<String>)> {
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
    /// duplicate key can be named.
    struct Strict<'a> {
        path: String,
        duplicate: &'a RefCell<Option<String>>,
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

        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_none<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
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
                    *self.duplicate.borrow_mut() = Some(path);
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
}

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

/// The loader's working state.
struct Loader<'a> {
    origin: &'a str,
    tables: &'a Map<String, Value>,
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

fn build(root: &Value, origin: &str) -> Result<Contracts, ConfigError> {
    let err = |key: &str, kind| ConfigError::new(origin, key, kind);
    let Some(root) = root.as_object() else {
        return Err(err(
            "",
            ConfigErrorKind::Invalid("the top level must be a table".into()),
        ));
    };
    unknown_keys(root, "", ROOT_KEYS, origin)?;
    if root.contains_key("route") && root.contains_key("routes") {
        return Err(err(
            "routes",
            ConfigErrorKind::Invalid("give `route` or `routes`, not both".into()),
        ));
    }

    let empty = Map::new();
    let tables = match root.get("contracts") {
        None => &empty,
        Some(Value::Object(t)) => t,
        Some(other) => {
            return Err(err(
                "contracts",
                ConfigErrorKind::Invalid(format!(
                    "expected a table of named contracts, found {}",
                    type_name(other)
                )),
            ));
        }
    };
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

    let default = match root.get("default") {
        None => Arc::new(profiles::conservative()),
        Some(Value::String(name)) => loader.by_reference(name, "default")?.0,
        Some(Value::Object(table)) => loader.resolve_table(table, "default", "default")?.contract,
        Some(other) => {
            return Err(err(
                "default",
                ConfigErrorKind::Invalid(format!(
                    "expected a contract table or a contract name, found {}",
                    type_name(other)
                )),
            ));
        }
    };
    used.push(("default".to_owned(), Arc::clone(&default)));
    let mut contracts = Contracts::new(Arc::unwrap_or_clone(default));

    let (route_key, routes) = match (root.get("route"), root.get("routes")) {
        (Some(r), _) => ("route", Some(r)),
        (None, r) => ("routes", r),
    };
    let routes = match routes {
        None => &[][..],
        Some(Value::Array(items)) => items.as_slice(),
        Some(other) => {
            return Err(err(
                route_key,
                ConfigErrorKind::Invalid(format!(
                    "expected an array of tables ([[{route_key}]]), found {}",
                    type_name(other)
                )),
            ));
        }
    };
    // Each target's first route, for the duplicate check (a scan per route was quadratic).
    let mut targets: HashMap<Target, usize> = HashMap::with_capacity(routes.len());
    for (i, route) in routes.iter().enumerate() {
        let path = format!("{route_key}[{i}]");
        let Some(route) = route.as_object() else {
            return Err(err(
                &path,
                ConfigErrorKind::Invalid(format!("expected a table, found {}", type_name(route))),
            ));
        };
        unknown_keys(route, &path, ROUTE_KEYS, origin)?;
        let mut target_fields = Map::new();
        for k in ["host", "path_prefix", "method"] {
            if let Some(v) = route.get(k) {
                // Each field on its own first, so the error names it.
                field::<String>(v, &format!("{path}.{k}"), origin)?;
                target_fields.insert(k.to_owned(), v.clone());
            }
        }
        if !route.contains_key("host") {
            return Err(err(&format!("{path}.host"), ConfigErrorKind::Missing));
        }
        let target: Target = serde_json::from_value(Value::Object(target_fields)).map_err(|e| {
            let key = if route.contains_key("method") {
                format!("{path}.method")
            } else {
                path.clone()
            };
            err(&key, ConfigErrorKind::Invalid(serde_message(&e)))
        })?;
        target
            .validate()
            .map_err(|why| err(&format!("{path}.host"), ConfigErrorKind::InvalidTarget(why)))?;
        if let Some(&j) = targets.get(&target) {
            return Err(err(&path, ConfigErrorKind::DuplicateRoute(j)));
        }
        let contract_key = format!("{path}.contract");
        let Some(name) = route.get("contract") else {
            return Err(err(&contract_key, ConfigErrorKind::Missing));
        };
        let name = field::<String>(name, &contract_key, origin)?;
        let (contract, reference) = loader.by_reference(&name, &contract_key)?;
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

    /// The table of the file's contract `name`; `path` is the key that named it, for errors.
    fn table(&self, name: &str, path: &str) -> Result<&'a Map<String, Value>, ConfigError> {
        let tables: &'a Map<String, Value> = self.tables;
        let Some(table) = tables.get(name) else {
            return Err(self.err(path, unknown_contract(name)));
        };
        table.as_object().ok_or_else(|| {
            self.err(
                path,
                ConfigErrorKind::Invalid(format!(
                    "expected a contract table, found {}",
                    type_name(table)
                )),
            )
        })
    }

    /// What a table starts from: checks its keys and its `extends`, without resolving a parent.
    fn base(
        &self,
        table: &'a Map<String, Value>,
        own_name: &str,
        path: &str,
    ) -> Result<Base<'a>, ConfigError> {
        let origin = self.origin;
        unknown_keys(table, path, CONTRACT_KEYS, origin)?;
        let Some(v) = table.get("extends") else {
            return Ok(Base::Builtin(Resolved {
                contract: Arc::new(profiles::conservative()),
                ec2: false,
                depth: 0,
                parent: None,
            }));
        };
        let key = format!("{path}.extends");
        let parent = field::<String>(v, &key, origin)?;
        let tables: &'a Map<String, Value> = self.tables;
        if parent != own_name
            && let Some((name, _)) = tables.get_key_value(&parent)
        {
            return Ok(Base::File(name));
        }
        match builtin(&parent) {
            Some(b) => Ok(Base::Builtin(b)),
            // `[contracts.a] extends = "a"` with no built-in `a`: say so, not "no contract a".
            None if parent == own_name => Err(self.err(
                &key,
                ConfigErrorKind::ExtendsItself {
                    name: parent,
                    builtin: profiles::NAMES.join(", "),
                },
            )),
            None => Err(self.err(&key, unknown_contract(&parent))),
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
        let mut chain: Vec<(String, &'a Map<String, Value>)> = Vec::new();
        let mut cur = name.to_owned();
        let mut named_at = path.to_owned();
        loop {
            let table = self.table(&cur, &named_at)?;
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
        table: &'a Map<String, Value>,
        own_name: &str,
        path: &str,
    ) -> Result<Resolved, ConfigError> {
        let origin = self.origin;
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
        c.name = match table.get("name") {
            Some(v) => field::<String>(v, &at("name"), origin)?,
            None => own_name.to_owned(),
        };
        if let Some(v) = table.get("key") {
            c.key = field::<KeyPlacement>(v, &at("key"), origin)?;
        }
        if let Some(v) = table.get("max_key_len") {
            c.max_key_len = field::<usize>(v, &at("max_key_len"), origin)?;
        }
        if let Some(v) = table.get("retention_secs") {
            c.retention_secs = Some(field::<u64>(v, &at("retention_secs"), origin)?);
        }
        if let Some(v) = table.get("replay") {
            c.replay = field::<Replay>(v, &at("replay"), origin)?;
        }
        if let Some(v) = table.get("remote_ref") {
            c.remote_ref = Some(field::<RemoteRef>(v, &at("remote_ref"), origin)?);
        }
        if let Some(v) = table.get("secret_headers") {
            for h in field::<Vec<String>>(v, &at("secret_headers"), origin)? {
                if !c.secret_headers.iter().any(|s| s.eq_ignore_ascii_case(&h)) {
                    c.secret_headers.push(h);
                }
            }
        }
        if let Some(v) = table.get("secret_query_params") {
            for q in field::<Vec<String>>(v, &at("secret_query_params"), origin)? {
                if !c
                    .secret_query_params
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(&q))
                {
                    c.secret_query_params.push(q);
                }
            }
        }
        if let Some(v) = table.get("secret_body_fields") {
            for f in field::<Vec<String>>(v, &at("secret_body_fields"), origin)? {
                if !c.secret_body_fields.contains(&f) {
                    c.secret_body_fields.push(f);
                }
            }
        }
        if let Some(v) = table.get("replay_supplies_body_secrets") {
            c.replay_supplies_body_secrets =
                field::<bool>(v, &at("replay_supplies_body_secrets"), origin)?;
        }
        if let Some(v) = table.get("digest") {
            if let Some(obj) = v.as_object() {
                unknown_keys(obj, &at("digest"), DIGEST_KEYS, origin)?;
            }
            c.digest = field::<PayloadDigest>(v, &at("digest"), origin)?;
        }
        if let Some(v) = table.get("lookup") {
            c.lookup = Some(field::<Lookup>(v, &at("lookup"), origin)?);
        }
        if let Some(v) = table.get("settle_secs") {
            c.settle_secs = Some(field::<u64>(v, &at("settle_secs"), origin)?);
        }
        let own_rules = match table.get("rules") {
            Some(v) => Some(rules(v, &at("rules"), origin)?),
            None => None,
        };
        let extra = match table.get("extra_rules") {
            Some(v) => rules(v, &at("extra_rules"), origin)?,
            None => Vec::new(),
        };
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

/// Reads a list of rules, each checked on its own so an error names the rule and its key.
fn rules(v: &Value, path: &str, origin: &str) -> Result<Vec<Rule>, ConfigError> {
    let err = |key: &str, kind| ConfigError::new(origin, key, kind);
    let Value::Array(items) = v else {
        return Err(err(
            path,
            ConfigErrorKind::Invalid(format!(
                "expected an array of rule tables, found {}",
                type_name(v)
            )),
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let rp = format!("{path}[{i}]");
        let Some(obj) = item.as_object() else {
            return Err(err(
                &rp,
                ConfigErrorKind::Invalid(format!(
                    "expected a rule table, found {}",
                    type_name(item)
                )),
            ));
        };
        unknown_keys(obj, &rp, RULE_KEYS, origin)?;
        let at = |k: &str| format!("{rp}.{k}");
        let Some(status) = obj.get("status") else {
            return Err(err(
                &at("status"),
                ConfigErrorKind::Contract(ContractErrorKind::MissingStatus),
            ));
        };
        let Some(evidence) = obj.get("evidence") else {
            return Err(err(&at("evidence"), ConfigErrorKind::Missing));
        };
        let mut rule = Rule::new(
            field::<StatusMatch>(status, &at("status"), origin)?,
            field::<EvidenceClass>(evidence, &at("evidence"), origin)?,
        );
        if let Some(v) = obj.get("header") {
            rule.header = Some(field::<HeaderMatch>(v, &at("header"), origin)?);
        }
        if let Some(v) = obj.get("body") {
            rule.body = Some(field::<BodyMatch>(v, &at("body"), origin)?);
        }
        if let Some(v) = obj.get("xml") {
            rule.xml = Some(field::<XmlMatch>(v, &at("xml"), origin)?);
        }
        if let Some(v) = obj.get("reason") {
            rule.reason = Some(field::<String>(v, &at("reason"), origin)?);
        }
        // The rule's own checks (status range, header name, pointers), with this rule's path.
        profiles::conservative()
            .with_rule(rule.clone())
            .validate()
            .map_err(|e| {
                let rest = e.field().strip_prefix("rules[0]").unwrap_or("");
                err(
                    &format!("{rp}{rest}"),
                    ConfigErrorKind::Contract(e.kind().clone()),
                )
            })?;
        out.push(rule);
    }
    Ok(out)
}

/// Deserializes one value; the error names `key`.
fn field<T: DeserializeOwned>(v: &Value, key: &str, origin: &str) -> Result<T, ConfigError> {
    T::deserialize(v)
        .map_err(|e| ConfigError::new(origin, key, ConfigErrorKind::Invalid(serde_message(&e))))
}

/// A serde message without the position suffix (positions in a re-read value mean nothing).
fn serde_message(e: &serde_json::Error) -> String {
    let m = e.to_string();
    let m = m.rsplit_once(" at line ").map_or(m.as_str(), |(m, _)| m);
    super::classify::truncate(m, 300)
}

fn unknown_keys(
    obj: &Map<String, Value>,
    path: &str,
    allowed: &[&str],
    origin: &str,
) -> Result<(), ConfigError> {
    // BTreeSet: report the first unknown key in a stable order.
    let unknown: BTreeSet<&String> = obj
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    match unknown.into_iter().next() {
        None => Ok(()),
        Some(k) => {
            let key = if path.is_empty() {
                key_segment(k)
            } else {
                format!("{path}.{}", key_segment(k))
            };
            Err(ConfigError::new(
                origin,
                key,
                ConfigErrorKind::UnknownKey {
                    expected: allowed.join(", "),
                },
            ))
        }
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

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a table",
    }
}
