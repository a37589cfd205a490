//! What happened per interval: operations created, finished and escalated to review, and the
//! review backlog at the end of each interval, read from the ledger's own times (the evidence
//! log's state changes). See [`ListingLedger::activity`](super::ListingLedger::activity).

use super::LedgerError;
use crate::state::State;

/// The most intervals one [`ActivityWindow`] may span.
pub const MAX_BUCKETS: i64 = 1000;

/// The time span an [`Activity`] covers, cut into equal intervals: `[since_ms, until_ms)` in
/// steps of `bucket_ms`.
///
/// ```
/// use recoverable_write::ledger::ActivityWindow;
///
/// // The last day, hour by hour, ending at the next full hour after `now`.
/// let now = 1_700_000_123_456;
/// let window = ActivityWindow::last_day_hourly(now);
/// assert_eq!(window.buckets(), 24);
/// assert_eq!(window.until_ms % 3_600_000, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActivityWindow {
    /// Start of the first interval (ms since epoch, inclusive).
    pub since_ms: i64,
    /// End of the last interval (ms since epoch, exclusive).
    pub until_ms: i64,
    /// Length of one interval (ms).
    pub bucket_ms: i64,
}

impl ActivityWindow {
    /// The window `[since_ms, until_ms)` cut into intervals of `bucket_ms`.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] unless `bucket_ms` is positive, `until_ms - since_ms` is a
    /// positive multiple of it, and there are at most [`MAX_BUCKETS`] intervals.
    pub fn new(since_ms: i64, until_ms: i64, bucket_ms: i64) -> Result<Self, LedgerError> {
        let w = Self {
            since_ms,
            until_ms,
            bucket_ms,
        };
        w.validate()?;
        Ok(w)
    }

    /// The 24 hours ending at the first full hour (UTC) at or after `now_ms`, hour by hour.
    pub fn last_day_hourly(now_ms: i64) -> Self {
        const HOUR: i64 = 3_600_000;
        let until_ms = now_ms
            .div_euclid(HOUR)
            .saturating_add(1)
            .saturating_mul(HOUR);
        Self {
            since_ms: until_ms - 24 * HOUR,
            until_ms,
            bucket_ms: HOUR,
        }
    }

    /// The number of intervals.
    pub fn buckets(&self) -> i64 {
        if self.bucket_ms <= 0 {
            return 0;
        }
        (self.until_ms.saturating_sub(self.since_ms)) / self.bucket_ms
    }

    /// Checks the window (see [`new`](Self::new)).
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] if the window is not one [`new`](Self::new) accepts.
    pub fn validate(&self) -> Result<(), LedgerError> {
        let span = self.until_ms.checked_sub(self.since_ms);
        let ok = self.bucket_ms > 0
            && span.is_some_and(|s| s > 0 && s % self.bucket_ms == 0)
            && self.buckets() <= MAX_BUCKETS;
        if ok {
            Ok(())
        } else {
            Err(LedgerError::Config(format!(
                "invalid activity window: [{}, {}) in steps of {} ms (at most {MAX_BUCKETS} \
                 steps that divide the span)",
                self.since_ms, self.until_ms, self.bucket_ms
            )))
        }
    }
}

/// One interval of an [`Activity`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActivityBucket {
    /// Start of the interval (ms since epoch, inclusive).
    pub start_ms: i64,
    /// End of the interval (ms since epoch, exclusive).
    pub end_ms: i64,
    /// Operations created in it.
    pub created: u64,
    /// Operations that reached a final state (`SUCCEEDED` or `REJECTED`) in it.
    pub finished: u64,
    /// Operations that entered `MANUAL_REVIEW` in it.
    pub escalated: u64,
    /// Operations in `MANUAL_REVIEW` at its end.
    pub backlog: u64,
}

/// Operations created, finished and escalated per interval, and the review backlog at the end
/// of each, over an [`ActivityWindow`] (see
/// [`ListingLedger::activity`](super::ListingLedger::activity)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Activity {
    /// The intervals, oldest first.
    pub buckets: Vec<ActivityBucket>,
    /// Operations in `MANUAL_REVIEW` when the ledger was read (quarantined rows left out).
    pub backlog_now: u64,
}

