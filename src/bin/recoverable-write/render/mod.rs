//! Text output of the command line. Every value shown comes from a listing row's columns or a
//! redacted [`HandoffPackage`]: no credential, and no body value but a resolving lookup's answer
//! with its secret fields `[redacted]`.

mod purge;
mod quarantined;
mod reconcile;
mod show;
mod stats;

use std::fmt::Write as _;

use recoverable_write::operation::OperationId;
use recoverable_write::operator::{AuditEntry, format_age, format_time};
use recoverable_write::review::HandoffPackage;
use recoverable_write::state::State;

pub(crate) use self::purge::{purge, purge_plan};
pub(crate) use self::quarantined::{quarantined, quarantined_list};
pub(crate) use self::reconcile::{bulk_plan, bulk_report};
pub(crate) use self::show::{retention, show};
pub(crate) use self::stats::{Engine, Oldest, QUARANTINED, Spread, Stats, TargetCount, stats};
use crate::commands::Row;

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

pub(crate) fn list(
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
            "REF", "REASON",
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
                    reason_cell(r.reason.as_deref()),
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

/// The reason column, as the review page's queue shows it: one line, at most 90 characters.
fn reason_cell(reason: Option<&str>) -> String {
    let one_line = reason.unwrap_or("-").replace(['\n', '\r', '\t'], " ");
    if one_line.chars().count() > 90 {
        let cut: String = one_line.chars().take(89).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}

/// `text` as one shell word: as is when it holds only characters no shell treats specially,
/// else in single quotes.
pub(crate) fn quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// How the commands `show` and the actions print begin: the binary, the ledger when it can be
/// printed (a SQLite path; never a PostgreSQL URL, which may hold a password) and the tenant.
pub(crate) fn command_prefix(ledger: Option<&str>, tenant: &str) -> String {
    match ledger {
        Some(l) => format!(
            "recoverable-write --ledger {} --tenant {}",
            quote(l),
            quote(tenant)
        ),
        None => format!("recoverable-write --tenant {}", quote(tenant)),
    }
}

/// What a claim or a resolution did; `cmd` begins the next commands it prints (see
/// [`command_prefix`]).
pub(crate) fn acted(
    op: &OperationId,
    what: &str,
    from_version: u64,
    pkg: &HandoffPackage,
    audit: Option<&AuditEntry>,
    cmd: &str,
) -> String {
    let mut out = String::new();
    let changed = if pkg.version == from_version {
        format!("version {from_version}, unchanged")
    } else {
        format!("version {from_version} -> {}", pkg.version)
    };
    let _ = writeln!(out, "{what}: {op} is now {} ({changed})", pkg.state);
    let _ = writeln!(out, "  {}", recoverable_write::operator::meaning(pkg));
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
        let op = quote(op.as_str());
        let tail = format!("--version {} --reviewer YOU --reason \"…\"", pkg.version);
        let _ = writeln!(
            out,
            "next, one of:\n  {cmd} resolve {op} succeeded --remote-ref REF {tail}\n  {cmd} \
             resolve {op} succeeded --no-reference {tail}\n  {cmd} resolve {op} not-executed \
             --reapprove {tail}\n  {cmd} resolve {op} keep-pending {tail}"
        );
    }
    out
}
