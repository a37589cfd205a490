//! `list`: operations by state, age, contract, target or reference, a page at a time, and the
//! quarantined rows of the open queue.

use recoverable_write::ledger::{
    Cursor, OPEN_STATES, OperationQuery, OperationRecord, Order, SkippedRow, TenantScope, TextMatch,
};
use recoverable_write::state::State;
use serde::Serialize;

use super::{Ctx, host_of, to_json};
use crate::args::ListArgs;
use crate::error::CliError;
use crate::render;

/// What `list --state` asked for.
#[derive(Debug, PartialEq, Eq)]
enum ListedStates {
    /// These states (none: every state); `open`: the open queue, whose quarantined rows are
    /// listed too (asked with `open`, or with no state at all).
    States { states: Vec<State>, open: bool },
    /// `quarantined`: the rows set aside as undecodable, alone.
    Quarantined,
}

impl ListedStates {
    fn parse(names: &[String]) -> Result<Self, CliError> {
        let norm = |n: &String| n.trim().to_ascii_uppercase().replace('-', "_");
        let (aside, states): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| norm(n) == "QUARANTINED");
        match (aside.is_empty(), states.is_empty()) {
            (false, true) => Ok(Self::Quarantined),
            (false, false) => Err(CliError::usage(
                "quarantined rows are listed on their own (--state quarantined): their stored \
                 state may be one this version does not know",
            )),
            (true, _) => {
                let open = names.iter().all(|n| n.trim().is_empty())
                    || names.iter().any(|n| norm(n) == "OPEN");
                let states: Vec<String> = states.into_iter().cloned().collect();
                Ok(Self::States {
                    states: parse_states(&states)?,
                    open,
                })
            }
        }
    }
}

