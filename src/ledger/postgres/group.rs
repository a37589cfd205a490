//! Group commit: the claims (and, apart, the results) that arrive while others of their kind are
//! being written go to the database together, in one statement and one commit.
//!
//! A request alone (nobody else writing that kind through this ledger) takes its single-row
//! statement on its own task, as before: no hop, no added latency. Otherwise its write is queued
//! and one of a few writer tasks takes everything queued (up to [`MAX_GROUP`]) into one call of
//! `rw_claim_batch` or `rw_record_batch` (migration 0012), which does for each element exactly
//! what the single-row function does. Each caller waits for the commit of its group, so a claim
//! is durable before its request is sent, as alone. A group that fails fails every request in
//! it with the same error; nothing is retried here (a claim whose commit is unknown is found by
//! the recoverer, as after any lost connection).
//!
//! The writer tasks start with the first queued write, on the runtime that made it, hold no
//! part of the ledger but the pool and the statement, and end when the last clone of the ledger
//! is dropped. A queued write is written even if its caller stops waiting.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, Postgres};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::{Mutex, Notify, mpsc, oneshot};

use super::unavailable;
use crate::ledger::LedgerError;
use crate::ledger::codec::{EvidenceColumns, RowColumns, UpdateColumns};

/// The most requests one grouped statement carries.
pub(super) const MAX_GROUP: usize = 64;

/// Connections the write path of one kind keeps between its statements.
///
/// A connection given back to sqlx's pool is pinged (a round trip, on a task spawned for it)
/// before the pool lends it again: one more round trip per statement, which the write path
/// paid twice per request. Kept here after a statement that succeeded, a connection goes
/// straight to the next statement of its kind.
///
/// A kept connection also plans its statements once: it runs with `plan_cache_mode =
/// force_generic_plan` (see [`WriteConn`]) while the rest of the pool makes a custom plan per
/// execution (see `PostgresLedger::connect_with`). On such a connection a request alone runs
/// its claim or its result as a plain statement shaped for a generic plan (the body of
/// `rw_claim_new` or `rw_apply`, migration 0009); elsewhere it calls the function, whose own
/// statements are planned generically, since a custom plan of the statement, with 47
/// parameters, costs more than a round trip. Groups always call the batch functions (0012).
///
/// Keeping never takes connections the rest of the ledger needs: at most a quarter of the pool
/// per kind (none for a pool under 4, and then no session setting either), only while the pool
/// has a connection to spare (one idle, or room to open one), and a connection kept for
/// [`KEEP_FOR`] without being used again goes back, its setting reset first. When the pool is
/// closed (by [`PostgresLedger::close`](super::PostgresLedger::close) or by anyone holding
/// it), the kept connections are closed at once, so the close does not wait for them.
pub(super) struct Warm {
    pool: PgPool,
    mode: Mode,
    idle: std::sync::Mutex<Vec<(WriteConn, Instant)>>,
    keep: usize,
    /// Connections of this keeper in the write path's mode, kept or in use: at most `keep`.
    /// Beyond them (more statements at once than it keeps), a statement takes a connection of
    /// the pool as it is and gives it back as it is.
    generic: Arc<AtomicUsize>,
    /// Wakes the task that gives back what stays unused (also when this keeper is dropped).
    kept: Arc<Notify>,
}

/// How long a kept connection waits for the next statement of its kind before going back.
pub(super) const KEEP_FOR: Duration = Duration::from_millis(50);

impl fmt::Debug for Warm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Warm")
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.kept.notify_one();
    }
}

