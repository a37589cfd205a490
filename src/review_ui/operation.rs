//! `GET /op/{id}`: one operation's page: what a person needs to decide in plain language, late
//! evidence and contradictions, the redacted handoff package (request, budget, authorization,
//! attempts, evidence timeline) and the claim and resolve forms.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Extension, OriginalUri, Path, Query, State as AxState};
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::lookup::{Lookup, load, lookup_failed, tenant_for};
use super::views::{Chrome, engine_health, ledger_failed, queue_root, scope_label};
use super::{
    ReviewUiOptions, ReviewerIdentity, Shared, csrf, mount_base, now_ms, quarantine, words,
};
use crate::encoding::encode_component;
use crate::ledger::TenantScope;
use crate::operation::OperationId;
use crate::reconcile::EngineHealth;
use crate::review::{
    AuthorizationState, BudgetUsed, EvidenceSummary, HandoffPackage, ParameterSummary, ReviewError,
};
use crate::state::State;

struct AttemptView {
    id: String,
    generation: u64,
    at: String,
    result: String,
}

/// One entry of the evidence timeline.
pub(super) struct EventView {
    pub(super) seq: i64,
    pub(super) at: String,
    pub(super) ago: String,
    pub(super) kind: String,
    pub(super) transition: String,
    pub(super) attempt: String,
    pub(super) generation: u64,
    pub(super) evidence: String,
    pub(super) note: String,
    pub(super) class: &'static str,
}

struct LateView {
    at: String,
    what: String,
}

struct FormView {
    claim_action: String,
    resolve_action: String,
    tenant: String,
    version: u64,
    csrf: String,
    can_claim: bool,
    can_resolve: bool,
    claimed_by_me: bool,
    /// Another reviewer holds it: claiming means taking it over (audited, names both).
    claimed_by: String,
    /// A conclusive success recorded after the escalation: offered as the resolution.
    suggest_success: bool,
    suggested_ref: String,
}

#[derive(Template)]
#[template(path = "review/operation.html")]
struct OperationPage {
    chrome: Chrome,
    back: String,
    id: String,
    state: &'static str,
    badge: &'static str,
    done: String,
    headline: String,
    facts: Vec<String>,
    advice: Vec<String>,
    late: Vec<LateView>,
    late_heading: String,
    /// The late evidence holds a conclusive success, offered below as the resolution.
    late_success: bool,
    /// The contradictions of the final state, while unacknowledged.
    contradictions: Vec<LateView>,
    form: Option<FormView>,
    read_only_note: bool,
    terminal: bool,
    fields: Vec<(String, String)>,
    request: Vec<(String, String)>,
    budget: Vec<(String, String)>,
    authorization: Vec<(String, String)>,
    attempts: Vec<AttemptView>,
    timeline: Vec<EventView>,
    /// Set when the row is quarantined although this version reads it: only a release gives it
    /// back to recovery.
    quarantine: Option<quarantine::Banner>,
    /// The version shown (the refresh script compares it with the page's latest).
    version: u64,
    /// When the page was read, and how it refreshes.
    live: super::live::Live,
}

