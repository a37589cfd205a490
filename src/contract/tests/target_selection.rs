//! Choosing a contract by target: host, port, path prefix and method, the most specific winning.

use super::*;

fn uri(s: &str) -> Uri {
    s.parse().unwrap()
}

fn named(name: &str) -> Contract {
    Contract::conservative().named(name)
}

#[test]
fn select_by_host_ignores_case_port_and_trailing_dot() {
    let cs = Contracts::default().route(Target::host("api.stripe.com"), named("stripe"));
    for u in [
        "https://api.stripe.com/v1/charges",
        "https://API.Stripe.COM:443/v1/charges",
        "http://api.stripe.com:8080/",
        "https://api.stripe.com./v1",
    ] {
        assert_eq!(cs.select(&Method::POST, &uri(u)).name, "stripe", "{u}");
    }
    assert_eq!(
        cs.select(&Method::POST, &uri("https://stripe.com/v1")).name,
        "default"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://xapi.stripe.com/"))
            .name,
        "default"
    );
    // A relative URI has no host: the default.
    assert_eq!(
        cs.select(&Method::POST, &uri("/v1/charges")).name,
        "default"
    );
}

#[test]
fn select_with_port_matches_only_that_port() {
    let cs = Contracts::default()
        .route(Target::host("api.test:8443"), named("8443"))
        .route(Target::host("web.test:443"), named("443"))
        .route(Target::host("[::1]:8080"), named("v6"));
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test:8443/x"))
            .name,
        "8443"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/x")).name,
        "default"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://web.test/x")).name,
        "443"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("http://web.test/x")).name,
        "default"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("http://[::1]:8080/x")).name,
        "v6"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("http://[::1]:8081/x")).name,
        "default"
    );
}

#[test]
fn select_path_prefix_is_segment_aware() {
    let cs = Contracts::default().route(Target::host("api.test").path_prefix("/v1"), named("v1"));
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v1")).name,
        "v1"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v1/charges"))
            .name,
        "v1"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v1/?a=1"))
            .name,
        "v1"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v10/charges"))
            .name,
        "default"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/")).name,
        "default"
    );
    // A trailing slash in the prefix means the same.
    let cs = Contracts::default().route(Target::host("api.test").path_prefix("/v1/"), named("v1"));
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v1/charges"))
            .name,
        "v1"
    );
    assert_eq!(
        cs.select(&Method::POST, &uri("https://api.test/v10")).name,
        "default"
    );
}

#[test]
fn select_most_specific_wins() {
    let cs = Contracts::default()
        .route(Target::host("*.stripe.com"), named("wild"))
        .route(Target::host("api.stripe.com"), named("host"))
        .route(
            Target::host("api.stripe.com").path_prefix("/v1"),
            named("v1"),
        )
        .route(
            Target::host("api.stripe.com")
                .path_prefix("/v1")
                .method(Method::POST),
            named("v1-post"),
        )
        .route(
            Target::host("api.stripe.com").path_prefix("/v1/refunds"),
            named("refunds"),
        )
        .route(
            Target::host("api.stripe.com")
                .path_prefix("/v2")
                .method(Method::POST),
            named("v2-post"),
        );
    let pick = |m: Method, u: &str| cs.select(&m, &uri(u)).name.clone();
    assert_eq!(
        pick(Method::POST, "https://api.stripe.com/v1/charges"),
        "v1-post"
    );
    assert_eq!(
        pick(Method::DELETE, "https://api.stripe.com/v1/charges"),
        "v1"
    );
    // A longer prefix beats a method.
    assert_eq!(
        pick(Method::POST, "https://api.stripe.com/v1/refunds/re_1"),
        "refunds"
    );
    assert_eq!(pick(Method::DELETE, "https://api.stripe.com/v2/x"), "host");
    assert_eq!(pick(Method::POST, "https://api.stripe.com/v2/x"), "v2-post");
    assert_eq!(
        pick(Method::POST, "https://files.stripe.com/v1/files"),
        "wild"
    );
    // A wildcard does not match the apex.
    assert_eq!(pick(Method::POST, "https://stripe.com/v1"), "default");
}

#[test]
fn registering_an_equal_target_replaces_it() {
    let cs = Contracts::default()
        .route(Target::host("a.test"), named("first"))
        .route(Target::host("a.test"), named("second"));
    assert_eq!(cs.routes().count(), 1);
    assert_eq!(
        cs.select(&Method::POST, &uri("https://a.test/")).name,
        "second"
    );
}

#[test]
fn get_and_find_by_reference() {
    let stripe = Contract::from_json(STRIPE_JSON).unwrap();
    let cs = Contracts::default().route(Target::host("api.stripe.com"), stripe.clone());
    assert_eq!(cs.get("default").unwrap().name, "default");
    assert_eq!(cs.get("stripe-v1").unwrap().as_ref(), &stripe);
    assert!(cs.get("nope").is_none());
    assert_eq!(cs.find(&stripe.reference()).unwrap().as_ref(), &stripe);
    let changed = stripe.clone().max_key_len(100).reference();
    assert!(cs.find(&changed).is_none());
}

