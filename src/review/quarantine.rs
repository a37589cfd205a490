//! Quarantined operations for the people who own the queue: a row this version cannot decode,
//! shown by the columns it can read (redacted as the handoff package is), and its release once
//! a version that can read it runs.
//!
//! A quarantined row is a write whose outcome may still be unknown: the recovery engine skips
//! it (no lookup, no replay, no sweep) until it is released. It typically comes from a rolling
//! deploy, an older worker meeting a row a newer one wrote, or from a column edited by hand.
//! So the answer is almost never to touch the row: upgrade every worker to a version that reads
//! it, then release it; recovery then goes on where it stopped.

use serde::{Deserialize, Serialize};

use super::{
    EvidenceSummary, ReviewError, Reviews, audit_note, body_fields, clean, contract_label,
    redacted_url, required,
};
use crate::ledger::{OperationQuery, OperationRecord, Released, SkippedRow, TextMatch};
use crate::operation::{OperationId, Tenant};

/// A quarantined operation (or one that cannot be decoded) as a person may see it: the columns
/// this version could read, the decode error, and the evidence log if it reads. Like the
/// [`HandoffPackage`](super::HandoffPackage), it holds no credential and no body value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QuarantinePackage {
    /// Tenant.
    pub tenant: Tenant,
    /// Operation id.
    pub operation_id: OperationId,
    /// When it was quarantined (ms since the Unix epoch); `None`: it is not yet (it went bad
    /// since its last claim; the next claim or sweep that meets it quarantines it).
    pub quarantined_ms: Option<i64>,
    /// Whether this version decodes the row now: then only its quarantine keeps it from
    /// recovery, and releasing it gives it back.
    pub readable: bool,
    /// Why it cannot be used: the decode error (or, when it reads now, the error it was
    /// quarantined with).
    pub error: String,
    /// The column that error names.
    pub column: Option<String>,
    /// The state column as stored (possibly a name this version does not know).
    pub state: String,
    /// The business result kept in review, as stored.
    pub last_result: Option<String>,
    /// The version to name when releasing it (`None` if unreadable).
    pub version: Option<u64>,
    /// The generation (fence).
    pub generation: Option<u64>,
    /// Action name.
    pub action: Option<String>,
    /// The caller's intent reference.
    pub intent_ref: Option<String>,
    /// Created (ms since the Unix epoch).
    pub created_ms: i64,
    /// Last changed (ms since the Unix epoch).
    pub updated_ms: i64,
    /// When the engine would look next (ms since the Unix epoch).
    pub next_check_ms: Option<i64>,
    /// A lease on it (ms since the Unix epoch): the claim that quarantined it left one.
    pub lease_until_ms: Option<i64>,
    /// End of the recovery window (ms since the Unix epoch).
    pub deadline_ms: Option<i64>,
    /// Write attempts used.
    pub attempts_used: Option<u32>,
    /// Lookups used.
    pub queries_used: Option<u32>,
    /// The vendor's reference, if known.
    pub remote_ref: Option<String>,
    /// The last reason recorded.
    pub reason: Option<String>,
    /// The write as sent, redacted, as far as it could be read.
    pub parameters: RawParameters,
    /// The columns that could not be read, and why.
    pub unreadable: Vec<UnreadableColumn>,
    /// The evidence log, oldest first (empty if it could not be read).
    pub evidence: Vec<EvidenceSummary>,
    /// Why the evidence log could not be read, if it could not.
    pub evidence_error: Option<String>,
}

/// The frozen request of a quarantined row as far as it could be read, redacted like
/// [`ParameterSummary`](super::ParameterSummary): names and sizes, never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RawParameters {
    /// HTTP method.
    pub method: Option<String>,
    /// URL with query values replaced by `…`.
    pub url: Option<String>,
    /// Names of the stored (non-secret) headers.
    pub header_names: Option<Vec<String>>,
    /// Body size in bytes.
    pub body_bytes: Option<usize>,
    /// For a JSON object body: its top-level field names.
    pub body_fields: Vec<String>,
    /// The payload hash the operation is bound to.
    pub payload_hash: Option<String>,
    /// The contract name and content hash.
    pub contract: Option<String>,
}

/// A column of a quarantined row that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnreadableColumn {
    /// The column.
    pub column: String,
    /// What is wrong with it.
    pub error: String,
}

/// What is wrong with a quarantined row, in a few words: `column NAME: what`.
pub fn quarantine_problem(pkg: &QuarantinePackage) -> String {
    let detail = crate::ledger::split_decode_error(&pkg.error).1;
    what_is_wrong(pkg.column.as_deref(), &detail)
}

/// `column NAME: what`, or `what` when no column is named.
pub(super) fn what_is_wrong(column: Option<&str>, detail: &str) -> String {
    match column {
        Some(c) => format!("column {c}: {detail}"),
        None => detail.to_owned(),
    }
}

