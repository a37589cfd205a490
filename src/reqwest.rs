//! reqwest-middleware adapter (feature `reqwest`).
//!
//! [`RecoverableWriteMiddleware`] gives a `reqwest_middleware::ClientWithMiddleware` the same
//! guarantees as the tower layer — it runs the very same preparation (freeze, record, claim) and
//! recording code, over the same ledger, contracts and recovery engine. [`SendOnceMiddleware`] is
//! the send-once guard for a reqwest chain, and [`RecoverableWriteStrategy`] keeps reqwest-retry,
//! if it stays in the chain, from re-sending a recoverable write.
//!
//! ```no_run
//! use recoverable_write::reqwest::{
//!     RecoverableWriteMiddleware, RecoverableWriteStrategy, SendOnceMiddleware, client_builder,
//! };
//! use recoverable_write::{MemoryLedger, Operation, RecoverableWrite};
//! use reqwest_middleware::ClientBuilder;
//! use reqwest_retry::{RetryTransientMiddleware, policies::ExponentialBackoff};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = RecoverableWrite::builder(MemoryLedger::new()).build()?.layer();
//! let client = ClientBuilder::new(client_builder().build()?)   // reqwest's own retries off
//!     .with(RecoverableWriteMiddleware::new(&layer))           // outermost: the retry owner
//!     .with(RetryTransientMiddleware::new_with_policy_and_strategy(
//!         ExponentialBackoff::builder().build_with_max_retries(3),
//!         RecoverableWriteStrategy::default(),                  // never re-sends a tracked write
//!     ))
//!     .with(SendOnceMiddleware::new())                          // innermost: refuses re-sends
//!     .build();
//!
//! let res = client
//!     .post("https://vendor.example/tickets")
//!     .with_extension(Operation::new("tenant-a", "create_ticket", "intent-17"))
//!     .body(r#"{"device_id":"E17"}"#)
//!     .send()
//!     .await;
//! if let Err(e) = &res {
//!     if let Some(outcome) = recoverable_write::reqwest::outcome(e) {
//!         println!("{}", outcome.message); // "op-… is being verified; do not create it again"
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Redirects must be off
//!
//! reqwest follows redirects by default, below this middleware and below the send-once guard: a
//! 307 or 308 makes the client send the write again, to another URL, and neither the guard nor
//! the ledger sees that second send. Build the client with [`client_builder`] (redirects off,
//! reqwest's own retries off) or set `redirect(reqwest::redirect::Policy::none())` yourself.
//! reqwest does not expose a built client's policy, so this cannot be checked when the
//! middleware is built; it is detected per attempt instead: when the response comes from
//! another URL than the one the attempt was sent to, the attempt is recorded as `Unknown`
//! ([`RedirectFollowed`]; the write may have been applied at either URL), a warning is logged,
//! and the recovery engine reconciles it. The redirected answer is never taken as success. A
//! redirect back to the very same URL leaves no such trace: only the client's policy prevents it.
//!
//! # Differences from the tower layer
//!
//! - The operation is named with `RequestBuilder::with_extension(Operation::new(..))`. As with
//!   the layer, only requests naming one are tracked, unless the layer was built with
//!   [`track_all_writes`](crate::Builder::track_all_writes); other writes pass through
//!   marked [`Untracked`], which [`SendOnceMiddleware`] lets through.
//! - Errors come back as `reqwest_middleware::Error::Middleware` wrapping a
//!   [`crate::Error`]; use [`error`] / [`outcome`] to get at it.
//! - Lookups and replays by the [`Recoverer`](crate::Recoverer) go through your own reqwest
//!   client too: pass [`transport`]`(client)` to
//!   [`Builder::transport`](crate::Builder::transport) (keep
//!   [`SendOnceMiddleware`] in that client's chain). No second HTTP stack is needed.

use std::sync::Arc;

use bytes::Bytes;
use http::Extensions;
use http_body_util::Full;
use reqwest_middleware::{Middleware, Next};
use reqwest_retry::{Retryable, RetryableStrategy};
use tracing::Instrument;

