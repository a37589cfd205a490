//! Text output of the command line. Every value shown comes from a listing row's columns or a
//! redacted [`HandoffPackage`]: no credential, and no body value but a resolving lookup's
//! answer with its secret fields `[redacted]`.

use std::fmt::Write as _;

use serde::Serialize;

use super::{QuarantinedRow, Row};
use crate::evidence::Evidence;
use crate::operation::OperationId;
use crate::operator::{
    AuditEntry, Explanation, describe_evidence, format_age, format_time, state_meaning,
};
use crate::review::{HandoffPackage, QuarantinePackage};
use crate::state::State;

/// Lays out `rows` under `header`, columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let last = cells.len() - 1;
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{cell:<w$}  ");
            }
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

pub(super) fn list(
    rows: &[Row],
    next: Option<&str>,
    skipped: &[String],
    all_tenants: bool,
) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str("no operations match\n");
    } else {
        let mut header = vec!["OPERATION"];
        if all_tenants {
            header.push("TENANT");
        }
        header.extend([
            "STATE", "AGE", "CHANGED", "ATTEMPTS", "LOOKUPS", "VERSION", "CONTRACT", "TARGET",
            "REF",
        ]);
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let mut c = vec![r.operation_id.clone()];
                if all_tenants {
                    c.push(r.tenant.clone());
                }
                c.extend([
                    // A contradicted final state says so where the eye reads the state.
                    match r.contradiction_ms {
                        Some(_) => format!("{} CONTRADICTED", r.state),
                        None => r.state.to_string(),
                    },
                    format_age(r.age_ms),
                    format!(
                        "{} ago",
                        format_age(r.age_ms - (r.updated_ms - r.created_ms))
                    ),
                    format!("{}/{}", r.attempts_used, r.max_attempts),
                    format!("{}/{}", r.queries_used, r.max_queries),
                    r.version.to_string(),
                    r.contract.clone(),
                    r.target.clone(),
                    r.remote_ref.clone().unwrap_or_else(|| "-".into()),
                ]);
                c
            })
            .collect();
        out.push_str(&table(&header, &cells));
    }
    for s in skipped {
        let _ = writeln!(out, "skipped (cannot be decoded): {s}");
    }
    if let Some(next) = next {
        let _ = writeln!(out, "more: add --cursor {next}");
    }
    out
}

pub(super) fn show(
    pkg: &HandoffPackage,
    e: &Explanation,
    audit: &[AuditEntry],
    now_ms: i64,
) -> String {
    let mut out = String::new();
    let o = &mut out;
    let _ = writeln!(
        o,
        "operation  {}  (tenant {}, action {}, intent {})",
        pkg.operation_id, pkg.tenant, pkg.action, pkg.intent_ref
    );
    let last = pkg
        .last_result
        .filter(|l| *l != pkg.state)
        .map(|l| format!(", last result {l}"))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "state      {}{last}  version {}  generation {}",
        pkg.state, pkg.version, pkg.generation
    );
    let _ = writeln!(o, "           {}", state_meaning(pkg.state));
    if let Some(at) = pkg.contradiction_ms {
        let _ = writeln!(
            o,
            "CONTRADICTED since {}: the vendor said something after this final state that \
             contradicts it (the caller was told {}). Check at the vendor (a second object, a \
             charge to refund), then: acknowledge {} --version {} --reviewer <you> --reason <what you did>",
            format_time(at),
            pkg.state,
            pkg.operation_id,
            pkg.version
        );
        for e in pkg
            .evidence
            .iter()
            .filter(|e| e.kind == crate::contradiction::CONTRADICTION)
        {
            let _ = writeln!(
                o,
                "  {}  {}",
                format_time(e.at_ms),
                e.note.as_deref().unwrap_or("-")
            );
        }
    }
    let late_success = crate::review::late_success(&pkg.evidence);
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
            }) => format!(" --remote-ref {r}"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "\n!! the vendor reported success after the escalation (entry #{}): resolve it as \
             succeeded after checking the reference:\n   recoverable-write resolve {} \
             succeeded{reference} --version {} --reviewer YOU --reason \"…\"",
            l.seq, pkg.operation_id, pkg.version
        );
    }
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

    let p = &pkg.parameters;
    let _ = writeln!(o, "\nrequest (redacted: no credential, no body value)");
    let _ = writeln!(o, "  {} {}", p.method, p.url);
    let _ = writeln!(o, "  contract  {}", p.contract);
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

    let _ = writeln!(o, "\ntimeline");
    let start = if pkg.created_ms > 0 {
        pkg.created_ms
    } else {
        pkg.evidence.first().map_or(0, |e| e.at_ms)
    };
    timeline(o, &pkg.evidence, start);

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

    if !pkg.state.is_terminal() {
        let op = &pkg.operation_id;
        let v = pkg.version;
        let _ = writeln!(
            o,
            "\nto act on version {v} (same --ledger and --tenant; --reviewer and --reason are \
             recorded):"
        );
        if pkg.state != State::ManualReview || crate::operator::current_claim(pkg).is_none() {
            let _ = writeln!(
                o,
                "  recoverable-write claim {op} --version {v} --reviewer YOU --reason \"…\""
            );
        }
        if pkg.state == State::ManualReview {
            let _ = writeln!(
                o,
                "  recoverable-write resolve {op} succeeded --remote-ref REF --version {v} \
                 --reviewer YOU --reason \"…\"\n  recoverable-write resolve {op} not-executed \
                 --reapprove --version {v} --reviewer YOU --reason \"…\"\n  recoverable-write \
                 resolve {op} keep-pending --version {v} --reviewer YOU --reason \"…\""
            );
        }
    }
    out
}

