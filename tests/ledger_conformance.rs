//! The ledger conformance suite for every built-in backend, plus SQLite-only drills: data
//! survives a restart, a corrupt row is an error (never a panic), a closed ledger is
//! unavailable, two handles on one file still let exactly one sender win.

use std::path::Path;
use std::sync::Arc;

use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::conformance::{
    self, T0, evidence_entry, keep, new_operation, update_of,
};
use recoverable_write::ledger::{
    Created, Ledger, LedgerError, MemoryLedger, OperationRecord, SqliteLedger, SqliteLedgerOptions,
    Synchronous,
};
use recoverable_write::state::{Event, State, Tick};
use recoverable_write::{AttemptId, OperationId, Tenant};

recoverable_write::ledger_conformance_tests!(memory, make = async { MemoryLedger::new() });

recoverable_write::ledger_conformance_tests!(
    sqlite_file,
    make_with_guard = async {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
            .await
            .expect("open sqlite ledger");
        (ledger, dir)
    }
);

recoverable_write::ledger_conformance_tests!(
    sqlite_in_memory,
    make = async {
        SqliteLedger::in_memory()
            .await
            .expect("open in-memory sqlite ledger")
    }
);

// ── helpers ─────────────────────────────────────────────────────────────────────────────────────

async fn create<L: Ledger + ?Sized>(ledger: &L, id: &str) -> OperationRecord {
    match ledger
        .create_or_get(new_operation("tenant-a", id, &format!("intent-{id}")))
        .await
        .expect("create_or_get")
    {
        Created::New(r) => r,
        Created::Existing(r) => panic!("unexpected existing {}", r.operation_id),
    }
}

/// A connection of its own to the ledger file, as another program (or an operator's `sqlite3`)
/// would open it.
async fn raw(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("raw connection");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    conn
}

async fn raw_exec(path: &Path, sql: &'static str) {
    let conn = raw(path).await;
    let changed = conn.execute(sql, []).expect("raw sql");
    assert_eq!(changed, 1, "{sql}");
    conn.close()
        .map_err(|(_, e)| e)
        .expect("close raw connection");
}

fn assert_unavailable<T: std::fmt::Debug>(result: Result<T, LedgerError>, what: &str) {
    match result {
        Err(LedgerError::Unavailable(_)) => {}
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    }
}

fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, LedgerError>, op: &str, column: &str) {
    match result {
        Err(LedgerError::Corrupt { operation, detail }) => {
            assert_eq!(operation, op);
            assert!(
                detail.contains(column),
                "detail {detail:?} should name {column}"
            );
        }
        other => panic!("expected Corrupt for {op}, got {other:?}"),
    }
}

/// Every trait method, called once; each result must be `Unavailable`.
async fn every_call_is_unavailable(ledger: &impl Ledger, existing: &OperationRecord) {
    let tenant = existing.tenant.clone();
    let id = existing.operation_id.clone();
    assert_unavailable(
        ledger
            .create_or_get(new_operation("tenant-a", "op-new", "intent-new"))
            .await,
        "create_or_get",
    );
    assert_unavailable(ledger.get(&tenant, &id).await, "get");
    let update = update_of(existing, keep(existing, State::InFlight, T0 + 1), "x");
    assert_unavailable(ledger.apply(update).await, "apply");
    assert_unavailable(ledger.claim_due(T0, 1_000, 10).await, "claim_due");
    assert_unavailable(ledger.sweep_expired(T0).await, "sweep_expired");
    assert_unavailable(
        ledger
            .append_evidence(&tenant, &id, evidence_entry("note", T0))
            .await,
        "append_evidence",
    );
    assert_unavailable(ledger.evidence(&tenant, &id).await, "evidence");
}

// ── memory ──────────────────────────────────────────────────────────────────────────────────────