impl Warm {
    /// Keeps up to `keep` connections of `pool`. A task on the current runtime gives back
    /// what stays unused and closes everything when the pool closes; it holds neither the pool
    /// nor this keeper, and ends with either.
    pub(super) fn new(pool: PgPool, keep: usize, mode: Mode) -> Arc<Self> {
        let warm = Arc::new(Self {
            mode,
            idle: std::sync::Mutex::new(Vec::with_capacity(keep)),
            keep,
            generic: Arc::new(AtomicUsize::new(0)),
            kept: Arc::new(Notify::new()),
            pool,
        });
        if keep > 0 {
            let (closed, kept, this) = (
                warm.pool.close_event(),
                warm.kept.clone(),
                Arc::downgrade(&warm),
            );
            tokio::spawn(async move {
                tokio::pin!(closed);
                loop {
                    tokio::select! {
                        _ = &mut closed => {
                            if let Some(warm) = this.upgrade() {
                                warm.close_kept();
                            }
                            return;
                        }
                        _ = kept.notified() => {}
                    }
                    // Give back what is still unused after `KEEP_FOR`; look again while
                    // anything is kept.
                    loop {
                        tokio::select! {
                            _ = &mut closed => break,
                            _ = tokio::time::sleep(KEEP_FOR) => {}
                        }
                        let Some(warm) = this.upgrade() else { return };
                        let now = Instant::now();
                        let (due, left) =
                            warm.take_kept(|since| now.duration_since(since) >= KEEP_FOR);
                        drop(warm);
                        for conn in due {
                            conn.back().await;
                        }
                        if left == 0 {
                            break;
                        }
                    }
                    if this.strong_count() == 0 {
                        return;
                    }
                }
            });
        }
        warm
    }

    /// A kept connection, or one from the pool: set up for the write path while this keeper has
    /// fewer than `keep` such connections and the pool has one to spare, as it is otherwise.
    pub(super) async fn take(&self) -> Result<WriteConn, LedgerError> {
        let kept = self.idle().pop();
        if let Some((conn, _)) = kept
            && !self.pool.is_closed()
        {
            return Ok(conn);
        }
        let conn = self.pool.acquire().await.map_err(unavailable)?;
        // Set up only a connection it may keep: with the pool saturated it would go back at
        // once, and the setting and its reset would cost two round trips for nothing.
        let may_keep = self.keep > 0 && self.spare();
        let generic = may_keep && self.generic.fetch_add(1, Ordering::AcqRel) < self.keep;
        if may_keep && !generic {
            self.generic.fetch_sub(1, Ordering::AcqRel);
        }
        let detachable = self.pool.options().get_min_connections() == 0;
        WriteConn::set_up(
            conn,
            generic.then(|| Arc::clone(&self.generic)),
            self.mode,
            detachable,
        )
        .await
    }

    /// Keeps `conn` (its statement succeeded) if it is in the write path's mode, there is room
    /// and the pool has a connection to spare; else it goes back to the pool (in that mode, on
    /// a task of its own that resets its setting first).
    pub(super) fn give(&self, conn: WriteConn) {
        if conn.generic.is_none() {
            return; // dropped: back to the pool as it came
        }
        let spare = self.spare();
        let mut idle = self.idle();
        if spare && idle.len() < self.keep && !self.pool.is_closed() {
            idle.push((conn, Instant::now()));
            drop(idle);
            self.kept.notify_one();
        } else {
            drop(idle);
            tokio::spawn(conn.back());
        }
    }

    /// Whether the pool has a connection to spare: one idle, or room to open one.
    fn spare(&self) -> bool {
        self.pool.num_idle() > 0 || self.pool.size() < self.pool.options().get_max_connections()
    }

    /// Takes out every kept connection `due` says (given when it was kept); how many are still
    /// kept.
    fn take_kept(&self, due: impl Fn(Instant) -> bool) -> (Vec<WriteConn>, usize) {
        let mut idle = self.idle();
        let out: Vec<_> = idle
            .extract_if(.., |(_, since)| due(*since))
            .map(|(conn, _)| conn)
            .collect();
        (out, idle.len())
    }

