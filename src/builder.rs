//! The one entry point: one validated configuration, every face of the crate over it.
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use recoverable_write::{BudgetPolicy, Contracts, RecoverableWrite, SendOnceGuardLayer, SqliteLedger};
//! use tower::ServiceBuilder;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::builder(TokioExecutor::new())
//!     .retry_canceled_requests(false) // one retry owner: the recovery engine
//!     .build_http::<Full<Bytes>>();
//! // The stack below the layer: the first sends, the lookups and the replays all go through it.
//! let below = ServiceBuilder::new()
//!     .layer(SendOnceGuardLayer::new())
//!     .service(client);
//!
//! let rw = RecoverableWrite::builder(SqliteLedger::open("operations.db").await?)
//!     .contracts(Contracts::load("contracts.toml")?) // lookups come from the contracts
//!     .budget(BudgetPolicy::default())
//!     .transport(below.clone())
//!     .build()?;
//!
//! let service = ServiceBuilder::new().layer(rw.layer()).service(below);
//! let engine = rw.recoverer().spawn(); // same ledger, contracts, budget, authorizer, transport
//! # let _ = service;
//! engine.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! Everything handed out by one [`Handle`] shares the same ledger, contracts, budget,
//! authorizer, notifier, clock and transport: a recoverer can no longer be built without the
//! contracts its operations were made under, and a contract's `lookup` is the reconciler it
//! gets (code-registered reconcilers still override it).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body::Body;
use http_body_util::Full;
use tower_service::Service;

use crate::BoxError;
use crate::authorize::{Authorizer, SharedAuthorizer};
use crate::budget::{BudgetPolicy, ReplayLimiter};
use crate::clock::{Clock, SharedClock};
use crate::contract::{Contract, ContractError, Contracts, Lookup, LookupAnswer};
use crate::core::Shared;
use crate::layer::{RecoverableWrite, RecoverableWriteLayer};
use crate::ledger::{Ledger, ListingLedger, RetentionLedger};
use crate::notify::Notifier;
use crate::reconcile::{
    HttpLookup, ListLookup, LookupStatuses, NotFound, Reconciler, Recoverer, Transport,
};
use crate::retention::{Purger, Retention};
use crate::review::Reviews;

