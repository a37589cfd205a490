//! Issue 30 item 4: the practice ledger (`cargo run --example drill -- --practice PATH`) holds
//! the mix an operator meets on call, made by real drills: checked through the ledger's own
//! counts and listings, and the fake vendors' side effects through the ledger's references.

use std::sync::Arc;

use recoverable_write::ledger::{FullLedger, Ledger, ListingLedger, OperationQuery, TenantScope};
use recoverable_write::testing::drill::TENANT;
use recoverable_write::testing::practice::{PracticeError, practice_counts, write_practice_ledger};
use recoverable_write::{SqliteLedger, State, Tenant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_practice_ledger_holds_the_mix_an_operator_meets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("practice.db");
    let written = write_practice_ledger(&path).await.expect("written");
    assert_eq!(written.tenant, Tenant::new(TENANT));

    let ledger: Arc<dyn FullLedger> = Arc::new(SqliteLedger::open(&path).await.unwrap());
    let counts = practice_counts(ledger.as_ref()).await.unwrap();
    assert!(counts.get(State::ManualReview).unwrap() >= 3, "{counts:?}");
    assert!(counts.get(State::Unknown).unwrap() >= 2, "{counts:?}");
    assert_eq!(counts.quarantined(), 1, "{counts:?}");
    assert_eq!(
        counts.get(State::ManualReview),
        Some(written.in_state(State::ManualReview).count() as u64)
    );
    assert_eq!(
        counts.get(State::Unknown),
        Some(written.in_state(State::Unknown).count() as u64)
    );

    // In review for different reasons: each row's recorded reason differs.
    let scope = TenantScope::Tenant(Tenant::new(TENANT));
    let review = ledger
        .list(&OperationQuery::scoped(scope.clone()).state(State::ManualReview))
        .await
        .unwrap();
    let mut reasons: Vec<String> = review
        .rows
        .iter()
        .map(|r| r.reason.clone().unwrap_or_default())
        .collect();
    reasons.sort();
    reasons.dedup();
    assert!(reasons.len() >= 3, "{reasons:?}");

    // Finished ones: successes, a rejection, and a contradicted final state.
    let finished = |s: State| {
        let ledger = ledger.clone();
        let scope = scope.clone();
        async move {
            ledger
                .list(&OperationQuery::scoped(scope).state(s))
                .await
                .unwrap()
                .rows
        }
    };
    let succeeded = finished(State::Succeeded).await;
    assert!(succeeded.len() >= 3, "{}", succeeded.len());
    assert!(succeeded.iter().all(|r| r.remote_ref.is_some()));
    assert!(!finished(State::Rejected).await.is_empty());
    let contradicted = ledger
        .list(&OperationQuery::scoped(scope.clone()).contradicted())
        .await
        .unwrap();
    assert_eq!(contradicted.rows.len(), 1);
    assert_eq!(contradicted.rows[0].state, State::Rejected);

    // Every operation written is in the file, in the state reported.
    for o in &written.operations {
        match o.state {
            Some(s) => {
                let row = ledger
                    .get(&written.tenant, &o.id)
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("{} missing", o.intent));
                assert_eq!(row.state, s, "{}", o.intent);
                assert_eq!(&*row.intent_ref, o.intent.as_str());
            }
            None => assert!(
                ledger
                    .quarantined(10)
                    .await
                    .unwrap()
                    .iter()
                    .any(|q| q.operation_id == o.id),
                "{}",
                o.intent
            ),
        }
    }

    // Never written over another ledger.
    match write_practice_ledger(&path).await {
        Err(PracticeError::Exists(p)) => assert_eq!(p, path),
        other => panic!("{other:?}"),
    }
}
