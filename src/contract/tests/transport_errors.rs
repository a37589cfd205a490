//! Transport errors: only an error proving the request never left is `NotExecuted`.

use super::*;

#[derive(Debug)]
struct Wrapper {
    msg: &'static str,
    source: Box<dyn StdError + Send + Sync>,
}

impl fmt::Display for Wrapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.msg)
    }
}

impl StdError for Wrapper {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

fn wrap(msg: &'static str, source: impl StdError + Send + Sync + 'static) -> Wrapper {
    Wrapper {
        msg,
        source: Box::new(source),
    }
}

#[test]
fn send_refused_is_not_executed() {
    let refused = SendRefused::Duplicate {
        operation: OperationId::new("op-1"),
        attempt: AttemptId::generate(),
    };
    let c = Contract::conservative();
    assert_eq!(c.classify_error(&refused).label(), "not_executed");
    let boxed: tower::BoxError = Box::new(wrap("service error", refused));
    let e = c.classify_error(&*boxed);
    let Evidence::NotExecuted { why, .. } = e else {
        panic!("{e:?}")
    };
    assert!(why.contains("send-once guard"), "{why}");
}

#[test]
fn connection_refused_anywhere_in_the_chain_is_not_executed() {
    let c = Contract::conservative();
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let e = c.classify_error(&wrap(
        "error sending request",
        wrap("client error (Connect)", refused),
    ));
    let Evidence::NotExecuted { why, .. } = e else {
        panic!("{e:?}")
    };
    assert!(
        why.starts_with("connection refused, the request was never sent: error sending request"),
        "{why}"
    );
    // Inside an io::Error wrapping a custom error (io::Error::source skips the custom error).
    let inner = wrap(
        "connect failed",
        std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
    );
    let outer = std::io::Error::other(inner);
    assert_eq!(c.classify_error(&outer).label(), "not_executed");
}

#[test]
fn timeouts_resets_and_unknown_errors_are_unknown() {
    let c = Contract::conservative();
    for kind in [
        std::io::ErrorKind::TimedOut,
        std::io::ErrorKind::ConnectionReset,
        std::io::ErrorKind::BrokenPipe,
        std::io::ErrorKind::UnexpectedEof,
    ] {
        let err = wrap("error sending request", std::io::Error::from(kind));
        assert_eq!(c.classify_error(&err).label(), "unknown", "{kind:?}");
    }
    let e = c.classify_error(&wrap(
        "request timed out",
        wrap("deadline has elapsed", std::fmt::Error),
    ));
    assert_eq!(
        e,
        Evidence::unknown(
            "request timed out: deadline has elapsed: an error occurred when formatting an argument"
        )
    );
}

#[test]
fn error_why_is_short_and_without_url_credentials() {
    #[derive(Debug)]
    struct Long;
    impl fmt::Display for Long {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "error for url (https://user:pw@api.test/x?api_key=sk_live_1) {}",
                "x".repeat(500)
            )
        }
    }
    impl StdError for Long {}
    let Evidence::Unknown { why, .. } = Contract::conservative().classify_error(&Long) else {
        panic!()
    };
    assert!(why.chars().count() <= 201, "{}", why.len());
    assert!(!why.contains("pw") && !why.contains("sk_live"), "{why}");
    assert!(
        why.starts_with("error for url (https://api.test/x?…)"),
        "{why}"
    );
}

#[test]
fn a_cyclic_error_chain_terminates() {
    #[derive(Debug)]
    struct Cyclic;
    impl fmt::Display for Cyclic {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cyclic")
        }
    }
    impl StdError for Cyclic {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(self)
        }
    }
    assert_eq!(
        Contract::conservative().classify_error(&Cyclic),
        Evidence::unknown("cyclic")
    );
}

#[tokio::test]
async fn hyper_util_connect_errors_are_not_executed() {
    use http_body_util::Empty;
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    // A closed port: connect error with a ConnectionRefused inside.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = http::Request::post(format!("http://127.0.0.1:{port}/x"))
        .body(Empty::new())
        .unwrap();
    let err = client.request(req).await.unwrap_err();
    assert!(err.is_connect());
    assert_eq!(
        Contract::conservative().classify_error(&err).label(),
        "not_executed"
    );

    // A connector refusing the scheme: a connect error with no I/O error at all.
    let client =
        Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(HttpConnector::new());
    let req = http::Request::post("https://127.0.0.1:1/x")
        .body(Empty::new())
        .unwrap();
    let err = client.request(req).await.unwrap_err();
    assert!(err.is_connect());
    let e = Contract::conservative().classify_error(&err);
    let Evidence::NotExecuted { why, .. } = e else {
        panic!("{e:?}")
    };
    assert!(
        why.starts_with("connect error, the request was never sent"),
        "{why}"
    );
}
