//! Listing and counting operations: what an operator (a command line, a review page, a gauge)
//! needs to find stuck work. See [`ListingLedger::list`](super::ListingLedger::list),
//! [`ListingLedger::count_by_state`](super::ListingLedger::count_by_state) and
//! [`ListingLedger::oldest`](super::ListingLedger::oldest).
//!
//! Every query names its tenant ([`TenantScope::Tenant`]); a listing across tenants is an
//! explicit operator capability, built only with [`OperationQuery::all_tenants`] or
//! [`TenantScope::AllTenants`].

use std::fmt;

use super::{LedgerError, OperationRecord};
use crate::operation::{OperationId, Tenant};
use crate::state::State;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use sql::{Arg, QUEUE_INDEX_PREDICATE, Sql, count_sql, list_sql};

/// Default page size of an [`OperationQuery`].
pub const DEFAULT_LIMIT: u32 = 50;
/// Largest page size; a bigger [`OperationQuery::limit`] is clamped to it.
pub const MAX_LIMIT: u32 = 1000;

/// Whose operations a query sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenantScope {
    /// One tenant's operations only (the default: a query must name its tenant).
    Tenant(Tenant),
    /// Every tenant's operations: an operator capability, never a default.
    AllTenants,
}

impl TenantScope {
    fn tenant(&self) -> Option<&Tenant> {
        match self {
            TenantScope::Tenant(t) => Some(t),
            TenantScope::AllTenants => None,
        }
    }

    /// Whether a row of `tenant` is in scope.
    pub fn contains(&self, tenant: &Tenant) -> bool {
        self.tenant().is_none_or(|t| t == tenant)
    }
}

/// A match on the operation id or on the remote reference (either one matching is enough), or
/// on the intent. Compared as plain text (no wildcard characters: `%` and `_` match
/// themselves).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextMatch {
    /// The whole value equals the text.
    Exact(String),
    /// The value starts with the text.
    Prefix(String),
    /// The value ends with the text: generated operation ids start with their creation time,
    /// so the end of one is what tells it from its neighbours.
    Suffix(String),
    /// The operation's intent reference (`intent_ref`, the name the caller gave the write)
    /// equals the text; the id and the remote reference are not compared.
    Intent(String),
}

impl TextMatch {
    /// The text matched.
    pub fn text(&self) -> &str {
        match self {
            TextMatch::Exact(s)
            | TextMatch::Prefix(s)
            | TextMatch::Suffix(s)
            | TextMatch::Intent(s) => s.as_str(),
        }
    }

    /// Whether `r` matches (the in-memory evaluation of the SQL predicate).
    fn matches_record(&self, r: &OperationRecord) -> bool {
        let on = |value: &str| match self {
            TextMatch::Exact(t) => value == t,
            TextMatch::Prefix(p) => value.starts_with(p.as_str()),
            TextMatch::Suffix(p) => value.ends_with(p.as_str()),
            TextMatch::Intent(_) => false,
        };
        match self {
            TextMatch::Intent(t) => *r.intent_ref == **t,
            _ => on(r.operation_id.as_str()) || r.remote_ref.as_deref().is_some_and(on),
        }
    }
}

/// Listing order, by creation time, ties broken by the order rows were inserted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// Most recent first (the default).
    #[default]
    NewestFirst,
    /// Oldest first (a queue in the order it formed).
    OldestFirst,
}

/// Where the next page starts: opaque to callers, given back by [`Page::next`].
///
/// It holds the last row's creation time and a store row key (insertion order); a cursor is
/// only meaningful with the same filters and order, on the same ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor(String);

impl Cursor {
    pub(crate) fn new(created_ms: i64, key: i64) -> Self {
        Self(format!("{created_ms}.{key}"))
    }

    /// The cursor as text (to put in a URL or print).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A cursor given back as text.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Config`] if the text is not a cursor.
    pub fn parse(text: &str) -> Result<Self, LedgerError> {
        let c = Self(text.to_owned());
        c.parts()?;
        Ok(c)
    }

    pub(crate) fn parts(&self) -> Result<(i64, i64), LedgerError> {
        let bad = || LedgerError::Config(format!("invalid listing cursor {:?}", self.0));
        let (a, b) = self.0.split_once('.').ok_or_else(bad)?;
        Ok((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?))
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A filter over operations, built step by step. Filters combine with AND; time bounds are
/// strict (`created_before(t)` keeps rows created before `t`, not at `t`).
///
/// ```
/// use recoverable_write::ledger::{Order, OperationQuery};
/// use recoverable_write::operation::Tenant;
/// use recoverable_write::state::State;
///
/// let queue = OperationQuery::tenant(Tenant::new("acme"))
///     .state(State::ManualReview)
///     .order(Order::OldestFirst)
///     .limit(20);
/// # let _ = queue;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationQuery {
    pub(crate) scope: TenantScope,
    pub(crate) states: Vec<State>,
    pub(crate) contract: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) created_after: Option<i64>,
    pub(crate) created_before: Option<i64>,
    pub(crate) updated_after: Option<i64>,
    pub(crate) updated_before: Option<i64>,
    pub(crate) next_check_before: Option<i64>,
    pub(crate) text: Option<TextMatch>,
    pub(crate) contradicted: bool,
    pub(crate) order: Order,
    pub(crate) limit: u32,
    pub(crate) after: Option<Cursor>,
    pub(crate) quarantined: Quarantined,
}

