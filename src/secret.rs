//! Keys for HMACs: the callback verifiers' signing secrets and the review page's CSRF key.
//!
//! # Why a key is checked when it is made
//!
//! HMAC accepts a key of any length, the empty one included, and a MAC made with a key an
//! attacker can guess is a MAC the attacker can make. The usual way to get such a key is not a
//! choice but an accident: `std::env::var("KEY").unwrap_or_default()` on a machine where the
//! variable is unset gives `""`, and everything still appears to work. So a [`Secret`] can only
//! be made from at least [`Secret::MIN_LEN`] bytes: an empty or short key is a [`KeyError`]
//! where the application is configured, not a forgeable signature in production.
//!
//! Sixteen bytes is a floor that catches the accidents (an empty variable, a placeholder such
//! as `changeme`), not a measure of entropy: generate keys with 32 random bytes where the
//! choice is yours. Vendors' secrets are longer than the floor: Stripe's `whsec_...` signing
//! secrets, Square's signature keys, and Adyen's HMAC keys (64 hex digits, 32 bytes).

use std::fmt;

/// A key for an HMAC, at least [`MIN_LEN`](Self::MIN_LEN) bytes. Its `Debug` prints `***`, so
/// it cannot leak through logs or error chains, and no error about it carries its bytes.
///
/// ```
/// use recoverable_write::{KeyError, Secret};
///
/// let secret = Secret::new("whsec_example_not_a_real_secret")?;
/// assert_eq!(format!("{secret:?}"), "***");
///
/// // An unset variable read with `unwrap_or_default()` is refused where it is configured.
/// assert_eq!(Secret::new("").unwrap_err(), KeyError::Empty);
/// assert_eq!(
///     Secret::new("changeme").unwrap_err(),
///     KeyError::TooShort { len: 8, min: Secret::MIN_LEN }
/// );
/// # Ok::<(), KeyError>(())
/// ```
#[derive(Clone)]
pub struct Secret(Box<[u8]>);

impl Secret {
    /// The shortest key accepted, in bytes.
    pub const MIN_LEN: usize = 16;

    /// A key used as its bytes (Stripe's `whsec_...` text as it is, Square's signature key,
    /// a GitHub webhook secret, the review page's CSRF key).
    ///
    /// # Errors
    ///
    /// [`KeyError::Empty`] for an empty key, [`KeyError::TooShort`] for one shorter than
    /// [`MIN_LEN`](Self::MIN_LEN) bytes.
    pub fn new(key: impl AsRef<[u8]>) -> Result<Self, KeyError> {
        Self::checked(key.as_ref())
    }

    /// A key given as hex digits and used as the decoded bytes (Adyen's HMAC key).
    ///
    /// # Errors
    ///
    /// [`KeyError::NotHex`] unless it is an even number of hex digits; [`KeyError::Empty`] or
    /// [`KeyError::TooShort`] when it decodes to fewer than [`MIN_LEN`](Self::MIN_LEN) bytes.
    pub fn from_hex(hex: &str) -> Result<Self, KeyError> {
        let bytes = decode_hex(hex).ok_or(KeyError::NotHex)?;
        Self::checked(&bytes)
    }

    /// 32 random bytes (the review page's own CSRF key when none is given).
    #[cfg(feature = "review-ui")]
    pub(crate) fn random() -> Self {
        let key: [u8; 32] = rand::random();
        Self(key.into())
    }

    fn checked(key: &[u8]) -> Result<Self, KeyError> {
        match key.len() {
            0 => Err(KeyError::Empty),
            len if len < Self::MIN_LEN => Err(KeyError::TooShort {
                len,
                min: Self::MIN_LEN,
            }),
            _ => Ok(Self(key.into())),
        }
    }

    /// The key's bytes, for the MAC (never for printing).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Why a key was refused. Never carries the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty: most often an unset environment variable read with
    /// `unwrap_or_default()`.
    #[error(
        "the key is empty (an unset variable?): give at least {} bytes, ideally 32 random bytes",
        Secret::MIN_LEN
    )]
    Empty,
    /// The key is shorter than [`Secret::MIN_LEN`] bytes.
    #[error("the key is {len} bytes, shorter than the {min} required: use 32 random bytes")]
    TooShort {
        /// Its length in bytes (decoded, for a hex key).
        len: usize,
        /// The shortest length accepted.
        min: usize,
    },
    /// A hex key is not an even number of hex digits.
    #[error("the key is not an even number of hex digits")]
    NotHex,
}

/// Hex digits (either case) to bytes; `None` unless an even number of hex digits.
pub(crate) fn decode_hex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_short_keys_are_refused_and_the_floor_is_accepted() {
        assert_eq!(Secret::new("").unwrap_err(), KeyError::Empty);
        assert_eq!(Secret::new(b"").unwrap_err(), KeyError::Empty);
        assert_eq!(
            Secret::new([7u8; 15]).unwrap_err(),
            KeyError::TooShort { len: 15, min: 16 }
        );
        assert_eq!(Secret::new([7u8; 16]).unwrap().bytes(), &[7u8; 16]);
        assert_eq!(Secret::from_hex("").unwrap_err(), KeyError::Empty);
        assert_eq!(
            Secret::from_hex("00ff").unwrap_err(),
            KeyError::TooShort { len: 2, min: 16 }
        );
        assert_eq!(Secret::from_hex("abc").unwrap_err(), KeyError::NotHex);
        assert_eq!(Secret::from_hex("zz").unwrap_err(), KeyError::NotHex);
        assert_eq!(
            Secret::from_hex(&"aB".repeat(16)).unwrap().bytes(),
            &[0xab; 16]
        );
    }

    #[test]
    fn errors_never_carry_the_key() {
        let key = "hunter2-hunter2";
        let e = Secret::new(key).unwrap_err();
        for text in [e.to_string(), format!("{e:?}")] {
            assert!(!text.contains(key), "{text}");
        }
        assert_eq!(format!("{:?}", Secret::new([1u8; 32]).unwrap()), "***");
    }
}
