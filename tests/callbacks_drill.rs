//! Drill D29 and issue 13: vendor callbacks resolve operations, verified and deduplicated.
//!
//! Every test drives a real write against the fake vendor (a lost response leaves the operation
//! `UNKNOWN`), then delivers signed callbacks built from the vendor's own ticket, and checks the
//! ledger (state, evidence, dedupe, quarantine) and the vendor's side effects.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use recoverable_write::callbacks::{
    AccountTenants, CALLBACK_KIND, CallbackMapping, CallbackReceiver, DeliveryOutcome, Secret,
    StripeSignature,
};
use recoverable_write::contradiction::{CONTRADICTION, Contradiction};
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::conformance::new_operation;
use recoverable_write::ledger::{
    BoxFuture, Ledger, LedgerError, OperationQuery, OperationRecord, TenantScope,
};
use recoverable_write::review::ReviewError;
use recoverable_write::testing::callbacks::{
    CallbackSender, Schedule, SignedDelivery, Signer, ticket_event, ticket_mapping,
};
use recoverable_write::testing::{
    FakeVendor, ForwardingLedger, LedgerCall, OperationStatus, Ticket,
};
use recoverable_write::{
    Error, Evidence, Handle, MemoryLedger, Notice, Operation, RecoverableWrite, SendOnceGuardLayer,
    SqliteLedger, State,
};
use tower::ServiceBuilder;

const SECRET: &str = "whsec_drill_endpoint_secret";

struct Setup {
    vendor: FakeVendor,
    rw: Handle<std::sync::Arc<dyn FullLedger>>,
    receiver: CallbackReceiver,
    signer: Signer,
}

async fn setup(ledger: impl FullLedger) -> Setup {
    let vendor = FakeVendor::start().await;
    let rw =
        RecoverableWrite::builder(std::sync::Arc::new(ledger) as std::sync::Arc<dyn FullLedger>)
            .budget(fast_policy())
            .build()
            .expect("valid configuration");
    // The fake vendor's events carry the tenant as the account.
    let accounts = AccountTenants::default()
        .account(TENANT, TENANT)
        .account("tenant-b", "tenant-b");
    let receiver = CallbackReceiver::new(
        &rw,
        ticket_mapping(),
        StripeSignature::new(Secret::new(SECRET).unwrap()),
        accounts,
    );
    Setup {
        vendor,
        rw,
        receiver,
        signer: Signer::stripe(Secret::new(SECRET).unwrap()),
    }
}

/// A write whose response is lost after the vendor committed it: `UNKNOWN`, one ticket.
async fn lost_write(s: &Setup, intent: &str) -> Operation {
    let svc = ServiceBuilder::new()
        .layer(s.rw.layer())
        .layer(SendOnceGuardLayer::new())
        .service(http_client());
    let op = new_op(intent);
    s.vendor.faults().drop_after_commit(1);
    let err = tower::ServiceExt::oneshot(svc, ticket_request(&s.vendor, &op, "E17"))
        .await
        .expect_err("the response is lost");
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");
    assert_eq!(state_of(s, &op).await, State::Unknown);
    op
}

async fn state_of(s: &Setup, op: &Operation) -> State {
    s.rw.ledger()
        .get(op.tenant(), op.id())
        .await
        .unwrap()
        .expect("row")
        .state
}

fn ticket_of(s: &Setup, op: &Operation) -> recoverable_write::testing::Ticket {
    s.vendor
        .tickets()
        .into_iter()
        .find(|t| t.operation_id.as_deref() == Some(op.id().as_str()))
        .expect("the vendor created the ticket")
}

fn signed(s: &Setup, event_id: &str, event: serde_json::Value) -> SignedDelivery {
    s.signer.sign(event_id, &event, SystemTime::now())
}

async fn deliver(s: &Setup, d: &SignedDelivery) -> recoverable_write::callbacks::Receipt {
    s.receiver.receive(&d.headers, &d.body).await
}

async fn callback_entries(s: &Setup, op: &Operation) -> usize {
    s.rw.ledger()
        .evidence(op.tenant(), op.id())
        .await
        .unwrap()
        .iter()
        .filter(|e| e.entry.kind == CALLBACK_KIND)
        .count()
}

async fn d29_two_deliveries_one_change(ledger: impl FullLedger) {
    let s = setup(ledger).await;
    let op = lost_write(&s, "intent-d29-dup").await;
    let ticket = ticket_of(&s, &op);
    let d = signed(
        &s,
        "evt_1",
        ticket_event("evt_1", "ticket.created", &ticket),
    );

    let first = deliver(&s, &d).await;
    assert_eq!(first.status, http::StatusCode::OK);
    assert_eq!(
        first.outcomes,
        vec![DeliveryOutcome::Applied {
            operation_id: op.id().clone()
        }]
    );
    let second = deliver(&s, &d).await;
    assert_eq!(second.status, http::StatusCode::OK);
    assert_eq!(second.outcomes, vec![DeliveryOutcome::Duplicate]);

    let row =
        s.rw.ledger()
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref.as_deref(), Some(ticket.id.as_str()));
    assert_eq!(
        callback_entries(&s, &op).await,
        1,
        "one state change, one entry"
    );
    // Resolved by the callback before any lookup ran; the write happened once.
    assert_eq!(s.vendor.tickets_created(), 1);
    assert_eq!(s.vendor.posts_received(), 1);
    assert_eq!(s.vendor.lookups_received(), 0);
}

