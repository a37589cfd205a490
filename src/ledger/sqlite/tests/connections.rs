//! The writer's and the readers' connections: the pragmas set at open, the options checked,
//! readers that do not wait for the writer, and a closed ledger.

use super::*;

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
