//! [`ForwardingLedger`]: a ledger of every capability that forwards to another, for tests that
//! change one call.

use std::fmt;
use std::sync::Arc;

use crate::ledger::backend::{NewEvidence, Update};
use crate::ledger::{
    Activity, ActivityWindow, BoxFuture, CallbackApplied, CallbackDelivery, CallbackEffect,
    CallbackLedger, CallbackPurge, CallbackQuarantined, CallbackRecorded, Created, EvidenceEntry,
    FullLedger, Housekeeping, IgnoredCallback, Ledger, LedgerError, ListingLedger, NewOperation,
    OldestPerState, OperationQuery, OperationRecord, Page, ProbeBy, PurgeBatch, Purged,
    QuarantinedCallback, QuarantinedRow, Released, RetentionLedger, Settled, StateCounts,
    TenantScope, WorkerHeartbeat,
};
use crate::{OperationId, State, Tenant};

/// Writes [`ForwardingLedger`] and the [`Ledger`], [`ListingLedger`], [`CallbackLedger`] and
/// [`RetentionLedger`] impls over it from one list of the methods per trait:
/// `name(args) -> output as LedgerCall variant`.
macro_rules! forwarding_ledger {
    (
        Ledger { $( fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ty as $call:ident; )* }
        $( $cap:ident {
            $( fn $cname:ident($($carg:ident: $cty:ty),*) -> $cout:ty as $ccall:ident; )*
        } )*
    ) => {
        /// A [`Ledger`] made of another one, for tests that change one or two calls: count them,
        /// fail them after a crash, pause a worker inside one, rewrite an update on its way to
        /// the store.
        ///
        /// Implement [`inner`](Self::inner) and override what changes: every type that implements
        /// this trait is a [`FullLedger`] (a [`Ledger`], [`ListingLedger`], [`CallbackLedger`]
        /// and [`RetentionLedger`]), and each method it does not override goes to the same
        /// method of the inner ledger through [`around`](Self::around). [`record`](Self::record)
        /// and [`create_and_apply`](Self::create_and_apply) too go to the inner ledger's own
        /// methods: overriding [`apply`](Self::apply) does not change them.
        ///
        /// A forwarding ledger does not [detach results](Ledger::detaches_results), whatever
        /// its inner ledger does: an attempt's result goes through [`record`](Self::record)
        /// (and so through `around`). Override [`detaches_results`](Self::detaches_results) and
        /// [`record_detached`](Self::record_detached) to model a store that answers before the
        /// result is written (and may lose it in a crash).
        ///
        /// ```
        /// use std::sync::Arc;
        /// use std::sync::atomic::{AtomicUsize, Ordering};
        ///
        /// use recoverable_write::ledger::{BoxFuture, FullLedger, Ledger, LedgerError};
        /// use recoverable_write::testing::{ForwardingLedger, LedgerCall};
        /// use recoverable_write::MemoryLedger;
        ///
        /// /// Counts the ledger's writes.
        /// #[derive(Debug, Default)]
        /// struct CountWrites {
        ///     inner: MemoryLedger,
        ///     writes: AtomicUsize,
        /// }
        ///
        /// impl ForwardingLedger for CountWrites {
        ///     fn inner(&self) -> &dyn FullLedger {
        ///         &self.inner
        ///     }
        ///
        ///     fn around<'a, T, F>(&'a self, call: LedgerCall, f: F) -> BoxFuture<'a, Result<T, LedgerError>>
        ///     where
        ///         T: Send + 'a,
        ///         F: FnOnce(&'a dyn FullLedger) -> BoxFuture<'a, Result<T, LedgerError>> + Send + 'a,
        ///     {
        ///         if call.writes() {
        ///             self.writes.fetch_add(1, Ordering::SeqCst);
        ///         }
        ///         f(self.inner())
        ///     }
        /// }
        ///
        /// let ledger: Arc<dyn FullLedger> = Arc::new(CountWrites::default());
        /// # let _ = ledger;
        /// ```
        pub trait ForwardingLedger: Send + Sync + fmt::Debug + 'static {
            /// The ledger every call goes to.
            fn inner(&self) -> &dyn FullLedger;

            /// Runs one forwarded call: `f` makes the inner ledger's future for `call`. The
            /// provided implementation calls `f(self.inner())`; override it to count, delay or
            /// fail calls (call `f` only if the call is to run).
            fn around<'a, T, F>(
                &'a self,
                call: LedgerCall,
                f: F,
            ) -> BoxFuture<'a, Result<T, LedgerError>>
            where
                T: Send + 'a,
                F: FnOnce(&'a dyn FullLedger) -> BoxFuture<'a, Result<T, LedgerError>> + Send + 'a,
            {
                let _ = call;
                f(self.inner())
            }

            /// [`Ledger::detaches_results`]: `false` unless overridden (see the trait's docs).
            fn detaches_results(&self) -> bool {
                false
            }

            /// [`Ledger::record_detached`]: refused unless overridden, as by a ledger that does
            /// not detach results. Not through [`around`](Self::around): it returns at once.
            fn record_detached(
                &self,
                update: Update,
                late: NewEvidence,
                settled: Settled,
            ) -> Result<(), LedgerError> {
                let _ = (update, late, settled);
                Err(LedgerError::Config(
                    "this ledger does not record results detached (see Ledger::detaches_results)"
                        .to_owned(),
                ))
            }

            $(
                #[doc = concat!("[`Ledger::", stringify!($name), "`], through [`around`](Self::around).")]
                fn $name<'a>(&'a self, $($arg: $ty),*) -> BoxFuture<'a, Result<$out, LedgerError>> {
                    self.around(LedgerCall::$call, move |l| l.$name($($arg),*))
                }
            )*
            $($(
                #[doc = concat!("[`", stringify!($cap), "::", stringify!($cname), "`], through [`around`](Self::around).")]
                fn $cname<'a>(&'a self, $($carg: $cty),*) -> BoxFuture<'a, Result<$cout, LedgerError>> {
                    self.around(LedgerCall::$ccall, move |l| l.$cname($($carg),*))
                }
            )*)*
        }

        /// The methods of [`ForwardingLedger`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum LedgerCall {
            $(
                #[doc = concat!("[`Ledger::", stringify!($name), "`].")]
                $call,
            )*
            $($(
                #[doc = concat!("[`", stringify!($cap), "::", stringify!($cname), "`].")]
                $ccall,
            )*)*
        }

        impl<L: ForwardingLedger> Ledger for L {
            fn detaches_results(&self) -> bool {
                ForwardingLedger::detaches_results(self)
            }

            fn record_detached(
                &self,
                update: Update,
                late: NewEvidence,
                settled: Settled,
            ) -> Result<(), LedgerError> {
                ForwardingLedger::record_detached(self, update, late, settled)
            }

            $(
                fn $name<'a>(&'a self, $($arg: $ty),*) -> BoxFuture<'a, Result<$out, LedgerError>> {
                    ForwardingLedger::$name(self, $($arg),*)
                }
            )*

            fn housekeeping(self: Arc<Self>) -> Housekeeping {
                Housekeeping::default().listing(self.clone()).retention(self)
            }
        }

        $(
            impl<L: ForwardingLedger> $cap for L {
                $(
                    fn $cname<'a>(&'a self, $($carg: $cty),*) -> BoxFuture<'a, Result<$cout, LedgerError>> {
                        ForwardingLedger::$cname(self, $($carg),*)
                    }
                )*
            }
        )*
    };
}

