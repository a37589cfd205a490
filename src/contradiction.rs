//! Contradictions: evidence that arrives after an operation reached a final state and says
//! otherwise.
//!
//! `SUCCEEDED` and `REJECTED` are final: nothing moves an operation out of them, so evidence
//! that arrives later is only appended. Most of it agrees (a second "succeeded", a reordered
//! "processing"). Some of it cannot be reconciled with what was recorded: the vendor reports a
//! success for a write recorded as having had no effect, a failure for one recorded as done, or
//! another object than the one recorded. Each of these may be money moved twice or not at all,
//! and the application has already been told the opposite. So a contradiction is never a
//! silent line in a finished operation's log: it is an alarm for a person (a
//! [`Notice::Contradiction`](crate::Notice::Contradiction), the counter
//! `recoverable_write_contradictions_total{vendor}`, and a mark on the row that puts it in the
//! review queue, [`OperationQuery::contradicted`](crate::ledger::OperationQuery::contradicted),
//! until someone acknowledges it with
//! [`Reviews::acknowledge_contradiction`](crate::review::Reviews::acknowledge_contradiction)).
//!
//! [`contradiction`] is the pure check; the callback endpoint runs it on every verified event
//! that matches a finished operation.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::evidence::Evidence;
use crate::ledger::OperationRecord;
use crate::state::State;

/// Evidence kind of the entry that records a contradiction (its evidence is what arrived).
pub const CONTRADICTION: &str = "contradiction";

/// Evidence kind of a person's acknowledgement of the operation's contradictions.
pub const CONTRADICTION_ACKNOWLEDGED: &str = "contradiction_acknowledged";

/// How evidence contradicts an operation's final state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "contradiction", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Contradiction {
    /// The vendor reports a success (or a created object) for an operation recorded as
    /// `REJECTED`, a write said to have had no effect.
    SuccessAfterRejection {
        /// The reference the vendor reports, if any.
        reported: Option<String>,
    },
    /// The vendor reports work in progress for an operation recorded as `REJECTED`.
    ProcessingAfterRejection,
    /// The vendor reports a failure (a rejection, or proof it never ran) for an operation
    /// recorded as `SUCCEEDED`.
    FailureAfterSuccess {
        /// What the vendor reports.
        reported: String,
    },
    /// The vendor names another object than the one recorded for the operation (two objects
    /// for one write: possibly a duplicate).
    OtherReference {
        /// The reference recorded on the operation.
        recorded: String,
        /// The reference the vendor reports.
        reported: String,
    },
}

impl fmt::Display for Contradiction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SuccessAfterRejection { reported: Some(r) } => write!(
                f,
                "the vendor reports a success ({r}) for a write recorded as rejected"
            ),
            Self::SuccessAfterRejection { reported: None } => {
                f.write_str("the vendor reports a success for a write recorded as rejected")
            }
            Self::ProcessingAfterRejection => {
                f.write_str("the vendor reports work in progress for a write recorded as rejected")
            }
            Self::FailureAfterSuccess { reported } => write!(
                f,
                "the vendor reports a failure ({reported}) for a write recorded as succeeded"
            ),
            Self::OtherReference { recorded, reported } => write!(
                f,
                "the vendor names {reported} for a write recorded as {recorded}: two objects for one write?"
            ),
        }
    }
}

