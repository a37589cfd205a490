//! Responses the ledger keeps and gives back: what of a vendor's answer is stored, the stored
//! answer a caller naming a resolved operation gets, and the synthesized one (with the headers
//! that mark it) when no vendor answer was stored.

use bytes::Bytes;
use http::Response;
use http_body_util::Full;

use crate::contract::Contract;
use crate::error::Outcome;
use crate::ledger::{OperationRecord, StoredHeaders, StoredResponse};
use crate::state::State;

/// Marks a response the crate wrote itself because the vendor's own answer was never seen (the
/// operation was resolved by a lookup, a callback or a human): `recoverable-write-outcome:
/// synthesized`.
pub const OUTCOME_HEADER: &str = "recoverable-write-outcome";
/// On a synthesized response: the vendor's status class the outcome stands for (`2xx` for
/// `SUCCEEDED`, `4xx` for `REJECTED`).
pub const STATUS_CLASS_HEADER: &str = "recoverable-write-status-class";
/// On a synthesized response: the vendor's reference of the created object, when known.
pub const REMOTE_REF_HEADER: &str = "recoverable-write-remote-ref";
/// On a stored response replayed to a repeat caller: `true` when its body was cut to the
/// stored-body limit ([`stored_body_limit`](crate::Builder::stored_body_limit), 64 KiB
/// by default), so it is not the vendor's whole answer (a JSON body may not even parse).
/// [`Outcome::body_truncated`] says the same. The first caller, who got the live response, got
/// all of it and no marker.
pub const TRUNCATED_HEADER: &str = "recoverable-write-truncated";

/// Whether a vendor response header is never stored.
fn unstored_response_header(name: &http::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "set-cookie"
            | "authorization"
            | "proxy-authenticate"
            | "www-authenticate"
            | "connection"
            | "transfer-encoding"
            | "content-length"
            | "keep-alive"
    )
}

/// The headers of a vendor response that are kept with it: all but those
/// [`unstored_response_header`] names and the credential headers (the defaults and the
/// contract's `secret_headers`), and only values of visible ASCII. The buffer is sized once, so
/// this allocates once (not at all when nothing is kept).
fn stored_headers(headers: &http::HeaderMap, secret: &[String]) -> StoredHeaders {
    StoredHeaders::sized(|| {
        headers
            .iter()
            .filter(|(k, _)| !unstored_response_header(k))
            .filter(|(k, _)| !crate::operation::is_secret(k, secret))
            // The crate's own markers are written by the crate, never taken from a vendor.
            .filter(|(k, _)| !k.as_str().starts_with("recoverable-write-"))
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
    })
}

/// The vendor's authoritative response as kept for callers that ask again: its status, the
/// headers [`stored_headers`] keeps, and at most `limit` bytes of its body with the contract's
/// secret answer fields replaced (see [`crate::redact`]). The one place a response is made
/// ready for the ledger. `None` when the body may hold a secret field and cannot be read: it is
/// not stored, and a caller asking again gets the synthesized answer.
pub(super) fn stored_response(
    res: &Response<Bytes>,
    contract: &Contract,
    limit: usize,
) -> Option<StoredResponse> {
    // Redacted whole, then cut: a cut JSON body could not be read any more.
    let body = crate::redact::answer(res.body(), &contract.answer_secrets())?;
    let mut headers = stored_headers(res.headers(), &contract.secret_headers);
    if body.len() > limit {
        // Kept with the response, so every later replay of it says so.
        headers.push(TRUNCATED_HEADER, "true");
    }
    Some(StoredResponse {
        status: res.status().as_u16(),
        headers,
        // A copy, not a slice: a slice would pin the client's whole read buffer for as long as
        // the ledger keeps the row.
        body: Bytes::copy_from_slice(&body[..body.len().min(limit)]),
    })
}

/// The answer when no vendor response is stored: `200 OK` for `SUCCEEDED`, `422 Unprocessable
/// Entity` for `REJECTED`, with the [`Outcome`] as JSON and the headers above. Code that parses
/// the vendor's body must check [`OUTCOME_HEADER`] first.
fn synthesized(record: &OperationRecord, outcome: &Outcome) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(outcome).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    let (status, class) = match record.state {
        State::Rejected => (http::StatusCode::UNPROCESSABLE_ENTITY, "4xx"),
        _ => (http::StatusCode::OK, "2xx"),
    };
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    h.insert(
        OUTCOME_HEADER,
        http::HeaderValue::from_static("synthesized"),
    );
    h.insert(STATUS_CLASS_HEADER, http::HeaderValue::from_static(class));
    if let Some(v) = record
        .remote_ref
        .as_deref()
        .and_then(|r| http::HeaderValue::from_str(r).ok())
    {
        h.insert(REMOTE_REF_HEADER, v);
    }
    r
}

