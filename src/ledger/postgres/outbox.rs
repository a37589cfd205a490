//! The outbox: an operation created inside the caller's own transaction, and the row an insert
//! conflicted with.

use sqlx::AssertSqlSafe;
use sqlx::postgres::PgConnection;

use super::text::check_new;
use super::{BindEntry, POSTGRES, PostgresLedger, decode_operation, unavailable};
use crate::ledger::codec::{EvidenceColumns, to_json};
use crate::ledger::{Created, LedgerError, NewOperation, store_entries};
use crate::operation::{OperationId, Tenant};

impl PostgresLedger {
    /// Creates an operation on the caller's connection, inside the caller's transaction: the
    /// outbox. The business row and the operation commit together or not at all; nothing is
    /// visible to the layer or to recoverers before the commit.
    ///
    /// Same result as [`Ledger::create_or_get`](crate::ledger::Ledger::create_or_get):
    /// [`Created::Existing`] when the operation id or the `(tenant, action, intent_ref)` is
    /// already taken (compare the payload hash). After the commit, send the request through the
    /// [`RecoverableWriteLayer`](crate::RecoverableWriteLayer) with the same
    /// [`Operation`](crate::Operation): the layer finds the `PREPARED` row (the
    /// same operation id and payload hash) and sends it. Build the [`NewOperation`] the way the
    /// layer does, so the payload hashes match (see `examples/outbox_axum.rs`).
    ///
    /// If the transaction is rolled back, the operation never existed.
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     ledger: recoverable_write::ledger::PostgresLedger,
    /// #     new: recoverable_write::ledger::NewOperation,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = ledger.pool().begin().await?;
    /// sqlx::query("INSERT INTO support_requests (id, device) VALUES ($1, $2)")
    ///     .bind("req-17")
    ///     .bind("E17")
    ///     .execute(&mut *tx)
    ///     .await?;
    /// let created = ledger.create_in(&mut tx, new).await?;
    /// tx.commit().await?; // both rows, or neither
    /// # let _ = created;
    /// # Ok(()) }
    /// ```
    pub async fn create_in(
        &self,
        conn: &mut PgConnection,
        new: NewOperation,
    ) -> Result<Created, LedgerError> {
        check_new(&new)?;
        let headers = to_json("request headers", &new.request.headers)?;
        let policy = to_json("budget policy", &new.policy)?;
        let created = EvidenceColumns::encode(store_entries::created(new.now_ms), POSTGRES)?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.insert_operation.clone()))
            .bind(self.caller_now(new.now_ms))
            .bind(new.tenant.as_str())
            .bind(new.operation_id.as_str())
            .bind(&*new.action)
            .bind(&*new.intent_ref)
            .bind(new.idempotency_key.as_str())
            .bind(new.payload_hash.as_str())
            .bind(new.request.method.as_str())
            .bind(new.request.url.as_str())
            .bind(headers)
            .bind(new.request.body.as_ref())
            .bind(&*new.contract.name)
            .bind(&*new.contract.hash)
            .bind(policy)
            .bind_entry(created)
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
        if let Some(row) = rows.first() {
            return Ok(Created::New(decode_operation(row)?));
        }
        self.existing(
            conn,
            &new.tenant,
            &new.operation_id,
            &new.action,
            &new.intent_ref,
        )
        .await
    }

    /// After an insert conflicted (waiting for the other writer to commit): the row with the same
    /// id first, then the one with the same intent.
    pub(super) async fn existing(
        &self,
        conn: &mut PgConnection,
        tenant: &Tenant,
        id: &OperationId,
        action: &str,
        intent_ref: &str,
    ) -> Result<Created, LedgerError> {
        let by_id = sqlx::query(AssertSqlSafe(self.sql.select_by_id.clone()))
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(unavailable)?;
        let existing = match by_id {
            Some(row) => Some(row),
            None => sqlx::query(AssertSqlSafe(self.sql.select_by_intent.clone()))
                .bind(tenant.as_str())
                .bind(action)
                .bind(intent_ref)
                .fetch_optional(&mut *conn)
                .await
                .map_err(unavailable)?,
        };
        match existing {
            Some(row) => Ok(Created::Existing(decode_operation(&row)?)),
            None => Err(LedgerError::Corrupt {
                operation: id.to_string(),
                detail: "insert conflicted but no row has this id or intent".into(),
            }),
        }
    }
}
