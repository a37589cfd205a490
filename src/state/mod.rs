//! The state machine: a pure function from (state, event, budget, clock) to the next state.
//!
//! Two axes are tracked, as seed 000 asks: what we know of the business result (UNKNOWN,
//! PROCESSING, SUCCEEDED, REJECTED) and what the scheduler may do (PREPARED, IN_FLIGHT,
//! RETRY_READY, MANUAL_REVIEW). One [`State`] carries both where they coincide;
//! the last business result is kept on the row while a human holds the operation.
//!
//! ```text
//!               claim (fence+1, attempt registered, lease)
//!  PREPARED ───────────────────────────────▶ IN_FLIGHT ──▶ SUCCEEDED   (authoritative, remote ref kept)
//!                                               │   │ ────▶ REJECTED    (documented: no side effect)
//!                                               │   │ ────▶ PROCESSING  (accepted, not finished)
//!                                               │   └────▶ UNKNOWN     (timeout, reset, 5xx, unclear 2xx)
//!                                               │ lease expired ──▶ UNKNOWN (never back to PREPARED)
//!  UNKNOWN / PROCESSING ── reconciler or callback evidence ─▶ SUCCEEDED | REJECTED | PROCESSING | UNKNOWN (404 stays)
//!  UNKNOWN ── proof of non-execution, budget OK ─▶ RETRY_READY
//!  RETRY_READY ── claim ─▶ IN_FLIGHT (same key, same bytes)
//!  any non-terminal ── budget or window spent, next check past the window ─▶ MANUAL_REVIEW
//!  MANUAL_REVIEW ── a human only ─▶ SUCCEEDED | RETRY_READY (re-approved, fresh budget) | stays
//! ```
//!
//! The function does no I/O. The ledger applies its result with a compare-and-swap on the state
//! version and generation, so a decision made on a stale read is refused by the store.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::budget::BudgetPolicy;
use crate::evidence::{ConflictKind, Evidence};

/// Where an operation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// Recorded, never handed to the network.
    Prepared,
    /// An attempt holds send rights under a lease; its bytes may be on the wire.
    InFlight,
    /// The vendor accepted the write and has not finished it.
    Processing,
    /// The write may or may not have happened; only evidence moves it on.
    Unknown,
    /// Proven safe to resend with the same key and bytes; waiting for a claim.
    RetryReady,
    /// Authoritatively done. Terminal.
    Succeeded,
    /// Authoritatively refused with no side effect. Terminal.
    Rejected,
    /// Evidence ran out; a human holds the operation. Automatic sends are revoked.
    ManualReview,
}

impl State {
    /// All states, in declaration order.
    pub const ALL: [State; 8] = [
        State::Prepared,
        State::InFlight,
        State::Processing,
        State::Unknown,
        State::RetryReady,
        State::Succeeded,
        State::Rejected,
        State::ManualReview,
    ];

    /// The stored name (`IN_FLIGHT`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Prepared => "PREPARED",
            State::InFlight => "IN_FLIGHT",
            State::Processing => "PROCESSING",
            State::Unknown => "UNKNOWN",
            State::RetryReady => "RETRY_READY",
            State::Succeeded => "SUCCEEDED",
            State::Rejected => "REJECTED",
            State::ManualReview => "MANUAL_REVIEW",
        }
    }

    /// `SUCCEEDED` or `REJECTED`: nothing leaves these states.
    pub const fn is_terminal(self) -> bool {
        matches!(self, State::Succeeded | State::Rejected)
    }

    /// States from which a send may be claimed.
    pub const fn may_send(self) -> bool {
        matches!(self, State::Prepared | State::RetryReady)
    }

    /// States the recovery engine verifies with the vendor.
    pub const fn needs_recovery(self) -> bool {
        matches!(self, State::Unknown | State::Processing)
    }

    /// States the recovery engine claims when their next check is due: the ones it verifies,
    /// and `RETRY_READY` (a resend proven safe, waiting to be sent).
    pub const fn is_due_work(self) -> bool {
        matches!(self, State::Unknown | State::Processing | State::RetryReady)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored state name that is not one of ours (a corrupt row).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown operation state {0:?}")]
pub struct ParseStateError(pub String);

impl FromStr for State {
    type Err = ParseStateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| ParseStateError(s.to_owned()))
    }
}

