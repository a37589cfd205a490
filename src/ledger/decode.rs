//! Row decoding shared by the SQL backends: typed column access that reports any failure as
//! [`LedgerError::Corrupt`](super::LedgerError::Corrupt), never a panic.
//!
//! A macro rather than generic code: the two backends differ only in the row and database
//! types (and in two column types each implements itself: `flag` and `status`), and the sqlx
//! trait bounds of a generic version would outweigh the code they save.

/// Defines `Columns`, `decode_operation` and `decode_evidence` for a sqlx row type. The caller
/// implements `Columns::flag` (a boolean column) and `Columns::status` (the stored HTTP status).
macro_rules! row_decoder {
    ($row:ty, $db:ty) => {
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

            fn get<T>(&self, column: &str) -> Result<T, LedgerError>
            where
                T: sqlx::Decode<'r, $db> + sqlx::Type<$db>,
            {
                self.row
                    .try_get::<T, _>(column)
                    .map_err(|e| self.corrupt(format!("column {column}: {e}")))
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
                row.try_get::<String, _>("operation_id")
                    .map_err(|e| LedgerError::Corrupt {
                        operation: "<unreadable operation id>".to_owned(),
                        detail: format!("column operation_id: {e}"),
                    })?;
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
                action: c.text("action")?,
                intent_ref: c.text("intent_ref")?,
                idempotency_key: IdempotencyKey::from_stored(c.text("idempotency_key")?),
                payload_hash: PayloadHash::from_stored(c.text("payload_hash")?),
                request: std::sync::Arc::new(FrozenRequest {
                    method: c.text("request_method")?,
                    url: c.text("request_url")?,
                    headers: c.json("request_headers")?,
                    body: c.blob("request_body")?,
                }),
                contract: ContractRef {
                    name: c.text("contract_name")?,
                    hash: c.text("contract_hash")?,
                },
                policy: {
                    let stored = c.text("budget_policy")?;
                    $crate::ledger::decode::stored_policy(&stored)
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
            })
        }

        /// A listing page from the rows of [`list_sql`](super::query::list_sql) (one more
        /// than `limit` when another page follows). Undecodable rows are skipped, logged and
        /// reported; only the key columns must be readable.
        fn decode_page(rows: &[$row], limit: u32) -> Result<Page, LedgerError> {
            let limit = limit as usize;
            let mut page = Page::new(Vec::new(), None, Vec::new());
            for row in rows.iter().take(limit) {
                match decode_operation(row) {
                    Ok(r) => page.rows.push(r),
                    Err(e) => {
                        let c = Columns::new(row, "<listed row>");
                        let skipped = super::SkippedRow {
                            tenant: Tenant::new(c.text("tenant")?),
                            operation_id: OperationId::new(c.text("operation_id")?),
                            error: e.to_string(),
                        };
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

        /// The counts of [`count_sql`](super::query::count_sql)'s rows (`state`, `n`).
        fn decode_counts(rows: &[$row]) -> Result<StateCounts, LedgerError> {
            let mut counts = StateCounts::default();
            for row in rows {
                let c = Columns::new(row, "<state count>");
                counts.set(c.state("state")?, c.u64("n")?);
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
                    kind: c.text("kind")?,
                    from_state: c.opt_state("from_state")?,
                    to_state: c.opt_state("to_state")?,
                    evidence: c.opt_json("evidence")?,
                    note: c.opt_text("note")?,
                    at_ms: c.get("at_ms")?,
                },
            })
        }
    };
}

pub(crate) use row_decoder;

/// What is kept as the quarantine reason of a row that failed to decode: the decode error
/// without the operation id (kept in its own column). Logged with `tracing::error!`, naming the
/// operation, never its body.
pub(crate) fn quarantine(
    tenant: Option<&str>,
    operation_id: Option<&str>,
    during: &'static str,
    error: &super::LedgerError,
) -> String {
    let reason = match error {
        super::LedgerError::Corrupt { detail, .. } => detail.clone(),
        other => other.to_string(),
    };
    tracing::error!(
        tenant = tenant.unwrap_or("<unreadable>"),
        operation_id = operation_id.unwrap_or("<unreadable>"),
        during,
        error = %reason,
        "ledger row cannot be decoded: quarantined, recovery goes on without it"
    );
    reason
}

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
