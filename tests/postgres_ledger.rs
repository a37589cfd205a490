//! The PostgreSQL ledger against the real server on 127.0.0.1:5432 (or `RW_POSTGRES_URL`): the
//! conformance suite every backend passes, plus what only PostgreSQL has: concurrent
//! migrations, validated schema names, the database clock, the outbox, corrupt rows.
//!
//! Each test works in a schema of its own (`rw_test_<uuid>`, dropped at the end), so the tests
//! run in parallel. Without a reachable server the tests print why and pass, except in CI
//! (`CI=true`), where a missing server is a failure.
#![cfg(feature = "postgres")]

use std::sync::Arc;
use std::time::Duration;

use recoverable_write::ledger::CallbackLedger;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::backend::NewEvidence;
use recoverable_write::ledger::conformance::{
    RawChanges, T0, evidence_entry, keep, new_operation, update_of, update_with,
};
use recoverable_write::ledger::{
    CallbackApplied, CallbackDelivery, CallbackEffect, ClockSource, Created, Ledger, LedgerError,
    OperationRecord, PostgresLedger, PostgresLedgerOptions,
};
use recoverable_write::state::{Event, State, Tick};
use recoverable_write::{AttemptId, Evidence, Generation, OperationId, Tenant};
use sqlx::{AssertSqlSafe, Connection};

// ── PostgreSQL test harness (shared with tests/postgres_workers.rs) ─────────────────────────────

#[path = "common/postgres.rs"]
mod pg;
use pg::{Schema, pg_url};

impl Schema {
    fn options(&self) -> PostgresLedgerOptions {
        PostgresLedgerOptions::new()
            .schema(self.name.clone())
            .expect("valid test schema name")
            .max_connections(4)
    }

    async fn ledger(&self, clock: ClockSource) -> PostgresLedger {
        PostgresLedger::connect_with(&self.url, self.options().clock(clock))
            .await
            .expect("connect the PostgreSQL ledger")
    }
}

// ── conformance ─────────────────────────────────────────────────────────────────────────────────

// The fixture `return`s from the generated test's async block when there is no server (after
// `pg_url` printed why): the check is skipped, not failed. Synthetic times need the caller's
// clock.
recoverable_write::ledger_conformance_tests!(
    postgres,
    make_with_guard = {
        let Some(url) = pg_url().await else {
            return;
        };
        let schema = Schema::new(&url);
        let ledger = schema.ledger(ClockSource::Caller).await;
        std::future::ready((ledger, schema))
    }
);

// ── helpers ─────────────────────────────────────────────────────────────────────────────────────

async fn create<L: Ledger + ?Sized>(ledger: &L, id: &str) -> OperationRecord {
    match ledger
        .create_or_get(new_operation("tenant-a", id, &format!("intent-{id}")))
        .await
        .expect("create_or_get")
    {
        Created::New(r) => r,
        Created::Existing(r) => panic!("unexpected existing {}", r.operation_id),
    }
}

fn assert_unavailable<T: std::fmt::Debug>(result: Result<T, LedgerError>, what: &str) {
    match result {
        Err(LedgerError::Unavailable(_)) => {}
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    }
}

fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, LedgerError>, op: &str, column: &str) {
    match result {
        Err(LedgerError::Corrupt { operation, detail }) => {
            assert_eq!(operation, op);
            assert!(
                detail.contains(column),
                "detail {detail:?} should name {column}"
            );
        }
        other => panic!("expected Corrupt for {op}, got {other:?}"),
    }
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

fn assert_near(actual: Option<i64>, expected: i64, what: &str) {
    let actual = actual.unwrap_or_else(|| panic!("{what} is NULL"));
    assert!(
        (actual - expected).abs() < 5_000,
        "{what}: {actual} is not within 5 s of {expected} (off by {} ms)",
        actual - expected
    );
}

// ── configuration and migrations ────────────────────────────────────────────────────────────────

#[test]
fn schema_names_are_validated() {
    for good in ["public", "rw", "_x", "billing_ledger_2", &"a".repeat(63)] {
        assert!(
            PostgresLedgerOptions::new().schema(good).is_ok(),
            "{good:?} should be accepted"
        );
    }
    for bad in [
        "",
        "1abc",
        "Public",
        "a-b",
        "a b",
        "a\"b",
        "x;drop table t",
        "pg_catalog",
        "pg_anything",
        "é",
        &"a".repeat(64),
    ] {
        match PostgresLedgerOptions::new().schema(bad) {
            Err(LedgerError::Config(_)) => {}
            other => panic!("{bad:?} should be refused, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_schema_or_pool_size_is_refused_before_connecting() {
    // Nothing listens on port 1: a Config error proves nothing was attempted.
    let mut options = PostgresLedgerOptions::new();
    options.schema = "Bad-Name".to_owned();
    let err = PostgresLedger::connect_with("postgres://nobody@127.0.0.1:1/x", options)
        .await
        .expect_err("invalid schema");
    assert!(matches!(err, LedgerError::Config(_)), "{err:?}");
    let err = PostgresLedger::connect_with(
        "postgres://nobody@127.0.0.1:1/x",
        PostgresLedgerOptions::new().max_connections(0),
    )
    .await
    .expect_err("no connections");
    assert!(matches!(err, LedgerError::Config(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable() {
    let err = PostgresLedger::connect_with(
        "postgres://nobody@127.0.0.1:1/x",
        PostgresLedgerOptions::new().acquire_timeout(Duration::from_secs(2)),
    )
    .await
    .expect_err("nothing listens on port 1");
    assert!(matches!(err, LedgerError::Unavailable(_)), "{err:?}");
}

/// Eight processes' worth of pools start at once on a schema that does not exist yet: every one
/// connects, the migration ran exactly once, and the ledger works from any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_migrations_of_a_fresh_schema_all_succeed_once() {
    let Some(url) = pg_url().await else { return };
    let schema = Arc::new(Schema::new(&url));
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (schema, barrier) = (schema.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let options = schema.options().max_connections(1);
            barrier.wait().await;
            PostgresLedger::connect_with(&schema.url, options).await
        }));
    }
    let mut ledgers = Vec::new();
    for task in tasks {
        ledgers.push(task.await.expect("task").expect("concurrent migration"));
    }
    let mut conn = schema.raw().await;
    let applied: Vec<(i64, bool)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT version, success FROM \"{}\".rw_schema_migrations ORDER BY version",
        schema.name
    )))
    .fetch_all(&mut conn)
    .await
    .expect("migration bookkeeping in the schema");
    assert_eq!(
        applied,
        [
            (1, true),
            (2, true),
            (3, true),
            (4, true),
            (5, true),
            (6, true),
            (7, true),
            (8, true),
            (9, true),
            (10, true),
            // 11 is SQLite's alone (its evidence log's row ids); the numbers name one schema
            // version across the backends.
            (12, true),
            (13, true),
            // 14 was withdrawn before any release.
            (15, true)
        ]
    );
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY tablename",
    )
    .bind(&schema.name)
    .fetch_all(&mut conn)
    .await
    .expect("tables");
    assert_eq!(
        tables,
        [
            "rw_callback_events",
            "rw_callback_quarantine",
            "rw_evidence",
            "rw_operations",
            "rw_schema_migrations",
            "rw_workers"
        ]
    );
    // Nothing leaked into public.
    let leaked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'rw\\_%'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("count");
    assert_eq!(leaked, 0);
    let _ = conn.close().await;

    let r = create(&ledgers[0], "op-1").await;
    for other in &ledgers[1..] {
        assert_eq!(
            other.get(&r.tenant, &r.operation_id).await.expect("get"),
            Some(r.clone())
        );
    }
    for ledger in &ledgers {
        ledger.close().await;
    }
    // A restart migrates nothing and sees the data.
    let again = schema.ledger(ClockSource::Database).await;
    assert_eq!(
        again.get(&r.tenant, &r.operation_id).await.expect("get"),
        Some(r)
    );
}

/// A migration whose recorded checksum differs from the shipped file is a configuration error,
/// not a silent re-run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modified_migration_history_is_a_config_error() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    schema.ledger(ClockSource::Database).await.close().await;
    schema
        .exec(format!(
            "UPDATE \"{}\".rw_schema_migrations SET checksum = '\\x00'",
            schema.name
        ))
        .await;
    let err = PostgresLedger::connect_with(&url, schema.options())
        .await
        .expect_err("checksum mismatch");
    assert!(matches!(err, LedgerError::Config(_)), "{err:?}");
}

