//! Fault injection: what the fake vendor does wrong, and when.
//!
//! Counted faults apply to the next `n` matching requests and then stop; setting a counted
//! fault again replaces the previous setting of the same kind. Post-commit faults
//! ([`Faults::drop_after_commit`], [`Faults::status_after_commit`], [`Faults::delay_response`])
//! only match requests that actually create a ticket: a same-key replay or a conflict does not
//! use them up. Pre-execution faults ([`Faults::reject_next`], [`Faults::delay_before_commit`])
//! match any create that gets that far. All controls are thread-safe and take effect at once, while the server runs.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use super::store::{OperationStatus, StoredResponse};
use super::vendor::{VendorState, lock};

/// A canned refusal, answered before the idempotency logic runs: nothing is created and nothing
/// is stored against the key (like Stripe's 429, which runs before idempotency).
#[derive(Debug, Clone)]
pub struct Rejection {
    status: StatusCode,
    code: String,
    retry_after: Option<String>,
    headers: Vec<(String, String)>,
}

impl Rejection {
    /// A refusal with `status` and body `{"error":{"code":code}}`.
    ///
    /// 429 and 503 get `Retry-After: 1` by default; change it with [`Rejection::retry_after`].
    pub fn new(status: StatusCode, code: impl Into<String>) -> Self {
        let retry_after = matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        )
        .then(|| "1".to_owned());
        Self {
            status,
            code: code.into(),
            retry_after,
            headers: Vec::new(),
        }
    }

    /// Sets the raw `Retry-After` value: delay-seconds (`"2"`) or any HTTP-date form.
    pub fn retry_after(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    /// Removes the `Retry-After` header.
    pub fn without_retry_after(mut self) -> Self {
        self.retry_after = None;
        self
    }

    /// Adds a response header, e.g. `Stripe-Should-Retry: true` or `Transient-Error: true`.
    /// Invalid names or values are skipped when the response is built.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn extra_headers(&self) -> &[(String, String)] {
        &self.headers
    }

    pub(crate) fn to_response(&self) -> StoredResponse {
        let mut response = StoredResponse::error(self.status, &self.code);
        response.retry_after = self.retry_after.clone();
        response
    }
}

/// A fault that applies to the next `remaining` matching requests.
#[derive(Debug, Clone)]
struct Counted<T> {
    value: T,
    remaining: u64,
}

fn take<T: Clone>(slot: &mut Option<Counted<T>>) -> Option<T> {
    let counted = slot.as_mut()?;
    if counted.remaining == 0 {
        *slot = None;
        return None;
    }
    counted.remaining -= 1;
    let value = counted.value.clone();
    if counted.remaining == 0 {
        *slot = None;
    }
    Some(value)
}

fn set<T>(slot: &mut Option<Counted<T>>, value: T, n: u64) {
    *slot = (n > 0).then_some(Counted {
        value,
        remaining: n,
    });
}

/// The fault settings, under their own mutex (never held together with the store's).
#[derive(Debug, Default)]
pub(crate) struct FaultPlan {
    drop_after_commit: Option<Counted<()>>,
    status_after_commit: Option<Counted<StatusCode>>,
    delay_response: Option<Counted<Duration>>,
    delay_before_commit: Option<Counted<Duration>>,
    lookup_not_found: Option<Counted<()>>,
    lookup_delay: Option<Counted<Duration>>,
    reject: Option<Counted<Rejection>>,
    /// `Authorization` values the vendor no longer accepts.
    revoked: Vec<String>,
    pub(crate) cache_error_response: bool,
    pub(crate) hold_processing: bool,
}

/// What happens to a committed create after the commit.
#[derive(Debug, Default)]
pub(crate) struct AfterCommit {
    pub(crate) delay: Option<Duration>,
    pub(crate) drop_connection: bool,
    pub(crate) status: Option<StatusCode>,
    pub(crate) cache_error_response: bool,
}

impl FaultPlan {
    pub(crate) fn new(cache_error_response: bool) -> Self {
        Self {
            cache_error_response,
            ..Self::default()
        }
    }

