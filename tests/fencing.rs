//! Issue 27: every decision is fenced by the evidence it saw.
//!
//! A decision about an operation (a reviewer's resolve or claim, a replay the recoverer is about
//! to send) is made on a view of the operation and names it (the row's `version`). Appending
//! evidence advances the version, so a decision made on a view older than the evidence is
//! refused; and a replay re-reads the evidence recorded since the decision that made it
//! sendable. Each test drives a real write against the fake vendor over TCP on a SQLite ledger
//! file, delivers a signed vendor callback, and checks the ledger AND the vendor's own count of
//! POSTs and tickets: each scenario was a second ticket before the fix.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::*;
use recoverable_write::Ledger;
use recoverable_write::callbacks::{
    AccountTenants, CallbackReceiver, DeliveryOutcome, Secret, StripeSignature,
};
use recoverable_write::ledger::OperationRecord;
use recoverable_write::ledger::backend::NewEvidence;
use recoverable_write::review::{ReviewError, late_success};
use recoverable_write::state::ReviewDecision;
use recoverable_write::testing::FakeVendor;
use recoverable_write::testing::callbacks::{Signer, ticket_event, ticket_mapping};
use recoverable_write::{
    Access, BudgetPolicy, Denied, Evidence, Handle, Operation, RecoverableWrite, Recoverer,
    SendOnceGuardLayer, SqliteLedger, State,
};

const SECRET: &str = "whsec_fencing_drill_0123456789abcdef";

struct Fence {
    vendor: FakeVendor,
    _dir: tempfile::TempDir,
    rw: Handle<SqliteLedger>,
    receiver: CallbackReceiver,
    signer: Signer,
    recoverer: Recoverer,
    /// While set, replays (writes of `RETRY_READY` rows) are not authorized: the decision that
    /// made a row sendable is taken, and its send is delayed.
    hold_replays: Arc<AtomicBool>,
}

/// The vendor keeps keys for `retention_secs`; a write whose response is lost.
async fn setup(retention_secs: u64, vendor: FakeVendor) -> Fence {
    let dir = tempfile::tempdir().expect("temp dir");
    let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
        .await
        .expect("sqlite ledger");
    let hold_replays = Arc::new(AtomicBool::new(false));
    let hold = hold_replays.clone();
    let rw = RecoverableWrite::builder(ledger)
        .budget(BudgetPolicy {
            max_queries: 4,
            ..fast_policy()
        })
        .contract(replay_safe_contract().retention_secs(retention_secs))
        .authorizer(move |op: &OperationRecord, access: Access| {
            if access == Access::Write
                && op.state == State::RetryReady
                && hold.load(Ordering::SeqCst)
            {
                Err(Denied::new(access, "approval pending"))
            } else {
                Ok(())
            }
        })
        .build()
        .expect("valid configuration");
    let receiver = CallbackReceiver::new(
        &rw,
        ticket_mapping(),
        StripeSignature::new(Secret::new(SECRET).expect("a 16-byte secret")),
        AccountTenants::default().account(TENANT, TENANT),
    );
    let recoverer = recoverer(
        &rw,
        &SendOnceGuardLayer::new(),
        &vendor.base_url(),
        Arc::new(Mutex::new(CREDENTIAL.to_owned())),
        Duration::from_millis(500),
    );
    Fence {
        vendor,
        _dir: dir,
        rw,
        receiver,
        signer: Signer::stripe(Secret::new(SECRET).expect("a 16-byte secret")),
        recoverer,
        hold_replays,
    }
}

impl Fence {
    async fn row(&self, op: &Operation) -> OperationRecord {
        self.rw
            .ledger()
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .expect("row")
    }

