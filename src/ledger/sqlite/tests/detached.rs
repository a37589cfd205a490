//! Detached results: reads of an operation wait for its results queued before them, the
//! switch to turn them off, the drop of the last handle, and a detached result that fails.

use super::*;

/// A created and claimed operation, and the update recording its success.
#[cfg(feature = "test-util")]
async fn claimed_and_answered(ledger: &SqliteLedger, id: &str) -> (OperationRecord, Update) {
    use crate::ledger::conformance::{keep, new_operation, update_of};
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
    use crate::ledger::conformance::evidence_entry;
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
    use crate::ledger::conformance::evidence_entry;
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
    use crate::ledger::conformance::evidence_entry;
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
    use crate::ledger::conformance::evidence_entry;
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
