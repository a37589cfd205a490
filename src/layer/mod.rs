//! [`RecoverableWriteLayer`]: makes consequential writes recoverable.
//!
//! For every request carrying an [`Operation`] extension (and, with
//! [`Builder::track_all_writes`](crate::Builder::track_all_writes), every write: any method but GET, HEAD, OPTIONS,
//! TRACE) the service:
//!
//! 1. identifies the operation (the request's [`Operation`] extension, or a generated one);
//! 2. buffers the body up to a limit and freezes the request (credentials are never stored);
//! 3. creates the operation in the ledger, or finds it: the same operation with another payload
//!    hash is a [`Conflict`](Error::Conflict) and nothing is sent; a resolved one returns its stored
//!    result; one in recovery returns its state;
//! 4. claims send rights durably (`IN_FLIGHT`, new attempt id, new generation, a lease) — bytes
//!    leave only after this is in the ledger;
//! 5. places the idempotency key as the operation's contract says, marks the request with an
//!    [`AttemptToken`](crate::guard::AttemptToken) for the [send-once guard](crate::guard), and sends it **once**, with a
//!    timeout shorter than the lease;
//! 6. classifies what came back with the contract and records it with a compare-and-swap.
//!
//! There is no retry loop in the request path. Unknown outcomes are left to the
//! [`Recoverer`](crate::Recoverer), the single retry owner.
//!
//! Requests the layer does not track pass through untouched, except that a write is marked
//! [`Untracked`](crate::guard::Untracked) for the send-once guard. Tracking is opt-in per request
//! because a tracked request is stored: an app-wide client's other writes (token requests with
//! `client_secret`, ...) must not end up in the ledger.
//!
//! # Differences from `tower::retry`
//!
//! `tower::retry` re-sends on the caller's behalf, inside the call, with an in-memory budget.
//! This layer never re-sends inside a call: a lost response becomes a durable `UNKNOWN` that the
//! recovery engine resolves by asking the vendor first, under a budget that survives restarts.

mod future;

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use tower_layer::Layer;
use tower_service::Service;

pub use self::future::ResponseFuture;
use crate::BoxError;
use crate::core::Shared;
pub use crate::core::{
    DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_RESPONSE_BODY, DEFAULT_STORED_BODY, OUTCOME_HEADER,
    REMOTE_REF_HEADER, STATUS_CLASS_HEADER, TRUNCATED_HEADER,
};
pub use crate::error::{Error, Outcome};
use crate::ledger::{Ledger, NewOperation};
use crate::notify::Notifier;
use crate::operation::Operation;

/// The body of responses from [`RecoverableWrite`]: tracked writes come back buffered (the layer
/// had to read them to classify them), untracked requests stream through.
pub type ResponseBody<B> = Either<Full<Bytes>, B>;

/// Applies [`RecoverableWrite`] to a service. Made by [`Handle::layer`](crate::Handle::layer):
/// every setting comes from the one [builder](crate::builder), so the layer, the recoverer and
/// the reviews always share one configuration. See the [module docs](self).
///
/// ```no_run
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::client::legacy::Client;
/// use hyper_util::rt::TokioExecutor;
/// use recoverable_write::{RecoverableWrite, SendOnceGuardLayer, SqliteLedger};
/// use tower::ServiceBuilder;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let rw = RecoverableWrite::builder(SqliteLedger::open("operations.db").await?).build()?;
/// let client = Client::builder(TokioExecutor::new())
///     .retry_canceled_requests(false) // one retry owner: the recovery engine
///     .build_http::<Full<Bytes>>();
/// let service = ServiceBuilder::new()
///     .layer(rw.layer())
///     .layer(SendOnceGuardLayer::new())
///     .service(client);
/// # let _ = service;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RecoverableWriteLayer {
    shared: Arc<Shared>,
}

impl RecoverableWriteLayer {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// The notifier, to subscribe to resolutions, escalations and late evidence.
    pub fn notifications(&self) -> &Notifier {
        &self.shared.notifier
    }

    /// The operation row this layer would create for `req` under `op`, with the same contract
    /// choice, freezing, payload hash and budget as a call through the layer. Create it yourself
    /// (e.g. inside your own database transaction: `PostgresLedger::create_in`, the outbox) and a
    /// later call through the layer with the same operation and request finds it `PREPARED` and
    /// sends it.
    pub fn new_operation(&self, op: &Operation, req: &Request<Bytes>) -> NewOperation {
        self.shared
            .new_operation(
                op.clone(),
                req.method(),
                req.uri(),
                req.headers(),
                req.body().clone(),
            )
            .0
    }

    /// The ledger this layer records into.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.shared.ledger
    }

    #[cfg(feature = "reqwest")]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl<S> Layer<S> for RecoverableWriteLayer {
    type Service = RecoverableWrite<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RecoverableWrite {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// Makes each consequential write through `S` recoverable. Built by [`RecoverableWriteLayer`].
#[derive(Clone, Debug)]
pub struct RecoverableWrite<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> RecoverableWrite<S> {
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

/// Tracked: a request naming its [`Operation`], or, with
/// [`Builder::track_all_writes`](crate::Builder::track_all_writes), any write.
fn is_tracked<B>(req: &Request<B>, track_all_writes: bool) -> bool {
    req.extensions().get::<Operation>().is_some()
        || (track_all_writes
            && !matches!(
                *req.method(),
                Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
            ))
}

impl<S, B, RB> Service<Request<B>> for RecoverableWrite<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<RB>>;
    type Error = Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Error::Inner { source: e.into() })
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if !is_tracked(&req, self.shared.track_all_writes) {
            crate::guard::mark_untracked(&mut req);
            return ResponseFuture::passthrough(self.inner.call(req));
        }
        // The inner service was driven to readiness; take that one and leave a clone behind.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        ResponseFuture::tracked(Box::pin(future::tracked(inner, shared, req)))
    }
}
