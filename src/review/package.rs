//! What a reviewer reads: the [`HandoffPackage`] of an operation and its parts, assembled from
//! the ledger without a credential or a body value.

use serde::{Deserialize, Serialize};

use super::vendor::{self, VendorReference};
use super::{ReviewError, Reviews};
use crate::authorize::Access;
use crate::encoding::first_chars;
use crate::evidence::Evidence;
use crate::ledger::OperationRecord;
use crate::operation::{OperationId, Tenant};
use crate::state::State;

/// Everything a reviewer needs, assembled from the ledger. Serializable for tickets and
/// dashboards. It contains no credentials, and no body value but one: the answer of a lookup
/// that resolved the operation, kept as its evidence entry's note with the contract's secret
/// answer fields replaced by `[redacted]` (see
/// [`Contract::secret_response_fields`](crate::Contract::secret_response_fields)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffPackage {
    /// Tenant.
    pub tenant: Tenant,
    /// Operation id.
    pub operation_id: OperationId,
    /// Action name.
    pub action: String,
    /// The caller's intent reference.
    pub intent_ref: String,
    /// State now.
    pub state: State,
    /// Business result kept while in review.
    pub last_result: Option<State>,
    /// Why it was escalated (or the last reason recorded).
    pub reason: Option<String>,
    /// The state version to pass to [`Reviews::claim`] and [`Reviews::resolve`].
    pub version: u64,
    /// Created (ms since the Unix epoch).
    #[serde(default)]
    pub created_ms: i64,
    /// Last changed (ms since the Unix epoch).
    #[serde(default)]
    pub updated_ms: i64,
    /// When the engine looks next, if it will (ms since the Unix epoch).
    #[serde(default)]
    pub next_check_ms: Option<i64>,
    /// When the current attempt's or the recovery claim's lease runs out (ms since the Unix
    /// epoch).
    #[serde(default)]
    pub lease_until_ms: Option<i64>,
    /// Sticky: some attempt may have been applied by the vendor (its bytes may have arrived).
    #[serde(default)]
    pub may_have_applied: bool,
    /// The generation (fence) now.
    pub generation: u64,
    /// The vendor's reference, if known.
    pub remote_ref: Option<String>,
    /// When evidence contradicting the operation's final state was first recorded, while
    /// nobody has acknowledged it ([`Reviews::acknowledge_contradiction`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contradiction_ms: Option<i64>,
    /// The write as sent, redacted.
    pub parameters: ParameterSummary,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptSummary>,
    /// The whole evidence log, in order.
    pub evidence: Vec<EvidenceSummary>,
    /// What the recovery budget used.
    pub budget: BudgetUsed,
    /// Whether writes and queries are authorized now.
    pub authorization: AuthorizationState,
}

/// The frozen request without values: enough to recognise it, nothing to leak.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParameterSummary {
    /// HTTP method.
    pub method: String,
    /// URL with query values replaced by `…` (and secret path segments stored as
    /// `[redacted]`).
    pub url: String,
    /// Names of the stored (non-secret) headers.
    pub header_names: Vec<String>,
    /// Body size in bytes.
    pub body_bytes: usize,
    /// For a JSON object body: its top-level field names.
    pub body_fields: Vec<String>,
    /// The payload hash the operation is bound to.
    pub payload_hash: String,
    /// The contract name and content hash.
    pub contract: String,
    /// The idempotency key every attempt of this operation carried: what to look the write up
    /// by at the vendor (its dashboard, its logs, its support).
    #[serde(default)]
    pub idempotency_key: String,
    /// Where the contract put the key (`header Idempotency-Key`, `header Idempotency-Key
    /// (quoted)`, `json body /idempotency_key`, `query requestId`, `form body ClientToken`,
    /// `none`), when this process knows the operation's contract (same name and content hash);
    /// `None` otherwise.
    #[serde(default)]
    pub key_placement: Option<String>,
    /// The vendor's own reference of the object the write created (or is working on), when an
    /// answer or a callback named it, with the evidence that did: the other thing to look the
    /// write up by at the vendor.
    #[serde(default)]
    pub vendor_reference: Option<VendorReference>,
    /// What the operation's contract looks the write up by at the vendor, said for a human with
    /// the operation's values in it (`GET https://vendor.example/operations/op_…`, `search GET
    /// https://api.stripe.com/v1/charges?limit=100 for the item whose /metadata/operation_id is
    /// op_…`, `no lookup: …`), when this process knows the operation's contract (same name and
    /// content hash); `None` otherwise.
    #[serde(default)]
    pub vendor_lookup: Option<String>,
}

