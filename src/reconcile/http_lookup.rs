//! Lookup by URL template.

use std::fmt;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use tower_service::Service;

use super::Reconciler;
use super::answer::{Doc, Secrets, unreadable};
use crate::contract::NotFound;
use crate::contract::{AnswerFormat, parse_retry_after};
use crate::encoding::encode_component;
use crate::evidence::Evidence;
use crate::ledger::{BoxFuture, OperationRecord};
use crate::operation::has_redacted_segment;
use tower::BoxError;

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

/// How an answer (or a list's item) is read into evidence: the identity, status and remote
/// reference pointers and the status vocabulary. Shared by [`HttpLookup`] and
/// [`ListLookup`](super::ListLookup).
#[derive(Clone, Debug)]
pub(super) struct AnswerReader {
    pub(super) id_pointer: Option<String>,
    pub(super) status_pointer: String,
    pub(super) remote_ref_pointer: Option<String>,
    pub(super) statuses: LookupStatuses,
}

impl AnswerReader {
    /// The defaults: `/operation_id`, `/status`, `/resource_id`, [`LookupStatuses::default`].
    pub(super) fn new() -> Self {
        Self {
            id_pointer: Some("/operation_id".into()),
            status_pointer: "/status".into(),
            remote_ref_pointer: Some("/resource_id".into()),
            statuses: LookupStatuses::default(),
        }
    }

