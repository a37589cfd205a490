//! Identities and the frozen request.
//!
//! Four identities are involved in one recoverable write, and they are never mixed
//! (DESIGN.md, seed 000):
//!
//! | identity | type | made when | purpose |
//! |---|---|---|---|
//! | operation id | [`OperationId`] | when the caller approves the intent | names the business intent; resume and query by it |
//! | idempotency key | [`IdempotencyKey`] | once, with the operation | lets the vendor dedupe; never regenerated |
//! | attempt id | [`AttemptId`] | each time bytes are handed to the network | troubleshooting; the send-once guard |
//! | generation | [`Generation`] | at every claim of send or recovery rights | fences out stale workers |
//!
//! The payload is frozen when the operation is created: method, URL, the non-secret headers and
//! the body bytes. Every send of the operation, replays included, uses exactly these bytes and the
//! same key. A SHA-256 over a canonical form of the payload ([`PayloadHash`]) binds the operation
//! to its content: the same operation presented with another payload is a conflict and nothing is
//! sent.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, Uri};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::encoding::decode_component_str;
use crate::inline_str::InlineStr;

mod headers;
pub use headers::{FrozenHeaders, FrozenHeadersIter, HeaderBytes};

/// The tenant an operation belongs to.
///
/// Comes from a trusted context (the authenticated caller), never from model output. Writes
/// that do not name a tenant belong to [`Tenant::DEFAULT`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// The tenant of writes that do not name one.
    pub const DEFAULT: &'static str = "default";

    /// Creates a tenant from its name.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into().into())
    }

    /// The tenant's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Tenant {
    fn default() -> Self {
        // One shared string for every write that names no tenant (no allocation per call).
        static DEFAULT: std::sync::LazyLock<Arc<str>> =
            std::sync::LazyLock::new(|| Tenant::DEFAULT.into());
        Self(DEFAULT.clone())
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Names one business intent, for example "create the fault ticket for device E17".
///
/// It survives retries, process restarts and conversation rounds: a caller that names the same
/// operation id again gets that operation's state or its stored result, never a second create.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OperationId(Arc<str>);

impl OperationId {
    /// Generates a new operation id of the form `op-<32 hex digits>`.
    pub fn generate() -> Self {
        // Built on the stack, one allocation for the shared string. ASCII throughout, so the
        // lossy conversion never replaces anything.
        let mut buf = [0u8; 35];
        buf[..3].copy_from_slice(b"op-");
        let hex = Uuid::new_v4().simple().encode_lower(&mut buf[3..]).len();
        Self(Arc::from(&*String::from_utf8_lossy(&buf[..3 + hex])))
    }

    /// Uses a caller-chosen id, such as the id of an approved intent in the caller's database.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into().into())
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The idempotency key sent to the vendor on every attempt of one operation.
///
/// An opaque random UUID v4, made once when the operation is created and never derived from
/// personal data or from the payload. No code path in this crate mints a second key for an
/// existing operation: changing the key would bypass the vendor's deduplication.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
// A generated key (36 characters) is kept inline: no allocation per write.
pub struct IdempotencyKey(InlineStr<36>);

impl IdempotencyKey {
    /// Makes a fresh random key (UUID v4, hyphenated, 36 characters).
    pub fn generate() -> Self {
        let mut buf = [0u8; 36];
        Self(InlineStr::new(
            Uuid::new_v4().hyphenated().encode_lower(&mut buf),
        ))
    }

    /// Restores a key read back from a ledger.
    pub fn from_stored(key: impl Into<String>) -> Self {
        Self(InlineStr::from_string(key.into()))
    }

    /// The key as sent on the wire (before any contract-specific quoting).
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys are not credentials, but they are replay tokens: show enough to correlate.
        write!(
            f,
            "IdempotencyKey({}…)",
            crate::encoding::first_chars(self.0.as_str(), 8)
        )
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Names one hand-over of bytes to the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AttemptId(Uuid);

impl AttemptId {
    /// A fresh attempt id.
    pub fn generate() -> Self {
        Self(Uuid::new_v4())
    }

    /// Restores an attempt id read back from a ledger.
    pub fn parse(s: &str) -> Option<Self> {
        Uuid::parse_str(s).ok().map(Self)
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at-{}", self.0.simple())
    }
}

impl AttemptId {
    /// The canonical string form stored in ledgers (the UUID, hyphenated).
    pub fn to_stored(&self) -> String {
        self.0.hyphenated().to_string()
    }
}

/// The fence: incremented at every claim of send or recovery rights.
///
/// A result is recorded only by the holder of the current generation; a stale worker that
/// wakes up after its lease expired holds an old generation and is refused by the ledger.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The next generation.
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

/// The caller's identification of a write, carried in the request extensions.
///
/// ```
/// use recoverable_write::Operation;
///
/// // The user approved "create a fault ticket for device E17" as intent 7781 of tenant A.
/// let op = Operation::new("tenant-a", "create_ticket", "intent-7781");
/// let mut req = http::Request::post("http://vendor.test/tickets").body(()).unwrap();
/// req.extensions_mut().insert(op.clone());
///
/// // Later, resume by operation id alone: returns its state or stored result, never a create.
/// let resume = Operation::resume("tenant-a", op.id().clone());
/// # let _ = resume;
/// ```
///
/// `(tenant, action, intent_ref)` is unique in the ledger, so the same approved intent can never
/// become two operations even if a second operation id is generated for it. A genuinely new intent
/// (a second ticket the user really wants) takes a new `intent_ref`. Content similarity is never
/// the test.
///
/// A write that reaches the layer without an `Operation` passes through untracked (nothing is
/// stored: an OAuth token request through an app-wide client must not end up in the ledger).
/// With [`RecoverableWriteLayer::track_all_writes`](crate::RecoverableWriteLayer::track_all_writes)
/// it gets a generated one (tenant [`Tenant::DEFAULT`], action `"<METHOD> <host><path>"`, a fresh
/// intent): it is protected against lost responses, inner retries and crashes, but a caller that
/// retries at a higher level without naming the operation creates a new intent. Name the
/// operation to get resumption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    tenant: Tenant,
    id: OperationId,
    action: Arc<str>,
    intent_ref: Arc<str>,
    /// Made by [`Operation::resume`]: the operation must already exist.
    existing_only: bool,
}

/// `parts` joined into a shared string with one allocation: on the stack first when short, so
/// only the `Arc` allocates.
fn arc_concat(parts: &[&str]) -> Arc<str> {
    let mut buf = [0u8; 256];
    let mut n = 0;
    for p in parts {
        let Some(dst) = buf.get_mut(n..n + p.len()) else {
            return Arc::from(parts.concat());
        };
        dst.copy_from_slice(p.as_bytes());
        n += p.len();
    }
    // Whole strings joined: always UTF-8.
    match std::str::from_utf8(&buf[..n]) {
        Ok(s) => Arc::from(s),
        Err(_) => Arc::from(parts.concat()),
    }
}

impl Operation {
    /// A new operation for an approved intent. The operation id is generated; if the ledger
    /// already holds an operation for `(tenant, action, intent_ref)`, that one is used instead.
    pub fn new(
        tenant: impl Into<String>,
        action: impl Into<String>,
        intent_ref: impl Into<String>,
    ) -> Self {
        Self {
            tenant: Tenant::new(tenant),
            id: OperationId::generate(),
            action: Arc::from(action.into()),
            intent_ref: Arc::from(intent_ref.into()),
            existing_only: false,
        }
    }

    /// Like [`new`](Self::new), with an operation id derived from `(tenant, action, intent_ref)`
    /// (`op-` and 32 hex digits of a SHA-256), so a caller that must put the operation id into
    /// the request body (as seed 000's ticket API does) builds the same body on every call for
    /// the same intent. The id is opaque and reveals nothing of the intent reference.
    ///
    /// ```
    /// use recoverable_write::Operation;
    /// let a = Operation::for_intent("tenant-a", "create_ticket", "sr-1001");
    /// let b = Operation::for_intent("tenant-a", "create_ticket", "sr-1001");
    /// assert_eq!(a.id(), b.id());
    /// assert_ne!(a.id(), Operation::for_intent("tenant-b", "create_ticket", "sr-1001").id());
    /// ```
    pub fn for_intent(
        tenant: impl Into<String>,
        action: impl Into<String>,
        intent_ref: impl Into<String>,
    ) -> Self {
        let (tenant, action, intent_ref) = (tenant.into(), action.into(), intent_ref.into());
        let mut h = Sha256::new();
        for part in [&tenant, &action, &intent_ref] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        let digest = hex(&h.finalize());
        Self {
            tenant: Tenant::new(tenant),
            id: OperationId::new(format!("op-{}", &digest[..32])),
            action: Arc::from(action),
            intent_ref: Arc::from(intent_ref),
            existing_only: false,
        }
    }

    /// Names an existing operation by its id, e.g. to resume `op-204`: a call with it returns the
    /// operation's state or stored result, or sends it if it was recorded and never sent. It
    /// never creates anything: an id the ledger does not hold for this tenant (a typo) is
    /// [`Error::NotFound`](crate::Error::NotFound) and nothing is sent.
    pub fn resume(tenant: impl Into<String>, id: OperationId) -> Self {
        Self {
            tenant: Tenant::new(tenant),
            intent_ref: id.0.clone(),
            id,
            action: Arc::from(""),
            existing_only: true,
        }
    }

    /// Whether this names an existing operation only ([`resume`](Self::resume)).
    pub fn is_resume(&self) -> bool {
        self.existing_only
    }

    /// Sets a caller-chosen operation id.
    pub fn with_id(mut self, id: OperationId) -> Self {
        self.id = id;
        self
    }

    /// An operation for a write that named none (see the type docs).
    pub fn ad_hoc(method: &Method, uri: &Uri) -> Self {
        let id = OperationId::generate();
        Self {
            tenant: Tenant::default(),
            action: arc_concat(&[method.as_str(), " ", uri.host().unwrap_or(""), uri.path()]),
            // The fresh intent is the operation's own id, shared.
            intent_ref: id.0.clone(),
            id,
            existing_only: false,
        }
    }

    /// The tenant.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Tenant, id, action and intent reference, moved out (no copy of the strings).
    pub(crate) fn into_parts(self) -> (Tenant, OperationId, Arc<str>, Arc<str>) {
        (self.tenant, self.id, self.action, self.intent_ref)
    }

    /// The operation id.
    pub fn id(&self) -> &OperationId {
        &self.id
    }

    /// The action, e.g. `create_ticket`.
    pub fn action(&self) -> &str {
        &self.action
    }

    /// The caller's reference to the approved intent.
    pub fn intent_ref(&self) -> &str {
        &self.intent_ref
    }
}

/// Headers that are never stored: credentials are applied by the stack below the layer at send
/// time. Contracts may name more. Lower case (header names compare lower-cased).
///
/// Beyond the standard ones, the names common vendors use for API keys and tokens (GitLab's
/// `private-token`, AWS's session token, Google's and Azure's API keys, Datadog's keys, ...).
pub const DEFAULT_SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "apikey",
    "x-auth-token",
    "x-access-token",
    "access-token",
    "private-token",
    "x-private-token",
    "x-amz-security-token",
    "x-goog-api-key",
    "ocp-apim-subscription-key",
    "x-vault-token",
    "x-csrf-token",
    "x-xsrf-token",
    "x-client-secret",
    "x-refresh-token",
    "dd-api-key",
    "dd-application-key",
];

/// Query parameters that are never stored (credentials some vendors take in the URL), compared
/// case-insensitively. Contracts may name more
/// ([`Contract::secret_query_params`](crate::Contract::secret_query_params)). Like secret
/// headers, the first send carries the caller's values; a replay gets them from the stack it is
/// sent through.
pub const DEFAULT_SECRET_QUERY_PARAMS: &[&str] = &[
    "api_key",
    "apikey",
    "key",
    "token",
    "access_token",
    "auth",
    "password",
    "secret",
    "client_secret",
    "signature",
    "sig",
];

/// Headers that describe the connection or are recomputed at send time, never frozen. `Host`
/// is frozen: it names the virtual host the write was sent to.
const UNFROZEN_HEADERS: &[&str] = &[
    "content-length",
    "connection",
    "transfer-encoding",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
];

/// The request as frozen when the operation was created: what every attempt sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrozenRequest {
    /// HTTP method (a standard one is stored without a heap allocation).
    pub method: Method,
    /// The URL the write was sent to, without credentials: no userinfo, no secret query
    /// parameter.
    pub url: String,
    /// Non-secret headers in order (names lower-cased, values as their exact bytes), `Host`
    /// included when the request carried one; all in one buffer.
    pub headers: FrozenHeaders,
    /// The body bytes, before any idempotency key is placed into them.
    pub body: Bytes,
}

