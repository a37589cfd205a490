//! The drill harness: the fake vendor over real TCP, a SQLite ledger file in a temp dir, the
//! layer over a hyper-util client, and a recoverer with an HTTP lookup and a replay path.
//!
//! The crate's own drills (`tests/`) and `cargo run --example drill` use it; so can a user's
//! tests for their own contracts. Setup failures panic, as in a test.
//!
//! ```no_run
//! use recoverable_write::State;
//! use recoverable_write::testing::drill::{Drill, new_op, send};
//!
//! # async fn run() {
//! let drill = Drill::start().await;
//! let mut svc = drill.writer();
//! let op = new_op("intent-1");
//! drill.vendor.faults().drop_after_commit(1);
//! let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await; // Err: verifying
//! let row = drill.recover_until(op.id(), |r| r.state == State::Succeeded).await;
//! assert_eq!(row.remote_ref.as_deref(), Some("W731"));
//! assert_eq!(drill.vendor.tickets_created(), 1);
//! # }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::FakeVendor;
use crate::ResponseBody;
use crate::contract::{EvidenceClass, KeyPlacement, RemoteRef, Replay, Rule};
use crate::guard::GuardStats;
use crate::ledger::{EvidenceEntry, FullLedger, Ledger, OperationRecord};
use crate::{
    Access, BoxError, BudgetPolicy, Builder, Contract, Denied, Error, Handle, HttpLookup,
    Operation, OperationId, Outcome, RecoverableWrite, RecoverableWriteLayer, Recoverer,
    SendOnceGuardLayer, SqliteLedger, State, Tenant,
};
use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The plain hyper-util client the drills use.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;
/// The full client stack with bodies collected: what a caller sees.
pub type Writer = BoxCloneSyncService<Request<Full<Bytes>>, Response<Bytes>, Error>;

/// The tenant of every drill operation.
pub const TENANT: &str = "tenant-a";

/// Short windows so drills run in milliseconds, never seconds.
pub fn fast_policy() -> BudgetPolicy {
    BudgetPolicy {
        max_attempts: 3,
        max_queries: 20,
        window_ms: 5_000,
        attempt_timeout_ms: 600,
        lease_margin_ms: 300,
        query_backoff_base_ms: 5,
        query_backoff_cap_ms: 40,
    }
}

/// A hyper-util client with its own retry switched off (one retry owner).
pub fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        // One retry owner: the recovery engine.
        .retry_canceled_requests(false)
        .build_http()
}

/// One drill's world. See the [module docs](self).
#[allow(missing_debug_implementations)]
pub struct Drill {
    /// The fake vendor (real TCP on 127.0.0.1).
    pub vendor: FakeVendor,
    /// Holds the SQLite ledger file.
    pub dir: tempfile::TempDir,
    /// The ledger.
    pub ledger: Arc<dyn FullLedger>,
    /// The handle the drill's layer, reviews and recoverer come from, configured from the
    /// options.
    pub rw: Handle<Arc<dyn FullLedger>>,
    /// The layer (`rw.layer()`; replace it with one from [`Drill::builder`] to change only the
    /// write path's configuration).
    pub layer: RecoverableWriteLayer,
    /// The send-once guard below the layer (and below the replay path).
    pub guard: SendOnceGuardLayer,
    /// The recovery engine, built from the layer, with a lookup and a replay path.
    pub recoverer: Recoverer,
    /// The credential the stack below the layer applies (refreshable, like a token store).
    pub credential: Arc<Mutex<String>>,
    /// The options the drill was built with.
    pub options: DrillOptions,
    /// Whether `ledger` is the SQLite file in `dir` (reopened by [`Drill::restart`]).
    own_file: bool,
}

/// A synchronous authorizer closure.
pub type AuthorizeFn = Arc<dyn Fn(&OperationRecord, Access) -> Result<(), Denied> + Send + Sync>;

/// What a drill varies: the contract, the budget, the authorizer, the recoverer's margins.
#[derive(Clone)]
#[allow(missing_debug_implementations)]
pub struct DrillOptions {
    /// The contract for every target (default: conservative).
    pub contract: Contract,
    /// The budget (default: [`fast_policy`]).
    pub policy: BudgetPolicy,
    /// An authorizer for the layer and the engine.
    pub authorizer: Option<AuthorizeFn>,
    /// The engine's clock-skew margin (default 100 ms).
    pub skew_margin: Duration,
    /// A replay limiter for the engine.
    pub limiter: Option<Arc<crate::ReplayLimiter>>,
}

