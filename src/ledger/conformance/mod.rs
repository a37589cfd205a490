//! The ledger conformance suite: the behaviour every [`Ledger`] backend must have.
//!
//! Each check is a public `async fn` taking a fresh, empty ledger and panicking on the first
//! violation, bounded by the capability it exercises ([`Ledger`], or a listing, callback or
//! retention check's trait); the macro below runs them all, on a
//! [`FullLedger`](crate::ledger::FullLedger). [`ledger_conformance_tests!`](crate::ledger_conformance_tests) turns the whole
//! suite into `#[test]` functions with one line, so a new backend gets every check at once:
//!
//! ```
//! use recoverable_write::ledger::MemoryLedger;
//!
//! // Expands to `mod memory { #[test] fn create_then_get_round_trips_every_field() ... }`.
//! recoverable_write::ledger_conformance_tests!(memory, make = async { MemoryLedger::new() });
//! # fn main() {}
//! ```
//!
//! A backend whose ledger needs something kept alive for the test's duration (a temporary
//! directory, a database container) returns `(ledger, guard)` with `make_with_guard`:
//!
//! ```no_run
//! use recoverable_write::ledger::SqliteLedger;
//!
//! recoverable_write::ledger_conformance_tests!(sqlite, make_with_guard = async {
//!     let dir = tempfile::tempdir().unwrap();
//!     let ledger = SqliteLedger::open(dir.path().join("ledger.db")).await.unwrap();
//!     (ledger, dir)
//! });
//! # fn main() {}
//! ```
//!
//! The checks are written as drills: the function name says the scenario, and each one checks
//! both the row and the evidence log. Times are fixed milliseconds (no clock, no sleeps).
//! Concurrency checks spawn tasks on the multi-threaded runtime [`run`] builds, so races between
//! callers really happen.
//!
//! [`Ledger`]: crate::ledger::Ledger

use std::future::Future;

mod activity;
mod apply;
mod callback_delivery;
mod callbacks;
mod claims;
mod create;
mod create_and_apply;
mod evidence;
mod fixtures;
mod helpers;
mod lifecycle;
mod listing;
mod prepared;
mod quarantine;
mod record;
mod retention;
mod workers;

pub use activity::*;
pub use apply::*;
pub use callback_delivery::*;
pub use callbacks::*;
pub use claims::*;
pub use create::*;
pub use create_and_apply::*;
pub use evidence::*;
pub use fixtures::*;
pub use lifecycle::*;
pub use listing::*;
pub use prepared::*;
pub use quarantine::*;
pub use record::*;
pub use retention::*;
pub use workers::*;

