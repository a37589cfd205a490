//! For ledger backend implementers: the row-writing types a [`Ledger`](super::Ledger) receives.
//!
//! An application never needs this module. It reads operations and their evidence through
//! [`Ledger`](super::Ledger) and writes them only through the layer, the recoverer and the
//! reviews, which drive every change through the [state machine](crate::state). The types here
//! are what those pass to [`Ledger::apply`](super::Ledger::apply) and its siblings:
//!
//! - [`Update`]: a compare-and-swap (the expected state, generation and version of the row),
//!   the new values of the mutable columns ([`Changes`]) and the evidence entry appended in the
//!   same transaction ([`NewEvidence`]).
//!
//! A backend outside this crate *reads* them, through their accessors, and writes what they say.
//! They cannot be built field by field outside this crate: the only constructors,
//! [`OperationRecord::update_on`] and [`NewOperation::first_update_on`], run the state machine,
//! so an `Update` always describes a transition the state machine allows from the row it was
//! computed from (and the store's compare-and-swap refuses it if that row has moved since).
//!
//! A backend's conformance to the contract of [`Ledger`](super::Ledger) is checked by the suite
//! in `ledger::conformance` (feature `test-util`), which every bundled backend runs.

use std::borrow::Cow;

use crate::evidence::Evidence;
use crate::operation::{AttemptId, Generation, OperationId, Tenant};
use crate::state::{Event, Refused, State, Tick, Transition};

use super::{LedgerError, NewOperation, OperationRecord, StoredResponse};

/// The new values of the mutable columns, written by [`Ledger::apply`](super::Ledger::apply)
/// when its precondition holds. `version` is always incremented by the store.
///
/// Read-only outside this crate: see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct Changes {
    pub(crate) state: State,
    pub(crate) last_result: Option<State>,
    pub(crate) generation: Generation,
    pub(crate) attempts_used: u32,
    pub(crate) queries_used: u32,
    pub(crate) may_have_applied: bool,
    pub(crate) reset_may_have_applied: bool,
    pub(crate) current_attempt: Option<AttemptId>,
    pub(crate) lease_until_ms: Option<i64>,
    pub(crate) next_check_ms: Option<i64>,
    pub(crate) deadline_ms: Option<i64>,
    pub(crate) remote_ref: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) response: Option<StoredResponse>,
    pub(crate) now_ms: i64,
}

impl Changes {
    /// New state.
    pub fn state(&self) -> State {
        self.state
    }

    /// New business result.
    pub fn last_result(&self) -> Option<State> {
        self.last_result
    }

    /// New generation (the old one, or the old one plus one for a claim).
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// New attempts used.
    pub fn attempts_used(&self) -> u32 {
        self.attempts_used
    }

    /// New queries used.
    pub fn queries_used(&self) -> u32 {
        self.queries_used
    }

    /// New "may have applied" value; the store keeps it sticky (`old OR new`) unless
    /// [`reset_may_have_applied`](Self::reset_may_have_applied) is set.
    pub fn may_have_applied(&self) -> bool {
        self.may_have_applied
    }

    /// Whether to clear the sticky fact: write [`may_have_applied`](Self::may_have_applied) as
    /// it is (only a reviewer's confirmed-not-executed decision does this).
    pub fn reset_may_have_applied(&self) -> bool {
        self.reset_may_have_applied
    }

    /// Current attempt.
    pub fn current_attempt(&self) -> Option<AttemptId> {
        self.current_attempt
    }

    /// Lease end (ms since the Unix epoch).
    pub fn lease_until_ms(&self) -> Option<i64> {
        self.lease_until_ms
    }

    /// Next check (ms since the Unix epoch).
    pub fn next_check_ms(&self) -> Option<i64> {
        self.next_check_ms
    }

    /// Deadline (ms since the Unix epoch).
    pub fn deadline_ms(&self) -> Option<i64> {
        self.deadline_ms
    }

    /// Remote reference (already carried over from the row when the transition sets none).
    pub fn remote_ref(&self) -> Option<&str> {
        self.remote_ref.as_deref()
    }

    /// Reason.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Stored response (already carried over from the row when the transition sets none).
    pub fn response(&self) -> Option<&StoredResponse> {
        self.response.as_ref()
    }

    /// Change time (ms since the Unix epoch).
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }
}

/// A conditional update: applied only if the row is at
/// [`expect_state`](Self::expect_state), [`expect_generation`](Self::expect_generation) and
/// [`expect_version`](Self::expect_version), and (for a move to `REJECTED`) only if no attempt
/// may have applied or the rejection is about the operation itself
/// ([`operation_level`](Self::operation_level)).
///
/// Read-only outside this crate: see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    pub(crate) tenant: Tenant,
    pub(crate) operation_id: OperationId,
    pub(crate) expect_state: State,
    pub(crate) expect_generation: Generation,
    pub(crate) expect_version: u64,
    pub(crate) operation_level: bool,
    pub(crate) changes: Changes,
    pub(crate) evidence: NewEvidence,
}