impl Default for DrillOptions {
    fn default() -> Self {
        Self {
            contract: Contract::conservative(),
            policy: fast_policy(),
            authorizer: None,
            skew_margin: Duration::from_millis(100),
            limiter: None,
        }
    }
}

impl DrillOptions {
    /// The options of drill D9: the vendor keeps keys for 1 s ([`replay_safe_contract`] with a
    /// 1 s retention), recovery may ask four times, and the clock-skew margin is 500 ms. Once
    /// the keys have expired and the vendor's operation records are cleaned, no evidence is
    /// left and a replay could run anew: see [`Drill::d9_to_review`].
    pub fn d9() -> Self {
        Self {
            contract: replay_safe_contract().retention_secs(1),
            policy: BudgetPolicy {
                max_queries: 4,
                ..fast_policy()
            },
            skew_margin: Duration::from_millis(500),
            ..Self::default()
        }
    }
}

/// A contract like Stripe v1's for the fake vendor: same-key replay returns the stored first
/// response (errors included) for 24 h, and 429 is documented as not executed.
pub fn replay_safe_contract() -> Contract {
    Contract::new("fake-vendor-v1", KeyPlacement::header("Idempotency-Key"))
        .replay(Replay::StoredFirstResponse)
        .retention_secs(86_400)
        .rule(Rule::new(429u16, EvidenceClass::NotExecuted))
        .remote_ref(RemoteRef::optional("/id"))
}

/// The credential the stack applies.
pub const CREDENTIAL: &str = "Bearer sk_test_secret";

impl Drill {
    /// A drill with a fresh vendor and the default options.
    pub async fn start() -> Self {
        Self::with(FakeVendor::start().await, DrillOptions::default()).await
    }

    /// A drill around `vendor`, default options.
    pub async fn with_vendor(vendor: FakeVendor) -> Self {
        Self::with(vendor, DrillOptions::default()).await
    }

    /// A drill with a fresh vendor and `options`.
    pub async fn with_options(options: DrillOptions) -> Self {
        Self::with(FakeVendor::start().await, options).await
    }

    /// A drill around `vendor` with `options`.
    ///
    /// # Panics
    /// If the temp dir or the SQLite ledger cannot be created.
    pub async fn with(vendor: FakeVendor, options: DrillOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger: Arc<dyn FullLedger> = Arc::new(
            SqliteLedger::open(dir.path().join("ledger.db"))
                .await
                .expect("open sqlite ledger"),
        );
        Self::assemble(vendor, dir, ledger, options, true)
    }

    /// A drill around `vendor` over `ledger` (any backend, such as a PostgreSQL schema) with
    /// `options`. `dir` is an empty temp dir then, and [`restart`](Self::restart) keeps
    /// `ledger`.
    ///
    /// # Panics
    /// If the temp dir cannot be created.
    pub fn with_ledger(
        vendor: FakeVendor,
        ledger: Arc<dyn FullLedger>,
        options: DrillOptions,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::assemble(vendor, dir, ledger, options, false)
    }

    /// Rebuilds everything but the vendor and the ledger's store: a process restart. The
    /// drill's own SQLite file is opened again; a ledger given to
    /// [`with_ledger`](Self::with_ledger) is kept.
    ///
    /// # Panics
    /// If the ledger cannot be reopened.
    pub async fn restart(self) -> Self {
        let Drill {
            vendor,
            dir,
            ledger,
            options,
            own_file,
            ..
        } = self;
        let ledger: Arc<dyn FullLedger> = if own_file {
            Arc::new(
                SqliteLedger::open(dir.path().join("ledger.db"))
                    .await
                    .expect("reopen sqlite ledger"),
            )
        } else {
            ledger
        };
        Self::assemble(vendor, dir, ledger, options, own_file)
    }