#[tokio::test]
async fn d29_two_deliveries_of_one_event_change_the_operation_once_memory() {
    d29_two_deliveries_one_change(MemoryLedger::new()).await;
}

#[tokio::test]
async fn d29_two_deliveries_of_one_event_change_the_operation_once_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("ops.db")).await.unwrap();
    d29_two_deliveries_one_change(ledger).await;
}

#[tokio::test]
async fn d29_a_callback_for_an_unknown_operation_is_quarantined() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-d29-unknown").await;
    let mut ticket = ticket_of(&s, &op);
    ticket.operation_id = Some("op-nobody-made".into());
    ticket.idempotency_key = Some("key-nobody-sent".into());
    ticket.id = "W999".into();
    let d = signed(
        &s,
        "evt_u",
        ticket_event("evt_u", "ticket.created", &ticket),
    );

    let receipt = deliver(&s, &d).await;
    assert_eq!(
        receipt.status,
        http::StatusCode::OK,
        "accepted into quarantine"
    );
    assert!(
        matches!(&receipt.outcomes[..], [DeliveryOutcome::Quarantined { .. }]),
        "{receipt:?}"
    );
    // Redelivered: stored once.
    assert_eq!(
        deliver(&s, &d).await.outcomes,
        vec![DeliveryOutcome::Duplicate]
    );
    let quarantined =
        s.rw.ledger()
            .quarantined_callbacks(&TenantScope::AllTenants, 10)
            .await
            .unwrap();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0].event_id, "evt_u");
    assert_eq!(
        quarantined[0].match_value.as_deref(),
        Some("key-nobody-sent")
    );
    // Nothing changed: the real operation is still UNKNOWN, with no callback entry.
    assert_eq!(state_of(&s, &op).await, State::Unknown);
    assert_eq!(callback_entries(&s, &op).await, 0);
    assert_eq!(s.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn d29_a_foreign_tenants_callback_is_quarantined_never_applied() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-d29-foreign").await;
    let mut ticket = ticket_of(&s, &op);
    // Tenant B's account names tenant A's operation (by id, its key removed).
    ticket.tenant = "tenant-b".into();
    ticket.idempotency_key = None;
    let d = signed(
        &s,
        "evt_f",
        ticket_event("evt_f", "ticket.created", &ticket),
    );

    let receipt = deliver(&s, &d).await;
    assert_eq!(receipt.status, http::StatusCode::OK);
    match &receipt.outcomes[..] {
        [DeliveryOutcome::Quarantined { why }] => {
            assert!(why.contains("another tenant"), "{why}")
        }
        other => panic!("expected quarantine, got {other:?}"),
    }
    assert_eq!(state_of(&s, &op).await, State::Unknown);
    assert_eq!(callback_entries(&s, &op).await, 0);
    let quarantined =
        s.rw.ledger()
            .quarantined_callbacks(&TenantScope::AllTenants, 10)
            .await
            .unwrap();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(
        quarantined[0].tenant.as_ref().map(|t| t.as_str()),
        Some("tenant-b")
    );
}

#[tokio::test]
async fn a_forged_signature_changes_nothing_and_a_genuine_one_still_applies() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-forged").await;
    let ticket = ticket_of(&s, &op);
    let event = ticket_event("evt_g", "ticket.created", &ticket);
    let attacker = Secret::new("whsec_attacker_secret").unwrap();
    let forged = Signer::stripe(attacker).sign("evt_g", &event, SystemTime::now());

    let receipt = deliver(&s, &forged).await;
    assert_eq!(receipt.status, http::StatusCode::UNAUTHORIZED);
    assert!(matches!(
        &receipt.outcomes[..],
        [DeliveryOutcome::Unverified { .. }]
    ));
    assert_eq!(state_of(&s, &op).await, State::Unknown);
    assert!(
        s.rw.ledger()
            .quarantined_callbacks(&TenantScope::AllTenants, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // The forgery recorded nothing: the genuine delivery of the same event id applies.
    let genuine = signed(&s, "evt_g", event);
    assert!(matches!(
        &deliver(&s, &genuine).await.outcomes[..],
        [DeliveryOutcome::Applied { .. }]
    ));
    assert_eq!(state_of(&s, &op).await, State::Succeeded);
}

#[tokio::test]
async fn a_replayed_old_timestamp_is_refused() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-replay").await;
    let ticket = ticket_of(&s, &op);
    let event = ticket_event("evt_old", "ticket.created", &ticket);
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let replayed = s.signer.sign("evt_old", &event, an_hour_ago);

    let receipt = deliver(&s, &replayed).await;
    assert_eq!(receipt.status, http::StatusCode::UNAUTHORIZED);
    assert!(matches!(
        &receipt.outcomes[..],
        [DeliveryOutcome::Unverified { .. }]
    ));
    assert_eq!(state_of(&s, &op).await, State::Unknown);
    assert_eq!(callback_entries(&s, &op).await, 0);
}

