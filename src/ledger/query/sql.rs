//! The listing and counting statements of the SQL backends (SQLite, PostgreSQL), built from an
//! [`OperationQuery`] or a [`TenantScope`], and what they share with the schema: the states the
//! review queue's indexes leave out and those indexes' predicate.

use super::{OPEN_STATES, OperationQuery, Order, Quarantined, TenantScope, TextMatch};
use crate::ledger::LedgerError;
use crate::state::State;

/// The states the review queue's indexes (`rw_operations_by_state` and
/// `rw_operations_by_tenant_state`, partial since migration 0015 on PostgreSQL and
/// SQLite) leave out: every request passes through both, so indexing them cost four
/// index entries per request that no queue reads. `IN_FLIGHT` rows are listed and counted from
/// the send-lease index; `SUCCEEDED` rows, the history, are listed by reading the table.
pub(crate) const UNQUEUED_STATES: [State; 2] = [State::InFlight, State::Succeeded];

/// The review-queue indexes' predicate, word for word as in the migrations.
pub(crate) const QUEUE_INDEX_PREDICATE: &str = "state NOT IN ('IN_FLIGHT', 'SUCCEEDED')";

/// A value bound to a listing statement.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    Text(String),
    Int(i64),
}

/// A listing or counting statement for a SQL backend, with its arguments in order.
#[derive(Clone, Debug)]
pub(crate) struct Sql {
    pub(crate) text: String,
    pub(crate) args: Vec<Arg>,
}

/// Builds WHERE terms with numbered placeholders (`?N` for SQLite, `$N` for PostgreSQL).
struct Terms {
    sigil: char,
    terms: Vec<String>,
    args: Vec<Arg>,
}

impl Terms {
    fn new(sigil: char) -> Self {
        Self {
            sigil,
            terms: Vec::new(),
            args: Vec::new(),
        }
    }

    fn arg(&mut self, a: Arg) -> String {
        self.args.push(a);
        format!("{}{}", self.sigil, self.args.len())
    }

    /// `substr(column, 1, n) = prefix`: a prefix match with no wildcard characters to escape.
    fn prefix(&mut self, column: &str, prefix: &str) -> String {
        let n = prefix.chars().count();
        let p = self.arg(Arg::Text(prefix.to_owned()));
        format!("substr({column}, 1, {n}) = {p}")
    }

    /// `substr(column, length(column) - n + 1) = suffix` (and the column at least `n` long): a
    /// suffix match with no wildcard characters to escape, in SQLite and PostgreSQL alike.
    fn suffix(&mut self, column: &str, suffix: &str) -> String {
        let n = suffix.chars().count();
        let p = self.arg(Arg::Text(suffix.to_owned()));
        format!("(length({column}) >= {n} AND substr({column}, length({column}) - {n} + 1) = {p})")
    }

    fn scope(&mut self, scope: &TenantScope) {
        if let Some(t) = scope.tenant() {
            let p = self.arg(Arg::Text(t.as_str().to_owned()));
            self.terms.push(format!("tenant = {p}"));
        }
    }

    /// `state = 'X'` or `state IN (...)`, the names written as literals (they are the crate's
    /// own constants, never input), so that every planner, with or without the values bound,
    /// can prove the review-queue indexes' predicate from them. When no state of `states` is
    /// left out of those indexes ([`UNQUEUED_STATES`]), their predicate is added word for word
    /// (SQLite uses a partial index only when its predicate is a term of the query).
    fn states(&mut self, states: &[State]) {
        let literal = |s: &State| format!("'{}'", s.as_str());
        match states {
            [] => return,
            [one] => self.terms.push(format!("state = {}", literal(one))),
            many => {
                let names: Vec<String> = many.iter().map(literal).collect();
                self.terms.push(format!("state IN ({})", names.join(", ")));
            }
        }
        if states.iter().all(|s| !UNQUEUED_STATES.contains(s)) {
            self.terms.push(QUEUE_INDEX_PREDICATE.to_owned());
        }
    }

    fn where_clause(&self) -> String {
        if self.terms.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.terms.join(" AND "))
        }
    }
}

