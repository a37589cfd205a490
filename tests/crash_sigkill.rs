//! Crash test with real processes (issue 10): a child process writes operations through the
//! layer (send-once guard, hyper-util client) into a SQLite ledger file and runs a recoverer with
//! an HTTP lookup; the parent runs the fake vendor over real TCP (its counts survive the kills),
//! SIGKILLs the child at seeded random moments, restarts it on the same file, and at the end lets
//! a last child recover to quiescence. Everything is then checked against the vendor's own
//! tickets.
//!
//! ```text
//! cargo test --test crash_sigkill -- --nocapture                     # CI: 200 kills
//! RW_CRASH_KILLS=1000 RW_CRASH_SEED=7 cargo test --test crash_sigkill -- --nocapture
//! ```
//!
//! The child is this test binary itself, re-executed with `--exact crash_child --nocapture` and
//! `RW_CRASH_CHILD=1`; without that variable `crash_child` does nothing.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::Ledger;
use recoverable_write::testing::FakeVendor;
use recoverable_write::testing::drill::{
    self, CREDENTIAL, TENANT, authed_client, fast_policy, replay_safe_contract, ticket_body,
};
use recoverable_write::{
    Operation, RecoverableWrite, SendOnceGuardLayer, SqliteLedger, State, Tenant,
};
use tower::{Service, ServiceBuilder, ServiceExt};

/// Operations written in one round: a sliding window over the intents, so every operation is
/// written by several children (the caller's own resubmission after a crash).
const WINDOW: u64 = 6;

fn intent(k: u64) -> String {
    format!("crash-{k}")
}

fn op(k: u64) -> Operation {
    Operation::for_intent(TENANT, "create_ticket", intent(k))
}