/// Which rows of a listing may be quarantined ones (see [`OperationQuery::include_quarantined`]
/// and [`OperationQuery::quarantined_only`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Quarantined {
    /// Left out (the default).
    #[default]
    Hidden,
    /// Listed with the others.
    Included,
    /// Only quarantined rows.
    Only,
}

impl OperationQuery {
    /// Every operation of `tenant` (narrow it with the other methods).
    pub fn tenant(tenant: Tenant) -> Self {
        Self::scoped(TenantScope::Tenant(tenant))
    }

    /// Every operation of every tenant: the operator capability. Do not build this from a
    /// caller's input.
    pub fn all_tenants() -> Self {
        Self::scoped(TenantScope::AllTenants)
    }

    /// A query over `scope`.
    pub fn scoped(scope: TenantScope) -> Self {
        Self {
            scope,
            states: Vec::new(),
            contract: None,
            host: None,
            created_after: None,
            created_before: None,
            updated_after: None,
            updated_before: None,
            next_check_before: None,
            text: None,
            contradicted: false,
            order: Order::default(),
            limit: DEFAULT_LIMIT,
            after: None,
            quarantined: Quarantined::Hidden,
        }
    }

    /// Adds a state to match (no state at all: every state).
    pub fn state(mut self, state: State) -> Self {
        if !self.states.contains(&state) {
            self.states.push(state);
        }
        self
    }

    /// Adds several states to match.
    pub fn states(self, states: impl IntoIterator<Item = State>) -> Self {
        states.into_iter().fold(self, Self::state)
    }

    /// Only operations frozen with this contract name.
    pub fn contract(mut self, name: impl Into<String>) -> Self {
        self.contract = Some(name.into());
        self
    }

    /// Only operations whose request goes to this host (lower case, as URLs are stored):
    /// the stored URL starts with `http://host` or `https://host`, then `/` or `:`.
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// Created strictly after `ms`.
    pub fn created_after(mut self, ms: i64) -> Self {
        self.created_after = Some(ms);
        self
    }

    /// Created strictly before `ms` (e.g. "older than 10 minutes": now − 600 000).
    pub fn created_before(mut self, ms: i64) -> Self {
        self.created_before = Some(ms);
        self
    }

    /// Last changed strictly after `ms`.
    pub fn updated_after(mut self, ms: i64) -> Self {
        self.updated_after = Some(ms);
        self
    }

    /// Last changed strictly before `ms`.
    pub fn updated_before(mut self, ms: i64) -> Self {
        self.updated_before = Some(ms);
        self
    }

    /// Next check set and strictly before `ms`.
    pub fn next_check_before(mut self, ms: i64) -> Self {
        self.next_check_before = Some(ms);
        self
    }

    /// Operation id or remote reference matching `text`.
    pub fn text(mut self, text: TextMatch) -> Self {
        self.text = Some(text);
        self
    }

    /// Only operations carrying an unacknowledged contradiction
    /// ([`OperationRecord::contradiction_ms`]): evidence that arrived after their final state
    /// and says otherwise. They are usually `SUCCEEDED` or `REJECTED`, so leave the state filter
    /// out to see them all. Read through the partial index of contradicted rows.
    pub fn contradicted(mut self) -> Self {
        self.contradicted = true;
        self
    }

