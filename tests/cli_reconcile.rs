//! `recoverable-write reconcile` (issue 30 item 6): the plan from a vendor's export and
//! `--apply`, run as the built binary on the SQLite ledger of a real drill (operations taken to
//! `MANUAL_REVIEW` by lost responses the vendor's lookups cannot answer). Every test checks the
//! output, the exit code, the ledger afterwards and the fake vendor's own count of side
//! effects: reconciling never sends anything.

#[path = "common/bulk.rs"]
mod bulk;

use std::path::{Path, PathBuf};

use bulk::{in_review, stripe_export, ticket_of};
use recoverable_write::ledger::backend::NewEvidence;
use recoverable_write::state::State;
use recoverable_write::testing::drill::{Drill, TENANT};
use recoverable_write::{Operation, Tenant};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_recoverable-write");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn run(drill: &Drill, args: &[&str]) -> Run {
    let ledger = format!("sqlite:{}", drill.dir.path().join("ledger.db").display());
    let out = tokio::process::Command::new(BIN)
        .env_remove("RECOVERABLE_WRITE_LEDGER")
        .args(["--ledger", ledger.as_str(), "--tenant", TENANT])
        .args(args)
        .output()
        .await
        .expect("run the binary");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("utf-8"),
        stderr: String::from_utf8(out.stderr).expect("utf-8"),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

