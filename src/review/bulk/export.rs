//! [`VendorExport`]: a vendor's export (CSV with a header line, or JSON lines), read through an
//! [`ExportMapping`] into rows of (reference, operation id and/or key), with the file's name and
//! SHA-256 digest for the audit trail.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::mapping::{Column, ExportMapping};

/// The largest export read (bytes): a dashboard export of a bad night, not a data warehouse.
pub const MAX_EXPORT_BYTES: usize = 64 * 1024 * 1024;

/// One row of an export, as the mapping reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportRow {
    /// The row's number in the file: the line of a JSON lines file, the record of a CSV file
    /// counting its header as 1 (so row 2 is the first data row, as a spreadsheet shows it).
    pub row: usize,
    /// The vendor's object id (blank cells are reported, never recorded).
    pub reference: String,
    /// The operation id the row names, if the mapping reads one and the cell is not blank.
    pub operation_id: Option<String>,
    /// The idempotency key the row names, if the mapping reads one and the cell is not blank.
    pub idempotency_key: Option<String>,
}

/// A vendor's export, read: its name, digest and rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VendorExport {
    /// The file's name as given (for the audit trail; never opened again).
    pub file_name: String,
    /// The SHA-256 of the file's bytes, lower-case hex: names exactly what was read.
    pub sha256: String,
    /// The mapping it was read with.
    pub mapping: ExportMapping,
    /// Its rows, in file order.
    pub rows: Vec<ExportRow>,
}

/// An export that cannot be read. Nothing was planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The file is larger than [`MAX_EXPORT_BYTES`].
    #[error("the export is {size} bytes, more than the {max} read at once: split it")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The file is empty (no header, no row).
    #[error("the export is empty")]
    Empty,
    /// A column the mapping needs is not in the export's header.
    #[error(
        "the export has no column {wanted} (mapping {mapping}); its columns are: {found}. \
         Choose the mapping of the vendor it comes from, or name the columns (--format generic)"
    )]
    MissingColumn {
        /// The mapping.
        mapping: String,
        /// The names looked for.
        wanted: String,
        /// The header found (cut).
        found: String,
    },
    /// A row cannot be parsed (CSV syntax, a JSON line that is not an object).
    #[error("row {row} cannot be read: {detail}")]
    BadRow {
        /// The row's number.
        row: usize,
        /// What is wrong.
        detail: String,
    },
}

impl VendorExport {
    /// Reads `bytes` (the file called `file_name`) with `mapping`. A file whose first
    /// non-blank character is `{` is JSON lines (one object per line, blank lines skipped);
    /// anything else is CSV with a header line (a UTF-8 byte order mark is skipped).
    ///
    /// # Errors
    ///
    /// [`ExportError`]: too large, empty, a column the mapping needs is missing, or a row
    /// cannot be parsed.
    pub fn parse(
        file_name: &str,
        bytes: &[u8],
        mapping: &ExportMapping,
    ) -> Result<Self, ExportError> {
        if bytes.len() > MAX_EXPORT_BYTES {
            return Err(ExportError::TooLarge {
                size: bytes.len(),
                max: MAX_EXPORT_BYTES,
            });
        }
        let sha256 = hex::encode(Sha256::digest(bytes));
        let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        let rows = match first {
            None => return Err(ExportError::Empty),
            Some(b'{') => json_lines(body, mapping)?,
            Some(_) => csv_rows(body, mapping)?,
        };
        Ok(Self {
            file_name: file_name.to_owned(),
            sha256,
            mapping: mapping.clone(),
            rows,
        })
    }
}

/// A cell's value, `None` when blank.
fn cell(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

fn norm(name: &str) -> String {
    name.trim().to_lowercase()
}

fn csv_rows(body: &[u8], mapping: &ExportMapping) -> Result<Vec<ExportRow>, ExportError> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(body);
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| ExportError::BadRow {
            row: 1,
            detail: e.to_string(),
        })?
        .iter()
        .map(norm)
        .collect();
    let find = |col: &Column| -> Result<usize, ExportError> {
        col.names
            .iter()
            .find_map(|n| header.iter().position(|h| *h == norm(n)))
            .ok_or_else(|| missing(mapping, col, &header))
    };
    let reference = find(&mapping.reference)?;
    let op = mapping.operation_id.as_ref().map(find).transpose()?;
    let key = mapping.idempotency_key.as_ref().map(find).transpose()?;
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let row = i + 2;
        let record = record.map_err(|e| ExportError::BadRow {
            row,
            detail: e.to_string(),
        })?;
        rows.push(ExportRow {
            row,
            reference: cell(record.get(reference)).unwrap_or_default(),
            operation_id: op.and_then(|c| cell(record.get(c))),
            idempotency_key: key.and_then(|c| cell(record.get(c))),
        });
    }
    Ok(rows)
}

