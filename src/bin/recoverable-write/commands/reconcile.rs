//! `reconcile --from EXPORT`: the plan of a bulk reconciliation from a vendor's export, and
//! with `--apply` its execution, each resolution a compare-and-swap at the planned version.

use recoverable_write::ledger::TenantScope;
use recoverable_write::review::bulk::{
    BulkError, BulkPlan, BulkReport, ExportMapping, RowOutcome, VendorExport,
};

use super::{Ctx, reviewer, to_json};
use crate::args::{ExportFormat, ReconcileArgs};
use crate::error::{CliError, exit};
use crate::render;

impl Ctx {
    pub(super) async fn reconcile(&self, a: ReconcileArgs) -> Result<String, CliError> {
        let TenantScope::Tenant(tenant) = &self.scope else {
            return Err(CliError::usage(
                "an export comes from one vendor account: name its tenant (--tenant T) instead \
                 of --all-tenants",
            ));
        };
        let mapping = mapping(&a)?;
        let bytes = std::fs::read(&a.from).map_err(|e| {
            CliError::usage(format!("cannot read the export {}: {e}", a.from.display()))
        })?;
        let name = a.from.file_name().map_or_else(
            || a.from.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let export = VendorExport::parse(&name, &bytes, &mapping)
            .map_err(|e| CliError::usage(format!("{}: {e}", a.from.display())))?;
        let plan = match &a.plan {
            Some(path) => saved_plan(path, &export, tenant.as_str())?,
            None => self
                .reviews
                .bulk_plan(tenant, &export)
                .await
                .map_err(bulk_error)?,
        };
        if !a.apply {
            return if self.json {
                to_json(&plan)
            } else {
                Ok(render::bulk_plan(&plan, self.now_ms))
            };
        }
        let who = reviewer(a.reviewer.as_deref().unwrap_or_default())?;
        let reason = a.reason.as_deref().unwrap_or_default();
        let report = self
            .reviews
            .bulk_apply(&plan, &who, reason)
            .await
            .map_err(bulk_error)?;
        let out = if self.json {
            to_json(&report)?
        } else {
            let mut out = if a.plan.is_some() {
                String::new()
            } else {
                render::bulk_plan(&plan, self.now_ms)
            };
            out.push_str(&render::bulk_report(&report));
            out
        };
        match skipped_code(&report) {
            None => Ok(out),
            Some((code, message)) => Err(CliError::new(code, message).with_output(out)),
        }
    }
}

/// The mapping the arguments name.
fn mapping(a: &ReconcileArgs) -> Result<ExportMapping, CliError> {
    let columns_given =
        a.reference_column.is_some() || a.key_column.is_some() || a.operation_column.is_some();
    let builtin = match a.format {
        ExportFormat::Stripe => Some(ExportMapping::stripe()),
        ExportFormat::Adyen => Some(ExportMapping::adyen()),
        ExportFormat::Square => Some(ExportMapping::square()),
        ExportFormat::Paypal => Some(ExportMapping::paypal()),
        ExportFormat::Generic => None,
    };
    if let Some(m) = builtin {
        if columns_given {
            return Err(CliError::usage(format!(
                "--format {} has its own columns: use --format generic to name them",
                m.name
            )));
        }
        return Ok(m);
    }
    let reference = a.reference_column.as_deref().ok_or_else(|| {
        CliError::usage(
            "name the export's layout (--format stripe|adyen|square|paypal), or its columns: \
             --reference-column C and --key-column K or --operation-column O",
        )
    })?;
    ExportMapping::generic(
        reference,
        a.operation_column.as_deref(),
        a.key_column.as_deref(),
    )
    .map_err(|e| CliError::usage(e.to_string()))
}

/// A plan printed earlier with `--json`, for this export and tenant.
fn saved_plan(
    path: &std::path::Path,
    export: &VendorExport,
    tenant: &str,
) -> Result<BulkPlan, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read the plan {}: {e}", path.display())))?;
    let plan: BulkPlan = serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "{} is not a plan printed by `reconcile --json`: {e}",
            path.display()
        ))
    })?;
    if plan.sha256 != export.sha256 {
        return Err(CliError::usage(format!(
            "the plan was made from another export (sha256 {}), not this one (sha256 {}): plan \
             again from this file",
            plan.sha256, export.sha256
        )));
    }
    if plan.tenant.as_str() != tenant {
        return Err(CliError::usage(format!(
            "the plan is for tenant {}, not {tenant}",
            plan.tenant
        )));
    }
    Ok(plan)
}

/// A refused bulk reconciliation as its exit code.
fn bulk_error(e: BulkError) -> CliError {
    match e {
        BulkError::Ledger(e) => CliError::ledger(e),
        BulkError::ReasonRequired => {
            CliError::usage("--reason must say why: it goes into every operation's audit trail")
        }
        e @ BulkError::RowMatchesTwo { .. } => CliError::new(exit::REFUSED, e.to_string()),
        e => CliError::new(exit::REFUSED, e.to_string()),
    }
}

/// Exit 4 if a planned row was stale, else 5 if one was claimed or refused; `None` if every
/// planned row was applied.
fn skipped_code(report: &BulkReport) -> Option<(u8, String)> {
    let skipped: Vec<_> = report.skipped().collect();
    if skipped.is_empty() {
        return None;
    }
    let stale = skipped
        .iter()
        .filter(|r| matches!(r.outcome, RowOutcome::Stale { .. }))
        .count();
    let what = if stale > 0 {
        format!(
            "{stale} stale: they changed since the plan. Run `reconcile` again to plan them afresh"
        )
    } else {
        "claimed by another reviewer or refused: the report says which".to_owned()
    };
    let code = if stale > 0 {
        exit::STALE
    } else {
        exit::REFUSED
    };
    Some((
        code,
        format!(
            "{} of {} planned resolutions were applied; {} skipped ({what})",
            report.applied(),
            report.rows.len(),
            skipped.len()
        ),
    ))
}
