//! The plan `purge` shows before it deletes, and its report.

use std::fmt::Write as _;

use recoverable_write::operator::{format_age, format_time};
use recoverable_write::retention::{PurgePlan, PurgeReport};

use super::table;

/// The report of `purge`.
pub(crate) fn purge(r: &PurgeReport, dry_run: bool) -> String {
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
pub(crate) fn purge_plan(plan: &PurgePlan, source: &str) -> String {
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
