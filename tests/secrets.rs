//! Issue 27 item 8: what a vendor answers, and what a URL carries, keeps its secrets out of the
//! ledger. A Stripe PaymentIntent's `client_secret` reaches the caller the first time and is
//! stored nowhere: not in the stored first response, not in a lookup answer kept as evidence,
//! not on the review page, not in the CLI's `show`, not in the SQLite file. A token in a
//! webhook URL's path is sent and never stored; a replay gets it from its stack or is refused.
//!
//! The vendor is in process (a `tower::service_fn`), so each test sees every request it got.

mod common;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::fast_policy;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use recoverable_write::Ledger;
use recoverable_write::ledger::OperationRecord;
use recoverable_write::{
    Contracts, Error, Evidence, Handle, Operation, RecoverableWrite, SendOnceGuardLayer,
    SqliteLedger, State,
};
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// The secret every created PaymentIntent carries (Stripe: `pi_…_secret_…`).
const CLIENT_SECRET: &str = "pi_3Q_secret_LIVEc1ientSecret";
/// The token in a webhook URL's path.
const HOOK_TOKEN: &str = "T0KENinTHEpath";

/// The in-process vendor as a service.
type Vendored =
    tower::util::BoxCloneSyncService<Request<Full<Bytes>>, Response<Full<Bytes>>, BoxError>;

/// What the in-process vendor does with the next requests.
#[derive(Default)]
struct Script {
    /// POSTs answered with a refused connection (never executed).
    refuse: usize,
    /// POSTs executed whose answer is lost (a reset after the commit).
    lose: usize,
}

/// A Stripe-like vendor: `POST /v1/payment_intents` creates one (form body, its
/// `metadata[operation_id]` kept), `GET /v1/payment_intents` lists them; `POST
/// /hooks/{token}/send` accepts a webhook delivery. Every request it received is recorded.
#[derive(Clone, Default)]
struct Vendor {
    script: Arc<Mutex<Script>>,
    received: Arc<Mutex<Vec<(Method, String)>>>,
    created: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Vendor {
    fn handle(
        &self,
        method: Method,
        uri: &http::Uri,
        body: &[u8],
    ) -> Result<Response<Full<Bytes>>, BoxError> {
        let json = |status: StatusCode, v: serde_json::Value| {
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .header("request-id", "req_1")
                .body(Full::new(Bytes::from(v.to_string())))
                .map_err(BoxError::from)
        };
        if method == Method::POST {
            let mut script = self.script.lock().unwrap();
            if script.refuse > 0 {
                script.refuse -= 1;
                return Err(io::Error::from(io::ErrorKind::ConnectionRefused).into());
            }
        }
        self.received
            .lock()
            .unwrap()
            .push((method.clone(), uri.to_string()));
        let path = uri.path();
        let answer = match (method, path) {
            (Method::POST, "/v1/payment_intents") => {
                let form: HashMap<String, String> = form_urlencoded(body);
                let mut created = self.created.lock().unwrap();
                let pi = serde_json::json!({
                    "id": format!("pi_3Q{}", created.len()),
                    "object": "payment_intent",
                    "amount": form.get("amount").and_then(|a| a.parse::<u64>().ok()),
                    "currency": "eur",
                    "status": "requires_payment_method",
                    "client_secret": CLIENT_SECRET,
                    "metadata": { "operation_id": form.get("metadata[operation_id]") },
                    // Expanded objects carry theirs too.
                    "latest_charge": { "payment_intent": { "client_secret": CLIENT_SECRET } },
                });
                created.push(pi.clone());
                json(StatusCode::OK, pi)?
            }
            (Method::GET, "/v1/payment_intents") => {
                let data = self.created.lock().unwrap().clone();
                json(
                    StatusCode::OK,
                    serde_json::json!({ "object": "list", "data": data, "has_more": false }),
                )?
            }
            (Method::POST, p) if p.starts_with("/hooks/") && p.ends_with("/send") => {
                let token = p.trim_start_matches("/hooks/").trim_end_matches("/send");
                if token != HOOK_TOKEN {
                    json(
                        StatusCode::NOT_FOUND,
                        serde_json::json!({ "error": "no such hook" }),
                    )?
                } else {
                    json(
                        StatusCode::OK,
                        serde_json::json!({ "id": "d_1", "ok": true }),
                    )?
                }
            }
            _ => json(
                StatusCode::NOT_FOUND,
                serde_json::json!({ "error": "no route" }),
            )?,
        };
        let mut script = self.script.lock().unwrap();
        if script.lose > 0 {
            script.lose -= 1;
            return Err(io::Error::from(io::ErrorKind::ConnectionReset).into());
        }
        Ok(answer)
    }

    /// The transport: this vendor as a tower service (what a client over the network is).
    fn service(&self) -> Vendored {
        let vendor = self.clone();
        tower::util::BoxCloneSyncService::new(tower::service_fn(
            move |req: Request<Full<Bytes>>| {
                let vendor = vendor.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body.collect().await?.to_bytes();
                    vendor.handle(parts.method, &parts.uri, &body)
                }
            },
        ))
    }

