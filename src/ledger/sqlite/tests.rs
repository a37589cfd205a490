use super::*;
use conn::Conn;
use sql::*;
use writer::Finish;

/// The value of `pragma` on the writer's connection, between batches.
async fn writer_pragma(ledger: &SqliteLedger, pragma: &'static str) -> String {
    ledger
        .write(move |conn| {
            let rows = conn.rows_dynamic(pragma, &[])?;
            let v = match rows[0].try_get_at::<Option<String>>(0) {
                Ok(Some(s)) => s,
                _ => rows[0].try_get_at::<i64>(0).unwrap().to_string(),
            };
            Ok(Finish::Unchanged(v))
        })
        .await
        .unwrap()
}

/// The value of `pragma` on a reader's connection.
async fn reader_pragma(ledger: &SqliteLedger, pragma: &'static str) -> i64 {
    ledger
        .read(move |conn| conn.scalar_i64(pragma, &[]))
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn pragmas_are_set_on_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
        .await
        .unwrap();
    let mode = writer_pragma(&ledger, "PRAGMA journal_mode").await;
    assert_eq!(mode.to_ascii_lowercase(), "wal");
    // 2 = FULL.
    assert_eq!(writer_pragma(&ledger, "PRAGMA synchronous").await, "2");
    assert_eq!(writer_pragma(&ledger, "PRAGMA foreign_keys").await, "1");
    // 2 = MEMORY: statement journals never spill to a temporary file.
    assert_eq!(writer_pragma(&ledger, "PRAGMA temp_store").await, "2");
    // 2 = INCREMENTAL: retention gives space back.
    assert_eq!(writer_pragma(&ledger, "PRAGMA auto_vacuum").await, "2");
    // Readers never sync: they write nothing. Their level is SQLite's default.
    assert_eq!(reader_pragma(&ledger, "PRAGMA synchronous").await, 2);
    assert_eq!(reader_pragma(&ledger, "PRAGMA foreign_keys").await, 1);
}

#[tokio::test]
async fn synchronous_normal_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open_with(
        dir.path().join("ledger.db"),
        SqliteLedgerOptions::new().synchronous(Synchronous::Normal),
    )
    .await
    .unwrap();
    assert_eq!(writer_pragma(&ledger, "PRAGMA synchronous").await, "1");
}

#[tokio::test]
async fn zero_readers_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteLedger::open_with(
        dir.path().join("ledger.db"),
        SqliteLedgerOptions::new().max_readers(0),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LedgerError::Config(_)), "{err:?}");
}

async fn count(ledger: &SqliteLedger, sql: &'static str) -> i64 {
    ledger
        .read(move |conn| conn.scalar_i64(sql, &[]))
        .await
        .unwrap()
        .unwrap()
}

/// A raw write through the writer thread: inserts a bare operation row named `id`.
fn insert_row(
    id: &'static str,
) -> impl Fn(&mut Conn) -> Result<Finish<()>, LedgerError> + Send + 'static {
    move |conn| {
        conn.execute(
            "INSERT INTO rw_operations (tenant, operation_id, action, intent_ref, \
             idempotency_key, payload_hash, request_method, request_url, \
             request_headers, request_body, contract_name, contract_hash, budget_policy, \
             state, created_ms, updated_ms) VALUES ('t', ?1, 'a', ?1, 'k', 'h', 'POST', \
             'http://v/', '[]', x'', 'c', 'h', '{}', 'PREPARED', 0, 0)",
            &[rusqlite::types::Value::Text(id.to_owned())],
        )?;
        Ok(Finish::Commit(()))
    }
}

/// Runs `writes` (futures that each queue their write when first polled, such as a
/// `tokio::join!` of `SqliteLedger::write` calls) so that they are all committed in one batch:
/// the writer is held until every one was queued.
async fn in_one_batch<F: std::future::Future>(ledger: &SqliteLedger, writes: F) -> F::Output {
    let gate = ledger.hold_writer_for_tests().await.unwrap();
    let release = async move {
        // Pending once: by the time this runs again, `writes` was polled and queued all.
        tokio::task::yield_now().await;
        drop(gate);
    };
    let (out, ()) = tokio::join!(writes, release);
    out
}

/// Evidence for an operation that does not exist: a foreign key violation.
const ORPHAN_EVIDENCE: &str = "INSERT INTO rw_evidence (tenant, operation_id, generation, \
     kind, at_ms) VALUES ('t', 'op-missing', 0, 'x', 0)";

