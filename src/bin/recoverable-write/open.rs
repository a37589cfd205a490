//! Opening the ledger `--ledger` names: a SQLite file (feature `sqlite`) or a PostgreSQL URL
//! (feature `postgres`). A backend this binary was built without is a usage error that names
//! the feature and the command that installs it. The URL is never printed with its userinfo.

use std::sync::Arc;

use recoverable_write::ledger::FullLedger;
#[cfg(feature = "sqlite")]
use recoverable_write::ledger::SqliteLedger;
#[cfg(feature = "postgres")]
use recoverable_write::ledger::{LedgerError, PostgresLedger, PostgresLedgerOptions};

use crate::error::CliError;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::error::exit;

/// An open ledger, closed at the end of the command.
pub(crate) struct Store {
    backend: Backend,
}

/// The backends this binary was built with.
enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite(Arc<SqliteLedger>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<PostgresLedger>),
}

impl Store {
    pub(crate) fn ledger(&self) -> Arc<dyn FullLedger> {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(ref l) => l.clone(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(ref l) => l.clone(),
        }
    }

    pub(crate) async fn close(&self) {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(ref l) => l.close().await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(ref l) => l.close().await,
        }
    }
}

/// Opens the ledger named by `target`. A SQLite file must exist: a typo must not create an
/// empty ledger that shows no stuck operations.
pub(crate) async fn open(target: &str, schema: &str) -> Result<Store, CliError> {
    if let Some(path) = target
        .strip_prefix("sqlite://")
        .or_else(|| target.strip_prefix("sqlite:"))
    {
        return open_sqlite(path).await;
    }
    if target.starts_with("postgres://") || target.starts_with("postgresql://") {
        return open_postgres(target, schema).await;
    }
    if !target.contains(':') {
        // A bare path: a SQLite file if there is one, else say how to name a ledger.
        if std::path::Path::new(target).is_file() {
            return open_sqlite(target).await;
        }
        return Err(CliError::usage(format!(
            "no ledger file at {target:?}: name a SQLite ledger --ledger sqlite:PATH (the file \
             must exist) or a PostgreSQL one postgres://…"
        )));
    }
    let scheme = target.split_once(':').map_or(target, |(s, _)| s);
    Err(CliError::usage(format!(
        "unsupported ledger {:?}: use sqlite:PATH, sqlite://PATH or postgres://…",
        if scheme.len() < 20 { scheme } else { "?" }
    )))
}

/// The ledger as a printed command may name it: a SQLite target (a bare path as
/// `sqlite:PATH`); `None` for a PostgreSQL URL, which may hold a password.
pub(crate) fn printable(target: &str) -> Option<String> {
    if target.starts_with("sqlite:") {
        Some(target.to_owned())
    } else if !target.contains(':') && !target.is_empty() {
        Some(format!("sqlite:{target}"))
    } else {
        None
    }
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(path: &str) -> Result<Store, CliError> {
    if path.is_empty() {
        return Err(CliError::usage(
            "empty SQLite path: use --ledger sqlite:PATH",
        ));
    }
    let p = std::path::Path::new(path);
    if !p.is_file() {
        return Err(CliError::new(
            exit::OPERATIONAL,
            format!("no SQLite ledger file at {path}"),
        ));
    }
    SqliteLedger::open(p)
        .await
        .map(|l| Store {
            backend: Backend::Sqlite(Arc::new(l)),
        })
        .map_err(|e| {
            CliError::new(
                exit::OPERATIONAL,
                format!("cannot open the SQLite ledger {path}: {e}"),
            )
        })
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(_path: &str) -> Result<Store, CliError> {
    Err(not_built_with(
        "SQLite",
        "sqlite",
        "cargo install recoverable-write --features cli",
    ))
}

#[cfg(feature = "postgres")]
async fn open_postgres(target: &str, schema: &str) -> Result<Store, CliError> {
    let options = PostgresLedgerOptions::new()
        .schema(schema)
        .map_err(CliError::ledger)?
        .max_connections(2);
    PostgresLedger::connect_with(target, options)
        .await
        .map(|l| Store {
            backend: Backend::Postgres(Arc::new(l)),
        })
        .map_err(|e| match e {
            LedgerError::Config(m) => CliError::usage(m),
            other => CliError::new(
                exit::OPERATIONAL,
                format!(
                    "cannot reach the PostgreSQL ledger {}: {other}",
                    redact_url(target)
                ),
            ),
        })
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_target: &str, _schema: &str) -> Result<Store, CliError> {
    Err(not_built_with(
        "PostgreSQL",
        "postgres",
        "cargo install recoverable-write --features cli,postgres",
    ))
}

/// The usage error of a ledger whose backend this binary was built without.
#[cfg(any(not(feature = "sqlite"), not(feature = "postgres")))]
fn not_built_with(backend: &str, feature: &str, install: &str) -> CliError {
    CliError::usage(format!(
        "this recoverable-write was built without {backend} ledgers (feature `{feature}`): \
         install one that has them with `{install}`"
    ))
}

/// A URL without its userinfo (user and password), for messages.
#[cfg(any(feature = "postgres", test))]
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_userinfo_in_messages() {
        assert_eq!(
            redact_url("postgres://ops:hunter2@db:5432/ops"),
            "postgres://***@db:5432/ops"
        );
        assert_eq!(redact_url("postgres://db/ops"), "postgres://db/ops");
    }
}
