//! Shared by the bulk reconciliation tests: operations taken to `MANUAL_REVIEW` by a real
//! drill, and the fake vendor's tickets as a vendor's export.
#![allow(dead_code)]

use std::time::Duration;

use recoverable_write::ledger::{ListingLedger, TenantScope};
use recoverable_write::state::State;
use recoverable_write::testing::drill::{Drill, DrillOptions, TENANT, new_op, send};
use recoverable_write::{Operation, Tenant};

/// `n` operations of a D9 drill, all in `MANUAL_REVIEW` (their tickets created at the vendor,
/// the responses lost, no lookup able to tell).
pub async fn in_review(n: usize, prefix: &str) -> (Drill, Vec<Operation>) {
    let drill = Drill::with_options(DrillOptions::d9()).await;
    let ops: Vec<Operation> = (0..n).map(|i| new_op(&format!("{prefix}-{i}"))).collect();
    drill.vendor.faults().drop_after_commit(n as u64);
    let mut writer = drill.writer();
    for (i, op) in ops.iter().enumerate() {
        let sent = send(&mut writer, drill.ticket_request(op, &format!("E{i}"))).await;
        assert!(sent.is_err(), "the response is lost");
    }
    drill.vendor.faults().expire_keys();
    drill.vendor.faults().clean_operation_records();
    let recoverer = drill.recoverer.clone().batch_size(500);
    let scope = TenantScope::Tenant(Tenant::new(TENANT));
    for _ in 0..2_000 {
        recoverer.run_once().await.expect("recovery pass");
        let counts = drill.ledger.count_by_state(&scope).await.expect("counts");
        if counts.get(State::ManualReview) == Some(n as u64) {
            assert_eq!(drill.vendor.tickets_created(), n as u64);
            return (drill, ops);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the operations never all reached MANUAL_REVIEW");
}

/// The fake vendor's tickets as a Stripe payments export: `id` and the metadata column.
pub fn stripe_export(drill: &Drill) -> String {
    let mut csv = String::from("id,Created (UTC),Amount,Currency,Status,operation_id (metadata)\n");
    for t in drill.vendor.tickets() {
        csv.push_str(&format!(
            "{},2026-12-01 03:14,12.00,eur,Paid,{}\n",
            t.id,
            t.operation_id.as_deref().unwrap_or("")
        ));
    }
    csv
}

pub fn ticket_of(drill: &Drill, op: &Operation) -> String {
    drill
        .vendor
        .tickets()
        .into_iter()
        .find(|t| t.operation_id.as_deref() == Some(op.id().as_str()))
        .expect("the vendor has its ticket")
        .id
}