impl Update {
    /// Tenant of the row to change.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Operation id of the row to change.
    pub fn operation_id(&self) -> &OperationId {
        &self.operation_id
    }

    /// Required current state.
    pub fn expect_state(&self) -> State {
        self.expect_state
    }

    /// Required current generation.
    pub fn expect_generation(&self) -> Generation {
        self.expect_generation
    }

    /// Required current version.
    pub fn expect_version(&self) -> u64 {
        self.expect_version
    }

    /// Whether a move to `REJECTED` rests on evidence about the operation (lookup, human): the
    /// store refuses an attempt-level rejection once an attempt may have applied.
    pub fn operation_level(&self) -> bool {
        self.operation_level
    }

    /// The new values.
    pub fn changes(&self) -> &Changes {
        &self.changes
    }

    /// Evidence appended in the same transaction, only if the row changed.
    pub fn evidence(&self) -> &NewEvidence {
        &self.evidence
    }

    /// The new values and the evidence entry, by value.
    pub fn into_parts(self) -> (Changes, NewEvidence) {
        (self.changes, self.evidence)
    }

    /// Whether this compare-and-swap's precondition holds on `row`: the row is at the expected
    /// state, generation and version, and the update does not move to `REJECTED` an operation
    /// an attempt may have applied on attempt-level evidence alone. Every store checks exactly
    /// this before it writes (the SQL stores in their statements).
    pub fn holds_for(&self, row: &OperationRecord) -> bool {
        row.state == self.expect_state
            && row.generation == self.expect_generation
            && row.version == self.expect_version
            // Once any attempt may have applied, only evidence about the operation itself
            // rejects it.
            && !(self.changes.state == State::Rejected
                && row.may_have_applied
                && !self.operation_level)
    }
}

/// An evidence log entry to append (and, inside [`EvidenceEntry`](super::EvidenceEntry), one
/// as stored).
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvidence {
    /// The attempt it concerns, if any.
    pub attempt_id: Option<AttemptId>,
    /// The generation of the writer.
    pub generation: Generation,
    /// What happened: `attempt_registered`, `attempt_result`, `lookup`, `lease_expired`,
    /// `escalated`, `review`, `late_evidence`, ...
    pub kind: Cow<'static, str>,
    /// State before.
    pub from_state: Option<State>,
    /// State after.
    pub to_state: Option<State>,
    /// The classified observation.
    pub evidence: Option<Evidence>,
    /// Free text (never a body or a credential).
    pub note: Option<String>,
    /// Time (ms since epoch).
    pub at_ms: i64,
}

impl OperationRecord {
    /// Writes `c` into this row as a successful compare-and-swap does: the version goes up by
    /// one and "may have applied" stays sticky unless `c` resets it. For backends that keep
    /// rows as values (this changes only this copy, never a ledger).
    pub fn set_changes(&mut self, c: Changes) {
        self.state = c.state;
        self.last_result = c.last_result;
        self.generation = c.generation;
        self.version += 1;
        self.attempts_used = c.attempts_used;
        self.queries_used = c.queries_used;
        self.may_have_applied = if c.reset_may_have_applied {
            c.may_have_applied
        } else {
            self.may_have_applied || c.may_have_applied
        };
        self.current_attempt = c.current_attempt;
        self.lease_until_ms = c.lease_until_ms;
        self.next_check_ms = c.next_check_ms;
        self.deadline_ms = c.deadline_ms;
        self.remote_ref = c.remote_ref;
        self.reason = c.reason;
        self.response = c.response;
        self.updated_ms = c.now_ms;
    }

    /// Runs the state machine (the [pure transition function](crate::state)) for `event` on
    /// this row and builds the conditional update that applies its transition, with `evidence`
    /// appended (its generation and, unless set, its from and to states are filled in).
    ///
    /// `attempt` and `lease_until_ms` name the attempt and its lease when the event grants send
    /// rights; `response` is the vendor's response to keep, if any.
    ///
    /// # Errors
    ///
    /// [`Refused`] when the state machine does not allow `event` in this row's state: no
    /// update exists for it.
    pub fn update_on(
        &self,
        event: &Event,
        clock: Tick,
        attempt: Option<AttemptId>,
        lease_until_ms: Option<i64>,
        response: Option<StoredResponse>,
        evidence: NewEvidence,
    ) -> Result<Update, Refused> {
        let t = crate::state::transition(&self.snapshot(), event, clock)?;
        Ok(self.update_for(
            &t,
            attempt,
            lease_until_ms,
            response,
            evidence,
            clock.now_ms,
        ))
    }

