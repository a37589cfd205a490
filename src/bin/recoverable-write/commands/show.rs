//! `show`: one operation, its redacted handoff package, timeline, audit trail, retention
//! dates, why it is stuck and what the engine would do next.

use recoverable_write::ledger::TenantScope;
use recoverable_write::operator::{self, AuditEntry};
use recoverable_write::reconcile::EngineHealth;
use recoverable_write::retention::RetentionDates;
use recoverable_write::review::{HandoffPackage, QuarantinePackage};
use serde::Serialize;

use super::{Ctx, to_json};
use crate::args::ShowArgs;
use crate::error::{CliError, review_error};
use crate::render;

impl Ctx {
    pub(super) async fn show(&self, a: ShowArgs) -> Result<String, CliError> {
        let (tenant, op) = self.locate(&a.op).await?;
        let aside = self
            .reviews
            .quarantine_package(&tenant, &op)
            .await
            .map_err(|e| review_error(e, None))?;
        if let Some(q) = aside.as_ref().filter(|q| !q.readable) {
            return self.show_quarantined(q);
        }
        let pkg = self
            .reviews
            .handoff(&tenant, &op)
            .await
            .map_err(|e| review_error(e, None))?;
        let engine = EngineHealth::read(
            &*self.ledger,
            &TenantScope::Tenant(tenant.clone()),
            self.now_ms,
        )
        .await
        .map_err(CliError::ledger)?;
        let mut explanation = operator::explain_with_engine(&pkg, self.now_ms, Some(&engine));
        if let Some(q) = &aside {
            // Set aside: the engine does nothing with it until it is released.
            explanation.next = operator::explain_quarantine(q, self.now_ms).next;
        }
        let audit = operator::audit_trail(&pkg);
        let record = self
            .ledger
            .get(&tenant, &op)
            .await
            .map_err(CliError::ledger)?;
        let retention = record.as_ref().and_then(|r| self.purger.dates(r));
        if self.json {
            #[derive(Serialize)]
            struct Out<'a> {
                package: &'a HandoffPackage,
                explanation: &'a operator::Explanation,
                audit: &'a [AuditEntry],
                late_evidence: Vec<i64>,
                /// `null` while the operation is not finished: it is kept whatever its age.
                retention: Option<RetentionDates>,
                /// Set when the row is quarantined although this version reads it.
                quarantined: Option<&'a QuarantinePackage>,
                now_ms: i64,
            }
            return to_json(&Out {
                quarantined: aside.as_ref(),
                package: &pkg,
                explanation: &explanation,
                audit: &audit,
                late_evidence: operator::late_evidence(&pkg)
                    .iter()
                    .map(|e| e.seq)
                    .collect(),
                retention,
                now_ms: self.now_ms,
            });
        }
        let mut out = String::new();
        if let Some(q) = &aside {
            // Readable now, still set aside: only a release gives it back to recovery.
            let ex = operator::explain_quarantine(q, self.now_ms);
            out.push_str(&format!(
                "!! QUARANTINED: {}\n   {}\n   {} quarantine release {} --version {} --reviewer \
                 YOU --reason \"…\"\n\n",
                ex.headline,
                ex.next,
                self.cmd(&tenant),
                render::quote(pkg.operation_id.as_str()),
                pkg.version
            ));
        }
        out.push_str(&render::show(
            &pkg,
            &explanation,
            &audit,
            self.now_ms,
            &self.cmd(&tenant),
        ));
        out.push_str(&render::retention(retention.as_ref()));
        Ok(out)
    }

    /// `show` of an operation this version cannot decode: its raw columns, redacted.
    fn show_quarantined(&self, q: &QuarantinePackage) -> Result<String, CliError> {
        let explanation = operator::explain_quarantine(q, self.now_ms);
        if self.json {
            #[derive(Serialize)]
            struct Out<'a> {
                quarantined: &'a QuarantinePackage,
                explanation: &'a operator::Explanation,
                now_ms: i64,
            }
            return to_json(&Out {
                quarantined: q,
                explanation: &explanation,
                now_ms: self.now_ms,
            });
        }
        Ok(render::quarantined(
            q,
            &explanation,
            self.now_ms,
            &self.cmd(&q.tenant),
        ))
    }
}
