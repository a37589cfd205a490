//! Tests of the pure transition function (DESIGN.md "States", "Retries: one owner, one budget";
//! seed 000 "Put Query-First into the Runtime State Machine", "Route by Execution Evidence",
//! "Manual Takeover").
//!
//! Three layers: one unit test per allowed transition, a table over every forbidden
//! (state, event) pair, and property tests that drive random event sequences from `PREPARED`
//! and check the rules after every step. `BudgetPolicy::query_delay` and `validate` are tested
//! at the end, because the machine's scheduling is built on them.
//!
//! The shared fixtures (a row, a fixed clock, one event and one evidence of every kind, the
//! allowed pairs of the diagram) are here; the tests are in one file per topic.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

mod attempt_evidence;
mod budget_policy;
mod forbidden;
mod humans;
mod properties;
mod recovery;
mod sending;

/// A fixed "now" for unit tests (ms since the epoch).
const T0: i64 = 1_700_000_000_000;
/// The default policy's window end for an operation first sent at `T0`.
const DEADLINE: i64 = T0 + 60_000;

/// The row fields the machine reads and writes, owned so a sequence can be replayed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Row {
    state: State,
    may_have_applied: bool,
    attempts_used: u32,
    queries_used: u32,
    deadline_ms: Option<i64>,
}

impl Row {
    /// A freshly recorded operation.
    fn prepared() -> Self {
        Row {
            state: State::Prepared,
            may_have_applied: false,
            attempts_used: 0,
            queries_used: 0,
            deadline_ms: None,
        }
    }

    /// A representative, reachable row for `state` under the default policy: one attempt sent at
    /// `T0`, one query used; everything after the first send may have applied except
    /// `RETRY_READY`, which is only entered on proof of non-execution.
    fn typical(state: State) -> Self {
        match state {
            State::Prepared => Row::prepared(),
            State::RetryReady => Row {
                state,
                may_have_applied: false,
                attempts_used: 1,
                queries_used: 1,
                deadline_ms: Some(DEADLINE),
            },
            State::InFlight => Row {
                state,
                may_have_applied: false,
                attempts_used: 1,
                queries_used: 0,
                deadline_ms: Some(DEADLINE),
            },
            _ => Row {
                state,
                may_have_applied: true,
                attempts_used: 1,
                queries_used: 1,
                deadline_ms: Some(DEADLINE),
            },
        }
    }

    fn may(self, may_have_applied: bool) -> Self {
        Row {
            may_have_applied,
            ..self
        }
    }

    fn attempts(self, attempts_used: u32) -> Self {
        Row {
            attempts_used,
            ..self
        }
    }

    fn queries(self, queries_used: u32) -> Self {
        Row {
            queries_used,
            ..self
        }
    }

    fn deadline(self, deadline_ms: Option<i64>) -> Self {
        Row {
            deadline_ms,
            ..self
        }
    }

    fn snapshot<'a>(&self, policy: &'a BudgetPolicy) -> Snapshot<'a> {
        Snapshot {
            state: self.state,
            may_have_applied: self.may_have_applied,
            attempts_used: self.attempts_used,
            queries_used: self.queries_used,
            deadline_ms: self.deadline_ms,
            policy,
        }
    }

    /// The row after an allowed transition.
    fn after(t: &Transition) -> Self {
        Row {
            state: t.to,
            may_have_applied: t.may_have_applied,
            attempts_used: t.attempts_used,
            queries_used: t.queries_used,
            deadline_ms: t.deadline_ms,
        }
    }
}

fn clock(now_ms: i64) -> Tick {
    Tick {
        now_ms,
        jitter: 0.5,
    }
}

fn run(row: Row, event: &Event, now_ms: i64) -> Result<Transition, Refused> {
    transition(
        &row.snapshot(&BudgetPolicy::default()),
        event,
        clock(now_ms),
    )
}

#[track_caller]
fn ok(row: Row, event: &Event, now_ms: i64) -> Transition {
    match run(row, event, now_ms) {
        Ok(t) => t,
        Err(e) => panic!("{row:?} + {event:?} was refused: {e}"),
    }
}

