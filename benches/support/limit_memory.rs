//! The in-memory limit: the least work the layer's semantics allow for a write when the ledger
//! is the process's memory, written without the crate's code, types or rows (issue 29 item 4:
//! "show what the limit is"). Per request, and nothing more:
//!
//! - the request's body read (it must be frozen and may have to be resent);
//! - the operation id (a UUID v7, as the crate), the idempotency key and the attempt id (random
//!   UUID v4s), kept as 16 bytes each, never as strings;
//! - the payload hash: SHA-256 over method, URL and body (stable across processes and
//!   versions, as a hash that detects a changed payload after a restart must be), 32 bytes;
//! - the frozen request: method, URL, headers and body in one buffer (one allocation);
//! - the **claim**: one fixed-size row (identity, key, hash, attempt, claim time, lease
//!   deadline, the frozen request) appended under one lock to chunks that never move, refused
//!   if the operation id is already indexed (an ordered map of 16-byte ids);
//! - the key sent as the `idempotency-key` header (formatted on the stack; the header value is
//!   the one allocation it takes);
//! - the one attempt sent under a deadline (a timer per request: the attempt must end before
//!   its lease does);
//! - the response's body read, the outcome classified by status alone (no vendor reference is
//!   looked for: less work than any contract does), and the **result** (status and a copy of
//!   the body, which must not pin hyper's read buffer) written into the claimed row under the
//!   lock.
//!
//! No evidence log, no versions, no tracing, no outcome handed to the caller, no send-once
//! guard, no clone of the inner service per call. Every row is kept, as a ledger keeps its rows
//! until retention drops them. Anything the layer does beyond this is the layer's own cost; a
//! target above what this reaches is beyond what the semantics allow on this machine.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use sha2::{Digest, Sha256};
use tower::BoxError;
use tower::util::BoxCloneService;

use crate::support::{Svc, client, freeze};

/// The attempt's deadline (the crate's default attempt timeout).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// One operation's row: fixed-size identity and claim, the frozen request, the result. Kept,
/// never read back here: the bench answers no repeat, but the row must hold what would.
#[allow(dead_code)]
struct Row {
    operation_id: [u8; 16],
    key: [u8; 16],
    payload_hash: [u8; 32],
    attempt_id: [u8; 16],
    claimed_at: Instant,
    lease_until: Instant,
    request: Vec<u8>,
    /// 0 until the result: the outcome is its class (2xx succeeded, 4xx rejected, else
    /// unknown), a function of the status.
    status: u16,
    response: Option<Bytes>,
}

/// Rows in chunks that never move, and the operation ids' index. The index is ordered: the
/// ids are UUID v7s, so a new one goes to the right edge, and the memory it takes grows in
/// step with the rows. (A hash map sized up front for the bench's rows ran at a quarter of
/// `bare`: on this machine a page's first touch costs several microseconds, and random inserts
/// into a large table touch a new page nearly every time.)
struct Rows {
    chunks: Vec<Vec<Row>>,
    by_id: BTreeMap<[u8; 16], u32>,
}

/// Rows per chunk.
const CHUNK: usize = 1 << 16;

/// The limit's store (cloned freely: one store behind one lock).
#[derive(Clone)]
pub struct LimitMemory(Arc<Mutex<Rows>>);

impl Default for LimitMemory {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Rows {
            chunks: Vec::new(),
            by_id: BTreeMap::new(),
        })))
    }
}