impl FrozenRequest {
    /// Freezes a request: drops credentials (`secrets.headers` on top of
    /// [`DEFAULT_SECRET_HEADERS`]; userinfo and `secrets.query_params` on top of
    /// [`DEFAULT_SECRET_QUERY_PARAMS`] from the URL; `secrets.body_fields` from the body) and
    /// connection headers. Every other header value is kept byte for byte, in one allocation.
    pub fn freeze(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: Bytes,
        secrets: SecretNames<'_>,
    ) -> Self {
        let headers = FrozenHeaders::sized(|| {
            headers
                .iter()
                .filter(|(name, _)| !is_secret(name, secrets.headers) && !is_unfrozen(name))
                .map(|(name, value)| (name.as_str(), value.as_bytes()))
        });
        Self {
            method: method.clone(),
            url: uri_string(&redacted_uri(uri, secrets.query_params)),
            headers,
            body: redact_body(&body, secrets.body_fields),
        }
    }

    /// Rebuilds an `http::Request` carrying exactly the frozen bytes (used by replays).
    pub fn to_request(&self) -> Result<http::Request<Bytes>, http::Error> {
        let mut builder = http::Request::builder()
            .method(self.method.as_str())
            .uri(self.url.as_str());
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        builder.body(self.body.clone())
    }
}