/// Generates one `#[test]` per conformance check, each with a fresh ledger.
///
/// Forms:
/// - `ledger_conformance_tests!(make = <async expr>)`: a module named `ledger_conformance`;
/// - `ledger_conformance_tests!(<module>, make = <async expr>)`: a module of that name (use it
///   to run the suite for several backends in one file);
/// - `ledger_conformance_tests!(<module>, make_with_guard = <async expr>)`: the expression
///   yields `(ledger, guard)`; the guard (a temporary directory, say) is dropped after the check.
///
/// The expression is evaluated once per test, inside the test's runtime; names used in it
/// resolve as at the macro call site (the module does `use super::*`). See the
/// [module docs](crate::ledger::conformance).
#[macro_export]
macro_rules! ledger_conformance_tests {
    (@tests $fixture:expr; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::ledger::conformance::run(async {
                    // The guard lives until the check is over.
                    let (ledger, _guard) = $fixture.await;
                    $crate::ledger::conformance::$check(ledger).await;
                });
            }
        )*
    };
    (@module $module:ident, $fixture:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $crate::ledger_conformance_tests!(@tests $fixture;
                create_then_get_round_trips_every_field,
                empty_body_and_no_headers_round_trip,
                get_of_an_unknown_operation_is_none,
                create_or_get_is_idempotent_by_operation_id,
                create_or_get_is_idempotent_by_intent,
                same_operation_id_in_another_tenant_is_another_operation,
                apply_with_matching_precondition_writes_every_column_and_bumps_version,
                apply_writes_optional_columns_as_given,
                apply_with_stale_generation_changes_nothing,
                apply_with_stale_version_changes_nothing,
                apply_with_wrong_state_changes_nothing,
                apply_to_an_unknown_operation_is_none,
                rejected_is_refused_once_an_attempt_may_have_applied,
                rejected_is_allowed_on_operation_level_evidence,
                rejected_is_allowed_when_nothing_may_have_applied,
                may_have_applied_is_sticky_unless_reset,
                evidence_is_appended_in_order_with_all_fields,
                append_evidence_advances_only_the_version,
                append_evidence_for_an_unknown_operation_stores_nothing,
                evidence_is_kept_per_tenant_and_operation,
                claim_due_picks_only_due_unleased_recovery_rows,
                claim_due_respects_limit_and_next_check_order,
                claim_due_does_not_reclaim_while_leased,
                sweep_expired_moves_only_expired_in_flight_rows,
                concurrent_claim_send_has_exactly_one_winner,
                concurrent_create_or_get_of_one_intent_yields_one_row,
                create_and_apply_creates_and_claims_in_one_step,
                create_and_apply_returns_an_existing_operation_untouched,
                create_and_apply_refuses_an_update_of_another_operation,
                concurrent_create_and_apply_of_one_intent_has_one_sender,
                concurrent_claims_and_results_keep_their_own_semantics,
                record_is_the_same_compare_and_swap_as_apply,
                record_unread_writes_what_it_reports,
                record_detached_is_seen_by_every_later_call,
                lifecycle_lost_response_recovered_by_lookup,
                claim_prepared_claims_only_old_unleased_prepared_rows,
                claim_prepared_lease_fences_a_second_claim_until_it_expires,
                concurrent_claim_prepared_gets_disjoint_rows,
                a_prepared_row_claimed_for_recovery_can_be_claimed_for_sending,
                corrupt_rows_are_quarantined_and_the_healthy_rows_recovered,
                quarantined_rows_are_counted_listed_and_released_once_readable,
                list_filters_by_state_tenant_contract_text_and_age,
                list_pages_walk_every_row_once_while_rows_are_added,
                list_limit_bounds_and_cursor_errors,
                count_by_state_and_oldest_per_state,
                list_skips_undecodable_rows_and_hides_quarantined_ones,
                callback_applies_once_and_a_redelivery_is_a_duplicate,
                callback_with_a_stale_update_stores_nothing_and_is_retried,
                callback_appends_late_evidence_once,
                callback_for_an_unknown_operation_stores_nothing,
                callback_update_for_another_operation_is_refused,
                callbacks_are_quarantined_once_and_listed_in_order,
                callbacks_are_seen_once_recorded_ignored_ones_included,
                quarantined_callbacks_are_scoped_before_the_limit,
                other_tenant_with_finds_only_other_tenants,
                contradiction_marks_the_operation_until_acknowledged,
                find_by_remote_ref_and_idempotency_key_stay_in_their_tenant,
                concurrent_deliveries_of_one_event_change_the_state_once,
                purge_details_slims_finished_rows_and_keeps_their_identity,
                purge_identity_deletes_finished_rows_and_only_them,
                purge_callbacks_by_age_and_by_tenant,
                concurrent_purges_delete_each_row_once,
    activity_counts_changes_per_interval_and_the_backlog, heartbeats_are_one_row_per_worker_and_dead_ones_pruned, count_overdue_counts_late_unknown_and_retry_ready_rows,
            );
        }
    };
    (make = $make:expr $(,)?) => {
        $crate::ledger_conformance_tests!(ledger_conformance, make = $make);
    };
    ($module:ident, make = $make:expr $(,)?) => {
        $crate::ledger_conformance_tests!(@module $module, async { ($make.await, ()) });
    };
    ($module:ident, make_with_guard = $make:expr $(,)?) => {
        $crate::ledger_conformance_tests!(@module $module, $make);
    };
}

/// Runs one check on a fresh multi-threaded runtime (4 workers), as the generated tests do.
///
/// # Panics
///
/// If the runtime cannot be built, or the check fails.
pub fn run<F: Future<Output = ()>>(check: F) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build the conformance test runtime: {e}"),
    };
    runtime.block_on(check);
}