/// A request whose precondition failed: nothing to keep.
fn refused(_: &mut Conn) -> Result<Finish<u8>, LedgerError> {
    Ok(Finish::Unchanged(7))
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_failing_after_its_first_statement_is_undone_alone() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let commits = ledger.commits();
    // The middle request writes a row, then violates a constraint: its row must go, the
    // others' rows stay, and all three share one commit.
    fn failing(conn: &mut Conn) -> Result<Finish<()>, LedgerError> {
        insert_row("op-half")(conn)?;
        conn.execute(ORPHAN_EVIDENCE, &[])?;
        Ok(Finish::Commit(()))
    }
    let (a, b, c) = in_one_batch(&ledger, async {
        tokio::join!(
            ledger.write(insert_row("op-a")),
            ledger.write(failing),
            ledger.write(insert_row("op-c")),
        )
    })
    .await;
    assert!(a.is_ok() && c.is_ok(), "{a:?} {c:?}");
    assert!(matches!(b, Err(LedgerError::Unavailable(_))), "{b:?}");
    assert_eq!(ledger.commits() - commits, 1);
    assert_eq!(
        count(
            &ledger,
            "SELECT COUNT(*) FROM rw_operations WHERE operation_id IN ('op-a', 'op-c')"
        )
        .await,
        2
    );
    assert_eq!(
        count(
            &ledger,
            "SELECT COUNT(*) FROM rw_operations WHERE operation_id = 'op-half'"
        )
        .await,
        0
    );
}

/// Evidence for `op-a`: fails (foreign key) unless `op-a` exists in this transaction.
fn evidence_for_a(conn: &mut Conn) -> Result<Finish<()>, LedgerError> {
    conn.execute(
        "INSERT INTO rw_evidence (tenant, operation_id, generation, kind, at_ms) \
         VALUES ('t', 'op-a', 0, 'x', 0)",
        &[],
    )?;
    Ok(Finish::Commit(()))
}

#[tokio::test(flavor = "current_thread")]
async fn failed_writes_are_dropped_and_the_others_kept_exactly_once() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let (commits, writes) = (ledger.commits(), ledger.committed_writes());
    // Each failing write inserts a row, then violates a constraint.
    fn failing(
        id: &'static str,
    ) -> impl Fn(&mut Conn) -> Result<Finish<()>, LedgerError> + Send + 'static {
        move |conn| {
            insert_row(id)(conn)?;
            conn.execute(ORPHAN_EVIDENCE, &[])?;
            Ok(Finish::Commit(()))
        }
    }
    // `b` needs `a`'s row, so it must run after `a` in the transaction that commits; `a`
    // and `c` are plain inserts, which would fail if they ran twice in it.
    let (a, f1, b, f2, c) = in_one_batch(&ledger, async {
        tokio::join!(
            ledger.write(insert_row("op-a")),
            ledger.write(failing("op-half-1")),
            ledger.write(evidence_for_a),
            ledger.write(failing("op-half-2")),
            ledger.write(insert_row("op-c")),
        )
    })
    .await;
    assert!(a.is_ok() && b.is_ok() && c.is_ok(), "{a:?} {b:?} {c:?}");
    for failed in [f1, f2] {
        assert!(
            matches!(&failed, Err(LedgerError::Unavailable(e)) if e.to_string().contains("FOREIGN KEY")),
            "{failed:?}"
        );
    }
    assert_eq!(ledger.commits() - commits, 1);
    assert_eq!(ledger.committed_writes() - writes, 5);
    assert_eq!(
        count(
            &ledger,
            "SELECT COUNT(*) FROM rw_operations WHERE operation_id IN ('op-a', 'op-c')"
        )
        .await,
        2
    );
    assert_eq!(
        count(&ledger, "SELECT COUNT(*) FROM rw_operations").await,
        2,
        "nothing of a failed write is kept"
    );
    assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_of_only_failed_writes_commits_nothing() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let commits = ledger.commits();
    // No `op-a`: both fail, alone or after the other was dropped.
    let (x, y) = in_one_batch(&ledger, async {
        tokio::join!(ledger.write(evidence_for_a), ledger.write(evidence_for_a))
    })
    .await;
    assert!(x.is_err() && y.is_err(), "{x:?} {y:?}");
    assert_eq!(ledger.commits(), commits);
    assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 0);
    // The ledger keeps working afterwards.
    ledger.write(insert_row("op-a")).await.unwrap();
    ledger.write(evidence_for_a).await.unwrap();
    assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_commit_fails_every_caller_and_keeps_nothing() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let commits = ledger.commits();
    // A deferred foreign key violation passes every statement and fails the COMMIT.
    fn poison(conn: &mut Conn) -> Result<Finish<()>, LedgerError> {
        conn.execute("PRAGMA defer_foreign_keys = ON", &[])?;
        conn.execute(ORPHAN_EVIDENCE, &[])?;
        Ok(Finish::Commit(()))
    }
    // A request whose precondition "fails" is not reported as refused either: the refusal
    // may rest on a change of the failed batch.
    let (a, b, c, d) = in_one_batch(&ledger, async {
        tokio::join!(
            ledger.write(insert_row("op-a")),
            ledger.write(poison),
            ledger.write(insert_row("op-c")),
            ledger.write(refused),
        )
    })
    .await;
    for (name, result) in [("a", a), ("b", b), ("c", c), ("d", d.map(|_| ()))] {
        assert!(
            matches!(&result, Err(LedgerError::Unavailable(e)) if e.to_string().contains("not committed")),
            "{name}: {result:?}"
        );
    }
    assert_eq!(ledger.commits(), commits);
    assert_eq!(
        count(&ledger, "SELECT COUNT(*) FROM rw_operations").await,
        0
    );
    assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 0);
    // The ledger keeps working afterwards.
    ledger.write(insert_row("op-after")).await.unwrap();
    assert_eq!(
        count(&ledger, "SELECT COUNT(*) FROM rw_operations").await,
        1
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_of_refusals_is_rolled_back_without_a_commit() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let commits = ledger.commits();
    let (a, b) = in_one_batch(&ledger, async {
        tokio::join!(ledger.write(refused), ledger.write(refused))
    })
    .await;
    assert_eq!((a.unwrap(), b.unwrap()), (7, 7));
    assert_eq!(ledger.commits(), commits, "nothing to make durable");
}

