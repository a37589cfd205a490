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

impl BudgetPolicy {
    /// The lease taken with every claim: attempt timeout plus margin.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.attempt_timeout_ms + self.lease_margin_ms)
    }

    /// The attempt timeout.
    pub fn attempt_timeout(&self) -> Duration {
        Duration::from_millis(self.attempt_timeout_ms)
    }

    /// Checks the policy makes sense.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1 (the first send)".into());
        }
        if self.attempt_timeout_ms == 0 {
            return Err("attempt_timeout_ms must be positive".into());
        }
        if self.lease_margin_ms == 0 {
            return Err(
                "lease_margin_ms must be positive: the attempt must die before its lease".into(),
            );
        }
        if self.window_ms < self.attempt_timeout_ms {
            return Err(
                "window_ms must be at least attempt_timeout_ms: the window must fit one attempt"
                    .into(),
            );
        }
        if self.query_backoff_base_ms > self.query_backoff_cap_ms {
            return Err("query_backoff_base_ms exceeds query_backoff_cap_ms".into());
        }
        Ok(())
    }

    /// The delay before query number `n` (0-based): exponential backoff with full jitter,
    /// `uniform(0, min(cap, base * 2^n))`, but never less than the server's `hint`.
    ///
    /// `unit` is a uniform random number in `[0, 1)`, passed in so the computation stays pure.
    pub fn query_delay(&self, n: u32, hint: Option<Duration>, unit: f64) -> Duration {
        let exp = self
            .query_backoff_base_ms
            .saturating_mul(1u64.checked_shl(n.min(63)).unwrap_or(u64::MAX))
            .min(self.query_backoff_cap_ms);
        let unit = unit.clamp(0.0, 1.0);
        let jittered = Duration::from_millis((exp as f64 * unit) as u64);
        match hint {
            Some(h) if h > jittered => h,
            _ => jittered,
        }
    }
}

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
