//! The [`FakeVendor`] handle, its builder, and the listener it can close and reopen.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::HeaderName;
use tokio::sync::watch;

use super::faults::{FaultPlan, Faults};
use super::server;
use super::store::{SeenRequest, Store, StoreConfig, Ticket};

/// Locks a mutex, recovering the data if a thread panicked while holding it.
///
/// The vendor's state is updated in single critical sections that leave it consistent at every
/// step, so a poisoned lock (a panicking test thread) carries nothing half-written.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Settings that do not change while the vendor runs.
#[derive(Debug, Clone)]
pub(crate) struct VendorSettings {
    pub(crate) key_header: HeaderName,
    pub(crate) tenant_header: HeaderName,
    pub(crate) require_key: bool,
    pub(crate) cache_error_response: bool,
}

/// State shared by the handle, the accept loop and every connection.
#[derive(Debug)]
pub(crate) struct VendorState {
    pub(crate) config: VendorSettings,
    pub(crate) store: Mutex<Store>,
    pub(crate) plan: Mutex<FaultPlan>,
    pub(crate) acceptor: Acceptor,
    /// Bumped to close every open connection (refusal, shutdown).
    pub(crate) close_all: watch::Sender<u64>,
}

impl VendorState {
    pub(crate) fn close_connections(&self) {
        self.close_all.send_modify(|generation| *generation += 1);
    }

    pub(crate) fn fresh_plan(&self) -> FaultPlan {
        FaultPlan::new(self.config.cache_error_response)
    }
}

#[derive(Debug)]
enum Listening {
    Active(tokio::net::TcpListener),
    /// Bound (and listening, so connects queue) but not yet registered with the runtime: the
    /// accept loop converts it, because `from_std` needs a runtime context.
    Fresh(std::net::TcpListener),
    Closed,
}

#[derive(Debug)]
struct AcceptorState {
    listening: Listening,
    waker: Option<Waker>,
    shut_down: bool,
}

/// The listening socket, closable and reopenable synchronously on the same address.
#[derive(Debug)]
pub(crate) struct Acceptor {
    addr: SocketAddr,
    state: Mutex<AcceptorState>,
}

impl Acceptor {
    fn new(listener: tokio::net::TcpListener, addr: SocketAddr) -> Self {
        Self {
            addr,
            state: Mutex::new(AcceptorState {
                listening: Listening::Active(listener),
                waker: None,
                shut_down: false,
            }),
        }
    }

    /// Polls for the next connection; `Ready(None)` once shut down.
    pub(crate) fn poll_accept(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<(tokio::net::TcpStream, SocketAddr)>>> {
        let mut state = lock(&self.state);
        if state.shut_down {
            return Poll::Ready(None);
        }
        // Whoever closes or reopens the listener wakes us: the listener's own registration
        // dies with it.
        state.waker = Some(cx.waker().clone());
        if let Listening::Fresh(_) = state.listening
            && let Listening::Fresh(std_listener) =
                std::mem::replace(&mut state.listening, Listening::Closed)
        {
            match tokio::net::TcpListener::from_std(std_listener) {
                Ok(listener) => state.listening = Listening::Active(listener),
                Err(error) => return Poll::Ready(Some(Err(error))),
            }
        }
        match &state.listening {
            Listening::Active(listener) => listener.poll_accept(cx).map(Some),
            Listening::Fresh(_) | Listening::Closed => Poll::Pending,
        }
    }

    /// Closes the listening socket now: connects get ECONNREFUSED.
    pub(crate) fn close(&self) {
        let mut state = lock(&self.state);
        if !matches!(state.listening, Listening::Closed) {
            tracing::debug!("fake vendor: refusing connections");
        }
        state.listening = Listening::Closed;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Listens again on the same address (no-op if listening).
    pub(crate) fn reopen(&self) -> io::Result<()> {
        let mut state = lock(&self.state);
        if state.shut_down {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the fake vendor was shut down",
            ));
        }
        if matches!(state.listening, Listening::Closed) {
            // std sets SO_REUSEADDR on Unix, so the port is free again despite the
            // TIME_WAIT sockets of the connections we just closed.
            let listener = std::net::TcpListener::bind(self.addr)?;
            listener.set_nonblocking(true)?;
            state.listening = Listening::Fresh(listener);
            tracing::debug!("fake vendor: accepting connections again");
            if let Some(waker) = state.waker.take() {
                waker.wake();
            }
        }
        Ok(())
    }

    fn shut_down(&self) {
        let mut state = lock(&self.state);
        state.shut_down = true;
        state.listening = Listening::Closed;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }
}