    /// Closes every kept connection (the pool is closing: nothing is given back).
    pub(super) fn close_kept(&self) {
        drop(self.take_kept(|_| true));
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(WriteConn, Instant)>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `statement` on a kept connection, keeping it again if the statement succeeded.
    /// `statement` is told whether the connection is in the write path's mode (its session
    /// plans generically, with this keeper's [`Mode`]) or as the pool made it.
    pub(super) async fn run<T>(
        &self,
        statement: impl AsyncFnOnce(&mut sqlx::PgConnection, bool) -> Result<T, sqlx::Error>,
    ) -> Result<T, LedgerError> {
        let mut conn = self.take().await?;
        let generic = conn.generic.is_some();
        let result = statement(&mut conn, generic).await.map_err(unavailable)?;
        self.give(conn);
        Ok(result)
    }
}

/// A connection of the write path. In the write path's mode (`generic`), its session plans
/// statements once (`plan_cache_mode = force_generic_plan`), and it never goes back to the pool
/// in that mode: [`back`](Self::back) resets the setting first, and one dropped otherwise (its
/// statement failed or was abandoned, the pool is closing) is closed, never lent again.
pub(super) struct WriteConn {
    conn: Option<PoolConnection<Postgres>>,
    mode: Mode,
    /// Whether it can leave the pool without a runtime (a pool that keeps no minimum of
    /// connections: sqlx spawns a task to refill one that does).
    detachable: bool,
    /// Set in the write path's mode: the count of its keeper's connections in that mode, which
    /// this one is part of until it leaves the mode.
    generic: Option<Arc<AtomicUsize>>,
}

/// The session settings of a keeper's connections in the write path's mode, set when one
/// enters it and reset (one round trip each) before it goes back to the pool.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mode {
    set: &'static str,
    reset: &'static str,
}

impl Mode {
    /// The claims': statements planned once per connection; commits wait for the WAL flush
    /// (a claim is durable before its request is sent).
    pub(super) const CLAIMS: Self = Self {
        set: "SET plan_cache_mode = force_generic_plan",
        reset: "RESET plan_cache_mode",
    };
    /// The results': planned once too, and committed without waiting for the WAL flush, as
    /// every result is (`Ledger::record_unread`; the grouped call sets it per transaction as
    /// well): the single-row statement needs no setting of its own.
    pub(super) const RECORDS: Self = Self {
        set: "SET plan_cache_mode = force_generic_plan; SET synchronous_commit = off",
        reset: "RESET plan_cache_mode; RESET synchronous_commit",
    };
}

impl WriteConn {
    /// `conn`, in the write path's `mode` (counted in `generic`) if given.
    async fn set_up(
        conn: PoolConnection<Postgres>,
        generic: Option<Arc<AtomicUsize>>,
        mode: Mode,
        detachable: bool,
    ) -> Result<Self, LedgerError> {
        let set = generic.is_some();
        let mut this = Self {
            conn: Some(conn),
            mode,
            detachable,
            generic,
        };
        if set {
            // On failure `this` is dropped, and closed.
            sqlx::raw_sql(mode.set)
                .execute(&mut *this)
                .await
                .map_err(unavailable)?;
        }
        Ok(this)
    }

    /// Gives this connection back to the pool, its session as the pool made it.
    async fn back(mut self) {
        if self.generic.is_some() {
            if sqlx::raw_sql(self.mode.reset)
                .execute(&mut *self)
                .await
                .is_err()
            {
                return; // dropped, and closed
            }
            if let Some(count) = self.generic.take() {
                count.fetch_sub(1, Ordering::AcqRel);
            }
        }
        drop(self); // to the pool
    }
}

impl std::ops::Deref for WriteConn {
    type Target = sqlx::PgConnection;
    fn deref(&self) -> &sqlx::PgConnection {
        self.conn
            .as_deref()
            .expect("a write connection is used until dropped")
    }
}

impl std::ops::DerefMut for WriteConn {
    fn deref_mut(&mut self) -> &mut sqlx::PgConnection {
        self.conn
            .as_deref_mut()
            .expect("a write connection is used until dropped")
    }
}

impl Drop for WriteConn {
    fn drop(&mut self) {
        if let Some(count) = self.generic.take() {
            count.fetch_sub(1, Ordering::AcqRel);
            if let Some(mut conn) = self.conn.take() {
                if tokio::runtime::Handle::try_current().is_ok() {
                    conn.close_on_drop();
                } else if self.detachable {
                    // Dropped after its runtime shut down (a kept connection of a ledger that
                    // outlived it): sqlx would close it on a task it cannot spawn, and panic.
                    // Detached, it leaves the pool at once and its socket closes here.
                    drop(conn.detach());
                } else {
                    // A pool with a minimum of connections spawns even for a detached one: with
                    // no runtime, the connection is left open until the process ends.
                    std::mem::forget(conn);
                }
            }
        }
    }
}

/// One kind of grouped write: how a group of its requests is written.
pub(super) trait GroupWrite: Send + Sync + 'static {
    type Job: Send + 'static;
    type Done: Send + 'static;
    /// Writes `jobs` in one statement: one result per job, in their order.
    fn write(
        &self,
        jobs: Vec<Self::Job>,
    ) -> impl Future<Output = Vec<Result<Self::Done, LedgerError>>> + Send;
}

