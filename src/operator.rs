//! Plain-language views of an operation for the people who own stuck work: what it is waiting
//! for, why it is stuck, what the engine would do next, who did what (the audit trail) and
//! which evidence arrived after a person took it over.
//!
//! Everything here is a pure function over a [`HandoffPackage`] (already redacted: no
//! credential, no body value), shared by the command line (feature `cli`) and the review page.
//!
//! ```
//! use recoverable_write::operator::{format_age, parse_duration};
//! use std::time::Duration;
//!
//! assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
//! assert_eq!(format_age(754_000), "12m 34s");
//! ```

use serde::Serialize;

use crate::evidence::{ConflictKind, Evidence};
use crate::reconcile::EngineHealth;
use crate::review::{EvidenceSummary, HandoffPackage};
use crate::state::State;
use crate::text::plural;
pub use crate::text::{
    ParseDurationError, format_age, format_duration, format_time, parse_duration,
};

/// What a state means to the person who owns the queue (one sentence each).
pub fn state_meaning(state: State) -> &'static str {
    match state {
        State::Prepared => {
            "recorded, never sent: the caller (or, if it crashed, the recoverer) sends it once"
        }
        State::InFlight => {
            "an attempt holds send rights under a lease: its bytes may be on the wire right now"
        }
        State::Processing => {
            "the vendor accepted the write and has not finished it: the engine polls it"
        }
        State::Unknown => {
            "the vendor may or may not have done it: the engine asks the vendor before anything \
             is sent again; never create it again by hand"
        }
        State::RetryReady => {
            "proven safe to send again with the same key and bytes: the engine will resend it"
        }
        State::Succeeded => "done: the vendor did it (terminal)",
        State::Rejected => "refused by the vendor with no side effect (terminal)",
        State::ManualReview => {
            "evidence ran out: automatic sends are revoked and a person must decide"
        }
    }
}

/// What the state of `pkg` means, in one sentence: [`state_meaning`], except for an operation
/// a reviewer took into `MANUAL_REVIEW` by claiming it (from `UNKNOWN`, say), where evidence did
/// not run out: a person stopped the engine.
pub fn meaning(pkg: &HandoffPackage) -> &'static str {
    if pkg.state == State::ManualReview && claimed_into_review(&pkg.evidence) {
        return "a reviewer took it over: automatic sends are revoked and a person decides";
    }
    state_meaning(pkg.state)
}

/// Whether the latest entry that moved the operation into `MANUAL_REVIEW` was a reviewer's
/// claim rather than the engine's escalation.
fn claimed_into_review(evidence: &[EvidenceSummary]) -> bool {
    evidence
        .iter()
        .rev()
        .find(|e| {
            matches!(e.transition, Some((from, Some(State::ManualReview))) if from != Some(State::ManualReview))
        })
        .is_some_and(|e| e.kind == "review_claimed")
}

/// One observation in a few words: `succeeded (W731)`, `unknown: HTTP 504 Gateway Timeout`.
pub fn describe_evidence(e: &Evidence) -> String {
    match e {
        Evidence::Succeeded { remote_ref } => match remote_ref {
            Some(r) => format!("succeeded ({r})"),
            None => "succeeded (no reference)".to_owned(),
        },
        Evidence::Processing {
            retry_after,
            remote_ref,
        } => {
            let mut s = "processing".to_owned();
            if let Some(r) = remote_ref {
                s.push_str(&format!(" ({r})"));
            }
            if let Some(d) = retry_after {
                s.push_str(&format!(" (retry after {})", format_duration(*d)));
            }
            s
        }
        Evidence::Rejected { reason } => format!("rejected: {reason}"),
        Evidence::NotExecuted { why, .. } => format!("not executed: {why}"),
        Evidence::Unknown { why, .. } => format!("unknown: {why}"),
        Evidence::Conflict {
            conflict: ConflictKind::Mismatch,
        } => "conflict: the key was used with another payload".to_owned(),
        Evidence::Conflict {
            conflict: ConflictKind::InFlight,
        } => "conflict: the vendor is still processing the same key".to_owned(),
        // `Evidence` is non-exhaustive: a newer kind still shows its label.
        #[allow(unreachable_patterns)]
        other => other.label().to_owned(),
    }
}

