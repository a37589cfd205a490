//! Quarantined rows: operations set aside because this version cannot decode them, and how they
//! come back.
//!
//! # Why rows are set aside
//!
//! A row can become undecodable without anything being wrong with the store: in a rolling
//! deploy an older worker meets a row a newer one wrote (a state name, a JSON field it does not
//! know), or someone edited a column by hand. A claim or sweep that meets such a row does not
//! fail the whole pass: it quarantines the row in the same transaction (its
//! `quarantine_reason` column holds the decode error) and goes on with the healthy rows. From
//! then on no claim or sweep picks it, whatever version runs: recovery skips it until a person
//! looks.
//!
//! # Why they must stay visible
//!
//! A quarantined operation is still a write whose outcome may be unknown. So it is counted
//! ([`StateCounts::quarantined`](super::StateCounts::quarantined)), listed
//! ([`OperationQuery::quarantined_only`](super::OperationQuery::quarantined_only), reported by
//! its raw columns in [`Page::skipped`](super::Page::skipped)), and released
//! ([`Ledger::release_quarantined`](super::Ledger::release_quarantined)) once a version that
//! can read it runs: the release re-decodes the row and, only if it decodes, gives it back to
//! recovery.

#[cfg(any(feature = "sqlite", feature = "postgres", test))]
use std::borrow::Cow;

use bytes::Bytes;

#[cfg(any(feature = "sqlite", feature = "postgres", test))]
use super::NewEvidence;
use super::{Ledger, LedgerError, OperationRecord};
use crate::operation::{OperationId, Tenant};

/// The evidence kind appended when a quarantined row is released.
pub const QUARANTINE_RELEASED: &str = "quarantine_released";

/// What [`Ledger::release_quarantined`] did. Only [`Released::Row`] changed anything.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
// Unboxed, as `Recorded`: the row is moved out at once.
#[allow(clippy::large_enum_variant)]
pub enum Released {
    /// The row decodes now: its quarantine is cleared, a [`QUARANTINE_RELEASED`] entry is
    /// appended and its version advanced (the fencing rule); the row as the store now holds it.
    /// Recovery picks it up like any other row.
    Row(OperationRecord),
    /// This version still cannot decode the row: it stays quarantined, nothing changed.
    Undecodable {
        /// The column that cannot be read (every decode error of the bundled backends names
        /// one).
        column: Option<String>,
        /// What is wrong with it.
        detail: String,
    },
    /// The row changed since `expected_version` was read (evidence appended to it meanwhile):
    /// nothing changed. Read it again.
    Stale {
        /// Its version now.
        current: u64,
    },
    /// The operation exists and is not quarantined (never was, or was released already):
    /// nothing changed.
    NotQuarantined,
    /// No operation with this id in this tenant.
    NotFound,
}

/// The columns of a stored row that this version could read, each on its own: what a person
/// may see of a row that cannot be decoded as a whole. Raw values, as an [`OperationRecord`]
/// holds them (the body bytes included); the review layer shows only what its redacted views
/// show (body size and field names, header names, never a value).
///
/// A nullable column is `None` when it is NULL or could not be read; the second case is also
/// listed in [`unreadable`](Self::unreadable).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RawColumns {
    /// Action name.
    pub action: Option<String>,
    /// The caller's intent reference.
    pub intent_ref: Option<String>,
    /// The business result kept in review, as stored (it may be a name this version does not
    /// know).
    pub last_result: Option<String>,
    /// The version (what a release names).
    pub version: Option<u64>,
    /// The generation (fence).
    pub generation: Option<u64>,
    /// Write attempts used.
    pub attempts_used: Option<u32>,
    /// Queries used.
    pub queries_used: Option<u32>,
    /// Next check (ms since the Unix epoch).
    pub next_check_ms: Option<i64>,
    /// Lease end (ms since the Unix epoch).
    pub lease_until_ms: Option<i64>,
    /// End of the recovery window (ms since the Unix epoch).
    pub deadline_ms: Option<i64>,
    /// The vendor's reference.
    pub remote_ref: Option<String>,
    /// Rejection or escalation reason.
    pub reason: Option<String>,
    /// The contract frozen on the row.
    pub contract_name: Option<String>,
    /// Its content hash.
    pub contract_hash: Option<String>,
    /// The payload hash.
    pub payload_hash: Option<String>,
    /// The request's method.
    pub request_method: Option<String>,
    /// The request's URL (query values included: redact before showing it).
    pub request_url: Option<String>,
    /// The names of the stored request headers (credentials are never stored).
    pub request_header_names: Option<Vec<String>>,
    /// The request body (show its size and field names only).
    pub request_body: Option<Bytes>,
    /// `(column, what is wrong)` for every column above that could not be read.
    pub unreadable: Vec<(String, String)>,
}

