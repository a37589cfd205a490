//! Row encoding and decoding shared by the SQL backends (SQLite and PostgreSQL): the column
//! lists, the encoding of each value into its column (enums as their names, JSON, times as ms
//! since the Unix epoch, integers in the database's signed range), and typed column access that
//! reports any failure as [`LedgerError::Corrupt`](super::LedgerError::Corrupt), never a panic.
//!
//! Decoding is a macro rather than generic code: the two backends differ only in the row type
//! (and in the column access each implements itself: `get`, `flag` and `status`), and the
//! trait bounds of a generic version would outweigh the code they save.

use super::backend::{NewEvidence, Update};
use super::{CallbackDelivery, LedgerError, OperationRecord, QuarantinedCallback, StoredResponse};
use crate::state::State;

// ── column lists ────────────────────────────────────────────────────────────────────────────────

/// The columns frozen at creation, in table order: tenant and operation id first.
macro_rules! frozen_columns {
    () => {
        "tenant, operation_id, action, intent_ref, idempotency_key, payload_hash,
    request_method, request_url, request_headers, request_body,
    contract_name, contract_hash, budget_policy"
    };
}
pub(crate) use frozen_columns;

/// The columns a new `PREPARED` row sets after [`frozen_columns`] (the others stay NULL).
macro_rules! prepared_columns {
    () => {
        "state, generation, version, attempts_used, queries_used, may_have_applied,
    created_ms, updated_ms"
    };
}
pub(crate) use prepared_columns;

/// Every column after [`frozen_columns`], in table order: what [`RowColumns`] encodes. (The
/// PostgreSQL ledger's claim lists them in its function, migration 0009.)
#[cfg(feature = "sqlite")]
macro_rules! mutable_columns {
    () => {
        "state, last_result, generation, version, attempts_used, queries_used, may_have_applied,
    current_attempt, lease_until_ms, next_check_ms, deadline_ms, remote_ref, reason,
    response_status, response_headers, response_body,
    created_ms, updated_ms"
    };
}
#[cfg(feature = "sqlite")]
pub(crate) use mutable_columns;

/// The evidence table's columns but its id, in table order: what [`EvidenceColumns`] encodes
/// after tenant and operation id.
macro_rules! evidence_columns {
    () => {
        "tenant, operation_id, attempt_id, generation, kind, from_state, to_state, evidence, note, at_ms"
    };
}
pub(crate) use evidence_columns;

// ── encoding ────────────────────────────────────────────────────────────────────────────────────

/// The database a value is encoded for. They differ in the name of their integer type (in error
/// messages) and in text: PostgreSQL text cannot hold NUL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// SQLite: text holds anything.
    #[cfg(feature = "sqlite")]
    Sqlite,
    /// PostgreSQL: free text keeps everything but NUL, shown as U+FFFD.
    #[cfg(feature = "postgres")]
    Postgres,
}

impl Dialect {
    /// An unsigned counter as the database's signed 64-bit integer.
    pub(crate) fn to_i64(self, what: &str, v: u64) -> Result<i64, LedgerError> {
        i64::try_from(v).map_err(|_| {
            let int = match self {
                #[cfg(feature = "sqlite")]
                Dialect::Sqlite => "a SQLite integer",
                #[cfg(feature = "postgres")]
                Dialect::Postgres => "a PostgreSQL bigint",
            };
            LedgerError::Config(format!("{what} {v} exceeds the range of {int}"))
        })
    }

    /// Free text as stored (never a key: keys with NUL are refused by the PostgreSQL backend
    /// before any statement).
    pub(crate) fn text(self, s: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => s.to_owned(),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                if s.contains('\0') {
                    s.replace('\0', "\u{FFFD}")
                } else {
                    s.to_owned()
                }
            }
        }
    }

    /// Optional free text as stored (see [`text`](Self::text)).
    pub(crate) fn opt_text(self, s: Option<&str>) -> Option<String> {
        s.map(|s| self.text(s))
    }
}

/// `v` as JSON text.
pub(crate) fn to_json<T: serde::Serialize>(what: &str, v: &T) -> Result<String, LedgerError> {
    serde_json::to_string(v)
        .map_err(|e| LedgerError::Config(format!("cannot serialize {what}: {e}")))
}

/// A stored response encoded for its three columns (all NULL without a response).
pub(crate) struct ResponseColumns {
    pub(crate) status: Option<u16>,
    pub(crate) headers: Option<String>,
    pub(crate) body: Option<Vec<u8>>,
}