/// `uri.to_string()`, written into a string sized up front (one allocation, no growth).
fn uri_string(uri: &Uri) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(
        uri.scheme_str().map_or(0, |s| s.len() + 3)
            + uri.authority().map_or(0, |a| a.as_str().len())
            + uri.path_and_query().map_or(1, |pq| pq.as_str().len()),
    );
    let _ = write!(out, "{uri}");
    out
}

/// The names of a write's credentials, which are never stored: a contract's
/// ([`Contract::secrets`](crate::Contract::secrets)), on top of the defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct SecretNames<'a> {
    /// Header names, beyond [`DEFAULT_SECRET_HEADERS`].
    pub headers: &'a [String],
    /// Query parameter names, beyond [`DEFAULT_SECRET_QUERY_PARAMS`].
    pub query_params: &'a [String],
    /// Body fields: JSON pointers (`/client_secret`) for JSON bodies, field names
    /// (`client_secret`) for form bodies.
    pub body_fields: &'a [String],
}

/// `body` without the secret `fields` (see [`SecretNames::body_fields`]); the same bytes when
/// there is nothing to remove. A JSON body that loses a field is re-serialized compactly (it is
/// never sent as stored: the first send carries the caller's bytes, a replay needs the replay
/// stack to put the secrets back).
pub(crate) fn redact_body(body: &Bytes, fields: &[String]) -> Bytes {
    if fields.is_empty() || body.is_empty() {
        return body.clone();
    }
    let (pointers, names): (Vec<&String>, Vec<&String>) =
        fields.iter().partition(|f| f.starts_with('/'));
    if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) {
        let mut removed = false;
        for p in pointers {
            removed |= remove_pointer(&mut value, p);
        }
        return match removed {
            true => serde_json::to_vec(&value).map_or_else(|_| Bytes::new(), Bytes::from),
            false => body.clone(),
        };
    }
    let Ok(form) = std::str::from_utf8(body) else {
        return body.clone();
    };
    let is_named = |pair: &str| {
        let name = decode_component_str(pair.split_once('=').map_or(pair, |(n, _)| n));
        names.iter().any(|n| **n == name)
    };
    if !form.split('&').any(is_named) {
        return body.clone();
    }
    let kept: Vec<&str> = form.split('&').filter(|p| !is_named(p)).collect();
    Bytes::from(kept.join("&"))
}