/// Why a configuration was refused. Nothing was built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The budget is out of bounds; the error names the field and the bound.
    #[error(transparent)]
    Budget(#[from] crate::budget::BudgetError),
    /// A contract is invalid; the error names the contract and the field.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// Another setting is out of bounds.
    #[error("{field}: {problem}")]
    Invalid {
        /// The setting, as named by its builder method.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

impl RecoverableWrite<()> {
    /// The one entry point: a [`Builder`] over `ledger`. See the [module docs](crate::builder).
    ///
    /// To share one ledger with other code (the test kit, an outbox writer), pass an
    /// `Arc<L>` or an `Arc<dyn FullLedger>`: a shared ledger is a ledger, with every capability
    /// of the one it holds.
    ///
    /// The ledger's type decides what the handle hands out: the layer and the recoverer over
    /// any [`Ledger`]; the reviews with [`ListingLedger`]; the purger (and
    /// [`Builder::retention`]) with [`RetentionLedger`] too; the callbacks receiver with
    /// [`CallbackLedger`](crate::ledger::CallbackLedger).
    pub fn builder<L: Ledger>(ledger: L) -> Builder<L> {
        Builder::new(Arc::new(ledger))
    }
}

/// Builds a [`Handle`] over a ledger of type `L`. Every setting has a safe default;
/// [`build`](Self::build) validates them all.
#[must_use]
pub struct Builder<L> {
    ledger: Arc<L>,
    shared: Shared,
    transport: Option<Transport>,
    tenant_header: Option<HeaderName>,
    default_reconciler: Option<Arc<dyn Reconciler>>,
    by_contract: HashMap<String, Arc<dyn Reconciler>>,
    limiter: Option<Arc<ReplayLimiter>>,
    recovery_lease: Duration,
    recovery_interval: Duration,
    lookup_timeout: Duration,
}

impl<L: Ledger> fmt::Debug for Builder<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("shared", &self.shared)
            .field("transport", &self.transport.is_some())
            .field("tenant_header", &self.tenant_header)
            .field("by_contract", &self.by_contract.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<L: Ledger> Builder<L> {
    fn new(ledger: Arc<L>) -> Self {
        Self {
            shared: Shared::new(ledger.clone()),
            ledger,
            transport: None,
            tenant_header: None,
            default_reconciler: None,
            by_contract: HashMap::new(),
            limiter: None,
            recovery_lease: Duration::from_secs(30),
            recovery_interval: Duration::from_millis(250),
            lookup_timeout: Duration::from_secs(10),
        }
    }

    /// The contracts chosen per target (default: the conservative contract for every target).
    pub fn contracts(mut self, contracts: Contracts) -> Self {
        self.shared.contracts = contracts;
        self
    }

    /// One contract for every target.
    pub fn contract(self, contract: Contract) -> Self {
        self.contracts(Contracts::new(contract))
    }

    /// The budget frozen onto new operations (default [`BudgetPolicy::default`]).
    pub fn budget(mut self, policy: BudgetPolicy) -> Self {
        self.shared.policy = policy;
        self
    }

    /// Consulted before the first send of every operation ([`Access::Write`](crate::Access::Write)),
    /// and by the recoverer before every replay and lookup. A refusal sends nothing
    /// ([`Error::Denied`](crate::Error::Denied)).
    pub fn authorizer(mut self, authorizer: impl Authorizer) -> Self {
        self.shared.authorizer = SharedAuthorizer::new(authorizer);
        self
    }

    /// The notification channel shared by the layer, the recoverer and the reviews (one is made
    /// by default).
    pub fn notifier(mut self, notifier: Notifier) -> Self {
        self.shared.notifier = notifier;
        self
    }

    /// The clock leases, due times and windows are read on (default
    /// [`ProcessClock`](crate::clock::ProcessClock): the wall clock read once, advanced
    /// monotonically). Shared by everything this builder hands out. See [`clock`](crate::clock)
    /// for what it guarantees.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.shared.clock = SharedClock::new(clock);
        self
    }

    /// Instead of failing at once with [`Error::Unknown`](crate::Error::Unknown),
    /// [`Error::Processing`](crate::Error::Processing) or
    /// [`Error::RetryScheduled`](crate::Error::RetryScheduled), a call waits up to `bound` for the
    /// recovery engine to resolve the operation. The wait listens to the engine's notifications
    /// (and re-reads the ledger every 250 ms for engines in other processes); it never polls the
    /// vendor itself.
    pub fn wait_for_resolution(mut self, bound: Duration) -> Self {
        self.shared.wait = Some(bound);
        self
    }

    /// Tracks every write (any method but GET, HEAD, OPTIONS, TRACE), not only requests that
    /// carry an [`Operation`](crate::Operation); a write without one gets a generated operation.
    /// Off by default, for privacy: a tracked write's body and non-secret headers are stored in
    /// the ledger, and an app-wide client also sends writes that are not business intents, such
    /// as an OAuth token request whose body holds `client_secret`. Untracked writes pass through
    /// marked [`Untracked`](crate::guard::Untracked), which the send-once guard lets through.
    pub fn track_all_writes(mut self, track: bool) -> Self {
        self.shared.track_all_writes = track;
        self
    }

    /// What becomes of an operation whose first send the authorizer refuses (see
    /// [`DeniedFirstSend`](crate::DeniedFirstSend)): closed as `REJECTED` (the default), or
    /// queued for the recoverer. The caller's [`Error::Denied`](crate::Error::Denied) says which.
    pub fn denied_first_sends(mut self, fate: crate::DeniedFirstSend) -> Self {
        self.shared.denied_first_sends = fate;
        self
    }

    /// Largest request body a write may have (default 1 MiB). Larger bodies fail with
    /// [`Error::BodyTooLarge`](crate::Error::BodyTooLarge) and nothing is sent.
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.shared.max_request_body = bytes;
        self
    }

    /// Largest response body read to classify a write's answer (default 4 MiB). A larger one
    /// counts as a lost response: the outcome is unknown and is reconciled.
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.shared.max_response_body = bytes;
        self
    }

    /// How much of an authoritative answer is kept for callers that ask again (default 64 KiB),
    /// after the contract's secret answer fields are replaced by `[redacted]` (see
    /// [`Contract::secret_response_fields`](crate::Contract::secret_response_fields)).
    pub fn stored_body_limit(mut self, bytes: usize) -> Self {
        self.shared.stored_body = bytes;
        self
    }

    /// The stack lookups and replays go through: the one **below** the layer (the send-once
    /// guard and your client, which applies credentials). reqwest users pass
    /// `recoverable_write::reqwest::transport(client)`. Without a transport the recovery engine
    /// only escalates.
    pub fn transport<S, RB>(mut self, service: S) -> Self
    where
        S: Service<Request<Full<Bytes>>, Response = Response<RB>> + Clone + Send + Sync + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        RB: Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        self.transport = Some(crate::reconcile::boxed_transport(service));
        self
    }

    /// The header lookups built from contracts carry the operation's tenant in (for vendors
    /// that scope by tenant).
    pub fn lookup_tenant_header(mut self, name: HeaderName) -> Self {
        self.tenant_header = Some(name);
        self
    }

    /// How long a lookup built from a contract may take (default 10 s).
    pub fn lookup_timeout(mut self, timeout: Duration) -> Self {
        self.lookup_timeout = timeout;
        self
    }

    /// A reconciler for the operations of the contract named `contract`, instead of the one
    /// its `lookup` describes.
    pub fn reconciler_for(mut self, contract: impl Into<String>, r: impl Reconciler) -> Self {
        self.by_contract.insert(contract.into(), Arc::new(r));
        self
    }

    /// A reconciler for operations whose contract describes no lookup.
    pub fn reconciler(mut self, r: impl Reconciler) -> Self {
        self.default_reconciler = Some(Arc::new(r));
        self
    }

    /// Caps replays per target host (see [`ReplayLimiter`]).
    pub fn replay_limiter(mut self, limiter: Arc<ReplayLimiter>) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// The lease the recovery engine takes on each operation it works (default 30 s).
    pub fn recovery_lease(mut self, lease: Duration) -> Self {
        self.recovery_lease = lease;
        self
    }

    /// Pause between recovery passes (default 250 ms).
    pub fn recovery_interval(mut self, interval: Duration) -> Self {
        self.recovery_interval = interval;
        self
    }

    /// Validates everything and builds the configuration.
    ///
    /// # Errors
    ///
    /// [`BuildError`] naming the first setting out of bounds: the budget, a contract, a body
    /// limit, the recovery lease.
    pub fn build(self) -> Result<Handle<L>, BuildError> {
        let invalid = |field, problem: &str| BuildError::Invalid {
            field,
            problem: problem.to_owned(),
        };
        self.shared.policy.validate()?;
        self.shared.contracts.validate()?;
        self.shared
            .retention
            .validate(&self.shared.contracts)
            .map_err(|e| BuildError::Invalid {
                field: e.field,
                problem: e.problem,
            })?;
        if self.shared.max_request_body == 0 {
            return Err(invalid("max_request_body", "must be at least 1 byte"));
        }
        if self.shared.max_response_body == 0 {
            return Err(invalid("max_response_body", "must be at least 1 byte"));
        }
        if self.recovery_lease < 2 * self.lookup_timeout.min(Duration::from_secs(3600)) {
            return Err(invalid(
                "recovery_lease",
                "must be at least twice the lookup timeout: a lookup is abandoned at half the lease",
            ));
        }
        if self.recovery_interval.is_zero() {
            return Err(invalid("recovery_interval", "must be positive"));
        }
        let shared = Arc::new(self.shared);
        // Lookups the contracts describe, over the transport; code-registered ones win.
        let mut reconcilers = HashMap::new();
        if let Some(transport) = &self.transport {
            for contract in shared.contracts.all() {
                if let Some(lookup) = lookup_for(
                    contract,
                    transport,
                    self.tenant_header.as_ref(),
                    self.lookup_timeout,
                ) {
                    reconcilers.insert(contract.name.clone(), lookup);
                }
            }
        }
        reconcilers.extend(self.by_contract);
        Ok(Handle {
            ledger: self.ledger,
            shared,
            transport: self.transport,
            default_reconciler: self.default_reconciler,
            reconcilers,
            limiter: self.limiter,
            recovery_lease: self.recovery_lease,
            recovery_interval: self.recovery_interval,
        })
    }
}

