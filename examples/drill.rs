//! The main job: failure drills run visibly on a SQLite ledger file.
//!
//! ```text
//! cargo run --example drill             # D1: a lost response, recovered by lookup
//! cargo run --example drill -- --list   # the scenarios
//! cargo run --example drill -- d5 d22   # some scenarios by name
//! cargo run --example drill -- --all    # every scenario, then a pass/fail summary
//! cargo run --example drill -- --keep   # keep the SQLite ledger file to open afterwards
//! cargo run --example drill -- --practice ops.db   # a practice ledger to rehearse the runbook
//! ```
//!
//! `--practice PATH` writes one new SQLite ledger with the mix an operator meets on call:
//! operations in review for different reasons, unknown ones, finished ones, a quarantined row
//! and a contradicted final state (see `recoverable_write::testing::practice`), then prints
//! what it wrote and the commands to try on it.
//!
//! The timeline has one line per evidence entry:
//!
//! ```text
//!   [  ms] kind                 transition                   gN  evidence or (note)
//!   [   12] attempt_registered   PREPARED -> IN_FLIGHT        g1  (…)
//! ```
//!
//! `ms` is the time since the operation was created; `kind` what happened (`created`,
//! `attempt_registered`, `attempt_result`, `lease_expired`, `recovery_claimed`, `lookup`,
//! `escalated`, `review`, `late_evidence`, …); `gN` is the generation (the fence) the entry was
//! written under: every claim of send or recovery rights increments it, and a result written
//! under an older one is refused.
//!
//! Each scenario starts the fake vendor on 127.0.0.1, injects its fault, sends the write through
//! the layer, runs the recovery engine until the operation settles, and prints every state
//! transition with its evidence and the vendor's own count of side effects. The process exits
//! non-zero if any scenario ends in another state or with another number of tickets than the
//! drill requires.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use http::StatusCode;
use recoverable_write::testing::FakeVendor;
use recoverable_write::testing::Rejection;
use recoverable_write::testing::drill::{
    Drill, DrillOptions, fast_policy, new_op, replay_safe_contract, send,
};
use recoverable_write::{BudgetPolicy, Operation, Outcome, State};

#[derive(Parser)]
#[command(about = "Run recoverable-write's failure drills against a local fake vendor")]
struct Args {
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Run every scenario.
    #[arg(long)]
    all: bool,
    /// Keep each scenario's SQLite ledger file (its path is printed) instead of deleting it.
    #[arg(long)]
    keep: bool,
    /// Write a practice ledger to this new SQLite file (instead of running scenarios): the mix
    /// an operator meets on call, to rehearse the runbook with the command line and the page.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["list", "all", "keep"])]
    practice: Option<std::path::PathBuf>,
    /// Scenarios to run (default: d1).
    scenarios: Vec<String>,
}

/// What a scenario leaves behind for the runner to print and check.
struct Run {
    drill: Drill,
    op: Operation,
    caller: String,
}

type ScenarioFn = fn() -> Pin<Box<dyn Future<Output = Run>>>;

struct Scenario {
    name: &'static str,
    about: &'static str,
    expect: State,
    tickets: u64,
    run: ScenarioFn,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "d1",
        about: "lost response: the vendor creates W731, then drops the connection before answering",
        expect: State::Succeeded,
        tickets: 1,
        run: || Box::pin(d1()),
    },
    Scenario {
        name: "d2",
        about: "the first lookup says 404, then the record appears",
        expect: State::Succeeded,
        tickets: 1,
        run: || Box::pin(d2()),
    },
    Scenario {
        name: "d3",
        about: "stuck in PROCESSING: polled with backoff until the window ends, then a human",
        expect: State::ManualReview,
        tickets: 1,
        run: || Box::pin(d3()),
    },
    Scenario {
        name: "d4",
        about: "a gateway answers 504 after the vendor committed",
        expect: State::Succeeded,
        tickets: 1,
        run: || Box::pin(d4()),
    },
    Scenario {
        name: "d5",
        about: "Stripe-v1-style cached 500: the same-key replay returns it again; the lookup decides",
        expect: State::Succeeded,
        tickets: 1,
        run: || Box::pin(d5()),
    },
    Scenario {
        name: "d9",
        about: "key expired and the vendor's record cleaned: automatic writes stop, a human verifies",
        expect: State::ManualReview,
        tickets: 1,
        run: || Box::pin(d9()),
    },
    Scenario {
        name: "d20",
        about: "connection refused three times: at most 3 write attempts, then a human",
        expect: State::ManualReview,
        tickets: 0,
        run: || Box::pin(d20()),
    },
    Scenario {
        name: "d21",
        about: "Retry-After longer than the recovery window: a human at once",
        expect: State::ManualReview,
        tickets: 0,
        run: || Box::pin(d21()),
    },
    Scenario {
        name: "d22",
        about: "a 429 documented as not executed: same-key resend after the advised delay",
        expect: State::Succeeded,
        tickets: 1,
        run: || Box::pin(d22()),
    },
    Scenario {
        name: "d23",
        about: "connection refused (provably unsent): same-key resend, counted in the budget",
        expect: State::Succeeded,
        tickets: 1,
        run: || Box::pin(d23()),
    },
];

