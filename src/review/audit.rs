//! The audit trail of review actions: the note each claim and resolution appends, and the
//! reviewer's text made fit for it.

use super::ReviewError;
use crate::encoding::first_chars;

/// Longest reason kept in an audit entry, in characters (the rest is cut, marked with `…`).
pub const MAX_REASON_CHARS: usize = 500;

/// The audit note of a review action: `{action}; version {from} -> {to}` (or
/// `version {from} (unchanged)` when `to` is `None`), then `; reason: {reason}` when there is
/// one. [`operator::AuditEntry::parse`](crate::operator::AuditEntry::parse) reads it back.
pub(crate) fn audit_note(action: &str, from: u64, to: Option<u64>, reason: Option<&str>) -> String {
    let mut note = match to {
        Some(to) => format!("{action}; version {from} -> {to}"),
        None => format!("{action}; version {from} (unchanged)"),
    };
    if let Some(reason) = reason {
        note.push_str("; reason: ");
        note.push_str(reason);
    }
    note
}

/// A reviewer's text on one line: control characters (newlines included) become spaces and
/// `;` (the audit note's separator) becomes `,`.
pub(super) fn clean(text: &str) -> String {
    text.trim()
        .chars()
        .map(|c| match c {
            c if c.is_control() => ' ',
            ';' => ',',
            c => c,
        })
        .collect()
}

/// A non-blank reason on one line, at most [`MAX_REASON_CHARS`] characters.
pub(super) fn required(reason: &str) -> Result<String, ReviewError> {
    let one_line: String = reason
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.is_empty() {
        return Err(ReviewError::ReasonRequired);
    }
    if one_line.chars().count() > MAX_REASON_CHARS {
        Ok(format!("{}…", first_chars(&one_line, MAX_REASON_CHARS)))
    } else {
        Ok(one_line)
    }
}
