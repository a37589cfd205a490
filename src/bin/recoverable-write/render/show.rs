//! `show` of a readable operation: what it is, why it is stuck, its request (redacted), budget,
//! attempts, timeline and audit trail, and the commands that act on it.

use std::fmt::Write as _;

use recoverable_write::contradiction::CONTRADICTION;
use recoverable_write::evidence::Evidence;
use recoverable_write::ledger::QUARANTINE_RELEASED;
use recoverable_write::operator::{
    self, AuditEntry, Explanation, describe_evidence, format_age, format_time,
};
use recoverable_write::retention::RetentionDates;
use recoverable_write::review::{self, EvidenceSummary, HandoffPackage};
use recoverable_write::state::State;

use super::table;

/// `show` of a readable operation, section by section; `cmd` is how the printed commands start
/// (`recoverable-write [--ledger …] --tenant T`, see [`super::command_prefix`]).
pub(crate) fn show(
    pkg: &HandoffPackage,
    e: &Explanation,
    audit: &[AuditEntry],
    now_ms: i64,
    cmd: &str,
) -> String {
    let mut out = String::new();
    let o = &mut out;
    identity(o, pkg);
    contradiction(o, pkg, cmd);
    vendor_ref_and_late_success(o, pkg, cmd);
    explanation(o, e);
    request(o, pkg);
    budget_and_times(o, pkg, now_ms);
    attempts(o, pkg);
    evidence(o, pkg);
    audit_trail(o, audit);
    next_commands(o, pkg, cmd);
    out
}

/// What the operation is, its state and what that state means.
fn identity(o: &mut String, pkg: &HandoffPackage) {
    let _ = writeln!(
        o,
        "operation  {}  (tenant {}, action {}, intent {})",
        pkg.operation_id, pkg.tenant, pkg.action, pkg.intent_ref
    );
    // The result kept in review is the state the vendor's answers had led to. When no attempt
    // can have reached the vendor (refused connections), there is no vendor result to name.
    let last = match pkg.last_result.filter(|l| *l != pkg.state) {
        Some(l @ (State::Succeeded | State::Rejected | State::Processing)) => {
            format!(", last result {l}")
        }
        Some(_) if !pkg.may_have_applied => ", no attempt reached the vendor".to_owned(),
        Some(l @ State::Unknown) => format!(", last result {l}"),
        Some(_) => ", no result recorded".to_owned(),
        None => String::new(),
    };
    let _ = writeln!(
        o,
        "state      {}{last}  version {}  generation {}",
        pkg.state, pkg.version, pkg.generation
    );
    let _ = writeln!(o, "           {}", operator::meaning(pkg));
}

/// A contradicted final state: since when, what to do, and the contradicting entries.
fn contradiction(o: &mut String, pkg: &HandoffPackage, cmd: &str) {
    if let Some(at) = pkg.contradiction_ms {
        let _ = writeln!(
            o,
            "CONTRADICTED since {}: the vendor said something after this final state that \
             contradicts it (the caller was told {}). Check at the vendor (a second object, a \
             charge to refund), then:\n   {cmd} acknowledge {} --version {} --reviewer YOU \
             --reason \"…\"",
            format_time(at),
            pkg.state,
            super::quote(pkg.operation_id.as_str()),
            pkg.version
        );
        for e in pkg.evidence.iter().filter(|e| e.kind == CONTRADICTION) {
            let _ = writeln!(
                o,
                "  {}  {}",
                format_time(e.at_ms),
                e.note.as_deref().unwrap_or("-")
            );
        }
    }
}

/// The vendor's reference; a success reported after the escalation comes first, with the
/// resolution it offers.
fn vendor_ref_and_late_success(o: &mut String, pkg: &HandoffPackage, cmd: &str) {
    let late_success = review::late_success(&pkg.evidence);
    if let Some(r) = &pkg.remote_ref {
        let _ = writeln!(o, "vendor ref {r}");
    } else if let Some(Evidence::Succeeded {
        remote_ref: Some(r),
    }) = late_success.and_then(|l| l.evidence.as_ref())
    {
        let _ = writeln!(o, "vendor ref {r} (reported late; not confirmed yet)");
    }
    // A late success settles the question: it comes first, with the resolution it offers.
    if let Some(l) = late_success
        && pkg.state == State::ManualReview
    {
        let reference = match &l.evidence {
            Some(Evidence::Succeeded {
                remote_ref: Some(r),
            }) => format!(" --remote-ref {}", super::quote(r)),
            _ => " --no-reference".to_owned(),
        };
        let _ = writeln!(
            o,
            "\n!! the vendor reported success after the escalation (entry #{}): resolve it as \
             succeeded after checking the reference:\n   {cmd} resolve {} \
             succeeded{reference} --version {} --reviewer YOU --reason \"…\"",
            l.seq,
            super::quote(pkg.operation_id.as_str()),
            pkg.version
        );
    }
}

