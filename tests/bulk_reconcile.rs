//! Bulk reconciliation from a vendor's export (issue 30 item 6), on the engine: operations
//! taken to `MANUAL_REVIEW` by real drills (a lost response, the vendor's keys expired and its
//! records cleaned), an export built from the fake vendor's own tickets, the plan and its
//! application. Every test checks the ledger afterwards and the vendor's own count of side
//! effects: reconciling from an export never sends anything.

#[path = "common/bulk.rs"]
mod bulk;

use std::time::{Duration, Instant};

use bulk::{in_review, stripe_export, ticket_of};

use recoverable_write::Tenant;
use recoverable_write::ledger::backend::NewEvidence;
use recoverable_write::operator;
use recoverable_write::review::bulk::{
    BulkError, ExportMapping, PlanAction, RowOutcome, VendorExport,
};
use recoverable_write::state::State;
use recoverable_write::testing::drill::TENANT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_export_of_1000_objects_resolves_1000_operations_in_review_with_their_references()
{
    let started = Instant::now();
    let (drill, ops) = in_review(1_000, "outage").await;
    let setup = started.elapsed();
    let export = VendorExport::parse(
        "payments-2026-12-01.csv",
        stripe_export(&drill).as_bytes(),
        &ExportMapping::stripe(),
    )
    .expect("the export reads");
    assert_eq!(export.rows.len(), 1_000);
    let reviews = drill.rw.reviews();
    let tenant = Tenant::new(TENANT);
    let posts = drill.vendor.posts_received();

    let t0 = Instant::now();
    let plan = reviews.bulk_plan(&tenant, &export).await.expect("plan");
    assert_eq!(plan.to_resolve().count(), 1_000);
    assert!(plan.unmatched.is_empty());
    let report = reviews
        .bulk_apply(&plan, "alice", "outage 2026-12-01: Stripe export")
        .await
        .expect("apply");
    let elapsed = t0.elapsed();
    println!(
        "bulk reconciliation of 1000 operations from a 1000-row Stripe export: plan + apply \
         {elapsed:?} (setup: 1000 drills to review in {setup:?})"
    );
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
    assert_eq!(report.applied(), 1_000);

    for op in &ops {
        let row = drill.record(op.id()).await;
        assert_eq!(row.state, State::Succeeded);
        assert_eq!(
            row.remote_ref.as_deref(),
            Some(ticket_of(&drill, op).as_str())
        );
    }
    // The audit entry names the export and its digest.
    let pkg = reviews
        .handoff(&tenant, ops[0].id())
        .await
        .expect("package");
    let audit = operator::audit_trail(&pkg).pop().expect("audit entry");
    let reason = audit.reason.expect("a reason");
    assert!(reason.contains("payments-2026-12-01.csv"), "{reason}");
    assert!(reason.contains(&export.sha256), "{reason}");
    assert_eq!(audit.who.as_deref(), Some("alice"));
    // Nothing was sent: the vendor still has one ticket per operation.
    assert_eq!(drill.vendor.tickets_created(), 1_000);
    assert_eq!(drill.vendor.posts_received(), posts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_apply_with_one_stale_row_applies_the_rest_and_reports_that_one() {
    let (drill, ops) = in_review(4, "stale").await;
    let export = VendorExport::parse(
        "export.csv",
        stripe_export(&drill).as_bytes(),
        &ExportMapping::stripe(),
    )
    .unwrap();
    let reviews = drill.rw.reviews();
    let tenant = Tenant::new(TENANT);
    let plan = reviews.bulk_plan(&tenant, &export).await.unwrap();
    assert_eq!(plan.to_resolve().count(), 4);

    // Evidence arrives on one operation after the plan: its version moves.
    let moved = drill.record(ops[2].id()).await;
    drill
        .ledger
        .append_evidence(
            &tenant,
            ops[2].id(),
            NewEvidence {
                attempt_id: None,
                generation: moved.generation,
                kind: "late_response".into(),
                from_state: None,
                to_state: None,
                evidence: None,
                note: Some("a late answer".into()),
                at_ms: moved.updated_ms + 1,
            },
        )
        .await
        .unwrap();

    let report = reviews.bulk_apply(&plan, "alice", "export").await.unwrap();
    assert_eq!(report.applied(), 3);
    let skipped: Vec<_> = report.skipped().collect();
    assert_eq!(skipped.len(), 1);
    assert_eq!(&skipped[0].operation_id, ops[2].id());
    assert!(
        matches!(skipped[0].outcome, RowOutcome::Stale { planned, current } if current > planned),
        "{:?}",
        skipped[0].outcome
    );
    for (i, op) in ops.iter().enumerate() {
        let row = drill.record(op.id()).await;
        if i == 2 {
            assert_eq!(row.state, State::ManualReview, "the stale one is untouched");
            assert_eq!(row.remote_ref, None);
        } else {
            assert_eq!(row.state, State::Succeeded);
            assert_eq!(
                row.remote_ref.as_deref(),
                Some(ticket_of(&drill, op).as_str())
            );
        }
    }
    // A fresh plan proposes the stale one again, at its new version; it applies then.
    let again = reviews.bulk_plan(&tenant, &export).await.unwrap();
    let resolve: Vec<_> = again.to_resolve().collect();
    assert_eq!(resolve.len(), 1);
    assert_eq!(resolve[0].operation_id.as_ref(), Some(ops[2].id()));
    assert_eq!(
        again
            .rows
            .iter()
            .filter(|r| r.action == PlanAction::AlreadyRecorded)
            .count(),
        3
    );
    assert_eq!(
        reviews
            .bulk_apply(&again, "alice", "export")
            .await
            .unwrap()
            .applied(),
        1
    );
    assert_eq!(drill.vendor.tickets_created(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_unmatched_rows_and_operations_without_a_row_are_never_resolved() {
    let (drill, ops) = in_review(4, "mixed").await;
    let tenant = Tenant::new(TENANT);
    let t0 = ticket_of(&drill, &ops[0]);
    let t1 = ticket_of(&drill, &ops[1]);
    // ops[0]: twice with the same reference (a duplicate row); ops[1]: two references (a
    // conflict); ops[2], ops[3]: no row (no match, resolve by hand); one row naming nothing.
    let csv = format!(
        "id,operation_id (metadata)\n{t0},{o0}\n{t0},{o0}\n{t1},{o1}\nW999,{o1}\nW998,op-unknown\nW997,\n",
        o0 = ops[0].id(),
        o1 = ops[1].id()
    );
    let export =
        VendorExport::parse("mixed.csv", csv.as_bytes(), &ExportMapping::stripe()).unwrap();
    let reviews = drill.rw.reviews();
    let plan = reviews.bulk_plan(&tenant, &export).await.unwrap();
    let actions: Vec<&PlanAction> = plan.rows.iter().map(|r| &r.action).collect();
    assert_eq!(actions[0], &PlanAction::Resolve);
    assert_eq!(actions[1], &PlanAction::Duplicate { first_row: 2 });
    assert!(matches!(actions[2], PlanAction::Conflict { references } if references.len() == 2));
    assert!(matches!(actions[3], PlanAction::Conflict { .. }));
    assert!(matches!(actions[4], PlanAction::NoMatch { .. }));
    assert!(matches!(actions[5], PlanAction::NoMatch { .. }));
    let unmatched: Vec<_> = plan.unmatched.iter().map(|u| &u.operation_id).collect();
    assert_eq!(unmatched, vec![ops[2].id(), ops[3].id()]);

    let report = reviews.bulk_apply(&plan, "alice", "export").await.unwrap();
    assert_eq!(report.applied(), 1);
    assert_eq!(drill.record(ops[0].id()).await.state, State::Succeeded);
    for op in &ops[1..] {
        let row = drill.record(op.id()).await;
        assert_eq!(
            row.state,
            State::ManualReview,
            "never resolved from absence or conflict"
        );
        assert_eq!(
            row.attempts_used, 1,
            "never re-approved: nothing sent again"
        );
    }
    assert_eq!(drill.vendor.tickets_created(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_matching_two_operations_refuses_the_mapping_and_changes_nothing() {
    let (drill, ops) = in_review(2, "two").await;
    let tenant = Tenant::new(TENANT);
    let key1 = drill
        .record(ops[1].id())
        .await
        .idempotency_key
        .as_str()
        .to_owned();
    // The row's operation id names ops[0], its key names ops[1].
    let csv = format!(
        "object,op,key\n{},{},{key1}\n",
        ticket_of(&drill, &ops[0]),
        ops[0].id()
    );
    let mapping = ExportMapping::generic("object", Some("op"), Some("key")).unwrap();
    let export = VendorExport::parse("bad.csv", csv.as_bytes(), &mapping).unwrap();
    let reviews = drill.rw.reviews();
    let err = reviews.bulk_plan(&tenant, &export).await.unwrap_err();
    assert!(
        matches!(err, BulkError::RowMatchesTwo { row: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("refused as a whole"), "{err}");

    // A reference already recorded on another operation is the same refusal.
    let t0 = ticket_of(&drill, &ops[0]);
    let plan = reviews
        .bulk_plan(
            &tenant,
            &VendorExport::parse(
                "ok.csv",
                format!("id,operation_id (metadata)\n{t0},{}\n", ops[0].id()).as_bytes(),
                &ExportMapping::stripe(),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        reviews
            .bulk_apply(&plan, "alice", "x")
            .await
            .unwrap()
            .applied(),
        1
    );
    let csv = format!("id,operation_id (metadata)\n{t0},{}\n", ops[1].id());
    let export = VendorExport::parse("b.csv", csv.as_bytes(), &ExportMapping::stripe()).unwrap();
    let err = reviews.bulk_plan(&tenant, &export).await.unwrap_err();
    assert!(matches!(err, BulkError::RowMatchesTwo { .. }), "{err}");
    assert_eq!(drill.record(ops[1].id()).await.state, State::ManualReview);

    // Matching by key alone works; another tenant's operations are never matched.
    let by_key = ExportMapping::generic("object", None, Some("key")).unwrap();
    let csv = format!("object,key\nW555,{key1}\n");
    let export = VendorExport::parse("k.csv", csv.as_bytes(), &by_key).unwrap();
    let plan = reviews.bulk_plan(&tenant, &export).await.unwrap();
    assert_eq!(plan.rows[0].operation_id.as_ref(), Some(ops[1].id()));
    assert_eq!(plan.rows[0].action, PlanAction::Resolve);
    let other = reviews
        .bulk_plan(&Tenant::new("tenant-b"), &export)
        .await
        .unwrap();
    assert!(matches!(other.rows[0].action, PlanAction::NoMatch { .. }));
    assert!(matches!(
        reviews.bulk_apply(&plan, "alice", " ").await,
        Err(BulkError::ReasonRequired)
    ));
    assert_eq!(drill.vendor.tickets_created(), 2);
}
