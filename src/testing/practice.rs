//! A practice ledger: one SQLite file holding the mix a new operator meets on call, made by
//! real drills against the fake vendor (nothing is written to the ledger by hand but the one
//! row a newer version "wrote", which is how a row gets quarantined).
//!
//! [`write_practice_ledger`] writes it; `cargo run --example drill -- --practice ops.db` is the
//! command that does. Then rehearse the runbook on it:
//!
//! ```text
//! recoverable-write --ledger sqlite:ops.db --tenant tenant-a stats
//! recoverable-write --ledger sqlite:ops.db --tenant tenant-a list
//! recoverable-write --ledger sqlite:ops.db --tenant tenant-a show practice-lookups-ran-out
//! ```
//!
//! What it holds (every operation of tenant [`TENANT`], action `create_ticket`, named by its
//! intent so `show INTENT` finds it):
//!
//! | intent | state | why |
//! |---|---|---|
//! | `practice-lookups-ran-out` | `MANUAL_REVIEW` | a lost response; every lookup said 404 until the lookup budget was spent |
//! | `practice-keys-expired` | `MANUAL_REVIEW` | a lost response; the vendor's keys expired and its records were cleaned (drill D9) |
//! | `practice-attempts-spent` | `MANUAL_REVIEW` | connection refused on every attempt: the write budget is spent (drill D20) |
//! | `practice-retry-after-too-long` | `MANUAL_REVIEW` | the vendor asked to wait past the recovery window (drill D21) |
//! | `practice-claimed-unknown` | `MANUAL_REVIEW` | an `UNKNOWN` write a reviewer (alice) took over |
//! | `practice-unknown-1`, `-2` | `UNKNOWN` | lost responses no recovery pass has looked at yet |
//! | `practice-quarantined` | quarantined | a row "a newer version" wrote, set aside by recovery |
//! | `practice-ok-1`, `-2`, `-3` | `SUCCEEDED` | plain creates |
//! | `practice-recovered` | `SUCCEEDED` | a lost response the first lookup settled (drill D1) |
//! | `practice-rejected` | `REJECTED` | the vendor refused it (422) |
//! | `practice-contradicted` | `REJECTED`, contradicted | a callback said rejected, a later one that it was created (feature `callbacks`) |
//!
//! Nothing runs recovery on the file afterwards: the `UNKNOWN` rows stay `UNKNOWN` until an
//! application's recoverer meets them (their vendor is gone, so its lookups would fail).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use super::drill::{Drill, DrillOptions, TENANT, fast_policy, new_op, send};
use super::{FakeVendor, Rejection};
use crate::ledger::{FullLedger, Ledger, StateCounts, TenantScope};
use crate::operation::{OperationId, Tenant};
use crate::{BudgetPolicy, Operation, SqliteLedger, State};

/// One operation the practice ledger holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PracticeOperation {
    /// Its intent (what `show` also accepts).
    pub intent: String,
    /// Its id.
    pub id: OperationId,
    /// Its state as written (`None`: quarantined).
    pub state: Option<State>,
    /// Why it is there, in a few words.
    pub why: &'static str,
}

/// What [`write_practice_ledger`] wrote.
#[derive(Clone, Debug)]
pub struct Practice {
    /// The SQLite file.
    pub path: PathBuf,
    /// The tenant of every operation.
    pub tenant: Tenant,
    /// Every operation, in the order written.
    pub operations: Vec<PracticeOperation>,
}

impl Practice {
    /// The operations written in `state`.
    pub fn in_state(&self, state: State) -> impl Iterator<Item = &PracticeOperation> {
        self.operations
            .iter()
            .filter(move |o| o.state == Some(state))
    }
}

/// Why a practice ledger was not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PracticeError {
    /// The file exists: a practice ledger is never written over another ledger.
    #[error("{0} exists: the practice ledger is written to a new file only")]
    Exists(PathBuf),
    /// The ledger could not be created or read.
    #[error("the practice ledger: {0}")]
    Ledger(#[from] crate::ledger::LedgerError),
    /// The quarantined row could not be written.
    #[error("the quarantined row: {0}")]
    Quarantine(String),
    /// A drill did not end as it should.
    #[error("drill {intent}: {what}")]
    Drill {
        /// The operation's intent.
        intent: String,
        /// What went wrong.
        what: String,
    },
}