/// Labelled values, as the page's lists show them.
pub(super) fn pairs(v: &[(&str, String)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

pub(super) async fn operation(
    AxState(cfg): AxState<Shared>,
    Extension(who): Extension<ReviewerIdentity>,
    OriginalUri(original): OriginalUri,
    uri: Uri,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let base = mount_base(original.path(), uri.path());
    let id = OperationId::new(id);
    let tenant = match tenant_for(&cfg, params.get("tenant").map(String::as_str), &id).await {
        Ok(t) => t,
        Err(l) => return lookup_failed(&who, &base, &id, l),
    };
    let done = done_flash(params.get("done").map(String::as_str));
    // A row this version cannot decode is shown by the columns it can read, never as a 503.
    let aside = match cfg.reviews.quarantine_package(&tenant, &id).await {
        Ok(a) => a,
        Err(ReviewError::Ledger(e)) => return ledger_failed(&who, &base, &e),
        Err(e) => return lookup_failed(&who, &base, &id, Lookup::Bad(e.to_string())),
    };
    if let Some(q) = aside.as_ref().filter(|q| !q.readable) {
        return quarantine::page(&cfg, &who, &base, q, now_ms(), done);
    }
    let p = match load(&cfg, Some(tenant.as_str()), &id).await {
        Ok(p) => p,
        Err(l) => return lookup_failed(&who, &base, &id, l),
    };
    let now = now_ms();
    let engine = engine_health(&*cfg.ledger, &TenantScope::Tenant(tenant.clone()), now).await;
    let mut view = operation_view(&cfg, &who, &base, &p, now, done, engine.as_ref());
    view.quarantine = aside
        .as_ref()
        .map(|q| quarantine::banner(&cfg, &who, &base, q, now_ms()));
    if let Some(line) = retention_line(&cfg, &p).await {
        view.fields.push(("Retention".to_owned(), line));
    }
    super::live::page(&cfg, StatusCode::OK, view.render())
}

/// The line that says what the action just taken did (`done` in the address after a form).
fn done_flash(done: Option<&str>) -> &'static str {
    match done {
        Some("claim") => "Claimed. Automatic sends are stopped; you hold this operation now.",
        Some("resolve") => "Resolved. Your decision and reason are in the timeline below.",
        Some("keep_pending") => "Kept pending. Your note is in the timeline below.",
        Some("release") => {
            "Released from quarantine. The recovery engine picks it up at its next pass; the \
             release is in the timeline below."
        }
        _ => "",
    }
}

/// When the operation's details and its row go, if the page knows the retention settings.
async fn retention_line(cfg: &ReviewUiOptions, p: &HandoffPackage) -> Option<String> {
    let purger = cfg.purger.as_ref()?;
    Some(match cfg.ledger.get(&p.tenant, &p.operation_id).await {
        Ok(record) => record.and_then(|r| purger.dates(&r)).map_or_else(
            || crate::retention::RetentionDates::UNFINISHED.to_owned(),
            |d| d.describe(),
        ),
        Err(_) => "unknown (the ledger did not answer)".to_owned(),
    })
}

fn operation_view(
    cfg: &ReviewUiOptions,
    who: &ReviewerIdentity,
    base: &str,
    p: &HandoffPackage,
    now: i64,
    done: &str,
    engine: Option<&EngineHealth>,
) -> OperationPage {
    let s = words::summary_with(p, now, engine);
    let claim = words::last_claim(p);
    let claimed_by = claim.as_ref().map(|(w, _, _)| w.as_str());
    let terminal = p.state.is_terminal();
    // A success the vendor reported after the escalation (a verified callback, a late
    // response or lookup answer): shown first, and offered as the resolution.
    let late_success = crate::review::late_success(&p.evidence);
    let late_ref = late_success.and_then(|e| match &e.evidence {
        Some(crate::evidence::Evidence::Succeeded { remote_ref }) => remote_ref.clone(),
        _ => None,
    });
    let offer_success = p.state == State::ManualReview && late_success.is_some();
    let form = (who.may_resolve && !terminal).then(|| {
        forms(
            cfg,
            who,
            base,
            p,
            claimed_by,
            offer_success,
            late_ref.as_deref(),
        )
    });
    let chrome = Chrome::new(
        base,
        format!("Operation {}", p.operation_id),
        Some(who),
        &scope_label(&cfg.scope),
    )
    .with_engine(engine);
    OperationPage {
        chrome,
        back: queue_root(base),
        id: p.operation_id.to_string(),
        state: words::state(p.state),
        badge: words::badge(p.state),
        done: done.to_owned(),
        headline: s.headline,
        facts: s.facts,
        advice: s.advice,
        late: late_views(p, now),
        late_heading: late_heading(claimed_by, p.state),
        late_success: offer_success,
        contradictions: contradictions(p, now),
        read_only_note: !who.may_resolve && !terminal,
        terminal,
        form,
        fields: pairs(&facts(p, late_ref.as_deref(), now)),
        request: pairs(&request(&p.parameters)),
        budget: pairs(&budget(&p.budget, now)),
        authorization: pairs(&authorization(&p.authorization)),
        attempts: attempts(p, now),
        timeline: timeline(&p.evidence, &late_seqs(p), now),
        quarantine: None,
        version: p.version,
        live: super::live::Live::new(cfg, now),
    }
}

/// A moment as a date and how long ago.
fn utc_ago(ms: i64, now: i64) -> String {
    format!("{} ({} ago)", words::utc(ms), words::age(now - ms))
}

/// A moment as a time of day and how long ago.
fn clock_ago(ms: i64, now: i64) -> String {
    format!("{} ({} ago)", words::clock(ms), words::age(now - ms))
}

/// The claim and resolve forms, with the version shown and a security token bound to the
/// person, the operation and that version (`claimed_by`: who holds it now).
fn forms(
    cfg: &ReviewUiOptions,
    who: &ReviewerIdentity,
    base: &str,
    p: &HandoffPackage,
    claimed_by: Option<&str>,
    offer_success: bool,
    late_ref: Option<&str>,
) -> FormView {
    let op_path = format!("{base}/op/{}", encode_component(p.operation_id.as_str()));
    FormView {
        claim_action: format!("{op_path}/claim"),
        resolve_action: format!("{op_path}/resolve"),
        tenant: p.tenant.to_string(),
        version: p.version,
        csrf: csrf::token(
            cfg.csrf_key.bytes(),
            &who.name,
            p.tenant.as_str(),
            p.operation_id.as_str(),
            p.version,
        ),
        can_claim: true,
        can_resolve: p.state == State::ManualReview,
        claimed_by_me: claimed_by == Some(who.name.as_str()),
        claimed_by: claimed_by
            .filter(|w| *w != who.name)
            .map(str::to_owned)
            .unwrap_or_default(),
        suggest_success: offer_success,
        suggested_ref: late_ref.map(str::to_owned).unwrap_or_default(),
    }
}

/// The evidence recorded after the operation was claimed or escalated (or last decided).
fn late_views(p: &HandoffPackage, now: i64) -> Vec<LateView> {
    words::late_evidence(p)
        .into_iter()
        .map(|e| LateView {
            at: clock_ago(e.at_ms, now),
            what: match (&e.evidence, &e.note) {
                (Some(ev), _) => words::evidence(ev),
                (None, Some(n)) => n.clone(),
                (None, None) => words::kind(&e.kind),
            },
        })
        .collect()
}

/// The sequence numbers of the late evidence, marked in the timeline.
fn late_seqs(p: &HandoffPackage) -> Vec<i64> {
    words::late_evidence(p).iter().map(|e| e.seq).collect()
}

/// What the late evidence came after: the claim, the escalation or the last decision.
fn late_heading(claimed_by: Option<&str>, state: State) -> String {
    match (claimed_by, state) {
        (Some(w), _) => format!("Late evidence after {w} claimed it"),
        (None, State::ManualReview) => "Late evidence after it went to review".to_owned(),
        _ => "Evidence recorded after the last decision".to_owned(),
    }
}

/// The contradictions of the final state, while unacknowledged.
fn contradictions(p: &HandoffPackage, now: i64) -> Vec<LateView> {
    if p.contradiction_ms.is_none() {
        return Vec::new();
    }
    p.evidence
        .iter()
        .filter(|e| e.kind == crate::contradiction::CONTRADICTION)
        .map(|e| LateView {
            at: clock_ago(e.at_ms, now),
            what: e.note.clone().unwrap_or_else(|| words::kind(&e.kind)),
        })
        .collect()
}

/// The operation's facts: tenant, action, state, vendor reference, times, version.
fn facts(p: &HandoffPackage, late_ref: Option<&str>, now: i64) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("Tenant", p.tenant.to_string()),
        ("Action", p.action.clone()),
        ("Intent", p.intent_ref.clone()),
        ("State", words::state(p.state).to_owned()),
    ];
    if let Some(r) = p.last_result {
        fields.push(("Last result", words::state(r).to_owned()));
    }
    fields.push((
        "Vendor reference",
        match (&p.remote_ref, late_ref) {
            (Some(r), _) => r.clone(),
            (None, Some(r)) => format!("{r} (reported after the escalation; not confirmed yet)"),
            (None, None) => "none yet".into(),
        },
    ));
    if let Some(c) = p.evidence.first().map(|e| e.at_ms) {
        fields.push(("Created", utc_ago(c, now)));
    }
    if let Some(c) = p.evidence.last().map(|e| e.at_ms) {
        fields.push(("Last event", utc_ago(c, now)));
    }
    fields.push((
        "Version / generation",
        format!("{} / {}", p.version, p.generation),
    ));
    fields
}

