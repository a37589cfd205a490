//! `GET /activity`: what happened over the last day, hour by hour, drawn on the server: the
//! operations created, finished and escalated to review per hour, and the review backlog at
//! the end of each hour, from the ledger's own times
//! ([`ListingLedger::activity`](crate::ledger::ListingLedger::activity)).

use askama::Template;
use axum::extract::{Extension, OriginalUri, State as AxState};
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::charts::{Chart, Series, bars};
use super::live::{self, Live};
use super::views::{Chrome, ledger_failed, queue_root, scope_label};
use super::{ReviewerIdentity, Shared, mount_base, now_ms, words};
use crate::ledger::{Activity, ActivityWindow};

/// The colours of the series (the page's accent, green, red, and amber for the backlog).
const CREATED: &str = "#1f5fbf";
const FINISHED: &str = "#2e8b57";
const ESCALATED: &str = "#c0392b";
const BACKLOG: &str = "#b86e00";

/// One hour's numbers, for the table under the charts.
struct HourRow {
    hour: String,
    created: u64,
    finished: u64,
    escalated: u64,
    backlog: u64,
}

#[derive(Template)]
#[template(path = "review/activity.html")]
struct ActivityPage {
    chrome: Chrome,
    back: String,
    live: Live,
    /// `From 2026-12-01 10:00 to 2026-12-02 10:00 UTC`.
    span: String,
    totals: String,
    flow_svg: String,
    backlog_svg: String,
    rows: Vec<HourRow>,
}

/// `09:00`: an interval's start as a time of day (UTC).
fn hour(ms: i64) -> String {
    words::clock(ms)[..5].to_owned()
}

pub(super) async fn activity(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
) -> Response {
    let base = mount_base(original.path(), uri.path());
    let now = now_ms();
    let window = ActivityWindow::last_day_hourly(now);
    let a = match cfg.ledger.activity(&cfg.scope, window).await {
        Ok(a) => a,
        Err(e) => return ledger_failed(&who, &base, &e),
    };
    let view = ActivityPage {
        chrome: Chrome::new(&base, "Activity", Some(&who), &scope_label(&cfg.scope)),
        back: queue_root(&base),
        live: Live::new(&cfg, now),
        span: format!(
            "From {} to {} UTC",
            &words::utc(window.since_ms)[..16],
            &words::utc(window.until_ms)[..16]
        ),
        totals: totals(&a),
        flow_svg: flow_chart(&a),
        backlog_svg: backlog_chart(&a),
        rows: a
            .buckets
            .iter()
            .rev()
            .map(|b| HourRow {
                hour: format!("{}–{}", hour(b.start_ms), hour(b.end_ms)),
                created: b.created,
                finished: b.finished,
                escalated: b.escalated,
                backlog: b.backlog,
            })
            .collect(),
    };
    live::page(&cfg, StatusCode::OK, view.render())
}

fn totals(a: &Activity) -> String {
    let sum = |f: fn(&crate::ledger::ActivityBucket) -> u64| a.buckets.iter().map(f).sum::<u64>();
    format!(
        "{} created, {} finished, {} escalated to review; {} in review now.",
        sum(|b| b.created),
        sum(|b| b.finished),
        sum(|b| b.escalated),
        a.backlog_now
    )
}

/// `Created (12)`: a series' name and its total over the day.
fn total(name: &str, a: &Activity, f: fn(&crate::ledger::ActivityBucket) -> u64) -> String {
    format!("{name} ({})", a.buckets.iter().map(f).sum::<u64>())
}

fn labels(a: &Activity) -> Vec<String> {
    a.buckets.iter().map(|b| hour(b.start_ms)).collect()
}

/// Created, finished and escalated per hour, side by side.
pub(super) fn flow_chart(a: &Activity) -> String {
    let series = [
        Series {
            name: "Created",
            legend: total("Created", a, |b| b.created),
            color: CREATED,
            values: a.buckets.iter().map(|b| b.created).collect(),
        },
        Series {
            name: "Finished",
            legend: total("Finished", a, |b| b.finished),
            color: FINISHED,
            values: a.buckets.iter().map(|b| b.finished).collect(),
        },
        Series {
            name: "Escalated",
            legend: total("Escalated", a, |b| b.escalated),
            color: ESCALATED,
            values: a.buckets.iter().map(|b| b.escalated).collect(),
        },
    ];
    bars(&Chart {
        id: "flow",
        height: 230.0,
        title: "Operations per hour: created, finished, escalated to review",
        description: "Bars per hour (UTC) over the last 24 hours: operations created, \
                      operations that reached a final state, and operations handed to a person.",
        labels: &labels(a),
        series: &series,
    })
}

/// The review backlog at the end of each hour.
pub(super) fn backlog_chart(a: &Activity) -> String {
    let series = [Series {
        name: "In review",
        legend: format!("In review at the end of the hour ({} now)", a.backlog_now),
        color: BACKLOG,
        values: a.buckets.iter().map(|b| b.backlog).collect(),
    }];
    bars(&Chart {
        id: "backlog",
        height: 170.0,
        title: "Review backlog at the end of each hour",
        description: "Operations in manual review at the end of each hour (UTC) over the last \
                      24 hours.",
        labels: &labels(a),
        series: &series,
    })
}