pub(super) fn acted(
    op: &OperationId,
    what: &str,
    from_version: u64,
    pkg: &HandoffPackage,
    audit: Option<&AuditEntry>,
) -> String {
    let mut out = String::new();
    let changed = if pkg.version == from_version {
        format!("version {from_version}, unchanged")
    } else {
        format!("version {from_version} -> {}", pkg.version)
    };
    let _ = writeln!(out, "{what}: {op} is now {} ({changed})", pkg.state);
    let _ = writeln!(out, "  {}", state_meaning(pkg.state));
    if let Some(a) = audit {
        let _ = writeln!(
            out,
            "audit entry #{} at {}: {} by {}; reason: {}",
            a.seq,
            format_time(a.at_ms),
            a.action,
            a.who.as_deref().unwrap_or("?"),
            a.reason.as_deref().unwrap_or("not given")
        );
    }
    if pkg.state == State::ManualReview {
        let _ = writeln!(
            out,
            "next: recoverable-write resolve {op} succeeded|not-executed|keep-pending --version {} \
             --reviewer … --reason \"…\"",
            pkg.version
        );
    }
    out
}

/// Open operations of one state, contract and target.
#[derive(Debug, Serialize)]
pub(super) struct TargetCount {
    pub(super) state: State,
    pub(super) contract: String,
    pub(super) target: String,
    pub(super) count: u64,
}

/// The oldest operation of one state.
#[derive(Debug, Serialize)]
pub(super) struct Oldest {
    pub(super) state: State,
    pub(super) operation_id: Option<String>,
    pub(super) tenant: Option<String>,
    pub(super) created_ms: Option<i64>,
    pub(super) age_ms: Option<i64>,
}

/// A distribution of durations (ms).
#[derive(Debug, Serialize)]
pub(super) struct Spread {
    pub(super) count: usize,
    pub(super) median_ms: Option<i64>,
    pub(super) p90_ms: Option<i64>,
    pub(super) max_ms: Option<i64>,
}

impl Spread {
    pub(super) fn of(mut v: Vec<i64>) -> Self {
        v.sort_unstable();
        let at = |q: f64| -> Option<i64> {
            if v.is_empty() {
                return None;
            }
            let i = ((v.len() - 1) as f64 * q).round() as usize;
            v.get(i).copied()
        };
        Self {
            count: v.len(),
            median_ms: at(0.5),
            p90_ms: at(0.9),
            max_ms: v.last().copied(),
        }
    }

