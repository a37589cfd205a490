//! Signature verification: nothing of a delivery is read before one of these accepts it.
//!
//! Every built-in verifier compares MACs in constant time (`hmac`'s `verify_slice`), accepts
//! several secrets (rotation: old and new secret both valid while the vendor switches), and
//! returns typed [`VerifyError`]s that name the header and the failure, never the secret, the
//! signature or the body.
//!
//! Every verifier is made from [`Secret`]s (or, for Adyen, hex keys checked the same way), so
//! none can be built with an empty or short key: that is a [`KeyError`] where the endpoint is
//! configured, never a signature anyone can forge.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName};
use sha2::Sha256;

use crate::operation::hex;
use crate::secret::{KeyError, Secret, decode_hex};

type HmacSha256 = Hmac<Sha256>;

/// The default tolerance on a signed timestamp, in both directions (Stripe's libraries use 300 s).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

// The HMAC of a (validated) secret.
fn hmac_with(secret: &Secret) -> HmacSha256 {
    // HMAC takes keys of any length; the error branch cannot happen for Hmac<Sha256>.
    HmacSha256::new_from_slice(secret.bytes()).unwrap_or_else(|_| unreachable_mac())
}

#[allow(clippy::panic)]
fn unreachable_mac() -> HmacSha256 {
    panic!("HMAC-SHA256 accepts keys of every length")
}

/// A delivery whose signature was checked: only this is handed to [`parse`](super::parse).
#[derive(Clone, Debug)]
pub struct VerifiedDelivery {
    scheme: &'static str,
    body: Bytes,
    signed_at: Option<SystemTime>,
}

impl VerifiedDelivery {
    /// Wraps a body a [`Verifier`] has accepted. Only verifiers should call this: a
    /// `VerifiedDelivery` is the proof that verification ran.
    pub fn new(
        scheme: &'static str,
        body: impl Into<Bytes>,
        signed_at: Option<SystemTime>,
    ) -> Self {
        Self {
            scheme,
            body: body.into(),
            signed_at,
        }
    }

    /// The verifier that accepted it (`stripe`, `hmac-header`, `square`, `adyen-hmac`, ...).
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// The raw body, exactly as signed.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The signed timestamp, when the scheme signs one.
    pub fn signed_at(&self) -> Option<SystemTime> {
        self.signed_at
    }
}

/// Why a delivery was refused. Never carries the secret, the signature or the body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The signature header is absent.
    #[error("signature header `{header}` is missing")]
    MissingHeader {
        /// The header expected.
        header: String,
    },
    /// The signature header (or the signed fields) cannot be read.
    #[error("signature header `{header}` is malformed: {why}")]
    Malformed {
        /// The header (or field) that is malformed.
        header: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Well-formed, but no signature matches any configured secret: forged, or signed with a
    /// secret this endpoint does not hold.
    #[error("no signature in `{header}` matches a configured secret")]
    NoMatchingSignature {
        /// The header checked.
        header: String,
    },
    /// The signature matches but its timestamp is too old (a replay) or too far in the future.
    #[error(
        "signed timestamp is {skew_secs} s from now, outside the tolerance of {tolerance_secs} s"
    )]
    TimestampOutsideTolerance {
        /// Signed time minus now, in seconds (negative: in the past).
        skew_secs: i64,
        /// The configured tolerance, in seconds.
        tolerance_secs: u64,
    },
    /// The verifier holds no secret, so it can accept nothing.
    #[error("the verifier has no secret configured")]
    NoSecret,
    /// The scheme cannot be verified offline by this crate (PayPal's certificate signatures).
    #[error("signature scheme `{scheme}` is not supported offline")]
    Unsupported {
        /// The scheme.
        scheme: &'static str,
    },
}

/// Checks a delivery's signature before anything of it is read.
///
/// Object safe: endpoints hold an `Arc<dyn Verifier>`. Implementations must be constant time in
/// the comparison of signatures and must not put the secret or the body in their errors.
pub trait Verifier: Send + Sync + fmt::Debug {
    /// Verifies `body` as received with `headers` at time `now`.
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<VerifiedDelivery, VerifyError>;
}

