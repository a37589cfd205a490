//! STUB: the layer is being written.
use std::sync::Arc;

use crate::ledger::Ledger;

/// Error (stub).
#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct Error;

/// Outcome (stub).
#[derive(Debug, Clone)]
pub struct Outcome;

/// Layer (stub).
#[derive(Debug, Clone)]
pub struct RecoverableWriteLayer {
    _ledger: Arc<dyn Ledger>,
}

impl RecoverableWriteLayer {
    /// New layer.
    pub fn new(ledger: impl Ledger) -> Self {
        Self { _ledger: Arc::new(ledger) }
    }
}

impl<S> tower_layer::Layer<S> for RecoverableWriteLayer {
    type Service = RecoverableWrite<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RecoverableWrite { _inner: inner }
    }
}

/// Service (stub).
#[derive(Debug, Clone)]
pub struct RecoverableWrite<S> {
    _inner: S,
}
