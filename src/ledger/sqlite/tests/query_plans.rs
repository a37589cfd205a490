//! The statements read their indexes: due work, sweeps, listings and counts, callback lookups
//! and contradicted operations, never a scan of a tenant's finished rows.

use super::*;

async fn plan(ledger: &SqliteLedger, sql: &'static str) -> String {
    plan_with(ledger, sql.to_owned(), vec![0.into(), 0.into(), 10.into()]).await
}

#[tokio::test]
async fn due_work_and_sweep_queries_use_the_partial_indexes() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let claim = plan(
        &ledger,
        "EXPLAIN QUERY PLAN SELECT rowid FROM rw_operations INDEXED BY rw_operations_due \
         WHERE state IN ('UNKNOWN', 'PROCESSING', 'RETRY_READY') AND next_check_ms <= ?1 \
           AND (lease_until_ms IS NULL OR lease_until_ms <= ?2) \
         ORDER BY next_check_ms, rowid LIMIT ?3",
    )
    .await;
    assert!(claim.contains("rw_operations_due"), "{claim}");
    assert!(!claim.contains("TEMP B-TREE"), "{claim}");
    let sweep = plan(
        &ledger,
        "EXPLAIN QUERY PLAN SELECT rowid FROM rw_operations \
         INDEXED BY rw_operations_in_flight_lease WHERE state = 'IN_FLIGHT' AND lease_until_ms < ?1 AND ?2 = ?2 AND ?3 = ?3",
    )
    .await;
    assert!(sweep.contains("rw_operations_in_flight_lease"), "{sweep}");
    let evidence = plan(
        &ledger,
        "EXPLAIN QUERY PLAN SELECT id FROM rw_evidence \
         WHERE tenant = ?1 AND operation_id = ?2 AND ?3 = ?3 ORDER BY id",
    )
    .await;
    assert!(evidence.contains("rw_evidence_by_operation"), "{evidence}");
    assert!(!evidence.contains("TEMP B-TREE"), "{evidence}");
}

#[tokio::test]
async fn the_real_claim_and_sweep_statements_use_the_partial_indexes() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    for (sql, index) in [
        (CLAIM_DUE, "rw_operations_due"),
        (SWEEP_EXPIRED, "rw_operations_in_flight_lease"),
        (CLAIM_PREPARED, "rw_operations_prepared"),
    ] {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let args = match sql {
            CLAIM_PREPARED => vec![0.into(), 0.into(), 0.into(), 10.into()],
            SWEEP_EXPIRED => vec![0.into(), rusqlite::types::Value::Text("r".into())],
            _ => vec![0.into(), 0.into(), 10.into()],
        };
        let plan = plan_with(&ledger, explain, args).await;
        assert!(plan.contains(index), "{sql}\n{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{sql}\n{plan}");
    }
}

#[tokio::test]
async fn the_review_queue_listing_and_the_counts_read_the_state_indexes() {
    use crate::ledger::query::{count_sql, list_sql};
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let one = OperationQuery::tenant(Tenant::new("t")).state(State::ManualReview);
    let all = OperationQuery::all_tenants().state(State::ManualReview);
    for (q, index) in [
        (one.clone(), "rw_operations_by_tenant_state"),
        (
            one.clone().order(Order::OldestFirst),
            "rw_operations_by_tenant_state",
        ),
        (
            one.after(Cursor::new(5, 7)),
            "rw_operations_by_tenant_state",
        ),
        (all.clone(), "rw_operations_by_state"),
        (
            all.clone()
                .order(Order::OldestFirst)
                .after(Cursor::new(5, 7)),
            "rw_operations_by_state",
        ),
    ] {
        let plan = plan_of(
            &ledger,
            list_sql(&q, "rw_operations", "rowid", '?').unwrap(),
        )
        .await;
        assert!(plan.contains(index), "{q:?}\n{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{q:?}\n{plan}");
    }
    // Several states: their ranges of the tenant's state index (0015: the index's predicate is a
    // term of the statement), merged by a sort of what they hold.
    let several =
        OperationQuery::tenant(Tenant::new("t")).states([State::Unknown, State::Rejected]);
    let plan = plan_of(
        &ledger,
        list_sql(&several, "rw_operations", "rowid", '?').unwrap(),
    )
    .await;
    assert!(plan.contains("rw_operations_by_tenant_state"), "{plan}");
    // The requests in flight, which the state indexes leave out, through the send-lease index
    // (the table `list` names for them).
    let in_flight = OperationQuery::tenant(Tenant::new("t")).state(State::InFlight);
    assert!(in_flight.is_in_flight_only());
    let plan = plan_of(
        &ledger,
        list_sql(&in_flight, IN_FLIGHT_ROWS, "rowid", '?').unwrap(),
    )
    .await;
    assert!(plan.contains("rw_operations_in_flight_lease"), "{plan}");
    for (scope, index) in [
        (
            TenantScope::Tenant(Tenant::new("t")),
            "rw_operations_by_tenant_state",
        ),
        (TenantScope::AllTenants, "rw_operations_by_state"),
    ] {
        let sql = count_sql(
            &scope,
            "rw_operations",
            IN_FLIGHT_ROWS,
            QUARANTINED_ROWS,
            '?',
        )
        .unwrap();
        let plan = plan_of(&ledger, sql).await;
        assert!(plan.contains(index), "{scope:?}\n{plan}");
        // The requests in flight, which the state indexes leave out (migration 0015), are
        // counted from the send-lease index.
        assert!(
            plan.contains("rw_operations_in_flight_lease"),
            "{scope:?}\n{plan}"
        );
        // Partial indexes read whole, never the table.
        assert!(
            !plan.lines().any(|l| l.trim() == "SCAN rw_operations"),
            "{scope:?}\n{plan}"
        );
        // The quarantined rows are counted from their partial index, never from a tenant's
        // whole range.
        assert!(
            plan.contains("rw_operations_quarantined"),
            "{scope:?}\n{plan}"
        );
    }
    for q in [
        OperationQuery::tenant(Tenant::new("t")).quarantined_only(),
        OperationQuery::all_tenants()
            .quarantined_only()
            .order(Order::OldestFirst)
            .after(Cursor::new(5, 7)),
    ] {
        let plan = plan_of(
            &ledger,
            list_sql(&q, QUARANTINED_ROWS, "rowid", '?').unwrap(),
        )
        .await;
        assert!(plan.contains("rw_operations_quarantined"), "{q:?}\n{plan}");
    }
}

