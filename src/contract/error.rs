//! The error type for bad contracts and keys that cannot be placed.

use std::fmt;

/// A contract that is not usable, or a key that cannot be placed in a request.
///
/// It names the contract, the field (a path such as `rules[2].status` or `key.pointer`) and what
/// is wrong ([`ContractErrorKind`]). It never contains a request body or a credential.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ContractError {
    contract: String,
    field: String,
    kind: ContractErrorKind,
}

/// What is wrong, for [`ContractError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContractErrorKind {
    /// The field must not be empty.
    #[error("must not be empty")]
    Empty,
    /// Not a valid HTTP header name.
    #[error("`{0}` is not a valid HTTP header name")]
    InvalidHeaderName(String),
    /// Not an RFC 6901 JSON pointer.
    #[error(
        "`{0}` is not a JSON pointer (RFC 6901): it must be empty or start with `/`, and `~` must be followed by `0` or `1`"
    )]
    InvalidPointer(String),
    /// The JSON pointer must name a field inside the document, not the whole document.
    #[error("the JSON pointer must name a field (it cannot be empty)")]
    EmptyPointer,
    /// A status range outside `100..=599`, or with its low end above its high end.
    #[error(
        "status range {lo}-{hi} is invalid: codes must be within 100..=599 and the low end must not exceed the high end"
    )]
    InvalidStatusRange {
        /// Low end.
        lo: u16,
        /// High end.
        hi: u16,
    },
    /// A rule without a status condition.
    #[error(
        "a rule must constrain the status code (e.g. `status = 429` or `status = \"500-599\"`)"
    )]
    MissingStatus,
    /// `max_key_len` cannot hold a generated key.
    #[error("{value} is too small: a generated key (UUID v4) is {min} characters")]
    MaxKeyLenTooSmall {
        /// The configured maximum.
        value: usize,
        /// The smallest allowed maximum.
        min: usize,
    },
    /// A number above its bound ([`MAX_RETENTION_SECS`](super::MAX_RETENTION_SECS),
    /// [`MAX_SETTLE_SECS`](super::MAX_SETTLE_SECS), [`MAX_KEY_LEN_LIMIT`](super::MAX_KEY_LEN_LIMIT)).
    #[error("{value} is too large: at most {max}{}", seconds_in_words(*.max, .unit_secs))]
    TooLarge {
        /// The value given.
        value: u64,
        /// The largest value allowed.
        max: u64,
        /// Whether the value is in seconds (the bound is then also given in days).
        unit_secs: bool,
    },
    /// The key is longer than the contract allows.
    #[error("the key is {len} characters, more than the contract's maximum of {max}")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The contract's maximum.
        max: usize,
    },
    /// The key contains characters the placement cannot carry.
    #[error("the key cannot be sent there: {0}")]
    KeyNotEncodable(&'static str),
    /// The request body is not a JSON object, so the key cannot be placed in it.
    #[error("the request body is not a JSON object, so the key cannot be placed in it")]
    BodyNotJsonObject,
    /// The request body is not UTF-8 form data, so the key cannot be placed in it.
    #[error("the request body is not UTF-8 form data, so the key cannot be placed in it")]
    BodyNotForm,
    /// A value on the way to the key's place in the body is not an object.
    #[error("`{at}` in the request body is not a JSON object, so `{pointer}` cannot be set")]
    PointerBlocked {
        /// The key's pointer.
        pointer: String,
        /// The prefix of the pointer that holds a non-object value.
        at: String,
    },
    /// The request URI cannot carry the key.
    #[error("the request URI cannot carry the key: {0}")]
    InvalidUri(String),
    /// A routing target is malformed.
    #[error("invalid target: {0}")]
    InvalidTarget(String),
    /// Two different contracts share a name.
    #[error("the name `{0}` is used by two different contracts")]
    DuplicateName(String),
    /// The contract text could not be read.
    #[error("cannot read the contract: {0}")]
    Parse(String),
    /// A contract that sends no key claims a safe replay, or a same-key replay lookup.
    #[error(
        "a contract that sends no idempotency key cannot replay safely: use `replay = \"unsafe\"` and no same-key replay lookup"
    )]
    ReplayWithoutKey,
    /// A same-key replay lookup under a contract whose replay is unsafe.
    #[error(
        "a same-key replay lookup needs a safe replay (`stored_first_response` or `current_state`), not `unsafe`"
    )]
    LookupNeedsSafeReplay,
    /// A URL template that is malformed or names an unknown placeholder.
    #[error("invalid URL template: {0}")]
    InvalidTemplate(String),
    /// A value that is not one of those the field takes.
    #[error("`{value}` is not one of: {expected}")]
    InvalidChoice {
        /// The value given (cut to 64 characters).
        value: String,
        /// The values the field takes.
        expected: &'static str,
    },
    /// A lookup that cannot prove a write was not executed is told to read a 404 as "not
    /// executed" (it would authorise a replay of a write that may have happened).
    #[error("`not_executed` is refused here: {0}")]
    NotFoundCannotProve(&'static str),
    /// A retention shorter than something it must cover: the vendor's key retention, or the
    /// details clock.
    #[error("{value} s is shorter than {because}: {min} s")]
    RetentionTooShort {
        /// The value given, in seconds.
        value: u64,
        /// The least allowed, in seconds.
        min: u64,
        /// What it must cover.
        because: &'static str,
    },
    /// Not a plain XML element name.
    #[error("`{0}` is not an XML element name (letters, digits, `_`, `-`, `.`, `:`)")]
    InvalidXmlElement(String),
    /// A secret answer field that is neither a JSON pointer nor a bare name.
    #[error(
        "`{0}` is neither a JSON pointer (`/client_secret`, starting with `/`) nor a field name (`client_secret`, without `/`)"
    )]
    InvalidSecretField(String),
    /// A secret path template that is malformed.
    #[error(
        "`{0}` is not a path template: it must start with `/`, mark at least one segment `{{secret}}`, and hold only literal segments, `*` and `{{secret}}` (no query)"
    )]
    InvalidPathTemplate(String),
}

/// ` (365 days)` for a bound in seconds that is a whole number of days.
fn seconds_in_words(max: u64, unit_secs: &bool) -> String {
    const DAY: u64 = 24 * 60 * 60;
    if *unit_secs && max.is_multiple_of(DAY) {
        format!(" ({} days)", max / DAY)
    } else {
        String::new()
    }
}

impl ContractError {
    pub(crate) fn new(
        contract: impl Into<String>,
        field: impl Into<String>,
        kind: ContractErrorKind,
    ) -> Self {
        Self {
            contract: contract.into(),
            field: field.into(),
            kind,
        }
    }

    /// The name of the contract at fault (empty when the text could not be read).
    pub fn contract_name(&self) -> &str {
        &self.contract
    }

    /// The field at fault, as a path (`rules[2].status`, `key.name`); empty for the whole
    /// contract.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong.
    pub fn kind(&self) -> &ContractErrorKind {
        &self.kind
    }
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("contract")?;
        if !self.contract.is_empty() {
            write!(f, " `{}`", self.contract)?;
        }
        if !self.field.is_empty() {
            write!(f, ", {}", self.field)?;
        }
        write!(f, ": {}", self.kind)
    }
}
