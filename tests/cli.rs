//! The `recoverable-write` command line (issue 12 items 2 and 4), run as the built binary
//! against ledgers populated by real drills: the fake vendor over TCP, the layer, and the
//! recovery engine taking a lost response to `MANUAL_REVIEW` (lookups find nothing until the
//! lookup budget is spent). Every test checks the output, the exit code, the ledger afterwards
//! and the vendor's own count of side effects; the PostgreSQL test needs the server
//! (`RW_POSTGRES_URL`; skipped without one unless `CI=true`).

#[path = "common/postgres.rs"]
mod pg;

use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use recoverable_write::ledger::FullLedger;
use recoverable_write::ledger::{Ledger, PostgresLedgerOptions};
use recoverable_write::state::ReviewDecision;
use recoverable_write::testing::FakeVendor;
use recoverable_write::testing::drill::{
    CREDENTIAL, Drill, DrillOptions, TENANT, fast_policy, new_op, send,
};
use recoverable_write::{BudgetPolicy, Contract, Operation, PostgresLedger, SqliteLedger, State};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_recoverable-write");
/// A body field the contract marks secret: never stored, never printed.
const SECRET: &str = "cs_live_SUPERSECRET123";
/// A plain body value: not stored in any column the CLI prints.
const DEVICE: &str = "DEVICE-E17-XYZ";

/// A drill over `ledger` whose contract marks a body field secret.
struct World(Drill);

impl std::ops::Deref for World {
    type Target = Drill;

    fn deref(&self) -> &Drill {
        &self.0
    }
}

impl World {
    async fn new(ledger: Arc<dyn FullLedger>) -> Self {
        Self::with_policy(
            ledger,
            BudgetPolicy {
                max_queries: 3,
                ..fast_policy()
            },
        )
        .await
    }

    async fn with_policy(ledger: Arc<dyn FullLedger>, policy: BudgetPolicy) -> Self {
        let options = DrillOptions {
            contract: Contract::conservative().secret_body_field("/client_secret"),
            policy,
            ..DrillOptions::default()
        };
        Self(Drill::with_ledger(
            FakeVendor::start().await,
            ledger,
            options,
        ))
    }

    /// A ticket create whose body carries a secret field and a device value.
    fn request(&self, op: &Operation) -> http::Request<Full<Bytes>> {
        let body = format!(
            r#"{{"operation_id":"{}","device_id":"{DEVICE}","priority":"P2","client_secret":"{SECRET}"}}"#,
            op.id()
        );
        let mut req = http::Request::post(self.vendor.url("/tickets"))
            .header("content-type", "application/json")
            .header("x-tenant", op.tenant().as_str())
            .header("authorization", CREDENTIAL)
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        req.extensions_mut().insert(op.clone());
        req
    }

    /// The drill: a lost response (the vendor commits, then drops the connection), the
    /// vendor's operation records cleaned so every lookup says 404, the lookup budget spent:
    /// `MANUAL_REVIEW`. Plus one write that simply succeeds.
    async fn lost_response_to_review(&self, intent: &str) -> (Operation, Operation) {
        let fine = new_op(&format!("{intent}-fine"));
        let mut svc = self.writer();
        send(&mut svc, self.request(&fine))
            .await
            .expect("a plain create succeeds");
        let op = new_op(intent);
        self.vendor.faults().drop_after_commit(1);
        let err = send(&mut svc, self.request(&op))
            .await
            .expect_err("the response is lost");
        assert!(
            matches!(err, recoverable_write::Error::Unknown { .. }),
            "{err:?}"
        );
        self.vendor.faults().clean_operation_records();
        let row = self
            .recover_until(op.id(), |r| r.state == State::ManualReview)
            .await;
        assert_eq!(row.last_result, Some(State::Unknown));
        assert_eq!(row.attempts_used, 1);
        assert_eq!(self.vendor.tickets_created(), 2);
        assert_eq!(self.vendor.posts_received(), 2);
        (op, fine)
    }
}

/// The binary, with the ledger and the tenant; every output is kept to check for leaks.
struct Cli {
    ledger: String,
    schema: Option<String>,
    outputs: Mutex<Vec<String>>,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        assert_eq!(self.code, 0, "{}", self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }

    fn ok(&self) -> &str {
        assert_eq!(
            self.code, 0,
            "stderr: {}\nstdout: {}",
            self.stderr, self.stdout
        );
        &self.stdout
    }
}

impl Cli {
    fn new(ledger: String, schema: Option<String>) -> Self {
        Self {
            ledger,
            schema,
            outputs: Mutex::new(Vec::new()),
        }
    }

    async fn raw(&self, args: &[&str]) -> Run {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.env_remove("RECOVERABLE_WRITE_LEDGER")
            .env_remove("RECOVERABLE_WRITE_SCHEMA")
            .args(args);
        let out: Output = cmd.output().await.expect("run the binary");
        let run = Run {
            code: out.status.code().expect("exit code"),
            stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
        };
        let mut all = self.outputs.lock().unwrap();
        all.push(run.stdout.clone());
        all.push(run.stderr.clone());
        run
    }

    /// Runs with `--ledger`, `--schema` and `--tenant tenant-a`.
    async fn run(&self, args: &[&str]) -> Run {
        let mut full = vec!["--ledger", self.ledger.as_str(), "--tenant", TENANT];
        if let Some(s) = &self.schema {
            full.extend(["--schema", s.as_str()]);
        }
        full.extend(args);
        self.raw(&full).await
    }

    fn assert_nothing_leaked(&self) {
        for out in self.outputs.lock().unwrap().iter() {
            for secret in [SECRET, DEVICE, "sk_test_secret"] {
                assert!(!out.contains(secret), "{secret} printed:\n{out}");
            }
        }
    }
}

