//! Drills from DRILLS.md against the fake vendor over real TCP, on a SQLite ledger file.
//!
//! Every drill asserts both the ledger (state, generation, attempts, evidence) and the vendor's
//! own count of side effects.

mod common;

use std::time::Duration;

use common::*;
use http::StatusCode;
use recoverable_write::ledger::backend::NewEvidence;
use recoverable_write::state::{Event, Tick};
use recoverable_write::{AttemptId, Error, Evidence, MemoryLedger, Operation, State};

#[tokio::test]
async fn d1_lost_response_is_recovered_by_lookup_with_one_ticket() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d1");
    drill.vendor.faults().drop_after_commit(1);

    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("the response was lost");
    assert_unknown(&err, op.id());
    assert!(!err.nothing_sent());

    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Unknown);
    assert!(row.may_have_applied);
    assert_eq!(row.attempts_used, 1);
    assert_eq!(drill.vendor.tickets_created(), 1);

    // Asking again before recovery: told to wait, nothing sent.
    let again = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("still unknown");
    assert_unknown(&again, op.id());
    assert!(again.nothing_sent());
    assert_eq!(drill.vendor.posts_received(), 1);

    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    let ticket = drill.vendor.tickets()[0].id.clone();
    assert_eq!(row.remote_ref.as_deref(), Some(ticket.as_str()));
    assert_eq!(ticket, "W731");
    assert!(drill.vendor.lookups_received() >= 1);

    // Asking again after recovery: the ledger answers, no create.
    let res = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect("resolved");
    let o = outcome(&res);
    assert_eq!(o.state, State::Succeeded);
    assert_eq!(o.remote_ref.as_deref(), Some("W731"));
    assert!(o.from_ledger);
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);

    // The timeline: created, registered, unknown result, lookup → succeeded.
    let kinds: Vec<_> = drill
        .evidence(op.id())
        .await
        .into_iter()
        .map(|e| e.entry.kind.into_owned())
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("created"));
    assert!(kinds.contains(&"attempt_registered".to_owned()));
    assert!(kinds.contains(&"attempt_result".to_owned()));
    assert_eq!(kinds.last().map(String::as_str), Some("lookup"));
}

#[tokio::test]
async fn d1_credentials_are_never_stored() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-secret");
    send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect("created");
    let row = drill.record(op.id()).await;
    assert!(row.request.headers.iter().all(
        |(k, v)| k != "authorization" && !String::from_utf8_lossy(v).contains("sk_test_secret")
    ));
    // ...but the vendor did get them on the first send: the stack applied them.
    let seen = drill.vendor.requests();
    assert_eq!(
        seen[0].headers.get("authorization").unwrap(),
        "Bearer sk_test_secret"
    );
}

#[tokio::test]
async fn d7_every_attempt_carries_the_same_key_and_bytes() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d7");
    // A process registered the operation and crashed before sending: the row is PREPARED with
    // its key. The next call must send with that key and those bytes.
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    let row = drill.record(op.id()).await;
    let posts: Vec<_> = drill
        .vendor
        .requests()
        .into_iter()
        .filter(|r| r.method == http::Method::POST)
        .collect();
    assert_eq!(posts.len(), 1);
    for p in &posts {
        assert_eq!(
            p.idempotency_key.as_deref(),
            Some(row.idempotency_key.as_str())
        );
        assert_eq!(p.body, row.request.body, "byte-identical body");
    }
    // Key is an opaque UUID v4, not derived from the payload.
    let key = uuid::Uuid::parse_str(row.idempotency_key.as_str()).expect("uuid");
    assert_eq!(key.get_version_num(), 4);
    assert!(!row.idempotency_key.as_str().contains("E17"));

    // Recovery and a resumed call never change the key.
    drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    let after = drill.record(op.id()).await;
    assert_eq!(after.idempotency_key, row.idempotency_key);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d11_same_operation_with_another_device_is_a_conflict_and_sends_nothing() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d11");
    send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect("created");
    assert_eq!(drill.vendor.posts_received(), 1);

    let err = send(&mut svc, drill.ticket_request(&op, "E18"))
        .await
        .expect_err("conflict");
    assert!(
        matches!(&err, Error::Conflict { operation } if operation == op.id()),
        "{err:?}"
    );
    assert!(err.nothing_sent());
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert!(row.request.body.windows(3).any(|w| w == b"E17"));
}