/// What happened to an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A sender asks for send rights (first send or replay).
    ClaimSend,
    /// The in-flight attempt produced evidence (a response or a transport error).
    AttemptResult(Evidence),
    /// The in-flight attempt's lease ran out with no recorded result.
    LeaseExpired,
    /// The recovery engine asks for the right to reconcile (a new generation and a lease).
    ClaimRecovery,
    /// A reconciler answered about the operation itself.
    LookupResult(Evidence),
    /// A verified vendor callback spoke about the operation itself. Read as a lookup answer,
    /// except that no query was made, so none is counted: a vendor that reports "processing"
    /// ten times does not spend the budget the recovery engine needs to verify the write.
    Callback(Evidence),
    /// The engine gives up on automatic recovery (budget, window, no safe path).
    Escalate {
        /// Why, for the reviewer.
        reason: String,
    },
    /// A human decided.
    Review(ReviewDecision),
    /// The result is still unknown, but the contract makes a same-key replay safe inside the
    /// vendor's retention window (path (b) into `RETRY_READY`, seed 000). The recovery engine
    /// checks the contract, the retention window and the write permission before raising it.
    ReplaySafe {
        /// Which guarantee makes the replay safe.
        reason: String,
    },
    /// A reviewer takes the operation over: automatic send eligibility is revoked at once, even
    /// when recovery was about to replay.
    ReviewClaim {
        /// Who claimed it.
        reviewer: String,
    },
    /// The first send was refused before any byte left (the authorizer said no) and the
    /// configuration closes such an operation: `PREPARED` → `REJECTED`, never sent, so nothing
    /// sends it later behind its caller's back.
    Withdraw {
        /// Why, for the caller and the log.
        reason: String,
    },
}

impl Event {
    /// A short name for logs and refusals.
    pub fn name(&self) -> &'static str {
        match self {
            Event::ClaimSend => "claim_send",
            Event::AttemptResult(_) => "attempt_result",
            Event::LeaseExpired => "lease_expired",
            Event::ClaimRecovery => "claim_recovery",
            Event::LookupResult(_) => "lookup_result",
            Event::Callback(_) => "callback",
            Event::Escalate { .. } => "escalate",
            Event::Review(_) => "review",
            Event::ReplaySafe { .. } => "replay_safe",
            Event::ReviewClaim { .. } => "review_claim",
            Event::Withdraw { .. } => "withdraw",
        }
    }
}

/// A reviewer's resolution of a `MANUAL_REVIEW` operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ReviewDecision {
    /// The reviewer verified the write happened.
    ConfirmedSucceeded {
        /// The vendor's reference, as verified.
        remote_ref: Option<String>,
    },
    /// The reviewer verified the write did not happen and re-approves it: back to `RETRY_READY`
    /// under a fresh budget, with the same key and bytes.
    ConfirmedNotExecuted,
    /// Keep it pending; nothing changes.
    KeepPending,
}

/// The parts of an operation row the state machine reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot<'a> {
    /// Current state.
    pub state: State,
    /// Sticky: some attempt may have been applied by the vendor.
    pub may_have_applied: bool,
    /// Write attempts used, including the first.
    pub attempts_used: u32,
    /// Reconciliation queries used.
    pub queries_used: u32,
    /// End of the recovery window (ms since the Unix epoch), set at the first send.
    pub deadline_ms: Option<i64>,
    /// The budget frozen on the operation.
    pub policy: &'a BudgetPolicy,
}

/// The moment and the randomness a transition is given: the time the engine read from its
/// [`Clock`](crate::clock::Clock), and a jitter draw for backoff.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    /// Now, in milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// A uniform random number in `[0, 1)` for backoff jitter.
    pub jitter: f64,
}

