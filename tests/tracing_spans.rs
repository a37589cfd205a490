//! Issue 30 item 8: traces an on-call engineer can follow. A write opens one span
//! (`recoverable_write.write`) with its operation id, tenant, contract, attempt and generation,
//! and events for its steps; each recovery step opens one (`recoverable_write.recover`) with the
//! same operation id. No body, key value or credential is in any of them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use recoverable_write::State;
use recoverable_write::testing::drill::{CREDENTIAL, Drill, new_op, send};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as the capturing layer saw it: its name and its fields, as recorded so far.
#[derive(Clone, Debug)]
struct SpanSeen {
    name: &'static str,
    fields: BTreeMap<String, String>,
}

/// An event: its message, its fields, and the span it happened in.
#[derive(Clone, Debug)]
struct EventSeen {
    message: String,
    fields: BTreeMap<String, String>,
    span: Option<u64>,
}

#[derive(Default, Debug)]
struct Captured {
    spans: BTreeMap<u64, SpanSeen>,
    events: Vec<EventSeen>,
}

impl Captured {
    fn spans_named(&self, name: &str) -> Vec<(u64, SpanSeen)> {
        self.spans
            .iter()
            .filter(|(_, s)| s.name == name)
            .map(|(id, s)| (*id, s.clone()))
            .collect()
    }

    fn messages_in(&self, span: u64) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e.span == Some(span))
            .map(|e| e.message.clone())
            .collect()
    }

    fn event_in(&self, span: u64, message: &str) -> EventSeen {
        self.events
            .iter()
            .find(|e| e.span == Some(span) && e.message == message)
            .cloned()
            .unwrap_or_else(|| panic!("no event {message:?} in span {span}: {self:#?}"))
    }

    /// Every value any span or event recorded, with where it was.
    fn every_value(&self) -> Vec<(String, String)> {
        let spans = self.spans.values().flat_map(|s| {
            s.fields
                .iter()
                .map(move |(k, v)| (format!("span {} field {k}", s.name), v.clone()))
        });
        let events = self.events.iter().flat_map(|e| {
            e.fields
                .iter()
                .map(move |(k, v)| (format!("event {:?} field {k}", e.message), v.clone()))
                .chain(std::iter::once((
                    "event message".to_owned(),
                    e.message.clone(),
                )))
        });
        spans.chain(events).collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// Captures every span, every field recorded on it, and every event with its span.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Captured>>);

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().spans.insert(
            id.into_u64(),
            SpanSeen {
                name: attrs.metadata().name(),
                fields,
            },
        );
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut captured = self.0.lock().unwrap();
        if let Some(span) = captured.spans.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        let span = ctx.event_span(event).map(|s| s.id().into_u64());
        self.0.lock().unwrap().events.push(EventSeen {
            message,
            fields,
            span,
        });
    }
}

#[tokio::test]
async fn a_lost_write_and_its_recovery_are_one_story_without_secrets() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));

    let drill = Drill::start().await;
    let mut svc = drill.writer();
    let op = new_op("intent-traced");
    // A body value no trace may carry.
    let body_marker = "BODY-MARKER-7f3e91";
    drill.vendor.faults().drop_after_commit(1);
    let lost = send(&mut svc, drill.ticket_request(&op, body_marker)).await;
    assert!(lost.is_err(), "the response was lost: {lost:?}");
    let row = drill
        .recover_until(op.id(), |r| r.state == State::Succeeded)
        .await;
    assert_eq!(drill.vendor.tickets_created(), 1);
    assert_eq!(
        drill.vendor.posts_received(),
        1,
        "recovered by a lookup alone"
    );

    let log = drill.evidence(op.id()).await;
    let sent = log
        .iter()
        .find(|e| e.entry.kind == "attempt_result")
        .expect("the attempt's result is in the log");
    let attempt = sent.entry.attempt_id.expect("an attempt id").to_string();
    let looked_up = log
        .iter()
        .find(|e| e.entry.kind == "lookup" && e.entry.evidence.is_some())
        .expect("the lookup is in the log");

    let captured = capture.0.lock().unwrap();

    // One write span, with every field, and the steps in order.
    let writes = captured.spans_named("recoverable_write.write");
    assert_eq!(writes.len(), 1, "one span per write: {writes:#?}");
    let (write_id, write) = &writes[0];
    let field = |span: &SpanSeen, name: &str| {
        span.fields
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("span {} has no {name}: {span:#?}", span.name))
    };
    assert_eq!(field(write, "operation"), op.id().to_string());
    assert_eq!(field(write, "tenant"), "tenant-a");
    assert_eq!(field(write, "contract"), &*row.contract.name);
    assert_eq!(field(write, "attempt"), attempt);
    assert_eq!(
        field(write, "generation"),
        sent.entry.generation.to_string()
    );
    let steps: Vec<String> = captured
        .messages_in(*write_id)
        .into_iter()
        .filter(|m| {
            [
                "send claimed",
                "request sent",
                "answer received",
                "no answer",
                "attempt classified",
                "result recorded",
            ]
            .contains(&m.as_str())
        })
        .collect();
    assert_eq!(
        steps,
        [
            "send claimed",
            "request sent",
            "no answer",
            "attempt classified",
            "result recorded"
        ],
        "{captured:#?}"
    );
    let classified = captured.event_in(*write_id, "attempt classified");
    assert_eq!(classified.fields["evidence"], "unknown");
    let recorded = captured.event_in(*write_id, "result recorded");
    assert_eq!(recorded.fields["state"], "UNKNOWN");

    // The recovery step that found the ticket carries the same operation id, and the attempt
    // whose answer was lost.
    let recoveries = captured.spans_named("recoverable_write.recover");
    let (recover_id, recover) = recoveries
        .iter()
        .find(|(id, _)| {
            captured
                .messages_in(*id)
                .contains(&"lookup answered".to_owned())
        })
        .expect("a recovery span with the lookup");
    assert_eq!(field(recover, "operation"), op.id().to_string());
    assert_eq!(field(recover, "tenant"), "tenant-a");
    assert_eq!(field(recover, "contract"), &*row.contract.name);
    assert_eq!(field(recover, "attempt"), attempt);
    assert_eq!(
        field(recover, "generation"),
        looked_up.entry.generation.to_string()
    );
    let steps: Vec<String> = captured
        .messages_in(*recover_id)
        .into_iter()
        .filter(|m| {
            [
                "looking the operation up",
                "lookup answered",
                "decision recorded",
            ]
            .contains(&m.as_str())
        })
        .collect();
    assert_eq!(
        steps,
        [
            "looking the operation up",
            "lookup answered",
            "decision recorded"
        ]
    );
    assert_eq!(
        captured.event_in(*recover_id, "lookup answered").fields["evidence"],
        "succeeded"
    );
    assert_eq!(
        captured.event_in(*recover_id, "decision recorded").fields["state"],
        "SUCCEEDED"
    );

    // Nothing anywhere carries the key, the body or a credential.
    let key = row.idempotency_key.as_str().to_owned();
    let secret = CREDENTIAL.trim_start_matches("Bearer ");
    let values = captured.every_value();
    assert!(values.len() > 20, "the traces were captured: {values:#?}");
    for (at, value) in &values {
        assert!(
            !value.contains(&key),
            "{at} carries the idempotency key: {value}"
        );
        assert!(
            !value.contains(body_marker),
            "{at} carries the body: {value}"
        );
        assert!(
            !value.contains(secret),
            "{at} carries the credential: {value}"
        );
    }
}
