//! `show` of a quarantined operation (or one this version cannot decode), and the quarantined
//! rows of a listing.

use std::fmt::Write as _;

use recoverable_write::operator::{Explanation, format_age, format_time};
use recoverable_write::review::{QuarantinePackage, quarantine_problem};

use super::show::timeline;
use super::table;
use crate::commands::QuarantinedRow;

/// `show` of a quarantined operation (or one this version cannot decode): the columns that
/// could be read, redacted like `show`, what is wrong and what to do.
pub(crate) fn quarantined(
    pkg: &QuarantinePackage,
    e: &Explanation,
    now_ms: i64,
    cmd: &str,
) -> String {
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
    let _ = writeln!(o, "problem    {}", quarantine_problem(pkg));
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
            "\nonce a version that can read it runs (--reviewer and --reason are recorded):\n  \
             {cmd} quarantine release {} --version {} --reviewer YOU --reason \"…\"",
            super::quote(pkg.operation_id.as_str()),
            pkg.version
                .map_or_else(|| "N".to_owned(), |v| v.to_string())
        );
    }
    out
}

/// The quarantined rows of a listing: what a person needs to find them and release them.
pub(crate) fn quarantined_list(rows: &[QuarantinedRow], all_tenants: bool) -> String {
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