// ── failures are errors, never panics ───────────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_rows_are_errors_not_panics() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(ClockSource::Caller).await;
    let tenant = Tenant::new("tenant-a");
    let s = &schema.name;

    let cases = [
        ("op-bogus-state", "state = 'BOGUS'", "state"),
        (
            "op-bad-policy",
            "budget_policy = '{not json'",
            "budget_policy",
        ),
        (
            "op-bad-attempt",
            "current_attempt = 'not-a-uuid'",
            "current_attempt",
        ),
        (
            "op-bad-headers",
            "request_headers = '{\"a\":1}'",
            "request_headers",
        ),
        ("op-negative", "attempts_used = -1", "attempts_used"),
        (
            "op-bad-status",
            "response_status = 70000, response_headers = '[]'",
            "response_status",
        ),
    ];
    for (id, set, column) in cases {
        create(&ledger, id).await;
        let n = schema
            .exec(format!(
                "UPDATE \"{s}\".rw_operations SET {set} WHERE operation_id = '{id}'"
            ))
            .await;
        assert_eq!(n, 1);
        assert_corrupt(ledger.get(&tenant, &OperationId::new(id)).await, id, column);
    }

    let bad_log = create(&ledger, "op-bad-log").await;
    schema
        .exec(format!(
            "UPDATE \"{s}\".rw_evidence SET to_state = 'NOPE' WHERE operation_id = 'op-bad-log'"
        ))
        .await;
    assert_corrupt(
        ledger.evidence(&tenant, &bad_log.operation_id).await,
        "op-bad-log",
        "to_state",
    );

    // A due row that cannot be decoded is quarantined by the claim, not claimed, and the
    // claim itself succeeds (issue 10 item 10: one bad row must not stop recovery).
    let due = create(&ledger, "op-due-corrupt").await;
    let due = ledger
        .apply(update_of(
            &due,
            RawChanges {
                next_check_ms: Some(T0),
                ..keep(&due, State::Unknown, T0)
            },
            "setup",
        ))
        .await
        .expect("apply")
        .expect("applied");
    schema
        .exec(format!(
            "UPDATE \"{s}\".rw_operations SET request_headers = 'oops' \
             WHERE operation_id = 'op-due-corrupt'"
        ))
        .await;
    let claimed = ledger
        .claim_due(T0 + 1, 1_000, 10)
        .await
        .expect("claim_due");
    assert!(claimed.is_empty(), "{claimed:?}");
    let quarantined = ledger.quarantined(10).await.expect("quarantined");
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined[0].operation_id, due.operation_id);
    assert!(
        quarantined[0].error.contains("request_headers"),
        "{quarantined:?}"
    );
    assert!(
        ledger
            .claim_due(T0 + 1_000_000, 1_000, 10)
            .await
            .expect("claim_due")
            .is_empty(),
        "a quarantined row is never claimed again"
    );
    let mut conn = schema.raw().await;
    let claimed_entries: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{s}\".rw_evidence \
         WHERE operation_id = 'op-due-corrupt' AND kind = 'recovery_claimed'"
    )))
    .fetch_one(&mut conn)
    .await
    .expect("count");
    assert_eq!(claimed_entries, 0, "a quarantined row gets no claim entry");
    let _ = conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_ledger_is_unavailable_for_every_call() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(ClockSource::Caller).await;
    let r = create(&ledger, "op-1").await;
    let clone = ledger.clone();
    assert!(!clone.is_closed());
    ledger.close().await;
    assert!(clone.is_closed());
    let (tenant, id) = (r.tenant.clone(), r.operation_id.clone());
    assert_unavailable(
        clone
            .create_or_get(new_operation("tenant-a", "op-new", "intent-new"))
            .await,
        "create_or_get",
    );
    assert_unavailable(clone.get(&tenant, &id).await, "get");
    let update = update_of(&r, keep(&r, State::InFlight, T0 + 1), "x");
    assert_unavailable(clone.apply(update).await, "apply");
    assert_unavailable(clone.claim_due(T0, 1_000, 10).await, "claim_due");
    assert_unavailable(clone.sweep_expired(T0).await, "sweep_expired");
    assert_unavailable(
        clone
            .append_evidence(&tenant, &id, evidence_entry("note", T0))
            .await,
        "append_evidence",
    );
    assert_unavailable(clone.evidence(&tenant, &id).await, "evidence");
    assert_unavailable(clone.database_now_ms().await, "database_now_ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledgers_work_behind_a_trait_object_and_nul_text_is_kept_readable() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger: Arc<dyn FullLedger> = Arc::new(schema.ledger(ClockSource::Caller).await);
    let r = create(&*ledger, "op-dyn").await;
    let changes = RawChanges {
        reason: Some("vendor said \0 nothing".to_owned()),
        ..keep(&r, State::Unknown, T0 + 1)
    };
    let update = update_with(
        &r,
        changes,
        NewEvidence {
            note: Some("note with \0 inside".to_owned()),
            ..evidence_entry("attempt_result", T0 + 1)
        },
    );
    let row = ledger
        .apply(update)
        .await
        .expect("NUL in free text is not an outage")
        .expect("applied");
    assert_eq!(row.reason.as_deref(), Some("vendor said \u{FFFD} nothing"));
    let log = ledger
        .evidence(&r.tenant, &r.operation_id)
        .await
        .expect("evidence");
    assert_eq!(
        log[1].entry.note.as_deref(),
        Some("note with \u{FFFD} inside")
    );
}

// ── the database clock ──────────────────────────────────────────────────────────────────────────

