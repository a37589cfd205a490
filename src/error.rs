//! Error and outcome types of [`RecoverableWrite`](super::RecoverableWrite).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::contract::ContractError;
use crate::ledger::{LedgerError, OperationRecord};
use crate::operation::{AttemptId, OperationId, Tenant};
use crate::state::State;
use tower::BoxError;

/// Where an operation stands, as told to the caller.
///
/// Present in the response extensions of every write that reached an authoritative answer, and
/// inside every [`Error`] that names an operation. Serializable, so an agent runtime can hand it
/// to a model verbatim: `message` is written for that.
///
/// ```
/// # use recoverable_write::{Outcome, OperationId, Tenant, State};
/// let o = Outcome::new(Tenant::new("tenant-a"), OperationId::new("op-204"), State::Unknown);
/// assert_eq!(o.message, "op-204 is being verified; do not create it again");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// The tenant.
    pub tenant: Tenant,
    /// The operation.
    pub operation_id: OperationId,
    /// Its state now.
    pub state: State,
    /// The business result kept while a human reviews it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_result: Option<State>,
    /// The vendor's reference of the created object (e.g. `W731`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_ref: Option<String>,
    /// The attempt this call made, if it sent anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<AttemptId>,
    /// `true` when nothing was sent by this call: the answer comes from the ledger.
    pub from_ledger: bool,
    /// `true` when the answer replays a stored vendor response whose body was cut to the
    /// stored-body limit: it is not the vendor's whole answer. The replayed response carries
    /// [`TRUNCATED_HEADER`](crate::layer::TRUNCATED_HEADER) too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub body_truncated: bool,
    /// One sentence for a person or a model.
    pub message: String,
}

impl From<&OperationRecord> for Outcome {
    /// Where a ledger row stands, as told to a caller (`from_ledger` is set: nothing was sent).
    fn from(r: &OperationRecord) -> Self {
        Self::from_record(r, None, true)
    }
}

impl Outcome {
    /// An outcome with the standard message for `state`.
    pub fn new(tenant: Tenant, operation_id: OperationId, state: State) -> Self {
        Self::from_parts((tenant, operation_id), state, None, None, None, false)
    }

    pub(crate) fn from_record(
        r: &OperationRecord,
        attempt: Option<AttemptId>,
        from_ledger: bool,
    ) -> Self {
        let ids = (r.tenant.clone(), r.operation_id.clone());
        Self {
            body_truncated: from_ledger && r.response.as_ref().is_some_and(|s| s.is_truncated()),
            ..Self::from_parts(
                ids,
                r.state,
                r.last_result,
                r.remote_ref.clone(),
                attempt,
                from_ledger,
            )
        }
    }

    /// [`from_record`](Self::from_record) for a row the caller is done with: its vendor
    /// reference moves into the outcome instead of being copied.
    pub(crate) fn from_row(
        r: OperationRecord,
        attempt: Option<AttemptId>,
        from_ledger: bool,
    ) -> Self {
        let body_truncated = from_ledger && r.response.as_ref().is_some_and(|s| s.is_truncated());
        let ids = (r.tenant, r.operation_id);
        Self {
            body_truncated,
            ..Self::from_parts(
                ids,
                r.state,
                r.last_result,
                r.remote_ref,
                attempt,
                from_ledger,
            )
        }
    }

    fn from_parts(
        (tenant, operation_id): (Tenant, OperationId),
        state: State,
        last_result: Option<State>,
        remote_ref: Option<String>,
        attempt: Option<AttemptId>,
        from_ledger: bool,
    ) -> Self {
        Self {
            message: message_for(&operation_id, state, remote_ref.as_deref()),
            tenant,
            operation_id,
            state,
            last_result,
            remote_ref,
            attempt,
            from_ledger,
            body_truncated: false,
        }
    }
}

fn message_for(op: &OperationId, state: State, remote_ref: Option<&str>) -> String {
    // Joined by `concat` into a string sized once: one allocation, where `format!` grows its
    // buffer.
    let rest = match state {
        State::Succeeded => match remote_ref {
            Some(r) => return [op.as_str(), " succeeded: ", r].concat(),
            None => " succeeded",
        },
        State::Rejected => " was rejected by the vendor; it had no effect",
        State::Processing => " was accepted and is still processing; do not create it again",
        State::Unknown | State::InFlight => " is being verified; do not create it again",
        State::RetryReady => {
            " was not executed; it will be resent with the same idempotency key; do not create it again"
        }
        State::ManualReview => " is awaiting manual review; do not create it again",
        State::Prepared => " is recorded and has not been sent",
    };
    [op.as_str(), rest].concat()
}

