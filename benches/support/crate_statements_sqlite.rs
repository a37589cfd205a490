//! The crate-statements SQLite reference (`crate_statements_sqlite`, formerly the "raw
//! reference"): the rows one request through the layer writes, on the crate's own schema with
//! the crate's own statement texts, run by one rusqlite thread and no other code of the crate.
//! It measures the crate's code against its own schema and statements, so it cannot see what
//! the schema and the statements cost: for that, see the minimal reference
//! (`benches/support/minimal_sqlite.rs`).
//!
//! One dedicated OS thread owns a `rusqlite` connection to a file with the crate's own schema
//! (its migrations, every index included), WAL, `synchronous=FULL`, foreign keys on and
//! `temp_store=MEMORY`, as the crate opens its writer. Callers hand requests over an unbounded
//! channel; the thread takes whatever is queued, up to `max_batch` (never waiting for more),
//! runs it in one `BEGIN IMMEDIATE` transaction with cached prepared statements, commits, and
//! only then answers every caller: the crate's group commit without its per-statement hand-off
//! to sqlx's connection thread.
//!
//! Per operation, as the crate's `create_and_apply` then `apply`:
//! 1. `INSERT` of the whole claimed operation row (`ON CONFLICT DO NOTHING`) and, if it was
//!    inserted, two evidence rows (`created`, `attempt_registered`);
//! 2. the crate's conditional `UPDATE` (same text, but no `RETURNING *`: the reference needs no
//!    row back) and, if it changed the row, one evidence row.
//!
//! The values are those of a real operation the crate wrote (read back from its file, see
//! [`Template::capture`]), with the operation id and intent made unique (as the bench numbers
//! the crate's operations) and a fresh random idempotency key (as the crate makes one).
// Each bench uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::types::Value;
use rusqlite::{Connection, ToSql, params_from_iter};
use tokio::sync::{mpsc, oneshot};

/// Every column of `rw_operations` the crate writes, in table order (the two quarantine
/// columns stay NULL).
pub const OPERATION_COLUMNS: &str = "tenant, operation_id, action, intent_ref, idempotency_key, \
     payload_hash, request_method, request_url, request_headers, request_body, contract_name, \
     contract_hash, budget_policy, state, last_result, generation, version, attempts_used, \
     queries_used, may_have_applied, current_attempt, lease_until_ms, next_check_ms, deadline_ms, \
     remote_ref, reason, response_status, response_headers, response_body, created_ms, updated_ms";

/// The evidence columns but the id.
pub const EVIDENCE_COLUMNS: &str = "tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms";

const INSERT_OPERATION: &str = "INSERT INTO rw_operations (tenant, operation_id, action, \
     intent_ref, idempotency_key, payload_hash, request_method, request_url, request_headers, \
     request_body, contract_name, contract_hash, budget_policy, state, last_result, generation, \
     version, attempts_used, queries_used, may_have_applied, current_attempt, lease_until_ms, \
     next_check_ms, deadline_ms, remote_ref, reason, response_status, response_headers, \
     response_body, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, \
     ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, \
     ?29, ?30, ?31) ON CONFLICT DO NOTHING";

const INSERT_EVIDENCE: &str = "INSERT INTO rw_evidence (tenant, operation_id, attempt_id, \
     generation, kind, from_state, to_state, evidence, note, at_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// The crate's `APPLY` update (src/ledger/sqlite/sql.rs) without its `RETURNING *`.
const APPLY: &str = "
UPDATE rw_operations SET
    state = ?1,
    last_result = ?2,
    generation = ?3,
    attempts_used = ?4,
    queries_used = ?5,
    may_have_applied = CASE WHEN ?6 THEN ?7 ELSE MAX(may_have_applied, ?7) END,
    current_attempt = ?8,
    lease_until_ms = ?9,
    next_check_ms = ?10,
    deadline_ms = ?11,
    remote_ref = ?12,
    reason = ?13,
    response_status = ?14,
    response_headers = ?15,
    response_body = ?16,
    updated_ms = ?17,
    version = version + 1
WHERE tenant = ?18 AND operation_id = ?19
  AND state = ?20 AND generation = ?21 AND version = ?22
  AND NOT (?1 = 'REJECTED' AND may_have_applied = 1 AND ?23 = 0)";