/// list → show → claim → stale resolve → resolve → stats, checking output, ledger and vendor.
async fn review_with_the_cli(world: &World, cli: &Cli) {
    let (op, fine) = world.lost_response_to_review("intent-cli").await;
    let id = op.id().as_str();
    let tickets = world.vendor.tickets_created();
    let posts = world.vendor.posts_received();

    // The queue: only the stuck one.
    let listed = cli.run(&["list", "--state", "manual_review"]).await;
    let text = listed.ok();
    assert!(text.starts_with("OPERATION"), "{text}");
    assert!(
        text.contains(id) && text.contains("MANUAL_REVIEW"),
        "{text}"
    );
    assert!(!text.contains(fine.id().as_str()), "{text}");
    let json = cli
        .run(&["list", "--state", "manual_review", "--json"])
        .await
        .json();
    let rows = json["operations"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{json}");
    assert_eq!(rows[0]["operation_id"], id);
    assert_eq!(rows[0]["state"], "MANUAL_REVIEW");
    assert_eq!(rows[0]["attempts_used"], 1);
    assert_eq!(rows[0]["queries_used"], 3);
    // Both, oldest first; none older than an hour.
    let both = cli
        .run(&[
            "list",
            "--state",
            "manual_review,succeeded",
            "--oldest-first",
            "--json",
        ])
        .await
        .json();
    let ids: Vec<&str> = both["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["operation_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![fine.id().as_str(), id]);
    // Keyset pages: one row, then the next from the cursor printed.
    let first = cli
        .run(&["list", "--oldest-first", "--limit", "1", "--json"])
        .await
        .json();
    assert_eq!(first["operations"][0]["operation_id"], fine.id().as_str());
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = cli
        .run(&[
            "list",
            "--oldest-first",
            "--limit",
            "1",
            "--cursor",
            &cursor,
            "--json",
        ])
        .await
        .json();
    assert_eq!(second["operations"][0]["operation_id"], id);
    assert!(second["next_cursor"].is_null(), "{second}");
    let text = cli.run(&["list", "--oldest-first", "--limit", "1"]).await;
    assert!(
        text.ok()
            .ends_with(&format!("more: add --cursor {cursor}\n")),
        "{}",
        text.stdout
    );
    let old = cli
        .run(&["list", "--state", "manual_review", "--older-than", "1h"])
        .await;
    assert_eq!(old.ok(), "no operations match\n");
    let by_prefix = cli
        .run(&["list", "--match", &id[..10], "--json"])
        .await
        .json();
    assert_eq!(by_prefix["operations"][0]["operation_id"], id);

    // The handoff package, explained.
    let shown = cli.run(&["show", id]).await;
    let text = shown.ok().to_owned();
    for needle in [
        "state      MANUAL_REVIEW, last result UNKNOWN",
        "Waiting for a person (unclaimed)",
        "!! Do not create this write (create_ticket) again by hand",
        "1 of 3 write attempts used",
        "3 of 3 lookups used",
        "found nothing conclusive",
        "what the engine would do next",
        "Nothing on its own",
        "request (redacted: no credential, no body value)",
        "fields device_id, operation_id, priority",
        "attempts (1)",
    ] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
    assert!(!text.contains("client_secret"), "{text}");
    // The key the vendor saw (its ticket records it), to look the write up by; without the
    // application's contracts the CLI says it cannot tell where the key was sent.
    let seen = world
        .vendor
        .tickets()
        .into_iter()
        .find(|t| t.operation_id.as_deref() == Some(id))
        .and_then(|t| t.idempotency_key)
        .expect("the vendor saw a key");
    let key_line = format!("key       {seen} (where it was sent: give --contracts to know)");
    assert!(text.contains(&key_line), "{key_line:?} missing:\n{text}");
    let pkg = cli.run(&["show", id, "--json"]).await.json();
    assert_eq!(
        pkg["package"]["parameters"]["idempotency_key"],
        seen.as_str()
    );
    assert!(pkg["package"]["parameters"]["key_placement"].is_null());
    // Nothing named the vendor's object (every lookup found nothing), and without the
    // application's contracts the CLI cannot say how the contract looks the write up.
    for needle in [
        "vendor    no reference: no answer or callback named the object",
        "lookup    how the contract looks it up: give --contracts to know",
    ] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
    assert!(pkg["package"]["parameters"]["vendor_reference"].is_null());
    assert!(pkg["package"]["parameters"]["vendor_lookup"].is_null());
    // The write that went through: its ticket, as the vendor's answer named it.
    let ticket = world
        .vendor
        .tickets()
        .into_iter()
        .find(|t| t.operation_id.as_deref() == Some(fine.id().as_str()))
        .expect("the plain write's ticket");
    let fine_shown = cli.run(&["show", fine.id().as_str()]).await;
    let fine_text = fine_shown.ok();
    let vendor_line = format!(
        "vendor    {} (named by the answer to a send, entry #",
        ticket.id
    );
    assert!(
        fine_text.contains(&vendor_line),
        "{vendor_line:?} missing:\n{fine_text}"
    );
    let fine_pkg = cli
        .run(&["show", fine.id().as_str(), "--json"])
        .await
        .json();
    let reference = &fine_pkg["package"]["parameters"]["vendor_reference"];
    assert_eq!(reference["value"], ticket.id.as_str(), "{fine_pkg}");
    assert_eq!(reference["confirmed"], true, "{fine_pkg}");
    let version = pkg["package"]["version"].as_u64().unwrap();
    assert_eq!(pkg["package"]["state"], "MANUAL_REVIEW");
    assert_eq!(pkg["package"]["attempts"].as_array().unwrap().len(), 1);
    assert!(pkg["package"]["attempts"][0]["attempt_id"].is_string());
    assert!(pkg["package"]["attempts"][0]["registered_ms"].is_i64());
    assert_eq!(pkg["package"]["budget"]["queries_used"], 3);
    assert!(
        pkg["explanation"]["headline"]
            .as_str()
            .unwrap()
            .contains("Waiting for a person")
    );
    assert_eq!(pkg["audit"].as_array().unwrap().len(), 0);

    let stats = cli.run(&["stats", "--json"]).await.json();
    assert_eq!(stats["counts"]["MANUAL_REVIEW"], 1, "{stats}");
    assert_eq!(stats["counts"]["UNKNOWN"], 0, "{stats}");
    let oldest_review = stats["oldest"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["state"] == "MANUAL_REVIEW")
        .unwrap();
    assert_eq!(oldest_review["operation_id"], id);
    assert_eq!(stats["by_target"][0]["target"], "127.0.0.1");
    assert_eq!(stats["by_target"][0]["contract"], "default");

    // Claim on the version shown.
    let v = version.to_string();
    let claimed = cli
        .run(&[
            "claim",
            id,
            "--version",
            &v,
            "--reviewer",
            "alice",
            "--reason",
            "checking the vendor console",
            "--json",
        ])
        .await
        .json();
    assert_eq!(claimed["state"], "MANUAL_REVIEW");
    assert_eq!(claimed["from_version"], version);
    assert_eq!(claimed["version"], version + 1);
    assert_eq!(claimed["audit"]["who"], "alice");
    assert_eq!(claimed["audit"]["reason"], "checking the vendor console");
    assert_eq!(claimed["audit"]["from_version"], version);
    assert_eq!(claimed["audit"]["to_version"], version + 1);

    // A resolution on the version read before the claim is refused, with the state now.
    let stale = cli
        .run(&[
            "resolve",
            id,
            "succeeded",
            "--remote-ref",
            "W731",
            "--version",
            &v,
            "--reviewer",
            "bob",
            "--reason",
            "saw it",
        ])
        .await;
    assert_eq!(stale.code, 4, "{}", stale.stderr);
    assert!(
        stale.stderr.contains(&format!(
            "changed since version {version} was read (now version {})",
            version + 1
        )),
        "{}",
        stale.stderr
    );
    assert!(
        stale.stderr.contains("It is now MANUAL_REVIEW"),
        "{}",
        stale.stderr
    );
    assert_eq!(world.record(op.id()).await.state, State::ManualReview);
    assert_eq!(world.record(op.id()).await.version, version + 1);

    // The show after the claim names the claimer; then the resolution.
    let text = cli.run(&["show", id]).await.ok().to_owned();
    assert!(text.contains("claimed by alice"), "{text}");
    assert!(
        text.contains(&format!(
            "alice  claimed  (version {version} -> {})  reason: checking the vendor console",
            version + 1
        )),
        "{text}"
    );
    let v1 = (version + 1).to_string();
    let resolved = cli
        .run(&[
            "resolve",
            id,
            "succeeded",
            "--remote-ref",
            "W731",
            "--version",
            &v1,
            "--reviewer",
            "alice",
            "--reason",
            "ticket W731 is in the vendor console",
        ])
        .await;
    let text = resolved.ok();
    assert!(
        text.starts_with(&format!(
            "resolved as succeeded: {id} is now SUCCEEDED (version {} -> {})",
            version + 1,
            version + 2
        )),
        "{text}"
    );

    // The ledger afterwards: resolved, and both actions audited with who, why and versions.
    let row = world.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    assert_eq!(row.version, version + 2);
    let log = world.evidence(op.id()).await;
    let claim = log
        .iter()
        .find(|e| e.entry.kind == "review_claimed")
        .expect("claim audited");
    assert_eq!(
        claim.entry.note.as_deref(),
        Some(
            format!(
                "claimed by alice; version {version} -> {}; reason: checking the vendor console",
                version + 1
            )
            .as_str()
        )
    );
    let review = log.last().unwrap();
    assert_eq!(review.entry.kind, "review");
    assert_eq!(review.entry.to_state, Some(State::Succeeded));
    assert_eq!(
        review.entry.note.as_deref(),
        Some(
            format!(
                "confirmed succeeded (W731) by alice; version {} -> {}; reason: ticket W731 is \
                 in the vendor console",
                version + 1,
                version + 2
            )
            .as_str()
        )
    );
    assert!(claim.entry.at_ms <= review.entry.at_ms);

    // The audit trail is in `show`; stats count the resolution.
    let pkg = cli.run(&["show", id, "--json"]).await.json();
    let audit = pkg["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[1]["action"], "confirmed succeeded (W731)");
    assert_eq!(audit[1]["who"], "alice");
    let stats = cli.run(&["stats", "--json"]).await.json();
    assert_eq!(stats["review_resolution"]["count"], 1, "{stats}");
    assert_eq!(stats["time_to_claim"]["count"], 1, "{stats}");
    assert!(stats["review_resolution"]["max_ms"].as_i64().unwrap() >= 0);
    let text = cli.run(&["stats"]).await.ok().to_owned();
    assert!(text.contains("MANUAL_REVIEW  0"), "{text}");
    assert!(
        text.contains("reviews resolved, escalation to decision: 1"),
        "{text}"
    );

    // The CLI never sent anything to the vendor.
    assert_eq!(world.vendor.tickets_created(), tickets);
    assert_eq!(world.vendor.posts_received(), posts);
    cli.assert_nothing_leaked();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_drill_to_review_then_claim_and_resolve_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger).await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    review_with_the_cli(&world, &cli).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_drill_to_review_then_claim_and_resolve_with_the_cli() {
    let Some(url) = pg::pg_url().await else {
        return;
    };
    let schema = pg::Schema::new(&url);
    let options = PostgresLedgerOptions::new()
        .schema(schema.name.clone())
        .unwrap()
        .max_connections(4);
    let ledger: Arc<dyn FullLedger> =
        Arc::new(PostgresLedger::connect_with(&url, options).await.unwrap());
    let world = World::new(ledger).await;
    let cli = Cli::new(url.clone(), Some(schema.name.clone()));
    review_with_the_cli(&world, &cli).await;
}

/// D28 seen through `show`: a success arriving after a reviewer's claim is shown first, and
/// the other decisions and refusals have their exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_evidence_after_a_claim_is_shown_first_and_refusals_have_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    // The response is held 1.5 s (the CLI must start and claim meanwhile), within the attempt
    // timeout: a late success, not a timeout.
    let world = World::with_policy(
        ledger,
        BudgetPolicy {
            attempt_timeout_ms: 5_000,
            window_ms: 30_000,
            ..fast_policy()
        },
    )
    .await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let op = new_op("intent-late");
    world
        .vendor
        .faults()
        .delay_response(Duration::from_millis(1_500), 1);
    let mut svc = world.writer();
    let req = world.request(&op);
    let call = tokio::spawn(async move { send(&mut svc, req).await });
    // While the attempt is on the wire, a reviewer claims it with the CLI.
    let version = loop {
        let r = world
            .ledger
            .get(op.tenant(), op.id())
            .await
            .unwrap()
            .filter(|r| r.state == State::InFlight);
        if let Some(r) = r {
            break r.version;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let id = op.id().as_str();
    cli.run(&[
        "claim",
        id,
        "--version",
        &version.to_string(),
        "--reviewer",
        "bob",
        "--reason",
        "customer says the ticket is missing",
    ])
    .await
    .ok();
    let _ = call.await.unwrap();
    let row = world.record(op.id()).await;
    assert_eq!(
        row.state,
        State::ManualReview,
        "the late success does not move it"
    );

    let text = cli.run(&["show", id]).await.ok().to_owned();
    let late = text
        .find("!! LATE EVIDENCE after the claim by bob")
        .unwrap_or_else(|| panic!("late evidence not shown first:\n{text}"));
    assert!(late < text.find("\nwhy\n").unwrap(), "{text}");
    assert!(
        text.contains("resolve it as succeeded, do not re-approve it"),
        "{text}"
    );
    assert!(text.contains(" late_evidence "), "{text}");

    // Refusals: not-executed without --reapprove (2), a blank reason (2), an unknown operation
    // (3), keep-pending then a resolve of a finished operation (5).
    let v = row.version.to_string();
    let r = cli
        .run(&[
            "resolve",
            id,
            "not-executed",
            "--version",
            &v,
            "--reviewer",
            "bob",
            "--reason",
            "x",
        ])
        .await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--reapprove"), "{}", r.stderr);
    let r = cli
        .run(&[
            "resolve",
            id,
            "keep-pending",
            "--version",
            &v,
            "--reviewer",
            "bob",
            "--reason",
            "  ",
        ])
        .await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = cli.run(&["show", "op-does-not-exist"]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    let kept = cli
        .run(&[
            "resolve",
            id,
            "keep-pending",
            "--version",
            &v,
            "--reviewer",
            "bob",
            "--reason",
            "asking the vendor's support",
        ])
        .await;
    assert!(
        kept.ok().starts_with(&format!(
            "kept pending: {id} is now MANUAL_REVIEW (version {v} -> {})",
            row.version + 1
        )),
        "{}",
        kept.stdout
    );
    let last = world.evidence(op.id()).await.pop().unwrap();
    assert_eq!(
        last.entry.note.as_deref(),
        Some(
            format!(
                "kept pending by bob; version {v} -> {}; reason: asking the vendor's support",
                row.version + 1
            )
            .as_str()
        )
    );
    world
        .rw
        .reviews()
        .resolve_with_reason(
            op.tenant(),
            op.id(),
            "bob",
            "the late success names the ticket",
            // The kept-pending note advanced the version: forms read before it are stale.
            row.version + 1,
            ReviewDecision::ConfirmedSucceeded {
                remote_ref: world.vendor.tickets().first().map(|t| t.id.clone()),
            },
        )
        .await
        .unwrap();
    let after = world.record(op.id()).await.version.to_string();
    let r = cli
        .run(&[
            "resolve",
            id,
            "keep-pending",
            "--version",
            &after,
            "--reviewer",
            "bob",
            "--reason",
            "too late",
        ])
        .await;
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(r.stderr.contains("It is now SUCCEEDED"), "{}", r.stderr);
    assert_eq!(world.vendor.tickets_created(), 1);
    assert_eq!(world.vendor.posts_received(), 1);
    cli.assert_nothing_leaked();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ledgers_and_missing_scope_fail_clearly() {
    let cli = Cli::new(String::new(), None);
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.db");
    let missing = format!("sqlite:{}", missing.display());
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["--ledger", "mysql://db/ops", "--tenant", "t", "list"],
            2,
            "unsupported ledger \"mysql\"",
        ),
        (
            &["--ledger", "sqlite:", "--tenant", "t", "list"],
            2,
            "empty SQLite path",
        ),
        (
            &["--ledger", &missing, "--tenant", "t", "list"],
            1,
            "no SQLite ledger file at",
        ),
        (
            &[
                "--ledger",
                "postgres://ops:hunter2@127.0.0.1:1/ops",
                "--tenant",
                "t",
                "list",
            ],
            1,
            "cannot reach the PostgreSQL ledger postgres://***@127.0.0.1:1/ops",
        ),
        (&["--tenant", "t", "list"], 2, "no ledger"),
        (&["--ledger", &missing, "list"], 2, "--all-tenants"),
    ];
    for (args, code, message) in cases {
        let r = cli.raw(args).await;
        assert_eq!(r.code, code, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(message), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("hunter2"), "{}", r.stderr);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
    }
    // A typo never creates an empty ledger.
    assert!(!dir.path().join("nope.db").exists());
    // clap's own usage errors exit 2 too.
    let r = cli.raw(&["list", "--state"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
}

/// Retention from the command line (issue 15): a dry run counts and changes nothing, a purge
/// slims what is due and nothing else, `show` prints the retention dates, and erasure refuses
/// what is not finished; settings that retention refuses are a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_and_erase_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger.clone()).await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let (stuck, fine) = world.lost_response_to_review("intent-retention").await;
    let before = ledger.get(fine.tenant(), fine.id()).await.unwrap().unwrap();
    assert!(!before.request.body.is_empty());
    tokio::time::sleep(Duration::from_millis(20)).await;

    // Ledger-wide only.
    let run = cli.run(&["purge", "--dry-run"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--all-tenants"), "{}", run.stderr);
    let all = |args: &[&'static str]| {
        let mut full = vec!["--ledger", cli.ledger.as_str(), "--all-tenants"];
        full.extend(args);
        full
    };
    // A details clock of 10 ms: the finished write is due, the one in review never is.
    let dry = cli
        .raw(&all(&[
            "--keep-details",
            "10ms",
            "--json",
            "purge",
            "--dry-run",
            "--default-retention",
        ]))
        .await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let report = dry.json();
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["report"]["details"]["rows"], 1, "{}", dry.stdout);
    assert_eq!(report["report"]["identity"]["rows"], 0);
    assert_eq!(
        ledger.get(fine.tenant(), fine.id()).await.unwrap().unwrap(),
        before,
        "a dry run changes nothing"
    );
    let done = cli
        .raw(&all(&[
            "--keep-details",
            "10ms",
            "purge",
            "--default-retention",
            "--yes",
        ]))
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(done.stdout.contains("operation details"), "{}", done.stdout);
    let after = ledger.get(fine.tenant(), fine.id()).await.unwrap().unwrap();
    assert!(after.details_removed_ms.is_some() && after.request.body.is_empty());
    assert_eq!(after.state, State::Succeeded);
    let kept = ledger
        .get(stuck.tenant(), stuck.id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.state, State::ManualReview);
    assert!(kept.details_removed_ms.is_none() && !kept.request.body.is_empty());

    let show = cli.run(&["show", fine.id().as_str()]).await;
    assert!(show.ok().contains("details erased"), "{}", show.stdout);
    assert!(
        show.stdout.contains("a repeat sends nothing"),
        "{}",
        show.stdout
    );
    let show = cli.run(&["--json", "show", fine.id().as_str()]).await;
    assert_eq!(show.json()["retention"]["details_removed"], true);
    let show = cli.run(&["show", stuck.id().as_str()]).await;
    assert!(
        show.ok().contains("kept whatever its age"),
        "{}",
        show.stdout
    );

    // Erasure refuses what is not finished (exit 5) and asks before deleting a tenant.
    let refused = cli.run(&["erase", stuck.id().as_str()]).await;
    assert_eq!(refused.code, 5, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not finished"),
        "{}",
        refused.stderr
    );
    let unconfirmed = cli.run(&["erase", "--all-finished"]).await;
    assert_eq!(unconfirmed.code, 2, "{}", unconfirmed.stderr);
    let open = cli.run(&["erase", "--all-finished", "--yes"]).await;
    assert_eq!(open.code, 5, "{}", open.stderr);
    assert!(open.stderr.contains(stuck.id().as_str()), "{}", open.stderr);
    assert!(
        ledger
            .get(fine.tenant(), fine.id())
            .await
            .unwrap()
            .is_some()
    );

    // Settings retention refuses never reach the ledger.
    let bad = cli
        .raw(&all(&[
            "--keep-details",
            "2d",
            "--keep-identity",
            "1d",
            "purge",
        ]))
        .await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("retention.identity"), "{}", bad.stderr);
    assert_eq!(world.vendor.posts_received(), 2, "the CLI sends nothing");
    cli.assert_nothing_leaked();
}

/// Issue 27 item 10: a purge deletes by the application's own retention, shows what it will
/// delete, and deletes only when told to. Without a contracts file it is refused (the library's
/// 35 days can be shorter than the application's clocks and a vendor's key retention) unless
/// `--default-retention` says so; without `--yes` (no terminal here, as in CI) it prints its
/// plan and deletes nothing; with `--yes` it deletes what the plan listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_needs_the_applications_contracts_shows_its_plan_and_deletes_only_with_yes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger.clone()).await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let (stuck, fine) = world.lost_response_to_review("intent-purge-plan").await;
    let finished = ledger.get(fine.tenant(), fine.id()).await.unwrap().unwrap();
    let in_review = ledger
        .get(stuck.tenant(), stuck.id())
        .await
        .unwrap()
        .unwrap();
    let contract = finished.contract.name.to_string();
    // The application's contracts file: the drill's contract is its default.
    let contracts = dir.path().join("contracts.toml");
    std::fs::write(&contracts, "[default]\nextends = \"conservative\"\n").unwrap();
    let contracts = contracts.display().to_string();
    tokio::time::sleep(Duration::from_millis(30)).await;
    // Clocks of 10 and 20 ms: the finished write is due for deletion, the one in review never.
    let args = |with_contracts: bool, tail: &[&'static str]| {
        let mut full = vec![
            "--ledger".to_owned(),
            cli.ledger.clone(),
            "--all-tenants".to_owned(),
            "--keep-details".to_owned(),
            "10ms".to_owned(),
            "--keep-identity".to_owned(),
            "20ms".to_owned(),
        ];
        if with_contracts {
            full.extend(["--contracts".to_owned(), contracts.clone()]);
        }
        full.extend(tail.iter().map(|a| (*a).to_owned()));
        full
    };
    let run = |full: Vec<String>| {
        let cli = &cli;
        async move {
            let full: Vec<&str> = full.iter().map(String::as_str).collect();
            cli.raw(&full).await
        }
    };
    let unchanged = || async {
        assert_eq!(
            ledger.get(fine.tenant(), fine.id()).await.unwrap().as_ref(),
            Some(&finished),
            "the finished operation is untouched"
        );
        assert_eq!(
            ledger
                .get(stuck.tenant(), stuck.id())
                .await
                .unwrap()
                .as_ref(),
            Some(&in_review),
            "the operation in review is untouched"
        );
    };

    // No contracts file: refused, whatever else is said, naming both ways out.
    for tail in [
        &["purge"][..],
        &["purge", "--yes"],
        &["purge", "--dry-run"],
        &["--json", "purge", "--yes"],
    ] {
        let refused = run(args(false, tail)).await;
        assert_eq!(refused.code, 2, "{tail:?}: {}", refused.stderr);
        assert!(
            refused.stderr.contains("--contracts")
                && refused.stderr.contains("--default-retention"),
            "{tail:?}: {}",
            refused.stderr
        );
        assert!(
            refused.stderr.contains("Nothing was deleted"),
            "{}",
            refused.stderr
        );
        assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    }
    unchanged().await;
    // Both at once is ambiguous.
    let both = run(args(true, &["purge", "--default-retention", "--yes"])).await;
    assert_eq!(both.code, 2, "{}", both.stderr);
    unchanged().await;

    // The contracts, no --yes and no terminal: the plan, exit 2, nothing deleted.
    let unconfirmed = run(args(true, &["purge"])).await;
    assert_eq!(unconfirmed.code, 2, "{}", unconfirmed.stderr);
    assert!(
        unconfirmed.stderr.contains("nothing was deleted") && unconfirmed.stderr.contains("--yes"),
        "{}",
        unconfirmed.stderr
    );
    let plan = &unconfirmed.stdout;
    assert!(
        plan.contains("purge plan: retention from the contracts in"),
        "{plan}"
    );
    assert!(plan.contains("operations to delete"), "{plan}");
    let line = plan
        .lines()
        .find(|l| l.starts_with(&contract))
        .unwrap_or_else(|| panic!("no line for {contract}:\n{plan}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells[cells.len() - 2..], ["0", "1"], "{line}");
    unchanged().await;
    let unconfirmed = run(args(true, &["--json", "purge"])).await;
    assert_eq!(unconfirmed.code, 2, "{}", unconfirmed.stderr);
    let shown: Value = serde_json::from_str(&unconfirmed.stdout).unwrap();
    let line = &shown["plan"]["contracts"][0];
    assert_eq!(line["contract"], contract.as_str());
    assert_eq!(line["configured"], true);
    assert_eq!(line["keep_identity_ms"], 20);
    assert_eq!(line["identity"]["rows"], 1, "{shown}");
    assert_eq!(
        line["details"]["rows"], 0,
        "a row deleted is not slimmed too"
    );
    assert_eq!(shown["plan"]["total"]["identity"]["rows"], 1);
    unchanged().await;

    // --yes: what the plan listed, and nothing else.
    let done = run(args(true, &["--json", "purge", "--yes"])).await;
    let done = done.json();
    assert_eq!(done["dry_run"], false);
    assert_eq!(done["plan"]["total"]["identity"]["rows"], 1);
    assert_eq!(done["report"]["identity"]["rows"], 1, "{done}");
    assert_eq!(done["report"]["details"]["rows"], 0);
    assert_eq!(ledger.get(fine.tenant(), fine.id()).await.unwrap(), None);
    assert_eq!(
        ledger
            .get(stuck.tenant(), stuck.id())
            .await
            .unwrap()
            .as_ref(),
        Some(&in_review),
        "never an operation that is not finished"
    );
    // Nothing is due any more: nothing to confirm.
    let again = run(args(true, &["purge"])).await;
    assert!(again.ok().contains("would purge"), "{}", again.stdout);
    let again = run(args(true, &["--json", "purge"])).await.json();
    assert_eq!(again["dry_run"], false, "{again}");
    assert_eq!(again["report"]["identity"]["rows"], 0);
    // The explicit flag: the library's clocks, said out loud.
    let defaults = run(args(false, &["purge", "--default-retention", "--dry-run"])).await;
    assert!(
        defaults.ok().contains("the library's default clocks"),
        "{}",
        defaults.stdout
    );
    assert_eq!(world.vendor.posts_received(), 2, "the CLI sends nothing");
    cli.assert_nothing_leaked();
}

/// Issue 27 item 3 from the command line: a row this version cannot decode is quarantined by
/// the recovery pass and stays visible. `stats` counts it as QUARANTINED, `list` shows it with
/// the decode error (under the open queue, and alone with `--state quarantined`), `show`
/// prints its raw, redacted columns and what to do (it used to fail), and `quarantine release`
/// refuses while it cannot be read (exit 5), then gives it back to recovery once it can: the
/// vendor's ticket is found, nothing is created twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_rows_are_counted_listed_shown_and_released_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger).await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let op = new_op("intent-newer-row");
    world.vendor.faults().drop_after_commit(1);
    let err = send(&mut world.writer(), world.request(&op))
        .await
        .expect_err("the response is lost");
    assert!(
        matches!(err, recoverable_write::Error::Unknown { .. }),
        "{err:?}"
    );
    assert_eq!(world.record(op.id()).await.state, State::Unknown);
    let id = op.id().as_str();

    // A newer version stored the request headers in a shape this one cannot read.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.busy_timeout(Duration::from_secs(5)).unwrap();
    let headers: String = raw
        .query_row(
            "SELECT request_headers FROM rw_operations WHERE operation_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    let set_headers = |value: &str| {
        let n = raw
            .execute(
                "UPDATE rw_operations SET request_headers = ?1 WHERE operation_id = ?2",
                [value, id],
            )
            .unwrap();
        assert_eq!(n, 1);
    };
    set_headers(r#"{"format": 2, "headers": []}"#);
    let mut quarantined = false;
    for _ in 0..200 {
        world
            .recoverer
            .run_once()
            .await
            .expect("a pass never fails on a bad row");
        if !world.ledger.quarantined(10).await.unwrap().is_empty() {
            quarantined = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(quarantined, "the recovery pass quarantines the row");

    // Counted, as its own line.
    let stats = cli.run(&["stats"]).await;
    let line = stats
        .ok()
        .lines()
        .find(|l| l.trim_start().starts_with("QUARANTINED"))
        .unwrap_or_else(|| panic!("no QUARANTINED line:\n{}", stats.stdout))
        .to_owned();
    assert!(line.trim_end().ends_with(" 1"), "{line}");
    let json = cli.run(&["stats", "--json"]).await.json();
    assert_eq!(json["counts"]["QUARANTINED"], 1, "{json}");
    assert_eq!(json["counts"]["UNKNOWN"], 0, "in no state's count: {json}");

    // Listed with the decode error: under the open queue, and on its own.
    let listed = cli.run(&["list"]).await;
    let text = listed.ok();
    assert!(text.contains("quarantined: 1 row(s)"), "{text}");
    assert!(
        text.contains(id) && text.contains("request_headers"),
        "{text}"
    );
    let json = cli.run(&["list", "--state", "open", "--json"]).await.json();
    assert!(json["operations"].as_array().unwrap().is_empty(), "{json}");
    let q = &json["quarantined"][0];
    assert_eq!(q["operation_id"], id, "{json}");
    assert_eq!(q["state"], "UNKNOWN");
    assert_eq!(q["quarantined"], true);
    assert_eq!(q["readable"], false);
    assert!(
        q["error"].as_str().unwrap().contains("request_headers"),
        "{json}"
    );
    let version = q["version"].as_u64().expect("its version");
    let alone = cli.run(&["list", "--state", "quarantined"]).await;
    let text = alone.ok();
    assert!(text.contains(id) && text.contains("STORED STATE"), "{text}");
    let unknown = cli
        .run(&["list", "--state", "unknown", "--json"])
        .await
        .json();
    assert!(
        unknown["operations"].as_array().unwrap().is_empty(),
        "{unknown}"
    );
    assert!(
        unknown["quarantined"].as_array().unwrap().is_empty(),
        "{unknown}"
    );
    let mixed = cli.run(&["list", "--state", "quarantined,unknown"]).await;
    assert_eq!(mixed.code, 2, "{}", mixed.stderr);

    // Opened: the raw, redacted view, and what to do.
    let shown = cli.run(&["show", id]).await;
    let text = shown.ok();
    for expected in [
        "QUARANTINED",
        "request_headers",
        "upgrade to a version that can read it",
        "headers   (unreadable)",
        "fields device_id, operation_id, priority",
        &format!("quarantine release {id} --version {version}"),
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    let json = cli.run(&["show", id, "--json"]).await.json();
    assert_eq!(json["quarantined"]["readable"], false, "{json}");
    assert_eq!(json["quarantined"]["column"], "request_headers", "{json}");
    assert_eq!(json["quarantined"]["version"], version);

    // Not released while it cannot be read; the other refusals keep their exit codes.
    let refused = cli
        .run(&[
            "quarantine",
            "release",
            id,
            "--version",
            &version.to_string(),
            "--reviewer",
            "alice",
            "--reason",
            "too early",
        ])
        .await;
    assert_eq!(refused.code, 5, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("request_headers"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("upgrade"), "{}", refused.stderr);
    let stale = cli
        .run(&[
            "quarantine",
            "release",
            id,
            "--version",
            &(version - 1).to_string(),
            "--reviewer",
            "alice",
            "--reason",
            "stale",
        ])
        .await;
    assert_eq!(stale.code, 4, "{}", stale.stderr);
    let missing = cli
        .run(&[
            "quarantine",
            "release",
            "op-none",
            "--version",
            "1",
            "--reviewer",
            "alice",
            "--reason",
            "r",
        ])
        .await;
    assert_eq!(missing.code, 3, "{}", missing.stderr);
    let blank = cli
        .run(&[
            "quarantine",
            "release",
            id,
            "--version",
            &version.to_string(),
            "--reviewer",
            "alice",
            "--reason",
            " ",
        ])
        .await;
    assert_eq!(blank.code, 2, "{}", blank.stderr);
    assert_eq!(
        world.ledger.quarantined(10).await.unwrap().len(),
        1,
        "nothing changed"
    );

    // Every worker runs the version that reads it: readable, still set aside until released.
    set_headers(&headers);
    let shown = cli.run(&["show", id]).await;
    assert!(shown.ok().starts_with("!! QUARANTINED"), "{}", shown.stdout);
    let released = cli
        .run(&[
            "quarantine",
            "release",
            id,
            "--version",
            &version.to_string(),
            "--reviewer",
            "alice",
            "--reason",
            "0.4 on every worker",
        ])
        .await;
    assert!(
        released.ok().contains(&format!(
            "released from quarantine (version {version} -> {})",
            version + 1
        )),
        "{}",
        released.stdout
    );
    let again = cli
        .run(&[
            "quarantine",
            "release",
            id,
            "--version",
            &(version + 1).to_string(),
            "--reviewer",
            "alice",
            "--reason",
            "twice",
        ])
        .await;
    assert_eq!(again.code, 5, "not quarantined any more: {}", again.stderr);
    let json = cli.run(&["stats", "--json"]).await.json();
    assert_eq!(json["counts"]["QUARANTINED"], 0, "{json}");

    // Recovery goes on where it stopped: the vendor's ticket is found.
    let row = world
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert!(row.remote_ref.is_some());
    let shown = cli.run(&["show", id]).await;
    let text = shown.ok();
    assert!(text.contains("released from quarantine"), "{text}");
    assert!(text.contains("0.4 on every worker"), "{text}");
    assert_eq!(world.vendor.tickets_created(), 1, "never created twice");
    assert_eq!(world.vendor.posts_received(), 1);
    cli.assert_nothing_leaked();
}

/// A line as a shell splits it: words, "double" and 'single' quotes (no expansions).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        _ => word.push(q),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The command line `show` (or an action) printed containing every one of `needles`, as the
/// binary's arguments (after `recoverable-write`).
fn printed_command(out: &str, needles: &[&str]) -> Vec<String> {
    let line = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("recoverable-write ") && needles.iter().all(|n| l.contains(n)))
        .unwrap_or_else(|| panic!("no command with {needles:?}:\n{out}"));
    let words = shell_words(line);
    assert_eq!(words[0], "recoverable-write");
    words[1..].to_vec()
}

/// Runs printed arguments as they are (nothing added: no --ledger, no --tenant).
async fn run_printed(cli: &Cli, args: &[String]) -> Run {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cli.raw(&args).await
}

/// Issue 30 item 3: `show`'s commands run as printed, each at the version they name; a success
/// without a reference needs `--no-reference`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn printed_commands_run_as_printed_and_a_success_without_reference_needs_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger).await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let (op, _) = world.lost_response_to_review("intent-printed").await;
    let id = op.id().as_str();
    let tickets = world.vendor.tickets_created();
    let v0 = world.record(op.id()).await.version;

    // Every command printed names the tenant and the version shown, and runs as printed.
    let shown = cli.run(&["show", id]).await.ok().to_owned();
    let claim = printed_command(&shown, &[" claim "]);
    assert!(
        claim.windows(2).any(|w| w == ["--tenant", TENANT]),
        "{claim:?}"
    );
    for line in shown.lines().filter(|l| l.contains("recoverable-write ")) {
        assert!(line.contains(&format!("--version {v0} ")), "{line}");
    }
    let claimed = run_printed(&cli, &claim).await;
    let claimed = claimed.ok().to_owned();
    assert_eq!(world.record(op.id()).await.version, v0 + 1);

    // The claim's own "next" commands are at the new version; keep-pending runs as printed.
    let keep = printed_command(&claimed, &[" keep-pending "]);
    assert!(
        claimed.contains(&format!("--version {} ", v0 + 1)),
        "{claimed}"
    );
    run_printed(&cli, &keep).await.ok();
    let row = world.record(op.id()).await;
    assert_eq!(row.state, State::ManualReview);
    assert_eq!(row.version, v0 + 2);

    // `succeeded` without a reference is refused unless said explicitly: nothing changes.
    let v2 = (v0 + 2).to_string();
    let bare = cli
        .run(&[
            "resolve",
            id,
            "succeeded",
            "--version",
            &v2,
            "--reviewer",
            "alice",
            "--reason",
            "it is there",
        ])
        .await;
    assert_eq!(bare.code, 2, "{}", bare.stderr);
    assert!(bare.stderr.contains("--no-reference"), "{}", bare.stderr);
    let row = world.record(op.id()).await;
    assert_eq!((row.state, row.version), (State::ManualReview, v0 + 2));

    // The printed `--no-reference` line, as printed.
    let shown = cli.run(&["show", id]).await.ok().to_owned();
    assert!(!shown.contains(&format!("--version {v0} ")), "{shown}");
    let no_ref = printed_command(&shown, &["succeeded", "--no-reference"]);
    run_printed(&cli, &no_ref).await.ok();
    let row = world.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref, None);
    // Resolving records; it never sends.
    assert_eq!(world.vendor.tickets_created(), tickets);
    cli.assert_nothing_leaked();
}

/// Issue 30 item 3: generated ids share their leading timestamp, so an operation is named by
/// the end of its id or its intent, and an ambiguous name lists the candidates truthfully.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_are_named_by_their_ids_end_or_intent_and_ambiguity_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger).await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let (op, fine) = world.lost_response_to_review("intent-named").await;
    let id = op.id().as_str();

    // A prefix both ids share: ambiguous, both listed, and the hint is one that works here
    // (not --tenant: it was given).
    let common: usize = id
        .chars()
        .zip(fine.id().as_str().chars())
        .take_while(|(a, b)| a == b)
        .count();
    let prefix = &id[..common.max(3)];
    let r = cli.run(&["show", prefix]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    for needle in [
        id,
        fine.id().as_str(),
        "intent-named",
        "last characters",
        "MANUAL_REVIEW",
    ] {
        assert!(r.stderr.contains(needle), "{needle:?}: {}", r.stderr);
    }
    assert!(!r.stderr.contains("--tenant"), "{}", r.stderr);

    // The end of the id, and the intent, each name exactly one operation.
    let suffix = &id[id.len() - 6..];
    let shown = cli.run(&["show", suffix]).await;
    assert!(
        shown.ok().starts_with(&format!("operation  {id} ")),
        "{}",
        shown.stdout
    );
    let shown = cli.run(&["show", "intent-named"]).await;
    assert!(
        shown.ok().starts_with(&format!("operation  {id} ")),
        "{}",
        shown.stdout
    );
    let v = world.record(op.id()).await.version.to_string();
    cli.run(&[
        "claim",
        suffix,
        "--version",
        &v,
        "--reviewer",
        "alice",
        "--reason",
        "by the end of its id",
    ])
    .await
    .ok();
    assert_eq!(
        world.record(op.id()).await.version,
        v.parse::<u64>().unwrap() + 1
    );
    let r = cli.run(&["show", "intent-nobody"]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    cli.assert_nothing_leaked();
}

/// Issue 30 item 3: `list` shows the reason the page shows; the wording fits the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_the_reason_and_the_words_fit_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger).await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let (op, fine) = world.lost_response_to_review("intent-words").await;
    let reason = world
        .record(op.id())
        .await
        .reason
        .expect("an escalation reason");

    let listed = cli.run(&["list"]).await.ok().to_owned();
    let header = listed.lines().next().unwrap();
    assert!(header.trim_end().ends_with("REASON"), "{listed}");
    let line = listed
        .lines()
        .find(|l| l.contains(op.id().as_str()))
        .unwrap();
    let shown_reason: String = reason.chars().take(40).collect();
    assert!(line.contains(&shown_reason), "{line}\n{reason}");

    // A finished operation is not "a duplicate" in waiting, even when an attempt's response
    // was lost on the way (D1: the lookup found the ticket).
    let recovered = new_op("intent-words-recovered");
    world.vendor.faults().drop_after_commit(1);
    let _ = send(&mut world.writer(), world.request(&recovered)).await;
    let row = world
        .recover_until(recovered.id(), |r| r.state.is_terminal())
        .await;
    assert_eq!(row.state, State::Succeeded);
    assert!(row.may_have_applied);
    let shown = cli
        .run(&["show", recovered.id().as_str()])
        .await
        .ok()
        .to_owned();
    assert!(!shown.contains("could be a duplicate"), "{shown}");

    // A claim of an UNKNOWN write: evidence did not run out, a person took it over.
    let unknown = new_op("intent-words-unknown");
    world.vendor.faults().drop_after_commit(1);
    let _ = send(&mut world.writer(), world.request(&unknown)).await;
    let row = world.record(unknown.id()).await;
    assert_eq!(row.state, State::Unknown);
    let v = row.version.to_string();
    let claimed = cli
        .run(&[
            "claim",
            unknown.id().as_str(),
            "--version",
            &v,
            "--reviewer",
            "alice",
            "--reason",
            "customer called",
        ])
        .await
        .ok()
        .to_owned();
    let shown = cli
        .run(&["show", unknown.id().as_str()])
        .await
        .ok()
        .to_owned();
    for text in [&claimed, &shown] {
        assert!(!text.contains("evidence ran out"), "{text}");
        assert!(text.contains("a reviewer took it over"), "{text}");
    }

    // A refusal names no internal event.
    let v = world.record(fine.id()).await.version.to_string();
    let refused = cli
        .run(&[
            "claim",
            fine.id().as_str(),
            "--version",
            &v,
            "--reviewer",
            "alice",
            "--reason",
            "look",
        ])
        .await;
    assert_eq!(refused.code, 5, "{}", refused.stderr);
    assert!(
        !refused.stderr.contains("review_claim"),
        "{}",
        refused.stderr
    );
    assert!(
        refused
            .stderr
            .contains("SUCCEEDED: it cannot be claimed (it is finished)"),
        "{}",
        refused.stderr
    );
    assert_eq!(world.record(fine.id()).await.state, State::Succeeded);

    // --help names every state in which a write must not be created again by hand.
    let help = cli.raw(&["--help"]).await;
    let help = help.ok().replace('\n', " ");
    assert!(
        help.contains("UNKNOWN, PROCESSING, IN_FLIGHT or MANUAL_REVIEW"),
        "{help}"
    );
    cli.assert_nothing_leaked();
}

/// Issue 30 item 3: refused connections are not a vendor's result ("last result PREPARED"
/// after three of them, or UNKNOWN when the replay could not be sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_not_a_last_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    // D20: every attempt refused, the write budget spent.
    let drill = Drill::with_ledger(
        FakeVendor::start().await,
        ledger.clone(),
        DrillOptions::default(),
    );
    let op = new_op("intent-refused");
    drill.vendor.faults().refuse_connections(true).unwrap();
    let _ = send(&mut drill.writer(), drill.ticket_request(&op, "E17")).await;
    let row = drill
        .recover_until(op.id(), |r| r.state == State::ManualReview)
        .await;
    assert_eq!(row.attempts_used, 3);
    // A contract whose secret body field the replay cannot supply: one refused attempt.
    let world = World::with_policy(ledger, fast_policy()).await;
    let secret = new_op("intent-refused-secret");
    world.vendor.faults().refuse_connections(true).unwrap();
    let _ = send(&mut world.writer(), world.request(&secret)).await;
    let row = world
        .recover_until(secret.id(), |r| r.state == State::ManualReview)
        .await;
    assert_eq!(row.attempts_used, 1);
    for op in [&op, &secret] {
        let shown = cli.run(&["show", op.id().as_str()]).await.ok().to_owned();
        let state_line = shown.lines().find(|l| l.starts_with("state ")).unwrap();
        assert!(!state_line.contains("last result"), "{shown}");
        assert!(
            state_line.contains("no attempt reached the vendor"),
            "{state_line}"
        );
    }
    assert_eq!(drill.vendor.tickets_created(), 0);
    assert_eq!(world.vendor.tickets_created(), 0);
}

/// Issue 30 item 3: a bare path to a SQLite ledger is accepted; a missing one is named with the
/// form that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_ledger_path_is_accepted_or_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger).await;
    let (op, _) = world.lost_response_to_review("intent-bare").await;
    let cli = Cli::new(path.display().to_string(), None);
    let listed = cli.run(&["list"]).await;
    assert!(listed.ok().contains(op.id().as_str()), "{}", listed.stdout);
    // `show` prints commands that run as printed: with the ledger as `sqlite:PATH`.
    let shown = cli.run(&["show", op.id().as_str()]).await.ok().to_owned();
    assert!(
        shown.contains(&format!("--ledger sqlite:{}", path.display()))
            || shown.contains(&format!("--ledger 'sqlite:{}'", path.display())),
        "{shown}"
    );
    let missing = dir.path().join("nope.db");
    let r = cli
        .raw(&[
            "--ledger",
            &missing.display().to_string(),
            "--tenant",
            "t",
            "list",
        ])
        .await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("sqlite:PATH"), "{}", r.stderr);
    assert!(!missing.exists());
}

/// A writer whose clock runs `behind_ms` late (a host with a skewed clock): the operations it
/// leaves `UNKNOWN` are due in the past, so their check is overdue at once.
#[derive(Debug)]
struct Behind(i64);

impl recoverable_write::clock::Clock for Behind {
    fn now_ms(&self) -> i64 {
        recoverable_write::clock::ProcessClock.now_ms() - self.0
    }
}

/// Runs the world's recoverer (named `worker`) until its heartbeat is in the ledger and
/// `op` is `SUCCEEDED`, then stops it.
async fn run_worker_until_resolved(world: &World, worker: &str, op: &Operation) {
    use recoverable_write::ledger::ListingLedger;
    let engine = world
        .recoverer
        .clone()
        .worker_id(worker)
        .interval(Duration::from_millis(20))
        .spawn();
    let mut done = false;
    for _ in 0..500 {
        let beats = world.ledger.heartbeats().await.expect("heartbeats");
        if beats.iter().any(|b| b.worker_id == worker)
            && world.record(op.id()).await.state == State::Succeeded
        {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    engine.shutdown().await;
    assert!(done, "the worker never beat or never resolved {}", op.id());
}

/// Issue 30 item 1 on the command line: with no recoverer running and an `UNKNOWN` operation
/// waiting, `stats` raises the alarm (text and JSON) and `show` says nobody is verifying it;
/// after a worker ran, `stats` lists it alive with its last pass and what it claimed, and
/// the alarm is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_shows_the_no_worker_alarm_then_the_worker_alive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let world = World::new(ledger).await;
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let op = new_op("intent-no-worker");
    world.vendor.faults().drop_after_commit(1);
    let _ = send(&mut world.writer(), world.request(&op))
        .await
        .expect_err("the response is lost");
    assert_eq!(world.record(op.id()).await.state, State::Unknown);

    let text = cli.run(&["stats"]).await.ok().to_owned();
    assert!(
        text.starts_with("engine: no recoverer worker alive · no pass ever reported\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  ALARM: No recoverer worker is alive (no worker has ever reported to this \
             ledger), and 1 operation waits for the engine"
        ),
        "{text}"
    );
    assert!(text.contains("  no worker heartbeat recorded"), "{text}");
    let json = cli.run(&["stats", "--json"]).await.json();
    assert_eq!(json["engine"]["alive"], 0, "{json}");
    assert_eq!(json["engine"]["waiting"], 1, "{json}");
    assert_eq!(json["engine"]["overdue"], 0, "{json}");
    assert_eq!(json["engine"]["grace_ms"], 90_750, "{json}");
    assert_eq!(json["engine"]["workers"], serde_json::json!([]), "{json}");
    assert!(
        json["engine"]["alarm"]
            .as_str()
            .is_some_and(|a| a.starts_with("No recoverer worker is alive")),
        "{json}"
    );
    let shown = cli.run(&["show", op.id().as_str()]).await.ok().to_owned();
    assert!(
        shown.contains("!! No recoverer worker is alive (no worker has ever reported"),
        "{shown}"
    );
    assert!(shown.contains("next check due"), "{shown}");

    run_worker_until_resolved(&world, "cli-worker-1", &op).await;
    let text = cli.run(&["stats"]).await.ok().to_owned();
    assert!(
        text.starts_with("engine: 1 recoverer worker alive · last pass "),
        "{text}"
    );
    assert!(!text.contains("ALARM"), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("cli-worker-1"))
        .unwrap_or_else(|| panic!("no worker line:\n{text}"));
    assert!(line.contains(" yes "), "{line}");
    assert!(line.contains(env!("CARGO_PKG_VERSION")), "{line}");
    let json = cli.run(&["stats", "--json"]).await.json();
    let w = &json["engine"]["workers"][0];
    assert_eq!(json["engine"]["alive"], 1, "{json}");
    assert_eq!(json["engine"]["alarm"], Value::Null, "{json}");
    assert_eq!(w["worker_id"], "cli-worker-1", "{json}");
    assert!(w["claimed_total"].as_u64().unwrap() >= 1, "{json}");
    assert_eq!(w["errors"], 0, "{json}");
    assert_eq!(
        w["interval_ms"], 2_020,
        "the pause plus the drill's 2 s lease: {json}"
    );
    // The recoverer's lookup found the ticket: created once, never resent.
    assert_eq!(world.vendor.tickets_created(), 1);
    assert_eq!(world.vendor.posts_received(), 1);
    cli.assert_nothing_leaked();
}

/// An `UNKNOWN` operation whose next check passed long ago (written by a host whose clock is
/// ten minutes late) is counted overdue by `stats`, and `show` says by how much instead of
/// "the engine is verifying it".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_show_report_an_overdue_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    // A window long enough that the late writer's operation is still recoverable.
    let policy = BudgetPolicy {
        window_ms: 3_600_000,
        ..fast_policy()
    };
    let mut world = World::with_policy(ledger, policy).await;
    world.0.layer = world
        .builder()
        .clock(Behind(10 * 60_000))
        .build()
        .unwrap()
        .layer();
    let cli = Cli::new(format!("sqlite:{}", path.display()), None);
    let op = new_op("intent-overdue");
    world.vendor.faults().drop_after_commit(1);
    let _ = send(&mut world.writer(), world.request(&op))
        .await
        .expect_err("the response is lost");
    let row = world.record(op.id()).await;
    assert_eq!(row.state, State::Unknown);
    assert!(row.next_check_ms.is_some(), "{row:?}");

    let text = cli.run(&["stats"]).await.ok().to_owned();
    assert!(
        text.contains(
            "  overdue: 1 (UNKNOWN or RETRY_READY, next check passed more than 1m 30s ago); \
             waiting for the engine: 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("1 operation is overdue: its next check passed more than 1m 30s ago."),
        "{text}"
    );
    let json = cli.run(&["stats", "--json"]).await.json();
    assert_eq!(json["engine"]["overdue"], 1, "{json}");
    let shown = cli.run(&["show", op.id().as_str()]).await.ok().to_owned();
    assert!(shown.contains("its check is overdue by "), "{shown}");
    assert!(shown.contains("next check overdue by "), "{shown}");
    assert!(!shown.contains("the engine is verifying it"), "{shown}");

    // A worker runs: it finds the ticket; nothing is overdue any more.
    run_worker_until_resolved(&world, "cli-worker-2", &op).await;
    let json = cli.run(&["stats", "--json"]).await.json();
    assert_eq!(json["engine"]["overdue"], 0, "{json}");
    assert_eq!(json["engine"]["alive"], 1, "{json}");
    assert_eq!(world.vendor.tickets_created(), 1);
    cli.assert_nothing_leaked();
}