    fn assemble(
        vendor: FakeVendor,
        dir: tempfile::TempDir,
        ledger: Arc<dyn FullLedger>,
        options: DrillOptions,
        own_file: bool,
    ) -> Self {
        let credential = Arc::new(Mutex::new(CREDENTIAL.to_owned()));
        let rw = builder(&ledger, &options)
            .build()
            .expect("a valid drill configuration");
        let layer = rw.layer();
        let guard = SendOnceGuardLayer::new();
        let mut recoverer = recoverer(
            &rw,
            &guard,
            &vendor.base_url(),
            credential.clone(),
            options.skew_margin,
        );
        if let Some(l) = options.limiter.clone() {
            recoverer = recoverer.replay_limiter(l);
        }
        Self {
            vendor,
            dir,
            ledger,
            rw,
            layer,
            guard,
            recoverer,
            credential,
            options,
            own_file,
        }
    }

    /// A builder over the drill's ledger with the drill's budget, contract and authorizer:
    /// change a setting and build a handle (`drill.layer = drill.builder().….build()?.layer()`).
    pub fn builder(&self) -> Builder<Arc<dyn FullLedger>> {
        builder(&self.ledger, &self.options)
    }

    /// What the guard let through and refused.
    pub fn guard_stats(&self) -> Arc<GuardStats> {
        self.guard.stats()
    }

    /// The full client stack: layer → guard → hyper-util client, bodies collected.
    pub fn writer(&self) -> Writer {
        collected(
            ServiceBuilder::new()
                .layer(self.layer.clone())
                .layer(self.guard.clone())
                .service(authed_client(self.credential.clone())),
        )
    }

    /// A ticket create for `op` (see [`ticket_request`]).
    pub fn ticket_request(&self, op: &Operation, device: &str) -> Request<Full<Bytes>> {
        ticket_request(&self.vendor, op, device)
    }

    /// The ledger row of `op`.
    ///
    /// # Panics
    /// If the ledger fails or has no such operation.
    pub async fn record(&self, op: &OperationId) -> OperationRecord {
        self.ledger
            .get(&Tenant::new(TENANT), op)
            .await
            .expect("ledger get")
            .expect("operation exists")
    }

    /// The evidence log of `op`.
    ///
    /// # Panics
    /// If the ledger fails.
    pub async fn evidence(&self, op: &OperationId) -> Vec<EvidenceEntry> {
        self.ledger
            .evidence(&Tenant::new(TENANT), op)
            .await
            .expect("ledger evidence")
    }

    /// Runs recovery passes until `done` holds for the operation (bounded: 200 passes).
    ///
    /// # Panics
    /// If it never does, or a pass fails.
    pub async fn recover_until(
        &self,
        op: &OperationId,
        done: impl Fn(&OperationRecord) -> bool,
    ) -> OperationRecord {
        for _ in 0..200 {
            self.recoverer.run_once().await.expect("recovery pass");
            let r = self.record(op).await;
            if done(&r) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("operation {op} never reached the expected state");
    }

    /// Drill D9 (with [`DrillOptions::d9`]) for `op`: its ticket create for `device` commits
    /// and the response is lost; then the vendor's keys expire and its operation records are
    /// cleaned, so no lookup or replay can tell, and recovery hands the operation to a person.
    /// Returns the `MANUAL_REVIEW` row.
    ///
    /// # Panics
    /// If the operation never reaches `MANUAL_REVIEW` (see
    /// [`recover_until`](Self::recover_until)).
    pub async fn d9_to_review(&self, op: &Operation, device: &str) -> OperationRecord {
        self.vendor.faults().drop_after_commit(1);
        let _ = send(&mut self.writer(), self.ticket_request(op, device)).await;
        self.vendor.faults().expire_keys();
        self.vendor.faults().clean_operation_records();
        self.recover_until(op.id(), |r| r.state == State::ManualReview)
            .await
    }
}

/// The builder a drill starts from: its ledger, budget, contract and authorizer.
fn builder(ledger: &Arc<dyn FullLedger>, options: &DrillOptions) -> Builder<Arc<dyn FullLedger>> {
    let mut builder = RecoverableWrite::builder(ledger.clone())
        .budget(options.policy.clone())
        .contract(options.contract.clone());
    if let Some(a) = options.authorizer.clone() {
        builder = builder.authorizer(move |op: &OperationRecord, access: Access| a(op, access));
    }
    builder
}

/// The recovery engine the drills build for `rw`: an [`HttpLookup`] of the vendor's
/// `{vendor_base_url}/operations/{operation_id}` (tenant header `x-tenant`, 500 ms timeout) and a
/// replay path through `guard`, both over [`authed_client`] with `credential`; the clock-skew
/// margin `skew_margin` and a 2 s lease.
pub fn recoverer<L: Ledger>(
    rw: &Handle<L>,
    guard: &SendOnceGuardLayer,
    vendor_base_url: &str,
    credential: Arc<Mutex<String>>,
    skew_margin: Duration,
) -> Recoverer {
    let lookup = HttpLookup::new(
        authed_client(credential.clone()),
        format!("{vendor_base_url}/operations/{{operation_id}}"),
    )
    .tenant_header(HeaderName::from_static("x-tenant"))
    .timeout(Duration::from_millis(500));
    let replay = ServiceBuilder::new()
        .layer(guard.clone())
        .service(authed_client(credential));
    rw.recoverer()
        .reconciler(lookup)
        .replay_through(replay)
        .skew_margin(skew_margin)
        .lease(Duration::from_secs(2))
}

/// The client with credentials applied at send time.
pub type AuthedClient = BoxCloneSyncService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

/// The client with the credential applied at send time (when the request carries none), as a
/// real stack below the layer does: credentials never pass through the ledger.
pub fn authed_client(credential: Arc<Mutex<String>>) -> AuthedClient {
    let client = http_client();
    BoxCloneSyncService::new(
        client
            .map_request(move |mut req: Request<Full<Bytes>>| {
                if !req.headers().contains_key("authorization") {
                    let value = credential
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    if let Ok(value) = value.parse() {
                        req.headers_mut().insert("authorization", value);
                    }
                }
                req
            })
            .map_err(BoxError::from),
    )
}

/// `svc` (a layer over a hyper-util client) as a [`Writer`]: response bodies collected.
pub fn collected<S>(svc: S) -> Writer
where
    S: tower::Service<
            Request<Full<Bytes>>,
            Response = Response<ResponseBody<Incoming>>,
            Error = Error,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    BoxCloneSyncService::new(
        svc.and_then(|res: Response<ResponseBody<Incoming>>| async move {
            let (parts, body) = res.into_parts();
            let bytes = body
                .collect()
                .await
                .map_err(|e| Error::Inner { source: e })?
                .to_bytes();
            Ok(Response::from_parts(parts, bytes))
        }),
    )
}