/// The claim of send rights on the fresh row of `new`, as the layer builds it.
#[cfg(feature = "test-util")]
fn first_claim(new: &NewOperation) -> Update {
    use crate::state::{Clock, Event, transition};
    let now = new.now_ms;
    let clock = Clock {
        now_ms: now,
        jitter: 0.0,
    };
    let t = transition(&new.snapshot(), &Event::ClaimSend, clock).unwrap();
    new.first_update(
        &t,
        Some(AttemptId::generate()),
        Some(now + 30_000),
        super::super::conformance::evidence_entry("attempt_registered", now),
        now,
    )
}

#[cfg(feature = "test-util")]
#[tokio::test]
async fn create_and_apply_is_one_write_and_one_commit() {
    use super::super::conformance::new_operation;
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
        .await
        .unwrap();
    let new = new_operation("t", "op-1", "intent-1");
    let (commits, writes) = (ledger.commits(), ledger.committed_writes());
    let created = ledger
        .create_and_apply(new.clone(), first_claim(&new))
        .await
        .unwrap();
    assert!(
        matches!(&created, Created::New(r) if r.state == State::InFlight),
        "{created:?}"
    );
    assert_eq!(
        (
            ledger.commits() - commits,
            ledger.committed_writes() - writes
        ),
        (1, 1)
    );
    // A second call for the same intent changes nothing: no commit at all.
    let again = new_operation("t", "op-2", "intent-1");
    let existing = ledger
        .create_and_apply(again.clone(), first_claim(&again))
        .await
        .unwrap();
    assert_eq!(existing, Created::Existing(created.into_record()));
    assert_eq!(ledger.commits() - commits, 1);
    assert_eq!(count(&ledger, "SELECT COUNT(*) FROM rw_evidence").await, 2);
}

#[tokio::test]
async fn every_call_after_close_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open(&path).await.unwrap();
    ledger.write(insert_row("op-a")).await.unwrap();
    let other = ledger.clone();
    ledger.close().await;
    assert!(other.is_closed());
    let write = other.write(insert_row("op-b")).await;
    assert!(
        matches!(&write, Err(LedgerError::Unavailable(e)) if e.to_string().contains("closed")),
        "{write:?}"
    );
    let read = other
        .get(&Tenant::new("t"), &OperationId::new("op-a"))
        .await;
    assert!(matches!(read, Err(LedgerError::Unavailable(_))), "{read:?}");
    // What was committed before the close is in the file, and the file opens again.
    let again = SqliteLedger::open(&path).await.unwrap();
    assert_eq!(count(&again, "SELECT COUNT(*) FROM rw_operations").await, 1);
}

