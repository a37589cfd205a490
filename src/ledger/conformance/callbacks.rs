//! Conformance checks of issue 27: callbacks are deduplicated before they are matched (ignored
//! types included), an unmatched one is told apart from another tenant's by an index probe, the
//! quarantine is listed per tenant before its limit, and a contradiction of a final state marks
//! the operation for the review queue until a person acknowledges it.

use super::callback_delivery::{delivery, quarantined, succeeded_by_callback};
use super::fixtures::{RawChanges, T0, evidence_entry, keep, new_operation, update_of};
use super::helpers::{apply_ok, get, kinds, log, must, put};
use crate::contradiction::{CONTRADICTION, CONTRADICTION_ACKNOWLEDGED};
use crate::evidence::Evidence;
use crate::ledger::{
    CallbackApplied, CallbackEffect, CallbackLedger, CallbackQuarantined, CallbackRecorded,
    Created, IgnoredCallback, ListingLedger, NewEvidence, OperationQuery, OperationRecord, ProbeBy,
    QuarantinedCallback, TenantScope,
};
use crate::operation::Tenant;
use crate::state::State;

fn ignored(event_id: &str) -> IgnoredCallback {
    IgnoredCallback {
        vendor: "stripe".to_owned(),
        event_id: event_id.to_owned(),
        event_type: "customer.created".to_owned(),
        tenant: Some(Tenant::new("tenant-a")),
        received_at_ms: T0 + 3,
    }
}

async fn seen<L: CallbackLedger>(ledger: &L, event_id: &str) -> bool {
    must(
        ledger.callback_seen("stripe", event_id).await,
        "callback_seen",
    )
}