/// `create_and_apply` from a worker an hour off (either way): the row is created and claimed on
/// the database clock in one statement; lease and deadline keep their length; the two entries
/// are in order, `created` at the creation time; the row it answers is the row stored (the
/// statement sends back only its clock: the ledger moves the row's times itself). Both forms
/// of the claim: the statement itself on a pool of 4 (a connection kept, planning generically)
/// and the call of `rw_claim_new` on a pool of 2 (nothing kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_apply_follows_the_database_clock_when_a_worker_is_an_hour_off() {
    let Some(url) = pg_url().await else { return };
    for (skew, pool) in [
        (3_600_000_i64, 4),
        (-3_600_000, 4),
        (3_600_000, 2),
        (-3_600_000, 2),
    ] {
        let schema = Schema::new(&url);
        let options = schema
            .options()
            .max_connections(pool)
            .clock(ClockSource::Database);
        let ledger = PostgresLedger::connect_with(&schema.url, options)
            .await
            .expect("connect the PostgreSQL ledger");
        let now = wall_ms() + skew;
        let mut new = new_operation("tenant-a", "op-1", "intent-1");
        new.now_ms = now;
        let attempt = AttemptId::generate();
        let first = new
            .first_update_on(
                &Event::ClaimSend,
                Tick {
                    now_ms: now,
                    jitter: 0.0,
                },
                Some(attempt),
                Some(now + 200),
                NewEvidence {
                    attempt_id: Some(attempt),
                    ..evidence_entry("attempt_registered", now)
                },
            )
            .expect("claim send");
        let row = match ledger.create_and_apply(new, first).await.expect("create") {
            Created::New(r) => r,
            Created::Existing(r) => panic!("unexpected existing {}", r.operation_id),
        };
        let db_now = ledger.database_now_ms().await.expect("db clock");
        assert_eq!(row.state, State::InFlight);
        assert_eq!(row.version, 1);
        assert_near(Some(row.created_ms), db_now, "created_ms");
        assert_near(Some(row.updated_ms), db_now, "updated_ms");
        assert_eq!(
            row.lease_until_ms,
            Some(row.created_ms + 200),
            "lease length kept"
        );
        assert_eq!(
            row.deadline_ms,
            Some(row.created_ms + row.policy.window_ms as i64),
            "window length kept"
        );
        let log = ledger
            .evidence(&row.tenant, &row.operation_id)
            .await
            .expect("evidence");
        assert_eq!(log.len(), 2);
        assert_eq!(log[0].entry.kind, "created");
        assert_eq!(log[0].entry.at_ms, row.created_ms);
        assert_eq!(log[1].entry.kind, "attempt_registered");
        assert_eq!(log[1].entry.at_ms, row.created_ms);
        assert_eq!(log[1].entry.attempt_id, Some(attempt));
        assert!(log[0].seq < log[1].seq);
        let stored = ledger
            .get(&row.tenant, &row.operation_id)
            .await
            .expect("get");
        assert_eq!(
            stored.as_ref(),
            Some(&row),
            "the answered row is the stored row"
        );

        // The result as the layer records it (`record_unread`: the statement itself on the
        // kept connection, or the call of `rw_apply`), moved onto the database clock too.
        let at = now + 50;
        let changes = RawChanges {
            lease_until_ms: None,
            ..keep(&row, State::Succeeded, at)
        };
        let recorded = ledger
            .record_unread(update_of(&row, changes, "attempt_result"))
            .await
            .expect("record");
        assert!(
            !matches!(recorded, recoverable_write::ledger::Recorded::Stale),
            "the result applies"
        );
        let done = ledger
            .get(&row.tenant, &row.operation_id)
            .await
            .expect("get")
            .expect("the row");
        let db_now = ledger.database_now_ms().await.expect("db clock");
        assert_eq!(done.state, State::Succeeded);
        assert_eq!(done.version, 2);
        assert_eq!(done.lease_until_ms, None);
        assert_eq!(done.deadline_ms, row.deadline_ms, "kept, not moved");
        assert_near(Some(done.updated_ms), db_now, "updated_ms of the result");
        let log = ledger
            .evidence(&row.tenant, &row.operation_id)
            .await
            .expect("evidence");
        assert_eq!(log.len(), 3);
        assert_eq!(log[2].entry.kind, "attempt_result");
        assert_eq!(log[2].entry.at_ms, done.updated_ms);
        // A second result for the same version is stale: the compare-and-swap held.
        let again = ledger
            .record_unread(update_of(
                &row,
                keep(&row, State::Succeeded, at),
                "attempt_result",
            ))
            .await
            .expect("record");
        assert!(matches!(again, recoverable_write::ledger::Recorded::Stale));
        ledger.close().await;
    }
}

