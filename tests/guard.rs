//! The send-once guard with `tower::retry` between the layer and the transport: the vendor sees
//! one request per attempt, however eager the inner retry layer is.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::Full;
use recoverable_write::RecoverableWrite;
use recoverable_write::testing::FakeVendor;
use recoverable_write::{
    Error, MemoryLedger, Outcome, RecoverableWriteLayer, SendOnceGuardLayer, State,
};
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

/// A write that is not a business intent, e.g. an OAuth token request through the app-wide
/// client: its body holds a secret and it names no `Operation`.
fn token_like_post(vendor: &FakeVendor) -> Request<Full<Bytes>> {
    Request::post(vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("idempotency-key", "k-app-wide")
        .body(Full::new(Bytes::from_static(
            br#"{"device_id":"E1","client_secret":"cs_live_s3cr3t"}"#,
        )))
        .unwrap()
}

/// Issue 10 item 15: only requests naming an `Operation` are tracked by default. A write without
/// one is not stored and passes the (strict) send-once guard exactly once; tracking every write
/// is an explicit opt-in.
#[tokio::test]
async fn a_write_without_an_operation_is_not_stored_and_is_sent_once_unless_opted_in() {
    let vendor = FakeVendor::start().await;
    let ledger = MemoryLedger::new();
    let guard = SendOnceGuardLayer::new();
    let stats = guard.stats();
    let stack = |layer: RecoverableWriteLayer| {
        ServiceBuilder::new()
            .layer(layer)
            .layer(guard.clone())
            .service(http_client())
    };

    let res = stack(
        RecoverableWrite::builder(ledger.clone())
            .build()
            .expect("a valid configuration")
            .layer(),
    )
    .oneshot(token_like_post(&vendor))
    .await
    .expect("an untracked write is sent");
    assert_eq!(res.status(), 201);
    assert!(res.extensions().get::<Outcome>().is_none());
    assert!(
        ledger.is_empty(),
        "nothing stored: not the secret, not the row"
    );
    assert_eq!(vendor.posts_received(), 1);
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!((stats.passed(), stats.refused_untracked()), (1, 0));

    // Opted in: the same kind of write is tracked (an operation is generated for it).
    let res = stack(
        RecoverableWrite::builder(ledger.clone())
            .track_all_writes(true)
            .build()
            .expect("a valid configuration")
            .layer(),
    )
    .oneshot(token_like_post(&vendor))
    .await
    .expect("a tracked write is sent");
    assert_eq!(res.status(), 201);
    let o = res.extensions().get::<Outcome>().cloned().expect("tracked");
    assert_eq!(o.state, State::Succeeded);
    assert_eq!(ledger.len(), 1);
    // The request carries its own key, which the layer adopts (never silently replaces): the
    // vendor dedupes it with the untracked send of the same key, one ticket.
    assert_eq!(o.remote_ref.as_deref(), Some("W731"));
    assert_eq!(vendor.posts_received(), 2);
    assert_eq!(vendor.tickets_created(), 1);
    assert_eq!((stats.passed(), stats.refused_untracked()), (2, 0));
}

/// The mark the layer puts on an untracked write cannot let a tracked write's re-send through:
/// an inner retry that keeps extensions is refused as a duplicate (the token wins over any mark),
/// one that drops them loses the mark too and is refused as untracked.
#[tokio::test]
async fn the_untracked_mark_never_lets_a_tracked_resend_through() {
    for keep_extensions in [true, false] {
        let drill = Drill::start().await;
        let guard = SendOnceGuardLayer::new();
        let stats = guard.stats();
        let svc = ServiceBuilder::new()
            .layer(drill.layer.clone())
            // A tracked request that also carries the mark (set by hand, say).
            .map_request(|mut req: Request<Full<Bytes>>| {
                req.extensions_mut()
                    .insert(recoverable_write::guard::Untracked);
                req
            })
            .layer(RetryLayer::new(RetryErrors {
                left: 1,
                retried: Arc::new(AtomicUsize::new(0)),
                keep_extensions,
            }))
            .layer(guard)
            .service(http_client());
        let op = new_op("marked-tracked");
        drill.vendor.faults().drop_after_commit(1);
        let err = svc
            .oneshot(drill.ticket_request(&op, "E17"))
            .await
            .expect_err("the response was lost");
        assert!(matches!(err, Error::Unknown { .. }), "{err:?}");
        assert_eq!(drill.vendor.posts_received(), 1, "keep: {keep_extensions}");
        assert_eq!(stats.passed(), 1);
        if keep_extensions {
            assert_eq!(stats.refused_duplicates(), 1);
        } else {
            assert_eq!(stats.refused_untracked(), 1);
        }
        assert_eq!(drill.record(op.id()).await.state, State::Unknown);
    }
}