#[tokio::test]
async fn succeeded_then_a_late_processing_leaves_it_succeeded() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-late").await;
    let ticket = ticket_of(&s, &op);
    let created = signed(
        &s,
        "evt_a",
        ticket_event("evt_a", "ticket.created", &ticket),
    );
    let mut processing_ticket = ticket.clone();
    processing_ticket.status = recoverable_write::testing::OperationStatus::Processing;
    let processing = signed(
        &s,
        "evt_b",
        ticket_event("evt_b", "ticket.updated", &processing_ticket),
    );
    let mut notices = s.rw.notifications().subscribe();

    assert!(matches!(
        &deliver(&s, &created).await.outcomes[..],
        [DeliveryOutcome::Applied { .. }]
    ));
    let late = deliver(&s, &processing).await;
    assert_eq!(late.status, http::StatusCode::OK);
    assert_eq!(
        late.outcomes,
        vec![DeliveryOutcome::Late {
            operation_id: op.id().clone()
        }]
    );
    assert_eq!(state_of(&s, &op).await, State::Succeeded);
    let log = s.rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert_eq!(
        log.iter()
            .filter(|e| e.entry.kind == "late_evidence")
            .count(),
        1
    );
    // Surfaced to subscribers (reviewers, waiting callers).
    let mut saw_late = false;
    while let Ok(n) = notices.try_recv() {
        saw_late |= matches!(n, recoverable_write::Notice::LateEvidence { .. });
    }
    assert!(saw_late, "late evidence is published");
    assert_eq!(s.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn reordered_and_duplicated_deliveries_over_http_change_the_operation_once() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-http").await;
    let ticket = ticket_of(&s, &op);
    let mut processing_ticket = ticket.clone();
    processing_ticket.status = recoverable_write::testing::OperationStatus::Processing;
    let deliveries = vec![
        signed(
            &s,
            "evt_1",
            ticket_event("evt_1", "ticket.created", &ticket),
        ),
        signed(
            &s,
            "evt_0",
            ticket_event("evt_0", "ticket.updated", &processing_ticket),
        ),
    ];
    // Mounted in an axum app, served over real TCP.
    let app = axum::Router::new().nest("/webhooks/tickets", s.receiver.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://{addr}/webhooks/tickets");

    // The processing event overtakes the success (reordered), and each is sent three times.
    let schedule = Schedule::new().reorder().duplicate(2);
    let statuses = CallbackSender::new()
        .send_all(&url, deliveries, &schedule)
        .await;
    assert_eq!(statuses.len(), 6);
    assert!(
        statuses
            .iter()
            .all(|s| s.as_ref().is_ok_and(|c| c.is_success())),
        "{statuses:?}"
    );
    server.abort();

    let row =
        s.rw.ledger()
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(row.state, State::Succeeded, "never moved backwards");
    assert_eq!(row.remote_ref.as_deref(), Some(ticket.id.as_str()));
    let log = s.rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    // processing (applied: UNKNOWN -> PROCESSING), then succeeded (applied); duplicates nothing.
    assert_eq!(
        log.iter().filter(|e| e.entry.kind == CALLBACK_KIND).count(),
        2
    );
    assert_eq!(s.vendor.tickets_created(), 1);
    assert_eq!(s.vendor.posts_received(), 1);
}

#[tokio::test]
async fn a_callback_for_an_operation_in_review_is_appended_for_the_reviewer_not_acted_on() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-review").await;
    let reviews = s.rw.reviews();
    let package = reviews.handoff(op.tenant(), op.id()).await.unwrap();
    reviews
        .claim_with_reason(
            op.tenant(),
            op.id(),
            "alice",
            "checking the console",
            package.version,
        )
        .await
        .expect("claim");
    let ticket = ticket_of(&s, &op);
    let d = signed(
        &s,
        "evt_r",
        ticket_event("evt_r", "ticket.created", &ticket),
    );

    let receipt = deliver(&s, &d).await;
    assert_eq!(
        receipt.outcomes,
        vec![DeliveryOutcome::Late {
            operation_id: op.id().clone()
        }]
    );
    let row =
        s.rw.ledger()
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(row.state, State::ManualReview, "a person decides");
    let package = reviews.handoff(op.tenant(), op.id()).await.unwrap();
    assert!(
        package.evidence.iter().any(|e| e.kind == "late_evidence"
            && matches!(
                e.evidence,
                Some(recoverable_write::Evidence::Succeeded { .. })
            )),
        "the reviewer sees it: {:?}",
        package.evidence
    );
    assert_eq!(s.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn an_unmapped_account_is_quarantined() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-account").await;
    let mut ticket = ticket_of(&s, &op);
    ticket.tenant = "acct_unknown".into();
    let d = signed(
        &s,
        "evt_acct",
        ticket_event("evt_acct", "ticket.created", &ticket),
    );
    let receipt = deliver(&s, &d).await;
    assert!(
        matches!(&receipt.outcomes[..], [DeliveryOutcome::Quarantined { why }] if why.contains("account")),
        "{receipt:?}"
    );
    assert_eq!(state_of(&s, &op).await, State::Unknown);
}

/// Issue 13 item 5: quarantined callbacks are visible in the operators' command line.
#[cfg(feature = "cli")]
#[tokio::test]
async fn quarantined_callbacks_are_listed_by_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let s = setup(SqliteLedger::open(&path).await.unwrap()).await;
    let op = lost_write(&s, "intent-cli-quarantine").await;
    let mut ticket = ticket_of(&s, &op);
    ticket.operation_id = Some("op-nobody-made".into());
    ticket.idempotency_key = None;
    ticket.id = "W404".into();
    let d = signed(
        &s,
        "evt_q",
        ticket_event("evt_q", "ticket.created", &ticket),
    );
    assert!(matches!(
        &deliver(&s, &d).await.outcomes[..],
        [DeliveryOutcome::Quarantined { .. }]
    ));

    let run = |scope: &[&str]| {
        let mut args = vec!["--ledger".to_owned(), format!("sqlite:{}", path.display())];
        args.extend(scope.iter().map(|s| (*s).to_owned()));
        args.extend(["--json".to_owned(), "quarantine".to_owned()]);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_recoverable-write"))
            .args(&args)
            .output()
            .expect("run the CLI");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains(SECRET), "never the signing secret");
        serde_json::from_str::<serde_json::Value>(&text).expect("json")
    };
    let all = run(&["--all-tenants"]);
    let callbacks = all["callbacks"].as_array().expect("callbacks");
    assert_eq!(callbacks.len(), 1, "{all}");
    assert_eq!(callbacks[0]["event_id"], "evt_q");
    assert_eq!(callbacks[0]["match_value"], "op-nobody-made");
    assert_eq!(callbacks[0]["evidence"], "succeeded");
    // Scoped to the tenant its account maps to, and to no other.
    let mine = run(&["--tenant", TENANT]);
    assert_eq!(mine["callbacks"].as_array().unwrap().len(), 1);
    let other = run(&["--tenant", "tenant-b"]);
    assert!(other["callbacks"].as_array().unwrap().is_empty());
}

