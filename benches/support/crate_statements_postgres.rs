//! The "same statements" PostgreSQL reference of `ledger_commit` (feature `postgres`): the rows
//! one request through the layer writes, with the statements the crate ran before migration
//! 0009 (two CTE statements, planned at every execution), on the crate's own schema, over a
//! bare sqlx `PgPool` of 8 connections. NOT a limit: it measures the crate's schema and
//! statement shapes against themselves (issue 29); the limit is `minimal_postgres.rs`.
//!
//! Per operation, as the crate's PostgresLedger `create_and_apply` then `apply` (each one
//! statement, one round trip, its own implicit transaction, committed before it returns):
//! 1. one statement inserting the claimed operation row and, through a CTE, its two evidence
//!    rows;
//! 2. one statement with the crate's conditional `UPDATE` and, through a CTE, its evidence row.
//!
//! Unlike the crate's statements, these read no clock (the values come bound) and return a
//! count instead of the whole row. The tables are the crate's: a schema the crate migrated.
//! The values are those of the operation the SQLite reference was built from (see
//! `raw_sqlite::Template`), with the operation id and intent made unique and a fresh random
//! idempotency key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::types::Value;
use sqlx::postgres::{PgArguments, PgPool};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Postgres};

use crate::raw_sqlite::{Template, random_key, unique};

/// The PostgreSQL type of each column of `raw_sqlite::OPERATION_COLUMNS`.
const OPERATION_TYPES: [Ty; 31] = {
    use Ty::*;
    [
        Text, Text, Text, Text, Text, Text, Text, Text, Text, Bytea, Text, Text, Text, Text, Text,
        Int8, Int8, Int8, Int8, Bool, Text, Int8, Int8, Int8, Text, Text, Int4, Text, Bytea, Int8,
        Int8,
    ]
};

/// The PostgreSQL type of each column of `raw_sqlite::EVIDENCE_COLUMNS`.
const EVIDENCE_TYPES: [Ty; 10] = {
    use Ty::*;
    [Text, Text, Text, Int8, Text, Text, Text, Text, Text, Int8]
};

#[derive(Clone, Copy)]
enum Ty {
    Text,
    Int8,
    Int4,
    Bool,
    Bytea,
}

type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// Binds `v` as a `ty`.
fn bind<'q>(q: PgQuery<'q>, v: &'q Value, ty: Ty) -> PgQuery<'q> {
    match (ty, v) {
        (Ty::Text, Value::Text(s)) => q.bind(s.as_str()),
        (Ty::Text, Value::Null) => q.bind(None::<&str>),
        (Ty::Int8, Value::Integer(i)) => q.bind(*i),
        (Ty::Int8, Value::Null) => q.bind(None::<i64>),
        (Ty::Int4, Value::Integer(i)) => q.bind(*i as i32),
        (Ty::Int4, Value::Null) => q.bind(None::<i32>),
        (Ty::Bool, Value::Integer(i)) => q.bind(*i != 0),
        (Ty::Bytea, Value::Blob(b)) => q.bind(b.as_slice()),
        (Ty::Bytea, Value::Null) => q.bind(None::<&[u8]>),
        _ => panic!("unexpected template value {v:?}"),
    }
}

/// The reference over its own pool, on the tables of `schema`.
#[derive(Clone)]
pub struct CrateStatementsPostgres {
    pool: PgPool,
    insert: Arc<str>,
    update: Arc<str>,
    template: Arc<Template>,
    next: Arc<AtomicU64>,
}

