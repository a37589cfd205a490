//! Lookup by URL template.

use std::fmt;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use tower_service::Service;

use super::Reconciler;
use crate::BoxError;
use crate::contract::parse_retry_after;
use crate::evidence::Evidence;
use crate::ledger::{BoxFuture, OperationRecord};

/// Which values of the lookup's status field mean what (compared case-insensitively).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupStatuses {
    /// Done (default `SUCCEEDED`, `SUCCESS`, `COMPLETED`, `DONE`).
    pub succeeded: Vec<String>,
    /// Still running (default `PROCESSING`, `PENDING`, `IN_PROGRESS`, `RUNNING`).
    pub processing: Vec<String>,
    /// Authoritatively refused (default `REJECTED`, `FAILED`, `DECLINED`).
    pub rejected: Vec<String>,
    /// Authoritatively never executed (default `NOT_EXECUTED`).
    pub not_executed: Vec<String>,
}

impl Default for LookupStatuses {
    fn default() -> Self {
        let v = |xs: &[&str]| xs.iter().map(|s| (*s).to_owned()).collect();
        Self {
            succeeded: v(&["SUCCEEDED", "SUCCESS", "COMPLETED", "DONE"]),
            processing: v(&["PROCESSING", "PENDING", "IN_PROGRESS", "RUNNING"]),
            rejected: v(&["REJECTED", "FAILED", "DECLINED"]),
            not_executed: v(&["NOT_EXECUTED"]),
        }
    }
}

/// Looks an operation up with `GET` on a URL template, e.g.
/// `http://vendor.test/operations/{operation_id}` (placeholders: `{operation_id}`,
/// `{idempotency_key}`, `{tenant}`, `{remote_ref}`; values are percent-encoded).
///
/// The answer counts as [`Evidence::Succeeded`] only when it is a 2xx JSON document that names
/// this operation at the identity pointer (default `/operation_id`) and has a succeeded status at
/// the status pointer (default `/status`); the remote reference is read at `/resource_id` by
/// default. A 404 or 410 is weak evidence ([`Evidence::Unknown`]). Credentials are applied by the
/// client stack (`client`), never stored in the ledger.
///
/// ```
/// use recoverable_write::HttpLookup;
/// # fn build<S>(client: S) -> HttpLookup<S> {
/// HttpLookup::new(client, "http://vendor.test/operations/{operation_id}")
///     .tenant_header(http::HeaderName::from_static("x-tenant"))
///     .remote_ref_pointer("/resource_id")
/// # }
/// ```
#[derive(Clone)]
pub struct HttpLookup<S> {
    client: S,
    template: String,
    tenant_header: Option<HeaderName>,
    id_pointer: Option<String>,
    status_pointer: String,
    remote_ref_pointer: Option<String>,
    statuses: LookupStatuses,
    timeout: Duration,
    max_body: usize,
}