#[tokio::test]
async fn memory_outage_fails_every_call_and_changes_nothing() {
    let ledger = MemoryLedger::new();
    let r = create(&ledger, "op-1").await;
    let handle = ledger.clone();
    handle.set_unavailable(true);
    assert!(ledger.is_unavailable());
    every_call_is_unavailable(&ledger, &r).await;
    ledger.set_unavailable(false);
    assert_eq!(
        ledger.get(&r.tenant, &r.operation_id).await.unwrap(),
        Some(r.clone())
    );
    assert_eq!(
        ledger
            .evidence(&r.tenant, &r.operation_id)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(ledger.len(), 1);
}

#[tokio::test]
async fn memory_clones_share_one_store() {
    let ledger = MemoryLedger::new();
    let other = ledger.clone();
    let r = create(&ledger, "op-1").await;
    assert_eq!(
        other.get(&r.tenant, &r.operation_id).await.unwrap(),
        Some(r)
    );
    assert!(!other.is_empty());
}

#[tokio::test]
async fn ledgers_work_behind_a_trait_object() {
    let ledgers: Vec<Arc<dyn FullLedger>> = vec![
        Arc::new(MemoryLedger::new()),
        Arc::new(SqliteLedger::in_memory().await.unwrap()),
    ];
    for ledger in ledgers {
        let r = create(&*ledger, "op-dyn").await;
        assert_eq!(
            ledger.get(&r.tenant, &r.operation_id).await.unwrap(),
            Some(r)
        );
    }
}

// ── sqlite ──────────────────────────────────────────────────────────────────────────────────────

#[tokio::test]
async fn sqlite_data_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let (record, log) = {
        let ledger = SqliteLedger::open(&path).await.unwrap();
        let r = create(&ledger, "op-204").await;
        let attempt = AttemptId::generate();
        let changes = recoverable_write::ledger::conformance::RawChanges {
            generation: recoverable_write::Generation(1),
            attempts_used: 1,
            current_attempt: Some(attempt),
            lease_until_ms: Some(T0 + 15_000),
            ..keep(&r, State::InFlight, T0 + 1)
        };
        let r = ledger
            .apply(update_of(&r, changes, "attempt_registered"))
            .await
            .unwrap()
            .unwrap();
        ledger
            .append_evidence(&r.tenant, &r.operation_id, evidence_entry("note", T0 + 2))
            .await
            .unwrap();
        // The appended entry advanced the version (the fencing rule): read the row as stored.
        let r = ledger
            .get(&r.tenant, &r.operation_id)
            .await
            .unwrap()
            .unwrap();
        let log = ledger.evidence(&r.tenant, &r.operation_id).await.unwrap();
        (r, log)
        // The ledger is dropped here without `close`, as a crashing process would.
    };
    let reopened = SqliteLedger::open(&path).await.unwrap();
    assert_eq!(
        reopened
            .get(&record.tenant, &record.operation_id)
            .await
            .unwrap(),
        Some(record.clone())
    );
    assert_eq!(
        reopened
            .evidence(&record.tenant, &record.operation_id)
            .await
            .unwrap(),
        log
    );
    // The restarted process keeps the old budget and sees the in-flight row expire.
    let swept = reopened.sweep_expired(T0 + 20_000).await.unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].attempts_used, 1);
    assert_eq!(swept[0].state, State::Unknown);
    // A third open (migrations already applied) works too.
    reopened.close().await;
    let again = SqliteLedger::open_with(
        &path,
        SqliteLedgerOptions::new().synchronous(Synchronous::Normal),
    )
    .await
    .unwrap();
    assert_eq!(
        again
            .get(&record.tenant, &record.operation_id)
            .await
            .unwrap()
            .map(|r| r.state),
        Some(State::Unknown)
    );
}