/// The outcome of an allowed event: what the row becomes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Transition {
    /// The next state.
    pub to: State,
    /// Whether the generation is incremented (every claim of send or recovery rights).
    pub bump_generation: bool,
    /// The new sticky "may have applied" fact.
    pub may_have_applied: bool,
    /// Write attempts used after this event.
    pub attempts_used: u32,
    /// Queries used after this event.
    pub queries_used: u32,
    /// The recovery deadline after this event.
    pub deadline_ms: Option<i64>,
    /// When the engine should look at the operation next (ms since epoch), if it should.
    pub next_check_ms: Option<i64>,
    /// The business result kept while in `MANUAL_REVIEW` (and the result for terminal states).
    pub last_result: Option<State>,
    /// The vendor's reference, when the evidence names the object: a success, or a
    /// `processing` answer that already names it (so a later callback or lookup by that
    /// reference finds the operation). `None` keeps the row's.
    pub remote_ref: Option<String>,
    /// A rejection or escalation reason.
    pub reason: Option<String>,
    /// Whether the transition is to `REJECTED` on authoritative evidence about the operation
    /// (a lookup or a human) rather than about one attempt. The store refuses an attempt-level
    /// rejection once any attempt may have applied.
    pub operation_level: bool,
    /// Whether the row keeps its current lease. A human's claim or decision, and an
    /// escalation, take send rights away but cannot recall bytes already on the wire: the lease
    /// of an attempt that may still be live is kept, so the store grants no new send (it claims
    /// nothing whose lease is live) before that attempt is dead on the ledger's clock.
    pub keep_lease: bool,
}

/// An event the state machine does not allow in the current state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{event} is not allowed in state {from}{}", .detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
pub struct Refused {
    /// The state the operation was in.
    pub from: State,
    /// The event's name.
    pub event: &'static str,
    /// Why, when more than "not allowed here".
    pub detail: Option<String>,
}

impl Refused {
    fn new(from: State, event: &Event) -> Self {
        Self {
            from,
            event: event.name(),
            detail: None,
        }
    }
}

