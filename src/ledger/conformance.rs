//! The ledger conformance suite: the behaviour every [`Ledger`] backend must have.
//!
//! Each check is a public `async fn` taking a fresh, empty ledger and panicking on the first
//! violation. [`ledger_conformance_tests!`](crate::ledger_conformance_tests) turns the whole
//! suite into `#[test]` functions with one line, so a new backend gets every check at once:
//!
//! ```
//! use recoverable_write::ledger::MemoryLedger;
//!
//! // Expands to `mod memory { #[test] fn create_then_get_round_trips_every_field() ... }`.
//! recoverable_write::ledger_conformance_tests!(memory, make = async { MemoryLedger::new() });
//! # fn main() {}
//! ```
//!
//! A backend whose ledger needs something kept alive for the test's duration (a temporary
//! directory, a database container) returns `(ledger, guard)` with `make_with_guard`:
//!
//! ```no_run
//! use recoverable_write::ledger::SqliteLedger;
//!
//! recoverable_write::ledger_conformance_tests!(sqlite, make_with_guard = async {
//!     let dir = tempfile::tempdir().unwrap();
//!     let ledger = SqliteLedger::open(dir.path().join("ledger.db")).await.unwrap();
//!     (ledger, dir)
//! });
//! # fn main() {}
//! ```
//!
//! The checks are written as drills: the function name says the scenario, and each one checks
//! both the row and the evidence log. Times are fixed milliseconds (no clock, no sleeps).
//! Concurrency checks spawn tasks on the multi-threaded runtime [`run`] builds, so races between
//! callers really happen.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::backend::Changes;
use super::{
    CallbackApplied, CallbackDelivery, CallbackEffect, CallbackQuarantined, ContractRef, Created,
    EvidenceEntry, Ledger, LedgerError, NewEvidence, NewOperation, OperationRecord,
    QuarantinedCallback, Recorded, StoredHeaders, StoredResponse, Update,
};
use crate::budget::BudgetPolicy;
use crate::evidence::{ConflictKind, Evidence};
use crate::operation::{
    AttemptId, FrozenHeaders, FrozenRequest, Generation, IdempotencyKey, OperationId,
    PayloadDigest, PayloadHash, Tenant,
};
use crate::state::{Clock, Event, State, transition};

mod callbacks;
pub use callbacks::*;

/// Generates one `#[test]` per conformance check, each with a fresh ledger.
///
/// Forms:
/// - `ledger_conformance_tests!(make = <async expr>)`: a module named `ledger_conformance`;
/// - `ledger_conformance_tests!(<module>, make = <async expr>)`: a module of that name (use it
///   to run the suite for several backends in one file);
/// - `ledger_conformance_tests!(<module>, make_with_guard = <async expr>)`: the expression
///   yields `(ledger, guard)`; the guard (a temporary directory, say) is dropped after the check.
///
/// The expression is evaluated once per test, inside the test's runtime; names used in it
/// resolve as at the macro call site (the module does `use super::*`). See the
/// [module docs](crate::ledger::conformance).
#[macro_export]
macro_rules! ledger_conformance_tests {
    (@tests $fixture:expr; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::ledger::conformance::run(async {
                    // The guard lives until the check is over.
                    let (ledger, _guard) = $fixture.await;
                    $crate::ledger::conformance::$check(ledger).await;
                });
            }
        )*
    };
    (@module $module:ident, $fixture:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $crate::ledger_conformance_tests!(@tests $fixture;
                create_then_get_round_trips_every_field,
                empty_body_and_no_headers_round_trip,
                get_of_an_unknown_operation_is_none,
                create_or_get_is_idempotent_by_operation_id,
                create_or_get_is_idempotent_by_intent,
                same_operation_id_in_another_tenant_is_another_operation,
                apply_with_matching_precondition_writes_every_column_and_bumps_version,
                apply_writes_optional_columns_as_given,
                apply_with_stale_generation_changes_nothing,
                apply_with_stale_version_changes_nothing,
                apply_with_wrong_state_changes_nothing,
                apply_to_an_unknown_operation_is_none,
                rejected_is_refused_once_an_attempt_may_have_applied,
                rejected_is_allowed_on_operation_level_evidence,
                rejected_is_allowed_when_nothing_may_have_applied,
                may_have_applied_is_sticky_unless_reset,
                evidence_is_appended_in_order_with_all_fields,
                append_evidence_advances_only_the_version,
                append_evidence_for_an_unknown_operation_stores_nothing,
                evidence_is_kept_per_tenant_and_operation,
                claim_due_picks_only_due_unleased_recovery_rows,
                claim_due_respects_limit_and_next_check_order,
                claim_due_does_not_reclaim_while_leased,
                sweep_expired_moves_only_expired_in_flight_rows,
                concurrent_claim_send_has_exactly_one_winner,
                concurrent_create_or_get_of_one_intent_yields_one_row,
                create_and_apply_creates_and_claims_in_one_step,
                create_and_apply_returns_an_existing_operation_untouched,
                create_and_apply_refuses_an_update_of_another_operation,
                concurrent_create_and_apply_of_one_intent_has_one_sender,
                record_is_the_same_compare_and_swap_as_apply,
                record_unread_writes_what_it_reports,
                record_detached_is_seen_by_every_later_call,
                lifecycle_lost_response_recovered_by_lookup,
                claim_prepared_claims_only_old_unleased_prepared_rows,
                claim_prepared_lease_fences_a_second_claim_until_it_expires,
                concurrent_claim_prepared_gets_disjoint_rows,
                a_prepared_row_claimed_for_recovery_can_be_claimed_for_sending,
                corrupt_rows_are_quarantined_and_the_healthy_rows_recovered,
                quarantined_rows_are_counted_listed_and_released_once_readable,
                list_filters_by_state_tenant_contract_text_and_age,
                list_pages_walk_every_row_once_while_rows_are_added,
                list_limit_bounds_and_cursor_errors,
                count_by_state_and_oldest_per_state,
                list_skips_undecodable_rows_and_hides_quarantined_ones,
                callback_applies_once_and_a_redelivery_is_a_duplicate,
                callback_with_a_stale_update_stores_nothing_and_is_retried,
                callback_appends_late_evidence_once,
                callback_for_an_unknown_operation_stores_nothing,
                callback_update_for_another_operation_is_refused,
                callbacks_are_quarantined_once_and_listed_in_order,
                callbacks_are_seen_once_recorded_ignored_ones_included,
                quarantined_callbacks_are_scoped_before_the_limit,
                other_tenant_with_finds_only_other_tenants,
                contradiction_marks_the_operation_until_acknowledged,
                find_by_remote_ref_and_idempotency_key_stay_in_their_tenant,
                concurrent_deliveries_of_one_event_change_the_state_once,
                purge_details_slims_finished_rows_and_keeps_their_identity,
                purge_identity_deletes_finished_rows_and_only_them,
                purge_callbacks_by_age_and_by_tenant,
                concurrent_purges_delete_each_row_once,
            );
        }
    };
    (make = $make:expr $(,)?) => {
        $crate::ledger_conformance_tests!(ledger_conformance, make = $make);
    };
    ($module:ident, make = $make:expr $(,)?) => {
        $crate::ledger_conformance_tests!(@module $module, async { ($make.await, ()) });
    };
    ($module:ident, make_with_guard = $make:expr $(,)?) => {
        $crate::ledger_conformance_tests!(@module $module, $make);
    };
}

/// Runs one check on a fresh multi-threaded runtime (4 workers), as the generated tests do.
///
/// # Panics
///
/// If the runtime cannot be built, or the check fails.
pub fn run<F: Future<Output = ()>>(check: F) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build the conformance test runtime: {e}"),
    };
    runtime.block_on(check);
}

// ── fixtures ────────────────────────────────────────────────────────────────────────────────────

/// The base time of every check, in ms since the Unix epoch.
pub const T0: i64 = 1_700_000_000_000;

/// The action every fixture operation uses.
pub const ACTION: &str = "create_ticket";

/// A budget different from the default in every field, so a backend that drops it shows.
pub fn test_policy() -> BudgetPolicy {
    BudgetPolicy {
        max_attempts: 5,
        max_queries: 7,
        window_ms: 30_000,
        attempt_timeout_ms: 2_000,
        lease_margin_ms: 1_000,
        query_backoff_base_ms: 50,
        query_backoff_cap_ms: 800,
    }
}

/// A new operation of `tenant` with this id and intent, created at [`T0`]: a JSON body with
/// non-UTF-8 and NUL bytes, repeated headers (one of them not UTF-8), a query string,
/// [`test_policy`].
pub fn new_operation(tenant: &str, operation_id: &str, intent_ref: &str) -> NewOperation {
    let url = "https://vendor.test/v1/tickets?source=agent&x=%20";
    let body = Bytes::from_static(b"{\"device\":\"E17\",\"memo\":\"fan noise \xff\x00\xfe\"}");
    NewOperation {
        tenant: Tenant::new(tenant),
        operation_id: OperationId::new(operation_id),
        action: ACTION.into(),
        intent_ref: intent_ref.into(),
        idempotency_key: IdempotencyKey::generate(),
        payload_hash: PayloadHash::compute("POST", url, &body, &PayloadDigest::Full),
        request: Arc::new(FrozenRequest {
            method: http::Method::POST,
            url: url.to_owned(),
            headers: [
                ("content-type", &b"application/json"[..]),
                ("x-trace", b"a"),
                ("x-trace", b"b, \"c\""),
                ("x-unicode", "déjà vu".as_bytes()),
                ("x-latin1", b"caf\xe9"),
            ]
            .into_iter()
            .collect(),
            body,
        }),
        contract: ContractRef {
            name: "stripe-v1".into(),
            hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        },
        policy: test_policy(),
        now_ms: T0,
    }
}

/// An evidence entry of `kind` at `at_ms`, with no attempt, observation or note.
pub fn evidence_entry(kind: &str, at_ms: i64) -> NewEvidence {
    NewEvidence {
        attempt_id: None,
        generation: Generation(0),
        kind: kind.to_owned().into(),
        from_state: None,
        to_state: None,
        evidence: None,
        note: None,
        at_ms,
    }
}

/// The new values of a row's mutable columns, field by field: what the suite writes with
/// [`update_of`] to put a row in any state (the store does not check transitions; the state
/// machine does, and outside this suite every [`Update`] comes from it). Only for checking a
/// backend: it exists with the `test-util` feature alone.
#[derive(Clone, Debug, PartialEq)]
pub struct RawChanges {
    /// New state.
    pub state: State,
    /// New business result.
    pub last_result: Option<State>,
    /// New generation.
    pub generation: Generation,
    /// New attempts used.
    pub attempts_used: u32,
    /// New queries used.
    pub queries_used: u32,
    /// New "may have applied" value (sticky unless `reset_may_have_applied`).
    pub may_have_applied: bool,
    /// Clear the sticky fact.
    pub reset_may_have_applied: bool,
    /// Current attempt.
    pub current_attempt: Option<AttemptId>,
    /// Lease end.
    pub lease_until_ms: Option<i64>,
    /// Next check.
    pub next_check_ms: Option<i64>,
    /// Deadline.
    pub deadline_ms: Option<i64>,
    /// Remote reference.
    pub remote_ref: Option<String>,
    /// Reason.
    pub reason: Option<String>,
    /// Stored response.
    pub response: Option<StoredResponse>,
    /// Change time (ms since epoch).
    pub now_ms: i64,
}

/// `update` with its new values rewritten by `f`: for tests that plant a wrong store (one that
/// writes something else than it was asked to) to check that they notice. Only with the
/// `test-util` feature.
pub fn rewrite_changes(update: Update, f: impl FnOnce(&mut RawChanges)) -> Update {
    let c = update.changes;
    let mut raw = RawChanges {
        state: c.state,
        last_result: c.last_result,
        generation: c.generation,
        attempts_used: c.attempts_used,
        queries_used: c.queries_used,
        may_have_applied: c.may_have_applied,
        reset_may_have_applied: c.reset_may_have_applied,
        current_attempt: c.current_attempt,
        lease_until_ms: c.lease_until_ms,
        next_check_ms: c.next_check_ms,
        deadline_ms: c.deadline_ms,
        remote_ref: c.remote_ref,
        reason: c.reason,
        response: c.response,
        now_ms: c.now_ms,
    };
    f(&mut raw);
    Update {
        changes: raw.into_changes(),
        ..update
    }
}

impl RawChanges {
    fn into_changes(self) -> Changes {
        Changes {
            state: self.state,
            last_result: self.last_result,
            generation: self.generation,
            attempts_used: self.attempts_used,
            queries_used: self.queries_used,
            may_have_applied: self.may_have_applied,
            reset_may_have_applied: self.reset_may_have_applied,
            current_attempt: self.current_attempt,
            lease_until_ms: self.lease_until_ms,
            next_check_ms: self.next_check_ms,
            deadline_ms: self.deadline_ms,
            remote_ref: self.remote_ref,
            reason: self.reason,
            response: self.response,
            now_ms: self.now_ms,
        }
    }
}

/// The changes that keep every column of `r` as it is, except the state.
pub fn keep(r: &OperationRecord, state: State, now_ms: i64) -> RawChanges {
    RawChanges {
        state,
        last_result: r.last_result,
        generation: r.generation,
        attempts_used: r.attempts_used,
        queries_used: r.queries_used,
        may_have_applied: r.may_have_applied,
        reset_may_have_applied: false,
        current_attempt: r.current_attempt,
        lease_until_ms: r.lease_until_ms,
        next_check_ms: r.next_check_ms,
        deadline_ms: r.deadline_ms,
        remote_ref: r.remote_ref.clone(),
        reason: r.reason.clone(),
        response: r.response.clone(),
        now_ms,
    }
}

/// A conditional update of `r` (expecting its current state, generation and version).
pub fn update_of(r: &OperationRecord, changes: RawChanges, kind: &str) -> Update {
    let evidence = NewEvidence {
        generation: changes.generation,
        from_state: Some(r.state),
        to_state: Some(changes.state),
        ..evidence_entry(kind, changes.now_ms)
    };
    update_with(r, changes, evidence)
}

/// A conditional update of `r` (expecting its current state, generation and version) that
/// appends `evidence` as given.
pub fn update_with(r: &OperationRecord, changes: RawChanges, evidence: NewEvidence) -> Update {
    let changes = changes.into_changes();
    Update {
        tenant: r.tenant.clone(),
        operation_id: r.operation_id.clone(),
        expect_state: r.state,
        expect_generation: r.generation,
        expect_version: r.version,
        operation_level: false,
        changes,
        evidence,
    }
}

fn must<T>(result: Result<T, LedgerError>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e:?}"),
    }
}

async fn create<L: Ledger>(ledger: &L, new: NewOperation) -> OperationRecord {
    match must(ledger.create_or_get(new).await, "create_or_get") {
        Created::New(r) => r,
        Created::Existing(r) => panic!("expected a new operation, got existing {}", r.operation_id),
    }
}

async fn get<L: Ledger>(ledger: &L, r: &OperationRecord) -> OperationRecord {
    match must(ledger.get(&r.tenant, &r.operation_id).await, "get") {
        Some(row) => row,
        None => panic!("operation {} disappeared", r.operation_id),
    }
}

async fn log<L: Ledger>(ledger: &L, r: &OperationRecord) -> Vec<EvidenceEntry> {
    must(
        ledger.evidence(&r.tenant, &r.operation_id).await,
        "evidence",
    )
}

fn kinds(log: &[EvidenceEntry]) -> Vec<&str> {
    log.iter().map(|e| &*e.entry.kind).collect()
}

async fn apply_ok<L: Ledger>(ledger: &L, update: Update) -> OperationRecord {
    let what = format!("apply {}", update.evidence.kind);
    match must(ledger.apply(update).await, &what) {
        Some(r) => r,
        None => panic!("{what}: precondition unexpectedly refused"),
    }
}

/// Moves a fresh operation straight to `state` with the given scheduling columns (the store
/// does not check transitions; the state machine does).
async fn put<L: Ledger>(
    ledger: &L,
    id: &str,
    state: State,
    next_check_ms: Option<i64>,
    lease_until_ms: Option<i64>,
) -> OperationRecord {
    let r = create(
        ledger,
        new_operation("tenant-a", id, &format!("intent-{id}")),
    )
    .await;
    let changes = RawChanges {
        next_check_ms,
        lease_until_ms,
        ..keep(&r, state, T0)
    };
    apply_ok(ledger, update_of(&r, changes, "setup")).await
}

fn assert_new_row(r: &OperationRecord, new: &NewOperation) {
    assert_eq!(r.tenant, new.tenant);
    assert_eq!(r.operation_id, new.operation_id);
    assert_eq!(r.action, new.action);
    assert_eq!(r.intent_ref, new.intent_ref);
    assert_eq!(r.idempotency_key, new.idempotency_key);
    assert_eq!(r.payload_hash, new.payload_hash);
    assert_eq!(r.request, new.request);
    assert_eq!(r.contract, new.contract);
    assert_eq!(r.policy, new.policy);
    assert_eq!(r.state, State::Prepared);
    assert_eq!(r.last_result, None);
    assert_eq!(r.generation, Generation(0));
    assert_eq!(r.version, 0);
    assert_eq!(r.attempts_used, 0);
    assert_eq!(r.queries_used, 0);
    assert!(!r.may_have_applied);
    assert_eq!(r.current_attempt, None);
    assert_eq!(r.lease_until_ms, None);
    assert_eq!(r.next_check_ms, None);
    assert_eq!(r.deadline_ms, None);
    assert_eq!(r.remote_ref, None);
    assert_eq!(r.reason, None);
    assert_eq!(r.response, None);
    assert_eq!(r.created_ms, new.now_ms);
    assert_eq!(r.updated_ms, new.now_ms);
}