async fn call(drill: &Drill, op: &Operation) -> String {
    let mut svc = drill.writer();
    match send(&mut svc, drill.ticket_request(op, "E17")).await {
        Ok(res) => res
            .extensions()
            .get::<Outcome>()
            .map_or_else(|| res.status().to_string(), |o| o.message.clone()),
        Err(e) => e.to_string(),
    }
}

async fn d1() -> Run {
    let drill = Drill::start().await;
    let op = new_op("approved-intent-17");
    drill.vendor.faults().drop_after_commit(1);
    let caller = call(&drill, &op).await;
    Run { drill, op, caller }
}

async fn d2() -> Run {
    let drill = Drill::start().await;
    let op = new_op("approved-intent-17");
    drill.vendor.faults().drop_after_commit(1);
    drill.vendor.faults().lookup_not_found(1);
    let caller = call(&drill, &op).await;
    Run { drill, op, caller }
}

async fn d3() -> Run {
    let vendor = FakeVendor::builder()
        .processing_retry_after(None)
        .start()
        .await
        .expect("vendor");
    let drill = Drill::with(
        vendor,
        DrillOptions {
            policy: BudgetPolicy {
                window_ms: 900,
                max_queries: 100,
                attempt_timeout_ms: 300,
                ..fast_policy()
            },
            ..DrillOptions::default()
        },
    )
    .await;
    let op = new_op("approved-intent-17");
    drill.vendor.faults().hold_processing(true);
    let caller = call(&drill, &op).await;
    Run { drill, op, caller }
}

async fn d4() -> Run {
    let drill = Drill::start().await;
    let op = new_op("approved-intent-17");
    drill
        .vendor
        .faults()
        .status_after_commit(StatusCode::GATEWAY_TIMEOUT, 1);
    let caller = call(&drill, &op).await;
    Run { drill, op, caller }
}

async fn d5() -> Run {
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        ..DrillOptions::default()
    })
    .await;
    let op = new_op("approved-intent-17");
    drill.vendor.faults().cache_error_response(true);
    drill
        .vendor
        .faults()
        .status_after_commit(StatusCode::INTERNAL_SERVER_ERROR, 1);
    drill.vendor.faults().lookup_not_found(1);
    let caller = call(&drill, &op).await;
    Run { drill, op, caller }
}

async fn d9() -> Run {
    let drill = Drill::with_options(DrillOptions::d9()).await;
    let op = new_op("approved-intent-17");
    drill.vendor.faults().drop_after_commit(1);
    let caller = call(&drill, &op).await;
    drill.vendor.faults().expire_keys();
    drill.vendor.faults().clean_operation_records();
    Run { drill, op, caller }
}

async fn d20() -> Run {
    let drill = Drill::start().await;
    let op = new_op("approved-intent-17");
    drill
        .vendor
        .faults()
        .refuse_connections(true)
        .expect("refuse");
    let caller = call(&drill, &op).await;
    Run { drill, op, caller }
}

async fn d21() -> Run {
    let drill = Drill::start().await;
    let op = new_op("approved-intent-17");
    drill.vendor.faults().reject_next_with(
        Rejection::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded").retry_after("120"),
        1,
    );
    let caller = call(&drill, &op).await;
    Run { drill, op, caller }
}

async fn d22() -> Run {
    let drill = Drill::with_options(DrillOptions {
        contract: replay_safe_contract(),
        ..DrillOptions::default()
    })
    .await;
    let op = new_op("approved-intent-17");
    drill.vendor.faults().reject_next_with(
        Rejection::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        1,
    );
    let caller = call(&drill, &op).await;
    Run { drill, op, caller }
}

async fn d23() -> Run {
    let drill = Drill::start().await;
    let op = new_op("approved-intent-17");
    drill
        .vendor
        .faults()
        .refuse_connections(true)
        .expect("refuse");
    let caller = call(&drill, &op).await;
    drill
        .vendor
        .faults()
        .refuse_connections(false)
        .expect("resume");
    Run { drill, op, caller }
}

