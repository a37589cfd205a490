//! The fake vendor's callbacks: signed deliveries, sent with duplication, reordering and delay
//! (features `test-util` and `callbacks`).
//!
//! Builds what a vendor would POST to a callback endpoint for a [`Ticket`] the
//! [`FakeVendor`](super::FakeVendor) created, signs it like Stripe (or with any
//! [`HmacHeader`] scheme), and sends it over real HTTP/1 with hyper-util, as a vendor would:
//! possibly twice, possibly out of order, possibly late.
//!
//! ```no_run
//! use std::time::SystemTime;
//! use recoverable_write::callbacks::Secret;
//! use recoverable_write::testing::callbacks::{stripe_event, CallbackSender, Schedule, Signer};
//!
//! # async fn run(ticket: recoverable_write::testing::Ticket) -> Result<(), Box<dyn std::error::Error>> {
//! let signer = Signer::stripe(Secret::new("whsec_test_not_a_real_secret")?);
//! let body = stripe_event("evt_1", "payment_intent.succeeded", &ticket);
//! let delivery = signer.sign("evt_1", &body, SystemTime::now());
//! let statuses = CallbackSender::new()
//!     .send_all("http://127.0.0.1:3000/callbacks/stripe", vec![delivery], &Schedule::new().duplicate(1))
//!     .await;
//! # Ok(())
//! # }
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::Ticket;
use crate::BoxError;
use crate::callbacks::{
    CallbackMapping, EventRule, HmacHeader, MatchBy, MatchField, Secret, StatusRule,
    StripeSignature,
};

/// How deliveries are signed.
#[derive(Clone, Debug)]
pub enum Signer {
    /// Stripe's `Stripe-Signature` with this secret.
    Stripe(Secret),
    /// A generic HMAC header scheme (its header, encoding and prefixes) with this secret.
    Hmac(HmacHeader, Secret),
}

impl Signer {
    /// A Stripe signer.
    pub fn stripe(secret: Secret) -> Self {
        Self::Stripe(secret)
    }

    /// Signs `body` as sent at `at`.
    pub fn sign(&self, event_id: &str, body: &Value, at: SystemTime) -> SignedDelivery {
        let bytes = Bytes::from(body.to_string());
        let t = unix_secs(at);
        let mut headers = HeaderMap::new();
        match self {
            Self::Stripe(secret) => {
                insert(
                    &mut headers,
                    StripeSignature::HEADER,
                    &StripeSignature::sign(secret, t, &bytes),
                );
            }
            Self::Hmac(scheme, secret) => {
                let (name, prefix, ts) = scheme.parts();
                let ts_value = t.to_string();
                if let Some(ts_header) = ts {
                    insert(&mut headers, ts_header, &ts_value);
                }
                let mac = scheme.sign(secret, ts.map(|_| ts_value.as_str()), &bytes);
                insert(
                    &mut headers,
                    name,
                    &format!("{}{mac}", prefix.unwrap_or("")),
                );
            }
        }
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        SignedDelivery {
            event_id: event_id.to_owned(),
            headers,
            body: bytes,
        }
    }
}

fn insert(headers: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (
        http::HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        headers.insert(n, v);
    }
}