impl ResponseColumns {
    pub(crate) fn encode(r: Option<&StoredResponse>) -> Result<Self, LedgerError> {
        Ok(match r {
            Some(r) => Self {
                status: Some(r.status),
                headers: Some(to_json("response headers", &r.headers)?),
                body: Some(r.body.to_vec()),
            },
            None => Self {
                status: None,
                headers: None,
                body: None,
            },
        })
    }
}

/// An evidence entry encoded for its columns after tenant and operation id
/// ([`evidence_columns`]).
pub(crate) struct EvidenceColumns {
    pub(crate) attempt_id: Option<String>,
    pub(crate) generation: i64,
    pub(crate) kind: String,
    pub(crate) from_state: Option<&'static str>,
    pub(crate) to_state: Option<&'static str>,
    pub(crate) evidence: Option<String>,
    pub(crate) note: Option<String>,
    pub(crate) at_ms: i64,
}

impl EvidenceColumns {
    pub(crate) fn encode(e: NewEvidence, d: Dialect) -> Result<Self, LedgerError> {
        Ok(Self {
            attempt_id: e.attempt_id.map(|a| a.to_stored()),
            generation: d.to_i64("generation", e.generation.0)?,
            kind: d.text(&e.kind),
            from_state: e.from_state.map(State::as_str),
            to_state: e.to_state.map(State::as_str),
            evidence: e
                .evidence
                .as_ref()
                .map(|ev| to_json("evidence", ev))
                .transpose()?,
            note: d.opt_text(e.note.as_deref()),
            at_ms: e.at_ms,
        })
    }
}

/// A whole operation row encoded for its columns ([`frozen_columns`] then
/// [`mutable_columns`]).
pub(crate) struct RowColumns {
    pub(crate) tenant: String,
    pub(crate) operation_id: String,
    pub(crate) action: String,
    pub(crate) intent_ref: String,
    pub(crate) idempotency_key: String,
    pub(crate) payload_hash: String,
    pub(crate) request_method: String,
    pub(crate) request_url: String,
    pub(crate) request_headers: String,
    pub(crate) request_body: Vec<u8>,
    pub(crate) contract_name: String,
    pub(crate) contract_hash: String,
    pub(crate) budget_policy: String,
    pub(crate) state: &'static str,
    pub(crate) last_result: Option<&'static str>,
    pub(crate) generation: i64,
    /// Not bound by PostgreSQL, which sets the version of a row it inserts claimed itself.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) version: i64,
    pub(crate) attempts_used: i64,
    pub(crate) queries_used: i64,
    pub(crate) may_have_applied: bool,
    pub(crate) current_attempt: Option<String>,
    pub(crate) lease_until_ms: Option<i64>,
    pub(crate) next_check_ms: Option<i64>,
    pub(crate) deadline_ms: Option<i64>,
    pub(crate) remote_ref: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) response: ResponseColumns,
    /// Not bound by PostgreSQL, which creates rows on the statement's clock.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) created_ms: i64,
    pub(crate) updated_ms: i64,
}

impl RowColumns {
    pub(crate) fn encode(r: &OperationRecord, d: Dialect) -> Result<Self, LedgerError> {
        Ok(Self {
            tenant: r.tenant.as_str().to_owned(),
            operation_id: r.operation_id.as_str().to_owned(),
            action: r.action.to_string(),
            intent_ref: r.intent_ref.to_string(),
            idempotency_key: r.idempotency_key.as_str().to_owned(),
            payload_hash: r.payload_hash.as_str().to_owned(),
            request_method: r.request.method.as_str().to_owned(),
            request_url: r.request.url.clone(),
            request_headers: to_json("request headers", &r.request.headers)?,
            request_body: r.request.body.to_vec(),
            contract_name: r.contract.name.to_string(),
            contract_hash: r.contract.hash.to_string(),
            budget_policy: to_json("budget policy", &r.policy)?,
            state: r.state.as_str(),
            last_result: r.last_result.map(State::as_str),
            generation: d.to_i64("generation", r.generation.0)?,
            version: d.to_i64("version", r.version)?,
            attempts_used: i64::from(r.attempts_used),
            queries_used: i64::from(r.queries_used),
            may_have_applied: r.may_have_applied,
            current_attempt: r.current_attempt.map(|a| a.to_stored()),
            lease_until_ms: r.lease_until_ms,
            next_check_ms: r.next_check_ms,
            deadline_ms: r.deadline_ms,
            remote_ref: d.opt_text(r.remote_ref.as_deref()),
            reason: d.opt_text(r.reason.as_deref()),
            response: ResponseColumns::encode(r.response.as_ref())?,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
        })
    }
}