    /// Listing order (default newest first).
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Page size: default [`DEFAULT_LIMIT`], at least 1, at most [`MAX_LIMIT`] (clamped).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit.clamp(1, MAX_LIMIT);
        self
    }

    /// Start after this cursor (from [`Page::next`] of the same query).
    pub fn after(mut self, cursor: Cursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// Also list rows set aside as undecodable (see
    /// [`Ledger::quarantined`](super::Ledger::quarantined)). They come back in
    /// [`Page::skipped`] by their raw columns, never in [`Page::rows`], even when this version
    /// can read them now: recovery skips them until they are
    /// [released](super::Ledger::release_quarantined).
    pub fn include_quarantined(mut self, include: bool) -> Self {
        self.quarantined = if include {
            Quarantined::Included
        } else {
            Quarantined::Hidden
        };
        self
    }

    /// Only rows set aside as undecodable, in [`Page::skipped`] (a page's
    /// [`rows`](Page::rows) are then always empty): the quarantine of the review queue. The
    /// other filters apply to their columns as stored; a state filter matches the state column
    /// as stored. Read through the partial index of quarantined rows.
    pub fn quarantined_only(mut self) -> Self {
        self.quarantined = Quarantined::Only;
        self
    }

    /// Whether this query lists quarantined rows only ([`quarantined_only`](Self::quarantined_only)).
    pub fn is_quarantined_only(&self) -> bool {
        self.quarantined == Quarantined::Only
    }

    /// Whether this query lists `IN_FLIGHT` rows only, the rows the review queue's indexes
    /// leave out ([`sql::UNQUEUED_STATES`]): SQLite reads them through its send-lease index,
    /// named (PostgreSQL's planner finds it by itself).
    #[cfg(feature = "sqlite")]
    pub(crate) fn is_in_flight_only(&self) -> bool {
        self.states == [State::InFlight] && self.quarantined != Quarantined::Only
    }

    /// The tenant scope.
    pub fn scope(&self) -> &TenantScope {
        &self.scope
    }

    /// The page size.
    pub fn page_size(&self) -> u32 {
        self.limit
    }

    /// Checks the texts: the stores refuse NUL characters.
    pub(crate) fn validate(&self) -> Result<(), LedgerError> {
        let texts = [
            self.scope.tenant().map(Tenant::as_str),
            self.contract.as_deref(),
            self.host.as_deref(),
            self.text.as_ref().map(TextMatch::text),
        ];
        if texts.iter().flatten().any(|s| s.contains('\0')) {
            return Err(LedgerError::Config(
                "listing filters must not contain NUL characters".to_owned(),
            ));
        }
        if let Some(c) = &self.after {
            c.parts()?;
        }
        Ok(())
    }

    /// The URL prefixes a host filter accepts.
    fn host_prefixes(host: &str) -> [String; 4] {
        [
            format!("http://{host}/"),
            format!("https://{host}/"),
            format!("http://{host}:"),
            format!("https://{host}:"),
        ]
    }

    /// Whether `r`, a row that is not quarantined, passes every filter except the cursor (the
    /// in-memory evaluation; the SQL backends build the same predicate in [`list_sql`]).
    pub(crate) fn matches(&self, r: &OperationRecord) -> bool {
        let after = |v: i64, b: Option<i64>| b.is_none_or(|b| v > b);
        let before = |v: i64, b: Option<i64>| b.is_none_or(|b| v < b);
        self.quarantined != Quarantined::Only
            && self.scope.contains(&r.tenant)
            && (self.states.is_empty() || self.states.contains(&r.state))
            && self
                .contract
                .as_ref()
                .is_none_or(|c| **c == *r.contract.name)
            && self.host.as_ref().is_none_or(|h| {
                Self::host_prefixes(h)
                    .iter()
                    .any(|p| r.request.url.starts_with(p.as_str()))
            })
            && after(r.created_ms, self.created_after)
            && before(r.created_ms, self.created_before)
            && after(r.updated_ms, self.updated_after)
            && before(r.updated_ms, self.updated_before)
            && self
                .next_check_before
                .is_none_or(|b| r.next_check_ms.is_some_and(|n| n < b))
            && self.text.as_ref().is_none_or(|t| t.matches_record(r))
            && (!self.contradicted || r.contradiction_ms.is_some())
    }
}

/// A row a listing reports by its raw columns instead of as an [`OperationRecord`], never
/// failing the page: a quarantined row (set aside by a claim or sweep, whether or not this
/// version can read it now), or a row that cannot be decoded (logged).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedRow {
    /// The row's tenant, as stored.
    pub tenant: Tenant,
    /// The row's operation id, as stored.
    pub operation_id: OperationId,
    /// Why it is not in [`Page::rows`]: the decode error (it names the column); for a
    /// quarantined row this version can read, the error it was quarantined with.
    pub error: String,
    /// The state column as stored (possibly a name this version does not know).
    pub state: String,
    /// Created (ms since epoch).
    pub created_ms: i64,
    /// Last changed (ms since epoch).
    pub updated_ms: i64,
    /// When it was quarantined (ms since epoch, on the ledger's clock); `None`: it is not (a
    /// row that went bad since its last claim; the next claim or sweep that meets it
    /// quarantines it).
    pub quarantined_ms: Option<i64>,
    /// Whether this version decodes the row now (then only its quarantine keeps it from
    /// recovery: [release](super::Ledger::release_quarantined) it).
    pub readable: bool,
    /// Every other column this version could read.
    pub columns: super::RawColumns,
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Page {
    /// The matching rows, in the query's order.
    pub rows: Vec<OperationRecord>,
    /// Where the next page starts; `None` when this page is the last.
    pub next: Option<Cursor>,
    /// Rows of this page reported by their raw columns, in the page's order: quarantined rows
    /// (only with [`OperationQuery::include_quarantined`] or
    /// [`OperationQuery::quarantined_only`]) and rows that went bad since their last claim.
    pub skipped: Vec<SkippedRow>,
}

