//! Glue between the pure state machine and the ledger, shared by the layer and the recoverer.

use std::borrow::Cow;
use std::sync::{Arc, Weak};

use super::Shared;
use crate::error::Outcome;
use crate::evidence::Evidence;
use crate::ledger::{
    LedgerError, NewEvidence, NewOperation, OperationRecord, StoredResponse, Update,
};
use crate::notify::{Notice, Notifier};
use crate::operation::{AttemptId, Generation, OperationId, Tenant};
use crate::state::{Event, Refused, State, Tick, transition};

/// The state machine's view of now, from the configuration's clock.
pub(crate) fn clock(shared: &Shared) -> Tick {
    Tick {
        now_ms: shared.clock.now_ms(),
        jitter: shared.clock.jitter(),
    }
}

/// What applying an event to a row came to.
#[derive(Debug)]
// Unboxed: the row is moved out at once by every caller; boxing it cost an allocation per change.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Applied {
    /// The ledger accepted the change; the new row.
    Done(OperationRecord),
    /// The state machine does not allow the event in the row's state; nothing changed.
    Refused(Refused),
    /// The row moved on since it was read (another worker, the sweeper, a reviewer); nothing
    /// changed.
    Stale,
}

/// Extra columns an event sets beside the transition.
#[derive(Debug, Default)]
pub(crate) struct Extras {
    pub(crate) attempt: Option<AttemptId>,
    pub(crate) lease_until_ms: Option<i64>,
    pub(crate) response: Option<StoredResponse>,
    pub(crate) note: Option<String>,
}

/// How a compare-and-swap is committed: the one durability rule, "only what a send depends on
/// must be durable before it returns", applied to each write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Commit {
    /// Durable before it returns ([`Ledger::apply`](crate::ledger::Ledger::apply)): every claim
    /// that lets bytes leave, and every decision a person was told was saved.
    Durable,
    /// May return before it is durable ([`Ledger::record`](crate::ledger::Ledger::record)): what
    /// no send depends on, such as what a lookup found. If a crash loses it, the row is as it
    /// was under its lease, and is looked up again. A later durable commit makes it durable
    /// first: both stores commit in order (PostgreSQL's WAL, SQLite's one writer).
    Relaxed,
}

/// Runs the transition function on `record` and applies the result with a durable
/// compare-and-swap ([`apply_event_as`] with [`Commit::Durable`]).
pub(crate) async fn apply_event(
    shared: &Shared,
    record: &OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
) -> Result<Applied, LedgerError> {
    apply_event_as(shared, record, event, kind, extras, Commit::Durable).await
}

/// Runs the transition function on `record` and applies the result with a compare-and-swap,
/// committed as `commit` says. Publishes the new state on the notifier when it changed.
pub(crate) async fn apply_event_as(
    shared: &Shared,
    record: &OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
    commit: Commit,
) -> Result<Applied, LedgerError> {
    let update = match update_for_event(shared, record, event, kind, extras) {
        Ok(u) => u,
        Err(refused) => return Ok(Applied::Refused(refused)),
    };
    let written = match commit {
        Commit::Durable => shared.ledger.apply(update).await?,
        Commit::Relaxed => shared.ledger.record(update).await?,
    };
    Ok(match written {
        Some(row) => {
            if row.state != record.state {
                publish(shared, &row);
            }
            Applied::Done(row)
        }
        None => Applied::Stale,
    })
}

/// What [`record_event`] did; on `Done` the caller's row is the row as recorded.
#[derive(Debug)]
pub(crate) enum Recorded {
    Done,
    /// The state machine does not allow the event in the row's state.
    Refused,
    Stale,
}

/// [`apply_event`] for what an attempt produced, written after its bytes left
/// ([`Ledger::record_unread`](crate::ledger::Ledger::record_unread), which need not wait for
/// durability nor read the row back). On [`Recorded::Done`], `record` is the row as recorded —
/// except its `response` when the event stored one: that is the vendor's answer the caller
/// holds itself, and it is not copied back. Otherwise `record` is unchanged.
pub(crate) async fn record_event(
    shared: &Shared,
    record: &mut OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
) -> Result<Recorded, LedgerError> {
    let Ok((update, changes, stored_response)) = result_update(shared, record, event, kind, extras)
    else {
        return Ok(Recorded::Refused);
    };
    let before = record.state;
    match shared.ledger.record_unread(update).await? {
        crate::ledger::Recorded::Row(row) => *record = row,
        crate::ledger::Recorded::Applied => write_changes(record, changes, stored_response),
        crate::ledger::Recorded::Stale => return Ok(Recorded::Stale),
    }
    if record.state != before {
        publish(shared, record);
    }
    Ok(Recorded::Done)
}

