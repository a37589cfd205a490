//! Future types.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tower_service::Service;
use tracing::Instrument;

use super::ResponseBody;
use crate::BoxError;
use crate::core::{Observed, Shared, Step, await_resolution, prepare_inner, record_attempt, trace};
use crate::error::Error;
use crate::ledger::BoxFuture;

pin_project! {
    /// Response future of [`RecoverableWrite`](super::RecoverableWrite).
    ///
    /// Prepare (freeze, record, claim) → send once under the attempt timeout → classify and
    /// record, as one boxed future (one allocation per call). No retry loop: at most one
    /// network attempt per call.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        phase: Phase<S::Future>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<F> {
        // An untracked request (GET, HEAD, ...): straight through.
        Passthrough { #[pin] fut: F },
        // A tracked write: the whole write path (see `tracked`).
        Tracked {
            fut: BoxFuture<'static, Result<Response<Full<Bytes>>, Error>>,
        },
        Done,
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    pub(super) fn passthrough(fut: S::Future) -> Self {
        Self {
            phase: Phase::Passthrough { fut },
        }
    }

    pub(super) fn tracked(fut: BoxFuture<'static, Result<Response<Full<Bytes>>, Error>>) -> Self {
        Self {
            phase: Phase::Tracked { fut },
        }
    }
}

/// The write path of a tracked request: prepare (freeze, record, claim), send once through
/// `svc` (driven to readiness by the caller) under the attempt deadline, then classify and
/// record what came back, inside the write's span (`recoverable_write.write`) from start to
/// end.
pub(super) fn tracked<S, B, RB>(
    svc: S,
    shared: Arc<Shared>,
    req: Request<B>,
) -> impl Future<Output = Result<Response<Full<Bytes>>, Error>>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    let span = trace::write_span();
    write(svc, shared, req, span.clone()).instrument(span)
}

/// [`tracked`]'s steps; `span` is the span they run in, to record the write's fields on.
// Not an async fn on purpose: see the comment on the async block below.
#[allow(clippy::manual_async_fn)]
fn write<S, B, RB>(
    mut svc: S,
    shared: Arc<Shared>,
    req: Request<B>,
    span: tracing::Span,
) -> impl Future<Output = Result<Response<Full<Bytes>>, Error>>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    // An async block, not an async fn: an async fn copies its arguments into locals and
    // keeps both, so the request would be stored twice in this future.
    async move {
        // The write path's steps are awaited here, not through wrappers: an async fn keeps its
        // arguments beside its locals, so each wrapper would store the request (or the attempt's
        // row) once more in this future, allocated once per write. The waits for the recovery
        // engine are boxed: a write that goes through never takes them.
        let (req, ctx) = match prepare_inner(shared.clone(), req, &span).await {
            Ok(Step::Send(req, ctx)) => (req, ctx),
            Ok(Step::Done(res)) => {
                tracing::debug!(status = res.status().as_u16(), "answered from the ledger");
                return Ok(res);
            }
            Err(e) => {
                let res = Box::pin(await_resolution(&shared, e)).await?;
                tracing::debug!(status = res.status().as_u16(), "answered from the ledger");
                return Ok(res);
            }
        };
        drop(span);
        let observed = {
            // The one attempt is on the wire; the sleep is its deadline, shorter than the lease.
            let sleep = tokio::time::sleep_until(ctx.deadline);
            let fut = svc.call(req);
            drop(svc);
            tracing::debug!("request sent");
            let (mut fut, mut sleep) = (std::pin::pin!(fut), std::pin::pin!(sleep));
            std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
                Poll::Ready(Ok(res)) => Poll::Ready(Observed::Response(res)),
                Poll::Ready(Err(e)) => Poll::Ready(Observed::Failed(e.into())),
                Poll::Pending => sleep.as_mut().poll(cx).map(|()| Observed::TimedOut),
            })
            .await
            // Past the deadline the in-flight request is dropped here, before the lease runs out
            // and a recoverer may act.
        };
        match record_attempt(ctx, observed).await {
            Err(e) => Box::pin(await_resolution(&shared, e)).await,
            ok => ok,
        }
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, B, RB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    type Output = Result<Response<ResponseBody<RB>>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        match this.phase.as_mut().project() {
            PhaseProj::Passthrough { fut } => {
                let res = ready!(fut.poll(cx));
                this.phase.set(Phase::Done);
                Poll::Ready(match res {
                    Ok(res) => Ok(res.map(Either::Right)),
                    Err(e) => Err(Error::Inner { source: e.into() }),
                })
            }
            PhaseProj::Tracked { fut } => {
                let res = ready!(fut.as_mut().poll(cx));
                this.phase.set(Phase::Done);
                Poll::Ready(res.map(|r| r.map(Either::Left)))
            }
            PhaseProj::Done => panic!("ResponseFuture polled after completion"),
        }
    }
}
