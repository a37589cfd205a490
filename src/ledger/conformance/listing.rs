//! Checks of listing and counting: filters by state, tenant, contract, text and age; pages that
//! walk every row once; limits and cursors; counts and oldest rows per state; undecodable and
//! quarantined rows.

use super::fixtures::{RawChanges, T0, keep, new_operation, update_of};
use super::helpers::{apply_ok, create, get, ids, must};
use super::quarantine::corrupt;
use crate::ledger::{Ledger, LedgerError, ListingLedger, OperationRecord};
use crate::operation::Tenant;
use crate::state::State;

/// Creates an operation of `tenant` at `created_ms` with contract `contract`, then moves it to
/// `state` with `remote_ref` and next check `next_check_ms`, changed at `created_ms + 5`.
// One call per row reads as a table of fixtures; a struct would only add noise.
#[allow(clippy::too_many_arguments)]
pub(super) async fn listed_row<L: Ledger>(
    ledger: &L,
    tenant: &str,
    id: &str,
    created_ms: i64,
    state: State,
    contract: &str,
    remote_ref: Option<&str>,
    next_check_ms: Option<i64>,
) -> OperationRecord {
    let mut new = new_operation(tenant, id, &format!("intent-{id}"));
    new.now_ms = created_ms;
    new.contract.name = contract.into();
    let r = create(ledger, new).await;
    if state == State::Prepared && remote_ref.is_none() && next_check_ms.is_none() {
        return r;
    }
    let changes = RawChanges {
        remote_ref: remote_ref.map(str::to_owned),
        next_check_ms,
        ..keep(&r, state, created_ms + 5)
    };
    apply_ok(ledger, update_of(&r, changes, "setup")).await
}

async fn list_ids<L: ListingLedger>(ledger: &L, q: crate::ledger::OperationQuery) -> Vec<String> {
    let page = must(ledger.list(&q).await, "list");
    assert!(page.skipped.is_empty(), "{:?}", page.skipped);
    page.rows
        .iter()
        .map(|r| r.operation_id.as_str().to_owned())
        .collect()
}