type Reply<W> = oneshot::Sender<Result<<W as GroupWrite>::Done, LedgerError>>;
type Queued<W> = (<W as GroupWrite>::Job, Reply<W>);

/// The queue of one kind of write and its writer tasks.
pub(super) struct Group<W: GroupWrite> {
    write: Arc<W>,
    tx: mpsc::UnboundedSender<Queued<W>>,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Queued<W>>>>,
    started: Once,
    writers: usize,
    /// Requests of this kind being written now, alone or queued.
    active: AtomicUsize,
}

impl<W: GroupWrite> fmt::Debug for Group<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("writers", &self.writers)
            .field("active", &self.active.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Counts a request as active until dropped (also when its caller stops waiting).
struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<W: GroupWrite> Group<W> {
    /// A group written by `writers` tasks (at least one).
    pub(super) fn new(write: W, writers: usize) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            write: Arc::new(write),
            tx,
            rx: Arc::new(Mutex::new(rx)),
            started: Once::new(),
            writers: writers.max(1),
            active: AtomicUsize::new(0),
        }
    }

    /// Writes `job`: with `alone` on the caller's task if no other request of this kind is
    /// being written, else in the next group.
    pub(super) async fn run<F>(
        &self,
        job: W::Job,
        alone: impl FnOnce(W::Job) -> F,
    ) -> Result<W::Done, LedgerError>
    where
        F: Future<Output = Result<W::Done, LedgerError>>,
    {
        let first = self.active.fetch_add(1, Ordering::AcqRel) == 0;
        let _active = Active(&self.active);
        if first {
            return alone(job).await;
        }
        self.start();
        let (reply, done) = oneshot::channel();
        self.tx.send((job, reply)).map_err(|_| stopped())?;
        done.await.map_err(|_| stopped())?
    }

    fn start(&self) {
        self.started.call_once(|| {
            for _ in 0..self.writers {
                tokio::spawn(drain(Arc::clone(&self.write), Arc::clone(&self.rx)));
            }
        });
    }
}

/// A writer task: takes everything queued (up to `MAX_GROUP`), writes it, answers each caller;
/// ends when the queue's sender (the ledger) is gone.
async fn drain<W: GroupWrite>(write: Arc<W>, rx: Arc<Mutex<mpsc::UnboundedReceiver<Queued<W>>>>) {
    let mut queued = Vec::with_capacity(MAX_GROUP);
    loop {
        if rx.lock().await.recv_many(&mut queued, MAX_GROUP).await == 0 {
            return;
        }
        let (jobs, replies): (Vec<_>, Vec<_>) = queued.drain(..).unzip();
        let results = write.write(jobs).await;
        for (reply, result) in replies.into_iter().zip(results) {
            let _ = reply.send(result);
        }
    }
}

fn stopped() -> LedgerError {
    LedgerError::Unavailable("the ledger's group writer stopped (its runtime shut down)".into())
}

/// One error for every request of a failed group.
#[derive(Debug, Clone)]
struct GroupFailed {
    error: Arc<LedgerError>,
    size: usize,
}

impl fmt::Display for GroupFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (a grouped write of {} requests)",
            self.error, self.size
        )
    }
}

impl std::error::Error for GroupFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

fn all_failed<T>(e: LedgerError, size: usize) -> Vec<Result<T, LedgerError>> {
    let shared = GroupFailed {
        error: Arc::new(e),
        size,
    };
    (0..size)
        .map(|_| Err(LedgerError::Unavailable(Box::new(shared.clone()))))
        .collect()
}

// ── claims ──────────────────────────────────────────────────────────────────────────────────────

/// A claimed row of `create_and_apply` and its two entries, encoded.
pub(super) struct ClaimJob {
    /// The caller's time, or `None` for the database clock.
    pub(super) now: Option<i64>,
    /// The caller's creation time (the origin of the row's caller-computed times).
    pub(super) created_at: i64,
    pub(super) row: RowColumns,
    pub(super) created: EvidenceColumns,
    pub(super) claimed: EvidenceColumns,
}

