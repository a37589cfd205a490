//! The heartbeat a [`Recoverer`](super::Recoverer) worker records after every pass of
//! [`run`](super::Recoverer::run): who it is, where it runs, what its last pass did.

use super::recoverer::RecoveryReport;
use crate::ledger::{LedgerError, MAX_ERROR_CHARS, WorkerHeartbeat};

/// One running worker's heartbeat, kept between passes.
pub(super) struct Beats {
    beat: WorkerHeartbeat,
}

impl Beats {
    /// A worker named `id` (a random one when `None`), started at `now_ms`, promising a beat
    /// at least every `interval_ms`.
    pub(super) fn new(id: Option<&str>, now_ms: i64, interval_ms: i64) -> Self {
        Self {
            beat: WorkerHeartbeat {
                worker_id: id.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned),
                host: host_name(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                started_ms: now_ms,
                interval_ms,
                pass_started_ms: now_ms,
                pass_finished_ms: now_ms,
                claimed_last_pass: 0,
                claimed_total: 0,
                errors: 0,
                last_error: None,
            },
        }
    }

    /// The heartbeat after a pass that ran from `started_ms` to `finished_ms` and ended as
    /// `outcome` (`Err`: its error's message, or that it panicked).
    pub(super) fn after_pass(
        &mut self,
        started_ms: i64,
        finished_ms: i64,
        outcome: Result<&RecoveryReport, String>,
    ) -> WorkerHeartbeat {
        let b = &mut self.beat;
        b.pass_started_ms = started_ms;
        b.pass_finished_ms = finished_ms;
        match outcome {
            Ok(report) => {
                let claimed = (report.claimed + report.claimed_prepared) as u64;
                b.claimed_last_pass = claimed;
                b.claimed_total = b.claimed_total.saturating_add(claimed);
            }
            Err(message) => {
                b.claimed_last_pass = 0;
                b.errors = b.errors.saturating_add(1);
                b.last_error = Some(safe_message(&message));
            }
        }
        b.clone()
    }
}

/// A pass's failure as a heartbeat keeps it: URLs without their userinfo and query (a
/// connection string's password, an API key in a query), cut to [`MAX_ERROR_CHARS`].
pub(super) fn safe_message(message: &str) -> String {
    let clean = crate::contract::sanitize_urls(message);
    match clean.char_indices().nth(MAX_ERROR_CHARS) {
        Some((i, _)) => clean[..i].to_owned(),
        None => clean,
    }
}

/// The message a failed pass leaves in the heartbeat.
pub(super) fn failure(e: &LedgerError) -> String {
    e.to_string()
}

/// This machine's name: `$HOSTNAME`, else the kernel's (`/proc/sys/kernel/hostname`, Linux),
/// else `/etc/hostname`, else `unknown` (no dependency for one string).
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_pass_is_counted_and_its_message_loses_credentials() {
        let mut beats = Beats::new(Some("worker-1"), 1_000, 30_250);
        let ok = RecoveryReport {
            claimed: 2,
            claimed_prepared: 1,
            ..RecoveryReport::default()
        };
        let b = beats.after_pass(1_000, 1_050, Ok(&ok));
        assert_eq!((b.claimed_last_pass, b.claimed_total, b.errors), (3, 3, 0));
        let b = beats.after_pass(
            2_000,
            2_010,
            Err(
                "ledger unavailable: error connecting to postgres://rw:hunter2@db.internal/x?\
                 sslpassword=s3cret"
                    .to_owned(),
            ),
        );
        assert_eq!((b.claimed_last_pass, b.claimed_total, b.errors), (0, 3, 1));
        let e = b.last_error.expect("kept");
        assert!(!e.contains("hunter2") && !e.contains("s3cret"), "{e}");
        assert!(e.contains("postgres://db.internal/x"), "{e}");
        assert_eq!(b.worker_id, "worker-1");
        assert!(!b.host.is_empty());
        assert_eq!(b.version, env!("CARGO_PKG_VERSION"));
    }
}