use crate::BoxError;
use crate::RecoverableWriteLayer;
use crate::core::{Observed, Shared, Step, await_resolution, prepare_inner, record_attempt, trace};
use crate::error::{Error, Outcome};
use crate::guard::{AttemptToken, GuardStats, SendRefused, Untracked, admit};
use crate::operation::Operation;

/// A reqwest client builder with reqwest's own retries off and redirects not followed: a
/// redirect would re-send the write to another URL, a hidden second send. A 3xx is recorded as
/// evidence (unknown) instead.
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
}

/// A tower service over your reqwest client, for the lookups and replays of the recovery engine
/// ([`Builder::transport`](crate::Builder::transport)): reqwest users need no second
/// HTTP client stack. Build the client it wraps without the [`RecoverableWriteMiddleware`] (the
/// engine records its attempts itself), with [`SendOnceMiddleware`] in its chain and with
/// [`client_builder`] (no redirects, no retries).
///
/// ```no_run
/// use recoverable_write::reqwest::{SendOnceMiddleware, client_builder, transport};
/// use recoverable_write::{MemoryLedger, RecoverableWrite};
///
/// # fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let below = reqwest_middleware::ClientBuilder::new(client_builder().build()?)
///     .with(SendOnceMiddleware::new())
///     .build();
/// let rw = RecoverableWrite::builder(MemoryLedger::new())
///     .transport(transport(below.clone()))
///     .build()?;
/// # let _ = rw;
/// # Ok(())
/// # }
/// ```
pub fn transport(client: impl Into<reqwest_middleware::ClientWithMiddleware>) -> ReqwestTransport {
    ReqwestTransport {
        client: client.into(),
    }
}

/// See [`transport`].
#[derive(Clone, Debug)]
pub struct ReqwestTransport {
    client: reqwest_middleware::ClientWithMiddleware,
}

impl tower_service::Service<http::Request<Full<Bytes>>> for ReqwestTransport {
    type Response = http::Response<reqwest::Body>;
    type Error = BoxError;
    type Future = crate::ledger::BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Full<Bytes>>) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let url = reqwest::Url::parse(&parts.uri.to_string())?;
            let mut out = reqwest::Request::new(parts.method, url);
            *out.headers_mut() = parts.headers;
            *out.body_mut() = Some(reqwest::Body::from(into_bytes(body).await));
            let mut ext = parts.extensions;
            let res = client
                .execute_with_extensions(out, &mut ext)
                .await
                .map_err(unpack)?;
            Ok(http::Response::from(res))
        })
    }
}

/// The recoverable-write flow as a reqwest middleware. Put it first (outermost) in the chain.
#[derive(Clone, Debug)]
pub struct RecoverableWriteMiddleware {
    shared: Arc<Shared>,
}

impl RecoverableWriteMiddleware {
    /// Shares `layer`'s ledger, contracts, budget, authorizer, notifier and tracking choice.
    ///
    /// **The client below must not follow redirects**: build it with [`client_builder`] or
    /// `redirect(reqwest::redirect::Policy::none())`. reqwest's default policy re-sends a POST
    /// on 307/308 to another URL, a second send nothing below this middleware can refuse.
    /// reqwest does not let this be checked here; a followed redirect is detected per attempt
    /// and recorded as `Unknown` (see [`RedirectFollowed`]).
    pub fn new(layer: &RecoverableWriteLayer) -> Self {
        Self {
            shared: layer.shared().clone(),
        }
    }
}

