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
//! (`[contracts.stripe-v1] extends = "stripe-v1"`) means the built-in one. Cycles are refused.
//!
//! # Errors
//!
//! Loading never panics. Every [`ConfigError`] names the origin (the file path, or the origin
//! string given), the key path (`contracts.stripe-charges.rules[1].status`) and what is wrong;
//! syntax errors carry the line and column. Every resulting contract is
//! [validated](super::Contract::validate), and an `aws-ec2` contract with a field digest must
//! keep the zone in it ([`EC2_SCOPE_POINTERS`](super::profiles::EC2_SCOPE_POINTERS)).
//!
//! [`conservative`]: super::profiles::conservative

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::error::ContractErrorKind;
use super::profiles;
use super::registry::{Contracts, Target};
use super::rules::{BodyMatch, EvidenceClass, HeaderMatch, Rule, StatusMatch, XmlMatch};
use super::{Contract, KeyPlacement, Lookup, RemoteRef, Replay};
use crate::operation::PayloadDigest;

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
    /// The resulting contract is not usable.
    #[error("{0}")]
    Contract(ContractErrorKind),
    /// A route's target is malformed.
    #[error("invalid target: {0}")]
    InvalidTarget(String),
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
    pub fn from_json_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
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
    resolved: BTreeMap<String, Resolved>,
    stack: Vec<String>,
}

/// A contract of the file, resolved, with what the checks need to know about it.
#[derive(Clone)]
struct Resolved {
    contract: Contract,
    /// Whether it descends from the built-in `aws-ec2` profile.
    ec2: bool,
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
        resolved: BTreeMap::new(),
        stack: Vec::new(),
    };
    // Every contract of the file is resolved and validated, routed or not.
    for name in tables.keys() {
        loader.resolve_named(name, &format!("contracts.{}", key_segment(name)))?;
    }

    // Where each used contract came from, for the duplicate-name check.
    let mut used: Vec<(String, Contract)> = Vec::new();

    let default = match root.get("default") {
        None => profiles::conservative(),
        Some(Value::String(name)) => loader.by_reference(name, "default")?.contract,
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
    used.push(("default".to_owned(), default.clone()));
    let mut contracts = Contracts::new(default);

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
    let mut targets: Vec<Target> = Vec::new();
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
        if let Some(j) = targets.iter().position(|t| *t == target) {
            return Err(err(&path, ConfigErrorKind::DuplicateRoute(j)));
        }
        let contract_key = format!("{path}.contract");
        let Some(name) = route.get("contract") else {
            return Err(err(&contract_key, ConfigErrorKind::Missing));
        };
        let name = field::<String>(name, &contract_key, origin)?;
        let contract = loader.by_reference(&name, &contract_key)?.contract;
        used.push((contract_key, contract.clone()));
        targets.push(target.clone());
        contracts = contracts.route(target, contract);
    }

    // Recovery finds the frozen contract by name: one name, one contract.
    for (i, (key, a)) in used.iter().enumerate() {
        if used[..i].iter().any(|(_, b)| b.name == a.name && b != a) {
            return Err(err(key, ConfigErrorKind::DuplicateName(a.name.clone())));
        }
    }
    Ok(contracts)
}

impl Loader<'_> {
    fn err(&self, key: &str, kind: ConfigErrorKind) -> ConfigError {
        ConfigError::new(self.origin, key, kind)
    }

    /// A contract named by a route or `default`: the file's, else a built-in profile.
    fn by_reference(&mut self, name: &str, key: &str) -> Result<Resolved, ConfigError> {
        if self.tables.contains_key(name) {
            return self.resolve_named(name, &format!("contracts.{}", key_segment(name)));
        }
        builtin(name).ok_or_else(|| self.err(key, unknown_contract(name)))
    }

    fn resolve_named(&mut self, name: &str, path: &str) -> Result<Resolved, ConfigError> {
        if let Some(done) = self.resolved.get(name) {
            return Ok(done.clone());
        }
        if let Some(start) = self.stack.iter().position(|n| n == name) {
            let mut cycle = self.stack[start..].to_vec();
            cycle.push(name.to_owned());
            let key = format!("contracts.{}.extends", key_segment(&self.stack[start]));
            return Err(self.err(&key, ConfigErrorKind::Cycle(cycle)));
        }
        let Some(table) = self.tables.get(name) else {
            return Err(self.err(path, unknown_contract(name)));
        };
        let Some(table) = table.as_object() else {
            return Err(self.err(
                path,
                ConfigErrorKind::Invalid(format!(
                    "expected a contract table, found {}",
                    type_name(table)
                )),
            ));
        };
        self.stack.push(name.to_owned());
        let out = self.resolve_table(table, name, path);
        self.stack.pop();
        let out = out?;
        self.resolved.insert(name.to_owned(), out.clone());
        Ok(out)
    }

    /// Builds one contract table: base from `extends`, then the keys it sets.
    fn resolve_table(
        &mut self,
        table: &Map<String, Value>,
        own_name: &str,
        path: &str,
    ) -> Result<Resolved, ConfigError> {
        let origin = self.origin;
        unknown_keys(table, path, CONTRACT_KEYS, origin)?;
        let at = |k: &str| format!("{path}.{k}");

        let base = match table.get("extends") {
            None => Resolved {
                contract: profiles::conservative(),
                ec2: false,
            },
            Some(v) => {
                let parent = field::<String>(v, &at("extends"), origin)?;
                if parent != own_name && self.tables.contains_key(&parent) {
                    self.resolve_named(&parent, &at("extends"))?
                } else {
                    builtin(&parent)
                        .ok_or_else(|| self.err(&at("extends"), unknown_contract(&parent)))?
                }
            }
        };
        let mut c = base.contract;
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
        Ok(Resolved { contract: c, ec2 })
    }
}

/// A built-in profile, with its lineage.
fn builtin(name: &str) -> Option<Resolved> {
    profiles::by_name(name).map(|contract| Resolved {
        contract,
        ec2: name == "aws-ec2",
    })
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
