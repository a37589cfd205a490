//! One SQLite connection as the ledger uses it: statements prepared once and cached, parameters
//! bound from owned [`Value`]s, and rows read into owned [`SqlRow`]s, so that decoding (JSON,
//! enums) happens in the caller's task, not on the writer thread.

use std::cell::Cell as StdCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, params_from_iter};

use super::Synchronous;
use crate::ledger::LedgerError;

/// How many statements each connection keeps prepared: every fixed statement of the ledger fits,
/// with room for the listing and retention texts that repeat.
const STATEMENT_CACHE: usize = 96;

/// A statement failed (or the connection did): nothing it started is kept.
pub(super) fn unavailable(e: rusqlite::Error) -> LedgerError {
    LedgerError::Unavailable(Box::new(e))
}

/// How connections to one ledger file are opened.
#[derive(Clone, Debug)]
pub(super) struct Opener {
    pub(super) path: PathBuf,
    pub(super) busy_timeout: Duration,
    pub(super) synchronous: Synchronous,
}

impl Opener {
    /// The writer's connection: creates the file, puts it in WAL mode with incremental
    /// auto-vacuum, foreign keys on, temporary data in memory.
    pub(super) fn writer(&self) -> Result<Conn, LedgerError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags).map_err(unavailable)?;
        conn.busy_timeout(self.busy_timeout).map_err(unavailable)?;
        // Space freed by retention goes back to the file system a bounded step at a time
        // (`RetentionLedger::reclaim_space`). Takes effect when the file is created; set before the
        // journal mode, as SQLite requires.
        //
        // Only the writer sets the journal mode: WAL is persistent in the file, and switching it
        // needs an exclusive lock that readers have no business taking.
        //
        // SQLite keeps the page images a statement may need to restore on an error inside a
        // transaction in a statement journal, which spills to a temporary *file* after 64 KiB:
        // with it in memory, a batch costs memcpys, not a temporary file's open, writes and
        // close.
        conn.execute_batch(&format!(
            "PRAGMA auto_vacuum = INCREMENTAL;
             PRAGMA journal_mode = WAL;
             PRAGMA foreign_keys = ON;
             PRAGMA temp_store = MEMORY;
             {};",
            self.synchronous.pragma()
        ))
        .map_err(unavailable)?;
        // Replaces SQLite's automatic checkpoint (which would copy the WAL into the database,
        // and fsync it, inside the commit that crossed 1000 pages, on the writer thread): the
        // writer hands checkpoints to a thread of their own (see `writer::Checkpointer`).
        conn.wal_hook(Some(note_wal_pages));
        Ok(Conn::new(conn))
    }

    /// A reader's connection: the file must exist (the writer created it).
    pub(super) fn reader(&self) -> Result<Conn, LedgerError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags).map_err(unavailable)?;
        conn.busy_timeout(self.busy_timeout).map_err(unavailable)?;
        conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;")
            .map_err(unavailable)?;
        Ok(Conn::new(conn))
    }
}

thread_local! {
    /// Pages in the WAL after the last commit on this thread's writer connection.
    static WAL_PAGES: StdCell<i32> = const { StdCell::new(0) };
}

/// SQLite's WAL hook on the writer connection: called after each commit with the WAL's size.
fn note_wal_pages(_: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|p| p.set(pages));
    Ok(())
}

/// Pages in the WAL after the last commit of the writer connection on this thread.
pub(super) fn wal_pages() -> i32 {
    WAL_PAGES.with(StdCell::get)
}

/// A private in-memory database on one connection.
pub(super) fn in_memory() -> Result<Conn, LedgerError> {
    let conn = Connection::open_in_memory().map_err(unavailable)?;
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;")
        .map_err(unavailable)?;
    Ok(Conn::new(conn))
}

/// A connection with its prepared statements and the column names of each.
pub(crate) struct Conn {
    conn: Connection,
    /// The column names of each fixed statement, shared by every row it returns.
    names: HashMap<usize, Arc<[Box<str>]>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").finish_non_exhaustive()
    }
}

impl Conn {
    fn new(conn: Connection) -> Self {
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Self {
            conn,
            names: HashMap::new(),
        }
    }

    /// The connection itself.
    pub(super) fn raw(&self) -> &Connection {
        &self.conn
    }