/// The answer for a caller naming a resolved operation: the stored response, or a synthesized
/// one (see [`OUTCOME_HEADER`]) when the operation was resolved by a lookup or a human.
pub(super) fn stored_result(record: &OperationRecord) -> Response<Full<Bytes>> {
    let outcome = Outcome::from_record(record, None, true);
    let mut res = match &record.response {
        Some(stored) => {
            let mut b = Response::builder().status(stored.status);
            for (k, v) in &stored.headers {
                b = b.header(k, v);
            }
            b.body(Full::new(stored.body.clone())).ok()
        }
        None => None,
    }
    .unwrap_or_else(|| synthesized(record, &outcome));
    res.extensions_mut().insert(outcome);
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::Operation;

    /// Issue 27 item 11: a stored response cut to the stored-body limit is marked when it is
    /// replayed to a repeat caller (header and outcome); the first caller got all of it, and a
    /// response under the limit is never marked.
    #[tokio::test]
    async fn a_truncated_stored_response_is_marked_when_replayed() {
        use http_body_util::BodyExt as _;
        use tower::ServiceExt as _;

        let rw = crate::RecoverableWrite::builder(crate::MemoryLedger::new())
            .stored_body_limit(8)
            .build()
            .expect("valid configuration");
        let body_of =
            |len: usize| Bytes::from(format!("{{\"id\":\"W1\",\"pad\":\"{}\"}}", "x".repeat(len)));
        let call = |op: Operation, vendor_body: Bytes| {
            let layer = rw.layer();
            async move {
                let svc = tower::ServiceBuilder::new()
                    .layer(layer)
                    .service(tower::service_fn(
                        move |_req: http::Request<Full<Bytes>>| {
                            let b = vendor_body.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(
                                    Response::builder().status(201).body(Full::new(b)).unwrap(),
                                )
                            }
                        },
                    ));
                let mut req = http::Request::post("https://vendor.test/v1/tickets")
                    .body(Full::new(Bytes::from_static(b"{}")))
                    .unwrap();
                req.extensions_mut().insert(op);
                let res = svc.oneshot(req).await.expect("an authoritative answer");
                let outcome = res.extensions().get::<Outcome>().cloned().expect("outcome");
                let marker = res.headers().get(TRUNCATED_HEADER).cloned();
                let body = res.into_body().collect().await.unwrap().to_bytes();
                (outcome, marker, body)
            }
        };

        let long = body_of(40);
        let op = Operation::new("t", "create_ticket", "intent-long");
        let (first, marker, body) = call(op.clone(), long.clone()).await;
        assert_eq!(body, long, "the first caller gets the whole live answer");
        assert!(marker.is_none());
        assert!(!first.body_truncated);
        // The repeat caller gets the stored copy: cut, and saying so.
        let (again, marker, body) = call(op.clone(), long.clone()).await;
        assert!(again.from_ledger);
        assert_eq!(body, long.slice(..8));
        assert_eq!(marker.as_ref().map(|v| v.to_str().unwrap()), Some("true"));
        assert!(again.body_truncated);
        let json = serde_json::to_value(&again).unwrap();
        assert_eq!(json["body_truncated"], true);

        // Under the limit: replayed whole, no marker.
        let short = Bytes::from_static(b"{}");
        let op = Operation::new("t", "create_ticket", "intent-short");
        call(op.clone(), short.clone()).await;
        let (again, marker, body) = call(op, short.clone()).await;
        assert!(again.from_ledger);
        assert_eq!(body, short);
        assert!(marker.is_none());
        assert!(!again.body_truncated);
        assert!(
            serde_json::to_value(&again)
                .unwrap()
                .get("body_truncated")
                .is_none()
        );
    }

    #[test]
    fn stored_headers_keep_visible_ascii_values_of_stored_names_in_order() {
        let mut map = http::HeaderMap::new();
        map.append("content-type", "application/json".parse().unwrap());
        map.append("set-cookie", "session=secret".parse().unwrap());
        map.append("request-id", "req_1".parse().unwrap());
        map.append("request-id", "req_2, \"x\"".parse().unwrap());
        map.append("content-length", "12".parse().unwrap());
        map.append(
            "x-latin1",
            http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        map.append("x-api-key", "key-secret".parse().unwrap());
        map.append("x-vendor-token", "token-secret".parse().unwrap());
        let stored = stored_headers(&map, &["X-Vendor-Token".to_owned()]);
        let pairs: Vec<_> = stored.iter().collect();
        assert_eq!(
            pairs,
            [
                ("content-type", "application/json"),
                ("request-id", "req_1"),
                ("request-id", "req_2, \"x\""),
            ]
        );
        assert_eq!(
            stored_headers(&http::HeaderMap::new(), &[]),
            StoredHeaders::new()
        );
    }
}
