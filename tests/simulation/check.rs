//! The invariants every seed ends with, checked against the vendor's own count and the whole
//! audit trail (as the [`Archive`](crate::ledgers::Archive) kept it through retention); and the
//! trace of a seed re-run alone.
//!
//! 1. No side effect twice for one operation: at most one per idempotency key (a vendor that
//!    forgot a key it promised to keep is excused, and said so); a second key for one intent
//!    only after retention deleted the first row (past its identity clock, or erased), as
//!    documented.
//! 2. No decision took effect on a view older than the evidence: no reviewer's claim or
//!    resolution has an entry between the view it was made on and its own audit entry (the
//!    bulk reconciler's resolutions included: its view is the plan it made from the vendor's
//!    export, applied later with the versions the plan read); no
//!    replay left `RETRY_READY` over evidence that the write may have applied, recorded after the
//!    decision that made it sendable; no resolution by a reviewer who did not hold the claim.
//! 3. Every operation is terminal, in `MANUAL_REVIEW` with evidence, visibly pending (a next
//!    check), deleted by retention after it finished, or quarantined and counted. Nothing is
//!    `IN_FLIGHT` or `PREPARED` with nobody holding it.
//! 4. A terminal state contradicted later is never silent: every event the vendor sent was
//!    accepted and is in its operation's log (or in the callback quarantine); a `REJECTED` with a
//!    side effect is allowed only where the vendor sends failures that a success may follow and
//!    the application's mapping reads them as final (as the built-in Stripe mapping reads
//!    `payment_intent.payment_failed`), the `REJECTED` came from such a callback, and the
//!    success is in the log after it. Mapped as processing, a failure must never reject.
//! 5. What a caller was told is what the ledger holds: `SUCCEEDED` with the same reference (or a
//!    person deciding), also when the result was lost after the answer.
//! 6. Retention touched only finished rows past their clocks; an unverified (forged) delivery
//!    changed nothing; no credential is stored.

use std::collections::HashSet;

use recoverable_write::callbacks::DeliveryOutcome;
use recoverable_write::ledger::CallbackLedger;
use recoverable_write::ledger::{EvidenceEntry, LedgerError};
use recoverable_write::review::{EvidenceSummary, says_may_have_applied};
use recoverable_write::{Evidence, Ledger, OperationId, State, Tenant};

use crate::callbacks::FORGED_REF;
use crate::world::EPOCH_MS;
use crate::{AUTH_SECRET, QUERY_SECRET, Run, SeedResult, TENANT};

/// The reviewer an audit note names: `… by {reviewer}; version …`.
fn reviewer_in(note: &str) -> Option<&str> {
    let head = note.split_once("; version ").map_or(note, |(h, _)| h);
    head.rsplit_once(" by ").map(|(_, who)| who)
}

fn changed_state(e: &EvidenceEntry) -> bool {
    matches!((e.entry.from_state, e.entry.to_state), (from, Some(to)) if from != Some(to))
}

fn line(e: &EvidenceEntry) -> String {
    format!(
        "#{} {} {:?}->{:?} {}",
        e.seq,
        e.entry.kind,
        e.entry.from_state,
        e.entry.to_state,
        e.entry.evidence.as_ref().map_or("", Evidence::label)
    )
}