impl Page {
    /// A page.
    pub fn new(rows: Vec<OperationRecord>, next: Option<Cursor>, skipped: Vec<SkippedRow>) -> Self {
        Self {
            rows,
            next,
            skipped,
        }
    }
}

/// The states [`ListingLedger::count_by_state`](super::ListingLedger::count_by_state) counts: every state
/// but the terminal ones. Terminal rows are the bulk of a ledger and grow without bound;
/// counting them would read the whole history on every scan.
pub const OPEN_STATES: [State; 6] = [
    State::Prepared,
    State::InFlight,
    State::Processing,
    State::Unknown,
    State::RetryReady,
    State::ManualReview,
];

/// The states [`OldestPerState`] reports by default: those where work can get stuck.
pub const WATCHED_STATES: [State; 4] = [
    State::Unknown,
    State::Processing,
    State::ManualReview,
    State::Prepared,
];

/// Operations per open state (see [`OPEN_STATES`]), and the quarantined rows, counted apart:
/// a quarantined row is in no state's count (its state column may be a name this version does
/// not know), and recovery skips it until a person releases it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateCounts {
    counts: [u64; OPEN_STATES.len()],
    quarantined: u64,
}

impl StateCounts {
    /// The number of operations in `state`; `None` for a terminal state (not counted).
    pub fn get(&self, state: State) -> Option<u64> {
        OPEN_STATES
            .iter()
            .position(|s| *s == state)
            .map(|i| self.counts[i])
    }

    /// Every open state with its count, in [`OPEN_STATES`] order.
    pub fn iter(&self) -> impl Iterator<Item = (State, u64)> + '_ {
        OPEN_STATES.iter().copied().zip(self.counts.iter().copied())
    }

    /// Sets the count of an open state (a terminal state is ignored).
    pub fn set(&mut self, state: State, count: u64) {
        if let Some(i) = OPEN_STATES.iter().position(|s| *s == state) {
            self.counts[i] = count;
        }
    }

    /// The number of quarantined rows (set aside as undecodable, whatever their stored state;
    /// see [`Ledger::quarantined`](super::Ledger::quarantined)).
    pub fn quarantined(&self) -> u64 {
        self.quarantined
    }

    /// Sets the number of quarantined rows.
    pub fn set_quarantined(&mut self, count: u64) {
        self.quarantined = count;
    }
}

/// The oldest operation (by creation time) of one state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OldestRow {
    /// Its tenant.
    pub tenant: Tenant,
    /// Its operation id.
    pub operation_id: OperationId,
    /// Created (ms since epoch).
    pub created_ms: i64,
    /// Last changed (ms since epoch).
    pub updated_ms: i64,
}

/// The oldest operation of each asked state (`None`: no operation in that state).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OldestPerState {
    entries: Vec<(State, Option<OldestRow>)>,
}

impl OldestPerState {
    /// The oldest operation in `state`, if any (and if `state` was asked).
    pub fn get(&self, state: State) -> Option<&OldestRow> {
        self.entries
            .iter()
            .find(|(s, _)| *s == state)
            .and_then(|(_, r)| r.as_ref())
    }

    /// Every asked state with its oldest operation.
    pub fn iter(&self) -> impl Iterator<Item = (State, Option<&OldestRow>)> + '_ {
        self.entries.iter().map(|(s, r)| (*s, r.as_ref()))
    }
}

/// [`ListingLedger::oldest`](super::ListingLedger::oldest) through
/// [`ListingLedger::list`](super::ListingLedger::list): one first page of one row per state,
/// oldest first (an index range read per state).
pub(crate) async fn oldest_via_list<L: super::ListingLedger + ?Sized>(
    ledger: &L,
    scope: &TenantScope,
    states: &[State],
) -> Result<OldestPerState, LedgerError> {
    let mut out = OldestPerState::default();
    for &state in states {
        if out.entries.iter().any(|(s, _)| *s == state) {
            continue;
        }
        let q = OperationQuery::scoped(scope.clone())
            .state(state)
            .order(Order::OldestFirst)
            .limit(1);
        let page = ledger.list(&q).await?;
        let row = page.rows.into_iter().next().map(|r| OldestRow {
            tenant: r.tenant,
            operation_id: r.operation_id,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
        });
        out.entries.push((state, row));
    }
    Ok(out)
}