    /// Runs a statement that returns no rows; the number of rows it changed.
    pub(super) fn execute(&self, sql: &str, args: &[Value]) -> Result<usize, LedgerError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(unavailable)?;
        stmt.execute(params_from_iter(args)).map_err(unavailable)
    }

    /// Runs `sql` (a fixed text: its column names are kept) and reads every row it returns.
    pub(super) fn rows(
        &mut self,
        sql: &'static str,
        args: &[Value],
    ) -> Result<Vec<SqlRow>, LedgerError> {
        let key = sql.as_ptr() as usize;
        let mut stmt = self.conn.prepare_cached(sql).map_err(unavailable)?;
        let names = self
            .names
            .entry(key)
            .or_insert_with(|| column_names(&stmt))
            .clone();
        read_rows(&mut stmt, names, args)
    }

    /// Runs a statement built at run time (a listing, a retention scan) and reads its rows.
    pub(super) fn rows_dynamic(
        &self,
        sql: &str,
        args: &[Value],
    ) -> Result<Vec<SqlRow>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(unavailable)?;
        let names = column_names(&stmt);
        read_rows(&mut stmt, names, args)
    }

    /// The first row `sql` returns, if any.
    pub(super) fn row(
        &mut self,
        sql: &'static str,
        args: &[Value],
    ) -> Result<Option<SqlRow>, LedgerError> {
        Ok(self.rows(sql, args)?.into_iter().next())
    }

    /// Whether `sql` returns any row.
    pub(super) fn exists(&self, sql: &str, args: &[Value]) -> Result<bool, LedgerError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(unavailable)?;
        let mut rows = stmt.query(params_from_iter(args)).map_err(unavailable)?;
        Ok(rows.next().map_err(unavailable)?.is_some())
    }

    /// The one integer column of the first row of `sql`, if it has a row (`NULL` is `None`).
    pub(super) fn scalar_i64(&self, sql: &str, args: &[Value]) -> Result<Option<i64>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(unavailable)?;
        let mut rows = stmt.query(params_from_iter(args)).map_err(unavailable)?;
        match rows.next().map_err(unavailable)? {
            None => Ok(None),
            Some(row) => row.get::<_, Option<i64>>(0).map_err(unavailable),
        }
    }

    /// A `PASSIVE` checkpoint: copies what it can of the WAL into the database, never waiting
    /// for readers or the writer. A failure is logged; the next checkpoint tries again.
    pub(super) fn checkpoint(&self) -> Result<(), LedgerError> {
        self.rows_dynamic("PRAGMA wal_checkpoint(PASSIVE)", &[])
            .map(drop)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "SQLite ledger: WAL checkpoint failed; will retry");
            })
    }

    /// Runs `sql`, a fixed text without parameters (`BEGIN IMMEDIATE`, `COMMIT`, a pragma).
    pub(super) fn run(&self, sql: &str) -> Result<(), rusqlite::Error> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Whether a transaction is open on this connection.
    pub(super) fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }
}

fn column_names(stmt: &rusqlite::Statement<'_>) -> Arc<[Box<str>]> {
    stmt.column_names().into_iter().map(Box::from).collect()
}

fn read_rows(
    stmt: &mut rusqlite::Statement<'_>,
    names: Arc<[Box<str>]>,
    args: &[Value],
) -> Result<Vec<SqlRow>, LedgerError> {
    let n = names.len();
    let mut rows = stmt.query(params_from_iter(args)).map_err(unavailable)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(unavailable)? {
        let mut cells = Vec::with_capacity(n);
        for i in 0..n {
            cells.push(Cell::from(row.get_ref(i).map_err(unavailable)?));
        }
        out.push(SqlRow {
            names: names.clone(),
            cells,
        });
    }
    Ok(out)
}

/// One stored value, as SQLite holds it. Text is kept as bytes: whether it is UTF-8 is a
/// question for decoding (a row that is not is corrupt, never a panic).
#[derive(Clone, Debug)]
pub(crate) enum Cell {
    Null,
    Integer(i64),
    /// A floating-point number: the ledger stores none, so its value is never read.
    Real,
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl From<ValueRef<'_>> for Cell {
    fn from(v: ValueRef<'_>) -> Self {
        match v {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(i) => Cell::Integer(i),
            ValueRef::Real(_) => Cell::Real,
            ValueRef::Text(t) => Cell::Text(t.to_vec()),
            ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
        }
    }
}