// ── issue 27: callbacks read as final only where the vendor says so ─────────────────────────────

/// A setup whose receiver reads the vendor's events with `mapping` (the accounts and secret of
/// [`setup`]).
async fn setup_with(ledger: impl FullLedger, mapping: CallbackMapping) -> Setup {
    let mut s = setup(ledger).await;
    s.receiver = CallbackReceiver::new(
        &s.rw,
        mapping,
        StripeSignature::new(Secret::new(SECRET).unwrap()),
        AccountTenants::default()
            .account(TENANT, TENANT)
            .account("tenant-b", "tenant-b"),
    );
    s
}

fn with_status(ticket: &Ticket, status: OperationStatus) -> Ticket {
    let mut t = ticket.clone();
    t.status = status;
    t
}

async fn row_of(s: &Setup, op: &Operation) -> OperationRecord {
    s.rw.ledger()
        .get(op.tenant(), op.id())
        .await
        .unwrap()
        .expect("row")
}

/// Item 5: a refusal the vendor does not document as final (Adyen's `success=false`, Stripe's
/// `payment_intent.payment_failed`) must not make the write `REJECTED`: the application would
/// write again under a new intent and, when the first write succeeds after all, pay twice. Read
/// as inconclusive, it leaves the operation open, and the later success resolves it.
#[tokio::test]
async fn a_refusal_the_vendor_does_not_make_final_leaves_the_write_open_for_the_later_success() {
    let mut mapping = ticket_mapping();
    // The vendor may still report another outcome for a refused ticket: not final.
    mapping.inconclusive = std::mem::take(&mut mapping.rejected);
    let s = setup_with(MemoryLedger::new(), mapping).await;
    let op = lost_write(&s, "intent-27-5-refusal").await;
    let ticket = ticket_of(&s, &op);

    let refused = signed(
        &s,
        "evt_refused",
        ticket_event(
            "evt_refused",
            "ticket.updated",
            &with_status(&ticket, OperationStatus::Rejected),
        ),
    );
    let receipt = deliver(&s, &refused).await;
    assert_eq!(receipt.status, http::StatusCode::OK);
    let row = row_of(&s, &op).await;
    assert_eq!(
        row.state,
        State::Unknown,
        "a refusal that is not final proves nothing"
    );
    let log = s.rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    assert!(
        log.iter().any(|e| e.entry.kind == CALLBACK_KIND
            && matches!(&e.entry.evidence, Some(Evidence::Unknown { why, .. }) if why.contains("REJECTED"))),
        "the refusal is recorded for the reviewer: {log:?}"
    );

    let succeeded = signed(
        &s,
        "evt_ok",
        ticket_event("evt_ok", "ticket.created", &ticket),
    );
    assert_eq!(
        deliver(&s, &succeeded).await.outcomes,
        vec![DeliveryOutcome::Applied {
            operation_id: op.id().clone()
        }]
    );
    let row = row_of(&s, &op).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref.as_deref(), Some(ticket.id.as_str()));
    assert_eq!(row.contradiction_ms, None);
    assert_eq!(s.vendor.tickets_created(), 1);
    assert_eq!(s.vendor.posts_received(), 1);
}

