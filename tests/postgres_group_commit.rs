//! Group commit in the PostgreSQL ledger (`rw_claim_batch` / `rw_record_batch`, migration
//! 0012): requests that arrive while others are being written share one statement and one
//! commit, and each keeps its own outcome.
//!
//! Grouping is observed the way PostgreSQL records it: rows written by one transaction carry
//! the same `xmin`. The conformance suite (`concurrent_claims_and_results_keep_their_own_
//! semantics`, run on every backend) checks the outcomes under the same load; these tests check
//! that the load was in fact grouped, that a claim's row and its entries still commit together,
//! and, through the layer with the fake vendor, that the vendor saw one write per request.
#![cfg(feature = "postgres")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::*;
use recoverable_write::ledger::{ClockSource, FullLedger, PostgresLedger, PostgresLedgerOptions};
use recoverable_write::operation::Operation;
use recoverable_write::state::State;
use recoverable_write::testing::FakeVendor;
use sqlx::AssertSqlSafe;

#[path = "common/postgres.rs"]
mod pg;
use pg::{Schema, pg_url};

async fn ledger(schema: &Schema) -> PostgresLedger {
    let options = PostgresLedgerOptions::new()
        .schema(schema.name.clone())
        .expect("valid test schema name")
        .max_connections(4)
        .clock(ClockSource::Database);
    PostgresLedger::connect_with(&schema.url, options)
        .await
        .expect("connect the PostgreSQL ledger")
}

/// The drill's stack (layer, send-once guard, HTTP client, fake vendor) over `pg`.
async fn drill_over(pg: &PostgresLedger) -> Drill {
    Drill::with_ledger(
        FakeVendor::start().await,
        Arc::new(pg.clone()),
        DrillOptions::default(),
    )
}

/// Writes `op` (a ticket) through the layer, expects `201`, and waits until its result is
/// recorded (after the caller is answered), so both kinds of write have used a connection.
async fn write_one(drill: &Drill, op: &Operation) {
    let res = send(&mut drill.writer(), drill.ticket_request(op, "dev"))
        .await
        .expect("the write is answered");
    assert_eq!(res.status(), 201);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while drill.record(op.id()).await.state != State::Succeeded {
        assert!(
            std::time::Instant::now() < deadline,
            "the result was not recorded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// `(operation_id, kind) -> xmin` of every evidence entry, and `operation_id -> xmin` of every
/// operation row.
async fn transactions(
    schema: &Schema,
) -> (BTreeMap<(String, String), String>, BTreeMap<String, String>) {
    let mut conn = schema.raw().await;
    let entries: Vec<(String, String, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT operation_id, kind, xmin::text FROM \"{}\".rw_evidence",
        schema.name
    )))
    .fetch_all(&mut conn)
    .await
    .expect("evidence xmins");
    let rows: Vec<(String, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT operation_id, xmin::text FROM \"{}\".rw_operations",
        schema.name
    )))
    .fetch_all(&mut conn)
    .await
    .expect("row xmins");
    (
        entries.into_iter().map(|(o, k, x)| ((o, k), x)).collect(),
        rows.into_iter().collect(),
    )
}

/// 64 ticket creates at once through the layer (the drill's stack: layer, send-once guard,
/// HTTP client) on a pool of 4: the vendor created 64 tickets from 64 POSTs, every operation is
/// `SUCCEEDED`, the claims and the results were written in fewer transactions than requests,
/// and each claim's row and its two entries committed in one transaction, each result's entry
/// with the row's last change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_writes_at_once_share_commits_and_each_is_sent_once() {
    const N: usize = 64;
    let Some(url) = pg_url().await else {
        return;
    };
    let schema = Schema::new(&url);
    let ledger: Arc<dyn FullLedger> = Arc::new(ledger(&schema).await);
    let drill = Drill::with_ledger(FakeVendor::start().await, ledger, DrillOptions::default());
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..N {
        let op = new_op(&format!("group-{i}"));
        let (mut svc, req, barrier) = (
            drill.writer(),
            drill.ticket_request(&op, "dev"),
            barrier.clone(),
        );
        tasks.spawn(async move {
            barrier.wait().await;
            let res = send(&mut svc, req).await.expect("the write is answered");
            assert_eq!(res.status(), 201);
            op
        });
    }
    let mut ops = Vec::new();
    while let Some(done) = tasks.join_next().await {
        ops.push(done.expect("task"));
    }
    assert_eq!(drill.vendor.tickets_created(), N as u64);
    assert_eq!(drill.vendor.posts_received(), N as u64);
    let ids: BTreeSet<String> = ops.iter().map(|op| op.id().to_string()).collect();
    assert_eq!(ids.len(), N);
    // Results are recorded after the caller is answered: wait until all have landed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut done = 0;
        for op in &ops {
            if drill.record(op.id()).await.state == State::Succeeded {
                done += 1;
            }
        }
        if done == N {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{done} of {N} results recorded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let (entries, rows) = transactions(&schema).await;
    assert_eq!(rows.len(), N);
    let xmin = |id: &str, kind: &str| {
        entries
            .get(&(id.to_owned(), kind.to_owned()))
            .unwrap_or_else(|| panic!("{id} has no {kind} entry"))
            .clone()
    };
    let claims: BTreeSet<String> = ids.iter().map(|id| xmin(id, "created")).collect();
    let results: BTreeSet<String> = ids.iter().map(|id| xmin(id, "attempt_result")).collect();
    for id in &ids {
        assert_eq!(
            xmin(id, "created"),
            xmin(id, "attempt_registered"),
            "{id}: the claim's two entries commit together"
        );
        assert_eq!(
            rows[id],
            xmin(id, "attempt_result"),
            "{id}: the row's last change and its entry commit together"
        );
    }
    assert!(
        claims.len() < N,
        "64 concurrent claims were written in {} transactions: none was grouped",
        claims.len()
    );
    assert!(
        results.len() < N,
        "64 concurrent results were written in {} transactions: none was grouped",
        results.len()
    );
}

