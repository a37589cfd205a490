//! Sending a replay: whether the operation may go out again now, the exact request (same key,
//! same bytes), the claim that registers the attempt before anything is sent, and the send
//! through the transport, whose result is recorded like any attempt's.

use std::ops::ControlFlow;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use http_body_util::combinators::UnsyncBoxBody;
use tower::{BoxError, ServiceExt};

use super::recoverer::{Recoverer, RecoveryReport, first_sent_ms};
use super::transport::ReplayService;
use crate::authorize::Access;
use crate::contract::Contract;
use crate::core::engine::{self, Applied, Extras};
use crate::core::{AttemptCtx, Observed, record_attempt};
use crate::core::{outgoing, trace};
use crate::evidence::Evidence;
use crate::guard::AttemptToken;
use crate::ledger::{LedgerError, OperationRecord};
use crate::operation::AttemptId;
use crate::review::{self, EvidenceSummary};
use crate::state::{Event, State};

impl Recoverer {
    /// Sends a `RETRY_READY` operation again: same key, same bytes, registered first.
    pub(super) async fn replay(
        &self,
        row: OperationRecord,
        report: &mut RecoveryReport,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let Some(service) = self.replay.clone() else {
            tracing::warn!("resend is safe but no replay service is configured");
            return self
                .wait_or_escalate(&row, "no replay service configured")
                .await;
        };
        let contract = match self.cleared_to_replay(&row).await? {
            ControlFlow::Continue(contract) => contract,
            ControlFlow::Break(done) => return Ok(done),
        };
        // The exact request, key placed, before send rights are claimed: one that cannot be
        // built leaves nothing claimed.
        let request = match replay_request(&row, &contract) {
            Ok(r) => r,
            Err(why) => {
                return self
                    .escalate(&row, format!("{why}; nothing was sent"))
                    .await;
            }
        };
        let (claimed, attempt) = match self.claim_replay(&row).await? {
            ControlFlow::Continue(claimed) => claimed,
            ControlFlow::Break(done) => return Ok(done),
        };
        report.replays += 1;
        self.send_replay(service, contract, claimed, attempt, request)
            .await
    }

    /// The contract to replay `row` under, if it may go out now: write permission, the
    /// target's replay rate, a configured contract, a key the vendor still holds, and no
    /// evidence since the decision that says the write may have applied. `Break`: what the
    /// engine did instead (the row waits for a later pass, or goes to a person).
    async fn cleared_to_replay(
        &self,
        row: &OperationRecord,
    ) -> Result<ControlFlow<Option<OperationRecord>, Arc<Contract>>, LedgerError> {
        if let Err(denied) = self.shared.authorizer.check(row, Access::Write).await {
            if row.state == State::Prepared {
                // Its caller was refused (or died) and never came back: a person decides.
                return self
                    .escalate(
                        row,
                        format!(
                            "recorded, never sent, and its first send is not authorized: {}",
                            denied.reason
                        ),
                    )
                    .await
                    .map(ControlFlow::Break);
            }
            tracing::warn!(%denied, "resend is safe but write permission is revoked");
            return self
                .wait_or_escalate(row, &format!("write not authorized: {}", denied.reason))
                .await
                .map(ControlFlow::Break);
        }
        let target = engine::target_of(row);
        if let Some(limiter) = &self.limiter
            && !limiter.try_acquire(&target)
        {
            tracing::info!(%target, "replay limited for this target; next pass");
            return self
                .wait_or_escalate(row, "replay rate limit")
                .await
                .map(ControlFlow::Break);
        }
        let Some(contract) = self.contract_for(row) else {
            return self
                .escalate(
                    row,
                    "the operation's contract is no longer configured".into(),
                )
                .await
                .map(ControlFlow::Break);
        };
        // A replay made safe by the contract alone (path (b): the first attempt may have
        // applied) is only safe while the vendor still holds the key. The decision may have been
        // taken long ago (a rate limit, an authorizer, a restart): check again now, right before
        // the claim; the skew margin covers the claim itself.
        if row.state == State::RetryReady
            && row.may_have_applied
            && self.replay_safe(row, Some(&contract)).is_none()
        {
            return self
                .escalate(
                    row,
                    "a same-key replay is no longer covered by the vendor's key retention".into(),
                )
                .await
                .map(ControlFlow::Break);
        }
        // The fencing rule: the decision that made the row sendable (a lookup's "not executed",
        // a reviewer's re-approval, a safe same-key replay) was made on a view of the
        // operation. Evidence recorded since (a verified success callback, a late response) that
        // says the write may have applied stops the replay; and the claim below names the
        // version this read saw, so evidence landing after it makes the claim stale.
        if let Some(why) = self.contradicted(row).await? {
            return self.escalate(row, why).await.map(ControlFlow::Break);
        }
        Ok(ControlFlow::Continue(contract))
    }

