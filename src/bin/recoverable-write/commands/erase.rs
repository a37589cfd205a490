//! `erase`: the right to erasure, one finished operation's details or every finished
//! operation of a tenant.

use recoverable_write::ledger::TenantScope;

use super::{Ctx, to_json};
use crate::args::EraseArgs;
use crate::error::{CliError, retention_error};

impl Ctx {
    pub(super) async fn erase(&self, a: EraseArgs) -> Result<String, CliError> {
        let TenantScope::Tenant(tenant) = &self.scope else {
            return Err(CliError::usage(
                "erase works on one tenant: pass --tenant T",
            ));
        };
        if let Some(text) = &a.op {
            let (tenant, op) = self.locate(text).await?;
            let done = self
                .purger
                .erase_details(&tenant, &op)
                .await
                .map_err(retention_error)?;
            if self.json {
                return to_json(&serde_json::json!({
                    "operation_id": op.as_str(),
                    "details_erased": done.rows,
                    "bytes": done.bytes,
                }));
            }
            return Ok(if done.rows == 0 {
                format!("{op}: its details were already erased\n")
            } else {
                format!(
                    "{op}: request, response and evidence details erased ({} bytes); its identity \
                     stays, so a repeat still sends nothing\n",
                    done.bytes
                )
            });
        }
        if !a.yes {
            return Err(CliError::usage(
                "erase --all-finished deletes every finished operation of the tenant and cannot be \
                 undone: pass --yes to confirm",
            ));
        }
        let report = self
            .purger
            .erase_tenant(tenant)
            .await
            .map_err(retention_error)?;
        if self.json {
            return to_json(&serde_json::json!({ "tenant": tenant.as_str(), "report": report }));
        }
        Ok(format!(
            "tenant {tenant}: {} finished operation(s) deleted, {} callback record(s) deleted\n",
            report.identity.rows,
            report.callback_deliveries.rows + report.quarantined_callbacks.rows
        ))
    }
}