/// Readers have their own connections: a read completes while the writer is busy in the
/// middle of a batch (here: a write that waits, inside its transaction, for the read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_do_not_wait_for_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
        .await
        .unwrap();
    ledger.write(insert_row("op-a")).await.unwrap();
    let (read_done, wait_for_read) = std::sync::mpsc::channel::<()>();
    let wait_for_read = std::sync::Mutex::new(wait_for_read);
    let (started, writer_started) = tokio::sync::oneshot::channel::<()>();
    let started = std::sync::Mutex::new(Some(started));
    let writer = ledger.clone();
    let busy = tokio::spawn(async move {
        writer
            .write(move |conn| {
                insert_row("op-b")(conn)?;
                if let Some(started) = started.lock().unwrap().take() {
                    let _ = started.send(());
                }
                // Holds the write lock until the read is done (or gives up after 20 s).
                let waited = wait_for_read
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(20));
                Ok(Finish::Commit(waited.is_ok()))
            })
            .await
    });
    writer_started.await.unwrap();
    // The writer holds its transaction open: this read sees the committed `op-a` only.
    let read = ledger
        .get(&Tenant::new("t"), &OperationId::new("op-a"))
        .await
        .unwrap();
    assert!(read.is_some());
    assert_eq!(
        count(&ledger, "SELECT COUNT(*) FROM rw_operations").await,
        1
    );
    read_done.send(()).unwrap();
    assert!(
        busy.await.unwrap().unwrap(),
        "the read finished while the writer was inside its batch"
    );
    assert_eq!(
        count(&ledger, "SELECT COUNT(*) FROM rw_operations").await,
        2
    );
}

async fn plan(ledger: &SqliteLedger, sql: &'static str) -> String {
    plan_with(ledger, sql.to_owned(), vec![0.into(), 0.into(), 10.into()]).await
}

/// The plan of `explain` (an `EXPLAIN QUERY PLAN` statement) with `args`.
async fn plan_with(
    ledger: &SqliteLedger,
    explain: String,
    args: Vec<rusqlite::types::Value>,
) -> String {
    let rows = ledger
        .read(move |conn| conn.rows_dynamic(&explain, &args))
        .await
        .unwrap();
    rows.iter()
        .map(|r| r.try_get::<String>("detail").unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn due_work_and_sweep_queries_use_the_partial_indexes() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let claim = plan(
        &ledger,
        "EXPLAIN QUERY PLAN SELECT rowid FROM rw_operations INDEXED BY rw_operations_due \
         WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY') AND next_check_ms <= ?1 \
           AND (lease_until_ms IS NULL OR lease_until_ms <= ?2) \
         ORDER BY next_check_ms, rowid LIMIT ?3",
    )
    .await;
    assert!(claim.contains("rw_operations_due"), "{claim}");
    assert!(!claim.contains("TEMP B-TREE"), "{claim}");
    let sweep = plan(
        &ledger,
        "EXPLAIN QUERY PLAN SELECT rowid FROM rw_operations \
         INDEXED BY rw_operations_in_flight_lease WHERE state = 'IN_FLIGHT' AND lease_until_ms < ?1 AND ?2 = ?2 AND ?3 = ?3",
    )
    .await;
    assert!(sweep.contains("rw_operations_in_flight_lease"), "{sweep}");
    let evidence = plan(
        &ledger,
        "EXPLAIN QUERY PLAN SELECT id FROM rw_evidence \
         WHERE tenant = ?1 AND operation_id = ?2 AND ?3 = ?3 ORDER BY id",
    )
    .await;
    assert!(evidence.contains("rw_evidence_by_operation"), "{evidence}");
    assert!(!evidence.contains("TEMP B-TREE"), "{evidence}");
}

#[tokio::test]
async fn the_real_claim_and_sweep_statements_use_the_partial_indexes() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    for (sql, index) in [
        (CLAIM_DUE, "rw_operations_due"),
        (SWEEP_EXPIRED, "rw_operations_in_flight_lease"),
        (CLAIM_PREPARED, "rw_operations_prepared"),
    ] {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let args = match sql {
            CLAIM_PREPARED => vec![0.into(), 0.into(), 0.into(), 10.into()],
            SWEEP_EXPIRED => vec![0.into(), rusqlite::types::Value::Text("r".into())],
            _ => vec![0.into(), 0.into(), 10.into()],
        };
        let plan = plan_with(&ledger, explain, args).await;
        assert!(plan.contains(index), "{sql}\n{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{sql}\n{plan}");
    }
}