impl CrateStatementsPostgres {
    /// The reference on `pool`, writing to the crate's tables in `schema` (migrated).
    pub fn new(pool: PgPool, schema: &str, template: Template) -> Self {
        let ops = format!("\"{schema}\".rw_operations");
        let ev = format!("\"{schema}\".rw_evidence");
        let placeholders: Vec<String> = (1..=31).map(|i| format!("${i}")).collect();
        let insert = format!(
            "WITH ins AS (
    INSERT INTO {ops} ({cols}) VALUES ({values})
    ON CONFLICT DO NOTHING
    RETURNING tenant, operation_id
),
ev AS (
    INSERT INTO {ev} ({ev_cols})
    SELECT ins.tenant, ins.operation_id, e.attempt_id, e.generation, e.kind, e.from_state,
           e.to_state, e.evidence, e.note, e.at_ms
    FROM ins, (VALUES
        (1, $32::text, $33::bigint, $34::text, $35::text, $36::text, $37::text, $38::text,
         $39::bigint),
        (2, $40::text, $41::bigint, $42::text, $43::text, $44::text, $45::text, $46::text,
         $47::bigint)
    ) AS e(ord, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms)
    ORDER BY e.ord
)
SELECT count(*) FROM ins",
            cols = crate::raw_sqlite::OPERATION_COLUMNS,
            values = placeholders.join(", "),
            ev_cols = crate::raw_sqlite::EVIDENCE_COLUMNS,
        );
        let update = format!(
            "WITH upd AS (
    UPDATE {ops} AS o SET
        state = $1::text,
        last_result = $2::text,
        generation = $3::bigint,
        attempts_used = $4::bigint,
        queries_used = $5::bigint,
        may_have_applied = CASE WHEN $6::boolean THEN $7::boolean
                                ELSE (o.may_have_applied OR $7::boolean) END,
        current_attempt = $8::text,
        lease_until_ms = $9::bigint,
        next_check_ms = $10::bigint,
        deadline_ms = $11::bigint,
        remote_ref = $12::text,
        reason = $13::text,
        response_status = $14::integer,
        response_headers = $15::text,
        response_body = $16::bytea,
        updated_ms = $17::bigint,
        version = o.version + 1
    WHERE o.tenant = $18::text AND o.operation_id = $19::text
      AND o.state = $20::text AND o.generation = $21::bigint AND o.version = $22::bigint
      AND NOT ($1::text = 'REJECTED' AND o.may_have_applied AND NOT $23::boolean)
    RETURNING o.tenant, o.operation_id
),
ev AS (
    INSERT INTO {ev} ({ev_cols})
    SELECT upd.tenant, upd.operation_id, $24::text, $25::bigint, $26::text, $27::text,
           $28::text, $29::text, $30::text, $31::bigint
    FROM upd
)
SELECT count(*) FROM upd",
            ev_cols = crate::raw_sqlite::EVIDENCE_COLUMNS,
        );
        Self {
            pool,
            insert: insert.into(),
            update: update.into(),
            template: Arc::new(template),
            next: Arc::new(AtomicU64::new(0)),
        }
    }

    /// One operation: its two statements, each committed before the next.
    pub async fn lifecycle(&self) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let t = &*self.template;
        let (id, intent, key) = (
            unique(&t.claimed[1], n),
            unique(&t.claimed[3], n),
            random_key(),
        );

        let mut query = sqlx::query(AssertSqlSafe(self.insert.clone()));
        for (i, (v, ty)) in t.claimed.iter().zip(OPERATION_TYPES).enumerate() {
            let v = match i {
                1 => &id,
                3 => &intent,
                4 => &key,
                _ => v,
            };
            query = bind(query, v, ty);
        }
        for entry in &t.first_entries {
            // The tenant and operation id come from the inserted row.
            for (v, ty) in entry.iter().zip(EVIDENCE_TYPES).skip(2) {
                query = bind(query, v, ty);
            }
        }
        let inserted: i64 = sqlx::Row::get(
            &query.fetch_one(&self.pool).await.expect("reference insert"),
            0,
        );
        assert_eq!(inserted, 1, "reference insert");

        let (f, c) = (&t.finished, &t.claimed);
        let zero = Value::Integer(0);
        let params: [(&Value, Ty); 23] = [
            (&f[13], Ty::Text),
            (&f[14], Ty::Text),
            (&f[15], Ty::Int8),
            (&f[17], Ty::Int8),
            (&f[18], Ty::Int8),
            (&zero, Ty::Bool),
            (&f[19], Ty::Bool),
            (&f[20], Ty::Text),
            (&f[21], Ty::Int8),
            (&f[22], Ty::Int8),
            (&f[23], Ty::Int8),
            (&f[24], Ty::Text),
            (&f[25], Ty::Text),
            (&f[26], Ty::Int4),
            (&f[27], Ty::Text),
            (&f[28], Ty::Bytea),
            (&f[30], Ty::Int8),
            (&f[0], Ty::Text),
            (&id, Ty::Text),
            (&c[13], Ty::Text),
            (&c[15], Ty::Int8),
            (&c[16], Ty::Int8),
            (&zero, Ty::Bool),
        ];
        let mut query = sqlx::query(AssertSqlSafe(self.update.clone()));
        for (v, ty) in params {
            query = bind(query, v, ty);
        }
        for (v, ty) in t.finish_entry.iter().zip(EVIDENCE_TYPES).skip(2) {
            query = bind(query, v, ty);
        }
        let updated: i64 = sqlx::Row::get(
            &query.fetch_one(&self.pool).await.expect("reference update"),
            0,
        );
        assert_eq!(updated, 1, "reference update");
    }
}
