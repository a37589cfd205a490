//! Notifications: resolutions for waiting callers, escalations, late evidence and contradictions
//! for reviewers.
//!
//! A [`Notifier`] is a broadcast channel shared by the layer and the recovery engine in one
//! process. Callers that asked to wait for resolution
//! ([`Builder::wait_for_resolution`](crate::Builder::wait_for_resolution))
//! await it instead of polling the vendor; reviewer tooling subscribes to see escalations and
//! late evidence (seed 000: "a late response returns W731 after takeover: the system logs it as
//! new evidence and notifies the reviewer"). Across processes the ledger stays the source of
//! truth; waiting callers also re-read it periodically.

use tokio::sync::broadcast;

use crate::contradiction::Contradiction;
use crate::error::Outcome;
use crate::evidence::Evidence;

/// Something reviewers and waiting callers may want to know.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Notice {
    /// An operation changed state.
    Transition(Outcome),
    /// An operation was handed to a human.
    Escalated {
        /// The operation, now `MANUAL_REVIEW`.
        outcome: Outcome,
        /// Why.
        reason: String,
    },
    /// Evidence arrived after the operation moved on (a late response after a reviewer took
    /// over, a lookup answer after another worker resolved it). It changed nothing.
    LateEvidence {
        /// The operation as it stands.
        outcome: Outcome,
        /// What arrived.
        evidence: Evidence,
    },
    /// Evidence arrived after the operation reached a final state and says otherwise (a
    /// success after `REJECTED`, a failure after `SUCCEEDED`, another object than the one
    /// recorded): an alarm for a person. It changed nothing, and the caller has already been
    /// told the final state; the operation is marked and listed in the review queue until
    /// someone acknowledges it (see [`contradiction`](crate::contradiction)).
    Contradiction {
        /// The operation as it stands (still final).
        outcome: Outcome,
        /// What arrived.
        evidence: Evidence,
        /// How it contradicts the final state.
        contradiction: Contradiction,
        /// Where it came from (the vendor of a callback).
        source: String,
    },
}

impl Notice {
    /// The operation this notice is about.
    pub fn outcome(&self) -> &Outcome {
        match self {
            Notice::Transition(o)
            | Notice::Escalated { outcome: o, .. }
            | Notice::LateEvidence { outcome: o, .. }
            | Notice::Contradiction { outcome: o, .. } => o,
        }
    }
}

/// A cloneable broadcast handle. Sending never blocks; slow subscribers miss old notices (and
/// fall back to reading the ledger).
#[derive(Clone, Debug)]
pub struct Notifier {
    tx: broadcast::Sender<Notice>,
}

impl Default for Notifier {
    fn default() -> Self {
        Self::new(1024)
    }
}

impl Notifier {
    /// A notifier keeping up to `capacity` notices for slow subscribers.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Self { tx }
    }

    /// Receives every notice published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.tx.subscribe()
    }

    /// Whether anyone listens now. Publishers skip building notices nobody would receive; a
    /// subscriber that comes later reads the ledger first, as it must anyway.
    pub(crate) fn has_subscribers(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// Publishes a notice (dropped when nobody listens). Only the engine publishes: a notice
    /// states what the ledger recorded.
    pub(crate) fn publish(&self, notice: Notice) {
        let _ = self.tx.send(notice);
    }
}
