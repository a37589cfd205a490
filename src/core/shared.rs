//! The configuration every adapter shares ([`Shared`]), its defaults, and the one place an
//! operation row is made from a write.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;

use super::outgoing;
use crate::authorize::SharedAuthorizer;
use crate::budget::BudgetPolicy;
use crate::clock::SharedClock;
use crate::contract::{Contract, Contracts};
use crate::ledger::{Ledger, NewOperation};
use crate::notify::Notifier;
use crate::operation::{FrozenRequest, IdempotencyKey, Operation, PayloadHash};

/// Default limit on a write's request body: 1 MiB.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 1024 * 1024;
/// Default limit on a write's response body: 4 MiB.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 4 * 1024 * 1024;
/// Default limit on the response body kept in the ledger for callers that ask again: 64 KiB.
pub const DEFAULT_STORED_BODY: usize = 64 * 1024;

#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) contracts: Contracts,
    pub(crate) policy: BudgetPolicy,
    pub(crate) max_request_body: usize,
    pub(crate) max_response_body: usize,
    pub(crate) stored_body: usize,
    pub(crate) authorizer: SharedAuthorizer,
    pub(crate) notifier: Notifier,
    pub(crate) wait: Option<Duration>,
    pub(crate) track_all_writes: bool,
    pub(crate) denied_first_sends: crate::error::DeniedFirstSend,
    pub(crate) clock: SharedClock,
    pub(crate) retention: crate::retention::Retention,
}

impl Shared {
    /// The operation row for a write: contract chosen per target, request frozen without
    /// credentials, payload hashed with the contract's digest, budget frozen. The one place this
    /// is decided, for the layer and for callers that create operations themselves (outbox).
    pub(crate) fn new_operation(
        &self,
        op: Operation,
        method: &Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        body: Bytes,
    ) -> (NewOperation, Arc<Contract>) {
        let (contract, contract_ref) = self.contracts.select_with_reference(method, uri);
        let frozen = FrozenRequest::freeze(method, uri, headers, body, contract.secrets());
        // Over the URL without credentials: rotating an API key in the query (or a token in
        // the path) is not another payload.
        let redacted = crate::operation::redacted_uri(uri, contract.secrets());
        let payload_hash =
            PayloadHash::compute_for(method, &redacted, &frozen.body, &contract.digest);
        let (tenant, operation_id, action, intent_ref) = op.into_parts();
        let new = NewOperation {
            tenant,
            operation_id,
            action,
            intent_ref,
            // The caller's own key, where the contract places keys, is adopted (and checked
            // like any key when it is placed); otherwise a fresh opaque one.
            idempotency_key: outgoing::caller_key(contract, uri, headers, &frozen.body)
                .map_or_else(IdempotencyKey::generate, IdempotencyKey::from_stored),
            payload_hash,
            request: Arc::new(frozen),
            contract: contract_ref.clone(),
            policy: self.policy.clone(),
            now_ms: self.clock.now_ms(),
        };
        (new, contract.clone())
    }

    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> Self {
        Self {
            ledger,
            contracts: Contracts::default(),
            policy: BudgetPolicy::default(),
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            stored_body: DEFAULT_STORED_BODY,
            authorizer: SharedAuthorizer::default(),
            notifier: Notifier::default(),
            wait: None,
            track_all_writes: false,
            denied_first_sends: crate::error::DeniedFirstSend::default(),
            clock: SharedClock::default(),
            retention: crate::retention::Retention::default(),
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoverableWriteConfig")
            .field("ledger", &self.ledger)
            .field("contracts", &self.contracts)
            .field("policy", &self.policy)
            .field("max_request_body", &self.max_request_body)
            .field("max_response_body", &self.max_response_body)
            .field("stored_body", &self.stored_body)
            .field("authorizer", &self.authorizer)
            .field("wait", &self.wait)
            .field("track_all_writes", &self.track_all_writes)
            .field("denied_first_sends", &self.denied_first_sends)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}