/// Every listing filter (state, tenant, contract, host, text, age, next check) keeps exactly
/// the matching rows, in the asked order; another tenant's rows never appear unless the query
/// is across all tenants; `%` and `_` in a text match are plain characters.
pub async fn list_filters_by_state_tenant_contract_text_and_age<L: ListingLedger>(ledger: L) {
    use crate::ledger::{OperationQuery as Q, Order, TextMatch};
    let a = || Q::tenant(Tenant::new("tenant-a"));
    let s = |ms: i64| T0 + ms;
    listed_row(
        &ledger,
        "tenant-a",
        "op-1",
        s(0),
        State::ManualReview,
        "stripe-v1",
        Some("W731"),
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "op-2",
        s(10),
        State::Unknown,
        "stripe-v1",
        None,
        Some(s(100)),
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "op-3",
        s(20),
        State::Succeeded,
        "jira-v2",
        Some("W7310"),
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "a%b",
        s(30),
        State::ManualReview,
        "jira-v2",
        None,
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "axb",
        s(40),
        State::Prepared,
        "stripe-v1",
        None,
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-b",
        "op-b1",
        s(5),
        State::ManualReview,
        "stripe-v1",
        Some("W731"),
        None,
    )
    .await;

    assert_eq!(
        list_ids(&ledger, a()).await,
        ["axb", "a%b", "op-3", "op-2", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().order(Order::OldestFirst)).await,
        ["op-1", "op-2", "op-3", "a%b", "axb"]
    );
    assert_eq!(
        list_ids(&ledger, Q::tenant(Tenant::new("tenant-b"))).await,
        ["op-b1"]
    );
    assert!(
        list_ids(&ledger, Q::tenant(Tenant::new("tenant-c")))
            .await
            .is_empty()
    );
    assert_eq!(
        list_ids(
            &ledger,
            Q::all_tenants()
                .state(State::ManualReview)
                .order(Order::OldestFirst)
        )
        .await,
        ["op-1", "op-b1", "a%b"]
    );
    assert_eq!(
        list_ids(&ledger, a().state(State::ManualReview)).await,
        ["a%b", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().states([State::Unknown, State::Prepared])).await,
        ["axb", "op-2"]
    );
    assert_eq!(
        list_ids(&ledger, a().contract("jira-v2")).await,
        ["a%b", "op-3"]
    );
    assert_eq!(list_ids(&ledger, a().host("vendor.test")).await.len(), 5);
    assert!(list_ids(&ledger, a().host("vendor")).await.is_empty());
    assert!(list_ids(&ledger, a().host("vendor.tes")).await.is_empty());

    // Text: exact or prefix, on the operation id or the remote reference.
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Exact("W731".into()))).await,
        ["op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Prefix("W731".into()))).await,
        ["op-3", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Exact("op-2".into()))).await,
        ["op-2"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Prefix("op-".into()))).await,
        ["op-3", "op-2", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Prefix("a%".into()))).await,
        ["a%b"]
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Prefix("a_".into())))
            .await
            .is_empty()
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Prefix("%".into())))
            .await
            .is_empty()
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Exact("op".into())))
            .await
            .is_empty()
    );
    assert_eq!(
        list_ids(
            &ledger,
            Q::all_tenants().text(TextMatch::Exact("W731".into()))
        )
        .await,
        ["op-b1", "op-1"]
    );
    // Suffix: the end of an id (generated ids share their leading timestamp) or a reference.
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Suffix("p-2".into()))).await,
        ["op-2"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Suffix("31".into()))).await,
        ["op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Suffix("b".into()))).await,
        ["axb", "a%b"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Suffix("%b".into()))).await,
        ["a%b"]
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Suffix("_b".into())))
            .await
            .is_empty()
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Suffix("xop-2".into())))
            .await
            .is_empty()
    );
    // Intent: the caller's name for the write, exactly; never the id.
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Intent("intent-op-2".into()))).await,
        ["op-2"]
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Intent("op-2".into())))
            .await
            .is_empty()
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Intent("intent-op".into())))
            .await
            .is_empty()
    );

    // Ages: strict bounds on creation, last change and next check.
    assert_eq!(
        list_ids(&ledger, a().created_before(s(20))).await,
        ["op-2", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().created_after(s(20))).await,
        ["axb", "a%b"]
    );
    assert_eq!(
        list_ids(&ledger, a().created_after(s(0)).created_before(s(30))).await,
        ["op-3", "op-2"]
    );
    // Changed at created + 5, except `axb` (left as created).
    assert_eq!(
        list_ids(&ledger, a().updated_before(s(16))).await,
        ["op-2", "op-1"]
    );
    assert_eq!(list_ids(&ledger, a().updated_after(s(35))).await, ["axb"]);
    assert_eq!(
        list_ids(&ledger, a().next_check_before(s(101))).await,
        ["op-2"]
    );
    assert!(
        list_ids(&ledger, a().next_check_before(s(100)))
            .await
            .is_empty()
    );
}