impl<S> fmt::Debug for HttpLookup<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpLookup")
            .field("template", &self.template)
            .field("tenant_header", &self.tenant_header)
            .field("id_pointer", &self.id_pointer)
            .field("status_pointer", &self.status_pointer)
            .field("remote_ref_pointer", &self.remote_ref_pointer)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<S> HttpLookup<S> {
    /// A lookup through `client` (any tower service taking `http::Request<Full<Bytes>>`).
    pub fn new(client: S, url_template: impl Into<String>) -> Self {
        Self {
            client,
            template: url_template.into(),
            tenant_header: None,
            id_pointer: Some("/operation_id".into()),
            status_pointer: "/status".into(),
            remote_ref_pointer: Some("/resource_id".into()),
            statuses: LookupStatuses::default(),
            timeout: Duration::from_secs(10),
            max_body: 1024 * 1024,
        }
    }

    /// Sends the operation's tenant in this header.
    pub fn tenant_header(mut self, name: HeaderName) -> Self {
        self.tenant_header = Some(name);
        self
    }

    /// Where the answer names the operation (default `/operation_id`); `None` to accept answers
    /// whose URL alone identifies the operation.
    pub fn id_pointer(mut self, pointer: Option<&str>) -> Self {
        self.id_pointer = pointer.map(str::to_owned);
        self
    }

    /// Where the status sits (default `/status`).
    pub fn status_pointer(mut self, pointer: &str) -> Self {
        self.status_pointer = pointer.to_owned();
        self
    }

    /// Where the created object's reference sits (default `/resource_id`).
    pub fn remote_ref_pointer(mut self, pointer: &str) -> Self {
        self.remote_ref_pointer = Some(pointer.to_owned());
        self
    }

    /// The status vocabulary.
    pub fn statuses(mut self, statuses: LookupStatuses) -> Self {
        self.statuses = statuses;
        self
    }

    /// How long one lookup may take (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn url_for(&self, op: &OperationRecord) -> String {
        self.template
            .replace("{operation_id}", &encode(op.operation_id.as_str()))
            .replace("{idempotency_key}", &encode(op.idempotency_key.as_str()))
            .replace("{tenant}", &encode(op.tenant.as_str()))
            .replace(
                "{remote_ref}",
                &encode(op.remote_ref.as_deref().unwrap_or_default()),
            )
    }

    fn judge(
        &self,
        op: &OperationRecord,
        status: StatusCode,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Evidence {
        let retry_after = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        if status == StatusCode::NOT_FOUND || status == StatusCode::GONE {
            return Evidence::Unknown {
                why: format!("lookup: {status} (not found is not proof of non-execution)"),
                retry_after,
            };
        }
        if !status.is_success() {
            return Evidence::Unknown {
                why: format!("lookup answered {status}"),
                retry_after,
            };
        }
        let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Evidence::unknown("lookup answered 2xx without a JSON document");
        };
        if let Some(p) = &self.id_pointer {
            let named = doc.pointer(p).and_then(|v| v.as_str());
            if named != Some(op.operation_id.as_str()) {
                return Evidence::unknown("lookup answer does not name this operation");
            }
        }
        let Some(state) = doc.pointer(&self.status_pointer).and_then(|v| v.as_str()) else {
            return Evidence::unknown("lookup answer has no status");
        };
        let is = |set: &[String]| set.iter().any(|s| s.eq_ignore_ascii_case(state));
        if is(&self.statuses.succeeded) {
            let remote_ref = self.remote_ref_pointer.as_deref().and_then(|p| {
                doc.pointer(p).and_then(|v| match v {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
            });
            Evidence::Succeeded { remote_ref }
        } else if is(&self.statuses.processing) {
            Evidence::Processing { retry_after }
        } else if is(&self.statuses.rejected) {
            Evidence::Rejected {
                reason: format!("lookup: {}", truncate(state)),
            }
        } else if is(&self.statuses.not_executed) {
            Evidence::NotExecuted {
                why: format!("lookup: {}", truncate(state)),
                retry_after,
            }
        } else {
            Evidence::unknown(format!(
                "lookup status {:?} not understood",
                truncate(state)
            ))
        }
    }
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl<S, RB> Reconciler for HttpLookup<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<RB>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    fn reconcile<'a>(&'a self, op: &'a OperationRecord) -> BoxFuture<'a, Evidence> {
        Box::pin(async move {
            let url = self.url_for(op);
            let mut req = match Request::get(url).body(Full::new(Bytes::new())) {
                Ok(r) => r,
                Err(e) => return Evidence::unknown(format!("lookup URL invalid: {e}")),
            };
            if let Some(h) = &self.tenant_header
                && let Ok(v) = HeaderValue::from_str(op.tenant.as_str())
            {
                req.headers_mut().insert(h.clone(), v);
            }
            let mut client = self.client.clone();
            let call = async {
                std::future::poll_fn(|cx| client.poll_ready(cx))
                    .await
                    .map_err(Into::into)?;
                let res = client.call(req).await.map_err(Into::into)?;
                let (parts, body) = res.into_parts();
                let body = Limited::new(body, self.max_body)
                    .collect()
                    .await?
                    .to_bytes();
                Ok::<_, BoxError>((parts, body))
            };
            match tokio::time::timeout(self.timeout, call).await {
                Ok(Ok((parts, body))) => self.judge(op, parts.status, &parts.headers, &body),
                Ok(Err(e)) => Evidence::unknown(format!("lookup failed: {e}")),
                Err(_) => Evidence::unknown("lookup timed out"),
            }
        })
    }
}
