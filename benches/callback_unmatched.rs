//! The cost of a verified callback that matches no operation (issue 27 item 7), as the ledger
//! grows from a thousand to a million finished operations.
//!
//! ```text
//! cargo bench -p recoverable-write-benches --no-default-features --bench callback_unmatched
//! RW_CB_SIZES=1000,10000,100000 RW_BENCH_ROUNDS=5 cargo bench ... --bench callback_unmatched
//! ```
//!
//! Unmatched events are normal traffic: a vendor's events for objects the application did not
//! create through the crate (Stripe's subscription and invoice PaymentIntents), and a captured
//! delivery can be replayed at will while its signature's timestamp is within the tolerance.
//! Each one used to run a listing across every tenant and state, by `operation_id OR
//! remote_ref`, before it was deduplicated. Now it is deduplicated first (one probe of the
//! dedupe table's key), matched through the operation key or the reference's index, told apart
//! from another tenant's operation by one probe of an index led by the operation id or the
//! reference (migration 0006), and quarantined.
//!
//! SQLite ledger files are filled with N finished operations (`SUCCEEDED`, one in ten
//! `REJECTED`, one in a hundred of another tenant; realistic column sizes) by one
//! `INSERT ... SELECT` over a recursive CTE in one transaction, for N in `RW_CB_SIZES`
//! (default 1k, 10k, 100k, 1M; the 1M file takes about a minute to fill on a 2-core machine,
//! printed). Each file is copied and the copy given the indexes of schema v5 (before migration
//! 0006) for the reference row. Neither has planner statistics: the ledger never runs
//! `ANALYZE`. The ledgers run with `synchronous=OFF`: a commit's fsync would
//! swamp what is measured. Every delivery is signed before the clock starts (the HMAC costs
//! the same at every size) and goes through `CallbackReceiver::receive`: verification, parsing
//! and the ledger.
//!
//! - `unmatched/by_operation_id`: a new event naming an operation id nobody holds: dedupe probe,
//!   key lookup, probe across tenants, quarantine (one write);
//! - `unmatched/by_reference`: a new event naming only a vendor reference nobody holds: the same
//!   through the reference's index;
//! - `unmatched/redelivery`: an event already quarantined, delivered again (a vendor's retry, or
//!   a replayed capture): the dedupe probe alone;
//! - `unmatched/matching_reads`: the ledger reads an unmatched event costs before its quarantine
//!   write (dedupe probe, key lookup, probe across tenants), without the write's noise;
//! - `reference/v5_cross_tenant_listing`: the listing every unmatched delivery used to run
//!   (`list` across tenants and states by exact text, limit 2), on the copy with the schema v5
//!   indexes.
//!
//! Shared machines drift: every round measures every size once, in turn, and the table prints
//! the median of `RW_BENCH_ROUNDS` rounds (default 7) per size, and the ratio of the largest
//! size to the smallest, against the target "flat within 2x" (the reference is expected to
//! grow with N).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

#[path = "support/mod.rs"]
mod support;

use recoverable_write::callbacks::{
    AccountTenants, CallbackReceiver, DeliveryOutcome, Secret, StripeSignature,
};
use recoverable_write::ledger::{
    CallbackLedger, Ledger, ListingLedger, OperationQuery, ProbeBy, SqliteLedgerOptions,
    Synchronous, TextMatch,
};
use recoverable_write::testing::callbacks::{SignedDelivery, Signer, ticket_mapping};
use recoverable_write::{BudgetPolicy, OperationId, RecoverableWrite, SqliteLedger, State, Tenant};
use serde_json::json;
use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use support::{median, rounds};

const SECRET: &str = "whsec_bench_endpoint_secret";
const TENANT: &str = "tenant-a";
/// Deliveries per measurement of the new path.
const CALLS: u64 = 200;
/// Calls per measurement of the reference (a scan of a million rows takes a while).
const REFERENCE_CALLS: u64 = 10;

