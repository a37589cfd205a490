//! Recovery-engine drills from DRILLS.md (issue: one persisted budget, evidence-driven replay,
//! escalation to a human). Each runs against the fake vendor over real TCP on a SQLite ledger
//! file and asserts the ledger AND the vendor's own count of side effects.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use http::{Method, StatusCode};
use recoverable_write::ledger::backend::Update;
use recoverable_write::ledger::{BoxFuture, FullLedger, Ledger, LedgerError, OperationRecord};
use recoverable_write::state::ReviewDecision;
use recoverable_write::testing::{FakeVendor, ForwardingLedger, LedgerCall, Rejection};
use recoverable_write::{
    Access, BudgetPolicy, Denied, DeniedFirstSend, Error, Evidence, Notice, State,
};

/// Every POST the vendor saw for this operation carried the ledger's key and frozen bytes.
fn assert_same_key_and_bytes(drill: &Drill, row: &OperationRecord) -> usize {
    let posts: Vec<_> = drill
        .vendor
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::POST)
        .collect();
    for p in &posts {
        assert_eq!(
            p.idempotency_key.as_deref(),
            Some(row.idempotency_key.as_str()),
            "every send carries the operation's one key"
        );
        assert_eq!(
            p.body, row.request.body,
            "every send carries the frozen bytes"
        );
        assert!(
            p.headers.get("authorization").is_some(),
            "credentials applied at send time"
        );
    }
    posts.len()
}

fn kinds(entries: &[recoverable_write::ledger::EvidenceEntry]) -> Vec<String> {
    entries.iter().map(|e| e.entry.kind.to_string()).collect()
}

#[tokio::test]
async fn d2_not_found_on_first_query_keeps_unknown_then_succeeds() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d2");
    drill.vendor.faults().drop_after_commit(1);
    drill.vendor.faults().lookup_not_found(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    let before = drill.record(op.id()).await;

    // The first lookup says 404: weak evidence, the operation stays UNKNOWN.
    let row = drill.recover_until(op.id(), |r| r.queries_used >= 1).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.operation_id, before.operation_id);
    assert_eq!(row.idempotency_key, before.idempotency_key, "no new key");
    assert_eq!(drill.vendor.posts_received(), 1, "no new create");

    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert!(row.queries_used >= 2);
    assert_eq!(drill.vendor.tickets_created(), 1);
    assert_eq!(drill.vendor.posts_received(), 1);
}

