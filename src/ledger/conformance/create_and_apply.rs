//! Checks of `create_and_apply`, the first send's claim in one step with the new row: it creates
//! and claims, leaves an existing operation untouched, refuses an update of another operation,
//! and of concurrent callers for one intent exactly one sends.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::fixtures::{T0, keep, new_operation, update_of};
use super::helpers::{apply_ok, create, first_claim, get, kinds, log, must};
use crate::ledger::{Created, Ledger, LedgerError, NewOperation};
use crate::operation::{Generation, OperationId};
use crate::state::{Event, State, Tick, transition};

/// `create_and_apply` stores the row and applies the claim in one step: the row comes back
/// `IN_FLIGHT` at generation 1, version 1, exactly as `create_or_get` then `apply` of the same
/// update leaves another operation, and the log holds `created` then `attempt_registered`.
pub async fn create_and_apply_creates_and_claims_in_one_step<L: Ledger>(ledger: L) {
    let now = T0 + 10;
    let new = new_operation("tenant-a", "op-one-step", "intent-one-step");
    let (attempt, first) = first_claim(&new, now, "one step");
    let row = match must(
        ledger.create_and_apply(new.clone(), first).await,
        "create_and_apply",
    ) {
        Created::New(r) => r,
        Created::Existing(r) => panic!("expected a new operation, got existing {}", r.operation_id),
    };
    assert_eq!(row.state, State::InFlight);
    assert_eq!(row.generation, Generation(1));
    assert_eq!(row.version, 1);
    assert_eq!(row.attempts_used, 1);
    assert_eq!(row.current_attempt, Some(attempt));
    assert_eq!(row.created_ms, T0);
    assert_eq!(row.updated_ms, now);
    assert_eq!(row.request, new.request);
    assert_eq!(row.idempotency_key, new.idempotency_key);
    assert_eq!(&get(&ledger, &row).await, &row);

    // The two-step path on a twin operation gives the same row, field for field.
    let twin = NewOperation {
        operation_id: OperationId::new("op-two-steps"),
        intent_ref: "intent-two-steps".into(),
        ..new.clone()
    };
    let (_, twin_first) = first_claim(&twin, now, "two steps");
    let created = create(&ledger, twin.clone()).await;
    let mut two_steps = apply_ok(
        &ledger,
        created.update_for(
            &match transition(
                &created.snapshot(),
                &Event::ClaimSend,
                Tick {
                    now_ms: now,
                    jitter: 0.5,
                },
            ) {
                Ok(t) => t,
                Err(e) => panic!("claim send refused: {e}"),
            },
            twin_first.changes.current_attempt,
            twin_first.changes.lease_until_ms,
            None,
            twin_first.evidence.clone(),
            now,
        ),
    )
    .await;
    assert_eq!(two_steps.operation_id, twin.operation_id);
    two_steps.operation_id = row.operation_id.clone();
    two_steps.intent_ref = row.intent_ref.clone();
    two_steps.current_attempt = row.current_attempt;
    assert_eq!(
        two_steps, row,
        "one step and two steps must store the same row"
    );

    let entries = log(&ledger, &row).await;
    assert_eq!(kinds(&entries), ["created", "attempt_registered"]);
    assert!(entries[0].seq < entries[1].seq);
    assert_eq!(entries[1].entry.attempt_id, Some(attempt));
    assert_eq!(entries[1].entry.generation, Generation(1));
    assert_eq!(entries[1].entry.from_state, Some(State::Prepared));
    assert_eq!(entries[1].entry.to_state, Some(State::InFlight));
    assert_eq!(entries[1].entry.note.as_deref(), Some("one step"));
}

/// An operation that exists (by id, or by intent under another id) comes back untouched as
/// `Existing`: the claim is not applied and no evidence is added.
pub async fn create_and_apply_returns_an_existing_operation_untouched<L: Ledger>(ledger: L) {
    let new = new_operation("tenant-a", "op-exists", "intent-exists");
    let stored = create(&ledger, new.clone()).await;

    let (_, first) = first_claim(&new, T0 + 10, "same id");
    match must(
        ledger.create_and_apply(new.clone(), first).await,
        "create_and_apply",
    ) {
        Created::Existing(r) => assert_eq!(r, stored),
        Created::New(r) => panic!("an existing id was created again: {:?}", r.state),
    }

    let same_intent = NewOperation {
        operation_id: OperationId::new("op-other-id"),
        ..new.clone()
    };
    let (_, first) = first_claim(&same_intent, T0 + 20, "same intent");
    match must(
        ledger.create_and_apply(same_intent.clone(), first).await,
        "create_and_apply",
    ) {
        Created::Existing(r) => assert_eq!(r, stored),
        Created::New(r) => panic!("an existing intent was created again: {:?}", r.state),
    }
    assert_eq!(get(&ledger, &stored).await, stored);
    assert_eq!(kinds(&log(&ledger, &stored).await), ["created"]);
    assert_eq!(
        must(
            ledger
                .get(&same_intent.tenant, &same_intent.operation_id)
                .await,
            "get"
        ),
        None
    );
}

