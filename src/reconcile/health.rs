//! Is the engine running? [`EngineHealth`]: the recoverer workers alive (from their
//! [heartbeats](crate::ledger::WorkerHeartbeat)), the last pass, the operations that wait for
//! the engine and those whose check is overdue, and the one wording of the alarm the review
//! page, the command line and [`operator::explain`](crate::operator::explain) show.
//!
//! The grace after which a check is overdue is defined here, once ([`overdue_grace_ms`]): three
//! of the intervals a worker promises between two passes (its pause plus its lease), so a row
//! is called overdue only when at least one whole promised pass went by without anyone looking
//! at it (one slow pass is not an alarm).

use std::time::Duration;

use serde::Serialize;

use crate::ledger::{
    LedgerError, ListingLedger, MISSED_BEATS, StateCounts, TenantScope, WorkerHeartbeat,
};
use crate::state::State;
use crate::text::format_age;

/// The recoverer's default pause between passes ([`Recoverer::interval`](super::Recoverer::interval)).
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(250);

/// The recoverer's default lease on a claimed row ([`Recoverer::lease`](super::Recoverer::lease)).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The most time a worker with pause `interval` and lease `lease` promises between two beats
/// ([`WorkerHeartbeat::interval_ms`]): the pause, plus the longest a pass is designed to take
/// (its lease: a claim expires then, and another worker may take the row).
pub fn promised_interval_ms(interval: Duration, lease: Duration) -> i64 {
    i64::try_from(interval.saturating_add(lease).as_millis()).unwrap_or(i64::MAX)
}

/// The grace after which an operation's next check is overdue, for workers that promise
/// `promised_ms` between beats: [`MISSED_BEATS`] × `promised_ms` (with the defaults, 3 ×
/// 30.25 s = 90.75 s). The one definition the alarm, the gauge and the "claim it only if"
/// advice use.
pub fn overdue_grace_ms(promised_ms: i64) -> i64 {
    MISSED_BEATS.saturating_mul(promised_ms.max(1))
}

/// The states an operation waits in for the engine (to look, to resend, to make its first
/// send): with no live worker, nothing moves them.
pub const WAITING_STATES: [State; 4] = [
    State::Unknown,
    State::Processing,
    State::RetryReady,
    State::Prepared,
];

/// Whether an operation in `state` can be overdue (its next check is the engine's to make):
/// `UNKNOWN` and `RETRY_READY`, as [`ListingLedger::count_overdue`] counts.
pub fn can_be_overdue(state: State) -> bool {
    matches!(state, State::Unknown | State::RetryReady)
}

/// Whether the engine is running, as the ledger shows it at `now_ms`: read by
/// [`EngineHealth::read`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EngineHealth {
    /// When it was read (ms since the Unix epoch).
    pub now_ms: i64,
    /// Every recorded heartbeat, the most recent first (dead workers within the retention too).
    pub workers: Vec<WorkerHeartbeat>,
    /// How many of them are alive ([`WorkerHeartbeat::alive_at`]).
    pub alive: usize,
    /// When the most recent pass of any worker finished; `None` if no worker ever reported.
    pub last_pass_ms: Option<i64>,
    /// The grace after which a check is overdue ([`overdue_grace_ms`] of the longest interval
    /// the live workers promise, or the default recoverer's when none is alive).
    pub grace_ms: i64,
    /// Operations of the scope in `UNKNOWN` or `RETRY_READY` whose next check passed more than
    /// the grace ago.
    pub overdue: u64,
    /// Operations of the scope waiting for the engine ([`WAITING_STATES`]).
    pub waiting: u64,
}

impl EngineHealth {
    /// Reads the heartbeats, the counts of `scope` and its overdue operations: three indexed
    /// reads, flat in the history.
    ///
    /// # Errors
    ///
    /// The ledger's, when it does not answer.
    pub async fn read<L: ListingLedger + ?Sized>(
        ledger: &L,
        scope: &TenantScope,
        now_ms: i64,
    ) -> Result<Self, LedgerError> {
        let workers = ledger.heartbeats().await?;
        let counts = ledger.count_by_state(scope).await?;
        let grace_ms = grace_for(&workers, now_ms);
        let overdue = ledger
            .count_overdue(scope, now_ms.saturating_sub(grace_ms))
            .await?;
        Ok(Self::from_parts(workers, &counts, overdue, now_ms))
    }

