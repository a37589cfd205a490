//! The exact request an attempt sends.
//!
//! Every send of an operation — the first one, the first one of an operation someone else
//! created (an outbox row, a fleet mid-deploy), and every replay — is built here from the
//! request **frozen on the operation's row** and the **contract frozen on it**, never from the
//! bytes or the configuration of the call that happens to send it: the payload hash only proves
//! the two payloads are equivalent, not identical. It is built, key placed, *before* send rights
//! are claimed, so a request that cannot be built leaves nothing claimed.
//!
//! What the ledger never stores (credentials: secret headers, URL userinfo, secret query
//! parameters, secret body fields, secret path segments) comes back from the caller's own
//! request on a first send ([`Carried`]); a replay gets headers, userinfo and query parameters
//! from the stack it is sent through, and is refused when the contract keeps body fields or path
//! segments out of the ledger and does not say that stack supplies them too.

use bytes::Bytes;
use http::request::Parts;
use http::uri::{Authority, PathAndQuery};
use http::{Extensions, HeaderName, HeaderValue, Request, Uri, Version};

use crate::contract::{Contract, ContractError, KeyPlacement, key_header};
use crate::operation::{
    FrozenRequest, IdempotencyKey, has_redacted_segment, is_secret, is_secret_param, is_unfrozen,
    redact_body, redacted_path, redacted_uri,
};

/// What the caller's request carries that the ledger never stores, put back on its first send.
#[derive(Debug, Default)]
pub(crate) struct Carried {
    headers: Vec<(HeaderName, HeaderValue)>,
    userinfo: Option<String>,
    query: Vec<String>,
    /// The caller's own path, when the contract stores some of its segments as the marker.
    path: Option<String>,
    extensions: Extensions,
    version: Version,
    body: Option<Bytes>,
}

impl Carried {
    /// Nothing: a replay, whose stack applies credentials.
    pub(crate) fn nothing() -> Self {
        Self::default()
    }

    /// Takes the caller's credentials (as `contract` names them) and extensions from `parts`.
    pub(crate) fn take(parts: &mut Parts, contract: &Contract) -> Self {
        let headers = parts
            .headers
            .iter()
            .filter(|(name, _)| is_secret(name, &contract.secret_headers))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let userinfo = parts
            .uri
            .authority()
            .and_then(|a| a.as_str().rsplit_once('@'))
            .map(|(info, _)| info.to_owned());
        let query = parts
            .uri
            .query()
            .map(|q| {
                q.split('&')
                    .filter(|p| is_secret_param(p, &contract.secret_query_params))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let path = redacted_path(parts.uri.path(), &contract.secret_path_segments)
            .map(|_| parts.uri.path().to_owned());
        Self {
            headers,
            userinfo,
            query,
            path,
            extensions: std::mem::take(&mut parts.extensions),
            version: parts.version,
            body: None,
        }
    }

    /// The caller's own body, which holds the secret body fields the ledger never stores
    /// (needed only under a contract that names some).
    pub(crate) fn with_body(mut self, contract: &Contract, body: &Bytes) -> Self {
        if !contract.secret_body_fields.is_empty() {
            self.body = Some(body.clone());
        }
        self
    }
}

/// Why an attempt's request could not be built. Nothing was claimed or sent.
#[derive(Debug)]
pub(crate) enum OutgoingError {
    /// The contract could not place the key in this request.
    Key(ContractError),
    /// The frozen request does not make a valid request (a corrupt row).
    Frozen(String),
    /// The contract keeps secret body fields or path segments out of the ledger, and no
    /// request that holds them for this very operation is at hand (a replay whose stack does not
    /// supply them, or a caller whose bytes or URL are not the ones frozen).
    Secrets(Unstored),
}

/// Which secrets the ledger does not keep, for [`OutgoingError::Secrets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unstored {
    /// The contract's `secret_body_fields`.
    BodyFields,
    /// The contract's `secret_path_segments`.
    PathSegments,
}

impl Unstored {
    /// Why a replay cannot be sent, for the operation's reason.
    pub(crate) fn why_not_replayed(self) -> &'static str {
        match self {
            Self::BodyFields => {
                "the contract keeps secret body fields out of the ledger and the replay stack does not supply them"
            }
            Self::PathSegments => {
                "the contract keeps secret path segments out of the ledger and the replay stack does not supply them"
            }
        }
    }
}