/// Issue 10 item 20: a PROCESSING operation under a replay-safe contract with no reconciler used
/// to be offered a same-key replay every pass, which the state machine refused: one late-evidence
/// entry and one notice per lease period, forever. It now goes to a human, once.
#[tokio::test]
async fn processing_without_a_lookup_escalates_once_instead_of_logging_refusals() {
    let vendor = FakeVendor::builder()
        .processing_retry_after(None)
        .start()
        .await
        .unwrap();
    let drill = Drill::with(
        vendor,
        DrillOptions {
            contract: replay_safe_contract(),
            ..DrillOptions::default()
        },
    )
    .await;
    let recoverer = drill
        .rw
        .recoverer()
        .replay_through(
            tower::ServiceBuilder::new()
                .layer(drill.guard.clone())
                .service(authed_client(drill.credential.clone())),
        )
        .lease(Duration::from_millis(50));
    let mut svc = drill.writer();
    let op = new_op("intent-processing-no-lookup");
    drill.vendor.faults().hold_processing(true);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    assert_eq!(drill.record(op.id()).await.state, State::Processing);
    // Several lease periods, and the escalation.
    for _ in 0..200 {
        recoverer.run_once().await.unwrap();
        if drill.record(op.id()).await.state == State::ManualReview {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..10 {
        recoverer.run_once().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::ManualReview, "{:?}", row.reason);
    let log = kinds(&drill.evidence(op.id()).await);
    assert!(
        !log.contains(&"late_evidence".to_owned()),
        "no refusal logged: {log:?}"
    );
    assert_eq!(
        log.iter().filter(|k| *k == "escalated").count(),
        1,
        "{log:?}"
    );
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d3_stuck_in_processing_backs_off_then_goes_to_manual_review() {
    let vendor = FakeVendor::builder()
        .processing_retry_after(None)
        .start()
        .await
        .unwrap();
    let drill = Drill::with(
        vendor,
        DrillOptions {
            policy: BudgetPolicy {
                window_ms: 900,
                max_queries: 100,
                attempt_timeout_ms: 300,
                ..fast_policy()
            },
            contract: replay_safe_contract(),
            ..DrillOptions::default()
        },
    )
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-d3");
    drill.vendor.faults().hold_processing(true);
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("processing");
    assert!(matches!(err, Error::Processing { .. }), "{err:?}");
    assert_eq!(drill.record(op.id()).await.state, State::Processing);

    let row = drill
        .recover_until(op.id(), |r| r.state == State::ManualReview)
        .await;
    assert_eq!(row.last_result, Some(State::Processing));
    assert!(row.queries_used >= 2, "queries backed off and repeated");
    // Never a second create, even though the contract makes replay safe: an accepted write is
    // polled, not re-created.
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
    // Backoff: query times strictly increase, and there were far fewer than one per pass.
    let lookups: Vec<_> = drill
        .vendor
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::GET)
        .map(|r| r.at)
        .collect();
    assert!(lookups.windows(2).all(|w| w[1] > w[0]));

    // A second operation that completes never goes back to PROCESSING, even though the key's
    // stored first response is still the 202.
    let op2 = new_op("intent-d3-completes");
    let _ = send(&mut svc, drill.ticket_request(&op2, "E18")).await;
    drill.vendor.faults().complete_processing();
    let done = drill
        .recover_until(op2.id(), |r| r.state == State::Succeeded)
        .await;
    for _ in 0..3 {
        drill.recoverer.run_once().await.unwrap();
    }
    let res = send(&mut svc, drill.ticket_request(&op2, "E18"))
        .await
        .expect("stored result");
    assert_eq!(outcome(&res).state, State::Succeeded);
    assert_eq!(drill.record(op2.id()).await.state, State::Succeeded);
    assert_eq!(done.remote_ref, drill.record(op2.id()).await.remote_ref);
    assert_eq!(drill.vendor.posts_received(), 2);
}

#[tokio::test]
async fn d4_gateway_504_after_commit_is_unknown_and_looked_up_never_resent_with_a_new_key() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d4");
    drill
        .vendor
        .faults()
        .status_after_commit(StatusCode::GATEWAY_TIMEOUT, 1);
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("504");
    assert_unknown(&err, op.id());
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(row.attempts_used, 1);
    assert_eq!(assert_same_key_and_bytes(&drill, &row), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d5_cached_500_replay_stays_unknown_and_the_lookup_decides() {
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-d5");
    drill.vendor.faults().cache_error_response(true);
    drill
        .vendor
        .faults()
        .status_after_commit(StatusCode::INTERNAL_SERVER_ERROR, 1);
    // Lookups say nothing at first, so the engine takes the contract's same-key replay.
    drill.vendor.faults().lookup_not_found(1);
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("500");
    assert_unknown(&err, op.id());

    let row = drill.recover_until(op.id(), |r| r.attempts_used >= 2).await;
    // The replay re-fetched the cached 500: still not a result.
    assert_ne!(row.state, State::Rejected);
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(row.attempts_used, 2);
    assert_eq!(assert_same_key_and_bytes(&drill, &row), 2);
    assert_eq!(drill.vendor.tickets_created(), 1);
    let log = kinds(&drill.evidence(op.id()).await);
    assert!(log.contains(&"replay_safe".to_owned()), "{log:?}");
    assert!(
        log.iter().filter(|k| *k == "lookup").count() >= 2,
        "{log:?}"
    );
}

#[tokio::test]
async fn d6_lookup_finds_nothing_while_the_vendor_is_slow_stays_unknown_never_rejected() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d6");
    // The vendor commits 900 ms after receiving; the attempt gives up at 600 ms.
    drill
        .vendor
        .faults()
        .delay_before_commit(Duration::from_millis(900), 1);
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("timeout");
    assert_unknown(&err, op.id());
    let row = drill.recover_until(op.id(), |r| r.queries_used >= 1).await;
    assert_eq!(
        row.state,
        State::Unknown,
        "not found while slow is not a rejection"
    );
    assert_eq!(drill.vendor.tickets_created(), 0);
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(drill.vendor.tickets_created(), 1);
    assert_eq!(drill.vendor.posts_received(), 1);
}

#[tokio::test]
async fn d8_expired_key_with_operation_record_returns_w731_never_a_create_or_new_key() {
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-d8");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    // The vendor prunes the key early; its operation record remains.
    drill.vendor.faults().expire_keys();
    drill.vendor.faults().lookup_not_found(1);
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    // Whether it came back through the lookup or the same-key replay, it is the same key.
    let posts = assert_same_key_and_bytes(&drill, &row);
    assert!(posts <= 2);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d9_key_expired_and_record_cleaned_stops_automatic_writes_for_review() {
    // The vendor keeps keys for 1 s: by the time recovery looks, a replay would run anew.
    let drill = Drill::with_options(DrillOptions::d9()).await;
    let op = new_op("intent-d9");
    let row = drill.d9_to_review(&op, "E17").await;
    assert_eq!(row.last_result, Some(State::Unknown));
    assert_eq!(row.attempts_used, 1);
    // No automatic write: a replay here would have been a second ticket.
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);

    // The reviewer gets everything in one package, with no credential and no body values.
    let package = drill
        .rw
        .reviews()
        .handoff(op.tenant(), op.id())
        .await
        .unwrap();
    assert_eq!(package.state, State::ManualReview);
    assert_eq!(package.attempts.len(), 1);
    assert_eq!(package.budget.attempts_used, 1);
    assert!(package.budget.queries_used >= 1);
    assert_eq!(
        package.parameters.body_fields,
        vec!["device_id", "operation_id", "priority"]
    );
    let json = serde_json::to_string(&package).unwrap();
    assert!(!json.contains("sk_test_secret"));
    assert!(!json.contains("E17"), "body values stay out of the package");
    assert_eq!(package.authorization.write_denied, None);
}

#[tokio::test]
async fn d10_no_recovery_path_ever_mints_a_new_key() {
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-d10");
    // Refused connection (path a), then a cached 500 (path b), then lookups that say nothing.
    drill.vendor.faults().refuse_connections(true).unwrap();
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::RetryScheduled { .. }), "{err:?}");
    drill.vendor.faults().refuse_connections(false).unwrap();
    drill.vendor.faults().cache_error_response(true);
    drill
        .vendor
        .faults()
        .status_after_commit(StatusCode::INTERNAL_SERVER_ERROR, 1);
    drill.vendor.faults().lookup_not_found(2);
    let row = drill
        .recover_until(op.id(), |r| {
            r.state.is_terminal() || r.state == State::ManualReview
        })
        .await;
    let keys: std::collections::BTreeSet<_> = drill
        .vendor
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::POST)
        .filter_map(|r| r.idempotency_key)
        .collect();
    assert_eq!(keys.len(), 1, "one key across every send: {keys:?}");
    assert_eq!(
        keys.into_iter().next().unwrap(),
        row.idempotency_key.as_str()
    );
    assert!(row.attempts_used <= 3);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d19_d20_at_most_three_write_attempts_counted_across_restarts() {
    let mut drill = Drill::start().await;
    let op = new_op("intent-d20");
    drill.vendor.faults().refuse_connections(true).unwrap();
    {
        let mut svc = drill.writer();
        let err = send(&mut svc, drill.ticket_request(&op, "E17"))
            .await
            .expect_err("refused");
        assert!(matches!(err, Error::RetryScheduled { .. }), "{err:?}");
    }
    assert_eq!(drill.record(op.id()).await.attempts_used, 1);
    // Each replay happens in a new process that reads the old budget.
    for expected in [2, 3] {
        drill = drill.restart().await;
        let row = drill
            .recover_until(op.id(), |r| r.attempts_used >= expected)
            .await;
        assert_eq!(row.attempts_used, expected);
    }
    drill = drill.restart().await;
    let row = drill
        .recover_until(op.id(), |r| r.state == State::ManualReview)
        .await;
    assert_eq!(row.attempts_used, 3, "never a fourth attempt");
    // "Attempts exhausted" is not a business failure.
    assert_ne!(row.last_result, Some(State::Rejected));
    assert!(
        row.reason.as_deref().unwrap().contains("exhausted"),
        "{:?}",
        row.reason
    );
    assert_eq!(
        drill.vendor.posts_received(),
        0,
        "every attempt was refused at connect"
    );
    assert_eq!(drill.vendor.tickets_created(), 0);
}