/// The plan of a listing or counting statement, its arguments bound.
pub(super) async fn plan_of(ledger: &SqliteLedger, sql: super::super::query::Sql) -> String {
    let explain = format!("EXPLAIN QUERY PLAN {}", sql.text);
    plan_with(ledger, explain, values(sql.args)).await
}

#[tokio::test]
async fn the_review_queue_listing_and_the_counts_read_the_state_indexes() {
    use super::super::query::{count_sql, list_sql};
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let one = OperationQuery::tenant(Tenant::new("t")).state(State::ManualReview);
    let all = OperationQuery::all_tenants().state(State::ManualReview);
    for (q, index) in [
        (one.clone(), "rw_operations_by_tenant_state"),
        (
            one.clone().order(Order::OldestFirst),
            "rw_operations_by_tenant_state",
        ),
        (
            one.after(Cursor::new(5, 7)),
            "rw_operations_by_tenant_state",
        ),
        (all.clone(), "rw_operations_by_state"),
        (
            all.clone()
                .order(Order::OldestFirst)
                .after(Cursor::new(5, 7)),
            "rw_operations_by_state",
        ),
    ] {
        let plan = plan_of(
            &ledger,
            list_sql(&q, "rw_operations", "rowid", '?').unwrap(),
        )
        .await;
        assert!(plan.contains(index), "{q:?}\n{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{q:?}\n{plan}");
    }
    for (scope, index) in [
        (
            TenantScope::Tenant(Tenant::new("t")),
            "rw_operations_by_tenant_state",
        ),
        (TenantScope::AllTenants, "rw_operations_by_state"),
    ] {
        let sql = count_sql(&scope, "rw_operations", QUARANTINED_ROWS, '?').unwrap();
        let plan = plan_of(&ledger, sql).await;
        assert!(plan.contains(index), "{scope:?}\n{plan}");
        // The quarantined rows are counted from their partial index, never from a tenant's
        // whole range.
        assert!(
            plan.contains("rw_operations_quarantined"),
            "{scope:?}\n{plan}"
        );
    }
    for q in [
        OperationQuery::tenant(Tenant::new("t")).quarantined_only(),
        OperationQuery::all_tenants()
            .quarantined_only()
            .order(Order::OldestFirst)
            .after(Cursor::new(5, 7)),
    ] {
        let plan = plan_of(
            &ledger,
            list_sql(&q, QUARANTINED_ROWS, "rowid", '?').unwrap(),
        )
        .await;
        assert!(plan.contains("rw_operations_quarantined"), "{q:?}\n{plan}");
    }
}

/// Callbacks are matched by remote reference or idempotency key through their indexes, never
/// by scanning a tenant's rows.
#[tokio::test]
async fn callback_lookups_read_their_indexes() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    for (sql, index) in [
        (SELECT_BY_REMOTE_REF, "rw_operations_by_remote_ref"),
        (
            SELECT_BY_IDEMPOTENCY_KEY,
            "rw_operations_by_idempotency_key",
        ),
        // Issue 27 item 7: the probes across tenants of an unmatched callback.
        (SELECT_OTHER_TENANT_BY_ID, "rw_operations_by_operation_id"),
        (
            SELECT_OTHER_TENANT_BY_REMOTE_REF,
            "rw_operations_by_remote_ref",
        ),
        (
            SELECT_TENANT_CALLBACK_QUARANTINE,
            "rw_callback_quarantine_by_tenant",
        ),
    ] {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let plan = plan_with(
            &ledger,
            explain,
            vec![
                rusqlite::types::Value::Text("tenant-a".into()),
                rusqlite::types::Value::Text("W731".into()),
            ],
        )
        .await;
        assert!(plan.contains(index), "{sql}\n{plan}");
    }
    // The dedupe probe reads the dedupe table's key.
    let plan = plan_with(
        &ledger,
        format!("EXPLAIN QUERY PLAN {SELECT_CALLBACK_EVENT}"),
        vec![
            rusqlite::types::Value::Text("stripe".into()),
            rusqlite::types::Value::Text("evt_1".into()),
        ],
    )
    .await;
    assert!(
        plan.contains("sqlite_autoindex_rw_callback_events_1"),
        "{plan}"
    );
}

