//! Unit tests of the memory ledger's row storage and of `record_unread`.

use bytes::Bytes;

use super::MemoryLedger;
use super::slots::{CHUNK, Hashing, Operations, touched_chunk};
use super::tables::Row;
use crate::ledger::conformance::{T0, keep, new_operation, run, update_of};
use crate::ledger::{Created, Ledger, Recorded, StoredResponse};
use crate::operation::{OperationId, Tenant};
use crate::state::State;

/// The id of [`test_row`] `i`.
fn test_id(i: usize) -> OperationId {
    OperationId::new(format!("op-{i}"))
}

/// Row `i` of `tenant-a`, numbered `i`, with an empty log.
fn test_row(i: usize) -> Row {
    Row {
        created_seq: i as u64,
        record: new_operation("tenant-a", &format!("op-{i}"), &format!("intent-{i}"))
            .into_prepared(),
        evidence: smallvec::SmallVec::new(),
    }
}

/// Slots freed by a purge are reused, and every row is still found under its own key
/// afterwards, with its own content (the chunks and the table agree).
#[test]
fn operations_reuse_purged_slots_and_keep_every_key() {
    let (tenant, id, row) = (Tenant::new("tenant-a"), test_id, test_row);
    let mut ops = Operations::default();
    for i in 0..100 {
        ops.insert_new(Hashing::get().operation(&tenant, &id(i)), row(i));
    }
    for i in (0..100).step_by(3) {
        let removed = ops.remove(&tenant, &id(i)).expect("stored");
        assert_eq!(removed.created_seq, i as u64);
        assert!(ops.remove(&tenant, &id(i)).is_none(), "removed once");
    }
    let slots = (ops.chunks.len(), ops.used);
    for i in 100..134 {
        ops.insert_new(Hashing::get().operation(&tenant, &id(i)), row(i));
    }
    assert_eq!(
        (ops.chunks.len(), ops.used),
        slots,
        "the 34 purged slots were reused"
    );
    assert_eq!(ops.len(), 100);
    for i in 0..134 {
        match ops.get(&tenant, &id(i)) {
            Some(r) => {
                assert!(i >= 100 || i % 3 != 0, "op-{i} was purged");
                assert_eq!((r.created_seq, &r.record.operation_id), (i as u64, &id(i)));
            }
            None => assert!(i < 100 && i % 3 == 0, "op-{i} is lost"),
        }
    }
    ops.get_mut(&tenant, &id(101)).expect("stored").created_seq = 7;
    assert_eq!(ops.get(&tenant, &id(101)).map(|r| r.created_seq), Some(7));
    assert_eq!(ops.rows().count(), 100);
}

/// Rows fill chunk after chunk; the spare is asked of one caller at a time, once half of
/// the last chunk is used, and is what the next chunk is made of. Rows stay where they are.
#[test]
fn operations_grow_by_chunks_made_outside_the_lock() {
    let (tenant, id) = (Tenant::new("tenant-a"), test_id);
    let mut ops = Operations::default();
    let (mut asked, mut given) = (Vec::new(), Vec::new());
    for i in 0..3 * CHUNK + 1 {
        ops.insert_new(Hashing::get().operation(&tenant, &id(i)), test_row(i));
        if ops.wants_spare() {
            asked.push(i);
            assert!(!ops.wants_spare(), "asked of one caller at a time");
            // The spare for the second chunk is never given: that chunk is made under the
            // lock, and the third is asked for again.
            if asked.len() != 2 {
                let spare = touched_chunk();
                given.push(spare.as_ptr());
                ops.give_spare(spare);
            }
        }
    }
    // Asked once a chunk's half is used (row CHUNK / 2 - 1 fills it).
    let half = CHUNK / 2 - 1;
    assert_eq!(asked, [half, CHUNK + half, 2 * CHUNK + half]);
    assert_eq!(ops.chunks.len(), 4, "the fourth holds the last row");
    assert!(
        ops.spare.is_none(),
        "the third spare became the fourth chunk"
    );
    let chunks: Vec<_> = ops.chunks.iter().map(|c| c.as_ptr()).collect();
    assert_eq!(
        [chunks[1], chunks[3]],
        [given[0], given[1]],
        "spares used as given"
    );
    for i in 0..3 * CHUNK + 1 {
        let row = ops.get(&tenant, &id(i)).expect("stored");
        assert_eq!(
            (row.created_seq, &row.record.operation_id),
            (i as u64, &id(i))
        );
    }
}

/// `record_unread` makes the same change as `record` without copying the row out: the
/// caller's row with the update's changes written in is the row as stored.
#[test]
fn record_unread_applies_without_reading_back() {
    run(async {
        let ledger = MemoryLedger::new();
        let created = match ledger
            .create_or_get(new_operation("tenant-a", "op-1", "intent-1"))
            .await
        {
            Ok(Created::New(r)) => r,
            other => panic!("unexpected {other:?}"),
        };
        let done = crate::ledger::conformance::RawChanges {
            remote_ref: Some("W731".to_owned()),
            response: Some(StoredResponse {
                status: 201,
                headers: [("content-type", "application/json")].into_iter().collect(),
                body: Bytes::from_static(b"{\"id\":\"W731\"}"),
            }),
            ..keep(&created, State::Succeeded, T0 + 20)
        };
        let mut stale = update_of(&created, done.clone(), "attempt_result");
        stale.expect_version += 1;
        assert_eq!(
            ledger.record_unread(stale).await.ok(),
            Some(Recorded::Stale)
        );
        let unchanged = ledger.get(&created.tenant, &created.operation_id).await;
        assert_eq!(unchanged.ok().flatten().as_ref(), Some(&created));

        let update = update_of(&created, done, "attempt_result");
        let (changes, _) = update.clone().into_parts();
        assert_eq!(
            ledger.record_unread(update).await.ok(),
            Some(Recorded::Applied)
        );
        let mut expected = created.clone();
        expected.set_changes(changes);
        let stored = ledger.get(&created.tenant, &created.operation_id).await;
        assert_eq!(stored.ok().flatten(), Some(expected));
        let log = ledger
            .evidence(&created.tenant, &created.operation_id)
            .await;
        let kinds: Vec<String> = log
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.entry.kind.into_owned())
            .collect();
        assert_eq!(kinds, ["created", "attempt_result"]);
    });
}
