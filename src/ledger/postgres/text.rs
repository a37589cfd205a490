//! PostgreSQL text cannot hold NUL: key fields with one are refused before any statement, and
//! free text keeps everything else with U+FFFD in its place.

use super::POSTGRES;
use crate::ledger::{LedgerError, NewOperation};
use crate::operation::{OperationId, Tenant};

/// PostgreSQL text cannot hold NUL. A key field with one could never be stored nor found, so it
/// is refused before any statement, with an error that names the field (the server's own error
/// would read as an outage).
pub(super) fn no_nul(field: &str, value: &str) -> Result<(), LedgerError> {
    if value.contains('\0') {
        return Err(LedgerError::Config(format!(
            "{field} contains a NUL byte, which PostgreSQL text cannot store"
        )));
    }
    Ok(())
}

/// [`no_nul`] for the key of an operation.
pub(super) fn check_key(tenant: &Tenant, id: &OperationId) -> Result<(), LedgerError> {
    no_nul("tenant", tenant.as_str())?;
    no_nul("operation id", id.as_str())
}

/// [`no_nul`] for every text column of a new operation that is not free text.
pub(super) fn check_new(new: &NewOperation) -> Result<(), LedgerError> {
    check_key(&new.tenant, &new.operation_id)?;
    no_nul("action", &new.action)?;
    no_nul("intent", &new.intent_ref)?;
    no_nul("idempotency key", new.idempotency_key.as_str())?;
    no_nul("request method", new.request.method.as_str())?;
    no_nul("request URL", &new.request.url)?;
    no_nul("contract name", &new.contract.name)?;
    no_nul("contract hash", &new.contract.hash)
}

/// PostgreSQL text cannot hold NUL: free text keeps everything else and shows U+FFFD there.
pub(super) fn pg_text(s: Option<&str>) -> Option<String> {
    POSTGRES.opt_text(s)
}