    /// Assembles what [`read`](Self::read) reads (`overdue`: counted with
    /// [`grace_for`]`(&workers, now_ms)`).
    pub fn from_parts(
        workers: Vec<WorkerHeartbeat>,
        counts: &StateCounts,
        overdue: u64,
        now_ms: i64,
    ) -> Self {
        Self {
            now_ms,
            alive: workers.iter().filter(|w| w.alive_at(now_ms)).count(),
            last_pass_ms: workers.iter().map(|w| w.pass_finished_ms).max(),
            grace_ms: grace_for(&workers, now_ms),
            waiting: WAITING_STATES
                .iter()
                .map(|s| counts.get(*s).unwrap_or(0))
                .sum(),
            workers,
            overdue,
        }
    }

    /// The one line the page's header and `stats` show: `2 recoverer workers alive · last
    /// pass 3s ago`.
    pub fn status(&self) -> String {
        let workers = match self.alive {
            0 => "no recoverer worker alive".to_owned(),
            1 => "1 recoverer worker alive".to_owned(),
            n => format!("{n} recoverer workers alive"),
        };
        match self.last_pass_ms {
            Some(at) => format!("{workers} · last pass {} ago", format_age(self.now_ms - at)),
            None => format!("{workers} · no pass ever reported"),
        }
    }

    /// The alarm, if there is one: no live worker while operations wait for the engine, or
    /// operations whose check is overdue. `None` when the engine is running and keeping up.
    pub fn alarm(&self) -> Option<String> {
        let grace = format_age(self.grace_ms);
        let overdue = match self.overdue {
            0 => String::new(),
            1 => format!(" 1 operation is overdue: its next check passed more than {grace} ago."),
            n => format!(
                " {n} operations are overdue: their next check passed more than {grace} ago."
            ),
        };
        if self.alive == 0 && self.waiting > 0 {
            let waiting = match self.waiting {
                1 => "1 operation waits".to_owned(),
                n => format!("{n} operations wait"),
            };
            let last = match self.workers.first() {
                Some(w) => format!(
                    "the last heartbeat came {} ago from worker {} on {}",
                    format_age(self.now_ms - w.pass_finished_ms),
                    w.worker_id,
                    w.host
                ),
                None => "no worker has ever reported to this ledger".to_owned(),
            };
            return Some(format!(
                "No recoverer worker is alive ({last}), and {waiting} for the engine (unknown, \
                 processing, to resend or never sent): nothing verifies or sends them.{overdue} \
                 Start or restart the recoverer (Recoverer::run) against this ledger."
            ));
        }
        if self.overdue > 0 {
            return Some(format!(
                "The engine is behind.{overdue} The workers alive have not looked at them: \
                 check their errors and logs, and add workers if they are busy."
            ));
        }
        None
    }

    /// When the engine checks an operation in `state` next, in words, or `None` when the engine
    /// does not schedule it (a state without a next check).
    pub fn next_check(&self, state: State, next_check_ms: Option<i64>) -> Option<String> {
        next_check_words(state, next_check_ms, self.now_ms, self.grace_ms)
    }

    /// Whether an operation in `state` with `next_check_ms` is overdue.
    pub fn is_overdue(&self, state: State, next_check_ms: Option<i64>) -> bool {
        is_overdue(state, next_check_ms, self.now_ms, self.grace_ms)
    }
}

/// The grace for `workers` at `now_ms` ([`overdue_grace_ms`] of the longest interval a live
/// worker promises; of the default recoverer's when none is alive).
pub fn grace_for(workers: &[WorkerHeartbeat], now_ms: i64) -> i64 {
    let promised = workers
        .iter()
        .filter(|w| w.alive_at(now_ms))
        .map(|w| w.interval_ms)
        .max()
        .unwrap_or_else(|| promised_interval_ms(DEFAULT_INTERVAL, DEFAULT_LEASE));
    overdue_grace_ms(promised)
}

/// Whether an operation in `state` whose next check is `next_check_ms` is overdue at `now_ms`
/// with `grace_ms`.
pub fn is_overdue(state: State, next_check_ms: Option<i64>, now_ms: i64, grace_ms: i64) -> bool {
    can_be_overdue(state) && next_check_ms.is_some_and(|at| at < now_ms.saturating_sub(grace_ms))
}

/// `next check due in 12s`, `next check due now`, `next check overdue by 4m 10s` (past by more
/// than `grace_ms`); `None` for a state the engine does not check.
pub fn next_check_words(
    state: State,
    next_check_ms: Option<i64>,
    now_ms: i64,
    grace_ms: i64,
) -> Option<String> {
    if !matches!(
        state,
        State::Unknown | State::Processing | State::RetryReady
    ) {
        return None;
    }
    let at = next_check_ms?;
    Some(if at > now_ms {
        format!("next check due in {}", format_age(at - now_ms))
    } else if is_overdue(state, Some(at), now_ms, grace_ms) {
        format!("next check overdue by {}", format_age(now_ms - at))
    } else {
        "next check due now".to_owned()
    })
}

