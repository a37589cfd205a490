//! What `stats` reports ([`Stats`], also its JSON) and its text.

use std::fmt::Write as _;

use recoverable_write::operator::{format_age, format_time};
use recoverable_write::reconcile::EngineHealth;
use recoverable_write::state::State;
use serde::Serialize;

use super::table;

/// Open operations of one state, contract and target.
#[derive(Debug, Serialize)]
pub(crate) struct TargetCount {
    pub(crate) state: State,
    pub(crate) contract: String,
    pub(crate) target: String,
    pub(crate) count: u64,
}

/// The oldest operation of one state.
#[derive(Debug, Serialize)]
pub(crate) struct Oldest {
    pub(crate) state: State,
    pub(crate) operation_id: Option<String>,
    pub(crate) tenant: Option<String>,
    pub(crate) created_ms: Option<i64>,
    pub(crate) age_ms: Option<i64>,
}

/// A distribution of durations (ms).
#[derive(Debug, Serialize)]
pub(crate) struct Spread {
    pub(crate) count: usize,
    pub(crate) median_ms: Option<i64>,
    pub(crate) p90_ms: Option<i64>,
    pub(crate) max_ms: Option<i64>,
}

impl Spread {
    pub(crate) fn of(mut v: Vec<i64>) -> Self {
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

/// Whether the engine is running: the recoverer workers' heartbeats, the operations overdue,
/// and the alarm (also in JSON: `status`, `alarm`, `now_ms`, `workers`, `alive`,
/// `last_pass_ms`, `grace_ms`, `overdue`, `waiting`).
#[derive(Debug, Serialize)]
pub(crate) struct Engine {
    pub(crate) status: String,
    pub(crate) alarm: Option<String>,
    #[serde(flatten)]
    pub(crate) health: EngineHealth,
}

impl Engine {
    pub(crate) fn of(health: EngineHealth) -> Self {
        Self {
            status: health.status(),
            alarm: health.alarm(),
            health,
        }
    }

    fn text(&self, o: &mut String) {
        let h = &self.health;
        let _ = writeln!(o, "engine: {}", self.status);
        if let Some(alarm) = &self.alarm {
            let _ = writeln!(o, "  ALARM: {alarm}");
        }
        let _ = writeln!(
            o,
            "  overdue: {} (UNKNOWN or RETRY_READY, next check passed more than {} ago); \
             waiting for the engine: {}",
            h.overdue,
            format_age(h.grace_ms),
            h.waiting
        );
        if h.workers.is_empty() {
            let _ = writeln!(o, "  no worker heartbeat recorded");
            return;
        }
        let rows: Vec<Vec<String>> = h
            .workers
            .iter()
            .map(|w| {
                vec![
                    w.worker_id.clone(),
                    w.host.clone(),
                    w.version.clone(),
                    if w.alive_at(h.now_ms) { "yes" } else { "NO" }.to_owned(),
                    format!("{} ago", format_age(h.now_ms - w.pass_finished_ms)),
                    format!("{}/{}", w.claimed_last_pass, w.claimed_total),
                    w.errors.to_string(),
                    w.last_error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        let head = [
            "WORKER",
            "HOST",
            "VERSION",
            "ALIVE",
            "LAST PASS",
            "CLAIMED (LAST/TOTAL)",
            "ERRORS",
            "LAST ERROR",
        ];
        for line in table(&head, &rows).lines() {
            let _ = writeln!(o, "  {line}");
        }
    }
}

/// What `stats` reports.
#[derive(Debug, Serialize)]
pub(crate) struct Stats {
    /// Whether the engine is running (first in the text).
    pub(crate) engine: Engine,
    /// Open operations per state, in `OPEN_STATES` order, then the quarantined rows under
    /// `QUARANTINED` (a JSON object `{"UNKNOWN": 0, …, "QUARANTINED": 0}`).
    #[serde(serialize_with = "as_map")]
    pub(crate) counts: Vec<(&'static str, u64)>,
    /// Rows set aside as undecodable: in no state's count, skipped by recovery until released.
    #[serde(skip)]
    pub(crate) quarantined: u64,
    pub(crate) by_target: Vec<TargetCount>,
    pub(crate) oldest: Vec<Oldest>,
    pub(crate) since_ms: i64,
    /// Escalation (or claim) to a person's resolution.
    pub(crate) review_resolution: Spread,
    /// Escalation to the first claim.
    pub(crate) time_to_claim: Spread,
    /// Creation to the final state, for operations finished within the period.
    pub(crate) first_send_to_final: Spread,
    pub(crate) open_scanned: usize,
    pub(crate) truncated: bool,
    pub(crate) now_ms: i64,
}

/// The name quarantined rows are counted under, beside the states.
pub(crate) const QUARANTINED: &str = "QUARANTINED";

fn as_map<S: serde::Serializer>(v: &[(&'static str, u64)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(v.iter().map(|(name, n)| (*name, n)))
}

pub(crate) fn stats(s: &Stats) -> String {
    let mut out = String::new();
    let o = &mut out;
    s.engine.text(o);
    let _ = writeln!(o, "\nopen operations by state");
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
