//! The send-once guard: suppresses the retries of every layer below the recoverable-write layer.
//!
//! [`RecoverableWrite`](crate::RecoverableWrite) puts an [`AttemptToken`] into the extensions of
//! every request it sends. [`SendOnceGuard`], placed at the transport (directly above the HTTP
//! client), lets each token through once. A retry layer, SDK or client between the two that
//! re-sends the request is refused locally, so the second copy provably never left the process:
//! the recovery engine stays the only retry owner, under one persisted budget.
//!
//! A non-idempotent request that reaches the guard with no token at all (an inner layer rebuilt
//! the request and dropped its extensions, or the write bypassed the layer) is refused as well,
//! unless the guard was built with [`SendOnceGuardLayer::allow_untracked_writes`].
//!
//! # Writes the layer chose not to track
//!
//! By default the layer tracks only requests that carry an [`Operation`](crate::Operation) (see
//! [`Builder::track_all_writes`](crate::Builder::track_all_writes)).
//! A write it lets through untracked (an OAuth token request through an app-wide client, say) is
//! marked with [`Untracked`], and the guard lets a marked write through: it is not recoverable
//! by choice, and refusing it would break every client that shares the stack. A tracked write
//! never carries the marker, so a tracked write whose token an inner layer dropped is still
//! refused. The guard cannot tell the two apart once an inner layer drops *all* extensions: a
//! rebuilt copy of an untracked write is refused too (keep extensions in such layers, or name the
//! write's [`Operation`](crate::Operation) so it is recoverable).
//!
//! ```
//! use tower::ServiceBuilder;
//! use recoverable_write::{MemoryLedger, RecoverableWrite, SendOnceGuardLayer};
//! # fn wrap<S>(client: S) -> Result<(), recoverable_write::BuildError> {
//! let stack = ServiceBuilder::new()
//!     .layer(RecoverableWrite::builder(MemoryLedger::new()).build()?.layer())
//!     // ... timeouts, tracing, even a retry layer ...
//!     .layer(SendOnceGuardLayer::new())
//!     .service(client);
//! # let _ = stack;
//! # Ok(())
//! # }
//! ```
//!
//! # Differences from hyper-util's `retry_canceled_requests`
//!
//! hyper-util's one built-in retry only re-sends a request that provably never left (the pooled
//! connection was closed before it was written): the same rule as ours. Switch it off anyway
//! (`retry_canceled_requests(false)`) so that one component owns every resend; the guard cannot see
//! inside the client.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::{Method, Request};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::operation::{AttemptId, OperationId};
use tower::BoxError;

/// Marks one attempt of one operation. Cloning the request's extensions clones the token, and all
/// clones share one "already sent" flag.
#[derive(Clone, Debug)]
pub struct AttemptToken {
    operation: OperationId,
    attempt: AttemptId,
    sent: Arc<AtomicBool>,
}

impl AttemptToken {
    /// A fresh, unsent token. Only the crate mints tokens: one per attempt it registered.
    pub(crate) fn new(operation: OperationId, attempt: AttemptId) -> Self {
        Self {
            operation,
            attempt,
            sent: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The attempt this token stands for.
    pub fn attempt(&self) -> AttemptId {
        self.attempt
    }

    /// The operation this token belongs to.
    pub fn operation(&self) -> &OperationId {
        &self.operation
    }

    /// Whether some copy of the request carrying this token reached the transport.
    pub fn was_sent(&self) -> bool {
        self.sent.load(Ordering::Acquire)
    }

    /// Marks the token sent; `false` if it already was.
    fn take(&self) -> bool {
        !self.sent.swap(true, Ordering::AcqRel)
    }
}

/// Marks a write that [`RecoverableWrite`](crate::RecoverableWrite) (or the reqwest middleware)
/// saw and chose not to track: the guard lets it through (see the [module docs](self)). Put it
/// on a write yourself only for a write that is deliberately not recoverable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Untracked;

/// Marks `req` as a write the layer chose not to track; reads need no mark (the guard lets them
/// through anyway, and the passthrough path stays allocation-free).
pub(crate) fn mark_untracked<B>(req: &mut Request<B>) {
    if !is_idempotent(req.method()) {
        req.extensions_mut().insert(Untracked);
    }
}

/// Why the guard refused to send. The request never left the process.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendRefused {
    /// A second send of the same attempt (an inner retry).
    Duplicate {
        /// The operation.
        operation: OperationId,
        /// The attempt that was already sent.
        attempt: AttemptId,
    },
    /// A non-idempotent request without an attempt token nor the [`Untracked`] mark.
    Untracked {
        /// The request method.
        method: Method,
    },
}

impl fmt::Display for SendRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendRefused::Duplicate { operation, attempt } => write!(
                f,
                "send-once guard refused a second send of {attempt} of {operation} (an inner retry); it was not sent"
            ),
            SendRefused::Untracked { method } => write!(
                f,
                "send-once guard refused an untracked {method} (no attempt token: the write bypassed the recoverable-write layer or an inner layer dropped its extensions); it was not sent"
            ),
        }
    }
}

