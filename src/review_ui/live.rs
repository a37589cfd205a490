//! A page that stays current: every page says when it was read, and (unless switched off) a
//! small script refreshes it in place without ever losing what a person is typing.
//!
//! The script fetches the page again every [`ReviewUiOptions::refresh_every`] and swaps in its
//! read-only regions (`data-live="…"`): the queue's counts, alerts, rows and pager; an
//! operation's summary, facts, attempts and timeline, and the "read at" line. The forms are
//! swapped only when the operation changed (a new version) and nobody is filling them in: the
//! whole page is then the new one, forms, version and token included. While a person fills in
//! a form (a field changed, or the focus in one) it is never touched: if the operation changed
//! meanwhile, the page says so and offers a reload instead, and the form still carries the
//! version the person read, so sending it is refused as stale, as without the script.
//!
//! Without JavaScript nothing refreshes: the "read at" line has a reload link.
//!
//! The Content-Security-Policy of a page that carries the script still forbids every script but
//! this one: it names the script's SHA-256 (`script-src 'sha256-…'`), and allows
//! `connect-src 'self'` for its fetch. Pages without it (messages, the quarantined row's raw
//! view, every page with [`ReviewUiOptions::no_refresh`]) allow no script at all.

use std::sync::OnceLock;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use sha2::{Digest, Sha256};

use super::views::html;
use super::{ReviewUiOptions, words};

/// The refresh interval by default.
pub(super) const DEFAULT_REFRESH: Duration = Duration::from_secs(15);

/// The shortest refresh interval [`ReviewUiOptions::refresh_every`] accepts.
const MIN_REFRESH: Duration = Duration::from_secs(1);

impl ReviewUiOptions {
    /// How often an open page refreshes itself (default 15 s, at least 1 s): the queue's
    /// counts and rows, an operation's summary and timeline, and the "read at" line. A form
    /// being filled in is never touched (see the [module docs](crate::review_ui)).
    pub fn refresh_every(mut self, every: Duration) -> Self {
        self.refresh = Some(every.max(MIN_REFRESH));
        self
    }

    /// Pages never refresh themselves: they say when they were read, with a reload link, and
    /// carry no script.
    pub fn no_refresh(mut self) -> Self {
        self.refresh = None;
        self
    }
}

/// What a page shows of its freshness: when it was read, and how often it refreshes.
pub(super) struct Live {
    /// `08:35:12 UTC`.
    pub(super) read_at: String,
    /// The refresh interval in ms; 0: off.
    pub(super) refresh_ms: u128,
    /// `15 s`.
    pub(super) every: String,
    /// The script, when the page refreshes.
    pub(super) script: &'static str,
}

impl Live {
    /// The freshness of a page read at `now` (ms since epoch).
    pub(super) fn new(cfg: &ReviewUiOptions, now: i64) -> Self {
        let (refresh_ms, every, script) = match cfg.refresh {
            Some(d) => (d.as_millis(), every_label(d), SCRIPT),
            None => (0, String::new(), ""),
        };
        Self {
            read_at: format!("{} UTC", words::clock(now)),
            refresh_ms,
            every,
            script,
        }
    }
}

fn every_label(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 120 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else {
        format!("{s} s")
    }
}

/// A page that carries the refresh script (when `cfg` refreshes): [`html`], with a
/// Content-Security-Policy that allows that script, and no other.
pub(super) fn page(
    cfg: &ReviewUiOptions,
    status: StatusCode,
    body: Result<String, askama::Error>,
) -> Response {
    let mut res = html(status, body);
    if cfg.refresh.is_some() && res.status() == status {
        res.headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, content_security_policy());
    }
    res
}

/// The Content-Security-Policy of a page with the refresh script: no script but [`SCRIPT`] (by its hash), fetches
/// only to this origin (the script's), no framing, forms only to this origin.
pub(super) fn content_security_policy() -> HeaderValue {
    static CSP: OnceLock<HeaderValue> = OnceLock::new();
    CSP.get_or_init(|| {
        let hash = base64(&Sha256::digest(SCRIPT.as_bytes()));
        HeaderValue::from_str(&format!(
            "default-src 'none'; script-src 'sha256-{hash}'; connect-src 'self'; \
             style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'"
        ))
        .unwrap_or_else(|_| {
            HeaderValue::from_static(
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; \
                 form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            )
        })
    })
    .clone()
}