/// The [`crate::Error`] inside a reqwest-middleware error, if it came from this crate.
pub fn error(err: &reqwest_middleware::Error) -> Option<&Error> {
    match err {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Error>(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

/// The operation's outcome inside a reqwest-middleware error, if any.
pub fn outcome(err: &reqwest_middleware::Error) -> Option<&Outcome> {
    error(err).and_then(Error::outcome)
}

/// Same rule as the tower layer's: an [`Operation`] is tracked; any other write only with
/// [`Builder::track_all_writes`](crate::Builder::track_all_writes).
fn is_tracked(req: &reqwest::Request, ext: &Extensions, track_all_writes: bool) -> bool {
    ext.get::<Operation>().is_some() || (track_all_writes && !is_idempotent(req.method()))
}

fn is_idempotent(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::TRACE
    )
}

fn wrap(e: Error) -> reqwest_middleware::Error {
    reqwest_middleware::Error::Middleware(anyhow::Error::new(e))
}

/// Back to a reqwest response, keeping the URL, status, headers and extensions (the
/// [`Outcome`]).
async fn to_reqwest(res: http::Response<Full<Bytes>>, url: reqwest::Url) -> reqwest::Response {
    use reqwest::ResponseBuilderExt;
    let (parts, body) = res.into_parts();
    let bytes = into_bytes(body).await;
    // The response's own extensions (the `Outcome`) are the builder's, so the URL joins them.
    let mut builder = http::Response::builder()
        .status(parts.status)
        .version(parts.version);
    if let Some(ext) = builder.extensions_mut() {
        *ext = parts.extensions;
    }
    let mut out = builder
        .url(url)
        .body(reqwest::Body::from(bytes))
        .unwrap_or_default();
    *out.headers_mut() = parts.headers;
    reqwest::Response::from(out)
}

/// The bytes of a buffered body: a `Full<Bytes>`, or a reqwest body whose `as_bytes` is
/// `Some`. Ready at once, moved out without a copy; it cannot fail.
async fn into_bytes<B: http_body::Body<Data = Bytes>>(body: B) -> Bytes {
    crate::core::collect(body).await.unwrap_or_default()
}

/// Unwraps the chain's error into what the contract classifies: the transport error itself, or
/// the guard's refusal.
fn unpack(e: reqwest_middleware::Error) -> BoxError {
    match e {
        reqwest_middleware::Error::Reqwest(r) => Box::new(r),
        reqwest_middleware::Error::Middleware(a) => match a.downcast::<TrackedAttemptFailed>() {
            Ok(tracked) => unpack(tracked.0),
            Err(a) => match a.downcast::<SendRefused>() {
                Ok(refused) => Box::new(refused),
                Err(a) => a.into(),
            },
        },
    }
}

#[async_trait::async_trait]
impl Middleware for RecoverableWriteMiddleware {
    async fn handle(
        &self,
        req: reqwest::Request,
        ext: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if !is_tracked(&req, ext, self.shared.track_all_writes) {
            // Not recoverable by choice: tell the send-once guard below to let it through.
            if !is_idempotent(req.method()) {
                ext.insert(Untracked);
            }
            return next.run(req, ext).await;
        }
        let span = trace::write_span();
        self.tracked(req, ext, next, &span)
            .instrument(span.clone())
            .await
    }
}

impl RecoverableWriteMiddleware {
    /// A tracked write, inside its span (`recoverable_write.write`): prepare (freeze, record,
    /// claim), send once down the chain, classify and record what came back.
    async fn tracked(
        &self,
        mut req: reqwest::Request,
        ext: &mut Extensions,
        next: Next<'_>,
        span: &tracing::Span,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        // To an http request with a frozen body: a streaming body cannot be replayed. The body
        // and the headers are moved out of `req`, not copied; `req` itself (its URL, timeout,
        // version and extensions) is what goes down the chain, with what `prepare` built.
        let body = match req.body_mut().take() {
            None => Bytes::new(),
            Some(b) if b.as_bytes().is_none() => return Err(wrap(Error::NonReplayableBody)),
            Some(b) => into_bytes(b).await,
        };
        let mut http_req = http::Request::new(Full::new(body));
        *http_req.method_mut() = req.method().clone();
        *http_req.version_mut() = req.version();
        *http_req.headers_mut() = std::mem::take(req.headers_mut());
        *http_req.uri_mut() = req
            .url()
            .as_str()
            .parse()
            .map_err(|e: http::uri::InvalidUri| wrap(Error::Inner { source: e.into() }))?;
        if let Some(op) = ext.get::<Operation>() {
            http_req.extensions_mut().insert(op.clone());
        }

        let (send, ctx) = match prepare_inner(self.shared.clone(), http_req, span).await {
            Ok(Step::Send(send, ctx)) => (send, ctx),
            Ok(Step::Done(res)) => return Ok(to_reqwest(res, req.url().clone()).await),
            // Boxed, as below: a write that goes through never waits for the recovery engine,
            // and inline the wait would make every write's future larger.
            Err(e) => {
                return match Box::pin(await_resolution(&self.shared, e)).await {
                    Ok(res) => Ok(to_reqwest(res, req.url().clone()).await),
                    Err(e) => Err(wrap(e)),
                };
            }
        };

        // The attempt is registered; send exactly these bytes with the key in place.
        let (parts, body) = send.into_parts();
        *req.method_mut() = parts.method;
        *req.headers_mut() = parts.headers;
        *req.version_mut() = parts.version;
        *req.body_mut() = Some(reqwest::Body::from(into_bytes(body).await));
        // The URL changes only when the contract places the key in the query; the caller's
        // response keeps the URL it asked for.
        let asked = if parts.uri != *req.url().as_str()
            && let Ok(u) = reqwest::Url::parse(&parts.uri.to_string())
        {
            Some(std::mem::replace(req.url_mut(), u))
        } else {
            None
        };
        if let Some(token) = parts.extensions.get::<AttemptToken>() {
            ext.insert(token.clone());
        }

        let deadline = ctx.deadline;
        let sent_to = req.url().clone();
        tracing::debug!("request sent");
        let observed = match tokio::time::timeout_at(deadline, next.run(req, ext)).await {
            // The client followed a redirect: the write was sent again, to another URL, below
            // the guard. Never a success from the redirected answer.
            Ok(Ok(res)) if *res.url() != sent_to => {
                let followed = RedirectFollowed::new(res.url());
                tracing::warn!(
                    operation = %ctx.record.operation_id,
                    attempt = %ctx.attempt,
                    to = %followed.to,
                    "the reqwest client followed a redirect for a recoverable write; its outcome is unknown. Disable redirects: build the client with recoverable_write::reqwest::client_builder() or .redirect(reqwest::redirect::Policy::none())"
                );
                Observed::Failed(Box::new(followed))
            }
            Ok(Ok(res)) => Observed::Response(http::Response::<reqwest::Body>::from(res)),
            Ok(Err(e)) => Observed::Failed(unpack(e)),
            Err(_) => Observed::TimedOut,
        };
        let shared = ctx.shared.clone();
        let result = match record_attempt(ctx, observed).await {
            Err(e) => Box::pin(await_resolution(&shared, e)).await,
            ok => ok,
        };
        match result {
            Ok(res) => Ok(to_reqwest(res, asked.unwrap_or(sent_to)).await),
            Err(e) => Err(wrap(e)),
        }
    }
}

/// The reqwest client below [`RecoverableWriteMiddleware`] followed a redirect: the write was
/// sent to the redirect's target too (307 and 308 keep the method and body), so it may have been
/// applied at either URL. The attempt is recorded as [`Evidence::Unknown`](crate::Evidence) and
/// reconciled; the redirected answer is never taken as success.
///
/// Build the client with [`client_builder`] (or `redirect(reqwest::redirect::Policy::none())`).
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the client followed a redirect, so the write may have applied at either URL; build it with client_builder() or redirect::Policy::none(); it ended at {to}"
)]
pub struct RedirectFollowed {
    /// Scheme, authority and path of the final URL: no userinfo, no query (may hold secrets).
    to: String,
}

