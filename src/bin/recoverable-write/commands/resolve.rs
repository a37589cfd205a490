//! `resolve`: a reviewer's decision on an operation in `MANUAL_REVIEW`.

use recoverable_write::state::ReviewDecision;

use super::{Ctx, reviewer};
use crate::args::{Decision, ResolveArgs};
use crate::error::CliError;

impl Ctx {
    pub(super) async fn resolve(&self, a: ResolveArgs) -> Result<String, CliError> {
        if a.remote_ref.is_some() && a.decision != Decision::Succeeded {
            return Err(CliError::usage("--remote-ref goes with `succeeded` only"));
        }
        if a.no_reference && a.decision != Decision::Succeeded {
            return Err(CliError::usage("--no-reference goes with `succeeded` only"));
        }
        let decision = match a.decision {
            Decision::Succeeded => {
                let remote_ref = a
                    .remote_ref
                    .map(|r| r.trim().to_owned())
                    .filter(|r| !r.is_empty());
                // Final, and without a reference it cannot be traced to the vendor's object:
                // only on an explicit word that there is none.
                if remote_ref.is_none() && !a.no_reference {
                    return Err(CliError::usage(
                        "succeeded is final: give the vendor's reference of what it created \
                         (--remote-ref REF), or pass --no-reference if you checked at the vendor \
                         and there is none to record",
                    ));
                }
                ReviewDecision::ConfirmedSucceeded { remote_ref }
            }
            Decision::NotExecuted => {
                if !a.reapprove {
                    return Err(CliError::usage(
                        "not-executed re-approves the write: the engine sends it again with the \
                         same key and bytes. Pass --reapprove to confirm you verified with the \
                         vendor that it was not executed",
                    ));
                }
                ReviewDecision::ConfirmedNotExecuted
            }
            Decision::KeepPending => ReviewDecision::KeepPending,
        };
        let (tenant, op) = self.locate(&a.op).await?;
        let reviewer = reviewer(&a.reviewer)?;
        let result = self
            .reviews
            .resolve_with_reason(&tenant, &op, &reviewer, &a.reason, a.version, decision)
            .await;
        let what = match a.decision {
            Decision::Succeeded => "resolved as succeeded",
            Decision::NotExecuted => "re-approved (confirmed not executed)",
            Decision::KeepPending => "kept pending",
        };
        self.acted(&tenant, &op, what, a.version, result).await
    }
}
