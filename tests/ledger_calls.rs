//! How many ledger calls a write costs, counted at the `Ledger` trait: a new write is created and
//! claimed in one call (`create_and_apply`) and recorded in one more (`apply`); with an
//! authorizer the claim waits for the permission check (create, check, claim, record). Each
//! test also checks the row and the fake vendor's count of side effects.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use http_body_util::BodyExt;
use recoverable_write::authorize::{Access, Denied};
use recoverable_write::ledger::backend::{NewEvidence, Update};
use recoverable_write::ledger::{
    BoxFuture, Created, EvidenceEntry, Ledger, LedgerError, NewOperation, OperationRecord,
};
use recoverable_write::testing::FakeVendor;
use recoverable_write::{
    Error, MemoryLedger, Operation, OperationId, RecoverableWriteLayer, SendOnceGuardLayer, State,
    Tenant,
};
use tower::{Service, ServiceBuilder, ServiceExt};

/// Counts the calls of each `Ledger` method, then delegates to a `MemoryLedger`.
#[derive(Debug, Default)]
struct Counting {
    inner: MemoryLedger,
    create_or_get: AtomicUsize,
    create_and_apply: AtomicUsize,
    apply: AtomicUsize,
    get: AtomicUsize,
}

impl Counting {
    fn counts(&self) -> [usize; 4] {
        [
            self.create_or_get.load(Ordering::SeqCst),
            self.create_and_apply.load(Ordering::SeqCst),
            self.apply.load(Ordering::SeqCst),
            self.get.load(Ordering::SeqCst),
        ]
    }
}

impl Ledger for Counting {
    fn create_or_get(&self, new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        self.create_or_get.fetch_add(1, Ordering::SeqCst);
        self.inner.create_or_get(new)
    }
    fn create_and_apply(
        &self,
        new: NewOperation,
        first: Update,
    ) -> BoxFuture<'_, Result<Created, LedgerError>> {
        self.create_and_apply.fetch_add(1, Ordering::SeqCst);
        self.inner.create_and_apply(new, first)
    }
    fn get<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        self.get.fetch_add(1, Ordering::SeqCst);
        self.inner.get(tenant, id)
    }
    fn apply(&self, update: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        self.apply.fetch_add(1, Ordering::SeqCst);
        self.inner.apply(update)
    }
    fn claim_prepared(
        &self,
        now_ms: i64,
        older_than_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        self.inner
            .claim_prepared(now_ms, older_than_ms, lease_ms, limit)
    }
    fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        self.inner.claim_due(now_ms, lease_ms, limit)
    }
    fn sweep_expired(
        &self,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        self.inner.sweep_expired(now_ms)
    }
    fn append_evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
        entry: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        self.inner.append_evidence(tenant, id, entry)
    }
    fn evidence<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>> {
        self.inner.evidence(tenant, id)
    }
    fn list<'a>(
        &'a self,
        query: &'a recoverable_write::ledger::OperationQuery,
    ) -> BoxFuture<'a, Result<recoverable_write::ledger::Page, LedgerError>> {
        self.inner.list(query)
    }
    fn count_by_state<'a>(
        &'a self,
        scope: &'a recoverable_write::ledger::TenantScope,
    ) -> BoxFuture<'a, Result<recoverable_write::ledger::StateCounts, LedgerError>> {
        self.inner.count_by_state(scope)
    }
    fn oldest<'a>(
        &'a self,
        scope: &'a recoverable_write::ledger::TenantScope,
        states: &'a [recoverable_write::state::State],
    ) -> BoxFuture<'a, Result<recoverable_write::ledger::OldestPerState, LedgerError>> {
        self.inner.oldest(scope, states)
    }
}

