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
//! ([`profiles::by_name`](super::profiles::by_name)); a contract that extends its own table key
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

use std::path::Path;

use serde_json::Value;

use super::registry::Contracts;

mod error;
mod loader;
mod spec;
mod strict_json;

pub use error::{ConfigError, ConfigErrorKind};
use loader::build;
use strict_json::Refused;

/// The longest `extends` chain of a file's contracts, the contract itself included (built-in
/// profiles are not counted). Deeper nesting is refused with [`ConfigErrorKind::ExtendsTooDeep`].
pub const MAX_EXTENDS_DEPTH: usize = 32;

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