/// A conditional update encoded: the new values of the mutable columns, the precondition and
/// the evidence entry.
pub(crate) struct UpdateColumns {
    pub(crate) tenant: String,
    pub(crate) operation_id: String,
    pub(crate) state: &'static str,
    pub(crate) last_result: Option<&'static str>,
    pub(crate) generation: i64,
    pub(crate) attempts_used: i64,
    pub(crate) queries_used: i64,
    pub(crate) reset_may_have_applied: bool,
    pub(crate) may_have_applied: bool,
    pub(crate) current_attempt: Option<String>,
    pub(crate) lease_until_ms: Option<i64>,
    pub(crate) next_check_ms: Option<i64>,
    pub(crate) deadline_ms: Option<i64>,
    pub(crate) remote_ref: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) response: ResponseColumns,
    pub(crate) now_ms: i64,
    pub(crate) expect_state: &'static str,
    pub(crate) expect_generation: i64,
    pub(crate) expect_version: i64,
    pub(crate) operation_level: bool,
    pub(crate) evidence: EvidenceColumns,
}

impl UpdateColumns {
    pub(crate) fn encode(u: Update, d: Dialect) -> Result<Self, LedgerError> {
        let c = &u.changes;
        Ok(Self {
            state: c.state.as_str(),
            last_result: c.last_result.map(State::as_str),
            generation: d.to_i64("generation", c.generation.0)?,
            attempts_used: i64::from(c.attempts_used),
            queries_used: i64::from(c.queries_used),
            reset_may_have_applied: c.reset_may_have_applied,
            may_have_applied: c.may_have_applied,
            current_attempt: c.current_attempt.map(|a| a.to_stored()),
            lease_until_ms: c.lease_until_ms,
            next_check_ms: c.next_check_ms,
            deadline_ms: c.deadline_ms,
            remote_ref: d.opt_text(c.remote_ref.as_deref()),
            reason: d.opt_text(c.reason.as_deref()),
            response: ResponseColumns::encode(c.response.as_ref())?,
            now_ms: c.now_ms,
            expect_state: u.expect_state.as_str(),
            expect_generation: d.to_i64("generation", u.expect_generation.0)?,
            expect_version: d.to_i64("version", u.expect_version)?,
            operation_level: u.operation_level,
            tenant: u.tenant.as_str().to_owned(),
            operation_id: u.operation_id.as_str().to_owned(),
            evidence: EvidenceColumns::encode(u.evidence, d)?,
        })
    }
}

/// A dedupe record encoded for the `rw_callback_events` columns, in table order.
pub(crate) struct CallbackEventColumns {
    pub(crate) vendor: String,
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) tenant: Option<String>,
    pub(crate) operation_id: Option<String>,
    pub(crate) outcome: &'static str,
    pub(crate) received_ms: i64,
}

impl CallbackEventColumns {
    /// The record of a matched delivery.
    pub(crate) fn delivery(d: &CallbackDelivery, outcome: &'static str, dialect: Dialect) -> Self {
        Self {
            vendor: dialect.text(&d.vendor),
            event_id: dialect.text(&d.event_id),
            event_type: dialect.text(&d.event_type),
            tenant: Some(d.tenant.as_str().to_owned()),
            operation_id: Some(d.operation_id.as_str().to_owned()),
            outcome,
            received_ms: d.received_at_ms,
        }
    }

    /// The record of a quarantined event.
    pub(crate) fn quarantined(q: &QuarantinedCallback, dialect: Dialect) -> Self {
        Self {
            vendor: dialect.text(&q.vendor),
            event_id: dialect.text(&q.event_id),
            event_type: dialect.text(&q.event_type),
            tenant: q.tenant.as_ref().map(|t| dialect.text(t.as_str())),
            operation_id: None,
            outcome: super::callback::QUARANTINED,
            received_ms: q.received_at_ms,
        }
    }