/// One review action read back from the evidence log (kinds `review_claimed`, `review` and
/// `quarantine_released`, written by [`Reviews`](crate::Reviews) in one fixed wording).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditEntry {
    /// Position in the evidence log.
    pub seq: i64,
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
    /// Who acted (the reviewer), when the note names them.
    pub who: Option<String>,
    /// What they did (`claimed`, `confirmed succeeded (W731)`, `kept pending`, ...).
    pub action: String,
    /// The version they acted on.
    pub from_version: Option<u64>,
    /// The version their action produced (`None`: unchanged, or not recorded).
    pub to_version: Option<u64>,
    /// Why, as they said.
    pub reason: Option<String>,
}

impl AuditEntry {
    /// The audit entry of an evidence entry, if it is a review action.
    pub fn parse(e: &EvidenceSummary) -> Option<Self> {
        if e.kind != "review_claimed"
            && e.kind != "review"
            && e.kind != crate::ledger::QUARANTINE_RELEASED
            && e.kind != crate::contradiction::CONTRADICTION_ACKNOWLEDGED
        {
            return None;
        }
        let note = e.note.as_deref().unwrap_or_default();
        let (head, reason) = match note.split_once("; reason: ") {
            Some((h, r)) => (h, Some(r.to_owned())),
            None => (note, None),
        };
        let (head, version) = match head.split_once("; version ") {
            Some((h, v)) => (h, Some(v)),
            None => (head, None),
        };
        let (from_version, to_version) = match version {
            Some(v) => match v.split_once(" -> ") {
                Some((a, b)) => (a.trim().parse().ok(), b.trim().parse().ok()),
                None => (v.trim_end_matches("(unchanged)").trim().parse().ok(), None),
            },
            None => (None, None),
        };
        let (action, who) = match head.rsplit_once(" by ") {
            Some((a, w)) => (a.to_owned(), Some(w.to_owned())),
            None => (head.to_owned(), None),
        };
        Some(Self {
            seq: e.seq,
            at_ms: e.at_ms,
            who,
            action,
            from_version,
            to_version,
            reason,
        })
    }
}

/// Every review action on the operation, oldest first.
pub fn audit_trail(pkg: &HandoffPackage) -> Vec<AuditEntry> {
    pkg.evidence.iter().filter_map(AuditEntry::parse).collect()
}

/// Evidence that arrived when it could no longer change the operation: a response or a lookup
/// answer after a person claimed it or after it went to review (kind `late_evidence`). It may
/// settle the question (a late success means the vendor did it), so show it first.
pub fn late_evidence(pkg: &HandoffPackage) -> Vec<&EvidenceSummary> {
    pkg.evidence
        .iter()
        .filter(|e| e.kind == "late_evidence")
        .collect()
}

/// The claim that holds the operation now, if any (the latest claim or take-over that put it in
/// review, until a resolution).
pub fn current_claim(pkg: &HandoffPackage) -> Option<AuditEntry> {
    crate::review::claim_holder(pkg.state, &pkg.evidence).and_then(AuditEntry::parse)
}

/// The plain-language summary of one operation. See [`explain`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// Where it stands, in one sentence.
    pub headline: String,
    /// The facts behind it: budget used, what lookups found, for how long, who holds it.
    pub why: Vec<String>,
    /// What the engine would do next on its own.
    pub next: String,
    /// What needs attention before anything else: late evidence, denied permissions, the
    /// warning not to create the write again by hand.
    pub warnings: Vec<String>,
}

/// Explains `pkg` at `now_ms` (ms since the Unix epoch): "the vendor may have created this;
/// 4 lookups over 12m found nothing; 1 of 3 attempts used". Without the engine's health it
/// assumes the engine is running: see [`explain_with_engine`].
pub fn explain(pkg: &HandoffPackage, now_ms: i64) -> Explanation {
    explain_with_engine(pkg, now_ms, None)
}