    async fn recover_until(
        &self,
        op: &Operation,
        done: impl Fn(&OperationRecord) -> bool,
    ) -> OperationRecord {
        for _ in 0..200 {
            self.recoverer.run_once().await.expect("recovery pass");
            let r = self.row(op).await;
            if done(&r) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("operation {} never reached the expected state", op.id());
    }

    /// Runs a few more passes: whatever the engine would do on its own, it has done.
    async fn settle(&self) {
        for _ in 0..5 {
            self.recoverer.run_once().await.expect("recovery pass");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Drill D9: the create commits, its response is lost, the vendor forgets the key and
    /// its operation record: recovery hands the operation to a person.
    async fn escalated_after_the_key_expired(&self, intent: &str) -> Operation {
        let op = new_op(intent);
        self.vendor.faults().drop_after_commit(1);
        let mut svc = collected(
            tower::ServiceBuilder::new()
                .layer(self.rw.layer())
                .layer(SendOnceGuardLayer::new())
                .service(authed_client(Arc::new(Mutex::new(CREDENTIAL.to_owned())))),
        );
        let _ = send(&mut svc, ticket_request(&self.vendor, &op, "E17")).await;
        self.vendor.faults().expire_keys();
        self.vendor.faults().clean_operation_records();
        let row = self
            .recover_until(&op, |r| r.state == State::ManualReview)
            .await;
        assert_eq!(self.vendor.tickets_created(), 1);
        assert!(row.may_have_applied);
        op
    }

    /// The vendor's verified `ticket.created` event for the ticket it made for `op`.
    async fn success_callback(&self, op: &Operation, event_id: &str) -> DeliveryOutcome {
        let ticket = self
            .vendor
            .tickets()
            .into_iter()
            .find(|t| t.operation_id.as_deref() == Some(op.id().as_str()))
            .expect("the vendor created the ticket");
        let event = ticket_event(event_id, "ticket.created", &ticket);
        let d = self.signer.sign(event_id, &event, SystemTime::now());
        let receipt = self.receiver.receive(&d.headers, &d.body).await;
        assert!(receipt.status.is_success(), "{receipt:?}");
        receipt.outcomes.into_iter().next().expect("one event")
    }

    fn ticket_id(&self) -> String {
        self.vendor.tickets()[0].id.clone()
    }

    /// A reviewer's "not executed" at `version`, read before the vendor's success was
    /// recorded: refused as stale, and whatever the engine then does on its own, the
    /// operation stays in review and the vendor sees no second POST.
    async fn not_executed_is_refused_as_stale(&self, op: &Operation, version: u64) {
        let refused = self
            .rw
            .reviews()
            .resolve(op.tenant(), op.id(), "bob", version, not_executed())
            .await
            .expect_err("a decision on a view older than the evidence is refused");
        assert!(
            matches!(refused, ReviewError::VersionMismatch { .. }),
            "{refused:?}"
        );
        self.settle().await;
        assert_eq!(self.row(op).await.state, State::ManualReview);
        assert_eq!(self.vendor.posts_received(), 1, "nothing was sent again");
        assert_eq!(self.vendor.tickets_created(), 1);
    }
}

fn not_executed() -> ReviewDecision {
    ReviewDecision::ConfirmedNotExecuted
}

/// Item 1, the first order: a reviewer reads the operation, the vendor's verified success
/// callback arrives, and the reviewer resolves "not executed" on what they read.
#[tokio::test]
async fn a_not_executed_resolve_on_a_view_read_before_a_success_callback_is_refused() {
    let f = setup(1, FakeVendor::start().await).await;
    let op = f.escalated_after_the_key_expired("intent-fence-1").await;
    let reviews = f.rw.reviews();
    let read = reviews.handoff(op.tenant(), op.id()).await.unwrap();

    let outcome = f.success_callback(&op, "evt_late_1").await;
    assert!(
        matches!(outcome, DeliveryOutcome::Late { .. }),
        "{outcome:?}"
    );

    f.not_executed_is_refused_as_stale(&op, read.version).await;

    // What the reviewer reads now puts the success first, and offers it as the resolution.
    let now = reviews.handoff(op.tenant(), op.id()).await.unwrap();
    let offered = late_success(&now.evidence).expect("the late success is offered");
    assert_eq!(
        offered.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some(f.ticket_id())
        })
    );
    let done = reviews
        .resolve(
            op.tenant(),
            op.id(),
            "bob",
            now.version,
            ReviewDecision::ConfirmedSucceeded {
                remote_ref: Some(f.ticket_id()),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.state, State::Succeeded);
    assert_eq!(f.vendor.tickets_created(), 1);
}

/// Item 1, the runbook's own order: claim, then the callback, then resolve at the claim's
/// version.
#[tokio::test]
async fn a_not_executed_resolve_at_the_claims_version_after_a_success_callback_is_refused() {
    let f = setup(1, FakeVendor::start().await).await;
    let op = f.escalated_after_the_key_expired("intent-fence-2").await;
    let reviews = f.rw.reviews();
    let row = f.row(&op).await;
    let claimed = reviews
        .claim_with_reason(
            op.tenant(),
            op.id(),
            "bob",
            "checking the vendor",
            row.version,
        )
        .await
        .unwrap();

    let outcome = f.success_callback(&op, "evt_late_2").await;
    assert!(
        matches!(outcome, DeliveryOutcome::Late { .. }),
        "{outcome:?}"
    );

    // The claim's version predates the callback.
    f.not_executed_is_refused_as_stale(&op, claimed.version)
        .await;
}

/// Item 1, with the success appended through `Ledger::append_evidence` (a late lookup answer,
/// a late result, any backend's own path).
#[tokio::test]
async fn a_not_executed_resolve_after_a_success_appended_to_the_ledger_is_refused() {
    let f = setup(1, FakeVendor::start().await).await;
    let op = f.escalated_after_the_key_expired("intent-fence-3").await;
    let read = f.row(&op).await;
    f.rw.ledger()
        .append_evidence(
            op.tenant(),
            op.id(),
            NewEvidence {
                attempt_id: read.current_attempt,
                generation: read.generation,
                kind: "late_evidence".into(),
                from_state: None,
                to_state: None,
                evidence: Some(Evidence::Succeeded {
                    remote_ref: Some(f.ticket_id()),
                }),
                note: Some("a late lookup answer".into()),
                at_ms: read.updated_ms + 1,
            },
        )
        .await
        .unwrap();
    f.not_executed_is_refused_as_stale(&op, read.version).await;
}

/// Item 2: a valid "not executed" resolve makes the row sendable; the vendor's verified success
/// callback arrives before the recoverer sends (its send was delayed). The replay re-reads the
/// evidence since the decision and is not sent.
#[tokio::test]
async fn a_success_callback_after_a_not_executed_resolve_stops_the_queued_replay() {
    let f = setup(1, FakeVendor::start().await).await;
    let op = f.escalated_after_the_key_expired("intent-fence-4").await;
    let reviews = f.rw.reviews();
    let row = f.row(&op).await;
    f.hold_replays.store(true, Ordering::SeqCst);
    let sendable = reviews
        .resolve(op.tenant(), op.id(), "bob", row.version, not_executed())
        .await
        .unwrap();
    assert_eq!(sendable.state, State::RetryReady);
    assert!(!sendable.may_have_applied);

    let outcome = f.success_callback(&op, "evt_late_4").await;
    assert!(
        matches!(outcome, DeliveryOutcome::Late { .. }),
        "{outcome:?}"
    );

    f.hold_replays.store(false, Ordering::SeqCst);
    let row = f.recover_until(&op, |r| r.state != State::RetryReady).await;
    assert_eq!(row.state, State::ManualReview, "{:?}", row.reason);
    assert!(
        row.reason
            .as_deref()
            .unwrap_or_default()
            .contains("may have applied"),
        "{:?}",
        row.reason
    );
    f.settle().await;
    assert_eq!(f.vendor.posts_received(), 1, "the replay was never sent");
    assert_eq!(f.vendor.tickets_created(), 1);
    let pkg = reviews.handoff(op.tenant(), op.id()).await.unwrap();
    assert!(
        late_success(&pkg.evidence).is_some(),
        "and the success is offered"
    );
}

/// Item 2, on the same-key replay path: the contract makes a replay safe (path (b)), the send
/// is delayed, and the vendor's success callback arrives meanwhile. Nothing is sent: the
/// callback says the write happened.
#[tokio::test]
async fn a_success_callback_stops_a_delayed_same_key_replay() {
    let f = setup(86_400, FakeVendor::start().await).await;
    let op = new_op("intent-fence-5");
    f.vendor.faults().drop_after_commit(1);
    f.vendor.faults().lookup_not_found(1_000);
    f.hold_replays.store(true, Ordering::SeqCst);
    let mut svc = collected(
        tower::ServiceBuilder::new()
            .layer(f.rw.layer())
            .layer(SendOnceGuardLayer::new())
            .service(authed_client(Arc::new(Mutex::new(CREDENTIAL.to_owned())))),
    );
    let _ = send(&mut svc, ticket_request(&f.vendor, &op, "E17")).await;
    let row = f.recover_until(&op, |r| r.state == State::RetryReady).await;
    assert!(row.may_have_applied, "path (b)");

    let outcome = f.success_callback(&op, "evt_late_5").await;
    assert!(
        matches!(outcome, DeliveryOutcome::Late { .. }),
        "{outcome:?}"
    );

    f.hold_replays.store(false, Ordering::SeqCst);
    let row = f.recover_until(&op, |r| r.state != State::RetryReady).await;
    assert_eq!(row.state, State::ManualReview, "{:?}", row.reason);
    f.settle().await;
    assert_eq!(f.vendor.posts_received(), 1, "no replay after the success");
    assert_eq!(f.vendor.tickets_created(), 1);
}

/// Reviewers are fenced against each other: a claim is exclusive until a take-over, which the
/// audit trail records with both names.
#[tokio::test]
async fn a_claim_is_exclusive_until_an_audited_take_over() {
    let f = setup(1, FakeVendor::start().await).await;
    let op = f.escalated_after_the_key_expired("intent-fence-6").await;
    let reviews = f.rw.reviews();
    let row = f.row(&op).await;
    let alice = reviews
        .claim_with_reason(op.tenant(), op.id(), "alice", "on it", row.version)
        .await
        .unwrap();

    // Bob, at the current version, cannot resolve, claim or keep it pending.
    let refused = reviews
        .resolve(op.tenant(), op.id(), "bob", alice.version, not_executed())
        .await
        .expect_err("claimed by alice");
    assert!(
        matches!(&refused, ReviewError::ClaimedByOther { holder, .. } if holder == "alice"),
        "{refused:?}"
    );
    let refused = reviews
        .claim_with_reason(op.tenant(), op.id(), "bob", "me too", alice.version)
        .await
        .expect_err("claimed by alice");
    assert!(
        matches!(refused, ReviewError::ClaimedByOther { .. }),
        "{refused:?}"
    );
    assert_eq!(f.row(&op).await.version, alice.version, "nothing changed");

    // Alice keeps it pending: forms read before her note are stale.
    let noted = reviews
        .resolve_with_reason(
            op.tenant(),
            op.id(),
            "alice",
            "asked the vendor",
            alice.version,
            ReviewDecision::KeepPending,
        )
        .await
        .unwrap();
    assert_eq!(
        noted.version,
        alice.version + 1,
        "a note fences older forms"
    );
    let refused = reviews
        .resolve(op.tenant(), op.id(), "alice", alice.version, not_executed())
        .await
        .expect_err("read before the note");
    assert!(
        matches!(refused, ReviewError::VersionMismatch { .. }),
        "{refused:?}"
    );

    // Bob takes it over, explicitly; then it is his.
    let bob = reviews
        .take_over(
            op.tenant(),
            op.id(),
            "bob",
            "alice is off shift",
            noted.version,
        )
        .await
        .unwrap();
    let log = f.rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    let note = log.last().unwrap().entry.note.clone().unwrap_or_default();
    assert!(
        note.starts_with("taken over from alice by bob;"),
        "the audit names both: {note}"
    );
    let refused = reviews
        .resolve(op.tenant(), op.id(), "alice", bob.version, not_executed())
        .await
        .expect_err("now bob's");
    assert!(
        matches!(&refused, ReviewError::ClaimedByOther { holder, .. } if holder == "bob"),
        "{refused:?}"
    );
    let done = reviews
        .resolve(
            op.tenant(),
            op.id(),
            "bob",
            bob.version,
            ReviewDecision::ConfirmedSucceeded {
                remote_ref: Some(f.ticket_id()),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.state, State::Succeeded);
    assert_eq!(f.vendor.posts_received(), 1);
    assert_eq!(f.vendor.tickets_created(), 1);
}