/// A worker whose clock is an hour off (either way) still creates, leases, sweeps and claims on
/// the database clock; values carried over from the row are not shifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_due_times_follow_the_database_clock_when_a_worker_is_an_hour_off() {
    let Some(url) = pg_url().await else { return };
    for skew in [3_600_000_i64, -3_600_000] {
        let schema = Schema::new(&url);
        let ledger = schema.ledger(ClockSource::Database).await;
        assert_eq!(ledger.clock_source(), ClockSource::Database);
        let worker_now = || wall_ms() + skew;
        let db_now = ledger.database_now_ms().await.expect("db clock");
        assert_near(Some(db_now), wall_ms(), "database clock vs this host");

        // Created: stamped on the database clock.
        let mut new = new_operation("tenant-a", "op-1", "intent-1");
        new.now_ms = worker_now();
        let r = ledger
            .create_or_get(new)
            .await
            .expect("create")
            .into_record();
        assert_near(Some(r.created_ms), db_now, "created_ms");
        let created = ledger
            .evidence(&r.tenant, &r.operation_id)
            .await
            .expect("evidence");
        assert_eq!(created[0].entry.at_ms, r.created_ms);

        // Claim send: lease and deadline computed on the worker's clock land on the database's.
        let now = worker_now();
        let attempt = AttemptId::generate();
        let claim = r
            .update_on(
                &Event::ClaimSend,
                Tick {
                    now_ms: now,
                    jitter: 0.0,
                },
                Some(attempt),
                Some(now + 200),
                None,
                NewEvidence {
                    attempt_id: Some(attempt),
                    ..evidence_entry("attempt_registered", now)
                },
            )
            .expect("claim send");
        let in_flight = ledger.apply(claim).await.expect("apply").expect("claimed");
        let db_now = ledger.database_now_ms().await.expect("db clock");
        assert_near(in_flight.lease_until_ms, db_now + 200, "lease_until_ms");
        assert_near(
            in_flight.deadline_ms,
            db_now + r.policy.window_ms as i64,
            "deadline_ms",
        );
        assert_near(Some(in_flight.updated_ms), db_now, "updated_ms");
        let log = ledger
            .evidence(&r.tenant, &r.operation_id)
            .await
            .expect("evidence");
        assert_near(Some(log[1].entry.at_ms), db_now, "evidence at_ms");

        // The worker's clock says the lease is long over (or far away): the database decides.
        if skew > 0 {
            assert!(
                ledger
                    .sweep_expired(worker_now())
                    .await
                    .expect("sweep")
                    .is_empty(),
                "a fast worker must not expire a running lease"
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let swept = ledger.sweep_expired(worker_now()).await.expect("sweep");
        assert_eq!(swept.len(), 1, "the lease is over on the database clock");
        let unknown = swept[0].clone();
        let db_now = ledger.database_now_ms().await.expect("db clock");
        assert_near(
            unknown.next_check_ms,
            db_now,
            "next_check_ms after the sweep",
        );
        assert_eq!(
            unknown.deadline_ms, in_flight.deadline_ms,
            "the deadline is carried over"
        );

        // Due on the database clock, whatever the worker thinks; the lease is the database's.
        let claimed = ledger
            .claim_due(worker_now(), 10_000, 10)
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 1);
        let db_now = ledger.database_now_ms().await.expect("db clock");
        assert_near(claimed[0].lease_until_ms, db_now + 10_000, "recovery lease");

        // A next check ten minutes away (worker's arithmetic) is ten minutes away on the
        // database clock: not due even for a worker an hour fast. Carried-over values stay.
        let row = claimed[0].clone();
        let later = worker_now();
        let changes = RawChanges {
            next_check_ms: Some(later + 600_000),
            lease_until_ms: None,
            ..keep(&row, State::Unknown, later)
        };
        let waiting = ledger
            .apply(update_of(&row, changes, "lookup"))
            .await
            .expect("apply")
            .expect("applied");
        let db_now = ledger.database_now_ms().await.expect("db clock");
        assert_near(waiting.next_check_ms, db_now + 600_000, "next_check_ms");
        assert_eq!(waiting.deadline_ms, row.deadline_ms, "kept, not shifted");
        assert_eq!(waiting.lease_until_ms, None);
        assert!(
            ledger
                .claim_due(wall_ms() + 3_600_000, 10_000, 10)
                .await
                .expect("claim")
                .is_empty(),
            "not due on the database clock"
        );

        // Appended evidence is stamped on the database clock too.
        ledger
            .append_evidence(
                &row.tenant,
                &row.operation_id,
                evidence_entry("late_evidence", worker_now()),
            )
            .await
            .expect("append");
        let log = ledger
            .evidence(&row.tenant, &row.operation_id)
            .await
            .expect("evidence");
        let db_now = ledger.database_now_ms().await.expect("db clock");
        assert_near(log.last().map(|e| e.entry.at_ms), db_now, "appended at_ms");
    }
}

/// With the caller's clock, the same skew is taken at its word (the conformance suite's mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_clock_uses_the_given_times_verbatim() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(ClockSource::Caller).await;
    let mut new = new_operation("tenant-a", "op-1", "intent-1");
    let hour_ahead = wall_ms() + 3_600_000;
    new.now_ms = hour_ahead;
    let r = ledger
        .create_or_get(new)
        .await
        .expect("create")
        .into_record();
    assert_eq!(r.created_ms, hour_ahead);
    let changes = RawChanges {
        generation: Generation(1),
        lease_until_ms: Some(hour_ahead + 100),
        ..keep(&r, State::InFlight, hour_ahead)
    };
    let r = ledger
        .apply(update_of(&r, changes, "x"))
        .await
        .expect("apply")
        .expect("applied");
    assert_eq!(r.lease_until_ms, Some(hour_ahead + 100));
    assert!(
        ledger
            .sweep_expired(wall_ms())
            .await
            .expect("sweep")
            .is_empty()
    );
    assert_eq!(
        ledger
            .sweep_expired(hour_ahead + 101)
            .await
            .expect("sweep")
            .len(),
        1
    );
}

// ── outbox ──────────────────────────────────────────────────────────────────────────────────────

async fn business_rows(schema: &Schema) -> i64 {
    let mut conn = schema.raw().await;
    let n = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{}\".support_requests",
        schema.name
    )))
    .fetch_one(&mut conn)
    .await
    .expect("count");
    let _ = conn.close().await;
    n
}