/// Stripe's `Stripe-Signature: t=<unix>,v1=<hex>,v1=<hex>` scheme.
///
/// HMAC-SHA256 over `"{t}.{body}"` with the endpoint's signing secret, hex encoded; any `v1`
/// entry may match any configured secret (rotation); `t` must lie within the tolerance of `now`
/// in both directions. Other schemes (`v0`, test-mode entries) are ignored, as Stripe's libraries
/// do. Checked against docs.stripe.com/webhooks#verify-manually and stripe-ruby's `webhook.rb`
/// (2026-11-30).
#[derive(Clone, Debug)]
pub struct StripeSignature {
    secrets: Vec<Secret>,
    tolerance: Duration,
}

impl StripeSignature {
    /// The header Stripe signs in.
    pub const HEADER: &'static str = "stripe-signature";

    /// A verifier with one secret and the default tolerance of 300 s.
    pub fn new(secret: Secret) -> Self {
        Self {
            secrets: vec![secret],
            tolerance: DEFAULT_TOLERANCE,
        }
    }

    /// Adds a secret that is also accepted (rotation).
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// Sets the tolerance on the signed timestamp.
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The header value Stripe would send for `body` at `timestamp` (tests and the fake vendor).
    pub fn sign(secret: &Secret, timestamp: i64, body: &[u8]) -> String {
        let mut mac = hmac_with(secret);
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("t={timestamp},v1={}", hex(&mac.finalize().into_bytes()))
    }
}

impl Verifier for StripeSignature {
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<VerifiedDelivery, VerifyError> {
        let header = Self::HEADER;
        let malformed = |why| VerifyError::Malformed {
            header: header.to_owned(),
            why,
        };
        if self.secrets.is_empty() {
            return Err(VerifyError::NoSecret);
        }
        let value = headers.get(header).ok_or(VerifyError::MissingHeader {
            header: header.to_owned(),
        })?;
        let value = value.to_str().map_err(|_| malformed("not visible ASCII"))?;
        let mut timestamp: Option<&str> = None;
        let mut signatures = Vec::new();
        for item in value.split(',') {
            let (k, v) = item
                .trim()
                .split_once('=')
                .ok_or(malformed("an element is not key=value"))?;
            match k {
                "t" if timestamp.is_some() => return Err(malformed("more than one t")),
                "t" => timestamp = Some(v),
                "v1" => signatures.push(v),
                _ => {}
            }
        }
        let t_str = timestamp.ok_or(malformed("no t element"))?;
        let t: i64 = t_str
            .parse()
            .map_err(|_| malformed("t is not an integer"))?;
        if signatures.is_empty() {
            return Err(malformed("no v1 signature"));
        }
        // Entries that are not 32 bytes of hex simply cannot match.
        let decoded: Vec<Vec<u8>> = signatures.iter().filter_map(|s| decode_hex(s)).collect();
        let matched = self.secrets.iter().any(|secret| {
            let mut mac = hmac_with(secret);
            mac.update(t_str.as_bytes());
            mac.update(b".");
            mac.update(body);
            decoded
                .iter()
                .any(|sig| mac.clone().verify_slice(sig).is_ok())
        });
        if !matched {
            return Err(VerifyError::NoMatchingSignature {
                header: header.to_owned(),
            });
        }
        check_tolerance(t, now, self.tolerance)?;
        Ok(VerifiedDelivery::new(
            "stripe",
            Bytes::copy_from_slice(body),
            Some(unix_to_time(t)),
        ))
    }
}

/// How a MAC is written in a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Lower- or upper-case hex digits.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

/// A generic `HMAC-SHA256` header scheme, covering GitHub (`X-Hub-Signature-256: sha256=<hex>`),
/// Square (notification URL + body, base64) and most "signed body" webhooks.
///
/// The signed content is `[signed_prefix][timestamp header value + separator]body`.
#[derive(Clone, Debug)]
pub struct HmacHeader {
    header: HeaderName,
    secrets: Vec<Secret>,
    encoding: Encoding,
    value_prefix: Option<String>,
    signed_prefix: Option<Vec<u8>>,
    timestamp: Option<(HeaderName, String, Duration)>,
    scheme: &'static str,
}