    /// The record of an event of an ignored type.
    pub(crate) fn ignored(e: &super::IgnoredCallback, dialect: Dialect) -> Self {
        Self {
            vendor: dialect.text(&e.vendor),
            event_id: dialect.text(&e.event_id),
            event_type: dialect.text(&e.event_type),
            tenant: e.tenant.as_ref().map(|t| dialect.text(t.as_str())),
            operation_id: None,
            outcome: super::callback::IGNORED,
            received_ms: e.received_at_ms,
        }
    }
}

/// A quarantined callback encoded for the `rw_callback_quarantine` columns, in table order.
pub(crate) struct QuarantinedCallbackColumns {
    pub(crate) vendor: String,
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) tenant: Option<String>,
    pub(crate) match_by: Option<String>,
    pub(crate) match_value: Option<String>,
    pub(crate) reason: String,
    pub(crate) evidence: Option<String>,
    pub(crate) received_ms: i64,
}

impl QuarantinedCallbackColumns {
    pub(crate) fn encode(q: QuarantinedCallback, d: Dialect) -> Result<Self, LedgerError> {
        Ok(Self {
            vendor: d.text(&q.vendor),
            event_id: d.text(&q.event_id),
            event_type: d.text(&q.event_type),
            tenant: q.tenant.as_ref().map(|t| d.text(t.as_str())),
            match_by: d.opt_text(q.match_by.as_deref()),
            match_value: d.opt_text(q.match_value.as_deref()),
            reason: d.text(&q.reason),
            evidence: q
                .evidence
                .as_ref()
                .map(|ev| to_json("evidence", ev))
                .transpose()?,
            received_ms: q.received_at_ms,
        })
    }
}

// ── decoding ────────────────────────────────────────────────────────────────────────────────────