/// The write path keeps a few connections between its statements (no ping round trip per
/// statement); closing the pool, through the ledger or directly, must not wait for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_pool_does_not_wait_for_the_kept_connections() {
    let Some(url) = pg_url().await else {
        return;
    };
    for direct in [false, true] {
        let schema = Schema::new(&url);
        let pg = ledger(&schema).await;
        let drill = drill_over(&pg).await;
        let op = new_op(if direct {
            "close-direct"
        } else {
            "close-ledger"
        });
        write_one(&drill, &op).await;
        assert_eq!(drill.vendor.tickets_created(), 1);
        let closing = async {
            if direct {
                pg.pool().close().await
            } else {
                pg.close().await
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), closing)
            .await
            .expect("the pool closes although the write path kept connections");
        assert!(pg.is_closed());
    }
}

/// The connections the write path keeps plan its statements once (`force_generic_plan` for
/// their session, and `synchronous_commit = off` for the results'); the rest of the pool keeps
/// making a custom plan per execution and waits for every commit's flush. Once the writes stop,
/// every kept connection goes back with its settings reset: each connection the pool lends
/// afterwards is in the pool's mode, and the write path ran its claim and its result as plain
/// statements (not the calls of `rw_claim_new` and `rw_apply`), planned generically on the
/// connections it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_connections_plan_once_and_go_back_in_the_pools_mode() {
    let Some(url) = pg_url().await else {
        return;
    };
    let schema = Schema::new(&url);
    let pg = ledger(&schema).await;
    let drill = drill_over(&pg).await;
    for i in 0..8 {
        write_one(&drill, &new_op(&format!("generic-{i}"))).await;
    }
    assert_eq!(drill.vendor.tickets_created(), 8);
    assert_eq!(drill.vendor.posts_received(), 8);
    // Kept connections go back after 50 ms unused; leave them ample time.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let mut held = Vec::new();
    let (mut generic_claims, mut generic_results, mut calls) = (0_i64, 0_i64, 0_i64);
    for _ in 0..4 {
        let mut conn = pg.pool().acquire().await.expect("a pooled connection");
        let mode: String = sqlx::query_scalar("SHOW plan_cache_mode")
            .fetch_one(&mut *conn)
            .await
            .expect("show");
        assert_eq!(mode, "force_custom_plan", "a connection came back generic");
        let commit: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&mut *conn)
            .await
            .expect("show");
        assert_eq!(
            commit, "on",
            "a connection came back committing asynchronously"
        );
        let (claims, results, functions): (Option<i64>, Option<i64>, Option<i64>) =
            sqlx::query_as(
                "SELECT sum(generic_plans) FILTER (WHERE statement LIKE 'WITH clock%ins AS%')::bigint, \
                        sum(generic_plans) FILTER (WHERE statement LIKE 'WITH clock%upd AS%')::bigint, \
                        sum(generic_plans + custom_plans) FILTER \
                            (WHERE statement LIKE '%rw_claim_new(%' OR statement LIKE '%rw_apply(%')::bigint \
                 FROM pg_prepared_statements WHERE statement NOT LIKE '%pg_prepared_statements%'",
            )
            .fetch_one(&mut *conn)
            .await
            .expect("prepared statements");
        generic_claims += claims.unwrap_or(0);
        generic_results += results.unwrap_or(0);
        calls += functions.unwrap_or(0);
        held.push(conn);
    }
    assert!(
        generic_claims >= 8,
        "the claims did not run as a generically planned statement ({generic_claims} of 8)"
    );
    assert!(
        generic_results >= 8,
        "the results did not run as a generically planned statement ({generic_results} of 8)"
    );
    assert_eq!(
        calls, 0,
        "a write went through a function call although the pool had connections to spare"
    );
    drop(held);
    pg.close().await;
}

/// A ledger dropped after the runtime it ran on has shut down (kept in a static, or dropped
/// late by a harness) does not panic, although its write path still keeps connections: with
/// no runtime to close them on, they are detached from the pool and their sockets closed.
#[test]
fn a_ledger_dropped_after_its_runtime_shut_down_does_not_panic() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let kept = rt.block_on(async {
        let url = pg_url().await?;
        let schema = Schema::new(&url);
        let pg = ledger(&schema).await;
        let drill = drill_over(&pg).await;
        write_one(&drill, &new_op("dropped-late")).await;
        // One more write with nothing after it: its claim's and its result's connections were
        // kept microseconds ago (the result is awaited before the answer on PostgreSQL), well
        // within the 50 ms a kept connection waits for its next statement.
        let res = send(
            &mut drill.writer(),
            drill.ticket_request(&new_op("dropped-later"), "dev"),
        )
        .await
        .expect("the write is answered");
        assert_eq!(res.status(), 201);
        assert_eq!(drill.vendor.tickets_created(), 2);
        Some((pg, schema))
    });
    let Some((pg, schema)) = kept else { return };
    rt.shutdown_background();
    drop(pg);
    drop(schema);
}
