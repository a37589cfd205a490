//! The review page at the HTTP level (issue 12 item 3): every route, role and error, over a
//! ledger populated by real drills against the fake vendor. Every action is checked in the
//! ledger afterwards, and the vendor's side-effect count must not move.
#![cfg(feature = "review-ui")]

mod common;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use common::*;
use http::{StatusCode, header};
use http_body_util::BodyExt;
use recoverable_write::contract::Lookup;
use recoverable_write::ledger::TenantScope;
use recoverable_write::review_ui::{self, ReviewUiOptions, ReviewerIdentity};
use recoverable_write::testing::FakeVendor;
use recoverable_write::{Contract, KeyError, Operation, Secret, State, Tenant};
use tower::ServiceExt;

/// The application's authentication, for the tests: `x-test-user: alice` may resolve,
/// `x-test-user: rita;read-only` may only look, no header: nobody.
async fn test_auth(mut req: Request, next: Next) -> Response {
    let user = req
        .headers()
        .get("x-test-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(u) = user {
        let identity = match u.strip_suffix(";read-only") {
            Some(name) => ReviewerIdentity::read_only(name),
            None => ReviewerIdentity::resolver(u),
        };
        req.extensions_mut().insert(identity);
    }
    next.run(req).await
}

/// The CSRF key of the tests' page.
const CSRF_KEY: &[u8] = b"review-ui test key: 32 bytes ok!";

fn config(drill: &Drill) -> ReviewUiOptions {
    ReviewUiOptions::for_tenant(drill.ledger.clone(), Tenant::new(TENANT))
        .reviews(drill.rw.reviews())
        .csrf_key(Secret::new(CSRF_KEY).unwrap())
}

fn app(config: ReviewUiOptions) -> Router {
    Router::new()
        .nest("/ops", review_ui::router(config))
        .layer(middleware::from_fn(test_auth))
}

struct Answer {
    status: StatusCode,
    location: Option<String>,
    body: String,
}

