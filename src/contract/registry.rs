//! Choosing a contract per request.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use http::{Method, Uri};
use serde::{Deserialize, Serialize};

use super::Contract;
use super::ContractRef;
use super::error::{ContractError, ContractErrorKind as Kind};

/// How specific a matching target is: (exact host, path prefix length, method given).
pub(super) type Rank = (bool, usize, bool);

/// Which requests a contract applies to: a host, optionally a path prefix and a method.
///
/// - The host is compared case-insensitively, ignoring a trailing dot. Without a port it matches
///   any port; `api.test:8443` matches only that port (the scheme's default port counts when the
///   URI has none). `*.example.com` matches every subdomain of `example.com` (not the apex).
/// - The path prefix is segment-aware: `/v1` matches `/v1` and `/v1/charges`, not `/v10`.
/// - The method, when given, must be equal.
///
/// In JSON or TOML: `{ host = "api.stripe.com", path_prefix = "/v1", method = "POST" }` (the
/// method is upper-cased when read).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_method")]
    method: Option<Method>,
}

impl Target {
    /// Requests to `host` (`api.stripe.com`, `api.test:8443`, `[::1]:8080`, `*.adyen.com`).
    pub fn host(host: impl Into<String>) -> Self {
        Self {
            host: host.into(),
            path_prefix: None,
            method: None,
        }
    }

    /// Only paths under `prefix` (segment-aware).
    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.path_prefix = Some(prefix.into());
        self
    }

    /// Only requests with `method`.
    pub fn method(mut self, method: Method) -> Self {
        self.method = Some(method);
        self
    }

    /// The host pattern (`api.stripe.com`, `*.adyen.com`, `api.test:8443`).
    pub fn host_pattern(&self) -> &str {
        &self.host
    }

    /// The path prefix, if any.
    pub fn prefix(&self) -> Option<&str> {
        self.path_prefix.as_deref()
    }

    /// The method, if any.
    pub fn method_filter(&self) -> Option<&Method> {
        self.method.as_ref()
    }

    /// Whether a request matches.
    pub fn matches(&self, method: &Method, uri: &Uri) -> bool {
        self.specificity(method, uri).is_some()
    }

    /// `None` when the request does not match; otherwise a rank, higher is more specific:
    /// exact host over wildcard, then a longer path prefix, then a method.
    pub(super) fn specificity(&self, method: &Method, uri: &Uri) -> Option<Rank> {
        let req_host = uri.host()?;
        let (host, port) = split_host_port(&self.host);
        let exact = if let Some(suffix) = host.strip_prefix("*.") {
            let req = req_host.trim_end_matches('.').as_bytes();
            let suffix = suffix.trim_end_matches('.').as_bytes();
            let ok = req.len() > suffix.len() + 1
                && req[req.len() - suffix.len() - 1] == b'.'
                && req[req.len() - suffix.len()..].eq_ignore_ascii_case(suffix);
            if !ok {
                return None;
            }
            false
        } else {
            if !host
                .trim_end_matches('.')
                .eq_ignore_ascii_case(req_host.trim_end_matches('.'))
            {
                return None;
            }
            true
        };
        if let Some(port) = port {
            let req_port = uri.port_u16().or(match uri.scheme_str() {
                Some(s) if s.eq_ignore_ascii_case("https") => Some(443),
                Some(s) if s.eq_ignore_ascii_case("http") => Some(80),
                _ => None,
            });
            if req_port != Some(port) {
                return None;
            }
        }
        let prefix_len = match &self.path_prefix {
            Some(prefix) => {
                let prefix = normalize_prefix(prefix);
                let path = uri.path();
                let under = path == prefix
                    || prefix.is_empty()
                    || (path.starts_with(prefix)
                        && path.as_bytes().get(prefix.len()) == Some(&b'/'));
                if !under {
                    return None;
                }
                prefix.len()
            }
            None => 0,
        };
        let method_given = match &self.method {
            Some(m) if m != method => return None,
            Some(_) => true,
            None => false,
        };
        Some((exact, prefix_len, method_given))
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        let (host, _) = split_host_port(&self.host);
        let bare = host.strip_prefix("*.").unwrap_or(host);
        if bare.is_empty() {
            return Err(format!("host `{}` is empty", self.host));
        }
        if bare.contains(['/', '*', '?', '#', '@', ' ']) {
            return Err(format!("host `{}` is not a host name", self.host));
        }
        if self.host.contains(':')
            && !self.host.starts_with('[')
            && split_host_port(&self.host).1.is_none()
        {
            return Err(format!("host `{}` has an invalid port", self.host));
        }
        if let Some(p) = &self.path_prefix
            && !p.is_empty()
            && !p.starts_with('/')
        {
            return Err(format!("path prefix `{p}` must start with `/`"));
        }
        Ok(())
    }
}