/// The review queue's contradicted operations are read through their partial index, for one
/// tenant and for all, never by scanning the finished rows.
#[tokio::test]
async fn contradicted_listing_reads_its_partial_index() {
    use super::super::query::list_sql;
    let ledger = SqliteLedger::in_memory().await.unwrap();
    for q in [
        OperationQuery::all_tenants().contradicted(),
        OperationQuery::all_tenants()
            .contradicted()
            .order(Order::OldestFirst),
        OperationQuery::tenant(Tenant::new("t")).contradicted(),
    ] {
        let plan = plan_of(
            &ledger,
            list_sql(&q, "rw_operations", "rowid", '?').unwrap(),
        )
        .await;
        assert!(plan.contains("rw_operations_contradicted"), "{q:?}\n{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{q:?}\n{plan}");
    }
}

/// Only the claim must be durable before a send: a batch holding nothing but results recorded
/// after their send commits at `synchronous = NORMAL` (no fsync), any batch with a claim at the
/// configured `FULL`, and the level switches back for the next claim.
#[tokio::test]
async fn results_alone_commit_without_an_fsync_and_claims_always_with_one() {
    use crate::ledger::conformance::{keep, new_operation, update_of};
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("l.db")).await.unwrap();
    let level = |l: SqliteLedger| async move {
        l.write(|conn| {
            let v = conn.scalar_i64("PRAGMA synchronous", &[])?;
            Ok(Finish::Unchanged(v.unwrap_or_default()))
        })
        .await
        .unwrap()
    };
    let r = ledger
        .create_or_get(new_operation("t", "op-1", "i-1"))
        .await
        .unwrap()
        .into_record();
    assert_eq!(
        ledger.relaxed_commits(),
        0,
        "a create is a claim's kin: durable"
    );
    let claimed = ledger
        .apply(update_of(&r, keep(&r, State::InFlight, 5), "claim"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ledger.relaxed_commits(), 0);
    let done = ledger
        .record(update_of(
            &claimed,
            keep(&claimed, State::Succeeded, 6),
            "result",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.state, State::Succeeded);
    assert_eq!(ledger.relaxed_commits(), 1, "the result alone: no fsync");
    // The probe is an ordinary write: its batch goes back to FULL (2) before it runs.
    assert_eq!(level(ledger.clone()).await, 2);
    assert_eq!(ledger.relaxed_commits(), 1);
    // What the result wrote is there for every reader.
    let read = ledger
        .get(&r.tenant, &r.operation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, done);
}

/// The WAL is copied back into the database and starts over from its beginning, instead of
/// holding everything written: 96 MB written through the ledger (without checkpoints, a 96 MB
/// WAL). When it starts over depends on how fast the disk lets the checkpointer copy, so the
/// test watches the WAL's size after each commit (on the writer thread) and, should the disk be
/// slow, keeps committing small writes until it has started over (at most 30 s).
#[cfg(feature = "test-util")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_instead_of_growing() {
    use crate::ledger::conformance::new_operation;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open_with(
        &path,
        SqliteLedgerOptions::new().synchronous(Synchronous::Off),
    )
    .await
    .unwrap();
    // The WAL's size after the last commit, as the writer's WAL hook saw it.
    let wal_pages = || async {
        ledger
            .write(|_| Ok(Finish::Unchanged(conn::wal_pages())))
            .await
            .unwrap()
    };
    #[derive(Default)]
    struct Watch {
        last: i32,
        most: i32,
        started_over: bool,
    }
    impl Watch {
        fn saw(&mut self, pages: i32) {
            self.started_over |= pages < self.last;
            self.most = self.most.max(pages);
            self.last = pages;
        }
    }
    let mut watch = Watch::default();
    for i in 0..384 {
        let mut new = new_operation("t", &format!("op-{i}"), &format!("intent-{i}"));
        let mut request = (*new.request).clone();
        request.body = bytes::Bytes::from(vec![b'x'; 256 * 1024]);
        new.request = std::sync::Arc::new(request);
        ledger.create_or_get(new).await.unwrap();
        watch.saw(wal_pages().await);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    while !watch.started_over && std::time::Instant::now() < deadline {
        i += 1;
        let new = new_operation("t", &format!("small-{i}"), &format!("small-{i}"));
        ledger.create_or_get(new).await.unwrap();
        watch.saw(wal_pages().await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        watch.started_over,
        "the WAL never started over (it reached {} pages)",
        watch.most
    );
    let wal = std::fs::metadata(dir.path().join("ledger.db-wal"))
        .unwrap()
        .len();
    assert!(wal < 96 << 20, "the WAL file holds {wal} bytes");
    assert_eq!(
        count(
            &ledger,
            "SELECT COUNT(*) FROM rw_operations WHERE operation_id LIKE 'op-%'"
        )
        .await,
        384
    );
}

/// A created and claimed operation, and the update recording its success.
#[cfg(feature = "test-util")]
async fn claimed_and_answered(ledger: &SqliteLedger, id: &str) -> (OperationRecord, Update) {
    use super::super::conformance::{keep, new_operation, update_of};
    let new = new_operation("t", id, &format!("intent-{id}"));
    let claimed = ledger
        .create_and_apply(new.clone(), first_claim(&new))
        .await
        .unwrap()
        .into_record();
    let done = keep(&claimed, State::Succeeded, claimed.updated_ms + 1);
    let update = update_of(&claimed, done, "attempt_result");
    (claimed, update)
}

/// A `settled` that sends what it hears to `tx`.
#[cfg(feature = "test-util")]
fn settled_to(tx: &std::sync::mpsc::Sender<Result<Recorded, LedgerError>>) -> Settled {
    let tx = tx.clone();
    Box::new(move |r| {
        let _ = tx.send(r);
    })
}

/// A read of an operation that starts after a detached result of it was queued waits for it,
/// even while the writer is busy; a read that starts before does not, and neither do reads of
/// other operations or listings. `wait_for_results` waits for every queued result.
#[cfg(feature = "test-util")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_an_operation_wait_for_its_results_queued_before_them() {
    use super::super::conformance::evidence_entry;
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
        .await
        .unwrap();
    assert!(ledger.detaches_results());
    let (claimed, update) = claimed_and_answered(&ledger, "op-1").await;
    let (other, _) = claimed_and_answered(&ledger, "op-2").await;
    let hold = ledger.hold_writer_for_tests().await.unwrap();
    // Nothing queued yet: reads go through while the writer is held.
    let before = ledger
        .get(&claimed.tenant, &claimed.operation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(before.state, State::InFlight);

    let (tx, rx) = std::sync::mpsc::channel();
    ledger
        .record_detached(
            update,
            evidence_entry("late_evidence", claimed.updated_ms + 2),
            settled_to(&tx),
        )
        .unwrap();
    let spawn_get = |id: &OperationId| {
        let (reader, tenant, id) = (ledger.clone(), claimed.tenant.clone(), id.clone());
        tokio::spawn(async move { reader.get(&tenant, &id).await })
    };
    let read = spawn_get(&claimed.operation_id);
    let log = {
        let (reader, tenant, id) = (
            ledger.clone(),
            claimed.tenant.clone(),
            claimed.operation_id.clone(),
        );
        tokio::spawn(async move { reader.evidence(&tenant, &id).await })
    };
    let all = {
        let reader = ledger.clone();
        tokio::spawn(async move { reader.wait_for_results().await })
    };
    // Another operation, and a listing, are read at once.
    let row = tokio::time::timeout(Duration::from_secs(10), spawn_get(&other.operation_id))
        .await
        .expect("a read of another operation does not wait")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(row, other);
    let page = tokio::time::timeout(
        Duration::from_secs(10),
        ledger.list(&OperationQuery::all_tenants()),
    )
    .await
    .expect("a listing does not wait")
    .unwrap();
    assert_eq!(page.rows.len(), 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !read.is_finished() && !log.is_finished() && !all.is_finished(),
        "reads of the operation, and wait_for_results, wait for its result"
    );
    assert!(rx.try_recv().is_err(), "nothing settled while held");

    drop(hold);
    let row = read.await.unwrap().unwrap().unwrap();
    assert_eq!(row.state, State::Succeeded);
    let kinds: Vec<_> = log
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|e| e.entry.kind.into_owned())
        .collect();
    assert_eq!(kinds, ["created", "attempt_registered", "attempt_result"]);
    all.await.unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Ok(Recorded::Applied)
    ));
    // The result is committed without an fsync: its batch held no claim.
    assert_eq!(ledger.relaxed_commits(), 1);
}