/// The state changes of one interval, as a backend counts them from its evidence log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawBucket {
    /// The interval's number: `(at_ms - since_ms) / bucket_ms`, from 0; the window's count of
    /// intervals or more for changes at or after its end.
    pub(crate) index: i64,
    pub(crate) created: u64,
    pub(crate) finished: u64,
    pub(crate) escalated: u64,
    /// Operations that left `MANUAL_REVIEW`.
    pub(crate) left_review: u64,
}

/// Which logged state changes count, and as what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Created,
    Finished,
    Escalated,
    LeftReview,
}

/// What one evidence entry counts as (an entry may both leave review and finish).
pub(crate) fn changes_of(
    kind: &str,
    from: Option<State>,
    to: Option<State>,
) -> impl Iterator<Item = Change> {
    let created = kind == super::backend::store_entries::CREATED;
    let moved = matches!((from, to), (Some(f), Some(t)) if f != t);
    [
        (created, Change::Created),
        (
            moved && matches!(to, Some(State::Succeeded | State::Rejected)),
            Change::Finished,
        ),
        (moved && to == Some(State::ManualReview), Change::Escalated),
        (
            moved && from == Some(State::ManualReview),
            Change::LeftReview,
        ),
    ]
    .into_iter()
    .filter_map(|(yes, c)| yes.then_some(c))
}

impl RawBucket {
    pub(crate) fn count(&mut self, change: Change) {
        match change {
            Change::Created => self.created += 1,
            Change::Finished => self.finished += 1,
            Change::Escalated => self.escalated += 1,
            Change::LeftReview => self.left_review += 1,
        }
    }
}

impl Activity {
    /// The activity of `window` from the per-interval changes (in any order, an interval at
    /// most once) and the backlog when read: the backlog at an interval's end is today's,
    /// less the escalations since, plus the operations that left review since.
    pub(crate) fn from_raw(
        window: ActivityWindow,
        backlog_now: u64,
        raw: impl IntoIterator<Item = RawBucket>,
    ) -> Self {
        let n = usize::try_from(window.buckets()).unwrap_or(0);
        let mut per = vec![RawBucket::default(); n];
        // Net change of the backlog after the window's end.
        let mut after: i64 = 0;
        for r in raw {
            let net = r.escalated as i64 - r.left_review as i64;
            match usize::try_from(r.index) {
                Ok(i) if i < n => {
                    let b = &mut per[i];
                    b.created += r.created;
                    b.finished += r.finished;
                    b.escalated += r.escalated;
                    b.left_review += r.left_review;
                }
                Ok(_) => after += net,
                Err(_) => {}
            }
        }
        let mut backlog = backlog_now as i64 - after;
        let mut buckets: Vec<ActivityBucket> = per
            .iter()
            .enumerate()
            .rev()
            .map(|(i, p)| {
                let start_ms = window.since_ms + i as i64 * window.bucket_ms;
                let bucket = ActivityBucket {
                    start_ms,
                    end_ms: start_ms + window.bucket_ms,
                    created: p.created,
                    finished: p.finished,
                    escalated: p.escalated,
                    // Never below zero, even if a purge took some of the log.
                    backlog: u64::try_from(backlog).unwrap_or(0),
                };
                backlog -= p.escalated as i64 - p.left_review as i64;
                bucket
            })
            .collect();
        buckets.reverse();
        Self {
            buckets,
            backlog_now,
        }
    }
}