/// Defines `Columns`, `decode_operation` and `decode_evidence` for a row type. The caller
/// implements `Columns::get` (a typed column: `i64`, `String`, `Vec<u8>` and their `Option`s),
/// `Columns::flag` (a boolean column) and `Columns::status` (the stored HTTP status).
macro_rules! row_decoder {
    ($row:ty) => {
        /// Typed column access that reports any failure as [`LedgerError::Corrupt`].
        struct Columns<'r> {
            row: &'r $row,
            operation: String,
        }

        impl<'r> Columns<'r> {
            fn new(row: &'r $row, operation: &str) -> Self {
                Self {
                    row,
                    operation: operation.to_owned(),
                }
            }

            fn corrupt(&self, detail: impl Into<String>) -> LedgerError {
                LedgerError::Corrupt {
                    operation: self.operation.clone(),
                    detail: detail.into(),
                }
            }

            fn text(&self, column: &str) -> Result<String, LedgerError> {
                self.get::<String>(column)
            }

            fn opt_text(&self, column: &str) -> Result<Option<String>, LedgerError> {
                self.get::<Option<String>>(column)
            }

            fn state(&self, column: &str) -> Result<State, LedgerError> {
                let s = self.text(column)?;
                State::from_str(&s).map_err(|e| self.corrupt(format!("column {column}: {e}")))
            }

            fn opt_state(&self, column: &str) -> Result<Option<State>, LedgerError> {
                self.opt_text(column)?
                    .map(|s| {
                        State::from_str(&s)
                            .map_err(|e| self.corrupt(format!("column {column}: {e}")))
                    })
                    .transpose()
            }

            fn u64(&self, column: &str) -> Result<u64, LedgerError> {
                let v = self.get::<i64>(column)?;
                u64::try_from(v)
                    .map_err(|_| self.corrupt(format!("column {column}: negative value {v}")))
            }

            fn u32(&self, column: &str) -> Result<u32, LedgerError> {
                let v = self.get::<i64>(column)?;
                u32::try_from(v)
                    .map_err(|_| self.corrupt(format!("column {column}: value {v} out of range")))
            }

            fn attempt(&self, column: &str) -> Result<Option<AttemptId>, LedgerError> {
                self.opt_text(column)?
                    .map(|s| {
                        AttemptId::parse(&s).ok_or_else(|| {
                            self.corrupt(format!("column {column}: bad attempt id {s:?}"))
                        })
                    })
                    .transpose()
            }

            fn json<T: serde::de::DeserializeOwned>(&self, column: &str) -> Result<T, LedgerError> {
                let s = self.text(column)?;
                serde_json::from_str(&s).map_err(|e| self.corrupt(format!("column {column}: {e}")))
            }

            fn opt_json<T: serde::de::DeserializeOwned>(
                &self,
                column: &str,
            ) -> Result<Option<T>, LedgerError> {
                self.opt_text(column)?
                    .map(|s| {
                        serde_json::from_str(&s)
                            .map_err(|e| self.corrupt(format!("column {column}: {e}")))
                    })
                    .transpose()
            }

            fn blob(&self, column: &str) -> Result<Bytes, LedgerError> {
                // An empty blob may come back as NULL from some bindings: both mean "no bytes".
                Ok(self
                    .get::<Option<Vec<u8>>>(column)?
                    .map(Bytes::from)
                    .unwrap_or_default())
            }
        }

        fn decode_operation(row: &$row) -> Result<OperationRecord, LedgerError> {
            let operation =
                Columns::new(row, "<unreadable operation id>").text("operation_id")?;
            let c = Columns::new(row, &operation);
            let response = match c.status("response_status")? {
                None => None,
                Some(status) => Some(StoredResponse {
                    status,
                    headers: c.opt_json("response_headers")?.ok_or_else(|| {
                        c.corrupt("column response_headers: missing with a status")
                    })?,
                    body: c.blob("response_body")?,
                }),
            };
            Ok(OperationRecord {
                tenant: Tenant::new(c.text("tenant")?),
                operation_id: OperationId::new(operation.clone()),
                action: c.text("action")?.into(),
                intent_ref: c.text("intent_ref")?.into(),
                idempotency_key: IdempotencyKey::from_stored(c.text("idempotency_key")?),
                payload_hash: PayloadHash::from_stored(c.text("payload_hash")?),
                request: std::sync::Arc::new(FrozenRequest {
                    method: {
                        let m = c.text("request_method")?;
                        http::Method::from_bytes(m.as_bytes())
                            .map_err(|e| c.corrupt(format!("column request_method: {e}")))?
                    },
                    url: c.text("request_url")?,
                    headers: c.json("request_headers")?,
                    body: c.blob("request_body")?,
                }),
                contract: ContractRef {
                    name: c.text("contract_name")?.into(),
                    hash: c.text("contract_hash")?.into(),
                },
                policy: {
                    let stored = c.text("budget_policy")?;
                    $crate::ledger::codec::stored_policy(&stored)
                        .map_err(|e| c.corrupt(format!("column budget_policy: {e}")))?
                },
                state: c.state("state")?,
                last_result: c.opt_state("last_result")?,
                generation: Generation(c.u64("generation")?),
                version: c.u64("version")?,
                attempts_used: c.u32("attempts_used")?,
                queries_used: c.u32("queries_used")?,
                may_have_applied: c.flag("may_have_applied")?,
                current_attempt: c.attempt("current_attempt")?,
                lease_until_ms: c.get("lease_until_ms")?,
                next_check_ms: c.get("next_check_ms")?,
                deadline_ms: c.get("deadline_ms")?,
                remote_ref: c.opt_text("remote_ref")?,
                reason: c.opt_text("reason")?,
                response,
                created_ms: c.get("created_ms")?,
                updated_ms: c.get("updated_ms")?,
                details_removed_ms: c.get("details_removed_ms")?,
                contradiction_ms: c.get("contradiction_ms")?,
            })
        }

        /// A listing page from the rows of [`list_sql`](super::query::list_sql) (one more
        /// than `limit` when another page follows). Quarantined rows, and rows that cannot be
        /// decoded (logged), are reported by their raw columns; only the key columns must be
        /// readable.
        fn decode_page(rows: &[$row], limit: u32) -> Result<Page, LedgerError> {
            let limit = limit as usize;
            let mut page = Page::new(Vec::new(), None, Vec::new());
            for row in rows.iter().take(limit) {
                let c = Columns::new(row, "<listed row>");
                let quarantine = c.opt_text("quarantine_reason")?;
                match (decode_operation(row), quarantine) {
                    (Ok(r), None) => page.rows.push(r),
                    // Quarantined: recovery skips it whether or not it decodes now.
                    (decoded, Some(reason)) => {
                        let at = c.get::<Option<i64>>("quarantined_ms")?;
                        let (error, readable) = match decoded {
                            Ok(_) => (reason, true),
                            Err(e) => ($crate::ledger::codec::corrupt_detail(&e), false),
                        };
                        page.skipped
                            .push(decode_skipped(row, error, Some(at.unwrap_or_default()), readable)?);
                    }
                    (Err(e), None) => {
                        let skipped = decode_skipped(row, $crate::ledger::codec::corrupt_detail(&e), None, false)?;
                        tracing::error!(
                            tenant = skipped.tenant.as_str(),
                            operation_id = skipped.operation_id.as_str(),
                            error = %skipped.error,
                            "listing skipped a ledger row that cannot be decoded"
                        );
                        page.skipped.push(skipped);
                    }
                }
            }
            if rows.len() > limit {
                if let Some(last) = limit.checked_sub(1).and_then(|i| rows.get(i)) {
                    let c = Columns::new(last, "<listed row>");
                    page.next = Some(super::query::Cursor::new(
                        c.get::<i64>("created_ms")?,
                        c.get::<i64>("rw_key")?,
                    ));
                }
            }
            Ok(page)
        }

        /// A row reported by its raw columns: the key columns, the stored state and times must
        /// be readable; every other column is read on its own.
        fn decode_skipped(
            row: &$row,
            error: String,
            quarantined_ms: Option<i64>,
            readable: bool,
        ) -> Result<super::SkippedRow, LedgerError> {
            let c = Columns::new(row, "<listed row>");
            Ok(super::SkippedRow {
                tenant: Tenant::new(c.text("tenant")?),
                operation_id: OperationId::new(c.text("operation_id")?),
                error,
                state: c.text("state")?,
                created_ms: c.get("created_ms")?,
                updated_ms: c.get("updated_ms")?,
                quarantined_ms,
                readable,
                columns: decode_raw(row),
            })
        }

        /// Every column a person may see of a row, each read on its own (see
        /// [`RawColumns`](super::RawColumns)).
        fn decode_raw(row: &$row) -> super::RawColumns {
            use $crate::ledger::codec::readable as ok;
            let c = Columns::new(row, "<raw row>");
            let mut bad = Vec::new();
            let b = &mut bad;
            let mut raw = super::RawColumns::default();
            raw.action = ok("action", c.text("action"), b);
            raw.intent_ref = ok("intent_ref", c.text("intent_ref"), b);
            raw.last_result = ok("last_result", c.opt_text("last_result"), b).flatten();
            raw.version = ok("version", c.u64("version"), b);
            raw.generation = ok("generation", c.u64("generation"), b);
            raw.attempts_used = ok("attempts_used", c.u32("attempts_used"), b);
            raw.queries_used = ok("queries_used", c.u32("queries_used"), b);
            raw.next_check_ms = ok("next_check_ms", c.get("next_check_ms"), b).flatten();
            raw.lease_until_ms = ok("lease_until_ms", c.get("lease_until_ms"), b).flatten();
            raw.deadline_ms = ok("deadline_ms", c.get("deadline_ms"), b).flatten();
            raw.remote_ref = ok("remote_ref", c.opt_text("remote_ref"), b).flatten();
            raw.reason = ok("reason", c.opt_text("reason"), b).flatten();
            raw.contract_name = ok("contract_name", c.text("contract_name"), b);
            raw.contract_hash = ok("contract_hash", c.text("contract_hash"), b);
            raw.payload_hash = ok("payload_hash", c.text("payload_hash"), b);
            raw.request_method = ok("request_method", c.text("request_method"), b);
            raw.request_url = ok("request_url", c.text("request_url"), b);
            raw.request_header_names = ok(
                "request_headers",
                c.json::<$crate::operation::FrozenHeaders>("request_headers"),
                b,
            )
            .map(|h| h.iter().map(|(name, _)| name.to_owned()).collect());
            raw.request_body = ok("request_body", c.blob("request_body"), b);
            raw.unreadable = bad;
            raw
        }

        /// The activity of [`activity_sql`](super::activity::activity_sql)'s rows.
        fn decode_activity(
            rows: &[$row],
            window: crate::ledger::ActivityWindow,
        ) -> Result<crate::ledger::Activity, LedgerError> {
            let mut cells = Vec::with_capacity(rows.len());
            for row in rows {
                let c = Columns::new(row, "<activity>");
                cells.push([
                    c.get::<i64>("b")?,
                    c.get::<i64>("created")?,
                    c.get::<i64>("finished")?,
                    c.get::<i64>("escalated")?,
                    c.get::<i64>("left_review")?,
                ]);
            }
            Ok(crate::ledger::activity::from_rows(window, cells))
        }

        /// The counts of [`count_sql`](super::query::count_sql)'s rows (`state`, `n`; the
        /// quarantined rows with no state).
        fn decode_counts(rows: &[$row]) -> Result<StateCounts, LedgerError> {
            let mut counts = StateCounts::default();
            for row in rows {
                let c = Columns::new(row, "<state count>");
                match c.opt_state("state")? {
                    Some(state) => counts.set(state, c.u64("n")?),
                    None => counts.set_quarantined(c.u64("n")?),
                }
            }
            Ok(counts)
        }

        fn decode_evidence(row: &$row, id: &OperationId) -> Result<EvidenceEntry, LedgerError> {
            let c = Columns::new(row, id.as_str());
            Ok(EvidenceEntry {
                seq: c.get("id")?,
                entry: NewEvidence {
                    attempt_id: c.attempt("attempt_id")?,
                    generation: Generation(c.u64("generation")?),
                    kind: c.text("kind")?.into(),
                    from_state: c.opt_state("from_state")?,
                    to_state: c.opt_state("to_state")?,
                    evidence: c.opt_json("evidence")?,
                    note: c.opt_text("note")?,
                    at_ms: c.get("at_ms")?,
                },
            })
        }

        /// A row of the `SELECT_QUARANTINED` statement.
        fn decode_quarantined(row: &$row) -> Result<QuarantinedRow, LedgerError> {
            let c = Columns::new(row, "<quarantined row>");
            Ok(QuarantinedRow {
                tenant: Tenant::new(c.text("tenant")?),
                operation_id: OperationId::new(c.text("operation_id")?),
                error: c.text("quarantine_reason")?,
                at_ms: c.get::<Option<i64>>("quarantined_ms")?.unwrap_or_default(),
            })
        }

        /// A row of the callback quarantine.
        fn decode_quarantined_callback(
            row: &$row,
        ) -> Result<$crate::ledger::QuarantinedCallback, LedgerError> {
            let c = Columns::new(row, "<quarantined callback>");
            Ok($crate::ledger::QuarantinedCallback {
                vendor: c.text("vendor")?,
                event_id: c.text("event_id")?,
                event_type: c.text("event_type")?,
                tenant: c.opt_text("tenant")?.map(Tenant::new),
                match_by: c.opt_text("match_by")?,
                match_value: c.opt_text("match_value")?,
                reason: c.text("reason")?,
                evidence: c.opt_json("evidence")?,
                received_at_ms: c.get("received_ms")?,
            })
        }
    };
}

