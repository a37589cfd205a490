//! The vendor's callbacks, delivered as a vendor delivers them: signed, at least once (again
//! until the endpoint accepts, and sometimes again after), in any order, sometimes late, to the
//! crate's real [`CallbackReceiver`] of the process incarnation alive at the time. A forger
//! without the secret posts now and then too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use recoverable_write::callbacks::{
    AccountTenants, CallbackReceiver, DeliveryOutcome, Secret, StripeSignature,
};
use recoverable_write::testing::callbacks::{Signer, ticket_mapping};
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use crate::TENANT;
use crate::vendor::VendorEvent;
use crate::world::Rng;

const WEBHOOK_SECRET: &str = "whsec_simulation_0123456789abcdef";
const FORGER_SECRET: &str = "whsec_not_the_vendor_0123456789ab";
/// The ticket reference a forged event claims; no row may ever hold it.
pub(crate) const FORGED_REF: &str = "FORGED";

/// How a seed's vendor delivers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeliveryPlan {
    /// Longest delay of a first delivery on time.
    pub(crate) max_delay: Duration,
    /// Chance that the first delivery is late (2 to 10 s).
    pub(crate) late: f64,
    /// Chance of each of up to two more deliveries of an accepted event.
    pub(crate) duplicate: f64,
    /// Chance that a forger posts a success for the same operation.
    pub(crate) forge: f64,
}

/// The endpoint a seed's vendor posts to: the receiver of the living incarnation. With
/// `failures_final` the vendor's REJECTED updates mean rejected (as `ticket_mapping`, and the
/// built-in Stripe mapping for `payment_intent.payment_failed`, read them); otherwise they mean
/// processing, as an application maps them once the vendor documents that a success may
/// follow a failure.
pub(crate) fn receiver(
    config: &recoverable_write::Handle<std::sync::Arc<dyn recoverable_write::ledger::FullLedger>>,
    failures_final: bool,
) -> CallbackReceiver {
    let mut mapping = ticket_mapping();
    if !failures_final {
        let failures = std::mem::take(&mut mapping.rejected);
        mapping.processing.extend(failures);
    }
    CallbackReceiver::new(
        config,
        mapping,
        StripeSignature::new(Secret::new(WEBHOOK_SECRET).expect("a long secret")),
        AccountTenants::default().account(TENANT, TENANT),
    )
}

/// One event and what became of its deliveries.
#[derive(Debug)]
pub(crate) struct Sent {
    pub(crate) event: VendorEvent,
    /// Posted by the forger, signed with another secret.
    pub(crate) forged: bool,
    /// Every delivery's outcome, in order (`no endpoint` while no process is up).
    pub(crate) outcomes: Vec<&'static str>,
    /// The first outcome the endpoint accepted (2xx), and when.
    pub(crate) accepted: Option<DeliveryOutcome>,
    pub(crate) accepted_at: Option<tokio::time::Instant>,
}

/// The vendor's webhook sender.
#[derive(Debug)]
pub(crate) struct Mailer {
    endpoint: Mutex<Option<CallbackReceiver>>,
    signer: Signer,
    forger: Signer,
    plan: DeliveryPlan,
    rng: Mutex<Rng>,
    pub(crate) sent: Mutex<Vec<Sent>>,
    /// Events not yet accepted (and their duplicates not yet sent).
    outstanding: AtomicUsize,
}

impl Mailer {
    pub(crate) fn new(plan: DeliveryPlan, rng: Rng) -> Arc<Self> {
        Arc::new(Self {
            endpoint: Mutex::new(None),
            signer: Signer::stripe(Secret::new(WEBHOOK_SECRET).expect("a long secret")),
            forger: Signer::stripe(Secret::new(FORGER_SECRET).expect("a long secret")),
            plan,
            rng: Mutex::new(rng),
            sent: Mutex::new(Vec::new()),
            outstanding: AtomicUsize::new(0),
        })
    }

    /// The endpoint from now on (`None`: the process is down; deliveries fail and are retried).
    pub(crate) fn endpoint(&self, receiver: Option<CallbackReceiver>) {
        *self.endpoint.lock().unwrap() = receiver;
    }

