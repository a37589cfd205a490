//! Lookup by a list or search filtered by a reference the client attached.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use tower_service::Service;

use super::Reconciler;
use super::answer::{Doc, Secrets, unreadable};
use super::http_lookup::{AnswerReader, LookupStatuses, fetch, fill, retry_after, scoped_request};
use crate::contract::AnswerFormat;
use crate::evidence::Evidence;
use crate::ledger::{BoxFuture, OperationRecord};
use tower::BoxError;

/// Looks an operation up in a list or search the vendor filters by a reference the client
/// attached to the write: Stripe's metadata search, a `GET /tickets?operation_id=...`, EC2's
/// `client-token` filter. The contract's
/// [`Lookup::ListByReference`](crate::contract::Lookup::ListByReference) builds one.
///
/// The list URL takes the placeholders of [`HttpLookup`](super::HttpLookup) (`{operation_id}`,
/// `{idempotency_key}`, `{tenant}`, `{remote_ref}`, values percent-encoded; a path or a query is
/// relative to the write's own URL). The answer is a JSON document, or an XML one with
/// [`format`](Self::format); the items are the array at [`items_pointer`](Self::items_pointer)
/// (default: the document itself is the array), or in XML the elements that path selects
/// (default: the root element's children).
///
/// An item carries the operation's reference when the value at
/// [`reference_pointer`](Self::reference_pointer) (a string, or a number) equals the
/// [`reference`](Self::reference) template filled with the operation's values (default
/// `{operation_id}`, not encoded). Without a reference pointer every item carries it: the
/// URL's filter already selected the operation's items.
///
/// | items carrying the reference | evidence |
/// |---|---|
/// | exactly one | that item read like an [`HttpLookup`](super::HttpLookup) answer: the status at `/status`, the remote reference at `/resource_id`, the [`LookupStatuses`] vocabulary (pointers relative to the item) |
/// | none (an empty list, a 404) | [`Evidence::Unknown`]: never proof of non-execution |
/// | several | [`Evidence::Unknown`], with a warning: none is picked |
///
/// **An empty list is never read as "not executed"**: a list or search is usually eventually
/// consistent (and may page, or lag the write by minutes), so a miss proves nothing. Before the
/// contract's `settle_secs` have passed since the first send, the recovery engine does not even
/// count the miss: no evidence, no query used, the operation is looked at again once the list
/// has settled (see [`Contract::settle_secs`](crate::Contract::settle_secs)). After that it is
/// weak evidence: the operation stays `UNKNOWN` until a lookup finds it, a safe same-key replay
/// settles it, or the recovery window ends and a human decides.
///
/// Like [`HttpLookup`](super::HttpLookup), the lookup fails closed (a tenant the header cannot
/// carry, a placeholder the operation has no value for: no request, [`Evidence::Unknown`]), and
/// an answer that resolves the operation is kept in the evidence log (the item, not the list),
/// bounded and with the [secret response fields](Self::secret_response_fields) and
/// [secret body fields](Self::secret_body_fields) replaced by `[redacted]`.
///
/// ```
/// use recoverable_write::ListLookup;
/// # fn build<S>(client: S) -> ListLookup<S> {
/// ListLookup::new(client, "/tickets?operation_id={operation_id}")
///     .items_pointer(Some("/tickets"))
///     .reference_pointer(Some("/operation_id"))
///     .remote_ref_pointer("/id")
/// # }
/// ```
#[derive(Clone)]
pub struct ListLookup<S> {
    client: S,
    template: String,
    items_pointer: Option<String>,
    reference_pointer: Option<String>,
    reference: String,
    tenant_header: Option<HeaderName>,
    reader: AnswerReader,
    timeout: Duration,
    max_body: usize,
    format: AnswerFormat,
    secrets: Secrets,
}