/// The update of [`record_event`] and [`record_event_detached`], with its changes to write into
/// `record` if the store does not hand its row back (without the stored response: see
/// `record_event`), and whether it stores a response.
fn result_update(
    shared: &Shared,
    record: &OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
) -> Result<(Update, crate::ledger::backend::Changes, bool), Refused> {
    let mut update = update_for_event(shared, record, event, kind, extras)?;
    let response = update.changes.response.take();
    let changes = update.changes.clone();
    let stored_response = response.is_some();
    update.changes.response = response;
    Ok((update, changes, stored_response))
}

/// The conditional update that applies `event` to `record`, with its evidence entry.
fn update_for_event(
    shared: &Shared,
    record: &OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
) -> Result<Update, Refused> {
    let clock = clock(shared);
    let t = transition(&record.snapshot(), &event, clock)?;
    // The event is spent: its evidence moves into the log entry.
    let evidence = match event {
        Event::AttemptResult(e) | Event::LookupResult(e) | Event::Callback(e) => Some(e),
        _ => None,
    };
    let entry = NewEvidence {
        attempt_id: extras.attempt.or(record.current_attempt),
        generation: record.generation,
        kind: Cow::Borrowed(kind),
        from_state: None,
        to_state: None,
        evidence,
        note: extras.note.or_else(|| t.reason.clone()),
        at_ms: clock.now_ms,
    };
    Ok(record.update_from(
        t,
        extras.attempt,
        extras.lease_until_ms,
        extras.response,
        entry,
        clock.now_ms,
    ))
}

/// The claim of a new operation's first send (`PREPARED` → `IN_FLIGHT` under `attempt`, with
/// its lease), as the `first` update of [`Ledger::create_and_apply`](crate::ledger::Ledger::create_and_apply).
/// `None` if the state machine would not move a fresh row to `IN_FLIGHT` (a budget that allows
/// no attempt): the caller takes the two-step path, which records why.
pub(crate) fn first_claim(
    shared: &Shared,
    new: &NewOperation,
    attempt: AttemptId,
) -> Option<Update> {
    let clock = clock(shared);
    let t = transition(&new.snapshot(), &Event::ClaimSend, clock).ok()?;
    if t.to != State::InFlight {
        return None;
    }
    let lease_until = clock.now_ms + new.policy.lease().as_millis() as i64;
    let entry = NewEvidence {
        attempt_id: Some(attempt),
        generation: Generation(0),
        kind: Cow::Borrowed(CLAIM_KIND),
        from_state: None,
        to_state: None,
        evidence: None,
        note: t.reason.clone(),
        at_ms: clock.now_ms,
    };
    Some(new.first_update(&t, Some(attempt), Some(lease_until), entry, clock.now_ms))
}

/// Evidence kind of a send claim.
pub(crate) const CLAIM_KIND: &str = "attempt_registered";

/// Tells waiting callers and reviewers where an operation now stands.
pub(crate) fn publish(shared: &Shared, row: &OperationRecord) {
    Announcement::of(shared, row).publish(&shared.notifier);
}

/// What [`publish`] tells about a row: made while the row is at hand, told once the ledger
/// holds it.
pub(crate) struct Announcement {
    /// `None` when nobody listens.
    notice: Option<Notice>,
    /// The target of an escalation, for its counter.
    #[cfg(feature = "metrics")]
    escalated: Option<String>,
}

impl Announcement {
    pub(crate) fn of(shared: &Shared, row: &OperationRecord) -> Self {
        let escalated = row.state == State::ManualReview;
        let notice = shared.notifier.has_subscribers().then(|| {
            let outcome = Outcome::from_record(row, None, true);
            if escalated {
                Notice::Escalated {
                    reason: row.reason.clone().unwrap_or_default(),
                    outcome,
                }
            } else {
                Notice::Transition(outcome)
            }
        });
        Self {
            notice,
            #[cfg(feature = "metrics")]
            escalated: escalated.then(|| target_of(row)),
        }
    }

