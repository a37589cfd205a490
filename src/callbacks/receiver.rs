//! The inbound endpoint: verify, parse, deduplicate, match and apply a vendor's delivery.

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderMap, StatusCode};
use serde::Serialize;

use super::{AccountTenants, CallbackMapping, DeliveryOutcome, MatchBy, ParsedEvent, Verifier};
use crate::Handle;
use crate::contradiction::{CONTRADICTION, contradiction};
use crate::core::Shared;
use crate::core::engine;
use crate::error::Outcome;
use crate::evidence::Evidence;
use crate::ledger::backend::NewEvidence;
use crate::ledger::{
    CallbackApplied, CallbackDelivery, CallbackEffect, CallbackLedger, CallbackQuarantined,
    CallbackRecorded, IgnoredCallback, LedgerError, ListingLedger, OperationRecord, ProbeBy,
    QuarantinedCallback,
};
use crate::notify::Notice;
use crate::operation::{OperationId, Tenant};
use crate::state::{Event, State};

/// How often a delivery re-reads its operation when the compare-and-swap finds it moved (a
/// lookup, an attempt's result or another delivery won the race) before answering 503.
const MAX_STALE_RETRIES: usize = 8;

/// Evidence kind of an entry a callback appended.
pub const CALLBACK_KIND: &str = "callback";

/// The quarantine reason of an event that names a `PREPARED` operation.
const NEVER_SENT: &str = "it names an operation that was never sent (PREPARED): it is not evidence about \
     a send of this operation";

/// Receives one vendor's callbacks for the operations of a [`Handle`]: the one function behind
/// the endpoint, for any framework ([`receive`](Self::receive) over the raw headers and body),
/// and an axum handler with feature `axum` ([`router`](Self::router)).
///
/// For each delivery, in this order:
///
/// 1. the [`Verifier`] checks the signature over the raw bytes; a failure changes nothing, is
///    counted, and is answered `401` (nothing is parsed);
/// 2. the [`CallbackMapping`] parses it into events (an Adyen delivery batches several);
/// 3. each event is **deduplicated first**, by its vendor and event id
///    ([`CallbackLedger::callback_seen`](crate::ledger::CallbackLedger::callback_seen), one probe of the
///    dedupe table's key): an event seen before is answered as a duplicate before anything
///    else is read, so a redelivered or replayed event costs the same whatever the ledger
///    holds. An event of a type the mapping ignores is recorded for deduplication and nothing
///    else ([`CallbackLedger::record_ignored_callback`](crate::ledger::CallbackLedger::record_ignored_callback));
/// 4. its account maps to a tenant ([`AccountTenants`]), and the operation is found **in that
///    tenant only**, by what the mapping names (the echoed idempotency key, the operation id,
///    or the vendor's reference), each through an index;
/// 5. its evidence goes through the state machine as a lookup answer does (without spending a
///    query: [`Event::Callback`]), and the ledger records the event id and applies the change
///    in **one transaction**
///    ([`CallbackLedger::apply_callback`](crate::ledger::CallbackLedger::apply_callback)): a second delivery of
///    the event changes nothing, also when several instances receive it at once;
/// 6. evidence that can no longer move the operation (a `processing` after `SUCCEEDED`,
///    anything in `MANUAL_REVIEW`) is appended as late evidence and surfaced to subscribers
///    ([`Notice::LateEvidence`]), never acted on. Evidence that **contradicts** a final state
///    (a success after `REJECTED`, a failure after `SUCCEEDED`, another vendor reference than
///    the recorded one) raises an alarm instead: a [`Notice::Contradiction`], the counter
///    `recoverable_write_contradictions_total{vendor}` (feature `metrics`), and a
///    `contradiction` entry that marks the operation for the review queue until a person
///    acknowledges it (see [`contradiction`](crate::contradiction)). An event for an operation
///    whose attempt is still on the wire (`IN_FLIGHT`) is answered `503` so the vendor delivers
///    it again once that attempt has a result;
/// 7. an event that matches no operation of its tenant, names an unknown account, matches
///    another tenant's operation (one index probe across tenants, never a listing), or names an
///    operation that was never sent (`PREPARED`: bytes leave only after `IN_FLIGHT` is durable,
///    so such an event is about another write, or the vendor got this one some other way) is
///    stored in the callback quarantine
///    ([`CallbackLedger::quarantined_callbacks`](crate::ledger::CallbackLedger::quarantined_callbacks)), never
///    applied, never dropped, and answered `200`.
///
/// The answer is `200` once every event is accepted, recognised as a duplicate, ignored or
/// quarantined, and `503` when the ledger could not take one (the vendor retries, and the retry
/// is deduplicated). Nothing of the payload is logged or stored: tracing carries the vendor,
/// event id, event type and operation id.
///
/// ```no_run
/// # #[cfg(feature = "axum")]
/// # async fn run(rw: recoverable_write::Handle<recoverable_write::MemoryLedger>) -> Result<(), Box<dyn std::error::Error>> {
/// use recoverable_write::callbacks::{
///     AccountTenants, CallbackMapping, CallbackReceiver, Secret, StripeSignature,
/// };
///
/// // An unset variable, or an empty or short secret, stops the start here.
/// let secret = Secret::new(std::env::var("STRIPE_WEBHOOK_SECRET")?)?;
/// let stripe = CallbackReceiver::new(
///     &rw,
///     CallbackMapping::stripe(),
///     StripeSignature::new(secret),
///     AccountTenants::default().default_tenant("acme"),
/// );
/// let app: axum::Router = axum::Router::new().nest_service("/webhooks/stripe", stripe.router());
/// # let _ = app;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct CallbackReceiver {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    /// The dedupe table, the callback quarantine and the probes.
    callbacks: Arc<dyn CallbackLedger>,
    /// The lookups by vendor reference and idempotency key.
    listing: Arc<dyn ListingLedger>,
    mapping: CallbackMapping,
    verifier: Box<dyn Verifier>,
    accounts: AccountTenants,
}