/// The request, redacted: header names and body field names, never a value.
fn request(pr: &ParameterSummary) -> Vec<(&'static str, String)> {
    vec![
        ("Request", format!("{} {}", pr.method, pr.url)),
        ("Contract", pr.contract.clone()),
        ("Idempotency key", key_line(pr)),
        ("Reference at the vendor", vendor_reference_line(pr)),
        ("Vendor lookup", vendor_lookup_line(pr)),
        (
            "Headers stored",
            if pr.header_names.is_empty() {
                "none".into()
            } else {
                pr.header_names.join(", ")
            },
        ),
        (
            "Body",
            if pr.body_fields.is_empty() {
                format!("{} bytes", pr.body_bytes)
            } else {
                format!(
                    "{} bytes; fields {} (values hidden)",
                    pr.body_bytes,
                    pr.body_fields.join(", ")
                )
            },
        ),
        ("Payload hash", pr.payload_hash.clone()),
    ]
}

/// The key the vendor saw and where the contract put it: what to look the write up by.
fn key_line(pr: &ParameterSummary) -> String {
    match &pr.key_placement {
        Some(at) => format!("{} (sent in the {at})", pr.idempotency_key),
        None => format!(
            "{} (where it was sent: the contract {} is not loaded here)",
            pr.idempotency_key, pr.contract
        ),
    }
}

