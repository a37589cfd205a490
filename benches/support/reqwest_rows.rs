//! The reqwest rows (feature `reqwest`), shared by `overhead` and `allocs`: reqwest with
//! reqwest-middleware and reqwest-retry, and the same client with this crate's middleware.
//! Included with `#[path = "support/reqwest_rows.rs"] mod reqwest_rows;` next to `support`.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use recoverable_write::MemoryLedger;
use recoverable_write::RecoverableWrite;
use tower::BoxError;
use tower::util::BoxCloneService;

use crate::support::Svc;

/// reqwest as users run it today: reqwest-middleware with reqwest-retry (not safe, but the bar
/// users compare against).
pub fn reqwest_retry() -> Svc {
    use reqwest_retry::RetryTransientMiddleware;
    use reqwest_retry::policies::ExponentialBackoff;
    let client = reqwest_middleware::ClientBuilder::new(
        recoverable_write::reqwest::client_builder()
            .build()
            .expect("reqwest client"),
    )
    .with(RetryTransientMiddleware::new_with_policy(
        ExponentialBackoff::builder().build_with_max_retries(3),
    ))
    .build();
    reqwest_service(client)
}

/// The same reqwest client with this crate's middleware (MemoryLedger) and the send-once
/// middleware, reqwest-retry kept with the recoverable strategy.
pub fn reqwest_layer_memory() -> Svc {
    use recoverable_write::reqwest::{
        RecoverableWriteMiddleware, RecoverableWriteStrategy, SendOnceMiddleware, client_builder,
    };
    use reqwest_retry::RetryTransientMiddleware;
    use reqwest_retry::policies::ExponentialBackoff;
    // The bench's writes name no Operation: track them anyway (ad-hoc operations).
    let layer = RecoverableWrite::builder(MemoryLedger::new())
        .track_all_writes(true)
        .build()
        .expect("a valid configuration")
        .layer();
    let client = reqwest_middleware::ClientBuilder::new(client_builder().build().expect("client"))
        .with(RecoverableWriteMiddleware::new(&layer))
        .with(RetryTransientMiddleware::new_with_policy_and_strategy(
            ExponentialBackoff::builder().build_with_max_retries(3),
            RecoverableWriteStrategy::new(),
        ))
        .with(SendOnceMiddleware::new())
        .build();
    reqwest_service(client)
}

/// The same reqwest client and reqwest-retry with the in-memory limit's middleware in front
/// (`limit_memory.rs`): the least work this crate's middleware could add to `reqwest_retry`.
pub fn reqwest_limit_memory() -> Svc {
    use reqwest_retry::RetryTransientMiddleware;
    use reqwest_retry::policies::ExponentialBackoff;
    let client = reqwest_middleware::ClientBuilder::new(
        recoverable_write::reqwest::client_builder()
            .build()
            .expect("reqwest client"),
    )
    .with(crate::limit_memory::LimitMemory::default().reqwest_middleware())
    .with(RetryTransientMiddleware::new_with_policy(
        ExponentialBackoff::builder().build_with_max_retries(3),
    ))
    .build();
    reqwest_service(client)
}

fn reqwest_service(client: reqwest_middleware::ClientWithMiddleware) -> Svc {
    BoxCloneService::new(tower::service_fn(move |req: Request<Full<Bytes>>| {
        let client = client.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            let res = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = res.status().as_u16();
            res.bytes().await?;
            Ok::<_, BoxError>(status)
        }
    }))
}