/// The transition function. Pure: the same inputs give the same output.
///
/// Refusals (`Err`) mean the event must not change the row. Late evidence for a terminal or
/// `MANUAL_REVIEW` operation is refused here and appended to the evidence log by the caller.
pub(crate) fn transition(
    s: &Snapshot<'_>,
    event: &Event,
    clock: Tick,
) -> Result<Transition, Refused> {
    let stay = || Transition {
        to: s.state,
        bump_generation: false,
        may_have_applied: s.may_have_applied,
        attempts_used: s.attempts_used,
        queries_used: s.queries_used,
        deadline_ms: s.deadline_ms,
        next_check_ms: None,
        last_result: None,
        remote_ref: None,
        reason: None,
        operation_level: false,
        keep_lease: false,
    };
    let policy = s.policy;
    let now = clock.now_ms;
    let window_left = |deadline: Option<i64>| deadline.map(|d| d - now);
    let query_at = |queries: u32, hint| {
        now + policy.query_delay(queries, hint, clock.jitter).as_millis() as i64
    };
    let escalate = |reason: String, last: State| Transition {
        to: State::ManualReview,
        last_result: Some(last),
        reason: Some(reason),
        next_check_ms: None,
        ..stay()
    };
    // A hint (or backoff) that lands past the recovery window hands over now instead of waiting
    // past the deadline: "Retry-After past the window ─▶ MANUAL_REVIEW".
    let within_window = |out: Transition| match (out.to, out.deadline_ms, out.next_check_ms) {
        (State::Unknown | State::Processing | State::RetryReady, Some(d), Some(next))
            if next >= d =>
        {
            Transition {
                to: State::ManualReview,
                last_result: Some(out.to),
                reason: Some("next check falls past the recovery window".into()),
                next_check_ms: None,
                ..out
            }
        }
        _ => out,
    };

    match (s.state, event) {
        // ── sending ──────────────────────────────────────────────────────────────────────────
        (State::Prepared | State::RetryReady, Event::ClaimSend) => {
            let business = if s.may_have_applied {
                State::Unknown
            } else {
                s.state
            };
            if s.attempts_used >= policy.max_attempts {
                return Ok(escalate(
                    format!("write attempts exhausted ({} used)", s.attempts_used),
                    business,
                ));
            }
            if let Some(left) = window_left(s.deadline_ms)
                && left < policy.attempt_timeout().as_millis() as i64
            {
                return Ok(escalate(
                    "recovery window cannot fit another attempt".into(),
                    business,
                ));
            }
            Ok(Transition {
                to: State::InFlight,
                bump_generation: true,
                attempts_used: s.attempts_used + 1,
                deadline_ms: s
                    .deadline_ms
                    .or(Some(now.saturating_add(policy.window().as_millis() as i64))),
                ..stay()
            })
        }
        (State::InFlight, Event::AttemptResult(evidence)) => Ok(within_window(after_attempt(
            s,
            evidence,
            &stay(),
            now,
            query_at,
            escalate,
        ))),
        (State::InFlight, Event::LeaseExpired) => Ok(Transition {
            to: State::Unknown,
            bump_generation: true,
            may_have_applied: true,
            next_check_ms: Some(now),
            reason: Some("attempt lease expired with no recorded result".into()),
            ..stay()
        }),

        // ── recovery ─────────────────────────────────────────────────────────────────────────
        (State::Unknown | State::Processing, Event::ClaimRecovery) => {
            if let Some(left) = window_left(s.deadline_ms)
                && left <= 0
            {
                return Ok(escalate(
                    "recovery window spent with the result still unknown".into(),
                    s.state,
                ));
            }
            if s.queries_used >= policy.max_queries {
                return Ok(escalate(
                    format!("query budget exhausted ({} used)", s.queries_used),
                    s.state,
                ));
            }
            Ok(Transition {
                bump_generation: true,
                ..stay()
            })
        }
        (
            State::Unknown | State::Processing,
            Event::LookupResult(evidence) | Event::Callback(evidence),
        ) => {
            // A lookup is a query; a callback is the vendor's own word, unasked.
            let queries = s.queries_used + u32::from(matches!(event, Event::LookupResult(_)));
            // The query was made whatever it leads to, a hand-over included.
            let escalate = |reason: String, last: State| Transition {
                queries_used: queries,
                ..escalate(reason, last)
            };
            let out = match evidence {
                Evidence::Succeeded { remote_ref } => Transition {
                    to: State::Succeeded,
                    may_have_applied: true,
                    queries_used: queries,
                    last_result: Some(State::Succeeded),
                    remote_ref: remote_ref.clone(),
                    ..stay()
                },
                Evidence::Rejected { reason } => Transition {
                    to: State::Rejected,
                    queries_used: queries,
                    last_result: Some(State::Rejected),
                    reason: Some(reason.clone()),
                    operation_level: true,
                    ..stay()
                },
                Evidence::Processing {
                    retry_after,
                    remote_ref,
                } => Transition {
                    to: State::Processing,
                    may_have_applied: true,
                    queries_used: queries,
                    next_check_ms: Some(query_at(queries, *retry_after)),
                    remote_ref: remote_ref.clone(),
                    ..stay()
                },
                Evidence::NotExecuted { why, retry_after } => {
                    // The vendor's own record says the operation never ran: path (a) to a resend.
                    if s.attempts_used >= policy.max_attempts {
                        escalate(
                            format!(
                                "vendor reports not executed ({why}) but write attempts are exhausted"
                            ),
                            s.state,
                        )
                    } else {
                        Transition {
                            to: State::RetryReady,
                            may_have_applied: false,
                            queries_used: queries,
                            next_check_ms: Some(
                                now.saturating_add(crate::budget::hint_ms(*retry_after)),
                            ),
                            reason: Some(why.clone()),
                            operation_level: true,
                            ..stay()
                        }
                    }
                }
                // Not found, unclear, conflict: weak evidence. The state stays.
                Evidence::Unknown { retry_after, .. } => Transition {
                    queries_used: queries,
                    next_check_ms: Some(query_at(queries, *retry_after)),
                    ..stay()
                },
                Evidence::Conflict { .. } => Transition {
                    queries_used: queries,
                    next_check_ms: Some(query_at(queries, None)),
                    ..stay()
                },
            };
            // Out of queries or window while still undecided: hand over now.
            if out.to.needs_recovery() && queries >= policy.max_queries {
                return Ok(escalate(
                    format!("query budget exhausted ({queries} used)"),
                    out.to,
                ));
            }
            Ok(within_window(out))
        }

        // ── humans ───────────────────────────────────────────────────────────────────────────
        (
            State::Prepared
            | State::InFlight
            | State::Processing
            | State::Unknown
            | State::RetryReady,
            Event::Escalate { reason },
        ) => {
            let business = match s.state {
                State::Processing => State::Processing,
                State::Prepared if !s.may_have_applied => State::Prepared,
                _ => State::Unknown,
            };
            Ok(Transition {
                // Escalating an in-flight attempt takes its send rights away, but its bytes may
                // already be on the wire: it may have applied, and its lease stays.
                bump_generation: s.state == State::InFlight,
                may_have_applied: s.may_have_applied || s.state == State::InFlight,
                keep_lease: matches!(s.state, State::InFlight | State::RetryReady),
                ..escalate(reason.clone(), business)
            })
        }
        (State::ManualReview, Event::Review(decision)) => match decision {
            ReviewDecision::ConfirmedSucceeded { remote_ref } => Ok(Transition {
                to: State::Succeeded,
                bump_generation: true,
                may_have_applied: true,
                last_result: Some(State::Succeeded),
                remote_ref: remote_ref.clone(),
                operation_level: true,
                ..stay()
            }),
            // Sendable again, but not before the lease of any attempt the reviewer's claim cut
            // off has run out: the store claims no row whose lease is live (DRILLS D27).
            ReviewDecision::ConfirmedNotExecuted => Ok(Transition {
                to: State::RetryReady,
                bump_generation: true,
                may_have_applied: false,
                attempts_used: 0,
                queries_used: 0,
                deadline_ms: None,
                next_check_ms: Some(now),
                operation_level: true,
                keep_lease: true,
                ..stay()
            }),
            ReviewDecision::KeepPending => Err(Refused {
                detail: Some("keep pending changes nothing".into()),
                ..Refused::new(s.state, event)
            }),
        },

        (State::Unknown, Event::ReplaySafe { reason }) => {
            if s.attempts_used >= policy.max_attempts {
                return Ok(escalate(
                    format!(
                        "replay would be safe ({reason}) but write attempts are exhausted ({} used)",
                        s.attempts_used
                    ),
                    State::Unknown,
                ));
            }
            if let Some(left) = window_left(s.deadline_ms)
                && left < policy.attempt_timeout().as_millis() as i64
            {
                return Ok(escalate(
                    "recovery window cannot fit another attempt".into(),
                    State::Unknown,
                ));
            }
            // The earlier attempt may still have applied: the fact stays, so a refusal of the
            // replay can never reject the operation.
            Ok(Transition {
                to: State::RetryReady,
                may_have_applied: true,
                next_check_ms: Some(now),
                reason: Some(reason.clone()),
                ..stay()
            })
        }
        (
            State::Prepared
            | State::InFlight
            | State::Processing
            | State::Unknown
            | State::RetryReady
            | State::ManualReview,
            Event::ReviewClaim { reviewer },
        ) => {
            // The business result: unchanged when a reviewer re-claims (`None` keeps the row's).
            let business = match s.state {
                State::ManualReview => None,
                State::Processing => Some(State::Processing),
                State::Prepared if !s.may_have_applied => Some(State::Prepared),
                State::RetryReady if !s.may_have_applied => Some(State::RetryReady),
                _ => Some(State::Unknown),
            };
            Ok(Transition {
                bump_generation: true,
                may_have_applied: s.may_have_applied || s.state == State::InFlight,
                last_result: business,
                // An attempt's lease: IN_FLIGHT, or one kept into MANUAL_REVIEW and on into
                // RETRY_READY by a reviewer's "not executed" (a second review cycle must not drop
                // it). On RETRY_READY it may also be the recovery engine's own lease: keeping it
                // only delays the replay by that lease. UNKNOWN and PROCESSING rows never carry
                // an attempt's lease.
                keep_lease: matches!(
                    s.state,
                    State::InFlight | State::ManualReview | State::RetryReady
                ),
                ..escalate(format!("claimed by reviewer {reviewer}"), State::Unknown)
            })
        }
        // Never sent: closing it rests on the operation itself, not on an attempt.
        (State::Prepared, Event::Withdraw { reason }) if !s.may_have_applied => Ok(Transition {
            to: State::Rejected,
            last_result: Some(State::Rejected),
            reason: Some(reason.clone()),
            operation_level: true,
            ..stay()
        }),
        (from, ev) => Err(Refused::new(from, ev)),
    }
}

