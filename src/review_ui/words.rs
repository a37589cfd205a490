//! Plain language for the review page: ages, times, what an operation's state means and what a
//! person needs to decide.

use crate::evidence::{ConflictKind, Evidence};
use crate::reconcile::EngineHealth;
use crate::reconcile::health::{WAITING_STATES, claim_advice, grace_for};
use crate::review::{EvidenceSummary, HandoffPackage};
use crate::state::State;

/// The evidence kind of a claim by a reviewer.
pub(super) const CLAIM_KIND: &str = "review_claimed";
/// The evidence kind of a reviewer's decision (with its audit note).
pub(super) const DECISION_KIND: &str = "review";

/// An age as the command line writes it too (`12m 34s`): one formatter for every face.
pub(super) use crate::text::format_age as age;

/// `2026-11-30 23:10:04 UTC`.
pub(super) fn utc(ms: i64) -> String {
    let at =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let text = humantime::format_rfc3339_seconds(at).to_string(); // 2026-11-30T23:10:04Z
    format!("{} UTC", text.trim_end_matches('Z').replacen('T', " ", 1))
}

/// The time of day only: `23:10:04`.
pub(super) fn clock(ms: i64) -> String {
    let full = utc(ms);
    full[11..19].to_owned()
}

/// `create_ticket` → `create ticket`.
pub(super) fn action(name: &str) -> String {
    name.replace(['_', '-'], " ")
}

/// A state as a person says it.
pub(super) fn state(s: State) -> &'static str {
    match s {
        State::Prepared => "Prepared",
        State::InFlight => "In flight",
        State::Processing => "Processing",
        State::Unknown => "Unknown",
        State::RetryReady => "Retry ready",
        State::Succeeded => "Succeeded",
        State::Rejected => "Rejected",
        State::ManualReview => "Manual review",
    }
}

/// The CSS class of a state's badge.
pub(super) fn badge(s: State) -> &'static str {
    match s {
        State::ManualReview => "b-review",
        State::Unknown | State::InFlight => "b-unknown",
        State::Processing | State::Prepared | State::RetryReady => "b-pending",
        State::Succeeded => "b-ok",
        State::Rejected => "b-rejected",
    }
}

/// One piece of evidence in words.
pub(super) fn evidence(e: &Evidence) -> String {
    match e {
        Evidence::Succeeded { remote_ref } => match remote_ref {
            Some(r) => format!("succeeded ({r})"),
            None => "succeeded".to_owned(),
        },
        Evidence::Processing { .. } => "accepted, still processing".to_owned(),
        Evidence::Rejected { reason } => format!("rejected: {reason}"),
        Evidence::NotExecuted { why, .. } => format!("not executed: {why}"),
        Evidence::Unknown { why, .. } => format!("no answer: {why}"),
        Evidence::Conflict {
            conflict: ConflictKind::Mismatch,
        } => "conflict: the key was used with another payload".to_owned(),
        Evidence::Conflict {
            conflict: ConflictKind::InFlight,
        } => "conflict: the same request is still running at the vendor".to_owned(),
    }
}

/// An evidence kind in words.
pub(super) fn kind(k: &str) -> String {
    match k {
        "created" => "recorded".to_owned(),
        "attempt_registered" => "attempt sent".to_owned(),
        "attempt_result" => "attempt answered".to_owned(),
        "recovery_claimed" => "recovery started".to_owned(),
        "lookup" => "lookup at the vendor".to_owned(),
        "lease_expired" => "lease expired".to_owned(),
        "escalated" => "handed to a person".to_owned(),
        "late_evidence" => "LATE evidence".to_owned(),
        crate::contradiction::CONTRADICTION => "CONTRADICTS the final state".to_owned(),
        crate::contradiction::CONTRADICTION_ACKNOWLEDGED => "contradiction acknowledged".to_owned(),
        CLAIM_KIND => "claimed by a reviewer".to_owned(),
        DECISION_KIND => "reviewer decision".to_owned(),
        other => other.replace('_', " "),
    }
}

/// Whether the entry is a lookup at the vendor (a reconciler's answer).
fn is_lookup(e: &EvidenceSummary) -> bool {
    e.kind.contains("lookup") || e.kind.contains("query") || e.kind.contains("reconcil")
}

