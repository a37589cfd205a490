//! Storage for vendor callbacks (webhooks): the dedupe table, the atomic application of an
//! event, and the quarantine of events that match no operation.
//!
//! The verification, parsing and mapping of a delivery live in `crate::callbacks` (feature
//! `callbacks`); these are the ledger's side of it, available on every backend whatever the
//! features. See [`CallbackLedger::apply_callback`](super::CallbackLedger::apply_callback).

use crate::evidence::Evidence;
use crate::operation::{OperationId, Tenant};

use super::backend::{NewEvidence, Update};
use super::{LedgerError, OperationRecord};

/// One verified vendor event, matched to one operation: the key of the dedupe table and what
/// it records (never the payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackDelivery {
    /// The vendor (or target) the event comes from: event ids are unique per vendor only.
    pub vendor: String,
    /// The vendor's event id.
    pub event_id: String,
    /// The event type, for the record (e.g. `payment_intent.succeeded`).
    pub event_type: String,
    /// The tenant of the operation it was matched to.
    pub tenant: Tenant,
    /// The operation it was matched to.
    pub operation_id: OperationId,
    /// When it was received, ms since the Unix epoch (kept for retention).
    pub received_at_ms: i64,
}

/// What a matched event does to its operation, in the same transaction as its dedupe record.
#[derive(Clone, Debug, PartialEq)]
// Built once per delivery and moved into the ledger: the size of the small variant does not
// matter, and a box would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum CallbackEffect {
    /// Moves the operation: the compare-and-swap of [`Ledger::apply`](super::Ledger::apply),
    /// with its evidence entry (build it with the event as evidence, through the state
    /// machine: [`OperationRecord::update_on`]). It must name the delivery's operation.
    Apply(Update),
    /// Cannot move it (a `processing` after `SUCCEEDED`, anything in `MANUAL_REVIEW`): appends
    /// the entry as late evidence and advances the version (as
    /// [`Ledger::append_evidence`](super::Ledger::append_evidence)), changes nothing else.
    Append(NewEvidence),
    /// Cannot move it, and contradicts the final state it reached (a success after `REJECTED`,
    /// a failure after `SUCCEEDED`, another vendor reference than the recorded one): appends
    /// the entry (kind [`CONTRADICTION`](crate::contradiction::CONTRADICTION)), advances the
    /// version and marks the operation as carrying an unacknowledged contradiction
    /// ([`OperationRecord::contradiction_ms`], kept at the first one's time), so it is listed by
    /// [`OperationQuery::contradicted`](super::OperationQuery::contradicted) until a person
    /// acknowledges it
    /// ([`ListingLedger::acknowledge_contradiction`](super::ListingLedger::acknowledge_contradiction)).
    /// Nothing else changes: a final state stays final.
    Contradiction(NewEvidence),
}

/// What [`CallbackLedger::apply_callback`](super::CallbackLedger::apply_callback) did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
// Returned once per delivery, like `Created`: no box for the row.
#[allow(clippy::large_enum_variant)]
pub enum CallbackApplied {
    /// First delivery of the event: recorded, and the operation moved; the row after the move.
    Applied(OperationRecord),
    /// First delivery of the event: recorded, and its entry appended as late evidence (or, for
    /// [`CallbackEffect::Contradiction`], as a contradiction, the operation marked).
    Appended,
    /// The event was recorded before (by this or another instance): nothing changed.
    Duplicate,
    /// The compare-and-swap found the row moved since it was read: nothing was stored, not
    /// even the dedupe record. Read the operation again, decide again, and call again.
    Stale,
    /// The operation does not exist (in that tenant): nothing was stored. Quarantine the event.
    NoOperation,
}

/// A verified event that matched no operation of its tenant (or named an account that maps to
/// no tenant): stored for a human, never applied, never dropped (see
/// [`CallbackLedger::quarantine_callback`](super::CallbackLedger::quarantine_callback)).
#[derive(Clone, Debug, PartialEq)]
pub struct QuarantinedCallback {
    /// The vendor (or target) the event comes from.
    pub vendor: String,
    /// The vendor's event id.
    pub event_id: String,
    /// The event type.
    pub event_type: String,
    /// The tenant its account maps to, if any.
    pub tenant: Option<Tenant>,
    /// What it was to be matched by (`remote_ref`, `idempotency_key`, `operation_id`), if known.
    pub match_by: Option<String>,
    /// The value it was to be matched by, if known.
    pub match_value: Option<String>,
    /// Why it was quarantined (no operation, unknown account, ...). Never the payload.
    pub reason: String,
    /// The observation it carried, if any.
    pub evidence: Option<Evidence>,
    /// When it was received, ms since the Unix epoch.
    pub received_at_ms: i64,
}

/// A verified event of a type its mapping ignores: recorded in the dedupe table only (never its
/// payload), so a redelivery is answered as a duplicate without being read again (see
/// [`CallbackLedger::record_ignored_callback`](super::CallbackLedger::record_ignored_callback)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredCallback {
    /// The vendor (or target) the event comes from.
    pub vendor: String,
    /// The vendor's event id.
    pub event_id: String,
    /// The event type.
    pub event_type: String,
    /// The tenant its account maps to, if any (kept for erasure by tenant).
    pub tenant: Option<Tenant>,
    /// When it was received, ms since the Unix epoch.
    pub received_at_ms: i64,
}

/// What [`CallbackLedger::record_ignored_callback`](super::CallbackLedger::record_ignored_callback)
/// did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallbackRecorded {
    /// First delivery of the event: recorded in the dedupe table.
    Recorded,
    /// The event was recorded before: nothing changed.
    Duplicate,
}

/// What a probe across tenants
/// ([`CallbackLedger::other_tenant_with`](super::CallbackLedger::other_tenant_with)) looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProbeBy {
    /// An operation id.
    OperationId,
    /// A vendor reference ([`OperationRecord::remote_ref`]).
    RemoteRef,
}

/// What [`CallbackLedger::quarantine_callback`](super::CallbackLedger::quarantine_callback) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallbackQuarantined {
    /// First delivery of the event: recorded in the dedupe table and stored in quarantine.
    Stored,
    /// The event was recorded before: nothing changed.
    Duplicate,
}

/// The dedupe table's `outcome` column.
pub(crate) fn outcome(effect: &CallbackEffect) -> &'static str {
    match effect {
        CallbackEffect::Apply(_) => "applied",
        CallbackEffect::Append(_) => "appended",
        CallbackEffect::Contradiction(_) => "contradiction",
    }
}

/// The dedupe table's `outcome` for a quarantined event.
pub(crate) const QUARANTINED: &str = "quarantined";

/// The dedupe table's `outcome` for an event of an ignored type.
pub(crate) const IGNORED: &str = "ignored";

/// Refuses an effect that names another operation than its delivery (nothing is written).
pub(crate) fn check_effect(
    delivery: &CallbackDelivery,
    effect: &CallbackEffect,
) -> Result<(), LedgerError> {
    if let CallbackEffect::Apply(u) = effect
        && (u.tenant != delivery.tenant || u.operation_id != delivery.operation_id)
    {
        return Err(LedgerError::Config(format!(
            "apply_callback: the update names operation {} of tenant {:?}, not the delivery's \
             operation {} of tenant {:?}",
            u.operation_id, u.tenant, delivery.operation_id, delivery.tenant
        )));
    }
    Ok(())
}