forwarding_ledger! {
    Ledger {
    fn create_or_get(new: NewOperation) -> Created as CreateOrGet;
    fn create_and_apply(new: NewOperation, first: Update) -> Created as CreateAndApply;
    fn get(tenant: &'a Tenant, id: &'a OperationId) -> Option<OperationRecord> as Get;
    fn apply(update: Update) -> Option<OperationRecord> as Apply;
    fn record(update: Update) -> Option<OperationRecord> as Record;
    fn claim_due(now_ms: i64, lease_ms: i64, limit: u32) -> Vec<OperationRecord> as ClaimDue;
    fn claim_prepared(now_ms: i64, older_than_ms: i64, lease_ms: i64, limit: u32)
        -> Vec<OperationRecord> as ClaimPrepared;
    fn sweep_expired(now_ms: i64) -> Vec<OperationRecord> as SweepExpired;
    fn quarantined(limit: u32) -> Vec<QuarantinedRow> as Quarantined;
    fn release_quarantined(tenant: &'a Tenant, id: &'a OperationId, expected_version: u64,
        note: Option<String>, now_ms: i64) -> Released as ReleaseQuarantined;
    fn append_evidence(tenant: &'a Tenant, id: &'a OperationId, entry: NewEvidence) -> ()
        as AppendEvidence;
    fn evidence(tenant: &'a Tenant, id: &'a OperationId) -> Vec<EvidenceEntry> as Evidence;
    }
    ListingLedger {
    fn list(query: &'a OperationQuery) -> Page as List;
    fn count_by_state(scope: &'a TenantScope) -> StateCounts as CountByState;
    fn oldest(scope: &'a TenantScope, states: &'a [State]) -> OldestPerState as Oldest;
    fn find_by_remote_ref(tenant: &'a Tenant, remote_ref: &'a str) -> Option<OperationRecord>
        as FindByRemoteRef;
    fn find_by_idempotency_key(tenant: &'a Tenant, key: &'a str) -> Option<OperationRecord>
        as FindByIdempotencyKey;
    fn acknowledge_contradiction(
        tenant: &'a Tenant,
        id: &'a OperationId,
        expected_version: u64,
        entry: NewEvidence
    ) -> Option<OperationRecord> as AcknowledgeContradiction;
    fn activity(scope: &'a TenantScope, window: ActivityWindow) -> Activity as Activity;
    fn record_heartbeat(beat: WorkerHeartbeat) -> () as RecordHeartbeat;
    fn heartbeats() -> Vec<WorkerHeartbeat> as Heartbeats;
    fn count_overdue(scope: &'a TenantScope, checked_before_ms: i64) -> u64 as CountOverdue;
    }
    CallbackLedger {
    fn apply_callback(delivery: CallbackDelivery, effect: CallbackEffect) -> CallbackApplied
        as ApplyCallback;
    fn quarantine_callback(event: QuarantinedCallback) -> CallbackQuarantined
        as QuarantineCallback;
    fn quarantined_callbacks(scope: &'a TenantScope, limit: u32) -> Vec<QuarantinedCallback>
        as QuarantinedCallbacks;
    fn callback_seen(vendor: &'a str, event_id: &'a str) -> bool as CallbackSeen;
    fn record_ignored_callback(event: IgnoredCallback) -> CallbackRecorded
        as RecordIgnoredCallback;
    fn other_tenant_with(tenant: &'a Tenant, by: ProbeBy, value: &'a str) -> Option<Tenant>
        as OtherTenantWith;
    }
    RetentionLedger {
    fn finished_contracts() -> Vec<String> as FinishedContracts;
    fn purge(batch: PurgeBatch) -> Purged as Purge;
    fn purge_callbacks(batch: CallbackPurge) -> Purged as PurgeCallbacks;
    fn reclaim_space() -> u64 as ReclaimSpace;
    }
}

impl LedgerCall {
    /// Whether the call may change the store (create, apply, record, claim, sweep, release,
    /// append, callbacks); `false` for reads.
    pub fn writes(self) -> bool {
        match self {
            Self::CreateOrGet
            | Self::CreateAndApply
            | Self::Apply
            | Self::Record
            | Self::ClaimDue
            | Self::ClaimPrepared
            | Self::SweepExpired
            | Self::ReleaseQuarantined
            | Self::AppendEvidence
            | Self::AcknowledgeContradiction
            | Self::RecordHeartbeat
            | Self::ApplyCallback
            | Self::QuarantineCallback
            | Self::RecordIgnoredCallback
            | Self::Purge
            | Self::PurgeCallbacks
            | Self::ReclaimSpace => true,
            Self::Get
            | Self::Quarantined
            | Self::Evidence
            | Self::List
            | Self::CountByState
            | Self::Oldest
            | Self::QuarantinedCallbacks
            | Self::CallbackSeen
            | Self::OtherTenantWith
            | Self::FindByRemoteRef
            | Self::FindByIdempotencyKey
            | Self::Activity
            | Self::Heartbeats
            | Self::CountOverdue
            | Self::FinishedContracts => false,
        }
    }
}
