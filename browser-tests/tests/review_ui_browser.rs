//! The review page in a real browser (issue 12 item 3): headless Chromium driven through
//! WebDriver (chromedriver) opens the queue, opens the operation a drill left in review, claims
//! it and resolves it, saving a screenshot of each page to `target/review-ui-screenshots/`
//! (`queue`, `operation`, `claimed`, `resolved`, and `timeline`: the evidence log); then
//! the ledger and the fake vendor are checked.
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`).
//! Without them the test is skipped with a message, unless `CI=true`: then it fails.
#![cfg(feature = "review-ui")]

use fantoccini::Locator;
use recoverable_write::review_ui::ReviewUiOptions;
use recoverable_write::testing::drill::*;
use recoverable_write::{State, Tenant};

mod support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_claims_and_resolves_an_operation_in_a_real_browser() {
    let Some((chromium, chromedriver)) = chromium_and_driver("review_ui_browser") else {
        return;
    };

    // Drill D9: a lost response, keys expired and records cleaned: the operation is handed to a
    // person. Two more lost responses wait in UNKNOWN, and one write went through.
    let drill = Drill::with_options(DrillOptions::d9()).await;
    let op = new_op("intent-browser");
    drill.d9_to_review(&op, "E17").await;
    let mut svc = drill.writer();
    drill.vendor.faults().drop_after_commit(2);
    for (intent, device) in [("intent-browser-2", "E18"), ("intent-browser-3", "E19")] {
        let _ = send(&mut svc, drill.ticket_request(&new_op(intent), device)).await;
    }
    let ok = new_op("intent-browser-ok");
    send(&mut svc, drill.ticket_request(&ok, "E20"))
        .await
        .expect("a plain success");
    let (posts, tickets) = (
        drill.vendor.posts_received(),
        drill.vendor.tickets_created(),
    );

    // The application: the review page under /ops, behind its authentication.
    let (site, server) = serve_as_alice(
        ReviewUiOptions::for_tenant(drill.ledger.clone(), Tenant::new(TENANT))
            .reviews(drill.rw.reviews()),
    )
    .await;
    let (_driver, client) = open_browser(&chromium, &chromedriver).await;
    // The repository's `target/` (this package is `browser-tests/` in the workspace).
    let shots = screenshots_dir();

    let run = async {
        // The queue: the operation in review is there, with its badge.
        client.goto(&format!("{site}/ops")).await?;
        let row_link = client
            .wait()
            .for_element(Locator::Css(&format!("a[href$=\"/op/{}\"]", op.id())))
            .await?;
        let queue_text = client.find(Locator::Css("main")).await?.text().await?;
        assert!(queue_text.contains("Manual review"), "{queue_text}");
        assert!(queue_text.contains("create ticket"));
        shoot(&client, &shots, "queue").await;

        // The operation: the summary says what to decide.
        row_link.click().await?;
        let headline = client
            .wait()
            .for_element(Locator::Css(".summary .headline"))
            .await?
            .text()
            .await?;
        assert!(headline.contains("a person must decide"), "{headline}");
        // The key the vendor saw, to look the write up by (issue 30 item 2): the one the fake
        // vendor recorded on the ticket this lost response created.
        let seen_by_vendor = drill
            .vendor
            .tickets()
            .into_iter()
            .find(|t| t.device_id == "E17")
            .and_then(|t| t.idempotency_key)
            .expect("the vendor recorded the key of the E17 ticket");
        let page_text = client.find(Locator::Css("main")).await?.text().await?;
        assert!(
            page_text.contains("Idempotency key") && page_text.contains(&seen_by_vendor),
            "the page shows the key the vendor saw ({seen_by_vendor}): {page_text}"
        );
        shoot(&client, &shots, "operation").await;

        // Claim it, with a reason.
        client
            .find(Locator::Css("#claim-reason"))
            .await?
            .send_keys("checking the vendor console")
            .await?;
        client
            .find(Locator::Css("button[name=claim]"))
            .await?
            .click()
            .await?;
        let flash = flash_starting_with(&client, "Claimed.").await?;
        assert!(flash.starts_with("Claimed."), "{flash}");
        shoot(&client, &shots, "claimed").await;

        // Resolve it as succeeded, with the vendor's reference and a reason.
        client.find(Locator::Css("#d-ok")).await?.click().await?;
        client
            .find(Locator::Css("input[name=remote_ref]"))
            .await?
            .send_keys("W731")
            .await?;
        client
            .find(Locator::Css("#resolve-reason"))
            .await?
            .send_keys("ticket W731 found in the vendor console")
            .await?;
        client
            .find(Locator::Css("button[name=resolve]"))
            .await?
            .click()
            .await?;
        let flash = flash_starting_with(&client, "Resolved.").await?;
        assert!(flash.starts_with("Resolved."), "{flash}");
        let badge = client.find(Locator::Css("h1 .badge")).await?.text().await?;
        assert_eq!(badge, "Succeeded");
        shoot(&client, &shots, "resolved").await;
        // The evidence timeline with the reviewer's entries (an anchor: no script needed).
        let url = client.current_url().await?;
        client.goto(&format!("{url}#timeline")).await?;
        let timeline = client.find(Locator::Css("#timeline")).await?.text().await?;
        assert!(
            timeline.contains("ticket W731 found in the vendor console"),
            "{timeline}"
        );
        shoot(&client, &shots, "timeline").await;
        Ok::<_, fantoccini::error::CmdError>(())
    };
    let result = run.await;
    let _ = client.close().await;
    server.abort();
    result.expect("the browser session");

    // The ledger: succeeded with the reference, the reasons in the evidence log.
    let row = drill.record(op.id()).await;
    assert_eq!(row.state, State::Succeeded);
    assert_eq!(row.remote_ref.as_deref(), Some("W731"));
    let reasons: Vec<String> = drill
        .evidence(op.id())
        .await
        .into_iter()
        .filter(|e| e.entry.kind.starts_with("review"))
        .filter_map(|e| e.entry.note)
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].starts_with("claimed by alice; version"));
    assert!(reasons[1].ends_with("ticket W731 found in the vendor console"));
    // Reviewing sent nothing to the vendor.
    assert_eq!(drill.vendor.posts_received(), posts);
    assert_eq!(drill.vendor.tickets_created(), tickets);
    for name in ["queue", "operation", "claimed", "resolved", "timeline"] {
        let png = std::fs::read(shots.join(format!("{name}.png"))).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{name}.png is a PNG");
    }
}
