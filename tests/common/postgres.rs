//! The PostgreSQL test harness shared by `tests/postgres_ledger.rs` and
//! `tests/postgres_workers.rs`: find the server (skip with a printed reason, fail in CI) and give
//! each test a schema of its own, dropped at the end.
#![allow(dead_code)]

use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Connection};

pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The server's URL if one answers; otherwise `None` after printing why (a panic in CI).
pub async fn pg_url() -> Option<String> {
    let url = std::env::var("RW_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let why = match tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&url)).await
    {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            return Some(url);
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer within 5 s".to_owned(),
    };
    let shown = redact(&url);
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("PostgreSQL not reachable at {shown} ({why}); CI needs it (see .ci/run)");
    }
    // Once per test binary, and past the harness's output capture, so a plain `cargo test`
    // shows why these tests did nothing.
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipping: PostgreSQL not reachable at {shown} ({why}); set RW_POSTGRES_URL"
        );
    });
    None
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// A schema of this test's own, dropped (with everything in it) when the guard goes.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            name: format!("rw_test_{}", uuid::Uuid::new_v4().simple()),
        }
    }

    pub async fn raw(&self) -> PgConnection {
        PgConnection::connect(&self.url)
            .await
            .expect("raw connection")
    }

    pub async fn exec(&self, sql: String) -> u64 {
        let mut conn = self.raw().await;
        let done = sqlx::query(AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
            .expect("raw sql");
        let _ = conn.close().await;
        done.rows_affected()
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop runs inside the test's runtime: the async cleanup gets a thread of its own, and
        // the runtime keeps running meanwhile (connections returning to a pool need it).
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            rt.block_on(async move {
                let mut conn = PgConnection::connect(&url).await?;
                sqlx::query("SET lock_timeout = '30s'")
                    .execute(&mut conn)
                    .await?;
                sqlx::query(AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS \"{name}\" CASCADE"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        });
        let join = move || cleanup.join();
        let joined = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(join)
            }
            _ => join(),
        };
        if let Ok(Err(e)) = joined {
            eprintln!("could not drop test schema {}: {e}", self.name);
        }
    }
}