/// Fills `?1` finished operations: one in ten `REJECTED`, one in a hundred of `tenant-b`.
const FILL: &str = "
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
INSERT INTO rw_operations (
    tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
    request_method, request_url, request_headers, request_body,
    contract_name, contract_hash, budget_policy,
    state, last_result, generation, version, attempts_used, queries_used, may_have_applied,
    current_attempt, lease_until_ms, next_check_ms, deadline_ms, remote_ref, reason,
    response_status, response_headers, response_body, created_ms, updated_ms
)
SELECT CASE WHEN i % 100 = 0 THEN 'tenant-b' ELSE 'tenant-a' END,
       printf('op-%032d', i), 'create_ticket', printf('intent-%08d', i),
       printf('%08d-0000-4000-8000-000000000000', i),
       printf('%064d', i),
       'POST', 'http://vendor.test/tickets',
       '[[\"content-type\",\"application/json\"]]',
       CAST('{\"device_id\":\"E17\",\"priority\":\"P2\"}' AS BLOB),
       'default', printf('%064d', 0), ?2,
       CASE WHEN i % 10 = 0 THEN 'REJECTED' ELSE 'SUCCEEDED' END,
       CASE WHEN i % 10 = 0 THEN 'REJECTED' ELSE 'SUCCEEDED' END,
       1, 2, 1, 0, CASE WHEN i % 10 = 0 THEN 0 ELSE 1 END,
       NULL, NULL, NULL, 1700000060000 + i, printf('W%d', i), NULL,
       CASE WHEN i % 10 = 0 THEN 400 ELSE 201 END,
       '[[\"content-type\",\"application/json\"]]', CAST('{\"id\":\"W1\"}' AS BLOB),
       1700000000000 + i, 1700000000000 + i
FROM n";

/// The indexes of schema v5 on the reference copy: migration 0006 undone.
const SCHEMA_V5_INDEXES: &str = "
DROP INDEX rw_operations_by_operation_id;
DROP INDEX rw_operations_by_remote_ref;
CREATE INDEX rw_operations_by_remote_ref ON rw_operations (tenant, remote_ref)
    WHERE remote_ref IS NOT NULL;";

fn sizes() -> Vec<u64> {
    std::env::var("RW_CB_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<u64>| !v.is_empty())
        .unwrap_or_else(|| vec![1_000, 10_000, 100_000, 1_000_000])
}

async fn raw(path: &std::path::Path) -> SqliteConnection {
    SqliteConnection::connect_with(
        &SqliteConnectOptions::new()
            .filename(path)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Off),
    )
    .await
    .expect("raw connection")
}

/// Two ledger files with `rows` finished operations: the current schema, and a copy with the
/// indexes of schema v5 for the reference; and the setup time.
async fn filled(dir: &std::path::Path, rows: u64) -> (SqliteLedger, SqliteLedger, Duration) {
    let path = dir.join(format!("callbacks-{rows}.db"));
    let v5 = dir.join(format!("callbacks-{rows}-v5.db"));
    let start = Instant::now();
    let options = SqliteLedgerOptions::new().synchronous(Synchronous::Off);
    // Opening runs the migrations; the rows go in through a raw connection in one transaction.
    SqliteLedger::open_with(&path, options.clone())
        .await
        .expect("create ledger")
        .close()
        .await;
    let policy = serde_json::to_string(&BudgetPolicy::default()).expect("policy json");
    let mut conn = raw(&path).await;
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query(FILL)
        .bind(rows as i64)
        .bind(policy)
        .execute(&mut *tx)
        .await
        .expect("fill");
    tx.commit().await.expect("commit");
    // No ANALYZE: the ledger never runs it, so its planner has no statistics (with them,
    // SQLite could skip-scan the tenant-led indexes of schema v5 while tenants are few).
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await
        .expect("checkpoint");
    conn.close().await.expect("close");
    std::fs::copy(&path, &v5).expect("copy for the reference");
    let mut conn = raw(&v5).await;
    sqlx::raw_sql(SCHEMA_V5_INDEXES)
        .execute(&mut conn)
        .await
        .expect("schema v5 indexes");
    conn.close().await.expect("close");
    let ledger = SqliteLedger::open_with(&path, options.clone())
        .await
        .expect("open ledger");
    let reference = SqliteLedger::open_with(&v5, options)
        .await
        .expect("open reference");
    (ledger, reference, start.elapsed())
}

