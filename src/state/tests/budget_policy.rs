//! `BudgetPolicy`: the query delay and its backoff, validation, and the timeouts the machine
//! schedules by.

use super::*;

/// `min(cap, base * 2^n)` computed without overflow, independently of the code under test.
fn ceiling(p: &BudgetPolicy, n: u32) -> u64 {
    let exp = (p.query_backoff_base_ms as u128) << n.min(64);
    exp.min(p.query_backoff_cap_ms as u128) as u64
}

fn arb_backoff() -> impl Strategy<Value = BudgetPolicy> {
    (0u64..=10_000, 0u64..=1_000_000).prop_map(|(base, extra)| BudgetPolicy {
        query_backoff_base_ms: base,
        query_backoff_cap_ms: base + extra,
        ..BudgetPolicy::default()
    })
}

proptest! {
    #[test]
    fn full_jitter_is_uniform_under_the_capped_exponential(
        p in arb_backoff(),
        n in 0u32..=64,
        unit in 0.0f64..1.0,
    ) {
        let top = ceiling(&p, n);
        let d = p.query_delay(n, None, unit).as_millis();
        prop_assert!(d <= top as u128, "{} > {}", d, top);
        // Full jitter: the delay scales with the random unit over the whole range
        // (not "half fixed, half random").
        let exact = top as f64 * unit;
        prop_assert!((d as f64 - exact).abs() < 1.0, "{} vs {}", d, exact);
        prop_assert_eq!(p.query_delay(n, None, 0.0), Duration::ZERO);
    }

    #[test]
    fn backoff_grows_with_n_up_to_the_cap(p in arb_backoff(), unit in 0.0f64..1.0) {
        let mut prev = Duration::ZERO;
        for n in 0..=64 {
            let d = p.query_delay(n, None, unit);
            prop_assert!(d >= prev, "n={}: {:?} < {:?}", n, d, prev);
            prop_assert!(d <= Duration::from_millis(p.query_backoff_cap_ms));
            prev = d;
        }
        // Past the doubling range the delay saturates at the cap, never wraps.
        if p.query_backoff_base_ms > 0 {
            let cap = p.query_backoff_cap_ms as f64 * unit;
            prop_assert!((p.query_delay(64, None, unit).as_millis() as f64 - cap).abs() < 1.0);
            prop_assert_eq!(p.query_delay(u32::MAX, None, unit), p.query_delay(64, None, unit));
        }
    }

    #[test]
    fn the_hint_is_a_minimum(
        p in arb_backoff(),
        n in 0u32..=64,
        unit in 0.0f64..1.0,
        hint_ms in 0u64..=2_000_000,
    ) {
        let hint = Duration::from_millis(hint_ms);
        let plain = p.query_delay(n, None, unit);
        let d = p.query_delay(n, Some(hint), unit);
        prop_assert!(d >= hint);
        prop_assert!(d >= plain);
        prop_assert_eq!(d, hint.max(plain));
    }

    #[test]
    fn larger_units_never_give_shorter_delays(
        p in arb_backoff(),
        n in 0u32..=64,
        a in 0.0f64..1.0,
        b in 0.0f64..1.0,
    ) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        prop_assert!(p.query_delay(n, None, lo) <= p.query_delay(n, None, hi));
    }
}

#[test]
fn default_backoff_values() {
    let p = BudgetPolicy::default();
    assert_eq!(p.query_delay(0, None, 0.5), Duration::from_millis(125));
    assert_eq!(p.query_delay(5, None, 0.5), Duration::from_millis(4_000));
    assert_eq!(p.query_delay(6, None, 0.5), Duration::from_millis(5_000));
    assert_eq!(p.query_delay(64, None, 0.5), Duration::from_millis(5_000));
    assert_eq!(
        p.query_delay(6, Some(Duration::from_millis(4_999)), 0.5),
        Duration::from_millis(5_000)
    );
    assert_eq!(
        p.query_delay(6, Some(Duration::from_millis(5_001)), 0.5),
        Duration::from_millis(5_001)
    );
}

#[test]
fn extreme_backoff_saturates_instead_of_overflowing() {
    let p = BudgetPolicy {
        query_backoff_base_ms: u64::MAX / 2,
        query_backoff_cap_ms: u64::MAX,
        ..BudgetPolicy::default()
    };
    for n in [0, 1, 2, 63, 64, u32::MAX] {
        assert!(p.query_delay(n, None, 0.999_999) <= Duration::from_millis(u64::MAX));
    }
    // Out-of-range units are clamped to [0, 1].
    let p = BudgetPolicy::default();
    assert_eq!(p.query_delay(3, None, -1.0), Duration::ZERO);
    assert_eq!(p.query_delay(3, None, 7.0), Duration::from_millis(2_000));
    assert_eq!(p.query_delay(3, None, f64::NAN), Duration::ZERO);
}

#[test]
fn validate_accepts_sane_policies() {
    BudgetPolicy::default().validate().unwrap();
    BudgetPolicy {
        max_attempts: 1,
        max_queries: 0,
        query_backoff_base_ms: 500,
        query_backoff_cap_ms: 500,
        ..BudgetPolicy::default()
    }
    .validate()
    .unwrap();
}

#[test]
fn validate_rejects_each_nonsense_field() {
    let d = BudgetPolicy::default();
    let cases = [
        (
            BudgetPolicy {
                max_attempts: 0,
                ..d.clone()
            },
            "max_attempts",
        ),
        (
            BudgetPolicy {
                attempt_timeout_ms: 0,
                ..d.clone()
            },
            "attempt_timeout_ms",
        ),
        (
            BudgetPolicy {
                lease_margin_ms: 0,
                ..d.clone()
            },
            "lease_margin_ms",
        ),
        (
            BudgetPolicy {
                query_backoff_base_ms: 10_001,
                ..d.clone()
            },
            "query_backoff_base_ms",
        ),
        (
            BudgetPolicy {
                window_ms: 9_999,
                ..d.clone()
            },
            "window_ms",
        ),
    ];
    for (p, field) in cases {
        let err = p.validate().expect_err(field);
        assert_eq!(err.field(), field);
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
}

#[test]
fn the_lease_outlives_the_attempt() {
    let p = BudgetPolicy {
        attempt_timeout_ms: 7_000,
        lease_margin_ms: 1,
        ..BudgetPolicy::default()
    };
    assert_eq!(p.attempt_timeout(), Duration::from_millis(7_000));
    assert_eq!(p.lease(), Duration::from_millis(7_001));
}