/// The request an attempt of the operation frozen as `frozen` sends under `contract` with `key`.
pub(crate) fn build(
    frozen: &FrozenRequest,
    contract: &Contract,
    key: &IdempotencyKey,
    carried: Carried,
) -> Result<Request<Bytes>, OutgoingError> {
    let (mut parts, body) = frozen
        .to_request()
        .map_err(|e| OutgoingError::Frozen(e.to_string()))?
        .into_parts();
    // Secret path segments: the caller's own path, if it is the frozen one with its secrets;
    // a replay sends the stored path (the marker in place) only when its stack puts them back.
    let path = match carried.path {
        _ if !has_redacted_segment(parts.uri.path()) => None,
        Some(caller)
            if redacted_path(&caller, &contract.secret_path_segments).as_deref()
                == Some(parts.uri.path()) =>
        {
            Some(caller)
        }
        None if contract.replay_supplies_path_secrets => None,
        _ => return Err(OutgoingError::Secrets(Unstored::PathSegments)),
    };
    parts.uri = with_credentials(
        &parts.uri,
        carried.userinfo.as_deref(),
        &carried.query,
        path.as_deref(),
    )
    .map_err(OutgoingError::Frozen)?;
    for (name, value) in carried.headers {
        parts.headers.append(name, value);
    }
    parts.extensions = carried.extensions;
    parts.version = carried.version;
    // Secret body fields: the caller's own bytes, if they are the frozen request with its
    // secrets; a replay sends the stored body only when its stack puts them back.
    let body = match carried.body {
        _ if contract.secret_body_fields.is_empty() => body,
        Some(caller) if redact_body(&caller, &contract.secret_body_fields) == frozen.body => caller,
        None if contract.replay_supplies_body_secrets => body,
        _ => return Err(OutgoingError::Secrets(Unstored::BodyFields)),
    };
    let body = contract
        .attach_key(&mut parts, body, key)
        .map_err(OutgoingError::Key)?;
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Ok(Request::from_parts(parts, body))
}

/// What the caller sent, beside the request [`build_first`] made of it: for an operation that
/// turns out to exist already, whose own contract decides where the caller's key is.
#[derive(Debug)]
pub(crate) enum Caller {
    /// The caller's request (its extensions moved into the request built).
    Parts(Parts),
    /// The request built is the caller's own with the key placed: in the header named here,
    /// whose value the caller had set was the one given (`None`: the caller had none). `None`:
    /// no header was touched (the key went into the body, or nowhere).
    Sent(Option<(HeaderName, Option<HeaderValue>)>),
}

impl Caller {
    /// The caller's request: `built` is the request [`build_first`] made (its parts), put back
    /// as the caller sent it when it was the caller's own.
    pub(crate) fn parts<'a>(&'a self, built: &'a mut Parts) -> &'a Parts {
        match self {
            Caller::Parts(parts) => parts,
            Caller::Sent(placed) => {
                if let Some((name, previous)) = placed {
                    match previous {
                        Some(v) => built.headers.insert(name, v.clone()),
                        None => built.headers.remove(name),
                    };
                }
                built
            }
        }
    }
}

/// The first send of the operation just frozen as `frozen` from the caller's `parts` and
/// `body` under `contract`: the request [`build`] makes from `frozen` and the caller's
/// credentials ([`Carried::take`]), and what the caller sent ([`Caller`]).
///
/// When freezing dropped nothing (no credential in the headers, the URL or the body, no
/// connection header), the frozen request is the caller's own, byte for byte: the caller's
/// request is then sent as it is, key placed, without rebuilding its URI and header map from
/// the frozen copy. That is checked against `frozen` (method, URL, headers, body); anything
/// else is built by [`build`].
pub(crate) fn build_first(
    mut parts: Parts,
    body: Bytes,
    frozen: &FrozenRequest,
    contract: &Contract,
    key: &IdempotencyKey,
) -> Result<(Request<Bytes>, Caller), OutgoingError> {
    if sent_as_frozen(&parts, &body, frozen, contract) {
        let placed = match &contract.key {
            KeyPlacement::Header { name, .. } => key_header(name).map(|h| {
                let previous = parts.headers.get(&h).cloned();
                (h, previous)
            }),
            _ => None,
        };
        let body = contract
            .attach_key(&mut parts, body, key)
            .map_err(OutgoingError::Key)?;
        parts.headers.remove(http::header::CONTENT_LENGTH);
        return Ok((Request::from_parts(parts, body), Caller::Sent(placed)));
    }
    let carried = Carried::take(&mut parts, contract).with_body(contract, &body);
    let request = build(frozen, contract, key, carried)?;
    Ok((request, Caller::Parts(parts)))
}