/// The activity statement of a SQL backend over `operations` and `evidence` (table names; for
/// SQLite the evidence table with its index named),
/// with `sigil` placeholders: one row per interval with changes (`b`, `created`, `finished`,
/// `escalated`, `left_review`), and one row with `b = -1` whose `created` is the review backlog
/// now, in one statement (one snapshot). The evidence is read through the partial index of
/// state changes by time (`rw_evidence_state_changes`): the day's changes, never the history.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn activity_sql(
    scope: &super::TenantScope,
    window: ActivityWindow,
    operations: &str,
    evidence: &str,
    sigil: char,
) -> Result<super::query::Sql, LedgerError> {
    use super::query::{Arg, QUEUE_INDEX_PREDICATE, Sql};
    window.validate()?;
    let mut args = vec![Arg::Int(window.since_ms), Arg::Int(window.bucket_ms)];
    let tenant = match scope {
        super::TenantScope::Tenant(t) => {
            if t.as_str().contains('\0') {
                return Err(LedgerError::Config(
                    "listing filters must not contain NUL characters".to_owned(),
                ));
            }
            args.push(Arg::Text(t.as_str().to_owned()));
            format!(" AND tenant = {sigil}3")
        }
        super::TenantScope::AllTenants => String::new(),
    };
    let (since, bucket) = (format!("{sigil}1"), format!("{sigil}2"));
    let text = format!(
        "SELECT -1 AS b, count(*) AS created, 0 AS finished, 0 AS escalated, 0 AS left_review \
         FROM {operations} WHERE state = 'MANUAL_REVIEW' AND {QUEUE_INDEX_PREDICATE} \
         AND quarantine_reason IS NULL{tenant} \
         UNION ALL \
         SELECT (at_ms - {since}) / {bucket} AS b, \
         sum(CASE WHEN kind = 'created' THEN 1 ELSE 0 END) AS created, \
         sum(CASE WHEN to_state IN ('SUCCEEDED', 'REJECTED') AND from_state <> to_state \
             THEN 1 ELSE 0 END) AS finished, \
         sum(CASE WHEN to_state = 'MANUAL_REVIEW' AND from_state <> to_state \
             THEN 1 ELSE 0 END) AS escalated, \
         sum(CASE WHEN from_state = 'MANUAL_REVIEW' AND from_state <> to_state \
             THEN 1 ELSE 0 END) AS left_review \
         FROM {evidence} WHERE at_ms >= {since} \
         AND (kind = 'created' OR from_state <> to_state){tenant} GROUP BY 1"
    );
    Ok(Sql { text, args })
}

/// Decodes the rows of [`activity_sql`] (`b`, `created`, `finished`, `escalated`,
/// `left_review`, as 64-bit integers).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn from_rows(
    window: ActivityWindow,
    rows: impl IntoIterator<Item = [i64; 5]>,
) -> Activity {
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut backlog_now = 0;
    let mut raw = Vec::new();
    for [b, created, finished, escalated, left_review] in rows {
        if b < 0 {
            backlog_now = n(created);
        } else {
            raw.push(RawBucket {
                index: b,
                created: n(created),
                finished: n(finished),
                escalated: n(escalated),
                left_review: n(left_review),
            });
        }
    }
    Activity::from_raw(window, backlog_now, raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_is_walked_back_from_now() {
        let w = ActivityWindow::new(0, 30, 10).unwrap();
        let raw = [
            RawBucket {
                index: 0,
                escalated: 2,
                ..RawBucket::default()
            },
            RawBucket {
                index: 1,
                left_review: 1,
                created: 4,
                ..RawBucket::default()
            },
            // After the window: one more escalated.
            RawBucket {
                index: 5,
                escalated: 1,
                ..RawBucket::default()
            },
        ];
        let a = Activity::from_raw(w, 4, raw);
        let backlog: Vec<u64> = a.buckets.iter().map(|b| b.backlog).collect();
        // 4 now, 3 at the window's end (one came after), 3 after bucket 1, 4 after bucket 0.
        assert_eq!(backlog, [4, 3, 3]);
        assert_eq!(a.buckets[1].created, 4);
        assert_eq!(a.buckets[2].start_ms, 20);
        assert_eq!(a.buckets[2].end_ms, 30);
    }

    #[test]
    fn bad_windows_are_refused() {
        assert!(ActivityWindow::new(0, 30, 0).is_err());
        assert!(ActivityWindow::new(0, 35, 10).is_err());
        assert!(ActivityWindow::new(30, 0, 10).is_err());
        assert!(ActivityWindow::new(0, 10_010, 10).is_err());
        assert!(ActivityWindow::new(0, 10_000, 10).is_ok());
    }
}