/// Options for a [`FakeVendor`]; see [`FakeVendor::builder`].
#[derive(Debug, Clone)]
pub struct FakeVendorBuilder {
    addr: SocketAddr,
    key_header: HeaderName,
    tenant_header: HeaderName,
    require_key: bool,
    cache_error_response: bool,
    key_retention: Duration,
    operation_retention: Duration,
    dedupe_by_operation_id: bool,
    remember_used_operations: bool,
    processing_retry_after: Option<Duration>,
    first_ticket: u64,
}

impl Default for FakeVendorBuilder {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            key_header: HeaderName::from_static("idempotency-key"),
            tenant_header: HeaderName::from_static("x-tenant"),
            require_key: true,
            cache_error_response: false,
            key_retention: Duration::from_secs(24 * 60 * 60),
            operation_retention: Duration::from_secs(7 * 24 * 60 * 60),
            dedupe_by_operation_id: true,
            remember_used_operations: false,
            processing_retry_after: Some(Duration::from_secs(1)),
            first_ticket: 731,
        }
    }
}

impl FakeVendorBuilder {
    /// Address to bind; default `127.0.0.1:0` (a free port).
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Header carrying the idempotency key; default `Idempotency-Key`. A value quoted as an
    /// RFC 8941 string (`"k-204"`) names the same key as the bare value.
    pub fn idempotency_key_header(mut self, name: HeaderName) -> Self {
        self.key_header = name;
        self
    }

    /// Header carrying the tenant; default `X-Tenant`. Requests without it belong to tenant
    /// `"default"`.
    pub fn tenant_header(mut self, name: HeaderName) -> Self {
        self.tenant_header = name;
        self
    }

    /// Whether a create without a key is refused with 400 `missing_idempotency_key` (default
    /// `true`). When `false`, such a create always makes a new ticket (no replay protection).
    pub fn require_idempotency_key(mut self, required: bool) -> Self {
        self.require_key = required;
        self
    }

    /// How long a key protects against duplicates; default 24 h (Stripe's minimum). After it,
    /// the key is forgotten and the same key runs as a new request.
    pub fn key_retention(mut self, retention: Duration) -> Self {
        self.key_retention = retention;
        self
    }

    /// How long operation records answer lookups; default 7 days (seed 000).
    pub fn operation_retention(mut self, retention: Duration) -> Self {
        self.operation_retention = retention;
        self
    }

    /// When `true` (default), a create whose `operation_id` already has a live operation
    /// record returns that operation (200 with the existing ticket, or 202 while PROCESSING)
    /// instead of creating, even if the key expired: the safe vendor. When `false`, only the
    /// key protects: the unsafe vendor of drill D9.
    pub fn dedupe_by_operation_id(mut self, dedupe: bool) -> Self {
        self.dedupe_by_operation_id = dedupe;
        self
    }

    /// When `true`, the vendor keeps a "used operation" marker that outlives operation records:
    /// a create naming a used `operation_id` with no live record is refused with 409
    /// `operation_already_used` (seed 000's long-lived marker). Default `false`.
    pub fn remember_used_operations(mut self, remember: bool) -> Self {
        self.remember_used_operations = remember;
        self
    }

    /// `Retry-After` sent with PROCESSING answers (202 creates and lookups), rounded up to
    /// whole seconds; `None` sends none. Default 1 s.
    pub fn processing_retry_after(mut self, after: Option<Duration>) -> Self {
        self.processing_retry_after = after;
        self
    }

    /// Initial value of [`Faults::cache_error_response`]; default `false`.
    pub fn cache_error_response(mut self, cache: bool) -> Self {
        self.cache_error_response = cache;
        self
    }

    /// Number of the first ticket; default 731 (`W731`).
    pub fn first_ticket_number(mut self, number: u64) -> Self {
        self.first_ticket = number;
        self
    }

    /// Binds the listener and starts serving on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// If the address cannot be bound.
    pub async fn start(self) -> io::Result<FakeVendor> {
        let listener = tokio::net::TcpListener::bind(self.addr).await?;
        let addr = listener.local_addr()?;
        let processing_retry_after = self.processing_retry_after.map(|after| {
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            secs.to_string()
        });
        let store = Store::new(
            StoreConfig {
                key_retention: self.key_retention,
                operation_retention: self.operation_retention,
                dedupe_by_operation_id: self.dedupe_by_operation_id,
                remember_used_operations: self.remember_used_operations,
                processing_retry_after,
            },
            self.first_ticket,
        );
        let (close_all, _) = watch::channel(0);
        let shared = Arc::new(VendorState {
            config: VendorSettings {
                key_header: self.key_header,
                tenant_header: self.tenant_header,
                require_key: self.require_key,
                cache_error_response: self.cache_error_response,
            },
            store: Mutex::new(store),
            plan: Mutex::new(FaultPlan::default()),
            acceptor: Acceptor::new(listener, addr),
            close_all,
        });
        *lock(&shared.plan) = shared.fresh_plan();
        tokio::spawn(server::accept_loop(Arc::clone(&shared)));
        tracing::debug!(%addr, "fake vendor listening");
        Ok(FakeVendor {
            faults: Faults {
                shared: Arc::clone(&shared),
            },
            _running: Arc::new(Running { shared }),
            addr,
        })
    }
}