impl HmacHeader {
    /// HMAC-SHA256 of the body in `header`, in `encoding`, with one secret.
    pub fn new(header: HeaderName, encoding: Encoding, secret: Secret) -> Self {
        Self {
            header,
            secrets: vec![secret],
            encoding,
            value_prefix: None,
            signed_prefix: None,
            timestamp: None,
            scheme: "hmac-header",
        }
    }

    /// GitHub's scheme: `X-Hub-Signature-256: sha256=<hex>` over the body.
    pub fn github(secret: Secret) -> Self {
        Self::new(
            HeaderName::from_static("x-hub-signature-256"),
            Encoding::Hex,
            secret,
        )
        .value_prefix("sha256=")
    }

    /// Adds a secret that is also accepted (rotation).
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// The header value starts with this text before the MAC (`sha256=`).
    pub fn value_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.value_prefix = Some(prefix.into());
        self
    }

    /// Fixed bytes signed before everything else (Square: the notification URL).
    pub fn signed_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.signed_prefix = Some(prefix.into());
        self
    }

    /// The value of `header` (unix seconds) is signed before the body, followed by `separator`,
    /// and must lie within `tolerance` of now.
    pub fn timestamp_header(
        mut self,
        header: HeaderName,
        separator: impl Into<String>,
        tolerance: Duration,
    ) -> Self {
        self.timestamp = Some((header, separator.into(), tolerance));
        self
    }

    /// The MAC a sender would put in the header (without any value prefix).
    pub fn sign(&self, secret: &Secret, timestamp: Option<&str>, body: &[u8]) -> String {
        let mac = self.mac_over(secret, timestamp, body);
        let bytes = mac.finalize().into_bytes();
        match self.encoding {
            Encoding::Hex => hex(&bytes),
            Encoding::Base64 => BASE64.encode(bytes),
        }
    }

    /// The signature header, the value prefix and the timestamp header (for senders).
    pub fn parts(&self) -> (&str, Option<&str>, Option<&str>) {
        (
            self.header.as_str(),
            self.value_prefix.as_deref(),
            self.timestamp.as_ref().map(|(h, _, _)| h.as_str()),
        )
    }

    fn mac_over(&self, secret: &Secret, timestamp: Option<&str>, body: &[u8]) -> HmacSha256 {
        let mut mac = hmac_with(secret);
        if let Some(p) = &self.signed_prefix {
            mac.update(p);
        }
        if let (Some(t), Some((_, sep, _))) = (timestamp, &self.timestamp) {
            mac.update(t.as_bytes());
            mac.update(sep.as_bytes());
        }
        mac.update(body);
        mac
    }
}

impl Verifier for HmacHeader {
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<VerifiedDelivery, VerifyError> {
        let name = self.header.as_str();
        let malformed = |header: &str, why| VerifyError::Malformed {
            header: header.to_owned(),
            why,
        };
        if self.secrets.is_empty() {
            return Err(VerifyError::NoSecret);
        }
        let mut timestamp = None;
        if let Some((t_header, _, _)) = &self.timestamp {
            let v = headers
                .get(t_header)
                .ok_or(VerifyError::MissingHeader {
                    header: t_header.as_str().to_owned(),
                })?
                .to_str()
                .map_err(|_| malformed(t_header.as_str(), "not visible ASCII"))?;
            let t: i64 = v
                .trim()
                .parse()
                .map_err(|_| malformed(t_header.as_str(), "not unix seconds"))?;
            timestamp = Some((v, t));
        }
        let mut values = headers.get_all(&self.header).iter().peekable();
        if values.peek().is_none() {
            return Err(VerifyError::MissingHeader {
                header: name.to_owned(),
            });
        }
        let mut signatures = Vec::new();
        for value in values {
            let v = value
                .to_str()
                .map_err(|_| malformed(name, "not visible ASCII"))?
                .trim();
            let v = match &self.value_prefix {
                Some(p) => v
                    .strip_prefix(p.as_str())
                    .ok_or(malformed(name, "the expected prefix is missing"))?,
                None => v,
            };
            let decoded = match self.encoding {
                Encoding::Hex => decode_hex(v),
                Encoding::Base64 => BASE64.decode(v).ok(),
            };
            signatures
                .push(decoded.ok_or(malformed(name, "the signature is not validly encoded"))?);
        }
        let matched = self.secrets.iter().any(|secret| {
            let mac = self.mac_over(secret, timestamp.map(|(v, _)| v), body);
            signatures
                .iter()
                .any(|sig| mac.clone().verify_slice(sig).is_ok())
        });
        if !matched {
            return Err(VerifyError::NoMatchingSignature {
                header: name.to_owned(),
            });
        }
        let mut signed_at = None;
        if let (Some((_, t)), Some((_, _, tolerance))) = (timestamp, &self.timestamp) {
            check_tolerance(t, now, *tolerance)?;
            signed_at = Some(unix_to_time(t));
        }
        Ok(VerifiedDelivery::new(
            self.scheme,
            Bytes::copy_from_slice(body),
            signed_at,
        ))
    }
}