/// Item 5: a success after a final rejection cannot change the operation (the caller was told
/// it had no effect), and must not be a silent line either: a notice, a `contradiction` entry,
/// a mark that lists the operation in the review queue until a person acknowledges it.
#[tokio::test]
async fn a_success_after_a_final_rejection_raises_an_alarm_until_acknowledged() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-27-5-contra").await;
    let ticket = ticket_of(&s, &op);
    let rejected = signed(
        &s,
        "evt_rej",
        ticket_event(
            "evt_rej",
            "ticket.updated",
            &with_status(&ticket, OperationStatus::Rejected),
        ),
    );
    deliver(&s, &rejected).await;
    let before = row_of(&s, &op).await;
    assert_eq!(before.state, State::Rejected);
    let mut notices = s.rw.notifications().subscribe();

    let success = signed(
        &s,
        "evt_late_ok",
        ticket_event("evt_late_ok", "ticket.created", &ticket),
    );
    let receipt = deliver(&s, &success).await;
    assert_eq!(receipt.status, http::StatusCode::OK);
    assert_eq!(
        receipt.outcomes,
        vec![DeliveryOutcome::Contradiction {
            operation_id: op.id().clone()
        }]
    );
    let row = row_of(&s, &op).await;
    assert_eq!(row.state, State::Rejected, "a final state stays final");
    assert!(row.contradiction_ms.is_some());
    assert_eq!(row.version, before.version + 1);
    let log = s.rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    let entry = log
        .iter()
        .find(|e| e.entry.kind == CONTRADICTION)
        .expect("a contradiction entry");
    assert!(
        entry
            .entry
            .note
            .as_deref()
            .is_some_and(|n| n.contains("recorded as rejected")),
        "{entry:?}"
    );
    let mut alarms = Vec::new();
    while let Ok(n) = notices.try_recv() {
        if let Notice::Contradiction {
            contradiction,
            source,
            outcome,
            ..
        } = n
        {
            alarms.push((contradiction, source, outcome.state));
        }
    }
    assert_eq!(
        alarms,
        vec![(
            Contradiction::SuccessAfterRejection {
                reported: Some(ticket.id.clone())
            },
            "fake-vendor".to_owned(),
            State::Rejected
        )]
    );
    // In the review queue, whatever else it lists.
    let queue =
        s.rw.ledger()
            .list(&OperationQuery::tenant(op.tenant().clone()).contradicted())
            .await
            .unwrap();
    assert_eq!(queue.rows.len(), 1);
    assert_eq!(&queue.rows[0].operation_id, op.id());
    // Redelivered: a duplicate, no second alarm.
    assert_eq!(
        deliver(&s, &success).await.outcomes,
        vec![DeliveryOutcome::Duplicate]
    );
    assert!(notices.try_recv().is_err());

    let reviews = s.rw.reviews();
    let pkg = reviews.handoff(op.tenant(), op.id()).await.unwrap();
    assert_eq!(pkg.contradiction_ms, row.contradiction_ms);
    let stale = reviews
        .acknowledge_contradiction(op.tenant(), op.id(), "alice", "refunded", before.version)
        .await;
    assert!(
        matches!(stale, Err(ReviewError::VersionMismatch { .. })),
        "{stale:?}"
    );
    let done = reviews
        .acknowledge_contradiction(
            op.tenant(),
            op.id(),
            "alice",
            "checked the vendor console: ticket kept, customer told",
            pkg.version,
        )
        .await
        .expect("acknowledged");
    assert_eq!(done.state, State::Rejected);
    assert_eq!(done.contradiction_ms, None);
    assert!(
        s.rw.ledger()
            .list(&OperationQuery::tenant(op.tenant().clone()).contradicted())
            .await
            .unwrap()
            .rows
            .is_empty()
    );
    let pkg = reviews.handoff(op.tenant(), op.id()).await.unwrap();
    let audit = recoverable_write::operator::audit_trail(&pkg);
    assert!(
        audit.last().is_some_and(
            |a| a.who.as_deref() == Some("alice") && a.action == "contradiction acknowledged"
        ),
        "{audit:?}"
    );
    assert_eq!(s.vendor.tickets_created(), 1);
}