    fn text(&self) -> String {
        match (self.median_ms, self.p90_ms, self.max_ms) {
            (Some(m), Some(p), Some(x)) => format!(
                "{} (median {}, p90 {}, max {})",
                self.count,
                format_age(m),
                format_age(p),
                format_age(x)
            ),
            _ => "none".to_owned(),
        }
    }
}

/// What `stats` reports.
#[derive(Debug, Serialize)]
pub(super) struct Stats {
    /// Open operations per state, in `OPEN_STATES` order, then the quarantined rows under
    /// `QUARANTINED` (a JSON object `{"UNKNOWN": 0, …, "QUARANTINED": 0}`).
    #[serde(serialize_with = "as_map")]
    pub(super) counts: Vec<(&'static str, u64)>,
    /// Rows set aside as undecodable: in no state's count, skipped by recovery until released.
    #[serde(skip)]
    pub(super) quarantined: u64,
    pub(super) by_target: Vec<TargetCount>,
    pub(super) oldest: Vec<Oldest>,
    pub(super) since_ms: i64,
    /// Escalation (or claim) to a person's resolution.
    pub(super) review_resolution: Spread,
    /// Escalation to the first claim.
    pub(super) time_to_claim: Spread,
    /// Creation to the final state, for operations finished within the period.
    pub(super) first_send_to_final: Spread,
    pub(super) open_scanned: usize,
    pub(super) truncated: bool,
    pub(super) now_ms: i64,
}

/// The name quarantined rows are counted under, beside the states.
pub(super) const QUARANTINED: &str = "QUARANTINED";

fn as_map<S: serde::Serializer>(v: &[(&'static str, u64)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(v.iter().map(|(name, n)| (*name, n)))
}

pub(super) fn stats(s: &Stats) -> String {
    let mut out = String::new();
    let o = &mut out;
    let _ = writeln!(o, "open operations by state");
    let rows: Vec<Vec<String>> = s
        .counts
        .iter()
        .map(|(st, n)| vec![(*st).to_owned(), n.to_string()])
        .collect();
    for line in table(&["STATE", "COUNT"], &rows).lines() {
        let _ = writeln!(o, "  {line}");
    }
    if s.quarantined > 0 {
        let _ = writeln!(
            o,
            "  ({} quarantined: this version cannot read them and recovery skips them; list them \
             with `list --state quarantined`, release them once a version that reads them runs)",
            s.quarantined
        );
    }
    let _ = writeln!(o, "\nopen operations by state, contract and target");
    if s.by_target.is_empty() {
        let _ = writeln!(o, "  none");
    } else {
        let rows: Vec<Vec<String>> = s
            .by_target
            .iter()
            .map(|t| {
                vec![
                    t.state.to_string(),
                    t.contract.clone(),
                    t.target.clone(),
                    t.count.to_string(),
                ]
            })
            .collect();
        for line in table(&["STATE", "CONTRACT", "TARGET", "COUNT"], &rows).lines() {
            let _ = writeln!(o, "  {line}");
        }
    }
    let _ = writeln!(o, "\noldest");
    for x in &s.oldest {
        match (&x.operation_id, x.age_ms) {
            (Some(id), Some(age)) => {
                let _ = writeln!(
                    o,
                    "  {:<14} {id} (tenant {}), {} old",
                    x.state.as_str(),
                    x.tenant.as_deref().unwrap_or("?"),
                    format_age(age)
                );
            }
            _ => {
                let _ = writeln!(o, "  {:<14} none", x.state.as_str());
            }
        }
    }
    let _ = writeln!(
        o,
        "\nresolved since {} ({} ago)",
        format_time(s.since_ms),
        format_age(s.now_ms - s.since_ms)
    );
    let _ = writeln!(
        o,
        "  reviews resolved, escalation to decision: {}",
        s.review_resolution.text()
    );
    let _ = writeln!(
        o,
        "  escalation to first claim:               {}",
        s.time_to_claim.text()
    );
    let _ = writeln!(
        o,
        "  finished operations, creation to final:  {}",
        s.first_send_to_final.text()
    );
    if s.truncated {
        let _ = writeln!(
            o,
            "\n(partial: the scan limit was reached after {} open operations; raise \
             --scan-limit)",
            s.open_scanned
        );
    }
    out
}

/// `show` of a quarantined operation (or one this version cannot decode): the columns that
/// could be read, redacted like `show`, what is wrong and what to do.
pub(super) fn quarantined(pkg: &QuarantinePackage, e: &Explanation, now_ms: i64) -> String {
    let mut out = String::new();
    let o = &mut out;
    let or_unreadable = |v: Option<String>| v.unwrap_or_else(|| "(unreadable)".to_owned());
    let _ = writeln!(
        o,
        "operation  {}  (tenant {}, action {}, intent {})",
        pkg.operation_id,
        pkg.tenant,
        or_unreadable(pkg.action.clone()),
        or_unreadable(pkg.intent_ref.clone())
    );
    let _ = writeln!(
        o,
        "state      QUARANTINED (stored state {}{})  version {}  generation {}",
        pkg.state,
        pkg.last_result
            .as_deref()
            .map(|r| format!(", last result {r}"))
            .unwrap_or_default(),
        or_unreadable(pkg.version.map(|v| v.to_string())),
        or_unreadable(pkg.generation.map(|g| g.to_string()))
    );
    let _ = writeln!(
        o,
        "           set aside: this version cannot use it, and recovery skips it until it is \
         released"
    );
    let _ = writeln!(o, "problem    {}", crate::review::quarantine_problem(pkg));
    let _ = writeln!(o, "\n{}", e.headline);
    o.push('\n');
    for w in &e.warnings {
        let _ = writeln!(o, "!! {w}");
    }
    let _ = writeln!(o, "\nwhy");
    for w in &e.why {
        let _ = writeln!(o, "  - {w}");
    }
    let _ = writeln!(o, "\nwhat to do\n  {}", e.next);

    let p = &pkg.parameters;
    let _ = writeln!(
        o,
        "\nrequest (redacted: no credential, no body value; as far as it could be read)"
    );
    let _ = writeln!(
        o,
        "  {} {}",
        or_unreadable(p.method.clone()),
        or_unreadable(p.url.clone())
    );
    let _ = writeln!(o, "  contract  {}", or_unreadable(p.contract.clone()));
    let _ = writeln!(
        o,
        "  headers   {}",
        match &p.header_names {
            None => "(unreadable)".to_owned(),
            Some(h) if h.is_empty() => "-".to_owned(),
            Some(h) => h.join(", "),
        }
    );
    let fields = if p.body_fields.is_empty() {
        String::new()
    } else {
        format!(", fields {}", p.body_fields.join(", "))
    };
    let _ = writeln!(
        o,
        "  body      {}{fields}",
        p.body_bytes
            .map_or_else(|| "(unreadable)".to_owned(), |b| format!("{b} bytes"))
    );
    let _ = writeln!(o, "  payload   {}", or_unreadable(p.payload_hash.clone()));
    let _ = writeln!(
        o,
        "\nbudget     attempts {}, lookups {}",
        or_unreadable(pkg.attempts_used.map(|n| n.to_string())),
        or_unreadable(pkg.queries_used.map(|n| n.to_string()))
    );
    let _ = writeln!(
        o,
        "created    {} ({} ago), last change {} ({} ago)",
        format_time(pkg.created_ms),
        format_age(now_ms - pkg.created_ms),
        format_time(pkg.updated_ms),
        format_age(now_ms - pkg.updated_ms)
    );
    if let Some(at) = pkg.quarantined_ms {
        let _ = writeln!(
            o,
            "quarantined {} ({} ago)",
            format_time(at),
            format_age(now_ms - at)
        );
    }
    if !pkg.unreadable.is_empty() {
        let _ = writeln!(o, "\nunreadable columns");
        for u in &pkg.unreadable {
            let _ = writeln!(o, "  {}: {}", u.column, u.error);
        }
    }
    let _ = writeln!(o, "\ntimeline");
    match &pkg.evidence_error {
        Some(err) => {
            let _ = writeln!(o, "  cannot be read: {err}");
        }
        None => timeline(o, &pkg.evidence, pkg.created_ms),
    }
    if pkg.quarantined_ms.is_some() {
        let _ = writeln!(
            o,
            "\nonce a version that can read it runs (same --ledger and --tenant; --reviewer and \
             --reason are recorded):\n  recoverable-write quarantine release {} --version {} \
             --reviewer YOU --reason \"…\"",
            pkg.operation_id,
            pkg.version
                .map_or_else(|| "N".to_owned(), |v| v.to_string())
        );
    }
    out
}

/// The quarantined rows of a listing: what a person needs to find them and release them.
pub(super) fn quarantined_list(rows: &[QuarantinedRow], all_tenants: bool) -> String {
    let mut header = vec!["OPERATION"];
    if all_tenants {
        header.push("TENANT");
    }
    header.extend([
        "STORED STATE",
        "AGE",
        "CHANGED",
        "VERSION",
        "READABLE",
        "PROBLEM",
    ]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut c = vec![r.operation_id.clone()];
            if all_tenants {
                c.push(r.tenant.clone());
            }
            c.extend([
                r.state.clone(),
                format_age(r.age_ms),
                format!(
                    "{} ago",
                    format_age(r.age_ms - (r.updated_ms - r.created_ms))
                ),
                r.version.map_or_else(|| "?".to_owned(), |v| v.to_string()),
                if r.readable {
                    "yes: release it".to_owned()
                } else {
                    "no".to_owned()
                },
                r.error.clone(),
            ]);
            c
        })
        .collect();
    table(&header, &cells)
}

/// The evidence timeline, times counted from `start`.
fn timeline(o: &mut String, evidence: &[crate::review::EvidenceSummary], start: i64) {
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
            if ev.kind == "review_claimed"
                || ev.kind == "review"
                || ev.kind == crate::ledger::QUARANTINE_RELEASED
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
pub(super) fn retention(dates: Option<&crate::retention::RetentionDates>) -> String {
    let line = dates.map_or_else(
        || crate::retention::RetentionDates::UNFINISHED.to_owned(),
        crate::retention::RetentionDates::describe,
    );
    format!("\nretention  {line}\n")
}

/// The report of `purge`.
pub(super) fn purge(r: &crate::retention::PurgeReport, dry_run: bool) -> String {
    let mut out = String::new();
    let verb = if dry_run { "would purge" } else { "purged" };
    let _ = writeln!(out, "{verb}:");
    for (what, c) in [
        ("operation details", r.details),
        ("operations", r.identity),
        ("callback dedupe records", r.callback_deliveries),
        ("quarantined callbacks", r.quarantined_callbacks),
    ] {
        let _ = writeln!(
            out,
            "  {what:<25} {:>10} rows  {:>14} bytes",
            c.rows, c.bytes
        );
    }
    if !dry_run {
        let _ = writeln!(
            out,
            "  space given back to the file system: {} bytes",
            r.space_reclaimed
        );
    }
    out
}

/// The plan `purge` prints before it deletes anything: per contract, the clocks it applies and
/// what would go; the callback records' clocks; the totals.
pub(super) fn purge_plan(plan: &crate::retention::PurgePlan, source: &str) -> String {
    let ms = |v: u64| format_age(i64::try_from(v).unwrap_or(i64::MAX));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "purge plan: retention from {source}, as of {}",
        format_time(plan.as_of_ms)
    );
    if plan.contracts.is_empty() {
        out.push_str("no finished operations\n");
    } else {
        let rows: Vec<Vec<String>> = plan
            .contracts
            .iter()
            .map(|c| {
                let name = if c.configured {
                    c.contract.clone()
                } else {
                    format!("{} (not in the contracts: ledger-wide clocks)", c.contract)
                };
                vec![
                    name,
                    ms(c.keep_details_ms),
                    ms(c.keep_identity_ms),
                    c.details.rows.to_string(),
                    c.identity.rows.to_string(),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "contract",
                "details kept",
                "rows kept",
                "details to drop",
                "operations to delete",
            ],
            &rows,
        ));
    }
    let quarantine = plan
        .keep_quarantined_callbacks_ms
        .map_or_else(|| "until erased".to_owned(), ms);
    let _ = writeln!(
        out,
        "callback dedupe records kept {}; quarantined callbacks kept {quarantine}",
        ms(plan.keep_callback_deliveries_ms)
    );
    out.push_str(&purge(&plan.total, true));
    out
}
