//! Checks of the retention purges: the details stage slims finished rows and keeps their
//! identity, the identity stage deletes finished rows only, callback records are purged by age
//! and tenant, and concurrent purges delete each row once.

use std::sync::Arc;

use bytes::Bytes;

use super::callback_delivery::{delivery, quarantined};
use super::fixtures::{RawChanges, T0, evidence_entry, keep, new_operation, update_with};
use super::helpers::{apply_ok, create, get, kinds, log, must, put};
use crate::evidence::Evidence;
use crate::ledger::{
    CallbackApplied, CallbackDelivery, CallbackEffect, CallbackLedger, Created, Ledger,
    NewEvidence, OperationRecord, QuarantinedCallback, RetentionLedger, StoredResponse,
};
use crate::operation::{FrozenHeaders, FrozenRequest, Tenant};
use crate::state::State;

/// A finished operation of `tenant`/`id` under `contract`: created at [`T0`], then moved to
/// `state` at `finished_ms` with a stored response, a reason, a remote reference and an
/// evidence entry carrying an observation and a note.
async fn finished<L: Ledger>(
    ledger: &L,
    tenant: &str,
    id: &str,
    contract: &str,
    state: State,
    finished_ms: i64,
) -> OperationRecord {
    let mut new = new_operation(tenant, id, &format!("intent-{id}"));
    new.contract.name = contract.into();
    let r = create(ledger, new).await;
    let changes = RawChanges {
        last_result: Some(state),
        remote_ref: Some(format!("ref-{id}")),
        reason: Some("vendor said: card holder jane@example.com".to_owned()),
        response: Some(StoredResponse {
            status: 201,
            headers: [("content-type", "application/json")].into_iter().collect(),
            body: Bytes::from_static(b"{\"id\":\"W731\",\"email\":\"jane@example.com\"}"),
        }),
        ..keep(&r, state, finished_ms)
    };
    let evidence = NewEvidence {
        generation: r.generation,
        from_state: Some(r.state),
        to_state: Some(state),
        evidence: Some(Evidence::Succeeded {
            remote_ref: Some(format!("ref-{id}")),
        }),
        note: Some("lookup answer: {\"email\":\"jane@example.com\"}".to_owned()),
        ..evidence_entry("lookup", finished_ms)
    };
    apply_ok(ledger, update_with(&r, changes, evidence)).await
}

fn purge_batch(
    stage: crate::ledger::PurgeStage,
    contract: &str,
    before_ms: i64,
    limit: u32,
) -> crate::ledger::PurgeBatch {
    crate::ledger::PurgeBatch {
        stage,
        scope: crate::ledger::PurgeScope::FinishedBefore {
            contract: contract.to_owned(),
            before_ms,
        },
        limit,
        dry_run: false,
        now_ms: T0 + 1_000_000,
    }
}

async fn purge<L: RetentionLedger>(
    ledger: &L,
    batch: crate::ledger::PurgeBatch,
) -> crate::ledger::Purged {
    must(ledger.purge(batch).await, "purge")
}

