//! The send-once guard with `tower::retry` between the layer and the transport: the vendor sees
//! one request per attempt, however eager the inner retry layer is.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::Full;
use recoverable_write::{Error, SendOnceGuardLayer, State};
use tower::retry::{Policy, RetryLayer};
use tower::{ServiceBuilder, ServiceExt};

/// A naive inner retry policy: retry any error, up to `max` times, copying the request and its
/// extensions (as well-behaved layers do).
#[derive(Clone)]
struct RetryErrors {
    left: usize,
    retried: Arc<AtomicUsize>,
    keep_extensions: bool,
}

impl<Res, E> Policy<Request<Full<Bytes>>, Res, E> for RetryErrors {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _req: &mut Request<Full<Bytes>>,
        result: &mut Result<Res, E>,
    ) -> Option<Self::Future> {
        if result.is_err() && self.left > 0 {
            self.left -= 1;
            self.retried.fetch_add(1, Ordering::SeqCst);
            Some(std::future::ready(()))
        } else {
            None
        }
    }

    fn clone_request(&mut self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        let mut b = Request::builder()
            .method(req.method().clone())
            .uri(req.uri().clone())
            .version(req.version());
        for (k, v) in req.headers() {
            b = b.header(k, v);
        }
        let mut copy = b.body(req.body().clone()).ok()?;
        if self.keep_extensions {
            *copy.extensions_mut() = req.extensions().clone();
        }
        Some(copy)
    }
}

async fn run(keep_extensions: bool) {
    let drill = Drill::start().await;
    let retried = Arc::new(AtomicUsize::new(0));
    let guard = SendOnceGuardLayer::new();
    let stats = guard.stats();
    let svc = ServiceBuilder::new()
        .layer(drill.layer.clone())
        .layer(RetryLayer::new(RetryErrors {
            left: 3,
            retried: retried.clone(),
            keep_extensions,
        }))
        .layer(guard)
        .service(http_client());
    let op = new_op(if keep_extensions {
        "retry-a"
    } else {
        "retry-b"
    });
    drill.vendor.faults().drop_after_commit(1);

    let err = svc
        .oneshot(drill.ticket_request(&op, "E17"))
        .await
        .map(|r: Response<_>| r.status())
        .expect_err("the response was lost");

    // The retry layer tried three more times; the guard refused each copy locally.
    assert_eq!(retried.load(Ordering::SeqCst), 3);
    assert_eq!(stats.passed(), 1);
    let refused = stats.refused_duplicates() + stats.refused_untracked();
    assert_eq!(refused, 3);
    if keep_extensions {
        assert_eq!(stats.refused_duplicates(), 3);
    } else {
        assert_eq!(stats.refused_untracked(), 3);
    }
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);

    // The refusal of the copies proves nothing about the first send: the result is UNKNOWN,
    // never "not executed".
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.attempts_used, 1);

    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d24_inner_tower_retry_never_causes_a_second_send() {
    run(true).await;
}

#[tokio::test]
async fn d24_inner_retry_that_drops_extensions_is_refused_as_untracked() {
    run(false).await;
}

#[tokio::test]
async fn guard_lets_reads_and_tracked_writes_through_and_can_allow_untracked_writes() {
    let drill = Drill::start().await;
    let strict = ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new())
        .service(http_client());
    let post = || {
        Request::post(drill.vendor.url("/tickets"))
            .header("idempotency-key", "k-untracked")
            .body(Full::new(Bytes::from_static(br#"{"device_id":"E1"}"#)))
            .unwrap()
    };
    let err = strict.clone().oneshot(post()).await.expect_err("untracked");
    assert!(recoverable_write::guard::find_refusal(&*err).is_some());
    assert_eq!(drill.vendor.posts_received(), 0);

    let get = Request::get(drill.vendor.url("/tickets"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = strict.oneshot(get).await.expect("reads pass");
    assert!(res.status().is_success());

    let lenient = ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new().allow_untracked_writes(true))
        .service(http_client());
    let res = lenient.oneshot(post()).await.expect("allowed");
    assert_eq!(res.status(), 201);
    assert_eq!(drill.vendor.tickets_created(), 1);
}