#[tokio::test]
async fn d11_conflict_is_detected_while_the_operation_is_unknown() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d11b");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    let err = send(&mut svc, drill.ticket_request(&op, "E18"))
        .await
        .expect_err("conflict");
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.record(op.id()).await.state, State::Unknown);
}

#[tokio::test]
async fn d13_resume_by_operation_reference_returns_the_result_without_a_create() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d13");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;

    // A new conversation round names op-… only (a new tool call id, same operation).
    let resumed = Operation::resume(TENANT, op.id().clone());
    let res = send(&mut svc, drill.ticket_request(&resumed, "E17"))
        .await
        .expect("resolved");
    assert_eq!(outcome(&res).remote_ref.as_deref(), Some("W731"));
    assert_eq!(drill.vendor.posts_received(), 1);
    // Resolved by a lookup: the vendor's answer was never seen, and the crate's own answer says
    // so instead of passing for the vendor's 201.
    assert_eq!(res.status(), StatusCode::OK);
    let h = res.headers();
    assert_eq!(h[recoverable_write::layer::OUTCOME_HEADER], "synthesized");
    assert_eq!(h[recoverable_write::layer::STATUS_CLASS_HEADER], "2xx");
    assert_eq!(h[recoverable_write::layer::REMOTE_REF_HEADER], "W731");

    // The same approved intent under a freshly generated operation id is still one operation.
    // (Same approved parameters, so the same frozen body.)
    let same_intent = new_op("intent-d13");
    assert_ne!(same_intent.id(), op.id());
    let mut req = drill.ticket_request(&op, "E17");
    req.extensions_mut().insert(same_intent.clone());
    let res = send(&mut svc, req).await.expect("resolved");
    assert_eq!(&outcome(&res).operation_id, op.id());
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);

    // A genuinely new intent with identical-looking content is a second ticket.
    let second = new_op("intent-d13-second-ticket");
    let res = send(&mut svc, drill.ticket_request(&second, "E17"))
        .await
        .expect("created");
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(outcome(&res).remote_ref.as_deref(), Some("W732"));
    assert_eq!(drill.vendor.tickets_created(), 2);
}

/// Issue 11: `Operation::resume` with a mistyped id used to create a new operation and send it.
#[tokio::test]
async fn d13_a_mistyped_resume_creates_nothing_and_sends_nothing() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let typo = Operation::resume(TENANT, recoverable_write::OperationId::new("op-2O4"));
    let err = send(&mut svc, drill.ticket_request(&typo, "E17"))
        .await
        .expect_err("no such operation");
    assert!(
        matches!(&err, Error::NotFound { operation, .. } if operation.as_str() == "op-2O4"),
        "{err:?}"
    );
    assert!(err.nothing_sent());
    assert_eq!(
        drill
            .ledger
            .get(typo.tenant(), typo.id())
            .await
            .expect("ledger"),
        None,
        "nothing created"
    );
    assert_eq!(drill.vendor.posts_received(), 0);
}

#[tokio::test]
async fn d14_two_concurrent_calls_for_one_operation_send_once() {
    let drill = Drill::start().await;
    let op = new_op("intent-d14");
    drill
        .vendor
        .faults()
        .delay_response(Duration::from_millis(150), 1);
    let mut a = drill.writer();
    let mut b = drill.writer();
    let (ra, rb) = tokio::join!(
        send(&mut a, drill.ticket_request(&op, "E17")),
        send(&mut b, drill.ticket_request(&op, "E17")),
    );
    let results = [ra, rb];
    let oks = results.iter().filter(|r| r.is_ok()).count();
    assert!(oks >= 1, "the sender gets the result: {results:?}");
    for r in &results {
        match r {
            Ok(res) => assert_eq!(outcome(res).remote_ref.as_deref(), Some("W731")),
            Err(e) => {
                // The other caller is told the operation is in progress, nothing sent.
                assert_unknown_or_in_flight(e);
                assert!(e.nothing_sent());
            }
        }
    }
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.attempts_used, 1);
}