/// Writes the practice ledger to the new SQLite file `path` (see the [module docs](self)),
/// running each drill against its own fake vendor on 127.0.0.1.
///
/// # Errors
///
/// [`PracticeError::Exists`] if `path` exists; a ledger error; a drill that did not end in
/// the state it should.
///
/// # Panics
///
/// As the drills do: if the fake vendor cannot start or an operation never settles.
pub async fn write_practice_ledger(path: &Path) -> Result<Practice, PracticeError> {
    if path.exists() {
        return Err(PracticeError::Exists(path.to_owned()));
    }
    let sqlite = Arc::new(SqliteLedger::open(path).await?);
    let ledger: Arc<dyn FullLedger> = sqlite.clone();
    let mut w = Writer {
        ledger: ledger.clone(),
        operations: Vec::new(),
    };
    // Finished first, then the reviews: every recovery pass scans the whole ledger, so the
    // rows that must stay UNKNOWN are written last.
    w.finished().await?;
    w.reviews().await?;
    w.quarantined(path).await?;
    w.unknown().await?;
    #[cfg(feature = "callbacks")]
    w.contradicted().await?;
    sqlite.close().await;
    Ok(Practice {
        path: path.to_owned(),
        tenant: Tenant::new(TENANT),
        operations: w.operations,
    })
}

/// The open-state and quarantined counts of the practice ledger's tenant (what `stats`
/// prints).
///
/// # Errors
///
/// A ledger error.
pub async fn practice_counts(ledger: &dyn FullLedger) -> Result<StateCounts, PracticeError> {
    Ok(ledger
        .count_by_state(&TenantScope::Tenant(Tenant::new(TENANT)))
        .await?)
}

struct Writer {
    ledger: Arc<dyn FullLedger>,
    operations: Vec<PracticeOperation>,
}

impl Writer {
    fn drill(&self, vendor: FakeVendor, options: DrillOptions) -> Drill {
        Drill::with_ledger(vendor, self.ledger.clone(), options)
    }

    /// Records `op` as written, checking its state.
    async fn wrote(
        &mut self,
        op: &Operation,
        expect: Option<State>,
        why: &'static str,
    ) -> Result<(), PracticeError> {
        let intent = op.intent_ref().to_owned();
        if let Some(want) = expect {
            let row = self
                .ledger
                .get(op.tenant(), op.id())
                .await?
                .ok_or_else(|| PracticeError::Drill {
                    intent: intent.clone(),
                    what: "no row".into(),
                })?;
            if row.state != want {
                return Err(PracticeError::Drill {
                    intent,
                    what: format!("ended {} instead of {want}", row.state),
                });
            }
        }
        self.operations.push(PracticeOperation {
            intent,
            id: op.id().clone(),
            state: expect,
            why,
        });
        Ok(())
    }

    /// Three plain successes, a lost response the first lookup settled, a rejection.
    async fn finished(&mut self) -> Result<(), PracticeError> {
        let d = self.drill(FakeVendor::start().await, DrillOptions::default());
        for i in 1..=3 {
            let op = new_op(&format!("practice-ok-{i}"));
            let _ = send(&mut d.writer(), d.ticket_request(&op, &format!("E{i}"))).await;
            self.wrote(&op, Some(State::Succeeded), "a plain create")
                .await?;
        }
        let op = new_op("practice-recovered");
        d.vendor.faults().drop_after_commit(1);
        let _ = send(&mut d.writer(), d.ticket_request(&op, "E4")).await;
        d.recover_until(op.id(), |r| r.state.is_terminal()).await;
        self.wrote(
            &op,
            Some(State::Succeeded),
            "a lost response; the first lookup found the ticket",
        )
        .await?;
        let op = new_op("practice-rejected");
        d.vendor.faults().reject_next_with(
            Rejection::new(StatusCode::UNPROCESSABLE_ENTITY, "bad_device"),
            1,
        );
        let _ = send(&mut d.writer(), d.ticket_request(&op, "E5")).await;
        self.wrote(&op, Some(State::Rejected), "the vendor refused it (422)")
            .await
    }