#[tokio::test]
async fn d21_retry_after_past_the_window_goes_to_manual_review_at_once() {
    // delay-seconds, IMF-fixdate, asctime, and an obsolete RFC 850 date (in the past).
    for retry_after in [
        "120",
        "Sat, 06 Nov 2094 08:49:37 GMT",
        "Sat Nov  6 08:49:37 2094",
        "Sunday, 06-Nov-94 08:49:37 GMT",
    ] {
        let drill = Drill::start().await;
        let mut svc = drill.writer();
        let op = new_op("intent-d21");
        drill.vendor.faults().reject_next_with(
            Rejection::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded").retry_after(retry_after),
            1,
        );
        let err = send(&mut svc, drill.ticket_request(&op, "E17"))
            .await
            .expect_err("503");
        let row = drill.record(op.id()).await;
        if retry_after.contains("-94") {
            // An obsolete RFC 850 date in the past: no hint, so an ordinary UNKNOWN.
            assert_eq!(row.state, State::Unknown, "{retry_after}");
            continue;
        }
        assert!(
            matches!(err, Error::ManualReview { .. }),
            "{retry_after}: {err:?}"
        );
        assert_eq!(row.state, State::ManualReview, "{retry_after}");
        assert_eq!(drill.vendor.posts_received(), 1);
        assert_eq!(drill.vendor.tickets_created(), 0);
        drill.recoverer.run_once().await.unwrap();
        assert_eq!(
            drill.vendor.posts_received(),
            1,
            "no automatic send after escalation"
        );
    }
}

#[tokio::test]
async fn d22_documented_429_is_resent_with_the_same_key_after_the_advised_delay() {
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-d22");
    drill.vendor.faults().reject_next_with(
        Rejection::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        1,
    );
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("429");
    assert!(matches!(err, Error::RetryScheduled { .. }), "{err:?}");
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::RetryReady);
    assert!(
        !row.may_have_applied,
        "a documented 429 proves the attempt unexecuted"
    );

    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.attempts_used, 2);
    assert_eq!(assert_same_key_and_bytes(&drill, &row), 2);
    let posts: Vec<_> = drill
        .vendor
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::POST)
        .collect();
    // The vendor advised `Retry-After: 1`.
    assert!(
        posts[1].at.duration_since(posts[0].at) >= Duration::from_millis(950),
        "resent after {:?}",
        posts[1].at.duration_since(posts[0].at)
    );
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d23_connection_refused_is_resent_with_the_same_key_and_counted() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-d23");
    drill.vendor.faults().refuse_connections(true).unwrap();
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::RetryScheduled { .. }), "{err:?}");
    assert!(err.nothing_sent());
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::RetryReady);
    assert_eq!(row.attempts_used, 1, "the refused attempt counts");
    drill.vendor.faults().refuse_connections(false).unwrap();

    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.attempts_used, 2);
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(assert_same_key_and_bytes(&drill, &row), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d25_write_permission_revoked_during_unknown_queries_go_on_nothing_is_sent() {
    let revoked = Arc::new(AtomicBool::new(false));
    let flag = revoked.clone();
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        authorizer: Some(Arc::new(move |_op: &OperationRecord, access: Access| {
            if access == Access::Write && flag.load(Ordering::SeqCst) {
                Err(Denied::new(access, "write permission revoked"))
            } else {
                Ok(())
            }
        })),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-d25");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    revoked.store(true, Ordering::SeqCst);
    drill.vendor.faults().lookup_not_found(3);

    // Lookups go on, say nothing, and the (otherwise safe) replay is never sent.
    let row = drill.recover_until(op.id(), |r| r.queries_used >= 3).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.attempts_used, 1);
    assert_eq!(drill.vendor.posts_received(), 1);
    assert!(drill.vendor.lookups_received() >= 3);

    // A new write under the revoked permission is refused before anything is recorded as sent.
    let op2 = new_op("intent-d25-new");
    let err = send(&mut svc, drill.ticket_request(&op2, "E18"))
        .await
        .expect_err("denied");
    assert!(matches!(err, Error::Denied { .. }), "{err:?}");
    assert!(err.nothing_sent());
    // Closed (the default): never sent, and nothing sends it later.
    assert_eq!(drill.record(op2.id()).await.state, State::Rejected);
    assert_eq!(drill.vendor.posts_received(), 1);

    // Queries still resolve the unknown one.
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d26_401_is_rejected_without_silent_reauth_and_the_unknown_is_recovered_first() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op1 = new_op("intent-d26-first");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op1, "E17")).await;
    assert_eq!(drill.record(op1.id()).await.state, State::Unknown);

    // The credential is revoked at the vendor.
    drill.vendor.faults().revoke_credential(CREDENTIAL);
    let op2 = new_op("intent-d26-second");
    let res = send(&mut svc, drill.ticket_request(&op2, "E18"))
        .await
        .expect("a documented rejection passes through");
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(outcome(&res).state, State::Rejected);
    let posts_after_401 = drill.vendor.posts_received();
    // Lookups for op1 are refused too: it stays UNKNOWN, nothing is re-sent with other
    // credentials.
    let row = drill.recover_until(op1.id(), |r| r.queries_used >= 1).await;
    assert_eq!(row.state, State::Unknown);
    assert_eq!(
        drill.vendor.posts_received(),
        posts_after_401,
        "no silent re-auth"
    );
    assert_eq!(drill.record(op2.id()).await.attempts_used, 1);

    // Credentials are refreshed: the unknown operation is recovered before anything new.
    drill.vendor.faults().restore_credentials();
    let row = drill
        .recover_until(op1.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    let op3 = new_op("intent-d26-third");
    let res = send(&mut svc, drill.ticket_request(&op3, "E19"))
        .await
        .expect("created");
    assert_eq!(outcome(&res).remote_ref.as_deref(), Some("W732"));
    assert_eq!(
        drill.vendor.tickets_created(),
        2,
        "op1 once, op3 once, op2 never"
    );
    assert_eq!(drill.record(op2.id()).await.state, State::Rejected);
}