/// Item 5: the vendor naming another object than the one recorded for a succeeded write (two
/// objects for one write: a duplicate?) raises the alarm; the same object again does not.
#[tokio::test]
async fn another_reference_after_a_success_raises_an_alarm_and_the_same_one_does_not() {
    let s = setup(SqliteLedger::in_memory().await.unwrap()).await;
    let op = lost_write(&s, "intent-27-5-ref").await;
    let ticket = ticket_of(&s, &op);
    deliver(
        &s,
        &signed(
            &s,
            "evt_a",
            ticket_event("evt_a", "ticket.created", &ticket),
        ),
    )
    .await;
    assert_eq!(row_of(&s, &op).await.state, State::Succeeded);

    let again = signed(
        &s,
        "evt_a2",
        ticket_event(
            "evt_a2",
            "ticket.updated",
            &with_status(&ticket, OperationStatus::Succeeded),
        ),
    );
    assert_eq!(
        deliver(&s, &again).await.outcomes,
        vec![DeliveryOutcome::Late {
            operation_id: op.id().clone()
        }]
    );
    assert_eq!(row_of(&s, &op).await.contradiction_ms, None);

    let mut other = ticket.clone();
    other.id = "W9999".into();
    let receipt = deliver(
        &s,
        &signed(&s, "evt_b", ticket_event("evt_b", "ticket.created", &other)),
    )
    .await;
    assert_eq!(
        receipt.outcomes,
        vec![DeliveryOutcome::Contradiction {
            operation_id: op.id().clone()
        }]
    );
    let row = row_of(&s, &op).await;
    assert_eq!(row.remote_ref.as_deref(), Some(ticket.id.as_str()), "kept");
    assert!(row.contradiction_ms.is_some());
}

// ── issue 27 item 7: deduplicate first, match through indexes ───────────────────────────────────

/// Records every `Ledger` call, then delegates to a SQLite ledger.
#[derive(Debug)]
struct Recording {
    inner: SqliteLedger,
    calls: std::sync::Mutex<Vec<LedgerCall>>,
}

impl Recording {
    fn take(&self) -> Vec<LedgerCall> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl ForwardingLedger for Recording {
    fn inner(&self) -> &dyn FullLedger {
        &self.inner
    }

    fn around<'a, T, F>(&'a self, call: LedgerCall, f: F) -> BoxFuture<'a, Result<T, LedgerError>>
    where
        T: Send + 'a,
        F: FnOnce(&'a dyn FullLedger) -> BoxFuture<'a, Result<T, LedgerError>> + Send + 'a,
    {
        self.calls.lock().unwrap().push(call);
        f(&self.inner)
    }
}

/// Item 7: an unmatched event is deduplicated before anything is matched, and matched through
/// index probes only (never a listing): its first delivery reads the dedupe key, the operation
/// key, one probe across tenants, and quarantines it; every redelivery (or replay of a captured
/// delivery) reads the dedupe key and nothing else.
#[tokio::test]
async fn an_unmatched_event_costs_index_probes_and_a_redelivery_only_the_dedupe_probe() {
    let recording = std::sync::Arc::new(Recording {
        inner: SqliteLedger::in_memory().await.unwrap(),
        calls: std::sync::Mutex::new(Vec::new()),
    });
    let s = setup(ArcLedger(recording.clone())).await;
    let op = lost_write(&s, "intent-27-7").await;
    let mut ticket = ticket_of(&s, &op);
    ticket.operation_id = Some("op-nobody-made".into());
    ticket.idempotency_key = None;
    ticket.id = "W404".into();
    let d = signed(
        &s,
        "evt_unmatched",
        ticket_event("evt_unmatched", "ticket.created", &ticket),
    );
    recording.take();

    assert!(matches!(
        &deliver(&s, &d).await.outcomes[..],
        [DeliveryOutcome::Quarantined { .. }]
    ));
    assert_eq!(
        recording.take(),
        [
            LedgerCall::CallbackSeen,
            LedgerCall::Get,
            LedgerCall::OtherTenantWith,
            LedgerCall::QuarantineCallback,
        ]
    );
    for _ in 0..3 {
        assert_eq!(
            deliver(&s, &d).await.outcomes,
            vec![DeliveryOutcome::Duplicate]
        );
        assert_eq!(recording.take(), [LedgerCall::CallbackSeen]);
    }

    // Named by the vendor's reference only: the reference's index, then the probe.
    ticket.operation_id = None;
    let by_ref = signed(
        &s,
        "evt_by_ref",
        ticket_event("evt_by_ref", "ticket.created", &ticket),
    );
    assert!(matches!(
        &deliver(&s, &by_ref).await.outcomes[..],
        [DeliveryOutcome::Quarantined { .. }]
    ));
    let calls = recording.take();
    assert_eq!(
        calls,
        [
            LedgerCall::CallbackSeen,
            LedgerCall::FindByRemoteRef,
            LedgerCall::OtherTenantWith,
            LedgerCall::QuarantineCallback,
        ]
    );
    assert!(!calls.contains(&LedgerCall::List));
}

/// A `Ledger` behind an `Arc`, so a test keeps a handle on it while the config owns it.
#[derive(Debug)]
struct ArcLedger(std::sync::Arc<Recording>);

impl ForwardingLedger for ArcLedger {
    fn inner(&self) -> &dyn FullLedger {
        &*self.0
    }
}

// ── issue 27 item 11 ────────────────────────────────────────────────────────────────────────────

/// Item 11: an event of a type the mapping ignores is recorded for deduplication, as the docs
/// say: its redelivery is a duplicate.
#[tokio::test]
async fn an_ignored_event_type_is_recorded_for_deduplication() {
    let s = setup(SqliteLedger::in_memory().await.unwrap()).await;
    let op = lost_write(&s, "intent-27-11-ignored").await;
    let ticket = ticket_of(&s, &op);
    let d = signed(
        &s,
        "evt_comment",
        ticket_event("evt_comment", "ticket.commented", &ticket),
    );
    assert_eq!(
        deliver(&s, &d).await.outcomes,
        vec![DeliveryOutcome::Ignored]
    );
    assert!(
        s.rw.ledger()
            .callback_seen("fake-vendor", "evt_comment")
            .await
            .unwrap()
    );
    assert_eq!(
        deliver(&s, &d).await.outcomes,
        vec![DeliveryOutcome::Duplicate]
    );
    assert_eq!(state_of(&s, &op).await, State::Unknown);
    assert_eq!(callback_entries(&s, &op).await, 0);
}

/// Item 11: an event naming an operation that was never sent (`PREPARED`: bytes leave only
/// after `IN_FLIGHT` is durable) is not about a send of it. It used to be answered 503 for as
/// long as the row waited (forever for an abandoned one); it is quarantined with the reason,
/// answered 200, and the row is left as it is.
#[tokio::test]
async fn an_event_naming_a_never_sent_operation_is_quarantined_not_deferred_forever() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-27-11-prep-donor").await;
    let prepared =
        s.rw.ledger()
            .create_or_get(new_operation(TENANT, "op-never-sent", "intent-27-11-prep"))
            .await
            .unwrap()
            .into_record();
    assert_eq!(prepared.state, State::Prepared);
    let mut ticket = ticket_of(&s, &op);
    ticket.operation_id = Some("op-never-sent".into());
    ticket.idempotency_key = None;
    ticket.id = "W777".into();
    let d = signed(
        &s,
        "evt_prep",
        ticket_event("evt_prep", "ticket.created", &ticket),
    );