async fn call(app: &Router, req: http::Request<Body>) -> Answer {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let location = res
        .headers()
        .get(header::LOCATION)
        .map(|v| v.to_str().unwrap().to_owned());
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        location,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

async fn get(app: &Router, user: Option<&str>, uri: &str) -> Answer {
    let mut b = http::Request::get(uri);
    if let Some(u) = user {
        b = b.header("x-test-user", u);
    }
    call(app, b.body(Body::empty()).unwrap()).await
}

async fn post(app: &Router, user: Option<&str>, uri: &str, form: &[(&str, &str)]) -> Answer {
    let body = form
        .iter()
        .map(|(k, v)| format!("{k}={}", urlencode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut b =
        http::Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(u) = user {
        b = b.header("x-test-user", u);
    }
    call(app, b.body(Body::from(body)).unwrap()).await
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of the first hidden input `name` in a page.
fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in page"))
        + marker.len();
    page[start..][..page[start..].find('"').unwrap()].to_owned()
}

/// Drill D9 (a lost response, keys expired, records cleaned): the engine runs out of evidence
/// and hands the operation to a person.
async fn drill_in_review() -> (Drill, Operation) {
    let drill = Drill::with_options(DrillOptions::d9()).await;
    let op = new_op("intent-review-ui");
    let row = drill.d9_to_review(&op, "E17").await;
    assert_eq!(row.last_result, Some(State::Unknown));
    assert_eq!(drill.vendor.tickets_created(), 1);
    (drill, op)
}

fn op_path(op: &Operation) -> String {
    format!("/ops/op/{}", op.id())
}

/// The form fields of the operation's page, as a browser would send them.
async fn form_of(app: &Router, user: &str, op: &Operation) -> (String, String) {
    let page = get(app, Some(user), &op_path(op)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    (hidden(&page.body, "version"), hidden(&page.body, "csrf"))
}

#[tokio::test]
async fn without_an_identity_every_route_answers_401() {
    let (drill, op) = drill_in_review().await;
    let app = app(config(&drill));
    for uri in [
        "/ops",
        "/ops?state=bogus".to_owned().as_str(),
        &op_path(&op),
    ] {
        let a = get(&app, None, uri).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{uri}");
        assert!(a.body.contains("Sign in required"));
        assert!(
            !a.body.contains(op.id().as_str()),
            "nothing leaks to nobody"
        );
    }
    for action in ["claim", "resolve"] {
        let a = post(
            &app,
            None,
            &format!("{}/{action}", op_path(&op)),
            &[("version", "1"), ("csrf", "00"), ("reason", "x")],
        )
        .await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(drill.record(op.id()).await.state, State::ManualReview);
}

#[tokio::test]
async fn the_queue_lists_stuck_operations_with_ages_and_filters() {
    let (drill, op) = drill_in_review().await;
    let app = app(config(&drill));
    let id = op.id().as_str();

    let q = get(&app, Some("alice"), "/ops").await;
    assert_eq!(q.status, StatusCode::OK);
    assert!(q.body.contains(id), "{}", q.body);
    assert!(q.body.contains("Manual review"));
    assert!(q.body.contains("create ticket"));
    assert!(q.body.contains("127.0.0.1"), "the target host is shown");
    // An age in the command line's format (`850ms`, `12s`, `12m 34s`).
    assert!(
        q.body.contains("ms</b>") || q.body.contains("s</b>"),
        "an age: {}",
        q.body
    );
    assert!(q.body.contains("1/3"), "attempts used of allowed");
    assert!(q.body.contains(&format!("href=\"/ops/op/{id}\"")));

    let hit = |uri: &'static str| {
        let app = app.clone();
        async move { get(&app, Some("alice"), uri).await }
    };
    for uri in [
        "/ops?state=manual_review",
        "/ops?state=MANUAL_REVIEW&order=newest",
        "/ops?state=all",
        "/ops?contract=fake-vendor-v1",
        "/ops?host=127.0.0.1",
        "/ops?q=op-",
        "/ops?older_than=0s",
    ] {
        let a = hit(uri).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}");
        assert!(a.body.contains(id), "{uri} lists it");
    }
    for uri in [
        "/ops?state=succeeded",
        "/ops?state=unknown",
        "/ops?contract=other",
        "/ops?host=vendor.example",
        "/ops?q=zzz",
        "/ops?older_than=1d",
    ] {
        let a = hit(uri).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}");
        assert!(!a.body.contains(id), "{uri} leaves it out");
        assert!(a.body.contains("No operation matches these filters."));
    }
    // Another tenant's router does not see it.
    let other = self::app(
        ReviewUiOptions::for_tenant(drill.ledger.clone(), Tenant::new("tenant-b"))
            .reviews(drill.rw.reviews()),
    );
    let a = get(&other, Some("alice"), "/ops?state=all").await;
    assert!(!a.body.contains(id));
    assert_eq!(
        get(&other, Some("alice"), &op_path(&op)).await.status,
        StatusCode::NOT_FOUND
    );
    // A tenant-scoped router refuses to be asked for another tenant.
    assert_eq!(
        get(&app, Some("alice"), "/ops?tenant=tenant-b")
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn bad_filters_answer_400_and_say_why() {
    let (drill, _op) = drill_in_review().await;
    let app = app(config(&drill));
    for (uri, why) in [
        ("/ops?state=stuck", "unknown state"),
        ("/ops?older_than=ten", "is not an age"),
        ("/ops?order=sideways", "neither oldest nor newest"),
        ("/ops?after=garbage", "page link is not valid"),
        ("/ops?colour=red", "unknown filter"),
        ("/ops?q=a%00b", "NUL"),
    ] {
        let a = get(&app, Some("alice"), uri).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(a.body.contains(why), "{uri}: {}", a.body);
    }
}

#[tokio::test]
async fn the_queue_pages_with_a_keyset_next_link() {
    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let (first, second) = (new_op("intent-page-1"), new_op("intent-page-2"));
    drill.vendor.faults().drop_after_commit(2);
    let _ = send(&mut svc, drill.ticket_request(&first, "E17")).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let _ = send(&mut svc, drill.ticket_request(&second, "E18")).await;
    assert_eq!(drill.record(first.id()).await.state, State::Unknown);
    let app = app(config(&drill).page_size(1));

    let one = get(&app, Some("alice"), "/ops?state=unknown").await;
    assert_eq!(one.status, StatusCode::OK);
    assert!(one.body.contains(first.id().as_str()), "oldest first");
    assert!(!one.body.contains(second.id().as_str()));
    let marker = "<a href=\"";
    let next_at = one.body.find("Next page").expect("a next link");
    let link_start = one.body[..next_at].rfind(marker).unwrap() + marker.len();
    let link = one.body[link_start..][..one.body[link_start..].find('"').unwrap()]
        .replace("&amp;", "&")
        .replace("&#38;", "&");
    assert!(link.starts_with("/ops?state=UNKNOWN"), "{link}");
    assert!(link.contains("after="), "{link}");

    let two = get(&app, Some("alice"), &link).await;
    assert_eq!(two.status, StatusCode::OK, "{}", two.body);
    assert!(two.body.contains(second.id().as_str()));
    assert!(!two.body.contains(first.id().as_str()));
    assert!(!two.body.contains("Next page"), "the last page");
    assert!(two.body.contains("First page"));
    assert_eq!(drill.vendor.tickets_created(), 2);
}

/// Issue 30 item 2: beside the key, the page names what else the vendor can find the write by:
/// the reference its answer gave the object, and the request the contract's lookup makes.
#[tokio::test]
async fn the_operation_page_names_the_vendor_reference_and_the_contract_lookup() {
    let drill = Drill::with_options(DrillOptions {
        contract: Contract::conservative().lookup(Lookup::http_get("/operations/{operation_id}")),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-vendor-ref");
    send(&mut svc, drill.ticket_request(&op, "E17"))
        .await
        .expect("the create succeeds");
    assert_eq!(drill.vendor.tickets_created(), 1);
    let ticket = drill.vendor.tickets()[0].clone();
    assert_eq!(ticket.operation_id.as_deref(), Some(op.id().as_str()));

    let app = app(config(&drill));
    let page = get(&app, Some("alice"), &op_path(&op)).await;
    assert_eq!(page.status, StatusCode::OK);
    let b = &page.body;
    assert!(
        b.contains(&format!(
            "{} (named by the answer to a send, entry #",
            ticket.id
        )),
        "{b}"
    );
    let lookup = drill.vendor.url(&format!("/operations/{}", op.id()));
    assert!(b.contains(&format!("GET {lookup}")), "{b}");
    // Asked by hand, that very lookup finds the ticket.
    let asked = http_client()
        .request(
            http::Request::get(&lookup)
                .header("x-tenant", TENANT)
                .header("authorization", CREDENTIAL)
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await
        .expect("the vendor answers");
    assert_eq!(asked.status(), StatusCode::OK);
    let answer = asked.into_body().collect().await.unwrap().to_bytes();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.contains(&ticket.id), "{answer}");
    let package = drill
        .rw
        .reviews()
        .handoff(op.tenant(), op.id())
        .await
        .unwrap();
    assert_eq!(
        package.parameters.vendor_lookup,
        Some(format!("GET {lookup}"))
    );
    let reference = package.parameters.vendor_reference.expect("a reference");
    assert_eq!(reference.value, ticket.id);
    assert!(reference.confirmed);
}

#[tokio::test]
async fn the_operation_page_says_what_to_decide_and_shows_the_redacted_package() {
    let (drill, op) = drill_in_review().await;
    let app = app(config(&drill));
    let row = drill.record(op.id()).await;
    let a = get(&app, Some("alice"), &op_path(&op)).await;
    assert_eq!(a.status, StatusCode::OK);
    let b = &a.body;
    // The plain-language summary at the top.
    assert!(
        b.contains("The vendor may have carried out “create ticket”: a person must decide"),
        "{b}"
    );
    assert!(b.contains("Lookups found nothing"), "{b}");
    assert!(b.contains("4 of 4 lookups used"), "{b}");
    assert!(b.contains("1 of 3 attempts used"), "{b}");
    assert!(b.contains("Nobody has claimed it yet"), "{b}");
    assert!(b.contains("Never create it again by hand"));
    // The package: parameters redacted, attempts with id and generation, the timeline.
    assert!(
        b.contains("device_id, operation_id, priority (values hidden)"),
        "{b}"
    );
    assert!(b.contains("POST http://127.0.0.1:"));
    let attempt = row.current_attempt.expect("an attempt").to_string();
    assert!(b.contains(&attempt), "the attempt id is shown");
    assert!(
        b.contains("Unknown → Manual review"),
        "the escalation is in the timeline"
    );
    assert!(
        b.contains("Handed to a person because: query budget exhausted"),
        "and why"
    );
    assert!(b.contains("of 4 used"), "lookups used of allowed");
    assert!(b.contains("Writes</dt><dd>allowed"));
    // The forms carry the version shown and a token.
    assert_eq!(hidden(b, "version"), row.version.to_string());
    assert_eq!(hidden(b, "csrf").len(), 64);
    // Never a credential or a body value.
    assert!(!b.contains("sk_test_secret"));
    assert!(!b.contains("E17"));
    // The key the vendor saw (issue 30), and where the contract put it: what to look it up by.
    let seen = drill.vendor.tickets()[0]
        .idempotency_key
        .clone()
        .expect("the vendor saw a key");
    assert_eq!(seen, row.idempotency_key.as_str());
    assert!(
        b.contains(&format!("{seen} (sent in the header Idempotency-Key)")),
        "{b}"
    );
    // Nothing named the vendor's object (it cleaned its records), and the contract names no
    // lookup: the page says both rather than leave the operator guessing.
    assert!(
        b.contains("none named yet (no answer or callback named the object)"),
        "{b}"
    );
    assert!(
        b.contains("the contract fake-vendor-v1 names no lookup"),
        "{b}"
    );
    // And what the browser is told about the page.
    let res = app
        .clone()
        .oneshot(
            http::Request::get(op_path(&op))
                .header("x-test-user", "alice")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let csp = res.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    // No script but the page's own refresh script, named by its hash (with `no_refresh`, no
    // script at all: see `a_page_says_when_it_was_read_and_refreshes_only_with_its_own_script`).
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let scripts: Vec<&str> = csp
        .split(';')
        .map(str::trim)
        .filter(|d| d.starts_with("script-src"))
        .collect();
    assert_eq!(scripts.len(), 1, "{csp}");
    let sources: Vec<&str> = scripts[0].split_whitespace().skip(1).collect();
    assert!(
        sources.len() == 1 && sources[0].starts_with("'sha256-"),
        "{csp}"
    );
    assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store");
}

#[tokio::test]
async fn an_unknown_operation_is_404() {
    let (drill, _op) = drill_in_review().await;
    let app = app(config(&drill));
    let a = get(&app, Some("alice"), "/ops/op/op-does-not-exist").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.body.contains("No such operation"));
    let a = get(&app, Some("alice"), "/ops/op/%3Cscript%3E").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(
        a.body.contains("script") && !a.body.contains("<script>"),
        "{}",
        a.body
    );
}

#[tokio::test]
async fn a_read_only_person_sees_everything_but_no_forms_and_cannot_post() {
    let (drill, op) = drill_in_review().await;
    let app = app(config(&drill));
    let before = drill.record(op.id()).await;
    let a = get(&app, Some("rita;read-only"), &op_path(&op)).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.contains("a person must decide"));
    assert!(a.body.contains("read-only access"));
    assert!(!a.body.contains("<form method=\"post\""), "no forms");
    // A token that would be valid for someone who may resolve does not help.
    let (version, csrf) = form_of(&app, "rita", &op).await;
    for action in ["claim", "resolve"] {
        let a = post(
            &app,
            Some("rita;read-only"),
            &format!("{}/{action}", op_path(&op)),
            &[
                ("version", &version),
                ("csrf", &csrf),
                ("decision", "succeeded"),
                ("reason", "trying"),
            ],
        )
        .await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{action}");
        assert!(a.body.contains("Read-only access"));
    }
    let after = drill.record(op.id()).await;
    assert_eq!(after.version, before.version, "nothing changed");
    assert_eq!(after.state, State::ManualReview);
}

#[tokio::test]
async fn a_missing_or_forged_csrf_token_is_403() {
    let (drill, op) = drill_in_review().await;
    let app = app(config(&drill));
    let (version, csrf) = form_of(&app, "alice", &op).await;
    let claim = format!("{}/claim", op_path(&op));
    let cases: [(&str, Vec<(&str, &str)>); 4] = [
        ("missing", vec![("version", &version), ("reason", "r")]),
        (
            "forged",
            vec![("version", &version), ("csrf", "00ff"), ("reason", "r")],
        ),
        (
            "someone else's",
            vec![("version", &version), ("csrf", &csrf), ("reason", "r")],
        ),
        (
            "another router's key",
            vec![("version", &version), ("csrf", "not hex"), ("reason", "r")],
        ),
    ];
    for (what, form) in cases {
        let user = if what == "someone else's" {
            "mallory"
        } else {
            "alice"
        };
        let a = post(&app, Some(user), &claim, &form).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{what}: {}", a.body);
    }
    // A router with another key does not accept this router's tokens.
    let other = self::app(
        ReviewUiOptions::for_tenant(drill.ledger.clone(), Tenant::new(TENANT))
            .reviews(drill.rw.reviews()),
    );
    let a = post(
        &other,
        Some("alice"),
        &claim,
        &[("version", &version), ("csrf", &csrf), ("reason", "r")],
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let row = drill.record(op.id()).await;
    assert_eq!(row.version.to_string(), version, "nothing changed");
    assert!(
        !drill
            .evidence(op.id())
            .await
            .iter()
            .any(|e| e.entry.kind.starts_with("review")),
        "no review action recorded"
    );
}

/// A CSRF token computed outside the page, as an attacker who knows (or guesses) the key would:
/// HMAC-SHA256 over the domain, the length-prefixed person, tenant and operation, and the
/// version (`review_ui/csrf.rs`).
fn offline_token(key: &[u8], who: &str, tenant: &str, op: &str, version: u64) -> String {
    use hmac::{Hmac, Mac};
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    m.update(b"recoverable-write/review-ui/csrf/v1");
    for part in [who, tenant, op] {
        m.update(&(part.len() as u64).to_be_bytes());
        m.update(part.as_bytes());
    }
    m.update(&version.to_be_bytes());
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Issue 27 item 9: the README's `.csrf_key(std::env::var("REVIEW_CSRF_KEY").unwrap_or_default())`
/// ran the page with an empty key when the variable was unset, and a token computed offline
/// with that key claimed an operation (303). An empty or short key is now refused where the
/// key is made, so no page holds one, and the forged token is refused.
#[tokio::test]
async fn an_empty_or_short_csrf_key_is_refused_and_a_token_forged_with_one_claims_nothing() {
    let unset = std::env::var("RW_TEST_CSRF_KEY_NEVER_SET").unwrap_or_default();
    assert_eq!(Secret::new(unset).unwrap_err(), KeyError::Empty);
    assert_eq!(
        Secret::new(b"short csrf key").unwrap_err(),
        KeyError::TooShort { len: 14, min: 16 }
    );

    let (drill, op) = drill_in_review().await;
    let (id, tenant) = (op.id().as_str(), TENANT);
    let keyed = app(config(&drill));
    let (version, shown) = form_of(&keyed, "alice", &op).await;
    let v: u64 = version.parse().unwrap();
    // The forger is faithful: with the page's own key it makes the very token the page shows.
    assert_eq!(offline_token(CSRF_KEY, "alice", tenant, id, v), shown);

    let forged = offline_token(b"", "alice", tenant, id, v);
    let default_key = app(
        ReviewUiOptions::for_tenant(drill.ledger.clone(), Tenant::new(TENANT))
            .reviews(drill.rw.reviews()),
    );
    for (page, router) in [("configured key", &keyed), ("default key", &default_key)] {
        let a = post(
            router,
            Some("alice"),
            &format!("{}/claim", op_path(&op)),
            &[
                ("version", &version),
                ("csrf", &forged),
                ("reason", "forged"),
            ],
        )
        .await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{page}: {}", a.body);
    }
    let row = drill.record(op.id()).await;
    assert_eq!(row.version, v, "nothing changed");
    assert_eq!(row.state, State::ManualReview);
    assert!(
        !drill
            .evidence(op.id())
            .await
            .iter()
            .any(|e| e.entry.kind.starts_with("review")),
        "no review action recorded"
    );
}

#[tokio::test]
async fn a_stale_version_is_409_with_the_current_state_and_a_double_submit_says_already_done() {
    let (drill, op) = drill_in_review().await;
    let app = app(config(&drill));
    let (version, csrf) = form_of(&app, "alice", &op).await;
    let (bob_version, bob_csrf) = form_of(&app, "bob", &op).await;
    let claim = format!("{}/claim", op_path(&op));
    let form = [
        ("version", version.as_str()),
        ("csrf", csrf.as_str()),
        ("reason", "checking the vendor console"),
    ];
    let first = post(&app, Some("alice"), &claim, &form).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.body);
    // The same form again: the compare-and-swap refuses it, and the page says it was done.
    let again = post(&app, Some("alice"), &claim, &form).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(again.body.contains("Already done"), "{}", again.body);
    assert!(again.body.contains("nothing was done twice"));
    assert!(again.body.contains("claimed by alice; version"));

    // Bob read the page before alice claimed: his form is stale.
    let stale = post(
        &app,
        Some("bob"),
        &format!("{}/resolve", op_path(&op)),
        &[
            ("version", &bob_version),
            ("csrf", &bob_csrf),
            ("decision", "succeeded"),
            ("remote_ref", "W731"),
            ("reason", "seen in the console"),
        ],
    )
    .await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert!(
        stale.body.contains("Changed since you read it"),
        "{}",
        stale.body
    );
    assert!(stale.body.contains(&format!("You read version {version}")));
    assert!(
        stale.body.contains("Manual review"),
        "the current state is shown"
    );
    assert!(stale.body.contains("Claimed by alice"));
    let row = drill.record(op.id()).await;
    assert_eq!(
        row.state,
        State::ManualReview,
        "the stale resolve did nothing"
    );
    assert_eq!(
        row.version,
        version.parse::<u64>().unwrap() + 1,
        "one claim"
    );
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn claim_then_resolve_succeeded_closes_it_with_the_audit_trail_and_sends_nothing() {
    let (drill, op) = drill_in_review().await;
    let (posts, tickets) = (
        drill.vendor.posts_received(),
        drill.vendor.tickets_created(),
    );
    let app = app(config(&drill));
    let before = drill.record(op.id()).await;

    let (version, csrf) = form_of(&app, "alice", &op).await;
    let a = post(
        &app,
        Some("alice"),
        &format!("{}/claim", op_path(&op)),
        &[
            ("tenant", TENANT),
            ("version", &version),
            ("csrf", &csrf),
            ("reason", "checking the vendor console"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(
        a.location.as_deref(),
        Some(format!("/ops/op/{}?done=claim", op.id()).as_str())
    );
    let claimed = drill.record(op.id()).await;
    assert_eq!(claimed.state, State::ManualReview);
    assert_eq!(claimed.version, before.version + 1);
    assert_eq!(
        claimed.generation.0,
        before.generation.0 + 1,
        "the engine is fenced out"
    );

    let page = get(&app, Some("alice"), a.location.as_deref().unwrap()).await;
    assert!(page.body.contains("Claimed. Automatic sends are stopped"));
    assert!(page.body.contains("Claimed by alice"));
    assert!(
        page.body.contains("You hold this operation"),
        "no second claim form for the holder"
    );
    let (version, csrf) = (hidden(&page.body, "version"), hidden(&page.body, "csrf"));
    assert_eq!(version, claimed.version.to_string());

    let a = post(
        &app,
        Some("alice"),
        &format!("{}/resolve", op_path(&op)),
        &[
            ("version", &version),
            ("csrf", &csrf),
            ("decision", "succeeded"),
            ("remote_ref", "W731"),
            ("reason", "ticket W731 found in the vendor console"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));

    // The audit trail: who, why, from which version to which.
    let notes: Vec<String> = drill
        .evidence(op.id())
        .await
        .into_iter()
        .filter(|e| e.entry.kind.starts_with("review"))
        .filter_map(|e| e.entry.note)
        .collect();
    assert_eq!(
        notes,
        vec![
            format!(
                "claimed by alice; version {} -> {}; reason: checking the vendor console",
                before.version, claimed.version
            ),
            format!(
                "confirmed succeeded (W731) by alice; version {} -> {}; reason: ticket W731 \
                 found in the vendor console",
                claimed.version, row.version
            ),
        ]
    );
    let page = get(&app, Some("alice"), &op_path(&op)).await;
    assert!(
        page.body
            .contains("Done: “create ticket” succeeded at the vendor (W731)")
    );
    assert!(
        page.body
            .contains("Decision: confirmed succeeded (W731) by alice"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("ticket W731 found in the vendor console")
    );
    assert!(
        !page.body.contains("<form method=\"post\""),
        "nothing left to do"
    );

    // The review sent nothing to the vendor.
    assert_eq!(drill.vendor.posts_received(), posts);
    assert_eq!(drill.vendor.tickets_created(), tickets);
    for _ in 0..3 {
        drill.recoverer.run_once().await.unwrap();
    }
    assert_eq!(drill.vendor.posts_received(), posts);
}

#[tokio::test]
async fn resolving_needs_a_reason_a_decision_and_for_not_executed_a_reapproval() {
    let (drill, op) = drill_in_review().await;
    let app = app(config(&drill));
    let (version, csrf) = form_of(&app, "alice", &op).await;
    let resolve = format!("{}/resolve", op_path(&op));
    let base = [("version", version.as_str()), ("csrf", csrf.as_str())];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut f: Vec<(&str, &str)> = base.to_vec();
        f.extend_from_slice(extra);
        f
    };
    for (form, why) in [
        (
            with(&[("decision", "succeeded"), ("reason", "  ")]),
            "A reason is required",
        ),
        (with(&[("reason", "sure")]), "Choose a decision"),
        (
            with(&[("decision", "maybe"), ("reason", "sure")]),
            "Unknown decision",
        ),
        (
            with(&[("decision", "not_executed"), ("reason", "not there")]),
            "tick “re-approve”",
        ),
        (
            vec![
                ("csrf", csrf.as_str()),
                ("decision", "keep_pending"),
                ("reason", "r"),
            ],
            "which version",
        ),
    ] {
        let a = post(&app, Some("alice"), &resolve, &form).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{why}: {}", a.body);
        assert!(a.body.contains(why), "{why}: {}", a.body);
    }
    assert_eq!(drill.record(op.id()).await.version.to_string(), version);

    // Keep pending: a note, nothing else; sent twice, the second says already done.
    let keep = with(&[
        ("decision", "keep_pending"),
        ("reason", "waiting for the vendor"),
    ]);
    let a = post(&app, Some("alice"), &resolve, &keep).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert!(a.location.unwrap().ends_with("done=keep_pending"));
    let a = post(&app, Some("alice"), &resolve, &keep).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("Already done"));
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::ManualReview);
    // The note advanced the version: a form read before it is stale (issue 27).
    assert_eq!(row.version, version.parse::<u64>().unwrap() + 1);
    let (version, csrf) = form_of(&app, "alice", &op).await;
    let base = [("version", version.as_str()), ("csrf", csrf.as_str())];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut f: Vec<(&str, &str)> = base.to_vec();
        f.extend_from_slice(extra);
        f
    };

    // Not executed, re-approved: back to RETRY_READY under a fresh budget, nothing sent yet.
    let posts = drill.vendor.posts_received();
    let a = post(
        &app,
        Some("alice"),
        &resolve,
        &with(&[
            ("decision", "not_executed"),
            ("reapprove", "yes"),
            ("reason", "the vendor has no such ticket"),
        ]),
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(drill.record(op.id()).await.state, State::RetryReady);
    assert_eq!(
        drill.vendor.posts_received(),
        posts,
        "the page itself sends nothing"
    );
}

#[tokio::test]
async fn a_claim_during_an_attempt_shows_the_late_success_prominently() {
    // Drill D28 on the page: a reviewer claims while the attempt is on the wire; the vendor's
    // success arrives after the claim.
    let drill = Drill::start().await;
    let op = new_op("intent-review-ui-d28");
    drill
        .vendor
        .faults()
        .delay_response(Duration::from_millis(400), 1);
    let mut svc = drill.writer();
    let req = drill.ticket_request(&op, "E17");
    let call = tokio::spawn(async move { send(&mut svc, req).await });
    let app = app(config(&drill));
    let (version, csrf) = loop {
        if let Some(r) = drill.ledger.get(op.tenant(), op.id()).await.unwrap()
            && r.state == State::InFlight
        {
            break form_of(&app, "bob", &op).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let a = post(
        &app,
        Some("bob"),
        &format!("{}/claim", op_path(&op)),
        &[
            ("version", &version),
            ("csrf", &csrf),
            ("reason", "customer says it is stuck"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let _ = call.await.unwrap();
    assert_eq!(drill.record(op.id()).await.state, State::ManualReview);

    let page = get(&app, Some("bob"), &op_path(&op)).await;
    assert!(
        page.body.contains("Late evidence after bob claimed it"),
        "{}",
        page.body
    );
    assert!(page.body.contains("<tr class=\"late\">"));
    assert!(page.body.contains("<b>succeeded"), "{}", page.body);
    assert_eq!(drill.vendor.posts_received(), 1);
    assert_eq!(drill.vendor.tickets_created(), 1);
}

#[tokio::test]
async fn an_all_tenants_router_finds_the_tenant_and_a_scoped_one_stays_in_its_tenant() {
    let (drill, op) = drill_in_review().await;
    let all = app(
        ReviewUiOptions::scoped(drill.ledger.clone(), TenantScope::AllTenants)
            .reviews(drill.rw.reviews())
            .csrf_key(Secret::new(b"another key for every tenant....").unwrap()),
    );
    let q = get(&all, Some("ops-lead"), "/ops").await;
    assert!(q.body.contains("all tenants"));
    assert!(q.body.contains(TENANT), "a tenant column");
    let href = format!("/ops/op/{}?tenant={TENANT}", op.id());
    assert!(q.body.contains(&href.replace('&', "&amp;")) || q.body.contains(&href));
    // Without a tenant in the address the only tenant with this id is found.
    let page = get(&all, Some("ops-lead"), &op_path(&op)).await;
    assert_eq!(page.status, StatusCode::OK);
    let (version, csrf) = (hidden(&page.body, "version"), hidden(&page.body, "csrf"));
    assert_eq!(hidden(&page.body, "tenant"), TENANT);
    let a = post(
        &all,
        Some("ops-lead"),
        &format!("{}/claim", op_path(&op)),
        &[
            ("tenant", TENANT),
            ("version", &version),
            ("csrf", &csrf),
            ("reason", "operator on call"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(
        a.location.as_deref(),
        Some(format!("{href}&done=claim").as_str())
    );
    assert_eq!(
        get(&all, Some("ops-lead"), "/ops/op/op-nowhere")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // A tenant's router does not answer for another tenant, even when asked by name.
    let scoped = app(config(&drill));
    let a = get(
        &scoped,
        Some("alice"),
        &format!("{}?tenant=tenant-b", op_path(&op)),
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let _keep_vendor_alive: &FakeVendor = &drill.vendor;
}

#[tokio::test]
async fn a_claim_from_the_page_while_unknown_stops_the_engine_before_it_replays() {
    // Drill D27 on the page: the operation is UNKNOWN and the engine would look and replay; a
    // person claims it first.
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        ..DrillOptions::default()
    })
    .await;
    let mut svc = drill.writer();
    let op = new_op("intent-review-ui-d27");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut svc, drill.ticket_request(&op, "E17")).await;
    assert_eq!(drill.record(op.id()).await.state, State::Unknown);
    let app = app(config(&drill));

    let page = get(&app, Some("alice"), &op_path(&op)).await;
    assert!(
        page.body.contains("the engine is still verifying it"),
        "{}",
        page.body
    );
    assert!(page.body.contains("The engine owns it"));
    assert!(
        !page.body.contains("name=\"decision\""),
        "resolving waits for review"
    );
    let (version, csrf) = (hidden(&page.body, "version"), hidden(&page.body, "csrf"));
    let a = post(
        &app,
        Some("alice"),
        &format!("{}/claim", op_path(&op)),
        &[
            ("version", &version),
            ("csrf", &csrf),
            ("reason", "the customer reports a duplicate risk"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    for _ in 0..3 {
        drill.recoverer.run_once().await.unwrap();
    }
    let row = drill.record(op.id()).await;
    assert_eq!(
        row.state,
        State::ManualReview,
        "the engine does not take it back"
    );
    assert_eq!(
        drill.vendor.posts_received(),
        1,
        "no replay after the claim"
    );
    assert_eq!(drill.vendor.tickets_created(), 1);
    let page = get(&app, Some("alice"), &op_path(&op)).await;
    assert!(page.body.contains("You hold this operation"));
    assert!(
        page.body.contains("name=\"decision\""),
        "now it can be resolved"
    );
}

/// With the application's retention settings, the operation page says when a finished
/// operation's details and record go, and that an unfinished one is kept whatever its age.
#[tokio::test]
async fn the_operation_page_shows_the_retention_dates() {
    let (drill, op) = drill_in_review().await;
    let with = app(config(&drill).purger(drill.rw.purger()));
    let page = get(&with, Some("alice"), &op_path(&op)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("kept whatever its age while it is not finished"),
        "{}",
        page.body
    );
    // A finished one: the write that simply succeeds.
    let done = new_op("intent-retention-page");
    let mut writer = drill.writer();
    send(&mut writer, drill.ticket_request(&done, "E5"))
        .await
        .unwrap();
    let page = get(&with, Some("alice"), &op_path(&done)).await;
    assert!(page.body.contains("details kept until"), "{}", page.body);
    assert!(
        page.body
            .contains("the guarantee that a repeat sends nothing"),
        "{}",
        page.body
    );
    // Without the settings, no retention line.
    let plain = app(config(&drill));
    let page = get(&plain, Some("alice"), &op_path(&done)).await;
    assert!(!page.body.contains("Retention"), "{}", page.body);
}

/// Issue 27 item 3 on the page: a row this version cannot decode is quarantined by the
/// recovery pass, then counted in the queue's header, listed above the open queue and under its
/// own filter with the decode error, and opened as a raw, redacted view (200: it used to be a
/// 503). Release is a CSRF-protected form for people who may resolve: refused (409, nothing
/// changed) while the row cannot be read, done (303, audited) once it can, "already done" when
/// sent twice. Recovery then goes on and finds the vendor's ticket: nothing is created twice.
#[tokio::test]
async fn a_quarantined_operation_is_counted_listed_opened_and_released_on_the_page() {
    let drill = Drill::start().await;
    let op = new_op("intent-newer-row");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut drill.writer(), drill.ticket_request(&op, "E17")).await;
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Unknown);
    let raw = rusqlite::Connection::open(drill.dir.path().join("ledger.db")).unwrap();
    raw.busy_timeout(Duration::from_secs(5)).unwrap();
    let headers: String = raw
        .query_row(
            "SELECT request_headers FROM rw_operations WHERE operation_id = ?1",
            [op.id().as_str()],
            |r| r.get(0),
        )
        .unwrap();
    let set_headers = |value: &str| {
        raw.execute(
            "UPDATE rw_operations SET request_headers = ?1 WHERE operation_id = ?2",
            [value, op.id().as_str()],
        )
        .unwrap()
    };
    // A newer version stored the headers in a shape this one cannot read.
    assert_eq!(set_headers(r#"{"format": 2, "headers": []}"#), 1);
    let mut quarantined = false;
    for _ in 0..200 {
        drill.recoverer.run_once().await.unwrap();
        if !drill.ledger.quarantined(10).await.unwrap().is_empty() {
            quarantined = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(quarantined);
    let app = app(config(&drill));
    let id = op.id().as_str();

    // Counted in the header and listed above the open queue, with what is wrong.
    let queue = get(&app, Some("alice"), "/ops").await;
    assert_eq!(queue.status, StatusCode::OK, "{}", queue.body);
    let b = &queue.body;
    assert!(
        b.contains(r#"<span class="badge b-quarantined">Quarantined</span><b>1</b>"#),
        "{b}"
    );
    assert!(
        b.contains("Quarantined: this version cannot read these"),
        "{b}"
    );
    assert!(
        b.contains(id) && b.contains("column request_headers"),
        "{b}"
    );
    let alone = get(&app, Some("alice"), "/ops?state=quarantined").await;
    assert_eq!(alone.status, StatusCode::OK);
    assert!(alone.body.contains(id), "{}", alone.body);
    assert!(
        alone.body.contains("stored state UNKNOWN"),
        "{}",
        alone.body
    );
    assert!(
        alone.body.contains("1 quarantined operation shown"),
        "{}",
        alone.body
    );
    let unknown = get(&app, Some("alice"), "/ops?state=UNKNOWN").await;
    assert!(
        !unknown.body.contains(&format!(">{id}<")),
        "{}",
        unknown.body
    );
    let mixed = get(&app, Some("alice"), "/ops?state=quarantined&state=UNKNOWN").await;
    assert_eq!(mixed.status, StatusCode::BAD_REQUEST);

    // Opened: 200, the columns this version reads, the error, what to do; nothing secret.
    let page = get(&app, Some("alice"), &format!("/ops/op/{id}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let b = &page.body;
    for expected in [
        "This version cannot read this operation",
        "column request_headers",
        "upgrade to a version that can read it, then release it",
        "device_id, operation_id, priority (values hidden)",
        "State as stored</dt><dd>UNKNOWN",
        "Release from quarantine",
    ] {
        assert!(b.contains(expected), "{expected:?} missing:\n{b}");
    }
    assert!(!b.contains("sk_test_secret") && !b.contains("E17"), "{b}");
    assert!(!b.contains(row.idempotency_key.as_str()), "{b}");
    let version = hidden(b, "version");
    let csrf = hidden(b, "csrf");
    assert_eq!(
        version,
        (row.version + 1).to_string(),
        "the claim advanced it"
    );
    let read_only = get(&app, Some("rita;read-only"), &format!("/ops/op/{id}")).await;
    assert_eq!(read_only.status, StatusCode::OK);
    assert!(!read_only.body.contains("name=\"csrf\""), "no form");
    assert!(read_only.body.contains("releasing is not available to you"));

    // Not released while it cannot be read; a forged or read-only post changes nothing.
    let release_path = format!("/ops/op/{id}/release");
    let form = |reason: &'static str| {
        [
            ("version", version.clone()),
            ("csrf", csrf.clone()),
            ("reason", reason.to_owned()),
        ]
    };
    let send_form = |user: &'static str, f: [(&'static str, String); 3]| {
        let app = app.clone();
        let path = release_path.clone();
        async move {
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            post(&app, Some(user), &path, &f).await
        }
    };
    let refused = send_form("alice", form("too early")).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert!(
        refused.body.contains("This version still cannot read it"),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("column request_headers"),
        "{}",
        refused.body
    );
    let mut forged = form("forged");
    forged[1].1 = "00".repeat(32);
    assert_eq!(
        send_form("alice", forged).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        send_form("rita;read-only", form("no")).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(drill.ledger.quarantined(10).await.unwrap().len(), 1);

    // The version that reads it runs: the normal page, with the quarantine banner and form.
    assert_eq!(set_headers(&headers), 1);
    let page = get(&app, Some("alice"), &format!("/ops/op/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("the recovery engine skips it"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("This version reads it: release it"),
        "{}",
        page.body
    );
    assert_eq!(hidden(&page.body, "version"), version);
    let released = send_form("alice", form("0.4 on every worker")).await;
    assert_eq!(released.status, StatusCode::SEE_OTHER, "{}", released.body);
    assert_eq!(
        released.location.as_deref(),
        Some(format!("/ops/op/{id}?done=release").as_str())
    );
    let log = drill.evidence(op.id()).await;
    let last = log.last().unwrap();
    assert_eq!(&*last.entry.kind, "quarantine_released");
    assert_eq!(
        last.entry.note.as_deref(),
        Some(
            format!(
                "released from quarantine by alice; version {version} -> {}; reason: 0.4 on every \
                 worker",
                row.version + 2
            )
            .as_str()
        )
    );
    assert!(drill.ledger.quarantined(10).await.unwrap().is_empty());
    let twice = send_form("alice", form("0.4 on every worker")).await;
    assert_eq!(twice.status, StatusCode::CONFLICT);
    assert!(twice.body.contains("Already done"), "{}", twice.body);
    let done = get(&app, Some("alice"), &format!("/ops/op/{id}?done=release")).await;
    assert!(
        done.body.contains("Released from quarantine."),
        "{}",
        done.body
    );
    assert!(done.body.contains("quarantine released"), "in the timeline");
    let queue = get(&app, Some("alice"), "/ops").await;
    assert!(
        queue
            .body
            .contains(r#"<span class="badge b-quarantined">Quarantined</span><b>0</b>"#),
        "{}",
        queue.body
    );

    // Recovery goes on where it stopped.
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert!(row.remote_ref.is_some());
    assert_eq!(drill.vendor.tickets_created(), 1, "never created twice");
    assert_eq!(drill.vendor.posts_received(), 1);
}

/// A row that went bad while it waits for a person (no recovery pass claims a row in review, so
/// none quarantines it) opens as the same raw view, not a 503, and stays in the queue with what
/// is wrong. There is nothing to release: no form.
#[tokio::test]
async fn an_unreadable_operation_in_review_opens_as_a_raw_view_and_stays_listed() {
    let (drill, op) = drill_in_review().await;
    let raw = rusqlite::Connection::open(drill.dir.path().join("ledger.db")).unwrap();
    raw.busy_timeout(Duration::from_secs(5)).unwrap();
    let changed = raw
        .execute(
            "UPDATE rw_operations SET request_headers = 'not json' WHERE operation_id = ?1",
            [op.id().as_str()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let app = app(config(&drill));
    let page = get(&app, Some("alice"), &op_path(&op)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let b = &page.body;
    assert!(
        b.contains(r#"<span class="badge b-quarantined">Unreadable</span>"#),
        "{b}"
    );
    assert!(b.contains("column request_headers"), "{b}");
    assert!(b.contains("State as stored</dt><dd>MANUAL_REVIEW"), "{b}");
    assert!(
        b.contains("the next recovery pass that meets it will quarantine it"),
        "{b}"
    );
    assert!(!b.contains("name=\"csrf\""), "nothing to release: {b}");
    assert!(!b.contains("E17") && !b.contains("sk_test_secret"), "{b}");
    let queue = get(&app, Some("alice"), "/ops").await;
    assert_eq!(queue.status, StatusCode::OK);
    assert!(queue.body.contains(op.id().as_str()), "{}", queue.body);
    assert!(
        queue
            .body
            .contains("stored state MANUAL_REVIEW; column request_headers")
    );
    assert_eq!(drill.vendor.tickets_created(), 1);
}

/// Issue 27 item 5: a finished operation whose final state a vendor's callback contradicted
/// is in no open state's count, so the queue says so above everything else, the filter
/// "Contradicted final states" lists it (badge "contradicted"), and its page puts the
/// contradiction first.
#[tokio::test]
async fn a_contradicted_final_state_is_announced_on_the_queue_and_listed_by_its_filter() {
    use recoverable_write::contradiction::CONTRADICTION;
    use recoverable_write::ledger::backend::NewEvidence;
    use recoverable_write::ledger::conformance::{RawChanges, T0, evidence_entry, keep, update_of};
    use recoverable_write::ledger::{CallbackDelivery, CallbackEffect};

    let drill = Drill::start().await;
    let app = app(config(&drill));
    assert!(
        !get(&app, Some("alice"), "/ops")
            .await
            .body
            .contains("contradicted by the vendor"),
        "nothing to announce yet"
    );
    let r = drill
        .ledger
        .create_or_get(recoverable_write::ledger::conformance::new_operation(
            TENANT,
            "op-contra-ui",
            "intent-contra-ui",
        ))
        .await
        .unwrap()
        .into_record();
    let rejected = drill
        .ledger
        .apply(update_of(
            &r,
            RawChanges {
                last_result: Some(State::Rejected),
                ..keep(&r, State::Rejected, T0)
            },
            "setup",
        ))
        .await
        .unwrap()
        .unwrap();
    drill
        .ledger
        .apply_callback(
            CallbackDelivery {
                vendor: "fake-vendor".into(),
                event_id: "evt_ui".into(),
                event_type: "ticket.created".into(),
                tenant: rejected.tenant.clone(),
                operation_id: rejected.operation_id.clone(),
                received_at_ms: T0 + 1,
            },
            CallbackEffect::Contradiction(NewEvidence {
                note: Some(
                    "fake-vendor callback evt_ui (ticket.created): the vendor reports a success \
                     (W9) for a write recorded as rejected"
                        .into(),
                ),
                ..evidence_entry(CONTRADICTION, T0 + 1)
            }),
        )
        .await
        .unwrap();

    let queue = get(&app, Some("alice"), "/ops").await;
    assert_eq!(queue.status, StatusCode::OK);
    assert!(
        queue
            .body
            .contains("1 finished operation(s) contradicted by the vendor"),
        "{}",
        queue.body
    );
    assert!(
        queue.body.contains("href=\"/ops?state=contradicted\""),
        "{}",
        queue.body
    );
    assert!(
        !queue.body.contains("op-contra-ui\""),
        "not an open state: not in the open queue"
    );
    let listed = get(&app, Some("alice"), "/ops?state=contradicted").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert!(listed.body.contains("op-contra-ui"), "{}", listed.body);
    assert!(
        listed.body.contains(">contradicted</span>"),
        "{}",
        listed.body
    );
    let page = get(&app, Some("alice"), "/ops/op/op-contra-ui").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("The vendor contradicted this final state"),
        "{}",
        page.body
    );
    assert!(page.body.contains("recorded as rejected"), "{}", page.body);
}

/// Issue 30 item 3: "it succeeded" with no reference is final and untraceable: the page asks
/// for an explicit "no reference" tick, and the server refuses without it.
#[tokio::test]
async fn a_success_without_reference_needs_the_no_reference_tick_on_the_server() {
    let (drill, op) = drill_in_review().await;
    let tickets = drill.vendor.tickets_created();
    let app = app(config(&drill));
    let before = drill.record(op.id()).await;
    let page = get(&app, Some("alice"), &op_path(&op)).await;
    assert!(
        page.body.contains("name=\"no_reference\""),
        "the page offers the tick"
    );
    let (version, csrf) = (hidden(&page.body, "version"), hidden(&page.body, "csrf"));

    for remote_ref in ["", "   "] {
        let a = post(
            &app,
            Some("alice"),
            &format!("{}/resolve", op_path(&op)),
            &[
                ("version", &version),
                ("csrf", &csrf),
                ("decision", "succeeded"),
                ("remote_ref", remote_ref),
                ("reason", "it is in the console"),
            ],
        )
        .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.body);
        assert!(a.body.contains("no reference"), "{}", a.body);
        let row = drill.record(op.id()).await;
        assert_eq!(
            (row.state, row.version),
            (State::ManualReview, before.version)
        );
    }

    let a = post(
        &app,
        Some("alice"),
        &format!("{}/resolve", op_path(&op)),
        &[
            ("version", &version),
            ("csrf", &csrf),
            ("decision", "succeeded"),
            ("remote_ref", ""),
            ("no_reference", "yes"),
            ("reason", "checked: the vendor shows it with no reference"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref, None);
    assert_eq!(drill.vendor.tickets_created(), tickets, "nothing was sent");
}

/// Issue 30 item 3: the page answers with or without a trailing slash after its mount path.
#[tokio::test]
async fn the_queue_answers_with_or_without_a_trailing_slash() {
    let (drill, op) = drill_in_review().await;
    // Mounted as the guide says: `nest_service` routes `/ops/` too.
    let app = Router::new()
        .nest_service("/ops", review_ui::router(config(&drill)))
        .layer(middleware::from_fn(test_auth));
    for uri in ["/ops", "/ops/"] {
        let page = get(&app, Some("alice"), uri).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}: {}", page.body);
        assert!(page.body.contains(op.id().as_str()), "{uri}");
    }
    // Below the mount path, with either mounting.
    let nested = self::app(config(&drill));
    for app in [&app, &nested] {
        let page = get(app, Some("alice"), &format!("{}/", op_path(&op))).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains(op.id().as_str()));
        // Its links still start at the mount path.
        assert!(page.body.contains("href=\"/ops"), "{}", page.body);
    }
    assert_eq!(
        get(&app, Some("alice"), "/ops/nothing/").await.status,
        StatusCode::NOT_FOUND
    );
}

/// The bars of one series in a chart of the activity page: `(interval, value)`.
fn bars_of(page: &str, chart: &str, series: &str) -> Vec<(String, u64)> {
    let start = page
        .find(&format!("<svg class=\"chart\" id=\"{chart}\""))
        .unwrap_or_else(|| panic!("no chart {chart}"));
    let svg = &page[start..][..page[start..].find("</svg>").unwrap()];
    let marker = format!("data-series=\"{series}\" data-interval=\"");
    svg.match_indices(&marker)
        .map(|(i, _)| {
            let rest = &svg[i + marker.len()..];
            let (interval, rest) = rest.split_once('"').unwrap();
            let rest = rest.strip_prefix(" data-value=\"").unwrap();
            let value = rest[..rest.find('"').unwrap()].parse().unwrap();
            (interval.to_owned(), value)
        })
        .collect()
}

/// `09:00`: the hour (UTC) a time falls in, as the charts label it.
fn hour_of(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms as u64);
    humantime::format_rfc3339_seconds(at).to_string()[11..14].to_owned() + "00"
}

#[tokio::test]
async fn the_activity_page_draws_the_day_from_the_ledger() {
    let (drill, op) = drill_in_review().await;
    let app = app(config(&drill));
    let row = drill.record(op.id()).await;
    let queue = get(&app, Some("alice"), "/ops").await;
    assert!(
        queue.body.contains("href=\"/ops/activity\""),
        "the queue links to the charts"
    );
    assert!(
        queue.body.contains("href=\"/ops/bulk\""),
        "the queue links to the bulk reconciliation"
    );
    let page = get(&app, Some("alice"), "/ops/activity").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let b = &page.body;
    assert!(
        b.contains("<title id=\"flow-title\">Operations per hour"),
        "{b}"
    );
    assert!(
        b.contains("<title id=\"backlog-title\">Review backlog"),
        "{b}"
    );
    let created = bars_of(b, "flow", "Created");
    let escalated = bars_of(b, "flow", "Escalated");
    let finished = bars_of(b, "flow", "Finished");
    let backlog = bars_of(b, "backlog", "In review");
    for bars in [&created, &escalated, &finished, &backlog] {
        assert_eq!(bars.len(), 24, "one bar per hour: {bars:?}");
    }
    let nonzero = |bars: &[(String, u64)]| -> Vec<(String, u64)> {
        bars.iter().filter(|(_, v)| *v > 0).cloned().collect()
    };
    assert_eq!(nonzero(&created), [(hour_of(row.created_ms), 1)]);
    assert_eq!(nonzero(&escalated), [(hour_of(row.updated_ms), 1)]);
    assert!(nonzero(&finished).is_empty(), "{finished:?}");
    assert_eq!(
        backlog.last().unwrap().1,
        1,
        "in review at the end: {backlog:?}"
    );
    assert!(b.contains("1 created, 0 finished, 1 escalated to review; 1 in review now."));

    // Resolved: one finished, and nobody in review at the end of the day.
    let (version, csrf) = form_of(&app, "alice", &op).await;
    let claimed = post(
        &app,
        Some("alice"),
        &format!("{}/claim", op_path(&op)),
        &[
            ("tenant", TENANT),
            ("version", &version),
            ("csrf", &csrf),
            ("reason", "checking"),
        ],
    )
    .await;
    assert_eq!(claimed.status, StatusCode::SEE_OTHER, "{}", claimed.body);
    let (version, csrf) = form_of(&app, "alice", &op).await;
    let resolved = post(
        &app,
        Some("alice"),
        &format!("{}/resolve", op_path(&op)),
        &[
            ("version", &version),
            ("csrf", &csrf),
            ("decision", "succeeded"),
            ("remote_ref", "E17-1"),
            ("reason", "the ticket is there"),
        ],
    )
    .await;
    assert_eq!(resolved.status, StatusCode::SEE_OTHER, "{}", resolved.body);
    let done = drill.record(op.id()).await;
    assert_eq!(done.state, State::Succeeded);
    let page = get(&app, Some("alice"), "/ops/activity").await;
    let finished = bars_of(&page.body, "flow", "Finished");
    assert_eq!(nonzero(&finished), [(hour_of(done.updated_ms), 1)]);
    let backlog = bars_of(&page.body, "backlog", "In review");
    assert_eq!(backlog.last().unwrap().1, 0, "{backlog:?}");
    assert_eq!(drill.vendor.tickets_created(), 1, "the page sent nothing");
}

#[tokio::test]
async fn a_page_says_when_it_was_read_and_refreshes_only_with_its_own_script() {
    let (drill, op) = drill_in_review().await;
    let live = app(config(&drill).refresh_every(Duration::from_secs(7)));
    for uri in ["/ops".to_owned(), op_path(&op), "/ops/activity".to_owned()] {
        let page = get(&live, Some("alice"), &uri).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            page.body.contains("data-live=\"read-at\"") && page.body.contains("Read at <b>"),
            "{uri}: {}",
            page.body
        );
        assert!(page.body.contains("data-refresh-ms=\"7000\""), "{uri}");
        assert!(page.body.contains("updates every 7 s"), "{uri}");
        assert!(page.body.contains("<a href=\"\">Reload</a>"), "{uri}");
        assert_eq!(page.body.matches("<script>").count(), 1, "{uri}");
    }
    // The operation's page names the version its forms act on, for the script to compare.
    let row = drill.record(op.id()).await;
    let page = get(&live, Some("alice"), &op_path(&op)).await;
    assert!(
        page.body
            .contains(&format!("data-version=\"{}\"", row.version))
    );
    assert_eq!(hidden(&page.body, "version"), row.version.to_string());

    // Switched off: the time it was read and a reload link, no script, and a policy with none.
    let still = app(config(&drill).no_refresh());
    let res = still
        .clone()
        .oneshot(
            http::Request::get(op_path(&op))
                .header("x-test-user", "alice")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let csp = res.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(body.contains("Read at <b>") && body.contains("<a href=\"\">Reload</a>"));
    assert!(
        !body.contains("<script") && !body.contains("data-refresh-ms"),
        "{body}"
    );
}
