//! What every browser test needs: chromium and chromedriver found on PATH (or the test skipped,
//! unless `CI=true`), a chromedriver process killed however the test ends, a headless Chromium
//! session, the application's authentication stand-in, screenshots, and the page's flash.
#![allow(dead_code)] // each test file uses its own part of it

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use recoverable_write::review_ui::{self, ReviewUiOptions, ReviewerIdentity};

/// chromedriver, killed when the test ends however it ends.
pub struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The application's authentication stand-in: everyone is alice, who may resolve.
pub async fn as_alice(mut req: Request, next: Next) -> Response {
    req.extensions_mut()
        .insert(ReviewerIdentity::resolver("alice"));
    next.run(req).await
}

pub async fn shoot(client: &Client, dir: &Path, name: &str) {
    let png = client.screenshot().await.expect("screenshot");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
}

/// The text of the page's `.flash` once it starts with `prefix`. After a form is submitted the
/// previous page (and its own `.flash`, such as "Claimed.") stays until the browser has
/// navigated, so the first `.flash` found can be the old one, or go stale while it is read:
/// poll until the new page's flash is there, for at most 10 s, and return what was last seen.
pub async fn flash_starting_with(
    client: &Client,
    prefix: &str,
) -> Result<String, fantoccini::error::CmdError> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = match client.find(Locator::Css(".flash")).await {
            Ok(flash) => flash.text().await.ok(),
            Err(_) => None,
        };
        match seen {
            Some(text) if text.starts_with(prefix) => return Ok(text),
            Some(text) if Instant::now() >= until => return Ok(text),
            None if Instant::now() >= until => {
                return client.find(Locator::Css(".flash")).await?.text().await;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub async fn start_driver(chromedriver: &Path) -> (Driver, String) {
    let port = free_port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver(child);
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (driver, url)
}

pub async fn browser(webdriver: &str, chromium: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--window-size=1366,900",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
            ],
        }),
    );
    ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(webdriver)
        .await
        .expect("a WebDriver session with headless Chromium")
}

/// chromium and chromedriver, or `None` after saying the test is skipped (a failure with
/// `CI=true`).
pub fn chromium_and_driver(test: &str) -> Option<(PathBuf, PathBuf)> {
    match (
        on_path(&["chromium", "chromium-browser", "google-chrome"]),
        on_path(&["chromedriver"]),
    ) {
        (Some(chromium), Some(chromedriver)) => Some((chromium, chromedriver)),
        _ => {
            let msg = format!(
                "{test}: chromium and chromedriver are needed \
                 (apt-get install chromium chromium-driver)"
            );
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
            eprintln!("SKIPPED: {msg}");
            None
        }
    }
}

/// The repository's `target/review-ui-screenshots/` (this package is `browser-tests/`), created.
pub fn screenshots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/review-ui-screenshots");
    std::fs::create_dir_all(&dir).expect("create the screenshots folder");
    dir
}

/// The review page built from `options`, under `/ops` behind the application's authentication
/// stand-in ([`as_alice`]), served on a free loopback port: the site's address
/// (`http://127.0.0.1:PORT`) and the server's task (abort it when the test ends).
pub async fn serve_as_alice(
    options: ReviewUiOptions,
) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    let app = axum::Router::new()
        .nest("/ops", review_ui::router(options))
        .layer(axum::middleware::from_fn(as_alice));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let site = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    (site, server)
}

/// chromedriver started and a headless Chromium session on it: keep the [`Driver`] alive as
/// long as the [`Client`].
pub async fn open_browser(chromium: &Path, chromedriver: &Path) -> (Driver, Client) {
    let (driver, webdriver) = start_driver(chromedriver).await;
    let client = browser(&webdriver, chromium).await;
    (driver, client)
}