/// Whether `frozen` is the caller's request (`parts`, `body`) with nothing dropped, and the key
/// goes where placing it changes neither the URI nor anything freezing dropped.
fn sent_as_frozen(
    parts: &Parts,
    body: &Bytes,
    frozen: &FrozenRequest,
    contract: &Contract,
) -> bool {
    if !contract.secret_body_fields.is_empty()
        || matches!(contract.key, KeyPlacement::Query { .. })
        || parts
            .headers
            .keys()
            .any(|n| is_secret(n, &contract.secret_headers) || is_unfrozen(n))
        || matches!(
            redacted_uri(&parts.uri, contract.secrets()),
            std::borrow::Cow::Owned(_)
        )
    {
        return false;
    }
    frozen.method == parts.method.as_str()
        && frozen.body == *body
        && frozen.headers.len() == parts.headers.len()
        && frozen
            .headers
            .iter()
            .zip(parts.headers.iter())
            .all(|((n, v), (name, value))| n == name.as_str() && v == value.as_bytes())
        && displays_as(&parts.uri, &frozen.url)
}

/// Whether `uri` displays as `text` (compared as it is written, without a copy).
fn displays_as(uri: &Uri, text: &str) -> bool {
    use std::fmt::Write as _;
    struct Rest<'a>(&'a str);
    impl std::fmt::Write for Rest<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 = self.0.strip_prefix(s).ok_or(std::fmt::Error)?;
            Ok(())
        }
    }
    let mut rest = Rest(text);
    write!(rest, "{uri}").is_ok() && rest.0.is_empty()
}

/// `uri` with the caller's userinfo, secret query pairs (appended after the stored pairs) and
/// own path (in place of the stored one, which has markers for its secret segments) put back.
fn with_credentials(
    uri: &Uri,
    userinfo: Option<&str>,
    query: &[String],
    path: Option<&str>,
) -> Result<Uri, String> {
    if userinfo.is_none() && query.is_empty() && path.is_none() {
        return Ok(uri.clone());
    }
    let mut parts = uri.clone().into_parts();
    if let (Some(info), Some(authority)) = (userinfo, &parts.authority) {
        let a: Authority = format!("{info}@{authority}")
            .parse()
            .map_err(|e: http::uri::InvalidUri| e.to_string())?;
        parts.authority = Some(a);
    }
    if !query.is_empty() || path.is_some() {
        let (stored_path, stored) = parts
            .path_and_query
            .as_ref()
            .map_or(("/", None), |pq| (pq.path(), pq.query()));
        let path = path.unwrap_or(stored_path);
        let rebuilt = if query.is_empty() {
            match stored {
                Some(q) => format!("{path}?{q}"),
                None => path.to_owned(),
            }
        } else {
            let mut q: Vec<&str> = stored.into_iter().filter(|s| !s.is_empty()).collect();
            q.extend(query.iter().map(String::as_str));
            format!("{path}?{}", q.join("&"))
        };
        let pq: PathAndQuery = rebuilt
            .parse()
            .map_err(|e: http::uri::InvalidUri| e.to_string())?;
        parts.path_and_query = Some(pq);
    }
    Uri::from_parts(parts).map_err(|e| e.to_string())
}