/// A signed `ticket.created` event of the fake vendor's mapping, naming the operation id `op`
/// (or none) and the ticket `reference`.
fn delivery(signer: &Signer, event_id: &str, op: Option<&str>, reference: &str) -> SignedDelivery {
    let body = json!({
        "event": {"id": event_id, "type": "ticket.created"},
        "tenant": TENANT,
        "ticket": {
            "id": reference,
            "status": "SUCCEEDED",
            "operation_id": op,
            "idempotency_key": null,
        }
    });
    signer.sign(event_id, &body, SystemTime::now())
}

struct Setup {
    rows: u64,
    ledger: SqliteLedger,
    reference: SqliteLedger,
    receiver: CallbackReceiver,
    again: SignedDelivery,
}

/// Median ns per call of every round, keyed by (benchmark, rows).
type Samples = BTreeMap<(&'static str, u64), Vec<f64>>;

fn per_call(elapsed: Duration, calls: u64) -> f64 {
    elapsed.as_nanos() as f64 / calls.max(1) as f64
}

async fn deliver_all(receiver: &CallbackReceiver, deliveries: &[SignedDelivery]) -> Duration {
    let start = Instant::now();
    for d in deliveries {
        let receipt = receiver.receive(&d.headers, &d.body).await;
        assert!(
            matches!(&receipt.outcomes[..], [DeliveryOutcome::Quarantined { .. }]),
            "{receipt:?}"
        );
    }
    start.elapsed()
}

async fn round(setups: &[Setup], signer: &Signer, next: &AtomicU64, samples: &mut Samples) {
    let fresh = || next.fetch_add(1, Ordering::Relaxed);
    let tenant = Tenant::new(TENANT);
    for s in setups {
        // Signed before the clock starts: the HMAC is the same at every size.
        let by_id: Vec<SignedDelivery> = (0..CALLS)
            .map(|_| {
                let n = fresh();
                let op = format!("op-missing-{n}");
                delivery(signer, &format!("evt_id_{n}"), Some(&op), &format!("WX{n}"))
            })
            .collect();
        let by_ref: Vec<SignedDelivery> = (0..CALLS)
            .map(|_| {
                let n = fresh();
                delivery(signer, &format!("evt_ref_{n}"), None, &format!("WX{n}"))
            })
            .collect();
        let t = deliver_all(&s.receiver, &by_id).await;
        samples
            .entry(("unmatched/by_operation_id", s.rows))
            .or_default()
            .push(per_call(t, CALLS));
        let t = deliver_all(&s.receiver, &by_ref).await;
        samples
            .entry(("unmatched/by_reference", s.rows))
            .or_default()
            .push(per_call(t, CALLS));

        let start = Instant::now();
        for _ in 0..CALLS {
            let receipt = s.receiver.receive(&s.again.headers, &s.again.body).await;
            assert_eq!(receipt.outcomes, [DeliveryOutcome::Duplicate]);
        }
        samples
            .entry(("unmatched/redelivery", s.rows))
            .or_default()
            .push(per_call(start.elapsed(), CALLS));

        // What the receiver reads for an unmatched event before its quarantine write.
        let start = Instant::now();
        for _ in 0..CALLS {
            let n = fresh();
            let (event, op) = (format!("evt_reads_{n}"), format!("op-missing-{n}"));
            assert!(!s.ledger.callback_seen("fake-vendor", &event).await.unwrap());
            let id = OperationId::new(op.as_str());
            assert!(s.ledger.get(&tenant, &id).await.unwrap().is_none());
            let other = s
                .ledger
                .other_tenant_with(&tenant, ProbeBy::OperationId, &op);
            assert!(other.await.unwrap().is_none());
        }
        samples
            .entry(("unmatched/matching_reads", s.rows))
            .or_default()
            .push(per_call(start.elapsed(), CALLS));

        let query = OperationQuery::all_tenants()
            .states(State::ALL)
            .text(TextMatch::Exact(format!("op-missing-{}", fresh())))
            .limit(2);
        let start = Instant::now();
        for _ in 0..REFERENCE_CALLS {
            assert!(s.reference.list(&query).await.unwrap().rows.is_empty());
        }
        samples
            .entry(("reference/v5_cross_tenant_listing", s.rows))
            .or_default()
            .push(per_call(start.elapsed(), REFERENCE_CALLS));
    }
}

fn label(rows: u64) -> String {
    match rows {
        r if r >= 1_000_000 && r % 1_000_000 == 0 => format!("{}M", r / 1_000_000),
        r if r >= 1_000 && r % 1_000 == 0 => format!("{}k", r / 1_000),
        r => r.to_string(),
    }
}

fn main() {
    let sizes = sizes();
    let rounds = rounds(7);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = Secret::new(SECRET).expect("secret");
    let signer = Signer::stripe(secret.clone());
    let next = AtomicU64::new(0);
    let mut samples = Samples::new();
    rt.block_on(async {
        let mut setups = Vec::new();
        for &rows in &sizes {
            let (ledger, reference, setup) = filled(dir.path(), rows).await;
            println!(
                "setup: {rows} finished operations (and the schema v5 copy) in {:.1} s",
                setup.as_secs_f64()
            );
            let rw = RecoverableWrite::builder(ledger.clone())
                .build()
                .expect("configuration");
            let receiver = CallbackReceiver::new(
                &rw,
                ticket_mapping(),
                StripeSignature::new(secret.clone()),
                AccountTenants::default().account(TENANT, TENANT),
            );
            let again = delivery(&signer, "evt_again", Some("op-missing-again"), "WX-again");
            deliver_all(&receiver, std::slice::from_ref(&again)).await;
            setups.push(Setup {
                rows,
                ledger,
                reference,
                receiver,
                again,
            });
        }
        // A warm-up round, not recorded.
        round(&setups, &signer, &next, &mut Samples::new()).await;
        for r in 0..rounds {
            let start = Instant::now();
            round(&setups, &signer, &next, &mut samples).await;
            println!(
                "round {}/{rounds} in {:.1} s",
                r + 1,
                start.elapsed().as_secs_f64()
            );
        }
        for s in setups {
            s.ledger.close().await;
            s.reference.close().await;
        }
    });

    println!(
        "\nan unmatched callback delivery (SQLite synchronous=OFF), median of {rounds} rounds, us \
         per call; target: flat within 2x"
    );
    let mut header = format!("{:<36}", "benchmark");
    for &rows in &sizes {
        header.push_str(&format!(" {:>10}", label(rows)));
    }
    header.push_str(&format!(" {:>9} {:>8}", "ratio", "target"));
    println!("{header}");
    let names: Vec<&'static str> = samples.keys().map(|(n, _)| *n).collect();
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        if !seen.insert(name) {
            continue;
        }
        let medians: Vec<f64> = sizes
            .iter()
            .filter_map(|&rows| samples.get_mut(&(name, rows)).map(|v| median(v)))
            .collect();
        let mut line = format!("{name:<36}");
        for m in &medians {
            line.push_str(&format!(" {:>10.1}", m / 1000.0));
        }
        let ratio = medians[medians.len() - 1] / medians[0];
        let target = if name.starts_with("reference/") {
            "(before)"
        } else if ratio <= 2.0 {
            "met"
        } else {
            "NOT met"
        };
        line.push_str(&format!(" {ratio:>8.2}x {target:>8}"));
        println!("{line}");
    }
}