fn assert_unknown_or_in_flight(e: &Error) {
    let o = e.outcome().expect("names the operation");
    assert!(
        matches!(o.state, State::InFlight | State::Unknown),
        "unexpected {e:?}"
    );
    assert!(o.message.contains("do not create it again"));
}

#[tokio::test]
async fn d15_crash_after_registration_before_send_is_verified_not_resent() {
    let drill = Drill::start().await;
    let op = new_op("intent-d15");
    // Register the operation and claim IN_FLIGHT exactly as the layer does, then "crash" before
    // any byte leaves: never call the inner service.
    let mut svc = drill.writer();
    drill
        .vendor
        .faults()
        .refuse_connections(true)
        .expect("stop");
    drop(svc.clone());
    let created = {
        // Create through the ledger API with the layer's own freezing rules.
        let req = drill.ticket_request(&op, "E17");
        let (parts, body) = req.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .unwrap()
            .to_bytes();
        let frozen = recoverable_write::operation::FrozenRequest::freeze(
            &parts.method,
            &parts.uri,
            &parts.headers,
            body,
            Default::default(),
        );
        let hash = recoverable_write::operation::PayloadHash::compute(
            frozen.method.as_str(),
            &frozen.url,
            &frozen.body,
            &Default::default(),
        );
        drill
            .ledger
            .create_or_get(recoverable_write::ledger::NewOperation {
                tenant: op.tenant().clone(),
                operation_id: op.id().clone(),
                action: op.action().into(),
                intent_ref: op.intent_ref().into(),
                idempotency_key: recoverable_write::IdempotencyKey::generate(),
                payload_hash: hash,
                request: frozen.into(),
                contract: recoverable_write::Contract::conservative().reference(),
                policy: fast_policy(),
                now_ms: now_ms(),
            })
            .await
            .unwrap()
            .into_record()
    };
    drill
        .vendor
        .faults()
        .refuse_connections(false)
        .expect("resume");
    let attempt = AttemptId::generate();
    let claim = created
        .update_on(
            &Event::ClaimSend,
            Tick {
                now_ms: now_ms(),
                jitter: 0.0,
            },
            Some(attempt),
            Some(now_ms() + 50), // a short lease: the process dies holding it
            None,
            NewEvidence {
                attempt_id: Some(attempt),
                generation: created.generation,
                kind: "attempt_registered".into(),
                from_state: None,
                to_state: None,
                evidence: None,
                note: None,
                at_ms: now_ms(),
            },
        )
        .unwrap();
    let claimed = drill.ledger.apply(claim).await.unwrap().expect("claimed");
    assert_eq!(claimed.state, State::InFlight);
    tokio::time::sleep(Duration::from_millis(80)).await;

    // Recovery treats it as UNKNOWN (never PREPARED) and verifies along the original operation.
    let report = drill.recoverer.run_once().await.unwrap();
    assert_eq!(report.swept, 1);
    let row = drill.record(op.id()).await;
    assert!(matches!(row.state, State::Unknown), "{:?}", row.state);
    assert!(row.may_have_applied);
    assert!(row.generation > claimed.generation);
    // The vendor has no such operation: "not found" keeps it UNKNOWN; no send, no ticket.
    let row = drill.recover_until(op.id(), |r| r.queries_used >= 2).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.idempotency_key, created.idempotency_key);
    assert_eq!(drill.vendor.posts_received(), 0);
    assert_eq!(drill.vendor.tickets_created(), 0);
    // A caller naming the operation is told to wait, and nothing is sent.
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("unknown");
    assert_unknown(&err, op.id());
    assert_eq!(drill.vendor.posts_received(), 0);
    let kinds: Vec<_> = drill
        .evidence(op.id())
        .await
        .into_iter()
        .map(|e| e.entry.kind.into_owned())
        .collect();
    assert!(kinds.contains(&"lease_expired".to_owned()), "{kinds:?}");
}

