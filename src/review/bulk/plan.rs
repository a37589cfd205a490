//! Planning: each export row matched to an operation of the tenant (read now, with its
//! version), the operations in review that no row names, and the refusal of an export whose
//! row names two operations.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::export::{ExportRow, VendorExport};
use super::{BulkError, Reviews};
use crate::ledger::{OperationQuery, OperationRecord};
use crate::operation::{OperationId, Tenant};
use crate::state::State;

/// What the plan does with one export row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PlanAction {
    /// The operation is in `MANUAL_REVIEW`: apply resolves it as succeeded with the row's
    /// reference, if it is still at `version`.
    Resolve,
    /// The operation already succeeded with this reference: nothing to do.
    AlreadyRecorded,
    /// The operation is not in review (still being recovered, or finished otherwise): the
    /// plan leaves it alone. A finished one whose reference differs deserves a look.
    NotInReview,
    /// Other rows name the same operation with other references: nothing is resolved; look
    /// at the vendor.
    Conflict {
        /// Every reference the export gives it.
        references: Vec<String>,
    },
    /// An earlier row names the same operation with the same reference: it is planned there.
    Duplicate {
        /// That row.
        first_row: usize,
    },
    /// The row names no operation of the tenant (or its reference cell is blank): the vendor
    /// has an object the ledger does not know under this tenant.
    NoMatch {
        /// Why, in words.
        why: String,
    },
}

/// One export row and what the plan does with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRow {
    /// The row's number in the export.
    pub row: usize,
    /// The vendor's object id.
    pub reference: String,
    /// The operation it matched, if any.
    pub operation_id: Option<OperationId>,
    /// That operation's state when the plan read it.
    pub state: Option<State>,
    /// That operation's version when the plan read it: apply acts on it or not at all.
    pub version: Option<u64>,
    /// The sequence number of that operation's latest evidence entry when the plan read it.
    pub last_evidence_seq: Option<i64>,
    /// The reference it already carries, if any.
    pub recorded_reference: Option<String>,
    /// What the plan does.
    pub action: PlanAction,
}

/// An operation in review that no export row names: resolve it by hand. Absence from an
/// export proves nothing (an export can be partial, filtered or late), so a bulk
/// reconciliation never resolves it as not executed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmatchedOperation {
    /// The operation.
    pub operation_id: OperationId,
    /// Its version.
    pub version: u64,
    /// Its contract.
    pub contract: String,
    /// When it was created (ms since epoch).
    pub created_ms: i64,
}

/// A bulk reconciliation's plan: read-only; [`Reviews::bulk_apply`] carries it out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkPlan {
    /// The tenant it is for.
    pub tenant: Tenant,
    /// The export's file name.
    pub file_name: String,
    /// The export's SHA-256 (hex).
    pub sha256: String,
    /// The mapping's name.
    pub mapping: String,
    /// Every export row, in file order.
    pub rows: Vec<PlanRow>,
    /// Operations in review no row names.
    pub unmatched: Vec<UnmatchedOperation>,
    /// Whether the list of operations in review was cut at [`MAX_REVIEW_SCAN`].
    pub unmatched_truncated: bool,
}

/// The most operations in review read for the "no match" list.
pub const MAX_REVIEW_SCAN: usize = 100_000;

impl BulkPlan {
    /// The rows apply would resolve.
    pub fn to_resolve(&self) -> impl Iterator<Item = &PlanRow> {
        self.rows.iter().filter(|r| r.action == PlanAction::Resolve)
    }

    /// How many rows have each action, in a fixed order: resolve, already recorded, not in
    /// review, conflict, duplicate, no match.
    pub fn counts(&self) -> [(&'static str, usize); 6] {
        let mut c = [
            ("resolve", 0),
            ("already recorded", 0),
            ("not in review", 0),
            ("conflict", 0),
            ("duplicate", 0),
            ("matches nothing", 0),
        ];
        for r in &self.rows {
            let i = match r.action {
                PlanAction::Resolve => 0,
                PlanAction::AlreadyRecorded => 1,
                PlanAction::NotInReview => 2,
                PlanAction::Conflict { .. } => 3,
                PlanAction::Duplicate { .. } => 4,
                PlanAction::NoMatch { .. } => 5,
            };
            c[i].1 += 1;
        }
        c
    }
}

impl Reviews {
    /// Plans the reconciliation of `tenant`'s operations from a vendor's `export`: reads,
    /// changes nothing. Each row is matched by the operation id and/or the idempotency key the
    /// mapping reads (never another tenant's operation):
    ///
    /// - an operation in `MANUAL_REVIEW` → [`PlanAction::Resolve`] with the row's reference,
    ///   at the version read now;
    /// - one already `SUCCEEDED` with that reference → [`PlanAction::AlreadyRecorded`];
    /// - any other state → [`PlanAction::NotInReview`]: an `UNKNOWN` one is left to the
    ///   engine, which reconciles it itself; a finished one is not reopened;
    /// - an operation named by several rows with different references →
    ///   [`PlanAction::Conflict`] on each of them, none resolved;
    /// - nothing → [`PlanAction::NoMatch`].
    ///
    /// Operations in review that no row names are listed in [`BulkPlan::unmatched`], to be
    /// resolved by hand: absence from an export is never read as "not executed".
    ///
    /// # Errors
    ///
    /// [`BulkError::RowMatchesTwo`] if a row names two operations (its key and its operation
    /// id name different ones, or its reference is already recorded on another operation):
    /// the mapping is wrong or the ledger disagrees with the vendor, and the plan is refused
    /// as a whole. [`BulkError::Ledger`] if the ledger fails.
    pub async fn bulk_plan(
        &self,
        tenant: &Tenant,
        export: &VendorExport,
    ) -> Result<BulkPlan, BulkError> {
        let mut rows = Vec::with_capacity(export.rows.len());
        for r in &export.rows {
            rows.push(self.match_row(tenant, r).await?);
        }
        mark_conflicts(&mut rows);
        let named: HashSet<&OperationId> = rows
            .iter()
            .filter_map(|r| r.operation_id.as_ref())
            .collect();
        let (in_review, unmatched_truncated) = self.in_review(tenant).await?;
        let unmatched = in_review
            .into_iter()
            .filter(|r| !named.contains(&r.operation_id))
            .map(|r| UnmatchedOperation {
                operation_id: r.operation_id.clone(),
                version: r.version,
                contract: r.contract.name.to_string(),
                created_ms: r.created_ms,
            })
            .collect();
        Ok(BulkPlan {
            tenant: tenant.clone(),
            file_name: export.file_name.clone(),
            sha256: export.sha256.clone(),
            mapping: export.mapping.name.clone(),
            rows,
            unmatched,
            unmatched_truncated,
        })
    }