impl Cell {
    fn type_name(&self) -> &'static str {
        match self {
            Cell::Null => "NULL",
            Cell::Integer(_) => "INTEGER",
            Cell::Real => "REAL",
            Cell::Text(_) => "TEXT",
            Cell::Blob(_) => "BLOB",
        }
    }
}

/// A row read from a statement: its cells, and the statement's column names.
#[derive(Clone, Debug)]
pub(crate) struct SqlRow {
    names: Arc<[Box<str>]>,
    cells: Vec<Cell>,
}

impl SqlRow {
    /// The cell of `column`.
    fn cell(&self, column: &str) -> Result<&Cell, String> {
        self.names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(column))
            .map(|i| &self.cells[i])
            .ok_or_else(|| "no such column".to_owned())
    }

    /// The value of `column` as a `T`; why not if it cannot be.
    pub(crate) fn try_get<T: FromCell>(&self, column: &str) -> Result<T, String> {
        T::from_cell(self.cell(column)?)
    }

    /// The value of column `i` as a `T`.
    pub(crate) fn try_get_at<T: FromCell>(&self, i: usize) -> Result<T, String> {
        T::from_cell(self.cells.get(i).ok_or_else(|| format!("no column {i}"))?)
    }
}

/// A Rust value a [`Cell`] can be read as.
pub(crate) trait FromCell: Sized {
    fn from_cell(cell: &Cell) -> Result<Self, String>;
}

fn mismatch(want: &str, cell: &Cell) -> String {
    format!("expected {want}, found {}", cell.type_name())
}

impl FromCell for i64 {
    fn from_cell(cell: &Cell) -> Result<Self, String> {
        match cell {
            Cell::Integer(i) => Ok(*i),
            other => Err(mismatch("INTEGER", other)),
        }
    }
}

impl FromCell for String {
    fn from_cell(cell: &Cell) -> Result<Self, String> {
        match cell {
            Cell::Text(t) => {
                String::from_utf8(t.clone()).map_err(|e| format!("text is not UTF-8: {e}"))
            }
            other => Err(mismatch("TEXT", other)),
        }
    }
}

impl FromCell for Vec<u8> {
    fn from_cell(cell: &Cell) -> Result<Self, String> {
        match cell {
            Cell::Blob(b) | Cell::Text(b) => Ok(b.clone()),
            other => Err(mismatch("BLOB", other)),
        }
    }
}

impl<T: FromCell> FromCell for Option<T> {
    fn from_cell(cell: &Cell) -> Result<Self, String> {
        match cell {
            Cell::Null => Ok(None),
            other => T::from_cell(other).map(Some),
        }
    }
}

/// Builds a statement's parameters in order (`?1`, `?2`, ...).
#[derive(Debug, Default)]
pub(super) struct Args(pub(super) Vec<Value>);

impl Args {
    pub(super) fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n))
    }

    /// Appends the next parameter.
    pub(super) fn push(&mut self, v: impl IntoValue) -> &mut Self {
        self.0.push(v.into_value());
        self
    }
}

/// What may be bound as a parameter.
pub(super) trait IntoValue {
    fn into_value(self) -> Value;
}

impl IntoValue for i64 {
    fn into_value(self) -> Value {
        Value::Integer(self)
    }
}

impl IntoValue for bool {
    fn into_value(self) -> Value {
        Value::Integer(i64::from(self))
    }
}

impl IntoValue for String {
    fn into_value(self) -> Value {
        Value::Text(self)
    }
}

impl IntoValue for &str {
    fn into_value(self) -> Value {
        Value::Text(self.to_owned())
    }
}

impl IntoValue for Vec<u8> {
    fn into_value(self) -> Value {
        Value::Blob(self)
    }
}

impl<T: IntoValue> IntoValue for Option<T> {
    fn into_value(self) -> Value {
        match self {
            None => Value::Null,
            Some(v) => v.into_value(),
        }
    }
}

impl IntoValue for Value {
    fn into_value(self) -> Value {
        self
    }
}
