//! Checks of vendor callbacks applied to operations: an event applies once (a redelivery is a
//! duplicate), a stale update stores nothing, late evidence is appended once, the callback
//! quarantine, the lookups a callback is matched by, and concurrent deliveries of one event.

use std::sync::Arc;

use super::fixtures::{
    RawChanges, T0, evidence_entry, keep, new_operation, update_of, update_with,
};
use super::helpers::{apply_ok, create, get, kinds, log, must, put};
use crate::evidence::Evidence;
use crate::ledger::{
    CallbackApplied, CallbackDelivery, CallbackEffect, CallbackLedger, CallbackQuarantined,
    EvidenceEntry, Ledger, LedgerError, ListingLedger, NewEvidence, OperationRecord,
    QuarantinedCallback, Update,
};
use crate::operation::Tenant;
use crate::state::State;

/// The delivery of event `event_id` (vendor `stripe`) matched to `r`.
pub(super) fn delivery(r: &OperationRecord, event_id: &str) -> CallbackDelivery {
    CallbackDelivery {
        vendor: "stripe".to_owned(),
        event_id: event_id.to_owned(),
        event_type: "payment_intent.succeeded".to_owned(),
        tenant: r.tenant.clone(),
        operation_id: r.operation_id.clone(),
        received_at_ms: T0 + 5,
    }
}

/// The update a `succeeded` callback makes of `r`: `SUCCEEDED` with the vendor's reference,
/// logged as a `callback` entry carrying the evidence.
pub(super) fn succeeded_by_callback(r: &OperationRecord) -> Update {
    let evidence = Evidence::Succeeded {
        remote_ref: Some("pi_1".to_owned()),
    };
    let changes = RawChanges {
        last_result: Some(State::Succeeded),
        remote_ref: Some("pi_1".to_owned()),
        next_check_ms: None,
        lease_until_ms: None,
        ..keep(r, State::Succeeded, T0 + 5)
    };
    update_with(
        r,
        changes,
        NewEvidence {
            generation: r.generation,
            from_state: Some(r.state),
            to_state: Some(State::Succeeded),
            evidence: Some(evidence),
            note: Some("stripe event evt_1".to_owned()),
            ..evidence_entry("callback", T0 + 5)
        },
    )
}

fn count_kind(log: &[EvidenceEntry], kind: &str) -> usize {
    log.iter().filter(|e| e.entry.kind == kind).count()
}