/// Why it is stuck and what the engine would do next.
fn explanation(o: &mut String, e: &Explanation) {
    let _ = writeln!(o, "\n{}", e.headline);
    if !e.warnings.is_empty() {
        o.push('\n');
        for w in &e.warnings {
            let _ = writeln!(o, "!! {w}");
        }
    }
    let _ = writeln!(o, "\nwhy");
    for w in &e.why {
        let _ = writeln!(o, "  - {w}");
    }
    let _ = writeln!(o, "\nwhat the engine would do next\n  {}", e.next);
}

/// The request, redacted: no credential, no body value.
fn request(o: &mut String, pkg: &HandoffPackage) {
    let p = &pkg.parameters;
    let _ = writeln!(o, "\nrequest (redacted: no credential, no body value)");
    let _ = writeln!(o, "  {} {}", p.method, p.url);
    let _ = writeln!(o, "  contract  {}", p.contract);
    match &p.key_placement {
        Some(at) => {
            let _ = writeln!(o, "  key       {} (sent in the {at})", p.idempotency_key);
        }
        None => {
            let _ = writeln!(
                o,
                "  key       {} (where it was sent: give --contracts to know)",
                p.idempotency_key
            );
        }
    }
    let _ = match &p.vendor_reference {
        Some(r) if r.confirmed => writeln!(o, "  vendor    {} (named by {})", r.value, r.source),
        Some(r) => writeln!(
            o,
            "  vendor    {} (named by {}; not confirmed)",
            r.value, r.source
        ),
        None => writeln!(
            o,
            "  vendor    no reference: no answer or callback named the object"
        ),
    };
    let _ = writeln!(
        o,
        "  lookup    {}",
        p.vendor_lookup
            .as_deref()
            .unwrap_or("how the contract looks it up: give --contracts to know")
    );
    let _ = writeln!(
        o,
        "  headers   {}",
        if p.header_names.is_empty() {
            "-".to_owned()
        } else {
            p.header_names.join(", ")
        }
    );
    let fields = if p.body_fields.is_empty() {
        String::new()
    } else {
        format!(", fields {}", p.body_fields.join(", "))
    };
    let _ = writeln!(o, "  body      {} bytes{fields}", p.body_bytes);
    let _ = writeln!(o, "  payload   {}", p.payload_hash);
}

/// The budget, the authorization, the times.
fn budget_and_times(o: &mut String, pkg: &HandoffPackage, now_ms: i64) {
    let b = &pkg.budget;
    let window = match b.deadline_ms {
        Some(d) if d <= now_ms => format!(
            ", window ended {} ({} ago)",
            format_time(d),
            format_age(now_ms - d)
        ),
        Some(d) => format!(
            ", window ends {} (in {})",
            format_time(d),
            format_age(d - now_ms)
        ),
        None => String::new(),
    };
    let _ = writeln!(
        o,
        "\nbudget     attempts {}/{}, lookups {}/{}{window}",
        b.attempts_used, b.max_attempts, b.queries_used, b.max_queries
    );
    let allowed = |d: &Option<String>| match d {
        None => "allowed".to_owned(),
        Some(r) => format!("DENIED ({r})"),
    };
    let _ = writeln!(
        o,
        "authorization  writes {}, lookups {} (as this tool sees it: it has no application \
         authorizer)",
        allowed(&pkg.authorization.write_denied),
        allowed(&pkg.authorization.query_denied)
    );
    if pkg.created_ms > 0 {
        let _ = writeln!(
            o,
            "created    {} ({} ago), last change {} ({} ago)",
            format_time(pkg.created_ms),
            format_age(now_ms - pkg.created_ms),
            format_time(pkg.updated_ms),
            format_age(now_ms - pkg.updated_ms)
        );
    }
    if let Some(n) = pkg.next_check_ms {
        let _ = writeln!(o, "next check {}", format_time(n));
    }
}

/// Every attempt sent and its result.
fn attempts(o: &mut String, pkg: &HandoffPackage) {
    let _ = writeln!(o, "\nattempts ({})", pkg.attempts.len());
    for (i, a) in pkg.attempts.iter().enumerate() {
        let result = a
            .result
            .as_ref()
            .map_or_else(|| "no result recorded".to_owned(), describe_evidence);
        let _ = writeln!(
            o,
            "  #{} {}  generation {}  sent {}  -> {result}",
            i + 1,
            a.attempt_id,
            a.generation,
            format_time(a.registered_ms)
        );
    }
}