/// Removes the member `pointer` (RFC 6901) names; `true` if there was one.
fn remove_pointer(value: &mut serde_json::Value, pointer: &str) -> bool {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return false;
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(serde_json::Value::Object(map)) => map.remove(&last).is_some(),
        Some(serde_json::Value::Array(items)) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => {
                items.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// Whether `name` is a credential header (the defaults or one of `extra`).
pub(crate) fn is_secret(name: &HeaderName, extra: &[String]) -> bool {
    let n = name.as_str();
    DEFAULT_SECRET_HEADERS.contains(&n) || extra.iter().any(|s| s.eq_ignore_ascii_case(n))
}

pub(crate) fn is_unfrozen(name: &HeaderName) -> bool {
    UNFROZEN_HEADERS.contains(&name.as_str())
}

/// Whether the query pair `pair` (`name=value`, still percent-encoded) names a secret parameter.
pub(crate) fn is_secret_param(pair: &str, extra: &[String]) -> bool {
    let name = decode_component_str(pair.split_once('=').map_or(pair, |(n, _)| n));
    DEFAULT_SECRET_QUERY_PARAMS
        .iter()
        .any(|s| s.eq_ignore_ascii_case(&name))
        || extra.iter().any(|s| s.eq_ignore_ascii_case(&name))
}

/// `uri` without its credentials: userinfo and secret query parameters removed. Borrowed (no
/// allocation) when there is nothing to remove, the common case.
pub(crate) fn redacted_uri<'a>(
    uri: &'a Uri,
    secret_params: &[String],
) -> std::borrow::Cow<'a, Uri> {
    let userinfo = uri.authority().is_some_and(|a| a.as_str().contains('@'));
    let secret_query = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| is_secret_param(p, secret_params)));
    if !userinfo && !secret_query {
        return std::borrow::Cow::Borrowed(uri);
    }
    let mut parts = uri.clone().into_parts();
    if let Some(authority) = &parts.authority
        && let Some((_, host)) = authority.as_str().rsplit_once('@')
        && let Ok(a) = host.parse()
    {
        parts.authority = Some(a);
    }
    if secret_query && let Some(pq) = &parts.path_and_query {
        let kept: Vec<&str> = pq
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !is_secret_param(p, secret_params))
            .collect();
        let rebuilt = if kept.is_empty() {
            pq.path().to_owned()
        } else {
            format!("{}?{}", pq.path(), kept.join("&"))
        };
        if let Ok(pq) = rebuilt.parse() {
            parts.path_and_query = Some(pq);
        }
    }
    match Uri::from_parts(parts) {
        Ok(u) => std::borrow::Cow::Owned(u),
        // Cannot happen for parts taken from a valid URI; never keep the credentials.
        Err(_) => std::borrow::Cow::Owned(Uri::from_static("/")),
    }
}

/// Which parts of a JSON body define the business payload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", content = "pointers")]
pub enum PayloadDigest {
    /// The whole body (JSON bodies canonicalized: keys sorted, insignificant whitespace removed).
    #[default]
    Full,
    /// Only the named JSON pointers (RFC 6901), e.g. `["/amount", "/currency", "/device_id"]`:
    /// a reworded free-text memo does not make a different operation, a changed amount does.
    Fields(Vec<String>),
}

/// SHA-256 over the canonical form of a payload, lower-case hex.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
// SHA-256 in hex (64 characters) is kept inline: no allocation per write.
pub struct PayloadHash(InlineStr<64>);

impl PayloadHash {
    /// Computes the hash of `method`, the normalized `url` and the canonical `body`.
    ///
    /// JSON bodies (any body that parses as JSON) are canonicalized; with
    /// [`PayloadDigest::Fields`] only the named fields count (a missing field hashes as absent).
    /// Other bodies are hashed byte for byte.
    pub fn compute(method: &str, url: &str, body: &[u8], digest: &PayloadDigest) -> Self {
        let normalized = match url.parse::<Uri>() {
            Ok(uri) => normalize_uri(&uri),
            Err(_) => url.to_owned(),
        };
        Self::digest(&method.to_ascii_uppercase(), &normalized, body, digest)
    }

    /// [`compute`](Self::compute) from the request's parsed method and URI (the layer's path:
    /// no re-parse of the URL). The same value as `compute(method.as_str(), &uri.to_string(),
    /// ..)`.
    pub(crate) fn compute_for(
        method: &Method,
        uri: &Uri,
        body: &[u8],
        digest: &PayloadDigest,
    ) -> Self {
        // Methods are case-sensitive tokens; the standard ones are upper case already.
        let upper;
        let method = if method.as_str().bytes().any(|b| b.is_ascii_lowercase()) {
            upper = method.as_str().to_ascii_uppercase();
            upper.as_str()
        } else {
            method.as_str()
        };
        Self::digest_with(method, |h| write_normalized_uri(uri, h), body, digest)
    }

    fn digest(method: &str, normalized_url: &str, body: &[u8], digest: &PayloadDigest) -> Self {
        Self::digest_with(
            method,
            |h| h.update(normalized_url.as_bytes()),
            body,
            digest,
        )
    }