/// The details stage: a dry run counts and changes nothing; batches slim the finished rows of
/// the contract that finished before the cut-off, oldest first, within their limit, and keep
/// their identity, state, remote reference, times, version and the shape of their evidence
/// log; a slimmed row is not slimmed again. Non-terminal rows (however old), rows that
/// finished after the cut-off and rows of another contract are untouched.
pub async fn purge_details_slims_finished_rows_and_keeps_their_identity<L: RetentionLedger>(
    ledger: L,
) {
    use crate::ledger::PurgeStage::Details;
    let old_ok = finished(
        &ledger,
        "tenant-a",
        "op-r1",
        "stripe-v1",
        State::Succeeded,
        T0 + 10,
    )
    .await;
    let old_no = finished(
        &ledger,
        "tenant-b",
        "op-r2",
        "stripe-v1",
        State::Rejected,
        T0 + 20,
    )
    .await;
    let recent = finished(
        &ledger,
        "tenant-a",
        "op-r3",
        "stripe-v1",
        State::Succeeded,
        T0 + 500,
    )
    .await;
    let other = finished(
        &ledger,
        "tenant-a",
        "op-r4",
        "adyen",
        State::Succeeded,
        T0 + 10,
    )
    .await;
    let mut open = Vec::new();
    for (i, state) in [
        State::Prepared,
        State::InFlight,
        State::Unknown,
        State::Processing,
        State::RetryReady,
        State::ManualReview,
    ]
    .into_iter()
    .enumerate()
    {
        open.push(put(&ledger, &format!("op-open-{i}"), state, Some(T0), None).await);
    }
    assert_eq!(
        must(ledger.finished_contracts().await, "finished_contracts"),
        vec!["adyen".to_owned(), "stripe-v1".to_owned()]
    );

    let cut = T0 + 100;
    let dry = purge(
        &ledger,
        crate::ledger::PurgeBatch {
            dry_run: true,
            ..purge_batch(Details, "stripe-v1", cut, 1)
        },
    )
    .await;
    assert_eq!(
        dry.rows, 2,
        "a dry run counts every matching row, whatever the limit"
    );
    assert!(
        dry.bytes > 200,
        "the request, response, reason and evidence are counted: {dry:?}"
    );
    assert_eq!(
        get(&ledger, &old_ok).await,
        old_ok,
        "a dry run changes nothing"
    );

    let first = purge(&ledger, purge_batch(Details, "stripe-v1", cut, 1)).await;
    assert_eq!(first.rows, 1);
    let slim = get(&ledger, &old_ok).await;
    assert_eq!(
        slim.details_removed_ms,
        Some(T0 + 1_000_000),
        "the oldest finish goes first"
    );
    assert_eq!(get(&ledger, &old_no).await, old_no, "the limit holds");
    let second = purge(&ledger, purge_batch(Details, "stripe-v1", cut, 10)).await;
    assert_eq!(second.rows, 1);
    assert_eq!(
        first.bytes + second.bytes,
        dry.bytes,
        "a dry run counts what a run drops"
    );
    assert_eq!(
        purge(&ledger, purge_batch(Details, "stripe-v1", cut, 10))
            .await
            .rows,
        0,
        "a slimmed row is not slimmed again"
    );

    for before in [&old_ok, &old_no] {
        let after = get(&ledger, before).await;
        let expected = OperationRecord {
            request: Arc::new(FrozenRequest {
                method: before.request.method.clone(),
                url: before.request.url.clone(),
                headers: FrozenHeaders::new(),
                body: Bytes::new(),
            }),
            response: None,
            reason: None,
            details_removed_ms: Some(T0 + 1_000_000),
            ..before.clone()
        };
        assert_eq!(
            after, expected,
            "identity, state, ref, times and version kept"
        );
        let entries = log(&ledger, &after).await;
        assert_eq!(kinds(&entries), vec!["created", "lookup"]);
        for e in &entries {
            assert_eq!(e.entry.evidence, None, "evidence details dropped");
            assert_eq!(e.entry.note, None, "notes dropped");
        }
        assert_eq!(entries[1].entry.to_state, Some(before.state), "states kept");
    }
    assert_eq!(
        get(&ledger, &recent).await,
        recent,
        "finished after the cut-off: kept"
    );
    assert_eq!(get(&ledger, &other).await, other, "another contract: kept");
    for r in &open {
        assert_eq!(&get(&ledger, r).await, r, "{:?} is never purged", r.state);
    }
}