// ── create and read ─────────────────────────────────────────────────────────────────────────────

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

// ── apply ───────────────────────────────────────────────────────────────────────────────────────

/// With the expected state, generation and version, `apply` writes every mutable column,
/// increments the version by one, and returns the row as stored.
pub async fn apply_with_matching_precondition_writes_every_column_and_bumps_version<L: Ledger>(
    ledger: L,
) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let attempt = AttemptId::generate();
    let response = StoredResponse {
        status: 201,
        headers: [
            ("content-type", "application/json"),
            ("request-id", "req_123"),
            ("request-id", "req_456"),
            ("x-note", "a, \"b\": déjà vu"),
        ]
        .into_iter()
        .collect(),
        body: Bytes::from_static(b"{\"id\":\"W731\"}\x00\xff"),
    };
    let changes = RawChanges {
        state: State::InFlight,
        last_result: Some(State::Unknown),
        generation: Generation(1),
        attempts_used: 2,
        queries_used: 3,
        may_have_applied: true,
        reset_may_have_applied: false,
        current_attempt: Some(attempt),
        lease_until_ms: Some(T0 + 15_000),
        next_check_ms: Some(T0 + 250),
        deadline_ms: Some(T0 + 60_000),
        remote_ref: Some("W731".to_owned()),
        reason: Some("lost response".to_owned()),
        response: Some(response.clone()),
        now_ms: T0 + 5,
    };
    let applied = apply_ok(&ledger, update_of(&r, changes, "attempt_registered")).await;
    let expected = OperationRecord {
        state: State::InFlight,
        last_result: Some(State::Unknown),
        generation: Generation(1),
        version: 1,
        attempts_used: 2,
        queries_used: 3,
        may_have_applied: true,
        current_attempt: Some(attempt),
        lease_until_ms: Some(T0 + 15_000),
        next_check_ms: Some(T0 + 250),
        deadline_ms: Some(T0 + 60_000),
        remote_ref: Some("W731".to_owned()),
        reason: Some("lost response".to_owned()),
        response: Some(response),
        updated_ms: T0 + 5,
        ..r.clone()
    };
    assert_eq!(applied, expected);
    assert_eq!(get(&ledger, &r).await, expected);

    // The next update must present version 1.
    let again = apply_ok(
        &ledger,
        update_of(&applied, keep(&applied, State::Unknown, T0 + 6), "y"),
    )
    .await;
    assert_eq!(again.version, 2);
    assert_eq!(again.state, State::Unknown);
    assert_eq!(again.created_ms, T0);
}

/// `None` in `RawChanges` means NULL: the caller merges kept values (see
/// [`OperationRecord::update_on`]); the store writes what it is given.
pub async fn apply_writes_optional_columns_as_given<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let full = RawChanges {
        last_result: Some(State::Processing),
        current_attempt: Some(AttemptId::generate()),
        lease_until_ms: Some(T0 + 1),
        next_check_ms: Some(T0 + 2),
        deadline_ms: Some(T0 + 3),
        remote_ref: Some("W1".to_owned()),
        reason: Some("why".to_owned()),
        response: Some(StoredResponse {
            status: 202,
            headers: StoredHeaders::new(),
            body: Bytes::new(),
        }),
        ..keep(&r, State::Processing, T0 + 1)
    };
    let r = apply_ok(&ledger, update_of(&r, full, "full")).await;
    assert_eq!(
        r.response
            .as_ref()
            .map(|resp| (resp.status, resp.body.len(), resp.headers.len())),
        Some((202, 0, 0))
    );
    let cleared = RawChanges {
        state: State::Unknown,
        last_result: None,
        current_attempt: None,
        lease_until_ms: None,
        next_check_ms: None,
        deadline_ms: None,
        remote_ref: None,
        reason: None,
        response: None,
        ..keep(&r, State::Unknown, T0 + 2)
    };
    let cleared = apply_ok(&ledger, update_of(&r, cleared, "cleared")).await;
    let read = get(&ledger, &r).await;
    assert_eq!(read, cleared);
    assert_eq!(read.last_result, None);
    assert_eq!(read.current_attempt, None);
    assert_eq!(read.lease_until_ms, None);
    assert_eq!(read.next_check_ms, None);
    assert_eq!(read.deadline_ms, None);
    assert_eq!(read.remote_ref, None);
    assert_eq!(read.reason, None);
    assert_eq!(read.response, None);
}

async fn assert_refused<L: Ledger>(ledger: &L, update: Update, before: &OperationRecord) {
    let log_before = log(ledger, before).await;
    let what = format!("apply {}", update.evidence.kind);
    let result = must(ledger.apply(update).await, &what);
    assert_eq!(result, None, "{what} should have been refused");
    assert_eq!(
        &get(ledger, before).await,
        before,
        "a refused apply changed the row"
    );
    assert_eq!(
        log(ledger, before).await,
        log_before,
        "a refused apply appended evidence"
    );
}

/// A writer holding an old generation (a stale worker) is refused by the store.
pub async fn apply_with_stale_generation_changes_nothing<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let claimed = RawChanges {
        generation: Generation(1),
        ..keep(&r, State::InFlight, T0 + 1)
    };
    let claimed = apply_ok(&ledger, update_of(&r, claimed, "claim")).await;
    // A worker that read generation 0 and believes the version is current.
    let mut stale = update_of(
        &claimed,
        keep(&claimed, State::Succeeded, T0 + 2),
        "late_result",
    );
    stale.expect_generation = Generation(0);
    assert_refused(&ledger, stale, &claimed).await;
    // And one ahead of the row, for good measure.
    let mut ahead = update_of(&claimed, keep(&claimed, State::Succeeded, T0 + 2), "ahead");
    ahead.expect_generation = Generation(2);
    assert_refused(&ledger, ahead, &claimed).await;
}

/// An update computed from a read that another change has since superseded is refused.
pub async fn apply_with_stale_version_changes_nothing<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let stale = update_of(&r, keep(&r, State::Rejected, T0 + 2), "from_stale_read");
    let current = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::Prepared, T0 + 1), "note"),
    )
    .await;
    assert_eq!(current.version, 1);
    assert_refused(&ledger, stale, &current).await;
}

/// The row is not in the state the update expects: refused.
pub async fn apply_with_wrong_state_changes_nothing<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let mut wrong = update_of(&r, keep(&r, State::Succeeded, T0 + 1), "lookup");
    wrong.expect_state = State::Unknown;
    assert_refused(&ledger, wrong, &r).await;
}

/// Applying to an operation that does not exist is `None` (and creates nothing).
pub async fn apply_to_an_unknown_operation_is_none<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let mut ghost = update_of(&r, keep(&r, State::InFlight, T0 + 1), "ghost");
    ghost.operation_id = OperationId::new("op-ghost");
    assert_eq!(must(ledger.apply(ghost.clone()).await, "apply"), None);
    ghost.operation_id = r.operation_id.clone();
    ghost.tenant = Tenant::new("tenant-b");
    assert_eq!(must(ledger.apply(ghost).await, "apply"), None);
    assert_eq!(get(&ledger, &r).await, r);
    let none = must(
        ledger
            .get(&Tenant::new("tenant-a"), &OperationId::new("op-ghost"))
            .await,
        "get",
    );
    assert_eq!(none, None);
}

async fn unknown_that_may_have_applied<L: Ledger>(ledger: &L) -> OperationRecord {
    let r = create(ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let changes = RawChanges {
        may_have_applied: true,
        ..keep(&r, State::Unknown, T0 + 1)
    };
    let r = apply_ok(ledger, update_of(&r, changes, "attempt_result")).await;
    assert!(r.may_have_applied);
    r
}

/// Once an attempt may have applied, a refusal of a later attempt cannot make the operation
/// `REJECTED`: the store refuses it (a 400 for a replay says nothing about the first send).
pub async fn rejected_is_refused_once_an_attempt_may_have_applied<L: Ledger>(ledger: L) {
    let r = unknown_that_may_have_applied(&ledger).await;
    let reject = RawChanges {
        reason: Some("400 invalid_request".to_owned()),
        ..keep(&r, State::Rejected, T0 + 2)
    };
    let update = update_of(&r, reject, "attempt_result");
    assert!(!update.operation_level);
    assert_refused(&ledger, update, &r).await;
}

/// Evidence about the operation itself (a lookup, a human) may reject it even after an attempt
/// may have applied.
pub async fn rejected_is_allowed_on_operation_level_evidence<L: Ledger>(ledger: L) {
    let r = unknown_that_may_have_applied(&ledger).await;
    let reject = RawChanges {
        reason: Some("vendor lookup: declined".to_owned()),
        last_result: Some(State::Rejected),
        ..keep(&r, State::Rejected, T0 + 2)
    };
    let mut update = update_of(&r, reject, "lookup");
    update.operation_level = true;
    let rejected = apply_ok(&ledger, update).await;
    assert_eq!(rejected.state, State::Rejected);
    assert_eq!(rejected.reason.as_deref(), Some("vendor lookup: declined"));
    assert_eq!(get(&ledger, &r).await, rejected);
}

/// While no attempt may have applied, an attempt-level rejection is accepted.
pub async fn rejected_is_allowed_when_nothing_may_have_applied<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let r = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::InFlight, T0 + 1), "claim"),
    )
    .await;
    assert!(!r.may_have_applied);
    let rejected = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::Rejected, T0 + 2), "attempt_result"),
    )
    .await;
    assert_eq!(rejected.state, State::Rejected);
}

/// `may_have_applied` only goes from false to true, unless the update resets it (a
/// reviewer's confirmed-not-executed decision), which writes the given value.
pub async fn may_have_applied_is_sticky_unless_reset<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let set = RawChanges {
        may_have_applied: true,
        ..keep(&r, State::Unknown, T0 + 1)
    };
    let r = apply_ok(&ledger, update_of(&r, set, "set")).await;
    assert!(r.may_have_applied);

    let try_clear = RawChanges {
        may_have_applied: false,
        ..keep(&r, State::Unknown, T0 + 2)
    };
    let r = apply_ok(&ledger, update_of(&r, try_clear, "try_clear")).await;
    assert!(r.may_have_applied, "may_have_applied must be sticky");
    assert!(get(&ledger, &r).await.may_have_applied);

    let reset_true = RawChanges {
        may_have_applied: true,
        reset_may_have_applied: true,
        ..keep(&r, State::ManualReview, T0 + 3)
    };
    let r = apply_ok(&ledger, update_of(&r, reset_true, "reset_true")).await;
    assert!(r.may_have_applied);

    let reset = RawChanges {
        may_have_applied: false,
        reset_may_have_applied: true,
        ..keep(&r, State::RetryReady, T0 + 4)
    };
    let mut reset = update_of(&r, reset, "review");
    reset.operation_level = true;
    let r = apply_ok(&ledger, reset).await;
    assert!(!r.may_have_applied, "a reset writes the given value");
    assert!(!get(&ledger, &r).await.may_have_applied);
}

// ── evidence ────────────────────────────────────────────────────────────────────────────────────

/// Entries come back oldest first, with increasing sequence numbers and every field as given,
/// whether appended by `apply` or by `append_evidence`.
pub async fn evidence_is_appended_in_order_with_all_fields<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let attempt = AttemptId::generate();
    let registered = NewEvidence {
        attempt_id: Some(attempt),
        generation: Generation(1),
        kind: "attempt_registered".into(),
        from_state: Some(State::Prepared),
        to_state: Some(State::InFlight),
        evidence: None,
        note: Some("first send".to_owned()),
        at_ms: T0 + 1,
    };
    let mut update = update_of(
        &r,
        RawChanges {
            generation: Generation(1),
            current_attempt: Some(attempt),
            ..keep(&r, State::InFlight, T0 + 1)
        },
        "ignored",
    );
    update.evidence = registered.clone();
    let r = apply_ok(&ledger, update).await;

    let result = NewEvidence {
        attempt_id: Some(attempt),
        generation: Generation(1),
        kind: "attempt_result".into(),
        from_state: Some(State::InFlight),
        to_state: Some(State::Processing),
        evidence: Some(Evidence::Processing {
            retry_after: Some(Duration::from_millis(1500)),
            remote_ref: Some("W731".to_owned()),
        }),
        note: None,
        at_ms: T0 + 2,
    };
    let mut update = update_of(&r, keep(&r, State::Processing, T0 + 2), "ignored");
    update.evidence = result.clone();
    let r = apply_ok(&ledger, update).await;

    let late = NewEvidence {
        attempt_id: Some(attempt),
        generation: Generation(1),
        kind: "late_evidence".into(),
        from_state: Some(State::Processing),
        to_state: None,
        evidence: Some(Evidence::Conflict {
            conflict: ConflictKind::InFlight,
        }),
        note: Some("duplicate callback, ünïcode".to_owned()),
        at_ms: T0 + 3,
    };
    must(
        ledger
            .append_evidence(&r.tenant, &r.operation_id, late.clone())
            .await,
        "append_evidence",
    );
    let weak = NewEvidence {
        evidence: Some(Evidence::unknown("404 from lookup")),
        ..evidence_entry("lookup", T0 + 4)
    };
    must(
        ledger
            .append_evidence(&r.tenant, &r.operation_id, weak.clone())
            .await,
        "append_evidence",
    );

    let entries = log(&ledger, &r).await;
    assert_eq!(
        kinds(&entries),
        [
            "created",
            "attempt_registered",
            "attempt_result",
            "late_evidence",
            "lookup"
        ]
    );
    assert_eq!(entries[1].entry, registered);
    assert_eq!(entries[2].entry, result);
    assert_eq!(entries[3].entry, late);
    assert_eq!(entries[4].entry, weak);
    for pair in entries.windows(2) {
        assert!(
            pair[0].seq < pair[1].seq,
            "sequence numbers must increase: {} then {}",
            pair[0].seq,
            pair[1].seq
        );
    }
}

/// `append_evidence` changes nothing in the row but its version, which advances: a decision
/// made on the row as it was before the entry (a reviewer's resolve, a replay's claim) names the
/// old version and is refused as stale (the fencing rule).
pub async fn append_evidence_advances_only_the_version<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let r = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::ManualReview, T0 + 1), "escalated"),
    )
    .await;
    must(
        ledger
            .append_evidence(
                &r.tenant,
                &r.operation_id,
                NewEvidence {
                    evidence: Some(Evidence::Succeeded {
                        remote_ref: Some("W731".to_owned()),
                    }),
                    ..evidence_entry("late_evidence", T0 + 9)
                },
            )
            .await,
        "append_evidence",
    );
    let after = get(&ledger, &r).await;
    assert_eq!(
        after.version,
        r.version + 1,
        "the append advances the version"
    );
    assert_eq!(
        OperationRecord {
            version: r.version,
            ..after
        },
        r,
        "and changes nothing else"
    );
    assert_eq!(
        kinds(&log(&ledger, &r).await),
        ["created", "escalated", "late_evidence"]
    );
    // A decision computed on the row as read before the entry is refused, and changes nothing.
    let stale = update_of(&r, keep(&r, State::RetryReady, T0 + 10), "review");
    assert_eq!(
        must(ledger.apply(stale).await, "apply"),
        None,
        "a decision on the view before the evidence is stale"
    );
    assert_eq!(get(&ledger, &r).await.state, State::ManualReview);
}

/// Evidence for an operation that does not exist (an unknown id, or another tenant's) is not
/// stored anywhere: `Ok(())`, nothing changes.
pub async fn append_evidence_for_an_unknown_operation_stores_nothing<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let other_tenant = Tenant::new("tenant-b");
    let ghost = OperationId::new("op-ghost");
    must(
        ledger
            .append_evidence(
                &other_tenant,
                &r.operation_id,
                evidence_entry("callback", T0 + 1),
            )
            .await,
        "append_evidence",
    );
    must(
        ledger
            .append_evidence(&r.tenant, &ghost, evidence_entry("callback", T0 + 1))
            .await,
        "append_evidence",
    );
    assert!(
        must(
            ledger.evidence(&other_tenant, &r.operation_id).await,
            "evidence"
        )
        .is_empty()
    );
    assert!(must(ledger.evidence(&r.tenant, &ghost).await, "evidence").is_empty());
    assert_eq!(
        must(ledger.get(&other_tenant, &r.operation_id).await, "get"),
        None
    );
    assert_eq!(kinds(&log(&ledger, &r).await), ["created"]);
    assert_eq!(get(&ledger, &r).await, r);
}

/// Each operation has its own log, per tenant.
pub async fn evidence_is_kept_per_tenant_and_operation<L: Ledger>(ledger: L) {
    let a = create(&ledger, new_operation("tenant-a", "op-1", "intent-1")).await;
    let b = create(&ledger, new_operation("tenant-b", "op-1", "intent-1")).await;
    let c = create(&ledger, new_operation("tenant-a", "op-2", "intent-2")).await;
    must(
        ledger
            .append_evidence(&a.tenant, &a.operation_id, evidence_entry("only_a", T0 + 1))
            .await,
        "append_evidence",
    );
    apply_ok(
        &ledger,
        update_of(&c, keep(&c, State::InFlight, T0 + 2), "only_c"),
    )
    .await;
    assert_eq!(kinds(&log(&ledger, &a).await), ["created", "only_a"]);
    assert_eq!(kinds(&log(&ledger, &b).await), ["created"]);
    assert_eq!(kinds(&log(&ledger, &c).await), ["created", "only_c"]);
}