/// The listing statement: `key` is the store's insertion-order row key (`rowid`, `seq`),
/// returned as `rw_key`; one row more than the page size is fetched to know whether another
/// page follows.
pub(crate) fn list_sql(
    q: &OperationQuery,
    table: &str,
    key: &str,
    sigil: char,
) -> Result<Sql, LedgerError> {
    q.validate()?;
    let mut t = Terms::new(sigil);
    t.scope(&q.scope);
    t.states(&q.states);
    match q.quarantined {
        Quarantined::Hidden => t.terms.push("quarantine_reason IS NULL".to_owned()),
        Quarantined::Included => {}
        Quarantined::Only => t.terms.push("quarantine_reason IS NOT NULL".to_owned()),
    }
    if q.contradicted {
        t.terms.push("contradiction_ms IS NOT NULL".to_owned());
    }
    if let Some(c) = &q.contract {
        let p = t.arg(Arg::Text(c.clone()));
        t.terms.push(format!("contract_name = {p}"));
    }
    if let Some(h) = &q.host {
        let ors: Vec<String> = OperationQuery::host_prefixes(h)
            .iter()
            .map(|p| t.prefix("request_url", p))
            .collect();
        t.terms.push(format!("({})", ors.join(" OR ")));
    }
    for (column, op, bound) in [
        ("created_ms", ">", q.created_after),
        ("created_ms", "<", q.created_before),
        ("updated_ms", ">", q.updated_after),
        ("updated_ms", "<", q.updated_before),
        ("next_check_ms", "<", q.next_check_before),
    ] {
        if let Some(b) = bound {
            let p = t.arg(Arg::Int(b));
            t.terms.push(format!("{column} {op} {p}"));
        }
    }
    match &q.text {
        None => {}
        Some(TextMatch::Exact(s)) => {
            let a = t.arg(Arg::Text(s.clone()));
            let b = t.arg(Arg::Text(s.clone()));
            t.terms
                .push(format!("(operation_id = {a} OR remote_ref = {b})"));
        }
        Some(TextMatch::Prefix(s)) => {
            let a = t.prefix("operation_id", s);
            let b = t.prefix("remote_ref", s);
            t.terms.push(format!("({a} OR {b})"));
        }
        Some(TextMatch::Suffix(s)) => {
            let a = t.suffix("operation_id", s);
            let b = t.suffix("remote_ref", s);
            t.terms.push(format!("({a} OR {b})"));
        }
        Some(TextMatch::Intent(s)) => {
            let a = t.arg(Arg::Text(s.clone()));
            t.terms.push(format!("intent_ref = {a}"));
        }
    }
    let (cmp, dir) = match q.order {
        Order::NewestFirst => ("<", "DESC"),
        Order::OldestFirst => (">", "ASC"),
    };
    if let Some(c) = &q.after {
        let (created, k) = c.parts()?;
        let a = t.arg(Arg::Int(created));
        let b = t.arg(Arg::Int(k));
        t.terms
            .push(format!("(created_ms, {key}) {cmp} ({a}, {b})"));
    }
    let limit = i64::from(q.limit) + 1;
    let text = format!(
        "SELECT {key} AS rw_key, * FROM {table} {} ORDER BY created_ms {dir}, {key} {dir} \
         LIMIT {limit}",
        t.where_clause()
    );
    Ok(Sql { text, args: t.args })
}

/// The counting statement: rows per open state (`state`, `n`), quarantined rows left out, then
/// one row (`NULL`, `n`) counting the quarantined rows of the scope, read from
/// `quarantined_from` (the table, or for SQLite the table with its partial index of quarantined
/// rows named: there are few, and a tenant's other rows must not be scanned to find them).
///
/// The open states but `IN_FLIGHT` are counted from the review-queue indexes; `IN_FLIGHT` rows,
/// which those indexes leave out ([`UNQUEUED_STATES`]), from `in_flight_from` (the table, or
/// for SQLite the table with its send-lease index named), whose rows are the requests in
/// flight now (a scope's are filtered from them).
pub(crate) fn count_sql(
    scope: &TenantScope,
    table: &str,
    in_flight_from: &str,
    quarantined_from: &str,
    sigil: char,
) -> Result<Sql, LedgerError> {
    if scope.tenant().is_some_and(|t| t.as_str().contains('\0')) {
        return Err(LedgerError::Config(
            "listing filters must not contain NUL characters".to_owned(),
        ));
    }
    let mut t = Terms::new(sigil);
    let (unqueued, queued): (Vec<State>, Vec<State>) = OPEN_STATES
        .into_iter()
        .partition(|s| UNQUEUED_STATES.contains(s));
    let part = |t: &mut Terms, from: &str, states: &[State]| {
        t.terms.clear();
        t.scope(scope);
        t.states(states);
        t.terms.push("quarantine_reason IS NULL".to_owned());
        format!(
            "SELECT state, count(*) AS n FROM {from} {} GROUP BY state",
            t.where_clause()
        )
    };
    let by_state = part(&mut t, table, &queued);
    let in_flight = part(&mut t, in_flight_from, &unqueued);
    t.terms.clear();
    t.scope(scope);
    t.terms.push("quarantine_reason IS NOT NULL".to_owned());
    let quarantined = t.where_clause();
    let text = format!(
        "{by_state} UNION ALL {in_flight} \
         UNION ALL SELECT NULL AS state, count(*) AS n FROM {quarantined_from} {quarantined}"
    );
    Ok(Sql { text, args: t.args })
}
