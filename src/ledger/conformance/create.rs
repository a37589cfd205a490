//! Checks of creating and reading an operation: every field round-trips, `create_or_get` is
//! idempotent by operation id and by intent, tenants are apart, and concurrent creators of one
//! intent get one row.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;

use super::fixtures::{T0, keep, new_operation, update_of};
use super::helpers::{apply_ok, assert_new_row, create, get, kinds, log, must};
use crate::ledger::{Created, Ledger, NewEvidence, OperationRecord};
use crate::operation::{FrozenHeaders, Generation, OperationId, PayloadHash, Tenant};
use crate::state::State;

/// A created operation reads back with every field intact (body bytes, repeated headers,
/// budget, contract), in state `PREPARED` at generation 0, version 0, with one `created` entry.
pub async fn create_then_get_round_trips_every_field<L: Ledger>(ledger: L) {
    let new = new_operation("tenant-a", "op-204", "intent-7781");
    let created = create(&ledger, new.clone()).await;
    assert_new_row(&created, &new);
    let read = get(&ledger, &created).await;
    assert_eq!(read, created);
    assert_eq!(read.idempotency_key.as_str(), new.idempotency_key.as_str());

    let entries = log(&ledger, &created).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].entry,
        NewEvidence {
            attempt_id: None,
            generation: Generation(0),
            kind: "created".into(),
            from_state: None,
            to_state: Some(State::Prepared),
            evidence: None,
            note: None,
            at_ms: T0,
        }
    );
}

/// An empty body and no headers are stored as such (not as NULL, not as a failure).
pub async fn empty_body_and_no_headers_round_trip<L: Ledger>(ledger: L) {
    let mut new = new_operation("tenant-a", "op-empty", "intent-empty");
    let request = Arc::make_mut(&mut new.request);
    request.body = Bytes::new();
    request.headers = FrozenHeaders::new();
    request.method = http::Method::PUT;
    let created = create(&ledger, new.clone()).await;
    assert_new_row(&created, &new);
    assert_eq!(get(&ledger, &created).await, created);
}

/// Reading an operation that does not exist is `None`, not an error.
pub async fn get_of_an_unknown_operation_is_none<L: Ledger>(ledger: L) {
    let found = must(
        ledger
            .get(&Tenant::new("tenant-a"), &OperationId::new("op-missing"))
            .await,
        "get",
    );
    assert_eq!(found, None);
    let entries = must(
        ledger
            .evidence(&Tenant::new("tenant-a"), &OperationId::new("op-missing"))
            .await,
        "evidence",
    );
    assert!(entries.is_empty());
}

/// Creating the same operation id again returns the first row, untouched, whatever the new
/// intent or payload: the caller compares payload hashes.
pub async fn create_or_get_is_idempotent_by_operation_id<L: Ledger>(ledger: L) {
    let first = create(&ledger, new_operation("tenant-a", "op-204", "intent-1")).await;
    let mut again = new_operation("tenant-a", "op-204", "intent-2");
    Arc::make_mut(&mut again.request).body = Bytes::from_static(b"{\"device\":\"E18\"}");
    again.payload_hash = PayloadHash::from_stored("another-hash");
    again.now_ms = T0 + 500;
    match must(ledger.create_or_get(again).await, "create_or_get") {
        Created::Existing(r) => assert_eq!(r, first),
        Created::New(r) => panic!("second create of op-204 made a new row: {r:?}"),
    }
    assert_eq!(get(&ledger, &first).await, first);
    assert_eq!(kinds(&log(&ledger, &first).await), ["created"]);
    // The second intent did not become an operation either.
    let by_intent = new_operation("tenant-a", "op-other", "intent-2");
    assert!(matches!(
        must(ledger.create_or_get(by_intent).await, "create_or_get"),
        Created::New(_)
    ));
}