impl std::fmt::Display for Target {
    /// `POST api.stripe.com/v1`, `* api.test` (any method).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.method {
            Some(m) => write!(f, "{m} ")?,
            None => f.write_str("* ")?,
        }
        f.write_str(&self.host)?;
        if let Some(p) = &self.path_prefix {
            f.write_str(p)?;
        }
        Ok(())
    }
}

/// `/v1/` and `/v1` are the same prefix; `/` is every path.
fn normalize_prefix(prefix: &str) -> &str {
    prefix.trim_end_matches('/')
}

/// `host:port`, `[v6]:port`, or a bare host (a bare IPv6 address keeps its colons).
fn split_host_port(s: &str) -> (&str, Option<u16>) {
    if s.starts_with('[') {
        if let Some(end) = s.find(']') {
            let port = s[end + 1..].strip_prefix(':').and_then(|p| p.parse().ok());
            return (&s[..=end], port);
        }
        return (s, None);
    }
    match s.split_once(':') {
        Some((host, port)) if !port.contains(':') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (s, None),
        },
        _ => (s, None),
    }
}

mod opt_method {
    use http::Method;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(m: &Option<Method>, s: S) -> Result<S::Ok, S::Error> {
        match m {
            Some(m) => s.serialize_some(m.as_str()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Method>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|m| {
                Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                    .map_err(serde::de::Error::custom)
            })
            .transpose()
    }
}

#[derive(Clone, Debug)]
struct Route {
    target: Target,
    contract: Arc<Contract>,
    /// Computed once: hashing the canonical JSON per request would sit on the hot path.
    reference: ContractRef,
}

/// Where a host pattern is filed in the [`Index`]: the same normalization `specificity` compares
/// with (port dropped, trailing dots trimmed, ASCII case folded).
enum HostKey {
    /// `api.stripe.com`, `api.test:8443`, `[::1]:8080`: by host.
    Exact(String),
    /// `*.stripe.com`: by the suffix after `*.`.
    Wildcard(String),
}

impl HostKey {
    fn of(pattern: &str) -> Self {
        let (host, _) = split_host_port(pattern);
        match host.strip_prefix("*.") {
            Some(suffix) => Self::Wildcard(suffix.trim_end_matches('.').to_ascii_lowercase()),
            None => Self::Exact(host.trim_end_matches('.').to_ascii_lowercase()),
        }
    }
}

/// Routes by host, then by path prefix, so selection looks at the routes that can match the
/// request (those of its host, and the wildcards of its parent domains, under one of its path's
/// segment prefixes) instead of scanning every route. It only narrows the candidates:
/// `specificity` still decides, so the index cannot change which route wins.
#[derive(Clone, Debug, Default)]
struct Index {
    /// Exact host → its routes by prefix.
    exact: HashMap<String, ByPrefix>,
    /// Wildcard suffix (`stripe.com` for `*.stripe.com`) → its routes by prefix.
    wildcard: HashMap<String, ByPrefix>,
    /// Each target's position, to replace an equal target in place.
    position: HashMap<Target, usize>,
}

/// Normalized path prefix (`""` for none or `/`) → positions in `routes`, ascending.
type ByPrefix = HashMap<String, Vec<usize>>;

impl Index {
    fn add(&mut self, target: &Target, at: usize) {
        let by_prefix = match HostKey::of(&target.host) {
            HostKey::Exact(k) => self.exact.entry(k).or_default(),
            HostKey::Wildcard(k) => self.wildcard.entry(k).or_default(),
        };
        let prefix = target.path_prefix.as_deref().map_or("", normalize_prefix);
        by_prefix.entry(prefix.to_owned()).or_default().push(at);
        self.position.insert(target.clone(), at);
    }
}

/// Calls `f` with the routes of `by_prefix` whose prefix can match `path`: a (normalized)
/// prefix matches when it is empty, equals the path, or is followed in the path by `/`.
fn for_prefixes_of(by_prefix: &ByPrefix, path: &str, mut f: impl FnMut(&[usize])) {
    if let Some(list) = by_prefix.get("") {
        f(list);
    }
    let ends = path
        .bytes()
        .enumerate()
        .filter(|&(i, b)| b == b'/' && i > 0)
        .map(|(i, _)| i)
        .chain((!path.is_empty()).then_some(path.len()));
    for end in ends {
        if let Some(list) = by_prefix.get(&path[..end]) {
            f(list);
        }
    }
}

/// The contracts of a client, chosen per request by [`Target`]; a default covers the rest.
///
/// ```
/// use http::{Method, Uri};
/// use recoverable_write::contract::{Contract, Contracts, Target};
///
/// let contracts = Contracts::default()
///     .route(Target::host("api.example.com"), Contract::ietf_draft());
/// let uri: Uri = "https://api.example.com/tickets".parse().unwrap();
/// assert_eq!(contracts.select(&Method::POST, &uri).name, "ietf-draft");
/// let other: Uri = "https://elsewhere.test/x".parse().unwrap();
/// assert_eq!(contracts.select(&Method::POST, &other).name, "default");
/// ```
#[derive(Clone, Debug)]
pub struct Contracts {
    default: Arc<Contract>,
    default_reference: ContractRef,
    routes: Vec<Route>,
    index: Index,
}

impl Contracts {
    /// A registry where every request gets `default`.
    pub fn new(default: Contract) -> Self {
        Self {
            default_reference: default.reference(),
            default: Arc::new(default),
            routes: Vec::new(),
            index: Index::default(),
        }
    }