/// Square's `x-square-hmacsha256-signature`: HMAC-SHA256 over the notification URL (exactly as
/// configured in the subscription) followed by the raw body, base64 encoded.
///
/// Checked against developer.squareup.com/docs/webhooks/step3validate (2026-11-30). Square signs
/// no timestamp, so a captured delivery can be replayed: deduplication by `event_id` is what
/// makes that harmless.
#[derive(Clone, Debug)]
pub struct SquareSignature(HmacHeader);

impl SquareSignature {
    /// The header Square signs in.
    pub const HEADER: &'static str = "x-square-hmacsha256-signature";

    /// A verifier for deliveries to `notification_url` signed with `signature_key`.
    pub fn new(notification_url: impl Into<String>, signature_key: Secret) -> Self {
        let mut inner = HmacHeader::new(
            HeaderName::from_static(Self::HEADER),
            Encoding::Base64,
            signature_key,
        )
        .signed_prefix(notification_url.into().into_bytes());
        inner.scheme = "square";
        Self(inner)
    }

    /// Adds a signature key that is also accepted (rotation).
    pub fn secret(self, secret: Secret) -> Self {
        Self(self.0.secret(secret))
    }

    /// The header value Square would send for `body` (tests and the fake vendor).
    pub fn sign(&self, secret: &Secret, body: &[u8]) -> String {
        self.0.sign(secret, None, body)
    }
}

impl Verifier for SquareSignature {
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<VerifiedDelivery, VerifyError> {
        self.0.verify(headers, body, now)
    }
}

/// PayPal signs webhooks with an RSA certificate (`PAYPAL-TRANSMISSION-SIG`, certificate fetched
/// from `PAYPAL-CERT-URL`, CRC32 of the body in the signed string) or expects the listener to
/// call `POST /v1/notifications/verify-webhook-signature`. Neither is an offline HMAC, so this
/// crate ships no PayPal verifier: this one refuses everything with
/// [`VerifyError::Unsupported`]. Verify PayPal deliveries with your own [`Verifier`] (e.g. after
/// the verify API answered `SUCCESS`). Source: developer.paypal.com/api/rest/webhooks/rest
/// (2026-11-30).
#[derive(Clone, Copy, Debug, Default)]
pub struct PayPalUnsupported;

impl Verifier for PayPalUnsupported {
    fn verify(
        &self,
        _headers: &HeaderMap,
        _body: &[u8],
        _now: SystemTime,
    ) -> Result<VerifiedDelivery, VerifyError> {
        Err(VerifyError::Unsupported { scheme: "paypal" })
    }
}

/// Adyen's HMAC signature of standard notifications: each `NotificationRequestItem` carries
/// `additionalData.hmacSignature`, the base64 HMAC-SHA256 (key: the hex HMAC key, decoded) of
/// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`
/// (absent fields as empty strings).
///
/// The signature lives inside the payload, so this verifier must read the JSON to find it; it
/// extracts nothing else, and the delivery is accepted only when **every** item is signed and
/// matches (one forged item refuses the whole batch, as nothing of a batch is trusted
/// piecemeal). Adyen signs no timestamp: deduplication makes replays harmless. Checked against
/// docs.adyen.com/development-resources/webhooks/verify-hmac-signatures (2026-11-30).
#[derive(Clone, Debug)]
pub struct AdyenHmac {
    secrets: Vec<Secret>,
}