/// Parses a state name: `manual_review`, `MANUAL-REVIEW`, … (`open`: every open state).
fn parse_states(names: &[String]) -> Result<Vec<State>, CliError> {
    let mut out = Vec::new();
    for name in names {
        let norm = name.trim().to_ascii_uppercase().replace('-', "_");
        if norm.is_empty() {
            continue;
        }
        if norm == "OPEN" {
            out.extend(OPEN_STATES);
            continue;
        }
        let s: State = norm.parse().map_err(|_| {
            CliError::usage(format!(
                "unknown state {name:?}: use one of {}, or open (or quarantined alone)",
                State::ALL
                    .iter()
                    .map(|s| s.as_str().to_ascii_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        out.push(s);
    }
    Ok(out)
}

/// One listing row: the columns an operator needs, no request values.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) tenant: String,
    pub(crate) operation_id: String,
    pub(crate) action: String,
    pub(crate) state: State,
    pub(crate) last_result: Option<State>,
    pub(crate) contract: String,
    pub(crate) target: String,
    pub(crate) version: u64,
    pub(crate) attempts_used: u32,
    pub(crate) max_attempts: u32,
    pub(crate) queries_used: u32,
    pub(crate) max_queries: u32,
    pub(crate) remote_ref: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) created_ms: i64,
    pub(crate) updated_ms: i64,
    pub(crate) next_check_ms: Option<i64>,
    pub(crate) age_ms: i64,
    /// When a contradiction of its final state was first recorded, unacknowledged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) contradiction_ms: Option<i64>,
}

impl Row {
    fn new(r: &OperationRecord, now_ms: i64) -> Self {
        Self {
            tenant: r.tenant.as_str().to_owned(),
            operation_id: r.operation_id.as_str().to_owned(),
            action: r.action.to_string(),
            state: r.state,
            last_result: r.last_result,
            contract: r.contract.name.to_string(),
            target: host_of(&r.request.url),
            version: r.version,
            attempts_used: r.attempts_used,
            max_attempts: r.policy.max_attempts,
            queries_used: r.queries_used,
            max_queries: r.policy.max_queries,
            remote_ref: r.remote_ref.clone(),
            reason: r.reason.clone(),
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            next_check_ms: r.next_check_ms,
            contradiction_ms: r.contradiction_ms,
            age_ms: now_ms - r.created_ms,
        }
    }
}

/// One quarantined (or undecodable) listing row: its raw columns, no request values.
#[derive(Debug, Serialize)]
pub(crate) struct QuarantinedRow {
    pub(crate) tenant: String,
    pub(crate) operation_id: String,
    /// The state column as stored.
    pub(crate) state: String,
    /// Whether it is quarantined (recovery skips it); `false`: it went bad since its last
    /// claim and the next pass that meets it quarantines it.
    pub(crate) quarantined: bool,
    pub(crate) quarantined_ms: Option<i64>,
    /// Whether this version reads it now (then: release it).
    pub(crate) readable: bool,
    pub(crate) version: Option<u64>,
    pub(crate) action: Option<String>,
    /// The decode error (it names the column).
    pub(crate) error: String,
    pub(crate) created_ms: i64,
    pub(crate) updated_ms: i64,
    pub(crate) age_ms: i64,
}

impl QuarantinedRow {
    fn new(r: &SkippedRow, now_ms: i64) -> Self {
        Self {
            tenant: r.tenant.as_str().to_owned(),
            operation_id: r.operation_id.as_str().to_owned(),
            state: r.state.clone(),
            quarantined: r.quarantined_ms.is_some(),
            quarantined_ms: r.quarantined_ms,
            readable: r.readable,
            version: r.columns.version,
            action: r.columns.action.clone(),
            error: r.error.clone(),
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            age_ms: now_ms - r.created_ms,
        }
    }
}

/// One page of `list` (its JSON as printed).
#[derive(Serialize)]
struct Listing {
    operations: Vec<Row>,
    quarantined: Vec<QuarantinedRow>,
    next_cursor: Option<String>,
    skipped: Vec<String>,
}

impl Ctx {
    pub(super) async fn list(&self, a: ListArgs) -> Result<String, CliError> {
        let asked = ListedStates::parse(&a.state)?;
        // The filters but the states, shared by the listing and its quarantined section.
        let base = self.filters(&a);
        let mut q = match &asked {
            ListedStates::Quarantined => base.clone().quarantined_only(),
            ListedStates::States { states, .. } => base.clone().states(states.iter().copied()),
        };
        if let Some(c) = &a.cursor {
            q = q.after(Cursor::parse(c).map_err(CliError::ledger)?);
        }
        if a.contradicted {
            q = q.contradicted();
        }
        let page = self.ledger.list(&q).await.map_err(CliError::ledger)?;
        let rows: Vec<Row> = page.rows.iter().map(|r| Row::new(r, self.now_ms)).collect();
        let (set_aside, bad): (Vec<_>, Vec<_>) = page
            .skipped
            .iter()
            .partition(|s| s.quarantined_ms.is_some() || asked == ListedStates::Quarantined);
        let mut quarantined: Vec<QuarantinedRow> = set_aside
            .into_iter()
            .map(|s| QuarantinedRow::new(s, self.now_ms))
            .collect();
        let skipped: Vec<String> = bad
            .iter()
            .map(|s| format!("{} {}: {}", s.tenant, s.operation_id, s.error))
            .collect();
        // The open queue includes the rows set aside: they need a person too. Listed once,
        // under the first page.
        if let ListedStates::States { open: true, .. } = asked
            && a.cursor.is_none()
        {
            let aside = self
                .ledger
                .list(&base.quarantined_only())
                .await
                .map_err(CliError::ledger)?;
            quarantined.extend(
                aside
                    .skipped
                    .iter()
                    .map(|s| QuarantinedRow::new(s, self.now_ms)),
            );
        }
        let listing = Listing {
            operations: rows,
            quarantined,
            next_cursor: page.next.map(|c| c.to_string()),
            skipped,
        };
        if self.json {
            return to_json(&listing);
        }
        Ok(self.text(&asked, &listing))
    }

    /// The query of `list`'s filters, the states and the cursor aside.
    fn filters(&self, a: &ListArgs) -> OperationQuery {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let mut base = OperationQuery::scoped(self.scope.clone())
            .limit(a.limit)
            .order(if a.oldest_first {
                Order::OldestFirst
            } else {
                Order::NewestFirst
            });
        if let Some(c) = &a.contract {
            base = base.contract(c.clone());
        }
        if let Some(h) = &a.host {
            base = base.host(h.to_ascii_lowercase());
        }
        if let Some(d) = a.older_than {
            base = base.created_before(self.now_ms.saturating_sub(ms(d)));
        }
        if let Some(d) = a.unchanged_for {
            base = base.updated_before(self.now_ms.saturating_sub(ms(d)));
        }
        if let Some(t) = &a.text {
            base = base.text(TextMatch::Prefix(t.clone()));
        }
        base
    }

    /// The listing as text: the operations then the quarantined rows, or the quarantined rows
    /// alone when only they were asked.
    fn text(&self, asked: &ListedStates, listing: &Listing) -> String {
        let all = matches!(self.scope, TenantScope::AllTenants);
        let quarantined = &listing.quarantined;
        if *asked == ListedStates::Quarantined {
            let mut out = if quarantined.is_empty() {
                "no quarantined rows match\n".to_owned()
            } else {
                render::quarantined_list(quarantined, all)
            };
            if let Some(next) = &listing.next_cursor {
                out.push_str(&format!("more: add --cursor {next}\n"));
            }
            return out;
        }
        let mut out = render::list(
            &listing.operations,
            listing.next_cursor.as_deref(),
            &listing.skipped,
            all,
        );
        if !quarantined.is_empty() {
            out.push_str(&format!(
                "\nquarantined: {} row(s) this version cannot use; recovery skips them until they \
                 are released (`show OP`, then `quarantine release OP`)\n",
                quarantined.len()
            ));
            out.push_str(&render::quarantined_list(quarantined, all));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit;

    #[test]
    fn states_parse_in_any_case_and_open_expands() {
        let s = parse_states(&["manual_review".into(), "Unknown".into()]).unwrap();
        assert_eq!(s, vec![State::ManualReview, State::Unknown]);
        assert_eq!(
            parse_states(&["retry-ready".into()]).unwrap(),
            vec![State::RetryReady]
        );
        assert_eq!(
            parse_states(&["open".into()]).unwrap().len(),
            OPEN_STATES.len()
        );
        let e = parse_states(&["stuck".into()]).unwrap_err();
        assert_eq!(e.code, exit::USAGE);
    }
}