impl<L: RetentionLedger> Builder<L> {
    /// Retention: how long finished operations keep their details and their rows, and how
    /// often the recoverer purges (default [`Retention::new`]: 7 days, 35 days, every
    /// 10 minutes). See [`crate::retention`].
    ///
    /// Only for a ledger that can purge ([`RetentionLedger`]): on one that cannot, this does
    /// not compile.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.shared.retention = retention;
        self
    }
}

/// The reconciler a contract's `lookup` describes, over `transport`: an [`HttpLookup`] for
/// `http_get`, a [`ListLookup`] for `list_by_reference`; none for the other kinds (a same-key
/// replay is the engine's own path, webhooks and `unavailable` have nothing to ask).
fn lookup_for(
    contract: &Contract,
    transport: &Transport,
    tenant_header: Option<&HeaderName>,
    timeout: Duration,
) -> Option<Arc<dyn Reconciler>> {
    match contract.lookup.as_ref()? {
        Lookup::HttpGet {
            url_template,
            answer,
        } => {
            let mut lookup = HttpLookup::new(transport.clone(), url_template.clone())
                .timeout(timeout)
                .format(answer.format)
                .secret_response_fields(contract.secret_response_fields.clone())
                .secret_body_fields(contract.secret_body_fields.clone())
                .statuses(statuses(answer))
                // Validated with the contract: an unknown value never gets here.
                .not_found(
                    answer
                        .not_found
                        .as_deref()
                        .and_then(NotFound::parse)
                        .unwrap_or_default(),
                );
            // A URL built from the operation's own id or key identifies it, and so does one
            // built from its remote reference (recorded only from this operation's own
            // evidence): the answer need not repeat the id, unless the contract says where it
            // must. A `{remote_ref}` lookup for a row with no reference yet is not made.
            let identifies = ["{operation_id}", "{idempotency_key}", "{remote_ref}"]
                .iter()
                .any(|p| url_template.contains(p));
            lookup = match (&answer.operation_id, identifies) {
                (Some(p), _) => lookup.id_pointer(Some(p)),
                (None, true) => lookup.id_pointer(None),
                (None, false) => lookup,
            };
            if let Some(p) = &answer.status {
                lookup = lookup.status_pointer(p);
            }
            if let Some(p) = &answer.remote_ref {
                lookup = lookup.remote_ref_pointer(p);
            }
            if let Some(h) = tenant_header {
                lookup = lookup.tenant_header(h.clone());
            }
            Some(Arc::new(lookup))
        }
        Lookup::ListByReference {
            url_template,
            items_pointer,
            reference_pointer,
            reference,
            answer,
        } => {
            // The item carrying the reference is read with the answer's pointers, relative to
            // the item; the reference identifies it (the item repeats the operation id only
            // where the contract says). A 404 or an empty list is never "not executed" (the
            // contract cannot say otherwise: validation refuses it).
            let mut lookup = ListLookup::new(transport.clone(), url_template.clone())
                .items_pointer(items_pointer.as_deref())
                .reference_pointer(reference_pointer.as_deref())
                .reference(reference.clone())
                .id_pointer(answer.operation_id.as_deref())
                .statuses(statuses(answer))
                .timeout(timeout)
                .format(answer.format)
                .secret_response_fields(contract.secret_response_fields.clone())
                .secret_body_fields(contract.secret_body_fields.clone());
            if let Some(p) = &answer.status {
                lookup = lookup.status_pointer(p);
            }
            if let Some(p) = &answer.remote_ref {
                lookup = lookup.remote_ref_pointer(p);
            }
            if let Some(h) = tenant_header {
                lookup = lookup.tenant_header(h.clone());
            }
            Some(Arc::new(lookup))
        }
        _ => None,
    }
}