/// A `first` update naming another operation, or not expecting a fresh row, is a configuration
/// error and nothing is stored.
pub async fn create_and_apply_refuses_an_update_of_another_operation<L: Ledger>(ledger: L) {
    let new = new_operation("tenant-a", "op-mismatch", "intent-mismatch");
    let other = new_operation("tenant-a", "op-elsewhere", "intent-elsewhere");
    let (_, first) = first_claim(&other, T0 + 10, "wrong operation");
    match ledger.create_and_apply(new.clone(), first).await {
        Err(LedgerError::Config(_)) => {}
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let (_, mut stale) = first_claim(&new, T0 + 10, "stale expectation");
    stale.expect_version = 3;
    match ledger.create_and_apply(new.clone(), stale).await {
        Err(LedgerError::Config(_)) => {}
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert_eq!(
        must(ledger.get(&new.tenant, &new.operation_id).await, "get"),
        None
    );
}

/// 16 callers create and claim the same intent at once, each with its own operation id: one
/// row, one caller got it `New` and `IN_FLIGHT` (the one sender), everyone else got that row
/// as `Existing`, and the log has one `created` and one `attempt_registered`.
pub async fn concurrent_create_and_apply_of_one_intent_has_one_sender<L: Ledger>(ledger: L) {
    const CALLERS: usize = 16;
    let ledger = Arc::new(ledger);
    let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let mut tasks = Vec::with_capacity(CALLERS);
    for i in 0..CALLERS {
        let (ledger, barrier) = (ledger.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let new = new_operation("tenant-a", &format!("op-racer-{i}"), "intent-shared");
            let (attempt, first) = first_claim(&new, T0 + 10, "racer");
            barrier.wait().await;
            (
                attempt,
                must(
                    ledger.create_and_apply(new, first).await,
                    "create_and_apply",
                ),
            )
        }));
    }
    let mut senders = Vec::new();
    let mut seen = BTreeSet::new();
    for task in tasks {
        match task.await {
            Ok((attempt, Created::New(r))) => {
                assert_eq!(r.current_attempt, Some(attempt));
                seen.insert(r.operation_id.to_string());
                senders.push(r);
            }
            Ok((_, Created::Existing(r))) => {
                seen.insert(r.operation_id.to_string());
            }
            Err(e) => panic!("caller task failed: {e}"),
        }
    }
    assert_eq!(senders.len(), 1, "exactly one caller may create and claim");
    assert_eq!(seen.len(), 1, "every caller must see the one row");
    let row = get(&*ledger, &senders[0]).await;
    assert_eq!(row.state, State::InFlight);
    assert_eq!(row.generation, Generation(1));
    assert_eq!(
        kinds(&log(&*ledger, &row).await),
        ["created", "attempt_registered"]
    );
}

/// The write path under load: 64 callers at once, 48 with intents of their own and 16 racing
/// one of those intents under another id, each creating and claiming, then recording its
/// result twice at once: once as read (applies) and once from a stale version (refused). A
/// backend that writes concurrent requests together (group commit) must keep each one's own
/// outcome: 48 rows, each `New` to exactly one caller and `Existing` to its racer, each
/// `SUCCEEDED` at version 2 with exactly `created`, `attempt_registered`, `attempt_result`.
pub async fn concurrent_claims_and_results_keep_their_own_semantics<L: Ledger>(ledger: L) {
    const OWN: usize = 48;
    const RACERS: usize = 16;
    let ledger = Arc::new(ledger);
    let barrier = Arc::new(tokio::sync::Barrier::new(OWN + RACERS));
    let mut tasks = Vec::with_capacity(OWN + RACERS);
    for i in 0..OWN + RACERS {
        let (ledger, barrier) = (ledger.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let intent = format!("intent-load-{}", i % OWN);
            let new = new_operation("tenant-a", &format!("op-load-{i}"), &intent);
            let (attempt, first) = first_claim(&new, T0 + 10, "load");
            barrier.wait().await;
            let r = match must(
                ledger.create_and_apply(new, first).await,
                "create_and_apply",
            ) {
                Created::New(r) => r,
                Created::Existing(r) => return (intent, false, r),
            };
            assert_eq!(r.current_attempt, Some(attempt));
            assert_eq!((r.state, r.version), (State::InFlight, 1));
            let mut stale = r.clone();
            stale.version = 7;
            let (fresh, old) = tokio::join!(
                ledger.record_unread(update_of(
                    &r,
                    keep(&r, State::Succeeded, T0 + 20),
                    "attempt_result",
                )),
                ledger.record_unread(update_of(
                    &stale,
                    keep(&stale, State::Rejected, T0 + 20),
                    "attempt_result",
                )),
            );
            assert!(
                !matches!(must(fresh, "record_unread"), crate::ledger::Recorded::Stale),
                "the result as read must apply"
            );
            assert!(
                matches!(must(old, "record_unread"), crate::ledger::Recorded::Stale),
                "a result from a stale version must change nothing"
            );
            (intent, true, r)
        }));
    }
    let mut by_intent: std::collections::BTreeMap<String, (usize, BTreeSet<String>)> =
        std::collections::BTreeMap::new();
    for task in tasks {
        let (intent, new, r) = match task.await {
            Ok(done) => done,
            Err(e) => panic!("caller task failed: {e}"),
        };
        let seen = by_intent.entry(intent).or_default();
        seen.0 += usize::from(new);
        seen.1.insert(r.operation_id.to_string());
    }
    assert_eq!(by_intent.len(), OWN);
    for (intent, (senders, ids)) in &by_intent {
        assert_eq!(
            *senders, 1,
            "{intent}: exactly one caller may create and claim"
        );
        assert_eq!(ids.len(), 1, "{intent}: every caller must see the one row");
        let id = OperationId::new(ids.first().expect("one id").as_str());
        let tenant = crate::operation::Tenant::new("tenant-a");
        let row = must(ledger.get(&tenant, &id).await, "get").expect("the row");
        assert_eq!((row.state, row.version), (State::Succeeded, 2), "{intent}");
        assert_eq!(
            kinds(&log(&*ledger, &row).await),
            ["created", "attempt_registered", "attempt_result"],
            "{intent}"
        );
    }
}
