//! Reading an operation's evidence log for a decision: what arrived since the decision its
//! state rests on, whether an entry says the write may have applied, and the latest late
//! success.

use super::EvidenceSummary;
use crate::evidence::Evidence;

/// The vendor's evidence recorded after the decision the operation's state rests on (the
/// latest entry that changed its state: the escalation into review, the lookup or the
/// reviewer's decision that made it sendable, ...), oldest first. The state did not take it
/// into account: a person deciding must see it first, and a replay must not go out on a
/// decision it contradicts (see [`says_may_have_applied`]). Entries that carry no observation
/// (claims, notes, deferrals) are left out.
pub(crate) fn evidence_since_decision(log: &[EvidenceSummary]) -> Vec<&EvidenceSummary> {
    let decided = log
        .iter()
        .rposition(|e| matches!(e.transition, Some((from, Some(to))) if from != Some(to)))
        .map_or(0, |i| i + 1);
    log[decided..]
        .iter()
        .filter(|e| e.evidence.is_some())
        .collect()
}

/// Whether an entry says the write may have been applied at the vendor: a success, an
/// accepted write still processing, the vendor busy with the same key, or the unknown outcome
/// of an attempt (its bytes may have arrived). A lookup that found nothing, or a note about
/// the engine's own bookkeeping, says nothing either way.
pub fn says_may_have_applied(e: &EvidenceSummary) -> bool {
    match &e.evidence {
        Some(Evidence::Succeeded { .. } | Evidence::Processing { .. }) => true,
        Some(Evidence::Conflict { conflict }) => {
            *conflict == crate::evidence::ConflictKind::InFlight
        }
        Some(Evidence::Unknown { .. }) => e.attempt_id.is_some(),
        _ => false,
    }
}

/// The latest conclusive success that arrived when it could no longer change the operation
/// (kind `late_evidence`: a verified callback, a response or a lookup answer after the
/// operation went to review or was made sendable), if any. On an operation in review it is
/// shown first and offered to the reviewer as the resolution.
pub fn late_success(log: &[EvidenceSummary]) -> Option<&EvidenceSummary> {
    log.iter().rev().find(|e| {
        e.kind == "late_evidence" && matches!(e.evidence, Some(Evidence::Succeeded { .. }))
    })
}