// ── claim and sweep ─────────────────────────────────────────────────────────────────────────────

fn ids(rows: &[OperationRecord]) -> Vec<&str> {
    rows.iter().map(|r| r.operation_id.as_str()).collect()
}

/// `claim_due` takes exactly the `UNKNOWN`/`PROCESSING`/`RETRY_READY` rows whose next check is due and whose
/// lease is absent or over; each claimed row gets generation+1, version+1, the new lease and a
/// `recovery_claimed` entry. Every other row is untouched.
pub async fn claim_due_picks_only_due_unleased_recovery_rows<L: Ledger>(ledger: L) {
    let now = T0 + 1_000;
    let lease_ms = 10_000;
    let a = put(
        &ledger,
        "a-unknown-due",
        State::Unknown,
        Some(T0 + 100),
        None,
    )
    .await;
    let b = put(
        &ledger,
        "b-processing-lease-over",
        State::Processing,
        Some(T0 + 200),
        Some(T0 + 500),
    )
    .await;
    let c = put(&ledger, "c-not-due", State::Unknown, Some(T0 + 2_000), None).await;
    let d = put(
        &ledger,
        "d-leased",
        State::Unknown,
        Some(T0 + 300),
        Some(T0 + 5_000),
    )
    .await;
    let e = put(
        &ledger,
        "e-retry-ready",
        State::RetryReady,
        Some(T0 + 100),
        None,
    )
    .await;
    let f = put(
        &ledger,
        "f-in-flight",
        State::InFlight,
        Some(T0 + 100),
        None,
    )
    .await;
    let g = put(&ledger, "g-no-next-check", State::Unknown, None, None).await;
    let h = put(
        &ledger,
        "h-lease-ends-now",
        State::Processing,
        Some(T0 + 400),
        Some(now),
    )
    .await;
    let i = put(&ledger, "i-due-now", State::Unknown, Some(now), None).await;
    let j = put(
        &ledger,
        "j-manual-review",
        State::ManualReview,
        Some(T0 + 100),
        None,
    )
    .await;
    let k = put(
        &ledger,
        "k-succeeded",
        State::Succeeded,
        Some(T0 + 100),
        None,
    )
    .await;
    let l = put(&ledger, "l-prepared", State::Prepared, Some(T0 + 100), None).await;

    let claimed = must(ledger.claim_due(now, lease_ms, 100).await, "claim_due");
    assert_eq!(
        ids(&claimed),
        [
            "a-unknown-due",
            "e-retry-ready",
            "b-processing-lease-over",
            "h-lease-ends-now",
            "i-due-now"
        ],
        "claimed rows, in next-check order"
    );
    for (before, after) in [&a, &e, &b, &h, &i].into_iter().zip(&claimed) {
        let expected = OperationRecord {
            generation: before.generation.next(),
            version: before.version + 1,
            lease_until_ms: Some(now + lease_ms),
            updated_ms: now,
            ..before.clone()
        };
        assert_eq!(after, &expected);
        assert_eq!(&get(&ledger, before).await, &expected);
        let entries = log(&ledger, before).await;
        let last = &entries[entries.len() - 1].entry;
        assert_eq!(
            last,
            &NewEvidence {
                attempt_id: None,
                generation: expected.generation,
                kind: "recovery_claimed".into(),
                from_state: Some(before.state),
                to_state: Some(before.state),
                evidence: None,
                note: None,
                at_ms: now,
            }
        );
    }
    for untouched in [&c, &d, &f, &g, &j, &k, &l] {
        assert_eq!(&get(&ledger, untouched).await, untouched);
        assert_eq!(kinds(&log(&ledger, untouched).await), ["created", "setup"]);
    }
}

/// `claim_due` takes at most `limit` rows, earliest next check first (ties in creation
/// order), and `limit` 0 claims nothing.
pub async fn claim_due_respects_limit_and_next_check_order<L: Ledger>(ledger: L) {
    for (id, next) in [
        ("n50", 50),
        ("n10", 10),
        ("n40", 40),
        ("n20", 20),
        ("tie-1", 30),
        ("tie-2", 30),
    ] {
        put(&ledger, id, State::Unknown, Some(T0 + next), None).await;
    }
    let now = T0 + 100;
    assert!(must(ledger.claim_due(now, 1_000, 0).await, "claim_due").is_empty());
    let first = must(ledger.claim_due(now, 1_000, 2).await, "claim_due");
    assert_eq!(ids(&first), ["n10", "n20"]);
    let rest = must(ledger.claim_due(now, 1_000, 10).await, "claim_due");
    assert_eq!(ids(&rest), ["tie-1", "tie-2", "n40", "n50"]);
    assert!(must(ledger.claim_due(now, 1_000, 10).await, "claim_due").is_empty());
}

/// A claimed row is not claimed again until its lease is over; then it is, at the next
/// generation.
pub async fn claim_due_does_not_reclaim_while_leased<L: Ledger>(ledger: L) {
    let r = put(&ledger, "op-1", State::Unknown, Some(T0), None).await;
    let lease_ms = 5_000;
    let first = must(ledger.claim_due(T0 + 10, lease_ms, 10).await, "claim_due");
    assert_eq!(ids(&first), ["op-1"]);
    assert_eq!(first[0].generation, r.generation.next());

    assert!(must(ledger.claim_due(T0 + 10, lease_ms, 10).await, "claim_due").is_empty());
    assert!(
        must(
            ledger.claim_due(T0 + 10 + lease_ms - 1, lease_ms, 10).await,
            "claim_due"
        )
        .is_empty(),
        "claimed again while the lease runs"
    );
    let second = must(
        ledger.claim_due(T0 + 10 + lease_ms, lease_ms, 10).await,
        "claim_due",
    );
    assert_eq!(ids(&second), ["op-1"]);
    assert_eq!(second[0].generation, r.generation.next().next());
    assert_eq!(second[0].version, r.version + 2);
    assert_eq!(second[0].lease_until_ms, Some(T0 + 10 + 2 * lease_ms));
    assert_eq!(
        kinds(&log(&ledger, &r).await),
        ["created", "setup", "recovery_claimed", "recovery_claimed"]
    );
}

/// `sweep_expired` moves exactly the `IN_FLIGHT` rows whose lease ended before `now` to
/// `UNKNOWN` (never back to `PREPARED`): generation+1, `may_have_applied`, due now, lease
/// cleared, a `lease_expired` entry naming the attempt. Returned in creation order.
pub async fn sweep_expired_moves_only_expired_in_flight_rows<L: Ledger>(ledger: L) {
    let now = T0 + 1_000;
    let a = put(&ledger, "a-expired", State::InFlight, None, Some(T0 + 100)).await;
    let b = put(&ledger, "b-ends-now", State::InFlight, None, Some(now)).await;
    let c = put(
        &ledger,
        "c-running",
        State::InFlight,
        None,
        Some(T0 + 5_000),
    )
    .await;
    let d = put(
        &ledger,
        "d-unknown",
        State::Unknown,
        Some(T0 + 5_000),
        Some(T0 + 100),
    )
    .await;
    let e = put(&ledger, "e-in-flight-no-lease", State::InFlight, None, None).await;
    let attempt = AttemptId::generate();
    let f = {
        let r = create(
            &ledger,
            new_operation("tenant-a", "f-expired-with-attempt", "intent-f"),
        )
        .await;
        let changes = RawChanges {
            generation: Generation(1),
            attempts_used: 1,
            current_attempt: Some(attempt),
            lease_until_ms: Some(T0 + 50),
            deadline_ms: Some(T0 + 30_000),
            last_result: None,
            ..keep(&r, State::InFlight, T0)
        };
        apply_ok(&ledger, update_of(&r, changes, "attempt_registered")).await
    };

    let swept = must(ledger.sweep_expired(now).await, "sweep_expired");
    assert_eq!(ids(&swept), ["a-expired", "f-expired-with-attempt"]);
    for (before, after) in [&a, &f].into_iter().zip(&swept) {
        let expected = OperationRecord {
            state: State::Unknown,
            generation: before.generation.next(),
            version: before.version + 1,
            may_have_applied: true,
            next_check_ms: Some(now),
            lease_until_ms: None,
            reason: Some("attempt lease expired with no recorded result".to_owned()),
            updated_ms: now,
            ..before.clone()
        };
        assert_eq!(after, &expected);
        assert_eq!(&get(&ledger, before).await, &expected);
        let entries = log(&ledger, before).await;
        assert_eq!(
            entries[entries.len() - 1].entry,
            NewEvidence {
                attempt_id: before.current_attempt,
                generation: expected.generation,
                kind: "lease_expired".into(),
                from_state: Some(State::InFlight),
                to_state: Some(State::Unknown),
                evidence: None,
                note: None,
                at_ms: now,
            }
        );
    }
    assert_eq!(swept[1].current_attempt, Some(attempt));
    assert_eq!(swept[1].attempts_used, 1);
    assert_eq!(swept[1].deadline_ms, Some(T0 + 30_000));
    for untouched in [&b, &c, &d, &e] {
        assert_eq!(&get(&ledger, untouched).await, untouched);
    }
    assert!(must(ledger.sweep_expired(now).await, "sweep_expired").is_empty());
}

// ── races ───────────────────────────────────────────────────────────────────────────────────────

