//! `quarantine`: what the ledger holds but never acts on (unmatched callbacks, rows it could
//! not decode), and `quarantine release`: a row given back to recovery.

use recoverable_write::operator;
use recoverable_write::state::State;
use serde::Serialize;

use super::{Ctx, reviewer, to_json};
use crate::args::{QuarantineAction, QuarantineArgs, ReleaseArgs};
use crate::error::{CliError, review_error};

/// One quarantined callback as printed: never its payload.
#[derive(Debug, Serialize)]
struct QuarantinedCallbackView {
    vendor: String,
    event_id: String,
    event_type: String,
    tenant: Option<String>,
    match_by: Option<String>,
    match_value: Option<String>,
    reason: String,
    evidence: Option<&'static str>,
    received: String,
}

/// One quarantined (undecodable) row as printed.
#[derive(Debug, Serialize)]
struct QuarantinedRowView {
    tenant: String,
    operation_id: String,
    error: String,
    at: String,
}

impl Ctx {
    pub(super) async fn quarantine(&self, a: QuarantineArgs) -> Result<String, CliError> {
        if let Some(QuarantineAction::Release(r)) = a.action {
            return self.release(r).await;
        }
        // Scoped in the ledger, so the limit counts this scope's events (a tenant's first
        // `limit`, not the first `limit` of every tenant filtered down to none).
        let callbacks = self
            .ledger
            .quarantined_callbacks(&self.scope, a.limit)
            .await
            .map_err(CliError::ledger)?;
        let rows = self
            .ledger
            .quarantined(a.limit)
            .await
            .map_err(CliError::ledger)?;
        // A callback whose account mapped to no tenant belongs to no tenant: only an
        // all-tenants view shows it (the ledger's scope says so).
        let callbacks: Vec<QuarantinedCallbackView> = callbacks
            .into_iter()
            .map(|c| QuarantinedCallbackView {
                vendor: c.vendor,
                event_id: c.event_id,
                event_type: c.event_type,
                tenant: c.tenant.map(|t| t.as_str().to_owned()),
                match_by: c.match_by,
                match_value: c.match_value,
                reason: c.reason,
                evidence: c.evidence.as_ref().map(|e| e.label()),
                received: operator::format_time(c.received_at_ms),
            })
            .collect();
        let rows: Vec<QuarantinedRowView> = rows
            .into_iter()
            .filter(|r| self.scope.contains(&r.tenant))
            .map(|r| QuarantinedRowView {
                tenant: r.tenant.as_str().to_owned(),
                operation_id: r.operation_id.as_str().to_owned(),
                error: r.error,
                at: operator::format_time(r.at_ms),
            })
            .collect();
        if self.json {
            return to_json(&serde_json::json!({ "callbacks": callbacks, "rows": rows }));
        }
        let mut out = String::new();
        out.push_str(&format!("quarantined callbacks: {}\n", callbacks.len()));
        for c in &callbacks {
            out.push_str(&format!(
                "  {}  {} {} ({})  tenant {}  {} {}  evidence {}\n    why: {}\n",
                c.received,
                c.vendor,
                c.event_id,
                c.event_type,
                c.tenant.as_deref().unwrap_or("-"),
                c.match_by.as_deref().unwrap_or("-"),
                c.match_value.as_deref().unwrap_or("-"),
                c.evidence.unwrap_or("-"),
                c.reason,
            ));
        }
        out.push_str(&format!(
            "quarantined rows (could not be decoded): {}\n",
            rows.len()
        ));
        for r in &rows {
            out.push_str(&format!(
                "  {}  {} {}\n    why: {}\n",
                r.at, r.tenant, r.operation_id, r.error
            ));
        }
        if !rows.is_empty() {
            out.push_str(
                "  recovery skips them. Once a version that can read them runs: `show OP`, then \
                 `quarantine release OP --version N --reviewer YOU --reason …`\n",
            );
        }
        Ok(out)
    }

    /// `quarantine release`: the row is read again and given back to recovery if it decodes.
    async fn release(&self, a: ReleaseArgs) -> Result<String, CliError> {
        let (tenant, op) = self.locate(&a.op).await?;
        let reviewer = reviewer(&a.reviewer)?;
        let result = self
            .reviews
            .release_quarantined(&tenant, &op, &reviewer, &a.reason, a.version)
            .await;
        let row = match result {
            Ok(row) => row,
            Err(e) => return Err(review_error(e, None)),
        };
        if self.json {
            #[derive(Serialize)]
            struct Out<'a> {
                operation_id: &'a str,
                tenant: &'a str,
                action: &'a str,
                state: State,
                from_version: u64,
                version: u64,
            }
            return to_json(&Out {
                operation_id: op.as_str(),
                tenant: tenant.as_str(),
                action: "released from quarantine",
                state: row.state,
                from_version: a.version,
                version: row.version,
            });
        }
        Ok(format!(
            "{op}: released from quarantine (version {} -> {}); it is {} again, and the \
             recoverer's next pass picks it up where it stopped\n  {}\n",
            a.version,
            row.version,
            row.state,
            operator::state_meaning(row.state)
        ))
    }
}
