//! What is redacted before a request is stored: credential headers and query parameters,
//! userinfo, secret body fields and secret path segments (the defaults, and what a contract
//! names in [`SecretNames`]).

use bytes::Bytes;
use http::{HeaderName, Uri};

use super::REDACTED;
use crate::encoding::decode_component_str;

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
    /// Path templates whose `{secret}` segments are stored as [`REDACTED`]
    /// ([`Contract::secret_path_segments`](crate::Contract::secret_path_segments)).
    pub path_segments: &'a [String],
}

/// `path` with the segments a template of `templates` marks `{secret}` replaced by
/// [`REDACTED`], or `None` when no template applies (see
/// [`Contract::secret_path_segments`](crate::Contract::secret_path_segments)). A template
/// applies to a path that starts with as many segments as it has, each equal to the template's
/// literal, or anything for `*` and `{secret}`.
pub(crate) fn redacted_path(path: &str, templates: &[String]) -> Option<String> {
    if templates.is_empty() {
        return None;
    }
    let mut segments: Vec<&str> = path.split('/').skip(1).collect();
    let mut changed = false;
    for template in templates {
        let steps: Vec<&str> = template.split('/').skip(1).collect();
        if steps.len() > segments.len() {
            continue;
        }
        let applies = steps
            .iter()
            .zip(&segments)
            .all(|(t, p)| matches!(*t, "*" | SECRET_SEGMENT) || t == p);
        if !applies {
            continue;
        }
        for (t, p) in steps.iter().zip(segments.iter_mut()) {
            if *t == SECRET_SEGMENT && *p != REDACTED {
                *p = REDACTED;
                changed = true;
            }
        }
    }
    changed.then(|| {
        let mut out = String::with_capacity(path.len());
        for s in &segments {
            out.push('/');
            out.push_str(s);
        }
        out
    })
}

/// The template segment that marks a secret path segment.
pub(crate) const SECRET_SEGMENT: &str = "{secret}";

/// Whether `path` holds a segment stored as [`REDACTED`].
pub(crate) fn has_redacted_segment(path: &str) -> bool {
    path.split('/').any(|s| s == REDACTED)
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

/// Whether the query pair `pair` (`name=value`, still percent-encoded) names a secret parameter.
pub(crate) fn is_secret_param(pair: &str, extra: &[String]) -> bool {
    let name = decode_component_str(pair.split_once('=').map_or(pair, |(n, _)| n));
    DEFAULT_SECRET_QUERY_PARAMS
        .iter()
        .any(|s| s.eq_ignore_ascii_case(&name))
        || extra.iter().any(|s| s.eq_ignore_ascii_case(&name))
}

/// `uri` without its credentials: userinfo and secret query parameters removed, secret path
/// segments replaced by [`REDACTED`]. Borrowed (no allocation) when there is nothing to remove,
/// the common case.
pub(crate) fn redacted_uri<'a>(
    uri: &'a Uri,
    secrets: SecretNames<'_>,
) -> std::borrow::Cow<'a, Uri> {
    let secret_params = secrets.query_params;
    let userinfo = uri.authority().is_some_and(|a| a.as_str().contains('@'));
    let secret_query = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| is_secret_param(p, secret_params)));
    let path = redacted_path(uri.path(), secrets.path_segments);
    if !userinfo && !secret_query && path.is_none() {
        return std::borrow::Cow::Borrowed(uri);
    }
    let mut parts = uri.clone().into_parts();
    if let Some(authority) = &parts.authority
        && let Some((_, host)) = authority.as_str().rsplit_once('@')
        && let Ok(a) = host.parse()
    {
        parts.authority = Some(a);
    }
    if (secret_query || path.is_some())
        && let Some(pq) = &parts.path_and_query
    {
        let kept: Vec<&str> = pq
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !is_secret_param(p, secret_params))
            .collect();
        let path = path.as_deref().unwrap_or(pq.path());
        let rebuilt = match (kept.is_empty(), pq.query()) {
            // Only the path changed: the query as it was (an empty `?` included).
            (_, Some(q)) if !secret_query => format!("{path}?{q}"),
            (true, _) => path.to_owned(),
            (false, _) => format!("{path}?{}", kept.join("&")),
        };
        // Cannot fail for parts taken from a valid URI; never keep the credentials.
        parts.path_and_query = Some(
            rebuilt
                .parse()
                .unwrap_or_else(|_| http::uri::PathAndQuery::from_static("/")),
        );
    }
    match Uri::from_parts(parts) {
        Ok(u) => std::borrow::Cow::Owned(u),
        // Cannot happen for parts taken from a valid URI; never keep the credentials.
        Err(_) => std::borrow::Cow::Owned(Uri::from_static("/")),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, HeaderName, Method, Uri};

    use super::*;
    use crate::operation::FrozenRequest;

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
        let none = SecretNames::default();
        assert_eq!(redacted_uri(&only, none).to_string(), "http://v.test/p");
        let clean: Uri = "http://v.test/p?q=1".parse().unwrap();
        assert!(matches!(
            redacted_uri(&clean, none),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    /// Issue 27 item 8: a credential in the URL's path (a webhook URL's token) is stored as
    /// the marker; the rest of the URL, its query included, is kept as it is.
    #[test]
    fn freezing_marks_secret_path_segments() {
        let templates = [
            "/services/*/*/{secret}".to_owned(),
            "/api/webhooks/*/{secret}".to_owned(),
        ];
        let secrets = SecretNames {
            path_segments: &templates,
            ..SecretNames::default()
        };
        let freeze = |url: &str| {
            FrozenRequest::freeze(
                &Method::POST,
                &url.parse().unwrap(),
                &HeaderMap::new(),
                Bytes::new(),
                secrets,
            )
            .url
        };
        assert_eq!(
            freeze("https://hooks.slack.test/services/T0/B0/XOXSECRET1?a=1&&b"),
            "https://hooks.slack.test/services/T0/B0/[redacted]?a=1&&b"
        );
        assert_eq!(
            freeze("https://discord.test/api/webhooks/42/TOKEN2/slack?wait=true&token=T"),
            "https://discord.test/api/webhooks/42/[redacted]/slack?wait=true"
        );
        // A path the templates do not describe is kept.
        for kept in [
            "https://discord.test/api/webhooks/42",
            "https://discord.test/api/other/42/x",
            "https://hooks.slack.test/",
        ] {
            assert_eq!(freeze(kept), kept);
        }
        let uri: Uri = "https://discord.test/api/other/42/x".parse().unwrap();
        assert!(matches!(
            redacted_uri(&uri, secrets),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            redacted_path("/a/[redacted]", &["/a/{secret}".into()]),
            None
        );
        assert!(has_redacted_segment("/a/[redacted]/b"));
        assert!(!has_redacted_segment("/a/x[redacted]"));
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