impl std::error::Error for SendRefused {}

/// Counts what the guard refused, shared by every clone of one guard layer.
#[derive(Debug, Default)]
pub struct GuardStats {
    passed: AtomicU64,
    refused_duplicates: AtomicU64,
    refused_untracked: AtomicU64,
}

impl GuardStats {
    /// Requests let through.
    pub fn passed(&self) -> u64 {
        self.passed.load(Ordering::Relaxed)
    }

    /// Second sends of one attempt refused (suppressed inner retries).
    pub fn refused_duplicates(&self) -> u64 {
        self.refused_duplicates.load(Ordering::Relaxed)
    }

    /// Untracked writes refused.
    pub fn refused_untracked(&self) -> u64 {
        self.refused_untracked.load(Ordering::Relaxed)
    }
}

/// Builds [`SendOnceGuard`]s. Place it directly above the HTTP client.
#[derive(Clone, Debug, Default)]
pub struct SendOnceGuardLayer {
    allow_untracked: bool,
    stats: Arc<GuardStats>,
}

impl SendOnceGuardLayer {
    /// A guard that refuses duplicate sends, and non-idempotent requests that carry neither a
    /// token nor the [`Untracked`] mark the layer puts on writes it chose not to track.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets every non-idempotent request without a token through, marked [`Untracked`] or not
    /// (for writes that bypass the layer). Duplicates of tracked attempts are still refused, but
    /// a tracked write whose token an inner layer dropped is no longer caught.
    pub fn allow_untracked_writes(mut self, allow: bool) -> Self {
        self.allow_untracked = allow;
        self
    }

    /// What the guards built by this layer have let through and refused.
    pub fn stats(&self) -> Arc<GuardStats> {
        self.stats.clone()
    }
}

impl<S> Layer<S> for SendOnceGuardLayer {
    type Service = SendOnceGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SendOnceGuard {
            inner,
            allow_untracked: self.allow_untracked,
            stats: self.stats.clone(),
        }
    }
}

/// Lets each [`AttemptToken`] reach the transport once. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct SendOnceGuard<S> {
    inner: S,
    allow_untracked: bool,
    stats: Arc<GuardStats>,
}

impl<S> SendOnceGuard<S> {
    /// Wraps `inner` with the default settings.
    pub fn new(inner: S) -> Self {
        SendOnceGuardLayer::new().layer(inner)
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The guard's decision, shared by the tower guard and the reqwest middleware: lets a token
/// through once, refuses its copies, and refuses non-idempotent requests with neither a token
/// nor the [`Untracked`] mark unless allowed. Counts every decision.
pub(crate) fn admit(
    extensions: &http::Extensions,
    method: &Method,
    allow_untracked: bool,
    stats: &GuardStats,
) -> Result<(), SendRefused> {
    let allow_untracked = allow_untracked || extensions.get::<Untracked>().is_some();
    match extensions.get::<AttemptToken>() {
        Some(token) if !token.take() => {
            stats.refused_duplicates.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                operation = %token.operation,
                attempt = %token.attempt,
                "send-once guard refused an inner retry"
            );
            Err(SendRefused::Duplicate {
                operation: token.operation.clone(),
                attempt: token.attempt,
            })
        }
        None if !allow_untracked && !is_idempotent(method) => {
            stats.refused_untracked.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%method, "send-once guard refused an untracked write");
            Err(SendRefused::Untracked {
                method: method.clone(),
            })
        }
        _ => {
            stats.passed.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }
}

fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

impl<S, B> Service<Request<B>> for SendOnceGuard<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        match admit(
            req.extensions(),
            req.method(),
            self.allow_untracked,
            &self.stats,
        ) {
            Err(err) => ResponseFuture {
                state: GuardState::Refused { err: Some(err) },
            },
            Ok(()) => ResponseFuture {
                state: GuardState::Called {
                    fut: self.inner.call(req),
                },
            },
        }
    }
}

pin_project! {
    /// Response future of [`SendOnceGuard`].
    pub struct ResponseFuture<F> {
        #[pin]
        state: GuardState<F>,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

pin_project! {
    #[project = GuardStateProj]
    enum GuardState<F> {
        Called { #[pin] fut: F },
        Refused { err: Option<SendRefused> },
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            GuardStateProj::Called { fut } => fut.poll(cx).map_err(Into::into),
            GuardStateProj::Refused { err } => Poll::Ready(Err(Box::new(
                err.take().expect("ResponseFuture polled after completion"),
            ))),
        }
    }
}

/// Finds a [`SendRefused`] in an error's source chain (the first 32 links: a chain whose
/// `source()` loops back on itself must not hang the caller).
pub fn find_refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a SendRefused> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    for _ in 0..32 {
        let e = cur?;
        if let Some(r) = e.downcast_ref::<SendRefused>() {
            return Some(r);
        }
        cur = e.source();
    }
    None
}