/// The advice on an operation the engine owns, with the number "stuck too long" means: its
/// next check overdue by more than the grace.
pub fn claim_advice(grace_ms: i64) -> String {
    format!(
        "The engine owns it. Claim it only if it has been stuck too long (its next check \
         overdue by more than {}, or no recoverer worker alive): claiming stops automatic \
         sends.",
        format_age(grace_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn worker(beat_ago_ms: i64) -> WorkerHeartbeat {
        WorkerHeartbeat {
            worker_id: "w-1".into(),
            host: "app-1".into(),
            version: "1.0.0".into(),
            started_ms: NOW - 3_600_000,
            interval_ms: promised_interval_ms(DEFAULT_INTERVAL, DEFAULT_LEASE),
            pass_started_ms: NOW - beat_ago_ms - 10,
            pass_finished_ms: NOW - beat_ago_ms,
            claimed_last_pass: 0,
            claimed_total: 7,
            errors: 0,
            last_error: None,
        }
    }

    fn counts(unknown: u64) -> StateCounts {
        let mut c = StateCounts::default();
        c.set(State::Unknown, unknown);
        c
    }

    #[test]
    fn the_grace_is_three_promised_intervals() {
        assert_eq!(
            promised_interval_ms(DEFAULT_INTERVAL, DEFAULT_LEASE),
            30_250
        );
        assert_eq!(grace_for(&[], NOW), 90_750);
        assert_eq!(format_age(grace_for(&[], NOW)), "1m 30s");
    }

    #[test]
    fn alarm_wording_no_worker_dead_worker_overdue_and_calm() {
        let never = EngineHealth::from_parts(Vec::new(), &counts(2), 0, NOW);
        assert_eq!(
            never.status(),
            "no recoverer worker alive · no pass ever reported"
        );
        assert_eq!(
            never.alarm().as_deref(),
            Some(
                "No recoverer worker is alive (no worker has ever reported to this ledger), and \
                 2 operations wait for the engine (unknown, processing, to resend or never \
                 sent): nothing verifies or sends them. Start or restart the recoverer \
                 (Recoverer::run) against this ledger."
            )
        );

        let dead = EngineHealth::from_parts(vec![worker(600_000)], &counts(1), 1, NOW);
        assert_eq!(dead.alive, 0);
        assert_eq!(
            dead.alarm().as_deref(),
            Some(
                "No recoverer worker is alive (the last heartbeat came 10m 0s ago from worker \
                 w-1 on app-1), and 1 operation waits for the engine (unknown, processing, to \
                 resend or never sent): nothing verifies or sends them. 1 operation is overdue: \
                 its next check passed more than 1m 30s ago. Start or restart the recoverer \
                 (Recoverer::run) against this ledger."
            )
        );

        let behind = EngineHealth::from_parts(vec![worker(1_000)], &counts(3), 2, NOW);
        assert_eq!(
            behind.status(),
            "1 recoverer worker alive · last pass 1s ago"
        );
        assert_eq!(
            behind.alarm().as_deref(),
            Some(
                "The engine is behind. 2 operations are overdue: their next check passed more \
                 than 1m 30s ago. The workers alive have not looked at them: check their errors \
                 and logs, and add workers if they are busy."
            )
        );

        let calm = EngineHealth::from_parts(vec![worker(1_000)], &counts(3), 0, NOW);
        assert_eq!(calm.alarm(), None);
        let idle = EngineHealth::from_parts(Vec::new(), &counts(0), 0, NOW);
        assert_eq!(idle.alarm(), None, "nothing waits: no worker is no alarm");
    }

    #[test]
    fn next_check_in_words() {
        let g = 90_750;
        let words = |state, at| next_check_words(state, at, NOW, g);
        assert_eq!(
            words(State::Unknown, Some(NOW + 12_000)).as_deref(),
            Some("next check due in 12s")
        );
        assert_eq!(
            words(State::Unknown, Some(NOW - 30_000)).as_deref(),
            Some("next check due now")
        );
        assert_eq!(
            words(State::RetryReady, Some(NOW - 250_000)).as_deref(),
            Some("next check overdue by 4m 10s")
        );
        assert_eq!(
            words(State::Processing, Some(NOW - 250_000)).as_deref(),
            Some("next check due now"),
            "a vendor still processing is polled, never counted overdue"
        );
        assert_eq!(words(State::ManualReview, Some(NOW)), None);
        assert_eq!(words(State::Unknown, None), None);
        assert!(claim_advice(g).contains("overdue by more than 1m 30s"));
    }
}
