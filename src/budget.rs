//! The persisted recovery budget.
//!
//! # Why one budget, on the row?
//!
//! An SDK that retries three times, under an HTTP client that retries twice, under a runtime that
//! retries three times, sends up to eighteen writes for one intent, and each layer's counter dies
//! with its process. This crate makes the recovery engine the only retry owner and keeps its
//! counters on the operation row, so a restart reads the old budget instead of starting over
//! (seed 000: "SDK, HTTP client, and Runtime retries must be unified into a single budget").
//!
//! A [`BudgetPolicy`] is frozen onto each operation when it is created; changing the policy later
//! applies to new operations only.
//!
//! [`BudgetPolicy::validate`] bounds every field (the `MAX_*` constants) so that no time
//! computation can overflow, and names the field at fault ([`BudgetError`]). The derived
//! durations ([`lease`](BudgetPolicy::lease), [`attempt_timeout`](BudgetPolicy::attempt_timeout),
//! [`window`](BudgetPolicy::window), [`query_delay`](BudgetPolicy::query_delay)) saturate and
//! clamp even for a policy that was never validated (a row written by an older version), and
//! server or reconciler hints are held to a year.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits for one operation's recovery. Defaults follow seed 000: a 60 s recovery window, at most
/// three write attempts including the first, queries limited separately with exponential backoff
/// and full jitter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetPolicy {
    /// Write attempts, including the first. Default 3.
    pub max_attempts: u32,
    /// Reconciliation queries. Default 10.
    pub max_queries: u32,
    /// Recovery window from the first send, in milliseconds. Default 60 000.
    pub window_ms: u64,
    /// Time one attempt may take before it is abandoned as unknown, in milliseconds. Default
    /// 10 000. Always shorter than the lease, so the layer's own attempt is dead before anyone else
    /// may act.
    pub attempt_timeout_ms: u64,
    /// Extra lease time beyond the attempt timeout, in milliseconds. Default 5 000.
    pub lease_margin_ms: u64,
    /// First query backoff, in milliseconds. Default 250.
    pub query_backoff_base_ms: u64,
    /// Largest query backoff, in milliseconds. Default 10 000.
    pub query_backoff_cap_ms: u64,
}

impl Default for BudgetPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            max_queries: 10,
            window_ms: 60_000,
            attempt_timeout_ms: 10_000,
            lease_margin_ms: 5_000,
            query_backoff_base_ms: 250,
            query_backoff_cap_ms: 10_000,
        }
    }
}

/// One hour in milliseconds.
const HOUR_MS: u64 = 3_600_000;
/// One day in milliseconds.
const DAY_MS: u64 = 24 * HOUR_MS;

impl BudgetPolicy {
    /// Most write attempts a policy may allow (including the first send).
    pub const MAX_ATTEMPTS: u32 = 1_000;
    /// Most reconciliation queries a policy may allow.
    pub const MAX_QUERIES: u32 = 100_000;
    /// Longest recovery window: 30 days.
    pub const MAX_WINDOW_MS: u64 = 30 * DAY_MS;
    /// Longest attempt timeout: 6 hours.
    pub const MAX_ATTEMPT_TIMEOUT_MS: u64 = 6 * HOUR_MS;
    /// Longest lease margin: 1 hour.
    pub const MAX_LEASE_MARGIN_MS: u64 = HOUR_MS;
    /// Longest query backoff (base and cap): 1 day.
    pub const MAX_QUERY_BACKOFF_MS: u64 = DAY_MS;

    /// The lease taken with every claim: attempt timeout plus margin.
    ///
    /// Always longer than [`attempt_timeout`](Self::attempt_timeout), even for a policy that
    /// would fail [`validate`](Self::validate) (a row written before validation existed): the
    /// margin counts as at least 1 ms and at most [`MAX_LEASE_MARGIN_MS`](Self::MAX_LEASE_MARGIN_MS),
    /// so the sum never overflows.
    pub fn lease(&self) -> Duration {
        let margin = self.lease_margin_ms.clamp(1, Self::MAX_LEASE_MARGIN_MS);
        self.attempt_timeout()
            .saturating_add(Duration::from_millis(margin))
    }