/// One tiny row per commit: what a commit (one fsync) costs here.
const INSERT_TICK: &str = "INSERT INTO ref_tick (v) VALUES (?1)";

/// The values one operation writes, read back from a row the crate wrote.
#[derive(Clone, Debug)]
pub struct Template {
    /// The claimed row as `create_and_apply` inserted it ([`OPERATION_COLUMNS`]).
    pub claimed: Vec<Value>,
    /// The `created` and `attempt_registered` entries ([`EVIDENCE_COLUMNS`]).
    pub first_entries: [Vec<Value>; 2],
    /// The row after `apply` recorded the result ([`OPERATION_COLUMNS`]).
    pub finished: Vec<Value>,
    /// The result's entry ([`EVIDENCE_COLUMNS`]).
    pub finish_entry: Vec<Value>,
}

impl Template {
    /// The bytes of the operation row as inserted (text and blob lengths): about 600.
    pub fn row_bytes(&self) -> usize {
        self.claimed
            .iter()
            .map(|v| match v {
                Value::Text(s) => s.len(),
                Value::Blob(b) => b.len(),
                Value::Integer(_) | Value::Real(_) => 8,
                Value::Null => 0,
            })
            .sum()
    }
}

/// What the writer thread is asked to do.
enum Op {
    /// Step 1 of operation `n`.
    Create(u64),
    /// Step 2 of operation `n`.
    Finish(u64),
    /// One tiny row.
    Tick(u64),
    /// Nothing: answered once everything queued before it is committed.
    Flush,
}

struct Request {
    op: Op,
    reply: oneshot::Sender<bool>,
}

/// A handle on the reference's writer thread (cloned freely; the thread ends with the last).
#[derive(Clone)]
pub struct RawLedger {
    queue: mpsc::UnboundedSender<Request>,
    next: Arc<AtomicU64>,
    commits: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
}

/// A fresh idempotency key, as the crate makes one: a random UUID v4 (36 characters). The
/// reference writes the same rows as the crate, and a random key lands on a random page of the
/// key's index, where a counter would append to its last page.
pub fn random_key() -> Value {
    Value::Text(uuid::Uuid::new_v4().hyphenated().to_string())
}

/// One operation's unique values, the same length as the template's.
pub fn unique(template: &Value, n: u64) -> Value {
    match template {
        Value::Text(s) => {
            let tail = format!("{n:x}");
            let keep = s.len().saturating_sub(tail.len());
            Value::Text(format!("{}{tail}", &s[..keep]))
        }
        other => other.clone(),
    }
}

impl RawLedger {
    /// Opens `path` with the given schema (the crate's, see [`schema_of`]), and starts the
    /// writer thread.
    pub fn open(path: &Path, schema: &[String], template: Template, max_batch: usize) -> Self {
        let conn = Connection::open(path).expect("open the reference's file");
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
             PRAGMA temp_store = MEMORY;",
        )
        .expect("pragmas");
        for migration in schema {
            conn.execute_batch(migration).expect("schema");
        }
        conn.execute_batch("CREATE TABLE ref_tick (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
            .expect("tick table");
        let (queue, rx) = mpsc::unbounded_channel();
        let (commits, writes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stats = (commits.clone(), writes.clone());
        std::thread::Builder::new()
            .name("raw-sqlite-writer".into())
            .spawn(move || writer(conn, rx, template, max_batch, stats))
            .expect("writer thread");
        Self {
            queue,
            next: Arc::new(AtomicU64::new(0)),
            commits,
            writes,
        }
    }

    async fn call(&self, op: Op) {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Request { op, reply })
            .expect("writer running");
        assert!(answer.await.expect("writer answers"), "reference write");
    }

