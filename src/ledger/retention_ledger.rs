//! [`RetentionLedger`]: retention's bounded purges of finished operations and callback
//! records, and the space given back.

use super::{BoxFuture, CallbackPurge, Ledger, LedgerError, PurgeBatch, Purged};

/// Retention, over a [`Ledger`]: what the [purger](crate::retention::Purger) and the
/// recoverer's periodic purge run. Object safe: use it as `Arc<dyn RetentionLedger>`.
///
/// A backend without it keeps its rows forever: configuring
/// [`Builder::retention`](crate::Builder::retention) on it does not compile, and the recoverer
/// runs no purge.
pub trait RetentionLedger: Ledger {
    /// The names of the contracts frozen on finished (`SUCCEEDED` or `REJECTED`) operations
    /// that are not quarantined, in name order: what a retention pass must visit. Read through
    /// an index (one probe per name), never a scan of the rows.
    fn finished_contracts(&self) -> BoxFuture<'_, Result<Vec<String>, LedgerError>>;

    /// Runs one bounded batch of a retention stage ([`PurgeStage`]) over the finished
    /// operations `batch.scope` names, oldest finish first, at most `batch.limit` of them, in
    /// one transaction. Operations in any other state, and quarantined rows, are never
    /// touched, whatever their age. The details stage skips rows already slimmed; it leaves
    /// `state`, `version` and `updated_ms` as they are. The identity stage deletes the rows and
    /// their evidence together.
    ///
    /// With `batch.dry_run`, nothing changes and every matching row is counted.
    ///
    /// Returns what was dropped. A batch that returns fewer rows than its limit found no more.
    ///
    /// [`PurgeStage`]: super::PurgeStage
    fn purge(&self, batch: PurgeBatch) -> BoxFuture<'_, Result<Purged, LedgerError>>;

    /// Deletes one bounded batch of callback records ([`CallbackRecords`]): dedupe records of
    /// vendor events, or quarantined events, oldest first.
    ///
    /// [`CallbackRecords`]: super::CallbackRecords
    fn purge_callbacks(&self, batch: CallbackPurge) -> BoxFuture<'_, Result<Purged, LedgerError>>;

    /// Gives the space freed by purges back to the file system where the store does not do
    /// it by itself, a bounded amount per call; returns the bytes given back. SQLite runs an
    /// incremental vacuum (files created by this version use `auto_vacuum = INCREMENTAL`) of
    /// the free pages beyond a quarter of the file (those are kept for the next rows).
    /// PostgreSQL's autovacuum makes the space reusable without help; on a server where it is
    /// off, `PostgresLedger` runs a plain `VACUUM` of its tables (no blocking lock).
    ///
    /// The provided implementation does nothing and returns 0.
    fn reclaim_space(&self) -> BoxFuture<'_, Result<u64, LedgerError>> {
        Box::pin(async { Ok(0) })
    }
}