    pub(crate) fn publish(self, notifier: &Notifier) {
        #[cfg(feature = "metrics")]
        if let Some(target) = self.escalated {
            metrics::counter!("recoverable_write_escalations_total", "target" => target)
                .increment(1);
        }
        if let Some(notice) = self.notice {
            notifier.publish(notice);
        }
    }
}

/// The target label of an operation: the host of its URL.
pub(crate) fn target_of(row: &OperationRecord) -> String {
    row.request
        .url
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_owned))
        .unwrap_or_default()
}

/// Appends an observation that may no longer change the row (late responses, answers after a
/// reviewer took over). It is kept as evidence and surfaced, never acted on.
pub(crate) async fn append_late(
    shared: &Shared,
    record: &OperationRecord,
    attempt: Option<AttemptId>,
    evidence: Evidence,
    note: String,
) -> Result<(), LedgerError> {
    let late = Late {
        tenant: record.tenant.clone(),
        operation_id: record.operation_id.clone(),
        generation: record.generation,
        attempt,
        evidence,
        note: Cow::Owned(note),
    };
    let current = late.append(shared).await?;
    late.publish(shared, current.as_ref().unwrap_or(record));
    Ok(())
}

/// An observation about an operation that may no longer change it, to append as
/// `late_evidence`.
pub(crate) struct Late {
    pub(crate) tenant: Tenant,
    pub(crate) operation_id: OperationId,
    /// The generation the observation was made under.
    pub(crate) generation: Generation,
    pub(crate) attempt: Option<AttemptId>,
    pub(crate) evidence: Evidence,
    pub(crate) note: Cow<'static, str>,
}

impl Late {
    /// Appends the entry; returns the row as it now stands (`None`: it is gone).
    async fn append(&self, shared: &Shared) -> Result<Option<OperationRecord>, LedgerError> {
        warn_late(&self.operation_id, self.evidence.label());
        let entry = late_entry(
            self.attempt,
            self.generation,
            self.evidence.clone(),
            self.note.clone().into_owned(),
            shared.clock.now_ms(),
        );
        shared
            .ledger
            .append_evidence(&self.tenant, &self.operation_id, entry)
            .await?;
        shared.ledger.get(&self.tenant, &self.operation_id).await
    }

    fn publish(self, shared: &Shared, current: &OperationRecord) {
        shared.notifier.publish(Notice::LateEvidence {
            outcome: Outcome::from_record(current, self.attempt, true),
            evidence: self.evidence,
        });
    }

    /// The entry, to hand to the ledger now, and what reports it later: the evidence is kept
    /// for a notice only if someone listens.
    fn detach(self, shared: &Shared) -> (NewEvidence, LateNotice) {
        let Late {
            tenant,
            operation_id,
            generation,
            attempt,
            evidence,
            note,
        } = self;
        let notice = LateNotice {
            label: evidence.label(),
            evidence: shared.notifier.has_subscribers().then(|| evidence.clone()),
            tenant,
            operation_id,
            attempt,
        };
        let at_ms = shared.clock.now_ms();
        let entry = late_entry(attempt, generation, evidence, note.into_owned(), at_ms);
        (entry, notice)
    }
}

/// A `late_evidence` entry.
fn late_entry(
    attempt: Option<AttemptId>,
    generation: Generation,
    evidence: Evidence,
    note: String,
    at_ms: i64,
) -> NewEvidence {
    NewEvidence {
        attempt_id: attempt,
        generation,
        kind: Cow::Borrowed("late_evidence"),
        from_state: None,
        to_state: None,
        evidence: Some(evidence),
        note: Some(note),
        at_ms,
    }
}

fn warn_late(operation: &OperationId, evidence: &'static str) {
    tracing::warn!(
        operation = %operation,
        evidence,
        "late evidence appended; it does not change the operation"
    );
}

/// What reports a detached result's late entry once the ledger appended it.
struct LateNotice {
    tenant: Tenant,
    operation_id: OperationId,
    attempt: Option<AttemptId>,
    label: &'static str,
    /// `None`: nobody listened when the result left.
    evidence: Option<Evidence>,
}

