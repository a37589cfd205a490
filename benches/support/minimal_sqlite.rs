//! The minimal SQLite reference (issue 29 item 1): the least work the layer's semantics allow,
//! written without the crate's code, schema or statements. A limit, not a copy.
//!
//! Per operation, two writes, as the semantics need:
//! 1. the **claim**, durable before the send: one `INSERT` of one row holding the operation's
//!    identity, its idempotency key, the payload hash, the frozen request (method, URL,
//!    headers and body in one blob) and the claim's evidence (attempt id and time, one text);
//!    the caller is released only after the `COMMIT` of its batch at `synchronous=FULL`;
//! 2. the **result**, recorded after the send: one `UPDATE` of the same row (status and
//!    response body), queued without the caller waiting (the crate's detached results), and
//!    committed with the next batch; a batch of results only commits at `synchronous=NORMAL`
//!    (no fsync), as the crate commits them.
//!
//! One table of its own, `WITHOUT ROWID`, keyed by the operation id (the primary key), with the
//! one uniqueness constraint the semantics need (the idempotency key); no other index, no
//! evidence log, no version column. One dedicated OS thread owns the `rusqlite` connection (WAL,
//! cached prepared statements) and commits whatever is queued as one transaction, up to
//! `max_batch` writes (never waiting for more): group commit, with the same hand-offs as the
//! crate's writer (a `std::sync::mpsc` queue in, a `tokio` oneshot out).
// Each bench uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::oneshot;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS minimal_ops (
    operation_id TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    payload_hash TEXT NOT NULL,
    request BLOB NOT NULL,
    claim TEXT NOT NULL,
    status INTEGER,
    response BLOB
) WITHOUT ROWID";

const CLAIM: &str = "INSERT INTO minimal_ops \
     (operation_id, idempotency_key, payload_hash, request, claim) VALUES (?1, ?2, ?3, ?4, ?5)";

const RESULT: &str = "UPDATE minimal_ops SET status = ?2, response = ?3 WHERE operation_id = ?1";

/// A claim: the row written before the send.
pub struct Claim {
    pub operation_id: String,
    pub idempotency_key: String,
    pub payload_hash: String,
    pub request: Vec<u8>,
    pub evidence: String,
}

enum Job {
    Claim(Claim, oneshot::Sender<bool>),
    Result {
        operation_id: String,
        status: i64,
        response: Vec<u8>,
    },
    /// Answered once everything queued before it is committed.
    Flush(oneshot::Sender<()>),
}

/// A handle on the minimal reference's writer thread (cloned freely; the thread ends with the
/// last handle).
#[derive(Clone)]
pub struct MinimalSqlite {
    queue: mpsc::Sender<Job>,
    commits: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
}

impl MinimalSqlite {
    /// Opens (creates) `path` with the reference's one table and starts its writer thread.
    pub fn open(path: &Path, max_batch: usize) -> Self {
        let conn = Connection::open(path).expect("open the minimal reference's file");
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")
            .expect("pragmas");
        conn.execute_batch(SCHEMA).expect("schema");
        let (queue, rx) = mpsc::channel();
        let (commits, writes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stats = (commits.clone(), writes.clone());
        std::thread::Builder::new()
            .name("minimal-sqlite-writer".into())
            .spawn(move || writer(conn, rx, max_batch, stats))
            .expect("writer thread");
        Self {
            queue,
            commits,
            writes,
        }
    }

    /// Writes the claim and waits for its durable commit; whether it was inserted.
    pub async fn claim(&self, claim: Claim) -> bool {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job::Claim(claim, reply))
            .expect("writer running");
        answer.await.expect("writer answers")
    }

    /// Queues the result; the caller does not wait for it.
    pub fn record_detached(&self, operation_id: String, status: i64, response: Vec<u8>) {
        self.queue
            .send(Job::Result {
                operation_id,
                status,
                response,
            })
            .expect("writer running");
    }

    /// Waits until everything queued so far is committed.
    pub async fn wait_for_results(&self) {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Job::Flush(reply)).expect("writer running");
        answer.await.expect("writer answers");
    }

    /// Transactions committed so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Writes (claims and results) committed so far.
    pub fn committed_writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

