//! Bulk reconciliation from a vendor's export on the review page, in a real browser (issue 30
//! item 6): headless Chromium uploads the fake vendor's tickets as a Stripe payments export,
//! reads the plan (screenshot `bulk-plan.png`), and applies it after evidence arrived on one
//! operation: the others are resolved with their references, that one is reported stale
//! (screenshot `bulk-applied.png`). Then the ledger and the fake vendor are checked.
//!
//! Needs `chromium` and `chromedriver`; skipped without them unless `CI=true`.
#![cfg(feature = "review-ui")]

use fantoccini::Locator;
use recoverable_write::ledger::backend::NewEvidence;
use recoverable_write::review_ui::ReviewUiOptions;
use recoverable_write::testing::drill::*;
use recoverable_write::{State, Tenant};

mod support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_uploads_an_export_reads_the_plan_and_applies_it_in_a_real_browser() {
    let Some((chromium, chromedriver)) = chromium_and_driver("bulk_browser") else {
        return;
    };
    // Four lost responses handed to a person (D9); the export will name three of them.
    let drill = Drill::with_options(DrillOptions::d9()).await;
    let mut ops = Vec::new();
    for i in 0..4 {
        let op = new_op(&format!("intent-bulk-{i}"));
        drill.d9_to_review(&op, &format!("E{i}")).await;
        ops.push(op);
    }
    let tickets = drill.vendor.tickets();
    let ticket = |op: &recoverable_write::Operation| {
        tickets
            .iter()
            .find(|t| t.operation_id.as_deref() == Some(op.id().as_str()))
            .expect("its ticket")
            .id
            .clone()
    };
    let mut csv = String::from("id,Created (UTC),Amount,Currency,operation_id (metadata)\n");
    for op in &ops[..3] {
        csv.push_str(&format!(
            "{},2026-12-01 03:14,12.00,eur,{}\n",
            ticket(op),
            op.id()
        ));
    }
    csv.push_str("ch_3Qx9StrangerZZ,2026-12-01 03:15,9.00,eur,op-not-ours\n");
    let dir = tempfile_dir();
    let export = dir.join("payments-2026-12-01.csv");
    std::fs::write(&export, csv).unwrap();
    let (posts, created) = (
        drill.vendor.posts_received(),
        drill.vendor.tickets_created(),
    );

    let (site, server) = serve_as_alice(
        ReviewUiOptions::for_tenant(drill.ledger.clone(), Tenant::new(TENANT))
            .reviews(drill.rw.reviews()),
    )
    .await;
    let (_driver, client) = open_browser(&chromium, &chromedriver).await;
    let shots = screenshots_dir();

    let run = async {
        client.goto(&format!("{site}/ops/bulk")).await?;
        client
            .wait()
            .for_element(Locator::Css("input[type=file][name=export]"))
            .await?
            .send_keys(export.to_str().unwrap())
            .await?;
        client
            .find(Locator::Css("select[name=format] option[value=stripe]"))
            .await?
            .click()
            .await?;
        client
            .find(Locator::Css("form[enctype] button[type=submit]"))
            .await?
            .click()
            .await?;
        let headline = client
            .wait()
            .for_element(Locator::Css(".summary .headline"))
            .await?
            .text()
            .await?;
        assert!(headline.contains("payments-2026-12-01.csv"), "{headline}");
        let page = client.find(Locator::Css("main")).await?.text().await?;
        assert!(page.contains("Would resolve as succeeded (3)"), "{page}");
        assert!(
            page.contains("Export rows that match nothing (1)"),
            "{page}"
        );
        assert!(page.contains("ch_3Qx9StrangerZZ"), "{page}");
        assert!(page.contains("In review with no export row (1)"), "{page}");
        assert!(page.contains(ops[3].id().as_str()), "{page}");
        shoot(&client, &shots, "bulk-plan").await;

        // Evidence arrives on one planned operation while the person reads the plan.
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

        client
            .find(Locator::Css("textarea[name=reason]"))
            .await?
            .send_keys("outage 2026-12-01: Stripe payments export")
            .await?;
        client
            .find(Locator::Css("form[action$=\"/bulk/apply\"] button"))
            .await?
            .click()
            .await?;
        let h1 = client
            .wait()
            .for_element(Locator::XPath("//h1[starts-with(., 'Applied')]"))
            .await?
            .text()
            .await?;
        assert_eq!(h1, "Applied 2 of 3");
        let page = client.find(Locator::Css("main")).await?.text().await?;
        assert!(page.contains("Skipped (1)"), "{page}");
        assert!(page.contains("changed since the plan"), "{page}");
        shoot(&client, &shots, "bulk-applied").await;
        Ok::<_, fantoccini::error::CmdError>(())
    };
    let result = run.await;
    let _ = client.close().await;
    server.abort();
    result.expect("the browser run");

    for (i, op) in ops.iter().enumerate() {
        let row = drill.record(op.id()).await;
        match i {
            0 | 2 => {
                assert_eq!(row.state, State::Succeeded);
                assert_eq!(row.remote_ref, Some(ticket(op)));
            }
            _ => assert_eq!(row.state, State::ManualReview, "op {i}"),
        }
    }
    assert_eq!(drill.vendor.posts_received(), posts);
    assert_eq!(drill.vendor.tickets_created(), created);
}

/// A fresh folder for the export file the browser uploads.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rw-bulk-browser-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