/// Keyset pages walk every row exactly once, no duplicates, no gaps, in order, even with ties
/// on the creation time and rows added between pages (oldest first: the new, later rows come at
/// the end; newest first: they are before the cursor and do not appear).
pub async fn list_pages_walk_every_row_once_while_rows_are_added<L: ListingLedger>(ledger: L) {
    use crate::ledger::{OperationQuery as Q, Order};
    let mut expected = Vec::new();
    for i in 0..23 {
        // Groups of three share a creation time: pages split ties.
        let id = format!("op-{i:03}");
        listed_row(
            &ledger,
            "tenant-a",
            &id,
            T0 + (i / 3),
            State::ManualReview,
            "c",
            None,
            None,
        )
        .await;
        expected.push(id);
    }
    listed_row(
        &ledger,
        "tenant-b",
        "other",
        T0 + 1,
        State::ManualReview,
        "c",
        None,
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "done",
        T0 + 1,
        State::Succeeded,
        "c",
        None,
        None,
    )
    .await;

    for order in [Order::OldestFirst, Order::NewestFirst] {
        let base = Q::tenant(Tenant::new("tenant-a"))
            .state(State::ManualReview)
            .order(order)
            .limit(4);
        let mut seen: Vec<String> = Vec::new();
        let mut query = base.clone();
        let mut added = 0;
        let mut pages = 0;
        // Each walk adds rows newer than every row so far.
        let late_base = if order == Order::OldestFirst {
            T0 + 100
        } else {
            T0 + 1_000
        };
        loop {
            let page = must(ledger.list(&query).await, "list");
            assert!(page.rows.len() <= 4);
            pages += 1;
            assert!(pages < 50, "the walk does not end");
            seen.extend(page.rows.iter().map(|r| r.operation_id.as_str().to_owned()));
            let Some(next) = page.next else { break };
            // Round-trips as text, as a page link would carry it.
            let next = must(
                crate::ledger::Cursor::parse(next.as_str()),
                "parse a cursor",
            );
            if added < 5 {
                let id = format!("late-{order:?}-{added}");
                listed_row(
                    &ledger,
                    "tenant-a",
                    &id,
                    late_base + added,
                    State::ManualReview,
                    "c",
                    None,
                    None,
                )
                .await;
                if order == Order::OldestFirst {
                    expected.push(id);
                }
                added += 1;
            }
            query = base.clone().after(next);
        }
        let mut want = expected.clone();
        if order == Order::NewestFirst {
            // The whole list as it stood when this walk began, newest first.
            want.reverse();
        }
        assert_eq!(seen, want, "{order:?}");
    }
}

/// The page size defaults to 50, is at least 1 and at most 1000; the last page has no cursor;
/// a garbled cursor is refused.
pub async fn list_limit_bounds_and_cursor_errors<L: ListingLedger>(ledger: L) {
    use crate::ledger::{Cursor, DEFAULT_LIMIT, MAX_LIMIT, OperationQuery as Q};
    for i in 0..53 {
        listed_row(
            &ledger,
            "tenant-a",
            &format!("op-{i:03}"),
            T0 + i,
            State::Unknown,
            "c",
            None,
            None,
        )
        .await;
    }
    let q = Q::tenant(Tenant::new("tenant-a"));
    assert_eq!(q.page_size(), DEFAULT_LIMIT);
    assert_eq!(q.clone().limit(0).page_size(), 1);
    assert_eq!(q.clone().limit(1_000_000).page_size(), MAX_LIMIT);
    let first = must(ledger.list(&q).await, "list");
    assert_eq!(first.rows.len(), 50);
    let Some(next) = first.next else {
        panic!("a second page is due")
    };
    let second = must(ledger.list(&q.clone().after(next)).await, "list");
    assert_eq!(second.rows.len(), 3);
    assert_eq!(second.next, None);
    let all = must(ledger.list(&q.clone().limit(5000)).await, "list");
    assert_eq!(all.rows.len(), 53);
    assert_eq!(all.next, None);
    let one = must(ledger.list(&q.clone().limit(0)).await, "list");
    assert_eq!(one.rows.len(), 1);
    assert!(one.next.is_some());
    for bad in ["", "12", "a.b", "1.2.3", "1;DROP"] {
        assert!(
            matches!(Cursor::parse(bad), Err(LedgerError::Config(_))),
            "{bad:?}"
        );
    }
    let nul = q.clone().contract("a\0b");
    assert!(matches!(
        ledger.list(&nul).await,
        Err(LedgerError::Config(_))
    ));
}