    /// The digest, with the normalized URL written into the hasher by `url`.
    fn digest_with(
        method: &str,
        url: impl FnOnce(&mut Sha256),
        body: &[u8],
        digest: &PayloadDigest,
    ) -> Self {
        let mut h = Sha256::new();
        h.update(method.as_bytes());
        h.update(b"\n");
        url(&mut h);
        h.update(b"\n");
        if matches!(digest, PayloadDigest::Full) && !body.is_empty() {
            // The common case, without building a `Value`: the same bytes hashed.
            let mut direct = h.clone();
            direct.update(b"json:");
            if canonical::write_direct(body, &mut direct) {
                return Self(hex_inline(&direct.finalize()));
            }
        }
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(value) if !body.is_empty() => {
                h.update(b"json:");
                match digest {
                    PayloadDigest::Full => write_canonical(&value, &mut h),
                    PayloadDigest::Fields(pointers) => {
                        for p in pointers {
                            h.update(p.as_bytes());
                            h.update(b"=");
                            match crate::encoding::json_pointer(&value, p) {
                                Some(v) => write_canonical(v, &mut h),
                                None => h.update(b"<absent>"),
                            }
                            h.update(b";");
                        }
                    }
                }
            }
            _ => {
                h.update(b"raw:");
                h.update(body);
            }
        }
        Self(hex_inline(&h.finalize()))
    }

    /// Restores a hash read back from a ledger.
    pub fn from_stored(s: impl Into<String>) -> Self {
        Self(InlineStr::from_string(s.into()))
    }

    /// The hash as lower-case hex.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for PayloadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// [`normalize_uri`] written straight into the hasher (no string).
fn write_normalized_uri(uri: &Uri, h: &mut Sha256) {
    normalized_uri_into(uri, &mut |bytes| h.update(bytes));
}

/// The normalized form of `uri` (see [`normalize_uri`]), written piece by piece into `out`.
fn normalized_uri_into(uri: &Uri, out: &mut impl FnMut(&[u8])) {
    let lower = |s: &str, out: &mut dyn FnMut(&[u8])| {
        for chunk in s.as_bytes().chunks(64) {
            let mut buf = [0u8; 64];
            let buf = &mut buf[..chunk.len()];
            buf.copy_from_slice(chunk);
            buf.make_ascii_lowercase();
            out(buf);
        }
    };
    if let Some(s) = uri.scheme_str() {
        lower(s, out);
        out(b"://");
    }
    if let Some(host) = uri.host() {
        lower(host, out);
    }
    if let Some(p) = non_default_port(uri) {
        let mut buf = [0u8; 6];
        let mut n = p;
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        i -= 1;
        buf[i] = b':';
        out(&buf[i..]);
    }
    out(uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .as_bytes());
}

/// The port of `uri` unless it is the default one of its scheme.
fn non_default_port(uri: &Uri) -> Option<u16> {
    let default_port = match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") => Some(80),
        Some(s) if s.eq_ignore_ascii_case("https") => Some(443),
        _ => None,
    };
    uri.port_u16().filter(|p| Some(*p) != default_port)
}

/// Lower-cases scheme and host and drops a default port; path and query are kept as given
/// (their case and order can be significant to the vendor).
fn normalize_uri(uri: &Uri) -> String {
    let mut out = Vec::with_capacity(uri.host().map_or(0, str::len) + 32);
    normalized_uri_into(uri, &mut |bytes| out.extend_from_slice(bytes));
    // A `Uri` holds ASCII only; should that change, nothing panics here.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes a JSON value in canonical form: object keys sorted, no whitespace. Keys and scalars
/// are written with serde_json's own escaping straight into the hasher (no string per token).
fn write_canonical(value: &serde_json::Value, h: &mut Sha256) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let member = |i: usize, k: &String, v: &Value, h: &mut Sha256| {
                if i > 0 {
                    h.update(b",");
                }
                write_json(k, h);
                h.update(b":");
                write_canonical(v, h);
            };
            h.update(b"{");
            // serde_json's map iterates in key order unless its `preserve_order` feature is on
            // somewhere in the build: sort only when it does not.
            if map.keys().is_sorted() {
                for (i, (k, v)) in map.iter().enumerate() {
                    member(i, k, v, h);
                }
            } else {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                members.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (i, (k, v)) in members.into_iter().enumerate() {
                    member(i, k, v, h);
                }
            }
            h.update(b"}");
        }
        Value::Array(items) => {
            h.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    h.update(b",");
                }
                write_canonical(v, h);
            }
            h.update(b"]");
        }
        scalar => write_json(scalar, h),
    }
}

/// The canonical form of [`write_canonical`] written straight from the parser, for documents
/// whose objects already have their keys in strictly increasing order (no repeats) and no
/// escaped key: no `serde_json::Value`, no string per token. Any other document (not JSON,
/// keys out of order or repeated, an escaped key) is refused and hashed through a `Value`,
/// which sorts keys and keeps the last of repeated ones.
mod canonical {
    use std::fmt;

    use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
    use sha2::{Digest as _, Sha256};

    use super::write_json;

    /// Writes the canonical form of `body` into `h`; `false` if it must go through a `Value`
    /// (`h` then holds a partial write and must be dropped).
    pub(super) fn write_direct(body: &[u8], h: &mut Sha256) -> bool {
        let mut de = serde_json::Deserializer::from_slice(body);
        Canon(h).deserialize(&mut de).is_ok() && de.end().is_ok()
    }