fn unix_secs(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// One signed delivery, ready to POST.
#[derive(Clone, Debug)]
pub struct SignedDelivery {
    /// The event id it carries (for assertions).
    pub event_id: String,
    /// The headers (signature, content type).
    pub headers: HeaderMap,
    /// The exact signed body.
    pub body: Bytes,
}

/// A Stripe `Event` about the PaymentIntent a ticket stands for: the ticket id is the
/// PaymentIntent id, its operation id is in `metadata.operation_id`, its tenant is the Connect
/// `account`.
pub fn stripe_event(event_id: &str, event_type: &str, ticket: &Ticket) -> Value {
    let mut metadata = serde_json::Map::new();
    if let Some(op) = &ticket.operation_id {
        metadata.insert("operation_id".into(), Value::String(op.clone()));
    }
    json!({
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": 1_700_000_000,
        "account": ticket.tenant,
        "livemode": false,
        "pending_webhooks": 1,
        "type": event_type,
        "data": { "object": {
            "id": ticket.id,
            "object": "payment_intent",
            "amount": 2000,
            "currency": "eur",
            "status": match event_type {
                "payment_intent.succeeded" => "succeeded",
                "payment_intent.processing" => "processing",
                _ => "requires_payment_method",
            },
            "metadata": metadata,
        }}
    })
}

/// The fake vendor's own callback for a ticket (its ticket API of seed 000), to be signed with
/// any [`HmacHeader`] scheme and read with [`ticket_mapping`]: `ticket.created` when the ticket
/// exists, `ticket.updated` with the status otherwise.
pub fn ticket_event(event_id: &str, event_type: &str, ticket: &Ticket) -> Value {
    json!({
        "event": {"id": event_id, "type": event_type},
        "tenant": ticket.tenant,
        "ticket": {
            "id": ticket.id,
            "status": ticket.status.as_str(),
            "operation_id": ticket.operation_id,
            "idempotency_key": ticket.idempotency_key,
        }
    })
}

/// The mapping of [`ticket_event`]: the echoed idempotency key first, then the operation id,
/// then the ticket id; the tenant is the account.
pub fn ticket_mapping() -> CallbackMapping {
    let rule = |status: &str| {
        EventRule::WithStatus(StatusRule {
            event_type: "ticket.updated".into(),
            status: status.into(),
        })
    };
    CallbackMapping {
        vendor: "fake-vendor".into(),
        items: None,
        event_id: vec!["/event/id".into()],
        event_type: "/event/type".into(),
        status: Some("/ticket/status".into()),
        matchers: vec![
            MatchField {
                pointer: "/ticket/idempotency_key".into(),
                by: MatchBy::IdempotencyKey,
            },
            MatchField {
                pointer: "/ticket/operation_id".into(),
                by: MatchBy::OperationId,
            },
            MatchField {
                pointer: "/ticket/id".into(),
                by: MatchBy::RemoteRef,
            },
        ],
        remote_ref: vec!["/ticket/id".into()],
        account: Some("/tenant".into()),
        reason: vec!["/ticket/status".into()],
        succeeded: vec![EventRule::Type("ticket.created".into()), rule("SUCCEEDED")],
        // The fake vendor documents its REJECTED as final: nothing is created afterwards.
        rejected: vec![rule("REJECTED")],
        processing: vec![rule("PROCESSING")],
        inconclusive: Vec::new(),
    }
}

/// How a batch of deliveries is sent.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    duplicates: usize,
    reorder: bool,
    delay: Option<Duration>,
}

impl Schedule {
    /// Every delivery once, in order, at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Each delivery is sent `extra` more times (right after itself), as vendors do when an
    /// answer is slow or lost.
    pub fn duplicate(mut self, extra: usize) -> Self {
        self.duplicates = extra;
        self
    }

    /// The first two deliveries swap places (a later event arrives first).
    pub fn reorder(mut self) -> Self {
        self.reorder = true;
        self
    }

    /// Waits this long (tokio time) before each send.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The deliveries in the order they will be sent.
    pub fn plan(&self, deliveries: Vec<SignedDelivery>) -> Vec<SignedDelivery> {
        let mut ordered = deliveries;
        if self.reorder && ordered.len() >= 2 {
            ordered.swap(0, 1);
        }
        ordered
            .into_iter()
            .flat_map(|d| std::iter::repeat_n(d, self.duplicates + 1))
            .collect()
    }
}

/// POSTs signed deliveries over HTTP/1.
#[derive(Clone, Debug)]
pub struct CallbackSender {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for CallbackSender {
    fn default() -> Self {
        Self::new()
    }
}

impl CallbackSender {
    /// A sender with its own connection pool.
    pub fn new() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// POSTs one delivery and returns the endpoint's status.
    pub async fn send(&self, url: &str, delivery: &SignedDelivery) -> Result<StatusCode, BoxError> {
        let mut req = http::Request::post(url).body(Full::new(delivery.body.clone()))?;
        req.headers_mut().extend(delivery.headers.clone());
        Ok(self.client.request(req).await?.status())
    }

