#[path = "../benches/support/mod.rs"]
mod support;
use recoverable_write::{BudgetPolicy, MemoryLedger};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio::net::TcpListener;
use tower::{Service, ServiceExt};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("memory");
    let conc: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    let n: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(support::serve_201(listener));
    if std::env::var("SENTINEL").is_ok() {
        rt.spawn(async {
            let mut i = tokio::time::interval(std::time::Duration::from_millis(1000));
            loop {
                i.tick().await;
            }
        });
    }
    let svc = match which {
        "bare" => support::bare(),
        "bare_timeout" => {
            use tower::ServiceBuilder;
            let svc = support::bare();
            tower::util::BoxCloneService::new(
                ServiceBuilder::new()
                    .timeout(std::time::Duration::from_secs(30))
                    .service(svc),
            )
        }
        _ => support::layered(Arc::new(MemoryLedger::new()), BudgetPolicy::default()),
    };
    let url = format!("http://{addr}/tickets");
    let t = rt.block_on(async {
        let next = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut tasks = vec![];
        for _ in 0..conc {
            let mut svc = svc.clone();
            let next = next.clone();
            let url = url.clone();
            tasks.push(tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let s = svc
                        .ready()
                        .await
                        .unwrap()
                        .call(support::request(&url))
                        .await
                        .unwrap();
                    assert_eq!(s, 201);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed()
    });
    println!(
        "{which} c{conc}: {:.1} us/req",
        t.as_nanos() as f64 / n as f64 / 1000.0
    );
}
