//! Fixtures of the suite, public for backends' own tests and the benches: the base time, the
//! fixture operation and evidence, and the raw updates that put a row in any state.

use std::sync::Arc;

use bytes::Bytes;

use crate::budget::BudgetPolicy;
use crate::ledger::backend::Changes;
use crate::ledger::{
    ContractRef, NewEvidence, NewOperation, OperationRecord, StoredResponse, Update,
};
use crate::operation::{
    AttemptId, FrozenRequest, Generation, IdempotencyKey, OperationId, PayloadDigest, PayloadHash,
    Tenant,
};
use crate::state::State;

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

/// The `i`-th of a series of fresh operations of `tenant` (a new UUIDv7 id, intent
/// `intent-{i}`) and its first claim, as the layer writes them: `ClaimSend` at `10 + i`, the
/// send lease until `60_000 + i`, an `attempt_registered` entry. What the pages-per-write
/// audits drive through `Ledger::create_and_apply`.
pub fn claimed_operation(tenant: &str, i: usize) -> (NewOperation, Update) {
    let id = uuid::Uuid::now_v7().to_string();
    let new = new_operation(tenant, &id, &format!("intent-{i}"));
    let now_ms = 10 + i as i64;
    let first = new
        .first_update_on(
            &crate::state::Event::ClaimSend,
            crate::state::Tick {
                now_ms,
                jitter: 0.0,
            },
            Some(crate::AttemptId::generate()),
            Some(60_000 + i as i64),
            evidence_entry("attempt_registered", now_ms),
        )
        .expect("a new operation's first claim");
    (new, first)
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
