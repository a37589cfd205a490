//! The minimal PostgreSQL ledger (feature `postgres`): the limit the crate's PostgresLedger is
//! measured against, written WITHOUT the crate's code, schema or statements.
//!
//! The least work the semantics allow, per request:
//! 1. before the send, one statement makes the claim durable (`synchronous_commit = on`, set
//!    for every session at connect): the operation's identity, its idempotency key (unique per
//!    tenant), a hash of the payload, the frozen request (method, URL, headers, body) and the
//!    claim's evidence, in one row;
//! 2. after the answer, one statement records the result on that row, committed without
//!    waiting for the WAL flush (`set_config('synchronous_commit', 'off', true)` in the
//!    statement, as the crate does for its result).
//!
//! One table, its primary key and the uniqueness constraint, nothing else; a pool of 8
//! tokio-postgres connections (a semaphore and a free list), each with the two statements
//! prepared once (plain `INSERT` and `UPDATE` by primary key: their generic plans are safe).
#![allow(dead_code)]

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::sync::Semaphore;
use tokio_postgres::{Client, NoTls, Statement};
use tower::BoxError;
use tower::util::BoxCloneService;

use crate::support::{Svc, client, freeze, now_ms};

/// The schema the reference makes afresh (dropped first).
const SCHEMA: &str = "rw_bench_minimal";

/// One pooled connection and its prepared statements.
struct Conn {
    client: Client,
    claim: Statement,
    result: Statement,
}

/// The minimal ledger over its pool of 8 connections.
#[derive(Clone)]
pub struct MinimalPostgres {
    free: Arc<Mutex<Vec<Conn>>>,
    permits: Arc<Semaphore>,
    next: Arc<AtomicU64>,
}

/// Borrowed from the pool; given back on drop.
struct Lease<'a> {
    pool: &'a MinimalPostgres,
    conn: Option<Conn>,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.free.lock().expect("pool").push(conn);
        }
    }
}

impl MinimalPostgres {
    /// Creates the schema (dropped first) and the pool; `None` with a note if no server answers.
    pub async fn open(url: &str, size: usize) -> Option<Self> {
        let mut config: tokio_postgres::Config = match url.parse() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("minimal_postgres skipped: RW_POSTGRES_URL does not parse ({e})");
                return None;
            }
        };
        // Claims are durable before the send, whatever the role or database default.
        config.options("-c synchronous_commit=on");
        let mut conns = Vec::with_capacity(size);
        for i in 0..size {
            let (client, connection) = match config.connect(NoTls).await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("minimal_postgres skipped: no PostgreSQL at RW_POSTGRES_URL ({e})");
                    return None;
                }
            };
            tokio::spawn(async move {
                let _ = connection.await;
            });
            if i == 0 {
                client
                    .batch_execute(&format!(
                        "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE;
                         CREATE SCHEMA {SCHEMA};
                         CREATE TABLE {SCHEMA}.operations (
                             operation_id    TEXT   PRIMARY KEY,
                             tenant          TEXT   NOT NULL,
                             idempotency_key TEXT   NOT NULL,
                             payload_hash    BIGINT NOT NULL,
                             request         BYTEA  NOT NULL,
                             claim_evidence  TEXT   NOT NULL,
                             claimed_ms      BIGINT NOT NULL,
                             result_status   INTEGER,
                             result_body     BYTEA,
                             result_evidence TEXT,
                             finished_ms     BIGINT,
                             UNIQUE (tenant, idempotency_key)
                         );"
                    ))
                    .await
                    .expect("the minimal reference's table");
            }
            let claim = client
                .prepare(&format!(
                    "INSERT INTO {SCHEMA}.operations (operation_id, tenant, idempotency_key, \
                     payload_hash, request, claim_evidence, claimed_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)"
                ))
                .await
                .expect("prepare the claim");
            let result = client
                .prepare(&format!(
                    "UPDATE {SCHEMA}.operations SET result_status = $2, result_body = $3, \
                     result_evidence = $4, finished_ms = $5 \
                     WHERE operation_id = $1 \
                       AND set_config('synchronous_commit', 'off', true) = 'off'"
                ))
                .await
                .expect("prepare the result");
            conns.push(Conn {
                client,
                claim,
                result,
            });
        }
        Some(Self {
            free: Arc::new(Mutex::new(conns)),
            permits: Arc::new(Semaphore::new(size)),
            next: Arc::new(AtomicU64::new(0)),
        })
    }

    async fn lease(&self) -> Lease<'_> {
        let permit = self.permits.acquire().await.expect("pool open");
        let conn = self
            .free
            .lock()
            .expect("pool")
            .pop()
            .expect("a free connection");
        Lease {
            pool: self,
            conn: Some(conn),
            _permit: permit,
        }
    }

    /// The durable claim, before the send. Returns the operation id.
    pub async fn claim(&self, key: &str, payload_hash: i64, request: &[u8]) -> String {
        let id = format!("op-{:012}", self.next.fetch_add(1, Ordering::Relaxed));
        let lease = self.lease().await;
        let c = lease.conn.as_ref().expect("leased");
        let evidence = r#"{"kind":"attempt_registered"}"#;
        let n = c
            .client
            .execute(
                &c.claim,
                &[
                    &id,
                    &"tenant-a",
                    &key,
                    &payload_hash,
                    &request,
                    &evidence,
                    &now_ms(),
                ],
            )
            .await
            .expect("minimal claim");
        assert_eq!(n, 1, "minimal claim");
        id
    }

    /// The result, after the answer, committed without waiting for the WAL flush.
    pub async fn result(&self, id: &str, status: u16, body: &[u8]) {
        let lease = self.lease().await;
        let c = lease.conn.as_ref().expect("leased");
        let evidence = r#"{"kind":"succeeded"}"#;
        let n = c
            .client
            .execute(
                &c.result,
                &[&id, &i32::from(status), &body, &evidence, &now_ms()],
            )
            .await
            .expect("minimal result");
        assert_eq!(n, 1, "minimal result");
    }

    /// The same POST as `bare`, between a claim and a result of this ledger: a fresh
    /// idempotency key (sent as a header), the frozen request and a hash of its body claimed
    /// before the send, the status and body recorded after.
    pub fn service(&self) -> Svc {
        let ledger = self.clone();
        let client = client();
        let hasher = std::collections::hash_map::RandomState::new();
        BoxCloneService::new(tower::service_fn(move |req: Request<Full<Bytes>>| {
            let (ledger, client) = (ledger.clone(), client.clone());
            let mut h = hasher.build_hasher();
            async move {
                let (mut parts, body) = req.into_parts();
                let body = body.collect().await?.to_bytes();
                let key = uuid::Uuid::new_v4().to_string();
                parts.headers.insert("idempotency-key", key.parse()?);
                let frozen = freeze(parts.method.as_str(), &parts.uri, &parts.headers, &body);
                h.write(&body);
                let id = ledger.claim(&key, h.finish() as i64, &frozen).await;
                let res = client
                    .request(Request::from_parts(parts, Full::new(body)))
                    .await?;
                let status = res.status().as_u16();
                let answer = res.into_body().collect().await?.to_bytes();
                ledger.result(&id, status, &answer).await;
                Ok::<u16, BoxError>(status)
            }
        }))
    }
}