/// The entry appended when a row is released (`row` as decoded, before the release).
#[cfg(any(feature = "sqlite", feature = "postgres", test))]
pub(crate) fn released_entry(
    row: &OperationRecord,
    note: Option<String>,
    now_ms: i64,
) -> NewEvidence {
    NewEvidence {
        attempt_id: None,
        generation: row.generation,
        kind: Cow::Borrowed(QUARANTINE_RELEASED),
        // Not a decision about the write: the state is what it was.
        from_state: None,
        to_state: None,
        evidence: None,
        note,
        at_ms: now_ms,
    }
}

/// The outcome of a row that did not decode: the column its error names (the codec writes
/// every error as `column NAME: what`), and the rest.
#[cfg(any(feature = "sqlite", feature = "postgres", test))]
pub(crate) fn undecodable(error: &LedgerError) -> Released {
    let detail = match error {
        LedgerError::Corrupt { detail, .. } => detail.clone(),
        other => other.to_string(),
    };
    let (column, detail) = split_column(&detail);
    Released::Undecodable { column, detail }
}

/// `column NAME: what` → (`Some(NAME)`, `what`); anything else is kept whole.
pub(crate) fn split_column(detail: &str) -> (Option<String>, String) {
    match detail
        .strip_prefix("column ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((column, what)) if !column.contains(' ') => (Some(column.to_owned()), what.to_owned()),
        _ => (None, detail.to_owned()),
    }
}

/// The provided [`Ledger::release_quarantined`]: for a store that never quarantines a row
/// (every row it holds decodes), there is nothing to release.
pub(crate) async fn nothing_to_release<L: Ledger + ?Sized>(
    ledger: &L,
    tenant: &Tenant,
    id: &OperationId,
) -> Result<Released, LedgerError> {
    Ok(match ledger.get(tenant, id).await? {
        Some(_) => Released::NotQuarantined,
        None => Released::NotFound,
    })
}

/// The detail of a decode error (it names the column), without the operation id.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn corrupt_detail(error: &crate::ledger::LedgerError) -> String {
    match error {
        crate::ledger::LedgerError::Corrupt { detail, .. } => detail.clone(),
        other => other.to_string(),
    }
}

/// A column read on its own: `None` (and the column with what is wrong in `unreadable`) when
/// it cannot be read.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn readable<T>(
    column: &str,
    value: Result<T, crate::ledger::LedgerError>,
    unreadable: &mut Vec<(String, String)>,
) -> Option<T> {
    match value {
        Ok(v) => Some(v),
        Err(e) => {
            let detail = corrupt_detail(&e);
            let what = split_column(&detail).1;
            unreadable.push((column.to_owned(), what));
            None
        }
    }
}

/// What is kept as the quarantine reason of a row that failed to decode: the decode error
/// without the operation id (kept in its own column). Logged with `tracing::error!`, naming the
/// operation, never its body.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn quarantine(
    tenant: Option<&str>,
    operation_id: Option<&str>,
    during: &'static str,
    error: &crate::ledger::LedgerError,
) -> String {
    let reason = corrupt_detail(error);
    tracing::error!(
        tenant = tenant.unwrap_or("<unreadable>"),
        operation_id = operation_id.unwrap_or("<unreadable>"),
        during,
        error = %reason,
        "ledger row cannot be decoded: quarantined, recovery goes on without it"
    );
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_column_is_read_from_the_codecs_error() {
        assert_eq!(
            split_column("column last_result: unknown state \"PAUSED\""),
            (
                Some("last_result".to_owned()),
                "unknown state \"PAUSED\"".to_owned()
            )
        );
        assert_eq!(
            split_column("operation vanished"),
            (None, "operation vanished".to_owned())
        );
        let e = LedgerError::Corrupt {
            operation: "op-1".into(),
            detail: "column request_headers: expected value at line 1".into(),
        };
        assert_eq!(
            undecodable(&e),
            Released::Undecodable {
                column: Some("request_headers".into()),
                detail: "expected value at line 1".into()
            }
        );
    }
}