/// One send.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptSummary {
    /// Attempt id.
    pub attempt_id: String,
    /// Generation that held send rights.
    pub generation: u64,
    /// When it was registered (ms since the Unix epoch).
    pub registered_ms: i64,
    /// What it produced, if recorded.
    pub result: Option<Evidence>,
}

/// One evidence log entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceSummary {
    /// Position in the log.
    pub seq: i64,
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
    /// What happened.
    pub kind: String,
    /// State before, after.
    pub transition: Option<(Option<State>, Option<State>)>,
    /// The attempt concerned.
    pub attempt_id: Option<String>,
    /// Generation of the writer.
    pub generation: u64,
    /// The classified observation.
    pub evidence: Option<Evidence>,
    /// Notes: the engine's, a reviewer's reason, or the answer of a lookup that resolved the
    /// operation (`lookup answer: …`, at most 16 KiB, secret answer fields `[redacted]`). Never
    /// a credential.
    pub note: Option<String>,
}

impl EvidenceSummary {
    /// The summary of one stored entry.
    pub fn of(e: &crate::ledger::EvidenceEntry) -> Self {
        Self {
            seq: e.seq,
            at_ms: e.entry.at_ms,
            kind: e.entry.kind.to_string(),
            transition: (e.entry.from_state.is_some() || e.entry.to_state.is_some())
                .then_some((e.entry.from_state, e.entry.to_state)),
            attempt_id: e.entry.attempt_id.map(|a| a.to_string()),
            generation: e.entry.generation.0,
            evidence: e.entry.evidence.clone(),
            note: e.entry.note.clone(),
        }
    }
}

/// Budget consumption.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetUsed {
    /// Write attempts used / allowed.
    pub attempts_used: u32,
    /// Allowed write attempts.
    pub max_attempts: u32,
    /// Queries used.
    pub queries_used: u32,
    /// Allowed queries.
    pub max_queries: u32,
    /// End of the recovery window (ms since the Unix epoch).
    pub deadline_ms: Option<i64>,
}

/// Permissions as the [`Authorizer`](crate::Authorizer) answers now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationState {
    /// `None` when writes are allowed, else the reason they are not.
    pub write_denied: Option<String>,
    /// `None` when queries are allowed, else the reason they are not.
    pub query_denied: Option<String>,
}