async fn states(drill: &Drill, ops: &[Operation]) -> Vec<(State, Option<String>)> {
    let mut out = Vec::new();
    for op in ops {
        let r = drill.record(op.id()).await;
        out.push((r.state, r.remote_ref));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_shows_what_would_be_resolved_what_matches_nothing_and_what_is_left_by_hand() {
    let (drill, ops) = in_review(3, "cli-plan").await;
    let dir = tempfile::tempdir().unwrap();
    // ops[0] and ops[1] are in the export; ops[2] is not; one row names an unknown operation.
    let csv = format!(
        "id,Created (UTC),operation_id (metadata)\n{},2026-12-01,{}\n{},2026-12-01,{}\nch_stranger,2026-12-01,op-nobody\n",
        ticket_of(&drill, &ops[0]),
        ops[0].id(),
        ticket_of(&drill, &ops[1]),
        ops[1].id()
    );
    let file = write(dir.path(), "payments.csv", &csv);
    let f = file.to_str().unwrap();
    let before = states(&drill, &ops).await;

    let r = run(&drill, &["reconcile", "--from", f, "--format", "stripe"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = &r.stdout;
    assert!(
        out.contains("plan from payments.csv (stripe export, sha256 "),
        "{out}"
    );
    assert!(out.contains("would resolve as SUCCEEDED (2)"), "{out}");
    assert!(out.contains(&ticket_of(&drill, &ops[0])), "{out}");
    assert!(out.contains("export rows that match nothing (1)"), "{out}");
    assert!(out.contains("ch_stranger"), "{out}");
    assert!(
        out.contains("in MANUAL_REVIEW with no export row (1)"),
        "{out}"
    );
    assert!(out.contains(ops[2].id().as_str()), "{out}");
    assert!(out.contains("never resolved as not executed"), "{out}");
    // A plan changes nothing.
    assert_eq!(states(&drill, &ops).await, before);

    let j = run(
        &drill,
        &["--json", "reconcile", "--from", f, "--format", "stripe"],
    )
    .await;
    assert_eq!(j.code, 0, "{}", j.stderr);
    let v: Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 3);
    assert_eq!(v["rows"][0]["action"]["kind"], "resolve");
    assert_eq!(v["rows"][2]["action"]["kind"], "no_match");
    assert_eq!(v["unmatched"][0]["operation_id"], ops[2].id().as_str());
    assert_eq!(drill.vendor.tickets_created(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_resolves_the_plan_and_a_saved_plan_with_one_stale_row_applies_the_rest() {
    let (drill, ops) = in_review(3, "cli-apply").await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "export.csv", &stripe_export(&drill));
    let f = file.to_str().unwrap();
    let posts = drill.vendor.posts_received();

    // The plan, saved; then evidence arrives on ops[1]; then the saved plan is applied.
    let j = run(
        &drill,
        &["--json", "reconcile", "--from", f, "--format", "stripe"],
    )
    .await;
    assert_eq!(j.code, 0, "{}", j.stderr);
    let plan = write(dir.path(), "plan.json", &j.stdout);
    let moved = drill.record(ops[1].id()).await;
    drill
        .ledger
        .append_evidence(
            &Tenant::new(TENANT),
            ops[1].id(),
            NewEvidence {
                attempt_id: None,
                generation: moved.generation,
                kind: "late_response".into(),
                from_state: None,
                to_state: None,
                evidence: None,
                note: Some("a late answer".into()),
                at_ms: moved.updated_ms + 1,
            },
        )
        .await
        .unwrap();
    let args = [
        "reconcile",
        "--from",
        f,
        "--format",
        "stripe",
        "--apply",
        "--plan",
        plan.to_str().unwrap(),
        "--reviewer",
        "alice",
        "--reason",
        "outage export",
    ];
    let r = run(&drill, &args).await;
    assert_eq!(r.code, 4, "stale: {}\n{}", r.stderr, r.stdout);
    assert!(r.stdout.contains("applied 2 of 3"), "{}", r.stdout);
    assert!(
        r.stdout.contains("STALE: changed since the plan"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains(ops[1].id().as_str()), "{}", r.stdout);
    assert!(
        r.stderr.contains("2 of 3 planned resolutions were applied"),
        "{}",
        r.stderr
    );
    let now = states(&drill, &ops).await;
    assert_eq!(now[0], (State::Succeeded, Some(ticket_of(&drill, &ops[0]))));
    assert_eq!(now[1], (State::ManualReview, None));
    assert_eq!(now[2], (State::Succeeded, Some(ticket_of(&drill, &ops[2]))));

    // The audit entry names the export and its digest.
    let show = run(&drill, &["--json", "show", ops[0].id().as_str()]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    let sha = serde_json::from_str::<Value>(&j.stdout).unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        show.stdout
            .contains(&format!("vendor export export.csv, sha256 {sha}, row ")),
        "{}",
        show.stdout
    );

    // Planning again and applying at once resolves the one left; the others are recorded.
    let r = run(
        &drill,
        &[
            "reconcile",
            "--from",
            f,
            "--format",
            "stripe",
            "--apply",
            "--reviewer",
            "alice",
            "--reason",
            "again",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    assert!(
        r.stdout.contains("would resolve as SUCCEEDED (1)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("already succeeded with this reference"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("applied 1 of 1"), "{}", r.stdout);
    assert_eq!(drill.record(ops[1].id()).await.state, State::Succeeded);
    assert_eq!(drill.vendor.tickets_created(), 3);
    assert_eq!(drill.vendor.posts_received(), posts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_layout_reads_its_vendors_columns_and_bad_input_fails_with_its_exit_code() {
    let (drill, ops) = in_review(2, "cli-formats").await;
    let dir = tempfile::tempdir().unwrap();
    let (t0, o0) = (ticket_of(&drill, &ops[0]), ops[0].id().to_string());
    let key1 = drill
        .record(ops[1].id())
        .await
        .idempotency_key
        .as_str()
        .to_owned();
    let files = [
        (
            "adyen",
            format!(
                "Company Account,Merchant Account,Psp Reference,Merchant Reference,Type\nAcme,AcmeEUR,{t0},{o0},Settled\n"
            ),
        ),
        (
            "square",
            format!(
                "Date,Time,Transaction ID,Payment ID,Reference ID\n2026-12-01,03:14,tx1,{t0},{o0}\n"
            ),
        ),
        (
            "paypal",
            format!(
                "\"Date\",\"Time\",\"Name\",\"Transaction ID\",\"Invoice Number\",\"Custom Number\"\n\"12/01/2026\",\"03:14\",\"A, B\",\"{t0}\",\"\",\"{o0}\"\n"
            ),
        ),
    ];
    for (format, text) in &files {
        let f = write(dir.path(), &format!("{format}.csv"), text);
        let r = run(
            &drill,
            &[
                "reconcile",
                "--from",
                f.to_str().unwrap(),
                "--format",
                format,
            ],
        )
        .await;
        assert_eq!(r.code, 0, "{format}: {}", r.stderr);
        assert!(
            r.stdout.contains("would resolve as SUCCEEDED (1)"),
            "{format}: {}",
            r.stdout
        );
        assert!(r.stdout.contains(&t0), "{format}: {}", r.stdout);
    }
    // Generic, by the idempotency key, in JSON lines.
    let f = write(
        dir.path(),
        "k.jsonl",
        &format!("{{\"object\":\"W900\",\"key\":\"{key1}\"}}\n"),
    );
    let f = f.to_str().unwrap();
    let r = run(
        &drill,
        &[
            "reconcile",
            "--from",
            f,
            "--reference-column",
            "object",
            "--key-column",
            "key",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("would resolve as SUCCEEDED (1)"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains(ops[1].id().as_str()), "{}", r.stdout);

    let stripe = write(dir.path(), "s.csv", &stripe_export(&drill));
    let s = stripe.to_str().unwrap();
    let usage: [(&[&str], &str); 5] = [
        (&["reconcile", "--from", s], "name the export's layout"),
        (
            &["reconcile", "--from", f, "--format", "adyen"],
            "has no column \"Psp Reference\"",
        ),
        (
            &[
                "reconcile",
                "--from",
                s,
                "--format",
                "stripe",
                "--key-column",
                "k",
            ],
            "use --format generic",
        ),
        (
            &[
                "reconcile",
                "--from",
                "/nonexistent.csv",
                "--format",
                "stripe",
            ],
            "cannot read the export",
        ),
        (
            &[
                "reconcile",
                "--from",
                s,
                "--format",
                "stripe",
                "--apply",
                "--reviewer",
                "a",
                "--reason",
                " ",
            ],
            "--reason must say why",
        ),
    ];
    for (args, says) in usage {
        let r = run(&drill, args).await;
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }
    // --apply needs who and why (clap), --all-tenants is refused.
    let r = run(
        &drill,
        &["reconcile", "--from", s, "--format", "stripe", "--apply"],
    )
    .await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    let ledger = format!("sqlite:{}", drill.dir.path().join("ledger.db").display());
    let out = tokio::process::Command::new(BIN)
        .args([
            "--ledger",
            ledger.as_str(),
            "--all-tenants",
            "reconcile",
            "--from",
            s,
            "--format",
            "stripe",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("name its tenant"));

    // One row naming two operations (its operation id one, its key the other): refused, 5.
    let two = write(
        dir.path(),
        "two.csv",
        &format!("ref,op,key\n{t0},{o0},{key1}\n"),
    );
    let args = [
        "reconcile",
        "--from",
        two.to_str().unwrap(),
        "--reference-column",
        "ref",
        "--operation-column",
        "op",
        "--key-column",
        "key",
        "--apply",
        "--reviewer",
        "a",
        "--reason",
        "r",
    ];
    let r = run(&drill, &args).await;
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(r.stderr.contains("matches two operations"), "{}", r.stderr);
    assert!(r.stderr.contains("refused as a whole"), "{}", r.stderr);
    for (state, remote_ref) in states(&drill, &ops).await {
        assert_eq!((state, remote_ref), (State::ManualReview, None));
    }
    assert_eq!(drill.vendor.tickets_created(), 2);
}