    /// Uses `contract` for requests matching `target`. Registering an equal target again
    /// replaces the earlier contract.
    pub fn route(self, target: Target, contract: Contract) -> Self {
        let reference = contract.reference();
        self.route_shared(target, Arc::new(contract), reference)
    }

    /// [`route`](Self::route) with a contract many routes share and its reference computed
    /// once (the loader's case: thousands of routes, a few contracts).
    pub(super) fn route_shared(
        mut self,
        target: Target,
        contract: Arc<Contract>,
        reference: ContractRef,
    ) -> Self {
        match self.index.position.get(&target) {
            Some(&at) => {
                let route = &mut self.routes[at];
                route.contract = contract;
                route.reference = reference;
            }
            None => {
                self.index.add(&target, self.routes.len());
                self.routes.push(Route {
                    target,
                    contract,
                    reference,
                });
            }
        }
        self
    }

    /// The contract for a request: among the matching targets the most specific wins (exact host
    /// over wildcard, then the longest path prefix, then a given method; the first registered on
    /// a tie); with no match, the default.
    ///
    /// Routes are indexed by host and path prefix: the cost is that of the routes that can
    /// match (the request's host and the wildcards of its parent domains, under the path's own
    /// segment prefixes), not of every route.
    pub fn select(&self, method: &Method, uri: &Uri) -> &Arc<Contract> {
        self.select_with_reference(method, uri).0
    }