/// The claim that holds the operation now (see [`crate::review::claim_holder`]): (who, when,
/// sequence). A resolution ends a claim; a later escalation by the engine is not a claim.
pub(super) fn last_claim(p: &HandoffPackage) -> Option<(String, i64, i64)> {
    crate::operator::current_claim(p).map(|c| {
        (
            c.who.unwrap_or_else(|| "a reviewer".to_owned()),
            c.at_ms,
            c.seq,
        )
    })
}

/// Evidence that arrived when it could no longer change the operation
/// ([`crate::operator::late_evidence`]), claimed or not: a person deciding must see it first.
pub(super) fn late_evidence(p: &HandoffPackage) -> Vec<&EvidenceSummary> {
    crate::operator::late_evidence(p)
}

/// What a person needs to decide, in a few sentences: a headline and the facts behind it.
pub(super) struct Summary {
    pub(super) headline: String,
    pub(super) facts: Vec<String>,
    pub(super) advice: Vec<String>,
}

/// The plain-language summary of a handoff package at `now_ms`.
pub(super) fn summary(p: &HandoffPackage, now_ms: i64) -> Summary {
    summary_with(p, now_ms, None)
}

/// [`summary`], told whether the engine is running: an operation that waits for the engine
/// says when its next check is due, and one whose check is overdue (or that waits while no
/// recoverer worker is alive) says so instead of "the engine is still verifying it".
pub(super) fn summary_with(
    p: &HandoffPackage,
    now_ms: i64,
    engine: Option<&EngineHealth>,
) -> Summary {
    let what = action(&p.action);
    let b = &p.budget;
    let attempts = format!("{} of {} attempts used", b.attempts_used, b.max_attempts);
    let lookups: Vec<&EvidenceSummary> = p.evidence.iter().filter(|e| is_lookup(e)).collect();
    let found_nothing = match (lookups.first(), lookups.last()) {
        (Some(first), Some(last)) if last.at_ms - first.at_ms >= 1000 => Some(format!(
            "lookups found nothing for {} ({} of {} lookups used)",
            age(last.at_ms - first.at_ms),
            b.queries_used,
            b.max_queries
        )),
        (Some(_), Some(_)) => Some(format!(
            "lookups found nothing ({} of {} lookups used)",
            b.queries_used, b.max_queries
        )),
        _ if b.queries_used > 0 => Some(format!(
            "lookups found nothing ({} of {} used)",
            b.queries_used, b.max_queries
        )),
        _ => None,
    };
    let headline = match p.state {
        State::ManualReview => match p.last_result {
            Some(State::Unknown) | Some(State::InFlight) | Some(State::Processing) | None => {
                format!("The vendor may have carried out “{what}”: a person must decide")
            }
            Some(State::Prepared) => format!("“{what}” was never sent: a person must decide"),
            Some(State::RetryReady) => {
                format!("“{what}” was not executed and is waiting: a person must decide")
            }
            Some(s) => format!("“{what}” ended {}: a person must confirm", state(s)),
        },
        State::Unknown => {
            format!("The vendor may have carried out “{what}”; the engine is still verifying it")
        }
        State::Processing => {
            format!("The vendor accepted “{what}” and has not finished it yet")
        }
        State::InFlight => format!("“{what}” is being sent now"),
        State::Prepared => format!("“{what}” is recorded and has not been sent"),
        State::RetryReady => {
            format!("“{what}” was proven not executed and will be sent again with the same key")
        }
        State::Succeeded => match &p.remote_ref {
            Some(r) => format!("Done: “{what}” succeeded at the vendor ({r})"),
            None => format!("Done: “{what}” succeeded at the vendor"),
        },
        State::Rejected => format!("“{what}” was refused by the vendor with no side effect"),
    };
    let headline = match engine.and_then(|e| engine_stopped(e, p, now_ms)) {
        Some(stopped) => match p.state {
            State::Unknown => format!("The vendor may have carried out “{what}”; {stopped}"),
            State::Processing => {
                format!("The vendor accepted “{what}” and has not finished it; {stopped}")
            }
            State::RetryReady => format!(
                "“{what}” was proven not executed and waits to be sent again with the same key; \
                 {stopped}"
            ),
            State::Prepared => format!("“{what}” is recorded and has not been sent; {stopped}"),
            _ => headline,
        },
        None => headline,
    };
    let mut facts = Vec::new();
    if let Some(next) = engine.and_then(|e| e.next_check(p.state, p.next_check_ms)) {
        facts.push(next);
    }
    if let Some(last) = p
        .attempts
        .last()
        .and_then(|a| a.result.as_ref().map(|r| (a, r)))
    {
        facts.push(format!(
            "the last attempt, sent {} ago: {}",
            age(now_ms - last.0.registered_ms),
            evidence(last.1)
        ));
    }
    let mut counts = vec![attempts];
    if let Some(f) = found_nothing
        && !matches!(p.state, State::Succeeded | State::Rejected)
    {
        counts.insert(0, f);
    }
    facts.push(counts.join("; "));
    // Why it was handed over: the escalation's note (a claim overwrites the row's reason).
    let escalation = p
        .evidence
        .iter()
        .rev()
        .find(|e| {
            !e.kind.starts_with("review")
                && matches!(e.transition, Some((_, Some(State::ManualReview))))
        })
        .and_then(|e| e.note.clone());
    match (escalation, &p.reason) {
        (Some(n), _) => facts.push(format!("handed to a person because: {n}")),
        (None, Some(r)) if !r.starts_with("claimed by") => {
            facts.push(format!("recorded reason: {r}"));
        }
        _ => {}
    }
    if p.state.is_terminal()
        && let Some(n) = p
            .evidence
            .iter()
            .rev()
            .find(|e| e.kind == DECISION_KIND)
            .and_then(|e| e.note.as_deref())
    {
        facts.push(format!("decision: {n}"));
    }
    match last_claim(p) {
        Some((who, at, _)) if !p.state.is_terminal() => facts.push(format!(
            "claimed by {who} {} ago: automatic sends are stopped",
            age(now_ms - at)
        )),
        None if p.state == State::ManualReview => {
            facts.push("nobody has claimed it yet; automatic sends are stopped".to_owned())
        }
        _ => {}
    }
    if let Some(w) = &p.authorization.write_denied {
        facts.push(format!("writes are not authorized now: {w}"));
    }
    let mut advice = Vec::new();
    if p.state == State::ManualReview {
        advice.push(
            "Look the request up at the vendor (by the operation id, or by the idempotency key \
             it carried: shown under the request)."
                .to_owned(),
        );
        advice.push(
            "Found it: resolve as succeeded with the vendor's reference. Sure it never happened: \
             resolve as not executed and re-approve it (it is sent again with the same key and \
             bytes). Not sure: keep it pending."
                .to_owned(),
        );
        advice.push("Never create it again by hand: that is how duplicates happen.".to_owned());
    } else if matches!(
        p.state,
        State::Unknown | State::Processing | State::InFlight
    ) {
        advice.push(claim_advice(
            engine.map_or_else(|| grace_for(&[], now_ms), |e| e.grace_ms),
        ));
    }
    Summary {
        headline,
        facts: facts.into_iter().map(capitalized).collect(),
        advice,
    }
}