/// The idempotency key the caller already put where `contract` places keys, if any: a caller's
/// own key is adopted for a new operation and must match an existing one's, never silently
/// replaced.
pub(crate) fn caller_key(
    contract: &Contract,
    uri: &Uri,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Option<String> {
    use crate::contract::{KeyFormat, KeyPlacement};
    let decode = crate::encoding::decode_component_str;
    let pair = |list: &str, name: &str| {
        list.split('&').find_map(|p| {
            let (n, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(n) == name).then(|| decode(v))
        })
    };
    let key = match &contract.key {
        KeyPlacement::Header { name, format } => {
            let raw = headers.get(name.as_str())?.to_str().ok()?.trim();
            match format {
                KeyFormat::Quoted => {
                    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
                    inner.replace("\\\"", "\"").replace("\\\\", "\\")
                }
                _ => raw.to_owned(),
            }
        }
        KeyPlacement::Query { name } => pair(uri.query()?, name)?,
        KeyPlacement::FormBody { name } => pair(std::str::from_utf8(body).ok()?, name)?,
        KeyPlacement::JsonBody { pointer } => serde_json::from_slice::<serde_json::Value>(body)
            .ok()?
            .pointer(pointer)?
            .as_str()?
            .to_owned(),
        _ => return None,
    };
    (!key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::KeyPlacement;
    use http::Method;

    fn caller() -> Request<()> {
        Request::post("https://bot:PW@vendor.test/v1/t?a=1&api_key=K1")
            .header("authorization", "Bearer T")
            .header(
                "x-requester",
                HeaderValue::from_bytes("Zoë".as_bytes()).unwrap(),
            )
            .header("content-length", "2")
            .body(())
            .unwrap()
    }

    #[test]
    fn a_first_send_is_the_frozen_request_plus_the_callers_credentials() {
        let contract = Contract::conservative();
        let (mut parts, ()) = caller().into_parts();
        let frozen = FrozenRequest::freeze(
            &parts.method,
            &parts.uri,
            &parts.headers,
            Bytes::from_static(b"{}"),
            contract.secrets(),
        );
        assert!(!frozen.url.contains("PW") && !frozen.url.contains("K1"));
        let key = IdempotencyKey::from_stored("k-1");
        let carried = Carried::take(&mut parts, &contract);
        let req = build(&frozen, &contract, &key, carried).unwrap();
        assert_eq!(req.method(), Method::POST);
        assert_eq!(
            req.uri().to_string(),
            "https://bot:PW@vendor.test/v1/t?a=1&api_key=K1"
        );
        assert_eq!(req.headers()["authorization"], "Bearer T");
        assert_eq!(req.headers()["x-requester"].as_bytes(), "Zoë".as_bytes());
        assert_eq!(req.headers()["idempotency-key"], "k-1");
        assert!(req.headers().get("content-length").is_none());
        assert_eq!(req.body().as_ref(), b"{}");
    }

    /// The first send is the same request whether it is the caller's own (nothing dropped in
    /// freezing) or rebuilt from the frozen copy; and the caller's request can be told back.
    #[test]
    fn a_first_send_is_the_built_request_with_or_without_a_rebuild() {
        let clean = || {
            Request::post("https://vendor.test/v1/t?a=1")
                .header("content-type", "application/json")
                .header("x-trace", "a")
                .header("x-trace", "b")
                .header("idempotency-key", "caller-key")
                .body(())
                .unwrap()
        };
        let placements = [
            Contract::conservative(),
            Contract::conservative().key(KeyPlacement::Header {
                name: "X-Request-Id".into(),
                format: Default::default(),
            }),
            Contract::conservative().key(KeyPlacement::JsonBody {
                pointer: "/key".into(),
            }),
            Contract::conservative().key(KeyPlacement::Query { name: "rid".into() }),
        ];
        let requests = [(clean(), true), (caller(), false)];
        for contract in &placements {
            for (req, clean) in &requests {
                let copy = || {
                    let mut r = Request::new(());
                    *r.method_mut() = req.method().clone();
                    *r.uri_mut() = req.uri().clone();
                    *r.headers_mut() = req.headers().clone();
                    r.into_parts().0
                };
                let body = Bytes::from_static(b"{}");
                let key = IdempotencyKey::from_stored("k-1");
                let frozen = FrozenRequest::freeze(
                    req.method(),
                    req.uri(),
                    req.headers(),
                    body.clone(),
                    contract.secrets(),
                );
                let mut parts = copy();
                let carried = Carried::take(&mut parts, contract).with_body(contract, &body);
                let built = build(&frozen, contract, &key, carried).unwrap();
                let (first, caller) =
                    build_first(copy(), body.clone(), &frozen, contract, &key).unwrap();
                assert_eq!(first.method(), built.method());
                assert_eq!(first.uri(), built.uri());
                assert_eq!(first.version(), built.version());
                assert_eq!(first.body(), built.body());
                let headers = |r: &Request<Bytes>| {
                    r.headers()
                        .iter()
                        .map(|(n, v)| (n.clone(), v.clone()))
                        .collect::<Vec<_>>()
                };
                assert_eq!(headers(&first), headers(&built), "{:?}", contract.key);
                let unbuilt = *clean && !matches!(contract.key, KeyPlacement::Query { .. });
                assert_eq!(
                    matches!(caller, Caller::Sent(_)),
                    unbuilt,
                    "{:?}",
                    contract.key
                );
                // What the caller sent, for an operation that exists already.
                let (mut first_parts, _) = first.into_parts();
                let sent = caller.parts(&mut first_parts);
                assert_eq!(sent.uri, *req.uri());
                assert_eq!(
                    sent.headers.get("idempotency-key"),
                    req.headers().get("idempotency-key")
                );
                assert_eq!(
                    sent.headers.get("x-request-id"),
                    req.headers().get("x-request-id")
                );
            }
        }
    }

    #[test]
    fn a_replay_carries_no_credentials() {
        let contract = Contract::conservative();
        let (parts, ()) = caller().into_parts();
        let frozen = FrozenRequest::freeze(
            &parts.method,
            &parts.uri,
            &parts.headers,
            Bytes::new(),
            Default::default(),
        );
        let req = build(
            &frozen,
            &contract,
            &IdempotencyKey::from_stored("k"),
            Carried::nothing(),
        )
        .unwrap();
        assert_eq!(req.uri().to_string(), "https://vendor.test/v1/t?a=1");
        assert!(req.headers().get("authorization").is_none());
    }

    /// Issue 27 item 8: a secret path segment is sent on the first send (the caller's URL) and
    /// never on a replay, which is refused unless the contract says its stack puts it back.
    #[test]
    fn a_secret_path_segment_comes_from_the_caller_or_the_replay_is_refused() {
        let contract = Contract::conservative().secret_path_segment("/hooks/{secret}");
        let caller = || {
            Request::post("https://hooks.vendor.test/hooks/TOKEN7/send?x=1&api_key=K")
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        let parts = caller();
        let frozen = FrozenRequest::freeze(
            &parts.method,
            &parts.uri,
            &parts.headers,
            Bytes::from_static(b"{}"),
            contract.secrets(),
        );
        assert_eq!(
            frozen.url,
            "https://hooks.vendor.test/hooks/[redacted]/send?x=1"
        );
        let key = IdempotencyKey::from_stored("k");
        let (first, _) = build_first(
            caller(),
            Bytes::from_static(b"{}"),
            &frozen,
            &contract,
            &key,
        )
        .unwrap();
        assert_eq!(
            first.uri().to_string(),
            "https://hooks.vendor.test/hooks/TOKEN7/send?x=1&api_key=K"
        );
        // A caller whose path is not the frozen one with its secret cannot send it.
        let mut other = caller();
        other.uri = "https://hooks.vendor.test/elsewhere/TOKEN7/send?x=1"
            .parse()
            .unwrap();
        let carried = Carried::take(&mut other, &contract);
        assert!(matches!(
            build(&frozen, &contract, &key, carried),
            Err(OutgoingError::Secrets(Unstored::PathSegments))
        ));
        // A replay: refused, or sent with the marker for the stack to replace.
        let err = build(&frozen, &contract, &key, Carried::nothing()).unwrap_err();
        assert!(
            matches!(err, OutgoingError::Secrets(Unstored::PathSegments)),
            "{err:?}"
        );
        let supplied = contract.clone().replay_supplied_path_secrets(true);
        let replay = build(&frozen, &supplied, &key, Carried::nothing()).unwrap();
        assert_eq!(
            replay.uri().to_string(),
            "https://hooks.vendor.test/hooks/[redacted]/send?x=1"
        );
    }

    #[test]
    fn a_key_that_cannot_be_placed_is_an_error_before_anything_else() {
        let contract = Contract::conservative().key(KeyPlacement::JsonBody {
            pointer: "/idempotency_key".into(),
        });
        let frozen = FrozenRequest::freeze(
            &Method::POST,
            &"http://v.test/t".parse().unwrap(),
            &http::HeaderMap::new(),
            Bytes::from_static(b"not json"),
            Default::default(),
        );
        let err = build(
            &frozen,
            &contract,
            &IdempotencyKey::from_stored("k"),
            Carried::nothing(),
        )
        .unwrap_err();
        assert!(matches!(err, OutgoingError::Key(_)), "{err:?}");
    }
}