/// Checks one event applied twice: one state change, one evidence entry, and the second
/// delivery (with an update computed from the moved row) is a duplicate that changes nothing.
pub async fn callback_applies_once_and_a_redelivery_is_a_duplicate<L: CallbackLedger>(ledger: L) {
    let r = put(&ledger, "op-cb-1", State::Unknown, Some(T0), None).await;
    let first = must(
        ledger
            .apply_callback(
                delivery(&r, "evt_1"),
                CallbackEffect::Apply(succeeded_by_callback(&r)),
            )
            .await,
        "apply_callback",
    );
    let CallbackApplied::Applied(moved) = first else {
        panic!("first delivery must apply, got {first:?}");
    };
    assert_eq!(moved.state, State::Succeeded);
    assert_eq!(moved.version, r.version + 1);
    assert_eq!(moved.remote_ref.as_deref(), Some("pi_1"));
    assert_eq!(get(&ledger, &r).await, moved);

    // The redelivery, decided on the moved row (a legal update): nothing happens.
    let again = must(
        ledger
            .apply_callback(
                delivery(&moved, "evt_1"),
                CallbackEffect::Apply(succeeded_by_callback(&moved)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(again, CallbackApplied::Duplicate);
    let appended = must(
        ledger
            .apply_callback(
                delivery(&moved, "evt_1"),
                CallbackEffect::Append(evidence_entry("late_evidence", T0 + 6)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(appended, CallbackApplied::Duplicate);
    assert_eq!(get(&ledger, &r).await, moved, "a duplicate changes nothing");
    let log = log(&ledger, &r).await;
    assert_eq!(count_kind(&log, "callback"), 1, "{:?}", kinds(&log));
    assert_eq!(count_kind(&log, "late_evidence"), 0);
    let entry = &log.last().expect("entry").entry;
    assert_eq!(
        entry.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("pi_1".to_owned())
        })
    );
    // The same event id from another vendor is another event.
    let other_vendor = CallbackDelivery {
        vendor: "adyen".to_owned(),
        ..delivery(&moved, "evt_1")
    };
    let other = must(
        ledger
            .apply_callback(
                other_vendor,
                CallbackEffect::Append(evidence_entry("late_evidence", T0 + 7)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(other, CallbackApplied::Appended);
}

/// Checks that a compare-and-swap that fails inside a callback stores nothing, not even the
/// dedupe record: the caller reads again and the retry applies.
pub async fn callback_with_a_stale_update_stores_nothing_and_is_retried<L: CallbackLedger>(
    ledger: L,
) {
    let r = put(&ledger, "op-cb-stale", State::Unknown, Some(T0), None).await;
    // Someone else moves the row first.
    let moved = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::Processing, T0 + 1), "lookup"),
    )
    .await;
    let before = log(&ledger, &r).await;
    let stale = must(
        ledger
            .apply_callback(
                delivery(&r, "evt_stale"),
                CallbackEffect::Apply(succeeded_by_callback(&r)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(stale, CallbackApplied::Stale);
    assert_eq!(get(&ledger, &r).await, moved, "nothing changed");
    assert_eq!(log(&ledger, &r).await, before, "no evidence");
    // Read again, decide again: the event was not recorded, so it applies now.
    let fresh = get(&ledger, &r).await;
    let retried = must(
        ledger
            .apply_callback(
                delivery(&fresh, "evt_stale"),
                CallbackEffect::Apply(succeeded_by_callback(&fresh)),
            )
            .await,
        "apply_callback",
    );
    assert!(
        matches!(&retried, CallbackApplied::Applied(row) if row.state == State::Succeeded),
        "{retried:?}"
    );
    assert_eq!(count_kind(&log(&ledger, &r).await, "callback"), 1);
}

/// Checks that an event that cannot move its operation is appended as late evidence, once, and
/// leaves the row as it was.
pub async fn callback_appends_late_evidence_once<L: CallbackLedger>(ledger: L) {
    let r = put(&ledger, "op-cb-late", State::Succeeded, None, None).await;
    let entry = NewEvidence {
        generation: r.generation,
        from_state: Some(State::Succeeded),
        to_state: Some(State::Succeeded),
        evidence: Some(Evidence::processing()),
        ..evidence_entry("late_evidence", T0 + 5)
    };
    for expected in [CallbackApplied::Appended, CallbackApplied::Duplicate] {
        let got = must(
            ledger
                .apply_callback(
                    delivery(&r, "evt_late"),
                    CallbackEffect::Append(entry.clone()),
                )
                .await,
            "apply_callback",
        );
        assert_eq!(got, expected);
    }
    let after = get(&ledger, &r).await;
    assert_eq!(
        after.version,
        r.version + 1,
        "late evidence advances the version once (the redelivery changes nothing)"
    );
    assert_eq!(
        OperationRecord {
            version: r.version,
            ..after
        },
        r,
        "late evidence changes no other column"
    );
    let log = log(&ledger, &r).await;
    assert_eq!(count_kind(&log, "late_evidence"), 1, "{:?}", kinds(&log));
    assert_eq!(log.last().expect("entry").entry.evidence, entry.evidence);
}

/// Checks that a delivery matched to an operation that does not exist (or exists only in
/// another tenant) stores nothing, so the event can still be quarantined.
pub async fn callback_for_an_unknown_operation_stores_nothing<L: CallbackLedger>(ledger: L) {
    let r = put(&ledger, "op-cb-real", State::Unknown, Some(T0), None).await;
    let mut ghost = r.clone();
    ghost.tenant = Tenant::new("tenant-b");
    for effect in [
        CallbackEffect::Apply(succeeded_by_callback(&ghost)),
        CallbackEffect::Append(evidence_entry("late_evidence", T0 + 5)),
    ] {
        let got = must(
            ledger
                .apply_callback(delivery(&ghost, "evt_ghost"), effect)
                .await,
            "apply_callback",
        );
        assert_eq!(got, CallbackApplied::NoOperation);
    }
    assert_eq!(
        get(&ledger, &r).await,
        r,
        "the other tenant's row is untouched"
    );
    assert_eq!(log(&ledger, &r).await.len(), 2, "created and setup only");
    let stored = must(
        ledger
            .quarantine_callback(quarantined("evt_ghost", "no operation"))
            .await,
        "quarantine_callback",
    );
    assert_eq!(stored, CallbackQuarantined::Stored);
}

/// Checks that an update naming another operation than its delivery is refused before anything
/// is written.
pub async fn callback_update_for_another_operation_is_refused<L: CallbackLedger>(ledger: L) {
    let a = put(&ledger, "op-cb-a", State::Unknown, Some(T0), None).await;
    let b = put(&ledger, "op-cb-b", State::Unknown, Some(T0), None).await;
    let refused = ledger
        .apply_callback(
            delivery(&a, "evt_mixed"),
            CallbackEffect::Apply(succeeded_by_callback(&b)),
        )
        .await;
    assert!(
        matches!(refused, Err(LedgerError::Config(_))),
        "{refused:?}"
    );
    assert_eq!(get(&ledger, &a).await, a);
    assert_eq!(get(&ledger, &b).await, b);
    // Nothing was recorded: the event still applies.
    let applied = must(
        ledger
            .apply_callback(
                delivery(&a, "evt_mixed"),
                CallbackEffect::Apply(succeeded_by_callback(&a)),
            )
            .await,
        "apply_callback",
    );
    assert!(
        matches!(applied, CallbackApplied::Applied(_)),
        "{applied:?}"
    );
}

pub(super) fn quarantined(event_id: &str, reason: &str) -> QuarantinedCallback {
    QuarantinedCallback {
        vendor: "stripe".to_owned(),
        event_id: event_id.to_owned(),
        event_type: "payment_intent.succeeded".to_owned(),
        tenant: Some(Tenant::new("tenant-a")),
        match_by: Some("remote_ref".to_owned()),
        match_value: Some("pi_unknown".to_owned()),
        reason: reason.to_owned(),
        evidence: Some(Evidence::Succeeded {
            remote_ref: Some("pi_unknown".to_owned()),
        }),
        received_at_ms: T0 + 9,
    }
}

/// Checks the callback quarantine: stored once per event (a redelivery is a duplicate), every
/// field kept, listed oldest first within the limit, and sharing the dedupe table with applied
/// events.
pub async fn callbacks_are_quarantined_once_and_listed_in_order<L: CallbackLedger>(ledger: L) {
    let first = quarantined("evt_q1", "no operation");
    let second = QuarantinedCallback {
        vendor: "paypal".to_owned(),
        tenant: None,
        match_by: None,
        match_value: None,
        evidence: None,
        ..quarantined("evt_q2", "unknown account")
    };
    for (event, expected) in [
        (first.clone(), CallbackQuarantined::Stored),
        (second.clone(), CallbackQuarantined::Stored),
        (first.clone(), CallbackQuarantined::Duplicate),
    ] {
        let got = must(
            ledger.quarantine_callback(event).await,
            "quarantine_callback",
        );
        assert_eq!(got, expected);
    }
    let listed = must(
        ledger
            .quarantined_callbacks(&crate::ledger::TenantScope::AllTenants, 10)
            .await,
        "quarantined_callbacks",
    );
    assert_eq!(listed, vec![first.clone(), second]);
    let one = must(
        ledger
            .quarantined_callbacks(&crate::ledger::TenantScope::AllTenants, 1)
            .await,
        "quarantined_callbacks",
    );
    assert_eq!(one, vec![first]);
    // A quarantined event is recorded: a later delivery of it that matches is a duplicate.
    let r = put(&ledger, "op-cb-q", State::Unknown, Some(T0), None).await;
    let got = must(
        ledger
            .apply_callback(
                delivery(&r, "evt_q1"),
                CallbackEffect::Apply(succeeded_by_callback(&r)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(got, CallbackApplied::Duplicate);
    assert_eq!(get(&ledger, &r).await, r);
}

/// Checks the lookups a callback is matched by: by remote reference and by idempotency key,
/// only ever within the given tenant.
pub async fn find_by_remote_ref_and_idempotency_key_stay_in_their_tenant<L: ListingLedger>(
    ledger: L,
) {
    let with_ref = |r: &OperationRecord| RawChanges {
        remote_ref: Some("W731".to_owned()),
        ..keep(r, State::Succeeded, T0 + 1)
    };
    let a = create(
        &ledger,
        new_operation("tenant-a", "op-ref-a", "intent-ref-a"),
    )
    .await;
    let a = apply_ok(&ledger, update_of(&a, with_ref(&a), "setup")).await;
    let b = create(
        &ledger,
        new_operation("tenant-b", "op-ref-b", "intent-ref-b"),
    )
    .await;
    let b = apply_ok(&ledger, update_of(&b, with_ref(&b), "setup")).await;
    let _other = create(
        &ledger,
        new_operation("tenant-a", "op-ref-c", "intent-ref-c"),
    )
    .await;

    let found = must(
        ledger.find_by_remote_ref(&a.tenant, "W731").await,
        "find_by_remote_ref",
    );
    assert_eq!(found.as_ref(), Some(&a));
    let found = must(
        ledger.find_by_remote_ref(&b.tenant, "W731").await,
        "find_by_remote_ref",
    );
    assert_eq!(found.as_ref(), Some(&b));
    let none = must(
        ledger
            .find_by_remote_ref(&Tenant::new("tenant-c"), "W731")
            .await,
        "find_by_remote_ref",
    );
    assert_eq!(none, None, "never another tenant's");
    let none = must(
        ledger.find_by_remote_ref(&a.tenant, "W000").await,
        "find_by_remote_ref",
    );
    assert_eq!(none, None);

    let key = a.idempotency_key.as_str();
    let found = must(
        ledger.find_by_idempotency_key(&a.tenant, key).await,
        "find_by_idempotency_key",
    );
    assert_eq!(found.as_ref(), Some(&a));
    let none = must(
        ledger.find_by_idempotency_key(&b.tenant, key).await,
        "find_by_idempotency_key",
    );
    assert_eq!(none, None, "a key is looked up in its tenant only");
}

/// Checks that concurrent deliveries of one event (several application instances receiving it
/// at once, each deciding on the same read) make exactly one state change and one evidence
/// entry; the others are duplicates, or stale and then duplicates when they read again and
/// retry, as the endpoint does.
pub async fn concurrent_deliveries_of_one_event_change_the_state_once<L: CallbackLedger>(
    ledger: L,
) {
    const DELIVERIES: usize = 8;
    let r = put(&ledger, "op-cb-race", State::Unknown, Some(T0), None).await;
    let ledger = Arc::new(ledger);
    let barrier = Arc::new(tokio::sync::Barrier::new(DELIVERIES));
    let mut tasks = Vec::new();
    for _ in 0..DELIVERIES {
        let (ledger, barrier, read) = (ledger.clone(), barrier.clone(), r.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut read = read;
            loop {
                let got = must(
                    ledger
                        .apply_callback(
                            delivery(&read, "evt_race"),
                            CallbackEffect::Apply(succeeded_by_callback(&read)),
                        )
                        .await,
                    "apply_callback",
                );
                match got {
                    CallbackApplied::Stale => {
                        read = must(ledger.get(&read.tenant, &read.operation_id).await, "get")
                            .expect("row");
                    }
                    other => break other,
                }
            }
        }));
    }
    let mut applied = 0;
    for task in tasks {
        match task.await.expect("delivery task") {
            CallbackApplied::Applied(_) => applied += 1,
            CallbackApplied::Duplicate => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(applied, 1, "exactly one delivery applies");
    let row = get(&*ledger, &r).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.version, r.version + 1, "one state change");
    assert_eq!(count_kind(&log(&*ledger, &r).await, "callback"), 1);
}