/// The evidence timeline, counted from the operation's creation.
fn evidence(o: &mut String, pkg: &HandoffPackage) {
    let _ = writeln!(o, "\ntimeline");
    let start = if pkg.created_ms > 0 {
        pkg.created_ms
    } else {
        pkg.evidence.first().map_or(0, |e| e.at_ms)
    };
    timeline(o, &pkg.evidence, start);
}

/// Who did what, when, why, on which version.
fn audit_trail(o: &mut String, audit: &[AuditEntry]) {
    let _ = writeln!(o, "\naudit (who, when, why, version)");
    if audit.is_empty() {
        let _ = writeln!(o, "  no review action yet");
    }
    for a in audit {
        let versions = match (a.from_version, a.to_version) {
            (Some(f), Some(t)) => format!("version {f} -> {t}"),
            (Some(f), None) => format!("version {f}, unchanged"),
            _ => "version not recorded".to_owned(),
        };
        let _ = writeln!(
            o,
            "  {}  {}  {}  ({versions})  reason: {}",
            format_time(a.at_ms),
            a.who.as_deref().unwrap_or("?"),
            a.action,
            a.reason.as_deref().unwrap_or("not given")
        );
    }
}

/// The commands that act on an unfinished operation's current version, each one runnable as
/// printed (`YOU` and the reason aside): alternatives, never a sequence, since each action
/// advances the version.
fn next_commands(o: &mut String, pkg: &HandoffPackage, cmd: &str) {
    if pkg.state.is_terminal() {
        return;
    }
    let op = super::quote(pkg.operation_id.as_str());
    let v = pkg.version;
    let tail = format!("--version {v} --reviewer YOU --reason \"…\"");
    let _ = writeln!(
        o,
        "\nto act on version {v} (one of these; each advances the version, so `show` again \
         before the next; --reviewer and --reason are recorded):"
    );
    let claim = operator::current_claim(pkg);
    if pkg.state != State::ManualReview || claim.is_none() {
        let _ = writeln!(o, "  {cmd} claim {op} {tail}");
    } else if let Some(c) = &claim {
        let _ = writeln!(
            o,
            "  {cmd} claim {op} --take-over {tail}    (held by {})",
            c.who.as_deref().unwrap_or("another reviewer")
        );
    }
    if pkg.state == State::ManualReview {
        let _ = writeln!(
            o,
            "  {cmd} resolve {op} succeeded --remote-ref REF {tail}\n  {cmd} resolve {op} \
             succeeded --no-reference {tail}\n  {cmd} resolve {op} not-executed --reapprove \
             {tail}\n  {cmd} resolve {op} keep-pending {tail}"
        );
    }
}

/// The evidence timeline, times counted from `start`.
pub(super) fn timeline(o: &mut String, evidence: &[EvidenceSummary], start: i64) {
    let cells: Vec<Vec<String>> = evidence
        .iter()
        .map(|ev| {
            let transition = match ev.transition {
                Some((from, to)) => {
                    let s = |x: Option<State>| x.map_or("", State::as_str);
                    if from == to {
                        s(to).to_owned()
                    } else {
                        format!("{} -> {}", s(from), s(to)).trim().to_owned()
                    }
                }
                None => String::new(),
            };
            let mut what = Vec::new();
            if ev.kind == "late_evidence" {
                what.push("LATE".to_owned());
            }
            if ev.kind == "review_claimed" || ev.kind == "review" || ev.kind == QUARANTINE_RELEASED
            {
                what.push("AUDIT".to_owned());
            }
            let described = ev.evidence.as_ref().map(describe_evidence);
            if let Some(d) = &described {
                what.push(d.clone());
            }
            if let Some(n) = &ev.note
                && !n.is_empty()
                && !described.as_ref().is_some_and(|d| d.contains(n.as_str()))
            {
                what.push(format!("({n})"));
            }
            vec![
                ev.seq.to_string(),
                format_time(ev.at_ms),
                format!("+{}", format_age(ev.at_ms - start)),
                ev.kind.clone(),
                transition,
                format!("g{}", ev.generation),
                what.join(" "),
            ]
        })
        .collect();
    for line in table(
        &[
            "SEQ",
            "TIME",
            "SINCE",
            "KIND",
            "TRANSITION",
            "GEN",
            "EVIDENCE / NOTE",
        ],
        &cells,
    )
    .lines()
    {
        let _ = writeln!(o, "  {line}");
    }
}

/// The retention line of `show`.
pub(crate) fn retention(dates: Option<&RetentionDates>) -> String {
    let line = dates.map_or_else(
        || RetentionDates::UNFINISHED.to_owned(),
        RetentionDates::describe,
    );
    format!("\nretention  {line}\n")
}