/// How `evidence`, arriving now, contradicts the final state of `row`, if it does.
///
/// Only `SUCCEEDED` and `REJECTED` can be contradicted: anything else is not final, and
/// evidence for it is applied or, in `MANUAL_REVIEW`, shown to the person who holds it.
/// Evidence that proves nothing (unknown, conflicts) contradicts nothing; a success that agrees
/// (the same reference, or none to compare) and a reordered "processing" after a success are
/// late lines, not alarms.
pub fn contradiction(row: &OperationRecord, evidence: &Evidence) -> Option<Contradiction> {
    let other_reference = |reported: Option<&str>| match (row.remote_ref.as_deref(), reported) {
        (Some(recorded), Some(reported)) if recorded != reported => {
            Some(Contradiction::OtherReference {
                recorded: recorded.to_owned(),
                reported: reported.to_owned(),
            })
        }
        _ => None,
    };
    match (row.state, evidence) {
        (State::Succeeded, Evidence::Rejected { reason }) => {
            Some(Contradiction::FailureAfterSuccess {
                reported: reason.clone(),
            })
        }
        (State::Succeeded, Evidence::NotExecuted { why, .. }) => {
            Some(Contradiction::FailureAfterSuccess {
                reported: format!("not executed: {why}"),
            })
        }
        (State::Succeeded, Evidence::Succeeded { .. } | Evidence::Processing { .. }) => {
            other_reference(evidence.remote_ref())
        }
        (State::Rejected, Evidence::Succeeded { remote_ref }) => {
            Some(Contradiction::SuccessAfterRejection {
                reported: remote_ref.clone(),
            })
        }
        (State::Rejected, Evidence::Processing { .. }) => {
            Some(Contradiction::ProcessingAfterRejection)
        }
        _ => None,
    }
}

// The rows come from the conformance suite's builder (feature `test-util`).
#[cfg(all(test, feature = "test-util"))]
mod tests {
    use super::*;
    use crate::ledger::conformance::new_operation;

    fn row(state: State, remote_ref: Option<&str>) -> OperationRecord {
        let mut r = new_operation("t", "op-1", "i-1").into_prepared();
        r.state = state;
        r.remote_ref = remote_ref.map(str::to_owned);
        r
    }

    fn succeeded(r: Option<&str>) -> Evidence {
        Evidence::Succeeded {
            remote_ref: r.map(str::to_owned),
        }
    }

    #[test]
    fn a_success_after_a_rejection_contradicts_it() {
        let c = contradiction(&row(State::Rejected, None), &succeeded(Some("pi_2")));
        assert_eq!(
            c,
            Some(Contradiction::SuccessAfterRejection {
                reported: Some("pi_2".into())
            })
        );
        assert!(c.unwrap().to_string().contains("pi_2"));
        assert_eq!(
            contradiction(&row(State::Rejected, None), &Evidence::processing()),
            Some(Contradiction::ProcessingAfterRejection)
        );
    }

    #[test]
    fn a_failure_or_another_object_after_a_success_contradicts_it() {
        let done = row(State::Succeeded, Some("pi_1"));
        assert!(matches!(
            contradiction(
                &done,
                &Evidence::Rejected {
                    reason: "card_declined".into()
                }
            ),
            Some(Contradiction::FailureAfterSuccess { .. })
        ));
        assert!(matches!(
            contradiction(&done, &Evidence::not_executed("never ran")),
            Some(Contradiction::FailureAfterSuccess { .. })
        ));
        assert_eq!(
            contradiction(&done, &succeeded(Some("pi_2"))),
            Some(Contradiction::OtherReference {
                recorded: "pi_1".into(),
                reported: "pi_2".into()
            })
        );
    }

    #[test]
    fn agreeing_or_weak_evidence_and_open_states_contradict_nothing() {
        let done = row(State::Succeeded, Some("pi_1"));
        for e in [
            succeeded(Some("pi_1")),
            succeeded(None),
            Evidence::processing(),
            Evidence::unknown("not final at the vendor"),
        ] {
            assert_eq!(contradiction(&done, &e), None, "{e:?}");
        }
        // Nothing recorded to compare with: a success without a reference is not "another".
        assert_eq!(
            contradiction(&row(State::Succeeded, None), &succeeded(Some("pi_2"))),
            None
        );
        assert_eq!(
            contradiction(
                &row(State::Rejected, None),
                &Evidence::Rejected {
                    reason: "again".into()
                }
            ),
            None
        );
        for state in [State::Unknown, State::Processing, State::ManualReview] {
            assert_eq!(
                contradiction(&row(state, Some("pi_1")), &succeeded(Some("pi_2"))),
                None,
                "{state}"
            );
        }
    }
}
