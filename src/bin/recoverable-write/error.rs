//! How a command fails: its exit code ([`exit`]) and a message that says what to do, never a
//! credential; and the library's refusals mapped to those codes.

use recoverable_write::ledger::{LedgerError, OperationRecord};
use recoverable_write::retention::RetentionError;
use recoverable_write::review::ReviewError;
use recoverable_write::state::{Refused, State};

/// The process exit codes.
pub(crate) mod exit {
    /// Done.
    pub(crate) const OK: u8 = 0;
    /// Operational error: the ledger is unreachable or failed; nothing was changed by this
    /// command unless it says so.
    pub(crate) const OPERATIONAL: u8 = 1;
    /// Usage: bad arguments, an unsupported ledger URL (or one whose backend, feature `sqlite`
    /// or `postgres`, this binary was built without), an ambiguous operation id, a blank
    /// reason; a deletion not confirmed (`--yes`), or a purge without the application's
    /// contracts. Nothing changed.
    pub(crate) const USAGE: u8 = 2;
    /// No such operation (in the tenant scope).
    pub(crate) const NOT_FOUND: u8 = 3;
    /// Stale version: the operation changed since the version given was read. Nothing changed;
    /// `show` it again.
    pub(crate) const STALE: u8 = 4;
    /// The state machine refuses the action in the operation's state. Nothing changed.
    pub(crate) const REFUSED: u8 = 5;
}

/// A failed command: its message (never a credential) and exit code.
#[derive(Debug)]
pub(crate) struct CliError {
    /// One of [`exit`].
    pub(crate) code: u8,
    /// What went wrong and what to do.
    pub(crate) message: String,
    /// What to print on stdout before the message, usually nothing (the plan of a purge that
    /// was not confirmed).
    pub(crate) output: String,
}

impl CliError {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            output: String::new(),
        }
    }

    pub(crate) fn with_output(mut self, output: String) -> Self {
        self.output = output;
        self
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(exit::USAGE, message)
    }

    pub(crate) fn ledger(e: LedgerError) -> Self {
        match e {
            LedgerError::Config(m) => Self::usage(m),
            other => Self::new(exit::OPERATIONAL, other.to_string()),
        }
    }
}

/// A retention refusal as its exit code.
pub(crate) fn retention_error(e: RetentionError) -> CliError {
    use RetentionError as E;
    match e {
        E::Ledger(e) => CliError::ledger(e),
        E::NotFound { .. } => CliError::new(exit::NOT_FOUND, e.to_string()),
        other => CliError::new(exit::REFUSED, other.to_string()),
    }
}

/// A state machine refusal in an operator's words: what was asked, in which state, and why
/// (never the machine's internal event name).
fn refusal(r: &Refused) -> String {
    let what = match r.event {
        "review_claim" => "it cannot be claimed",
        "review" => "it cannot be resolved",
        "acknowledge_contradiction" => "there is nothing to acknowledge",
        _ => "this action is not possible",
    };
    let why = match &r.detail {
        Some(d) => format!(" ({d})"),
        None if r.from.is_terminal() => " (it is finished)".to_owned(),
        None if r.event == "review" && r.from != State::ManualReview => {
            " (only an operation in MANUAL_REVIEW can be resolved)".to_owned()
        }
        None => String::new(),
    };
    format!("the operation is {}: {what}{why}", r.from)
}

/// The exit code and message of a failed review action; `now` is the row as it is now.
pub(crate) fn review_error(e: ReviewError, now: Option<&OperationRecord>) -> CliError {
    let state_now = now
        .map(|r| {
            format!(
                " It is now {} at version {} (generation {}).",
                r.state, r.version, r.generation.0
            )
        })
        .unwrap_or_default();
    match e {
        ReviewError::NotFound { tenant, operation } => CliError::new(
            exit::NOT_FOUND,
            format!("no operation {operation} for tenant {tenant}"),
        ),
        ReviewError::VersionMismatch {
            operation,
            expected,
            current,
        } => CliError::new(
            exit::STALE,
            format!(
                "refused: {operation} changed since version {expected} was read (now version \
                 {current}); nothing was changed.{state_now} Run `show` again, read what changed, \
                 and act on the version it prints."
            ),
        ),
        ReviewError::Refused(r) => CliError::new(
            exit::REFUSED,
            format!("refused: {}; nothing was changed.{state_now}", refusal(&r)),
        ),
        ReviewError::ClaimedByOther { operation, holder } => CliError::new(
            exit::REFUSED,
            format!(
                "refused: {operation} is claimed by {holder}; nothing was changed.{state_now} \
                 A claim is exclusive: ask {holder}, or take it over with `claim --take-over` \
                 (the audit trail names you both)."
            ),
        ),
        ReviewError::ReasonRequired => {
            CliError::usage("--reason must say why: it goes into the operation's audit trail")
        }
        ReviewError::NotQuarantined { operation } => CliError::new(
            exit::REFUSED,
            format!(
                "refused: {operation} is not quarantined (it may have been released already); \
                 nothing was changed.{state_now}"
            ),
        ),
        e @ ReviewError::StillUndecodable { .. } => {
            CliError::new(exit::REFUSED, format!("refused: {e}. Nothing was changed."))
        }
        ReviewError::Ledger(e) => CliError::ledger(e),
        // `ReviewError` is non-exhaustive: a refusal this binary does not know yet.
        e => CliError::new(exit::REFUSED, format!("refused: {e}. Nothing was changed.")),
    }
}