    /// Four operations in review, each for another reason, and one a reviewer took over.
    async fn reviews(&mut self) -> Result<(), PracticeError> {
        let review = |r: &crate::ledger::OperationRecord| r.state == State::ManualReview;

        // Lookups ran out: every lookup says 404 until the budget is spent.
        let d = self.drill(
            FakeVendor::start().await,
            DrillOptions {
                policy: BudgetPolicy {
                    max_queries: 3,
                    ..fast_policy()
                },
                ..DrillOptions::default()
            },
        );
        let op = new_op("practice-lookups-ran-out");
        d.vendor.faults().drop_after_commit(1);
        let _ = send(&mut d.writer(), d.ticket_request(&op, "E11")).await;
        d.vendor.faults().clean_operation_records();
        d.recover_until(op.id(), review).await;
        self.wrote(
            &op,
            Some(State::ManualReview),
            "a lost response; every lookup said 404 until the lookup budget was spent",
        )
        .await?;

        // D9: keys expired, records cleaned.
        let d = self.drill(FakeVendor::start().await, DrillOptions::d9());
        let op = new_op("practice-keys-expired");
        d.d9_to_review(&op, "E12").await;
        self.wrote(
            &op,
            Some(State::ManualReview),
            "a lost response; the vendor's keys expired and its records were cleaned",
        )
        .await?;

        // D20: connection refused on every attempt.
        let d = self.drill(FakeVendor::start().await, DrillOptions::default());
        let op = new_op("practice-attempts-spent");
        d.vendor
            .faults()
            .refuse_connections(true)
            .map_err(|e| PracticeError::Drill {
                intent: "practice-attempts-spent".into(),
                what: e.to_string(),
            })?;
        let _ = send(&mut d.writer(), d.ticket_request(&op, "E13")).await;
        d.recover_until(op.id(), review).await;
        self.wrote(
            &op,
            Some(State::ManualReview),
            "connection refused on every attempt: the write budget is spent",
        )
        .await?;

        // D21: a Retry-After longer than the recovery window.
        let d = self.drill(FakeVendor::start().await, DrillOptions::default());
        let op = new_op("practice-retry-after-too-long");
        d.vendor.faults().reject_next_with(
            Rejection::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded").retry_after("120"),
            1,
        );
        let _ = send(&mut d.writer(), d.ticket_request(&op, "E14")).await;
        d.recover_until(op.id(), review).await;
        self.wrote(
            &op,
            Some(State::ManualReview),
            "the vendor asked to wait longer than the recovery window",
        )
        .await?;

        // An UNKNOWN write a reviewer took over.
        let d = self.drill(FakeVendor::start().await, DrillOptions::default());
        let op = new_op("practice-claimed-unknown");
        d.vendor.faults().drop_after_commit(1);
        let _ = send(&mut d.writer(), d.ticket_request(&op, "E15")).await;
        let row = d.record(op.id()).await;
        d.rw.reviews()
            .claim_with_reason(
                op.tenant(),
                op.id(),
                "alice",
                "the customer called: checking the vendor console",
                row.version,
            )
            .await
            .map_err(|e| PracticeError::Drill {
                intent: "practice-claimed-unknown".into(),
                what: e.to_string(),
            })?;
        self.wrote(
            &op,
            Some(State::ManualReview),
            "a reviewer (alice) took an UNKNOWN write over",
        )
        .await
    }