    /// The evidence a document (an answer, or one item of a list) gives about `op`.
    pub(super) fn read(
        &self,
        op: &OperationRecord,
        doc: Doc<'_, '_>,
        retry_after: Option<Duration>,
    ) -> Evidence {
        if let Some(p) = &self.id_pointer {
            let named = doc.str_at(p);
            if named.as_deref() != Some(op.operation_id.as_str()) {
                return Evidence::unknown("lookup answer does not name this operation");
            }
        }
        let Some(state) = doc.str_at(&self.status_pointer) else {
            return Evidence::unknown("lookup answer has no status");
        };
        let state = state.as_ref();
        let is = |set: &[String]| set.iter().any(|s| s.eq_ignore_ascii_case(state));
        let remote_ref = || {
            self.remote_ref_pointer
                .as_deref()
                .and_then(|p| doc.scalar_at(p))
        };
        if is(&self.statuses.succeeded) {
            Evidence::Succeeded {
                remote_ref: remote_ref(),
            }
        } else if is(&self.statuses.processing) {
            Evidence::Processing {
                retry_after,
                remote_ref: remote_ref(),
            }
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

/// The answer's `Retry-After`, if it has a usable one.
pub(super) fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| parse_retry_after(v, SystemTime::now()))
}

/// `template` with the operation's values in its placeholders (percent-encoded when `encode`),
/// or why it cannot be: a placeholder the operation has no (non-empty) value for.
pub(crate) fn fill(template: &str, op: &OperationRecord, encode: bool) -> Result<String, String> {
    let placeholders = [
        ("{operation_id}", Some(op.operation_id.as_str())),
        ("{idempotency_key}", Some(op.idempotency_key.as_str())),
        ("{tenant}", Some(op.tenant.as_str())),
        ("{remote_ref}", op.remote_ref.as_deref()),
    ];
    let mut out = template.to_owned();
    for (placeholder, value) in placeholders {
        if !out.contains(placeholder) {
            continue;
        }
        // An empty path segment or query value names no scope (`/tickets/` lists them all).
        match value.filter(|v| !v.is_empty()) {
            Some(v) if encode => out = out.replace(placeholder, &encode_component(v)),
            Some(v) => out = out.replace(placeholder, v),
            None => {
                return Err(format!(
                    "needs {placeholder} and the operation has no value for it"
                ));
            }
        }
    }
    Ok(out)
}

/// The `GET` request for `template`, carrying every scope the configuration names, or why it
/// cannot be made. Fails closed: a request without its scope would be answered from the vendor's
/// default scope, possibly with another customer's object. The reason names the problem, never
/// the value (a tenant may be personal data).
pub(super) fn scoped_request(
    template: &str,
    tenant_header: Option<&HeaderName>,
    op: &OperationRecord,
) -> Result<Request<Full<Bytes>>, String> {
    let mut url = fill(template, op, true).map_err(|why| format!("the URL template {why}"))?;
    // A template that is a path (`/operations/{operation_id}`, as contracts write it) asks
    // the host the write was sent to; one that is a query (`?client_token=...`) asks the
    // write's own URL.
    if url.starts_with('/') || url.starts_with('?') {
        let own = op.request.url.parse::<http::Uri>().ok();
        // The write's own path holds a segment the ledger does not keep (the contract's
        // `secret_path_segments`): asking it would send the marker, not the secret.
        if url.starts_with('?') && own.as_ref().is_some_and(|u| has_redacted_segment(u.path())) {
            return Err(
                "the URL template is relative to the operation's URL, whose path holds a secret segment the ledger does not keep".into(),
            );
        }
        let origin = own
            .as_ref()
            .and_then(|u| Some(format!("{}://{}", u.scheme_str()?, u.authority()?)))
            .ok_or("the URL template is relative and the operation's URL has no origin")?;
        url = match url.starts_with('?') {
            true => format!("{origin}{}{url}", own.as_ref().map_or("/", |u| u.path())),
            false => format!("{origin}{url}"),
        };
    }
    let mut req = Request::get(url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| format!("the lookup URL is invalid: {e}"))?;
    if let Some(h) = tenant_header {
        let tenant = op.tenant.as_str();
        // HTTP strips surrounding whitespace and many vendors read an empty header as absent:
        // either would name another tenant.
        let carried = (!tenant.is_empty() && tenant.trim() == tenant)
            .then(|| HeaderValue::from_str(tenant).ok())
            .flatten();
        match carried {
            Some(v) => {
                req.headers_mut().insert(h.clone(), v);
            }
            None => {
                return Err(format!(
                    "the tenant cannot be sent in header {h} (empty, surrounding whitespace, or not a valid header value)"
                ));
            }
        }
    }
    Ok(req)
}

/// The URL a lookup by `template` asks about `op` (placeholders filled, a relative template
/// resolved against the operation's own URL), as an operator would ask it by hand; why not,
/// when it cannot be made now (a placeholder the operation has no value for yet).
pub(crate) fn lookup_url(template: &str, op: &OperationRecord) -> Result<String, String> {
    scoped_request(template, None, op).map(|req| req.uri().to_string())
}

/// Sends `req` through `client` and reads at most `max_body` bytes of the answer, within
/// `timeout`; the error is the evidence's reason.
pub(super) async fn fetch<S, RB>(
    client: &S,
    req: Request<Full<Bytes>>,
    timeout: Duration,
    max_body: usize,
) -> Result<(http::response::Parts, Bytes), String>
where
    S: Service<Request<Full<Bytes>>, Response = Response<RB>> + Clone,
    S::Error: Into<BoxError>,
    RB: Body,
    RB::Error: Into<BoxError>,
{
    let mut client = client.clone();
    let call = async {
        std::future::poll_fn(|cx| client.poll_ready(cx))
            .await
            .map_err(Into::into)?;
        let res = client.call(req).await.map_err(Into::into)?;
        let (parts, body) = res.into_parts();
        let body = crate::core::collect_limited(body, max_body).await?;
        Ok::<_, BoxError>((parts, body))
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(format!("lookup failed: {e}")),
        Err(_) => Err("lookup timed out".into()),
    }
}

/// Looks an operation up with `GET` on a URL template, e.g.
/// `http://vendor.test/operations/{operation_id}`. A template that is a path
/// (`/operations/{operation_id}`) is asked of the scheme and host the write was sent to.
///
/// Placeholders (values are percent-encoded):
///
/// | placeholder | value |
/// |---|---|
/// | `{operation_id}` | the operation's id |
/// | `{idempotency_key}` | the idempotency key sent to the vendor |
/// | `{remote_ref}` | the vendor's reference of the created object, as recorded on the operation ([`OperationRecord::remote_ref`]) |
/// | `{tenant}` | the operation's tenant |
///
/// An operation without a value for a placeholder (no remote reference yet) gets no lookup: the
/// answer is [`Evidence::Unknown`], nothing proven, never a miss that could read as "not
/// executed".
///
/// The answer's body is read (at most 1 MiB) to classify it. When it resolves the operation
/// ([`Evidence::Succeeded`] or [`Evidence::Rejected`]), it is kept as the note of the `lookup`
/// entry of the operation's evidence log (see [`Reconciler::reconcile_with_answer`]), and shown
/// on the review page and by the CLI's `show`: what the vendor said, for the reviewer. Before it
/// is kept, the value of every [secret response field](Self::secret_response_fields) and
/// [secret body field](Self::secret_body_fields) becomes `[redacted]`, then it is cut to
/// [`MAX_KEPT_ANSWER`](Self::MAX_KEPT_ANSWER) bytes; an answer that may hold such a field but is
/// neither JSON nor XML is not kept.
///
/// The answer counts as [`Evidence::Succeeded`] only when it is a 2xx document (JSON, or XML
/// with [`format`](Self::format)) that names this operation at the identity pointer (default
/// `/operation_id`) and has a succeeded status at the status pointer (default `/status`); the
/// remote reference is read at `/resource_id` by default. A 404 or 410 is weak evidence ([`Evidence::Unknown`]) unless
/// [`not_found`](Self::not_found) says the vendor guarantees otherwise. Credentials are applied
/// by the client stack (`client`), never stored in the ledger.
///
/// Lookups fail closed: when the request cannot carry its scope (a [tenant
/// header](Self::tenant_header) whose value is empty or not a valid header value, a placeholder
/// the operation has no value for, e.g. `{remote_ref}` before the vendor named one) no request is
/// made and the answer is [`Evidence::Unknown`] naming the problem. An unscoped lookup would be
/// answered from the vendor's default scope, where another customer's object could mark this
/// operation succeeded.
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
    reader: AnswerReader,
    not_found: NotFound,
    timeout: Duration,
    max_body: usize,
    format: AnswerFormat,
    secrets: Secrets,
}

