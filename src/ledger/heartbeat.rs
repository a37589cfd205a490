//! [`WorkerHeartbeat`]: what each recoverer worker records in the ledger after every pass, so
//! the operators' tools can say whether the engine is running ("2 workers alive, last pass 3s
//! ago") instead of assuming it is.

use serde::Serialize;

/// How many promised intervals ([`WorkerHeartbeat::interval_ms`]) may pass without a beat before
/// a worker is counted as gone: one late beat (a slow pass, a pause of the process) is not an
/// alarm, three are.
pub const MISSED_BEATS: i64 = 3;

/// How long the row of a worker that stopped beating is kept (7 days): long enough for a
/// person to see which worker stopped and when, short enough that a fleet that restarts often
/// (a new worker id per run) never fills the table. Rows older than this are deleted by every
/// [`record_heartbeat`](super::ListingLedger::record_heartbeat), in the same statement batch.
pub const DEAD_WORKER_RETENTION_MS: i64 = 7 * 24 * 3_600_000;

/// The longest last-error message kept with a heartbeat (characters).
pub const MAX_ERROR_CHARS: usize = 300;

/// The most heartbeats [`heartbeats`](super::ListingLedger::heartbeats) returns, most recent
/// beat first.
pub const MAX_WORKERS_LISTED: u32 = 100;

/// One recoverer worker's heartbeat: who it is, where it runs, what its last pass did. One row
/// per worker id, replaced at every beat.
///
/// Written by [`Recoverer::run`](crate::Recoverer::run) after every pass (one upsert), read by
/// the review page, the command line's `stats` and the gauges.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkerHeartbeat {
    /// Stable for the life of one [`Recoverer::run`](crate::Recoverer::run): a random id, or
    /// the name the application gave ([`Recoverer::worker_id`](crate::Recoverer::worker_id)).
    pub worker_id: String,
    /// The machine's host name.
    pub host: String,
    /// This crate's version in the worker.
    pub version: String,
    /// When the worker started (ms since the Unix epoch).
    pub started_ms: i64,
    /// The most time the worker promises between two beats (its pause between passes plus the
    /// longest a pass is designed to take, its lease). Alive means a beat within
    /// [`MISSED_BEATS`] of these.
    pub interval_ms: i64,
    /// When its last pass started.
    pub pass_started_ms: i64,
    /// When its last pass finished: the beat itself.
    pub pass_finished_ms: i64,
    /// Rows its last pass claimed (due operations and unsent `PREPARED` ones).
    pub claimed_last_pass: u64,
    /// Rows it claimed since it started.
    pub claimed_total: u64,
    /// Passes that failed (a ledger error or a panic) since it started.
    pub errors: u64,
    /// The last failure's message, without credentials (URLs lose their userinfo and query) and
    /// at most [`MAX_ERROR_CHARS`] long; `None` if no pass failed.
    pub last_error: Option<String>,
}

impl WorkerHeartbeat {
    /// Whether the worker beat within [`MISSED_BEATS`] of its promised interval before `now_ms`.
    pub fn alive_at(&self, now_ms: i64) -> bool {
        now_ms - self.pass_finished_ms <= self.silence_allowed_ms()
    }

    /// The longest silence after which the worker still counts as alive:
    /// [`MISSED_BEATS`] × [`interval_ms`](Self::interval_ms).
    pub fn silence_allowed_ms(&self) -> i64 {
        MISSED_BEATS.saturating_mul(self.interval_ms.max(1))
    }
}

/// The longest worker id, host name and version kept (characters).
const MAX_NAME_CHARS: usize = 200;

/// `beat` as a backend stores it: an empty worker id or a NUL character refused (PostgreSQL
/// cannot store one, and the backends must agree), the texts cut to their bounds.
pub(crate) fn checked(mut beat: WorkerHeartbeat) -> Result<WorkerHeartbeat, super::LedgerError> {
    let texts = [&beat.worker_id, &beat.host, &beat.version]
        .into_iter()
        .chain(beat.last_error.as_ref());
    if beat.worker_id.is_empty() || texts.into_iter().any(|t| t.contains('\0')) {
        return Err(super::LedgerError::Config(
            "a heartbeat needs a worker id, and no text of it may contain a NUL character"
                .to_owned(),
        ));
    }
    for (text, max) in [
        (&mut beat.worker_id, MAX_NAME_CHARS),
        (&mut beat.host, MAX_NAME_CHARS),
        (&mut beat.version, MAX_NAME_CHARS),
    ] {
        cut(text, max);
    }
    if let Some(e) = &mut beat.last_error {
        cut(e, MAX_ERROR_CHARS);
    }
    Ok(beat)
}

/// Cuts `text` to at most `max` characters, on a character boundary.
fn cut(text: &mut String, max: usize) {
    if let Some((i, _)) = text.char_indices().nth(max) {
        text.truncate(i);
    }
}

/// The heartbeats of `rows`, most recent beat first, at most [`MAX_WORKERS_LISTED`].
pub(crate) fn most_recent_first(mut rows: Vec<WorkerHeartbeat>) -> Vec<WorkerHeartbeat> {
    rows.sort_by(|a, b| {
        b.pass_finished_ms
            .cmp(&a.pass_finished_ms)
            .then_with(|| a.worker_id.cmp(&b.worker_id))
    });
    rows.truncate(MAX_WORKERS_LISTED as usize);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat() -> WorkerHeartbeat {
        WorkerHeartbeat {
            worker_id: "w".into(),
            host: "h".into(),
            version: "1".into(),
            started_ms: 0,
            interval_ms: 1_000,
            pass_started_ms: 10_000,
            pass_finished_ms: 10_000,
            claimed_last_pass: 0,
            claimed_total: 0,
            errors: 0,
            last_error: None,
        }
    }

    #[test]
    fn alive_means_a_beat_within_three_promised_intervals() {
        let b = beat();
        assert!(b.alive_at(13_000));
        assert!(!b.alive_at(13_001));
    }

    #[test]
    fn stored_texts_are_bounded_and_an_empty_id_is_refused() {
        let mut b = beat();
        b.last_error = Some("é".repeat(MAX_ERROR_CHARS + 10));
        let stored = checked(b).expect("valid");
        assert_eq!(
            stored.last_error.map(|e| e.chars().count()),
            Some(MAX_ERROR_CHARS)
        );
        let mut empty = beat();
        empty.worker_id.clear();
        assert!(checked(empty).is_err());
        let mut nul = beat();
        nul.host = "a\0b".into();
        assert!(checked(nul).is_err());
    }
}