    async fn match_row(&self, tenant: &Tenant, r: &ExportRow) -> Result<PlanRow, BulkError> {
        let no_match = |why: String| PlanRow {
            row: r.row,
            reference: r.reference.clone(),
            operation_id: None,
            state: None,
            version: None,
            last_evidence_seq: None,
            recorded_reference: None,
            action: PlanAction::NoMatch { why },
        };
        if r.reference.is_empty() {
            return Ok(no_match("its reference cell is blank".into()));
        }
        let by_op = match &r.operation_id {
            Some(id) => self.listing.get(tenant, &OperationId::new(id)).await?,
            None => None,
        };
        let by_key = match &r.idempotency_key {
            Some(k) => self.listing.find_by_idempotency_key(tenant, k).await?,
            None => None,
        };
        let found = match (by_op, by_key) {
            (Some(a), Some(b)) if a.operation_id != b.operation_id => {
                return Err(two(
                    r,
                    &a,
                    &b,
                    "its operation id and its key name different ones",
                ));
            }
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => {
                let what = match (&r.operation_id, &r.idempotency_key) {
                    (None, None) => "it names no operation (blank cells)".to_owned(),
                    _ => format!("no operation of tenant {tenant} has that id or key"),
                };
                return Ok(no_match(what));
            }
        };
        if let Some(other) = self
            .listing
            .find_by_remote_ref(tenant, &r.reference)
            .await?
            && other.operation_id != found.operation_id
        {
            return Err(two(
                r,
                &found,
                &other,
                "the reference is already recorded on another operation",
            ));
        }
        let last_evidence_seq = self
            .listing
            .evidence(tenant, &found.operation_id)
            .await?
            .last()
            .map(|e| e.seq);
        let action = match found.state {
            State::ManualReview => PlanAction::Resolve,
            State::Succeeded if found.remote_ref.as_deref() == Some(r.reference.as_str()) => {
                PlanAction::AlreadyRecorded
            }
            _ => PlanAction::NotInReview,
        };
        Ok(PlanRow {
            row: r.row,
            reference: r.reference.clone(),
            operation_id: Some(found.operation_id),
            state: Some(found.state),
            version: Some(found.version),
            last_evidence_seq,
            recorded_reference: found.remote_ref,
            action,
        })
    }

    /// The tenant's operations in `MANUAL_REVIEW`, oldest first, at most [`MAX_REVIEW_SCAN`].
    async fn in_review(&self, tenant: &Tenant) -> Result<(Vec<OperationRecord>, bool), BulkError> {
        let mut out = Vec::new();
        let mut q = OperationQuery::tenant(tenant.clone())
            .state(State::ManualReview)
            .order(crate::ledger::Order::OldestFirst)
            .limit(crate::ledger::MAX_LIMIT);
        loop {
            let page = self.listing.list(&q).await?;
            out.extend(page.rows);
            if out.len() >= MAX_REVIEW_SCAN {
                out.truncate(MAX_REVIEW_SCAN);
                return Ok((out, true));
            }
            match page.next {
                Some(next) => q = q.after(next),
                None => return Ok((out, false)),
            }
        }
    }
}

fn two(r: &ExportRow, a: &OperationRecord, b: &OperationRecord, why: &str) -> BulkError {
    BulkError::RowMatchesTwo {
        row: r.row,
        reference: r.reference.clone(),
        first: a.operation_id.clone(),
        second: b.operation_id.clone(),
        why: why.to_owned(),
    }
}

/// Rows naming one operation: the same reference again is a duplicate of the first row; a
/// different reference makes every row of that operation a conflict.
fn mark_conflicts(rows: &mut [PlanRow]) {
    let mut by_op: BTreeMap<OperationId, Vec<usize>> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        if let Some(op) = &r.operation_id {
            by_op.entry(op.clone()).or_default().push(i);
        }
    }
    for idx in by_op.values().filter(|v| v.len() > 1) {
        let mut refs: Vec<String> = idx.iter().map(|&i| rows[i].reference.clone()).collect();
        refs.sort();
        refs.dedup();
        if refs.len() > 1 {
            for &i in idx {
                rows[i].action = PlanAction::Conflict {
                    references: refs.clone(),
                };
            }
        } else {
            let first_row = rows[idx[0]].row;
            for &i in &idx[1..] {
                rows[i].action = PlanAction::Duplicate { first_row };
            }
        }
    }
}