    pub(crate) fn take_rejection(&mut self) -> Option<Rejection> {
        take(&mut self.reject)
    }

    pub(crate) fn take_after_commit(&mut self) -> AfterCommit {
        AfterCommit {
            delay: take(&mut self.delay_response),
            drop_connection: take(&mut self.drop_after_commit).is_some(),
            status: take(&mut self.status_after_commit),
            cache_error_response: self.cache_error_response,
        }
    }

    pub(crate) fn take_delay_before_commit(&mut self) -> Option<Duration> {
        take(&mut self.delay_before_commit)
    }

    pub(crate) fn take_lookup_delay(&mut self) -> Option<Duration> {
        take(&mut self.lookup_delay)
    }

    /// Whether the request's credential was revoked.
    pub(crate) fn is_revoked(&self, headers: &http::HeaderMap) -> bool {
        headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| self.revoked.iter().any(|r| r == v))
    }

    pub(crate) fn take_lookup_not_found(&mut self) -> bool {
        take(&mut self.lookup_not_found).is_some()
    }
}

/// Fault controls of a running [`FakeVendor`](super::FakeVendor).
///
/// Obtained from [`FakeVendor::faults`](super::FakeVendor::faults). Cloning gives another
/// handle to the same vendor; a clone does not keep the server running.
#[derive(Clone)]
pub struct Faults {
    pub(crate) shared: Arc<VendorState>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("plan", &*lock(&self.shared.plan))
            .finish()
    }
}