    /// Writes one JSON value as the `Value` it parses into serializes.
    struct Canon<'h>(&'h mut Sha256);

    impl<'de> DeserializeSeed<'de> for Canon<'_> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Canon<'_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_unit<E>(self) -> Result<(), E> {
            self.0.update(b"null");
            Ok(())
        }

        fn visit_bool<E>(self, v: bool) -> Result<(), E> {
            write_json(&v, self.0);
            Ok(())
        }

        fn visit_i64<E>(self, v: i64) -> Result<(), E> {
            write_json(&v, self.0);
            Ok(())
        }

        fn visit_u64<E>(self, v: u64) -> Result<(), E> {
            write_json(&v, self.0);
            Ok(())
        }

        fn visit_f64<E>(self, v: f64) -> Result<(), E> {
            // As `Value`: a number that is not finite is `null`.
            write_json(&serde_json::Number::from_f64(v), self.0);
            Ok(())
        }

        fn visit_str<E>(self, v: &str) -> Result<(), E> {
            write_json(v, self.0);
            Ok(())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            self.0.update(b"[");
            let mut first = true;
            // The separator is written by the element's seed: only when there is an element.
            while seq
                .next_element_seed(Element {
                    h: &mut *self.0,
                    first,
                })?
                .is_some()
            {
                first = false;
            }
            self.0.update(b"]");
            Ok(())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            self.0.update(b"{");
            let mut prev: Option<&'de str> = None;
            // Borrowed keys only: an escaped key fails here, and the document takes the
            // `Value` path.
            while let Some(key) = map.next_key::<&'de str>()? {
                // In order and unique, as a sorted map iterates them; serde_json's private keys
                // (arbitrary precision numbers, raw values) make a `Value` that differs.
                if prev.is_some_and(|p| p >= key) || key.starts_with("$serde_json::private::") {
                    return Err(A::Error::custom("not in canonical key order"));
                }
                if prev.is_some() {
                    self.0.update(b",");
                }
                write_json(key, self.0);
                self.0.update(b":");
                map.next_value_seed(Canon(&mut *self.0))?;
                prev = Some(key);
            }
            self.0.update(b"}");
            Ok(())
        }
    }

    /// One element of an array: its separator, then the value.
    struct Element<'h> {
        h: &'h mut Sha256,
        first: bool,
    }

    impl<'de> DeserializeSeed<'de> for Element<'_> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            if !self.first {
                self.h.update(b",");
            }
            Canon(self.h).deserialize(d)
        }
    }
}

/// Serializes `v` as compact JSON into the hasher (`Sha256` is an `io::Write`).
fn write_json<T: Serialize + ?Sized>(v: &T, h: &mut Sha256) {
    // Writing into a hasher cannot fail, and these values always serialize.
    let _ = serde_json::to_writer(h, v);
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let hex_val = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2)
        .map(|p| Some(hex_val(p[0])? << 4 | hex_val(p[1])?))
        .collect()
}