    /// Registers the replay's attempt (`IN_FLIGHT`, new attempt, new generation, lease) before
    /// anything is sent. `Break`: no send rights (the claim escalated, or the row moved on).
    async fn claim_replay(
        &self,
        row: &OperationRecord,
    ) -> Result<ControlFlow<Option<OperationRecord>, (OperationRecord, AttemptId)>, LedgerError>
    {
        let attempt = AttemptId::generate();
        let lease_until = self.shared.clock.now_ms() + row.policy.lease().as_millis() as i64;
        let applied = engine::apply_event(
            &self.shared,
            row,
            Event::ClaimSend,
            "attempt_registered",
            Extras {
                attempt: Some(attempt),
                lease_until_ms: Some(lease_until),
                ..Extras::default()
            },
        )
        .await?;
        match applied {
            Applied::Done(r) if r.state == State::InFlight => {
                // The recovery step's span now follows the replay's attempt.
                trace::claimed(&tracing::Span::current(), &r, &attempt);
                Ok(ControlFlow::Continue((r, attempt)))
            }
            // The claim escalated (attempts or window spent).
            Applied::Done(r) => Ok(ControlFlow::Break(Some(r))),
            other => self
                .settle(row, other, Evidence::unknown("replay"))
                .await
                .map(ControlFlow::Break),
        }
    }

    /// The attempt is durable: sends `request` through the transport by the attempt's deadline
    /// and records what came back; the row as the ledger then holds it.
    async fn send_replay(
        &self,
        service: ReplayService,
        contract: Arc<Contract>,
        claimed: OperationRecord,
        attempt: AttemptId,
        request: Request<Bytes>,
    ) -> Result<Option<OperationRecord>, LedgerError> {
        let deadline = tokio::time::Instant::now() + claimed.policy.attempt_timeout();
        let token = AttemptToken::new(claimed.operation_id.clone(), attempt);
        let (mut parts, body) = request.into_parts();
        parts.extensions.insert(token.clone());
        let request = Request::from_parts(parts, Full::new(body));
        tracing::info!(attempt = %attempt, generation = %claimed.generation, "replaying with the same key and bytes");
        let observed: Observed<UnsyncBoxBody<Bytes, BoxError>> =
            match tokio::time::timeout_at(deadline, service.oneshot(request)).await {
                Ok(Ok(res)) => Observed::Response(res),
                Ok(Err(e)) => Observed::Failed(e),
                Err(_) => Observed::TimedOut,
            };
        let ctx = AttemptCtx {
            shared: self.shared.clone(),
            contract,
            record: claimed.clone(),
            attempt,
            token,
            deadline,
        };
        // The caller-facing result is irrelevant here; the ledger holds the outcome. (Boxed as a
        // `Send` future here, with concrete types, so the spawned engine stays `Send`.)
        let recording: crate::ledger::BoxFuture<'static, _> =
            Box::pin(record_attempt(ctx, observed));
        let _ = recording.await;
        self.ledger()
            .get(&claimed.tenant, &claimed.operation_id)
            .await
    }

    /// Path (b): why a same-key replay is safe now, or `None`.
    pub(super) fn replay_safe(
        &self,
        row: &OperationRecord,
        contract: Option<&Contract>,
    ) -> Option<String> {
        let contract = contract?;
        if !contract.replay.is_safe() {
            return None;
        }
        // Unknown retention: not safe (the key may already be pruned and the replay run anew).
        let retention_ms = i64::try_from(contract.retention_secs?)
            .ok()?
            .saturating_mul(1000);
        let first_sent = first_sent_ms(row)?;
        let must_finish_by = self.shared.clock.now_ms()
            + row.policy.attempt_timeout_ms as i64
            + self.skew_margin.as_millis() as i64;
        if must_finish_by >= first_sent + retention_ms {
            return None;
        }
        Some(format!(
            "contract {} replays the same key ({:?}) within its {} s retention",
            contract.name,
            contract.replay,
            retention_ms / 1000
        ))
    }

    /// Why the decision that made `row` sendable no longer holds, if evidence recorded after it
    /// says the write may have applied ([`review::says_may_have_applied`]).
    async fn contradicted(&self, row: &OperationRecord) -> Result<Option<String>, LedgerError> {
        let log: Vec<EvidenceSummary> = self
            .ledger()
            .evidence(&row.tenant, &row.operation_id)
            .await?
            .iter()
            .map(EvidenceSummary::of)
            .collect();
        Ok(review::evidence_since_decision(&log)
            .into_iter()
            .find(|e| review::says_may_have_applied(e))
            .map(|e| {
                format!(
                    "not sent: evidence recorded after the decision that made it sendable says                      the write may have applied ({}, {} entry #{})",
                    e.evidence.as_ref().map_or("evidence", |ev| ev.label()),
                    e.kind,
                    e.seq
                )
            }))
    }
}

/// The exact request a replay of `row` sends under `contract`: its frozen request and key, no
/// credentials (the transport's stack applies them); why not, when it cannot be built.
fn replay_request(row: &OperationRecord, contract: &Contract) -> Result<Request<Bytes>, String> {
    outgoing::build(
        &row.request,
        contract,
        &row.idempotency_key,
        outgoing::Carried::nothing(),
    )
    .map_err(|e| match e {
        outgoing::OutgoingError::Key(e) => format!("the key cannot be placed: {e}"),
        outgoing::OutgoingError::Frozen(e) => format!("the frozen request does not rebuild: {e}"),
        outgoing::OutgoingError::Secrets(which) => which.why_not_replayed().to_owned(),
    })
}