/// Stops the server when the last [`FakeVendor`] clone is dropped.
#[derive(Debug)]
struct Running {
    shared: Arc<VendorState>,
}

impl Drop for Running {
    fn drop(&mut self) {
        shut_down(&self.shared);
    }
}

fn shut_down(shared: &VendorState) {
    shared.acceptor.shut_down();
    shared.close_connections();
}

/// A fake ticket vendor on a real TCP port: real idempotency semantics, exact side-effect
/// counts, and fault injection, for drills.
///
/// # API
///
/// - `POST /tickets` with the idempotency key header and a JSON body
///   `{"operation_id":"op-204","device_id":"E17","priority":"P2"}` (`operation_id` optional)
///   creates ticket `W731`, `W732`, ... and answers 201
///   `{"id":"W731","operation_id":"op-204","device_id":"E17","status":"SUCCEEDED"}`.
///   Per tenant: no key → 400 `missing_idempotency_key`; invalid JSON or no `device_id` → 400
///   `validation_error` (not stored); a known key with the same payload (SHA-256 of the
///   canonical JSON) replays the stored first response (header `Idempotent-Replayed: true`),
///   while still executing → 409 `idempotency_key_in_use`, another payload → 422
///   `idempotency_key_mismatch` (the IETF draft's codes).
/// - `GET /operations/{operation_id}` and `GET /operations/by-key/{key}` → 200
///   `{"operation_id":..,"status":"SUCCEEDED"|"PROCESSING"|"REJECTED","resource_id":..,
///   "state_version":N}` or 404 `not_found`; another tenant's operation is 404.
/// - `GET /tickets` → `{"tickets":[...]}`, the tenant's tickets; `GET /tickets?operation_id=..`
///   → the same, only the tickets created under that operation id (a search for list lookups,
///   counted as a lookup).
///
/// Errors are `{"error":{"code":..}}`. Faults are set through [`FakeVendor::faults`].
///
/// # Lifetime
///
/// Clones share one server; it stops when the last clone is dropped or at
/// [`FakeVendor::shutdown`]. The server runs on the tokio runtime that started it.
#[derive(Clone)]
pub struct FakeVendor {
    faults: Faults,
    _running: Arc<Running>,
    addr: SocketAddr,
}

impl fmt::Debug for FakeVendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeVendor")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl FakeVendor {
    /// Options: key and tenant headers, retention, dedupe by operation id, ...
    pub fn builder() -> FakeVendorBuilder {
        FakeVendorBuilder::default()
    }

    /// Starts a vendor with default options on `127.0.0.1:0`.
    ///
    /// # Panics
    ///
    /// If no local port can be bound (use [`FakeVendorBuilder::start`] to handle that error).
    pub async fn start() -> FakeVendor {
        match Self::builder().start().await {
            Ok(vendor) => vendor,
            Err(error) => panic!("fake vendor: cannot bind 127.0.0.1:0: {error}"),
        }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `base_url()` followed by `path` (which should start with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The bound address; it stays the same across [`Faults::refuse_connections`].
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Exact number of tickets created: the side effects a drill asserts.
    pub fn tickets_created(&self) -> u64 {
        lock(&self.shared().store).tickets_created()
    }

    /// Every ticket created, in creation order, all tenants.
    pub fn tickets(&self) -> Vec<Ticket> {
        lock(&self.shared().store).tickets()
    }

    /// Number of `POST /tickets` received, whatever their answer.
    pub fn posts_received(&self) -> u64 {
        lock(&self.shared().store).posts_received
    }

    /// Number of lookups (`GET /operations/...`, `GET /tickets?operation_id=...`) received,
    /// whatever their answer.
    pub fn lookups_received(&self) -> u64 {
        lock(&self.shared().store).lookups_received
    }

    /// Every request received, in arrival order, with its raw key header and body bytes.
    pub fn requests(&self) -> Vec<SeenRequest> {
        lock(&self.shared().store).requests()
    }

    /// Fault controls.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Stops listening and closes every connection now. Idempotent; also done on drop of the
    /// last clone.
    pub fn shutdown(&self) {
        shut_down(self.shared());
    }

    fn shared(&self) -> &VendorState {
        &self.faults.shared
    }
}