/// Claims through `rw_claim_batch`: `Some(created_ms)` (the statement's clock, from which the
/// caller moves the times of the row it holds: `writer::claimed_row`) when inserted, `None`
/// when the identity or the intent exists already (the caller reads what exists).
pub(super) struct ClaimWrite {
    pub(super) warm: Arc<Warm>,
    pub(super) sql: Arc<str>,
}

impl GroupWrite for ClaimWrite {
    type Job = ClaimJob;
    type Done = Option<i64>;

    async fn write(&self, jobs: Vec<ClaimJob>) -> Vec<Result<Option<i64>, LedgerError>> {
        // Two requests of one group with the same identity: only the first is sent; the later
        // one is answered `None` and reads the first's row after the commit, as if it had come
        // after it.
        let mut seen = HashSet::new();
        let sent: Vec<usize> = (0..jobs.len())
            .filter(|&i| {
                seen.insert((
                    jobs[i].row.tenant.as_str(),
                    jobs[i].row.operation_id.as_str(),
                ))
            })
            .collect();
        let rows = {
            let j: Vec<&ClaimJob> = sent.iter().map(|&i| &jobs[i]).collect();
            let r = |f: fn(&RowColumns) -> &str| j.iter().map(|c| f(&c.row)).collect::<Vec<_>>();
            let query = sqlx::query(AssertSqlSafe(self.sql.clone()))
                .bind(j.iter().map(|c| c.now).collect::<Vec<_>>())
                .bind(j.iter().map(|c| c.created_at).collect::<Vec<_>>())
                .bind(r(|c| &c.tenant))
                .bind(r(|c| &c.operation_id))
                .bind(r(|c| &c.action))
                .bind(r(|c| &c.intent_ref))
                .bind(r(|c| &c.idempotency_key))
                .bind(r(|c| &c.payload_hash))
                .bind(r(|c| &c.request_method))
                .bind(r(|c| &c.request_url))
                .bind(r(|c| &c.request_headers))
                .bind(
                    j.iter()
                        .map(|c| c.row.request_body.as_slice())
                        .collect::<Vec<_>>(),
                )
                .bind(r(|c| &c.contract_name))
                .bind(r(|c| &c.contract_hash))
                .bind(r(|c| &c.budget_policy))
                .bind(r(|c| c.state))
                .bind(j.iter().map(|c| c.row.last_result).collect::<Vec<_>>())
                .bind(j.iter().map(|c| c.row.generation).collect::<Vec<_>>())
                .bind(j.iter().map(|c| c.row.attempts_used).collect::<Vec<_>>())
                .bind(j.iter().map(|c| c.row.queries_used).collect::<Vec<_>>())
                .bind(j.iter().map(|c| c.row.may_have_applied).collect::<Vec<_>>())
                .bind(
                    j.iter()
                        .map(|c| c.row.current_attempt.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(j.iter().map(|c| c.row.lease_until_ms).collect::<Vec<_>>())
                .bind(j.iter().map(|c| c.row.next_check_ms).collect::<Vec<_>>())
                .bind(j.iter().map(|c| c.row.deadline_ms).collect::<Vec<_>>())
                .bind(
                    j.iter()
                        .map(|c| c.row.remote_ref.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(
                    j.iter()
                        .map(|c| c.row.reason.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(
                    j.iter()
                        .map(|c| c.row.response.status.map(i32::from))
                        .collect::<Vec<_>>(),
                )
                .bind(
                    j.iter()
                        .map(|c| c.row.response.headers.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(
                    j.iter()
                        .map(|c| c.row.response.body.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(j.iter().map(|c| c.row.updated_ms).collect::<Vec<_>>());
            let query = bind_evidence(query, j.iter().map(|c| &c.created).collect());
            let query = bind_evidence(query, j.iter().map(|c| &c.claimed).collect());
            match self.warm.run(async |c, _| query.fetch_all(c).await).await {
                Ok(rows) => rows,
                Err(e) => return all_failed(e, jobs.len()),
            }
        };
        let mut results: Vec<Result<Option<i64>, LedgerError>> =
            (0..jobs.len()).map(|_| Ok(None)).collect();
        for row in &rows {
            let key = (
                row.try_get::<&str, _>("tenant"),
                row.try_get::<&str, _>("operation_id"),
            );
            let (Ok(tenant), Ok(id)) = key else { continue };
            if let Some(&i) = sent
                .iter()
                .find(|&&i| jobs[i].row.tenant == tenant && jobs[i].row.operation_id == id)
            {
                results[i] = row
                    .try_get::<i64, _>("created_ms")
                    .map(Some)
                    .map_err(unavailable);
            }
        }
        results
    }
}

/// Binds one entry's eight columns, one array each.
fn bind_evidence<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    e: Vec<&'q EvidenceColumns>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(
            e.iter()
                .map(|e| e.attempt_id.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(e.iter().map(|e| e.generation).collect::<Vec<_>>())
        .bind(e.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>())
        .bind(e.iter().map(|e| e.from_state).collect::<Vec<_>>())
        .bind(e.iter().map(|e| e.to_state).collect::<Vec<_>>())
        .bind(e.iter().map(|e| e.evidence.as_deref()).collect::<Vec<_>>())
        .bind(e.iter().map(|e| e.note.as_deref()).collect::<Vec<_>>())
        .bind(e.iter().map(|e| e.at_ms).collect::<Vec<_>>())
}

// ── results ─────────────────────────────────────────────────────────────────────────────────────

/// A result after the send (`record_unread`), encoded.
pub(super) struct RecordJob {
    /// The caller's time, or `None` for the database clock.
    pub(super) now: Option<i64>,
    pub(super) update: UpdateColumns,
}

/// Results through `rw_record_batch`: whether each compare-and-swap applied.
pub(super) struct RecordWrite {
    pub(super) warm: Arc<Warm>,
    pub(super) sql: Arc<str>,
}

impl GroupWrite for RecordWrite {
    type Job = RecordJob;
    type Done = bool;

    async fn write(&self, jobs: Vec<RecordJob>) -> Vec<Result<bool, LedgerError>> {
        let u: Vec<&UpdateColumns> = jobs.iter().map(|j| &j.update).collect();
        let query = sqlx::query(AssertSqlSafe(self.sql.clone()))
            .bind(jobs.iter().map(|j| j.now).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.now_ms).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.state).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.last_result).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.generation).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.attempts_used).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.queries_used).collect::<Vec<_>>())
            .bind(
                u.iter()
                    .map(|u| u.reset_may_have_applied)
                    .collect::<Vec<_>>(),
            )
            .bind(u.iter().map(|u| u.may_have_applied).collect::<Vec<_>>())
            .bind(
                u.iter()
                    .map(|u| u.current_attempt.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(u.iter().map(|u| u.lease_until_ms).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.next_check_ms).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.deadline_ms).collect::<Vec<_>>())
            .bind(
                u.iter()
                    .map(|u| u.remote_ref.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(u.iter().map(|u| u.reason.as_deref()).collect::<Vec<_>>())
            .bind(
                u.iter()
                    .map(|u| u.response.status.map(i32::from))
                    .collect::<Vec<_>>(),
            )
            .bind(
                u.iter()
                    .map(|u| u.response.headers.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(
                u.iter()
                    .map(|u| u.response.body.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(u.iter().map(|u| u.tenant.as_str()).collect::<Vec<_>>())
            .bind(
                u.iter()
                    .map(|u| u.operation_id.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(u.iter().map(|u| u.expect_state).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.expect_generation).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.expect_version).collect::<Vec<_>>())
            .bind(u.iter().map(|u| u.operation_level).collect::<Vec<_>>());
        let query = bind_evidence(query, u.iter().map(|u| &u.evidence).collect());
        let rows = match self.warm.run(async |c, _| query.fetch_all(c).await).await {
            Ok(rows) => rows,
            Err(e) => return all_failed(e, jobs.len()),
        };
        let mut applied = vec![false; jobs.len()];
        for row in &rows {
            match row.try_get::<i64, _>(0) {
                Ok(ord) if ord >= 1 && (ord as usize) <= jobs.len() => {
                    applied[ord as usize - 1] = true
                }
                Ok(ord) => {
                    let e = sqlx::Error::Protocol(format!("rw_record_batch answered {ord}"));
                    return all_failed(unavailable(e), jobs.len());
                }
                Err(e) => return all_failed(unavailable(e), jobs.len()),
            }
        }
        applied.into_iter().map(Ok).collect()
    }
}