/// Standard base64 with padding (the CSP hash source's encoding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The refresh script, inlined in the pages (its hash is in the CSP). It acts on the element
/// `#live` (`data-refresh-ms`, and `data-version` on an operation's page), its regions
/// `[data-live]`, the notes `[data-refresh-note]` it shows, and `[data-live-notice]`.
pub(super) const SCRIPT: &str = r#"(function () {
  "use strict";
  var root = document.getElementById("live");
  if (!root || !window.fetch || !window.DOMParser) return;
  var every = parseInt(root.getAttribute("data-refresh-ms"), 10);
  if (!(every > 0)) return;
  var dirty = false, timer = null;
  function inPostForm(el) {
    return !!(el && el.form && (el.form.getAttribute("method") || "").toLowerCase() === "post");
  }
  function mark(e) { if (inPostForm(e.target)) dirty = true; }
  document.addEventListener("input", mark, true);
  document.addEventListener("change", mark, true);
  function busy() { return dirty || inPostForm(document.activeElement); }
  function showNotes() {
    var notes = document.querySelectorAll("[data-refresh-note]");
    for (var i = 0; i < notes.length; i++) notes[i].hidden = false;
  }
  function say(text) {
    var n = document.querySelector("[data-live-notice]");
    if (!n) return;
    n.textContent = text + " ";
    var a = document.createElement("a");
    a.href = "";
    a.textContent = "Reload";
    n.appendChild(a);
    n.hidden = false;
  }
  function swapRegions(fresh) {
    var regions = root.querySelectorAll("[data-live]");
    for (var i = 0; i < regions.length; i++) {
      var name = regions[i].getAttribute("data-live");
      var next = fresh.querySelector('[data-live="' + name + '"]');
      if (!next) continue;
      var was = regions[i].querySelectorAll("details"), now = next.querySelectorAll("details");
      for (var j = 0; j < was.length && j < now.length; j++) now[j].open = was[j].open;
      regions[i].replaceWith(document.adoptNode(next));
    }
  }
  function apply(fresh) {
    var was = root.getAttribute("data-version"), now = fresh.getAttribute("data-version");
    if (was === null || was === now) {
      swapRegions(fresh);
    } else if (!busy()) {
      root.innerHTML = fresh.innerHTML;
      root.setAttribute("data-version", now || "");
      dirty = false;
    } else {
      say("This operation changed since you read it (version " + now + " now; your form acts" +
          " on version " + was + " and would be refused). Copy what you typed, then reload to" +
          " see it as it is now.");
    }
    showNotes();
  }
  function failed(why) {
    var notes = document.querySelectorAll("[data-refresh-note]");
    for (var i = 0; i < notes.length; i++) {
      notes[i].textContent = " · could not refresh (" + why + "): showing what was read then.";
    }
  }
  function tick() {
    if (document.hidden) { schedule(); return; }
    fetch(location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (res) {
        if (!res.ok) throw new Error("the page answered " + res.status);
        return res.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("live");
        if (!fresh) throw new Error("not a review page");
        apply(fresh);
      })
      .catch(function (e) { failed(e && e.message ? e.message : "no answer"); })
      .then(schedule);
  }
  function schedule() { clearTimeout(timer); timer = setTimeout(tick, every); }
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) { clearTimeout(timer); tick(); }
  });
  showNotes();
  schedule();
})();"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_encoding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn the_policy_names_the_script_by_its_hash_and_nothing_else() {
        let csp = content_security_policy();
        let csp = csp.to_str().unwrap();
        let hash = base64(&Sha256::digest(SCRIPT.as_bytes()));
        assert!(
            csp.contains(&format!("script-src 'sha256-{hash}';")),
            "{csp}"
        );
        assert!(!csp.contains("unsafe-eval") && !csp.contains("script-src 'self'"));
    }
}