/// Checks the dedupe table's read and the record of an ignored event: an event is seen once it
/// was applied, quarantined or ignored, never before; an ignored event is recorded once, and
/// its id then counts as a duplicate for every other way of storing it. Event ids are scoped
/// by vendor.
pub async fn callbacks_are_seen_once_recorded_ignored_ones_included<L: CallbackLedger>(ledger: L) {
    assert!(!seen(&ledger, "evt_i").await, "nothing recorded yet");
    for expected in [CallbackRecorded::Recorded, CallbackRecorded::Duplicate] {
        let got = must(
            ledger.record_ignored_callback(ignored("evt_i")).await,
            "record_ignored_callback",
        );
        assert_eq!(got, expected);
    }
    assert!(seen(&ledger, "evt_i").await);
    assert!(
        !must(
            ledger.callback_seen("adyen", "evt_i").await,
            "callback_seen"
        ),
        "event ids are scoped by vendor"
    );
    // The ignored event's id is taken: neither an application nor a quarantine stores it again.
    let r = put(&ledger, "op-cb-ign", State::Unknown, Some(T0), None).await;
    let got = must(
        ledger
            .apply_callback(
                delivery(&r, "evt_i"),
                CallbackEffect::Apply(succeeded_by_callback(&r)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(got, CallbackApplied::Duplicate);
    assert_eq!(get(&ledger, &r).await, r, "a duplicate changes nothing");
    let got = must(
        ledger.quarantine_callback(quarantined("evt_i", "x")).await,
        "quarantine_callback",
    );
    assert_eq!(got, CallbackQuarantined::Duplicate);
    assert!(
        must(
            ledger
                .quarantined_callbacks(&TenantScope::AllTenants, 10)
                .await,
            "quarantined_callbacks"
        )
        .is_empty()
    );
    // Applied and quarantined events are seen too.
    must(
        ledger
            .apply_callback(
                delivery(&r, "evt_a"),
                CallbackEffect::Apply(succeeded_by_callback(&r)),
            )
            .await,
        "apply_callback",
    );
    must(
        ledger.quarantine_callback(quarantined("evt_q", "x")).await,
        "quarantine_callback",
    );
    assert!(seen(&ledger, "evt_a").await);
    assert!(seen(&ledger, "evt_q").await);
    assert!(!seen(&ledger, "evt_never").await);
}

/// Checks that the quarantine is listed per tenant before the limit applies: a tenant's first
/// events, oldest first, whatever other tenants' events come before them; events of no tenant
/// only in the all-tenants listing.
pub async fn quarantined_callbacks_are_scoped_before_the_limit<L: CallbackLedger>(ledger: L) {
    let of = |event_id: &str, tenant: Option<&str>| QuarantinedCallback {
        tenant: tenant.map(Tenant::new),
        ..quarantined(event_id, "no operation")
    };
    let stored = [
        of("evt_a1", Some("tenant-a")),
        of("evt_a2", Some("tenant-a")),
        of("evt_none", None),
        of("evt_a3", Some("tenant-a")),
        of("evt_b1", Some("tenant-b")),
    ];
    for q in &stored {
        must(
            ledger.quarantine_callback(q.clone()).await,
            "quarantine_callback",
        );
    }
    let list = |scope: TenantScope, limit: u32| {
        let ledger = &ledger;
        async move {
            let got = must(
                ledger.quarantined_callbacks(&scope, limit).await,
                "quarantined_callbacks",
            );
            got.into_iter().map(|q| q.event_id).collect::<Vec<_>>()
        }
    };
    let tenant = |t: &str| TenantScope::Tenant(Tenant::new(t));
    assert_eq!(
        list(tenant("tenant-b"), 1).await,
        ["evt_b1"],
        "the limit counts the tenant's own events"
    );
    assert_eq!(list(tenant("tenant-a"), 2).await, ["evt_a1", "evt_a2"]);
    assert_eq!(
        list(tenant("tenant-a"), 10).await,
        ["evt_a1", "evt_a2", "evt_a3"]
    );
    assert!(list(tenant("tenant-c"), 10).await.is_empty());
    assert_eq!(
        list(TenantScope::AllTenants, 10).await,
        ["evt_a1", "evt_a2", "evt_none", "evt_a3", "evt_b1"]
    );
    assert_eq!(
        list(TenantScope::AllTenants, 3).await,
        ["evt_a1", "evt_a2", "evt_none"]
    );
}

/// Checks the probe across tenants: it finds another tenant holding the operation id or the
/// vendor reference, never the asking tenant itself, and nothing for a value nobody holds.
pub async fn other_tenant_with_finds_only_other_tenants<L: CallbackLedger>(ledger: L) {
    let r = put(&ledger, "op-cb-probe", State::Unknown, Some(T0), None).await;
    let done = apply_ok(
        &ledger,
        update_of(
            &r,
            RawChanges {
                remote_ref: Some("pi_probe".to_owned()),
                last_result: Some(State::Succeeded),
                next_check_ms: None,
                ..keep(&r, State::Succeeded, T0 + 1)
            },
            "done",
        ),
    )
    .await;
    let (a, b) = (Tenant::new("tenant-a"), Tenant::new("tenant-b"));
    let probe = |tenant: &Tenant, by: ProbeBy, value: &str| {
        let (ledger, tenant, value) = (&ledger, tenant.clone(), value.to_owned());
        async move {
            must(
                ledger.other_tenant_with(&tenant, by, &value).await,
                "other_tenant_with",
            )
        }
    };
    assert_eq!(
        probe(&b, ProbeBy::OperationId, done.operation_id.as_str()).await,
        Some(a.clone())
    );
    assert_eq!(
        probe(&b, ProbeBy::RemoteRef, "pi_probe").await,
        Some(a.clone())
    );
    assert_eq!(
        probe(&a, ProbeBy::OperationId, done.operation_id.as_str()).await,
        None,
        "the asking tenant's own operation is not another tenant's"
    );
    assert_eq!(probe(&a, ProbeBy::RemoteRef, "pi_probe").await, None);
    assert_eq!(probe(&b, ProbeBy::OperationId, "op-nobody").await, None);
    assert_eq!(probe(&b, ProbeBy::RemoteRef, "pi_nobody").await, None);
    // An id that both tenants hold: the other one is found.
    let Created::New(_) = must(
        ledger
            .create_or_get(new_operation(
                "tenant-b",
                done.operation_id.as_str(),
                "intent-b",
            ))
            .await,
        "create_or_get",
    ) else {
        panic!("tenant-b's operation is new");
    };
    assert_eq!(
        probe(&a, ProbeBy::OperationId, done.operation_id.as_str()).await,
        Some(b.clone())
    );
}

fn contradiction_entry(r: &OperationRecord, at_ms: i64) -> NewEvidence {
    NewEvidence {
        generation: r.generation,
        from_state: Some(r.state),
        to_state: Some(r.state),
        evidence: Some(Evidence::Rejected {
            reason: "card_declined".to_owned(),
        }),
        note: Some("stripe callback evt_c: a failure for a write recorded as succeeded".into()),
        ..evidence_entry(CONTRADICTION, at_ms)
    }
}

async fn contradicted<L: ListingLedger>(ledger: &L, scope: TenantScope) -> Vec<String> {
    let page = must(
        ledger
            .list(&OperationQuery::scoped(scope).contradicted())
            .await,
        "list",
    );
    page.rows
        .into_iter()
        .map(|r| r.operation_id.to_string())
        .collect()
}

/// Checks a contradiction of a final state: recorded once with its dedupe record, the state
/// and every other column unchanged but the version and the mark (kept at the first one's
/// time), listed by the contradicted filter for its tenant and across tenants, and cleared only
/// by an acknowledgement made on the current version, which is audited and advances the
/// version.
pub async fn contradiction_marks_the_operation_until_acknowledged<
    L: ListingLedger + CallbackLedger,
>(
    ledger: L,
) {
    let r = put(&ledger, "op-cb-contra", State::Succeeded, None, None).await;
    let quiet = put(&ledger, "op-cb-quiet", State::Succeeded, None, None).await;
    assert_eq!(r.contradiction_ms, None);
    assert!(
        contradicted(&ledger, TenantScope::AllTenants)
            .await
            .is_empty()
    );
    for expected in [CallbackApplied::Appended, CallbackApplied::Duplicate] {
        let got = must(
            ledger
                .apply_callback(
                    delivery(&r, "evt_c"),
                    CallbackEffect::Contradiction(contradiction_entry(&r, T0 + 7)),
                )
                .await,
            "apply_callback",
        );
        assert_eq!(got, expected);
    }
    let marked = get(&ledger, &r).await;
    assert_eq!(marked.contradiction_ms, Some(T0 + 7));
    assert_eq!(
        marked.version,
        r.version + 1,
        "the redelivery changed nothing"
    );
    assert_eq!(
        OperationRecord {
            version: r.version,
            contradiction_ms: None,
            ..marked.clone()
        },
        r,
        "a final state stays final: nothing else changes"
    );
    let entries = log(&ledger, &r).await;
    assert_eq!(
        entries
            .iter()
            .filter(|e| e.entry.kind == CONTRADICTION)
            .count(),
        1,
        "{:?}",
        kinds(&entries)
    );
    let id = r.operation_id.to_string();
    assert_eq!(
        contradicted(&ledger, TenantScope::AllTenants).await,
        [id.as_str()]
    );
    assert_eq!(
        contradicted(&ledger, TenantScope::Tenant(r.tenant.clone())).await,
        [id.as_str()]
    );
    assert!(
        contradicted(&ledger, TenantScope::Tenant(Tenant::new("tenant-b")))
            .await
            .is_empty()
    );
    // With a state filter too: a contradicted operation is usually finished.
    let page = must(
        ledger
            .list(
                &OperationQuery::all_tenants()
                    .state(State::Succeeded)
                    .contradicted(),
            )
            .await,
        "list",
    );
    assert_eq!(page.rows.len(), 1);
    assert_eq!(page.rows[0].operation_id, r.operation_id);
    assert_ne!(page.rows[0].operation_id, quiet.operation_id);

    // A second contradiction keeps the first one's time and advances the version again.
    must(
        ledger
            .apply_callback(
                delivery(&r, "evt_c2"),
                CallbackEffect::Contradiction(contradiction_entry(&marked, T0 + 9)),
            )
            .await,
        "apply_callback",
    );
    let twice = get(&ledger, &r).await;
    assert_eq!(twice.contradiction_ms, Some(T0 + 7));
    assert_eq!(twice.version, marked.version + 1);

    // An acknowledgement made on the view before the second contradiction is stale.
    let ack = |version: u64| NewEvidence {
        generation: twice.generation,
        note: Some(format!(
            "acknowledged by alice; version {version} -> {}",
            version + 1
        )),
        ..evidence_entry(CONTRADICTION_ACKNOWLEDGED, T0 + 10)
    };
    let stale = must(
        ledger
            .acknowledge_contradiction(
                &r.tenant,
                &r.operation_id,
                marked.version,
                ack(marked.version),
            )
            .await,
        "acknowledge_contradiction",
    );
    assert_eq!(stale, None);
    assert_eq!(
        get(&ledger, &r).await,
        twice,
        "a stale acknowledgement changes nothing"
    );

    let cleared = must(
        ledger
            .acknowledge_contradiction(
                &r.tenant,
                &r.operation_id,
                twice.version,
                ack(twice.version),
            )
            .await,
        "acknowledge_contradiction",
    )
    .expect("acknowledged on the current version");
    assert_eq!(cleared.contradiction_ms, None);
    assert_eq!(cleared.version, twice.version + 1);
    assert_eq!(cleared.state, State::Succeeded);
    assert_eq!(get(&ledger, &r).await, cleared);
    let entries = log(&ledger, &r).await;
    assert_eq!(
        entries.last().map(|e| &*e.entry.kind),
        Some(CONTRADICTION_ACKNOWLEDGED),
        "{:?}",
        kinds(&entries)
    );
    assert!(
        contradicted(&ledger, TenantScope::AllTenants)
            .await
            .is_empty()
    );
    // Nothing left to acknowledge.
    assert_eq!(
        must(
            ledger
                .acknowledge_contradiction(
                    &r.tenant,
                    &r.operation_id,
                    cleared.version,
                    ack(cleared.version)
                )
                .await,
            "acknowledge_contradiction",
        ),
        None
    );
    assert_eq!(get(&ledger, &r).await, cleared);
}