/// The business row and the operation commit or roll back together; before the commit neither
/// is visible to anyone else (the layer, a recoverer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_rollback_removes_both_rows_and_commit_keeps_both() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(ClockSource::Database).await;
    schema
        .exec(format!(
            "CREATE TABLE \"{}\".support_requests (id TEXT PRIMARY KEY, device TEXT NOT NULL)",
            schema.name
        ))
        .await;
    let insert_business = format!(
        "INSERT INTO \"{}\".support_requests (id, device) VALUES ($1, 'E17')",
        schema.name
    );
    let tenant = Tenant::new("tenant-a");

    // Rolled back: neither row exists, and the evidence log is empty.
    let mut tx = ledger.pool().begin().await.expect("begin");
    sqlx::query(AssertSqlSafe(insert_business.clone()))
        .bind("req-1")
        .execute(&mut *tx)
        .await
        .expect("business row");
    let created = ledger
        .create_in(&mut tx, new_operation("tenant-a", "op-1", "req-1"))
        .await
        .expect("create_in");
    assert!(matches!(created, Created::New(_)));
    assert_eq!(
        ledger
            .get(&tenant, &OperationId::new("op-1"))
            .await
            .expect("get"),
        None,
        "uncommitted operations are invisible"
    );
    tx.rollback().await.expect("rollback");
    assert_eq!(business_rows(&schema).await, 0);
    assert_eq!(
        ledger
            .get(&tenant, &OperationId::new("op-1"))
            .await
            .expect("get"),
        None
    );
    assert!(
        ledger
            .evidence(&tenant, &OperationId::new("op-1"))
            .await
            .expect("evidence")
            .is_empty()
    );

    // Committed: both rows, and the operation is PREPARED with its `created` entry.
    let mut tx = ledger.pool().begin().await.expect("begin");
    sqlx::query(AssertSqlSafe(insert_business))
        .bind("req-2")
        .execute(&mut *tx)
        .await
        .expect("business row");
    let new = ledger
        .create_in(&mut tx, new_operation("tenant-a", "op-2", "req-2"))
        .await
        .expect("create_in")
        .into_record();
    // The same intent again in the same transaction is the same operation.
    let again = ledger
        .create_in(&mut tx, new_operation("tenant-a", "op-other", "req-2"))
        .await
        .expect("create_in");
    assert_eq!(again, Created::Existing(new.clone()));
    tx.commit().await.expect("commit");
    assert_eq!(business_rows(&schema).await, 1);
    let row = ledger
        .get(&tenant, &OperationId::new("op-2"))
        .await
        .expect("get")
        .expect("committed operation");
    assert_eq!(row, new);
    assert_eq!(row.state, State::Prepared);
    let log = ledger
        .evidence(&tenant, &row.operation_id)
        .await
        .expect("evidence");
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].entry.kind, "created");
    // Also works on a plain pooled connection (autocommit).
    let mut conn = ledger.pool().acquire().await.expect("acquire");
    let third = ledger
        .create_in(&mut conn, new_operation("tenant-a", "op-3", "req-3"))
        .await
        .expect("create_in");
    assert!(matches!(third, Created::New(_)));
}

// ── connections the server dropped ──────────────────────────────────────────────────────────────

/// Without a ping before each use (the default), a connection the server terminated fails the
/// next statement with `Unavailable` (a write before a send then sends nothing) and is
/// discarded: the statement after it runs on a new connection. With the ping on, the dead
/// connection is replaced before use and no statement fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_dropped_fails_one_statement_then_is_replaced() {
    let Some(url) = pg_url().await else { return };
    for ping in [false, true] {
        let schema = Schema::new(&url);
        let ledger = PostgresLedger::connect_with(
            &url,
            schema
                .options()
                .clock(ClockSource::Caller)
                .max_connections(1)
                .test_before_acquire(ping),
        )
        .await
        .expect("connect");
        let new = new_operation("tenant-a", "op-1", "intent-1");
        let r = ledger
            .create_or_get(new.clone())
            .await
            .expect("create")
            .into_record();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(ledger.pool())
            .await
            .expect("backend pid");
        let mut admin = sqlx::PgConnection::connect(&url).await.expect("admin");
        let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&mut admin)
            .await
            .expect("terminate");
        assert!(terminated);
        tokio::time::sleep(Duration::from_millis(100)).await;

        let first = ledger.get(&r.tenant, &r.operation_id).await;
        if ping {
            assert_eq!(first.expect("replaced before use"), Some(r.clone()));
        } else {
            // Without a ping the dead connection fails its statement, unless the pool noticed the
            // close by itself first (it may, on a loaded machine); never a wrong answer.
            assert!(
                matches!(&first, Err(LedgerError::Unavailable(_)))
                    || matches!(&first, Ok(Some(row)) if *row == r),
                "the dead connection fails its statement: {first:?}"
            );
        }
        let again = ledger
            .get(&r.tenant, &r.operation_id)
            .await
            .expect("a new connection");
        assert_eq!(again, Some(r));
        ledger.close().await;
    }
}

/// The ledger's own pool plans every statement for its actual key (no generic plan made while
/// the table was empty); a URL that does not parse is a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_pool_forces_custom_plans_and_rejects_a_bad_url() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(ClockSource::Caller).await;
    let mode: String = sqlx::query_scalar("SHOW plan_cache_mode")
        .fetch_one(ledger.pool())
        .await
        .expect("show");
    assert_eq!(mode, "force_custom_plan");
    ledger.close().await;
    match PostgresLedger::connect_with("not a url", schema.options()).await {
        Err(LedgerError::Config(msg)) => assert!(msg.contains("URL"), "{msg}"),
        other => panic!(
            "expected a configuration error, got {:?}",
            other.map(|_| ())
        ),
    }
}

// ── input PostgreSQL text cannot hold ───────────────────────────────────────────────────────────

fn assert_names_nul<T: std::fmt::Debug>(result: Result<T, LedgerError>, field: &str) {
    match result {
        Err(LedgerError::Config(msg)) => {
            assert!(msg.contains(field) && msg.contains("NUL"), "{msg}");
        }
        other => panic!("{field}: expected a configuration error naming it, got {other:?}"),
    }
}