/// Counts per open state and the oldest row per watched state, per tenant or across all;
/// terminal states are not counted.
pub async fn count_by_state_and_oldest_per_state<L: ListingLedger>(ledger: L) {
    use crate::ledger::{OPEN_STATES, TenantScope, WATCHED_STATES};
    let rows: [(&str, &str, i64, State); 9] = [
        ("tenant-a", "r1", 30, State::ManualReview),
        ("tenant-a", "r2", 10, State::ManualReview),
        ("tenant-a", "u1", 20, State::Unknown),
        ("tenant-a", "p1", 40, State::Prepared),
        ("tenant-a", "s1", 0, State::Succeeded),
        ("tenant-a", "s2", 1, State::Rejected),
        ("tenant-b", "rb", 5, State::ManualReview),
        ("tenant-b", "ub", 50, State::Unknown),
        ("tenant-b", "fb", 60, State::InFlight),
    ];
    for (tenant, id, ms, state) in rows {
        listed_row(&ledger, tenant, id, T0 + ms, state, "c", None, None).await;
    }
    let a = TenantScope::Tenant(Tenant::new("tenant-a"));
    let counts = must(ledger.count_by_state(&a).await, "count_by_state");
    let got: Vec<(State, u64)> = counts.iter().collect();
    assert_eq!(got.len(), OPEN_STATES.len());
    assert_eq!(counts.get(State::ManualReview), Some(2));
    assert_eq!(counts.get(State::Unknown), Some(1));
    assert_eq!(counts.get(State::Prepared), Some(1));
    assert_eq!(counts.get(State::InFlight), Some(0));
    assert_eq!(counts.get(State::Succeeded), None);
    let all = must(
        ledger.count_by_state(&TenantScope::AllTenants).await,
        "count_by_state",
    );
    assert_eq!(all.get(State::ManualReview), Some(3));
    assert_eq!(all.get(State::Unknown), Some(2));
    assert_eq!(all.get(State::InFlight), Some(1));
    assert_eq!(all.get(State::Processing), Some(0));
    let none = must(
        ledger
            .count_by_state(&TenantScope::Tenant(Tenant::new("tenant-c")))
            .await,
        "count_by_state",
    );
    assert!(none.iter().all(|(_, n)| n == 0));

    // Every state lists, whichever index holds it: the SQL backends' state indexes leave out
    // IN_FLIGHT and SUCCEEDED (migration 0015), read through the send-lease index or the table.
    use crate::ledger::OperationQuery;
    let of = |t: &str| OperationQuery::tenant(Tenant::new(t));
    assert_eq!(
        list_ids(&ledger, of("tenant-a").state(State::Succeeded)).await,
        ["s1"]
    );
    assert_eq!(
        list_ids(&ledger, of("tenant-a").state(State::InFlight)).await,
        [""; 0]
    );
    assert_eq!(
        list_ids(&ledger, of("tenant-b").state(State::InFlight)).await,
        ["fb"]
    );
    assert_eq!(
        list_ids(
            &ledger,
            OperationQuery::all_tenants().state(State::InFlight)
        )
        .await,
        ["fb"]
    );
    assert_eq!(
        list_ids(
            &ledger,
            of("tenant-a").states([State::Unknown, State::Rejected])
        )
        .await,
        ["u1", "s2"]
    );
    assert_eq!(
        list_ids(
            &ledger,
            of("tenant-a").states([State::Succeeded, State::Prepared])
        )
        .await,
        ["p1", "s1"]
    );

    let oldest = must(ledger.oldest(&a, &WATCHED_STATES).await, "oldest");
    let review = oldest
        .get(State::ManualReview)
        .map(|o| (o.operation_id.as_str(), o.created_ms, o.updated_ms));
    assert_eq!(review, Some(("r2", T0 + 10, T0 + 15)));
    let unknown = oldest.get(State::Unknown).map(|o| o.operation_id.as_str());
    assert_eq!(unknown, Some("u1"));
    assert_eq!(oldest.get(State::Processing), None);
    assert_eq!(
        oldest.get(State::Prepared).map(|o| o.created_ms),
        Some(T0 + 40)
    );
    assert_eq!(oldest.iter().count(), WATCHED_STATES.len());
    let all = must(
        ledger
            .oldest(&TenantScope::AllTenants, &WATCHED_STATES)
            .await,
        "oldest",
    );
    let review = all
        .get(State::ManualReview)
        .map(|o| (o.tenant.as_str(), o.operation_id.as_str()));
    assert_eq!(review, Some(("tenant-b", "rb")));
    assert_eq!(
        all.get(State::Unknown).map(|o| o.operation_id.as_str()),
        Some("u1")
    );
}

