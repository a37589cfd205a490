//! The simulated vendor: an in-process tower service with real idempotency semantics, its own
//! count of side effects (the oracle), a seeded schedule of faults and the events it calls
//! back with; and the stack below the layer in one process incarnation ([`Gate`]).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use recoverable_write::BoxError;
use tokio::time::Instant;
use tower::Service;

use crate::AUTH_SECRET;
use crate::world::Rng;

#[derive(Clone, Debug)]
pub(crate) struct VendorConfig {
    /// A concurrent create with a key still in progress gets 409 (Stripe); otherwise only
    /// completed keys are deduplicated.
    pub(crate) protect_in_progress: bool,
    pub(crate) retention: Duration,
    /// Longest delay before applying: shorter than the attempt timeout, so an attempt that was
    /// handed to the vendor applies (or dies) inside its lease.
    pub(crate) max_pre_apply: Duration,
    pub(crate) max_response_delay: Duration,
    /// Fault intensity (0: none).
    pub(crate) faults: f64,
    /// Every create waits this long before applying (a focused test's slow vendor).
    pub(crate) force_pre_apply: Option<Duration>,
    /// The events it calls back with for each side effect (`None`: it has no callbacks).
    pub(crate) events: Option<EventPlan>,
}

/// What a vendor with callbacks sends for each side effect: always `ticket.created`; sometimes
/// a `ticket.updated` PROCESSING first; and, where the vendor documents that a failure is not
/// final (a Stripe `payment_intent.payment_failed` before the customer's retry succeeds), a
/// `ticket.updated` REJECTED for an object that then succeeds. Each event is delivered on its
/// own schedule (see `callbacks.rs`), so they arrive in any order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EventPlan {
    /// The vendor documents failure events that a success may follow.
    pub(crate) contradictions: bool,
    /// Chance of a PROCESSING event before the success.
    pub(crate) processing: f64,
}

/// One event the vendor calls back with, about one side effect.
#[derive(Clone, Debug)]
pub(crate) struct VendorEvent {
    pub(crate) id: String,
    /// `ticket.created` or `ticket.updated`.
    pub(crate) kind: &'static str,
    /// `SUCCEEDED`, `PROCESSING` or `REJECTED`.
    pub(crate) status: &'static str,
    pub(crate) op: String,
    pub(crate) ticket: String,
    /// The idempotency key the creating request carried (the mapping matches by it first).
    pub(crate) key: Option<String>,
}

#[derive(Debug)]
pub(crate) enum KeyEntry {
    InProgress,
    Done {
        at: Instant,
        op: String,
        response: (u16, String),
    },
}

#[derive(Debug)]
pub(crate) struct VendorState {
    pub(crate) rng: Rng,
    pub(crate) cfg: VendorConfig,
    pub(crate) faults_on: bool,
    pub(crate) epoch: u64,
    pub(crate) down_until: Option<Instant>,
    pub(crate) keys: HashMap<String, KeyEntry>,
    /// The vendor's own operation records (lookups), kept across every restart.
    pub(crate) records: HashMap<String, String>,
    /// The oracle: every side effect, per operation.
    pub(crate) effects: HashMap<String, Vec<String>>,
    /// The idempotency key each side effect of an operation was made with (same order).
    pub(crate) effect_keys: HashMap<String, Vec<Option<String>>>,
    /// Where the events go (the harness delivers them to the callback endpoint).
    pub(crate) outbox: Option<tokio::sync::mpsc::UnboundedSender<VendorEvent>>,
    pub(crate) next_event: u64,
    /// Operations whose applied key a restart forgot (the vendor broke its retention promise).
    pub(crate) forgot_applied: HashSet<String>,
    pub(crate) lookup_lag: HashMap<String, u32>,
    pub(crate) next_ticket: u64,
    pub(crate) posts: u64,
    pub(crate) unauthenticated: u64,
    /// What happened at the vendor, for a traced seed (`RW_SIM_SEED`).
    pub(crate) log: Vec<String>,
    pub(crate) origin: Instant,
}

#[derive(Clone, Debug)]
pub(crate) struct SimVendor {
    pub(crate) st: Arc<Mutex<VendorState>>,
}

pub(crate) fn io_err(kind: std::io::ErrorKind, what: &str) -> BoxError {
    Box::new(std::io::Error::new(kind, what.to_owned()))
}

