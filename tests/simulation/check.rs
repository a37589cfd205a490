//! The invariants every seed ends with, checked against the vendor's own count; and the trace
//! of a seed re-run alone.

use recoverable_write::{Ledger, MemoryLedger, Operation, RecoverableWriteLayer, State, Tenant};

use crate::vendor::SimVendor;
use crate::world::EPOCH_MS;
use crate::{AUTH_SECRET, QUERY_SECRET, SeedResult, TENANT};

/// The invariants, against the vendor's own count.
pub(crate) async fn check(
    mem: &MemoryLedger,
    vendor: &SimVendor,
    ops: &[Operation],
    layer: &RecoverableWriteLayer,
    result: &mut SeedResult,
) {
    let tenant = Tenant::new(TENANT);
    let forgot = vendor.lock().forgot_applied.clone();
    if vendor.lock().unauthenticated > 0 {
        result
            .violations
            .push("a request reached the vendor without its credential".into());
    }
    for op in ops {
        let id = op.id();
        let effects = vendor.effects(id.as_str());
        let row = match mem.get(&tenant, id).await {
            Ok(Some(row)) => row,
            Ok(None) => {
                if !effects.is_empty() {
                    result
                        .violations
                        .push(format!("{id}: executed at the vendor but no ledger row"));
                }
                result
                    .violations
                    .push(format!("{id}: operation lost (no row after resubmission)"));
                continue;
            }
            Err(e) => {
                result
                    .violations
                    .push(format!("{id}: ledger read failed: {e}"));
                continue;
            }
        };
        let log = mem.evidence(&tenant, id).await.unwrap_or_default();
        if effects.len() > 1 {
            if forgot.contains(id.as_str()) {
                result.exempt_duplicates += 1;
                result.notes.push(format!(
                    "{id}: {} side effects ({effects:?}) after the vendor forgot its key",
                    effects.len()
                ));
            } else {
                result.violations.push(format!(
                    "{id}: {} side effects at the vendor ({:?}), state {}",
                    effects.len(),
                    effects,
                    row.state
                ));
            }
        }
        match row.state {
            // A vendor that forgot the key runs a replay anew; what it answers then is not held
            // against the crate (noted, not failed).
            State::Rejected if !effects.is_empty() && forgot.contains(id.as_str()) => {
                result.exempt_duplicates += 1;
                result.notes.push(format!(
                    "{id}: REJECTED although executed ({effects:?}), after the vendor forgot its key"
                ));
            }
            State::Rejected if !effects.is_empty() => result.violations.push(format!(
                "{id}: REJECTED although the vendor executed it ({effects:?})"
            )),
            State::Succeeded => {
                result.succeeded += 1;
                if effects.is_empty() {
                    result
                        .violations
                        .push(format!("{id}: SUCCEEDED but the vendor has no side effect"));
                } else if !row.remote_ref.as_ref().is_some_and(|r| effects.contains(r)) {
                    result.violations.push(format!(
                        "{id}: SUCCEEDED with remote ref {:?}, vendor has {effects:?}",
                        row.remote_ref
                    ));
                }
            }
            State::Rejected => {}
            State::ManualReview => {
                result.manual += 1;
                if !log.iter().any(|e| e.entry.kind != "created") {
                    result
                        .violations
                        .push(format!("{id}: MANUAL_REVIEW without evidence"));
                }
            }
            State::Unknown | State::Processing | State::RetryReady => {
                result.pending += 1;
                if row.next_check_ms.is_none() {
                    result
                        .violations
                        .push(format!("{id}: {} with no next check", row.state));
                }
            }
            State::InFlight => result
                .violations
                .push(format!("{id}: IN_FLIGHT after quiescence, nobody holds it")),
            State::Prepared => result.violations.push(format!(
                "{id}: PREPARED after quiescence (never sent, nobody owns it)"
            )),
        }
        // No credential stored: the row, its evidence, the handoff package.
        let mut stored = format!("{row:?}");
        for e in &log {
            stored.push_str(&format!("{e:?}"));
        }
        if let Ok(h) = layer.reviews().handoff(&tenant, id).await {
            stored.push_str(&format!("{h:?}"));
        }
        if stored.contains(AUTH_SECRET) {
            result
                .violations
                .push(format!("{id}: the Authorization credential is stored"));
        }
        if stored.contains(QUERY_SECRET) {
            result.query_secret_stored = true;
        }
    }
}

/// Prints what happened, for a seed re-run alone.
pub(crate) async fn trace(mem: &MemoryLedger, vendor: &SimVendor, ops: &[Operation]) {
    let tenant = Tenant::new(TENANT);
    for line in &vendor.lock().log {
        eprintln!("{line}");
    }
    for op in ops {
        let row = mem.get(&tenant, op.id()).await.ok().flatten();
        eprintln!(
            "--- {} {:?} effects {:?}",
            op.id(),
            row.as_ref().map(|r| r.state),
            vendor.effects(op.id().as_str())
        );
        for e in mem.evidence(&tenant, op.id()).await.unwrap_or_default() {
            let e = e.entry;
            eprintln!(
                "  {:>6} ms g{} {:<20} {:?}->{:?} attempt {:?} {:?} {}",
                e.at_ms - EPOCH_MS,
                e.generation.0,
                e.kind,
                e.from_state,
                e.to_state,
                e.attempt_id.map(|a| a.to_string()[..8].to_owned()),
                e.evidence,
                e.note.unwrap_or_default()
            );
        }
    }
}