#[track_caller]
fn refused(row: Row, event: &Event, now_ms: i64) -> Refused {
    match run(row, event, now_ms) {
        Ok(t) => panic!("{row:?} + {event:?} was allowed: {t:?}"),
        Err(e) => e,
    }
}

fn ms(n: u64) -> Option<Duration> {
    Some(Duration::from_millis(n))
}

fn attempt(e: Evidence) -> Event {
    Event::AttemptResult(e)
}

fn lookup(e: Evidence) -> Event {
    Event::LookupResult(e)
}

fn callback(e: Evidence) -> Event {
    Event::Callback(e)
}

fn escalate_ev() -> Event {
    Event::Escalate {
        reason: "operator asked".into(),
    }
}

fn succeeded(r: &str) -> Evidence {
    Evidence::Succeeded {
        remote_ref: Some(r.into()),
    }
}

fn processing(retry_after: Option<Duration>) -> Evidence {
    Evidence::Processing {
        retry_after,
        remote_ref: None,
    }
}

fn rejected() -> Evidence {
    Evidence::Rejected {
        reason: "400 invalid_request".into(),
    }
}

fn not_executed(retry_after: Option<Duration>) -> Evidence {
    Evidence::NotExecuted {
        why: "connection refused".into(),
        retry_after,
    }
}

fn unknown(retry_after: Option<Duration>) -> Evidence {
    Evidence::Unknown {
        why: "timeout".into(),
        retry_after,
    }
}

fn conflict(conflict: ConflictKind) -> Evidence {
    Evidence::Conflict { conflict }
}

/// One value of every evidence class.
fn all_evidence() -> Vec<Evidence> {
    vec![
        succeeded("W731"),
        processing(None),
        rejected(),
        not_executed(None),
        unknown(None),
        conflict(ConflictKind::Mismatch),
        conflict(ConflictKind::InFlight),
    ]
}

/// A representative list of every kind of event.
fn all_events() -> Vec<Event> {
    let mut v = vec![
        Event::ClaimSend,
        Event::LeaseExpired,
        Event::ClaimRecovery,
        escalate_ev(),
        Event::Review(ReviewDecision::ConfirmedSucceeded {
            remote_ref: Some("W731".into()),
        }),
        Event::Review(ReviewDecision::ConfirmedNotExecuted),
        Event::Review(ReviewDecision::KeepPending),
        Event::ReplaySafe {
            reason: "stored first response".into(),
        },
        Event::ReviewClaim {
            reviewer: "alice".into(),
        },
        Event::Withdraw {
            reason: "first send not authorized".into(),
        },
    ];
    v.extend(all_evidence().into_iter().map(attempt));
    v.extend(all_evidence().into_iter().map(lookup));
    v.extend(all_evidence().into_iter().map(callback));
    v
}

/// The allowed (state, event) pairs, written from DESIGN.md's diagram independently of the code.
fn allowed(state: State, event: &Event) -> bool {
    use State::*;
    match event {
        Event::ClaimSend => matches!(state, Prepared | RetryReady),
        Event::AttemptResult(_) | Event::LeaseExpired => state == InFlight,
        Event::ClaimRecovery | Event::LookupResult(_) | Event::Callback(_) => {
            matches!(state, Unknown | Processing)
        }
        Event::Escalate { .. } => {
            matches!(
                state,
                Prepared | InFlight | Processing | Unknown | RetryReady
            )
        }
        // "Keep pending" changes nothing, so it is refused like any no-op.
        Event::Review(ReviewDecision::KeepPending) => false,
        Event::Review(_) => state == ManualReview,
        // Path (b) into RETRY_READY: only from UNKNOWN (never from PROCESSING: never re-create).
        Event::ReplaySafe { .. } => state == Unknown,
        // A reviewer can take over anything that is not terminal.
        Event::ReviewClaim { .. } => !state.is_terminal(),
        // "PREPARED ── never sent ──▶ REJECTED": a first send refused before any byte left.
        Event::Withdraw { .. } => state == Prepared,
    }
}