#[tokio::test]
async fn d19_restart_reads_the_old_operation_and_budget() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d19");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    let before = drill.record(op.id()).await;
    assert_eq!(before.state, State::Unknown);
    drop(svc);

    // Drop everything (ledger pool, layer, recoverer) and reopen the same SQLite file.
    let drill = drill.restart().await;
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.attempts_used, before.attempts_used);
    assert_eq!(row.deadline_ms, before.deadline_ms);
    assert_eq!(row.generation, before.generation);
    assert_eq!(row.idempotency_key, before.idempotency_key);
    assert_eq!(row.policy, before.policy);

    // A new call in the new process does not start over.
    let mut svc = drill.writer();
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("still unknown");
    assert_unknown(&err, op.id());
    assert_eq!(drill.vendor.posts_received(), 1);

    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(row.attempts_used, 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn ledger_down_means_nothing_is_sent() {
    let vendor = recoverable_write::testing::FakeVendor::start().await;
    let ledger = MemoryLedger::new();
    ledger.set_unavailable(true);
    let layer = recoverable_write::RecoverableWrite::builder(ledger.clone())
        .build()
        .expect("a valid configuration")
        .layer();
    let mut svc = tower::ServiceBuilder::new()
        .layer(layer)
        .layer(recoverable_write::SendOnceGuardLayer::new())
        .service(http_client());
    let op = new_op("intent-down");
    let err = tower::ServiceExt::oneshot(&mut svc, ticket_request(&vendor, &op, "E17"))
        .await
        .expect_err("ledger down");
    assert!(matches!(err, Error::Ledger { .. }), "{err:?}");
    assert!(err.nothing_sent());
    assert_eq!(vendor.posts_received(), 0);
    assert_eq!(vendor.tickets_created(), 0);

    ledger.set_unavailable(false);
    let res = tower::ServiceExt::oneshot(&mut svc, ticket_request(&vendor, &op, "E17"))
        .await
        .expect("ledger back");
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn oversized_body_is_refused_before_anything_is_recorded_or_sent() {
    let drill = Drill::start().await;
    let layer = drill
        .builder()
        .max_request_body(64)
        .build()
        .expect("a valid configuration")
        .layer();
    let mut svc = tower::ServiceBuilder::new()
        .layer(layer)
        .layer(drill.guard.clone())
        .service(http_client());
    let op = new_op("intent-big");
    let mut req = drill.ticket_request(&op, &"E".repeat(200));
    req.extensions_mut().insert(op.clone());
    let err = tower::ServiceExt::oneshot(&mut svc, req)
        .await
        .expect_err("too large");
    assert!(matches!(err, Error::BodyTooLarge { limit: 64 }), "{err:?}");
    assert_eq!(drill.vendor.posts_received(), 0);
    assert!(
        drill
            .ledger
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn streaming_body_is_refused_and_nothing_is_sent() {
    let drill = Drill::start().await;
    let op = new_op("intent-stream");
    let mut req = http::Request::post(drill.vendor.url("/tickets"))
        .body(StreamingBody(Some(bytes::Bytes::from_static(b"{}"))))
        .unwrap();
    req.extensions_mut().insert(op.clone());
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    let mut svc = tower::ServiceBuilder::new()
        .layer(drill.layer.clone())
        .service(tower::service_fn(
            move |_req: http::Request<StreamingBody>| {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<
                        bytes::Bytes,
                    >::new(
                    )))
                }
            },
        ));
    let err = tower::ServiceExt::oneshot(&mut svc, req)
        .await
        .expect_err("stream");
    assert!(matches!(err, Error::NonReplayableBody), "{err:?}");
    assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(
        drill
            .ledger
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_response_body_stalled_past_the_attempt_deadline_leaves_the_attempt_unknown() {
    // The head arrives (201), the body never finishes: the attempt may have applied, so the
    // row goes UNKNOWN with the reason, the request is sent once, and asking again sends
    // nothing.
    let drill = Drill::start().await;
    let op = new_op("intent-stalled-body");
    let layer = drill
        .builder()
        .budget(recoverable_write::BudgetPolicy {
            attempt_timeout_ms: 200,
            ..fast_policy()
        })
        .build()
        .expect("a valid configuration")
        .layer();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    let mut svc = tower::ServiceBuilder::new()
        .layer(layer)
        .service(tower::service_fn(
            move |_req: http::Request<http_body_util::Full<bytes::Bytes>>| {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async {
                    Ok::<_, std::convert::Infallible>(
                        http::Response::builder()
                            .status(StatusCode::CREATED)
                            .body(StalledBody)
                            .unwrap(),
                    )
                }
            },
        ));
    let started = std::time::Instant::now();
    let err = tower::ServiceExt::oneshot(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("the body never finished");
    assert_unknown(&err, op.id());
    assert!(!err.nothing_sent());
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Unknown);
    assert!(row.may_have_applied);
    assert_eq!(row.attempts_used, 1);
    let result = drill
        .evidence(op.id())
        .await
        .into_iter()
        .find(|e| e.entry.kind == "attempt_result")
        .expect("the attempt's result is recorded");
    match result.entry.evidence {
        Some(Evidence::Unknown { why: reason, .. }) => assert!(
            reason.contains("timed out reading the body after status 201"),
            "{reason}"
        ),
        other => panic!("expected unknown evidence, got {other:?}"),
    }

    let again = tower::ServiceExt::oneshot(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("still unknown");
    assert!(again.nothing_sent());
    assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A response body whose data never comes.
#[derive(Debug)]
struct StalledBody;

impl http_body::Body for StalledBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

/// A body of unknown length (a stream), which still satisfies the layer's `From<Bytes>` bound.
struct StreamingBody(Option<bytes::Bytes>);

impl From<bytes::Bytes> for StreamingBody {
    fn from(b: bytes::Bytes) -> Self {
        StreamingBody(Some(b))
    }
}

impl http_body::Body for StreamingBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(self.0.take().map(|b| Ok(http_body::Frame::data(b))))
    }
    // The default size hint: no upper bound, like any stream.
}

#[tokio::test]
async fn a_late_result_after_takeover_is_evidence_only() {
    // The layer's own attempt outlives its lease only if misconfigured; simulate the sweeper
    // winning the race and check the late response changes nothing but the evidence log.
    let drill = Drill::start().await;
    let op = new_op("intent-late");
    drill
        .vendor
        .faults()
        .delay_response(Duration::from_millis(300), 1);
    let layer = drill
        .builder()
        .budget(recoverable_write::BudgetPolicy {
            attempt_timeout_ms: 2_000,
            lease_margin_ms: 1,
            ..fast_policy()
        })
        .build()
        .expect("a valid configuration")
        .layer();
    let mut svc = tower::ServiceBuilder::new()
        .layer(layer)
        .layer(drill.guard.clone())
        .service(http_client());
    let sweeper = {
        let ledger = drill.ledger.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            // Lease is 2001 ms; sweep as if the clock had run past it.
            ledger.sweep_expired(now_ms() + 5_000).await.unwrap()
        })
    };
    let res = tower::ServiceExt::oneshot(&mut svc, drill.ticket_request(&op, "E17")).await;
    let swept = sweeper.await.unwrap();
    assert_eq!(swept.len(), 1);
    // The vendor's answer is still the truth for this caller...
    let res = res.expect("authoritative answer returned");
    assert_eq!(outcome(&res).remote_ref.as_deref(), Some("W731"));
    // ...but the row moved on without it: it stays UNKNOWN until recovery verifies it.
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Unknown);
    let ev = drill.evidence(op.id()).await;
    let late = ev
        .iter()
        .find(|e| e.entry.kind == "late_evidence")
        .expect("late evidence appended");
    assert!(matches!(
        late.entry.evidence,
        Some(Evidence::Succeeded { .. })
    ));
    // Recovery (not run here: the sweep used a clock 5 s ahead) verifies it like any UNKNOWN.
    assert_eq!(drill.vendor.tickets_created(), 1);
    assert_eq!(drill.vendor.posts_received(), 1);
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