#[test]
fn registry_validation() {
    let cs = Contracts::default()
        .route(Target::host("a.test"), named("same"))
        .route(Target::host("b.test"), named("same"));
    cs.validate().unwrap();
    let cs = cs.route(Target::host("c.test"), named("same").max_key_len(100));
    let err = cs.validate().unwrap_err();
    assert_eq!(err.kind(), &ContractErrorKind::DuplicateName("same".into()));
    for bad in [
        Target::host(""),
        Target::host("a.test/v1"),
        Target::host("a.test:http"),
        Target::host("a.test").path_prefix("v1"),
    ] {
        let err = Contracts::default()
            .route(bad.clone(), named("x"))
            .validate()
            .unwrap_err();
        assert!(
            matches!(err.kind(), ContractErrorKind::InvalidTarget(_)),
            "{bad:?}"
        );
    }
}

/// The selection rule written as the plain scan it replaced: every route, the highest rank,
/// the first registered on a tie.
fn select_by_scan<'a>(cs: &'a Contracts, method: &Method, u: &Uri) -> &'a str {
    let mut best: Option<(crate::contract::registry::Rank, &str)> = None;
    for (target, contract) in cs.routes() {
        if let Some(rank) = target.specificity(method, u)
            && best.is_none_or(|(b, _)| rank > b)
        {
            best = Some((rank, &contract.name));
        }
    }
    best.map_or(&cs.default_contract().name, |(_, name)| name)
}

fn arb_target() -> impl Strategy<Value = Target> {
    let host = prop::sample::select(vec![
        "a.test",
        "A.test",
        "a.test.",
        "b.a.test",
        "*.test",
        "*.a.test",
        "*.A.TEST",
        "*.b.a.test",
        "a.test:8443",
        "a.test:443",
        "*.test:80",
        "[::1]",
        "[::1]:8080",
        "x",
        "*.",
        "",
    ]);
    let prefix = prop::option::of(prop::sample::select(vec![
        "", "/", "//", "/v1", "/v1/", "/v1//", "/v1/x", "/v10", "/V1", "v1", "/v1/x/",
    ]));
    let method = prop::option::of(prop::sample::select(vec![Method::POST, Method::GET]));
    (host, prefix, method).prop_map(|(h, p, m)| {
        let mut t = Target::host(h);
        if let Some(p) = p {
            t = t.path_prefix(p);
        }
        if let Some(m) = m {
            t = t.method(m);
        }
        t
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// The host index narrows the candidates and nothing else: selection equals the plain scan.
    #[test]
    fn indexed_selection_equals_the_scan(
        targets in prop::collection::vec(arb_target(), 0..24),
        host in prop::sample::select(vec![
            "a.test", "A.TEST", "a.test.", "b.a.test", "c.b.a.test", "test", "x.test", "a..test",
            "[::1]", "x", ".a.test",
        ]),
        port in prop::option::of(prop::sample::select(vec![80u16, 443, 8080, 8443])),
        scheme in prop::sample::select(vec!["http", "https"]),
        path in prop::sample::select(vec![
            "/", "/v1", "/v1/", "/v1/x", "/v10", "/v1/x/y", "/w", "//", "/v1//x", "/V1/x",
        ]),
        method in prop::sample::select(vec![Method::POST, Method::GET, Method::PUT]),
    ) {
        let mut cs = Contracts::default();
        for (i, t) in targets.into_iter().enumerate() {
            cs = cs.route(t, named(&format!("r{i}")));
        }
        let authority = match port {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        let Ok(u) = format!("{scheme}://{authority}{path}").parse::<Uri>() else {
            return Ok(());
        };
        prop_assert_eq!(
            cs.select(&method, &u).name.as_str(),
            select_by_scan(&cs, &method, &u),
            "{}", u
        );
    }
}

#[test]
fn target_serde() {
    let t: Target =
        serde_json::from_str(r#"{"host":"api.test","path_prefix":"/v1","method":"POST"}"#).unwrap();
    assert_eq!(
        t,
        Target::host("api.test")
            .path_prefix("/v1")
            .method(Method::POST)
    );
    assert_eq!(
        serde_json::to_string(&t).unwrap(),
        r#"{"host":"api.test","path_prefix":"/v1","method":"POST"}"#
    );
    assert!(serde_json::from_str::<Target>(r#"{"host":"a","hots":"b"}"#).is_err());
    let t: Target = serde_json::from_str(r#"{"host":"api.test","method":"post"}"#).unwrap();
    assert!(t.matches(&Method::POST, &uri("https://api.test/x")));
}