/// The identity stage deletes finished rows of the contract that finished before the cut-off
/// (slimmed or not) with their evidence, oldest first within the limit; afterwards the intent is
/// free again. Non-terminal rows older than any cut-off survive; the scopes of the right to
/// erasure take one tenant's finished rows, or one finished row, whatever their age.
pub async fn purge_identity_deletes_finished_rows_and_only_them<L: RetentionLedger>(ledger: L) {
    use crate::ledger::PurgeStage::{Details, Identity};
    let a = finished(
        &ledger,
        "tenant-a",
        "op-i1",
        "stripe-v1",
        State::Succeeded,
        T0 + 10,
    )
    .await;
    let b = finished(
        &ledger,
        "tenant-a",
        "op-i2",
        "stripe-v1",
        State::Rejected,
        T0 + 20,
    )
    .await;
    let young = finished(
        &ledger,
        "tenant-a",
        "op-i3",
        "stripe-v1",
        State::Succeeded,
        T0 + 900,
    )
    .await;
    let stuck = put(&ledger, "op-i4", State::ManualReview, None, None).await;
    let unknown = put(&ledger, "op-i5", State::Unknown, Some(T0), None).await;
    purge(&ledger, purge_batch(Details, "stripe-v1", T0 + 15, 10)).await;

    let dry = purge(
        &ledger,
        crate::ledger::PurgeBatch {
            dry_run: true,
            ..purge_batch(Identity, "stripe-v1", T0 + 100, 10)
        },
    )
    .await;
    assert_eq!(dry.rows, 2);
    let first = purge(&ledger, purge_batch(Identity, "stripe-v1", T0 + 100, 1)).await;
    assert_eq!(first.rows, 1);
    assert!(
        must(ledger.get(&a.tenant, &a.operation_id).await, "get").is_none(),
        "oldest first"
    );
    assert!(
        log(&ledger, &a).await.is_empty(),
        "its evidence went with it"
    );
    assert_eq!(get(&ledger, &b).await, b);
    assert_eq!(
        purge(&ledger, purge_batch(Identity, "stripe-v1", T0 + 100, 10))
            .await
            .rows,
        1
    );
    assert!(must(ledger.get(&b.tenant, &b.operation_id).await, "get").is_none());
    assert_eq!(
        purge(&ledger, purge_batch(Identity, "stripe-v1", T0 + 100, 10))
            .await
            .rows,
        0
    );
    assert_eq!(get(&ledger, &young).await, young);
    assert_eq!(
        get(&ledger, &stuck).await,
        stuck,
        "MANUAL_REVIEW is never purged"
    );
    assert_eq!(
        get(&ledger, &unknown).await,
        unknown,
        "UNKNOWN is never purged"
    );

    // The intent is free again: a repeat now is a new operation (what the identity clock
    // must be long enough to prevent).
    let again = new_operation("tenant-a", "op-i1", "intent-op-i1");
    assert!(matches!(
        must(ledger.create_or_get(again).await, "create_or_get"),
        Created::New(_)
    ));

    // Erasure scopes: one tenant's finished rows, whatever their age; one finished row.
    let other_tenant = finished(
        &ledger,
        "tenant-z",
        "op-i6",
        "stripe-v1",
        State::Succeeded,
        T0 + 999_999,
    )
    .await;
    let erase_one = crate::ledger::PurgeBatch {
        scope: crate::ledger::PurgeScope::Operation {
            tenant: young.tenant.clone(),
            operation_id: young.operation_id.clone(),
        },
        ..purge_batch(Details, "", 0, 1)
    };
    assert_eq!(purge(&ledger, erase_one).await.rows, 1);
    assert!(get(&ledger, &young).await.details_removed_ms.is_some());
    let erase_stuck = crate::ledger::PurgeBatch {
        scope: crate::ledger::PurgeScope::Operation {
            tenant: stuck.tenant.clone(),
            operation_id: stuck.operation_id.clone(),
        },
        ..purge_batch(Identity, "", 0, 1)
    };
    assert_eq!(
        purge(&ledger, erase_stuck).await.rows,
        0,
        "never a non-terminal row"
    );
    let erase_tenant = crate::ledger::PurgeBatch {
        scope: crate::ledger::PurgeScope::Tenant(Tenant::new("tenant-a")),
        ..purge_batch(Identity, "", 0, 100)
    };
    assert_eq!(
        purge(&ledger, erase_tenant).await.rows,
        1,
        "young only: the rest is open"
    );
    assert!(must(ledger.get(&young.tenant, &young.operation_id).await, "get").is_none());
    assert_eq!(get(&ledger, &stuck).await, stuck);
    assert_eq!(
        get(&ledger, &other_tenant).await,
        other_tenant,
        "another tenant: kept"
    );
}