impl Faults {
    fn plan(&self) -> std::sync::MutexGuard<'_, FaultPlan> {
        lock(&self.shared.plan)
    }

    /// The next `n` creates commit the ticket (counted, stored against the key, operation
    /// record written) and then the TCP connection is closed without any response: the client
    /// sees an incomplete message, never a status. Drill D1.
    pub fn drop_after_commit(&self, n: u64) {
        set(&mut self.plan().drop_after_commit, (), n);
    }

    /// The next `n` creates commit and then answer `status` (a gateway-style 502/504, or 500)
    /// with `{"error":{"code":..}}`. Unless [`Faults::cache_error_response`] is on, the key
    /// keeps the real first response (the gateway lost it, the vendor did not), so a same-key
    /// replay gets the 201. Drill D4.
    pub fn status_after_commit(&self, status: StatusCode, n: u64) {
        set(&mut self.plan().status_after_commit, status, n);
    }

    /// When on, the error answered by [`Faults::status_after_commit`] is what the key stores
    /// as its first response (Stripe v1 caches 500s): a same-key replay gets the same error.
    /// Drill D5.
    pub fn cache_error_response(&self, on: bool) {
        self.plan().cache_error_response = on;
    }

    /// The next `n` creates commit and then wait `delay` before answering (client timeouts).
    /// The key stays "in progress" during the wait, so a concurrent same-key create gets 409.
    /// Combines with the other post-commit faults (the delay comes first).
    pub fn delay_response(&self, delay: Duration, n: u64) {
        set(&mut self.plan().delay_response, delay, n);
    }

    /// The next `n` valid creates wait `delay` before executing (a slow or queued vendor): the
    /// key is not yet taken and lookups find nothing meanwhile. The create executes after the
    /// wait even if the client has given up: a late commit. Drills D6, D16.
    pub fn delay_before_commit(&self, delay: Duration, n: u64) {
        set(&mut self.plan().delay_before_commit, delay, n);
    }

    /// The next `n` lookups (`GET /operations/...`) answer 404 even if the record exists.
    /// Drill D2.
    pub fn lookup_not_found(&self, n: u64) {
        set(&mut self.plan().lookup_not_found, (), n);
    }

    /// The next `n` lookups wait `delay` before answering. Drill D6.
    pub fn lookup_delay(&self, delay: Duration, n: u64) {
        set(&mut self.plan().lookup_delay, delay, n);
    }

    /// While on, new tickets are created in PROCESSING: the create answers 202
    /// `{"operation_id":..,"status":"PROCESSING"}` with `Retry-After`, and lookups say
    /// PROCESSING with `resource_id: null`. The ticket is created and counted at once.
    /// The 202 is the key's stored first response: a same-key replay gets it again even after
    /// [`Faults::complete_processing`], as a Stripe-v1-style vendor would; only the lookup
    /// reports completion. Drill D3.
    pub fn hold_processing(&self, on: bool) {
        self.plan().hold_processing = on;
    }

    /// Moves every PROCESSING operation to SUCCEEDED (its `state_version` goes up by one).
    /// Returns how many moved. Nothing new is counted: the tickets were counted at creation.
    pub fn complete_processing(&self) -> usize {
        lock(&self.shared.store).finish_processing(OperationStatus::Succeeded, None)
    }

    /// Moves every PROCESSING operation to REJECTED, with `reason` in the lookup body, so
    /// lookups give explicit rejection evidence. Returns how many moved. The tickets stay
    /// counted in [`FakeVendor::tickets_created`](super::FakeVendor::tickets_created) (they were
    /// created when accepted) and are listed with status REJECTED.
    pub fn fail_processing(&self, reason: &str) -> usize {
        lock(&self.shared.store).finish_processing(OperationStatus::Rejected, Some(reason))
    }

    /// The next `n` creates are answered `status` with `{"error":{"code":code}}`, before the
    /// idempotency logic: nothing is created and nothing is stored against the key (401, 403,
    /// 429 with `Retry-After: 1`, ...). Drills D22, D26.
    pub fn reject_next(&self, status: StatusCode, code: &str, n: u64) {
        self.reject_next_with(Rejection::new(status, code), n);
    }

    /// Like [`Faults::reject_next`], with a custom `Retry-After` or vendor headers. Drill D21.
    pub fn reject_next_with(&self, rejection: Rejection, n: u64) {
        set(&mut self.plan().reject, rejection, n);
    }

    /// From now on, every request (create or lookup) whose `Authorization` header equals
    /// `credential` is answered 401 `{"error":{"code":"invalid_credentials"}}`, before anything
    /// else: nothing is created. Drill D26.
    pub fn revoke_credential(&self, credential: &str) {
        self.plan().revoked.push(credential.to_owned());
    }

    /// Accepts every credential again.
    pub fn restore_credentials(&self) {
        self.plan().revoked.clear();
    }

    /// Forgets every stored idempotency key now, in-progress ones included, as if the
    /// retention had passed. Operation records stay. Drill D8.
    pub fn expire_keys(&self) {
        lock(&self.shared.store).expire_keys();
    }

    /// Forgets every operation record (lookups by id or key answer 404 afterwards); tickets and
    /// keys stay. Drill D9.
    pub fn clean_operation_records(&self) {
        lock(&self.shared.store).clean_operation_records();
    }

    /// `true`: close the listening socket (new connects get ECONNREFUSED) and close every open
    /// connection, so a pooled client cannot reuse one. `false`: listen again on the same
    /// address. Takes effect before it returns. Drill D23.
    ///
    /// A client's connection pool learns asynchronously that its idle connections were closed;
    /// drills that need a guaranteed connect error should use a client without idle pooling.
    ///
    /// # Errors
    ///
    /// Re-binding the port can fail if another socket took it meanwhile, or after
    /// [`FakeVendor::shutdown`](super::FakeVendor::shutdown).
    pub fn refuse_connections(&self, refuse: bool) -> io::Result<()> {
        if refuse {
            self.shared.acceptor.close();
            self.shared.close_connections();
            Ok(())
        } else {
            self.shared.acceptor.reopen()
        }
    }

    /// Clears every fault: counted faults, flags (processing hold; error caching back to the
    /// builder's setting) and a refusal of connections.
    ///
    /// # Errors
    ///
    /// As [`Faults::refuse_connections`] when the listener has to be reopened.
    pub fn clear(&self) -> io::Result<()> {
        let fresh = self.shared.fresh_plan();
        *self.plan() = fresh;
        self.shared.acceptor.reopen()
    }
}