    let receipt = deliver(&s, &d).await;
    assert_eq!(receipt.status, http::StatusCode::OK, "{receipt:?}");
    match &receipt.outcomes[..] {
        [DeliveryOutcome::Quarantined { why }] => assert!(why.contains("never sent"), "{why}"),
        other => panic!("expected quarantine, got {other:?}"),
    }
    let row =
        s.rw.ledger()
            .get(&prepared.tenant, &prepared.operation_id)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(row, prepared, "the row is left as it is");
    let quarantined =
        s.rw.ledger()
            .quarantined_callbacks(&TenantScope::AllTenants, 10)
            .await
            .unwrap();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0].match_value.as_deref(), Some("op-never-sent"));
    assert_eq!(
        deliver(&s, &d).await.outcomes,
        vec![DeliveryOutcome::Duplicate]
    );
}

/// Item 11: "processing" callbacks are the vendor's word, not queries: however many arrive,
/// the recovery engine keeps its whole query budget to verify the write.
#[tokio::test]
async fn processing_callbacks_spend_no_query_budget() {
    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-27-11-budget").await;
    let ticket = ticket_of(&s, &op);
    let before = row_of(&s, &op).await;
    let processing = with_status(&ticket, OperationStatus::Processing);
    for i in 0..fast_policy().max_queries + 5 {
        let id = format!("evt_proc_{i}");
        let receipt = deliver(
            &s,
            &signed(&s, &id, ticket_event(&id, "ticket.updated", &processing)),
        )
        .await;
        assert!(
            matches!(&receipt.outcomes[..], [DeliveryOutcome::Applied { .. }]),
            "{i}: {receipt:?}"
        );
    }
    let row = row_of(&s, &op).await;
    assert_eq!(
        row.state,
        State::Processing,
        "not handed over for want of queries"
    );
    assert_eq!(row.queries_used, before.queries_used);
}

/// Item 11: a processing callback that names the vendor's object records its reference, so a
/// later event that names only that reference (no operation id, no key) finds and resolves the
/// operation instead of being quarantined.
#[tokio::test]
async fn a_processing_callback_records_the_reference_a_later_success_is_matched_by() {
    let s = setup(SqliteLedger::in_memory().await.unwrap()).await;
    let op = lost_write(&s, "intent-27-11-ref").await;
    let ticket = ticket_of(&s, &op);
    let mut processing = with_status(&ticket, OperationStatus::Processing);
    processing.idempotency_key = None;
    deliver(
        &s,
        &signed(
            &s,
            "evt_p",
            ticket_event("evt_p", "ticket.updated", &processing),
        ),
    )
    .await;
    let row = row_of(&s, &op).await;
    assert_eq!(row.state, State::Processing);
    assert_eq!(row.remote_ref.as_deref(), Some(ticket.id.as_str()));

    let mut by_ref = ticket.clone();
    by_ref.operation_id = None;
    by_ref.idempotency_key = None;
    let receipt = deliver(
        &s,
        &signed(
            &s,
            "evt_done",
            ticket_event("evt_done", "ticket.created", &by_ref),
        ),
    )
    .await;
    assert_eq!(
        receipt.outcomes,
        vec![DeliveryOutcome::Applied {
            operation_id: op.id().clone()
        }]
    );
    assert_eq!(state_of(&s, &op).await, State::Succeeded);
}