/// Issue 10 item 6: a same-key replay the contract made safe (path (b)), then delayed — here by
/// a write permission withheld at the moment of sending — past the vendor's key retention, must
/// not go out with a key the vendor may have forgotten: retention is checked again right before
/// the send, and the operation goes to a human instead.
#[tokio::test]
async fn a_deferred_replay_past_the_key_retention_is_not_sent() {
    let hold = Arc::new(AtomicBool::new(false));
    let flag = hold.clone();
    let vendor = FakeVendor::builder()
        .key_retention(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let drill = Drill::with(
        vendor,
        DrillOptions {
            contract: replay_safe_contract().retention_secs(2),
            // Withheld only when the replay is about to be claimed, so the path-(b) decision is
            // taken and the send is then delayed.
            authorizer: Some(Arc::new(move |op: &OperationRecord, access: Access| {
                if access == Access::Write
                    && op.state == State::RetryReady
                    && flag.load(Ordering::SeqCst)
                {
                    Err(Denied::new(access, "approval pending"))
                } else {
                    Ok(())
                }
            })),
            ..DrillOptions::default()
        },
    )
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-item6");
    drill.vendor.faults().drop_after_commit(1);
    drill.vendor.faults().lookup_not_found(1_000);
    hold.store(true, Ordering::SeqCst);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    let row = drill
        .recover_until(op.id(), |r| r.state == State::RetryReady)
        .await;
    assert!(
        row.may_have_applied,
        "path (b): the first attempt may have applied"
    );

    // The send waits past the vendor's retention of the key.
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    hold.store(false, Ordering::SeqCst);
    let row = drill
        .recover_until(op.id(), |r| r.state != State::RetryReady)
        .await;
    assert_eq!(row.state, State::ManualReview, "{:?}", row.reason);
    assert!(
        row.reason.as_deref().unwrap_or("").contains("retention"),
        "{:?}",
        row.reason
    );
    assert_eq!(
        drill.vendor.posts_received(),
        1,
        "no replay with a forgotten key"
    );
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d27_a_reviewer_claim_while_recovery_is_about_to_replay_revokes_the_send() {
    // The authorizer runs right before the engine claims send rights for the replay; the human
    // claims at exactly that moment.
    let slot: Arc<std::sync::Mutex<Option<recoverable_write::Reviews>>> = Default::default();
    let hook = slot.clone();
    struct ClaimOnWrite(Arc<std::sync::Mutex<Option<recoverable_write::Reviews>>>);
    impl recoverable_write::Authorizer for ClaimOnWrite {
        fn check<'a>(
            &'a self,
            op: &'a OperationRecord,
            access: Access,
        ) -> recoverable_write::ledger::BoxFuture<'a, Result<(), Denied>> {
            let reviews = self.0.lock().unwrap().clone();
            Box::pin(async move {
                if access == Access::Write
                    && op.state == State::RetryReady
                    && let Some(reviews) = reviews
                {
                    reviews
                        .claim(&op.tenant, &op.operation_id, "alice", op.version)
                        .await
                        .expect("reviewer claims");
                }
                Ok(())
            })
        }
    }
    let mut drill = Drill::start().await;
    let rw = drill
        .builder()
        .authorizer(ClaimOnWrite(hook))
        .build()
        .expect("a valid configuration");
    drill.layer = rw.layer();
    drill.recoverer = rw
        .recoverer()
        .replay_through(
            tower::ServiceBuilder::new()
                .layer(drill.guard.clone())
                .service(authed_client(drill.credential.clone())),
        )
        .lease(Duration::from_millis(500));
    *slot.lock().unwrap() = Some(rw.reviews());

    let mut svc = drill.writer();
    let op = new_op("intent-d27");
    drill.vendor.faults().refuse_connections(true).unwrap();
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    drill.vendor.faults().refuse_connections(false).unwrap();
    assert_eq!(drill.record(op.id()).await.state, State::RetryReady);

    let row = drill
        .recover_until(op.id(), |r| r.state == State::ManualReview)
        .await;
    for _ in 0..5 {
        drill.recoverer.run_once().await.unwrap();
    }
    assert_eq!(drill.record(op.id()).await.state, State::ManualReview);
    assert!(row.reason.as_deref().unwrap().contains("alice"));
    assert_eq!(
        drill.vendor.posts_received(),
        0,
        "no automatic send after the claim"
    );
    assert_eq!(drill.vendor.tickets_created(), 0);
    let log = kinds(&drill.evidence(op.id()).await);
    assert!(log.contains(&"review_claimed".to_owned()), "{log:?}");
    assert!(
        !log[log.iter().position(|k| k == "review_claimed").unwrap()..]
            .contains(&"attempt_registered".to_owned())
    );

    // The reviewer verified nothing happened and re-approves: same key, same bytes, fresh budget.
    let reviews = drill.rw.reviews();
    let pkg = reviews.handoff(op.tenant(), op.id()).await.unwrap();
    let row = reviews
        .resolve(
            op.tenant(),
            op.id(),
            "alice",
            pkg.version,
            ReviewDecision::ConfirmedNotExecuted,
        )
        .await
        .unwrap();
    assert_eq!(row.state, State::RetryReady);
    assert_eq!(row.attempts_used, 0);
    *slot.lock().unwrap() = None;
    // The lease the row carried when the reviewer claimed it is kept (on RETRY_READY it may be
    // an attempt's): nothing is claimed before it is over.
    if let Some(until) = row.lease_until_ms {
        let left = until
            - recoverable_write::clock::Clock::now_ms(&recoverable_write::clock::ProcessClock);
        tokio::time::sleep(Duration::from_millis(left.max(0) as u64 + 20)).await;
    }
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(drill.vendor.tickets_created(), 1);
    assert_eq!(
        drill.vendor.requests()[0].idempotency_key.as_deref(),
        Some(row.idempotency_key.as_str())
    );
}