/// Why a call through [`RecoverableWrite`](super::RecoverableWrite) did not return a response.
///
/// Every variant says whether anything was sent. Those that name an operation carry its
/// [`Outcome`]; none of them means "failed, try again": the operation is owned by the recovery
/// engine until it is resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The result is unknown (timeout, reset, 5xx, gateway error, an unclear answer). The
    /// recovery engine verifies it with the vendor; do not create it again.
    #[error("{}", .outcome.message)]
    Unknown {
        /// The operation.
        outcome: Outcome,
        /// What was observed, if it was an error.
        #[source]
        source: Option<BoxError>,
    },
    /// The vendor accepted the write and has not finished it.
    #[error("{}", .outcome.message)]
    Processing {
        /// The operation.
        outcome: Outcome,
        /// The vendor's advice on when to look again.
        retry_after: Option<Duration>,
    },
    /// The attempt provably did not execute; the recovery engine resends it with the same key
    /// and bytes when its budget and the contract allow.
    #[error("{}", .outcome.message)]
    RetryScheduled {
        /// The operation.
        outcome: Outcome,
    },
    /// A human holds the operation; automatic sends are revoked.
    #[error("{}: {}", .outcome.message, .reason)]
    ManualReview {
        /// The operation.
        outcome: Outcome,
        /// Why it was escalated.
        reason: String,
    },
    /// [`Operation::resume`](crate::Operation::resume) named an operation this tenant's ledger
    /// does not hold (a mistyped id, another tenant's). Nothing was created or sent.
    #[error("no operation {operation} for tenant {tenant}; nothing was created or sent")]
    NotFound {
        /// The tenant asked for.
        tenant: Tenant,
        /// The id asked for.
        operation: OperationId,
    },
    /// The request carries an idempotency key of its own (where the contract places keys) that
    /// is not the existing operation's key. Keys are never silently replaced: send the
    /// operation's own key, or none. Nothing was sent.
    #[error(
        "{operation} has another idempotency key than the one this request carries; nothing was sent"
    )]
    KeyMismatch {
        /// The existing operation.
        operation: OperationId,
    },
    /// The operation exists with another payload (seed 000: device E18 instead of E17). Nothing
    /// was sent.
    #[error("{operation} already exists with a different payload; nothing was sent")]
    Conflict {
        /// The existing operation.
        operation: OperationId,
    },
    /// The [`Authorizer`](crate::Authorizer) refused the write's first send. Nothing was sent;
    /// `fate` says what happens to the operation now ([`DeniedFirstSend`]): closed as
    /// `REJECTED` and never sent (the default), or kept `PREPARED` for the recoverer to send
    /// once the authorizer allows it.
    #[error("{operation}: write not authorized; nothing was sent{}", fate.sentence())]
    Denied {
        /// The operation.
        operation: OperationId,
        /// What happens to it now.
        fate: DeniedFirstSend,
        /// The refusal.
        #[source]
        source: crate::authorize::Denied,
    },
    /// The ledger could not be reached or failed. Nothing was sent by this call. When
    /// `operation` is set, its row may have been recorded before the failure, and the
    /// recoverer sends a recorded row that nobody sent
    /// ([`Recoverer::send_prepared_after`](crate::Recoverer::send_prepared_after)): repeat this
    /// same intent to learn its fate, never create it under a new one.
    #[error(
        "ledger unavailable; nothing was sent by this call{}",
        if operation.is_some() {
            "; the operation may have been recorded, and the recoverer sends a recorded \
             operation nobody sent: repeat this same intent to learn its fate, never create it \
             under a new one"
        } else {
            ""
        }
    )]
    Ledger {
        /// The operation, when it was identified before the failure.
        operation: Option<OperationId>,
        /// The store's error.
        #[source]
        source: LedgerError,
    },
    /// The request body is larger than the configured limit. Nothing was sent.
    #[error("request body exceeds the {limit}-byte limit for recoverable writes; nothing was sent")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request body is a stream of unknown length and cannot be frozen and replayed.
    /// Nothing was sent.
    #[error(
        "request body has no known length (a stream) and cannot be frozen for replay; nothing was sent"
    )]
    NonReplayableBody,
    /// Reading the request body failed. Nothing was sent.
    #[error("request body could not be read; nothing was sent")]
    BodyRead {
        /// The body's error.
        #[source]
        source: BoxError,
    },
    /// The operation exists, was never sent, and was made under a contract this configuration
    /// does not hold with the same content (renamed, edited, removed). Its first send must use
    /// the contract frozen on it; nothing was sent and it stays `PREPARED`. Configure that
    /// contract again (see [`Contracts::find`](crate::Contracts::find)).
    #[error(
        "{operation} was made under contract {contract:?}, which is not configured with the same content; nothing was sent"
    )]
    ContractUnavailable {
        /// The operation (left `PREPARED`).
        operation: OperationId,
        /// The name of the contract frozen on it.
        contract: String,
    },
    /// The operation's contract keeps secret body fields or path segments out of the ledger,
    /// and this call's request is not the one frozen on the operation (with its secrets): the
    /// secrets cannot be put back. Nothing was sent.
    #[error(
        "{operation}: this call's request is not the stored one, and its secret body fields or path segments are not stored; nothing was sent"
    )]
    SecretsUnavailable {
        /// The operation (left `PREPARED`).
        operation: OperationId,
    },
    /// The contract could not place the idempotency key. Nothing was sent.
    #[error("idempotency key could not be placed; nothing was sent")]
    KeyPlacement {
        /// The contract's error.
        #[source]
        source: ContractError,
    },
    /// An error of the inner service on a request the layer does not track (safe methods), or
    /// from `poll_ready`.
    #[error("inner service error")]
    Inner {
        /// The inner error.
        #[source]
        source: BoxError,
    },
}

