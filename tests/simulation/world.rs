//! Randomness and time: the seed's generator and the crate's clock on tokio's paused clock.

use std::sync::Mutex;
use std::time::Duration;

use recoverable_write::clock::Clock;
use tokio::time::Instant;

/// SplitMix64: small, seedable, and stable across crate versions.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed ^ 0x005E_ED0F_5EED)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub(crate) fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
    pub(crate) fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

/// The crate's clock in the simulation: tokio's paused clock from the seed's start, on a fixed
/// epoch, plus a skew; jitter from the seed.
#[derive(Debug)]
pub(crate) struct SimClock {
    pub(crate) origin: Instant,
    pub(crate) skew_ms: i64,
    pub(crate) jitter: Mutex<Rng>,
}

pub(crate) const EPOCH_MS: i64 = 1_800_000_000_000;

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        EPOCH_MS + self.origin.elapsed().as_millis() as i64 + self.skew_ms
    }
    fn jitter(&self) -> f64 {
        self.jitter.lock().unwrap().unit()
    }
}
