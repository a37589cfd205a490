//! Checks of rows that cannot be decoded: claims and sweeps quarantine them and recover the
//! healthy rows; quarantined rows are counted, listed and released once readable.

use super::fixtures::{ACTION, T0, keep, test_policy, update_of};
use super::helpers::{get, ids, kinds, log, must, put};
use super::listing::listed_row;
use super::prepared::{PREPARED_AGE_MS, PREPARED_LEASE_MS, create_at};
use crate::ledger::{Ledger, ListingLedger, OperationRecord};
use crate::operation::{Generation, OperationId, Tenant};
use crate::state::State;

/// Overwrites columns of `r`'s stored row with `set` (an SQL `SET` list valid for SQLite and
/// PostgreSQL) behind the ledger's back. `false` for a backend whose rows are typed values and
/// cannot be corrupted (`MemoryLedger`), or that this suite does not know.
pub(super) async fn corrupt<L: Ledger>(ledger: &L, r: &OperationRecord, set: &str) -> bool {
    let any: &dyn std::any::Any = ledger;
    #[cfg(feature = "sqlite")]
    if let Some(sqlite) = any.downcast_ref::<crate::ledger::SqliteLedger>() {
        let sql = format!("UPDATE rw_operations SET {set} WHERE tenant = ?1 AND operation_id = ?2");
        must(
            sqlite
                .exec_for_conformance(sql, &r.tenant, &r.operation_id)
                .await,
            "corrupt a row",
        );
        return true;
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = any.downcast_ref::<crate::ledger::PostgresLedger>() {
        let sql = format!(
            "UPDATE \"{}\".rw_operations SET {set} WHERE tenant = $1 AND operation_id = $2",
            pg.schema()
        );
        if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(r.tenant.as_str())
            .bind(r.operation_id.as_str())
            .execute(pg.pool())
            .await
        {
            panic!("corrupt a row: {e}");
        }
        return true;
    }
    let _ = (any, r, set);
    false
}

/// Rows that cannot be decoded (garbage in a JSON column, an unknown state name) do not stop
/// recovery: `claim_due`, `sweep_expired` and `claim_prepared` quarantine them (listed by
/// `quarantined` with the decode error, never claimed again) and claim or sweep the healthy
/// rows of the same batch. A budget written by a newer version, with a field this one does not
/// know, is read (the extra field ignored), not quarantined.
pub async fn corrupt_rows_are_quarantined_and_the_healthy_rows_recovered<L: Ledger>(ledger: L) {
    let due = |id: &'static str| put(&ledger, id, State::Unknown, Some(T0), None);
    let (due_a, due_b) = (due("due-a").await, due("due-b").await);
    let bad_json = due("due-bad-json").await;
    let bad_state = due("due-bad-state").await;
    let newer = due("due-newer-policy").await;
    let flying = |id: &'static str| put(&ledger, id, State::InFlight, None, Some(T0 + 1));
    let (fly_a, fly_bad) = (flying("fly-a").await, flying("fly-bad").await);
    let prep_a = create_at(&ledger, "prep-a", T0).await;
    let prep_bad = create_at(&ledger, "prep-bad", T0).await;

    let mut newer_policy = match serde_json::to_value(test_policy()) {
        Ok(v) => v,
        Err(e) => panic!("serialize the policy: {e}"),
    };
    newer_policy["added_by_a_newer_version"] = serde_json::json!(true);
    let newer_policy = newer_policy.to_string().replace('\'', "''");
    let corrupted = [
        (&bad_json, "request_headers = 'not json'".to_owned()),
        (&bad_state, "last_result = 'NOT_A_STATE'".to_owned()),
        (&newer, format!("budget_policy = '{newer_policy}'")),
        (&fly_bad, "response_headers = '{'".to_owned()),
        (&prep_bad, "request_headers = '[[1]]'".to_owned()),
    ];
    for (r, set) in &corrupted {
        if !corrupt(&ledger, r, set).await {
            // MemoryLedger keeps typed rows: nothing can be undecodable, so there is nothing to
            // quarantine. Check only that its list is empty and that claims are unaffected.
            assert!(must(ledger.quarantined(10).await, "quarantined").is_empty());
            return;
        }
    }
    // `fly-bad`'s `response_headers` are only read with a status: give it one.
    assert!(corrupt(&ledger, &fly_bad, "response_status = 200").await);

    let now = T0 + 10;
    let claimed = must(ledger.claim_due(now, 1_000, 10).await, "claim_due");
    assert_eq!(ids(&claimed), ["due-a", "due-b", "due-newer-policy"]);
    assert_eq!(claimed[2].policy, test_policy());
    let swept = must(ledger.sweep_expired(now).await, "sweep_expired");
    assert_eq!(ids(&swept), ["fly-a"]);
    let prepared = must(
        ledger
            .claim_prepared(now + 60_000, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&prepared), ["prep-a"]);

    let quarantined = must(ledger.quarantined(10).await, "quarantined");
    let mut listed: Vec<(&str, &str)> = quarantined
        .iter()
        .map(|q| (q.operation_id.as_str(), q.error.as_str()))
        .collect();
    listed.sort();
    let expected = [
        ("due-bad-json", "request_headers"),
        ("due-bad-state", "last_result"),
        ("fly-bad", "response_headers"),
        ("prep-bad", "request_headers"),
    ];
    assert_eq!(listed.len(), expected.len(), "{quarantined:?}");
    for ((id, error), (want_id, column)) in listed.iter().zip(expected) {
        assert_eq!(*id, want_id);
        assert!(
            error.contains(column),
            "{id}: {error:?} should name {column}"
        );
    }
    for q in &quarantined {
        assert_eq!(q.tenant, Tenant::new("tenant-a"));
        let expected_at = if q.operation_id.as_str() == "prep-bad" {
            now + 60_000
        } else {
            now
        };
        assert_eq!(q.at_ms, expected_at, "{}", q.operation_id);
    }
    assert_eq!(must(ledger.quarantined(1).await, "quarantined").len(), 1);

    // Later passes never pick the quarantined rows again; the healthy ones go on as usual.
    let later = now + 1_000_000;
    let claimed = must(ledger.claim_due(later, 1_000, 10).await, "claim_due");
    assert_eq!(
        ids(&claimed),
        ["due-a", "due-b", "due-newer-policy", "fly-a"]
    );
    assert!(must(ledger.sweep_expired(later).await, "sweep_expired").is_empty());
    let prepared = must(
        ledger
            .claim_prepared(later, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&prepared), ["prep-a"]);
    assert_eq!(must(ledger.quarantined(10).await, "quarantined").len(), 4);
    let _ = (due_a, due_b, fly_a, prep_a);
}

/// Issue 27 item 3: a quarantined row does not vanish. A newer version wrote a value this one
/// does not know (a rolling deploy); the claims quarantine the rows. They are counted apart
/// from the states, listed by their raw columns with the decode error, and released once a
/// version that can read them runs: while the row cannot be decoded a release changes nothing;
/// once the column is readable (the newer version's value, repaired here by hand) the release
/// clears the quarantine, appends an audited entry that advances the version, drops the lease
/// the quarantining claim left, and recovery claims the row like any other. Two releases at
/// once release it once.
pub async fn quarantined_rows_are_counted_listed_and_released_once_readable<L: ListingLedger>(
    ledger: L,
) {
    use crate::ledger::{OperationQuery as Q, Order, QUARANTINE_RELEASED, Released, TenantScope};
    let tenant = Tenant::new("tenant-a");
    let scope = TenantScope::Tenant(tenant.clone());
    let healthy = put(&ledger, "due-ok", State::Unknown, Some(T0), None).await;
    let newer = put(&ledger, "due-newer", State::Unknown, Some(T0), None).await;
    let prep = create_at(&ledger, "prep-newer", T0).await;
    let elsewhere = listed_row(
        &ledger,
        "tenant-b",
        "b-newer",
        T0,
        State::Unknown,
        "c",
        None,
        Some(T0),
    )
    .await;
    // A state name this version does not know, as a newer version may write it.
    let from_newer = "last_result = 'PAUSED_BY_VENDOR'";
    if !corrupt(&ledger, &newer, from_newer).await {
        // MemoryLedger keeps typed rows: nothing is ever quarantined, nothing to release.
        let counts = must(
            ledger.count_by_state(&TenantScope::AllTenants).await,
            "count_by_state",
        );
        assert_eq!(counts.quarantined(), 0);
        let page = must(
            ledger.list(&Q::all_tenants().quarantined_only()).await,
            "list",
        );
        assert!(page.rows.is_empty() && page.skipped.is_empty(), "{page:?}");
        let released = release(&ledger, &newer, newer.version, None, T0).await;
        assert_eq!(released, Released::NotQuarantined);
        let ghost = OperationRecord {
            operation_id: OperationId::new("no-such-op"),
            ..newer.clone()
        };
        let released = release(&ledger, &ghost, 0, None, T0).await;
        assert_eq!(released, Released::NotFound);
        assert_eq!(get(&ledger, &newer).await, newer);
        return;
    }
    assert!(corrupt(&ledger, &prep, from_newer).await);
    assert!(corrupt(&ledger, &elsewhere, from_newer).await);

    // The claims quarantine them and recover the healthy row.
    let now = T0 + 10;
    let claimed = must(ledger.claim_due(now, 1_000, 10).await, "claim_due");
    assert_eq!(ids(&claimed), ["due-ok"]);
    let at_prep = now + 60_000;
    let prepared = must(
        ledger
            .claim_prepared(at_prep, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert!(prepared.is_empty(), "{prepared:?}");

    // Counted, apart from the states, in their tenant's scope.
    let counts = must(ledger.count_by_state(&scope).await, "count_by_state");
    assert_eq!(counts.quarantined(), 2, "{counts:?}");
    assert_eq!(counts.get(State::Unknown), Some(1), "in no state's count");
    assert_eq!(counts.get(State::Prepared), Some(0), "in no state's count");
    let all = must(
        ledger.count_by_state(&TenantScope::AllTenants).await,
        "count_by_state",
    );
    assert_eq!(all.quarantined(), 3);
    let b = must(
        ledger
            .count_by_state(&TenantScope::Tenant(Tenant::new("tenant-b")))
            .await,
        "count_by_state",
    );
    assert_eq!(b.quarantined(), 1);

    // Listed by their raw columns, with the error naming the column.
    let aside = || {
        Q::tenant(tenant.clone())
            .quarantined_only()
            .order(Order::OldestFirst)
    };
    let page = must(ledger.list(&aside()).await, "list");
    assert!(page.rows.is_empty(), "{:?}", page.rows);
    let listed: Vec<&str> = page
        .skipped
        .iter()
        .map(|s| s.operation_id.as_str())
        .collect();
    assert_eq!(listed, ["due-newer", "prep-newer"]);
    let s = &page.skipped[0];
    assert_eq!(s.tenant, tenant);
    assert_eq!(s.state, "UNKNOWN");
    assert!(s.error.contains("last_result"), "{s:?}");
    assert!(s.error.contains("PAUSED_BY_VENDOR"), "{s:?}");
    assert_eq!(s.quarantined_ms, Some(now));
    assert!(!s.readable);
    assert_eq!(s.created_ms, newer.created_ms);
    assert_eq!(s.updated_ms, now, "the quarantining claim changed it");
    let version = newer.version + 1;
    assert_eq!(s.columns.version, Some(version), "the claim advanced it");
    assert_eq!(s.columns.generation, Some(newer.generation.0 + 1));
    assert_eq!(s.columns.action.as_deref(), Some(ACTION));
    assert_eq!(s.columns.last_result.as_deref(), Some("PAUSED_BY_VENDOR"));
    assert_eq!(s.columns.request_body.as_ref(), Some(&newer.request.body));
    let names: Vec<String> = newer
        .request
        .headers
        .iter()
        .map(|(n, _)| n.to_owned())
        .collect();
    assert_eq!(s.columns.request_header_names.as_ref(), Some(&names));
    // Read as stored text, so nothing of it is unreadable: only its meaning is unknown.
    assert!(
        s.columns.unreadable.is_empty(),
        "{:?}",
        s.columns.unreadable
    );
    let p = &page.skipped[1];
    assert_eq!(
        (p.state.as_str(), p.quarantined_ms),
        ("PREPARED", Some(at_prep))
    );
    // Hidden from the ordinary listing; reported apart when included; never another tenant's.
    let plain = must(ledger.list(&Q::tenant(tenant.clone())).await, "list");
    assert_eq!(ids(&plain.rows), ["due-ok"]);
    assert!(plain.skipped.is_empty(), "{:?}", plain.skipped);
    let with = must(
        ledger
            .list(&Q::tenant(tenant.clone()).include_quarantined(true))
            .await,
        "list",
    );
    assert_eq!(ids(&with.rows), ["due-ok"]);
    assert_eq!(with.skipped.len(), 2);
    let other = must(
        ledger
            .list(&Q::tenant(Tenant::new("tenant-b")).quarantined_only())
            .await,
        "list",
    );
    assert_eq!(other.skipped.len(), 1);
    assert_eq!(other.skipped[0].operation_id.as_str(), "b-newer");

    // Not released while this version cannot decode it: nothing changes.
    let entries = log(&ledger, &newer).await.len();
    let refused = release(&ledger, &newer, version, Some("too early"), now + 100).await;
    match refused {
        Released::Undecodable { column, detail } => {
            assert_eq!(column.as_deref(), Some("last_result"));
            assert!(detail.contains("PAUSED_BY_VENDOR"), "{detail}");
        }
        other => panic!("expected Undecodable, got {other:?}"),
    }
    assert_eq!(
        release(&ledger, &newer, version - 1, None, now + 100).await,
        Released::Stale { current: version }
    );
    assert_eq!(
        release(&ledger, &healthy, healthy.version + 2, None, now + 100).await,
        Released::NotQuarantined
    );
    let in_b = OperationRecord {
        tenant: Tenant::new("tenant-b"),
        ..newer.clone()
    };
    assert_eq!(
        release(&ledger, &in_b, version, None, now + 100).await,
        Released::NotFound,
        "another tenant's id"
    );
    assert_eq!(log(&ledger, &newer).await.len(), entries);
    assert_eq!(must(ledger.list(&aside()).await, "list").skipped.len(), 2);
    let later = now + 1_000_000;
    let claimed = must(ledger.claim_due(later, 1_000, 10).await, "claim_due");
    assert_eq!(ids(&claimed), ["due-ok"], "still skipped by recovery");

    // The version that reads it runs (the column holds what this version knows): readable now,
    // still quarantined until released.
    assert!(corrupt(&ledger, &newer, "last_result = NULL").await);
    assert!(corrupt(&ledger, &prep, "last_result = NULL").await);
    let page = must(ledger.list(&aside()).await, "list");
    assert!(
        page.skipped.iter().all(|s| s.readable),
        "{:?}",
        page.skipped
    );
    assert!(
        page.skipped[0].error.contains("last_result"),
        "the reason kept"
    );
    let claimed = must(ledger.claim_due(later + 1, 1_000, 10).await, "claim_due");
    assert!(
        claimed.is_empty(),
        "still skipped until released: {claimed:?}"
    );

    let note = "released from quarantine by alice; version 4 -> 5; reason: 0.4 everywhere";
    let released = release(&ledger, &newer, version, Some(note), later + 2).await;
    let Released::Row(row) = released else {
        panic!("expected the released row, got {released:?}")
    };
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.last_result, None);
    assert_eq!(row.version, version + 1, "the release advances the version");
    assert_eq!(
        row.generation,
        Generation(newer.generation.0 + 1),
        "no new fence"
    );
    assert_eq!(
        row.lease_until_ms, None,
        "nobody held the quarantining claim's lease"
    );
    assert_eq!(row.next_check_ms, newer.next_check_ms);
    assert_eq!(get(&ledger, &newer).await, row);
    let entries = log(&ledger, &newer).await;
    let Some(last) = entries.last() else {
        panic!("no evidence")
    };
    assert_eq!(&*last.entry.kind, QUARANTINE_RELEASED);
    assert_eq!(last.entry.note.as_deref(), Some(note));
    assert_eq!(last.entry.at_ms, later + 2);
    assert_eq!(last.entry.generation, row.generation);
    assert_eq!((last.entry.from_state, last.entry.to_state), (None, None));
    let counts = must(ledger.count_by_state(&scope).await, "count_by_state");
    assert_eq!(counts.quarantined(), 1);
    assert_eq!(counts.get(State::Unknown), Some(2));
    assert_eq!(
        release(&ledger, &newer, row.version, None, later + 3).await,
        Released::NotQuarantined
    );
    // A decision made on the row as it was before the release is stale.
    let before = OperationRecord {
        version,
        ..row.clone()
    };
    let stale = update_of(
        &before,
        keep(&before, State::ManualReview, later + 3),
        "late",
    );
    assert_eq!(must(ledger.apply(stale).await, "apply"), None);

    // Recovered normally.
    let claimed = must(
        ledger.claim_due(later + 10_000, 1_000, 10).await,
        "claim_due",
    );
    let Some(again) = claimed
        .iter()
        .find(|r| r.operation_id == newer.operation_id)
    else {
        panic!("the released row is claimed: {claimed:?}")
    };
    assert_eq!(again.generation, Generation(row.generation.0 + 1));
    assert_eq!(
        kinds(&log(&ledger, &newer).await).last(),
        Some(&"recovery_claimed")
    );

    // Two releases of one row at once: one release.
    let prep_version = must(ledger.list(&aside()).await, "list").skipped[0]
        .columns
        .version
        .unwrap_or_default();
    let (a, b) = tokio::join!(
        release(&ledger, &prep, prep_version, Some("first"), at_prep + 1),
        release(&ledger, &prep, prep_version, Some("second"), at_prep + 1)
    );
    let won = [&a, &b]
        .iter()
        .filter(|r| matches!(r, Released::Row(_)))
        .count();
    assert_eq!(won, 1, "{a:?} {b:?}");
    assert!(
        [&a, &b].iter().all(|r| matches!(
            r,
            Released::Row(_) | Released::NotQuarantined | Released::Stale { .. }
        )),
        "{a:?} {b:?}"
    );
    let released = kinds(&log(&ledger, &prep).await)
        .into_iter()
        .filter(|k| *k == QUARANTINE_RELEASED)
        .count();
    assert_eq!(released, 1);
    // Its quarantining claim's lease is gone: claimed at once, not after it runs out.
    let prepared = must(
        ledger
            .claim_prepared(at_prep + 2, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&prepared), ["prep-newer"]);
    let all = must(
        ledger.count_by_state(&TenantScope::AllTenants).await,
        "count_by_state",
    );
    assert_eq!(all.quarantined(), 1, "tenant-b's row stays quarantined");
}

/// [`Ledger::release_quarantined`] of `r` (its tenant and id).
async fn release<L: Ledger>(
    ledger: &L,
    r: &OperationRecord,
    version: u64,
    note: Option<&str>,
    at_ms: i64,
) -> crate::ledger::Released {
    must(
        ledger
            .release_quarantined(
                &r.tenant,
                &r.operation_id,
                version,
                note.map(str::to_owned),
                at_ms,
            )
            .await,
        "release_quarantined",
    )
}