    /// The attempt timeout, at most [`MAX_ATTEMPT_TIMEOUT_MS`](Self::MAX_ATTEMPT_TIMEOUT_MS).
    pub fn attempt_timeout(&self) -> Duration {
        Duration::from_millis(self.attempt_timeout_ms.min(Self::MAX_ATTEMPT_TIMEOUT_MS))
    }

    /// The recovery window, at most [`MAX_WINDOW_MS`](Self::MAX_WINDOW_MS).
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms.min(Self::MAX_WINDOW_MS))
    }

    /// Checks the policy makes sense and that no later time computation can overflow: every
    /// count and duration is within its bound (the `MAX_*` constants), the window fits one
    /// attempt, the lease outlives the attempt, and the backoff base does not exceed its cap.
    ///
    /// ```
    /// use recoverable_write::BudgetPolicy;
    ///
    /// let err = BudgetPolicy { max_attempts: 0, ..BudgetPolicy::default() }
    ///     .validate()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "max_attempts");
    /// assert!(err.to_string().contains("at least 1"));
    /// ```
    pub fn validate(&self) -> Result<(), BudgetError> {
        use BudgetBound::{AtLeast, AtLeastField, AtMost, AtMostField};
        let fail = |field, value: u64, bound, why| {
            Err(BudgetError {
                field,
                value,
                bound,
                why,
            })
        };
        let attempts = u64::from(self.max_attempts);
        if attempts < 1 {
            return fail(
                "max_attempts",
                attempts,
                AtLeast(1),
                "the first send is an attempt; with 0 every write would go to review unsent",
            );
        }
        if attempts > u64::from(Self::MAX_ATTEMPTS) {
            return fail(
                "max_attempts",
                attempts,
                AtMost(u64::from(Self::MAX_ATTEMPTS)),
                "",
            );
        }
        let queries = u64::from(self.max_queries);
        if queries > u64::from(Self::MAX_QUERIES) {
            return fail(
                "max_queries",
                queries,
                AtMost(u64::from(Self::MAX_QUERIES)),
                "",
            );
        }
        if self.attempt_timeout_ms < 1 {
            return fail("attempt_timeout_ms", 0, AtLeast(1), "");
        }
        if self.attempt_timeout_ms > Self::MAX_ATTEMPT_TIMEOUT_MS {
            return fail(
                "attempt_timeout_ms",
                self.attempt_timeout_ms,
                AtMost(Self::MAX_ATTEMPT_TIMEOUT_MS),
                "",
            );
        }
        if self.lease_margin_ms < 1 {
            return fail(
                "lease_margin_ms",
                0,
                AtLeast(1),
                "the attempt must die before its lease",
            );
        }
        if self.lease_margin_ms > Self::MAX_LEASE_MARGIN_MS {
            return fail(
                "lease_margin_ms",
                self.lease_margin_ms,
                AtMost(Self::MAX_LEASE_MARGIN_MS),
                "",
            );
        }
        if self.window_ms > Self::MAX_WINDOW_MS {
            return fail("window_ms", self.window_ms, AtMost(Self::MAX_WINDOW_MS), "");
        }
        if self.window_ms < self.attempt_timeout_ms {
            return fail(
                "window_ms",
                self.window_ms,
                AtLeastField("attempt_timeout_ms", self.attempt_timeout_ms),
                "the window must fit one attempt",
            );
        }
        if self.query_backoff_cap_ms > Self::MAX_QUERY_BACKOFF_MS {
            return fail(
                "query_backoff_cap_ms",
                self.query_backoff_cap_ms,
                AtMost(Self::MAX_QUERY_BACKOFF_MS),
                "",
            );
        }
        if self.query_backoff_base_ms > self.query_backoff_cap_ms {
            return fail(
                "query_backoff_base_ms",
                self.query_backoff_base_ms,
                AtMostField("query_backoff_cap_ms", self.query_backoff_cap_ms),
                "",
            );
        }
        Ok(())
    }

    /// The policy itself when it passes [`validate`](Self::validate).
    ///
    /// ```
    /// use recoverable_write::BudgetPolicy;
    ///
    /// assert!(BudgetPolicy::default().validated().is_ok());
    /// assert!(BudgetPolicy { window_ms: u64::MAX, ..BudgetPolicy::default() }.validated().is_err());
    /// ```
    pub fn validated(self) -> Result<Self, BudgetError> {
        self.validate()?;
        Ok(self)
    }

    /// The delay before query number `n` (0-based): exponential backoff with full jitter,
    /// `uniform(0, min(cap, base * 2^n))`, but never less than the server's `hint`.
    ///
    /// `unit` is a uniform random number in `[0, 1)`, passed in so the computation stays pure.
    ///
    /// Never overflows, whatever the policy or the hint: the backoff is held to
    /// [`MAX_QUERY_BACKOFF_MS`](Self::MAX_QUERY_BACKOFF_MS) and the hint (a server's
    /// `Retry-After`, a reconciler's answer) to a year.
    pub fn query_delay(&self, n: u32, hint: Option<Duration>, unit: f64) -> Duration {
        let cap = self.query_backoff_cap_ms.min(Self::MAX_QUERY_BACKOFF_MS);
        let exp = self
            .query_backoff_base_ms
            .saturating_mul(1u64.checked_shl(n.min(63)).unwrap_or(u64::MAX))
            .min(cap);
        // NaN clamps to NaN, and `as u64` turns NaN into 0 and saturates out-of-range values.
        let unit = unit.clamp(0.0, 1.0);
        let jittered = Duration::from_millis((exp as f64 * unit) as u64);
        match hint.map(clamp_hint) {
            Some(h) if h > jittered => h,
            _ => jittered,
        }
    }
}

