//! CSRF tokens: HMAC-SHA256 over (identity, tenant, operation, version) with the router's key.
//!
//! A token is only valid for the person it was shown to, on the operation and at the version
//! the page showed: a form copied to another operation, another person or replayed after the
//! operation changed is refused (the version check then answers 409).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::operation::hex;

type HmacSha256 = Hmac<Sha256>;

/// Domain separation: a MAC made for another purpose with the same key never verifies here.
const DOMAIN: &[u8] = b"recoverable-write/review-ui/csrf/v1";

fn mac(key: &[u8], who: &str, tenant: &str, op: &str, version: u64) -> HmacSha256 {
    // HMAC accepts keys of any length.
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(DOMAIN);
    for part in [who.as_bytes(), tenant.as_bytes(), op.as_bytes()] {
        // Length-prefixed: ("ab", "c") and ("a", "bc") never collide.
        m.update(&(part.len() as u64).to_be_bytes());
        m.update(part);
    }
    m.update(&version.to_be_bytes());
    m
}

/// The token a form carries (lower-case hex).
pub(super) fn token(key: &[u8], who: &str, tenant: &str, op: &str, version: u64) -> String {
    hex(&mac(key, who, tenant, op, version).finalize().into_bytes())
}

/// Whether `given` is the token for these values (compared in constant time).
pub(super) fn verify(
    key: &[u8],
    who: &str,
    tenant: &str,
    op: &str,
    version: u64,
    given: &str,
) -> bool {
    let Some(bytes) = unhex(given) else {
        return false;
    };
    mac(key, who, tenant, op, version)
        .verify_slice(&bytes)
        .is_ok()
}

/// The token's bytes; an empty or malformed token is none.
fn unhex(s: &str) -> Option<Vec<u8>> {
    ::hex::decode(s).ok().filter(|b| !b.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_binds_person_operation_and_version() {
        let k = b"key";
        let t = token(k, "alice", "acme", "op-1", 4);
        assert!(verify(k, "alice", "acme", "op-1", 4, &t));
        assert!(!verify(k, "bob", "acme", "op-1", 4, &t));
        assert!(!verify(k, "alice", "acme", "op-2", 4, &t));
        assert!(!verify(k, "alice", "acme", "op-1", 5, &t));
        assert!(!verify(k, "alice", "acm", "eop-1", 4, &t));
        assert!(!verify(b"other", "alice", "acme", "op-1", 4, &t));
        assert!(!verify(k, "alice", "acme", "op-1", 4, ""));
        assert!(!verify(k, "alice", "acme", "op-1", 4, "zz"));
        assert!(!verify(k, "alice", "acme", "op-1", 4, &t[..10]));
    }
}