/// A listing leaves quarantined rows out unless asked; a row that cannot be decoded is skipped
/// and reported, and the rest of the page comes back.
pub async fn list_skips_undecodable_rows_and_hides_quarantined_ones<L: ListingLedger>(ledger: L) {
    use crate::ledger::{OperationQuery as Q, Order, TenantScope};
    let q = || Q::tenant(Tenant::new("tenant-a")).order(Order::OldestFirst);
    let good = listed_row(
        &ledger,
        "tenant-a",
        "good",
        T0,
        State::ManualReview,
        "c",
        None,
        None,
    )
    .await;
    let bad = listed_row(
        &ledger,
        "tenant-a",
        "bad",
        T0 + 1,
        State::ManualReview,
        "c",
        None,
        None,
    )
    .await;
    let due = listed_row(
        &ledger,
        "tenant-a",
        "due-bad",
        T0 + 2,
        State::Unknown,
        "c",
        None,
        Some(T0),
    )
    .await;
    if !corrupt(&ledger, &bad, "request_headers = 'not json'").await {
        // MemoryLedger rows are typed values: nothing to skip.
        assert_eq!(list_ids(&ledger, q()).await, ["good", "bad", "due-bad"]);
        return;
    }
    assert!(corrupt(&ledger, &due, "request_headers = 'not json'").await);
    // The claim quarantines `due-bad`; `bad` is not due, so it stays unquarantined.
    assert!(must(ledger.claim_due(T0 + 10, 1_000, 10).await, "claim_due").is_empty());

    let page = must(ledger.list(&q()).await, "list");
    assert_eq!(ids(&page.rows), ["good"]);
    assert_eq!(page.rows[0], get(&ledger, &good).await);
    assert_eq!(page.skipped.len(), 1, "{:?}", page.skipped);
    assert_eq!(page.skipped[0].operation_id.as_str(), "bad");
    assert!(
        page.skipped[0].error.contains("request_headers"),
        "{:?}",
        page.skipped
    );

    let with = must(ledger.list(&q().include_quarantined(true)).await, "list");
    let mut skipped: Vec<&str> = with
        .skipped
        .iter()
        .map(|s| s.operation_id.as_str())
        .collect();
    skipped.sort_unstable();
    assert_eq!(skipped, ["bad", "due-bad"]);
    // A skipped row takes its place in a page; the cursor moves past it.
    let first = must(ledger.list(&q().limit(1)).await, "list");
    assert_eq!(ids(&first.rows), ["good"]);
    let Some(next) = first.next else {
        panic!("a second page is due")
    };
    let second = must(ledger.list(&q().limit(1).after(next)).await, "list");
    assert!(second.rows.is_empty(), "{:?}", second.rows);
    assert_eq!(second.skipped.len(), 1);
    assert_eq!(second.next, None);
    let counts = must(
        ledger.count_by_state(&TenantScope::AllTenants).await,
        "count_by_state",
    );
    assert_eq!(counts.get(State::ManualReview), Some(2));
    assert_eq!(
        counts.get(State::Unknown),
        Some(0),
        "a quarantined row is in no state's count"
    );
    assert_eq!(counts.quarantined(), 1, "it is counted apart");
}