/// Runs one scenario, prints its timeline; `Err` says what the drill required and did not get.
async fn run(s: &Scenario, keep: bool) -> Result<(), String> {
    println!("drill {}: {}", s.name.to_uppercase(), s.about);
    let Run { drill, op, caller } = (s.run)().await;
    println!("  vendor    {}", drill.vendor.base_url());
    println!(
        "  ledger    {} (SQLite, WAL, synchronous=FULL)",
        drill.dir.path().join("ledger.db").display()
    );
    println!("  operation {} (tenant-a, create_ticket)", op.id());
    println!("  caller <- {caller}");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let row = loop {
        drill
            .recoverer
            .run_once()
            .await
            .map_err(|e| format!("recovery pass failed: {e}"))?;
        let row = drill.record(op.id()).await;
        if row.state.is_terminal() || row.state == State::ManualReview {
            break row;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("still {} after 20 s", row.state));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };

    let entries = drill.evidence(op.id()).await;
    let origin = entries.first().map_or(0, |e| e.entry.at_ms);
    // gN: the generation (fence) the entry was written under; see the module docs.
    println!(
        "  [{:>5}   ] {:<20} {:<28} {:<3} evidence or (note)",
        "ms", "kind", "transition", "gN"
    );
    for e in &entries {
        let e = &e.entry;
        let transition = match (e.from_state, e.to_state) {
            (Some(a), Some(b)) => format!("{a} -> {b}"),
            (None, Some(b)) => format!("-> {b}"),
            _ => String::new(),
        };
        let detail = match (&e.evidence, e.note.as_deref()) {
            (Some(ev), _) => serde_json::to_string(ev).unwrap_or_default(),
            (None, Some(n)) => format!("({n})"),
            (None, None) => String::new(),
        };
        println!(
            "  [{:>5} ms] {:<20} {:<28} g{:<2} {}",
            e.at_ms - origin,
            e.kind,
            transition,
            e.generation.0,
            detail
        );
    }
    let again = call(&drill, &op).await;
    println!("  caller asks again <- {again}");
    let tickets = drill.vendor.tickets_created();
    println!(
        "  final state: {}  remote reference: {}  attempts: {}  queries: {}",
        row.state,
        row.remote_ref.as_deref().unwrap_or("-"),
        row.attempts_used,
        row.queries_used
    );
    println!(
        "  sends seen by the vendor: {}",
        drill.vendor.posts_received()
    );
    println!("tickets created: {tickets}");
    if keep {
        let Drill { dir, .. } = drill;
        let path = dir.keep();
        println!(
            "  kept: {} (sqlite3 {}/ledger.db 'select * from rw_evidence')",
            path.display(),
            path.display()
        );
    }
    println!();
    if row.state != s.expect || tickets != s.tickets {
        return Err(format!(
            "expected {} with {} ticket(s), got {} with {tickets}",
            s.expect, s.tickets, row.state
        ));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(path) = &args.practice {
        return practice(path).await;
    }
    if args.list {
        for s in SCENARIOS {
            println!(
                "{:<4} {} (expects {}, {} ticket(s))",
                s.name, s.about, s.expect, s.tickets
            );
        }
        return ExitCode::SUCCESS;
    }
    let chosen: Vec<&Scenario> = if args.all {
        SCENARIOS.iter().collect()
    } else if args.scenarios.is_empty() {
        vec![&SCENARIOS[0]]
    } else {
        let mut v = Vec::new();
        for name in &args.scenarios {
            match SCENARIOS.iter().find(|s| s.name.eq_ignore_ascii_case(name)) {
                Some(s) => v.push(s),
                None => {
                    eprintln!("unknown scenario {name:?}; try --list");
                    return ExitCode::from(2);
                }
            }
        }
        v
    };
    let mut results = Vec::new();
    for s in &chosen {
        let result = run(s, args.keep).await;
        if let Err(e) = &result {
            eprintln!("DRILL {} FAILED: {e}\n", s.name.to_uppercase());
        }
        results.push((s.name, result.is_ok()));
    }
    let failed = results.iter().filter(|(_, ok)| !ok).count();
    if results.len() > 1 {
        println!("summary:");
        for (name, ok) in &results {
            println!("  {:<4} {}", name, if *ok { "passed" } else { "FAILED" });
        }
        println!("{} passed, {} failed", results.len() - failed, failed);
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `--practice PATH`: writes the practice ledger, prints it and what to try.
async fn practice(path: &std::path::Path) -> ExitCode {
    use recoverable_write::testing::practice::write_practice_ledger;

    let written = match write_practice_ledger(path).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("no practice ledger: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "practice ledger {} (tenant {}):\n",
        written.path.display(),
        written.tenant
    );
    for o in &written.operations {
        let state = o.state.map_or("QUARANTINED".to_owned(), |s| s.to_string());
        println!("  {:<14} {:<30} {}", state, o.intent, o.why);
    }
    let ledger = format!("sqlite:{}", written.path.display());
    let t = &written.tenant;
    println!(
        "\nrehearse (docs/runbook.md, \"Rehearse\"):\n\
         \x20 recoverable-write --ledger {ledger} --tenant {t} stats\n\
         \x20 recoverable-write --ledger {ledger} --tenant {t} list\n\
         \x20 recoverable-write --ledger {ledger} --tenant {t} list --state manual_review\n\
         \x20 recoverable-write --ledger {ledger} --tenant {t} show practice-lookups-ran-out\n\
         \x20 recoverable-write --ledger {ledger} --tenant {t} list --contradicted\n\
         \x20 recoverable-write --ledger {ledger} --tenant {t} list --state quarantined\n\
         (install the command line with `cargo install --path . --features cli`, or use \
         `cargo run --features cli --bin recoverable-write --` in its place). `show` prints the \
         commands that act on each operation; the fake vendors are gone, so check \"at the \
         vendor\" by reading the timeline."
    );
    ExitCode::SUCCESS
}