impl<S> fmt::Debug for ListLookup<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListLookup")
            .field("template", &self.template)
            .field("items_pointer", &self.items_pointer)
            .field("reference_pointer", &self.reference_pointer)
            .field("reference", &self.reference)
            .field("tenant_header", &self.tenant_header)
            .field("status_pointer", &self.reader.status_pointer)
            .field("remote_ref_pointer", &self.reader.remote_ref_pointer)
            .field("format", &self.format)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<S> ListLookup<S> {
    /// A list lookup through `client` (any tower service taking `http::Request<Full<Bytes>>`):
    /// the answer is the array of items, every item carries the reference (the URL filters),
    /// each is read with the defaults of [`HttpLookup`](super::HttpLookup).
    pub fn new(client: S, url_template: impl Into<String>) -> Self {
        let reader = AnswerReader {
            // The reference identifies the item; the item need not repeat the operation id.
            id_pointer: None,
            ..AnswerReader::new()
        };
        Self {
            client,
            template: url_template.into(),
            items_pointer: None,
            reference_pointer: None,
            reference: "{operation_id}".into(),
            tenant_header: None,
            reader,
            timeout: Duration::from_secs(10),
            max_body: 1024 * 1024,
            format: AnswerFormat::Json,
            secrets: Secrets::default(),
        }
    }

    /// How much of a resolving item is kept in the evidence log (16 KiB).
    pub const MAX_KEPT_ANSWER: usize = 16 * 1024;

    /// Where the items are in the answer (e.g. `/data`); `None` (the default): the answer is
    /// the array.
    pub fn items_pointer(mut self, pointer: Option<&str>) -> Self {
        self.items_pointer = pointer.map(str::to_owned);
        self
    }

    /// Where an item carries the reference (e.g. `/metadata/operation_id`); `None` (the
    /// default): the URL's filter already selects the operation's items.
    pub fn reference_pointer(mut self, pointer: Option<&str>) -> Self {
        self.reference_pointer = pointer.map(str::to_owned);
        self
    }

    /// The reference value, a template over the same placeholders as the URL (default
    /// `{operation_id}`; EC2: `{idempotency_key}`), compared as is (not encoded).
    pub fn reference(mut self, template: impl Into<String>) -> Self {
        self.reference = template.into();
        self
    }

    /// Sends the operation's tenant in this header (a tenant the header cannot carry makes no
    /// lookup, as for [`HttpLookup::tenant_header`](super::HttpLookup::tenant_header)).
    pub fn tenant_header(mut self, name: HeaderName) -> Self {
        self.tenant_header = Some(name);
        self
    }

    /// Where an item must also repeat the operation id (default `None`: the reference
    /// identifies the item).
    pub fn id_pointer(mut self, pointer: Option<&str>) -> Self {
        self.reader.id_pointer = pointer.map(str::to_owned);
        self
    }

    /// Where an item's status sits (default `/status`).
    pub fn status_pointer(mut self, pointer: &str) -> Self {
        self.reader.status_pointer = pointer.to_owned();
        self
    }

    /// Where an item's created-object reference sits (default `/resource_id`).
    pub fn remote_ref_pointer(mut self, pointer: &str) -> Self {
        self.reader.remote_ref_pointer = Some(pointer.to_owned());
        self
    }

    /// The status vocabulary.
    pub fn statuses(mut self, statuses: LookupStatuses) -> Self {
        self.reader.statuses = statuses;
        self
    }

    /// Fields whose values become `[redacted]` in the item kept in the evidence log: bare names
    /// (at any depth) or pointers relative to the item, as the contract's
    /// [`secret_response_fields`](crate::Contract::secret_response_fields).
    pub fn secret_response_fields(mut self, fields: Vec<String>) -> Self {
        self.secrets.response_fields = fields;
        self
    }

    /// The contract's [`secret_body_fields`](crate::Contract::secret_body_fields), redacted in
    /// the kept item too.
    pub fn secret_body_fields(mut self, fields: Vec<String>) -> Self {
        self.secrets.body_fields = fields;
        self
    }

    /// How the answer is parsed (default [`AnswerFormat::Json`]). With [`AnswerFormat::Xml`]
    /// the items pointer, the reference pointer and the answer's pointers are paths of element
    /// names (see [`LookupAnswer`](crate::contract::LookupAnswer)).
    pub fn format(mut self, format: AnswerFormat) -> Self {
        self.format = format;
        self
    }

    /// How long one lookup may take (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The evidence the answer gives about `op`, and the item that resolved it as kept in the
    /// evidence log (see [`Secrets`]).
    fn judge(
        &self,
        op: &OperationRecord,
        reference: &str,
        status: StatusCode,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> (Evidence, Option<String>) {
        let retry_after = retry_after(headers);
        if status == StatusCode::NOT_FOUND || status == StatusCode::GONE {
            let why = format!("list lookup: {status} (not found is not proof of non-execution)");
            return (Evidence::Unknown { why, retry_after }, None);
        }
        if !status.is_success() {
            let why = format!("list lookup answered {status}");
            return (Evidence::Unknown { why, retry_after }, None);
        }
        let unreadable = || {
            let why = unreadable(self.format, "list lookup");
            (Evidence::unknown(why), None)
        };
        let max = Self::MAX_KEPT_ANSWER;
        if self.format == AnswerFormat::Xml {
            let Some(doc) = crate::xml::parse_bytes(body) else {
                return unreadable();
            };
            let items = match &self.items_pointer {
                Some(p) => crate::xml::select(doc.root(), p),
                None => doc
                    .root_element()
                    .children()
                    .filter(|n| n.is_element())
                    .collect(),
            };
            let found = self.the_one(op, reference, items, |n| Doc::Xml(*n), retry_after);
            return match found {
                Ok((evidence, item)) => {
                    let kept = resolves(&evidence).then(|| self.secrets.kept_xml(&doc, item, max));
                    (evidence, kept)
                }
                Err(evidence) => (evidence, None),
            };
        }
        let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(body) else {
            return unreadable();
        };
        let items = match &self.items_pointer {
            Some(p) => doc.pointer_mut(p).map(serde_json::Value::take),
            None => Some(doc),
        };
        let Some(serde_json::Value::Array(items)) = items else {
            return (
                Evidence::unknown("list lookup answer has no list of items there"),
                None,
            );
        };
        match self.the_one(op, reference, items, |v| Doc::Json(v), retry_after) {
            Ok((evidence, item)) => {
                let kept = resolves(&evidence).then(|| self.secrets.kept_json(item, max));
                (evidence, kept)
            }
            Err(evidence) => (evidence, None),
        }
    }

    /// The one item of `items` carrying the reference and the evidence it gives, or the
    /// evidence when there is none or several.
    fn the_one<T>(
        &self,
        op: &OperationRecord,
        reference: &str,
        items: Vec<T>,
        doc: impl Fn(&T) -> Doc<'_, '_>,
        retry_after: Option<Duration>,
    ) -> Result<(Evidence, T), Evidence> {
        let mut carrying: Vec<T> = items
            .into_iter()
            .filter(|item| match &self.reference_pointer {
                Some(p) => doc(item).scalar_at(p).as_deref() == Some(reference),
                None => true,
            })
            .collect();
        match carrying.len() {
            1 => {
                let item = carrying.remove(0);
                Ok((self.reader.read(op, doc(&item), retry_after), item))
            }
            0 => Err(Evidence::unknown(
                "list lookup found no item carrying the reference (an empty list is not proof of non-execution)",
            )),
            n => {
                tracing::warn!(
                    operation = %op.operation_id,
                    items = n,
                    "list lookup found several items carrying the operation's reference: none is picked"
                );
                Err(Evidence::unknown(format!(
                    "list lookup found {n} items carrying the reference: none is picked"
                )))
            }
        }
    }
}

/// Whether the evidence resolves the operation (its answer is then kept).
fn resolves(evidence: &Evidence) -> bool {
    matches!(
        evidence,
        Evidence::Succeeded { .. } | Evidence::Rejected { .. }
    )
}

impl<S, RB> Reconciler for ListLookup<S>
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
            let made = fill(&self.reference, op, false)
                .map_err(|why| format!("the reference template {why}"))
                .and_then(|reference| {
                    let req = scoped_request(&self.template, self.tenant_header.as_ref(), op)?;
                    Ok((reference, req))
                });
            let (reference, req) = match made {
                Ok(made) => made,
                Err(why) => {
                    tracing::warn!(operation = %op.operation_id, %why, "list lookup not made: it cannot carry its scope");
                    return (Evidence::unknown(format!("lookup not made: {why}")), None);
                }
            };
            match fetch(&self.client, req, self.timeout, self.max_body).await {
                Ok((parts, body)) => {
                    self.judge(op, &reference, parts.status, &parts.headers, &body)
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

    /// A row naming operation `id`, as the layer would create it.
    async fn row(id: &str) -> OperationRecord {
        let layer = RecoverableWrite::builder(MemoryLedger::new())
            .build()
            .expect("a valid configuration")
            .layer();
        let op = Operation::new("tenant-a", "create_ticket", id).with_id(OperationId::new(id));
        let req = Request::post("http://vendor.test/tickets")
            .body(Bytes::from_static(br#"{"device_id":"E17"}"#))
            .expect("request");
        let new = layer.new_operation(&op, &req);
        match layer.ledger().create_or_get(new).await.expect("create") {
            Created::New(r) | Created::Existing(r) => r,
        }
    }

    fn why(evidence: &Evidence) -> &str {
        match evidence {
            Evidence::Unknown { why, .. } => why,
            other => panic!("expected Unknown, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn only_the_one_item_carrying_the_reference_is_read() {
        let op = row("op-7").await;
        let lookup = ListLookup::new((), "/search")
            .items_pointer(Some("/data"))
            .reference_pointer(Some("/meta/ref"))
            .remote_ref_pointer("/id");
        let ok = StatusCode::OK;
        let headers = http::HeaderMap::new();
        let body = br#"{"data":[
            {"id":"W1","status":"SUCCEEDED","meta":{"ref":"op-6"}},
            {"id":"W2","status":"SUCCEEDED","meta":{"ref":"op-7"}},
            {"id":"W3","status":"SUCCEEDED"}
        ]}"#;
        let (evidence, item) = lookup.judge(&op, "op-7", ok, &headers, body);
        assert_eq!(
            evidence,
            Evidence::Succeeded {
                remote_ref: Some("W2".into())
            }
        );
        assert!(item.expect("the item").contains(r#""id":"W2""#));
        // A number carries the reference as its decimal text.
        let (evidence, _) = lookup.judge(
            &op,
            "42",
            ok,
            &headers,
            br#"{"data":[{"id":7,"status":"PENDING","meta":{"ref":42}}]}"#,
        );
        assert!(
            matches!(evidence, Evidence::Processing { .. }),
            "{evidence:?}"
        );
        // Nothing carrying it, several, a 404, no list there, not JSON: nothing proven.
        for (status, body, expected) in [
            (ok, &br#"{"data":[]}"#[..], "no item carrying"),
            (
                ok,
                br#"{"data":[{"meta":{"ref":"op-7"}},{"meta":{"ref":"op-7"}}]}"#,
                "2 items",
            ),
            (StatusCode::NOT_FOUND, br#"{"error":"none"}"#, "not proof"),
            (
                ok,
                br#"{"data":{"meta":{"ref":"op-7"}}}"#,
                "no list of items",
            ),
            (ok, b"<items/>", "without a JSON document"),
        ] {
            let (evidence, item) = lookup.judge(&op, "op-7", status, &headers, body);
            assert!(why(&evidence).contains(expected), "{evidence:?}");
            assert!(item.is_none());
        }
        // Without a reference pointer the URL's filter selected: every item carries it.
        let filtered = ListLookup::new((), "/search?ref={operation_id}");
        let (evidence, _) = filtered.judge(
            &op,
            "op-7",
            ok,
            &headers,
            br#"[{"status":"DONE","resource_id":"W9"}]"#,
        );
        assert_eq!(
            evidence,
            Evidence::Succeeded {
                remote_ref: Some("W9".into())
            }
        );
        let (evidence, _) = filtered.judge(&op, "op-7", ok, &headers, br#"[{}, {}]"#);
        assert!(why(&evidence).contains("2 items"), "{evidence:?}");
    }

    /// The `aws-ec2` profile's lookup, as the builder makes it from the contract.
    fn ec2_lookup() -> ListLookup<()> {
        let contract = crate::contract::profiles::aws_ec2();
        let Some(crate::contract::Lookup::ListByReference {
            url_template,
            items_pointer,
            reference_pointer,
            reference,
            answer,
        }) = contract.lookup
        else {
            panic!("aws-ec2 looks operations up in a list")
        };
        ListLookup::new((), url_template)
            .format(answer.format)
            .items_pointer(items_pointer.as_deref())
            .reference_pointer(reference_pointer.as_deref())
            .reference(reference)
            .status_pointer(answer.status.as_deref().unwrap())
            .remote_ref_pointer(answer.remote_ref.as_deref().unwrap())
            .statuses(LookupStatuses {
                succeeded: answer.succeeded.unwrap(),
                processing: answer.processing.unwrap(),
                ..LookupStatuses::default()
            })
            .secret_response_fields(contract.secret_response_fields)
    }

    const DESCRIBE: &str = include_str!("../../tests/fixtures/ec2_describe_instances.xml");
    const DESCRIBE_EMPTY: &str =
        include_str!("../../tests/fixtures/ec2_describe_instances_empty.xml");
    const TOKEN: &str = "xMcwG14507example";

    /// "Evidence a built-in profile promises": EC2 answers XML, and the profile's lookup reads
    /// it. A recorded `DescribeInstances` answer names the launch by its client token.
    #[tokio::test]
    async fn the_ec2_lookup_reads_a_recorded_describe_instances_answer() {
        let op = row("op-ec2").await;
        let lookup = ec2_lookup();
        let (ok, headers) = (StatusCode::OK, http::HeaderMap::new());
        let (evidence, kept) = lookup.judge(&op, TOKEN, ok, &headers, DESCRIBE.as_bytes());
        assert_eq!(
            evidence,
            Evidence::Succeeded {
                remote_ref: Some("i-1234567890abcdef0".into())
            }
        );
        let kept = kept.expect("the reservation is kept");
        assert!(kept.starts_with("lookup answer: <item>"), "{kept}");
        assert!(kept.contains("<reservationId>r-1234567890abcdef0</reservationId>"));
        assert!(kept.len() <= ListLookup::<()>::MAX_KEPT_ANSWER + 40);
        // Every state an instance of a launch can be in means the launch ran.
        for state in ["pending", "stopped", "terminated"] {
            let answer = DESCRIBE.replace("<name>running</name>", &format!("<name>{state}</name>"));
            let (evidence, _) = lookup.judge(&op, TOKEN, ok, &headers, answer.as_bytes());
            assert!(matches!(evidence, Evidence::Succeeded { .. }), "{state}");
        }
        // Another launch's token: not this operation's.
        let (evidence, kept) = lookup.judge(&op, "other-token", ok, &headers, DESCRIBE.as_bytes());
        assert!(why(&evidence).contains("no item carrying"), "{evidence:?}");
        assert!(kept.is_none());
        // An empty reservation set: nothing proven (weak evidence, never "not executed").
        let (evidence, _) = lookup.judge(&op, TOKEN, ok, &headers, DESCRIBE_EMPTY.as_bytes());
        assert!(
            why(&evidence).contains("not proof of non-execution"),
            "{evidence:?}"
        );
        // Two reservations carrying the token: none is picked.
        let reservation = &DESCRIBE
            [DESCRIBE.find("<item>").unwrap()..DESCRIBE.rfind("</reservationSet>").unwrap()];
        let two = DESCRIBE.replace(reservation, &format!("{reservation}{reservation}"));
        let (evidence, _) = lookup.judge(&op, TOKEN, ok, &headers, two.as_bytes());
        assert!(why(&evidence).contains("2 items"), "{evidence:?}");
        // Malformed XML, a JSON answer, a DTD, nothing: unknown, never a panic.
        for bad in [
            &DESCRIBE[..DESCRIBE.len() / 2],
            r#"{"Reservations":[]}"#,
            "<!DOCTYPE x [<!ENTITY a \"b\">]><DescribeInstancesResponse/>",
            "",
            "<DescribeInstancesResponse><reservationSet><item></reservationSet>",
        ] {
            let (evidence, kept) = lookup.judge(&op, TOKEN, ok, &headers, bad.as_bytes());
            assert!(
                why(&evidence).contains("well-formed XML"),
                "{bad}: {evidence:?}"
            );
            assert!(kept.is_none());
        }
        // An EC2 error answer is not read at all.
        let (evidence, _) = lookup.judge(
            &op,
            TOKEN,
            StatusCode::SERVICE_UNAVAILABLE,
            &headers,
            b"<Response/>",
        );
        assert!(why(&evidence).contains("503"), "{evidence:?}");
    }

    #[tokio::test]
    async fn a_reference_the_operation_has_no_value_for_makes_no_lookup() {
        let vendor = FakeVendor::start().await;
        let op = row("op-no-ref").await;
        let lookup = ListLookup::new(
            http_client(),
            vendor.url("/tickets?operation_id={operation_id}"),
        )
        .reference("{remote_ref}");
        let evidence = lookup.reconcile(&op).await;
        let why = why(&evidence);
        assert!(
            why.contains("not made") && why.contains("{remote_ref}"),
            "{why}"
        );
        assert!(vendor.requests().is_empty(), "nothing was sent");
    }
}