impl<S> fmt::Debug for HttpLookup<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpLookup")
            .field("template", &self.template)
            .field("tenant_header", &self.tenant_header)
            .field("id_pointer", &self.reader.id_pointer)
            .field("status_pointer", &self.reader.status_pointer)
            .field("remote_ref_pointer", &self.reader.remote_ref_pointer)
            .field("not_found", &self.not_found)
            .field("format", &self.format)
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
            reader: AnswerReader::new(),
            not_found: NotFound::Unknown,
            timeout: Duration::from_secs(10),
            max_body: 1024 * 1024,
            format: AnswerFormat::Json,
            secrets: Secrets::default(),
        }
    }

    /// How much of a resolving answer's body is kept in the evidence log (16 KiB).
    pub const MAX_KEPT_ANSWER: usize = 16 * 1024;

    /// Fields whose values become `[redacted]` in the answer kept in the evidence log: bare
    /// names (every member of that name) or JSON pointers, as the contract's
    /// [`secret_response_fields`]. The builder passes the contract's own.
    ///
    /// [`secret_response_fields`]: crate::Contract::secret_response_fields
    pub fn secret_response_fields(mut self, fields: Vec<String>) -> Self {
        self.secrets.response_fields = fields;
        self
    }

    /// The contract's [`secret_body_fields`], secret in an answer too: redacted in the kept
    /// answer like the [secret response fields](Self::secret_response_fields). The builder
    /// passes the contract's own.
    ///
    /// [`secret_body_fields`]: crate::Contract::secret_body_fields
    pub fn secret_body_fields(mut self, fields: Vec<String>) -> Self {
        self.secrets.body_fields = fields;
        self
    }

    /// How the answer is parsed (default [`AnswerFormat::Json`]). With [`AnswerFormat::Xml`]
    /// the pointers are paths of element names (see
    /// [`LookupAnswer`](crate::contract::LookupAnswer)).
    pub fn format(mut self, format: AnswerFormat) -> Self {
        self.format = format;
        self
    }

    /// Sends the operation's tenant in this header. A tenant the header cannot carry (empty,
    /// surrounding whitespace, control characters) makes no lookup: the evidence is
    /// [`Evidence::Unknown`].
    pub fn tenant_header(mut self, name: HeaderName) -> Self {
        self.tenant_header = Some(name);
        self
    }

    /// Where the answer names the operation (default `/operation_id`); `None` to accept answers
    /// whose URL alone identifies the operation.
    pub fn id_pointer(mut self, pointer: Option<&str>) -> Self {
        self.reader.id_pointer = pointer.map(str::to_owned);
        self
    }

    /// Where the status sits (default `/status`).
    pub fn status_pointer(mut self, pointer: &str) -> Self {
        self.reader.status_pointer = pointer.to_owned();
        self
    }

    /// Where the created object's reference sits (default `/resource_id`).
    pub fn remote_ref_pointer(mut self, pointer: &str) -> Self {
        self.reader.remote_ref_pointer = Some(pointer.to_owned());
        self
    }

    /// The status vocabulary.
    pub fn statuses(mut self, statuses: LookupStatuses) -> Self {
        self.reader.statuses = statuses;
        self
    }

    /// What a 404 or 410 means (default [`NotFound::Unknown`]: weak evidence). Read the danger
    /// of [`NotFound::NotExecuted`] before setting it.
    pub fn not_found(mut self, means: NotFound) -> Self {
        self.not_found = means;
        self
    }

    /// How long one lookup may take (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn judge(
        &self,
        op: &OperationRecord,
        status: StatusCode,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Evidence {
        let retry_after = retry_after(headers);
        if status == StatusCode::NOT_FOUND || status == StatusCode::GONE {
            return match self.not_found {
                NotFound::NotExecuted => Evidence::NotExecuted {
                    why: format!(
                        "lookup: {status} (the contract says not found means never registered)"
                    ),
                    retry_after,
                },
                NotFound::Unknown => Evidence::Unknown {
                    why: format!("lookup: {status} (not found is not proof of non-execution)"),
                    retry_after,
                },
            };
        }
        if !status.is_success() {
            return Evidence::Unknown {
                why: format!("lookup answered {status}"),
                retry_after,
            };
        }
        if self.format == AnswerFormat::Xml {
            let Some(doc) = crate::xml::parse_bytes(body) else {
                return Evidence::unknown(unreadable(self.format, "lookup"));
            };
            return self.reader.read(op, Doc::Xml(doc.root()), retry_after);
        }
        let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Evidence::unknown(unreadable(self.format, "lookup"));
        };
        self.reader.read(op, Doc::Json(&doc), retry_after)
    }

    /// The answer body as kept in the evidence log: secret fields redacted, at most
    /// [`MAX_KEPT_ANSWER`](Self::MAX_KEPT_ANSWER) bytes (cut at a character boundary).
    fn kept_answer(&self, body: &Bytes) -> String {
        self.secrets.kept_body(body, Self::MAX_KEPT_ANSWER)
    }
}