    /// [`select`](Self::select), with the contract's [`reference`](Contract::reference)
    /// computed once at registration instead of per request.
    pub fn select_with_reference(
        &self,
        method: &Method,
        uri: &Uri,
    ) -> (&Arc<Contract>, &ContractRef) {
        let route = uri
            .host()
            .and_then(|host| self.best(method, uri, host))
            .map(|at| &self.routes[at]);
        route.map_or((&self.default, &self.default_reference), |r| {
            (&r.contract, &r.reference)
        })
    }

    /// The position of the winning route: the highest rank, the first registered on a tie.
    fn best(&self, method: &Method, uri: &Uri, host: &str) -> Option<usize> {
        let host = host.trim_end_matches('.');
        let host: Cow<'_, str> = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(host)
        };
        let path = uri.path();
        let mut best: Option<(Rank, usize)> = None;
        let consider = |best: &mut Option<(Rank, usize)>, by_prefix: &ByPrefix| {
            for_prefixes_of(by_prefix, path, |candidates| {
                for &at in candidates {
                    if let Some(rank) = self.routes[at].target.specificity(method, uri)
                        && best.is_none_or(|(b, first)| rank > b || (rank == b && at < first))
                    {
                        *best = Some((rank, at));
                    }
                }
            });
        };
        if let Some(by_prefix) = self.index.exact.get(host.as_ref()) {
            consider(&mut best, by_prefix);
        }
        // An exact host outranks every wildcard, so wildcards matter only without one.
        if best.is_none() && !self.index.wildcard.is_empty() {
            // `*.suffix` matches when the host is `<at least one byte>.suffix`.
            for (dot, b) in host.bytes().enumerate() {
                if b == b'.'
                    && dot > 0
                    && let Some(by_prefix) = self.index.wildcard.get(&host[dot + 1..])
                {
                    consider(&mut best, by_prefix);
                }
            }
        }
        best.map(|(_, at)| at)
    }

    /// The contract with this name: the default first, then routes in registration order.
    pub fn get(&self, name: &str) -> Option<&Arc<Contract>> {
        self.all().find(|c| c.name == name)
    }

    /// The contract an operation was frozen with: same name and same content hash. `None` when
    /// the configuration no longer holds that exact contract.
    pub fn find(&self, reference: &ContractRef) -> Option<&Arc<Contract>> {
        std::iter::once((&self.default, &self.default_reference))
            .chain(self.routes.iter().map(|r| (&r.contract, &r.reference)))
            .find(|(_, r)| *r == reference)
            .map(|(c, _)| c)
    }

    /// The default contract.
    pub fn default_contract(&self) -> &Arc<Contract> {
        &self.default
    }

    /// The routes, in registration order.
    pub fn routes(&self) -> impl Iterator<Item = (&Target, &Arc<Contract>)> {
        self.routes.iter().map(|r| (&r.target, &r.contract))
    }

    /// Validates every contract and target, and checks that no two different contracts share a
    /// name (recovery finds the frozen contract by name).
    pub fn validate(&self) -> Result<(), ContractError> {
        self.default.validate()?;
        for route in &self.routes {
            route.contract.validate()?;
            route.target.validate().map_err(|why| {
                ContractError::new(&route.contract.name, "target", Kind::InvalidTarget(why))
            })?;
        }
        // Each contract against the first of its name: linear, and the same first error as
        // comparing every pair (all earlier ones of a name equal the first until one differs).
        let mut first: HashMap<&str, &Arc<Contract>> = HashMap::new();
        for a in self.all() {
            let b = *first.entry(a.name.as_str()).or_insert(a);
            if !Arc::ptr_eq(a, b) && **a != **b {
                return Err(ContractError::new(
                    &a.name,
                    "name",
                    Kind::DuplicateName(a.name.clone()),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<Contract>> {
        std::iter::once(&self.default).chain(self.routes.iter().map(|r| &r.contract))
    }
}

impl Default for Contracts {
    /// Only the [conservative](Contract::conservative) default.
    fn default() -> Self {
        Self::new(Contract::conservative())
    }
}