/// `detached_results(false)`: the ledger does not detach results, and refuses
/// `record_detached` with nothing queued. A closed ledger refuses it too.
#[cfg(feature = "test-util")]
#[tokio::test]
async fn detached_results_can_be_turned_off_and_a_closed_ledger_refuses_them() {
    use super::super::conformance::evidence_entry;
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open_with(
        dir.path().join("ledger.db"),
        SqliteLedgerOptions::new().detached_results(false),
    )
    .await
    .unwrap();
    assert!(!ledger.detaches_results());
    let (claimed, update) = claimed_and_answered(&ledger, "op-1").await;
    let (tx, rx) = std::sync::mpsc::channel();
    let refused = ledger.record_detached(
        update.clone(),
        evidence_entry("late_evidence", claimed.updated_ms + 2),
        settled_to(&tx),
    );
    assert!(
        matches!(&refused, Err(LedgerError::Config(m)) if m.contains("detached_results(false)")),
        "{refused:?}"
    );

    let detached = SqliteLedger::open(dir.path().join("other.db"))
        .await
        .unwrap();
    detached.close().await;
    let closed = detached.record_detached(
        update,
        evidence_entry("late_evidence", claimed.updated_ms + 2),
        settled_to(&tx),
    );
    assert!(
        matches!(&closed, Err(LedgerError::Unavailable(e)) if e.to_string().contains("closed")),
        "{closed:?}"
    );
    drop(tx);
    assert!(rx.recv().is_err(), "settled was never called");
    let row = ledger
        .get(&claimed.tenant, &claimed.operation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row, claimed);
}