    fn received(&self) -> Vec<(Method, String)> {
        self.received.lock().unwrap().clone()
    }

    fn posts(&self) -> usize {
        self.received()
            .iter()
            .filter(|(m, _)| *m == Method::POST)
            .count()
    }
}

fn form_urlencoded(body: &[u8]) -> HashMap<String, String> {
    std::str::from_utf8(body)
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| {
            let k = k.replace("%5B", "[").replace("%5D", "]");
            (k, v.to_owned())
        })
        .collect()
}

/// A ledger file in a fresh directory (kept for the test's duration).
async fn sqlite() -> (tempfile::TempDir, PathBuf, SqliteLedger) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger = SqliteLedger::open(&path).await.unwrap();
    (dir, path, ledger)
}

/// Every byte of the SQLite ledger (the database and its write-ahead log).
fn file_bytes(path: &Path) -> Vec<u8> {
    let mut all = std::fs::read(path).unwrap();
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if let Ok(w) = std::fs::read(PathBuf::from(wal)) {
        all.extend(w);
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The layer's service, response bodies collected.
type Writer = tower::util::BoxCloneSyncService<Request<Full<Bytes>>, Response<Bytes>, Error>;

/// The configuration over `ledger` and `contracts`, and the writer: the layer over the send-once
/// guard over the vendor (`below` wraps the vendor: the replay stack's own layers).
fn configured<L>(
    ledger: SqliteLedger,
    contracts: Contracts,
    vendor: &Vendor,
    below: L,
) -> (Handle<SqliteLedger>, Writer)
where
    L: tower::Layer<Vendored>,
    L::Service: tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = BoxError>
        + Clone
        + Send
        + Sync
        + 'static,
    <L::Service as tower::Service<Request<Full<Bytes>>>>::Future: Send + 'static,
{
    let vendor = vendor.service();
    let stack = ServiceBuilder::new()
        .layer(SendOnceGuardLayer::new())
        .layer(below)
        .service(vendor);
    let rw = RecoverableWrite::builder(ledger)
        .contracts(contracts)
        .budget(fast_policy())
        .transport(stack.clone())
        .lookup_timeout(Duration::from_millis(500))
        .recovery_lease(Duration::from_secs(2))
        .build()
        .expect("a valid configuration");
    let writer = ServiceBuilder::new()
        .layer(rw.layer())
        .service(stack)
        .and_then(
            |res: Response<recoverable_write::ResponseBody<Full<Bytes>>>| async move {
                let (parts, body) = res.into_parts();
                let bytes = body.collect().await.expect("a whole body").to_bytes();
                Ok(Response::from_parts(parts, bytes))
            },
        );
    (rw, tower::util::BoxCloneSyncService::new(writer))
}

const TENANT: &str = "acme";

/// Stripe's own profile, routed to the in-process vendor, with a list lookup by the metadata
/// the write attaches (docs.stripe.com: lists are consistent for top-level objects).
fn stripe() -> Contracts {
    Contracts::from_toml_str(
        r#"
[[route]]
host = "api.stripe.test"
contract = "payments"

[contracts.payments]
extends = "stripe-v1"
lookup = { kind = "list_by_reference", url_template = "/v1/payment_intents?limit=100", items_pointer = "/data", reference_pointer = "/metadata/operation_id", answer = { remote_ref = "/id", succeeded = ["requires_payment_method", "succeeded"] } }
"#,
        "contracts.toml",
    )
    .expect("valid contracts")
}

fn payment(op: &Operation) -> Request<Full<Bytes>> {
    let mut req = Request::post("https://api.stripe.test/v1/payment_intents")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("authorization", "Bearer sk_test_key")
        .body(Full::new(Bytes::from(format!(
            "amount=2000&currency=eur&metadata%5Boperation_id%5D={}",
            op.id()
        ))))
        .unwrap();
    req.extensions_mut().insert(op.clone());
    req
}

fn body_text(res: Response<Bytes>) -> String {
    String::from_utf8(res.into_body().to_vec()).unwrap()
}

async fn row(rw: &Handle<SqliteLedger>, op: &Operation) -> OperationRecord {
    rw.ledger()
        .get(op.tenant(), op.id())
        .await
        .unwrap()
        .unwrap()
}

/// Recovery passes until `done` holds for the row (at most about 4 s).
async fn recover_until(
    rw: &Handle<SqliteLedger>,
    op: &Operation,
    done: impl Fn(&OperationRecord) -> bool,
) -> OperationRecord {
    let recoverer = rw.recoverer();
    for _ in 0..200 {
        let r = row(rw, op).await;
        if done(&r) {
            return r;
        }
        recoverer.run_once().await.expect("pass");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never reached the expected state: {:?}", row(rw, op).await);
}

/// What a person sees of the operation, view by view: the handoff package (the review page and
/// `show --json` are made of it), the review page's HTML, the CLI's `show` and `show --json`.
async fn views(
    rw: &Handle<SqliteLedger>,
    ledger_path: &Path,
    op: &Operation,
) -> Vec<(&'static str, String)> {
    let pkg = rw
        .reviews()
        .handoff(op.tenant(), op.id())
        .await
        .expect("handoff");
    let mut views = vec![("handoff package", serde_json::to_string(&pkg).unwrap())];
    #[cfg(feature = "review-ui")]
    {
        use recoverable_write::review_ui::{self, ReviewUiOptions, ReviewerIdentity};
        let page = review_ui::router(
            ReviewUiOptions::for_tenant(rw.ledger().clone(), op.tenant().clone())
                .reviews(rw.reviews()),
        );
        let mut req = Request::get(format!("/op/{}", op.id()))
            .body(axum::body::Body::empty())
            .unwrap();
        req.extensions_mut()
            .insert(ReviewerIdentity::read_only("rita"));
        let res = page.oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let html = res.into_body().collect().await.unwrap().to_bytes();
        views.push(("review page", String::from_utf8_lossy(&html).into_owned()));
    }
    #[cfg(feature = "cli")]
    {
        // The command line is the `recoverable-write` binary: run it as an operator would.
        let ledger = format!("sqlite:{}", ledger_path.display());
        for (name, json) in [("show", false), ("show --json", true)] {
            let mut args = vec![
                "--ledger",
                &ledger,
                "--tenant",
                TENANT,
                "show",
                op.id().as_str(),
            ];
            if json {
                args.push("--json");
            }
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_recoverable-write"))
                .env_remove("RECOVERABLE_WRITE_LEDGER")
                .env_remove("RECOVERABLE_WRITE_SCHEMA")
                .env_remove("RECOVERABLE_WRITE_CONTRACTS")
                .args(args)
                .output()
                .await
                .expect("run the CLI");
            assert!(
                out.status.success(),
                "show: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            views.push((name, String::from_utf8(out.stdout).expect("utf-8 stdout")));
        }
    }
    let _ = ledger_path;
    views
}

/// A Stripe PaymentIntent answered the first time: the caller gets its `client_secret`, the
/// ledger keeps the answer with `[redacted]` in its place, and a caller asking again gets that
/// copy. Nothing is sent twice.
#[tokio::test]
async fn a_stored_first_response_keeps_no_client_secret() {
    let (_dir, path, ledger) = sqlite().await;
    let vendor = Vendor::default();
    let (rw, svc) = configured(
        ledger.clone(),
        stripe(),
        &vendor,
        tower::layer::util::Identity::new(),
    );
    let op = Operation::new(TENANT, "create_payment", "intent-pi-1");

    let res = svc.clone().oneshot(payment(&op)).await.expect("answered");
    assert_eq!(res.status(), StatusCode::OK);
    let first = body_text(res);
    assert!(
        first.contains(CLIENT_SECRET),
        "the caller gets the real answer: {first}"
    );

    ledger.wait_for_results().await;
    let r = row(&rw, &op).await;
    assert_eq!(r.state, State::Succeeded);
    assert_eq!(r.remote_ref.as_deref(), Some("pi_3Q0"));
    let stored = r.response.as_ref().expect("the first response is stored");
    let body: serde_json::Value = serde_json::from_slice(&stored.body).unwrap();
    assert_eq!(body["client_secret"], "[redacted]");
    assert_eq!(
        body["latest_charge"]["payment_intent"]["client_secret"],
        "[redacted]"
    );
    assert_eq!(body["id"], "pi_3Q0", "the rest is kept");
    assert_eq!(body["amount"], 2000);
    assert!(!contains(&stored.body, CLIENT_SECRET));
    assert_eq!(stored.headers.iter().count(), 2, "{:?}", stored.headers);

    // The caller asks again: the stored copy, nothing sent.
    let again = svc.oneshot(payment(&op)).await.expect("the stored answer");
    assert_eq!(again.status(), StatusCode::OK);
    let again = body_text(again);
    assert!(again.contains("[redacted]"), "{again}");
    assert!(!again.contains(CLIENT_SECRET), "{again}");
    assert_eq!(vendor.posts(), 1);

    for (view, shown) in views(&rw, &path, &op).await {
        assert!(!shown.contains(CLIENT_SECRET), "{view}: {shown}");
    }
    drop(rw);
    assert!(
        !contains(&file_bytes(&path), CLIENT_SECRET),
        "the secret is nowhere in the ledger file"
    );
}

/// The answer to a PaymentIntent create is lost; the list lookup finds it, and the item kept as
/// evidence (shown to reviewers) has `[redacted]` where the vendor said `client_secret`.
#[tokio::test]
async fn a_lookup_answer_is_kept_and_shown_without_its_secret() {
    let (_dir, path, ledger) = sqlite().await;
    let vendor = Vendor::default();
    vendor.script.lock().unwrap().lose = 1;
    let (rw, svc) = configured(
        ledger.clone(),
        stripe(),
        &vendor,
        tower::layer::util::Identity::new(),
    );
    let op = Operation::new(TENANT, "create_payment", "intent-pi-lost");

    let err = svc
        .oneshot(payment(&op))
        .await
        .expect_err("the answer is lost");
    assert!(matches!(err, Error::Unknown { .. }), "{err:?}");
    let r = recover_until(&rw, &op, |r| r.state == State::Succeeded).await;
    assert_eq!(r.remote_ref.as_deref(), Some("pi_3Q0"));
    assert_eq!(vendor.posts(), 1, "found by the lookup, not sent again");

    let log = rw.ledger().evidence(op.tenant(), op.id()).await.unwrap();
    let note = log
        .iter()
        .find(|e| {
            e.entry.kind == "lookup" && matches!(e.entry.evidence, Some(Evidence::Succeeded { .. }))
        })
        .and_then(|e| e.entry.note.clone())
        .unwrap_or_else(|| panic!("no resolving lookup: {log:?}"));
    let kept: serde_json::Value =
        serde_json::from_str(note.trim_start_matches("lookup answer: ")).unwrap();
    assert_eq!(kept["id"], "pi_3Q0");
    assert_eq!(kept["client_secret"], "[redacted]");
    assert_eq!(
        kept["latest_charge"]["payment_intent"]["client_secret"],
        "[redacted]"
    );
    assert!(!note.contains(CLIENT_SECRET), "{note}");

    for (view, shown) in views(&rw, &path, &op).await {
        assert!(
            shown.contains("[redacted]"),
            "{view} shows the kept answer: {shown}"
        );
        assert!(
            !shown.contains(CLIENT_SECRET),
            "{view} shows no secret: {shown}"
        );
    }
    drop(rw);
    assert!(!contains(&file_bytes(&path), CLIENT_SECRET));
}

fn webhooks(extra: &str) -> Contracts {
    Contracts::from_toml_str(
        &format!(
            r#"
[[route]]
host = "hooks.vendor.test"
contract = "hooks"

[contracts.hooks]
extends = "ietf-draft"
secret_path_segments = ["/hooks/{{secret}}/send"]
{extra}
"#
        ),
        "contracts.toml",
    )
    .expect("valid contracts")
}

fn delivery(op: &Operation, token: &str) -> Request<Full<Bytes>> {
    let mut req = Request::post(format!(
        "https://hooks.vendor.test/hooks/{token}/send?wait=true"
    ))
    .header("content-type", "application/json")
    .body(Full::new(Bytes::from_static(br#"{"text":"deployed"}"#)))
    .unwrap();
    req.extensions_mut().insert(op.clone());
    req
}

/// A webhook URL's token is sent on the first send and stored as `[redacted]`: in the row,
/// in the handoff, in the file. A token rotated since is the same operation: its stored answer,
/// nothing sent.
#[tokio::test]
async fn a_secret_path_segment_is_sent_and_stored_as_the_marker() {
    let (_dir, path, ledger) = sqlite().await;
    let vendor = Vendor::default();
    let (rw, svc) = configured(
        ledger.clone(),
        webhooks(""),
        &vendor,
        tower::layer::util::Identity::new(),
    );
    let op = Operation::new(TENANT, "notify", "intent-hook-1");

    let res = svc
        .clone()
        .oneshot(delivery(&op, HOOK_TOKEN))
        .await
        .expect("delivered");
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        vendor.received(),
        [(
            Method::POST,
            format!("https://hooks.vendor.test/hooks/{HOOK_TOKEN}/send?wait=true")
        )]
    );
    ledger.wait_for_results().await;
    let r = row(&rw, &op).await;
    assert_eq!(r.state, State::Succeeded);
    assert_eq!(
        r.request.url,
        "https://hooks.vendor.test/hooks/[redacted]/send?wait=true"
    );

    let again = svc
        .oneshot(delivery(&op, "R0TATED"))
        .await
        .expect("the stored answer");
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(vendor.posts(), 1);

    for (view, shown) in views(&rw, &path, &op).await {
        assert!(
            shown.contains("/hooks/[redacted]/send"),
            "{view} shows the URL: {shown}"
        );
        assert!(!shown.contains(HOOK_TOKEN), "{view}: {shown}");
    }
    drop(rw);
    assert!(!contains(&file_bytes(&path), HOOK_TOKEN));
}

/// A replay has only the stored URL: without a stack that puts the token back it is refused
/// and the operation goes to a person; nothing is ever sent to the marker.
#[tokio::test]
async fn a_replay_without_its_secret_path_segment_is_refused() {
    let (_dir, _path, ledger) = sqlite().await;
    let vendor = Vendor::default();
    vendor.script.lock().unwrap().refuse = 1;
    let (rw, svc) = configured(
        ledger,
        webhooks(""),
        &vendor,
        tower::layer::util::Identity::new(),
    );
    let op = Operation::new(TENANT, "notify", "intent-hook-refused");

    let _ = svc.oneshot(delivery(&op, HOOK_TOKEN)).await;
    let r = recover_until(&rw, &op, |r| r.state == State::ManualReview).await;
    assert!(
        r.reason
            .as_deref()
            .unwrap_or("")
            .contains("secret path segments"),
        "{:?}",
        r.reason
    );
    assert!(
        vendor.received().is_empty(),
        "no replay: {:?}",
        vendor.received()
    );
}

/// With `replay_supplies_path_secrets`, the replay is sent with the marker for its stack to
/// replace (here a layer that knows the hook's token): it reaches the real URL, once.
#[tokio::test]
async fn a_replay_stack_that_supplies_the_segment_reaches_the_real_url() {
    let (_dir, _path, ledger) = sqlite().await;
    let vendor = Vendor::default();
    vendor.script.lock().unwrap().refuse = 1;
    let supply = tower::util::MapRequestLayer::new(|mut req: Request<Full<Bytes>>| {
        let uri = req.uri().to_string().replace("[redacted]", HOOK_TOKEN);
        *req.uri_mut() = uri.parse().unwrap();
        req
    });
    let (rw, svc) = configured(
        ledger,
        webhooks("replay_supplies_path_secrets = true"),
        &vendor,
        supply,
    );
    let op = Operation::new(TENANT, "notify", "intent-hook-supplied");

    let _ = svc.oneshot(delivery(&op, HOOK_TOKEN)).await;
    let r = recover_until(&rw, &op, |r| r.state == State::Succeeded).await;
    assert_eq!(
        r.request.url,
        "https://hooks.vendor.test/hooks/[redacted]/send?wait=true"
    );
    assert_eq!(
        vendor.received(),
        [(
            Method::POST,
            format!("https://hooks.vendor.test/hooks/{HOOK_TOKEN}/send?wait=true")
        )],
        "the replay, with the token its stack put back"
    );
}