/// The status vocabulary an answer configures: each list it gives replaces the default one.
fn statuses(answer: &LookupAnswer) -> LookupStatuses {
    let mut statuses = LookupStatuses::default();
    for (set, from) in [
        (&mut statuses.succeeded, &answer.succeeded),
        (&mut statuses.processing, &answer.processing),
        (&mut statuses.rejected, &answer.rejected),
        (&mut statuses.not_executed, &answer.not_executed),
    ] {
        if let Some(v) = from {
            set.clone_from(v);
        }
    }
    statuses
}

/// The live handle over one validated configuration, made by [`Builder::build`]. Hands out the
/// layer, the recoverer, the reviews, the purger and (feature `reqwest`) the reqwest
/// middleware, all over the same ledger (of type `L`), contracts, budget, authorizer, notifier,
/// clock and transport. Cheap to clone.
///
/// What it hands out follows what the ledger can do: the layer and the recoverer over every
/// [`Ledger`], the [reviews](Self::reviews) with [`ListingLedger`], the
/// [purger](Self::purger) with [`ListingLedger`] and [`RetentionLedger`].
pub struct Handle<L> {
    ledger: Arc<L>,
    shared: Arc<Shared>,
    transport: Option<Transport>,
    default_reconciler: Option<Arc<dyn Reconciler>>,
    reconcilers: HashMap<String, Arc<dyn Reconciler>>,
    limiter: Option<Arc<ReplayLimiter>>,
    recovery_lease: Duration,
    recovery_interval: Duration,
}

