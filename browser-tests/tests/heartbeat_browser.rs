//! "Is the engine running?" in a real browser (issue 30 item 1): headless Chromium opens the
//! review page while no recoverer worker runs and an `UNKNOWN` operation's check is long
//! overdue: the header says no worker is alive and the alarm says what waits and what to do
//! (`workers-alarm.png`; the operation itself says its check is overdue instead of "the engine
//! is still verifying it": `workers-alarm-operation.png`). Then a recoverer runs, finds the
//! ticket, and the header shows the worker alive with its last pass (`workers-alive.png`).
//! The ledger and the fake vendor are checked.
//!
//! Needs `chromium` and `chromedriver`; skipped without them unless `CI=true`.
#![cfg(feature = "review-ui")]

use std::time::Duration;

use fantoccini::Locator;
use recoverable_write::clock::{Clock, ProcessClock};
use recoverable_write::ledger::ListingLedger;
use recoverable_write::review_ui::ReviewUiOptions;
use recoverable_write::testing::drill::*;
use recoverable_write::{BudgetPolicy, State, Tenant};

mod support;

use support::*;

/// The clock of a host that runs ten minutes late: what it leaves `UNKNOWN` is due in the
/// past, so its check is overdue at once.
#[derive(Debug)]
struct TenMinutesLate;

impl Clock for TenMinutesLate {
    fn now_ms(&self) -> i64 {
        ProcessClock.now_ms() - 10 * 60_000
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_raises_the_alarm_without_a_worker_and_shows_it_alive_after_a_pass() {
    let Some((chromium, chromedriver)) = chromium_and_driver("heartbeat_browser") else {
        return;
    };

    // A lost response written by the late host: UNKNOWN, its next check ten minutes ago. The
    // window is long, so the engine can still recover it once it runs.
    let mut drill = Drill::with_options(DrillOptions {
        policy: BudgetPolicy {
            window_ms: 3_600_000,
            ..fast_policy()
        },
        ..DrillOptions::default()
    })
    .await;
    drill.layer = drill
        .builder()
        .clock(TenMinutesLate)
        .build()
        .expect("the late writer")
        .layer();
    let op = new_op("intent-heartbeat-browser");
    drill.vendor.faults().drop_after_commit(1);
    let _ = send(&mut drill.writer(), drill.ticket_request(&op, "E17")).await;
    assert_eq!(drill.record(op.id()).await.state, State::Unknown);

    let (site, server) = serve_as_alice(
        ReviewUiOptions::for_tenant(drill.ledger.clone(), Tenant::new(TENANT))
            .reviews(drill.rw.reviews()),
    )
    .await;
    let (_driver, client) = open_browser(&chromium, &chromedriver).await;
    let shots = screenshots_dir();

    let run = async {
        // No worker: the header says so, and the alarm is above the queue.
        client.goto(&format!("{site}/ops")).await?;
        let status = client
            .wait()
            .for_element(Locator::Css("#engine-status"))
            .await?
            .text()
            .await?;
        assert_eq!(status, "no recoverer worker alive · no pass ever reported");
        let alarm = client
            .find(Locator::Css("#engine-alarm"))
            .await?
            .text()
            .await?;
        assert!(
            alarm.contains("The recovery engine is not keeping up"),
            "{alarm}"
        );
        assert!(
            alarm.contains(
                "No recoverer worker is alive (no worker has ever reported to this ledger), \
                 and 1 operation waits for the engine"
            ),
            "{alarm}"
        );
        assert!(
            alarm.contains("1 operation is overdue: its next check passed more than 1m 30s ago."),
            "{alarm}"
        );
        shoot(&client, &shots, "workers-alarm").await;

        // The operation says its check is overdue, not that the engine is verifying it.
        client
            .find(Locator::Css(&format!("a[href$=\"/op/{}\"]", op.id())))
            .await?
            .click()
            .await?;
        let summary = client
            .wait()
            .for_element(Locator::Css(".summary"))
            .await?
            .text()
            .await?;
        // About ten minutes (the late clock, less the first backoff, plus the test's time).
        let late = summary
            .split("its check is overdue by ")
            .nth(1)
            .and_then(|rest| rest.split(" and nobody is verifying it").next())
            .unwrap_or_else(|| panic!("no overdue headline: {summary}"));
        assert!(
            late.starts_with("9m ") || late.starts_with("10m "),
            "{late}: {summary}"
        );
        assert!(summary.contains("Next check overdue by "), "{summary}");
        assert!(!summary.contains("still verifying"), "{summary}");
        assert!(
            summary.contains("overdue by more than 1m 30s, or no recoverer worker alive"),
            "{summary}"
        );
        shoot(&client, &shots, "workers-alarm-operation").await;
        Ok::<_, fantoccini::error::CmdError>(())
    };
    let before = run.await;

    // A worker runs until its heartbeat is in the ledger and it has resolved the operation.
    let engine = drill
        .recoverer
        .clone()
        .worker_id("billing-worker-1")
        .interval(Duration::from_millis(20))
        .spawn();
    let mut resolved = false;
    for _ in 0..500 {
        let beats = drill.ledger.heartbeats().await.expect("heartbeats");
        if beats.iter().any(|b| b.worker_id == "billing-worker-1")
            && drill.record(op.id()).await.state == State::Succeeded
        {
            resolved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let after = async {
        client.goto(&format!("{site}/ops")).await?;
        let status = client
            .wait()
            .for_element(Locator::Css("#engine-status"))
            .await?
            .text()
            .await?;
        assert!(
            status.starts_with("1 recoverer worker alive · last pass "),
            "{status}"
        );
        let class = client
            .find(Locator::Css("#engine-status"))
            .await?
            .attr("class")
            .await?;
        assert_eq!(class.as_deref(), Some("engine up"));
        assert!(
            client.find(Locator::Css("#engine-alarm")).await.is_err(),
            "no alarm while a worker is alive and nothing is overdue"
        );
        shoot(&client, &shots, "workers-alive").await;
        Ok::<_, fantoccini::error::CmdError>(())
    };
    let after = after.await;
    engine.shutdown().await;
    let _ = client.close().await;
    server.abort();
    before.expect("the browser session, before the worker");
    after.expect("the browser session, after the worker");
    assert!(resolved, "the worker beat and resolved the operation");
    assert_eq!(drill.record(op.id()).await.state, State::Succeeded);
    assert_eq!(
        drill.vendor.tickets_created(),
        1,
        "found, never created twice"
    );
    assert_eq!(drill.vendor.posts_received(), 1);
}
