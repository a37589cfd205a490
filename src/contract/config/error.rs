//! [`ConfigError`]: a configuration that cannot be loaded, naming the origin, the key path
//! and what is wrong ([`ConfigErrorKind`]).

use std::fmt;

use crate::contract::ContractErrorKind;

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
    /// An `extends` chain with more than [`MAX_EXTENDS_DEPTH`](super::MAX_EXTENDS_DEPTH) contracts of the file.
    #[error(
        "the `extends` chain is more than {limit} contracts deep: {} -> ...",
        .chain.join(" -> ")
    )]
    ExtendsTooDeep {
        /// The chain from the contract at fault down, its first `limit + 1` names.
        chain: Vec<String>,
        /// The limit, [`MAX_EXTENDS_DEPTH`](super::MAX_EXTENDS_DEPTH).
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
    pub(super) fn new(origin: &str, key: impl Into<String>, kind: ConfigErrorKind) -> Self {
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