/// What a delivery came to: the status to answer the vendor with and each event's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Receipt {
    /// The status for the vendor: 2xx once accepted (applied, late, duplicate, quarantined,
    /// ignored), 401 for an unverified delivery, 4xx for an unparseable one, 503 when it must be
    /// retried.
    #[serde(skip)]
    pub status: StatusCode,
    /// What became of each event of the delivery, in order.
    pub outcomes: Vec<DeliveryOutcome>,
}

impl CallbackReceiver {
    /// A receiver of one vendor's callbacks (`mapping.vendor` scopes its event ids) for the
    /// operations of `config`, checking each delivery with `verifier` and mapping its account
    /// to a tenant with `accounts`.
    ///
    /// The ledger must store callbacks ([`CallbackLedger`]) and find operations by vendor
    /// reference and idempotency key ([`ListingLedger`]): for a ledger without them this does
    /// not compile.
    pub fn new<L: CallbackLedger + ListingLedger>(
        config: &Handle<L>,
        mapping: CallbackMapping,
        verifier: impl Verifier + 'static,
        accounts: AccountTenants,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                shared: config.shared().clone(),
                callbacks: config.ledger().clone(),
                listing: config.ledger().clone(),
                mapping,
                verifier: Box::new(verifier),
                accounts,
            }),
        }
    }

    /// The vendor this receiver serves (its mapping's `vendor`).
    pub fn vendor(&self) -> &str {
        &self.inner.mapping.vendor
    }

    /// Handles one delivery as received: its headers and raw body, before any parsing.
    pub async fn receive(&self, headers: &HeaderMap, body: &[u8]) -> Receipt {
        let inner = &*self.inner;
        let vendor = inner.mapping.vendor.as_str();
        count_delivery(vendor, "received");
        let verified = match inner.verifier.verify(headers, body, SystemTime::now()) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(vendor, error = %e, "callback refused: signature not verified");
                return finish(
                    vendor,
                    vec![DeliveryOutcome::Unverified { why: e.to_string() }],
                );
            }
        };
        count_delivery(vendor, "verified");
        let events = match super::parse(&inner.mapping, &verified) {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(vendor, error = %e, "callback refused: not parseable");
                return finish(
                    vendor,
                    vec![DeliveryOutcome::Unparseable { why: e.to_string() }],
                );
            }
        };
        let mut outcomes = Vec::with_capacity(events.len());
        for event in events {
            let outcome = match self.handle(event).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    tracing::warn!(vendor, error = %e, "callback not recorded: the ledger failed");
                    DeliveryOutcome::StoreUnavailable
                }
            };
            outcomes.push(outcome);
        }
        finish(vendor, outcomes)
    }

    async fn handle(&self, event: ParsedEvent) -> Result<DeliveryOutcome, LedgerError> {
        let inner = &*self.inner;
        let shared = &*inner.shared;
        let vendor = inner.mapping.vendor.as_str();
        let received_at_ms = shared.clock.now_ms();
        // Deduplicate first: a redelivered (or captured and replayed) event costs one probe of
        // the dedupe table's key, whatever it names and however big the ledger is. The ledger
        // checks again in the transaction that records the event: this is only the shortcut.
        if inner
            .callbacks
            .callback_seen(vendor, &event.event_id)
            .await?
        {
            tracing::debug!(vendor, event_id = %event.event_id, "callback delivered again");
            return Ok(DeliveryOutcome::Duplicate);
        }
        let tenant = inner.accounts.tenant_for(event.account.as_deref());
        let Some(evidence) = event.evidence.clone() else {
            return self.ignore(&event, tenant, received_at_ms).await;
        };
        let Some(tenant) = tenant else {
            let why = match &event.account {
                Some(_) => "its account maps to no tenant",
                None => "it names no account and there is no default tenant",
            };
            return self.quarantine(&event, None, evidence, why).await;
        };
        let Some(matcher) = event.matcher.clone() else {
            return self
                .quarantine(&event, Some(tenant), evidence, "it names no operation")
                .await;
        };
        for _ in 0..MAX_STALE_RETRIES {
            let found = match matcher.by {
                MatchBy::OperationId => {
                    shared
                        .ledger
                        .get(&tenant, &OperationId::new(matcher.value.as_str()))
                        .await?
                }
                MatchBy::IdempotencyKey => {
                    inner
                        .listing
                        .find_by_idempotency_key(&tenant, &matcher.value)
                        .await?
                }
                MatchBy::RemoteRef => {
                    inner
                        .listing
                        .find_by_remote_ref(&tenant, &matcher.value)
                        .await?
                }
            };
            let Some(row) = found else {
                let why = if self.belongs_elsewhere(&tenant, &matcher).await? {
                    "it matches an operation of another tenant"
                } else {
                    "no operation of its tenant matches it"
                };
                return self.quarantine(&event, Some(tenant), evidence, why).await;
            };
            match self.apply(&event, &row, &evidence, received_at_ms).await? {
                Some(outcome) => return Ok(outcome),
                None => continue, // stale: read again, decide again
            }
        }
        tracing::warn!(
            vendor = %inner.mapping.vendor,
            event_id = %event.event_id,
            "callback not applied: its operation kept moving; the vendor will deliver it again"
        );
        Ok(DeliveryOutcome::StoreUnavailable)
    }

    /// Records an event of a type the mapping ignores, for deduplication only.
    async fn ignore(
        &self,
        event: &ParsedEvent,
        tenant: Option<Tenant>,
        received_at_ms: i64,
    ) -> Result<DeliveryOutcome, LedgerError> {
        let vendor = self.inner.mapping.vendor.as_str();
        tracing::debug!(
            vendor,
            event_id = %event.event_id,
            event_type = %event.event_type,
            "callback of a type the mapping ignores"
        );
        let recorded = self
            .inner
            .callbacks
            .record_ignored_callback(IgnoredCallback {
                vendor: vendor.to_owned(),
                event_id: event.event_id.clone(),
                event_type: event.event_type.clone(),
                tenant,
                received_at_ms,
            })
            .await;
        match recorded {
            Ok(CallbackRecorded::Duplicate) => Ok(DeliveryOutcome::Duplicate),
            Ok(_) => Ok(DeliveryOutcome::Ignored),
            // A backend that cannot record it: the event carries nothing to apply, so making
            // the vendor retry it would change nothing either.
            Err(LedgerError::Config(why)) => {
                tracing::warn!(vendor, event_id = %event.event_id, %why, "ignored callback not recorded");
                Ok(DeliveryOutcome::Ignored)
            }
            Err(e) => Err(e),
        }
    }

    /// Applies `evidence` to `row` with the event's dedupe record, in one ledger transaction.
    /// `None`: the row moved since it was read.
    async fn apply(
        &self,
        event: &ParsedEvent,
        row: &OperationRecord,
        evidence: &Evidence,
        received_at_ms: i64,
    ) -> Result<Option<DeliveryOutcome>, LedgerError> {
        let inner = &*self.inner;
        let shared = &*inner.shared;
        let vendor = inner.mapping.vendor.as_str();
        let clock = engine::clock(shared);
        let note = format!(
            "{vendor} callback {} ({})",
            event.event_id, event.event_type
        );
        let entry = |kind: &'static str| NewEvidence {
            attempt_id: row.current_attempt,
            generation: row.generation,
            kind: kind.into(),
            from_state: None,
            to_state: None,
            evidence: Some(evidence.clone()),
            note: Some(note.clone()),
            at_ms: clock.now_ms,
        };
        let delivery = CallbackDelivery {
            vendor: vendor.to_owned(),
            event_id: event.event_id.clone(),
            event_type: event.event_type.clone(),
            tenant: row.tenant.clone(),
            operation_id: row.operation_id.clone(),
            received_at_ms,
        };
        let event_in = Event::Callback(evidence.clone());
        let mut contradicted = None;
        let effect = match row.update_on(&event_in, clock, None, None, None, entry(CALLBACK_KIND)) {
            Ok(update) => CallbackEffect::Apply(update),
            // The attempt's bytes may be on the wire: its own result decides. The vendor
            // delivers again later, when the event can be applied or appended.
            Err(_) if row.state == State::InFlight => {
                tracing::info!(
                    vendor,
                    event_id = %event.event_id,
                    operation = %row.operation_id,
                    state = row.state.as_str(),
                    "callback deferred: the operation's attempt is in flight"
                );
                return Ok(Some(DeliveryOutcome::Deferred {
                    operation_id: row.operation_id.clone(),
                }));
            }
            // Never sent: bytes leave only once IN_FLIGHT is durable, so this event is not about
            // a send of this operation. Deferring it would answer 503 for as long as the row
            // waits (forever for an abandoned one); applying it would resolve a write nobody
            // made. A person looks at it in the quarantine; the row is left as it is.
            Err(_) if row.state == State::Prepared => {
                return self
                    .quarantine(
                        event,
                        Some(row.tenant.clone()),
                        evidence.clone(),
                        NEVER_SENT,
                    )
                    .await
                    .map(Some);
            }
            Err(_) => match contradiction(row, evidence) {
                Some(c) => {
                    let mut e = entry(CONTRADICTION);
                    e.note = Some(format!("{note}: {c}"));
                    contradicted = Some(c);
                    CallbackEffect::Contradiction(e)
                }
                None => CallbackEffect::Append(entry("late_evidence")),
            },
        };
        let late = !matches!(effect, CallbackEffect::Apply(_));
        let applied = inner.callbacks.apply_callback(delivery, effect).await?;
        let outcome = match applied {
            CallbackApplied::Applied(new_row) => {
                tracing::info!(
                    vendor,
                    event_id = %event.event_id,
                    operation = %row.operation_id,
                    from = row.state.as_str(),
                    to = new_row.state.as_str(),
                    "callback applied"
                );
                if new_row.state != row.state {
                    engine::publish(shared, &new_row);
                }
                DeliveryOutcome::Applied {
                    operation_id: row.operation_id.clone(),
                }
            }
            CallbackApplied::Appended => {
                debug_assert!(late);
                if let Some(c) = contradicted {
                    return Ok(Some(self.alarm(event, row, evidence, c)));
                }
                tracing::warn!(
                    vendor,
                    event_id = %event.event_id,
                    operation = %row.operation_id,
                    state = row.state.as_str(),
                    evidence = evidence.label(),
                    "late callback appended; it does not change the operation"
                );
                shared.notifier.publish(Notice::LateEvidence {
                    outcome: Outcome::from_record(row, None, true),
                    evidence: evidence.clone(),
                });
                DeliveryOutcome::Late {
                    operation_id: row.operation_id.clone(),
                }
            }
            CallbackApplied::Duplicate => {
                tracing::debug!(vendor, event_id = %event.event_id, "callback delivered again");
                DeliveryOutcome::Duplicate
            }
            CallbackApplied::Stale => return Ok(None),
            CallbackApplied::NoOperation => {
                return self
                    .quarantine(
                        event,
                        Some(row.tenant.clone()),
                        evidence.clone(),
                        "its operation is gone",
                    )
                    .await
                    .map(Some);
            }
        };
        Ok(Some(outcome))
    }

    /// The alarm of a recorded contradiction: an error log, the counter and a notice.
    fn alarm(
        &self,
        event: &ParsedEvent,
        row: &OperationRecord,
        evidence: &Evidence,
        c: crate::contradiction::Contradiction,
    ) -> DeliveryOutcome {
        let vendor = self.inner.mapping.vendor.as_str();
        tracing::error!(
            vendor,
            event_id = %event.event_id,
            operation = %row.operation_id,
            state = row.state.as_str(),
            evidence = evidence.label(),
            contradiction = %c,
            "callback contradicts the operation's final state; marked for review"
        );
        count_contradiction(vendor);
        self.inner.shared.notifier.publish(Notice::Contradiction {
            outcome: Outcome::from_record(row, None, true),
            evidence: evidence.clone(),
            contradiction: c,
            source: vendor.to_owned(),
        });
        DeliveryOutcome::Contradiction {
            operation_id: row.operation_id.clone(),
        }
    }

    /// Whether an operation of another tenant carries the value: one probe through an index
    /// led by the operation id or the vendor reference
    /// ([`CallbackLedger::other_tenant_with`](crate::ledger::CallbackLedger::other_tenant_with)), never a
    /// listing. Keys are opaque and never searched across tenants.
    async fn belongs_elsewhere(
        &self,
        tenant: &Tenant,
        matcher: &super::Matcher,
    ) -> Result<bool, LedgerError> {
        let by = match matcher.by {
            MatchBy::OperationId => ProbeBy::OperationId,
            MatchBy::RemoteRef => ProbeBy::RemoteRef,
            MatchBy::IdempotencyKey => return Ok(false),
        };
        match self
            .inner
            .callbacks
            .other_tenant_with(tenant, by, &matcher.value)
            .await
        {
            Ok(found) => Ok(found.is_some()),
            // A backend without the probe: the event is quarantined either way.
            Err(LedgerError::Config(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn quarantine(
        &self,
        event: &ParsedEvent,
        tenant: Option<Tenant>,
        evidence: Evidence,
        why: &str,
    ) -> Result<DeliveryOutcome, LedgerError> {
        let inner = &*self.inner;
        let vendor = inner.mapping.vendor.as_str();
        let (match_by, match_value) = match &event.matcher {
            Some(m) => (Some(match_by_label(m.by).to_owned()), Some(m.value.clone())),
            None => (None, None),
        };
        let stored = inner
            .callbacks
            .quarantine_callback(QuarantinedCallback {
                vendor: vendor.to_owned(),
                event_id: event.event_id.clone(),
                event_type: event.event_type.clone(),
                tenant,
                match_by,
                match_value,
                reason: why.to_owned(),
                evidence: Some(evidence),
                received_at_ms: inner.shared.clock.now_ms(),
            })
            .await?;
        Ok(match stored {
            CallbackQuarantined::Duplicate => DeliveryOutcome::Duplicate,
            _ => {
                tracing::warn!(
                    vendor,
                    event_id = %event.event_id,
                    event_type = %event.event_type,
                    why,
                    "callback quarantined; it changes nothing"
                );
                DeliveryOutcome::Quarantined {
                    why: why.to_owned(),
                }
            }
        })
    }
}

fn match_by_label(by: MatchBy) -> &'static str {
    match by {
        MatchBy::IdempotencyKey => "idempotency_key",
        MatchBy::OperationId => "operation_id",
        MatchBy::RemoteRef => "remote_ref",
    }
}

fn finish(vendor: &str, outcomes: Vec<DeliveryOutcome>) -> Receipt {
    for outcome in &outcomes {
        count_event(vendor, outcome.label());
    }
    Receipt {
        status: super::batch_status(&outcomes),
        outcomes,
    }
}

#[cfg(feature = "metrics")]
fn count_delivery(vendor: &str, stage: &'static str) {
    metrics::counter!(
        "recoverable_write_callback_deliveries_total",
        "vendor" => vendor.to_owned(),
        "stage" => stage,
    )
    .increment(1);
}

#[cfg(not(feature = "metrics"))]
fn count_delivery(_vendor: &str, _stage: &'static str) {}

#[cfg(feature = "metrics")]
fn count_event(vendor: &str, outcome: &'static str) {
    metrics::counter!(
        "recoverable_write_callback_events_total",
        "vendor" => vendor.to_owned(),
        "outcome" => outcome,
    )
    .increment(1);
}

#[cfg(not(feature = "metrics"))]
fn count_event(_vendor: &str, _outcome: &'static str) {}

#[cfg(feature = "metrics")]
fn count_contradiction(vendor: &str) {
    metrics::counter!(
        "recoverable_write_contradictions_total",
        "vendor" => vendor.to_owned(),
    )
    .increment(1);
}

#[cfg(not(feature = "metrics"))]
fn count_contradiction(_vendor: &str) {}

#[cfg(feature = "axum")]
mod axum_impl {
    use axum::extract::State as AxumState;
    use axum::response::{IntoResponse, Response};
    use bytes::Bytes;
    use http::HeaderMap;

    use super::{CallbackReceiver, Receipt};

    impl IntoResponse for Receipt {
        fn into_response(self) -> Response {
            (self.status, axum::Json(self)).into_response()
        }
    }

    impl CallbackReceiver {
        /// An axum `Router` answering `POST /` with [`receive`](Self::receive): mount it where
        /// the vendor delivers with `nest_service`
        /// (`Router::new().nest_service("/webhooks/stripe", receiver.router())`), which answers
        /// with or without a trailing slash (`/webhooks/stripe/`: a vendor's endpoint is typed
        /// by hand); axum's `nest` answers only without it. Mount it outside your user
        /// authentication: the signature is the authentication.
        pub fn router<S>(&self) -> axum::Router<S>
        where
            S: Clone + Send + Sync + 'static,
        {
            axum::Router::new()
                .route("/", axum::routing::post(handle))
                .with_state(self.clone())
        }
    }

    async fn handle(
        AxumState(receiver): AxumState<CallbackReceiver>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Receipt {
        receiver.receive(&headers, &body).await
    }
}

/// The alarm's counter, read through a recorder local to the test's thread.
#[cfg(all(test, feature = "metrics", feature = "test-util"))]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::SystemTime;

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };
    use serde_json::json;

    use super::*;
    use crate::callbacks::Secret;
    use crate::ledger::Ledger;
    use crate::ledger::conformance::{RawChanges, T0, keep, new_operation, update_of};
    use crate::testing::callbacks::{Signer, ticket_mapping};

    /// Counter totals by `name{label=value,...}`.
    #[derive(Clone, Default)]
    struct Totals(Arc<Mutex<HashMap<String, u64>>>);

    struct Handle(String, Totals);

    impl CounterFn for Handle {
        fn increment(&self, value: u64) {
            *self.1.0.lock().unwrap().entry(self.0.clone()).or_default() += value;
        }

        fn absolute(&self, value: u64) {
            self.1.0.lock().unwrap().insert(self.0.clone(), value);
        }
    }

    impl Recorder for Totals {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            Counter::from_arc(Arc::new(Handle(name, self.clone())))
        }

        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }

        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    /// Issue 27 item 5: a contradiction increments
    /// `recoverable_write_contradictions_total{vendor}` once, and a redelivery does not.
    #[test]
    fn a_contradiction_counts_once_per_event_with_its_vendor() {
        let totals = Totals::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let secret = Secret::new("whsec_unit_test_secret").unwrap();
        let ledger = crate::MemoryLedger::new();
        let rw = crate::RecoverableWrite::builder(ledger.clone())
            .build()
            .unwrap();
        let receiver = CallbackReceiver::new(
            &rw,
            ticket_mapping(),
            super::super::StripeSignature::new(secret.clone()),
            AccountTenants::default().account("tenant-a", "tenant-a"),
        );
        let event = json!({
            "event": {"id": "evt_contra", "type": "ticket.created"},
            "tenant": "tenant-a",
            "ticket": {"id": "W2", "status": "SUCCEEDED", "operation_id": "op-rej", "idempotency_key": null}
        });
        let d = Signer::stripe(secret).sign("evt_contra", &event, SystemTime::now());
        let outcomes = metrics::with_local_recorder(&totals, || {
            rt.block_on(async {
                let r = ledger
                    .create_or_get(new_operation("tenant-a", "op-rej", "intent-rej"))
                    .await
                    .unwrap()
                    .into_record();
                let rejected = RawChanges {
                    last_result: Some(State::Rejected),
                    ..keep(&r, State::Rejected, T0)
                };
                ledger
                    .apply(update_of(&r, rejected, "setup"))
                    .await
                    .unwrap()
                    .unwrap();
                let first = receiver.receive(&d.headers, &d.body).await;
                let again = receiver.receive(&d.headers, &d.body).await;
                (first.outcomes, again.outcomes)
            })
        });
        assert_eq!(
            outcomes,
            (
                vec![DeliveryOutcome::Contradiction {
                    operation_id: OperationId::new("op-rej")
                }],
                vec![DeliveryOutcome::Duplicate]
            )
        );
        let totals = totals.0.lock().unwrap();
        assert_eq!(
            totals.get("recoverable_write_contradictions_total{vendor=fake-vendor}"),
            Some(&1),
            "{totals:?}"
        );
        assert_eq!(
            totals.get(
                "recoverable_write_callback_events_total{vendor=fake-vendor,outcome=contradiction}"
            ),
            Some(&1),
            "{totals:?}"
        );
    }
}