impl AdyenHmac {
    /// A verifier with one HMAC key (hex digits, as Adyen's Customer Area shows it: 64 of
    /// them, 32 bytes).
    ///
    /// # Errors
    ///
    /// A [`KeyError`] when the key is not hex digits or decodes to fewer than
    /// [`Secret::MIN_LEN`] bytes (see [`Secret::from_hex`]).
    pub fn new(hex_key: &str) -> Result<Self, KeyError> {
        Ok(Self {
            secrets: vec![Secret::from_hex(hex_key)?],
        })
    }

    /// Adds a key that is also accepted (rotation).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn key(mut self, hex_key: &str) -> Result<Self, KeyError> {
        self.secrets.push(Secret::from_hex(hex_key)?);
        Ok(self)
    }

    /// The signing string of one `NotificationRequestItem`.
    pub fn signing_string(item: &serde_json::Value) -> String {
        let field = |p: &str| match item.pointer(p) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Null) | None => String::new(),
            Some(v) => v.to_string(),
        };
        [
            "/pspReference",
            "/originalReference",
            "/merchantAccountCode",
            "/merchantReference",
            "/amount/value",
            "/amount/currency",
            "/eventCode",
            "/success",
        ]
        .map(field)
        .join(":")
    }

    /// The `hmacSignature` Adyen would put in `item` (tests and the fake vendor).
    pub fn sign(secret: &Secret, item: &serde_json::Value) -> String {
        let mut mac = hmac_with(secret);
        mac.update(Self::signing_string(item).as_bytes());
        BASE64.encode(mac.finalize().into_bytes())
    }
}

impl Verifier for AdyenHmac {
    fn verify(
        &self,
        _headers: &HeaderMap,
        body: &[u8],
        _now: SystemTime,
    ) -> Result<VerifiedDelivery, VerifyError> {
        const FIELD: &str = "additionalData.hmacSignature";
        let malformed = |why| VerifyError::Malformed {
            header: FIELD.to_owned(),
            why,
        };
        if self.secrets.is_empty() {
            return Err(VerifyError::NoSecret);
        }
        let json: serde_json::Value =
            serde_json::from_slice(body).map_err(|_| malformed("the body is not JSON"))?;
        let items = json
            .pointer("/notificationItems")
            .and_then(|v| v.as_array())
            .filter(|a| !a.is_empty())
            .ok_or(malformed("no notificationItems"))?;
        for wrapper in items {
            let item = wrapper
                .get("NotificationRequestItem")
                .ok_or(malformed("an item is not a NotificationRequestItem"))?;
            let sig = item
                .pointer("/additionalData/hmacSignature")
                .and_then(|v| v.as_str())
                .ok_or(VerifyError::MissingHeader {
                    header: FIELD.to_owned(),
                })?;
            let sig = BASE64
                .decode(sig)
                .map_err(|_| malformed("the signature is not base64"))?;
            let signing = Self::signing_string(item);
            let ok = self.secrets.iter().any(|secret| {
                let mut mac = hmac_with(secret);
                mac.update(signing.as_bytes());
                mac.verify_slice(&sig).is_ok()
            });
            if !ok {
                return Err(VerifyError::NoMatchingSignature {
                    header: FIELD.to_owned(),
                });
            }
        }
        Ok(VerifiedDelivery::new(
            "adyen-hmac",
            Bytes::copy_from_slice(body),
            None,
        ))
    }
}

fn check_tolerance(t: i64, now: SystemTime, tolerance: Duration) -> Result<(), VerifyError> {
    let now_secs = match now.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    let skew = t.saturating_sub(now_secs);
    let tol = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    if skew.unsigned_abs() > tol.unsigned_abs() {
        return Err(VerifyError::TimestampOutsideTolerance {
            skew_secs: skew,
            tolerance_secs: tolerance.as_secs(),
        });
    }
    Ok(())
}

fn unix_to_time(t: i64) -> SystemTime {
    if t >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(t.unsigned_abs())
    }
}
