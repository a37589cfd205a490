//! Retention (issue 15), through the layer and the fake vendor, on every backend (memory, a
//! SQLite file, PostgreSQL): after the details stage a repeat call sends nothing and gets its
//! outcome, a repeat with another payload is a conflict; an operation that is not finished
//! survives every clock; the identity stage deletes (and, past it, a repeat is a new write:
//! the cost the identity clock is there to bound); misconfiguration is refused; erasure refuses
//! what is not finished; the recoverer purges on its interval.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use common::*;
use recoverable_write::clock::{Clock, ProcessClock};
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::{ClockSource, PostgresLedgerOptions, SqliteLedger};
use recoverable_write::retention::{Retention, RetentionError};
use recoverable_write::testing::FakeVendor;
use recoverable_write::{
    BuildError, Contracts, Error, Ledger, MemoryLedger, PostgresLedger, RecoverableWrite,
    SendOnceGuardLayer, State, Tenant,
};
use tower::ServiceBuilder;

#[path = "common/postgres.rs"]
mod pg;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// A clock the test moves forward by days.
#[derive(Debug, Clone)]
struct TestClock(Arc<AtomicI64>);

impl TestClock {
    fn new() -> Self {
        Self(Arc::new(AtomicI64::new(ProcessClock.now_ms())))
    }

    fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A backend's name, its ledger, and what must live as long as it (a directory, a schema).
type Backend = (
    &'static str,
    Arc<dyn FullLedger>,
    Box<dyn std::any::Any + Send>,
);

/// Every backend this machine has: memory, a SQLite file, and PostgreSQL when reachable (in a
/// schema of its own, on the caller's clock so the test's days count).
async fn backends() -> Vec<Backend> {
    let mut out: Vec<Backend> = Vec::new();
    out.push(("memory", Arc::new(MemoryLedger::new()), Box::new(())));
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteLedger::open(dir.path().join("ledger.db"))
        .await
        .unwrap();
    out.push(("sqlite", Arc::new(sqlite), Box::new(dir)));
    if let Some(url) = pg::pg_url().await {
        let schema = pg::Schema::new(&url);
        let options = PostgresLedgerOptions::new()
            .schema(schema.name.clone())
            .unwrap()
            .clock(ClockSource::Caller)
            .max_connections(4);
        let ledger = PostgresLedger::connect_with(&url, options).await.unwrap();
        out.push(("postgres", Arc::new(ledger), Box::new(schema)));
    }
    out
}

/// layer → guard → client, bodies collected (the drills' writer over this configuration).
fn writer<L: recoverable_write::Ledger>(config: &recoverable_write::Handle<L>) -> Writer {
    collected(
        ServiceBuilder::new()
            .layer(config.layer())
            .layer(SendOnceGuardLayer::new())
            .service(http_client()),
    )
}

fn short_retention() -> Retention {
    Retention::new()
        .details(DAY)
        .identity(2 * DAY)
        .interval(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_details_stage_a_repeat_sends_nothing_and_another_payload_conflicts() {
    for (name, ledger, _guard) in backends().await {
        // A vendor that dedupes by key alone (drill D9's): past the ledger's identity clock,
        // nothing else stands between a repeat and a second ticket.
        let vendor = FakeVendor::builder()
            .dedupe_by_operation_id(false)
            .start()
            .await
            .expect("vendor");
        let clock = TestClock::new();
        let config = RecoverableWrite::builder(ledger.clone())
            .budget(fast_policy())
            .clock(clock.clone())
            .retention(short_retention())
            .build()
            .unwrap();
        let mut svc = writer(&config);

        // One write that succeeds, one whose response is lost (it stays UNKNOWN: no recoverer).
        let done = new_op("intent-retained");
        let res = send(&mut svc, ticket_request(&vendor, &done, "E17"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(res.status(), 201, "{name}");
        let stuck = new_op("intent-stuck");
        vendor.faults().drop_after_commit(1);
        let err = send(&mut svc, ticket_request(&vendor, &stuck, "E99"))
            .await
            .expect_err("lost response");
        assert_unknown(&err, stuck.id());
        assert_eq!(vendor.tickets_created(), 2, "{name}");

        // Before the details clock: nothing is due.
        let purger = config.purger();
        let early = purger.run().await.unwrap();
        assert!(early.is_empty(), "{name}: {early:?}");

        clock.advance(DAY + Duration::from_secs(60));
        let preview = purger.preview().await.unwrap();
        assert_eq!(preview.details.rows, 1, "{name}");
        let slim = purger.run().await.unwrap();
        assert_eq!(
            slim.details, preview.details,
            "{name}: the preview counts what a run drops"
        );
        assert_eq!(slim.identity.rows, 0, "{name}");
        let row = ledger.get(done.tenant(), done.id()).await.unwrap().unwrap();
        assert_eq!(row.state, State::Succeeded);
        assert!(row.details_removed_ms.is_some(), "{name}");
        assert!(
            row.request.body.is_empty() && row.request.headers.is_empty(),
            "{name}"
        );
        assert_eq!(row.response, None, "{name}");
        assert_eq!(row.remote_ref.as_deref(), Some("W731"), "{name}");
        let dates = purger.dates(&row).expect("finished");
        assert!(dates.details_removed, "{name}");
        assert_eq!(
            dates.identity_until_ms,
            row.updated_ms + (2 * DAY).as_millis() as i64
        );

        // The repeat: the outcome (synthesized, the response is gone), nothing sent.
        let posts = vendor.posts_received();
        let again = send(&mut svc, ticket_request(&vendor, &done, "E17"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(
            again.status(),
            200,
            "{name}: the documented synthesized success"
        );
        assert_eq!(
            again.headers()["recoverable-write-outcome"],
            "synthesized",
            "{name}"
        );
        assert_eq!(
            again.headers()["recoverable-write-remote-ref"],
            "W731",
            "{name}"
        );
        // Another payload under the same operation: a conflict, still nothing sent.
        let other = send(&mut svc, ticket_request(&vendor, &done, "E18"))
            .await
            .expect_err("another payload");
        assert!(matches!(other, Error::Conflict { .. }), "{name}: {other:?}");
        assert_eq!(vendor.posts_received(), posts, "{name}: nothing was sent");
        assert_eq!(vendor.tickets_created(), 2, "{name}");

        // Past the identity clock: the finished row goes, the UNKNOWN one (older than every
        // clock) stays.
        clock.advance(DAY + Duration::from_secs(60));
        let gone = purger.run().await.unwrap();
        assert_eq!(gone.identity.rows, 1, "{name}: {gone:?}");
        assert!(
            ledger
                .get(done.tenant(), done.id())
                .await
                .unwrap()
                .is_none(),
            "{name}"
        );
        assert!(
            ledger
                .evidence(done.tenant(), done.id())
                .await
                .unwrap()
                .is_empty()
        );
        let kept = ledger
            .get(stuck.tenant(), stuck.id())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kept.state, State::Unknown, "{name}");
        assert!(kept.details_removed_ms.is_none() && !kept.request.body.is_empty());

        // What the identity clock bounds: once the ledger forgot the intent, a repeat is a
        // new operation with a new key, and the vendor creates the write again.
        let late = send(&mut svc, ticket_request(&vendor, &done, "E17"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(late.status(), 201, "{name}: created again");
        assert_eq!(
            vendor.tickets_created(),
            3,
            "{name}: past the identity clock"
        );
    }
}

/// Issue 27 item 10: the plan a person confirms counts each operation once, per contract with
/// the clocks it gets, and running it drops what it listed, not what became due while it was
/// read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_counts_each_operation_once_and_running_it_drops_only_what_it_listed() {
    for (name, ledger, _guard) in backends().await {
        let vendor = FakeVendor::start().await;
        let clock = TestClock::new();
        let config = RecoverableWrite::builder(ledger.clone())
            .budget(fast_policy())
            .clock(clock.clone())
            .retention(short_retention())
            .build()
            .unwrap();
        let mut svc = writer(&config);
        let old = new_op("intent-plan-old");
        let res = send(&mut svc, ticket_request(&vendor, &old, "E17")).await;
        assert_eq!(res.unwrap().status(), 201, "{name}");
        clock.advance(DAY + DAY / 2);
        let newer = new_op("intent-plan-newer");
        let res = send(&mut svc, ticket_request(&vendor, &newer, "E18")).await;
        assert_eq!(res.unwrap().status(), 201, "{name}");
        // `old` is past both clocks (2.5 days), `newer` past the details clock only (1 day).
        clock.advance(DAY + Duration::from_secs(60));

        let purger = config.purger();
        let plan = purger.plan().await.unwrap();
        assert_eq!(plan.as_of_ms, clock.now_ms());
        let [line] = &plan.contracts[..] else {
            panic!("{name}: one contract: {plan:?}")
        };
        assert!(line.configured, "{name}");
        assert_eq!(line.keep_details_ms, DAY.as_millis() as u64);
        assert_eq!(line.keep_identity_ms, 2 * DAY.as_millis() as u64);
        assert_eq!(line.identity.rows, 1, "{name}: old is deleted");
        assert_eq!(
            line.details.rows, 1,
            "{name}: only newer is slimmed; old, deleted, is not counted twice"
        );
        assert_eq!(plan.total.identity, line.identity);
        assert_eq!(plan.total.details, line.details);
        assert_eq!(purger.preview().await.unwrap(), plan.total, "{name}");

        // A person reads it for a day: `newer` becomes due for deletion meanwhile.
        clock.advance(DAY);
        let done = purger.run_plan(&plan).await.unwrap();
        assert_eq!(done.identity, plan.total.identity, "{name}");
        assert_eq!(done.details, plan.total.details, "{name}");
        assert!(
            ledger.get(old.tenant(), old.id()).await.unwrap().is_none(),
            "{name}"
        );
        let kept = ledger
            .get(newer.tenant(), newer.id())
            .await
            .unwrap()
            .expect("not in the plan's deletions");
        assert!(kept.details_removed_ms.is_some(), "{name}");
        // A run now takes what became due since.
        assert_eq!(purger.run().await.unwrap().identity.rows, 1, "{name}");
        assert!(
            ledger
                .get(newer.tenant(), newer.id())
                .await
                .unwrap()
                .is_none(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn retention_shorter_than_it_must_be_is_refused_by_name() {
    let build = |retention: Retention, contracts: Contracts| {
        RecoverableWrite::builder(MemoryLedger::new())
            .contracts(contracts)
            .retention(retention)
            .build()
    };
    let invalid = |r: Result<recoverable_write::Handle<MemoryLedger>, BuildError>| match r {
        Err(BuildError::Invalid { field, problem }) => (field, problem),
        other => panic!("expected a refusal, got {other:?}"),
    };
    let (field, problem) = invalid(build(
        Retention::new().details(3 * DAY).identity(DAY),
        Contracts::default(),
    ));
    assert_eq!(field, "retention.identity");
    assert!(
        problem.contains("shorter than retention.details"),
        "{problem}"
    );

    // Stripe keeps keys at least 24 h: an identity clock of one hour would let a repeat
    // through while the vendor still dedupes nothing for the new key.
    let stripe = Contracts::new(recoverable_write::contract::profiles::stripe_v1());
    let (field, problem) = invalid(build(
        Retention::new()
            .details(Duration::from_secs(600))
            .identity(Duration::from_secs(3600)),
        stripe.clone(),
    ));
    assert_eq!(field, "retention.identity");
    assert!(
        problem.contains("contract `stripe-v1`") && problem.contains("vendor's key retention"),
        "{problem}"
    );
    // The default identity clock is raised to the vendor's retention instead.
    let config = build(Retention::new().details(Duration::from_secs(600)), stripe).unwrap();
    assert!(config.purger().clocks("stripe-v1").identity >= DAY);

    // A contract's own clocks are checked where it is read.
    let toml = r#"
[default]
extends = "stripe-v1"
keep_details_secs = 7200
keep_identity_secs = 3600
"#;
    let err = Contracts::from_toml_str(toml, "contracts.toml").expect_err("too short");
    assert!(err.to_string().contains("keep_identity_secs"), "{err}");
    assert!(err.to_string().contains("vendor's key retention"), "{err}");
}

#[tokio::test]
async fn erasure_refuses_what_is_not_finished_and_takes_everything_else() {
    for (name, ledger, _guard) in backends().await {
        let vendor = FakeVendor::start().await;
        let config = RecoverableWrite::builder(ledger.clone())
            .budget(fast_policy())
            .retention(Retention::keep_forever())
            .build()
            .unwrap();
        let mut svc = writer(&config);
        let done = new_op("intent-erase-done");
        send(&mut svc, ticket_request(&vendor, &done, "E1"))
            .await
            .unwrap();
        let stuck = new_op("intent-erase-stuck");
        vendor.faults().drop_after_commit(1);
        send(&mut svc, ticket_request(&vendor, &stuck, "E2"))
            .await
            .expect_err("lost");
        let purger = config.purger();

        let refused = purger
            .erase_details(stuck.tenant(), stuck.id())
            .await
            .expect_err("not finished");
        assert!(
            matches!(
                refused,
                RetentionError::NotFinished {
                    state: State::Unknown,
                    ..
                }
            ),
            "{name}: {refused}"
        );
        let refused = purger.erase_tenant(done.tenant()).await.expect_err("open");
        assert!(
            matches!(refused, RetentionError::OpenOperations { open: 1, .. }),
            "{name}: {refused}"
        );
        assert!(
            refused.to_string().contains(stuck.id().as_str()),
            "{refused}"
        );
        assert!(
            ledger
                .get(done.tenant(), done.id())
                .await
                .unwrap()
                .is_some(),
            "{name}: nothing was erased"
        );

        let slimmed = purger
            .erase_details(done.tenant(), done.id())
            .await
            .unwrap();
        assert_eq!(slimmed.rows, 1, "{name}");
        assert!(slimmed.bytes > 0, "{name}");
        let row = ledger.get(done.tenant(), done.id()).await.unwrap().unwrap();
        assert!(row.details_removed_ms.is_some() && row.request.body.is_empty());
        let missing = purger
            .erase_details(
                done.tenant(),
                &recoverable_write::OperationId::new("op-nope"),
            )
            .await
            .expect_err("missing");
        assert!(
            matches!(missing, RetentionError::NotFound { .. }),
            "{missing}"
        );

        // Once the stuck one is resolved (here: evidence that it succeeded), the tenant goes.
        let row = ledger
            .get(stuck.tenant(), stuck.id())
            .await
            .unwrap()
            .unwrap();
        let reviews = config.reviews();
        let held = reviews
            .claim_with_reason(stuck.tenant(), stuck.id(), "alice", "checking", row.version)
            .await
            .unwrap();
        let moved = reviews
            .resolve_with_reason(
                stuck.tenant(),
                stuck.id(),
                "alice",
                "ticket W732 in the console",
                held.version,
                recoverable_write::state::ReviewDecision::ConfirmedSucceeded {
                    remote_ref: Some("W732".into()),
                },
            )
            .await
            .unwrap();
        assert_eq!(moved.state, State::Succeeded);
        let erased = purger.erase_tenant(done.tenant()).await.unwrap();
        assert_eq!(erased.identity.rows, 2, "{name}");
        for op in [&done, &stuck] {
            assert!(
                ledger.get(op.tenant(), op.id()).await.unwrap().is_none(),
                "{name}"
            );
        }
        assert_eq!(vendor.tickets_created(), 2, "{name}: erasure sends nothing");
        // Another tenant's rows are not touched.
        assert!(
            purger
                .erase_tenant(&Tenant::new("nobody"))
                .await
                .unwrap()
                .is_empty()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recoverer_purges_on_its_interval() {
    let vendor = FakeVendor::start().await;
    let clock = TestClock::new();
    let ledger = MemoryLedger::new();
    let config = RecoverableWrite::builder(ledger.clone())
        .budget(fast_policy())
        .clock(clock.clone())
        .retention(short_retention().interval(Some(Duration::from_millis(20))))
        .build()
        .unwrap();
    let mut svc = writer(&config);
    let op = new_op("intent-interval");
    send(&mut svc, ticket_request(&vendor, &op, "E3"))
        .await
        .unwrap();
    let handle = config.recoverer().spawn();
    clock.advance(3 * DAY);
    let mut gone = false;
    for _ in 0..300 {
        if ledger.get(op.tenant(), op.id()).await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.shutdown().await;
    assert!(gone, "the recoverer's purge deleted the finished operation");
    assert_eq!(vendor.tickets_created(), 1);
}