impl Reviews {
    /// Assembles the handoff package.
    pub async fn handoff(
        &self,
        tenant: &Tenant,
        op: &OperationId,
    ) -> Result<HandoffPackage, ReviewError> {
        let row = self.read(tenant, op).await?;
        let log = self.shared.ledger.evidence(tenant, op).await?;
        let mut attempts: Vec<AttemptSummary> = Vec::new();
        for e in &log {
            let Some(attempt) = e.entry.attempt_id else {
                continue;
            };
            let id = attempt.to_string();
            match &*e.entry.kind {
                "attempt_registered" => attempts.push(AttemptSummary {
                    attempt_id: id,
                    generation: e.entry.generation.0,
                    registered_ms: e.entry.at_ms,
                    result: None,
                }),
                "attempt_result" | "late_evidence" => {
                    if let Some(a) = attempts.iter_mut().rev().find(|a| a.attempt_id == id)
                        && a.result.is_none()
                    {
                        a.result = e.entry.evidence.clone();
                    }
                }
                _ => {}
            }
        }
        let evidence = log.iter().map(EvidenceSummary::of).collect();
        let authorization = AuthorizationState {
            write_denied: self
                .shared
                .authorizer
                .check(&row, Access::Write)
                .await
                .err()
                .map(|d| d.reason),
            query_denied: self
                .shared
                .authorizer
                .check(&row, Access::Query)
                .await
                .err()
                .map(|d| d.reason),
        };
        let mut parameters = summarize(&row);
        let contract = self.shared.contracts.find(&row.contract);
        parameters.key_placement = contract.map(|c| c.key.to_string());
        parameters.vendor_lookup = contract.map(|c| vendor::lookup(&row, c));
        parameters.vendor_reference = vendor::reference(&row, &log);
        Ok(HandoffPackage {
            parameters,
            budget: BudgetUsed {
                attempts_used: row.attempts_used,
                max_attempts: row.policy.max_attempts,
                queries_used: row.queries_used,
                max_queries: row.policy.max_queries,
                deadline_ms: row.deadline_ms,
            },
            tenant: row.tenant,
            operation_id: row.operation_id,
            action: row.action.to_string(),
            intent_ref: row.intent_ref.to_string(),
            state: row.state,
            last_result: row.last_result,
            reason: row.reason,
            version: row.version,
            created_ms: row.created_ms,
            updated_ms: row.updated_ms,
            next_check_ms: row.next_check_ms,
            lease_until_ms: row.lease_until_ms,
            may_have_applied: row.may_have_applied,
            generation: row.generation.0,
            remote_ref: row.remote_ref,
            contradiction_ms: row.contradiction_ms,
            attempts,
            evidence,
            authorization,
        })
    }
}

fn summarize(row: &OperationRecord) -> ParameterSummary {
    ParameterSummary {
        method: row.request.method.to_string(),
        url: redacted_url(&row.request.url),
        header_names: row
            .request
            .headers
            .iter()
            .map(|(k, _)| k.to_owned())
            .collect(),
        body_bytes: row.request.body.len(),
        body_fields: body_fields(&row.request.body),
        payload_hash: row.payload_hash.to_string(),
        contract: contract_label(&row.contract.name, &row.contract.hash),
        idempotency_key: row.idempotency_key.as_str().to_owned(),
        key_placement: None,
        vendor_reference: None,
        vendor_lookup: None,
    }
}

/// A URL with its query values replaced by `…` (the names kept).
pub(super) fn redacted_url(url: &str) -> String {
    match url.split_once('?') {
        Some((base, query)) => {
            let names: Vec<String> = query
                .split('&')
                .map(|kv| format!("{}=…", kv.split('=').next().unwrap_or_default()))
                .collect();
            format!("{base}?{}", names.join("&"))
        }
        None => url.to_owned(),
    }
}

/// The top-level field names of a JSON object body (none for any other body): never a value.
pub(super) fn body_fields(body: &[u8]) -> Vec<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()))
        .unwrap_or_default()
}

/// `name@` and the first 12 characters of the contract's hash.
pub(super) fn contract_label(name: &str, hash: &str) -> String {
    format!("{name}@{}", first_chars(hash, 12))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row read back from storage holds whatever was stored: a corrupt or hand-edited contract
    /// hash with multi-byte characters must not panic the handoff.
    #[cfg(feature = "test-util")]
    #[tokio::test]
    async fn summary_cuts_a_multibyte_stored_hash_at_a_character_boundary() {
        use crate::ledger::conformance::new_operation;
        use crate::ledger::{Created, Ledger, MemoryLedger};

        let ledger = MemoryLedger::new();
        let mut new = new_operation("t", "op-1", "intent-1");
        // Byte 12 falls inside the fourth `€`.
        new.contract.hash = format!("a{}", "€".repeat(20)).into();
        let Created::New(row) = ledger.create_or_get(new).await.unwrap() else {
            panic!("not new")
        };
        let s = summarize(&row);
        assert_eq!(s.contract, format!("stripe-v1@a{}", "€".repeat(11)));
        // An ASCII hash keeps its first 12 characters, as before.
        let mut row = row;
        row.contract.hash = "0123456789abcdef".into();
        assert_eq!(summarize(&row).contract, "stripe-v1@0123456789ab");
        row.contract.hash = "éé".into();
        assert_eq!(summarize(&row).contract, "stripe-v1@éé");
    }
}