    /// One operation: its two writes, each committed before the next.
    pub async fn lifecycle(&self) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.call(Op::Create(n)).await;
        self.call(Op::Finish(n)).await;
    }

    /// Step 1 of a new operation, committed (durable); its number, for [`Self::finish_detached`].
    pub async fn create(&self) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.call(Op::Create(n)).await;
        n
    }

    /// Step 2 of operation `n`, queued without waiting (as the crate records results
    /// detached); a batch of such steps only commits at `synchronous=NORMAL`, as the crate's.
    pub fn finish_detached(&self, n: u64) {
        let (reply, _) = oneshot::channel();
        self.queue
            .send(Request {
                op: Op::Finish(n),
                reply,
            })
            .expect("writer running");
    }

    /// Waits until everything queued so far is committed.
    pub async fn wait_for_results(&self) {
        self.call(Op::Flush).await;
    }

    /// One tiny row, committed.
    pub async fn tick(&self) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.call(Op::Tick(n)).await;
    }

    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    pub fn committed_writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

fn writer(
    conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Request>,
    t: Template,
    max_batch: usize,
    (commits, writes): (Arc<AtomicU64>, Arc<AtomicU64>),
) {
    conn.set_prepared_statement_cache_capacity(16);
    let mut batch: Vec<Request> = Vec::with_capacity(max_batch);
    let mut durable = true;
    // Parameters of one step, rebuilt per request from the template (references only, but the
    // three unique values).
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        // A batch of results only (detached, see `finish_detached`) commits without an fsync,
        // as the crate's writer commits it. (`lifecycle` waits for its results: every batch
        // of `ledger_commit`'s runs holds a claim or is a result waited for, as before.)
        let want = batch.iter().any(|r| match r.op {
            Op::Finish(_) => !r.reply.is_closed(),
            Op::Flush => false,
            Op::Create(_) | Op::Tick(_) => true,
        });
        if want != durable {
            conn.execute_batch(if want {
                "PRAGMA synchronous = FULL"
            } else {
                "PRAGMA synchronous = NORMAL"
            })
            .expect("synchronous");
            durable = want;
        }
        conn.prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut s| s.execute([]))
            .expect("BEGIN");
        let mut ok = Vec::with_capacity(batch.len());
        for r in &batch {
            ok.push(run(&conn, &t, &r.op).expect("reference statement"));
        }
        conn.prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]))
            .expect("COMMIT");
        commits.fetch_add(1, Ordering::Relaxed);
        writes.fetch_add(batch.len() as u64, Ordering::Relaxed);
        for (r, ok) in batch.drain(..).zip(ok) {
            let _ = r.reply.send(ok);
        }
    }
}

/// Runs one request's statements; whether its precondition held.
fn run(conn: &Connection, t: &Template, op: &Op) -> rusqlite::Result<bool> {
    match *op {
        Op::Create(n) => {
            let id = unique(&t.claimed[1], n);
            let intent = unique(&t.claimed[3], n);
            let key = random_key();
            let mut p: Vec<&dyn ToSql> = t.claimed.iter().map(|v| v as &dyn ToSql).collect();
            p[1] = &id;
            p[3] = &intent;
            p[4] = &key;
            let inserted = conn
                .prepare_cached(INSERT_OPERATION)?
                .execute(params_from_iter(p))?;
            if inserted != 1 {
                return Ok(false);
            }
            let mut evidence = conn.prepare_cached(INSERT_EVIDENCE)?;
            for entry in &t.first_entries {
                let mut p: Vec<&dyn ToSql> = entry.iter().map(|v| v as &dyn ToSql).collect();
                p[1] = &id;
                evidence.execute(params_from_iter(p))?;
            }
            Ok(true)
        }
        Op::Finish(n) => {
            let id = unique(&t.claimed[1], n);
            let (f, c) = (&t.finished, &t.claimed);
            let zero = Value::Integer(0);
            let (reset, op_level) = (&zero, &zero);
            // ?1..?17 the new values, ?18..?22 the key and the expected state, generation and
            // version, ?23 operation level (see the crate's bind_apply).
            let p: [&dyn ToSql; 23] = [
                &f[13], &f[14], &f[15], &f[17], &f[18], reset, &f[19], &f[20], &f[21], &f[22],
                &f[23], &f[24], &f[25], &f[26], &f[27], &f[28], &f[30], &f[0], &id, &c[13], &c[15],
                &c[16], op_level,
            ];
            let changed = conn.prepare_cached(APPLY)?.execute(p)?;
            if changed != 1 {
                return Ok(false);
            }
            let mut p: Vec<&dyn ToSql> = t.finish_entry.iter().map(|v| v as &dyn ToSql).collect();
            p[1] = &id;
            conn.prepare_cached(INSERT_EVIDENCE)?
                .execute(params_from_iter(p))?;
            Ok(true)
        }
        Op::Tick(n) => {
            conn.prepare_cached(INSERT_TICK)?.execute([n as i64])?;
            Ok(true)
        }
        Op::Flush => Ok(true),
    }
}