impl RedirectFollowed {
    fn new(url: &reqwest::Url) -> Self {
        let host = url.host_str().unwrap_or("?");
        let to = match url.port() {
            Some(port) => format!("{}://{host}:{port}{}", url.scheme(), url.path()),
            None => format!("{}://{host}{}", url.scheme(), url.path()),
        };
        Self { to }
    }

    /// Scheme, host and path the client ended at (userinfo and query left out).
    pub fn final_url(&self) -> &str {
        &self.to
    }
}

/// Marks a response that answered a tracked attempt, for [`RecoverableWriteStrategy`].
#[derive(Clone, Copy, Debug)]
pub struct TrackedAttempt;

/// An error that answered a tracked attempt (wraps the transport error), for
/// [`RecoverableWriteStrategy`].
#[derive(Debug, thiserror::Error)]
#[error("tracked attempt failed: {0}")]
pub struct TrackedAttemptFailed(#[source] pub reqwest_middleware::Error);

/// The send-once guard as a reqwest middleware. Put it last (innermost), right above the
/// client. See [`crate::guard`].
#[derive(Clone, Debug, Default)]
pub struct SendOnceMiddleware {
    allow_untracked: bool,
    stats: Arc<GuardStats>,
}

impl SendOnceMiddleware {
    /// Refuses duplicate sends of an attempt, and non-idempotent requests that carry neither a
    /// token nor the [`Untracked`] mark [`RecoverableWriteMiddleware`] puts on writes it chose
    /// not to track (see [`crate::guard`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets every write without a token through, marked [`Untracked`] or not (duplicates of
    /// tracked attempts are still refused; a tracked write that lost its token is not caught).
    pub fn allow_untracked_writes(mut self, allow: bool) -> Self {
        self.allow_untracked = allow;
        self
    }

    /// What this guard let through and refused.
    pub fn stats(&self) -> Arc<GuardStats> {
        self.stats.clone()
    }
}

#[async_trait::async_trait]
impl Middleware for SendOnceMiddleware {
    async fn handle(
        &self,
        req: reqwest::Request,
        ext: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if let Err(r) = admit(ext, req.method(), self.allow_untracked, &self.stats) {
            return Err(reqwest_middleware::Error::Middleware(anyhow::Error::new(r)));
        }
        let tracked = ext.get::<AttemptToken>().is_some();
        let result = next.run(req, ext).await;
        if !tracked {
            return result;
        }
        match result {
            Ok(mut res) => {
                res.extensions_mut().insert(TrackedAttempt);
                Ok(res)
            }
            Err(e) => Err(reqwest_middleware::Error::Middleware(anyhow::Error::new(
                TrackedAttemptFailed(e),
            ))),
        }
    }
}

/// A reqwest-retry strategy that never retries a recoverable write (one marked by
/// [`SendOnceMiddleware`]) and defers to `S` for everything else.
///
/// reqwest-retry decides from the status alone and retries any method on 5xx; for a write whose
/// outcome is unknown that is the duplicate this crate exists to prevent. The recovery engine is
/// the only retry owner for tracked writes.
pub struct RecoverableWriteStrategy<S = reqwest_retry::DefaultRetryableStrategy>(pub S);

impl RecoverableWriteStrategy {
    /// Around reqwest-retry's default strategy.
    pub fn new() -> Self {
        Self(reqwest_retry::DefaultRetryableStrategy)
    }
}

impl Default for RecoverableWriteStrategy {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> RecoverableWriteStrategy<S> {
    /// Around a custom strategy for untracked requests.
    pub fn wrap(inner: S) -> Self {
        Self(inner)
    }
}

impl<S> std::fmt::Debug for RecoverableWriteStrategy<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecoverableWriteStrategy")
    }
}