/// [`explain`], told whether the engine is running ([`EngineHealth::read`] at `now_ms`): an
/// operation that waits for the engine says when its next check is due ("next check due in
/// 12s", "next check overdue by 4m 10s"); one whose check is overdue, or that waits while
/// every recoverer worker that reported has stopped, says so in its headline instead of "the
/// engine is verifying it", and the engine's alarm comes first among the warnings.
pub fn explain_with_engine(
    pkg: &HandoffPackage,
    now_ms: i64,
    engine: Option<&EngineHealth>,
) -> Explanation {
    let mut e = explain_alone(pkg, now_ms);
    let Some(engine) = engine else {
        return e;
    };
    let waits = crate::reconcile::health::WAITING_STATES.contains(&pkg.state);
    if let Some(next) = engine.next_check(pkg.state, pkg.next_check_ms) {
        e.why.push(next);
    }
    let stopped = if engine.is_overdue(pkg.state, pkg.next_check_ms) {
        Some(format!(
            "its check is overdue by {}: the engine is not looking at it",
            format_age(now_ms - pkg.next_check_ms.unwrap_or(now_ms))
        ))
    } else if waits && engine.alive == 0 && !engine.workers.is_empty() {
        // With no heartbeat ever recorded, a worker of an older version may still run: the
        // alarm says so, the operation is called stopped only once its check is overdue.
        Some("no recoverer worker is alive to move it".to_owned())
    } else {
        None
    };
    if let Some(stopped) = stopped {
        let action = format!("write ({})", pkg.action);
        e.headline = match pkg.state {
            State::Unknown => format!(
                "Result unknown: the vendor may or may not have done this {action}; {stopped}."
            ),
            State::Processing => {
                format!("The vendor accepted this {action} and has not finished it; {stopped}.")
            }
            State::RetryReady => format!(
                "This {action} is proven safe to send again with the same key and bytes; \
                 {stopped}."
            ),
            State::Prepared => format!("This {action} is recorded and was never sent; {stopped}."),
            _ => e.headline,
        };
    }
    if waits && let Some(alarm) = engine.alarm() {
        e.warnings.insert(0, alarm);
    }
    e
}

