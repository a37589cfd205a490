//! Group commit: a failing request is undone alone, a failed commit fails every caller, a batch
//! of refusals commits nothing, and `create_and_apply` is one write and one commit.

use super::*;

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

#[cfg(feature = "test-util")]
#[tokio::test]
async fn create_and_apply_is_one_write_and_one_commit() {
    use crate::ledger::conformance::new_operation;
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