/// The vendor's own reference of the object and which evidence named it: the other thing to
/// look the write up by.
fn vendor_reference_line(pr: &ParameterSummary) -> String {
    match &pr.vendor_reference {
        Some(r) if r.confirmed => format!("{} (named by {})", r.value, r.source),
        Some(r) => format!("{} (named by {}; not confirmed yet)", r.value, r.source),
        None => "none named yet (no answer or callback named the object)".into(),
    }
}

/// What the contract's lookup asks the vendor, with this operation's values.
fn vendor_lookup_line(pr: &ParameterSummary) -> String {
    pr.vendor_lookup.clone().unwrap_or_else(|| {
        format!(
            "unknown here: the contract {} is not loaded by this process",
            pr.contract
        )
    })
}

/// The budget used, and when the recovery window ends.
fn budget(b: &BudgetUsed, now: i64) -> Vec<(&'static str, String)> {
    let mut budget = vec![
        (
            "Attempts",
            format!("{} of {} used", b.attempts_used, b.max_attempts),
        ),
        (
            "Lookups",
            format!("{} of {} used", b.queries_used, b.max_queries),
        ),
    ];
    if let Some(d) = b.deadline_ms {
        let when = if d >= now {
            format!("{} (in {})", words::utc(d), words::age(d - now))
        } else {
            utc_ago(d, now)
        };
        budget.push(("Recovery window ends", when));
    }
    budget
}

/// Whether writes and lookups are allowed, or why not.
fn authorization(a: &AuthorizationState) -> Vec<(&'static str, String)> {
    let allowed = |d: &Option<String>| match d {
        None => "allowed".to_owned(),
        Some(r) => format!("denied: {r}"),
    };
    vec![
        ("Writes", allowed(&a.write_denied)),
        ("Lookups", allowed(&a.query_denied)),
    ]
}

/// The attempts sent, with the answer each got.
fn attempts(p: &HandoffPackage, now: i64) -> Vec<AttemptView> {
    p.attempts
        .iter()
        .map(|a| AttemptView {
            id: a.attempt_id.clone(),
            generation: a.generation,
            at: utc_ago(a.registered_ms, now),
            result: a
                .result
                .as_ref()
                .map_or_else(|| "no answer recorded".into(), words::evidence),
        })
        .collect()
}

/// The evidence timeline (`late_seqs`: the entries shown as late evidence).
pub(super) fn timeline(
    evidence: &[EvidenceSummary],
    late_seqs: &[i64],
    now: i64,
) -> Vec<EventView> {
    evidence
        .iter()
        .map(|e| EventView {
            seq: e.seq,
            at: words::clock(e.at_ms),
            ago: words::age(now - e.at_ms),
            kind: words::kind(&e.kind),
            transition: match e.transition {
                // No change of state: just the state it stayed in.
                Some((Some(from), Some(to))) if from == to => words::state(to).to_owned(),
                Some((from, to)) => format!(
                    "{} → {}",
                    from.map_or("—", words::state),
                    to.map_or("—", words::state)
                ),
                None => String::new(),
            },
            attempt: e
                .attempt_id
                .as_deref()
                .map(|a| crate::encoding::first_chars(a, 8).to_owned())
                .unwrap_or_default(),
            generation: e.generation,
            evidence: e.evidence.as_ref().map(words::evidence).unwrap_or_default(),
            // A note that only repeats the evidence is left out.
            note: e
                .note
                .clone()
                .filter(|n| {
                    !e.evidence
                        .as_ref()
                        .is_some_and(|ev| words::evidence(ev).contains(n.as_str()))
                })
                .unwrap_or_default(),
            class: if late_seqs.contains(&e.seq) {
                "late"
            } else if e.kind.starts_with("review") || e.kind == crate::ledger::QUARANTINE_RELEASED {
                "reviewer"
            } else {
                ""
            },
        })
        .collect()
}