#[tokio::test]
async fn d27_a_reviewer_resolving_not_executed_while_the_attempt_is_on_the_wire_waits_for_its_lease()
 {
    // Issue 10 item 1: the reviewer claims an IN_FLIGHT operation and confirms "not executed"
    // while the first attempt is still on the wire. The resolution is accepted, but nothing may
    // be sent before that attempt's lease has run out on the ledger's clock.
    let drill = Drill::start().await;
    let op = new_op("intent-d27-live");
    drill
        .vendor
        .faults()
        .delay_before_commit(Duration::from_millis(500), 1);
    let mut svc = drill.writer();
    let req = drill.ticket_request(&op, "E17");
    let call = tokio::spawn(async move { send(&mut svc, req).await });

    let in_flight = loop {
        if let Ok(Some(r)) = drill.ledger.get(op.tenant(), op.id()).await
            && r.state == State::InFlight
            && drill.vendor.posts_received() == 1
        {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let lease_until = in_flight.lease_until_ms.expect("the attempt holds a lease");
    let reviews = drill.rw.reviews();
    let claimed = reviews
        .claim(op.tenant(), op.id(), "alice", in_flight.version)
        .await
        .unwrap();
    assert_eq!(claimed.state, State::ManualReview);
    assert_eq!(
        claimed.lease_until_ms,
        Some(lease_until),
        "the claim keeps the live attempt's lease"
    );
    let resolved = reviews
        .resolve(
            op.tenant(),
            op.id(),
            "alice",
            claimed.version,
            ReviewDecision::ConfirmedNotExecuted,
        )
        .await
        .unwrap();
    assert_eq!(resolved.state, State::RetryReady);
    assert_eq!(resolved.lease_until_ms, Some(lease_until));
    // A second review cycle keeps it too (the simulation's first finding).
    let again = reviews
        .claim(op.tenant(), op.id(), "bob", resolved.version)
        .await
        .unwrap();
    assert_eq!(again.lease_until_ms, Some(lease_until));
    let resolved = reviews
        .resolve(
            op.tenant(),
            op.id(),
            "bob",
            again.version,
            ReviewDecision::ConfirmedNotExecuted,
        )
        .await
        .unwrap();
    assert_eq!(resolved.lease_until_ms, Some(lease_until));

    // The first attempt is still on the wire: however often recovery runs, nothing is sent.
    while drill.vendor.tickets_created() == 0 {
        drill.recoverer.run_once().await.unwrap();
        assert_eq!(
            drill.vendor.posts_received(),
            1,
            "a replay went out while the first attempt was still on the wire"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = call.await.unwrap();
    assert_eq!(drill.record(op.id()).await.state, State::RetryReady);

    // Once the lease is over, the re-approved send would go out; but the first attempt's
    // success was recorded after the decision that made it sendable (issue 27, the fencing
    // rule): the replay is not sent, and the operation goes back to a person with the late
    // success offered as the resolution.
    let row = drill
        .recover_until(op.id(), |r| r.state != State::RetryReady)
        .await;
    assert_eq!(row.state, State::ManualReview, "{:?}", row.reason);
    assert_eq!(
        drill.vendor.requests().len(),
        1,
        "no replay after the success"
    );
    assert_eq!(drill.vendor.tickets_created(), 1, "one ticket, never two");
    let pkg = reviews.handoff(op.tenant(), op.id()).await.unwrap();
    let offered = recoverable_write::review::late_success(&pkg.evidence).expect("offered");
    assert_eq!(
        offered.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some(drill.vendor.tickets()[0].id.clone())
        })
    );
}

#[tokio::test]
async fn d28_a_late_success_after_manual_review_is_evidence_and_surfaced_only() {
    let drill = Drill::start().await;
    let mut notices = drill.layer.notifications().subscribe();
    let op = new_op("intent-d28");
    drill
        .vendor
        .faults()
        .delay_response(Duration::from_millis(300), 1);
    let mut svc = drill.writer();
    let req = drill.ticket_request(&op, "E17");
    let call = tokio::spawn(async move { send(&mut svc, req).await });

    // While the attempt is on the wire, a reviewer takes the operation over.
    let reviews = drill.rw.reviews();
    let claimed = loop {
        if let Some(r) = drill
            .ledger
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .filter(|r| r.state == State::InFlight)
        {
            break reviews
                .claim(op.tenant(), op.id(), "bob", r.version)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(claimed.state, State::ManualReview);

    let _ = call.await.unwrap();
    let row = drill.record(op.id()).await;
    assert_eq!(
        row.state,
        State::ManualReview,
        "late success does not move it"
    );
    let log = drill.evidence(op.id()).await;
    let late = log
        .iter()
        .find(|e| e.entry.kind == "late_evidence")
        .expect("late evidence appended");
    assert!(matches!(
        late.entry.evidence,
        Some(Evidence::Succeeded { .. })
    ));
    // ...and surfaced to the reviewer.
    let surfaced = loop {
        match tokio::time::timeout(Duration::from_secs(2), notices.recv())
            .await
            .expect("a notice")
            .unwrap()
        {
            Notice::LateEvidence { outcome, evidence } if outcome.operation_id == *op.id() => {
                break evidence;
            }
            _ => continue,
        }
    };
    assert!(matches!(surfaced, Evidence::Succeeded { .. }));
    // No automatic sending comes back.
    for _ in 0..3 {
        drill.recoverer.run_once().await.unwrap();
    }
    assert_eq!(drill.record(op.id()).await.state, State::ManualReview);
    assert_eq!(drill.vendor.posts_received(), 1);

    // The reviewer closes it with the late evidence.
    let row = reviews
        .resolve(
            op.tenant(),
            op.id(),
            "bob",
            drill.record(op.id()).await.version,
            ReviewDecision::ConfirmedSucceeded {
                remote_ref: Some("W731".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn a_caller_can_wait_for_the_engine_to_resolve_its_operation() {
    let mut drill = Drill::start().await;
    drill.layer = drill
        .builder()
        .wait_for_resolution(Duration::from_secs(5))
        .build()
        .expect("a valid configuration")
        .layer();
    let engine = drill
        .rw
        .recoverer()
        .reconciler(
            recoverable_write::HttpLookup::new(
                authed_client(drill.credential.clone()),
                format!("{}/operations/{{operation_id}}", drill.vendor.base_url()),
            )
            .tenant_header(http::HeaderName::from_static("x-tenant")),
        )
        .interval(Duration::from_millis(20))
        .spawn();
    let mut svc = drill.writer();
    let op = new_op("intent-wait");
    drill.vendor.faults().drop_after_commit(1);
    let res = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect("resolved while waiting");
    let o = outcome(&res);
    assert_eq!(o.state, State::Succeeded);
    assert_eq!(o.remote_ref.as_deref(), Some("W731"));
    assert_eq!(drill.vendor.tickets_created(), 1);
    assert_eq!(drill.vendor.posts_received(), 1);
    engine.shutdown().await;
}

#[tokio::test]
async fn the_replay_limiter_caps_replays_per_target() {
    let drill = Drill::with_options(DrillOptions {
        limiter: Some(Arc::new(recoverable_write::ReplayLimiter::new(0.001, 1))),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    drill.vendor.faults().refuse_connections(true).unwrap();
    let ops: Vec<_> = (0..3)
        .map(|i| new_op(&format!("intent-limit-{i}")))
        .collect();
    for op in &ops {
        let _ = send(&mut svc, drill.ticket_request(op, "E17")).await;
    }
    drill.vendor.faults().refuse_connections(false).unwrap();
    for _ in 0..10 {
        drill.recoverer.run_once().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One token, (almost) no refill: exactly one replay went out; the others wait, uncounted.
    assert_eq!(drill.vendor.posts_received(), 1);
    let mut attempts = Vec::new();
    for op in &ops {
        attempts.push(drill.record(op.id()).await.attempts_used);
    }
    attempts.sort();
    assert_eq!(attempts, vec![1, 1, 2]);
}

/// A reconciler with a bug: it panics on its first lookup.
#[derive(Debug, Default)]
struct PanicsOnce(std::sync::atomic::AtomicBool);

impl recoverable_write::Reconciler for PanicsOnce {
    fn reconcile<'a>(
        &'a self,
        _op: &'a OperationRecord,
    ) -> recoverable_write::ledger::BoxFuture<'a, Evidence> {
        Box::pin(async move {
            if !self.0.swap(true, Ordering::SeqCst) {
                panic!("reconciler bug");
            }
            Evidence::Succeeded {
                remote_ref: Some("W731".into()),
            }
        })
    }
}

/// Issue 10 item 17: a panic inside a spawned recoverer must never pass silently, and must not
/// end recovery: the pass is reported and the next one runs.
#[tokio::test]
async fn a_panicking_pass_does_not_kill_the_spawned_recoverer() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-panic");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    let handle = drill
        .rw
        .recoverer()
        .reconciler(PanicsOnce::default())
        .lease(Duration::from_millis(200))
        .interval(Duration::from_millis(10))
        .spawn();
    let mut state = State::Unknown;
    for _ in 0..300 {
        state = drill.record(op.id()).await.state;
        if state == State::Succeeded {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.shutdown().await;
    assert_eq!(state, State::Succeeded, "the recoverer survived its panic");
    assert_eq!(drill.vendor.tickets_created(), 1);
}

/// Issue 10 item 12: a `PREPARED` row nobody sends (the process died after an outbox commit)
/// is sent by the recoverer once it is old enough, with its own key and bytes; a young one is
/// left to its caller.
#[tokio::test]
async fn a_prepared_row_nobody_sends_is_sent_by_the_recoverer_once() {
    let drill = Drill::start().await;
    let op = new_op("intent-orphan");
    let req = drill.ticket_request(&op, "E17");
    let (parts, body) = req.into_parts();
    let body = http_body_util::BodyExt::collect(body)
        .await
        .unwrap()
        .to_bytes();
    let created = drill
        .ledger
        .create_or_get(
            drill
                .layer
                .new_operation(&op, &http::Request::from_parts(parts, body)),
        )
        .await
        .unwrap()
        .into_record();
    assert_eq!(created.state, State::Prepared);

    // Young: left to the caller that recorded it.
    drill.recoverer.run_once().await.unwrap();
    assert_eq!(drill.record(op.id()).await.state, State::Prepared);
    assert_eq!(drill.vendor.posts_received(), 0);

    // Old enough (here: at once): the recoverer makes its first send.
    let recoverer = drill
        .recoverer
        .clone()
        .send_prepared_after(Some(Duration::ZERO));
    let mut row = drill.record(op.id()).await;
    for _ in 0..100 {
        let report = recoverer.run_once().await.unwrap();
        row = drill.record(op.id()).await;
        if row.state == State::Succeeded {
            assert!(report.claimed_prepared <= 1);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.idempotency_key, created.idempotency_key);
    let posts = drill.vendor.requests();
    assert_eq!(posts.len(), 1);
    assert_eq!(
        posts[0].idempotency_key.as_deref(),
        Some(created.idempotency_key.as_str())
    );
    assert_eq!(posts[0].body, created.request.body);
    assert_eq!(drill.vendor.tickets_created(), 1);

    // And a later call by the original caller gets the answer, nothing sent again.
    let mut svc = drill.writer();
    let res = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(drill.vendor.posts_received(), 1);
}

/// A `PREPARED` row whose first send is not authorized goes to a human, once, instead of being
/// claimed and deferred every lease period.
#[tokio::test]
async fn a_prepared_row_whose_first_send_is_refused_goes_to_a_human() {
    let drill = Drill::with_options(DrillOptions {
        authorizer: Some(Arc::new(|_op: &OperationRecord, access: Access| {
            if access == Access::Write {
                Err(Denied::new(access, "approval withdrawn"))
            } else {
                Ok(())
            }
        })),
        ..DrillOptions::default()
    })
    .await;
    // Queued by configuration: the row stays PREPARED for the recoverer.
    let mut svc = collected(
        tower::ServiceBuilder::new()
            .layer(
                drill
                    .builder()
                    .denied_first_sends(DeniedFirstSend::Queue)
                    .build()
                    .expect("a valid configuration")
                    .layer(),
            )
            .layer(drill.guard.clone())
            .service(authed_client(drill.credential.clone())),
    );
    let op = new_op("intent-orphan-denied");
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("denied");
    assert!(
        matches!(
            err,
            Error::Denied {
                fate: DeniedFirstSend::Queue,
                ..
            }
        ),
        "{err:?}"
    );
    let recoverer = drill
        .recoverer
        .clone()
        .send_prepared_after(Some(Duration::ZERO));
    let report = recoverer.run_once().await.unwrap();
    assert_eq!(report.claimed_prepared, 1);
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::ManualReview);
    assert_eq!(row.last_result, Some(State::Prepared), "never sent");
    assert!(
        row.reason
            .as_deref()
            .unwrap()
            .contains("approval withdrawn")
    );
    assert_eq!(drill.vendor.posts_received(), 0);
}

/// Issue 12 item 5: the recoverer reads the queue operators own (counts by open state, the oldest
/// operation in review and in UNKNOWN) and exports it as gauges.
#[tokio::test]
async fn the_queue_gauges_count_open_states_and_find_the_oldest_in_review() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let (stuck, lost) = (
        new_op("intent-gauge-review"),
        new_op("intent-gauge-unknown"),
    );
    drill.vendor.faults().drop_after_commit(2);
    let _ = send(&mut svc, drill.ticket_request(&stuck, "E17")).await;
    let _ = send(&mut svc, drill.ticket_request(&lost, "E18")).await;
    let row = drill.record(stuck.id()).await;
    drill
        .rw
        .reviews()
        .claim(stuck.tenant(), stuck.id(), "alice", row.version)
        .await
        .unwrap();
    let (counts, oldest) = drill
        .recoverer
        .export_gauges()
        .await
        .unwrap()
        .expect("a SQLite ledger lists: the gauges are read");
    assert_eq!(counts.get(State::ManualReview), Some(1));
    assert_eq!(counts.get(State::Unknown), Some(1));
    assert_eq!(
        oldest.get(State::ManualReview).map(|r| &r.operation_id),
        Some(stuck.id())
    );
    assert_eq!(
        oldest.get(State::Unknown).map(|r| &r.operation_id),
        Some(lost.id())
    );
    assert!(oldest.get(State::Processing).is_none());
    assert_eq!(drill.vendor.tickets_created(), 2);
}

/// Issue 27 item 4: a first send the authorizer refuses is closed (the default): the caller is
/// told it will never be sent, and it is not, even once the authorizer allows writes again and
/// the recoverer sends every `PREPARED` row nobody sent. A repeat of the intent gets the same
/// answer, not a send.
#[tokio::test]
async fn a_refused_first_send_is_closed_and_never_sent_later() {
    let deny = Arc::new(AtomicBool::new(true));
    let flag = deny.clone();
    let drill = Drill::with_options(DrillOptions {
        authorizer: Some(Arc::new(move |_op: &OperationRecord, access: Access| {
            if access == Access::Write && flag.load(Ordering::SeqCst) {
                Err(Denied::new(access, "approval pending"))
            } else {
                Ok(())
            }
        })),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-denied-closed");
    let err = send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect_err("denied");
    assert!(
        matches!(
            err,
            Error::Denied {
                fate: DeniedFirstSend::Close,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("it never will be"), "{err}");
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Rejected);
    assert!(
        row.reason
            .as_deref()
            .unwrap_or_default()
            .contains("approval pending"),
        "{:?}",
        row.reason
    );

    // Writes are allowed again; the recoverer sends PREPARED rows at once: not this one.
    deny.store(false, Ordering::SeqCst);
    let recoverer = drill
        .recoverer
        .clone()
        .send_prepared_after(Some(Duration::ZERO));
    for _ in 0..3 {
        let report = recoverer.run_once().await.unwrap();
        assert_eq!(report.claimed_prepared, 0);
    }
    assert_eq!(drill.vendor.posts_received(), 0);

    // The caller repeats the intent: the same answer from the ledger, nothing sent.
    let again = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    assert!(
        again.is_err() || again.as_ref().is_ok_and(|r| !r.status().is_success()),
        "{again:?}"
    );
    assert_eq!(drill.record(op.id()).await.state, State::Rejected);
    assert_eq!(drill.vendor.posts_received(), 0);
    assert_eq!(drill.vendor.tickets_created(), 0);
}

/// The gauges as a metrics exporter sees them: the last value set per gauge name and labels.
#[cfg(feature = "metrics")]
mod gauges {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    type Values = Arc<Mutex<BTreeMap<String, f64>>>;

    /// Records gauges; counters and histograms are dropped.
    #[derive(Default)]
    pub struct Gauges(Values);

    struct One(String, Values);

    impl metrics::GaugeFn for One {
        fn increment(&self, v: f64) {
            *self.1.lock().unwrap().entry(self.0.clone()).or_default() += v;
        }
        fn decrement(&self, v: f64) {
            *self.1.lock().unwrap().entry(self.0.clone()).or_default() -= v;
        }
        fn set(&self, v: f64) {
            self.1.lock().unwrap().insert(self.0.clone(), v);
        }
    }

    impl Gauges {
        /// The value of gauge `name` with `labels` (`state=UNKNOWN`), if it was set.
        pub fn get(&self, name: &str, labels: &str) -> Option<f64> {
            self.0
                .lock()
                .unwrap()
                .get(&format!("{name}{{{labels}}}"))
                .copied()
        }
    }

    impl Recorder for Gauges {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            Gauge::from_arc(Arc::new(One(name, self.0.clone())))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }
}

/// Issue 27 item 3, the rolling deploy: a newer version wrote a value this one cannot read into
/// an operation whose response was lost. The recovery pass quarantines it instead of failing,
/// and it does not vanish: it is counted (its own gauge, in no state's), and once every worker
/// can read it a person releases it and recovery finds the vendor's ticket: no second create.
#[cfg(feature = "metrics")]
#[test]
fn a_row_from_a_newer_version_is_quarantined_counted_and_recovered_after_release() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let recorder = gauges::Gauges::default();
    // The gauges are set inside `export_gauges`, on the thread that polls it.
    let export = |drill: &Drill| {
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(drill.recoverer.export_gauges())
        })
        .unwrap()
        .expect("a SQLite ledger lists: the gauges are read")
    };
    let (drill, op) = runtime.block_on(async {
        let drill = Drill::start().await;
        let op = new_op("intent-newer-row");
        drill.vendor.faults().drop_after_commit(1);
        let err = send(&mut drill.writer(), drill.ticket_request(&op, "E17"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unknown { .. }), "{err:?}");
        // Waits for the layer's result to land before another program touches the file.
        assert_eq!(drill.record(op.id()).await.state, State::Unknown);
        (drill, op)
    });
    let db = drill.dir.path().join("ledger.db");
    let sql = |set: &str| {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        let n = conn
            .execute(
                &format!("UPDATE rw_operations SET {set} WHERE operation_id = ?1"),
                [op.id().as_str()],
            )
            .unwrap();
        assert_eq!(n, 1);
    };
    // What a newer version may write: a result name this one does not know.
    sql("last_result = 'PAUSED_BY_VENDOR'");

    let quarantined = runtime.block_on(async {
        for _ in 0..200 {
            drill
                .recoverer
                .run_once()
                .await
                .expect("a pass never fails on a bad row");
            let q = drill.ledger.quarantined(10).await.unwrap();
            if !q.is_empty() {
                return q;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the row was never quarantined")
    });
    assert_eq!(quarantined.len(), 1);
    assert_eq!(&quarantined[0].operation_id, op.id());
    assert!(
        quarantined[0].error.contains("last_result"),
        "{quarantined:?}"
    );

    // Counted, and exported: never hidden.
    let (counts, _) = export(&drill);
    assert_eq!(counts.quarantined(), 1);
    assert_eq!(counts.get(State::Unknown), Some(0), "in no state's count");
    assert_eq!(
        recorder.get("recoverable_write_quarantined_operations", ""),
        Some(1.0)
    );
    assert_eq!(
        recorder.get("recoverable_write_operations", "state=UNKNOWN"),
        Some(0.0)
    );

    // Recovery skips it: no lookup, no send.
    let lookups = drill.vendor.lookups_received();
    runtime.block_on(async {
        for _ in 0..5 {
            drill.recoverer.run_once().await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert_eq!(drill.vendor.lookups_received(), lookups);
    assert_eq!(drill.vendor.posts_received(), 1);

    // Every worker now runs the version that reads it (here: the value it knows).
    sql("last_result = NULL");
    let row = runtime.block_on(async {
        let reviews = drill.rw.reviews();
        let aside = reviews
            .quarantine_package(op.tenant(), op.id())
            .await
            .unwrap()
            .expect("still quarantined until released");
        assert!(aside.readable);
        let version = aside.version.unwrap();
        let released = reviews
            .release_quarantined(
                op.tenant(),
                op.id(),
                "alice",
                "0.4 on every worker",
                version,
            )
            .await
            .unwrap();
        assert_eq!(released.version, version + 1);
        let log = drill.evidence(op.id()).await;
        let last = log.last().unwrap();
        assert_eq!(&*last.entry.kind, "quarantine_released");
        assert_eq!(
            last.entry.note.as_deref(),
            Some(
                format!(
                    "released from quarantine by alice; version {version} -> {}; reason: 0.4 on \
                     every worker",
                    version + 1
                )
                .as_str()
            )
        );
        drill
            .recover_until(op.id(), |r| r.state == State::Succeeded)
            .await
    });
    assert!(
        row.remote_ref.is_some(),
        "the lookup found the vendor's ticket"
    );
    let (counts, _) = export(&drill);
    assert_eq!(counts.quarantined(), 0);
    assert_eq!(
        recorder.get("recoverable_write_quarantined_operations", ""),
        Some(0.0)
    );
    assert_eq!(drill.vendor.tickets_created(), 1, "never created twice");
    assert_eq!(drill.vendor.posts_received(), 1);
}

/// Logs every write the layer and the engine make, with how it is committed and how many
/// creates the vendor had received at that moment, then delegates to a SQLite ledger.
#[derive(Debug)]
struct Commits {
    inner: recoverable_write::SqliteLedger,
    vendor: FakeVendor,
    /// (durable, evidence kind, the vendor's POSTs so far) per write.
    log: std::sync::Mutex<Vec<(bool, String, u64)>>,
}

impl Commits {
    fn note(&self, durable: bool, kind: &str) {
        self.log
            .lock()
            .unwrap()
            .push((durable, kind.to_owned(), self.vendor.posts_received()));
    }
}

impl ForwardingLedger for Commits {
    fn inner(&self) -> &dyn FullLedger {
        &self.inner
    }

    fn around<'a, T, F>(&'a self, call: LedgerCall, f: F) -> BoxFuture<'a, Result<T, LedgerError>>
    where
        T: Send + 'a,
        F: FnOnce(&'a dyn FullLedger) -> BoxFuture<'a, Result<T, LedgerError>> + Send + 'a,
    {
        // `apply` and `record` are logged with their evidence below; every other write of
        // these (creates, claims, sweeps) is durable.
        if call.writes() {
            self.note(true, &format!("{call:?}"));
        }
        f(&self.inner)
    }

    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        self.note(true, &update.evidence().kind);
        self.inner.apply(update)
    }

    fn record(
        &self,
        update: Update,
    ) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        self.note(false, &update.evidence().kind);
        self.inner.record(update)
    }
}

/// The one durability rule, applied to recovery: what a lookup found lets no byte leave, so it
/// is committed without waiting for the disk (SQLite: no fsync of its own); every send, the
/// engine's replay included, follows a durable claim. A lookup says nothing, so the engine
/// takes the contract's same-key replay; the vendor dedupes it and keeps one ticket.
#[tokio::test]
async fn a_lookup_commits_without_an_fsync_and_every_send_follows_a_durable_claim() {
    let vendor = FakeVendor::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ledger = Arc::new(Commits {
        inner: recoverable_write::SqliteLedger::open(dir.path().join("ledger.db"))
            .await
            .expect("open"),
        vendor: vendor.clone(),
        log: std::sync::Mutex::default(),
    });
    let drill = Drill::with_ledger(
        vendor,
        ledger.clone(),
        DrillOptions {
            contract: replay_safe_contract(),
            ..DrillOptions::default()
        },
    );
    let op = new_op("intent-lookup-durability");
    drill.vendor.faults().drop_after_commit(1);
    drill.vendor.faults().lookup_not_found(1);
    let _ = send(&mut drill.writer(), drill.ticket_request(&op, "E17")).await;
    let relaxed_before = ledger.inner.relaxed_commits();

    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(
        drill.vendor.posts_received(),
        2,
        "the first send and one replay"
    );
    assert_eq!(drill.vendor.tickets_created(), 1);

    let log = ledger.log.lock().unwrap().clone();
    let lookups: Vec<_> = log.iter().filter(|(_, k, _)| k == "lookup").collect();
    assert!(!lookups.is_empty(), "{log:?}");
    assert!(
        lookups.iter().all(|(durable, _, _)| !durable),
        "a lookup's finding is committed without waiting for the disk: {log:?}"
    );
    assert!(
        ledger.inner.relaxed_commits() > relaxed_before,
        "SQLite committed it without an fsync"
    );
    // Each time the vendor's count of creates went up, the write just before was durable:
    // the claim that let those bytes leave.
    for pair in log.windows(2) {
        let ((durable, kind, posts), (_, _, later)) = (&pair[0], &pair[1]);
        if later > posts {
            assert!(
                durable,
                "a send followed {kind:?}, which was not durable: {log:?}"
            );
        }
    }
    let last = log.last().expect("writes");
    assert_eq!(last.2, 2, "both sends are in the log: {log:?}");
    assert!(
        log.iter()
            .any(|(durable, k, _)| *durable && k == "replay_safe"),
        "{log:?}"
    );
}