#[tokio::test]
async fn sqlite_corrupt_rows_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open(&path).await.unwrap();
    let tenant = Tenant::new("tenant-a");

    let bogus = create(&ledger, "op-bogus-state").await;
    raw_exec(
        &path,
        "UPDATE rw_operations SET state = 'BOGUS' WHERE operation_id = 'op-bogus-state'",
    )
    .await;
    assert_corrupt(
        ledger.get(&tenant, &bogus.operation_id).await,
        "op-bogus-state",
        "state",
    );

    create(&ledger, "op-bad-policy").await;
    raw_exec(
        &path,
        "UPDATE rw_operations SET budget_policy = '{not json' WHERE operation_id = 'op-bad-policy'",
    )
    .await;
    assert_corrupt(
        ledger
            .get(&tenant, &OperationId::new("op-bad-policy"))
            .await,
        "op-bad-policy",
        "budget_policy",
    );

    create(&ledger, "op-bad-attempt").await;
    raw_exec(&path, "UPDATE rw_operations SET current_attempt = 'not-a-uuid' WHERE operation_id = 'op-bad-attempt'").await;
    assert_corrupt(
        ledger
            .get(&tenant, &OperationId::new("op-bad-attempt"))
            .await,
        "op-bad-attempt",
        "current_attempt",
    );

    create(&ledger, "op-bad-headers").await;
    raw_exec(&path, "UPDATE rw_operations SET request_headers = '{\"a\":1}' WHERE operation_id = 'op-bad-headers'").await;
    assert_corrupt(
        ledger
            .get(&tenant, &OperationId::new("op-bad-headers"))
            .await,
        "op-bad-headers",
        "request_headers",
    );

    let bad_log = create(&ledger, "op-bad-log").await;
    raw_exec(
        &path,
        "UPDATE rw_evidence SET to_state = 'NOPE' WHERE operation_id = 'op-bad-log'",
    )
    .await;
    assert_corrupt(
        ledger.evidence(&tenant, &bad_log.operation_id).await,
        "op-bad-log",
        "to_state",
    );

    // A due row that cannot be decoded is quarantined by the claim, not claimed, and the
    // claim itself succeeds (issue 10 item 10: one bad row must not stop recovery).
    let due = create(&ledger, "op-due-corrupt").await;
    let due = ledger
        .apply(update_of(
            &due,
            recoverable_write::ledger::conformance::RawChanges {
                next_check_ms: Some(T0),
                ..keep(&due, State::Unknown, T0)
            },
            "setup",
        ))
        .await
        .unwrap()
        .unwrap();
    raw_exec(
        &path,
        "UPDATE rw_operations SET request_headers = 'oops' WHERE operation_id = 'op-due-corrupt'",
    )
    .await;
    let claimed = ledger
        .claim_due(T0 + 1, 1_000, 10)
        .await
        .expect("claim_due");
    assert!(claimed.is_empty(), "{claimed:?}");
    let quarantined = ledger.quarantined(10).await.expect("quarantined");
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined[0].operation_id, due.operation_id);
    assert!(
        quarantined[0].error.contains("request_headers"),
        "{quarantined:?}"
    );
    assert!(
        ledger
            .claim_due(T0 + 1_000_000, 1_000, 10)
            .await
            .expect("claim_due")
            .is_empty(),
        "a quarantined row is never claimed again"
    );
    let conn = raw(&path).await;
    let claimed_entries: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM rw_evidence WHERE operation_id = 'op-due-corrupt' AND kind = 'recovery_claimed'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(claimed_entries, 0, "a quarantined row gets no claim entry");
}

#[tokio::test]
async fn sqlite_closed_ledger_is_unavailable_for_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
        .await
        .unwrap();
    let r = create(&ledger, "op-1").await;
    let clone = ledger.clone();
    assert!(!clone.is_closed());
    ledger.close().await;
    assert!(clone.is_closed());
    every_call_is_unavailable(&clone, &r).await;
    every_call_is_unavailable(&ledger, &r).await;
}

#[tokio::test]
async fn sqlite_in_memory_closed_is_unavailable() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let r = create(&ledger, "op-1").await;
    ledger.close().await;
    every_call_is_unavailable(&ledger, &r).await;
}

#[tokio::test]
async fn sqlite_in_memory_ledgers_are_independent() {
    let a = SqliteLedger::in_memory().await.unwrap();
    let b = SqliteLedger::in_memory().await.unwrap();
    let r = create(&a, "op-1").await;
    assert_eq!(b.get(&r.tenant, &r.operation_id).await.unwrap(), None);
}

#[tokio::test]
async fn sqlite_open_in_a_missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let result = SqliteLedger::open(dir.path().join("no/such/dir/ledger.db")).await;
    assert_unavailable(result, "open");
    assert!(matches!(
        SqliteLedger::open("").await,
        Err(LedgerError::Config(_))
    ));
}

/// Two processes (two ledgers on one file, each with its own writer) race the same claim:
/// exactly one wins, the other is refused by the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_handles_on_one_file_let_exactly_one_sender_win() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let first = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let second = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let r = create(&*first, "op-race").await;
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let ledger = if i % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        let (barrier, r) = (barrier.clone(), r.clone());
        tasks.push(tokio::spawn(async move {
            let now = T0 + 1;
            let attempt = AttemptId::generate();
            let update = r
                .update_on(
                    &Event::ClaimSend,
                    Tick {
                        now_ms: now,
                        jitter: 0.0,
                    },
                    Some(attempt),
                    Some(now + 15_000),
                    None,
                    evidence_entry("attempt_registered", now),
                )
                .unwrap();
            barrier.wait().await;
            ledger.apply(update).await.unwrap().is_some()
        }));
    }
    let mut wins = 0;
    for task in tasks {
        if task.await.unwrap() {
            wins += 1;
        }
    }
    assert_eq!(wins, 1);
    let row = second
        .get(&r.tenant, &r.operation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state, State::InFlight);
    assert_eq!(row.version, 1);
    let log = first.evidence(&r.tenant, &r.operation_id).await.unwrap();
    assert_eq!(log.len(), 2);
}

#[test]
fn conformance_run_executes_the_future() {
    let mut ran = false;
    conformance::run(async {
        ran = true;
    });
    assert!(ran);
}