/// 32 senders compute the same `ClaimSend` from the same read and race: exactly one wins; the
/// row carries the winner's attempt and one `attempt_registered` entry.
pub async fn concurrent_claim_send_has_exactly_one_winner<L: Ledger>(ledger: L) {
    const SENDERS: usize = 32;
    let ledger = Arc::new(ledger);
    let r = create(
        &*ledger,
        new_operation("tenant-a", "op-race", "intent-race"),
    )
    .await;
    let barrier = Arc::new(tokio::sync::Barrier::new(SENDERS));
    let mut tasks = Vec::with_capacity(SENDERS);
    for i in 0..SENDERS {
        let (ledger, barrier, r) = (ledger.clone(), barrier.clone(), r.clone());
        tasks.push(tokio::spawn(async move {
            let now = T0 + 10;
            let t = match transition(
                &r.snapshot(),
                &Event::ClaimSend,
                Clock {
                    now_ms: now,
                    jitter: 0.5,
                },
            ) {
                Ok(t) => t,
                Err(e) => panic!("claim send refused by the state machine: {e}"),
            };
            let attempt = AttemptId::generate();
            let lease = now + r.policy.lease().as_millis() as i64;
            let update = r.update_for(
                &t,
                Some(attempt),
                Some(lease),
                None,
                NewEvidence {
                    attempt_id: Some(attempt),
                    note: Some(format!("sender {i}")),
                    ..evidence_entry("attempt_registered", now)
                },
                now,
            );
            barrier.wait().await;
            let won = must(ledger.apply(update).await, "apply");
            won.map(|row| (attempt, row))
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Some(w)) => winners.push(w),
            Ok(None) => {}
            Err(e) => panic!("sender task failed: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one sender may win the claim");
    let (attempt, won) = &winners[0];
    assert_eq!(won.state, State::InFlight);
    assert_eq!(won.generation, Generation(1));
    assert_eq!(won.version, 1);
    assert_eq!(won.attempts_used, 1);
    assert_eq!(won.current_attempt, Some(*attempt));
    assert_eq!(&get(&*ledger, &r).await, won);
    let entries = log(&*ledger, &r).await;
    assert_eq!(kinds(&entries), ["created", "attempt_registered"]);
    assert_eq!(entries[1].entry.attempt_id, Some(*attempt));
}

/// The first-send claim the layer makes, as the `first` update of `new` at `now`.
fn first_claim(new: &NewOperation, now: i64, note: &str) -> (AttemptId, Update) {
    let t = match transition(
        &new.snapshot(),
        &Event::ClaimSend,
        Clock {
            now_ms: now,
            jitter: 0.5,
        },
    ) {
        Ok(t) => t,
        Err(e) => panic!("claim send refused by the state machine: {e}"),
    };
    let attempt = AttemptId::generate();
    let lease = now + new.policy.lease().as_millis() as i64;
    let update = new.first_update(
        &t,
        Some(attempt),
        Some(lease),
        NewEvidence {
            attempt_id: Some(attempt),
            note: Some(note.to_owned()),
            ..evidence_entry("attempt_registered", now)
        },
        now,
    );
    (attempt, update)
}

/// `create_and_apply` stores the row and applies the claim in one step: the row comes back
/// `IN_FLIGHT` at generation 1, version 1, exactly as `create_or_get` then `apply` of the same
/// update leaves another operation, and the log holds `created` then `attempt_registered`.
pub async fn create_and_apply_creates_and_claims_in_one_step<L: Ledger>(ledger: L) {
    let now = T0 + 10;
    let new = new_operation("tenant-a", "op-one-step", "intent-one-step");
    let (attempt, first) = first_claim(&new, now, "one step");
    let row = match must(
        ledger.create_and_apply(new.clone(), first).await,
        "create_and_apply",
    ) {
        Created::New(r) => r,
        Created::Existing(r) => panic!("expected a new operation, got existing {}", r.operation_id),
    };
    assert_eq!(row.state, State::InFlight);
    assert_eq!(row.generation, Generation(1));
    assert_eq!(row.version, 1);
    assert_eq!(row.attempts_used, 1);
    assert_eq!(row.current_attempt, Some(attempt));
    assert_eq!(row.created_ms, T0);
    assert_eq!(row.updated_ms, now);
    assert_eq!(row.request, new.request);
    assert_eq!(row.idempotency_key, new.idempotency_key);
    assert_eq!(&get(&ledger, &row).await, &row);

    // The two-step path on a twin operation gives the same row, field for field.
    let twin = NewOperation {
        operation_id: OperationId::new("op-two-steps"),
        intent_ref: "intent-two-steps".into(),
        ..new.clone()
    };
    let (_, twin_first) = first_claim(&twin, now, "two steps");
    let created = create(&ledger, twin.clone()).await;
    let mut two_steps = apply_ok(
        &ledger,
        created.update_for(
            &match transition(
                &created.snapshot(),
                &Event::ClaimSend,
                Clock {
                    now_ms: now,
                    jitter: 0.5,
                },
            ) {
                Ok(t) => t,
                Err(e) => panic!("claim send refused: {e}"),
            },
            twin_first.changes.current_attempt,
            twin_first.changes.lease_until_ms,
            None,
            twin_first.evidence.clone(),
            now,
        ),
    )
    .await;
    assert_eq!(two_steps.operation_id, twin.operation_id);
    two_steps.operation_id = row.operation_id.clone();
    two_steps.intent_ref = row.intent_ref.clone();
    two_steps.current_attempt = row.current_attempt;
    assert_eq!(
        two_steps, row,
        "one step and two steps must store the same row"
    );

    let entries = log(&ledger, &row).await;
    assert_eq!(kinds(&entries), ["created", "attempt_registered"]);
    assert!(entries[0].seq < entries[1].seq);
    assert_eq!(entries[1].entry.attempt_id, Some(attempt));
    assert_eq!(entries[1].entry.generation, Generation(1));
    assert_eq!(entries[1].entry.from_state, Some(State::Prepared));
    assert_eq!(entries[1].entry.to_state, Some(State::InFlight));
    assert_eq!(entries[1].entry.note.as_deref(), Some("one step"));
}

/// An operation that exists (by id, or by intent under another id) comes back untouched as
/// `Existing`: the claim is not applied and no evidence is added.
pub async fn create_and_apply_returns_an_existing_operation_untouched<L: Ledger>(ledger: L) {
    let new = new_operation("tenant-a", "op-exists", "intent-exists");
    let stored = create(&ledger, new.clone()).await;

    let (_, first) = first_claim(&new, T0 + 10, "same id");
    match must(
        ledger.create_and_apply(new.clone(), first).await,
        "create_and_apply",
    ) {
        Created::Existing(r) => assert_eq!(r, stored),
        Created::New(r) => panic!("an existing id was created again: {:?}", r.state),
    }

    let same_intent = NewOperation {
        operation_id: OperationId::new("op-other-id"),
        ..new.clone()
    };
    let (_, first) = first_claim(&same_intent, T0 + 20, "same intent");
    match must(
        ledger.create_and_apply(same_intent.clone(), first).await,
        "create_and_apply",
    ) {
        Created::Existing(r) => assert_eq!(r, stored),
        Created::New(r) => panic!("an existing intent was created again: {:?}", r.state),
    }
    assert_eq!(get(&ledger, &stored).await, stored);
    assert_eq!(kinds(&log(&ledger, &stored).await), ["created"]);
    assert_eq!(
        must(
            ledger
                .get(&same_intent.tenant, &same_intent.operation_id)
                .await,
            "get"
        ),
        None
    );
}

/// A `first` update naming another operation, or not expecting a fresh row, is a configuration
/// error and nothing is stored.
pub async fn create_and_apply_refuses_an_update_of_another_operation<L: Ledger>(ledger: L) {
    let new = new_operation("tenant-a", "op-mismatch", "intent-mismatch");
    let other = new_operation("tenant-a", "op-elsewhere", "intent-elsewhere");
    let (_, first) = first_claim(&other, T0 + 10, "wrong operation");
    match ledger.create_and_apply(new.clone(), first).await {
        Err(LedgerError::Config(_)) => {}
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let (_, mut stale) = first_claim(&new, T0 + 10, "stale expectation");
    stale.expect_version = 3;
    match ledger.create_and_apply(new.clone(), stale).await {
        Err(LedgerError::Config(_)) => {}
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert_eq!(
        must(ledger.get(&new.tenant, &new.operation_id).await, "get"),
        None
    );
}

/// 16 callers create and claim the same intent at once, each with its own operation id: one
/// row, one caller got it `New` and `IN_FLIGHT` (the one sender), everyone else got that row
/// as `Existing`, and the log has one `created` and one `attempt_registered`.
pub async fn concurrent_create_and_apply_of_one_intent_has_one_sender<L: Ledger>(ledger: L) {
    const CALLERS: usize = 16;
    let ledger = Arc::new(ledger);
    let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let mut tasks = Vec::with_capacity(CALLERS);
    for i in 0..CALLERS {
        let (ledger, barrier) = (ledger.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let new = new_operation("tenant-a", &format!("op-racer-{i}"), "intent-shared");
            let (attempt, first) = first_claim(&new, T0 + 10, "racer");
            barrier.wait().await;
            (
                attempt,
                must(
                    ledger.create_and_apply(new, first).await,
                    "create_and_apply",
                ),
            )
        }));
    }
    let mut senders = Vec::new();
    let mut seen = BTreeSet::new();
    for task in tasks {
        match task.await {
            Ok((attempt, Created::New(r))) => {
                assert_eq!(r.current_attempt, Some(attempt));
                seen.insert(r.operation_id.to_string());
                senders.push(r);
            }
            Ok((_, Created::Existing(r))) => {
                seen.insert(r.operation_id.to_string());
            }
            Err(e) => panic!("caller task failed: {e}"),
        }
    }
    assert_eq!(senders.len(), 1, "exactly one caller may create and claim");
    assert_eq!(seen.len(), 1, "every caller must see the one row");
    let row = get(&*ledger, &senders[0]).await;
    assert_eq!(row.state, State::InFlight);
    assert_eq!(row.generation, Generation(1));
    assert_eq!(
        kinds(&log(&*ledger, &row).await),
        ["created", "attempt_registered"]
    );
}

/// Operation `id`, created with its first send claimed; the vendor's answer to record
/// (`SUCCEEDED`, reference `W731`); and that answer as an update with a stale version.
async fn sent_and_answered<L: Ledger>(
    ledger: &L,
    id: &str,
) -> (OperationRecord, RawChanges, Update) {
    let new = new_operation("tenant-a", id, &format!("intent-{id}"));
    let (_, first) = first_claim(&new, T0 + 10, "claim");
    let claimed = match must(
        ledger.create_and_apply(new, first).await,
        "create_and_apply",
    ) {
        Created::New(r) => r,
        Created::Existing(r) => panic!("unexpected existing {}", r.operation_id),
    };
    let done = RawChanges {
        remote_ref: Some("W731".to_owned()),
        ..keep(&claimed, State::Succeeded, T0 + 20)
    };
    let mut stale = update_of(&claimed, done.clone(), "attempt_result");
    stale.expect_version += 1;
    (claimed, done, stale)
}

/// `record` (an attempt's result, written after the send) is the same compare-and-swap as
/// `apply`: a stale version changes nothing; a current one writes the row and its entry.
pub async fn record_is_the_same_compare_and_swap_as_apply<L: Ledger>(ledger: L) {
    let (claimed, done, stale) = sent_and_answered(&ledger, "op-record").await;
    assert_eq!(must(ledger.record(stale).await, "record"), None);
    assert_eq!(get(&ledger, &claimed).await, claimed);

    let row = match must(
        ledger
            .record(update_of(&claimed, done, "attempt_result"))
            .await,
        "record",
    ) {
        Some(r) => r,
        None => panic!("record refused a current update"),
    };
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.version, claimed.version + 1);
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(get(&ledger, &claimed).await, row);
    assert_eq!(
        kinds(&log(&ledger, &claimed).await),
        ["created", "attempt_registered", "attempt_result"]
    );
}

/// `record_unread` is `record` without the row read back: a stale update is `Stale` and changes
/// nothing; a current one is `Applied` (the store holds the row it was computed from with its
/// changes written in, `OperationRecord::set_changes`) or `Row` with what the store holds, and
/// its entry is logged.
pub async fn record_unread_writes_what_it_reports<L: Ledger>(ledger: L) {
    let (claimed, done, stale) = sent_and_answered(&ledger, "op-unread").await;
    assert_eq!(
        must(ledger.record_unread(stale).await, "record_unread"),
        Recorded::Stale
    );
    assert_eq!(get(&ledger, &claimed).await, claimed);

    let update = update_of(&claimed, done, "attempt_result");
    let mut expected = claimed.clone();
    expected.set_changes(update.changes.clone());
    match must(ledger.record_unread(update).await, "record_unread") {
        Recorded::Applied => {}
        Recorded::Row(row) => assert_eq!(row, expected),
        Recorded::Stale => panic!("record_unread refused a current update"),
    }
    assert_eq!(get(&ledger, &claimed).await, expected);
    assert_eq!(
        kinds(&log(&ledger, &claimed).await),
        ["created", "attempt_registered", "attempt_result"]
    );
}

/// `record_detached`, on a ledger that [detaches results](Ledger::detaches_results): it returns
/// before the store answers, and every later call about that operation sees the result as
/// applied (or refused) anyway. A stale update changes nothing but the log (its `late` entry is appended); a current
/// one is the same change as `record_unread`, and a write computed from the row it leaves
/// applies right after it. `settled` hears each outcome once. A ledger that does not detach
/// results refuses the call with nothing queued and `settled` never called.
pub async fn record_detached_is_seen_by_every_later_call<L: Ledger>(ledger: L) {
    let (claimed, done, stale) = sent_and_answered(&ledger, "op-detached").await;
    let (tx, rx) = std::sync::mpsc::channel();
    let settled = |tx: &std::sync::mpsc::Sender<Result<Recorded, LedgerError>>| {
        let tx = tx.clone();
        let settled: super::Settled = Box::new(move |r| {
            let _ = tx.send(r);
        });
        settled
    };
    let hear = || {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("settled is called once the store answered")
    };
    let late = || evidence_entry("late_evidence", T0 + 40);

    if !ledger.detaches_results() {
        assert!(
            ledger.record_detached(stale, late(), settled(&tx)).is_err(),
            "a ledger that does not detach results refuses"
        );
        drop(tx);
        assert!(rx.recv().is_err(), "settled is dropped without a call");
        assert_eq!(get(&ledger, &claimed).await, claimed);
        return;
    }

    must(
        ledger.record_detached(stale, late(), settled(&tx)),
        "record_detached",
    );
    // Read at once: the read waits for the result queued before it. The refused result was
    // appended as late evidence, which advances the version and nothing else.
    let after_late = get(&ledger, &claimed).await;
    assert_eq!(
        after_late,
        OperationRecord {
            version: claimed.version + 1,
            ..claimed.clone()
        }
    );
    let claimed = after_late;
    assert_eq!(
        kinds(&log(&ledger, &claimed).await),
        ["created", "attempt_registered", "late_evidence"]
    );
    assert!(matches!(hear(), Ok(Recorded::Stale)));

    let update = update_of(&claimed, done, "attempt_result");
    let mut recorded = claimed.clone();
    recorded.set_changes(update.changes.clone());
    must(
        ledger.record_detached(update, late(), settled(&tx)),
        "record_detached",
    );
    // Written at once, from the row as recorded: it applies only after the result did.
    let next = update_of(
        &recorded,
        keep(&recorded, State::Succeeded, T0 + 50),
        "note",
    );
    let mut expected = recorded.clone();
    expected.set_changes(next.changes.clone());
    match must(ledger.apply(next).await, "apply") {
        Some(row) => assert_eq!(row, expected),
        None => panic!("a write queued after a detached result did not see it"),
    }
    assert!(matches!(hear(), Ok(Recorded::Applied | Recorded::Row(_))));
    assert_eq!(get(&ledger, &claimed).await, expected);
    assert_eq!(
        kinds(&log(&ledger, &claimed).await),
        [
            "created",
            "attempt_registered",
            "late_evidence",
            "attempt_result",
            "note"
        ]
    );
    drop(tx);
    assert!(
        rx.recv_timeout(Duration::from_secs(1)).is_err(),
        "settled hears each outcome once"
    );
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

// ── lifecycle ───────────────────────────────────────────────────────────────────────────────────

fn step(r: &OperationRecord, event: &Event, now_ms: i64) -> crate::state::Transition {
    match transition(
        &r.snapshot(),
        event,
        Clock {
            now_ms,
            jitter: 0.5,
        },
    ) {
        Ok(t) => t,
        Err(e) => panic!("state machine refused {}: {e}", event.name()),
    }
}

/// Drill D1/D16/D17 through the store: the attempt is registered, its response is lost, the
/// lease runs out and the sweep makes it `UNKNOWN`; the stale sender's late result is refused;
/// recovery claims it and a lookup finds `W731`: `SUCCEEDED`, with the whole story in the log.
pub async fn lifecycle_lost_response_recovered_by_lookup<L: Ledger>(ledger: L) {
    let r = create(&ledger, new_operation("tenant-a", "op-204", "intent-7781")).await;

    // PREPARED → IN_FLIGHT (register, then send).
    let t1 = T0 + 10;
    let claim = step(&r, &Event::ClaimSend, t1);
    let attempt = AttemptId::generate();
    let lease_until = t1 + r.policy.lease().as_millis() as i64;
    let in_flight = apply_ok(
        &ledger,
        r.update_for(
            &claim,
            Some(attempt),
            Some(lease_until),
            None,
            NewEvidence {
                attempt_id: Some(attempt),
                ..evidence_entry("attempt_registered", t1)
            },
            t1,
        ),
    )
    .await;
    assert_eq!(in_flight.state, State::InFlight);
    assert_eq!(in_flight.generation, Generation(1));
    assert_eq!(in_flight.attempts_used, 1);
    assert_eq!(in_flight.deadline_ms, Some(t1 + r.policy.window_ms as i64));

    // The response is lost; nothing is recorded. Before the lease ends, the sweep leaves it.
    assert!(must(ledger.sweep_expired(lease_until).await, "sweep").is_empty());
    let t2 = lease_until + 1;
    let swept = must(ledger.sweep_expired(t2).await, "sweep");
    assert_eq!(ids(&swept), ["op-204"]);
    let unknown = swept[0].clone();
    assert_eq!(unknown.state, State::Unknown);
    assert_eq!(unknown.generation, Generation(2));
    assert!(unknown.may_have_applied);
    assert_eq!(unknown.next_check_ms, Some(t2));

    // The original sender wakes up with a success: its generation is stale, the store refuses.
    let late = step(
        &in_flight,
        &Event::AttemptResult(Evidence::Succeeded {
            remote_ref: Some("W731".to_owned()),
        }),
        t2 + 1,
    );
    let stale = in_flight.update_for(
        &late,
        None,
        None,
        None,
        NewEvidence {
            attempt_id: Some(attempt),
            ..evidence_entry("attempt_result", t2 + 1)
        },
        t2 + 1,
    );
    assert_eq!(must(ledger.apply(stale).await, "apply"), None);

    // Recovery claims the due operation.
    let t3 = t2 + 5;
    let claimed = must(ledger.claim_due(t3, 3_000, 10).await, "claim_due");
    assert_eq!(ids(&claimed), ["op-204"]);
    let recovering = claimed[0].clone();
    assert_eq!(recovering.generation, Generation(3));
    assert_eq!(recovering.lease_until_ms, Some(t3 + 3_000));

    // The lookup by operation id finds W731.
    let t4 = t3 + 20;
    let found = Evidence::Succeeded {
        remote_ref: Some("W731".to_owned()),
    };
    let lookup = step(&recovering, &Event::LookupResult(found.clone()), t4);
    let done = apply_ok(
        &ledger,
        recovering.update_for(
            &lookup,
            None,
            None,
            None,
            NewEvidence {
                evidence: Some(found.clone()),
                ..evidence_entry("lookup", t4)
            },
            t4,
        ),
    )
    .await;
    let expected = OperationRecord {
        state: State::Succeeded,
        last_result: Some(State::Succeeded),
        generation: Generation(3),
        version: recovering.version + 1,
        queries_used: 1,
        may_have_applied: true,
        lease_until_ms: None,
        next_check_ms: None,
        remote_ref: Some("W731".to_owned()),
        // Success clears the reason the operation was unknown for.
        reason: None,
        updated_ms: t4,
        ..recovering.clone()
    };
    assert_eq!(done, expected);
    assert_eq!(get(&ledger, &r).await, expected);
    assert_eq!(
        done.idempotency_key, r.idempotency_key,
        "the key never changes"
    );
    assert_eq!(done.current_attempt, Some(attempt));

    // SUCCEEDED is terminal for the scheduler: nothing to claim or sweep.
    assert!(must(ledger.claim_due(t4 + 100_000, 3_000, 10).await, "claim_due").is_empty());
    assert!(must(ledger.sweep_expired(t4 + 100_000).await, "sweep").is_empty());

    let entries = log(&ledger, &r).await;
    let story: Vec<(&str, u64, Option<State>, Option<State>)> = entries
        .iter()
        .map(|e| {
            (
                &*e.entry.kind,
                e.entry.generation.0,
                e.entry.from_state,
                e.entry.to_state,
            )
        })
        .collect();
    assert_eq!(
        story,
        [
            ("created", 0, None, Some(State::Prepared)),
            (
                "attempt_registered",
                1,
                Some(State::Prepared),
                Some(State::InFlight)
            ),
            (
                "lease_expired",
                2,
                Some(State::InFlight),
                Some(State::Unknown)
            ),
            (
                "recovery_claimed",
                3,
                Some(State::Unknown),
                Some(State::Unknown)
            ),
            ("lookup", 3, Some(State::Unknown), Some(State::Succeeded)),
        ]
    );
    assert_eq!(entries[1].entry.attempt_id, Some(attempt));
    assert_eq!(entries[2].entry.attempt_id, Some(attempt));
    assert_eq!(entries[4].entry.evidence, Some(found));
}

// ── PREPARED rows without an owner ──────────────────────────────────────────────────────────────

/// A new operation `id` created at `created_ms`.
async fn create_at<L: Ledger>(ledger: &L, id: &str, created_ms: i64) -> OperationRecord {
    let new = NewOperation {
        now_ms: created_ms,
        ..new_operation("tenant-a", id, &format!("intent-{id}"))
    };
    create(ledger, new).await
}

/// The age and lease the `claim_prepared` checks use.
const PREPARED_AGE_MS: i64 = 30_000;
const PREPARED_LEASE_MS: i64 = 10_000;

/// Only `PREPARED` rows old enough and not leased are claimed, oldest first: generation and
/// version +1, the lease from now, still `PREPARED`, a `recovery_claimed` entry. Young rows,
/// rows already sent (`IN_FLIGHT`) and finished ones are left alone.
pub async fn claim_prepared_claims_only_old_unleased_prepared_rows<L: Ledger>(ledger: L) {
    // Created out of age order: the claim order is by creation time.
    let old_b = create_at(&ledger, "old-b", T0 + 1_000).await;
    let old_a = create_at(&ledger, "old-a", T0).await;
    let young = create_at(&ledger, "young", T0 + 50_000).await;
    let flying = put(&ledger, "flying", State::InFlight, None, Some(T0 + 1)).await;
    let done = put(&ledger, "done", State::Succeeded, None, None).await;
    let now = T0 + 60_000;
    assert!(
        must(
            ledger
                .claim_prepared(now, PREPARED_AGE_MS, PREPARED_LEASE_MS, 0)
                .await,
            "claim_prepared"
        )
        .is_empty(),
        "limit 0 claims nothing"
    );
    let claimed = must(
        ledger
            .claim_prepared(now, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&claimed), ["old-a", "old-b"]);
    for (row, before) in claimed.iter().zip([&old_a, &old_b]) {
        assert_eq!(row.state, State::Prepared);
        assert_eq!(row.generation, Generation(1));
        assert_eq!(row.version, 1);
        assert_eq!(row.lease_until_ms, Some(now + PREPARED_LEASE_MS));
        assert_eq!(row.updated_ms, now);
        assert_eq!(row.created_ms, before.created_ms);
        assert_eq!(row.request, before.request);
        assert_eq!(&get(&ledger, row).await, row);
        let entries = log(&ledger, row).await;
        assert_eq!(kinds(&entries), ["created", "recovery_claimed"]);
        let entry = &entries[1].entry;
        assert_eq!(entry.generation, Generation(1));
        assert_eq!(entry.from_state, Some(State::Prepared));
        assert_eq!(entry.to_state, Some(State::Prepared));
        assert_eq!(entry.at_ms, now);
    }
    for untouched in [&young, &flying, &done] {
        assert_eq!(&get(&ledger, untouched).await, untouched);
    }
}

/// A claimed `PREPARED` row is not claimed again while its lease runs; once it expires the row
/// is claimed again at the next generation.
pub async fn claim_prepared_lease_fences_a_second_claim_until_it_expires<L: Ledger>(ledger: L) {
    create_at(&ledger, "old", T0).await;
    let now = T0 + 60_000;
    let claim = |at: i64| ledger.claim_prepared(at, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10);
    let first = must(claim(now).await, "claim_prepared");
    assert_eq!(ids(&first), ["old"]);
    for at in [now, now + 1, now + PREPARED_LEASE_MS - 1] {
        assert!(
            must(claim(at).await, "claim_prepared").is_empty(),
            "claimed again at +{} ms while leased",
            at - now
        );
    }
    let again = must(claim(now + PREPARED_LEASE_MS).await, "claim_prepared");
    assert_eq!(ids(&again), ["old"]);
    assert_eq!(again[0].generation, Generation(2));
    assert_eq!(again[0].version, 2);
}

/// Concurrent claimers of old `PREPARED` rows get disjoint sets that together cover every row.
pub async fn concurrent_claim_prepared_gets_disjoint_rows<L: Ledger>(ledger: L) {
    const ROWS: usize = 24;
    const CLAIMERS: usize = 6;
    let ledger = Arc::new(ledger);
    for i in 0..ROWS {
        create_at(&*ledger, &format!("old-{i:02}"), T0 + i as i64).await;
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let mut tasks = Vec::with_capacity(CLAIMERS);
    for _ in 0..CLAIMERS {
        let (ledger, barrier) = (ledger.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut mine = Vec::new();
            loop {
                let got = must(
                    ledger
                        .claim_prepared(T0 + 60_000, PREPARED_AGE_MS, PREPARED_LEASE_MS, 3)
                        .await,
                    "claim_prepared",
                );
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|r| r.operation_id.to_string()));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        match task.await {
            Ok(mine) => all.extend(mine),
            Err(e) => panic!("claimer task failed: {e}"),
        }
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        distinct.len(),
        all.len(),
        "a row was claimed twice: {all:?}"
    );
    assert_eq!(all.len(), ROWS, "every old row is claimed once");
}

/// A `PREPARED` row claimed for recovery is sent with the usual compare-and-swap at the claimed
/// generation (`PREPARED` → `IN_FLIGHT`); the creator's own first claim, which expects the
/// fresh row, is refused: one sender.
pub async fn a_prepared_row_claimed_for_recovery_can_be_claimed_for_sending<L: Ledger>(ledger: L) {
    let new = new_operation("tenant-a", "op-outbox", "intent-outbox");
    let r = create(&ledger, new.clone()).await;
    let now = T0 + 60_000;
    let claimed = must(
        ledger
            .claim_prepared(now, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&claimed), ["op-outbox"]);
    let row = &claimed[0];
    let t = step(row, &Event::ClaimSend, now + 1);
    let attempt = AttemptId::generate();
    let send = row.update_for(
        &t,
        Some(attempt),
        Some(now + 1 + row.policy.lease().as_millis() as i64),
        None,
        evidence_entry("attempt_registered", now + 1),
        now + 1,
    );
    let sent = apply_ok(&ledger, send).await;
    assert_eq!(sent.state, State::InFlight);
    assert_eq!(sent.generation, Generation(2));
    assert_eq!(sent.current_attempt, Some(attempt));
    assert_eq!(sent.attempts_used, 1);
    // The creator comes back with the claim it built on the fresh row: refused.
    let (_, stale) = first_claim(&new, now + 2, "creator");
    let stale = Update {
        expect_generation: r.generation,
        expect_version: r.version,
        ..stale
    };
    assert_eq!(must(ledger.apply(stale).await, "apply"), None);
    assert_eq!(get(&ledger, &r).await, sent);
    assert_eq!(
        kinds(&log(&ledger, &r).await),
        ["created", "recovery_claimed", "attempt_registered"]
    );
    // An IN_FLIGHT row is never claimed as PREPARED, however old.
    assert!(
        must(
            ledger
                .claim_prepared(now + 1_000_000, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
                .await,
            "claim_prepared"
        )
        .is_empty()
    );
}

// ── rows that cannot be decoded ─────────────────────────────────────────────────────────────────

/// Overwrites columns of `r`'s stored row with `set` (an SQL `SET` list valid for SQLite and
/// PostgreSQL) behind the ledger's back. `false` for a backend whose rows are typed values and
/// cannot be corrupted (`MemoryLedger`), or that this suite does not know.
async fn corrupt<L: Ledger>(ledger: &L, r: &OperationRecord, set: &str) -> bool {
    let any: &dyn std::any::Any = ledger;
    #[cfg(feature = "sqlite")]
    if let Some(sqlite) = any.downcast_ref::<super::SqliteLedger>() {
        let sql = format!("UPDATE rw_operations SET {set} WHERE tenant = ?1 AND operation_id = ?2");
        must(
            sqlite
                .exec_for_conformance(sql, &r.tenant, &r.operation_id)
                .await,
            "corrupt a row",
        );
        return true;
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = any.downcast_ref::<super::PostgresLedger>() {
        let sql = format!(
            "UPDATE \"{}\".rw_operations SET {set} WHERE tenant = $1 AND operation_id = $2",
            pg.schema()
        );
        if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(r.tenant.as_str())
            .bind(r.operation_id.as_str())
            .execute(pg.pool())
            .await
        {
            panic!("corrupt a row: {e}");
        }
        return true;
    }
    let _ = (any, r, set);
    false
}

/// Rows that cannot be decoded (garbage in a JSON column, an unknown state name) do not stop
/// recovery: `claim_due`, `sweep_expired` and `claim_prepared` quarantine them (listed by
/// `quarantined` with the decode error, never claimed again) and claim or sweep the healthy
/// rows of the same batch. A budget written by a newer version, with a field this one does not
/// know, is read (the extra field ignored), not quarantined.
pub async fn corrupt_rows_are_quarantined_and_the_healthy_rows_recovered<L: Ledger>(ledger: L) {
    let due = |id: &'static str| put(&ledger, id, State::Unknown, Some(T0), None);
    let (due_a, due_b) = (due("due-a").await, due("due-b").await);
    let bad_json = due("due-bad-json").await;
    let bad_state = due("due-bad-state").await;
    let newer = due("due-newer-policy").await;
    let flying = |id: &'static str| put(&ledger, id, State::InFlight, None, Some(T0 + 1));
    let (fly_a, fly_bad) = (flying("fly-a").await, flying("fly-bad").await);
    let prep_a = create_at(&ledger, "prep-a", T0).await;
    let prep_bad = create_at(&ledger, "prep-bad", T0).await;

    let mut newer_policy = match serde_json::to_value(test_policy()) {
        Ok(v) => v,
        Err(e) => panic!("serialize the policy: {e}"),
    };
    newer_policy["added_by_a_newer_version"] = serde_json::json!(true);
    let newer_policy = newer_policy.to_string().replace('\'', "''");
    let corrupted = [
        (&bad_json, "request_headers = 'not json'".to_owned()),
        (&bad_state, "last_result = 'NOT_A_STATE'".to_owned()),
        (&newer, format!("budget_policy = '{newer_policy}'")),
        (&fly_bad, "response_headers = '{'".to_owned()),
        (&prep_bad, "request_headers = '[[1]]'".to_owned()),
    ];
    for (r, set) in &corrupted {
        if !corrupt(&ledger, r, set).await {
            // MemoryLedger keeps typed rows: nothing can be undecodable, so there is nothing to
            // quarantine. Check only that its list is empty and that claims are unaffected.
            assert!(must(ledger.quarantined(10).await, "quarantined").is_empty());
            return;
        }
    }
    // `fly-bad`'s `response_headers` are only read with a status: give it one.
    assert!(corrupt(&ledger, &fly_bad, "response_status = 200").await);

    let now = T0 + 10;
    let claimed = must(ledger.claim_due(now, 1_000, 10).await, "claim_due");
    assert_eq!(ids(&claimed), ["due-a", "due-b", "due-newer-policy"]);
    assert_eq!(claimed[2].policy, test_policy());
    let swept = must(ledger.sweep_expired(now).await, "sweep_expired");
    assert_eq!(ids(&swept), ["fly-a"]);
    let prepared = must(
        ledger
            .claim_prepared(now + 60_000, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&prepared), ["prep-a"]);

    let quarantined = must(ledger.quarantined(10).await, "quarantined");
    let mut listed: Vec<(&str, &str)> = quarantined
        .iter()
        .map(|q| (q.operation_id.as_str(), q.error.as_str()))
        .collect();
    listed.sort();
    let expected = [
        ("due-bad-json", "request_headers"),
        ("due-bad-state", "last_result"),
        ("fly-bad", "response_headers"),
        ("prep-bad", "request_headers"),
    ];
    assert_eq!(listed.len(), expected.len(), "{quarantined:?}");
    for ((id, error), (want_id, column)) in listed.iter().zip(expected) {
        assert_eq!(*id, want_id);
        assert!(
            error.contains(column),
            "{id}: {error:?} should name {column}"
        );
    }
    for q in &quarantined {
        assert_eq!(q.tenant, Tenant::new("tenant-a"));
        let expected_at = if q.operation_id.as_str() == "prep-bad" {
            now + 60_000
        } else {
            now
        };
        assert_eq!(q.at_ms, expected_at, "{}", q.operation_id);
    }
    assert_eq!(must(ledger.quarantined(1).await, "quarantined").len(), 1);

    // Later passes never pick the quarantined rows again; the healthy ones go on as usual.
    let later = now + 1_000_000;
    let claimed = must(ledger.claim_due(later, 1_000, 10).await, "claim_due");
    assert_eq!(
        ids(&claimed),
        ["due-a", "due-b", "due-newer-policy", "fly-a"]
    );
    assert!(must(ledger.sweep_expired(later).await, "sweep_expired").is_empty());
    let prepared = must(
        ledger
            .claim_prepared(later, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&prepared), ["prep-a"]);
    assert_eq!(must(ledger.quarantined(10).await, "quarantined").len(), 4);
    let _ = (due_a, due_b, fly_a, prep_a);
}

/// Issue 27 item 3: a quarantined row does not vanish. A newer version wrote a value this one
/// does not know (a rolling deploy); the claims quarantine the rows. They are counted apart
/// from the states, listed by their raw columns with the decode error, and released once a
/// version that can read them runs: while the row cannot be decoded a release changes nothing;
/// once the column is readable (the newer version's value, repaired here by hand) the release
/// clears the quarantine, appends an audited entry that advances the version, drops the lease
/// the quarantining claim left, and recovery claims the row like any other. Two releases at
/// once release it once.
pub async fn quarantined_rows_are_counted_listed_and_released_once_readable<L: Ledger>(ledger: L) {
    use super::{OperationQuery as Q, Order, QUARANTINE_RELEASED, Released, TenantScope};
    let tenant = Tenant::new("tenant-a");
    let scope = TenantScope::Tenant(tenant.clone());
    let healthy = put(&ledger, "due-ok", State::Unknown, Some(T0), None).await;
    let newer = put(&ledger, "due-newer", State::Unknown, Some(T0), None).await;
    let prep = create_at(&ledger, "prep-newer", T0).await;
    let elsewhere = listed_row(
        &ledger,
        "tenant-b",
        "b-newer",
        T0,
        State::Unknown,
        "c",
        None,
        Some(T0),
    )
    .await;
    // A state name this version does not know, as a newer version may write it.
    let from_newer = "last_result = 'PAUSED_BY_VENDOR'";
    if !corrupt(&ledger, &newer, from_newer).await {
        // MemoryLedger keeps typed rows: nothing is ever quarantined, nothing to release.
        let counts = must(
            ledger.count_by_state(&TenantScope::AllTenants).await,
            "count_by_state",
        );
        assert_eq!(counts.quarantined(), 0);
        let page = must(
            ledger.list(&Q::all_tenants().quarantined_only()).await,
            "list",
        );
        assert!(page.rows.is_empty() && page.skipped.is_empty(), "{page:?}");
        let released = release(&ledger, &newer, newer.version, None, T0).await;
        assert_eq!(released, Released::NotQuarantined);
        let ghost = OperationRecord {
            operation_id: OperationId::new("no-such-op"),
            ..newer.clone()
        };
        let released = release(&ledger, &ghost, 0, None, T0).await;
        assert_eq!(released, Released::NotFound);
        assert_eq!(get(&ledger, &newer).await, newer);
        return;
    }
    assert!(corrupt(&ledger, &prep, from_newer).await);
    assert!(corrupt(&ledger, &elsewhere, from_newer).await);

    // The claims quarantine them and recover the healthy row.
    let now = T0 + 10;
    let claimed = must(ledger.claim_due(now, 1_000, 10).await, "claim_due");
    assert_eq!(ids(&claimed), ["due-ok"]);
    let at_prep = now + 60_000;
    let prepared = must(
        ledger
            .claim_prepared(at_prep, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert!(prepared.is_empty(), "{prepared:?}");

    // Counted, apart from the states, in their tenant's scope.
    let counts = must(ledger.count_by_state(&scope).await, "count_by_state");
    assert_eq!(counts.quarantined(), 2, "{counts:?}");
    assert_eq!(counts.get(State::Unknown), Some(1), "in no state's count");
    assert_eq!(counts.get(State::Prepared), Some(0), "in no state's count");
    let all = must(
        ledger.count_by_state(&TenantScope::AllTenants).await,
        "count_by_state",
    );
    assert_eq!(all.quarantined(), 3);
    let b = must(
        ledger
            .count_by_state(&TenantScope::Tenant(Tenant::new("tenant-b")))
            .await,
        "count_by_state",
    );
    assert_eq!(b.quarantined(), 1);

    // Listed by their raw columns, with the error naming the column.
    let aside = || {
        Q::tenant(tenant.clone())
            .quarantined_only()
            .order(Order::OldestFirst)
    };
    let page = must(ledger.list(&aside()).await, "list");
    assert!(page.rows.is_empty(), "{:?}", page.rows);
    let listed: Vec<&str> = page
        .skipped
        .iter()
        .map(|s| s.operation_id.as_str())
        .collect();
    assert_eq!(listed, ["due-newer", "prep-newer"]);
    let s = &page.skipped[0];
    assert_eq!(s.tenant, tenant);
    assert_eq!(s.state, "UNKNOWN");
    assert!(s.error.contains("last_result"), "{s:?}");
    assert!(s.error.contains("PAUSED_BY_VENDOR"), "{s:?}");
    assert_eq!(s.quarantined_ms, Some(now));
    assert!(!s.readable);
    assert_eq!(s.created_ms, newer.created_ms);
    assert_eq!(s.updated_ms, now, "the quarantining claim changed it");
    let version = newer.version + 1;
    assert_eq!(s.columns.version, Some(version), "the claim advanced it");
    assert_eq!(s.columns.generation, Some(newer.generation.0 + 1));
    assert_eq!(s.columns.action.as_deref(), Some(ACTION));
    assert_eq!(s.columns.last_result.as_deref(), Some("PAUSED_BY_VENDOR"));
    assert_eq!(s.columns.request_body.as_ref(), Some(&newer.request.body));
    let names: Vec<String> = newer
        .request
        .headers
        .iter()
        .map(|(n, _)| n.to_owned())
        .collect();
    assert_eq!(s.columns.request_header_names.as_ref(), Some(&names));
    // Read as stored text, so nothing of it is unreadable: only its meaning is unknown.
    assert!(
        s.columns.unreadable.is_empty(),
        "{:?}",
        s.columns.unreadable
    );
    let p = &page.skipped[1];
    assert_eq!(
        (p.state.as_str(), p.quarantined_ms),
        ("PREPARED", Some(at_prep))
    );
    // Hidden from the ordinary listing; reported apart when included; never another tenant's.
    let plain = must(ledger.list(&Q::tenant(tenant.clone())).await, "list");
    assert_eq!(ids(&plain.rows), ["due-ok"]);
    assert!(plain.skipped.is_empty(), "{:?}", plain.skipped);
    let with = must(
        ledger
            .list(&Q::tenant(tenant.clone()).include_quarantined(true))
            .await,
        "list",
    );
    assert_eq!(ids(&with.rows), ["due-ok"]);
    assert_eq!(with.skipped.len(), 2);
    let other = must(
        ledger
            .list(&Q::tenant(Tenant::new("tenant-b")).quarantined_only())
            .await,
        "list",
    );
    assert_eq!(other.skipped.len(), 1);
    assert_eq!(other.skipped[0].operation_id.as_str(), "b-newer");

    // Not released while this version cannot decode it: nothing changes.
    let entries = log(&ledger, &newer).await.len();
    let refused = release(&ledger, &newer, version, Some("too early"), now + 100).await;
    match refused {
        Released::Undecodable { column, detail } => {
            assert_eq!(column.as_deref(), Some("last_result"));
            assert!(detail.contains("PAUSED_BY_VENDOR"), "{detail}");
        }
        other => panic!("expected Undecodable, got {other:?}"),
    }
    assert_eq!(
        release(&ledger, &newer, version - 1, None, now + 100).await,
        Released::Stale { current: version }
    );
    assert_eq!(
        release(&ledger, &healthy, healthy.version + 2, None, now + 100).await,
        Released::NotQuarantined
    );
    let in_b = OperationRecord {
        tenant: Tenant::new("tenant-b"),
        ..newer.clone()
    };
    assert_eq!(
        release(&ledger, &in_b, version, None, now + 100).await,
        Released::NotFound,
        "another tenant's id"
    );
    assert_eq!(log(&ledger, &newer).await.len(), entries);
    assert_eq!(must(ledger.list(&aside()).await, "list").skipped.len(), 2);
    let later = now + 1_000_000;
    let claimed = must(ledger.claim_due(later, 1_000, 10).await, "claim_due");
    assert_eq!(ids(&claimed), ["due-ok"], "still skipped by recovery");

    // The version that reads it runs (the column holds what this version knows): readable now,
    // still quarantined until released.
    assert!(corrupt(&ledger, &newer, "last_result = NULL").await);
    assert!(corrupt(&ledger, &prep, "last_result = NULL").await);
    let page = must(ledger.list(&aside()).await, "list");
    assert!(
        page.skipped.iter().all(|s| s.readable),
        "{:?}",
        page.skipped
    );
    assert!(
        page.skipped[0].error.contains("last_result"),
        "the reason kept"
    );
    let claimed = must(ledger.claim_due(later + 1, 1_000, 10).await, "claim_due");
    assert!(
        claimed.is_empty(),
        "still skipped until released: {claimed:?}"
    );

    let note = "released from quarantine by alice; version 4 -> 5; reason: 0.4 everywhere";
    let released = release(&ledger, &newer, version, Some(note), later + 2).await;
    let Released::Row(row) = released else {
        panic!("expected the released row, got {released:?}")
    };
    assert_eq!(row.state, State::Unknown);
    assert_eq!(row.last_result, None);
    assert_eq!(row.version, version + 1, "the release advances the version");
    assert_eq!(
        row.generation,
        Generation(newer.generation.0 + 1),
        "no new fence"
    );
    assert_eq!(
        row.lease_until_ms, None,
        "nobody held the quarantining claim's lease"
    );
    assert_eq!(row.next_check_ms, newer.next_check_ms);
    assert_eq!(get(&ledger, &newer).await, row);
    let entries = log(&ledger, &newer).await;
    let Some(last) = entries.last() else {
        panic!("no evidence")
    };
    assert_eq!(&*last.entry.kind, QUARANTINE_RELEASED);
    assert_eq!(last.entry.note.as_deref(), Some(note));
    assert_eq!(last.entry.at_ms, later + 2);
    assert_eq!(last.entry.generation, row.generation);
    assert_eq!((last.entry.from_state, last.entry.to_state), (None, None));
    let counts = must(ledger.count_by_state(&scope).await, "count_by_state");
    assert_eq!(counts.quarantined(), 1);
    assert_eq!(counts.get(State::Unknown), Some(2));
    assert_eq!(
        release(&ledger, &newer, row.version, None, later + 3).await,
        Released::NotQuarantined
    );
    // A decision made on the row as it was before the release is stale.
    let before = OperationRecord {
        version,
        ..row.clone()
    };
    let stale = update_of(
        &before,
        keep(&before, State::ManualReview, later + 3),
        "late",
    );
    assert_eq!(must(ledger.apply(stale).await, "apply"), None);

    // Recovered normally.
    let claimed = must(
        ledger.claim_due(later + 10_000, 1_000, 10).await,
        "claim_due",
    );
    let Some(again) = claimed
        .iter()
        .find(|r| r.operation_id == newer.operation_id)
    else {
        panic!("the released row is claimed: {claimed:?}")
    };
    assert_eq!(again.generation, Generation(row.generation.0 + 1));
    assert_eq!(
        kinds(&log(&ledger, &newer).await).last(),
        Some(&"recovery_claimed")
    );

    // Two releases of one row at once: one release.
    let prep_version = must(ledger.list(&aside()).await, "list").skipped[0]
        .columns
        .version
        .unwrap_or_default();
    let (a, b) = tokio::join!(
        release(&ledger, &prep, prep_version, Some("first"), at_prep + 1),
        release(&ledger, &prep, prep_version, Some("second"), at_prep + 1)
    );
    let won = [&a, &b]
        .iter()
        .filter(|r| matches!(r, Released::Row(_)))
        .count();
    assert_eq!(won, 1, "{a:?} {b:?}");
    assert!(
        [&a, &b].iter().all(|r| matches!(
            r,
            Released::Row(_) | Released::NotQuarantined | Released::Stale { .. }
        )),
        "{a:?} {b:?}"
    );
    let released = kinds(&log(&ledger, &prep).await)
        .into_iter()
        .filter(|k| *k == QUARANTINE_RELEASED)
        .count();
    assert_eq!(released, 1);
    // Its quarantining claim's lease is gone: claimed at once, not after it runs out.
    let prepared = must(
        ledger
            .claim_prepared(at_prep + 2, PREPARED_AGE_MS, PREPARED_LEASE_MS, 10)
            .await,
        "claim_prepared",
    );
    assert_eq!(ids(&prepared), ["prep-newer"]);
    let all = must(
        ledger.count_by_state(&TenantScope::AllTenants).await,
        "count_by_state",
    );
    assert_eq!(all.quarantined(), 1, "tenant-b's row stays quarantined");
}

/// [`Ledger::release_quarantined`] of `r` (its tenant and id).
async fn release<L: Ledger>(
    ledger: &L,
    r: &OperationRecord,
    version: u64,
    note: Option<&str>,
    at_ms: i64,
) -> super::Released {
    must(
        ledger
            .release_quarantined(
                &r.tenant,
                &r.operation_id,
                version,
                note.map(str::to_owned),
                at_ms,
            )
            .await,
        "release_quarantined",
    )
}

// ── listing ─────────────────────────────────────────────────────────────────────────────────────

/// Creates an operation of `tenant` at `created_ms` with contract `contract`, then moves it to
/// `state` with `remote_ref` and next check `next_check_ms`, changed at `created_ms + 5`.
// One call per row reads as a table of fixtures; a struct would only add noise.
#[allow(clippy::too_many_arguments)]
async fn listed_row<L: Ledger>(
    ledger: &L,
    tenant: &str,
    id: &str,
    created_ms: i64,
    state: State,
    contract: &str,
    remote_ref: Option<&str>,
    next_check_ms: Option<i64>,
) -> OperationRecord {
    let mut new = new_operation(tenant, id, &format!("intent-{id}"));
    new.now_ms = created_ms;
    new.contract.name = contract.into();
    let r = create(ledger, new).await;
    if state == State::Prepared && remote_ref.is_none() && next_check_ms.is_none() {
        return r;
    }
    let changes = RawChanges {
        remote_ref: remote_ref.map(str::to_owned),
        next_check_ms,
        ..keep(&r, state, created_ms + 5)
    };
    apply_ok(ledger, update_of(&r, changes, "setup")).await
}

async fn list_ids<L: Ledger>(ledger: &L, q: super::OperationQuery) -> Vec<String> {
    let page = must(ledger.list(&q).await, "list");
    assert!(page.skipped.is_empty(), "{:?}", page.skipped);
    page.rows
        .iter()
        .map(|r| r.operation_id.as_str().to_owned())
        .collect()
}

/// Every listing filter (state, tenant, contract, host, text, age, next check) keeps exactly
/// the matching rows, in the asked order; another tenant's rows never appear unless the query
/// is across all tenants; `%` and `_` in a text match are plain characters.
pub async fn list_filters_by_state_tenant_contract_text_and_age<L: Ledger>(ledger: L) {
    use super::{OperationQuery as Q, Order, TextMatch};
    let a = || Q::tenant(Tenant::new("tenant-a"));
    let s = |ms: i64| T0 + ms;
    listed_row(
        &ledger,
        "tenant-a",
        "op-1",
        s(0),
        State::ManualReview,
        "stripe-v1",
        Some("W731"),
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "op-2",
        s(10),
        State::Unknown,
        "stripe-v1",
        None,
        Some(s(100)),
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "op-3",
        s(20),
        State::Succeeded,
        "jira-v2",
        Some("W7310"),
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "a%b",
        s(30),
        State::ManualReview,
        "jira-v2",
        None,
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "axb",
        s(40),
        State::Prepared,
        "stripe-v1",
        None,
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-b",
        "op-b1",
        s(5),
        State::ManualReview,
        "stripe-v1",
        Some("W731"),
        None,
    )
    .await;

    assert_eq!(
        list_ids(&ledger, a()).await,
        ["axb", "a%b", "op-3", "op-2", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().order(Order::OldestFirst)).await,
        ["op-1", "op-2", "op-3", "a%b", "axb"]
    );
    assert_eq!(
        list_ids(&ledger, Q::tenant(Tenant::new("tenant-b"))).await,
        ["op-b1"]
    );
    assert!(
        list_ids(&ledger, Q::tenant(Tenant::new("tenant-c")))
            .await
            .is_empty()
    );
    assert_eq!(
        list_ids(
            &ledger,
            Q::all_tenants()
                .state(State::ManualReview)
                .order(Order::OldestFirst)
        )
        .await,
        ["op-1", "op-b1", "a%b"]
    );
    assert_eq!(
        list_ids(&ledger, a().state(State::ManualReview)).await,
        ["a%b", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().states([State::Unknown, State::Prepared])).await,
        ["axb", "op-2"]
    );
    assert_eq!(
        list_ids(&ledger, a().contract("jira-v2")).await,
        ["a%b", "op-3"]
    );
    assert_eq!(list_ids(&ledger, a().host("vendor.test")).await.len(), 5);
    assert!(list_ids(&ledger, a().host("vendor")).await.is_empty());
    assert!(list_ids(&ledger, a().host("vendor.tes")).await.is_empty());

    // Text: exact or prefix, on the operation id or the remote reference.
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Exact("W731".into()))).await,
        ["op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Prefix("W731".into()))).await,
        ["op-3", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Exact("op-2".into()))).await,
        ["op-2"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Prefix("op-".into()))).await,
        ["op-3", "op-2", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().text(TextMatch::Prefix("a%".into()))).await,
        ["a%b"]
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Prefix("a_".into())))
            .await
            .is_empty()
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Prefix("%".into())))
            .await
            .is_empty()
    );
    assert!(
        list_ids(&ledger, a().text(TextMatch::Exact("op".into())))
            .await
            .is_empty()
    );
    assert_eq!(
        list_ids(
            &ledger,
            Q::all_tenants().text(TextMatch::Exact("W731".into()))
        )
        .await,
        ["op-b1", "op-1"]
    );

    // Ages: strict bounds on creation, last change and next check.
    assert_eq!(
        list_ids(&ledger, a().created_before(s(20))).await,
        ["op-2", "op-1"]
    );
    assert_eq!(
        list_ids(&ledger, a().created_after(s(20))).await,
        ["axb", "a%b"]
    );
    assert_eq!(
        list_ids(&ledger, a().created_after(s(0)).created_before(s(30))).await,
        ["op-3", "op-2"]
    );
    // Changed at created + 5, except `axb` (left as created).
    assert_eq!(
        list_ids(&ledger, a().updated_before(s(16))).await,
        ["op-2", "op-1"]
    );
    assert_eq!(list_ids(&ledger, a().updated_after(s(35))).await, ["axb"]);
    assert_eq!(
        list_ids(&ledger, a().next_check_before(s(101))).await,
        ["op-2"]
    );
    assert!(
        list_ids(&ledger, a().next_check_before(s(100)))
            .await
            .is_empty()
    );
}