/// What becomes of an operation whose first send the [`Authorizer`](crate::Authorizer)
/// refused (nothing was sent). Set with
/// [`Builder::denied_first_sends`](crate::Builder::denied_first_sends) or
/// [`Builder::denied_first_sends`](crate::Builder::denied_first_sends).
///
/// The caller's answer ([`Error::Denied`]) says which: a caller that gives up, or tries again
/// under a new intent, must not find its first write sent later behind its back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DeniedFirstSend {
    /// Closed at once as `REJECTED` ("first send not authorized"), never sent: the answer is
    /// final, and a repeat of the intent gets the same rejection. The default.
    #[default]
    Close,
    /// Kept `PREPARED`: the recoverer sends it once the authorizer allows it (after
    /// [`Recoverer::send_prepared_after`](crate::Recoverer::send_prepared_after)), or hands it to
    /// a person if the refusal stands. For approval flows where "not yet" is normal.
    Queue,
}

impl DeniedFirstSend {
    /// The end of [`Error::Denied`]'s message: what happens to the operation.
    fn sentence(&self) -> &'static str {
        match self {
            DeniedFirstSend::Close => ", and it never will be: the operation is closed as REJECTED",
            DeniedFirstSend::Queue => {
                "; the operation stays queued and the recoverer sends it once the write is \
                 authorized: do not create it again"
            }
        }
    }
}

impl Error {
    /// The operation's outcome, for the variants that name one.
    pub fn outcome(&self) -> Option<&Outcome> {
        match self {
            Error::Unknown { outcome, .. }
            | Error::Processing { outcome, .. }
            | Error::RetryScheduled { outcome }
            | Error::ManualReview { outcome, .. } => Some(outcome),
            _ => None,
        }
    }

    /// The operation this error is about, if one was identified.
    pub fn operation_id(&self) -> Option<&OperationId> {
        match self {
            Error::Conflict { operation }
            | Error::KeyMismatch { operation }
            | Error::NotFound { operation, .. }
            | Error::Denied { operation, .. }
            | Error::ContractUnavailable { operation, .. }
            | Error::SecretsUnavailable { operation } => Some(operation),
            Error::Ledger { operation, .. } => operation.as_ref(),
            other => other.outcome().map(|o| &o.operation_id),
        }
    }

