//! Per-target contracts: how a vendor dedupes, and how its answers map to evidence.
//!
//! STUB: the full implementation is being written (see the helper brief). The public API below
//! is fixed; bodies are placeholders.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use serde::{Deserialize, Serialize};

use crate::evidence::Evidence;
use crate::ledger::ContractRef;
use crate::operation::{IdempotencyKey, PayloadDigest};

/// A vendor contract.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Contract {
    /// Name.
    pub name: String,
    /// Where the key goes.
    pub key: KeyPlacement,
    /// Which parts of the body define the payload.
    #[serde(default)]
    pub digest: PayloadDigest,
    /// Extra secret headers.
    #[serde(default)]
    pub secret_headers: Vec<String>,
}

/// Where the idempotency key goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "in", rename_all = "snake_case")]
pub enum KeyPlacement {
    /// A header.
    Header {
        /// Header name.
        name: String,
    },
}

/// A bad contract or a key that cannot be placed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ContractError(String);

impl Contract {
    /// The conservative default.
    pub fn conservative() -> Self {
        Self {
            name: "default".into(),
            key: KeyPlacement::Header {
                name: "idempotency-key".into(),
            },
            digest: PayloadDigest::Full,
            secret_headers: vec![],
        }
    }

    /// Name and content hash.
    pub fn reference(&self) -> ContractRef {
        ContractRef {
            name: self.name.clone(),
            hash: String::new(),
        }
    }

    /// Places the key.
    pub fn attach_key(
        &self,
        parts: &mut http::request::Parts,
        body: Bytes,
        key: &IdempotencyKey,
    ) -> Result<Bytes, ContractError> {
        let KeyPlacement::Header { name } = &self.key;
        let name: http::HeaderName = name
            .parse()
            .map_err(|_| ContractError("bad header".into()))?;
        let value =
            HeaderValue::from_str(key.as_str()).map_err(|_| ContractError("bad key".into()))?;
        parts.headers.insert(name, value);
        Ok(body)
    }

    /// Classifies a response.
    pub fn classify_response(
        &self,
        status: StatusCode,
        _headers: &HeaderMap,
        _body: &[u8],
        _now: SystemTime,
    ) -> Evidence {
        if status.is_success() {
            Evidence::Succeeded { remote_ref: None }
        } else {
            Evidence::unknown(status.to_string())
        }
    }

    /// Classifies a transport error.
    pub fn classify_error(&self, err: &(dyn std::error::Error + 'static)) -> Evidence {
        Evidence::unknown(err.to_string())
    }
}

/// The set of contracts, chosen per target.
#[derive(Clone, Debug)]
pub struct Contracts {
    default: Arc<Contract>,
}

impl Contracts {
    /// A registry with only a default.
    pub fn new(default: Contract) -> Self {
        Self {
            default: Arc::new(default),
        }
    }

    /// Chooses the contract for a request.
    pub fn select(&self, _method: &Method, _uri: &Uri) -> &Arc<Contract> {
        &self.default
    }

    /// Finds a contract by name.
    pub fn get(&self, name: &str) -> Option<&Arc<Contract>> {
        (self.default.name == name).then_some(&self.default)
    }
}

impl Default for Contracts {
    fn default() -> Self {
        Self::new(Contract::conservative())
    }
}

/// Parses Retry-After.
pub fn parse_retry_after(_value: &HeaderValue, _now: SystemTime) -> Option<Duration> {
    None
}