fn after_attempt(
    s: &Snapshot<'_>,
    evidence: &Evidence,
    stay: &Transition,
    now: i64,
    query_at: impl Fn(u32, Option<std::time::Duration>) -> i64,
    escalate: impl Fn(String, State) -> Transition,
) -> Transition {
    let unknown = |why: Option<String>, hint| Transition {
        to: State::Unknown,
        may_have_applied: true,
        next_check_ms: Some(query_at(s.queries_used, hint)),
        reason: why,
        ..stay.clone()
    };
    match evidence {
        Evidence::Succeeded { remote_ref } => Transition {
            to: State::Succeeded,
            may_have_applied: true,
            last_result: Some(State::Succeeded),
            remote_ref: remote_ref.clone(),
            ..stay.clone()
        },
        Evidence::Processing {
            retry_after,
            remote_ref,
        } => Transition {
            to: State::Processing,
            may_have_applied: true,
            next_check_ms: Some(query_at(s.queries_used, *retry_after)),
            remote_ref: remote_ref.clone(),
            ..stay.clone()
        },
        // A refusal of this attempt says nothing about an earlier one that may have applied.
        Evidence::Rejected { reason } if s.may_have_applied => unknown(
            Some(format!(
                "attempt rejected ({reason}) but an earlier attempt may have applied"
            )),
            None,
        ),
        Evidence::Rejected { reason } => Transition {
            to: State::Rejected,
            last_result: Some(State::Rejected),
            reason: Some(reason.clone()),
            ..stay.clone()
        },
        Evidence::NotExecuted { .. } if s.may_have_applied => unknown(None, None),
        Evidence::NotExecuted { why, retry_after } => {
            if s.attempts_used >= s.policy.max_attempts {
                escalate(
                    format!("attempt not executed ({why}); write attempts exhausted"),
                    State::Prepared,
                )
            } else {
                Transition {
                    to: State::RetryReady,
                    next_check_ms: Some(now.saturating_add(crate::budget::hint_ms(*retry_after))),
                    reason: Some(why.clone()),
                    ..stay.clone()
                }
            }
        }
        Evidence::Unknown { why, retry_after } => unknown(Some(why.clone()), *retry_after),
        Evidence::Conflict {
            conflict: ConflictKind::InFlight,
        } => unknown(
            Some("vendor reports a request with this key still in flight".into()),
            None,
        ),
        Evidence::Conflict {
            conflict: ConflictKind::Mismatch,
        } => Transition {
            may_have_applied: true,
            ..escalate(
                "vendor reports this key was used with another payload".into(),
                State::Unknown,
            )
        },
    }
}

#[cfg(test)]
mod tests;
