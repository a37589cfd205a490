//! `GET /bulk`, `POST /bulk/plan`, `POST /bulk/apply`: bulk reconciliation from a vendor's
//! export on the page. Upload the export (multipart), read the plan, apply it: each row a
//! compare-and-swap at the version the plan showed, through the reviews API. Behind the same
//! permission as resolving (a read-only identity's POSTs are refused by the gate) and a CSRF
//! token bound to the person, the tenant, the export's digest and the rows shown.

use askama::Template;
use axum::Form;
use axum::extract::{Extension, Multipart, OriginalUri, State as AxState};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use sha2::{Digest as _, Sha256};

use super::forms::field;
use super::views::{Chrome, html, ledger_failed, message, op_href, scope_label};
use super::{ReviewUiOptions, ReviewerIdentity, Shared, csrf, mount_base, now_ms, words};
use crate::ledger::TenantScope;
use crate::operation::{OperationId, Tenant};
use crate::review::bulk::{
    BulkError, BulkPlan, BulkReport, ExportMapping, PlanAction, PlanRow, RowOutcome, VendorExport,
};
use crate::state::State;

/// One row of a table on the plan page.
struct RowLine {
    row: usize,
    href: String,
    op: String,
    version: String,
    state: String,
    reference: String,
    why: String,
}

#[derive(Template)]
#[template(path = "review/bulk.html")]
struct BulkPage {
    chrome: Chrome,
    action: String,
    upload: String,
    may_resolve: bool,
    all_tenants: bool,
    tenant: String,
    error: String,
    plan: Option<PlanView>,
}