/// [`record_event`] without waiting for the ledger
/// ([`Ledger::record_detached`](crate::ledger::Ledger::record_detached)), for a ledger that
/// [detaches results](crate::ledger::Ledger::detaches_results). `record` takes the update's
/// changes at once (its stored response aside, as in `record_event`); the notice of the new
/// state is published once the ledger has recorded it. If the update turns out stale (the
/// operation was taken over meanwhile), the ledger appends `late` as late evidence in its
/// place, and it is surfaced; if it fails, the row stays `IN_FLIGHT` under its lease and
/// reconciliation takes over.
///
/// `runtime` runs the late evidence's task ([`detaching`] gives it). `Err`: nothing was queued
/// and `record` is unchanged.
pub(crate) fn record_event_detached(
    shared: &Arc<Shared>,
    runtime: tokio::runtime::Handle,
    record: &mut OperationRecord,
    event: Event,
    kind: &'static str,
    extras: Extras,
    late: Late,
) -> Result<Recorded, LedgerError> {
    let Ok((update, changes, stored_response)) = result_update(shared, record, event, kind, extras)
    else {
        return Ok(Recorded::Refused);
    };
    // Made before the update leaves: the notice states the row the ledger will hold. The row
    // is copied only if there is something to tell (a listener, or an escalation to count).
    let told = shared.notifier.has_subscribers() || changes.state == State::ManualReview;
    let announcement = (told && changes.state != record.state).then(|| {
        let mut after = record.clone();
        after.set_changes(changes.clone());
        Announcement::of(shared, &after)
    });
    let (entry, late) = late.detach(shared);
    let settle = Settle {
        shared: Arc::downgrade(shared),
        notifier: shared.notifier.clone(),
        runtime,
        announcement,
        late,
    };
    shared
        .ledger
        .record_detached(update, entry, Box::new(move |r| settle.settled(r)))?;
    write_changes(record, changes, stored_response);
    Ok(Recorded::Done)
}

/// The runtime for [`record_event_detached`], if the ledger detaches results and this runs
/// inside one.
pub(crate) fn detaching(shared: &Shared) -> Option<tokio::runtime::Handle> {
    if shared.ledger.detaches_results() {
        tokio::runtime::Handle::try_current().ok()
    } else {
        None
    }
}

/// What happens once a detached result settled ([`record_event_detached`]).
///
/// It holds no strong reference to the configuration (and so to the ledger): a result waiting
/// in the ledger's queue does not keep the ledger alive, so dropping its last handle can wait
/// for the queue to be written.
struct Settle {
    shared: Weak<Shared>,
    notifier: Notifier,
    runtime: tokio::runtime::Handle,
    announcement: Option<Announcement>,
    late: LateNotice,
}

impl Settle {
    /// Runs on the ledger's own thread (or on the caller's, if that thread is gone): nothing
    /// here may block.
    fn settled(self, recorded: Result<crate::ledger::Recorded, LedgerError>) {
        match recorded {
            Ok(crate::ledger::Recorded::Applied | crate::ledger::Recorded::Row(_)) => {
                if let Some(a) = self.announcement {
                    a.publish(&self.notifier);
                }
            }
            Ok(crate::ledger::Recorded::Stale) => {
                let Settle {
                    shared,
                    notifier,
                    runtime,
                    late,
                    ..
                } = self;
                // The ledger appended the late entry in the update's place (if the row still
                // exists: a purged operation has nothing to surface).
                warn_late(&late.operation_id, late.label);
                let Some(evidence) = late.evidence else {
                    return;
                };
                // Upgraded on the runtime, never here: the last handle of the ledger must not
                // be dropped on the ledger's own thread (dropping it waits for that thread).
                runtime.spawn(async move {
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    if let Ok(Some(current)) =
                        shared.ledger.get(&late.tenant, &late.operation_id).await
                    {
                        notifier.publish(Notice::LateEvidence {
                            outcome: Outcome::from_record(&current, late.attempt, true),
                            evidence,
                        });
                    }
                });
            }
            Err(e) => tracing::error!(
                operation = %self.late.operation_id,
                error = %e,
                "could not record attempt result; it will be reconciled"
            ),
        }
    }
}

/// Writes `changes` into `record`, as the ledger now holds it, except a stored response: that
/// is the vendor's answer the caller holds itself, and it is not copied back.
fn write_changes(
    record: &mut OperationRecord,
    changes: crate::ledger::backend::Changes,
    stored_response: bool,
) {
    let kept = stored_response.then(|| record.response.take());
    record.set_changes(changes);
    if let Some(kept) = kept {
        record.response = kept;
    }
}
