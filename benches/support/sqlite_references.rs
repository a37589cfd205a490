//! The SQLite references of `overhead` (issue 29 item 1): the same POST through the bare
//! client, with a ledger reference's claim committed before the send and its result queued
//! after (detached, as the layer records it), and no code of the crate on the request's path.
//!
//! - `minimal_sqlite`: the minimal reference (`minimal_sqlite.rs`): its own one-row schema and
//!   two statements; per request it freezes the request, hashes the payload and makes the
//!   operation id (a UUID v7, as the crate), the key and the attempt id (random UUID v4s), and
//!   sends the key as the `idempotency-key` header.
//! - `reference_service`: that request path for any reference's store.
//! - `crate_statements_sqlite`: the crate's own schema and statement texts on one rusqlite
//!   thread (`crate_statements_sqlite.rs`), with one real operation's values (no freezing, no
//!   hashing per request).
// Each bench uses part of it.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use tower::BoxError;
use tower::util::BoxCloneService;

use crate::crate_statements_sqlite::RawLedger;
use crate::minimal_sqlite::{Claim, MinimalSqlite, claim_evidence, operation_id, payload_hash};
use crate::support::{Svc, client, freeze};

/// A ledger whose group commit the bench counts, and whose detached results a timed run waits
/// for.
pub trait Counted: Send + Sync {
    /// (commits, committed writes) so far.
    fn counters(&self) -> (u64, u64);
    /// Waits until every result queued so far is committed.
    fn landed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

impl Counted for recoverable_write::SqliteLedger {
    fn counters(&self) -> (u64, u64) {
        (self.commits(), self.committed_writes())
    }
    fn landed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.wait_for_results())
    }
}

impl Counted for MinimalSqlite {
    fn counters(&self) -> (u64, u64) {
        (self.commits(), self.committed_writes())
    }
    fn landed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.wait_for_results())
    }
}

impl Counted for RawLedger {
    fn counters(&self) -> (u64, u64) {
        (self.commits(), self.committed_writes())
    }
    fn landed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.wait_for_results())
    }
}

/// A reference's store, as the request path every reference shares sees it
/// ([`reference_service`]): a claim written before the send, the result after.
pub trait ReferenceStore: Clone + Send + Sync + 'static {
    /// Where the claim's row is, for its result.
    type Slot: Send;
    /// Writes the claim (waiting for what the reference waits for); `None` if refused.
    fn claim(&self, claim: Claim) -> impl Future<Output = Option<Self::Slot>> + Send;
    /// Writes (or queues) the result.
    fn record(&self, slot: Self::Slot, status: u16, response: Bytes);
}

impl ReferenceStore for MinimalSqlite {
    type Slot = String;
    async fn claim(&self, claim: Claim) -> Option<String> {
        let operation_id = claim.operation_id.clone();
        MinimalSqlite::claim(self, claim)
            .await
            .then_some(operation_id)
    }
    fn record(&self, operation_id: String, status: u16, response: Bytes) {
        self.record_detached(operation_id, i64::from(status), response.to_vec());
    }
}

/// The bare client with `store`'s claim before the send and its result after: per request,
/// the body read and frozen, the payload hashed, the operation id (a UUID v7, as the crate),
/// the key (a random UUID v4) and the claim's evidence made, the key sent as the
/// `idempotency-key` header, and the response's body read for the result.
pub fn reference_service<S: ReferenceStore>(store: S) -> Svc {
    let client = client();
    BoxCloneService::new(tower::service_fn(move |req: Request<Full<Bytes>>| {
        let (store, client) = (store.clone(), client.clone());
        async move {
            let (mut parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            let url = parts.uri.to_string();
            let method = parts.method.as_str();
            let key = uuid::Uuid::new_v4().hyphenated().to_string();
            let claim = Claim {
                operation_id: operation_id(),
                idempotency_key: key.clone(),
                payload_hash: payload_hash(method, &url, &body),
                request: freeze(method, &url, &parts.headers, &body),
                evidence: claim_evidence(),
            };
            let Some(slot) = store.claim(claim).await else {
                return Err(BoxError::from("reference: claim refused"));
            };
            parts
                .headers
                .insert("idempotency-key", HeaderValue::from_str(&key)?);
            let res = client
                .request(Request::from_parts(parts, Full::new(body)))
                .await?;
            let status = res.status().as_u16();
            let response = res.into_body().collect().await?.to_bytes();
            store.record(slot, status, response);
            Ok(status)
        }
    }))
}

/// The bare client with the minimal reference's claim before the send and result after.
pub fn minimal_sqlite(ledger: MinimalSqlite) -> Svc {
    reference_service(ledger)
}

/// The bare client with the crate-statements reference's claim before the send and its result
/// after (detached).
pub fn crate_statements_sqlite(ledger: RawLedger) -> Svc {
    let client = client();
    BoxCloneService::new(tower::service_fn(move |req: Request<Full<Bytes>>| {
        let (ledger, client) = (ledger.clone(), client.clone());
        async move {
            let (mut parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            let n = ledger.create().await;
            let key = uuid::Uuid::new_v4().hyphenated().to_string();
            parts
                .headers
                .insert("idempotency-key", HeaderValue::from_str(&key)?);
            let res = client
                .request(Request::from_parts(parts, Full::new(body)))
                .await?;
            let status = res.status().as_u16();
            res.into_body().collect().await?;
            ledger.finish_detached(n);
            Ok(status)
        }
    }))
}
