//! What must be durable before a send and what need not: results alone commit without an
//! fsync, claims always with one, and the WAL starts over instead of growing.

use super::*;

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