pub(super) fn truncate(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
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
        Box::pin(async move { self.reconcile_with_answer(op).await.0 })
    }

    fn reconcile_with_answer<'a>(
        &'a self,
        op: &'a OperationRecord,
    ) -> BoxFuture<'a, (Evidence, Option<String>)> {
        Box::pin(async move {
            let req = match scoped_request(&self.template, self.tenant_header.as_ref(), op) {
                Ok(req) => req,
                Err(why) => {
                    tracing::warn!(operation = %op.operation_id, %why, "lookup not made: it cannot carry its scope");
                    return (Evidence::unknown(format!("lookup not made: {why}")), None);
                }
            };
            match fetch(&self.client, req, self.timeout, self.max_body).await {
                Ok((parts, body)) => {
                    let evidence = self.judge(op, parts.status, &parts.headers, &body);
                    let resolves = matches!(
                        evidence,
                        Evidence::Succeeded { .. } | Evidence::Rejected { .. }
                    );
                    let kept = resolves.then(|| self.kept_answer(&body));
                    (evidence, kept)
                }
                Err(why) => (Evidence::unknown(why), None),
            }
        })
    }
}

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use super::*;
    use crate::ledger::Created;
    use crate::testing::FakeVendor;
    use crate::testing::drill::http_client;
    use crate::{MemoryLedger, Operation, OperationId, RecoverableWrite};

    /// A row for `tenant` naming operation `id`, as the layer would create it.
    async fn row(vendor: &FakeVendor, tenant: &str, id: &str) -> OperationRecord {
        let layer = RecoverableWrite::builder(MemoryLedger::new())
            .build()
            .expect("a valid configuration")
            .layer();
        let op = Operation::new(tenant, "create_ticket", id).with_id(OperationId::new(id));
        let req = Request::post(vendor.url("/tickets"))
            .body(Bytes::from_static(br#"{"device_id":"E17"}"#))
            .expect("request");
        let new = layer.new_operation(&op, &req);
        match layer.ledger().create_or_get(new).await.expect("create") {
            Created::New(r) | Created::Existing(r) => r,
        }
    }

    /// Another customer (the vendor's default scope) created an operation with the same id.
    async fn default_scope_has(vendor: &FakeVendor, id: &str) {
        let body = format!(r#"{{"operation_id":"{id}","device_id":"E99"}}"#);
        let req = Request::post(vendor.url("/tickets"))
            .header("idempotency-key", "k-other-customer")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let res = http_client().call(req).await.expect("create");
        assert_eq!(res.status(), StatusCode::CREATED);
    }

    fn unknown_why(evidence: &Evidence) -> &str {
        match evidence {
            Evidence::Unknown { why, .. } => why,
            other => panic!("expected Unknown, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_tenant_the_header_cannot_carry_makes_no_lookup_and_is_unknown() {
        let vendor = FakeVendor::start().await;
        default_scope_has(&vendor, "op-shared").await;
        let lookup = HttpLookup::new(
            http_client(),
            format!("{}/operations/{{operation_id}}", vendor.base_url()),
        )
        .tenant_header(HeaderName::from_static("x-tenant"));
        for tenant in ["bad\nvalue", "nul\0", "", " padded "] {
            let op = row(&vendor, tenant, "op-shared").await;
            let evidence = lookup.reconcile(&op).await;
            let why = unknown_why(&evidence);
            assert!(why.contains("x-tenant"), "{tenant:?}: {why}");
            assert!(why.contains("not made"), "{tenant:?}: {why}");
            if !tenant.trim().is_empty() {
                assert!(
                    !why.contains(tenant.trim()),
                    "the value is not echoed: {why}"
                );
            }
        }
        assert_eq!(vendor.lookups_received(), 0, "no unscoped lookup was made");

        // A tenant the header can carry is looked up in its own scope: not another's operation.
        let op = row(&vendor, "tenant-a", "op-shared").await;
        let evidence = lookup.reconcile(&op).await;
        assert!(matches!(evidence, Evidence::Unknown { .. }), "{evidence:?}");
        assert_eq!(vendor.lookups_received(), 1);
    }

    #[tokio::test]
    async fn a_url_placeholder_without_a_value_makes_no_lookup() {
        let vendor = FakeVendor::start().await;
        let lookup = HttpLookup::new(
            http_client(),
            format!("{}/tickets/{{remote_ref}}", vendor.base_url()),
        );
        let op = row(&vendor, "tenant-a", "op-no-ref").await;
        let why = unknown_why(&lookup.reconcile(&op).await).to_owned();
        assert!(why.contains("remote_ref"), "{why}");
        let by_tenant = HttpLookup::new(
            http_client(),
            format!(
                "{}/t/{{tenant}}/operations/{{operation_id}}",
                vendor.base_url()
            ),
        );
        let op = row(&vendor, "", "op-empty-tenant").await;
        let why = unknown_why(&by_tenant.reconcile(&op).await).to_owned();
        assert!(why.contains("tenant"), "{why}");
        assert!(vendor.requests().is_empty(), "nothing was sent");
    }

    /// Issue 27 item 8: a write whose URL path holds a secret segment is stored with the
    /// marker; a lookup relative to that URL would send the marker, so it is not made.
    #[tokio::test]
    async fn a_lookup_relative_to_a_url_with_a_secret_segment_is_not_made() {
        let vendor = FakeVendor::start().await;
        let mut op = row(&vendor, "tenant-a", "op-hook").await;
        let mut frozen = (*op.request).clone();
        frozen.url = vendor.url("/hooks/[redacted]/tickets");
        op.request = std::sync::Arc::new(frozen);
        let relative = HttpLookup::new(http_client(), "?operation_id={operation_id}");
        let why = unknown_why(&relative.reconcile(&op).await).to_owned();
        assert!(
            why.contains("not made") && why.contains("secret segment"),
            "{why}"
        );
        assert!(vendor.requests().is_empty(), "nothing was sent");
        // A path template asks the write's host only: it is made.
        let by_path = HttpLookup::new(http_client(), "/operations/{operation_id}");
        let _ = by_path.reconcile(&op).await;
        assert_eq!(vendor.lookups_received(), 1);
    }

    #[test]
    fn the_kept_answer_is_bounded_and_without_secrets() {
        let lookup = HttpLookup::new((), "/o/{operation_id}")
            .secret_body_fields(vec!["/client_secret".into()])
            .secret_response_fields(vec!["token".into()]);
        let kept = lookup.kept_answer(&Bytes::from_static(
            br#"{"id":"W1","client_secret":"cs_live_x","deep":[{"token":"t_live_y"}]}"#,
        ));
        assert_eq!(
            kept,
            r#"lookup answer: {"client_secret":"[redacted]","deep":[{"token":"[redacted]"}],"id":"W1"}"#
        );
        // An answer that names a secret field but cannot be read is not kept at all.
        let kept = lookup.kept_answer(&Bytes::from_static(b"token=t_live_y&id=W1"));
        assert!(!kept.contains("t_live_y"), "{kept}");
        assert!(kept.contains("not kept"), "{kept}");
        // Multi-byte characters across the bound: cut at a character boundary, and marked.
        let big = "é".repeat(HttpLookup::<()>::MAX_KEPT_ANSWER);
        let kept = lookup.kept_answer(&Bytes::from(big));
        assert!(kept.ends_with(" [cut]"), "{}", &kept[kept.len() - 10..]);
        let body = kept
            .trim_start_matches("lookup answer: ")
            .trim_end_matches(" [cut]");
        assert!(body.len() <= HttpLookup::<()>::MAX_KEPT_ANSWER);
        assert!(body.chars().all(|c| c == 'é'));
    }
}
