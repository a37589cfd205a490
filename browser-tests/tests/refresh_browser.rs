//! The review page stays current in a real browser (issue 30 items 5 and 7): headless Chromium
//! driven through WebDriver keeps the queue open while a drill hands a new operation to a
//! person, and sees the row appear and the "read at" time advance without a reload
//! (`refreshed.png`); starts resolving an operation, sees refreshes keep what it typed, and a
//! change by another reviewer reported instead of swapped in, its form still refused as stale
//! when sent (`form-kept.png`); then opens the activity charts (`charts.png`).
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`).
//! Without them the test is skipped with a message, unless `CI=true`: then it fails.
#![cfg(feature = "review-ui")]

use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use recoverable_write::review_ui::ReviewUiOptions;
use recoverable_write::testing::drill::*;
use recoverable_write::{State, Tenant};

mod support;

use support::*;

/// The text of the page's "read at" time.
async fn read_at(client: &Client) -> Result<String, fantoccini::error::CmdError> {
    client
        .find(Locator::Css("[data-live=read-at] b"))
        .await?
        .text()
        .await
}

/// Polls `check` every 200 ms until it holds, for at most 30 s (a refresh every 1 s).
async fn until<F, Fut>(what: &str, mut check: F) -> Result<(), fantoccini::error::CmdError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, fantoccini::error::CmdError>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // A region swapped while it was read: try again.
        if check().await.unwrap_or(false) {
            return Ok(());
        }
        assert!(Instant::now() < deadline, "waited 30 s for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of a form field, as the browser holds it now.
async fn value_of(client: &Client, css: &str) -> Result<String, fantoccini::error::CmdError> {
    Ok(client
        .find(Locator::Css(css))
        .await?
        .prop("value")
        .await?
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_refresh_in_place_and_never_lose_a_half_filled_form() {
    let Some((chromium, chromedriver)) = chromium_and_driver("refresh_browser") else {
        return;
    };
    // One operation already in review (drill D9: the response lost, no evidence left).
    let drill = Drill::with_options(DrillOptions::d9()).await;
    let first = new_op("intent-refresh-1");
    drill.d9_to_review(&first, "E31").await;

    // The page refreshes every second.
    let (site, server) = serve_as_alice(
        ReviewUiOptions::for_tenant(drill.ledger.clone(), Tenant::new(TENANT))
            .reviews(drill.rw.reviews())
            .refresh_every(Duration::from_secs(1)),
    )
    .await;
    let (_driver, client) = open_browser(&chromium, &chromedriver).await;
    let shots = screenshots_dir();
    let second = new_op("intent-refresh-2");

    let run = async {
        // (1) The queue, open while a second operation is handed to a person.
        client.goto(&format!("{site}/ops")).await?;
        client
            .wait()
            .for_element(Locator::Css(&format!("a[href$=\"/op/{}\"]", first.id())))
            .await?;
        let note = client
            .find(Locator::Css("[data-refresh-note]"))
            .await?
            .text()
            .await?;
        assert!(note.contains("updates every 1 s"), "{note:?}");
        let read_before = read_at(&client).await?;
        // A mark on this document: a reload would lose it.
        client
            .execute("window.__sameDocument = true; return true;", vec![])
            .await?;
        drill.d9_to_review(&second, "E32").await;
        let new_row = format!("a[href$=\"/op/{}\"]", second.id());
        until("the new operation's row", || async {
            Ok(client.find(Locator::Css(&new_row)).await.is_ok())
        })
        .await?;
        until("a later read time", || async {
            Ok(read_at(&client).await? != read_before)
        })
        .await?;
        let same = client
            .execute("return window.__sameDocument === true;", vec![])
            .await?;
        assert_eq!(
            same,
            serde_json::json!(true),
            "refreshed in place, not reloaded"
        );
        shoot(&client, &shots, "refreshed").await;

        // (2) The second operation's page: alice starts resolving it.
        client
            .goto(&format!("{site}/ops/op/{}", second.id()))
            .await?;
        client
            .wait()
            .for_element(Locator::Css("#resolve-reason"))
            .await?;
        let shown = value_of(&client, "form[action$=\"/resolve\"] input[name=version]").await?;
        client.find(Locator::Css("#d-wait")).await?.click().await?;
        let typed = "checked the vendor console: no ticket for E32 yet";
        client
            .find(Locator::Css("#resolve-reason"))
            .await?
            .send_keys(typed)
            .await?;
        // Refreshes go on (the read time advances) and what she typed stays.
        let read_typing = read_at(&client).await?;
        until("a refresh while typing", || async {
            Ok(read_at(&client).await? != read_typing)
        })
        .await?;
        assert_eq!(value_of(&client, "#resolve-reason").await?, typed);

        // Meanwhile bob claims it: the page says so and leaves her form as she read it.
        let row = drill.record(second.id()).await;
        drill
            .rw
            .reviews()
            .claim_with_reason(
                &row.tenant,
                &row.operation_id,
                "bob",
                "on call",
                row.version,
            )
            .await
            .expect("bob's claim");
        until("the notice of a change", || async {
            let n = client.find(Locator::Css("[data-live-notice]")).await?;
            Ok(n.is_displayed().await? && n.text().await?.contains("changed since you read it"))
        })
        .await?;
        assert_eq!(value_of(&client, "#resolve-reason").await?, typed);
        assert!(
            client
                .find(Locator::Css("#d-wait"))
                .await?
                .is_selected()
                .await?
        );
        assert_eq!(
            value_of(&client, "form[action$=\"/resolve\"] input[name=version]").await?,
            shown,
            "the form still acts on the version she read"
        );
        shoot(&client, &shots, "form-kept").await;

        // Sent anyway: refused, nothing recorded for her.
        client
            .find(Locator::Css("button[name=resolve]"))
            .await?
            .click()
            .await?;
        until("the refusal", || async {
            Ok(client.find(Locator::Css("#live")).await.is_err())
        })
        .await?;
        let refusal = client.find(Locator::Css("main")).await?.text().await?;
        let after = drill.record(second.id()).await;
        assert_eq!(after.state, State::ManualReview, "{refusal}");
        assert_eq!(
            after.version,
            row.version + 1,
            "only bob's claim: {refusal}"
        );

        // (3) The charts: two created and escalated today, two in review now.
        client.goto(&format!("{site}/ops/activity")).await?;
        client.wait().for_element(Locator::Css("svg#flow")).await?;
        client
            .wait()
            .for_element(Locator::Css("svg#backlog"))
            .await?;
        let text = client.find(Locator::Css("main")).await?.text().await?;
        assert!(
            text.contains("2 created, 0 finished, 2 escalated to review; 2 in review now."),
            "{text}"
        );
        let bars = client.find_all(Locator::Css("svg#flow rect.bar")).await?;
        assert_eq!(bars.len(), 72, "three bars per hour");
        shoot(&client, &shots, "charts").await;
        Ok::<(), fantoccini::error::CmdError>(())
    }
    .await;
    let _ = client.close().await;
    server.abort();
    run.expect("browser session");
    // The page only reads and decides: the vendor saw the two original writes and nothing else.
    assert_eq!(drill.vendor.tickets_created(), 2);
}