/// Callbacks are matched by remote reference or idempotency key through their indexes, never
/// by scanning a tenant's rows.
#[tokio::test]
async fn callback_lookups_read_their_indexes() {
    let ledger = SqliteLedger::in_memory().await.unwrap();
    for (sql, index) in [
        (SELECT_BY_REMOTE_REF, "rw_operations_by_remote_ref"),
        (
            SELECT_BY_IDEMPOTENCY_KEY,
            "rw_operations_by_idempotency_key",
        ),
        // Issue 27 item 7: the probes across tenants of an unmatched callback.
        (SELECT_OTHER_TENANT_BY_ID, "rw_operations_by_operation_id"),
        (
            SELECT_OTHER_TENANT_BY_REMOTE_REF,
            "rw_operations_by_remote_ref",
        ),
        (
            SELECT_TENANT_CALLBACK_QUARANTINE,
            "rw_callback_quarantine_by_tenant",
        ),
    ] {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let plan = plan_with(
            &ledger,
            explain,
            vec![
                rusqlite::types::Value::Text("tenant-a".into()),
                rusqlite::types::Value::Text("W731".into()),
            ],
        )
        .await;
        assert!(plan.contains(index), "{sql}\n{plan}");
    }
    // The dedupe probe reads the dedupe table's key.
    let plan = plan_with(
        &ledger,
        format!("EXPLAIN QUERY PLAN {SELECT_CALLBACK_EVENT}"),
        vec![
            rusqlite::types::Value::Text("stripe".into()),
            rusqlite::types::Value::Text("evt_1".into()),
        ],
    )
    .await;
    assert!(
        plan.contains("sqlite_autoindex_rw_callback_events_1"),
        "{plan}"
    );
}

/// The review queue's contradicted operations are read through their partial index, for one
/// tenant and for all, never by scanning the finished rows.
#[tokio::test]
async fn contradicted_listing_reads_its_partial_index() {
    use crate::ledger::query::list_sql;
    let ledger = SqliteLedger::in_memory().await.unwrap();
    for q in [
        OperationQuery::all_tenants().contradicted(),
        OperationQuery::all_tenants()
            .contradicted()
            .order(Order::OldestFirst),
        OperationQuery::tenant(Tenant::new("t")).contradicted(),
    ] {
        let plan = plan_of(
            &ledger,
            list_sql(&q, "rw_operations", "rowid", '?').unwrap(),
        )
        .await;
        assert!(plan.contains("rw_operations_contradicted"), "{q:?}\n{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{q:?}\n{plan}");
    }
}

#[tokio::test]
async fn the_activity_reads_the_days_state_changes_and_the_review_range_only() {
    use crate::ledger::ActivityWindow;
    use crate::ledger::activity::activity_sql;
    let ledger = SqliteLedger::in_memory().await.unwrap();
    let window = ActivityWindow::last_day_hourly(1_700_000_000_000);
    for (scope, index) in [
        (
            TenantScope::Tenant(Tenant::new("t")),
            "rw_operations_by_tenant_state",
        ),
        (TenantScope::AllTenants, "rw_operations_by_state"),
    ] {
        let sql = activity_sql(
            &scope,
            window,
            "rw_operations",
            super::super::ledger_impl::STATE_CHANGES,
            '?',
        )
        .unwrap();
        let plan = plan_of(&ledger, sql).await;
        // The day's entries through the partial index by time, never the whole log.
        assert!(
            plan.contains("rw_evidence_state_changes"),
            "{scope:?}\n{plan}"
        );
        assert!(!plan.contains("SCAN rw_evidence"), "{scope:?}\n{plan}");
        // The backlog now: the review state's range.
        assert!(plan.contains(index), "{scope:?}\n{plan}");
        assert!(!plan.contains("SCAN rw_operations"), "{scope:?}\n{plan}");
    }
}