impl<L> Clone for Handle<L> {
    fn clone(&self) -> Self {
        Self {
            ledger: self.ledger.clone(),
            shared: self.shared.clone(),
            transport: self.transport.clone(),
            default_reconciler: self.default_reconciler.clone(),
            reconcilers: self.reconcilers.clone(),
            limiter: self.limiter.clone(),
            recovery_lease: self.recovery_lease,
            recovery_interval: self.recovery_interval,
        }
    }
}

impl<L: Ledger> fmt::Debug for Handle<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("shared", &self.shared)
            .field("transport", &self.transport.is_some())
            .field("reconcilers", &self.reconcilers.keys().collect::<Vec<_>>())
            .field("recovery_lease", &self.recovery_lease)
            .finish_non_exhaustive()
    }
}

impl<L: Ledger> Handle<L> {
    #[cfg(feature = "callbacks")]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The tower layer. Put the send-once guard and the client below it.
    pub fn layer(&self) -> RecoverableWriteLayer {
        RecoverableWriteLayer::from_shared(self.shared.clone())
    }

    /// The recovery engine: the same contracts and their lookups, the transport for lookups and
    /// replays. [`spawn`](Recoverer::spawn) it, or run it in worker processes.
    pub fn recoverer(&self) -> Recoverer {
        let mut r = Recoverer::from_shared(self.shared.clone())
            .lease(self.recovery_lease)
            .interval(self.recovery_interval);
        if let Some(t) = &self.transport {
            r = r.with_transport(t.clone());
        }
        if let Some(d) = &self.default_reconciler {
            r = r.reconciler(d.clone());
        }
        for (name, rec) in &self.reconcilers {
            r = r.reconciler_for(name.clone(), rec.clone());
        }
        if let Some(l) = &self.limiter {
            r = r.replay_limiter(l.clone());
        }
        r
    }

    /// The notifier, to subscribe to resolutions, escalations and late evidence.
    pub fn notifications(&self) -> &Notifier {
        &self.shared.notifier
    }

    /// The ledger.
    pub fn ledger(&self) -> &Arc<L> {
        &self.ledger
    }

    /// The contracts.
    pub fn contracts(&self) -> &Contracts {
        &self.shared.contracts
    }

    /// The reqwest-middleware adapter over this configuration (feature `reqwest`).
    #[cfg(feature = "reqwest")]
    pub fn reqwest_middleware(&self) -> crate::reqwest::RecoverableWriteMiddleware {
        crate::reqwest::RecoverableWriteMiddleware::new(&self.layer())
    }
}

impl<L: ListingLedger> Handle<L> {
    /// The reviews API (handoff package, claim, resolve), for a ledger that lists its
    /// operations ([`ListingLedger`]). A ledger with only the write path gets none:
    ///
    /// ```compile_fail
    /// use recoverable_write::{Ledger, MemoryLedger, RecoverableWrite};
    ///
    /// /// A ledger known only by its write path (a memory ledger behind `impl Ledger`).
    /// fn write_path_only() -> impl Ledger {
    ///     MemoryLedger::new()
    /// }
    ///
    /// let rw = RecoverableWrite::builder(write_path_only()).build().unwrap();
    /// let _ = rw.layer(); // the write path: fine
    /// let _ = rw.recoverer(); // recovery: fine
    /// let _ = rw.reviews(); // error: `impl Ledger` is not a `ListingLedger`
    /// ```
    pub fn reviews(&self) -> Reviews {
        Reviews::from_parts(self.shared.clone(), self.ledger.clone())
    }
}

impl<L: ListingLedger + RetentionLedger> Handle<L> {
    /// Retention over this configuration's ledger and contracts: run a purge now, preview
    /// one, show an operation's retention dates, erase a tenant. The recoverer also purges on
    /// [`Retention::interval`]. For a ledger that purges ([`RetentionLedger`]) and lists its
    /// operations ([`ListingLedger`]: erasing a tenant counts its open operations first).
    pub fn purger(&self) -> Purger {
        Purger::from_parts(
            self.shared.clone(),
            self.ledger.clone(),
            self.ledger.clone(),
        )
    }
}