/// A NUL in a key field is refused before any statement, with an error that names the field
/// (it used to come back as "ledger unavailable", as if the database were down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_key_field_is_an_error_naming_the_field() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let ledger = schema.ledger(ClockSource::Caller).await;
    let cases = [
        ("tenant", new_operation("ten\0ant", "op-1", "intent-1")),
        (
            "operation id",
            new_operation("tenant-a", "op\0-1", "intent-1"),
        ),
        ("intent", new_operation("tenant-a", "op-1", "intent\0-1")),
        ("action", {
            let mut new = new_operation("tenant-a", "op-1", "intent-1");
            new.action = "create\0ticket".into();
            new
        }),
    ];
    for (field, new) in cases {
        assert_names_nul(ledger.create_or_get(new.clone()).await, field);
        let first = {
            let r = new.clone().into_prepared();
            update_of(&r, keep(&r, State::InFlight, T0 + 1), "attempt_registered")
        };
        assert_names_nul(ledger.create_and_apply(new.clone(), first).await, field);
        let mut conn = ledger.pool().acquire().await.expect("acquire");
        assert_names_nul(ledger.create_in(&mut conn, new).await, field);
    }
    let r = create(&ledger, "op-ok").await;
    let tenant = Tenant::new("tenant\0a");
    let id = OperationId::new("op\0ok");
    assert_names_nul(ledger.get(&tenant, &r.operation_id).await, "tenant");
    assert_names_nul(ledger.get(&r.tenant, &id).await, "operation id");
    let mut elsewhere = r.clone();
    elsewhere.tenant = tenant.clone();
    let update = update_of(
        &elsewhere,
        keep(&elsewhere, State::InFlight, T0 + 1),
        "attempt_registered",
    );
    assert_names_nul(ledger.apply(update.clone()).await, "tenant");
    assert_names_nul(ledger.record(update).await, "tenant");
    assert_names_nul(
        ledger
            .append_evidence(&r.tenant, &id, evidence_entry("note", T0))
            .await,
        "operation id",
    );
    assert_names_nul(ledger.evidence(&tenant, &r.operation_id).await, "tenant");
    let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM \"{}\".rw_operations",
        schema.name
    )))
    .fetch_one(ledger.pool())
    .await
    .expect("count");
    assert_eq!(rows, 1, "only op-ok was stored");
}

// ── durability of the pre-send claim ────────────────────────────────────────────────────────────

/// A login role whose sessions default to `synchronous_commit = off`, dropped with the guard.
struct AsyncRole {
    admin_url: String,
    name: String,
}

impl AsyncRole {
    async fn new(schema: &Schema) -> Self {
        let name = format!(
            "rw_async_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        for sql in [
            format!("CREATE ROLE {name} LOGIN"),
            format!("ALTER ROLE {name} SET synchronous_commit = off"),
            format!(
                "DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO {name}', \
                 current_database()); END $$"
            ),
            format!("GRANT USAGE, CREATE ON SCHEMA public TO {name}"),
        ] {
            schema.exec(sql).await;
        }
        Self {
            admin_url: schema.url.clone(),
            name,
        }
    }

    /// The test server's URL with this role as the user (trust authentication).
    fn url(&self) -> String {
        let at = self.admin_url.rfind('@').expect("URL with a user");
        let scheme = self.admin_url.find("://").expect("URL with a scheme") + 3;
        format!(
            "{}{}{}",
            &self.admin_url[..scheme],
            self.name,
            &self.admin_url[at..]
        )
    }
}

impl Drop for AsyncRole {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            rt.block_on(async move {
                let mut conn = sqlx::PgConnection::connect(&url).await?;
                for sql in [
                    format!("REASSIGN OWNED BY {name} TO CURRENT_USER"),
                    format!("DROP OWNED BY {name}"),
                    format!("DROP ROLE IF EXISTS {name}"),
                ] {
                    sqlx::query(AssertSqlSafe(sql)).execute(&mut conn).await?;
                }
                conn.close().await
            })
        });
        if let Ok(Err(e)) = cleanup.join() {
            eprintln!("could not drop role {}: {e}", self.name);
        }
    }
}

/// A role (or database) set to `synchronous_commit = off` would let a crash of the server lose
/// a pre-send claim after the bytes left. The ledger's own pool runs every statement with
/// `synchronous_commit = on` regardless; only `record` relaxes it, for its own transaction, and
/// that does not leak to the next statement on the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_statements_run_with_synchronous_commit_on_even_for_an_async_role() {
    let Some(url) = pg_url().await else { return };
    let schema = Schema::new(&url);
    let role = AsyncRole::new(&schema).await;
    // The setup is real: a plain session of this role commits asynchronously.
    let mut plain = sqlx::PgConnection::connect(&role.url())
        .await
        .expect("connect as the role");
    let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut plain)
        .await
        .expect("show");
    assert_eq!(setting, "off");
    let _ = plain.close().await;

    // One connection, so every statement below runs on the same session.
    let options = schema
        .options()
        .clock(ClockSource::Caller)
        .max_connections(1);
    let ledger = PostgresLedger::connect_with(&role.url(), options)
        .await
        .expect("connect the ledger as the role");
    let show = |ledger: PostgresLedger| async move {
        sqlx::query_scalar::<_, String>("SHOW synchronous_commit")
            .fetch_one(ledger.pool())
            .await
            .expect("show")
    };
    assert_eq!(show(ledger.clone()).await, "on");
    let r = create(&ledger, "op-1").await;
    let claimed = ledger
        .apply(update_of(
            &r,
            keep(&r, State::InFlight, T0 + 1),
            "attempt_registered",
        ))
        .await
        .expect("apply")
        .expect("claimed");
    let recorded = ledger
        .record(update_of(
            &claimed,
            keep(&claimed, State::Succeeded, T0 + 2),
            "attempt_result",
        ))
        .await
        .expect("record")
        .expect("recorded");
    assert_eq!(recorded.state, State::Succeeded);
    assert_eq!(
        show(ledger.clone()).await,
        "on",
        "record's setting is local"
    );
    ledger.close().await;

    // A pool the application built without forcing it is refused at construction.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&role.url())
        .await
        .expect("the application's pool");
    match PostgresLedger::from_pool(pool.clone(), schema.options()).await {
        Err(LedgerError::Config(msg)) => assert!(msg.contains("synchronous_commit"), "{msg}"),
        other => panic!(
            "expected a configuration error, got {:?}",
            other.map(|_| ())
        ),
    }
    pool.close().await;
}