/// Keyset pages walk every row exactly once, no duplicates, no gaps, in order, even with ties
/// on the creation time and rows added between pages (oldest first: the new, later rows come at
/// the end; newest first: they are before the cursor and do not appear).
pub async fn list_pages_walk_every_row_once_while_rows_are_added<L: Ledger>(ledger: L) {
    use super::{OperationQuery as Q, Order};
    let mut expected = Vec::new();
    for i in 0..23 {
        // Groups of three share a creation time: pages split ties.
        let id = format!("op-{i:03}");
        listed_row(
            &ledger,
            "tenant-a",
            &id,
            T0 + (i / 3),
            State::ManualReview,
            "c",
            None,
            None,
        )
        .await;
        expected.push(id);
    }
    listed_row(
        &ledger,
        "tenant-b",
        "other",
        T0 + 1,
        State::ManualReview,
        "c",
        None,
        None,
    )
    .await;
    listed_row(
        &ledger,
        "tenant-a",
        "done",
        T0 + 1,
        State::Succeeded,
        "c",
        None,
        None,
    )
    .await;

    for order in [Order::OldestFirst, Order::NewestFirst] {
        let base = Q::tenant(Tenant::new("tenant-a"))
            .state(State::ManualReview)
            .order(order)
            .limit(4);
        let mut seen: Vec<String> = Vec::new();
        let mut query = base.clone();
        let mut added = 0;
        let mut pages = 0;
        // Each walk adds rows newer than every row so far.
        let late_base = if order == Order::OldestFirst {
            T0 + 100
        } else {
            T0 + 1_000
        };
        loop {
            let page = must(ledger.list(&query).await, "list");
            assert!(page.rows.len() <= 4);
            pages += 1;
            assert!(pages < 50, "the walk does not end");
            seen.extend(page.rows.iter().map(|r| r.operation_id.as_str().to_owned()));
            let Some(next) = page.next else { break };
            // Round-trips as text, as a page link would carry it.
            let next = must(super::Cursor::parse(next.as_str()), "parse a cursor");
            if added < 5 {
                let id = format!("late-{order:?}-{added}");
                listed_row(
                    &ledger,
                    "tenant-a",
                    &id,
                    late_base + added,
                    State::ManualReview,
                    "c",
                    None,
                    None,
                )
                .await;
                if order == Order::OldestFirst {
                    expected.push(id);
                }
                added += 1;
            }
            query = base.clone().after(next);
        }
        let mut want = expected.clone();
        if order == Order::NewestFirst {
            // The whole list as it stood when this walk began, newest first.
            want.reverse();
        }
        assert_eq!(seen, want, "{order:?}");
    }
}