fn explain_alone(pkg: &HandoffPackage, now_ms: i64) -> Explanation {
    let action = format!("write ({})", pkg.action);
    let claim = current_claim(pkg);
    let headline = match pkg.state {
        State::ManualReview => match &claim {
            Some(c) => format!(
                "Waiting for a person, claimed by {} {} ago: the engine has stopped and will not \
                 send this {action} again on its own.",
                c.who.as_deref().unwrap_or("a reviewer"),
                format_age(now_ms - c.at_ms)
            ),
            None => format!(
                "Waiting for a person (unclaimed): the engine has stopped and will not send this \
                 {action} again on its own."
            ),
        },
        State::Unknown => format!(
            "Result unknown: the vendor may or may not have done this {action}; the engine is \
             verifying it."
        ),
        State::Processing => format!(
            "The vendor accepted this {action} and has not finished it; the engine is polling."
        ),
        State::InFlight => format!("An attempt of this {action} is on the wire."),
        State::Prepared => format!("This {action} is recorded and was never sent."),
        State::RetryReady => format!(
            "This {action} is proven safe to send again with the same key and bytes; waiting \
             for the engine."
        ),
        State::Succeeded => match &pkg.remote_ref {
            Some(r) => format!("Done: the vendor did this {action} ({r})."),
            None => format!("Done: the vendor did this {action}."),
        },
        State::Rejected => {
            format!("The vendor refused this {action}; it had no side effect.")
        }
    };

    let mut why = Vec::new();
    if let Some(reason) = &pkg.reason
        && !pkg.state.is_terminal()
    {
        why.push(format!("last reason recorded: {reason}"));
    }
    if pkg.may_have_applied && pkg.state.is_terminal() {
        why.push(
            "an attempt may have reached the vendor before this final state was known (a \
             response was lost, timed out or was unclear)"
                .to_owned(),
        );
    } else if pkg.may_have_applied {
        why.push(format!(
            "the vendor may have done it: an attempt may have reached it (a response was lost, \
             timed out or was unclear), so a new {action} could be a duplicate"
        ));
    } else if pkg.budget.attempts_used > 0 && !pkg.state.is_terminal() {
        why.push(
            "no attempt can have reached the vendor (every send failed before delivery)".into(),
        );
    }
    why.push(format!(
        "{} of {} write attempts used",
        pkg.budget.attempts_used, pkg.budget.max_attempts
    ));
    let lookups: Vec<&EvidenceSummary> =
        pkg.evidence.iter().filter(|e| e.kind == "lookup").collect();
    let found = lookups.iter().any(|e| {
        matches!(
            e.evidence,
            Some(
                Evidence::Succeeded { .. }
                    | Evidence::Rejected { .. }
                    | Evidence::NotExecuted { .. }
            )
        )
    });
    match (lookups.first(), lookups.last()) {
        (Some(first), Some(last)) if !found => why.push(format!(
            "{} of {} lookups used: {} over {} found nothing conclusive (last: {})",
            pkg.budget.queries_used,
            pkg.budget.max_queries,
            plural(lookups.len(), "lookup"),
            format_age(last.at_ms - first.at_ms),
            last.evidence
                .as_ref()
                .map_or_else(|| "no answer".to_owned(), describe_evidence)
        )),
        (_, Some(last)) => why.push(format!(
            "{} of {} lookups used (last: {})",
            pkg.budget.queries_used,
            pkg.budget.max_queries,
            last.evidence
                .as_ref()
                .map_or_else(|| "no answer".to_owned(), describe_evidence)
        )),
        _ => why.push(format!(
            "{} of {} lookups used",
            pkg.budget.queries_used, pkg.budget.max_queries
        )),
    }
    if let Some(deadline) = pkg.budget.deadline_ms
        && !pkg.state.is_terminal()
    {
        if deadline <= now_ms {
            why.push(format!(
                "the recovery window ended {} ago",
                format_age(now_ms - deadline)
            ));
        } else {
            why.push(format!(
                "the recovery window ends in {}",
                format_age(deadline - now_ms)
            ));
        }
    }
    if pkg.created_ms > 0 {
        why.push(format!(
            "created {} ago, last changed {} ago",
            format_age(now_ms - pkg.created_ms),
            format_age(now_ms - pkg.updated_ms)
        ));
    }

    let when = |at: Option<i64>| match at {
        Some(t) if t > now_ms => format!("in {} ({})", format_age(t - now_ms), format_time(t)),
        Some(t) => format!("now (due since {})", format_time(t)),
        None => "at its next pass".to_owned(),
    };
    let next = match pkg.state {
        State::ManualReview => "Nothing on its own: automatic sends are revoked. Late responses \
                                and lookup answers are still recorded as evidence, never acted \
                                on. A person decides: confirmed succeeded (with the vendor's \
                                reference), confirmed not executed and re-approved (the engine \
                                then resends with the same key and bytes), or keep pending."
            .to_owned(),
        State::Unknown => format!(
            "Ask the vendor again {}; it resends only with proof that the write was not \
             executed or under a contract that makes a same-key replay safe. When lookups or \
             the window run out it hands the operation to a person (MANUAL_REVIEW).",
            when(pkg.next_check_ms)
        ),
        State::Processing => format!(
            "Poll the vendor again {}; when the recovery window ends, hand it to a person.",
            when(pkg.next_check_ms)
        ),
        State::InFlight => format!(
            "Record the attempt's result; if none arrives before its lease ends{}, mark it \
             UNKNOWN and ask the vendor.",
            pkg.lease_until_ms
                .map(|l| format!(" ({})", format_time(l)))
                .unwrap_or_default()
        ),
        State::Prepared => "The caller sends it; if the caller crashed, the recoverer claims \
                            it and sends it once, with the operation's key."
            .to_owned(),
        State::RetryReady => format!(
            "Send it again with the same idempotency key and bytes (attempt {} of {}) {}.",
            pkg.budget.attempts_used + 1,
            pkg.budget.max_attempts,
            when(pkg.next_check_ms.max(pkg.lease_until_ms))
        ),
        State::Succeeded | State::Rejected => "Nothing: the operation is finished.".to_owned(),
    };

    let mut warnings = Vec::new();
    for late in late_evidence(pkg) {
        let what = late
            .evidence
            .as_ref()
            .map_or_else(|| "an observation".to_owned(), describe_evidence);
        let after = match pkg
            .evidence
            .iter()
            .filter(|e| e.seq < late.seq && e.kind == "review_claimed")
            .filter_map(AuditEntry::parse)
            .next_back()
        {
            Some(c) => format!(
                "after the claim by {}",
                c.who.as_deref().unwrap_or("a reviewer")
            ),
            None => "after automatic recovery stopped".to_owned(),
        };
        let mut w = format!(
            "LATE EVIDENCE {after}, at {}: {what}",
            format_time(late.at_ms)
        );
        if matches!(late.evidence, Some(Evidence::Succeeded { .. })) {
            w.push_str(" (the vendor did it: resolve it as succeeded, do not re-approve it)");
        }
        warnings.push(w);
    }
    if matches!(
        pkg.state,
        State::Unknown | State::Processing | State::InFlight | State::ManualReview
    ) && pkg.may_have_applied
    {
        warnings.push(format!(
            "Do not create this {action} again by hand: the vendor may already have it."
        ));
    }
    if let Some(denied) = &pkg.authorization.write_denied {
        warnings.push(format!("writes are denied now: {denied}"));
    }
    if let Some(denied) = &pkg.authorization.query_denied {
        warnings.push(format!("lookups are denied now: {denied}"));
    }
    Explanation {
        headline,
        why,
        next,
        warnings,
    }
}