pub(crate) fn json(status: u16, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

pub(crate) fn json_with(
    status: u16,
    body: String,
    header: (&'static str, String),
) -> Response<Full<Bytes>> {
    let mut r = json(status, body);
    r.headers_mut()
        .insert(header.0, header.1.parse().expect("header value"));
    r
}

pub(crate) type VendorFuture =
    Pin<Box<dyn Future<Output = Result<Response<Full<Bytes>>, BoxError>> + Send>>;

impl VendorState {
    fn note(&mut self, what: String) {
        let at = self.origin.elapsed().as_millis();
        self.log.push(format!("{at:>6} ms vendor: {what}"));
    }

    /// The events for a side effect just made (see [`EventPlan`]).
    fn emit(&mut self, op: &str, ticket: &str, key: Option<&String>) {
        let Some(plan) = self.cfg.events else {
            return;
        };
        let mut events = Vec::new();
        if plan.contradictions && self.rng.chance(0.35) {
            events.push(("ticket.updated", "REJECTED"));
        }
        if self.rng.chance(plan.processing) {
            events.push(("ticket.updated", "PROCESSING"));
        }
        events.push(("ticket.created", "SUCCEEDED"));
        for (kind, status) in events {
            let id = format!("evt_{}", self.next_event);
            self.next_event += 1;
            self.note(format!("{op}: event {id} {kind} {status} for {ticket}"));
            if let Some(outbox) = &self.outbox {
                let _ = outbox.send(VendorEvent {
                    id,
                    kind,
                    status,
                    op: op.to_owned(),
                    ticket: ticket.to_owned(),
                    key: key.cloned(),
                });
            }
        }
    }
}

impl SimVendor {
    pub(crate) fn new(rng: Rng, cfg: VendorConfig) -> Self {
        Self {
            st: Arc::new(Mutex::new(VendorState {
                rng,
                cfg,
                faults_on: true,
                epoch: 0,
                down_until: None,
                keys: HashMap::new(),
                records: HashMap::new(),
                effects: HashMap::new(),
                effect_keys: HashMap::new(),
                outbox: None,
                next_event: 1,
                forgot_applied: HashSet::new(),
                lookup_lag: HashMap::new(),
                next_ticket: 1,
                posts: 0,
                unauthenticated: 0,
                log: Vec::new(),
                origin: Instant::now(),
            })),
        }
    }

    /// Sends the vendor's events to `outbox` from now on.
    pub(crate) fn call_back_to(&self, outbox: tokio::sync::mpsc::UnboundedSender<VendorEvent>) {
        self.lock().outbox = Some(outbox);
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, VendorState> {
        self.st
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn calm(&self) {
        let mut s = self.lock();
        s.faults_on = false;
        s.down_until = None;
    }

    /// A restart: requests not yet applied die, keys in progress are lost; `forget` also loses
    /// every completed key (operation records survive).
    pub(crate) fn restart(&self, forget: bool, downtime: Duration) {
        let mut s = self.lock();
        s.epoch += 1;
        s.note(format!(
            "restart (forget keys: {forget}, down {downtime:?})"
        ));
        s.down_until = Some(Instant::now() + downtime);
        let keys = std::mem::take(&mut s.keys);
        for (k, e) in keys {
            match e {
                KeyEntry::InProgress => {}
                KeyEntry::Done { op, .. } if forget => {
                    s.forgot_applied.insert(op);
                }
                done => {
                    s.keys.insert(k, done);
                }
            }
        }
    }

    fn down(s: &VendorState) -> bool {
        s.down_until.is_some_and(|t| Instant::now() < t)
    }

    async fn handle(self, req: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, BoxError> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        let path = parts.uri.path().to_owned();
        if parts.method == Method::GET
            && let Some(op) = path.strip_prefix("/operations/")
        {
            return self.lookup(op.to_owned()).await;
        }
        if parts.method == Method::POST && path == "/tickets" {
            return self.create(parts.headers, body).await;
        }
        Ok(json(404, r#"{"error":"no route"}"#.into()))
    }

    async fn lookup(self, op: String) -> Result<Response<Full<Bytes>>, BoxError> {
        let (delay, answer) = {
            let mut s = self.lock();
            if Self::down(&s) {
                return Err(io_err(std::io::ErrorKind::ConnectionRefused, "vendor down"));
            }
            let on = s.faults_on;
            let f = s.cfg.faults;
            let delay = if on && s.rng.chance(0.2 * f) {
                s.rng.ms(1, 400)
            } else {
                Duration::ZERO
            };
            let lag = if on {
                let r = s.rng.range(0, 3) as u32;
                *s.lookup_lag.entry(op.clone()).or_insert(r)
            } else {
                0
            };
            let answer = if on && s.rng.chance(0.1 * f) {
                json(500, r#"{"error":"internal"}"#.into())
            } else if lag > 0 {
                if let Some(l) = s.lookup_lag.get_mut(&op) {
                    *l -= 1;
                }
                json(404, r#"{"error":"not_found"}"#.into())
            } else {
                match s.records.get(&op) {
                    Some(t) => json(
                        200,
                        format!(
                            r#"{{"operation_id":"{op}","status":"SUCCEEDED","resource_id":"{t}"}}"#
                        ),
                    ),
                    None => json(404, r#"{"error":"not_found"}"#.into()),
                }
            };
            (delay, answer)
        };
        tokio::time::sleep(delay).await;
        Ok(answer)
    }

    async fn create(
        self,
        headers: http::HeaderMap,
        body: Bytes,
    ) -> Result<Response<Full<Bytes>>, BoxError> {
        let op = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["operation_id"].as_str().map(str::to_owned));
        let Some(op) = op else {
            return Ok(json(400, r#"{"error":{"code":"validation"}}"#.into()));
        };
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            // RFC 8941 quotes are not part of the key (the ledger stores it bare).
            .map(|v| v.trim_matches('"').to_owned());
        let drop_before = {
            let mut s = self.lock();
            s.posts += 1;
            if !headers.contains_key("authorization") {
                s.unauthenticated += 1;
            }
            if Self::down(&s) {
                return Err(io_err(std::io::ErrorKind::ConnectionRefused, "vendor down"));
            }
            let f = if s.faults_on { s.cfg.faults } else { 0.0 };
            if s.rng.chance(0.06 * f) {
                s.note("a create: connection refused".into());
                return Err(io_err(std::io::ErrorKind::ConnectionRefused, "refused"));
            }
            s.rng.chance(0.06 * f)
        };
        if drop_before {
            tokio::time::sleep(Duration::from_millis(5)).await;
            return Err(io_err(
                std::io::ErrorKind::ConnectionReset,
                "reset before apply",
            ));
        }
        // Once handed over, the request runs to its end at the vendor whatever the caller does.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(self.clone().execute(op, key, tx));
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(io_err(
                std::io::ErrorKind::ConnectionReset,
                "vendor hung up",
            )),
        }
    }

    async fn execute(
        self,
        op: String,
        key: Option<String>,
        tx: tokio::sync::oneshot::Sender<Result<Response<Full<Bytes>>, BoxError>>,
    ) {
        let (epoch, pre) = {
            let mut s = self.lock();
            let now = Instant::now();
            let retention = s.cfg.retention;
            if let Some(k) = &key {
                if let Some(KeyEntry::Done { at, .. }) = s.keys.get(k)
                    && now.duration_since(*at) > retention
                {
                    s.keys.remove(k);
                }
                match s.keys.get(k) {
                    Some(KeyEntry::Done { response, .. }) => {
                        let (status, body) = response.clone();
                        s.note(format!("{op}: replayed stored {status}"));
                        let _ = tx.send(Ok(json_with(
                            status,
                            body,
                            ("idempotent-replayed", "true".into()),
                        )));
                        return;
                    }
                    Some(KeyEntry::InProgress) => {
                        s.note(format!("{op}: 409 key in progress"));
                        let _ = tx.send(Ok(json(
                            409,
                            r#"{"error":{"code":"idempotency_key_in_use"}}"#.into(),
                        )));
                        return;
                    }
                    None => {}
                }
            }
            let f = if s.faults_on { s.cfg.faults } else { 0.0 };
            if s.rng.chance(0.05 * f) {
                let secs = s.rng.range(1, 3);
                let _ = tx.send(Ok(json_with(
                    429,
                    r#"{"error":{"code":"rate_limited"}}"#.into(),
                    ("retry-after", secs.to_string()),
                )));
                return;
            }
            if s.rng.chance(0.05 * f) {
                let _ = tx.send(Ok(json_with(
                    503,
                    r#"{"error":{"code":"unavailable"}}"#.into(),
                    ("retry-after", "1".into()),
                )));
                return;
            }
            if s.rng.chance(0.02 * f) {
                let _ = tx.send(Ok(json(
                    400,
                    r#"{"error":{"code":"validation","type":"invalid_request_error"}}"#.into(),
                )));
                return;
            }
            let max = s.cfg.max_pre_apply.as_millis() as u64;
            let pre = if let Some(d) = s.cfg.force_pre_apply {
                d
            } else if s.rng.chance(0.35 * f.clamp(0.3, 1.0)) && f > 0.0 {
                s.rng.ms(1, max)
            } else {
                Duration::ZERO
            };
            if let Some(k) = &key
                && s.cfg.protect_in_progress
            {
                s.keys.insert(k.clone(), KeyEntry::InProgress);
            }
            s.note(format!("{op}: accepted, applies in {pre:?}"));
            (s.epoch, pre)
        };
        tokio::time::sleep(pre).await;
        let (delay, outcome) = {
            let mut s = self.lock();
            if s.epoch != epoch {
                s.note(format!("{op}: killed by a restart before applying"));
                let _ = tx.send(Err(io_err(
                    std::io::ErrorKind::ConnectionReset,
                    "vendor restarted",
                )));
                return;
            }
            // Apply: the side effect the oracle counts.
            let ticket = format!("T{}", s.next_ticket);
            s.next_ticket += 1;
            s.effects
                .entry(op.clone())
                .or_default()
                .push(ticket.clone());
            s.effect_keys
                .entry(op.clone())
                .or_default()
                .push(key.clone());
            s.records.insert(op.clone(), ticket.clone());
            s.emit(&op, &ticket, key.as_ref());
            let body = format!(r#"{{"id":"{ticket}","operation_id":"{op}","status":"open"}}"#);
            if let Some(k) = &key {
                s.keys.insert(
                    k.clone(),
                    KeyEntry::Done {
                        at: Instant::now(),
                        op: op.clone(),
                        response: (201, body.clone()),
                    },
                );
            }
            let f = if s.faults_on { s.cfg.faults } else { 0.0 };
            let max = s.cfg.max_response_delay.as_millis() as u64;
            let delay = if s.rng.chance(0.2 * f) {
                s.rng.ms(1, max)
            } else {
                Duration::ZERO
            };
            let outcome = if s.rng.chance(0.08 * f) {
                Err(io_err(
                    std::io::ErrorKind::ConnectionReset,
                    "reset after apply",
                ))
            } else if s.rng.chance(0.06 * f) {
                Ok(json(500, r#"{"error":{"code":"internal"}}"#.into()))
            } else {
                Ok(json(201, body))
            };
            let shown = match &outcome {
                Ok(r) => r.status().to_string(),
                Err(e) => e.to_string(),
            };
            s.note(format!(
                "{op}: APPLIED {ticket}, answers {shown} after {delay:?}"
            ));
            (delay, outcome)
        };
        tokio::time::sleep(delay).await;
        let _ = tx.send(outcome);
    }

    pub(crate) fn effects(&self, op: &str) -> Vec<String> {
        self.lock().effects.get(op).cloned().unwrap_or_default()
    }

    /// The side effects of `op` made with `key` (one row of the ledger sends one key).
    pub(crate) fn effects_with_key(&self, op: &str, key: &str) -> Vec<String> {
        let s = self.lock();
        let (Some(tickets), Some(keys)) = (s.effects.get(op), s.effect_keys.get(op)) else {
            return Vec::new();
        };
        tickets
            .iter()
            .zip(keys)
            .filter(|(_, k)| k.as_deref() == Some(key))
            .map(|(t, _)| t.clone())
            .collect()
    }
}

impl Service<Request<Full<Bytes>>> for SimVendor {
    type Response = Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = VendorFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        Box::pin(self.clone().handle(req))
    }
}

/// The stack below the layer in one process incarnation: applies the credential at send time
/// (as a real client stack does) and, once the incarnation is dead, sends nothing.
#[derive(Clone, Debug)]
pub(crate) struct Gate {
    pub(crate) vendor: SimVendor,
    pub(crate) dead: Arc<AtomicBool>,
}

impl Service<Request<Full<Bytes>>> for Gate {
    type Response = Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = VendorFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Full<Bytes>>) -> Self::Future {
        if self.dead.load(Ordering::SeqCst) {
            // A dead process sends nothing.
            return Box::pin(async { Err(io_err(std::io::ErrorKind::Other, "process dead")) });
        }
        if !req.headers().contains_key("authorization") {
            req.headers_mut().insert(
                "authorization",
                format!("Bearer {AUTH_SECRET}").parse().expect("header"),
            );
        }
        self.vendor.call(req)
    }
}
