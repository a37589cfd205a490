//! Heap allocations per request (issue #14: the memory path at most 50 per request), counted by
//! a global allocator that counts calls, over the same loopback server, client and request as
//! `benches/overhead.rs`.
//!
//! ```text
//! cargo bench -p recoverable-write-benches --bench allocs
//! ```
//!
//! Each configuration sends 200 requests to warm up, then 2,000 one at a time; the counts are
//! of every thread of the process (the in-process server's allocations too, the same for every
//! configuration), so the table gives each configuration's total per request and what it adds
//! to `bare`. `alloc` counts `alloc` and `alloc_zeroed`; `realloc` is counted apart. `bytes
//! held/req` is the heap the requests leave allocated (bytes allocated minus bytes freed, per
//! request): for the memory ledger, what it keeps of each operation, with whatever it
//! reserved ahead during the run (a chunk of row slots, a hash table that doubled).
//! `limit_memory` is the in-memory limit of `overhead` (`support/limit_memory.rs`): what the
//! least work the semantics allow allocates and keeps.
//! With the `reqwest` feature, the reqwest rows of `overhead` (reqwest-retry, this crate's
//! middleware, and the limit as a middleware) are counted too, and what this crate's
//! middleware adds to reqwest + reqwest-retry is printed after the table.
//! `cargo bench -p recoverable-write-benches --bench allocs -- NAME` counts only the
//! configuration named `NAME` (to run one under `valgrind --tool=callgrind`).
//! Not a timing benchmark: the counting itself costs an atomic increment per call.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use recoverable_write::{BudgetPolicy, MemoryLedger};
use tokio::net::TcpListener;
use tower::{Service, ServiceExt};

#[path = "support/limit_memory.rs"]
mod limit_memory;
#[cfg(feature = "reqwest")]
#[path = "support/reqwest_rows.rs"]
mod reqwest_rows;
#[path = "support/mod.rs"]
mod support;
use support::{Svc, bare, layered, request, serve_201};

/// The system allocator, counting calls.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static REALLOCS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and freed, for the heap each request leaves held.
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        REALLOCS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        FREED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap bytes held now: allocated minus freed, over every thread.
fn held() -> i64 {
    ALLOCATED.load(Ordering::Relaxed) as i64 - FREED.load(Ordering::Relaxed) as i64
}

const WARM_UP: u64 = 200;
const REQUESTS: u64 = 2_000;

/// Sends `n` requests one at a time.
async fn send(svc: &Svc, url: &str, n: u64) {
    let mut svc = svc.clone();
    for _ in 0..n {
        let status = svc
            .ready()
            .await
            .expect("ready")
            .call(request(url))
            .await
            .expect("request succeeds");
        assert_eq!(status, 201);
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let url = format!("http://{}/tickets", listener.local_addr().expect("addr"));
    rt.spawn(serve_201(listener));

    #[allow(unused_mut)] // without the `reqwest` feature
    let mut configs: Vec<(&str, Svc)> = vec![
        ("bare", bare()),
        (
            "layer_memory",
            layered(Arc::new(MemoryLedger::new()), BudgetPolicy::default()),
        ),
        // The least work the semantics allow in memory (see `overhead`).
        (
            "limit_memory",
            limit_memory::LimitMemory::default().service(),
        ),
    ];
    // The reqwest rows of `overhead`; their "added" column is against `bare` (the hyper-util
    // client), so what the middleware adds to reqwest + reqwest-retry is printed apart.
    #[cfg(feature = "reqwest")]
    configs.extend([
        ("reqwest_retry", reqwest_rows::reqwest_retry()),
        ("reqwest_layer_memory", reqwest_rows::reqwest_layer_memory()),
        ("reqwest_limit_memory", reqwest_rows::reqwest_limit_memory()),
    ]);
    println!(
        "\nheap allocations per request, {REQUESTS} requests one at a time (every thread of \
         the process)"
    );
    println!(
        "{:<22} {:>12} {:>12} {:>18} {:>16}",
        "configuration", "alloc/req", "realloc/req", "alloc added/req", "bytes held/req"
    );
    // cargo passes `--bench`; the first other argument filters by name.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let mut per_config = std::collections::BTreeMap::new();
    for (name, svc) in &configs {
        if filter.as_deref().is_some_and(|f| f != *name) {
            continue;
        }
        rt.block_on(send(svc, &url, WARM_UP));
        let (a0, r0) = (
            ALLOCS.load(Ordering::Relaxed),
            REALLOCS.load(Ordering::Relaxed),
        );
        let held0 = held();
        rt.block_on(send(svc, &url, REQUESTS));
        let allocs = (ALLOCS.load(Ordering::Relaxed) - a0) as f64 / REQUESTS as f64;
        let reallocs = (REALLOCS.load(Ordering::Relaxed) - r0) as f64 / REQUESTS as f64;
        let held = (held() - held0) as f64 / REQUESTS as f64;
        per_config.insert(*name, (allocs, held));
        // Against `bare`, when it was counted (a name filter may leave it out).
        let added = per_config.get("bare").map_or_else(
            || "-".to_owned(),
            |(bare, _)| format!("{:.1}", allocs - bare),
        );
        println!(
            "{:<22} {:>12.1} {:>12.1} {:>18} {:>16.0}",
            name, allocs, reallocs, added, held
        );
    }
    if let (Some((allocs, _)), Some((bare, _))) =
        (per_config.get("layer_memory"), per_config.get("bare"))
    {
        // Judged on the total: the issue's "today 116" matches this count (114 here when this
        // bench was written), not the 88 it adds to bare.
        println!(
            "target (issue #14): layer_memory at most 50 heap allocations per request: \
             {allocs:.1} in all (the in-process server's included; {:.1} added to bare) -> {}",
            allocs - bare,
            if *allocs <= 50.0 { "met" } else { "NOT met" }
        );
    }
    if let (Some((theirs, _)), Some((ours, held))) = (
        per_config.get("reqwest_retry"),
        per_config.get("reqwest_layer_memory"),
    ) {
        println!(
            "reqwest_layer_memory adds {:.1} allocations per request to reqwest_retry \
             ({ours:.1} against {theirs:.1}; {held:.0} bytes held per request)",
            ours - theirs
        );
    }
}
