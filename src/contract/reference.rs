//! A contract's reference: its name and the SHA-256 of its canonical JSON, frozen on every
//! operation row so that recovery uses the rules the operation started with.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Contract;

/// Names a contract and pins its exact content, frozen on the operation row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractRef {
    /// The contract's name (e.g. `stripe-v1`); shared, so copies cost a reference count.
    pub name: Arc<str>,
    /// SHA-256 of the contract's canonical serialization; shared like `name`.
    pub hash: Arc<str>,
}
impl Contract {
    /// The contract's name and the SHA-256 (lower-case hex) of its canonical JSON serialization
    /// (object keys sorted, no whitespace). Stable across runs and processes; any change to any
    /// field changes the hash. Frozen on each operation row.
    pub fn reference(&self) -> ContractRef {
        ContractRef {
            name: self.name.as_str().into(),
            hash: crate::operation::hex(&Sha256::digest(self.canonical_json().as_bytes())).into(),
        }
    }

    /// The canonical JSON serialization hashed by [`Contract::reference`].
    pub fn canonical_json(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        let mut canonical = String::new();
        write_canonical(&value, &mut canonical);
        canonical
    }
}

/// Writes a JSON value in canonical form: object keys sorted, no whitespace.
fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&serde_json::to_string(scalar).unwrap_or_default()),
    }
}