/// A SHA-256 digest as lower-case hex, written on the stack and shared (one allocation).
fn hex_inline(digest: &[u8]) -> InlineStr<64> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 64];
    let n = digest.len().min(32);
    for (i, b) in digest[..n].iter().enumerate() {
        buf[2 * i] = HEX[(b >> 4) as usize];
        buf[2 * i + 1] = HEX[(b & 0xf) as usize];
    }
    match std::str::from_utf8(&buf[..2 * n]) {
        Ok(s) if n == digest.len() => InlineStr::new(s),
        _ => InlineStr::from_string(hex(digest)),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 0xf) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_uuid_v4_and_never_repeat() {
        let a = IdempotencyKey::generate();
        let b = IdempotencyKey::generate();
        assert_ne!(a, b);
        let u = Uuid::parse_str(a.as_str()).unwrap();
        assert_eq!(u.get_version_num(), 4);
    }

    #[test]
    fn json_bodies_hash_canonically() {
        let a = PayloadHash::compute(
            "post",
            "HTTP://Vendor.test:80/tickets",
            br#"{"device_id":"E17","priority":"P2"}"#,
            &PayloadDigest::Full,
        );
        let b = PayloadHash::compute(
            "POST",
            "http://vendor.test/tickets",
            b"{ \"priority\": \"P2\",\n \"device_id\": \"E17\" }",
            &PayloadDigest::Full,
        );
        assert_eq!(a, b);
        let c = PayloadHash::compute(
            "POST",
            "http://vendor.test/tickets",
            br#"{"device_id":"E18","priority":"P2"}"#,
            &PayloadDigest::Full,
        );
        assert_ne!(a, c);
    }

    #[test]
    fn field_digest_ignores_free_text() {
        let fields = PayloadDigest::Fields(vec!["/amount".into(), "/currency".into()]);
        let a = PayloadHash::compute(
            "POST",
            "http://v/p",
            br#"{"amount":100,"currency":"eur","memo":"for the order"}"#,
            &fields,
        );
        let b = PayloadHash::compute(
            "POST",
            "http://v/p",
            br#"{"amount":100,"currency":"eur","memo":"order payment"}"#,
            &fields,
        );
        let c = PayloadHash::compute(
            "POST",
            "http://v/p",
            br#"{"amount":101,"currency":"eur","memo":"for the order"}"#,
            &fields,
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn freezing_drops_credentials_and_connection_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer sk_live_123".parse().unwrap());
        headers.insert("cookie", "s=1".parse().unwrap());
        headers.insert("x-vendor-secret", "abc".parse().unwrap());
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("content-length", "2".parse().unwrap());
        let f = FrozenRequest::freeze(
            &Method::POST,
            &"http://v/t".parse().unwrap(),
            &headers,
            Bytes::from_static(b"{}"),
            SecretNames {
                headers: &["X-Vendor-Secret".to_owned()],
                ..SecretNames::default()
            },
        );
        assert_eq!(
            f.headers,
            FrozenHeaders::from(vec![(
                "content-type".to_owned(),
                HeaderBytes::from("application/json")
            )])
        );
        let pairs: Vec<_> = f.headers.iter().collect();
        assert_eq!(pairs, [("content-type", &b"application/json"[..])]);
        assert!(!format!("{f:?}").contains("sk_live"));
    }

    /// Issue 10 item 4: header values that are not visible ASCII (UTF-8 text, obs-text bytes)
    /// and the `Host` header are frozen exactly, survive a JSON round trip, and come back.
    #[test]
    fn freezing_keeps_every_header_byte_and_the_host() {
        let mut headers = HeaderMap::new();
        headers.insert("host", "tickets.vendor.test".parse().unwrap());
        headers.insert(
            "x-requester",
            http::HeaderValue::from_bytes("Zoë".as_bytes()).unwrap(),
        );
        headers.insert(
            "x-latin1",
            http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        let f = FrozenRequest::freeze(
            &Method::POST,
            &"http://10.0.0.7/t".parse().unwrap(),
            &headers,
            Bytes::new(),
            SecretNames::default(),
        );
        let json = serde_json::to_string(&f.headers).unwrap();
        assert!(json.contains("Zoë"), "{json}");
        assert!(json.contains(r#"{"hex":"636166e9"}"#), "{json}");
        let back: FrozenHeaders = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f.headers);
        // Stored as the `Vec<(String, HeaderBytes)>` it replaces was, byte for byte.
        let as_vec: Vec<(String, HeaderBytes)> = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&as_vec).unwrap(), json);
        assert_eq!(FrozenHeaders::from(as_vec), f.headers);
        assert_eq!(f.headers.get("x-latin1"), Some(&b"caf\xe9"[..]));
        let req = f.to_request().unwrap();
        assert_eq!(req.headers()["host"], "tickets.vendor.test");
        assert_eq!(req.headers()["x-requester"].as_bytes(), "Zoë".as_bytes());
        assert_eq!(req.headers()["x-latin1"].as_bytes(), b"caf\xe9");
    }

    /// Issue 10 item 13: userinfo and secret query parameters never reach the frozen URL.
    #[test]
    fn freezing_drops_url_credentials() {
        let uri: Uri = "https://user:SECRET1@vendor.test/v1/t?a=1&api_key=SECRET2&Token=SECRET3&my%5Fsecret=SECRET4&b=2"
            .parse()
            .unwrap();
        let f = FrozenRequest::freeze(
            &Method::POST,
            &uri,
            &HeaderMap::new(),
            Bytes::new(),
            SecretNames {
                query_params: &["my_secret".to_owned()],
                ..SecretNames::default()
            },
        );
        assert_eq!(f.url, "https://vendor.test/v1/t?a=1&b=2");
        let only: Uri = "http://v.test/p?sig=abc".parse().unwrap();
        assert_eq!(redacted_uri(&only, &[]).to_string(), "http://v.test/p");
        let clean: Uri = "http://v.test/p?q=1".parse().unwrap();
        assert!(matches!(
            redacted_uri(&clean, &[]),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// Inputs whose hashes are pinned: a stored operation's payload hash is compared with a
    /// recomputed one after upgrades, so the canonical form must never change.
    pub(super) fn cases() -> Vec<(&'static str, &'static str, &'static [u8], PayloadDigest)> {
        vec![
            (
                "post",
                "HTTPS://Vendor.Test:443/v1/tickets?b=2&a=1",
                br#"{"z":1,"a":{"y":[1,2.5,-3e2,true,null],"x":"\u00e9\"\n"},"m":"\ud83d\ude00"}"#,
                PayloadDigest::Full,
            ),
            (
                "POST",
                "http://vendor.test:8080/t",
                b" { \"b\" : 18446744073709551615 , \"a\" : -1.0e-7 } ",
                PayloadDigest::Full,
            ),
            (
                "PUT",
                "http://vendor.test/t",
                br#"{"amount":100,"memo":"hi","nested":{"k":"v"}}"#,
                PayloadDigest::Fields(vec!["/amount".into(), "/nested".into(), "/missing".into()]),
            ),
            (
                "POST",
                "/relative/path",
                b"not json at all \xff\x00",
                PayloadDigest::Full,
            ),
            ("POST", "http://vendor.test", b"", PayloadDigest::Full),
            (
                "PATCH",
                "http://vendor.test/x",
                b"[{\"b\":[],\"a\":{}},\"s\",0]",
                PayloadDigest::Full,
            ),
        ]
    }

    /// The hashes the canonical form gave when it was first written (v0.1): they must never
    /// change, or every stored operation would conflict with its own retry.
    const PINNED: [&str; 6] = [
        "f6cc26b69a269ded865fc1e60abc449099691d16be1c7757f22ca9c5fc118793",
        "d3f4e8c0e3e9d4e4f3d14f96deb38055ffba1cc5c05a856efe53aae04a7d81b0",
        "5d888fc326865adc0355665fd0b4efa0388dd4d61c3a5008e48a0962dce8a896",
        "9f17ef9cf89338e4960a8e1130579934f1bb09adb688393cbc3e58fa682d8ea7",
        "392830e2b46710a9d9d4cd6cdc1deb2b09ad90589075d298f8433d0d3cc43e2c",
        "1c2d304326c8b8549fff000ecdec9ad3ad52fefd3e90d20b71209f220574522b",
    ];

    #[test]
    fn payload_hashes_never_change() {
        for ((m, u, b, d), pinned) in cases().into_iter().zip(PINNED) {
            assert_eq!(
                PayloadHash::compute(m, u, b, &d).as_str(),
                pinned,
                "{m} {u}"
            );
            if let Ok(uri) = u.parse::<Uri>() {
                let method = Method::from_bytes(m.to_ascii_uppercase().as_bytes()).unwrap();
                assert_eq!(
                    PayloadHash::compute_for(&method, &uri, b, &d).as_str(),
                    pinned,
                    "{m} {u} from the parsed request"
                );
            }
        }
    }

    /// The direct canonical writer hashes every document it accepts exactly as the `Value`
    /// path does, and refuses those it cannot (keys out of order, repeated or escaped).
    #[test]
    fn direct_canonical_form_is_the_value_form() {
        let docs: &[(&[u8], bool)] = &[
            (br#"{"device_id":"E17","priority":"P2"}"#, true),
            (
                br#" { "a" : [ 1 , -2 , 3.5 , -0.0 , 1e2 , 18446744073709551615 , -9223372036854775808 ] } "#,
                true,
            ),
            (br#"{"a":{"b":{"c":[{},[],"",null,true,false]}},"b":0}"#, true),
            (
                r#"{"s":"\u00e9\"\n\t\\/ \ud83d\ude00 \u0001","t":"zoë"}"#.as_bytes(),
                true,
            ),
            (br#"[1,"x",{"a":1},[[]]]"#, true),
            (br#""just a string""#, true),
            (b"12.50e-3", true),
            (b"null", true),
            (br#"{"":1,"a":2}"#, true),
            // Out of order, repeated, escaped keys: the `Value` path.
            (br#"{"z":1,"a":2}"#, false),
            (br#"{"a":1,"a":2}"#, false),
            (br#"{"a":1,"b":{"d":1,"c":2}}"#, false),
            (br#"{"\u0061":1}"#, false),
            (br#"{"$serde_json::private::Number":"1"}"#, false),
            // Not JSON.
            (br#"{"a":1} trailing"#, false),
            (br#"{"a":"#, false),
            (b"not json \xff", false),
        ];
        for (doc, direct) in docs {
            let text = String::from_utf8_lossy(doc);
            let mut h = Sha256::new();
            let accepted = canonical::write_direct(doc, &mut h);
            assert_eq!(accepted, *direct, "{text}");
            if accepted {
                let value: serde_json::Value = serde_json::from_slice(doc).unwrap();
                let mut v = Sha256::new();
                write_canonical(&value, &mut v);
                assert_eq!(h.finalize(), v.finalize(), "{text}");
            }
            // Through `compute`, whichever path is taken, the hash of the `Value` form.
            let hash =
                PayloadHash::compute("POST", "http://vendor.test/t", doc, &PayloadDigest::Full);
            let mut via_value = Sha256::new();
            via_value.update(b"POST\nhttp://vendor.test/t\n");
            match serde_json::from_slice::<serde_json::Value>(doc) {
                Ok(value) => {
                    via_value.update(b"json:");
                    write_canonical(&value, &mut via_value);
                }
                Err(_) => {
                    via_value.update(b"raw:");
                    via_value.update(doc);
                }
            }
            assert_eq!(hash.as_str(), hex(&via_value.finalize()), "{text}");
        }
    }

    /// The normalized URL hashed in place is the normalized URL.
    #[test]
    fn normalized_uri_written_into_the_hasher_is_the_normalized_uri() {
        for u in [
            "HTTPS://Vendor.Test:443/v1/tickets?b=2&a=1",
            "http://vendor.test:8080/t",
            "http://VENDOR.test:80",
            "http://[::1]:65535/x?Y=Z",
            "/relative/Path?q=1",
            "https://v.test:0/",
            "custom://Host.Example:443/a",
            "http://Ünicode.test/ä",
        ] {
            let Ok(uri) = u.parse::<Uri>() else { continue };
            let (mut a, mut b) = (Sha256::new(), Sha256::new());
            write_normalized_uri(&uri, &mut a);
            b.update(normalize_uri(&uri).as_bytes());
            assert_eq!(a.finalize(), b.finalize(), "{u}");
        }
    }

    #[test]
    fn no_default_secret_header_is_frozen() {
        let mut headers = HeaderMap::new();
        for name in DEFAULT_SECRET_HEADERS {
            // Lower case, or `is_secret` (which compares the lower-cased name) would miss it.
            assert_eq!(*name, name.to_ascii_lowercase());
            headers.insert(
                HeaderName::from_static(name),
                http::HeaderValue::from_static("s3cr3t-value"),
            );
        }
        for name in ["x-api-key", "x-auth-token", "private-token", "api-key"] {
            assert!(DEFAULT_SECRET_HEADERS.contains(&name), "{name}");
        }
        headers.insert("x-request-id", http::HeaderValue::from_static("r-1"));
        let uri: Uri = "https://vendor.test/tickets".parse().unwrap();
        let frozen = FrozenRequest::freeze(
            &Method::POST,
            &uri,
            &headers,
            Bytes::new(),
            SecretNames::default(),
        );
        let names: Vec<_> = frozen.headers.iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["x-request-id"],
            "only the non-secret header is frozen"
        );
    }
}