    /// Events still to be accepted or delivered again.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::SeqCst)
    }

    /// Delivers every event the vendor emits.
    pub(crate) fn start(
        self: &Arc<Self>,
        mut events: UnboundedReceiver<VendorEvent>,
    ) -> JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                me.clone().dispatch(event);
            }
        })
    }

    fn ms(&self, lo: u64, hi: u64) -> Duration {
        self.rng.lock().unwrap().ms(lo, hi)
    }

    fn chance(&self, p: f64) -> bool {
        self.rng.lock().unwrap().chance(p)
    }

    fn dispatch(self: Arc<Self>, event: VendorEvent) {
        let first = if self.chance(self.plan.late) {
            self.ms(2_000, 10_000)
        } else {
            self.ms(0, self.plan.max_delay.as_millis() as u64)
        };
        let again: Vec<Duration> = (0..2)
            .filter(|_| self.chance(self.plan.duplicate))
            .map(|_| self.ms(0, 3_000))
            .collect();
        if self.chance(self.plan.forge) {
            let forged = VendorEvent {
                id: format!("forged_{}", event.id),
                kind: "ticket.created",
                status: "SUCCEEDED",
                ticket: FORGED_REF.into(),
                ..event.clone()
            };
            let at = self.ms(0, 3_000);
            let idx = self.push(forged, true);
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                me.post(idx).await;
            });
        }
        let idx = self.push(event, false);
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            tokio::time::sleep(first).await;
            self.deliver_until_accepted(idx).await;
            for wait in again {
                tokio::time::sleep(wait).await;
                self.deliver_until_accepted(idx).await;
            }
            self.outstanding.fetch_sub(1, Ordering::SeqCst);
        });
    }

    fn push(&self, event: VendorEvent, forged: bool) -> usize {
        let mut sent = self.sent.lock().unwrap();
        sent.push(Sent {
            event,
            forged,
            outcomes: Vec::new(),
            accepted: None,
            accepted_at: None,
        });
        sent.len() - 1
    }

    /// Posts until the endpoint answers 2xx, backing off as vendors do.
    async fn deliver_until_accepted(&self, idx: usize) {
        let mut backoff = Duration::from_millis(100);
        while !self.post(idx).await {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    /// One delivery; whether it was accepted.
    async fn post(&self, idx: usize) -> bool {
        let (body, forged, id) = {
            let sent = self.sent.lock().unwrap();
            let s = &sent[idx];
            (body(&s.event), s.forged, s.event.id.clone())
        };
        let receiver = self.endpoint.lock().unwrap().clone();
        let Some(receiver) = receiver else {
            self.sent.lock().unwrap()[idx].outcomes.push("no endpoint");
            return false;
        };
        let signer = if forged { &self.forger } else { &self.signer };
        let delivery = signer.sign(&id, &body, SystemTime::now());
        let receipt = receiver.receive(&delivery.headers, &delivery.body).await;
        let outcome = receipt
            .outcomes
            .into_iter()
            .next()
            .unwrap_or(DeliveryOutcome::Unparseable {
                why: "no event".into(),
            });
        let mut sent = self.sent.lock().unwrap();
        let s = &mut sent[idx];
        s.outcomes.push(outcome.label());
        let ok = receipt.status.is_success();
        if ok && s.accepted.is_none() {
            s.accepted = Some(outcome);
            s.accepted_at = Some(tokio::time::Instant::now());
        }
        // A forger does not retry a refusal.
        ok || forged
    }
}

/// The vendor's event, in the shape of `testing::callbacks::ticket_event` (read by
/// `ticket_mapping`: the echoed key first, then the operation id, then the ticket).
fn body(e: &VendorEvent) -> serde_json::Value {
    json!({
        "event": {"id": e.id, "type": e.kind},
        "tenant": TENANT,
        "ticket": {
            "id": e.ticket,
            "status": e.status,
            "operation_id": e.op,
            "idempotency_key": e.key,
        }
    })
}