/// Dropping the last handle of a ledger waits for the results queued without waiting: a normal
/// exit leaves no answered operation `IN_FLIGHT`. Here the writer is held while 20 results are
/// queued, and released from another thread only after the drop began.
#[cfg(feature = "test-util")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_handle_writes_the_queued_results() {
    use super::super::conformance::evidence_entry;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open(&path).await.unwrap();
    let mut claimed = Vec::new();
    for i in 0..20 {
        claimed.push(claimed_and_answered(&ledger, &format!("op-{i}")).await);
    }
    let hold = ledger.hold_writer_for_tests().await.unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for (row, update) in &claimed {
        ledger
            .record_detached(
                update.clone(),
                evidence_entry("late_evidence", row.updated_ms + 2),
                settled_to(&tx),
            )
            .unwrap();
    }
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(hold);
    });
    let dropped = std::time::Instant::now();
    drop(ledger);
    assert!(
        dropped.elapsed() >= Duration::from_millis(150),
        "the drop waited for the writer ({:?})",
        dropped.elapsed()
    );
    release.join().unwrap();
    drop(tx);
    let heard: Vec<_> = rx.iter().collect();
    assert_eq!(heard.len(), 20);
    assert!(heard.iter().all(|r| matches!(r, Ok(Recorded::Applied))));

    let again = SqliteLedger::open(&path).await.unwrap();
    for (row, _) in &claimed {
        let now = again
            .get(&row.tenant, &row.operation_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(now.state, State::Succeeded, "{}", row.operation_id);
    }
}

/// A detached result whose batch fails lands all the same: reads of its operation go on (and
/// see the row as it was), and `settled` hears the error. The row stays `IN_FLIGHT` under its
/// lease, for recovery.
#[cfg(feature = "test-util")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_result_that_fails_lands_and_reads_go_on() {
    use super::super::conformance::evidence_entry;
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("ledger.db"))
        .await
        .unwrap();
    let (claimed, update) = claimed_and_answered(&ledger, "op-1").await;
    // The writer's connection refuses writes from now on.
    ledger
        .pragma_on_writer_for_tests("PRAGMA query_only = 1")
        .await
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    ledger
        .record_detached(
            update,
            evidence_entry("late_evidence", claimed.updated_ms + 2),
            settled_to(&tx),
        )
        .unwrap();
    let row = tokio::time::timeout(
        Duration::from_secs(10),
        ledger.get(&claimed.tenant, &claimed.operation_id),
    )
    .await
    .expect("the read goes on once the result failed")
    .unwrap()
    .unwrap();
    assert_eq!(row, claimed);
    let heard = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(heard.is_err(), "{heard:?}");
    assert!(rx.try_recv().is_err(), "settled hears it once");
}