fn writer(
    conn: Connection,
    rx: mpsc::Receiver<Job>,
    max_batch: usize,
    (commits, writes): (Arc<AtomicU64>, Arc<AtomicU64>),
) {
    conn.set_prepared_statement_cache_capacity(8);
    let mut batch: Vec<Job> = Vec::with_capacity(max_batch);
    let mut durable = true;
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let writes_in_batch = batch.iter().filter(|j| !matches!(j, Job::Flush(_))).count();
        if writes_in_batch > 0 {
            // Only a claim must reach the disk before its caller goes on.
            let want = batch.iter().any(|j| matches!(j, Job::Claim(..)));
            if want != durable {
                let pragma = if want {
                    "PRAGMA synchronous = FULL"
                } else {
                    "PRAGMA synchronous = NORMAL"
                };
                conn.execute_batch(pragma).expect("synchronous");
                durable = want;
            }
            conn.prepare_cached("BEGIN IMMEDIATE")
                .and_then(|mut s| s.execute([]))
                .expect("BEGIN");
        }
        let mut inserted = Vec::with_capacity(batch.len());
        for job in &batch {
            inserted.push(match job {
                Job::Claim(c, _) => {
                    conn.prepare_cached(CLAIM)
                        .and_then(|mut s| {
                            s.execute(rusqlite::params![
                                c.operation_id,
                                c.idempotency_key,
                                c.payload_hash,
                                c.request,
                                c.evidence
                            ])
                        })
                        .expect("claim")
                        == 1
                }
                Job::Result {
                    operation_id,
                    status,
                    response,
                } => {
                    let n = conn
                        .prepare_cached(RESULT)
                        .and_then(|mut s| {
                            s.execute(rusqlite::params![operation_id, status, response])
                        })
                        .expect("result");
                    assert_eq!(n, 1, "the result's row exists");
                    true
                }
                Job::Flush(_) => true,
            });
        }
        if writes_in_batch > 0 {
            conn.prepare_cached("COMMIT")
                .and_then(|mut s| s.execute([]))
                .expect("COMMIT");
            commits.fetch_add(1, Ordering::Relaxed);
            writes.fetch_add(writes_in_batch as u64, Ordering::Relaxed);
        }
        for (job, ok) in batch.drain(..).zip(inserted) {
            match job {
                Job::Claim(_, reply) => {
                    let _ = reply.send(ok);
                }
                Job::Flush(reply) => {
                    let _ = reply.send(());
                }
                Job::Result { .. } => {}
            }
        }
    }
}

/// A payload hash: 64 bits of std's SipHash, in hex. Cheaper than the crate's SHA-256 over the
/// canonical JSON (about a microsecond natively): the reference stays a lower bound.
pub fn payload_hash(method: &str, url: &str, body: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    method.hash(&mut h);
    url.hash(&mut h);
    body.hash(&mut h);
    format!("{:016x}", h.finish())
}

impl MinimalSqlite {
    /// One operation without HTTP (`ledger_commit`): the claim of the bench's request with a
    /// fresh operation id, key and attempt id (as the crate makes them: see [`operation_id`],
    /// random UUID v4s for the key and the attempt),
    /// waited for; then its `201` result, queued without waiting.
    pub async fn lifecycle(&self) {
        const BODY: &[u8] = br#"{"device_id":"E17","priority":"P2"}"#;
        const URL: &str = "http://127.0.0.1:8080/tickets";
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("application/json"),
        );
        let operation_id = operation_id();
        let claim = Claim {
            operation_id: operation_id.clone(),
            idempotency_key: uuid::Uuid::new_v4().hyphenated().to_string(),
            payload_hash: payload_hash("POST", URL, BODY),
            request: crate::support::freeze("POST", &URL, &headers, BODY),
            evidence: claim_evidence(),
        };
        assert!(self.claim(claim).await, "a fresh operation id and key");
        self.record_detached(operation_id, 201, br#"{"id":"W1"}"#.to_vec());
    }
}

/// A fresh operation id, as the crate makes one: `op-` and a UUID v7 (time-ordered, so new rows
/// append to the primary key's last page).
pub fn operation_id() -> String {
    format!("op-{}", uuid::Uuid::now_v7().simple())
}

/// The claim's evidence: its attempt id (a random UUID v4) and when it was made.
pub fn claim_evidence() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!(
        "claimed attempt {} at {ms}",
        uuid::Uuid::new_v4().hyphenated()
    )
}