    /// `true` when this call provably sent nothing to the vendor.
    pub fn nothing_sent(&self) -> bool {
        match self {
            Error::Unknown { outcome, .. } | Error::Processing { outcome, .. } => {
                outcome.attempt.is_none()
            }
            Error::RetryScheduled { .. } => true,
            Error::ManualReview { outcome, .. } => outcome.attempt.is_none(),
            Error::Inner { .. } => false,
            _ => true,
        }
    }

    pub(crate) fn for_state(
        r: &OperationRecord,
        attempt: Option<AttemptId>,
        source: Option<BoxError>,
        retry_after: Option<Duration>,
    ) -> Self {
        let mut outcome = Outcome::from_record(r, attempt, attempt.is_none());
        // Its last attempt's result was never recorded: the process may have stopped right
        // after answering its caller (a result recorded detached, issue 27 item 6). A caller
        // asking again must not read "unknown" as contradicting the answer it was given.
        if attempt.is_none()
            && r.state == State::Unknown
            && r.reason.as_deref()
                == Some(crate::ledger::backend::store_entries::LEASE_EXPIRED_REASON)
        {
            outcome.message.push_str(LOST_RESULT);
        }
        match r.state {
            State::Processing => Error::Processing {
                outcome,
                retry_after,
            },
            State::RetryReady => Error::RetryScheduled { outcome },
            State::ManualReview => Error::ManualReview {
                outcome,
                reason: r.reason.clone().unwrap_or_else(|| "escalated".into()),
            },
            _ => Error::Unknown { outcome, source },
        }
    }
}

/// Added to the message of an operation whose last attempt's result was never recorded.
pub(crate) const LOST_RESULT: &str = ". Its last attempt's result was not recorded (the process \
    may have stopped right after answering): an answer already given for this attempt stands, \
    and the engine confirms it with the vendor";

/// Display helper that never prints more than a short prefix of a value.
pub(crate) struct Short<'a>(pub(crate) &'a str);

impl fmt::Display for Short<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        match s.char_indices().nth(200) {
            Some((i, _)) => write!(f, "{}…", &s[..i]),
            None => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 27 item 6: a caller that was answered before its result was recorded, and asks
    /// again after the process died, is told why the operation reads unknown, and that the
    /// answer it had stands.
    #[test]
    #[cfg(feature = "test-util")]
    fn a_result_lost_after_the_answer_is_explained_to_a_caller_asking_again() {
        let new = crate::ledger::conformance::new_operation("t", "op-1", "i");
        let mut row = new.into_prepared();
        row.state = State::Unknown;
        row.reason = Some(crate::ledger::backend::store_entries::LEASE_EXPIRED_REASON.to_owned());
        let asked_again = Error::for_state(&row, None, None, None);
        let message = &asked_again.outcome().expect("an outcome").message;
        assert!(message.contains("do not create it again"), "{message}");
        assert!(message.contains("an answer already given"), "{message}");
        // Another unknown (a timeout the caller was told about) reads as before.
        row.reason = Some("timeout".to_owned());
        let other = Error::for_state(&row, None, None, None);
        assert!(!other.outcome().unwrap().message.contains("already given"));
    }

    /// Issue 27 item 4: the answer says exactly what happens to the operation.
    #[test]
    fn refusals_say_what_happens_to_the_operation() {
        let op = OperationId::new("op-1");
        let denied = |fate| Error::Denied {
            operation: op.clone(),
            fate,
            source: crate::authorize::Denied::new(crate::Access::Write, "approval pending"),
        };
        let closed = denied(DeniedFirstSend::Close).to_string();
        assert!(closed.contains("nothing was sent"), "{closed}");
        assert!(closed.contains("never will be"), "{closed}");
        let queued = denied(DeniedFirstSend::Queue).to_string();
        assert!(queued.contains("stays queued"), "{queued}");
        assert!(queued.contains("do not create it again"), "{queued}");

        let store = || LedgerError::Unavailable("disk full".into());
        let recorded = Error::Ledger {
            operation: Some(op.clone()),
            source: store(),
        }
        .to_string();
        assert!(
            recorded.contains("nothing was sent by this call"),
            "{recorded}"
        );
        assert!(recorded.contains("repeat this same intent"), "{recorded}");
        let unrecorded = Error::Ledger {
            operation: None,
            source: store(),
        }
        .to_string();
        assert!(!unrecorded.contains("repeat"), "{unrecorded}");
    }
}
