//! STUB: being written.
use super::*;

/// SQLite ledger (stub).
#[derive(Debug, Default)]
pub struct SqliteLedger {}

impl SqliteLedger {
    /// New empty ledger.
    pub fn new() -> Self {
        Self {}
    }
}

impl Ledger for SqliteLedger {
    fn create_or_get(&self, _new: NewOperation) -> BoxFuture<'_, Result<Created, LedgerError>> {
        unimplemented!()
    }
    fn get<'a>(
        &'a self,
        _t: &'a Tenant,
        _id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Option<OperationRecord>, LedgerError>> {
        unimplemented!()
    }
    fn apply(&self, _u: Update) -> BoxFuture<'_, Result<Option<OperationRecord>, LedgerError>> {
        unimplemented!()
    }
    fn claim_due(
        &self,
        _n: i64,
        _l: i64,
        _lim: u32,
    ) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        unimplemented!()
    }
    fn sweep_expired(&self, _n: i64) -> BoxFuture<'_, Result<Vec<OperationRecord>, LedgerError>> {
        unimplemented!()
    }
    fn append_evidence<'a>(
        &'a self,
        _t: &'a Tenant,
        _id: &'a OperationId,
        _e: NewEvidence,
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        unimplemented!()
    }
    fn evidence<'a>(
        &'a self,
        _t: &'a Tenant,
        _id: &'a OperationId,
    ) -> BoxFuture<'a, Result<Vec<EvidenceEntry>, LedgerError>> {
        unimplemented!()
    }
}

/// Options (stub).
#[derive(Debug, Clone, Default)]
pub struct SqliteLedgerOptions {}

/// SQLite synchronous mode (stub).
#[derive(Debug, Clone, Copy, Default)]
pub enum Synchronous {
    /// FULL.
    #[default]
    Full,
}