/// The page size defaults to 50, is at least 1 and at most 1000; the last page has no cursor;
/// a garbled cursor is refused.
pub async fn list_limit_bounds_and_cursor_errors<L: Ledger>(ledger: L) {
    use super::{Cursor, DEFAULT_LIMIT, MAX_LIMIT, OperationQuery as Q};
    for i in 0..53 {
        listed_row(
            &ledger,
            "tenant-a",
            &format!("op-{i:03}"),
            T0 + i,
            State::Unknown,
            "c",
            None,
            None,
        )
        .await;
    }
    let q = Q::tenant(Tenant::new("tenant-a"));
    assert_eq!(q.page_size(), DEFAULT_LIMIT);
    assert_eq!(q.clone().limit(0).page_size(), 1);
    assert_eq!(q.clone().limit(1_000_000).page_size(), MAX_LIMIT);
    let first = must(ledger.list(&q).await, "list");
    assert_eq!(first.rows.len(), 50);
    let Some(next) = first.next else {
        panic!("a second page is due")
    };
    let second = must(ledger.list(&q.clone().after(next)).await, "list");
    assert_eq!(second.rows.len(), 3);
    assert_eq!(second.next, None);
    let all = must(ledger.list(&q.clone().limit(5000)).await, "list");
    assert_eq!(all.rows.len(), 53);
    assert_eq!(all.next, None);
    let one = must(ledger.list(&q.clone().limit(0)).await, "list");
    assert_eq!(one.rows.len(), 1);
    assert!(one.next.is_some());
    for bad in ["", "12", "a.b", "1.2.3", "1;DROP"] {
        assert!(
            matches!(Cursor::parse(bad), Err(LedgerError::Config(_))),
            "{bad:?}"
        );
    }
    let nul = q.clone().contract("a\0b");
    assert!(matches!(
        ledger.list(&nul).await,
        Err(LedgerError::Config(_))
    ));
}

/// Counts per open state and the oldest row per watched state, per tenant or across all;
/// terminal states are not counted.
pub async fn count_by_state_and_oldest_per_state<L: Ledger>(ledger: L) {
    use super::{OPEN_STATES, TenantScope, WATCHED_STATES};
    let rows: [(&str, &str, i64, State); 9] = [
        ("tenant-a", "r1", 30, State::ManualReview),
        ("tenant-a", "r2", 10, State::ManualReview),
        ("tenant-a", "u1", 20, State::Unknown),
        ("tenant-a", "p1", 40, State::Prepared),
        ("tenant-a", "s1", 0, State::Succeeded),
        ("tenant-a", "s2", 1, State::Rejected),
        ("tenant-b", "rb", 5, State::ManualReview),
        ("tenant-b", "ub", 50, State::Unknown),
        ("tenant-b", "fb", 60, State::InFlight),
    ];
    for (tenant, id, ms, state) in rows {
        listed_row(&ledger, tenant, id, T0 + ms, state, "c", None, None).await;
    }
    let a = TenantScope::Tenant(Tenant::new("tenant-a"));
    let counts = must(ledger.count_by_state(&a).await, "count_by_state");
    let got: Vec<(State, u64)> = counts.iter().collect();
    assert_eq!(got.len(), OPEN_STATES.len());
    assert_eq!(counts.get(State::ManualReview), Some(2));
    assert_eq!(counts.get(State::Unknown), Some(1));
    assert_eq!(counts.get(State::Prepared), Some(1));
    assert_eq!(counts.get(State::InFlight), Some(0));
    assert_eq!(counts.get(State::Succeeded), None);
    let all = must(
        ledger.count_by_state(&TenantScope::AllTenants).await,
        "count_by_state",
    );
    assert_eq!(all.get(State::ManualReview), Some(3));
    assert_eq!(all.get(State::Unknown), Some(2));
    assert_eq!(all.get(State::InFlight), Some(1));
    assert_eq!(all.get(State::Processing), Some(0));
    let none = must(
        ledger
            .count_by_state(&TenantScope::Tenant(Tenant::new("tenant-c")))
            .await,
        "count_by_state",
    );
    assert!(none.iter().all(|(_, n)| n == 0));

    let oldest = must(ledger.oldest(&a, &WATCHED_STATES).await, "oldest");
    let review = oldest
        .get(State::ManualReview)
        .map(|o| (o.operation_id.as_str(), o.created_ms, o.updated_ms));
    assert_eq!(review, Some(("r2", T0 + 10, T0 + 15)));
    let unknown = oldest.get(State::Unknown).map(|o| o.operation_id.as_str());
    assert_eq!(unknown, Some("u1"));
    assert_eq!(oldest.get(State::Processing), None);
    assert_eq!(
        oldest.get(State::Prepared).map(|o| o.created_ms),
        Some(T0 + 40)
    );
    assert_eq!(oldest.iter().count(), WATCHED_STATES.len());
    let all = must(
        ledger
            .oldest(&TenantScope::AllTenants, &WATCHED_STATES)
            .await,
        "oldest",
    );
    let review = all
        .get(State::ManualReview)
        .map(|o| (o.tenant.as_str(), o.operation_id.as_str()));
    assert_eq!(review, Some(("tenant-b", "rb")));
    assert_eq!(
        all.get(State::Unknown).map(|o| o.operation_id.as_str()),
        Some("u1")
    );
}