/// SplitMix64, for the kill schedule.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn spawn_child(db: &Path, vendor: &FakeVendor, first: u64, last: u64, final_run: bool) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env("RW_CRASH_CHILD", "1")
        .env("RW_CRASH_DB", db)
        .env("RW_CRASH_VENDOR", vendor.base_url())
        .env("RW_CRASH_FIRST", first.to_string())
        .env("RW_CRASH_LAST", last.to_string())
        .env("RW_CRASH_FINAL", if final_run { "1" } else { "0" })
        .stdout(Stdio::null())
        .stderr(if final_run {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("spawn child")
}

#[test]
fn sigkill_children_writing_through_the_layer() {
    let kills = env_u64("RW_CRASH_KILLS").unwrap_or(200);
    let seed = env_u64("RW_CRASH_SEED").unwrap_or(2026);
    let mut rng = Rng(seed);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let vendor = rt.block_on(FakeVendor::start());
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("ledger.db");
    let t0 = Instant::now();
    // Each round moves the window by one intent: `kills / 2 + WINDOW` operations in all.
    let total = kills / 2 + WINDOW;
    let mut sigkills = 0;
    for round in 0..kills {
        let first = (round / 2).min(total - WINDOW);
        // Faults at the vendor so that kills meet unknown outcomes and in-flight sends.
        match rng.range(0, 5) {
            0 => vendor.faults().drop_after_commit(1),
            1 => vendor
                .faults()
                .delay_before_commit(Duration::from_millis(rng.range(20, 200)), 1),
            2 => vendor
                .faults()
                .delay_response(Duration::from_millis(rng.range(20, 300)), 1),
            _ => {}
        }
        let mut child = spawn_child(&db, &vendor, first, first + WINDOW - 1, false);
        std::thread::sleep(Duration::from_millis(rng.range(5, 250)));
        match child.try_wait().expect("child status") {
            Some(_) => {} // finished before the kill: a clean exit is fine too
            None => {
                // `Child::kill` sends SIGKILL on Unix: no destructor, no flush, no goodbye.
                child.kill().expect("SIGKILL");
                sigkills += 1;
            }
        }
        let _ = child.wait();
    }
    rt.block_on(async { vendor.faults().clear().expect("clear faults") });
    // A last child resubmits everything and recovers to quiescence.
    let status = spawn_child(&db, &vendor, 0, total - 1, true)
        .wait()
        .expect("final child");
    assert!(status.success(), "the final child failed: {status}");
    let elapsed = t0.elapsed();

    // Check against the vendor's own count.
    let tickets = vendor.tickets();
    let mut by_op: HashMap<String, Vec<String>> = HashMap::new();
    for t in &tickets {
        let op = t
            .operation_id
            .clone()
            .expect("every create names its operation");
        by_op.entry(op).or_default().push(t.id.clone());
    }
    let (succeeded, manual, pending) = rt.block_on(async {
        let ledger = SqliteLedger::open(&db).await.expect("open ledger");
        let tenant = Tenant::new(TENANT);
        let (mut succeeded, mut manual, mut pending) = (0u64, 0u64, 0u64);
        let mut succeeded_with_ticket = 0usize;
        for k in 0..total {
            let o = op(k);
            let id = o.id().to_string();
            let held = by_op.get(&id).cloned().unwrap_or_default();
            assert!(
                held.len() <= 1,
                "{id}: {} tickets at the vendor: {held:?}",
                held.len()
            );
            let row = ledger
                .get(&tenant, o.id())
                .await
                .expect("read")
                .unwrap_or_else(|| panic!("{id}: lost (no row)"));
            let log = ledger.evidence(&tenant, o.id()).await.expect("evidence");
            match row.state {
                State::Succeeded => {
                    succeeded += 1;
                    assert_eq!(
                        held.len(),
                        1,
                        "{id}: SUCCEEDED but the vendor holds {held:?}"
                    );
                    assert_eq!(
                        row.remote_ref.as_deref(),
                        held.first().map(String::as_str),
                        "{id}: SUCCEEDED with another ticket than the vendor's"
                    );
                    succeeded_with_ticket += 1;
                }
                State::ManualReview => {
                    manual += 1;
                    assert!(
                        log.iter().any(|e| e.entry.kind != "created"),
                        "{id}: MANUAL_REVIEW without evidence"
                    );
                }
                State::Unknown | State::Processing | State::RetryReady => {
                    pending += 1;
                    assert!(
                        row.next_check_ms.is_some(),
                        "{id}: pending with no next check"
                    );
                }
                State::Rejected => assert!(held.is_empty(), "{id}: REJECTED but executed"),
                other => panic!("{id}: {other} after the final recovery: {row:?}"),
            }
            assert!(
                !format!("{row:?}{log:?}").contains("sk_test_secret"),
                "{id}: credential stored"
            );
        }
        assert_eq!(
            tickets.len(),
            succeeded_with_ticket,
            "every ticket belongs to one SUCCEEDED operation that names it"
        );
        (succeeded, manual, pending)
    });
    eprintln!(
        "crash test: {sigkills} SIGKILLs over {kills} rounds, {total} operations \
         ({succeeded} succeeded, {manual} in review, {pending} pending), {} tickets, {elapsed:.1?}",
        tickets.len()
    );
    assert!(sigkills * 10 >= kills * 8, "too few children were killed");
}

/// The child process (does nothing unless `RW_CRASH_CHILD=1`).
#[test]
fn crash_child() {
    if std::env::var("RW_CRASH_CHILD").as_deref() != Ok("1") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(child_main());
}

async fn child_main() {
    let var = |n: &str| std::env::var(n).expect(n);
    let db = var("RW_CRASH_DB");
    let base = var("RW_CRASH_VENDOR");
    let first: u64 = var("RW_CRASH_FIRST").parse().expect("first");
    let last: u64 = var("RW_CRASH_LAST").parse().expect("last");
    let final_run = var("RW_CRASH_FINAL") == "1";

    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&db).await.expect("open ledger"));
    let rw = RecoverableWrite::builder(ledger.clone())
        .budget(fast_policy())
        .contract(replay_safe_contract())
        .build()
        .expect("a valid configuration");
    let layer = rw.layer();
    let guard = SendOnceGuardLayer::new();
    // The stack below the layer applies the credential at send time, as in the drills.
    let credential = Arc::new(Mutex::new(CREDENTIAL.to_owned()));
    let authed = authed_client(credential.clone());
    let recoverer = drill::recoverer(&rw, &guard, &base, credential, Duration::from_millis(100))
        .interval(Duration::from_millis(20));
    // Boxed, as `Drill::writer` does: the boxed future is plainly `Send` for `tokio::spawn`.
    let writer: tower::util::BoxCloneSyncService<
        Request<Full<Bytes>>,
        (),
        recoverable_write::Error,
    > = tower::util::BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(layer.clone())
            .layer(guard)
            .service(authed)
            .map_response(|_| ()),
    );

    let background = (!final_run).then(|| recoverer.clone().spawn());
    let mut tasks = Vec::new();
    for k in first..=last {
        let mut svc = writer.clone();
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let o = op(k);
            let mut req = Request::post(format!("{base}/tickets"))
                .header("content-type", "application/json")
                .header("x-tenant", TENANT)
                .body(Full::new(Bytes::from(ticket_body(&o, &format!("D{k}")))))
                .expect("request");
            req.extensions_mut().insert(o);
            if let Ok(s) = svc.ready().await {
                let _ = s.call(req).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    if !final_run {
        // Keep recovering until killed.
        tokio::time::sleep(Duration::from_secs(30)).await;
        if let Some(h) = background {
            h.shutdown().await;
        }
        return;
    }
    // The final child: recover until every operation is settled (bounded).
    let tenant = Tenant::new(TENANT);
    for _ in 0..1_500 {
        let _ = recoverer.run_once().await;
        let mut open = 0;
        for k in first..=last {
            if let Ok(Some(row)) = ledger.get(&tenant, op(k).id()).await
                && !row.state.is_terminal()
                && row.state != State::ManualReview
            {
                open += 1;
            }
        }
        if open == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("crash child: recovery did not settle every operation");
}