/// Explains a quarantined operation ([`QuarantinePackage`](crate::review::QuarantinePackage))
/// at `now_ms`: what was set aside and why, and what to do (upgrade to a version that can read
/// it, then release it).
pub fn explain_quarantine(pkg: &crate::review::QuarantinePackage, now_ms: i64) -> Explanation {
    let action = pkg
        .action
        .as_deref()
        .map_or_else(|| "write".to_owned(), |a| format!("write ({a})"));
    let problem = crate::review::quarantine_problem(pkg);
    let headline = match (pkg.quarantined_ms, pkg.readable) {
        (Some(_), false) => format!(
            "Quarantined: this version cannot read this {action} ({problem}); the engine skips \
             it."
        ),
        (Some(_), true) => format!(
            "Quarantined, and readable now: this {action} was set aside ({problem}) and this \
             version reads it; release it to give it back to recovery."
        ),
        (None, _) => format!(
            "This version cannot read this {action} ({problem}); the next recovery pass that \
             meets it will quarantine it."
        ),
    };
    let mut why = Vec::new();
    if let Some(at) = pkg.quarantined_ms {
        why.push(format!(
            "quarantined {} ago ({})",
            format_age(now_ms - at),
            format_time(at)
        ));
    }
    why.push(format!("state as stored: {}", pkg.state));
    if let Some(r) = &pkg.last_result {
        why.push(format!("last result as stored: {r}"));
    }
    why.push(format!(
        "created {} ago, last changed {} ago",
        format_age(now_ms - pkg.created_ms),
        format_age(now_ms - pkg.updated_ms)
    ));
    let version = pkg.version.map_or_else(
        || "the version shown".to_owned(),
        |v| format!("version {v}"),
    );
    let next = if pkg.quarantined_ms.is_none() {
        "This version cannot claim, resolve or recover it. It was probably written by a newer \
         version (a rolling deploy) or changed by hand: upgrade to a version that can read it. \
         A recovery pass that meets it first quarantines it; release it then, once it reads."
            .to_owned()
    } else if pkg.readable {
        format!(
            "Nothing until it is released: no lookup, no send, no sweep. This version reads it: \
             release it at {version}, and the engine's next pass picks it up where it stopped."
        )
    } else {
        format!(
            "Nothing: no lookup, no send, no sweep, until it is released. It was probably \
             written by a newer version (a rolling deploy) or changed by hand: upgrade to a \
             version that can read it, then release it at {version}. Releasing re-reads it \
             first; while it cannot be read it stays quarantined."
        )
    };
    let warnings = vec![format!(
        "Do not create this {action} again by hand: its outcome is not known here, and the \
         vendor may already have it."
    )];
    Explanation {
        headline,
        why,
        next,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::{AuthorizationState, BudgetUsed, ParameterSummary};
    use std::time::Duration;

    #[test]
    fn durations_parse_and_format() {
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        for bad in ["", "10", "m", "10x", "-1m", "99999999999999999999w"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(format_age(-5), "0ms");
        assert_eq!(format_age(850), "850ms");
        assert_eq!(format_age(12_000), "12s");
        assert_eq!(format_age(754_000), "12m 34s");
        assert_eq!(format_age(3 * 3_600_000 + 5 * 60_000), "3h 5m");
        assert_eq!(format_age(2 * 86_400_000 + 4 * 3_600_000), "2d 4h");
    }

    #[test]
    fn times_format_in_utc() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(format_time(951_782_400_123), "2000-02-29 00:00:00.123Z");
        assert_eq!(format_time(1_796_079_969_000), "2026-11-30 23:06:09.000Z");
    }

    fn entry(seq: i64, kind: &str, note: &str) -> EvidenceSummary {
        EvidenceSummary {
            seq,
            at_ms: 1000 * seq,
            kind: kind.into(),
            transition: None,
            attempt_id: None,
            generation: 1,
            evidence: None,
            note: Some(note.into()),
        }
    }

    #[test]
    fn audit_notes_read_back() {
        let note = crate::review::audit_note(
            "claimed by alice",
            3,
            Some(4),
            Some("vendor console shows nothing; checking"),
        );
        let a = AuditEntry::parse(&entry(5, "review_claimed", &note)).unwrap();
        assert_eq!(a.who.as_deref(), Some("alice"));
        assert_eq!(a.action, "claimed");
        assert_eq!((a.from_version, a.to_version), (Some(3), Some(4)));
        assert_eq!(
            a.reason.as_deref(),
            Some("vendor console shows nothing; checking")
        );
        let note = crate::review::audit_note("kept pending by bob", 7, None, None);
        let a = AuditEntry::parse(&entry(6, "review", &note)).unwrap();
        assert_eq!(a.who.as_deref(), Some("bob"));
        assert_eq!(
            (a.from_version, a.to_version, a.reason),
            (Some(7), None, None)
        );
        assert!(AuditEntry::parse(&entry(7, "lookup", "x")).is_none());
    }

    fn package(state: State) -> HandoffPackage {
        HandoffPackage {
            tenant: crate::Tenant::new("t"),
            operation_id: crate::OperationId::new("op-1"),
            action: "create_ticket".into(),
            intent_ref: "i".into(),
            state,
            last_result: Some(State::Unknown),
            reason: Some("lookup budget exhausted".into()),
            version: 9,
            created_ms: 1_000,
            updated_ms: 50_000,
            next_check_ms: None,
            lease_until_ms: None,
            may_have_applied: true,
            generation: 4,
            remote_ref: None,
            contradiction_ms: None,
            parameters: ParameterSummary {
                method: "POST".into(),
                url: "http://v/tickets".into(),
                header_names: vec![],
                body_bytes: 10,
                body_fields: vec![],
                payload_hash: "h".into(),
                contract: "c@1".into(),
                idempotency_key: "k".into(),
                key_placement: None,
                vendor_reference: None,
                vendor_lookup: None,
            },
            attempts: vec![],
            evidence: vec![
                EvidenceSummary {
                    evidence: Some(Evidence::unknown("HTTP 404 Not Found")),
                    ..entry(2, "lookup", "")
                },
                EvidenceSummary {
                    evidence: Some(Evidence::unknown("HTTP 404 Not Found")),
                    ..entry(14, "lookup", "")
                },
                EvidenceSummary {
                    // A claim moves the operation into review (as the reviews API records it).
                    transition: Some((Some(State::Unknown), Some(State::ManualReview))),
                    ..entry(
                        20,
                        "review_claimed",
                        &crate::review::audit_note("claimed by bob", 8, Some(9), Some("on it")),
                    )
                },
                EvidenceSummary {
                    evidence: Some(Evidence::Succeeded {
                        remote_ref: Some("W731".into()),
                    }),
                    ..entry(21, "late_evidence", "late")
                },
            ],
            budget: BudgetUsed {
                attempts_used: 2,
                max_attempts: 3,
                queries_used: 2,
                max_queries: 2,
                deadline_ms: Some(30_000),
            },
            authorization: AuthorizationState {
                write_denied: None,
                query_denied: None,
            },
        }
    }

    #[test]
    fn explains_a_claimed_review_with_late_success() {
        let pkg = package(State::ManualReview);
        let e = explain(&pkg, 60_000);
        assert!(e.headline.contains("claimed by bob"), "{}", e.headline);
        assert!(
            e.why
                .iter()
                .any(|w| w.contains("2 of 3 write attempts used")),
            "{:?}",
            e.why
        );
        assert!(
            e.why
                .iter()
                .any(|w| w.contains("2 lookups over 12s found nothing conclusive")),
            "{:?}",
            e.why
        );
        assert!(e.why.iter().any(|w| w.contains("window ended 30s ago")));
        assert!(e.warnings[0].starts_with("LATE EVIDENCE after the claim by bob"));
        assert!(e.warnings[0].contains("succeeded (W731)"));
        assert!(e.warnings.iter().any(|w| w.contains("Do not create")));
        assert!(e.next.contains("A person decides"));
        assert_eq!(current_claim(&pkg).unwrap().who.as_deref(), Some("bob"));
        let done = explain(&package(State::Succeeded), 60_000);
        assert!(done.next.contains("finished"));
        assert!(current_claim(&package(State::Succeeded)).is_none());
    }
}