/// A listing leaves quarantined rows out unless asked; a row that cannot be decoded is skipped
/// and reported, and the rest of the page comes back.
pub async fn list_skips_undecodable_rows_and_hides_quarantined_ones<L: Ledger>(ledger: L) {
    use super::{OperationQuery as Q, Order, TenantScope};
    let q = || Q::tenant(Tenant::new("tenant-a")).order(Order::OldestFirst);
    let good = listed_row(
        &ledger,
        "tenant-a",
        "good",
        T0,
        State::ManualReview,
        "c",
        None,
        None,
    )
    .await;
    let bad = listed_row(
        &ledger,
        "tenant-a",
        "bad",
        T0 + 1,
        State::ManualReview,
        "c",
        None,
        None,
    )
    .await;
    let due = listed_row(
        &ledger,
        "tenant-a",
        "due-bad",
        T0 + 2,
        State::Unknown,
        "c",
        None,
        Some(T0),
    )
    .await;
    if !corrupt(&ledger, &bad, "request_headers = 'not json'").await {
        // MemoryLedger rows are typed values: nothing to skip.
        assert_eq!(list_ids(&ledger, q()).await, ["good", "bad", "due-bad"]);
        return;
    }
    assert!(corrupt(&ledger, &due, "request_headers = 'not json'").await);
    // The claim quarantines `due-bad`; `bad` is not due, so it stays unquarantined.
    assert!(must(ledger.claim_due(T0 + 10, 1_000, 10).await, "claim_due").is_empty());

    let page = must(ledger.list(&q()).await, "list");
    assert_eq!(ids(&page.rows), ["good"]);
    assert_eq!(page.rows[0], get(&ledger, &good).await);
    assert_eq!(page.skipped.len(), 1, "{:?}", page.skipped);
    assert_eq!(page.skipped[0].operation_id.as_str(), "bad");
    assert!(
        page.skipped[0].error.contains("request_headers"),
        "{:?}",
        page.skipped
    );

    let with = must(ledger.list(&q().include_quarantined(true)).await, "list");
    let mut skipped: Vec<&str> = with
        .skipped
        .iter()
        .map(|s| s.operation_id.as_str())
        .collect();
    skipped.sort_unstable();
    assert_eq!(skipped, ["bad", "due-bad"]);
    // A skipped row takes its place in a page; the cursor moves past it.
    let first = must(ledger.list(&q().limit(1)).await, "list");
    assert_eq!(ids(&first.rows), ["good"]);
    let Some(next) = first.next else {
        panic!("a second page is due")
    };
    let second = must(ledger.list(&q().limit(1).after(next)).await, "list");
    assert!(second.rows.is_empty(), "{:?}", second.rows);
    assert_eq!(second.skipped.len(), 1);
    assert_eq!(second.next, None);
    let counts = must(
        ledger.count_by_state(&TenantScope::AllTenants).await,
        "count_by_state",
    );
    assert_eq!(counts.get(State::ManualReview), Some(2));
    assert_eq!(
        counts.get(State::Unknown),
        Some(0),
        "a quarantined row is in no state's count"
    );
    assert_eq!(counts.quarantined(), 1, "it is counted apart");
}

// ── vendor callbacks ────────────────────────────────────────────────────────────────────────────

/// The delivery of event `event_id` (vendor `stripe`) matched to `r`.
fn delivery(r: &OperationRecord, event_id: &str) -> CallbackDelivery {
    CallbackDelivery {
        vendor: "stripe".to_owned(),
        event_id: event_id.to_owned(),
        event_type: "payment_intent.succeeded".to_owned(),
        tenant: r.tenant.clone(),
        operation_id: r.operation_id.clone(),
        received_at_ms: T0 + 5,
    }
}

/// The update a `succeeded` callback makes of `r`: `SUCCEEDED` with the vendor's reference,
/// logged as a `callback` entry carrying the evidence.
fn succeeded_by_callback(r: &OperationRecord) -> Update {
    let evidence = Evidence::Succeeded {
        remote_ref: Some("pi_1".to_owned()),
    };
    let changes = RawChanges {
        last_result: Some(State::Succeeded),
        remote_ref: Some("pi_1".to_owned()),
        next_check_ms: None,
        lease_until_ms: None,
        ..keep(r, State::Succeeded, T0 + 5)
    };
    update_with(
        r,
        changes,
        NewEvidence {
            generation: r.generation,
            from_state: Some(r.state),
            to_state: Some(State::Succeeded),
            evidence: Some(evidence),
            note: Some("stripe event evt_1".to_owned()),
            ..evidence_entry("callback", T0 + 5)
        },
    )
}

fn count_kind(log: &[EvidenceEntry], kind: &str) -> usize {
    log.iter().filter(|e| e.entry.kind == kind).count()
}