/// The same `(tenant, action, intent_ref)` under another operation id returns the first
/// operation (its id, its key); another action with the same intent ref is another operation.
pub async fn create_or_get_is_idempotent_by_intent<L: Ledger>(ledger: L) {
    let first = create(&ledger, new_operation("tenant-a", "op-1", "intent-7781")).await;
    let second = new_operation("tenant-a", "op-2", "intent-7781");
    match must(ledger.create_or_get(second).await, "create_or_get") {
        Created::Existing(r) => {
            assert_eq!(r.operation_id.as_str(), "op-1");
            assert_eq!(r.idempotency_key, first.idempotency_key);
            assert_eq!(r, first);
        }
        Created::New(r) => panic!("the same intent became a second operation: {r:?}"),
    }
    let missing = must(
        ledger
            .get(&Tenant::new("tenant-a"), &OperationId::new("op-2"))
            .await,
        "get",
    );
    assert_eq!(missing, None, "the losing id must not exist");
    assert!(
        must(
            ledger
                .evidence(&Tenant::new("tenant-a"), &OperationId::new("op-2"))
                .await,
            "evidence"
        )
        .is_empty()
    );

    let mut refund = new_operation("tenant-a", "op-3", "intent-7781");
    refund.action = "refund".into();
    let refund = create(&ledger, refund).await;
    assert_eq!(&*refund.action, "refund");
    assert_eq!(get(&ledger, &first).await, first);
}

/// Tenants do not share operations: the same operation id (and intent) in another tenant is
/// another operation, and changing one leaves the other alone.
pub async fn same_operation_id_in_another_tenant_is_another_operation<L: Ledger>(ledger: L) {
    let a = create(&ledger, new_operation("tenant-a", "op-204", "intent-1")).await;
    let b = create(&ledger, new_operation("tenant-b", "op-204", "intent-1")).await;
    assert_ne!(a.idempotency_key, b.idempotency_key);
    assert_eq!(b.tenant.as_str(), "tenant-b");

    let moved = apply_ok(
        &ledger,
        update_of(&a, keep(&a, State::InFlight, T0 + 1), "x"),
    )
    .await;
    assert_eq!(moved.state, State::InFlight);
    assert_eq!(get(&ledger, &b).await, b);
    assert_eq!(kinds(&log(&ledger, &b).await), ["created"]);
    assert_eq!(kinds(&log(&ledger, &a).await), ["created", "x"]);
}

/// 16 callers create the same intent at once, each with its own generated operation id: one
/// row exists afterwards, one caller got `New`, and everyone got that row.
pub async fn concurrent_create_or_get_of_one_intent_yields_one_row<L: Ledger>(ledger: L) {
    const CALLERS: usize = 16;
    let ledger = Arc::new(ledger);
    let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let mut tasks = Vec::with_capacity(CALLERS);
    for _ in 0..CALLERS {
        let (ledger, barrier) = (ledger.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let id = OperationId::generate();
            let new = new_operation("tenant-a", id.as_str(), "intent-7781");
            barrier.wait().await;
            (id, must(ledger.create_or_get(new).await, "create_or_get"))
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        match task.await {
            Ok(r) => results.push(r),
            Err(e) => panic!("caller task failed: {e}"),
        }
    }
    let new: Vec<&OperationRecord> = results
        .iter()
        .filter_map(|(_, c)| match c {
            Created::New(r) => Some(r),
            Created::Existing(_) => None,
        })
        .collect();
    assert_eq!(new.len(), 1, "exactly one caller creates the operation");
    let winner = new[0].clone();
    let distinct: BTreeSet<&str> = results
        .iter()
        .map(|(_, c)| c.record().operation_id.as_str())
        .collect();
    assert_eq!(distinct.len(), 1, "all callers must get the same operation");
    for (id, created) in &results {
        assert_eq!(created.record(), &winner);
        if id != &winner.operation_id {
            assert_eq!(must(ledger.get(&winner.tenant, id).await, "get"), None);
        }
    }
    assert_eq!(kinds(&log(&*ledger, &winner).await), ["created"]);
}