/// Why nothing moves an operation that waits for the engine, if nothing does: its check is
/// overdue, or every recoverer worker that reported has stopped.
fn engine_stopped(engine: &EngineHealth, p: &HandoffPackage, now_ms: i64) -> Option<String> {
    if engine.is_overdue(p.state, p.next_check_ms) {
        let late = now_ms - p.next_check_ms.unwrap_or(now_ms);
        return Some(format!(
            "its check is overdue by {} and nobody is verifying it",
            age(late)
        ));
    }
    // With no heartbeat ever recorded, a worker of an older version may still run: the
    // header's alarm says so, the row is called stopped only once its check is overdue.
    (WAITING_STATES.contains(&p.state) && engine.alive == 0 && !engine.workers.is_empty())
        .then(|| "no recoverer worker is alive to verify it".to_owned())
}

fn capitalized(s: String) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) if first.is_lowercase() => first.to_uppercase().chain(c).collect(),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_times_read_like_a_person_writes_them() {
        // The command line's formatter (`crate::text::format_age`), not a second one.
        assert_eq!(age(45_000), "45s");
        assert_eq!(age(12 * 60_000 + 5_000), "12m 5s");
        assert_eq!(age(3 * 3_600_000), "3h 0m");
        assert_eq!(age(3 * 3_600_000 + 5 * 60_000), "3h 5m");
        assert_eq!(age(2 * 86_400_000 + 4 * 3_600_000), "2d 4h");
        assert_eq!(age(-5), "0ms");
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_796_080_204_000), "2026-11-30 23:10:04 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(clock(1_796_080_204_000), "23:10:04");
        assert_eq!(action("create_ticket"), "create ticket");
    }
}
