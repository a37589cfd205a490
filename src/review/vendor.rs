//! Where the vendor holds a write, for an operator who looks it up there (issue 30 item 2):
//! the vendor's own reference of the object, when an answer or a callback named it, and what
//! the operation's contract looks it up by.

use serde::{Deserialize, Serialize};

use crate::contract::{Contract, Lookup};
use crate::ledger::{EvidenceEntry, OperationRecord};
use crate::reconcile::{fill, lookup_url};

/// The vendor's own reference of the object the write created (or is working on), and which
/// evidence named it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VendorReference {
    /// The reference, as the vendor wrote it (`W731`, `ch_3N…`).
    pub value: String,
    /// Where it came from, for a human: `the answer to a send, entry #3`,
    /// `a lookup, entry #5`, `a callback, entry #7`, `a late answer, entry #9`, or
    /// `the operation's record` (a reviewer's resolution, or evidence no longer kept).
    pub source: String,
    /// Whether the operation holds it (its `remote_ref`); `false`: only a later answer named it
    /// (a success reported after the operation was taken over), not confirmed yet.
    pub confirmed: bool,
}

/// The vendor's reference of `row`'s object: the one the operation holds, with the newest
/// evidence that named it; else the newest any evidence named (late, not confirmed).
pub(super) fn reference(row: &OperationRecord, log: &[EvidenceEntry]) -> Option<VendorReference> {
    if let Some(held) = &row.remote_ref {
        let source = log
            .iter()
            .rev()
            .find(|e| named(e) == Some(held.as_str()))
            .map_or_else(|| "the operation's record".to_owned(), source_of);
        return Some(VendorReference {
            value: held.clone(),
            source,
            confirmed: true,
        });
    }
    let e = log.iter().rev().find(|e| named(e).is_some())?;
    Some(VendorReference {
        value: named(e)?.to_owned(),
        source: source_of(e),
        confirmed: false,
    })
}

/// The vendor's reference an entry's evidence names, if any.
fn named(e: &EvidenceEntry) -> Option<&str> {
    e.entry.evidence.as_ref().and_then(|ev| ev.remote_ref())
}

/// Which evidence an entry is, for a human.
fn source_of(e: &EvidenceEntry) -> String {
    let what = match &*e.entry.kind {
        "attempt_result" => "the answer to a send",
        "lookup" => "a lookup",
        "callback" => "a callback",
        "late_evidence" => "a late answer",
        other => other,
    };
    format!("{what}, entry #{}", e.seq)
}

/// What `contract`'s lookup asks the vendor about `row`, said for a human: the request with the
/// operation's values in it, or why there is none.
pub(super) fn lookup(row: &OperationRecord, contract: &Contract) -> String {
    let Some(lookup) = &contract.lookup else {
        return format!(
            "the contract {} names no lookup (a reconciler configured in code may ask)",
            contract.name
        );
    };
    match lookup {
        Lookup::HttpGet { url_template, .. } => match lookup_url(url_template, row) {
            Ok(url) => format!("GET {url}"),
            Err(why) => format!("GET {url_template}: not yet ({why})"),
        },
        Lookup::ListByReference {
            url_template,
            reference_pointer,
            reference,
            ..
        } => {
            let url = lookup_url(url_template, row);
            let reference = fill(reference, row, false);
            match (url, reference, reference_pointer) {
                (Ok(url), Ok(r), Some(pointer)) => {
                    format!("search GET {url} for the item whose {pointer} is {r}")
                }
                (Ok(url), Ok(r), None) => format!("search GET {url} (its filter matches {r})"),
                (Err(why), _, _) | (_, Err(why), _) => {
                    format!("search GET {url_template}: not yet ({why})")
                }
            }
        }
        Lookup::SameKeyReplay => {
            "no lookup: the vendor answers a same-key replay with its first result (the key above)"
                .to_owned()
        }
        Lookup::Webhooks { events } if events.is_empty() => {
            "no lookup: the vendor reports the outcome by webhook".to_owned()
        }
        Lookup::Webhooks { events } => format!(
            "no lookup: the vendor reports the outcome by webhook ({})",
            events.join(", ")
        ),
        Lookup::Unavailable => {
            "none: the vendor offers no lookup; search its dashboard by the key or the operation id"
                .to_owned()
        }
    }
}