impl<S: RetryableStrategy> RetryableStrategy for RecoverableWriteStrategy<S> {
    fn handle(
        &self,
        res: &Result<reqwest::Response, reqwest_middleware::Error>,
    ) -> Option<Retryable> {
        let tracked = match res {
            Ok(r) => r.extensions().get::<TrackedAttempt>().is_some(),
            Err(reqwest_middleware::Error::Middleware(e)) => {
                e.is::<TrackedAttemptFailed>() || e.is::<SendRefused>()
            }
            Err(reqwest_middleware::Error::Reqwest(_)) => false,
        };
        if tracked {
            match res {
                Ok(r) if r.status().is_success() => None,
                _ => Some(Retryable::Fatal),
            }
        } else {
            self.0.handle(res)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_followed_redirect_is_unknown_never_proof_of_non_execution() {
        let url = reqwest::Url::parse("https://user:pw@vendor.test:8443/v2/tickets?api_key=s3cr3t")
            .expect("url");
        let followed = RedirectFollowed::new(&url);
        assert_eq!(followed.final_url(), "https://vendor.test:8443/v2/tickets");
        let evidence = crate::Contract::conservative().classify_error(&followed);
        match evidence {
            crate::Evidence::Unknown { why, .. } => {
                assert!(why.contains("redirect"), "{why}");
                assert!(!why.contains("s3cr3t") && !why.contains("pw"), "{why}");
            }
            other => panic!("a followed redirect may have applied the write: {other:?}"),
        }
    }
}