    /// Builds the conditional update that applies `t` to this row, with `evidence` appended.
    /// `t` must come from the state machine for this row.
    pub(crate) fn update_for(
        &self,
        t: &Transition,
        attempt: Option<AttemptId>,
        lease_until_ms: Option<i64>,
        response: Option<StoredResponse>,
        evidence: NewEvidence,
        now_ms: i64,
    ) -> Update {
        self.update_from(
            t.clone(),
            attempt,
            lease_until_ms,
            response,
            evidence,
            now_ms,
        )
    }

    /// [`update_for`](Self::update_for), taking `t`: its reference and reason move into the
    /// update instead of being copied.
    pub(crate) fn update_from(
        &self,
        t: Transition,
        attempt: Option<AttemptId>,
        lease_until_ms: Option<i64>,
        response: Option<StoredResponse>,
        evidence: NewEvidence,
        now_ms: i64,
    ) -> Update {
        build_update(
            Base {
                tenant: &self.tenant,
                operation_id: &self.operation_id,
                state: self.state,
                generation: self.generation,
                version: self.version,
                last_result: self.last_result,
                current_attempt: self.current_attempt,
                lease_until_ms: self.lease_until_ms,
                remote_ref: self.remote_ref.as_ref(),
                reason: self.reason.as_ref(),
                response: self.response.as_ref(),
            },
            t,
            attempt,
            lease_until_ms,
            response,
            evidence,
            now_ms,
        )
    }
}

impl NewOperation {
    /// [`OperationRecord::update_on`] for the fresh row this operation will be (`PREPARED`,
    /// generation 0, version 0), without building that row: the `first` argument of
    /// [`Ledger::create_and_apply`](super::Ledger::create_and_apply).
    ///
    /// # Errors
    ///
    /// [`Refused`] when the state machine does not allow `event` on a `PREPARED` row.
    pub fn first_update_on(
        &self,
        event: &Event,
        clock: Tick,
        attempt: Option<AttemptId>,
        lease_until_ms: Option<i64>,
        evidence: NewEvidence,
    ) -> Result<Update, Refused> {
        let t = crate::state::transition(&self.snapshot(), event, clock)?;
        Ok(self.first_update(&t, attempt, lease_until_ms, evidence, clock.now_ms))
    }

    /// The conditional update that applies `t` to the fresh row of this operation: what
    /// [`OperationRecord::update_for`] gives on [`into_prepared`](Self::into_prepared)'s row.
    /// `t` must come from the state machine for that row.
    pub(crate) fn first_update(
        &self,
        t: &Transition,
        attempt: Option<AttemptId>,
        lease_until_ms: Option<i64>,
        evidence: NewEvidence,
        now_ms: i64,
    ) -> Update {
        build_update(
            Base {
                tenant: &self.tenant,
                operation_id: &self.operation_id,
                state: State::Prepared,
                generation: Generation(0),
                version: 0,
                last_result: None,
                current_attempt: None,
                lease_until_ms: None,
                remote_ref: None,
                reason: None,
                response: None,
            },
            t.clone(),
            attempt,
            lease_until_ms,
            None,
            evidence,
            now_ms,
        )
    }
}

/// The columns a conditional update starts from: a stored row's, or those of the fresh row a
/// new operation will be.
struct Base<'a> {
    tenant: &'a Tenant,
    operation_id: &'a OperationId,
    state: State,
    generation: Generation,
    version: u64,
    last_result: Option<State>,
    current_attempt: Option<AttemptId>,
    lease_until_ms: Option<i64>,
    remote_ref: Option<&'a String>,
    reason: Option<&'a String>,
    response: Option<&'a StoredResponse>,
}

/// The conditional update that applies `t` to `base`, with `evidence` appended: the one
/// construction behind [`OperationRecord::update_for`] and [`NewOperation::first_update`].
fn build_update(
    base: Base<'_>,
    t: Transition,
    attempt: Option<AttemptId>,
    lease_until_ms: Option<i64>,
    response: Option<StoredResponse>,
    mut evidence: NewEvidence,
    now_ms: i64,
) -> Update {
    let generation = if t.bump_generation {
        base.generation.next()
    } else {
        base.generation
    };
    evidence.generation = generation;
    evidence.from_state.get_or_insert(base.state);
    evidence.to_state.get_or_insert(t.to);
    Update {
        tenant: base.tenant.clone(),
        operation_id: base.operation_id.clone(),
        expect_state: base.state,
        expect_generation: base.generation,
        expect_version: base.version,
        operation_level: t.operation_level,
        changes: Changes {
            state: t.to,
            last_result: t.last_result.or(base.last_result),
            generation,
            attempts_used: t.attempts_used,
            queries_used: t.queries_used,
            may_have_applied: t.may_have_applied,
            reset_may_have_applied: t.operation_level && !t.may_have_applied,
            current_attempt: attempt.or(base.current_attempt),
            // A new lease (a claim), or the live one kept (a human's decision: see
            // `Transition::keep_lease`), or none.
            lease_until_ms: lease_until_ms.or(if t.keep_lease {
                base.lease_until_ms
            } else {
                None
            }),
            next_check_ms: t.next_check_ms,
            deadline_ms: t.deadline_ms,
            remote_ref: t.remote_ref.or_else(|| base.remote_ref.cloned()),
            // A success closes the story: earlier reasons (a lost response) would mislead.
            reason: if t.to == State::Succeeded {
                t.reason
            } else {
                t.reason.or_else(|| base.reason.cloned())
            },
            response: response.or_else(|| base.response.cloned()),
            now_ms,
        },
        evidence,
    }
}

