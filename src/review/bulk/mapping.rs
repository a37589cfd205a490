//! [`ExportMapping`]: which columns of a vendor's export hold the vendor's object id (the
//! reference to record) and what identifies the operation (the idempotency key the crate sent,
//! or the operation id the application put in the request's metadata).

use serde::{Deserialize, Serialize};

/// What an export row's matching column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchBy {
    /// The operation id the application put in the request (Stripe metadata, Adyen's merchant
    /// reference, PayPal's `custom_id`, Square's `reference_id`): read with the tenant's
    /// `get`.
    OperationId,
    /// The idempotency key the crate sent: read with
    /// [`ListingLedger::find_by_idempotency_key`](crate::ledger::ListingLedger::find_by_idempotency_key).
    IdempotencyKey,
}

/// One column the mapping reads: the names it may carry in the export's header (compared
/// without case and surrounding spaces; in JSON lines a name may be a dotted path into nested
/// objects, `metadata.operation_id`). The first name the export has is used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// The accepted names, in order of preference.
    pub names: Vec<String>,
}

impl Column {
    fn of(names: &[&str]) -> Self {
        Self {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    /// The column `name` only.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            names: vec![name.into()],
        }
    }

    /// The names, for messages: `"id"` or `"a" or "b"`.
    pub fn describe(&self) -> String {
        self.names
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(" or ")
    }
}

/// How to read a vendor's export: the column of the vendor's object id (recorded as the
/// operation's reference) and the column(s) that identify the operation.
///
/// The built-in mappings assume the application put the operation id into the request where
/// the vendor's dashboard export shows it again (none of these exports carries the
/// idempotency key: the crate sends it as a header, or for Square in the body, and the vendors
/// do not export it). Use [`generic`](Self::generic) for any other layout, including one that
/// carries the key.
///
/// | mapping | reference column | operation id column | the application must |
/// |---|---|---|---|
/// | [`stripe`](Self::stripe) | `id` (payments export: `ch_…`/`py_…`; JSON lines of API objects: `pi_…`, `ch_…`) | `operation_id (metadata)` (CSV), `metadata.operation_id` (JSON) | set `metadata[operation_id]` |
/// | [`adyen`](Self::adyen) | `Psp Reference` | `Merchant Reference` | send the operation id as the payment's `reference` |
/// | [`square`](Self::square) | `Payment ID` (CSV), `id` (JSON) | `Reference ID` (CSV), `reference_id` (JSON) | set the payment's `reference_id` (the dashboard's column name is UNCONFIRMED: check your export's header) |
/// | [`paypal`](Self::paypal) | `Transaction ID` (CSV), `id` (JSON) | `Custom Number` (CSV), `custom_id` (JSON) | set the purchase unit's `custom_id` |
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportMapping {
    /// The mapping's name (`stripe`, `adyen`, `square`, `paypal`, `generic`).
    pub name: String,
    /// The vendor's object id: recorded as the operation's reference.
    pub reference: Column,
    /// The operation id the application put in the request, if the mapping reads one.
    pub operation_id: Option<Column>,
    /// The idempotency key the crate sent, if the mapping reads one.
    pub idempotency_key: Option<Column>,
}

impl ExportMapping {
    /// Stripe's payments export (Dashboard → Payments → Export), or JSON lines of API objects:
    /// reference `id`, operation id in the metadata key `operation_id` (the export's column
    /// `operation_id (metadata)`).
    pub fn stripe() -> Self {
        Self {
            name: "stripe".into(),
            reference: Column::of(&["id"]),
            operation_id: Some(Column::of(&[
                "operation_id (metadata)",
                "metadata.operation_id",
                "metadata[operation_id]",
            ])),
            idempotency_key: None,
        }
    }

    /// Adyen's settlement details or payment accounting report: reference `Psp Reference`,
    /// operation id `Merchant Reference` (the payment request's `reference`).
    pub fn adyen() -> Self {
        Self {
            name: "adyen".into(),
            reference: Column::of(&["Psp Reference", "pspReference"]),
            operation_id: Some(Column::of(&["Merchant Reference", "merchantReference"])),
            idempotency_key: None,
        }
    }

    /// Square's transactions export, or JSON lines of Payments API objects: reference
    /// `Payment ID` (`id`), operation id `Reference ID` (`reference_id`).
    pub fn square() -> Self {
        Self {
            name: "square".into(),
            reference: Column::of(&["Payment ID", "id"]),
            operation_id: Some(Column::of(&["Reference ID", "reference_id"])),
            idempotency_key: None,
        }
    }

    /// PayPal's activity download, or JSON lines of captures: reference `Transaction ID`
    /// (`id`), operation id `Custom Number` (`custom_id`).
    pub fn paypal() -> Self {
        Self {
            name: "paypal".into(),
            reference: Column::of(&["Transaction ID", "id"]),
            operation_id: Some(Column::of(&["Custom Number", "custom_id"])),
            idempotency_key: None,
        }
    }

    /// A mapping named by the user: the reference column, and the operation id column, the
    /// idempotency key column, or both (then a row whose two columns name two different
    /// operations refuses the whole plan).
    ///
    /// # Errors
    ///
    /// [`MappingError`] if neither a key column nor an operation id column is given, or a
    /// column name is blank.
    pub fn generic(
        reference: &str,
        operation_id: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<Self, MappingError> {
        let col = |name: &str| {
            let name = name.trim();
            if name.is_empty() {
                Err(MappingError("a column name is blank".into()))
            } else {
                Ok(Column::named(name))
            }
        };
        if operation_id.is_none() && idempotency_key.is_none() {
            return Err(MappingError(
                "name the column that identifies the operation: its operation id or its \
                 idempotency key"
                    .into(),
            ));
        }
        Ok(Self {
            name: "generic".into(),
            reference: col(reference)?,
            operation_id: operation_id.map(col).transpose()?,
            idempotency_key: idempotency_key.map(col).transpose()?,
        })
    }

    /// The built-in mapping called `name` (`stripe`, `adyen`, `square`, `paypal`).
    pub fn builtin(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "stripe" => Some(Self::stripe()),
            "adyen" => Some(Self::adyen()),
            "square" => Some(Self::square()),
            "paypal" => Some(Self::paypal()),
            _ => None,
        }
    }
}

/// A mapping that cannot be used. Nothing was read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad export mapping: {0}")]
pub struct MappingError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generic_mapping_needs_a_matching_column() {
        assert!(ExportMapping::generic("ref", None, None).is_err());
        assert!(ExportMapping::generic(" ", Some("op"), None).is_err());
        let m = ExportMapping::generic("ref", None, Some("key")).unwrap();
        assert_eq!(m.idempotency_key, Some(Column::named("key")));
        assert_eq!(
            ExportMapping::builtin("Stripe"),
            Some(ExportMapping::stripe())
        );
        assert_eq!(ExportMapping::builtin("nope"), None);
    }
}