async fn write(
    layer: &RecoverableWriteLayer,
    vendor: &FakeVendor,
    intent: &str,
) -> Result<http::StatusCode, Error> {
    let credential = Arc::new(Mutex::new(CREDENTIAL.to_owned()));
    let mut svc = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(SendOnceGuardLayer::new())
        .service(authed_client(credential));
    let op = Operation::for_intent(TENANT, "create_ticket", intent);
    let res = svc
        .ready()
        .await?
        .call(ticket_request(vendor, &op, "E17"))
        .await?;
    let status = res.status();
    let _: Bytes = res.into_body().collect().await.expect("body").to_bytes();
    Ok(status)
}

async fn row(ledger: &Counting, intent: &str) -> OperationRecord {
    let op = Operation::for_intent(TENANT, "create_ticket", intent);
    ledger
        .inner
        .get(op.tenant(), op.id())
        .await
        .expect("get")
        .expect("the operation exists")
}

#[tokio::test]
async fn a_new_write_costs_two_ledger_calls() {
    let vendor = FakeVendor::start().await;
    let ledger = Arc::new(Counting::default());
    let layer = RecoverableWriteLayer::from_arc(ledger.clone())
        .budget(fast_policy())
        .expect("a valid budget");

    let status = write(&layer, &vendor, "intent-two-calls")
        .await
        .expect("sent");
    assert_eq!(status, 201);
    // [create_or_get, create_and_apply, apply, get]
    assert_eq!(ledger.counts(), [0, 1, 1, 0]);
    let row = row(&ledger, "intent-two-calls").await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.attempts_used, 1);
    assert_eq!(row.generation.0, 1);
    let kinds: Vec<String> = ledger
        .inner
        .evidence(&row.tenant, &row.operation_id)
        .await
        .expect("evidence")
        .into_iter()
        .map(|e| e.entry.kind)
        .collect();
    assert_eq!(kinds, ["created", "attempt_registered", "attempt_result"]);
    assert_eq!(vendor.posts_received(), 1);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn with_an_authorizer_the_claim_waits_for_the_check() {
    let vendor = FakeVendor::start().await;
    let ledger = Arc::new(Counting::default());
    let layer = RecoverableWriteLayer::from_arc(ledger.clone())
        .budget(fast_policy())
        .expect("a valid budget")
        .authorizer(|op: &OperationRecord, access: Access| {
            if op.intent_ref == "intent-denied" {
                Err(Denied::new(access, "not this one"))
            } else {
                Ok(())
            }
        });

    let status = write(&layer, &vendor, "intent-allowed")
        .await
        .expect("sent");
    assert_eq!(status, 201);
    assert_eq!(ledger.counts(), [1, 0, 2, 0]);
    assert_eq!(row(&ledger, "intent-allowed").await.state, State::Succeeded);

    // A refusal leaves the operation PREPARED, never sent.
    let err = write(&layer, &vendor, "intent-denied")
        .await
        .expect_err("denied");
    assert!(matches!(err, Error::Denied { .. }), "{err:?}");
    assert_eq!(ledger.counts(), [2, 0, 2, 0]);
    let denied = row(&ledger, "intent-denied").await;
    assert_eq!(denied.state, State::Prepared);
    assert_eq!(denied.attempts_used, 0);
    assert_eq!(vendor.posts_received(), 1);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn a_repeated_write_is_answered_from_the_ledger_without_a_claim() {
    let vendor = FakeVendor::start().await;
    let ledger = Arc::new(Counting::default());
    let layer = RecoverableWriteLayer::from_arc(ledger.clone())
        .budget(fast_policy())
        .expect("a valid budget");

    write(&layer, &vendor, "intent-again").await.expect("sent");
    let status = write(&layer, &vendor, "intent-again")
        .await
        .expect("stored answer");
    assert_eq!(status, 201);
    // The second call found the SUCCEEDED row: no claim, no record.
    assert_eq!(ledger.counts(), [0, 2, 1, 0]);
    assert_eq!(vendor.posts_received(), 1);
    assert_eq!(vendor.tickets_created(), 1);
}
