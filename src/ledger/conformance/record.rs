//! Checks of recording an attempt's result after the send: `record` is the compare-and-swap of
//! `apply`, `record_unread` writes what it reports, and `record_detached` is seen by every later
//! call.

use std::time::Duration;

use super::fixtures::{RawChanges, T0, evidence_entry, keep, new_operation, update_of};
use super::helpers::{first_claim, get, kinds, log, must};
use crate::ledger::{Created, Ledger, LedgerError, OperationRecord, Recorded, Update};
use crate::state::State;

/// Operation `id`, created with its first send claimed; the vendor's answer to record
/// (`SUCCEEDED`, reference `W731`); and that answer as an update with a stale version.
async fn sent_and_answered<L: Ledger>(
    ledger: &L,
    id: &str,
) -> (OperationRecord, RawChanges, Update) {
    let new = new_operation("tenant-a", id, &format!("intent-{id}"));
    let (_, first) = first_claim(&new, T0 + 10, "claim");
    let claimed = match must(
        ledger.create_and_apply(new, first).await,
        "create_and_apply",
    ) {
        Created::New(r) => r,
        Created::Existing(r) => panic!("unexpected existing {}", r.operation_id),
    };
    let done = RawChanges {
        remote_ref: Some("W731".to_owned()),
        ..keep(&claimed, State::Succeeded, T0 + 20)
    };
    let mut stale = update_of(&claimed, done.clone(), "attempt_result");
    stale.expect_version += 1;
    (claimed, done, stale)
}

/// `record` (an attempt's result, written after the send) is the same compare-and-swap as
/// `apply`: a stale version changes nothing; a current one writes the row and its entry.
pub async fn record_is_the_same_compare_and_swap_as_apply<L: Ledger>(ledger: L) {
    let (claimed, done, stale) = sent_and_answered(&ledger, "op-record").await;
    assert_eq!(must(ledger.record(stale).await, "record"), None);
    assert_eq!(get(&ledger, &claimed).await, claimed);

    let row = match must(
        ledger
            .record(update_of(&claimed, done, "attempt_result"))
            .await,
        "record",
    ) {
        Some(r) => r,
        None => panic!("record refused a current update"),
    };
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.version, claimed.version + 1);
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(get(&ledger, &claimed).await, row);
    assert_eq!(
        kinds(&log(&ledger, &claimed).await),
        ["created", "attempt_registered", "attempt_result"]
    );
}

/// `record_unread` is `record` without the row read back: a stale update is `Stale` and changes
/// nothing; a current one is `Applied` (the store holds the row it was computed from with its
/// changes written in, `OperationRecord::set_changes`) or `Row` with what the store holds, and
/// its entry is logged.
pub async fn record_unread_writes_what_it_reports<L: Ledger>(ledger: L) {
    let (claimed, done, stale) = sent_and_answered(&ledger, "op-unread").await;
    assert_eq!(
        must(ledger.record_unread(stale).await, "record_unread"),
        Recorded::Stale
    );
    assert_eq!(get(&ledger, &claimed).await, claimed);

    let update = update_of(&claimed, done, "attempt_result");
    let mut expected = claimed.clone();
    expected.set_changes(update.changes.clone());
    match must(ledger.record_unread(update).await, "record_unread") {
        Recorded::Applied => {}
        Recorded::Row(row) => assert_eq!(row, expected),
        Recorded::Stale => panic!("record_unread refused a current update"),
    }
    assert_eq!(get(&ledger, &claimed).await, expected);
    assert_eq!(
        kinds(&log(&ledger, &claimed).await),
        ["created", "attempt_registered", "attempt_result"]
    );
}

/// `record_detached`, on a ledger that [detaches results](Ledger::detaches_results): it returns
/// before the store answers, and every later call about that operation sees the result as
/// applied (or refused) anyway. A stale update changes nothing but the log (its `late` entry is appended); a current
/// one is the same change as `record_unread`, and a write computed from the row it leaves
/// applies right after it. `settled` hears each outcome once. A ledger that does not detach
/// results refuses the call with nothing queued and `settled` never called.
pub async fn record_detached_is_seen_by_every_later_call<L: Ledger>(ledger: L) {
    let (claimed, done, stale) = sent_and_answered(&ledger, "op-detached").await;
    let (tx, rx) = std::sync::mpsc::channel();
    let settled = |tx: &std::sync::mpsc::Sender<Result<Recorded, LedgerError>>| {
        let tx = tx.clone();
        let settled: crate::ledger::Settled = Box::new(move |r| {
            let _ = tx.send(r);
        });
        settled
    };
    let hear = || {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("settled is called once the store answered")
    };
    let late = || evidence_entry("late_evidence", T0 + 40);

    if !ledger.detaches_results() {
        assert!(
            ledger.record_detached(stale, late(), settled(&tx)).is_err(),
            "a ledger that does not detach results refuses"
        );
        drop(tx);
        assert!(rx.recv().is_err(), "settled is dropped without a call");
        assert_eq!(get(&ledger, &claimed).await, claimed);
        return;
    }

    must(
        ledger.record_detached(stale, late(), settled(&tx)),
        "record_detached",
    );
    // Read at once: the read waits for the result queued before it. The refused result was
    // appended as late evidence, which advances the version and nothing else.
    let after_late = get(&ledger, &claimed).await;
    assert_eq!(
        after_late,
        OperationRecord {
            version: claimed.version + 1,
            ..claimed.clone()
        }
    );
    let claimed = after_late;
    assert_eq!(
        kinds(&log(&ledger, &claimed).await),
        ["created", "attempt_registered", "late_evidence"]
    );
    assert!(matches!(hear(), Ok(Recorded::Stale)));

    let update = update_of(&claimed, done, "attempt_result");
    let mut recorded = claimed.clone();
    recorded.set_changes(update.changes.clone());
    must(
        ledger.record_detached(update, late(), settled(&tx)),
        "record_detached",
    );
    // Written at once, from the row as recorded: it applies only after the result did.
    let next = update_of(
        &recorded,
        keep(&recorded, State::Succeeded, T0 + 50),
        "note",
    );
    let mut expected = recorded.clone();
    expected.set_changes(next.changes.clone());
    match must(ledger.apply(next).await, "apply") {
        Some(row) => assert_eq!(row, expected),
        None => panic!("a write queued after a detached result did not see it"),
    }
    assert!(matches!(hear(), Ok(Recorded::Applied | Recorded::Row(_))));
    assert_eq!(get(&ledger, &claimed).await, expected);
    assert_eq!(
        kinds(&log(&ledger, &claimed).await),
        [
            "created",
            "attempt_registered",
            "late_evidence",
            "attempt_result",
            "note"
        ]
    );
    drop(tx);
    assert!(
        rx.recv_timeout(Duration::from_secs(1)).is_err(),
        "settled hears each outcome once"
    );
}