/// The reference's values: one real operation of the crate (`create_and_apply`, then the
/// result's `apply`, as the layer writes them), read back from `path`, the file of `ledger`.
/// Setup only: the crate writes the template, the reference never runs crate code.
pub async fn capture(ledger: &recoverable_write::SqliteLedger, path: &Path) -> Template {
    use recoverable_write::ledger::Ledger;
    use recoverable_write::ledger::conformance::{keep, update_of};
    use recoverable_write::state::State;
    let new = crate::support::fresh_operation();
    let first = crate::support::first_claim(&new);
    let r = crate::support::new_row(ledger.create_and_apply(new, first).await.expect("create"));
    let (tenant, id) = (
        r.tenant.as_str().to_owned(),
        r.operation_id.as_str().to_owned(),
    );
    let (claimed_row, first_entries) = read_claimed(path, &tenant, &id);
    let done = keep(&r, State::Succeeded, crate::support::now_ms());
    ledger
        .apply(update_of(&r, done, "attempt_result"))
        .await
        .expect("apply")
        .expect("the result's precondition holds");
    let (finished, finish_entry) = read_finished(path, &tenant, &id);
    Template {
        claimed: claimed_row,
        first_entries,
        finished,
        finish_entry,
    }
}

/// The schema of a file the crate made (tables and indexes, in creation order, without sqlx's
/// migration table): the reference's tables are the crate's, every index included.
pub fn schema_of(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).expect("open the crate's file");
    let mut stmt = conn
        .prepare(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' \
             AND name NOT LIKE '_sqlx%' ORDER BY rowid",
        )
        .expect("schema");
    stmt.query_map([], |row| row.get(0))
        .expect("schema")
        .collect::<Result<_, _>>()
        .expect("schema")
}

/// The claimed row `id` and its first two entries, read back from a file the crate wrote
/// right after `create_and_apply`.
pub fn read_claimed(path: &Path, tenant: &str, id: &str) -> (Vec<Value>, [Vec<Value>; 2]) {
    let conn = Connection::open(path).expect("open the crate's file");
    let row = read_row(&conn, tenant, id);
    let entries = read_entries(&conn, tenant, id);
    assert_eq!(entries.len(), 2, "create_and_apply writes two entries");
    let mut entries = entries.into_iter();
    let first = [
        entries.next().expect("created"),
        entries.next().expect("claim"),
    ];
    (row, first)
}

/// The row after `apply` and its entry.
pub fn read_finished(path: &Path, tenant: &str, id: &str) -> (Vec<Value>, Vec<Value>) {
    let conn = Connection::open(path).expect("open the crate's file");
    let row = read_row(&conn, tenant, id);
    let entries = read_entries(&conn, tenant, id);
    assert_eq!(entries.len(), 3, "apply writes one more entry");
    (row, entries.into_iter().nth(2).expect("result entry"))
}

fn read_row(conn: &Connection, tenant: &str, id: &str) -> Vec<Value> {
    let sql = format!(
        "SELECT {OPERATION_COLUMNS} FROM rw_operations WHERE tenant = ?1 AND operation_id = ?2"
    );
    conn.query_row(&sql, [tenant, id], |row| {
        (0..31).map(|i| row.get::<_, Value>(i)).collect()
    })
    .expect("the crate's row")
}

fn read_entries(conn: &Connection, tenant: &str, id: &str) -> Vec<Vec<Value>> {
    let sql = format!(
        "SELECT {EVIDENCE_COLUMNS} FROM rw_evidence WHERE tenant = ?1 AND operation_id = ?2 \
         ORDER BY id"
    );
    let mut stmt = conn.prepare(&sql).expect("entries");
    stmt.query_map([tenant, id], |row| {
        (0..10).map(|i| row.get::<_, Value>(i)).collect()
    })
    .expect("entries")
    .collect::<Result<_, _>>()
    .expect("entries")
}
