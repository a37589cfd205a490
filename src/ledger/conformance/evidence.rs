//! Checks of the evidence log: entries in order with every field, an entry on its own advances
//! only the version, and logs are kept per tenant and operation.

use std::time::Duration;

use super::fixtures::{RawChanges, T0, evidence_entry, keep, new_operation, update_of};
use super::helpers::{apply_ok, create, get, kinds, log, must};
use crate::evidence::{ConflictKind, Evidence};
use crate::ledger::{Ledger, NewEvidence, OperationRecord};
use crate::operation::{AttemptId, Generation, OperationId, Tenant};
use crate::state::State;

/// Entries come back oldest first, with increasing sequence numbers and every field as given,
/// whether appended by `apply` or by `append_evidence`.
pub async fn evidence_is_appended_in_order_with_all_fields<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let attempt = AttemptId::generate();
    let registered = NewEvidence {
        attempt_id: Some(attempt),
        generation: Generation(1),
        kind: "attempt_registered".into(),
        from_state: Some(State::Prepared),
        to_state: Some(State::InFlight),
        evidence: None,
        note: Some("first send".to_owned()),
        at_ms: T0 + 1,
    };
    let mut update = update_of(
        &r,
        RawChanges {
            generation: Generation(1),
            current_attempt: Some(attempt),
            ..keep(&r, State::InFlight, T0 + 1)
        },
        "ignored",
    );
    update.evidence = registered.clone();
    let r = apply_ok(&ledger, update).await;

    let result = NewEvidence {
        attempt_id: Some(attempt),
        generation: Generation(1),
        kind: "attempt_result".into(),
        from_state: Some(State::InFlight),
        to_state: Some(State::Processing),
        evidence: Some(Evidence::Processing {
            retry_after: Some(Duration::from_millis(1500)),
            remote_ref: Some("W731".to_owned()),
        }),
        note: None,
        at_ms: T0 + 2,
    };
    let mut update = update_of(&r, keep(&r, State::Processing, T0 + 2), "ignored");
    update.evidence = result.clone();
    let r = apply_ok(&ledger, update).await;

    let late = NewEvidence {
        attempt_id: Some(attempt),
        generation: Generation(1),
        kind: "late_evidence".into(),
        from_state: Some(State::Processing),
        to_state: None,
        evidence: Some(Evidence::Conflict {
            conflict: ConflictKind::InFlight,
        }),
        note: Some("duplicate callback, ünïcode".to_owned()),
        at_ms: T0 + 3,
    };
    must(
        ledger
            .append_evidence(&r.tenant, &r.operation_id, late.clone())
            .await,
        "append_evidence",
    );
    let weak = NewEvidence {
        evidence: Some(Evidence::unknown("404 from lookup")),
        ..evidence_entry("lookup", T0 + 4)
    };
    must(
        ledger
            .append_evidence(&r.tenant, &r.operation_id, weak.clone())
            .await,
        "append_evidence",
    );

    let entries = log(&ledger, &r).await;
    assert_eq!(
        kinds(&entries),
        [
            "created",
            "attempt_registered",
            "attempt_result",
            "late_evidence",
            "lookup"
        ]
    );
    assert_eq!(entries[1].entry, registered);
    assert_eq!(entries[2].entry, result);
    assert_eq!(entries[3].entry, late);
    assert_eq!(entries[4].entry, weak);
    for pair in entries.windows(2) {
        assert!(
            pair[0].seq < pair[1].seq,
            "sequence numbers must increase: {} then {}",
            pair[0].seq,
            pair[1].seq
        );
    }
}

/// `append_evidence` changes nothing in the row but its version, which advances: a decision
/// made on the row as it was before the entry (a reviewer's resolve, a replay's claim) names the
/// old version and is refused as stale (the fencing rule).
pub async fn append_evidence_advances_only_the_version<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let r = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::ManualReview, T0 + 1), "escalated"),
    )
    .await;
    must(
        ledger
            .append_evidence(
                &r.tenant,
                &r.operation_id,
                NewEvidence {
                    evidence: Some(Evidence::Succeeded {
                        remote_ref: Some("W731".to_owned()),
                    }),
                    ..evidence_entry("late_evidence", T0 + 9)
                },
            )
            .await,
        "append_evidence",
    );
    let after = get(&ledger, &r).await;
    assert_eq!(
        after.version,
        r.version + 1,
        "the append advances the version"
    );
    assert_eq!(
        OperationRecord {
            version: r.version,
            ..after
        },
        r,
        "and changes nothing else"
    );
    assert_eq!(
        kinds(&log(&ledger, &r).await),
        ["created", "escalated", "late_evidence"]
    );
    // A decision computed on the row as read before the entry is refused, and changes nothing.
    let stale = update_of(&r, keep(&r, State::RetryReady, T0 + 10), "review");
    assert_eq!(
        must(ledger.apply(stale).await, "apply"),
        None,
        "a decision on the view before the evidence is stale"
    );
    assert_eq!(get(&ledger, &r).await.state, State::ManualReview);
}

/// Evidence for an operation that does not exist (an unknown id, or another tenant's) is not
/// stored anywhere: `Ok(())`, nothing changes.
pub async fn append_evidence_for_an_unknown_operation_stores_nothing<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let other_tenant = Tenant::new("tenant-b");
    let ghost = OperationId::new("op-ghost");
    must(
        ledger
            .append_evidence(
                &other_tenant,
                &r.operation_id,
                evidence_entry("callback", T0 + 1),
            )
            .await,
        "append_evidence",
    );
    must(
        ledger
            .append_evidence(&r.tenant, &ghost, evidence_entry("callback", T0 + 1))
            .await,
        "append_evidence",
    );
    assert!(
        must(
            ledger.evidence(&other_tenant, &r.operation_id).await,
            "evidence"
        )
        .is_empty()
    );
    assert!(must(ledger.evidence(&r.tenant, &ghost).await, "evidence").is_empty());
    assert_eq!(
        must(ledger.get(&other_tenant, &r.operation_id).await, "get"),
        None
    );
    assert_eq!(kinds(&log(&ledger, &r).await), ["created"]);
    assert_eq!(get(&ledger, &r).await, r);
}

/// Each operation has its own log, per tenant.
pub async fn evidence_is_kept_per_tenant_and_operation<L: Ledger>(ledger: L) {
    let a = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let b = create(&ledger, new_operation("tenant-b", "op-1", "intent-1")).await;
    let c = create(&ledger, new_operation("tenant-a", "op-2", "intent-2")).await;
    must(
        ledger
            .append_evidence(&a.tenant, &a.operation_id, evidence_entry("only_a", T0 + 1))
            .await,
        "append_evidence",
    );
    apply_ok(
        &ledger,
        update_of(&c, keep(&c, State::InFlight, T0 + 2), "only_c"),
    )
    .await;
    assert_eq!(kinds(&log(&ledger, &a).await), ["created", "only_a"]);
    assert_eq!(kinds(&log(&ledger, &b).await), ["created"]);
    assert_eq!(kinds(&log(&ledger, &c).await), ["created", "only_c"]);
}