/// A server's or reconciler's delay hint held to one year, as a `Retry-After` is
/// (the cap): a hint that long is past every recovery window anyway, and the bound keeps
/// `now + hint` from overflowing the ledger's millisecond timestamps.
pub(crate) fn clamp_hint(hint: Duration) -> Duration {
    hint.min(crate::contract::MAX_RETRY_AFTER)
}

/// A hint in milliseconds, clamped as [`clamp_hint`] does, ready to add to a ledger timestamp.
pub(crate) fn hint_ms(hint: Option<Duration>) -> i64 {
    // At most a year of milliseconds (about 3.2e10): the conversion cannot fail.
    hint.map_or(0, |h| {
        i64::try_from(clamp_hint(h).as_millis()).unwrap_or(i64::MAX)
    })
}

/// A [`BudgetPolicy`] that [`validate`](BudgetPolicy::validate) refuses: the field, its value
/// and the bound it breaks.
///
/// Displayed as `budget policy: window_ms = 9999 must be at least attempt_timeout_ms (10000):
/// the window must fit one attempt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetError {
    field: &'static str,
    value: u64,
    bound: BudgetBound,
    why: &'static str,
}

/// The bound a [`BudgetError`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BudgetBound {
    /// The value must be at least this.
    AtLeast(u64),
    /// The value must be at most this.
    AtMost(u64),
    /// The value must be at least another field's value (its name and value).
    AtLeastField(&'static str, u64),
    /// The value must be at most another field's value (its name and value).
    AtMostField(&'static str, u64),
}

impl BudgetError {
    /// The field at fault (`max_attempts`, `window_ms`, ...).
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The value it holds.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// The bound it breaks.
    pub fn bound(&self) -> BudgetBound {
        self.bound
    }
}

impl std::fmt::Display for BudgetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "budget policy: {} = {} must be ", self.field, self.value)?;
        match self.bound {
            BudgetBound::AtLeast(b) => write!(f, "at least {b}")?,
            BudgetBound::AtMost(b) => {
                write!(f, "at most {b}")?;
                // A duration bound also in words: `at most 2592000000 (30 days)`.
                if self.field.ends_with("_ms") {
                    match (b % DAY_MS, b % HOUR_MS) {
                        (0, _) => write!(f, " ({} days)", b / DAY_MS)?,
                        (_, 0) => write!(f, " ({} hours)", b / HOUR_MS)?,
                        _ => {}
                    }
                }
            }
            BudgetBound::AtLeastField(other, b) => write!(f, "at least {other} ({b})")?,
            BudgetBound::AtMostField(other, b) => write!(f, "at most {other} ({b})")?,
        }
        if !self.why.is_empty() {
            write!(f, ": {}", self.why)?;
        }
        Ok(())
    }
}

impl std::error::Error for BudgetError {}