/// The invariants.
pub(crate) async fn check(run: &Run, result: &mut SeedResult) {
    let tenant = Tenant::new(TENANT);
    let vendor = &run.vendor;
    let forgot = vendor.lock().forgot_applied.clone();
    if vendor.lock().unauthenticated > 0 {
        result
            .violations
            .push("a request reached the vendor without its credential".into());
    }
    let kept = {
        let k = run.archive.kept.lock().unwrap();
        result.violations.extend(k.violations.iter().cloned());
        (k.deletions.clone(), k.slimmed)
    };
    let (deletions, slimmed) = kept;
    run.stats.add("retention: rows slimmed", slimmed);
    run.stats
        .add("retention: rows deleted", deletions.len() as u64);
    let quarantined_rows = run.mem.quarantined(1_000).await.unwrap_or_default();
    let decisions = run.decisions.lock().unwrap().clone();
    let told = run.told.lock().unwrap().clone();

    for op in &run.ops {
        let id = op.id();
        let log = run.archive.log(id).await;
        let deleted: Vec<_> = deletions
            .iter()
            .filter(|d| &d.row.operation_id == id)
            .collect();
        let row = match run.mem.get(&tenant, id).await {
            Ok(Some(row)) => Some(row),
            Ok(None) => None,
            Err(LedgerError::Corrupt { .. }) => {
                // Undecodable: it must be set aside and counted (a MemoryLedger never has one).
                if quarantined_rows.iter().any(|q| &q.operation_id == id) {
                    result.quarantined += 1;
                } else {
                    result
                        .violations
                        .push(format!("{id}: undecodable and not quarantined"));
                }
                continue;
            }
            Err(e) => {
                result
                    .violations
                    .push(format!("{id}: ledger read failed: {e}"));
                continue;
            }
        };
        effects_per_key(run, id, row.as_ref(), &deleted, &forgot, result);
        decided_on_current_views(id, &log, &decisions, result);
        replays_not_contradicted(run, id, &log, result);
        claims_respected(id, &log, result);
        terminal_contradictions(run, &log);

        let Some(row) = row else {
            if deleted.is_empty() {
                result
                    .violations
                    .push(format!("{id}: operation lost (no row after resubmission)"));
            } else {
                result.purged += 1;
            }
            continue;
        };
        // This row's own sends; a lookup by operation id may find an earlier row's (a repeat
        // after retention deleted that row is the same intent to the vendor).
        let effects = vendor.effects_with_key(id.as_str(), row.idempotency_key.as_str());
        let any_effects = vendor.effects(id.as_str());
        let excused = forgot.contains(id.as_str());
        match row.state {
            // A vendor that forgot the key runs a replay anew; what it answers then is not held
            // against the crate (noted, not failed).
            State::Rejected if !effects.is_empty() && excused => {
                result.exempt_duplicates += 1;
                result.notes.push(format!(
                    "{id}: REJECTED although executed ({effects:?}), after the vendor forgot its key"
                ));
            }
            State::Rejected if !effects.is_empty() => {
                rejected_then_contradicted(run, id, &log, &effects, result);
            }
            State::Succeeded => {
                result.succeeded += 1;
                if any_effects.is_empty() {
                    result
                        .violations
                        .push(format!("{id}: SUCCEEDED but the vendor has no side effect"));
                } else if !row
                    .remote_ref
                    .as_ref()
                    .is_some_and(|r| any_effects.contains(r))
                {
                    result.violations.push(format!(
                        "{id}: SUCCEEDED with remote ref {:?}, vendor has {any_effects:?}",
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
        // What a caller was told stands (unless the row it was told about is gone).
        if deleted.is_empty() {
            for t in told.iter().filter(|t| &t.op == id) {
                let stands = match row.state {
                    State::Succeeded => row.remote_ref == t.remote_ref || excused,
                    State::ManualReview => true,
                    State::Rejected => run.failures_read_as_final && !effects.is_empty(),
                    _ => false,
                };
                if !stands {
                    result.violations.push(format!(
                        "{id}: the caller was told SUCCEEDED ({:?}) at {} ms; the ledger holds {} ({:?})",
                        t.remote_ref, t.at_ms, row.state, row.remote_ref
                    ));
                }
            }
        }
        // No credential stored: the row, its whole evidence, the handoff package.
        let mut stored = format!("{row:?}");
        for e in &log {
            stored.push_str(&format!("{e:?}"));
        }
        if let Ok(h) = run.reviews.handoff(&tenant, id).await {
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
        if row.remote_ref.as_deref() == Some(FORGED_REF) {
            result
                .violations
                .push(format!("{id}: a forged callback's reference was recorded"));
        }
    }
    callbacks_accounted(run, result).await;
}

/// Invariant 1: at most one side effect per key; another key only for a row retention deleted.
fn effects_per_key(
    run: &Run,
    id: &OperationId,
    row: Option<&recoverable_write::ledger::OperationRecord>,
    deleted: &[&crate::ledgers::Deletion],
    forgot: &HashSet<String>,
    result: &mut SeedResult,
) {
    let (tickets, keys) = {
        let s = run.vendor.lock();
        (
            s.effects.get(id.as_str()).cloned().unwrap_or_default(),
            s.effect_keys.get(id.as_str()).cloned().unwrap_or_default(),
        )
    };
    let mut distinct: Vec<Option<String>> = Vec::new();
    for k in &keys {
        if !distinct.contains(k) {
            distinct.push(k.clone());
        }
    }
    for key in &distinct {
        let mine: Vec<&String> = tickets
            .iter()
            .zip(&keys)
            .filter(|(_, k)| *k == key)
            .map(|(t, _)| t)
            .collect();
        if mine.len() > 1 {
            if forgot.contains(id.as_str()) {
                result.exempt_duplicates += 1;
                result.notes.push(format!(
                    "{id}: {} side effects ({mine:?}) after the vendor forgot its key",
                    mine.len()
                ));
            } else {
                result.violations.push(format!(
                    "{id}: {} side effects at the vendor ({mine:?}) with one key, {}",
                    mine.len(),
                    row.map_or("its row since deleted by retention".into(), |r| format!(
                        "state {}",
                        r.state
                    ))
                ));
            }
        }
        let current = row.map(|r| r.idempotency_key.as_str());
        let was_deleted = deleted
            .iter()
            .any(|d| Some(d.row.idempotency_key.as_str()) == key.as_deref());
        if key.as_deref() != current && !was_deleted {
            result.violations.push(format!(
                "{id}: a side effect under key {key:?}, which no row holds and retention never deleted"
            ));
        }
    }
    if distinct.len() > 1 {
        // Documented: the identity clock is the window within which a repeat sends nothing.
        run.stats
            .bump("intents written again after retention deleted their row (documented)");
    }
}

/// Invariant 2, reviewers: nothing landed between a decision's view and its audit entry.
fn decided_on_current_views(
    id: &OperationId,
    log: &[EvidenceEntry],
    decisions: &[crate::reviewers::Decision],
    result: &mut SeedResult,
) {
    for d in decisions.iter().filter(|d| &d.op == id) {
        let mark = format!("by {}; version {} -> {}", d.reviewer, d.named, d.named + 1);
        // Its audit entry, if it took effect: after its view, in the same row (a row that
        // retention deleted and a repeat created again starts at version 0 again).
        let Some(entry) = log
            .iter()
            .filter(|e| e.seq > d.view_seq)
            .take_while(|e| e.entry.kind != "created")
            .find(|e| {
                e.entry.kind == d.kind && e.entry.note.as_deref().is_some_and(|n| n.contains(&mark))
            })
        else {
            continue; // refused: it took no effect
        };
        let own = d
            .own_claim
            .map(|v| format!("by {}; version {} -> {}", d.reviewer, v, v + 1));
        let news: Vec<String> = log
            .iter()
            .filter(|e| e.seq > d.view_seq && e.seq < entry.seq)
            .filter(|e| {
                !(e.entry.kind == "review_claimed"
                    && own.as_ref().is_some_and(|own| {
                        e.entry.note.as_deref().is_some_and(|n| n.contains(own))
                    }))
            })
            .map(line)
            .collect();
        if !news.is_empty() {
            result.violations.push(format!(
                "{id}: {}'s {} took effect on a view older than the evidence (it named version {}; after its view: {})",
                d.reviewer,
                d.what,
                d.named,
                news.join(", ")
            ));
        }
    }
}

/// Invariant 2, the recovery engine: no `RETRY_READY` → `IN_FLIGHT` claim over evidence,
/// recorded after the decision that made the row sendable, that the write may have applied.
fn replays_not_contradicted(
    run: &Run,
    id: &OperationId,
    log: &[EvidenceEntry],
    result: &mut SeedResult,
) {
    for (i, e) in log.iter().enumerate() {
        if e.entry
            .note
            .as_deref()
            .is_some_and(|n| n.contains("not sent: evidence recorded after the decision"))
        {
            run.stats
                .bump("replays stopped by evidence recorded after their decision");
        }
        if !(e.entry.kind == "attempt_registered"
            && e.entry.from_state == Some(State::RetryReady)
            && e.entry.to_state == Some(State::InFlight))
        {
            continue;
        }
        let decided = log[..i]
            .iter()
            .rposition(changed_state)
            .map_or(0, |j| j + 1);
        for x in &log[decided..i] {
            if says_may_have_applied(&EvidenceSummary::of(x)) {
                result.violations.push(format!(
                    "{id}: replay claimed ({}) over evidence that the write may have applied, recorded after the decision that made it sendable ({})",
                    line(e),
                    line(x)
                ));
            }
        }
    }
}

/// Invariant 2, claims: a reviewer's resolution only by the holder of the claim.
fn claims_respected(id: &OperationId, log: &[EvidenceEntry], result: &mut SeedResult) {
    for (i, e) in log.iter().enumerate() {
        if e.entry.kind != "review" || !changed_state(e) {
            continue;
        }
        let Some(by) = e.entry.note.as_deref().and_then(reviewer_in) else {
            continue;
        };
        // The entry that put it in review: a reviewer's claim names its holder.
        let into_review = log[..i]
            .iter()
            .rev()
            .find(|x| x.entry.to_state == Some(State::ManualReview));
        if let Some(claim) = into_review.filter(|x| x.entry.kind == "review_claimed")
            && let Some(holder) = claim.entry.note.as_deref().and_then(reviewer_in)
            && holder != by
        {
            result.violations.push(format!(
                "{id}: {by} resolved it ({}) while {holder} held the claim ({})",
                line(e),
                line(claim)
            ));
        }
    }
}

/// Counts terminal states that later evidence contradicts (recorded, as the rule asks; the
/// alarm is another matter).
fn terminal_contradictions(run: &Run, log: &[EvidenceEntry]) {
    let Some(end) = log
        .iter()
        .rposition(|e| e.entry.to_state.is_some_and(State::is_terminal) && changed_state(e))
    else {
        return;
    };
    let to = log[end].entry.to_state;
    let contradicts = |ev: &Evidence| match to {
        Some(State::Succeeded) => matches!(ev, Evidence::Rejected { .. }),
        Some(State::Rejected) => matches!(ev, Evidence::Succeeded { .. }),
        _ => false,
    };
    if log[end + 1..]
        .iter()
        .any(|e| e.entry.evidence.as_ref().is_some_and(contradicts))
    {
        run.stats
            .bump("terminal states contradicted by later evidence (recorded)");
    }
}

/// Invariant 4: a `REJECTED` operation the vendor executed. Allowed only where the vendor sends
/// failures that a success may follow and the mapping reads them as final, the rejection came
/// from such a callback, and the success is recorded after it.
fn rejected_then_contradicted(
    run: &Run,
    id: &OperationId,
    log: &[EvidenceEntry],
    effects: &[String],
    result: &mut SeedResult,
) {
    let rejected_at = log
        .iter()
        .rposition(|e| e.entry.to_state == Some(State::Rejected) && changed_state(e));
    let by_callback = rejected_at.is_some_and(|i| log[i].entry.kind == "callback");
    let success_after = rejected_at.is_some_and(|i| {
        log[i + 1..]
            .iter()
            .any(|e| matches!(e.entry.evidence, Some(Evidence::Succeeded { .. })))
    });
    if run.failures_read_as_final && by_callback && success_after {
        run.stats.bump(
            "REJECTED by a failure event mapped as final, then the vendor's success recorded",
        );
        return;
    }
    result.violations.push(format!(
        "{id}: REJECTED although the vendor executed it ({effects:?}){}",
        match (by_callback, success_after) {
            (true, false) => "; the success that followed is not in the log",
            (false, _) => "",
            (true, true) => "; the mapping reads the vendor's failures as not final",
        }
    ));
}

/// Invariant 4 and 6 for callbacks: every genuine event accepted and in its operation's log
/// (or quarantined and listed); every forged one refused and nowhere.
async fn callbacks_accounted(run: &Run, result: &mut SeedResult) {
    let Some(mailer) = &run.mailer else {
        return;
    };
    let quarantine = run
        .mem
        .quarantined_callbacks(&recoverable_write::ledger::TenantScope::AllTenants, 10_000)
        .await
        .unwrap_or_default();
    let sent: Vec<_> = {
        let s = mailer.sent.lock().unwrap();
        s.iter()
            .map(|s| {
                (
                    s.event.clone(),
                    s.forged,
                    s.outcomes.clone(),
                    s.accepted.clone(),
                    s.accepted_at,
                )
            })
            .collect()
    };
    let erasures = run.archive.kept.lock().unwrap().erasures.clone();
    // A tenant's erasure takes its quarantined callbacks with it.
    let erased_after =
        |at: Option<tokio::time::Instant>| at.is_some_and(|at| erasures.iter().any(|e| *e >= at));
    let mut logs = std::collections::HashMap::new();
    for op in &run.ops {
        logs.insert(op.id().as_str().to_owned(), run.archive.log(op.id()).await);
    }
    let mentions = |op: &str, event: &str| {
        let mark = format!("callback {event} (");
        logs.get(op).is_some_and(|log| {
            log.iter()
                .any(|e| e.entry.note.as_deref().is_some_and(|n| n.contains(&mark)))
        })
    };
    let listed = |event: &str| quarantine.iter().any(|q| q.event_id == event);
    for (event, forged, outcomes, accepted, accepted_at) in sent {
        for o in &outcomes {
            run.stats.bump_owned(format!(
                "callback deliveries: {}{o}",
                if forged { "forged, " } else { "" }
            ));
        }
        if forged {
            if outcomes
                .iter()
                .any(|o| *o != "unverified" && *o != "no endpoint")
                || logs.keys().any(|op| mentions(op, &event.id))
            {
                result.violations.push(format!(
                    "{}: a forged callback {} was not refused ({outcomes:?})",
                    event.op, event.id
                ));
            }
            continue;
        }
        let recorded = mentions(&event.op, &event.id);
        match accepted {
            None => result.violations.push(format!(
                "{}: the vendor's event {} ({} {}) was never accepted ({outcomes:?})",
                event.op, event.id, event.kind, event.status
            )),
            Some(DeliveryOutcome::Quarantined { .. }) => {
                result.quarantined_callbacks += 1;
                if !listed(&event.id) && !erased_after(accepted_at) {
                    result.violations.push(format!(
                        "{}: event {} answered quarantined but not in the quarantine",
                        event.op, event.id
                    ));
                }
            }
            // A contradiction of a final state is an alarm with its own entry, never dropped.
            Some(
                DeliveryOutcome::Applied { .. }
                | DeliveryOutcome::Late { .. }
                | DeliveryOutcome::Contradiction { .. },
            ) if !recorded => {
                result.violations.push(format!(
                    "{}: event {} ({} {}) accepted but not in the log ({outcomes:?})",
                    event.op, event.id, event.kind, event.status
                ));
            }
            Some(DeliveryOutcome::Duplicate)
                if !recorded && !listed(&event.id) && !erased_after(accepted_at) =>
            {
                result.violations.push(format!(
                    "{}: event {} ({} {}) answered as a duplicate of nothing recorded ({outcomes:?})",
                    event.op, event.id, event.kind, event.status
                ));
            }
            Some(
                DeliveryOutcome::Applied { .. }
                | DeliveryOutcome::Late { .. }
                | DeliveryOutcome::Contradiction { .. },
            )
            | Some(DeliveryOutcome::Duplicate) => {}
            Some(other) => result.violations.push(format!(
                "{}: event {} ({} {}) accepted as {} ({outcomes:?}): its evidence was dropped",
                event.op,
                event.id,
                event.kind,
                event.status,
                other.label()
            )),
        }
    }
}

/// Prints what happened, for a seed re-run alone.
pub(crate) async fn trace(run: &Run) {
    let tenant = Tenant::new(TENANT);
    for line in &run.vendor.lock().log {
        eprintln!("{line}");
    }
    if let Some(mailer) = &run.mailer {
        for s in mailer.sent.lock().unwrap().iter() {
            eprintln!(
                "callback {}{} {} {} for {}: {:?}",
                if s.forged { "(forged) " } else { "" },
                s.event.id,
                s.event.kind,
                s.event.status,
                s.event.op,
                s.outcomes
            );
        }
    }
    for d in run.decisions.lock().unwrap().iter() {
        eprintln!(
            "decision {} {} {} on view #{} naming version {} (own claim {:?})",
            d.op, d.reviewer, d.what, d.view_seq, d.named, d.own_claim
        );
    }
    for op in &run.ops {
        let row = run.mem.get(&tenant, op.id()).await.ok().flatten();
        eprintln!(
            "--- {} {:?} v{:?} effects {:?}",
            op.id(),
            row.as_ref().map(|r| r.state),
            row.as_ref().map(|r| r.version),
            run.vendor.effects(op.id().as_str())
        );
        for e in run.archive.log(op.id()).await {
            let seq = e.seq;
            let e = e.entry;
            eprintln!(
                "  #{seq:<4} {:>6} ms g{} {:<20} {:?}->{:?} attempt {:?} {:?} {}",
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