    /// Sends every delivery as `schedule` says, returning each send's status (or error text),
    /// in send order.
    pub async fn send_all(
        &self,
        url: &str,
        deliveries: Vec<SignedDelivery>,
        schedule: &Schedule,
    ) -> Vec<Result<StatusCode, String>> {
        let mut out = Vec::new();
        for d in schedule.plan(deliveries) {
            if let Some(delay) = schedule.delay {
                tokio::time::sleep(delay).await;
            }
            out.push(self.send(url, &d).await.map_err(|e| e.to_string()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::callbacks::{Encoding, Verifier, VerifyError};
    use crate::testing::OperationStatus;

    fn ticket() -> Ticket {
        Ticket {
            id: "W731".into(),
            tenant: "tenant-a".into(),
            operation_id: Some("op-1".into()),
            device_id: "E17".into(),
            idempotency_key: Some("k".into()),
            payload: json!({}),
            status: OperationStatus::Succeeded,
        }
    }

    #[test]
    fn stripe_signer_is_accepted_and_a_forgery_refused() {
        let secret = Secret::new("whsec_fake_vendor_secret").unwrap();
        let now = SystemTime::now();
        let d = Signer::stripe(secret.clone()).sign(
            "evt_1",
            &stripe_event("evt_1", "payment_intent.succeeded", &ticket()),
            now,
        );
        let verifier = StripeSignature::new(secret);
        assert!(verifier.verify(&d.headers, &d.body, now).is_ok());
        let forged = Signer::stripe(Secret::new("whsec_someone_elses_secret").unwrap()).sign(
            "evt_1",
            &stripe_event("evt_1", "payment_intent.succeeded", &ticket()),
            now,
        );
        assert!(matches!(
            verifier.verify(&forged.headers, &forged.body, now),
            Err(VerifyError::NoMatchingSignature { .. })
        ));
        let mut tampered = d.body.to_vec();
        tampered.extend_from_slice(b" ");
        assert!(verifier.verify(&d.headers, &tampered, now).is_err());
    }

    #[test]
    fn hmac_signer_is_accepted() {
        let secret = Secret::new("github-webhook-secret-3").unwrap();
        let scheme = HmacHeader::github(secret.clone()).timestamp_header(
            http::HeaderName::from_static("x-timestamp"),
            ".",
            Duration::from_secs(60),
        );
        let now = SystemTime::now();
        let d = Signer::Hmac(scheme.clone(), secret).sign("e", &json!({"id": "e"}), now);
        assert!(scheme.verify(&d.headers, &d.body, now).is_ok());
        let key = Secret::new("base64-scheme-secret-k").unwrap();
        let b64 = HmacHeader::new(
            http::HeaderName::from_static("x-sig"),
            Encoding::Base64,
            key.clone(),
        );
        let d = Signer::Hmac(b64.clone(), key).sign("e", &json!({}), now);
        assert!(b64.verify(&d.headers, &d.body, now).is_ok());
    }

    #[test]
    fn ticket_events_parse_with_the_ticket_mapping() {
        let secret = Secret::new("fake-vendor-secret").unwrap();
        let scheme = HmacHeader::new(
            http::HeaderName::from_static("x-vendor-signature"),
            Encoding::Hex,
            secret.clone(),
        );
        let now = SystemTime::now();
        let d = Signer::Hmac(scheme.clone(), secret).sign(
            "ev-1",
            &ticket_event("ev-1", "ticket.updated", &ticket()),
            now,
        );
        let verified = scheme.verify(&d.headers, &d.body, now).unwrap();
        let events = crate::callbacks::parse(&ticket_mapping(), &verified).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_id, "ev-1");
        assert_eq!(events[0].account.as_deref(), Some("tenant-a"));
        assert_eq!(
            events[0].matcher,
            Some(crate::callbacks::Matcher {
                by: MatchBy::IdempotencyKey,
                value: "k".into()
            })
        );
        assert_eq!(
            events[0].evidence,
            Some(crate::Evidence::Succeeded {
                remote_ref: Some("W731".into())
            })
        );
    }

    #[test]
    fn schedule_duplicates_and_reorders() {
        let secret = Secret::new("whsec_schedule_secret").unwrap();
        let now = SystemTime::now();
        let a = Signer::stripe(secret.clone()).sign("a", &json!({"id": "a"}), now);
        let b = Signer::stripe(secret).sign("b", &json!({"id": "b"}), now);
        let ids: Vec<String> = Schedule::new()
            .duplicate(1)
            .reorder()
            .plan(vec![a, b])
            .into_iter()
            .map(|d| d.event_id)
            .collect();
        assert_eq!(ids, ["b", "b", "a", "a"]);
    }

    #[tokio::test]
    async fn sender_posts_signed_bodies_over_http() {
        let seen: Arc<Mutex<Vec<(String, Bytes)>>> = Arc::default();
        let seen2 = Arc::clone(&seen);
        let app = axum::Router::new().route(
            "/cb",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let seen = Arc::clone(&seen2);
                async move {
                    let sig = headers
                        .get("stripe-signature")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    seen.lock().unwrap().push((sig, body));
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });

        let secret = Secret::new("whsec_over_the_wire").unwrap();
        let now = SystemTime::now();
        let d = Signer::stripe(secret.clone()).sign(
            "evt_9",
            &stripe_event("evt_9", "payment_intent.succeeded", &ticket()),
            now,
        );
        let started = std::time::Instant::now();
        let statuses = CallbackSender::new()
            .send_all(
                &format!("http://{addr}/cb"),
                vec![d],
                &Schedule::new()
                    .duplicate(1)
                    .delay(Duration::from_millis(20)),
            )
            .await;
        // Each of the two sends waited its delay first.
        assert!(started.elapsed() >= Duration::from_millis(40));
        assert_eq!(statuses, vec![Ok(StatusCode::OK), Ok(StatusCode::OK)]);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        let verifier = StripeSignature::new(secret);
        for (sig, body) in seen {
            let mut h = HeaderMap::new();
            h.insert("stripe-signature", sig.parse().unwrap());
            assert!(verifier.verify(&h, &body, now).is_ok());
        }
        server.abort();
    }
}
