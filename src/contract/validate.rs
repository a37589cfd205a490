//! [`Contract::validate`].

use http::HeaderName;

use super::error::{ContractError, ContractErrorKind as Kind};
use super::key::pointer_tokens;
use super::{Contract, GENERATED_KEY_LEN, KeyPlacement};
use crate::operation::PayloadDigest;

pub(super) fn contract(c: &Contract) -> Result<(), ContractError> {
    let err = |field: String, kind| ContractError::new(&c.name, field, kind);
    if c.name.trim().is_empty() {
        return Err(err("name".into(), Kind::Empty));
    }
    match &c.key {
        KeyPlacement::Header { name, .. } => {
            header_name(name).map_err(|k| err("key.name".into(), k))?
        }
        KeyPlacement::JsonBody { pointer } => {
            pointer_ok(pointer).map_err(|k| err("key.pointer".into(), k))?;
            if pointer.is_empty() {
                return Err(err("key.pointer".into(), Kind::EmptyPointer));
            }
        }
        KeyPlacement::Query { name } | KeyPlacement::FormBody { name } => {
            if name.is_empty() {
                return Err(err("key.name".into(), Kind::Empty));
            }
        }
    }
    if c.max_key_len < GENERATED_KEY_LEN {
        return Err(err(
            "max_key_len".into(),
            Kind::MaxKeyLenTooSmall {
                value: c.max_key_len,
                min: GENERATED_KEY_LEN,
            },
        ));
    }
    for (i, rule) in c.rules.iter().enumerate() {
        let Some(status) = rule.status else {
            return Err(err(format!("rules[{i}].status"), Kind::MissingStatus));
        };
        if !status.is_valid() {
            return Err(err(
                format!("rules[{i}].status"),
                Kind::InvalidStatusRange {
                    lo: status.lo(),
                    hi: status.hi(),
                },
            ));
        }
        if let Some(h) = &rule.header {
            header_name(&h.name).map_err(|k| err(format!("rules[{i}].header.name"), k))?;
        }
        if let Some(b) = &rule.body {
            pointer_ok(&b.pointer).map_err(|k| err(format!("rules[{i}].body.pointer"), k))?;
        }
    }
    if let Some(r) = &c.remote_ref {
        pointer_ok(&r.pointer).map_err(|k| err("remote_ref.pointer".into(), k))?;
    }
    for (i, name) in c.secret_headers.iter().enumerate() {
        header_name(name).map_err(|k| err(format!("secret_headers[{i}]"), k))?;
    }
    if let PayloadDigest::Fields(pointers) = &c.digest {
        for (i, p) in pointers.iter().enumerate() {
            pointer_ok(p).map_err(|k| err(format!("digest.pointers[{i}]"), k))?;
        }
    }
    Ok(())
}

fn header_name(name: &str) -> Result<(), Kind> {
    HeaderName::from_bytes(name.as_bytes())
        .map(drop)
        .map_err(|_| Kind::InvalidHeaderName(name.to_owned()))
}

fn pointer_ok(pointer: &str) -> Result<(), Kind> {
    pointer_tokens(pointer)
        .map(drop)
        .ok_or_else(|| Kind::InvalidPointer(pointer.to_owned()))
}