impl LimitMemory {
    /// Appends the claim's row; its index, or `None` if the operation id exists.
    fn claim(&self, row: Row) -> Option<u32> {
        let mut rows = self.0.lock().expect("not poisoned");
        let next = rows.by_id.len() as u32;
        match rows.by_id.entry(row.operation_id) {
            Entry::Occupied(_) => return None,
            Entry::Vacant(e) => e.insert(next),
        };
        if rows.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            rows.chunks.push(Vec::with_capacity(CHUNK));
        }
        rows.chunks.last_mut().expect("a chunk").push(row);
        Some(next)
    }

    /// Writes the result into row `at`.
    fn record(&self, at: u32, status: u16, response: Bytes) {
        let mut rows = self.0.lock().expect("not poisoned");
        let row = &mut rows.chunks[at as usize / CHUNK][at as usize % CHUNK];
        row.status = status;
        row.response = Some(response);
    }

    /// The claim of one request: its frozen copy, payload hash and identities in a new row
    /// appended under the lock; the row's index and the key's header value, or an error if the
    /// operation id exists.
    fn claim_request(
        &self,
        method: &http::Method,
        url: &dyn std::fmt::Display,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Result<(u32, HeaderValue), BoxError> {
        let key = *uuid::Uuid::new_v4().as_bytes();
        let mut hash = Sha256::new();
        hash.update(method.as_str());
        write!(hash, " {url}")?;
        hash.update(body);
        let request = freeze(method.as_str(), url, headers, body);
        let now = Instant::now();
        let row = Row {
            operation_id: *uuid::Uuid::now_v7().as_bytes(),
            key,
            payload_hash: hash.finalize().into(),
            attempt_id: *uuid::Uuid::new_v4().as_bytes(),
            claimed_at: now,
            lease_until: now + 2 * ATTEMPT_TIMEOUT,
            request,
            status: 0,
            response: None,
        };
        let at = self
            .claim(row)
            .ok_or_else(|| BoxError::from("limit: claim refused"))?;
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        uuid::Uuid::from_bytes(key)
            .hyphenated()
            .encode_lower(&mut text);
        Ok((at, HeaderValue::from_bytes(&text)?))
    }

    /// The bare client with this store's claim before the send and its result after.
    pub fn service(self) -> Svc {
        let client = client();
        BoxCloneService::new(tower::service_fn(move |req: Request<Full<Bytes>>| {
            let (store, client) = (self.clone(), client.clone());
            async move {
                let (mut parts, body) = req.into_parts();
                let body = body.collect().await?.to_bytes();
                let (at, key) =
                    store.claim_request(&parts.method, &parts.uri, &parts.headers, &body)?;
                parts.headers.insert("idempotency-key", key);
                let res = tokio::time::timeout(
                    ATTEMPT_TIMEOUT,
                    client.request(Request::from_parts(parts, Full::new(body))),
                )
                .await??;
                let status = res.status().as_u16();
                // Copied out: the body hyper hands over is a slice of its connection's read
                // buffer, and keeping that slice would keep the whole buffer.
                let response = Bytes::copy_from_slice(&res.into_body().collect().await?.to_bytes());
                store.record(at, status, response);
                Ok(status)
            }
        }))
    }

    /// The same work as a reqwest middleware (feature `reqwest`): the claim before the rest of
    /// the chain runs, the key header on the request, the attempt under its deadline, the
    /// response's body read for the result and handed back as a new response.
    #[cfg(feature = "reqwest")]
    pub fn reqwest_middleware(self) -> LimitMiddleware {
        LimitMiddleware(self)
    }
}

/// [`LimitMemory::reqwest_middleware`].
#[cfg(feature = "reqwest")]
pub struct LimitMiddleware(LimitMemory);

#[cfg(feature = "reqwest")]
#[async_trait::async_trait]
impl reqwest_middleware::Middleware for LimitMiddleware {
    async fn handle(
        &self,
        mut req: reqwest::Request,
        ext: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let store = &self.0;
        let refused = |e: BoxError| reqwest_middleware::Error::middleware(std::io::Error::other(e));
        let body = req.body().and_then(|b| b.as_bytes()).unwrap_or_default();
        let (at, key) = store
            .claim_request(req.method(), req.url(), req.headers(), body)
            .map_err(refused)?;
        req.headers_mut().insert("idempotency-key", key);
        let res = tokio::time::timeout(ATTEMPT_TIMEOUT, next.run(req, ext))
            .await
            .map_err(|e| refused(e.into()))??;
        // Back to the caller as a reqwest response with the body read: the URL kept, the
        // status, version and headers moved, not copied.
        let url = res.url().clone();
        let (parts, body) = http::Response::<reqwest::Body>::from(res).into_parts();
        let response = body.collect().await?.to_bytes();
        // The row's own copy (see `service`); the caller gets the body as it came.
        store.record(at, parts.status.as_u16(), Bytes::copy_from_slice(&response));
        use reqwest::ResponseBuilderExt as _;
        let mut out = http::Response::builder()
            .status(parts.status)
            .version(parts.version)
            .url(url)
            .body(reqwest::Body::from(response))
            .map_err(|e| refused(e.into()))?;
        *out.headers_mut() = parts.headers;
        Ok(reqwest::Response::from(out))
    }
}