/// A process-wide token bucket per target that caps replays, so an incident cannot turn into a
/// retry storm against one vendor.
///
/// Each target (e.g. a host) has a bucket of at most `burst` tokens, refilled continuously at
/// `per_second`. A replay takes one token; with none left the replay waits for the next pass (it
/// is not counted as an attempt).
///
/// # Differences from `tower::retry::budget::TpsBudget`
///
/// tower's budget ties retries to a percentage of recent successful requests; this one is a plain
/// rate cap per target, because recovery replays are not proportional to live traffic (an outage
/// can leave hundreds of operations due at once, with no live traffic at all). The arithmetic is
/// in `f64` tokens with the refill capped at `burst`, so long idle periods never overflow and a
/// bucket never goes negative.
#[derive(Debug)]
pub struct ReplayLimiter {
    per_second: f64,
    burst: f64,
    buckets: std::sync::Mutex<std::collections::HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: std::time::Instant,
}

impl ReplayLimiter {
    /// At most `burst` replays at once per target, refilled at `per_second`.
    pub fn new(per_second: f64, burst: u32) -> Self {
        Self {
            per_second: if per_second.is_finite() {
                per_second.max(0.0)
            } else {
                0.0
            },
            burst: f64::from(burst),
            buckets: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Takes a token for `target` at `now`; `false` when the bucket is empty.
    pub fn try_acquire_at(&self, target: &str, now: std::time::Instant) -> bool {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let b = buckets.entry(target.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        // A clock that did not advance (or an `at` in the future) refills nothing.
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.per_second).min(self.burst);
        if now > b.at {
            b.at = now;
        }
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes a token for `target` now.
    pub fn try_acquire(&self, target: &str) -> bool {
        self.try_acquire_at(target, std::time::Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any u64, weighted towards the interesting ranges: small, around the bounds, near MAX.
    fn arb_ms() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            0u64..=100_000,
            0u64..=2 * BudgetPolicy::MAX_WINDOW_MS,
            (u64::MAX - 100_000)..=u64::MAX,
        ]
    }

    fn arb_count() -> impl Strategy<Value = u32> {
        prop_oneof![any::<u32>(), 0u32..=10, (u32::MAX - 10)..=u32::MAX]
    }

    fn arb_any_policy() -> impl Strategy<Value = BudgetPolicy> {
        (
            arb_count(),
            arb_count(),
            arb_ms(),
            arb_ms(),
            arb_ms(),
            arb_ms(),
            arb_ms(),
        )
            .prop_map(|(a, q, w, t, m, b, c)| BudgetPolicy {
                max_attempts: a,
                max_queries: q,
                window_ms: w,
                attempt_timeout_ms: t,
                lease_margin_ms: m,
                query_backoff_base_ms: b,
                query_backoff_cap_ms: c,
            })
    }

    /// Values near the bounds, so about half the policies pass validation.
    fn arb_near_bounds() -> impl Strategy<Value = BudgetPolicy> {
        (
            0u32..=BudgetPolicy::MAX_ATTEMPTS + 1,
            0u32..=BudgetPolicy::MAX_QUERIES + 1,
            0u64..=BudgetPolicy::MAX_WINDOW_MS + 1,
            0u64..=BudgetPolicy::MAX_ATTEMPT_TIMEOUT_MS + 1,
            0u64..=BudgetPolicy::MAX_LEASE_MARGIN_MS + 1,
            0u64..=BudgetPolicy::MAX_QUERY_BACKOFF_MS + 1,
            0u64..=BudgetPolicy::MAX_QUERY_BACKOFF_MS + 1,
        )
            .prop_map(|(a, q, w, t, m, b, c)| BudgetPolicy {
                max_attempts: a,
                max_queries: q,
                window_ms: w.max(t),
                attempt_timeout_ms: t,
                lease_margin_ms: m,
                query_backoff_base_ms: b.min(c),
                query_backoff_cap_ms: c,
            })
    }

    fn arb_any_hint() -> impl Strategy<Value = Option<Duration>> {
        prop::option::of(prop_oneof![
            Just(Duration::MAX),
            (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
            any::<u64>().prop_map(Duration::from_millis),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Whatever the fields hold, `validate` refuses, or every derived time fits a ledger
        /// timestamp (i64 milliseconds added to "now") and the lease outlives the attempt.
        /// The computations never panic, validated or not.
        #[test]
        fn any_policy_is_refused_or_safe_to_compute_with(
            p in prop_oneof![arb_any_policy(), arb_near_bounds()],
            n in any::<u32>(),
            hint in arb_any_hint(),
            unit in prop_oneof![any::<f64>(), 0.0f64..1.0, Just(f64::NAN), Just(f64::INFINITY)],
        ) {
            let lease = p.lease();
            let timeout = p.attempt_timeout();
            let window = p.window();
            let delay = p.query_delay(n, hint, unit);
            let _ = hint_ms(hint);
            // Even unvalidated, the lease outlives the attempt.
            prop_assert!(lease > timeout);
            // 2^50 ms is about 35,000 years: adding any of these to a current timestamp is safe.
            let room = 1u128 << 50;
            for d in [lease, timeout, window, delay] {
                prop_assert!(d.as_millis() < room, "{:?}", d);
            }
            if p.validate().is_ok() {
                prop_assert!(p.max_attempts >= 1);
                prop_assert_eq!(timeout, Duration::from_millis(p.attempt_timeout_ms));
                prop_assert_eq!(window, Duration::from_millis(p.window_ms));
                prop_assert_eq!(
                    lease,
                    Duration::from_millis(p.attempt_timeout_ms + p.lease_margin_ms)
                );
                prop_assert!(window >= timeout);
                prop_assert!(p.clone().validated().is_ok());
            } else {
                prop_assert!(p.clone().validated().is_err());
            }
        }
    }

    #[test]
    fn hints_are_clamped_to_a_year() {
        let year = crate::contract::MAX_RETRY_AFTER;
        assert_eq!(clamp_hint(Duration::MAX), year);
        assert_eq!(clamp_hint(Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(hint_ms(None), 0);
        assert_eq!(hint_ms(Some(Duration::from_millis(1_500))), 1_500);
        assert_eq!(hint_ms(Some(Duration::MAX)), year.as_millis() as i64);
        let p = BudgetPolicy::default();
        assert_eq!(p.query_delay(0, Some(Duration::MAX), 0.5), year);
    }

    #[test]
    fn errors_name_the_field_and_the_bound() {
        let e = BudgetPolicy {
            window_ms: 9_999,
            ..BudgetPolicy::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field(), "window_ms");
        assert_eq!(e.value(), 9_999);
        assert_eq!(
            e.bound(),
            BudgetBound::AtLeastField("attempt_timeout_ms", 10_000)
        );
        assert_eq!(
            e.to_string(),
            "budget policy: window_ms = 9999 must be at least attempt_timeout_ms (10000): the window must fit one attempt"
        );
        let e = BudgetPolicy {
            window_ms: u64::MAX,
            ..BudgetPolicy::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "budget policy: window_ms = 18446744073709551615 must be at most 2592000000 (30 days)"
        );
        let e = BudgetPolicy {
            max_attempts: 0,
            ..BudgetPolicy::default()
        }
        .validated()
        .unwrap_err();
        assert_eq!(e.field(), "max_attempts");
        assert!(e.to_string().contains("at least 1"), "{e}");
    }

    #[test]
    fn full_jitter_stays_under_the_cap_and_honours_hints() {
        let p = BudgetPolicy::default();
        assert_eq!(p.query_delay(0, None, 0.0), Duration::ZERO);
        assert_eq!(p.query_delay(0, None, 0.999), Duration::from_millis(249));
        assert_eq!(p.query_delay(3, None, 0.5), Duration::from_millis(1000));
        assert_eq!(p.query_delay(40, None, 0.999), Duration::from_millis(9990));
        assert_eq!(p.query_delay(200, None, 1.0), Duration::from_millis(10_000));
        assert_eq!(
            p.query_delay(0, Some(Duration::from_secs(2)), 0.5),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn default_policy_is_valid_and_lease_outlives_the_attempt() {
        let p = BudgetPolicy::default();
        p.validate().unwrap();
        assert!(p.lease() > p.attempt_timeout());
        let bad = BudgetPolicy {
            max_attempts: 0,
            ..p
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn validate_refuses_values_that_would_overflow_later() {
        let d = BudgetPolicy::default();
        let cases = [
            (
                BudgetPolicy {
                    max_attempts: u32::MAX,
                    ..d.clone()
                },
                "max_attempts",
            ),
            (
                BudgetPolicy {
                    max_queries: u32::MAX,
                    ..d.clone()
                },
                "max_queries",
            ),
            (
                BudgetPolicy {
                    window_ms: u64::MAX,
                    ..d.clone()
                },
                "window_ms",
            ),
            (
                BudgetPolicy {
                    window_ms: 30 * 24 * 3_600_000 + 1,
                    ..d.clone()
                },
                "window_ms",
            ),
            (
                BudgetPolicy {
                    attempt_timeout_ms: u64::MAX / 2,
                    window_ms: 30 * 24 * 3_600_000,
                    ..d.clone()
                },
                "attempt_timeout_ms",
            ),
            (
                BudgetPolicy {
                    lease_margin_ms: u64::MAX,
                    ..d.clone()
                },
                "lease_margin_ms",
            ),
            (
                BudgetPolicy {
                    query_backoff_cap_ms: u64::MAX,
                    ..d.clone()
                },
                "query_backoff_cap_ms",
            ),
        ];
        for (p, field) in cases {
            let err = p.validate().expect_err(field).to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn an_unvalidated_policy_never_panics_and_its_lease_outlives_the_attempt() {
        // A row written before validation existed may hold anything; the arithmetic must hold.
        let p = BudgetPolicy {
            attempt_timeout_ms: u64::MAX,
            lease_margin_ms: u64::MAX,
            window_ms: u64::MAX,
            query_backoff_base_ms: u64::MAX,
            query_backoff_cap_ms: u64::MAX,
            ..BudgetPolicy::default()
        };
        assert!(p.lease() > p.attempt_timeout());
        let p = BudgetPolicy {
            lease_margin_ms: 0,
            ..p
        };
        assert!(p.lease() > p.attempt_timeout());
        // Every delay fits the ledger's i64 milliseconds with room to add to "now".
        let year_ms = 366 * 24 * 3_600_000u128;
        for hint in [
            None,
            Some(Duration::MAX),
            Some(Duration::from_secs(1_000_000_000_000)),
        ] {
            assert!(p.query_delay(u32::MAX, hint, 0.999).as_millis() <= year_ms);
        }
    }

    #[test]
    fn limiter_caps_bursts_and_refills_at_the_rate() {
        use std::time::{Duration, Instant};
        let l = ReplayLimiter::new(2.0, 3);
        let t0 = Instant::now();
        // A full bucket allows exactly `burst` replays at once.
        assert!((0..3).all(|_| l.try_acquire_at("a", t0)));
        assert!(!l.try_acquire_at("a", t0));
        // Targets are independent.
        assert!(l.try_acquire_at("b", t0));
        // 2 per second: 499 ms is not enough for one token, 500 ms is.
        assert!(!l.try_acquire_at("a", t0 + Duration::from_millis(499)));
        assert!(l.try_acquire_at("a", t0 + Duration::from_millis(500)));
        assert!(!l.try_acquire_at("a", t0 + Duration::from_millis(500)));
        // A long idle period refills to the burst, never beyond (no overflow).
        let later = t0 + Duration::from_secs(365 * 24 * 3600);
        assert_eq!((0..10).filter(|_| l.try_acquire_at("a", later)).count(), 3);
        // Time going backwards refills nothing and never panics.
        assert!(!l.try_acquire_at("a", t0));
    }

    #[test]
    fn limiter_accumulates_fractional_tokens() {
        use std::time::{Duration, Instant};
        let l = ReplayLimiter::new(0.5, 1);
        let t0 = Instant::now();
        assert!(l.try_acquire_at("a", t0));
        // Four polls 0.5 s apart add up to one token (4 × 0.25), with no rounding loss.
        let granted: Vec<bool> = (1..=4)
            .map(|i| l.try_acquire_at("a", t0 + Duration::from_millis(500 * i)))
            .collect();
        assert_eq!(granted, vec![false, false, false, true]);
        // A zero rate never refills; a NaN rate is treated as zero.
        let z = ReplayLimiter::new(f64::NAN, 1);
        assert!(z.try_acquire_at("a", t0));
        assert!(!z.try_acquire_at("a", t0 + Duration::from_secs(1000)));
    }
}