impl QuarantinePackage {
    /// The package of a row a listing reported by its raw columns.
    pub fn of(row: &SkippedRow) -> Self {
        let raw = &row.columns;
        let (column, _) = crate::ledger::split_decode_error(&row.error);
        let contract = raw
            .contract_name
            .as_deref()
            .map(|name| contract_label(name, raw.contract_hash.as_deref().unwrap_or("?")));
        Self {
            tenant: row.tenant.clone(),
            operation_id: row.operation_id.clone(),
            quarantined_ms: row.quarantined_ms,
            readable: row.readable,
            error: row.error.clone(),
            column,
            state: row.state.clone(),
            last_result: raw.last_result.clone(),
            version: raw.version,
            generation: raw.generation,
            action: raw.action.clone(),
            intent_ref: raw.intent_ref.clone(),
            created_ms: row.created_ms,
            updated_ms: row.updated_ms,
            next_check_ms: raw.next_check_ms,
            lease_until_ms: raw.lease_until_ms,
            deadline_ms: raw.deadline_ms,
            attempts_used: raw.attempts_used,
            queries_used: raw.queries_used,
            remote_ref: raw.remote_ref.clone(),
            reason: raw.reason.clone(),
            parameters: RawParameters {
                method: raw.request_method.clone(),
                url: raw.request_url.as_deref().map(redacted_url),
                header_names: raw.request_header_names.clone(),
                body_bytes: raw.request_body.as_ref().map(|b| b.len()),
                body_fields: raw
                    .request_body
                    .as_deref()
                    .map(body_fields)
                    .unwrap_or_default(),
                payload_hash: raw.payload_hash.clone(),
                contract,
            },
            unreadable: raw
                .unreadable
                .iter()
                .map(|(column, error)| UnreadableColumn {
                    column: column.clone(),
                    error: error.clone(),
                })
                .collect(),
            evidence: Vec::new(),
            evidence_error: None,
        }
    }
}

impl Reviews {
    /// Operation `op` of `tenant` by its raw columns, redacted, if it is quarantined or cannot
    /// be decoded; `None` if there is no such operation or it is neither (read it with
    /// [`handoff`](Self::handoff)). The evidence log comes with it when it can be read.
    ///
    /// Cheap for every operation: a read of the few quarantined rows (their partial index), and
    /// if it is not among them, one read by key; only a row that cannot be decoded and is not
    /// quarantined yet costs a listing of the tenant's rows by id.
    pub async fn quarantine_package(
        &self,
        tenant: &Tenant,
        op: &OperationId,
    ) -> Result<Option<QuarantinePackage>, ReviewError> {
        if op.as_str().contains('\0') {
            return Ok(None);
        }
        let by_id = || {
            OperationQuery::tenant(tenant.clone())
                .text(TextMatch::Exact(op.as_str().to_owned()))
                .limit(10)
        };
        let ledger = &self.listing;
        let mut page = ledger.list(&by_id().quarantined_only()).await?;
        if !page.skipped.iter().any(|s| s.operation_id == *op) {
            match ledger.get(tenant, op).await {
                // Gone bad since its last claim: not quarantined yet, but unreadable all the same.
                Err(crate::ledger::LedgerError::Corrupt { .. }) => {
                    page = ledger.list(&by_id().include_quarantined(true)).await?;
                }
                Err(e) => return Err(e.into()),
                Ok(_) => return Ok(None),
            }
        }
        let Some(row) = page.skipped.iter().find(|s| s.operation_id == *op) else {
            return Ok(None);
        };
        let mut pkg = QuarantinePackage::of(row);
        match ledger.evidence(tenant, op).await {
            Ok(log) => pkg.evidence = log.iter().map(EvidenceSummary::of).collect(),
            Err(e) => pkg.evidence_error = Some(e.to_string()),
        }
        Ok(Some(pkg))
    }

    /// Gives a quarantined operation back to recovery, if this version can decode it now and
    /// it is still at `expected_version` (the version the reviewer read, e.g. in its
    /// [`QuarantinePackage`]). The audit entry (evidence kind `quarantine_released`) records
    /// who, when, the version transition and the reason: `released from quarantine by
    /// {reviewer}; version {n} -> {n+1}; reason: {reason}`. The row is otherwise unchanged; the
    /// recovery engine's next pass picks it up where it stopped. See
    /// [`Ledger::release_quarantined`](crate::ledger::Ledger::release_quarantined).
    ///
    /// # Errors
    ///
    /// Nothing changed with any of them:
    /// - [`ReviewError::StillUndecodable`]: this version still cannot read it (the error names
    ///   the column); it stays quarantined. Upgrade, then release it.
    /// - [`ReviewError::NotQuarantined`]: it is not quarantined (or was released already).
    /// - [`ReviewError::VersionMismatch`]: it changed since it was read (evidence was appended).
    /// - [`ReviewError::NotFound`], [`ReviewError::ReasonRequired`], [`ReviewError::Ledger`].
    pub async fn release_quarantined(
        &self,
        tenant: &Tenant,
        op: &OperationId,
        reviewer: &str,
        reason: &str,
        expected_version: u64,
    ) -> Result<OperationRecord, ReviewError> {
        let reason = required(reason)?;
        let note = audit_note(
            &release_action(&clean(reviewer)),
            expected_version,
            Some(expected_version + 1),
            Some(&reason),
        );
        let released = self
            .shared
            .ledger
            .release_quarantined(
                tenant,
                op,
                expected_version,
                Some(note),
                self.shared.clock.now_ms(),
            )
            .await?;
        match released {
            Released::Row(row) => {
                tracing::info!(
                    tenant = tenant.as_str(),
                    operation_id = op.as_str(),
                    version = row.version,
                    "quarantined operation released: recovery picks it up again"
                );
                Ok(row)
            }
            Released::Undecodable { column, detail } => Err(ReviewError::StillUndecodable {
                operation: op.clone(),
                column,
                detail,
            }),
            Released::Stale { current } => Err(ReviewError::VersionMismatch {
                operation: op.clone(),
                expected: expected_version,
                current,
            }),
            Released::NotQuarantined => Err(ReviewError::NotQuarantined {
                operation: op.clone(),
            }),
            Released::NotFound => Err(ReviewError::NotFound {
                tenant: tenant.clone(),
                operation: op.clone(),
            }),
        }
    }
}

/// How the audit note of a release by `reviewer` begins.
pub(crate) fn release_action(reviewer: &str) -> String {
    format!("released from quarantine by {reviewer}")
}