/// The ticket create body of seed 000.
pub fn ticket_body(op: &Operation, device: &str) -> String {
    format!(
        r#"{{"operation_id":"{}","device_id":"{}","priority":"P2"}}"#,
        op.id(),
        device
    )
}

/// `POST /tickets` for `op`, with the tenant header, a caller-supplied credential and `op` in
/// the extensions.
///
/// # Panics
/// Never for valid operation ids.
pub fn ticket_request(vendor: &FakeVendor, op: &Operation, device: &str) -> Request<Full<Bytes>> {
    let mut req = Request::post(vendor.url("/tickets"))
        .header("content-type", "application/json")
        .header("x-tenant", op.tenant().as_str())
        .header("authorization", "Bearer sk_test_secret")
        .body(Full::new(Bytes::from(ticket_body(op, device))))
        .expect("request");
    req.extensions_mut().insert(op.clone());
    req
}

/// An operation of [`TENANT`] for action `create_ticket`.
pub fn new_op(intent: &str) -> Operation {
    Operation::new(TENANT, "create_ticket", intent)
}

/// Drives `svc` to readiness and sends `req`.
pub async fn send(svc: &mut Writer, req: Request<Full<Bytes>>) -> Result<Response<Bytes>, Error> {
    svc.ready().await?.call(req).await
}

/// The [`Outcome`] of a response.
///
/// # Panics
/// If it has none.
pub fn outcome<B>(res: &Response<B>) -> Outcome {
    res.extensions()
        .get::<Outcome>()
        .cloned()
        .expect("response carries an Outcome")
}

/// Asserts `err` is [`Error::Unknown`] for `op`, telling the caller not to recreate it.
///
/// # Panics
/// If it is not.
pub fn assert_unknown(err: &Error, op: &OperationId) {
    match err {
        Error::Unknown { outcome, .. } => {
            assert_eq!(&outcome.operation_id, op);
            assert_eq!(outcome.state, State::Unknown);
            assert!(
                outcome.message.contains("do not create it again"),
                "caller must be told not to recreate: {}",
                outcome.message
            );
        }
        other => panic!("expected Unknown for {op}, got {other:?}"),
    }
}
