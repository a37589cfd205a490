//! Time as the crate reads it.
//!
//! Leases, due times and recovery windows are stored as milliseconds since the Unix epoch, so
//! that every process sharing a ledger can read them. Reading the wall clock directly for them
//! would let a clock step break a lease: a forward step larger than the lease margin makes an
//! attempt that is still on the wire look expired, and the recovery engine may act on it.
//!
//! [`ProcessClock`], the default, reads the wall clock **once per process** and advances that
//! reading with the monotonic clock. Within one process, time never steps: an attempt this
//! process registered can only look expired once its lease has really elapsed, whatever the
//! wall clock does meanwhile (its own deadline, on the monotonic clock, is shorter than the
//! lease). Across processes sharing one ledger, leases compare readings taken by different
//! processes: two processes' readings differ by the clock steps that happened between their
//! start-ups plus their drift. A live attempt of another process is safe as long as that
//! difference stays below the lease margin (the budget's lease minus its attempt timeout, 5 s
//! by default): keep machines on NTP, and prefer `PostgresLedger`'s database clock (the
//! default there) when many machines share a ledger.
//!
//! [`ProcessClock`] follows `tokio::time::Instant`, so a test runtime with paused time
//! (`tokio::time::pause`) drives every lease and window of the crate deterministically. Inject
//! another [`Clock`] (a skewed one, a seeded jitter) with
//! [`Builder::clock`](crate::Builder::clock) or
//! [`Recoverer::clock`](crate::Recoverer::clock).

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time (and of backoff jitter) for leases, due times and windows.
///
/// ```
/// use recoverable_write::clock::{Clock, ProcessClock};
///
/// /// A worker whose clock runs two seconds ahead (a test of clock skew).
/// #[derive(Debug)]
/// struct Ahead;
/// impl Clock for Ahead {
///     fn now_ms(&self) -> i64 {
///         ProcessClock.now_ms() + 2_000
///     }
/// }
/// assert!(Ahead.now_ms() > ProcessClock.now_ms());
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// A uniform random number in `[0, 1)` for backoff jitter. Override it to make a test run
    /// reproducible.
    fn jitter(&self) -> f64 {
        rand::random::<f64>()
    }
}

/// The default [`Clock`]: the wall clock read once per process, advanced by the monotonic clock
/// (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessClock;

/// The wall clock at the first reading, and the monotonic instant it was taken at.
fn anchor() -> &'static (i64, std::time::Instant) {
    static ANCHOR: OnceLock<(i64, std::time::Instant)> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        (wall, tokio::time::Instant::now().into_std())
    })
}

impl Clock for ProcessClock {
    fn now_ms(&self) -> i64 {
        let (wall, at) = *anchor();
        // `tokio::time::Instant` is the std monotonic clock, or tokio's paused test clock.
        let now = tokio::time::Instant::now().into_std();
        let elapsed = now.saturating_duration_since(at);
        wall.saturating_add(i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
    }
}

/// The clock a configuration shares between the layer, the recoverer and the reviews.
#[derive(Clone)]
pub(crate) struct SharedClock(Arc<dyn Clock>);

impl SharedClock {
    pub(crate) fn new(clock: impl Clock) -> Self {
        Self(Arc::new(clock))
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }

    pub(crate) fn jitter(&self) -> f64 {
        // A custom clock could return anything: keep the backoff arithmetic in its domain.
        let j = self.0.jitter();
        if j.is_finite() {
            j.clamp(0.0, 1.0)
        } else {
            0.5
        }
    }

    /// Now as a `SystemTime` (for HTTP-date hints).
    pub(crate) fn system_time(&self) -> SystemTime {
        let ms = self.now_ms();
        if ms >= 0 {
            UNIX_EPOCH + Duration::from_millis(ms as u64)
        } else {
            UNIX_EPOCH
        }
    }
}

impl Default for SharedClock {
    fn default() -> Self {
        Self::new(ProcessClock)
    }
}

impl fmt::Debug for SharedClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_clock_is_near_the_wall_clock() {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let ours = ProcessClock.now_ms();
        assert!((ours - wall).abs() < 5_000, "{ours} vs {wall}");
    }

    #[tokio::test(start_paused = true)]
    async fn process_clock_follows_paused_time_and_never_steps_back() {
        let a = ProcessClock.now_ms();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let b = ProcessClock.now_ms();
        assert!(b - a >= 3_600_000, "an hour of virtual time: {a} -> {b}");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(ProcessClock.now_ms() >= b);
    }

    #[derive(Debug)]
    struct Wild;
    impl Clock for Wild {
        fn now_ms(&self) -> i64 {
            0
        }
        fn jitter(&self) -> f64 {
            f64::NAN
        }
    }

    #[test]
    fn shared_clock_keeps_jitter_in_range() {
        let c = SharedClock::new(Wild);
        assert_eq!(c.jitter(), 0.5);
        assert_eq!(c.system_time(), UNIX_EPOCH);
    }
}
