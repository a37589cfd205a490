//! The text of `reconcile`: the plan, grouped by what it does, and the report of `--apply`.

use std::fmt::Write as _;

use recoverable_write::operator::format_age;
use recoverable_write::review::bulk::{BulkPlan, BulkReport, PlanAction, RowOutcome};

use super::table;

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

pub(crate) fn bulk_plan(plan: &BulkPlan, now_ms: i64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "plan from {} ({} export, sha256 {}), tenant {}: {} rows",
        plan.file_name,
        plan.mapping,
        plan.sha256,
        plan.tenant,
        plan.rows.len()
    );
    let counts: Vec<String> = plan
        .counts()
        .iter()
        .map(|(what, n)| format!("{what} {n}"))
        .collect();
    let _ = writeln!(out, "  {}", counts.join(", "));

    let resolve: Vec<Vec<String>> = plan
        .to_resolve()
        .map(|r| {
            vec![
                r.row.to_string(),
                opt(r.operation_id.as_ref()),
                opt(r.version),
                opt(r.last_evidence_seq.map(|s| format!("#{s}"))),
                r.reference.clone(),
            ]
        })
        .collect();
    out.push('\n');
    if resolve.is_empty() {
        out.push_str("would resolve: nothing (no row names an operation in MANUAL_REVIEW)\n");
    } else {
        let _ = writeln!(
            out,
            "would resolve as SUCCEEDED ({}), each only if still at the version read now:",
            resolve.len()
        );
        out.push_str(&table(
            &["ROW", "OPERATION", "VERSION", "EVIDENCE", "REFERENCE"],
            &resolve,
        ));
    }

    let left: Vec<Vec<String>> = plan
        .rows
        .iter()
        .filter(|r| r.operation_id.is_some() && r.action != PlanAction::Resolve)
        .map(|r| {
            let why = match &r.action {
                PlanAction::AlreadyRecorded => "already succeeded with this reference".into(),
                PlanAction::NotInReview => match r.state {
                    Some(s) if s.is_terminal() => format!(
                        "finished (recorded reference {}): not reopened",
                        opt(r.recorded_reference.as_ref())
                    ),
                    _ => "not in review: left to the engine".into(),
                },
                PlanAction::Conflict { references } => format!(
                    "CONFLICT: the export gives it {}; resolve by hand",
                    references.join(", ")
                ),
                PlanAction::Duplicate { first_row } => format!("same as row {first_row}"),
                PlanAction::Resolve | PlanAction::NoMatch { .. } => String::new(),
            };
            vec![
                r.row.to_string(),
                opt(r.operation_id.as_ref()),
                opt(r.state),
                r.reference.clone(),
                why,
            ]
        })
        .collect();
    if !left.is_empty() {
        let _ = writeln!(out, "\nleft alone ({}):", left.len());
        out.push_str(&table(
            &["ROW", "OPERATION", "STATE", "REFERENCE", "WHY"],
            &left,
        ));
    }

    let nothing: Vec<Vec<String>> = plan
        .rows
        .iter()
        .filter_map(|r| match &r.action {
            PlanAction::NoMatch { why } => {
                Some(vec![r.row.to_string(), r.reference.clone(), why.clone()])
            }
            _ => None,
        })
        .collect();
    if !nothing.is_empty() {
        let _ = writeln!(
            out,
            "\nexport rows that match nothing ({}): the vendor has them, this tenant's ledger \
             does not",
            nothing.len()
        );
        out.push_str(&table(&["ROW", "REFERENCE", "WHY"], &nothing));
    }

    let _ = writeln!(
        out,
        "\nin MANUAL_REVIEW with no export row ({}{}): resolve by hand; absence from an export \
         proves nothing, so they are never resolved as not executed",
        plan.unmatched.len(),
        if plan.unmatched_truncated {
            ", list cut"
        } else {
            ""
        }
    );
    if !plan.unmatched.is_empty() {
        let rows: Vec<Vec<String>> = plan
            .unmatched
            .iter()
            .map(|u| {
                vec![
                    u.operation_id.to_string(),
                    u.version.to_string(),
                    u.contract.clone(),
                    format_age(now_ms - u.created_ms),
                ]
            })
            .collect();
        out.push_str(&table(&["OPERATION", "VERSION", "CONTRACT", "AGE"], &rows));
    }
    out
}

pub(crate) fn bulk_report(report: &BulkReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\napplied {} of {} (audit reason names {} sha256 {} and the row)",
        report.applied(),
        report.rows.len(),
        report.file_name,
        report.sha256
    );
    let skipped: Vec<Vec<String>> = report
        .skipped()
        .map(|r| {
            let what = match &r.outcome {
                RowOutcome::Stale { planned, current } => format!(
                    "STALE: changed since the plan (version {planned} -> {current}); show it \
                     and plan again"
                ),
                RowOutcome::ClaimedByOther { holder } => {
                    format!("claimed by {holder}: ask them, or take it over")
                }
                RowOutcome::Refused { why } => format!("refused: {why}"),
                RowOutcome::Applied { .. } => String::new(),
            };
            vec![
                r.row.to_string(),
                r.operation_id.to_string(),
                r.reference.clone(),
                what,
            ]
        })
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(out, "skipped ({}), nothing changed on them:", skipped.len());
        out.push_str(&table(&["ROW", "OPERATION", "REFERENCE", "WHAT"], &skipped));
    }
    out
}
