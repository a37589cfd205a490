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
use recoverable_write::RecoverableWrite;
use recoverable_write::authorize::{Access, Denied};
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::{BoxFuture, Ledger, LedgerError, OperationRecord};
use recoverable_write::testing::{FakeVendor, ForwardingLedger, LedgerCall};
use recoverable_write::{
    DeniedFirstSend, Error, MemoryLedger, Operation, RecoverableWriteLayer, SendOnceGuardLayer,
    State,
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

impl ForwardingLedger for Counting {
    fn inner(&self) -> &dyn FullLedger {
        &self.inner
    }

    fn around<'a, T, F>(&'a self, call: LedgerCall, f: F) -> BoxFuture<'a, Result<T, LedgerError>>
    where
        T: Send + 'a,
        F: FnOnce(&'a dyn FullLedger) -> BoxFuture<'a, Result<T, LedgerError>> + Send + 'a,
    {
        let counter = match call {
            LedgerCall::CreateOrGet => Some(&self.create_or_get),
            LedgerCall::CreateAndApply => Some(&self.create_and_apply),
            // `record` is `apply` for what an attempt produced: both count as the write's record.
            LedgerCall::Apply | LedgerCall::Record => Some(&self.apply),
            LedgerCall::Get => Some(&self.get),
            _ => None,
        };
        if let Some(c) = counter {
            c.fetch_add(1, Ordering::SeqCst);
        }
        f(&self.inner)
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
    let layer = RecoverableWrite::builder(ledger.clone())
        .budget(fast_policy())
        .build()
        .expect("a valid configuration")
        .layer();

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
        .map(|e| e.entry.kind.into_owned())
        .collect();
    assert_eq!(kinds, ["created", "attempt_registered", "attempt_result"]);
    assert_eq!(vendor.posts_received(), 1);
    assert_eq!(vendor.tickets_created(), 1);
}

#[tokio::test]
async fn with_an_authorizer_the_claim_waits_for_the_check() {
    let vendor = FakeVendor::start().await;
    let ledger = Arc::new(Counting::default());
    let builder = || {
        RecoverableWrite::builder(ledger.clone())
            .budget(fast_policy())
            .authorizer(|op: &OperationRecord, access: Access| {
                if op.intent_ref.starts_with("intent-denied") {
                    Err(Denied::new(access, "not this one"))
                } else {
                    Ok(())
                }
            })
    };
    let layer = builder().build().expect("a valid configuration").layer();

    let status = write(&layer, &vendor, "intent-allowed")
        .await
        .expect("sent");
    assert_eq!(status, 201);
    assert_eq!(ledger.counts(), [1, 0, 2, 0]);
    assert_eq!(row(&ledger, "intent-allowed").await.state, State::Succeeded);

    // A refusal closes the operation (the default, `DeniedFirstSend::Close`): one more ledger
    // write, REJECTED, never sent, and the caller is told it never will be.
    let err = write(&layer, &vendor, "intent-denied")
        .await
        .expect_err("denied");
    assert!(
        matches!(
            err,
            Error::Denied {
                fate: DeniedFirstSend::Close,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("it never will be"), "{err}");
    assert_eq!(ledger.counts(), [2, 0, 3, 0]);
    let denied = row(&ledger, "intent-denied").await;
    assert_eq!(denied.state, State::Rejected);
    assert_eq!(denied.attempts_used, 0);
    assert_eq!(vendor.posts_received(), 1);
    assert_eq!(vendor.tickets_created(), 1);

    // Queued by configuration: left PREPARED for the recoverer, and the caller is told so.
    let queued = builder()
        .denied_first_sends(DeniedFirstSend::Queue)
        .build()
        .expect("a valid configuration")
        .layer();
    let err = write(&queued, &vendor, "intent-denied-queued")
        .await
        .expect_err("denied");
    assert!(
        matches!(
            err,
            Error::Denied {
                fate: DeniedFirstSend::Queue,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("stays queued"), "{err}");
    let queued_row = row(&ledger, "intent-denied-queued").await;
    assert_eq!(queued_row.state, State::Prepared);
    assert_eq!(vendor.posts_received(), 1);
}

#[tokio::test]
async fn a_repeated_write_is_answered_from_the_ledger_without_a_claim() {
    let vendor = FakeVendor::start().await;
    let ledger = Arc::new(Counting::default());
    let layer = RecoverableWrite::builder(ledger.clone())
        .budget(fast_policy())
        .build()
        .expect("a valid configuration")
        .layer();

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