pub(crate) use row_decoder;

// What a row that fails to decode becomes lives with the quarantine; the decoder names it here.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use super::quarantine::{corrupt_detail, quarantine, readable};

/// Reads a budget frozen on a row. A newer version may have added fields: they are ignored here
/// (only the fields this version knows are kept), while `BudgetPolicy`'s own deserialization
/// keeps refusing unknown fields in user configuration, where they are typos. Fields missing
/// from an older row take their defaults, as before.
pub(crate) fn stored_policy(
    stored: &str,
) -> Result<crate::budget::BudgetPolicy, serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_str(stored)?;
    // The fields this version knows: those it writes.
    if let (Some(map), Ok(serde_json::Value::Object(known))) = (
        value.as_object_mut(),
        serde_json::to_value(crate::budget::BudgetPolicy::default()),
    ) {
        map.retain(|field, _| known.contains_key(field));
    }
    serde_json::from_value(value)
}

#[cfg(test)]
mod tests {
    use super::stored_policy;
    use crate::budget::BudgetPolicy;

    #[test]
    fn a_stored_policy_with_a_field_from_a_newer_version_is_read() {
        let mut value = serde_json::to_value(BudgetPolicy {
            max_attempts: 7,
            ..BudgetPolicy::default()
        })
        .unwrap();
        value["added_by_a_newer_version"] = serde_json::json!({"x": 1});
        let stored = value.to_string();
        // User configuration still refuses it; the stored row is read.
        assert!(serde_json::from_str::<BudgetPolicy>(&stored).is_err());
        let policy = stored_policy(&stored).unwrap();
        assert_eq!(policy.max_attempts, 7);
        assert_eq!(stored_policy("{}").unwrap(), BudgetPolicy::default());
        assert!(stored_policy("\"three\"").is_err());
        assert!(stored_policy("{\"max_attempts\": \"many\"}").is_err());
    }
}
