//! [`CallbackLedger`]: vendor callbacks (webhooks) stored exactly once, quarantined when they
//! match nothing, and the probes that match them.

use super::{
    BoxFuture, CallbackApplied, CallbackDelivery, CallbackEffect, CallbackQuarantined,
    CallbackRecorded, IgnoredCallback, Ledger, LedgerError, ProbeBy, QuarantinedCallback,
    TenantScope,
};
use crate::operation::Tenant;

/// Vendor callbacks, over a [`Ledger`]: the dedupe table, the callback quarantine and the
/// probes the callbacks receiver matches an event with. Object safe: use it as
/// `Arc<dyn CallbackLedger>`.
///
/// The callbacks receiver (feature `callbacks`) needs it, with [`ListingLedger`] for the
/// lookups by vendor reference and idempotency key; a backend without it does not get one.
///
/// [`ListingLedger`]: super::ListingLedger
pub trait CallbackLedger: Ledger {
    /// Applies one verified vendor event to the operation it was matched to, exactly once, in
    /// **one transaction**:
    ///
    /// 1. records `(delivery.vendor, delivery.event_id)` in the dedupe table, with the event
    ///    type, the operation and the received time; if it is already there (an earlier
    ///    delivery, by this or any other instance), nothing else happens:
    ///    [`CallbackApplied::Duplicate`];
    /// 2. [`CallbackEffect::Apply`]: the compare-and-swap of [`apply`](Ledger::apply) with its
    ///    evidence entry; if the row moved since it was read, the whole transaction is undone
    ///    (the dedupe record too) and [`CallbackApplied::Stale`] asks the caller to read the
    ///    operation again and retry. [`CallbackEffect::Append`]: the entry is appended as late
    ///    evidence, the row unchanged;
    /// 3. commits: [`CallbackApplied::Applied`] with the moved row, or
    ///    [`CallbackApplied::Appended`].
    ///
    /// So two deliveries of one event produce one state change and one evidence entry, even
    /// when several application instances receive them at the same moment: the dedupe record
    /// and the change commit together or not at all. An operation that does not exist in the
    /// delivery's tenant stores nothing ([`CallbackApplied::NoOperation`]): quarantine the event
    /// with [`quarantine_callback`](Self::quarantine_callback).
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] if the update names another operation than the delivery (nothing
    /// is written); [`LedgerError::Unavailable`] if the store failed (nothing is written: the
    /// vendor should redeliver).
    fn apply_callback(
        &self,
        delivery: CallbackDelivery,
        effect: CallbackEffect,
    ) -> BoxFuture<'_, Result<CallbackApplied, LedgerError>>;

    /// Stores a verified event that matched no operation of its tenant (or one of another
    /// tenant, or named an unknown account) in the callback quarantine, and records it in the
    /// dedupe table, in one transaction: a redelivery is [`CallbackQuarantined::Duplicate`] and
    /// stores nothing twice. A quarantined event is never applied, and kept until retention
    /// removes it; list them with [`quarantined_callbacks`](Self::quarantined_callbacks).
    fn quarantine_callback(
        &self,
        event: QuarantinedCallback,
    ) -> BoxFuture<'_, Result<CallbackQuarantined, LedgerError>>;

    /// The quarantined callback events within `scope`, oldest first (in the order they were
    /// stored), at most `limit`. The limit applies after the scope: a tenant's first `limit`
    /// events, never the first `limit` of every tenant filtered down. An event whose account
    /// mapped to no tenant belongs to no tenant: only [`TenantScope::AllTenants`] lists it.
    fn quarantined_callbacks<'a>(
        &'a self,
        scope: &'a TenantScope,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<QuarantinedCallback>, LedgerError>>;

    /// Whether the vendor event `(vendor, event_id)` is in the dedupe table already: a read
    /// through its primary key, so a delivery seen before is answered before any matching (a
    /// redelivered or replayed event costs one probe, whatever the ledger holds). Only a
    /// shortcut: [`apply_callback`](Self::apply_callback),
    /// [`quarantine_callback`](Self::quarantine_callback) and
    /// [`record_ignored_callback`](Self::record_ignored_callback) still check the dedupe table
    /// in their own transaction, which is what makes an event count once.
    ///
    /// The provided implementation answers `false` (every event then goes on to those
    /// methods, which deduplicate it).
    fn callback_seen<'a>(
        &'a self,
        vendor: &'a str,
        event_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, LedgerError>> {
        let _ = (vendor, event_id);
        Box::pin(async { Ok(false) })
    }

    /// Records a verified event of a type its mapping ignores in the dedupe table, and nothing
    /// else (no payload, no quarantine): a redelivery is [`CallbackRecorded::Duplicate`].
    fn record_ignored_callback(
        &self,
        event: IgnoredCallback,
    ) -> BoxFuture<'_, Result<CallbackRecorded, LedgerError>>;

    /// A tenant other than `tenant` with an operation whose id (or vendor reference, as `by`
    /// says) is `value`, if any: how a callback that matched nothing in its own tenant is told
    /// apart from one that names another tenant's operation. Read through an index on that
    /// column alone (at most one row is read), never a listing: an unmatched callback costs
    /// the same on a ledger of a thousand rows as on one of a million.
    ///
    /// The provided implementation answers `None` (the event is quarantined either way, with
    /// a less precise reason).
    fn other_tenant_with<'a>(
        &'a self,
        tenant: &'a Tenant,
        by: ProbeBy,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<Tenant>, LedgerError>> {
        let _ = (tenant, by, value);
        Box::pin(async { Ok(None) })
    }
}