/// Item 11: `quarantine --limit` counts the tenant's own events: the tenant filter is applied
/// by the ledger before the limit, not to the first `limit` events of every tenant.
#[cfg(feature = "cli")]
#[tokio::test]
async fn the_cli_quarantine_limit_counts_the_tenants_own_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let s = setup(SqliteLedger::open(&path).await.unwrap()).await;
    let op = lost_write(&s, "intent-27-11-cli-limit").await;
    let mut ticket = ticket_of(&s, &op);
    ticket.operation_id = Some("op-nobody-made".into());
    ticket.idempotency_key = None;
    // Two of tenant B's first, then one of tenant A's.
    for (id, tenant) in [
        ("evt_b1", "tenant-b"),
        ("evt_b2", "tenant-b"),
        ("evt_a1", TENANT),
    ] {
        ticket.tenant = tenant.into();
        ticket.id = format!("W-{id}");
        assert!(matches!(
            &deliver(
                &s,
                &signed(&s, id, ticket_event(id, "ticket.created", &ticket))
            )
            .await
            .outcomes[..],
            [DeliveryOutcome::Quarantined { .. }]
        ));
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_recoverable-write"))
        .args([
            "--ledger",
            &format!("sqlite:{}", path.display()),
            "--tenant",
            TENANT,
            "--json",
            "quarantine",
            "--limit",
            "1",
        ])
        .output()
        .expect("run the CLI");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let callbacks = json["callbacks"].as_array().expect("callbacks");
    assert_eq!(callbacks.len(), 1, "{json}");
    assert_eq!(callbacks[0]["event_id"], "evt_a1");
}

/// Item 5: the operators' command line lists contradicted operations, shows why, and
/// acknowledges them (audited); then they leave the list.
#[cfg(feature = "cli")]
#[tokio::test]
async fn the_cli_lists_shows_and_acknowledges_a_contradiction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let s = setup(SqliteLedger::open(&path).await.unwrap()).await;
    let op = lost_write(&s, "intent-27-5-cli").await;
    let ticket = ticket_of(&s, &op);
    for (id, t) in [
        ("evt_r", with_status(&ticket, OperationStatus::Rejected)),
        ("evt_s", ticket.clone()),
    ] {
        let ty = if id == "evt_r" {
            "ticket.updated"
        } else {
            "ticket.created"
        };
        deliver(&s, &signed(&s, id, ticket_event(id, ty, &t))).await;
    }
    let version = row_of(&s, &op).await.version;
    let run = |args: &[&str]| {
        let mut all = vec![
            "--ledger".to_owned(),
            format!("sqlite:{}", path.display()),
            "--tenant".to_owned(),
            TENANT.to_owned(),
        ];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_recoverable-write"))
            .args(&all)
            .output()
            .expect("run the CLI");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let listed: serde_json::Value =
        serde_json::from_str(&run(&["--json", "list", "--contradicted"])).unwrap();
    let ops = listed["operations"].as_array().expect("operations");
    assert_eq!(ops.len(), 1, "{listed}");
    assert_eq!(ops[0]["operation_id"], op.id().as_str());
    assert_eq!(ops[0]["state"], "REJECTED");
    assert!(ops[0]["contradiction_ms"].is_i64());
    let shown = run(&["show", op.id().as_str()]);
    assert!(shown.contains("CONTRADICTED"), "{shown}");
    assert!(shown.contains("recorded as rejected"), "{shown}");
    run(&[
        "acknowledge",
        op.id().as_str(),
        "--reviewer",
        "alice",
        "--reason",
        "customer refunded",
        "--version",
        &version.to_string(),
    ]);
    let listed: serde_json::Value =
        serde_json::from_str(&run(&["--json", "list", "--contradicted"])).unwrap();
    assert!(
        listed["operations"].as_array().unwrap().is_empty(),
        "{listed}"
    );
    assert_eq!(row_of(&s, &op).await.state, State::Rejected);
}

/// Issue 30 item 3: the webhook route answers with or without a trailing slash (vendors are
/// configured by hand, and a slash is easy to add), each delivery processed once.
#[tokio::test]
async fn the_webhook_route_answers_with_or_without_a_trailing_slash() {
    use tower::ServiceExt as _;

    let s = setup(MemoryLedger::new()).await;
    let op = lost_write(&s, "intent-slash").await;
    let ticket = ticket_of(&s, &op);
    // Mounted as the guide says: `nest_service` routes both forms of the path.
    let app = axum::Router::new().nest_service("/webhooks/tickets", s.receiver.router());
    for (uri, event) in [
        ("/webhooks/tickets/", "evt_slash_1"),
        ("/webhooks/tickets", "evt_slash_2"),
    ] {
        let d = signed(&s, event, ticket_event(event, "ticket.created", &ticket));
        let mut req = http::Request::post(uri);
        for (name, value) in &d.headers {
            req = req.header(name, value);
        }
        let res = app
            .clone()
            .oneshot(req.body(axum::body::Body::from(d.body.clone())).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), http::StatusCode::OK, "{uri}");
    }
    assert_eq!(state_of(&s, &op).await, State::Succeeded);
    assert_eq!(
        callback_entries(&s, &op).await,
        1,
        "the second changed nothing"
    );
    assert_eq!(s.vendor.tickets_created(), 1);
}