/// Callback records have their own retention: dedupe records and quarantined events are
/// deleted by age (oldest first, within the limit) or by tenant; a dry run counts; once a
/// dedupe record is gone, a redelivery of its event is new again.
pub async fn purge_callbacks_by_age_and_by_tenant<L: CallbackLedger + RetentionLedger>(ledger: L) {
    use crate::ledger::{CallbackPurge, CallbackRecords, CallbackScope};
    let r = put(&ledger, "op-c1", State::Unknown, Some(T0), None).await;
    for (event, at) in [("evt_old", T0 + 1), ("evt_new", T0 + 1_000)] {
        let d = CallbackDelivery {
            received_at_ms: at,
            ..delivery(&r, event)
        };
        let entry = evidence_entry("late_evidence", at);
        let got = must(
            ledger
                .apply_callback(d, CallbackEffect::Append(entry))
                .await,
            "apply_callback",
        );
        assert_eq!(got, CallbackApplied::Appended);
    }
    for (event, at, tenant) in [
        ("evt_q1", T0 + 1, "tenant-a"),
        ("evt_q2", T0 + 2, "tenant-b"),
    ] {
        let q = QuarantinedCallback {
            received_at_ms: at,
            tenant: Some(Tenant::new(tenant)),
            ..quarantined(event, "no operation")
        };
        must(ledger.quarantine_callback(q).await, "quarantine_callback");
    }
    let batch = |records, scope, limit, dry_run| CallbackPurge {
        records,
        scope,
        limit,
        dry_run,
    };
    let purge_cb =
        |b: CallbackPurge| async { must(ledger.purge_callbacks(b).await, "purge_callbacks") };
    let dry = purge_cb(batch(
        CallbackRecords::Deliveries,
        CallbackScope::ReceivedBefore(T0 + 500),
        1,
        true,
    ))
    .await;
    // evt_old, plus the two quarantined events' dedupe records (received at T0+1 and T0+2).
    assert_eq!(dry.rows, 3);
    assert!(dry.bytes > 0);
    let gone = purge_cb(batch(
        CallbackRecords::Deliveries,
        CallbackScope::ReceivedBefore(T0 + 500),
        2,
        false,
    ))
    .await;
    assert_eq!(gone.rows, 2, "the limit holds");
    let rest = purge_cb(batch(
        CallbackRecords::Deliveries,
        CallbackScope::ReceivedBefore(T0 + 500),
        10,
        false,
    ))
    .await;
    assert_eq!(rest.rows, 1);
    assert_eq!(gone.bytes + rest.bytes, dry.bytes);
    // evt_new's record is kept: its redelivery is still a duplicate; evt_old's is new again.
    let entry = evidence_entry("late_evidence", T0 + 2_000);
    assert_eq!(
        must(
            ledger
                .apply_callback(
                    delivery(&r, "evt_new"),
                    CallbackEffect::Append(entry.clone())
                )
                .await,
            "apply_callback"
        ),
        CallbackApplied::Duplicate
    );
    assert_eq!(
        must(
            ledger
                .apply_callback(delivery(&r, "evt_old"), CallbackEffect::Append(entry))
                .await,
            "apply_callback"
        ),
        CallbackApplied::Appended
    );

    let by_tenant = purge_cb(batch(
        CallbackRecords::Quarantine,
        CallbackScope::Tenant(Tenant::new("tenant-b")),
        10,
        false,
    ))
    .await;
    assert_eq!(by_tenant.rows, 1);
    let left = must(
        ledger
            .quarantined_callbacks(&crate::ledger::TenantScope::AllTenants, 10)
            .await,
        "quarantined_callbacks",
    );
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].event_id, "evt_q1");
    let by_age = purge_cb(batch(
        CallbackRecords::Quarantine,
        CallbackScope::ReceivedBefore(T0 + 2),
        10,
        false,
    ))
    .await;
    assert_eq!(by_age.rows, 1);
    assert!(
        must(
            ledger
                .quarantined_callbacks(&crate::ledger::TenantScope::AllTenants, 10)
                .await,
            "quarantined_callbacks"
        )
        .is_empty()
    );
}

/// Several workers purging the same stage at once each take different rows: every finished
/// row is deleted exactly once, no batch fails, and the rows counted add up.
pub async fn concurrent_purges_delete_each_row_once<L: RetentionLedger>(ledger: L) {
    use crate::ledger::PurgeStage::Identity;
    for i in 0..40 {
        finished(
            &ledger,
            "tenant-a",
            &format!("op-p{i:02}"),
            "stripe-v1",
            State::Succeeded,
            T0 + i,
        )
        .await;
    }
    let ledger = Arc::new(ledger);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = 0;
            loop {
                let done = must(
                    ledger
                        .purge(purge_batch(Identity, "stripe-v1", T0 + 1_000, 5))
                        .await,
                    "concurrent purge",
                );
                mine += done.rows;
                if done.rows == 0 {
                    return mine;
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("purger");
    }
    assert_eq!(total, 40, "each row deleted once, by one worker");
    assert!(must(ledger.finished_contracts().await, "finished_contracts").is_empty());
}