/// The plan as the page shows it.
struct PlanView {
    file_name: String,
    sha256: String,
    mapping: String,
    counts: Vec<(&'static str, usize)>,
    resolve: Vec<RowLine>,
    left: Vec<RowLine>,
    nothing: Vec<RowLine>,
    unmatched: Vec<RowLine>,
    apply: String,
    csrf: String,
    hidden: Vec<(&'static str, String)>,
}

#[derive(Template)]
#[template(path = "review/bulk_applied.html")]
struct AppliedPage {
    chrome: Chrome,
    back: String,
    file_name: String,
    sha256: String,
    applied: usize,
    total: usize,
    done: Vec<RowLine>,
    skipped: Vec<RowLine>,
}

fn base_and_chrome(
    cfg: &ReviewUiOptions,
    who: &ReviewerIdentity,
    original: &Uri,
    uri: &Uri,
) -> (String, Chrome) {
    let base = mount_base(original.path(), uri.path());
    let chrome = Chrome::new(
        &base,
        "Reconcile from a vendor export",
        Some(who),
        &scope_label(&cfg.scope),
    );
    (base, chrome)
}

fn page(cfg: &ReviewUiOptions, who: &ReviewerIdentity, base: &str, chrome: Chrome) -> BulkPage {
    BulkPage {
        chrome,
        action: format!("{base}/bulk/plan"),
        upload: format!("{base}/bulk"),
        may_resolve: who.may_resolve,
        all_tenants: cfg.scope == TenantScope::AllTenants,
        tenant: String::new(),
        error: String::new(),
        plan: None,
    }
}

/// `GET /bulk`: the upload form.
pub(super) async fn form(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
) -> Response {
    let (base, chrome) = base_and_chrome(&cfg, &who, &original, &uri);
    html(StatusCode::OK, page(&cfg, &who, &base, chrome).render())
}

/// What the upload form sent.
#[derive(Default)]
struct Upload {
    file_name: String,
    bytes: Vec<u8>,
    fields: Vec<(String, String)>,
}

async fn read_upload(mut multipart: Multipart) -> Result<Upload, String> {
    let mut up = Upload::default();
    while let Some(part) = multipart
        .next_field()
        .await
        .map_err(|e| format!("The upload could not be read: {e}"))?
    {
        let name = part.name().unwrap_or_default().to_owned();
        if name == "export" {
            up.file_name = part.file_name().unwrap_or("export").to_owned();
            up.bytes = part
                .bytes()
                .await
                .map_err(|e| format!("The file could not be read: {e}"))?
                .to_vec();
        } else {
            let value = part
                .text()
                .await
                .map_err(|e| format!("The form could not be read: {e}"))?;
            up.fields.push((name, value));
        }
    }
    if up.bytes.is_empty() {
        return Err("Choose the export file to upload.".into());
    }
    Ok(up)
}

fn mapping_of(fields: &[(String, String)]) -> Result<ExportMapping, String> {
    let format = field(fields, "format").unwrap_or("stripe");
    if let Some(m) = ExportMapping::builtin(format) {
        return Ok(m);
    }
    let named = |n: &str| field(fields, n).map(str::trim).filter(|v| !v.is_empty());
    ExportMapping::generic(
        named("reference_column").unwrap_or_default(),
        named("operation_column"),
        named("key_column"),
    )
    .map_err(|e| e.to_string())
}

fn tenant_of(cfg: &ReviewUiOptions, fields: &[(String, String)]) -> Result<Tenant, String> {
    match &cfg.scope {
        TenantScope::Tenant(t) => Ok(t.clone()),
        TenantScope::AllTenants => field(fields, "tenant")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(Tenant::new)
            .ok_or_else(|| "Name the tenant the export belongs to.".to_owned()),
    }
}

/// `POST /bulk/plan`: reads the export, plans, shows the plan and the apply form.
pub(super) async fn plan(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
    multipart: Multipart,
) -> Response {
    let (base, chrome) = base_and_chrome(&cfg, &who, &original, &uri);
    let mut p = page(&cfg, &who, &base, chrome);
    let planned = async {
        let up = read_upload(multipart).await?;
        let tenant = tenant_of(&cfg, &up.fields)?;
        let mapping = mapping_of(&up.fields)?;
        let export =
            VendorExport::parse(&up.file_name, &up.bytes, &mapping).map_err(|e| e.to_string())?;
        Ok::<_, String>((tenant, export))
    }
    .await;
    let (tenant, export) = match planned {
        Ok(x) => x,
        Err(why) => {
            p.error = why;
            return html(StatusCode::BAD_REQUEST, p.render());
        }
    };
    p.tenant = tenant.to_string();
    match cfg.reviews.bulk_plan(&tenant, &export).await {
        Ok(plan) => {
            p.plan = Some(plan_view(&cfg, &who, &base, &plan));
            html(StatusCode::OK, p.render())
        }
        Err(BulkError::Ledger(e)) => ledger_failed(&who, &base, &e),
        Err(e) => {
            p.error = e.to_string();
            html(StatusCode::CONFLICT, p.render())
        }
    }
}

/// The digest the CSRF token binds: the planned rows, length-prefixed.
fn rows_digest(rows: &[(usize, String, u64, String)]) -> String {
    let mut h = Sha256::new();
    for (row, op, version, reference) in rows {
        for part in [
            row.to_string(),
            op.clone(),
            version.to_string(),
            reference.clone(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
    }
    hex::encode(h.finalize())
}

fn bulk_token(cfg: &ReviewUiOptions, who: &str, tenant: &str, sha: &str, rows: &str) -> String {
    csrf::token(
        cfg.csrf_key.bytes(),
        who,
        tenant,
        &format!("bulk/{sha}/{rows}"),
        0,
    )
}

fn line(base: &str, cfg: &ReviewUiOptions, tenant: &Tenant, r: &PlanRow, why: String) -> RowLine {
    RowLine {
        row: r.row,
        href: r
            .operation_id
            .as_ref()
            .map(|id| op_href(base, cfg, tenant, id))
            .unwrap_or_default(),
        op: r
            .operation_id
            .as_ref()
            .map(|o| o.to_string())
            .unwrap_or_default(),
        version: r.version.map(|v| v.to_string()).unwrap_or_default(),
        state: r
            .state
            .map(|s| words::state(s).to_owned())
            .unwrap_or_default(),
        reference: r.reference.clone(),
        why,
    }
}

fn plan_view(
    cfg: &ReviewUiOptions,
    who: &ReviewerIdentity,
    base: &str,
    plan: &BulkPlan,
) -> PlanView {
    let t = &plan.tenant;
    let mut resolve = Vec::new();
    let mut left = Vec::new();
    let mut nothing = Vec::new();
    let mut hidden = vec![
        ("tenant", t.to_string()),
        ("file_name", plan.file_name.clone()),
        ("sha256", plan.sha256.clone()),
    ];
    let mut rows = Vec::new();
    for r in &plan.rows {
        match &r.action {
            PlanAction::Resolve => {
                let (Some(op), Some(v)) = (&r.operation_id, r.version) else {
                    continue;
                };
                rows.push((r.row, op.to_string(), v, r.reference.clone()));
                hidden.push(("r_row", r.row.to_string()));
                hidden.push(("r_op", op.to_string()));
                hidden.push(("r_version", v.to_string()));
                hidden.push(("r_ref", r.reference.clone()));
                let seq = r
                    .last_evidence_seq
                    .map_or_else(String::new, |s| format!("latest evidence #{s}"));
                resolve.push(line(base, cfg, t, r, seq));
            }
            PlanAction::NoMatch { why } => nothing.push(line(base, cfg, t, r, why.clone())),
            other => {
                let why = match other {
                    PlanAction::AlreadyRecorded => "Already succeeded with this reference".into(),
                    PlanAction::Conflict { references } => format!(
                        "Conflict: the export gives it {} — resolve it by hand",
                        references.join(", ")
                    ),
                    PlanAction::Duplicate { first_row } => format!("Same as row {first_row}"),
                    _ if r.state.is_some_and(State::is_terminal) => format!(
                        "Finished (reference {}): not reopened",
                        r.recorded_reference.as_deref().unwrap_or("none")
                    ),
                    _ => "Not in review: left to the recovery engine".into(),
                };
                left.push(line(base, cfg, t, r, why));
            }
        }
    }
    let unmatched = plan
        .unmatched
        .iter()
        .map(|u| RowLine {
            row: 0,
            href: op_href(base, cfg, t, &u.operation_id),
            op: u.operation_id.to_string(),
            version: u.version.to_string(),
            state: words::state(State::ManualReview).to_owned(),
            reference: String::new(),
            why: format!(
                "{}, in review for {}",
                u.contract,
                words::age(now_ms() - u.created_ms)
            ),
        })
        .collect();
    let digest = rows_digest(&rows);
    PlanView {
        file_name: plan.file_name.clone(),
        sha256: plan.sha256.clone(),
        mapping: plan.mapping.clone(),
        counts: plan.counts().to_vec(),
        resolve,
        left,
        nothing,
        unmatched,
        apply: format!("{base}/bulk/apply"),
        csrf: bulk_token(cfg, &who.name, t.as_str(), &plan.sha256, &digest),
        hidden,
    }
}

/// The planned rows a posted apply form carries, in order.
fn posted_rows(form: &[(String, String)]) -> Option<Vec<(usize, String, u64, String)>> {
    let all = |name: &str| -> Vec<&str> {
        form.iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let (rows, ops, versions, refs) = (all("r_row"), all("r_op"), all("r_version"), all("r_ref"));
    if ops.len() != rows.len() || versions.len() != rows.len() || refs.len() != rows.len() {
        return None;
    }
    rows.iter()
        .zip(ops)
        .zip(versions)
        .zip(refs)
        .map(|(((row, op), v), r)| {
            Some((
                row.parse().ok()?,
                op.to_owned(),
                v.parse().ok()?,
                r.to_owned(),
            ))
        })
        .collect()
}

/// `POST /bulk/apply`: carries out the plan the page showed, each row at the version shown.
pub(super) async fn apply(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let (base, chrome) = base_and_chrome(&cfg, &who, &original, &uri);
    let refuse = |status, why: &str| {
        message(
            status,
            Some(&who),
            &base,
            "The form was refused",
            vec![why.to_owned()],
            None,
        )
    };
    let Some(rows) = posted_rows(&form) else {
        return refuse(StatusCode::BAD_REQUEST, "The form's rows are incomplete.");
    };
    let Ok(tenant) = tenant_of(&cfg, &form) else {
        return refuse(StatusCode::BAD_REQUEST, "The form did not name the tenant.");
    };
    let sha = field(&form, "sha256").unwrap_or_default();
    let given = field(&form, "csrf").unwrap_or_default();
    let expected = bulk_token(&cfg, &who.name, tenant.as_str(), sha, &rows_digest(&rows));
    if given.is_empty() || !constant_eq(given.as_bytes(), expected.as_bytes()) {
        return refuse(
            StatusCode::FORBIDDEN,
            "Its security token does not match this plan and your sign-in. Upload the export \
             again and use the plan's form.",
        );
    }
    let reason = field(&form, "reason").unwrap_or_default().trim().to_owned();
    if reason.is_empty() {
        return message(
            StatusCode::BAD_REQUEST,
            Some(&who),
            &base,
            "The form is incomplete",
            vec!["A reason is required: say what the export is and why you trust it.".into()],
            None,
        );
    }
    let file_name = field(&form, "file_name").unwrap_or("export").to_owned();
    let plan = BulkPlan {
        tenant: tenant.clone(),
        file_name,
        sha256: sha.to_owned(),
        mapping: String::new(),
        rows: rows
            .iter()
            .map(|(row, op, version, reference)| PlanRow {
                row: *row,
                reference: reference.clone(),
                operation_id: Some(OperationId::new(op.as_str())),
                state: Some(State::ManualReview),
                version: Some(*version),
                last_evidence_seq: None,
                recorded_reference: None,
                action: PlanAction::Resolve,
            })
            .collect(),
        unmatched: Vec::new(),
        unmatched_truncated: false,
    };
    let report = match cfg.reviews.bulk_apply(&plan, &who.name, &reason).await {
        Ok(r) => r,
        Err(BulkError::Ledger(e)) => return ledger_failed(&who, &base, &e),
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    html(
        StatusCode::OK,
        applied_page(&cfg, &base, chrome, &tenant, &report).render(),
    )
}

fn applied_page(
    cfg: &ReviewUiOptions,
    base: &str,
    chrome: Chrome,
    tenant: &Tenant,
    report: &BulkReport,
) -> AppliedPage {
    let mut done = Vec::new();
    let mut skipped = Vec::new();
    for r in &report.rows {
        let why = match &r.outcome {
            RowOutcome::Applied { version } => format!("Resolved as succeeded (version {version})"),
            RowOutcome::Stale { planned, current } => format!(
                "Skipped: it changed since the plan (version {planned} → {current}). Open it, \
                 read what arrived, and decide."
            ),
            RowOutcome::ClaimedByOther { holder } => {
                format!("Skipped: {holder} holds it. Ask them, or take it over.")
            }
            RowOutcome::Refused { why } => format!("Skipped: {why}"),
        };
        let l = RowLine {
            row: r.row,
            href: op_href(base, cfg, tenant, &r.operation_id),
            op: r.operation_id.to_string(),
            version: String::new(),
            state: String::new(),
            reference: r.reference.clone(),
            why,
        };
        if matches!(r.outcome, RowOutcome::Applied { .. }) {
            done.push(l);
        } else {
            skipped.push(l);
        }
    }
    AppliedPage {
        chrome,
        back: format!("{base}/bulk"),
        file_name: report.file_name.clone(),
        sha256: report.sha256.clone(),
        applied: report.applied(),
        total: report.rows.len(),
        done,
        skipped,
    }
}

/// Equality without an early exit (the token is compared like the other forms' tokens).
fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