/// Checks that `first` is an update of the fresh row `new` (see
/// [`Ledger::create_and_apply`](super::Ledger::create_and_apply)).
pub(crate) fn check_first_update(new: &NewOperation, first: &Update) -> Result<(), LedgerError> {
    if first.tenant != new.tenant || first.operation_id != new.operation_id {
        return Err(LedgerError::Config(format!(
            "create_and_apply: the first update names operation {} of tenant {:?}, not the new \
             operation {} of tenant {:?}",
            first.operation_id, first.tenant, new.operation_id, new.tenant
        )));
    }
    if first.expect_state != State::Prepared
        || first.expect_generation != Generation(0)
        || first.expect_version != 0
    {
        return Err(LedgerError::Config(format!(
            "create_and_apply: the first update of {} must expect the fresh row (PREPARED, \
             generation 0, version 0)",
            new.operation_id
        )));
    }
    Ok(())
}

/// The row [`Ledger::create_and_apply`](super::Ledger::create_and_apply) stores for `new` and
/// its checked `first` update: the `PREPARED` row with `first`'s changes applied (version 1),
/// and `first`'s evidence entry. For backends that insert the claimed row directly instead of
/// inserting then updating; a fresh row has no sticky fact, so the `REJECTED` guard of
/// [`Ledger::apply`](super::Ledger::apply) cannot refuse it.
pub(crate) fn first_applied(new: NewOperation, first: Update) -> (OperationRecord, NewEvidence) {
    let mut r = new.into_prepared();
    r.set_changes(first.changes);
    (r, first.evidence)
}

/// The entries the stores append on their own (creation, recovery claims, lease sweeps), shared
/// so every backend writes identical evidence.
pub(crate) mod store_entries {
    use std::borrow::Cow;

    use super::{NewEvidence, OperationRecord};
    use crate::operation::Generation;
    use crate::state::State;

    /// Kind of the entry appended when an operation is created.
    pub(crate) const CREATED: &str = "created";
    /// Kind of the entry appended for each row
    /// [`claim_due`](crate::ledger::Ledger::claim_due) claims.
    pub(crate) const RECOVERY_CLAIMED: &str = "recovery_claimed";
    /// Kind of the entry appended for each row
    /// [`sweep_expired`](crate::ledger::Ledger::sweep_expired) moves.
    pub(crate) const LEASE_EXPIRED: &str = "lease_expired";
    /// The reason a swept row carries (the same text as the state machine's `LeaseExpired`).
    pub(crate) const LEASE_EXPIRED_REASON: &str = "attempt lease expired with no recorded result";

    /// The entry for a new operation.
    pub(crate) fn created(now_ms: i64) -> NewEvidence {
        NewEvidence {
            attempt_id: None,
            generation: Generation(0),
            kind: Cow::Borrowed(CREATED),
            from_state: None,
            to_state: Some(State::Prepared),
            evidence: None,
            note: None,
            at_ms: now_ms,
        }
    }

    /// The entry for a row just claimed for recovery (`row` as claimed).
    pub(crate) fn recovery_claimed(row: &OperationRecord, now_ms: i64) -> NewEvidence {
        NewEvidence {
            attempt_id: None,
            generation: row.generation,
            kind: Cow::Borrowed(RECOVERY_CLAIMED),
            from_state: Some(row.state),
            to_state: Some(row.state),
            evidence: None,
            note: None,
            at_ms: now_ms,
        }
    }

    /// The entry for an in-flight row just swept to `UNKNOWN` (`row` as swept).
    pub(crate) fn lease_expired(row: &OperationRecord, now_ms: i64) -> NewEvidence {
        NewEvidence {
            attempt_id: row.current_attempt,
            generation: row.generation,
            kind: Cow::Borrowed(LEASE_EXPIRED),
            from_state: Some(State::InFlight),
            to_state: Some(State::Unknown),
            evidence: None,
            note: None,
            at_ms: now_ms,
        }
    }
}
