//! Future types.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use super::ResponseBody;
use crate::BoxError;
use crate::core::{AttemptCtx, Observed, Step, finish};
use crate::error::Error;
use crate::ledger::BoxFuture;

pin_project! {
    /// Response future of [`RecoverableWrite`](super::RecoverableWrite).
    ///
    /// A state machine: prepare (freeze, record, claim) → send once under the attempt timeout →
    /// classify and record. No retry loop: at most one network attempt per call.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        phase: Phase<S::Future, S, B>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<F, S, B> {
        // An untracked request (GET, HEAD, ...): straight through.
        Passthrough { #[pin] fut: F },
        // Freezing the body, creating the operation and claiming send rights.
        Preparing {
            svc: Option<S>,
            fut: BoxFuture<'static, Result<Step<B>, Error>>,
        },
        // The one attempt is on the wire; the sleep is its deadline, shorter than the lease.
        Sending {
            #[pin]
            fut: F,
            #[pin]
            sleep: Sleep,
            ctx: Option<Box<AttemptCtx>>,
        },
        // Reading the response, classifying and recording it.
        Finishing {
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

    pub(super) fn prepare(svc: S, fut: BoxFuture<'static, Result<Step<B>, Error>>) -> Self {
        Self {
            phase: Phase::Preparing {
                svc: Some(svc),
                fut,
            },
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
        loop {
            match this.phase.as_mut().project() {
                PhaseProj::Passthrough { fut } => {
                    let res = ready!(fut.poll(cx));
                    this.phase.set(Phase::Done);
                    return Poll::Ready(match res {
                        Ok(res) => Ok(res.map(Either::Right)),
                        Err(e) => Err(Error::Inner { source: e.into() }),
                    });
                }
                PhaseProj::Preparing { svc, fut } => {
                    let step = ready!(fut.as_mut().poll(cx));
                    match step {
                        Ok(Step::Send(req, ctx)) => {
                            let Some(mut svc) = svc.take() else {
                                unreachable!("the service is taken exactly once")
                            };
                            let sleep = tokio::time::sleep_until(ctx.deadline);
                            let fut = svc.call(req);
                            this.phase.set(Phase::Sending {
                                fut,
                                sleep,
                                ctx: Some(ctx),
                            });
                        }
                        Ok(Step::Done(res)) => {
                            this.phase.set(Phase::Done);
                            return Poll::Ready(Ok(res.map(Either::Left)));
                        }
                        Err(e) => {
                            this.phase.set(Phase::Done);
                            return Poll::Ready(Err(e));
                        }
                    }
                }
                PhaseProj::Sending { fut, sleep, ctx } => {
                    let observed = match fut.poll(cx) {
                        Poll::Ready(Ok(res)) => Observed::Response(res),
                        Poll::Ready(Err(e)) => Observed::Failed(e.into()),
                        // Past the deadline the in-flight request is dropped here, before the
                        // lease runs out and a recoverer may act.
                        Poll::Pending => match sleep.poll(cx) {
                            Poll::Ready(()) => Observed::TimedOut,
                            Poll::Pending => return Poll::Pending,
                        },
                    };
                    let Some(ctx) = ctx.take() else {
                        unreachable!("the attempt context is taken exactly once")
                    };
                    this.phase.set(Phase::Finishing {
                        fut: Box::pin(finish(ctx, observed)),
                    });
                }
                PhaseProj::Finishing { fut } => {
                    let res = ready!(fut.as_mut().poll(cx));
                    this.phase.set(Phase::Done);
                    return Poll::Ready(res.map(|r| r.map(Either::Left)));
                }
                PhaseProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}