    /// A row "a newer version" wrote (request headers in a shape this one cannot read), set
    /// aside by the recovery pass that met it.
    async fn quarantined(&mut self, path: &Path) -> Result<(), PracticeError> {
        let d = self.drill(FakeVendor::start().await, DrillOptions::default());
        let op = new_op("practice-quarantined");
        d.vendor.faults().drop_after_commit(1);
        let _ = send(&mut d.writer(), d.ticket_request(&op, "E21")).await;
        let raw = rusqlite::Connection::open(path)
            .map_err(|e| PracticeError::Quarantine(e.to_string()))?;
        raw.busy_timeout(Duration::from_secs(5))
            .map_err(|e| PracticeError::Quarantine(e.to_string()))?;
        let n = raw
            .execute(
                "UPDATE rw_operations SET request_headers = ?1 WHERE operation_id = ?2",
                [r#"{"format": 2, "headers": []}"#, op.id().as_str()],
            )
            .map_err(|e| PracticeError::Quarantine(e.to_string()))?;
        drop(raw);
        if n != 1 {
            return Err(PracticeError::Quarantine(format!("{n} rows changed")));
        }
        for _ in 0..200 {
            // A pass never fails on a bad row; it quarantines it.
            d.recoverer
                .run_once()
                .await
                .map_err(|e| PracticeError::Quarantine(e.to_string()))?;
            if d.ledger
                .quarantined(10)
                .await?
                .iter()
                .any(|q| q.operation_id == *op.id())
            {
                return self
                    .wrote(
                        &op,
                        None,
                        "a row a newer version wrote: recovery set it aside",
                    )
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(PracticeError::Quarantine("never quarantined".into()))
    }

    /// Two lost responses no recovery pass has looked at.
    async fn unknown(&mut self) -> Result<(), PracticeError> {
        let d = self.drill(FakeVendor::start().await, DrillOptions::default());
        for i in 1..=2 {
            let op = new_op(&format!("practice-unknown-{i}"));
            d.vendor.faults().drop_after_commit(1);
            let _ = send(&mut d.writer(), d.ticket_request(&op, &format!("E3{i}"))).await;
            self.wrote(
                &op,
                Some(State::Unknown),
                "a lost response recovery has not looked at yet",
            )
            .await?;
        }
        Ok(())
    }

    /// A write a callback rejected, and a later callback said was created: a contradiction.
    #[cfg(feature = "callbacks")]
    async fn contradicted(&mut self) -> Result<(), PracticeError> {
        use std::time::SystemTime;

        use super::OperationStatus;
        use super::callbacks::{Signer, ticket_event, ticket_mapping};
        use crate::callbacks::{AccountTenants, CallbackReceiver, Secret, StripeSignature};

        const SECRET: &str = "whsec_practice_endpoint_secret";
        let fail = |what: String| PracticeError::Drill {
            intent: "practice-contradicted".into(),
            what,
        };
        let secret = || Secret::new(SECRET).map_err(|e| fail(e.to_string()));
        let d = self.drill(FakeVendor::start().await, DrillOptions::default());
        let op = new_op("practice-contradicted");
        d.vendor.faults().drop_after_commit(1);
        let _ = send(&mut d.writer(), d.ticket_request(&op, "E41")).await;
        let ticket = d
            .vendor
            .tickets()
            .into_iter()
            .find(|t| t.operation_id.as_deref() == Some(op.id().as_str()))
            .ok_or_else(|| fail("the vendor has no ticket".into()))?;
        let receiver = CallbackReceiver::new(
            &d.rw,
            ticket_mapping(),
            StripeSignature::new(secret()?),
            AccountTenants::default().account(TENANT, TENANT),
        );
        let signer = Signer::stripe(secret()?);
        let mut rejected = ticket.clone();
        rejected.status = OperationStatus::Rejected;
        for (id, kind, t) in [
            ("evt_practice_rejected", "ticket.updated", &rejected),
            ("evt_practice_created", "ticket.created", &ticket),
        ] {
            let delivery = signer.sign(id, &ticket_event(id, kind, t), SystemTime::now());
            let receipt = receiver.receive(&delivery.headers, &delivery.body).await;
            if !receipt.status.is_success() {
                return Err(fail(format!("callback {id} answered {}", receipt.status)));
            }
        }
        let row = d.record(op.id()).await;
        if row.contradiction_ms.is_none() {
            return Err(fail("no contradiction recorded".into()));
        }
        self.wrote(
            &op,
            Some(State::Rejected),
            "a callback said rejected, a later one that it was created",
        )
        .await
    }
}