fn missing(mapping: &ExportMapping, col: &Column, header: &[String]) -> ExportError {
    let mut found = header.join(", ");
    if found.chars().count() > 300 {
        found = format!("{}…", crate::encoding::first_chars(&found, 300));
    }
    ExportError::MissingColumn {
        mapping: mapping.name.clone(),
        wanted: col.describe(),
        found,
    }
}

/// The value at `name` in a JSON object: a key (compared without case), else a dotted path
/// into nested objects. Strings as they are, numbers as written.
fn json_value(obj: &serde_json::Map<String, serde_json::Value>, name: &str) -> Option<String> {
    let want = norm(name);
    let direct = obj.iter().find(|(k, _)| norm(k) == want).map(|(_, v)| v);
    let value = direct.or_else(|| {
        let mut parts = want.split('.');
        let first = parts.next()?;
        let mut v = obj.iter().find(|(k, _)| norm(k) == first).map(|(_, v)| v)?;
        for p in parts {
            v = v
                .as_object()?
                .iter()
                .find(|(k, _)| norm(k) == p)
                .map(|(_, v)| v)?;
        }
        Some(v)
    })?;
    match value {
        serde_json::Value::String(s) => cell(Some(s)),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn json_lines(body: &[u8], mapping: &ExportMapping) -> Result<Vec<ExportRow>, ExportError> {
    let text = std::str::from_utf8(body).map_err(|e| ExportError::BadRow {
        row: 1,
        detail: format!("not UTF-8: {e}"),
    })?;
    let mut objects = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = i + 1;
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| ExportError::BadRow {
                row,
                detail: e.to_string(),
            })?;
        let serde_json::Value::Object(obj) = value else {
            return Err(ExportError::BadRow {
                row,
                detail: "not a JSON object".into(),
            });
        };
        objects.push((row, obj));
    }
    // The first name of each column that some row carries (a JSON file has no header).
    let pick = |col: &Column| -> Result<String, ExportError> {
        col.names
            .iter()
            .find(|n| objects.iter().any(|(_, o)| json_value(o, n).is_some()))
            .cloned()
            .ok_or_else(|| {
                let header: Vec<String> = objects
                    .first()
                    .map(|(_, o)| o.keys().cloned().collect())
                    .unwrap_or_default();
                missing(mapping, col, &header)
            })
    };
    let reference = pick(&mapping.reference)?;
    let op = mapping.operation_id.as_ref().map(pick).transpose()?;
    let key = mapping.idempotency_key.as_ref().map(pick).transpose()?;
    Ok(objects
        .iter()
        .map(|(row, o)| ExportRow {
            row: *row,
            reference: json_value(o, &reference).unwrap_or_default(),
            operation_id: op.as_deref().and_then(|c| json_value(o, c)),
            idempotency_key: key.as_deref().and_then(|c| json_value(o, c)),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stripe_csv_export_is_read_by_its_metadata_column() {
        let csv = "\u{feff}id,Created (UTC),Amount,operation_id (metadata)\n\
                   ch_1,2026-12-01 10:00,12.00,op-a\n\
                   ch_2,2026-12-01 10:01,3.00,\n";
        let e = VendorExport::parse("pay.csv", csv.as_bytes(), &ExportMapping::stripe()).unwrap();
        assert_eq!(e.rows.len(), 2);
        assert_eq!(e.rows[0].row, 2);
        assert_eq!(e.rows[0].reference, "ch_1");
        assert_eq!(e.rows[0].operation_id.as_deref(), Some("op-a"));
        assert_eq!(e.rows[1].operation_id, None);
        assert_eq!(e.sha256.len(), 64);
    }

    #[test]
    fn json_lines_are_read_through_nested_metadata() {
        let j = "{\"id\":\"pi_1\",\"metadata\":{\"operation_id\":\"op-a\"}}\n\n{\"id\":\"pi_2\"}\n";
        let e = VendorExport::parse("p.jsonl", j.as_bytes(), &ExportMapping::stripe()).unwrap();
        assert_eq!(e.rows[0].operation_id.as_deref(), Some("op-a"));
        assert_eq!(e.rows[1].row, 3);
        assert_eq!(e.rows[1].operation_id, None);
    }

    #[test]
    fn a_missing_column_names_what_it_looked_for() {
        let err = VendorExport::parse("a.csv", b"id,Amount\nX,1\n", &ExportMapping::stripe())
            .unwrap_err();
        assert!(matches!(err, ExportError::MissingColumn { .. }), "{err}");
        assert!(err.to_string().contains("operation_id (metadata)"), "{err}");
        assert_eq!(
            VendorExport::parse("e", b"  \n", &ExportMapping::adyen()).unwrap_err(),
            ExportError::Empty
        );
    }
}