// ── vendor callbacks ────────────────────────────────────────────────────────────────────────────

/// Several application instances (each with its own ledger and pool) receive one vendor event
/// at the same moment, several times each, and each decides on the same read of the operation
/// through the state machine: exactly one state change, one `callback` evidence entry and one
/// dedupe record result. The others are duplicates, or stale and then duplicates once they read
/// again and retry (issue 13 item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_receiving_one_callback_concurrently_apply_it_once() {
    let Some(url) = pg_url().await else { return };
    const INSTANCES: usize = 4;
    const DELIVERIES_EACH: usize = 4;
    let schema = Schema::new(&url);
    let mut ledgers = Vec::new();
    for _ in 0..INSTANCES {
        ledgers.push(schema.ledger(ClockSource::Caller).await);
    }
    let r = create(&ledgers[0], "op-callback").await;
    let lost = RawChanges {
        generation: Generation(1),
        may_have_applied: true,
        next_check_ms: Some(T0 + 1),
        ..keep(&r, State::Unknown, T0 + 1)
    };
    let r = ledgers[0]
        .apply(update_of(&r, lost, "setup"))
        .await
        .expect("apply")
        .expect("applied");

    let succeeded = Evidence::Succeeded {
        remote_ref: Some("pi_1".to_owned()),
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(INSTANCES * DELIVERIES_EACH));
    let mut tasks = Vec::new();
    for ledger in &ledgers {
        for _ in 0..DELIVERIES_EACH {
            let (ledger, barrier, succeeded) = (ledger.clone(), barrier.clone(), succeeded.clone());
            let mut read = r.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                loop {
                    let delivery = CallbackDelivery {
                        vendor: "stripe".to_owned(),
                        event_id: "evt_1".to_owned(),
                        event_type: "payment_intent.succeeded".to_owned(),
                        tenant: read.tenant.clone(),
                        operation_id: read.operation_id.clone(),
                        received_at_ms: T0 + 5,
                    };
                    let clock = Tick {
                        now_ms: T0 + 5,
                        jitter: 0.0,
                    };
                    let entry = NewEvidence {
                        evidence: Some(succeeded.clone()),
                        ..evidence_entry("callback", T0 + 5)
                    };
                    let event = Event::LookupResult(succeeded.clone());
                    let effect = match read.update_on(&event, clock, None, None, None, entry) {
                        Ok(update) => CallbackEffect::Apply(update),
                        Err(refused) => panic!("{refused}"),
                    };
                    match ledger
                        .apply_callback(delivery, effect)
                        .await
                        .expect("apply")
                    {
                        CallbackApplied::Stale => {
                            read = ledger
                                .get(&read.tenant, &read.operation_id)
                                .await
                                .expect("get")
                                .expect("row");
                        }
                        other => break other,
                    }
                }
            }));
        }
    }
    let mut applied = 0;
    for task in tasks {
        match task.await.expect("delivery task") {
            CallbackApplied::Applied(row) => {
                assert_eq!(row.state, State::Succeeded);
                applied += 1;
            }
            CallbackApplied::Duplicate => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(applied, 1, "exactly one delivery applies");

    let row = ledgers[1]
        .get(&r.tenant, &r.operation_id)
        .await
        .expect("get")
        .expect("row");
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref.as_deref(), Some("pi_1"));
    assert_eq!(row.version, r.version + 1, "one state change");
    let log = ledgers[2]
        .evidence(&r.tenant, &r.operation_id)
        .await
        .expect("evidence");
    let callbacks: Vec<_> = log.iter().filter(|e| e.entry.kind == "callback").collect();
    assert_eq!(callbacks.len(), 1, "one evidence entry");
    assert_eq!(callbacks[0].entry.evidence, Some(succeeded));
    let mut conn = schema.raw().await;
    let records: Vec<(String, String, Option<String>, String)> =
        sqlx::query_as(AssertSqlSafe(format!(
            "SELECT vendor, event_id, operation_id, outcome FROM \"{}\".rw_callback_events",
            schema.name
        )))
        .fetch_all(&mut conn)
        .await
        .expect("dedupe records");
    assert_eq!(
        records,
        [(
            "stripe".to_owned(),
            "evt_1".to_owned(),
            Some("op-callback".to_owned()),
            "applied".to_owned()
        )]
    );
    for ledger in ledgers {
        ledger.close().await;
    }
}