/// Checks one event applied twice: one state change, one evidence entry, and the second
/// delivery (with an update computed from the moved row) is a duplicate that changes nothing.
pub async fn callback_applies_once_and_a_redelivery_is_a_duplicate<L: Ledger>(ledger: L) {
    let r = put(&ledger, "op-cb-1", State::Unknown, Some(T0), None).await;
    let first = must(
        ledger
            .apply_callback(
                delivery(&r, "evt_1"),
                CallbackEffect::Apply(succeeded_by_callback(&r)),
            )
            .await,
        "apply_callback",
    );
    let CallbackApplied::Applied(moved) = first else {
        panic!("first delivery must apply, got {first:?}");
    };
    assert_eq!(moved.state, State::Succeeded);
    assert_eq!(moved.version, r.version + 1);
    assert_eq!(moved.remote_ref.as_deref(), Some("pi_1"));
    assert_eq!(get(&ledger, &r).await, moved);

    // The redelivery, decided on the moved row (a legal update): nothing happens.
    let again = must(
        ledger
            .apply_callback(
                delivery(&moved, "evt_1"),
                CallbackEffect::Apply(succeeded_by_callback(&moved)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(again, CallbackApplied::Duplicate);
    let appended = must(
        ledger
            .apply_callback(
                delivery(&moved, "evt_1"),
                CallbackEffect::Append(evidence_entry("late_evidence", T0 + 6)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(appended, CallbackApplied::Duplicate);
    assert_eq!(get(&ledger, &r).await, moved, "a duplicate changes nothing");
    let log = log(&ledger, &r).await;
    assert_eq!(count_kind(&log, "callback"), 1, "{:?}", kinds(&log));
    assert_eq!(count_kind(&log, "late_evidence"), 0);
    let entry = &log.last().expect("entry").entry;
    assert_eq!(
        entry.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("pi_1".to_owned())
        })
    );
    // The same event id from another vendor is another event.
    let other_vendor = CallbackDelivery {
        vendor: "adyen".to_owned(),
        ..delivery(&moved, "evt_1")
    };
    let other = must(
        ledger
            .apply_callback(
                other_vendor,
                CallbackEffect::Append(evidence_entry("late_evidence", T0 + 7)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(other, CallbackApplied::Appended);
}

/// Checks that a compare-and-swap that fails inside a callback stores nothing, not even the
/// dedupe record: the caller reads again and the retry applies.
pub async fn callback_with_a_stale_update_stores_nothing_and_is_retried<L: Ledger>(ledger: L) {
    let r = put(&ledger, "op-cb-stale", State::Unknown, Some(T0), None).await;
    // Someone else moves the row first.
    let moved = apply_ok(
        &ledger,
        update_of(&r, keep(&r, State::Processing, T0 + 1), "lookup"),
    )
    .await;
    let before = log(&ledger, &r).await;
    let stale = must(
        ledger
            .apply_callback(
                delivery(&r, "evt_stale"),
                CallbackEffect::Apply(succeeded_by_callback(&r)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(stale, CallbackApplied::Stale);
    assert_eq!(get(&ledger, &r).await, moved, "nothing changed");
    assert_eq!(log(&ledger, &r).await, before, "no evidence");
    // Read again, decide again: the event was not recorded, so it applies now.
    let fresh = get(&ledger, &r).await;
    let retried = must(
        ledger
            .apply_callback(
                delivery(&fresh, "evt_stale"),
                CallbackEffect::Apply(succeeded_by_callback(&fresh)),
            )
            .await,
        "apply_callback",
    );
    assert!(
        matches!(&retried, CallbackApplied::Applied(row) if row.state == State::Succeeded),
        "{retried:?}"
    );
    assert_eq!(count_kind(&log(&ledger, &r).await, "callback"), 1);
}

/// Checks that an event that cannot move its operation is appended as late evidence, once, and
/// leaves the row as it was.
pub async fn callback_appends_late_evidence_once<L: Ledger>(ledger: L) {
    let r = put(&ledger, "op-cb-late", State::Succeeded, None, None).await;
    let entry = NewEvidence {
        generation: r.generation,
        from_state: Some(State::Succeeded),
        to_state: Some(State::Succeeded),
        evidence: Some(Evidence::processing()),
        ..evidence_entry("late_evidence", T0 + 5)
    };
    for expected in [CallbackApplied::Appended, CallbackApplied::Duplicate] {
        let got = must(
            ledger
                .apply_callback(
                    delivery(&r, "evt_late"),
                    CallbackEffect::Append(entry.clone()),
                )
                .await,
            "apply_callback",
        );
        assert_eq!(got, expected);
    }
    let after = get(&ledger, &r).await;
    assert_eq!(
        after.version,
        r.version + 1,
        "late evidence advances the version once (the redelivery changes nothing)"
    );
    assert_eq!(
        OperationRecord {
            version: r.version,
            ..after
        },
        r,
        "late evidence changes no other column"
    );
    let log = log(&ledger, &r).await;
    assert_eq!(count_kind(&log, "late_evidence"), 1, "{:?}", kinds(&log));
    assert_eq!(log.last().expect("entry").entry.evidence, entry.evidence);
}

/// Checks that a delivery matched to an operation that does not exist (or exists only in
/// another tenant) stores nothing, so the event can still be quarantined.
pub async fn callback_for_an_unknown_operation_stores_nothing<L: Ledger>(ledger: L) {
    let r = put(&ledger, "op-cb-real", State::Unknown, Some(T0), None).await;
    let mut ghost = r.clone();
    ghost.tenant = Tenant::new("tenant-b");
    for effect in [
        CallbackEffect::Apply(succeeded_by_callback(&ghost)),
        CallbackEffect::Append(evidence_entry("late_evidence", T0 + 5)),
    ] {
        let got = must(
            ledger
                .apply_callback(delivery(&ghost, "evt_ghost"), effect)
                .await,
            "apply_callback",
        );
        assert_eq!(got, CallbackApplied::NoOperation);
    }
    assert_eq!(
        get(&ledger, &r).await,
        r,
        "the other tenant's row is untouched"
    );
    assert_eq!(log(&ledger, &r).await.len(), 2, "created and setup only");
    let stored = must(
        ledger
            .quarantine_callback(quarantined("evt_ghost", "no operation"))
            .await,
        "quarantine_callback",
    );
    assert_eq!(stored, CallbackQuarantined::Stored);
}

/// Checks that an update naming another operation than its delivery is refused before anything
/// is written.
pub async fn callback_update_for_another_operation_is_refused<L: Ledger>(ledger: L) {
    let a = put(&ledger, "op-cb-a", State::Unknown, Some(T0), None).await;
    let b = put(&ledger, "op-cb-b", State::Unknown, Some(T0), None).await;
    let refused = ledger
        .apply_callback(
            delivery(&a, "evt_mixed"),
            CallbackEffect::Apply(succeeded_by_callback(&b)),
        )
        .await;
    assert!(
        matches!(refused, Err(LedgerError::Config(_))),
        "{refused:?}"
    );
    assert_eq!(get(&ledger, &a).await, a);
    assert_eq!(get(&ledger, &b).await, b);
    // Nothing was recorded: the event still applies.
    let applied = must(
        ledger
            .apply_callback(
                delivery(&a, "evt_mixed"),
                CallbackEffect::Apply(succeeded_by_callback(&a)),
            )
            .await,
        "apply_callback",
    );
    assert!(
        matches!(applied, CallbackApplied::Applied(_)),
        "{applied:?}"
    );
}

fn quarantined(event_id: &str, reason: &str) -> QuarantinedCallback {
    QuarantinedCallback {
        vendor: "stripe".to_owned(),
        event_id: event_id.to_owned(),
        event_type: "payment_intent.succeeded".to_owned(),
        tenant: Some(Tenant::new("tenant-a")),
        match_by: Some("remote_ref".to_owned()),
        match_value: Some("pi_unknown".to_owned()),
        reason: reason.to_owned(),
        evidence: Some(Evidence::Succeeded {
            remote_ref: Some("pi_unknown".to_owned()),
        }),
        received_at_ms: T0 + 9,
    }
}

/// Checks the callback quarantine: stored once per event (a redelivery is a duplicate), every
/// field kept, listed oldest first within the limit, and sharing the dedupe table with applied
/// events.
pub async fn callbacks_are_quarantined_once_and_listed_in_order<L: Ledger>(ledger: L) {
    let first = quarantined("evt_q1", "no operation");
    let second = QuarantinedCallback {
        vendor: "paypal".to_owned(),
        tenant: None,
        match_by: None,
        match_value: None,
        evidence: None,
        ..quarantined("evt_q2", "unknown account")
    };
    for (event, expected) in [
        (first.clone(), CallbackQuarantined::Stored),
        (second.clone(), CallbackQuarantined::Stored),
        (first.clone(), CallbackQuarantined::Duplicate),
    ] {
        let got = must(
            ledger.quarantine_callback(event).await,
            "quarantine_callback",
        );
        assert_eq!(got, expected);
    }
    let listed = must(
        ledger
            .quarantined_callbacks(&super::TenantScope::AllTenants, 10)
            .await,
        "quarantined_callbacks",
    );
    assert_eq!(listed, vec![first.clone(), second]);
    let one = must(
        ledger
            .quarantined_callbacks(&super::TenantScope::AllTenants, 1)
            .await,
        "quarantined_callbacks",
    );
    assert_eq!(one, vec![first]);
    // A quarantined event is recorded: a later delivery of it that matches is a duplicate.
    let r = put(&ledger, "op-cb-q", State::Unknown, Some(T0), None).await;
    let got = must(
        ledger
            .apply_callback(
                delivery(&r, "evt_q1"),
                CallbackEffect::Apply(succeeded_by_callback(&r)),
            )
            .await,
        "apply_callback",
    );
    assert_eq!(got, CallbackApplied::Duplicate);
    assert_eq!(get(&ledger, &r).await, r);
}

/// Checks the lookups a callback is matched by: by remote reference and by idempotency key,
/// only ever within the given tenant.
pub async fn find_by_remote_ref_and_idempotency_key_stay_in_their_tenant<L: Ledger>(ledger: L) {
    let with_ref = |r: &OperationRecord| RawChanges {
        remote_ref: Some("W731".to_owned()),
        ..keep(r, State::Succeeded, T0 + 1)
    };
    let a = create(
        &ledger,
        new_operation("tenant-a", "op-ref-a", "intent-ref-a"),
    )
    .await;
    let a = apply_ok(&ledger, update_of(&a, with_ref(&a), "setup")).await;
    let b = create(
        &ledger,
        new_operation("tenant-b", "op-ref-b", "intent-ref-b"),
    )
    .await;
    let b = apply_ok(&ledger, update_of(&b, with_ref(&b), "setup")).await;
    let _other = create(
        &ledger,
        new_operation("tenant-a", "op-ref-c", "intent-ref-c"),
    )
    .await;

    let found = must(
        ledger.find_by_remote_ref(&a.tenant, "W731").await,
        "find_by_remote_ref",
    );
    assert_eq!(found.as_ref(), Some(&a));
    let found = must(
        ledger.find_by_remote_ref(&b.tenant, "W731").await,
        "find_by_remote_ref",
    );
    assert_eq!(found.as_ref(), Some(&b));
    let none = must(
        ledger
            .find_by_remote_ref(&Tenant::new("tenant-c"), "W731")
            .await,
        "find_by_remote_ref",
    );
    assert_eq!(none, None, "never another tenant's");
    let none = must(
        ledger.find_by_remote_ref(&a.tenant, "W000").await,
        "find_by_remote_ref",
    );
    assert_eq!(none, None);

    let key = a.idempotency_key.as_str();
    let found = must(
        ledger.find_by_idempotency_key(&a.tenant, key).await,
        "find_by_idempotency_key",
    );
    assert_eq!(found.as_ref(), Some(&a));
    let none = must(
        ledger.find_by_idempotency_key(&b.tenant, key).await,
        "find_by_idempotency_key",
    );
    assert_eq!(none, None, "a key is looked up in its tenant only");
}

/// Checks that concurrent deliveries of one event (several application instances receiving it
/// at once, each deciding on the same read) make exactly one state change and one evidence
/// entry; the others are duplicates, or stale and then duplicates when they read again and
/// retry, as the endpoint does.
pub async fn concurrent_deliveries_of_one_event_change_the_state_once<L: Ledger>(ledger: L) {
    const DELIVERIES: usize = 8;
    let r = put(&ledger, "op-cb-race", State::Unknown, Some(T0), None).await;
    let ledger = Arc::new(ledger);
    let barrier = Arc::new(tokio::sync::Barrier::new(DELIVERIES));
    let mut tasks = Vec::new();
    for _ in 0..DELIVERIES {
        let (ledger, barrier, read) = (ledger.clone(), barrier.clone(), r.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut read = read;
            loop {
                let got = must(
                    ledger
                        .apply_callback(
                            delivery(&read, "evt_race"),
                            CallbackEffect::Apply(succeeded_by_callback(&read)),
                        )
                        .await,
                    "apply_callback",
                );
                match got {
                    CallbackApplied::Stale => {
                        read = must(ledger.get(&read.tenant, &read.operation_id).await, "get")
                            .expect("row");
                    }
                    other => break other,
                }
            }
        }));
    }
    let mut applied = 0;
    for task in tasks {
        match task.await.expect("delivery task") {
            CallbackApplied::Applied(_) => applied += 1,
            CallbackApplied::Duplicate => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(applied, 1, "exactly one delivery applies");
    let row = get(&*ledger, &r).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.version, r.version + 1, "one state change");
    assert_eq!(count_kind(&log(&*ledger, &r).await, "callback"), 1);
}

// ── retention ───────────────────────────────────────────────────────────────────────────────────

/// A finished operation of `tenant`/`id` under `contract`: created at [`T0`], then moved to
/// `state` at `finished_ms` with a stored response, a reason, a remote reference and an
/// evidence entry carrying an observation and a note.
async fn finished<L: Ledger>(
    ledger: &L,
    tenant: &str,
    id: &str,
    contract: &str,
    state: State,
    finished_ms: i64,
) -> OperationRecord {
    let mut new = new_operation(tenant, id, &format!("intent-{id}"));
    new.contract.name = contract.into();
    let r = create(ledger, new).await;
    let changes = RawChanges {
        last_result: Some(state),
        remote_ref: Some(format!("ref-{id}")),
        reason: Some("vendor said: card holder jane@example.com".to_owned()),
        response: Some(StoredResponse {
            status: 201,
            headers: [("content-type", "application/json")].into_iter().collect(),
            body: Bytes::from_static(b"{\"id\":\"W731\",\"email\":\"jane@example.com\"}"),
        }),
        ..keep(&r, state, finished_ms)
    };
    let evidence = NewEvidence {
        generation: r.generation,
        from_state: Some(r.state),
        to_state: Some(state),
        evidence: Some(Evidence::Succeeded {
            remote_ref: Some(format!("ref-{id}")),
        }),
        note: Some("lookup answer: {\"email\":\"jane@example.com\"}".to_owned()),
        ..evidence_entry("lookup", finished_ms)
    };
    apply_ok(ledger, update_with(&r, changes, evidence)).await
}

fn purge_batch(
    stage: super::PurgeStage,
    contract: &str,
    before_ms: i64,
    limit: u32,
) -> super::PurgeBatch {
    super::PurgeBatch {
        stage,
        scope: super::PurgeScope::FinishedBefore {
            contract: contract.to_owned(),
            before_ms,
        },
        limit,
        dry_run: false,
        now_ms: T0 + 1_000_000,
    }
}

async fn purge<L: Ledger>(ledger: &L, batch: super::PurgeBatch) -> super::Purged {
    must(ledger.purge(batch).await, "purge")
}

/// The details stage: a dry run counts and changes nothing; batches slim the finished rows of
/// the contract that finished before the cut-off, oldest first, within their limit, and keep
/// their identity, state, remote reference, times, version and the shape of their evidence
/// log; a slimmed row is not slimmed again. Non-terminal rows (however old), rows that
/// finished after the cut-off and rows of another contract are untouched.
pub async fn purge_details_slims_finished_rows_and_keeps_their_identity<L: Ledger>(ledger: L) {
    use super::PurgeStage::Details;
    let old_ok = finished(
        &ledger,
        "tenant-a",
        "op-r1",
        "stripe-v1",
        State::Succeeded,
        T0 + 10,
    )
    .await;
    let old_no = finished(
        &ledger,
        "tenant-b",
        "op-r2",
        "stripe-v1",
        State::Rejected,
        T0 + 20,
    )
    .await;
    let recent = finished(
        &ledger,
        "tenant-a",
        "op-r3",
        "stripe-v1",
        State::Succeeded,
        T0 + 500,
    )
    .await;
    let other = finished(
        &ledger,
        "tenant-a",
        "op-r4",
        "adyen",
        State::Succeeded,
        T0 + 10,
    )
    .await;
    let mut open = Vec::new();
    for (i, state) in [
        State::Prepared,
        State::InFlight,
        State::Unknown,
        State::Processing,
        State::RetryReady,
        State::ManualReview,
    ]
    .into_iter()
    .enumerate()
    {
        open.push(put(&ledger, &format!("op-open-{i}"), state, Some(T0), None).await);
    }
    assert_eq!(
        must(ledger.finished_contracts().await, "finished_contracts"),
        vec!["adyen".to_owned(), "stripe-v1".to_owned()]
    );

    let cut = T0 + 100;
    let dry = purge(
        &ledger,
        super::PurgeBatch {
            dry_run: true,
            ..purge_batch(Details, "stripe-v1", cut, 1)
        },
    )
    .await;
    assert_eq!(
        dry.rows, 2,
        "a dry run counts every matching row, whatever the limit"
    );
    assert!(
        dry.bytes > 200,
        "the request, response, reason and evidence are counted: {dry:?}"
    );
    assert_eq!(
        get(&ledger, &old_ok).await,
        old_ok,
        "a dry run changes nothing"
    );

    let first = purge(&ledger, purge_batch(Details, "stripe-v1", cut, 1)).await;
    assert_eq!(first.rows, 1);
    let slim = get(&ledger, &old_ok).await;
    assert_eq!(
        slim.details_removed_ms,
        Some(T0 + 1_000_000),
        "the oldest finish goes first"
    );
    assert_eq!(get(&ledger, &old_no).await, old_no, "the limit holds");
    let second = purge(&ledger, purge_batch(Details, "stripe-v1", cut, 10)).await;
    assert_eq!(second.rows, 1);
    assert_eq!(
        first.bytes + second.bytes,
        dry.bytes,
        "a dry run counts what a run drops"
    );
    assert_eq!(
        purge(&ledger, purge_batch(Details, "stripe-v1", cut, 10))
            .await
            .rows,
        0,
        "a slimmed row is not slimmed again"
    );

    for before in [&old_ok, &old_no] {
        let after = get(&ledger, before).await;
        let expected = OperationRecord {
            request: Arc::new(FrozenRequest {
                method: before.request.method.clone(),
                url: before.request.url.clone(),
                headers: FrozenHeaders::new(),
                body: Bytes::new(),
            }),
            response: None,
            reason: None,
            details_removed_ms: Some(T0 + 1_000_000),
            ..before.clone()
        };
        assert_eq!(
            after, expected,
            "identity, state, ref, times and version kept"
        );
        let entries = log(&ledger, &after).await;
        assert_eq!(kinds(&entries), vec!["created", "lookup"]);
        for e in &entries {
            assert_eq!(e.entry.evidence, None, "evidence details dropped");
            assert_eq!(e.entry.note, None, "notes dropped");
        }
        assert_eq!(entries[1].entry.to_state, Some(before.state), "states kept");
    }
    assert_eq!(
        get(&ledger, &recent).await,
        recent,
        "finished after the cut-off: kept"
    );
    assert_eq!(get(&ledger, &other).await, other, "another contract: kept");
    for r in &open {
        assert_eq!(&get(&ledger, r).await, r, "{:?} is never purged", r.state);
    }
}

/// The identity stage deletes finished rows of the contract that finished before the cut-off
/// (slimmed or not) with their evidence, oldest first within the limit; afterwards the intent is
/// free again. Non-terminal rows older than any cut-off survive; the scopes of the right to
/// erasure take one tenant's finished rows, or one finished row, whatever their age.
pub async fn purge_identity_deletes_finished_rows_and_only_them<L: Ledger>(ledger: L) {
    use super::PurgeStage::{Details, Identity};
    let a = finished(
        &ledger,
        "tenant-a",
        "op-i1",
        "stripe-v1",
        State::Succeeded,
        T0 + 10,
    )
    .await;
    let b = finished(
        &ledger,
        "tenant-a",
        "op-i2",
        "stripe-v1",
        State::Rejected,
        T0 + 20,
    )
    .await;
    let young = finished(
        &ledger,
        "tenant-a",
        "op-i3",
        "stripe-v1",
        State::Succeeded,
        T0 + 900,
    )
    .await;
    let stuck = put(&ledger, "op-i4", State::ManualReview, None, None).await;
    let unknown = put(&ledger, "op-i5", State::Unknown, Some(T0), None).await;
    purge(&ledger, purge_batch(Details, "stripe-v1", T0 + 15, 10)).await;

    let dry = purge(
        &ledger,
        super::PurgeBatch {
            dry_run: true,
            ..purge_batch(Identity, "stripe-v1", T0 + 100, 10)
        },
    )
    .await;
    assert_eq!(dry.rows, 2);
    let first = purge(&ledger, purge_batch(Identity, "stripe-v1", T0 + 100, 1)).await;
    assert_eq!(first.rows, 1);
    assert!(
        must(ledger.get(&a.tenant, &a.operation_id).await, "get").is_none(),
        "oldest first"
    );
    assert!(
        log(&ledger, &a).await.is_empty(),
        "its evidence went with it"
    );
    assert_eq!(get(&ledger, &b).await, b);
    assert_eq!(
        purge(&ledger, purge_batch(Identity, "stripe-v1", T0 + 100, 10))
            .await
            .rows,
        1
    );
    assert!(must(ledger.get(&b.tenant, &b.operation_id).await, "get").is_none());
    assert_eq!(
        purge(&ledger, purge_batch(Identity, "stripe-v1", T0 + 100, 10))
            .await
            .rows,
        0
    );
    assert_eq!(get(&ledger, &young).await, young);
    assert_eq!(
        get(&ledger, &stuck).await,
        stuck,
        "MANUAL_REVIEW is never purged"
    );
    assert_eq!(
        get(&ledger, &unknown).await,
        unknown,
        "UNKNOWN is never purged"
    );

    // The intent is free again: a repeat now is a new operation (what the identity clock
    // must be long enough to prevent).
    let again = new_operation("tenant-a", "op-i1", "intent-op-i1");
    assert!(matches!(
        must(ledger.create_or_get(again).await, "create_or_get"),
        Created::New(_)
    ));

    // Erasure scopes: one tenant's finished rows, whatever their age; one finished row.
    let other_tenant = finished(
        &ledger,
        "tenant-z",
        "op-i6",
        "stripe-v1",
        State::Succeeded,
        T0 + 999_999,
    )
    .await;
    let erase_one = super::PurgeBatch {
        scope: super::PurgeScope::Operation {
            tenant: young.tenant.clone(),
            operation_id: young.operation_id.clone(),
        },
        ..purge_batch(Details, "", 0, 1)
    };
    assert_eq!(purge(&ledger, erase_one).await.rows, 1);
    assert!(get(&ledger, &young).await.details_removed_ms.is_some());
    let erase_stuck = super::PurgeBatch {
        scope: super::PurgeScope::Operation {
            tenant: stuck.tenant.clone(),
            operation_id: stuck.operation_id.clone(),
        },
        ..purge_batch(Identity, "", 0, 1)
    };
    assert_eq!(
        purge(&ledger, erase_stuck).await.rows,
        0,
        "never a non-terminal row"
    );
    let erase_tenant = super::PurgeBatch {
        scope: super::PurgeScope::Tenant(Tenant::new("tenant-a")),
        ..purge_batch(Identity, "", 0, 100)
    };
    assert_eq!(
        purge(&ledger, erase_tenant).await.rows,
        1,
        "young only: the rest is open"
    );
    assert!(must(ledger.get(&young.tenant, &young.operation_id).await, "get").is_none());
    assert_eq!(get(&ledger, &stuck).await, stuck);
    assert_eq!(
        get(&ledger, &other_tenant).await,
        other_tenant,
        "another tenant: kept"
    );
}

/// Callback records have their own retention: dedupe records and quarantined events are
/// deleted by age (oldest first, within the limit) or by tenant; a dry run counts; once a
/// dedupe record is gone, a redelivery of its event is new again.
pub async fn purge_callbacks_by_age_and_by_tenant<L: Ledger>(ledger: L) {
    use super::{CallbackPurge, CallbackRecords, CallbackScope};
    let r = put(&ledger, "op-c1", State::Unknown, Some(T0), None).await;
    for (event, at) in [("evt_old", T0 + 1), ("evt_new", T0 + 1_000)] {
        let d = CallbackDelivery {
            received_at_ms: at,
            ..delivery(&r, event)
        };
        let entry = evidence_entry("late_evidence", at);
        let got = must(
            ledger
                .apply_callback(d, CallbackEffect::Append(entry))
                .await,
            "apply_callback",
        );
        assert_eq!(got, CallbackApplied::Appended);
    }
    for (event, at, tenant) in [
        ("evt_q1", T0 + 1, "tenant-a"),
        ("evt_q2", T0 + 2, "tenant-b"),
    ] {
        let q = QuarantinedCallback {
            received_at_ms: at,
            tenant: Some(Tenant::new(tenant)),
            ..quarantined(event, "no operation")
        };
        must(ledger.quarantine_callback(q).await, "quarantine_callback");
    }
    let batch = |records, scope, limit, dry_run| CallbackPurge {
        records,
        scope,
        limit,
        dry_run,
    };
    let purge_cb =
        |b: CallbackPurge| async { must(ledger.purge_callbacks(b).await, "purge_callbacks") };
    let dry = purge_cb(batch(
        CallbackRecords::Deliveries,
        CallbackScope::ReceivedBefore(T0 + 500),
        1,
        true,
    ))
    .await;
    // evt_old, plus the two quarantined events' dedupe records (received at T0+1 and T0+2).
    assert_eq!(dry.rows, 3);
    assert!(dry.bytes > 0);
    let gone = purge_cb(batch(
        CallbackRecords::Deliveries,
        CallbackScope::ReceivedBefore(T0 + 500),
        2,
        false,
    ))
    .await;
    assert_eq!(gone.rows, 2, "the limit holds");
    let rest = purge_cb(batch(
        CallbackRecords::Deliveries,
        CallbackScope::ReceivedBefore(T0 + 500),
        10,
        false,
    ))
    .await;
    assert_eq!(rest.rows, 1);
    assert_eq!(gone.bytes + rest.bytes, dry.bytes);
    // evt_new's record is kept: its redelivery is still a duplicate; evt_old's is new again.
    let entry = evidence_entry("late_evidence", T0 + 2_000);
    assert_eq!(
        must(
            ledger
                .apply_callback(
                    delivery(&r, "evt_new"),
                    CallbackEffect::Append(entry.clone())
                )
                .await,
            "apply_callback"
        ),
        CallbackApplied::Duplicate
    );
    assert_eq!(
        must(
            ledger
                .apply_callback(delivery(&r, "evt_old"), CallbackEffect::Append(entry))
                .await,
            "apply_callback"
        ),
        CallbackApplied::Appended
    );

    let by_tenant = purge_cb(batch(
        CallbackRecords::Quarantine,
        CallbackScope::Tenant(Tenant::new("tenant-b")),
        10,
        false,
    ))
    .await;
    assert_eq!(by_tenant.rows, 1);
    let left = must(
        ledger
            .quarantined_callbacks(&super::TenantScope::AllTenants, 10)
            .await,
        "quarantined_callbacks",
    );
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].event_id, "evt_q1");
    let by_age = purge_cb(batch(
        CallbackRecords::Quarantine,
        CallbackScope::ReceivedBefore(T0 + 2),
        10,
        false,
    ))
    .await;
    assert_eq!(by_age.rows, 1);
    assert!(
        must(
            ledger
                .quarantined_callbacks(&super::TenantScope::AllTenants, 10)
                .await,
            "quarantined_callbacks"
        )
        .is_empty()
    );
}

/// Several workers purging the same stage at once each take different rows: every finished
/// row is deleted exactly once, no batch fails, and the rows counted add up.
pub async fn concurrent_purges_delete_each_row_once<L: Ledger>(ledger: L) {
    use super::PurgeStage::Identity;
    for i in 0..40 {
        finished(
            &ledger,
            "tenant-a",
            &format!("op-p{i:02}"),
            "stripe-v1",
            State::Succeeded,
            T0 + i,
        )
        .await;
    }
    let ledger = Arc::new(ledger);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = 0;
            loop {
                let done = must(
                    ledger
                        .purge(purge_batch(Identity, "stripe-v1", T0 + 1_000, 5))
                        .await,
                    "concurrent purge",
                );
                mine += done.rows;
                if done.rows == 0 {
                    return mine;
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("purger");
    }
    assert_eq!(total, 40, "each row deleted once, by one worker");
    assert!(must(ledger.finished_contracts().await, "finished_contracts").is_empty());
}
