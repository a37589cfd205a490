//! [`Contract::validate`].

use http::HeaderName;

use super::NotFound;
use super::error::{ContractError, ContractErrorKind as Kind};
use super::key::pointer_tokens;
use super::{
    AnswerFormat, Contract, GENERATED_KEY_LEN, KeyPlacement, Lookup, LookupAnswer, MAX_KEEP_SECS,
    MAX_KEY_LEN_LIMIT, MAX_RETENTION_SECS, MAX_SETTLE_SECS,
};
use crate::operation::{PayloadDigest, SECRET_SEGMENT};

pub(super) fn contract(c: &Contract) -> Result<(), ContractError> {
    let err = |field: String, kind| ContractError::new(&c.name, field, kind);
    if c.name.trim().is_empty() {
        return Err(err("name".into(), Kind::Empty));
    }
    match &c.key {
        KeyPlacement::Header { name, .. } => {
            header_name(name).map_err(|k| err("key.name".into(), k))?
        }
        KeyPlacement::JsonBody { pointer } => {
            pointer_ok(pointer).map_err(|k| err("key.pointer".into(), k))?;
            if pointer.is_empty() {
                return Err(err("key.pointer".into(), Kind::EmptyPointer));
            }
        }
        KeyPlacement::Query { name } | KeyPlacement::FormBody { name } => {
            if name.is_empty() {
                return Err(err("key.name".into(), Kind::Empty));
            }
        }
        KeyPlacement::Omitted => {
            if c.replay.is_safe() {
                return Err(err("replay".into(), Kind::ReplayWithoutKey));
            }
        }
    }
    if c.max_key_len < GENERATED_KEY_LEN {
        return Err(err(
            "max_key_len".into(),
            Kind::MaxKeyLenTooSmall {
                value: c.max_key_len,
                min: GENERATED_KEY_LEN,
            },
        ));
    }
    // Bounded so that no later time arithmetic (`retention_secs * 1000`, `now + settle`) can
    // overflow, and a typo of a few digits is caught at load instead of in a spawned recoverer.
    let too_large = |field: &str, value: u64, max: u64, unit_secs| {
        Err(err(
            field.into(),
            Kind::TooLarge {
                value,
                max,
                unit_secs,
            },
        ))
    };
    if c.max_key_len > MAX_KEY_LEN_LIMIT {
        return too_large(
            "max_key_len",
            u64::try_from(c.max_key_len).unwrap_or(u64::MAX),
            MAX_KEY_LEN_LIMIT as u64,
            false,
        );
    }
    if let Some(secs) = c.retention_secs
        && secs > MAX_RETENTION_SECS
    {
        return too_large("retention_secs", secs, MAX_RETENTION_SECS, true);
    }
    if let Some(secs) = c.settle_secs
        && secs > MAX_SETTLE_SECS
    {
        return too_large("settle_secs", secs, MAX_SETTLE_SECS, true);
    }
    for (field, value) in [
        ("keep_details_secs", c.keep_details_secs),
        ("keep_identity_secs", c.keep_identity_secs),
    ] {
        if let Some(secs) = value
            && secs > MAX_KEEP_SECS
        {
            return too_large(field, secs, MAX_KEEP_SECS, true);
        }
    }
    if let Some(identity) = c.keep_identity_secs {
        let too_short = |min, because| {
            Err(err(
                "keep_identity_secs".into(),
                Kind::RetentionTooShort {
                    value: identity,
                    min,
                    because,
                },
            ))
        };
        if let Some(vendor) = c.retention_secs
            && identity < vendor
        {
            return too_short(vendor, "the vendor's key retention (`retention_secs`)");
        }
        if let Some(details) = c.keep_details_secs
            && identity < details
        {
            return too_short(details, "`keep_details_secs`: a row cannot outlive itself");
        }
    }
    for (i, rule) in c.rules.iter().enumerate() {
        let Some(status) = rule.status else {
            return Err(err(format!("rules[{i}].status"), Kind::MissingStatus));
        };
        if !status.is_valid() {
            return Err(err(
                format!("rules[{i}].status"),
                Kind::InvalidStatusRange {
                    lo: status.lo(),
                    hi: status.hi(),
                },
            ));
        }
        if let Some(h) = &rule.header {
            header_name(&h.name).map_err(|k| err(format!("rules[{i}].header.name"), k))?;
        }
        if let Some(b) = &rule.body {
            pointer_ok(&b.pointer).map_err(|k| err(format!("rules[{i}].body.pointer"), k))?;
        }
        if let Some(x) = &rule.xml {
            let ok = !x.element.is_empty()
                && x.element
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
            if !ok {
                return Err(err(
                    format!("rules[{i}].xml.element"),
                    Kind::InvalidXmlElement(x.element.clone()),
                ));
            }
        }
    }
    if let Some(r) = &c.remote_ref {
        pointer_ok(&r.pointer).map_err(|k| err("remote_ref.pointer".into(), k))?;
    }
    for (i, name) in c.secret_headers.iter().enumerate() {
        header_name(name).map_err(|k| err(format!("secret_headers[{i}]"), k))?;
    }
    for (i, field) in c.secret_response_fields.iter().enumerate() {
        let ok = match field.strip_prefix('/') {
            Some(_) => pointer_tokens(field).is_some(),
            None => !field.is_empty() && !field.contains('/'),
        };
        if !ok {
            return Err(err(
                format!("secret_response_fields[{i}]"),
                Kind::InvalidSecretField(field.clone()),
            ));
        }
    }
    for (i, template) in c.secret_path_segments.iter().enumerate() {
        if !path_template_ok(template) {
            return Err(err(
                format!("secret_path_segments[{i}]"),
                Kind::InvalidPathTemplate(template.clone()),
            ));
        }
    }
    if let PayloadDigest::Fields(pointers) = &c.digest {
        for (i, p) in pointers.iter().enumerate() {
            pointer_ok(p).map_err(|k| err(format!("digest.pointers[{i}]"), k))?;
        }
    }
    match &c.lookup {
        Some(Lookup::HttpGet {
            url_template,
            answer,
        }) => {
            template(url_template).map_err(|k| err("lookup.url_template".into(), k))?;
            lookup_answer(answer).map_err(|(f, k)| err(format!("lookup.answer.{f}"), k))?;
            if c.settle_secs.is_some() && not_found(answer) == Some(NotFound::NotExecuted) {
                return Err(err(
                    "lookup.answer.not_found".into(),
                    Kind::NotFoundCannotProve(
                        "the contract has `settle_secs`: a lookup that may lag cannot prove a write was never registered",
                    ),
                ));
            }
        }
        Some(Lookup::ListByReference {
            url_template,
            items_pointer,
            reference_pointer,
            reference,
            answer,
        }) => {
            template(url_template).map_err(|k| err("lookup.url_template".into(), k))?;
            lookup_answer(answer).map_err(|(f, k)| err(format!("lookup.answer.{f}"), k))?;
            if not_found(answer) == Some(NotFound::NotExecuted) {
                return Err(err(
                    "lookup.answer.not_found".into(),
                    Kind::NotFoundCannotProve(
                        "an empty list or a 404 from a list lookup never proves a write was not executed",
                    ),
                ));
            }
            for (field, p) in [
                ("lookup.items_pointer", items_pointer),
                ("lookup.reference_pointer", reference_pointer),
            ] {
                if let Some(p) = p {
                    answer_path(answer.format, p).map_err(|k| err(field.into(), k))?;
                }
            }
            if reference.is_empty() {
                return Err(err("lookup.reference".into(), Kind::Empty));
            }
            placeholders(reference).map_err(|k| err("lookup.reference".into(), k))?;
        }
        Some(Lookup::SameKeyReplay) if matches!(c.key, KeyPlacement::Omitted) => {
            return Err(err("lookup".into(), Kind::ReplayWithoutKey));
        }
        Some(Lookup::SameKeyReplay) if !c.replay.is_safe() => {
            return Err(err("lookup".into(), Kind::LookupNeedsSafeReplay));
        }
        Some(Lookup::Webhooks { events }) => {
            for (i, e) in events.iter().enumerate() {
                if e.trim().is_empty() {
                    return Err(err(format!("lookup.events[{i}]"), Kind::Empty));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// A lookup's `answer`: its pointers well-formed, its `not_found` one of the known values. The
/// error names the field under `answer`.
fn lookup_answer(answer: &LookupAnswer) -> Result<(), (&'static str, Kind)> {
    for (name, p) in [
        ("status", &answer.status),
        ("remote_ref", &answer.remote_ref),
        ("operation_id", &answer.operation_id),
    ] {
        if let Some(p) = p {
            answer_path(answer.format, p).map_err(|k| (name, k))?;
        }
    }
    if let Some(v) = &answer.not_found
        && NotFound::parse(v).is_none()
    {
        let value = v.chars().take(64).collect();
        return Err((
            "not_found",
            Kind::InvalidChoice {
                value,
                expected: NotFound::EXPECTED,
            },
        ));
    }
    Ok(())
}

/// What the answer says a 404 means, when it says it validly.
fn not_found(answer: &LookupAnswer) -> Option<NotFound> {
    answer.not_found.as_deref().and_then(NotFound::parse)
}

/// The placeholders a lookup template may use.
const PLACEHOLDERS: &[&str] = &["operation_id", "idempotency_key", "tenant", "remote_ref"];

/// An absolute `http`/`https` URL, or a path (`/...`) or query (`?...`) relative to the
/// operation's URL, with known placeholders only.
fn template(t: &str) -> Result<(), Kind> {
    if t.trim().is_empty() {
        return Err(Kind::Empty);
    }
    let lower = t.to_ascii_lowercase();
    if !(lower.starts_with("http://")
        || lower.starts_with("https://")
        || t.starts_with('/')
        || t.starts_with('?'))
    {
        return Err(Kind::InvalidTemplate(format!(
            "`{t}` must be an http(s) URL or start with `/` or `?` (relative to the operation's URL)"
        )));
    }
    if t.contains(char::is_whitespace) {
        return Err(Kind::InvalidTemplate(format!("`{t}` contains whitespace")));
    }
    placeholders(t)
}

fn placeholders(t: &str) -> Result<(), Kind> {
    let mut rest = t;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(Kind::InvalidTemplate(format!(
                "`{t}` has an unmatched `}}`"
            )));
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err(Kind::InvalidTemplate(format!("`{t}` has an unclosed `{{`")));
        };
        let name = &after[..close];
        if !PLACEHOLDERS.contains(&name) {
            return Err(Kind::InvalidTemplate(format!(
                "unknown placeholder `{{{name}}}` (known: {{operation_id}}, {{idempotency_key}}, {{tenant}}, {{remote_ref}})"
            )));
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

fn header_name(name: &str) -> Result<(), Kind> {
    HeaderName::from_bytes(name.as_bytes())
        .map(drop)
        .map_err(|_| Kind::InvalidHeaderName(name.to_owned()))
}

/// A pointer into a lookup's answer: a JSON pointer, or for an XML answer a path of element
/// names (each step a plain name: no empty step, no escape).
fn answer_path(format: AnswerFormat, path: &str) -> Result<(), Kind> {
    pointer_ok(path)?;
    if format == AnswerFormat::Xml {
        for step in path.split('/').skip(1) {
            let ok = !step.is_empty()
                && step
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
            if !ok {
                return Err(Kind::InvalidXmlElement(step.to_owned()));
            }
        }
    }
    Ok(())
}

/// A secret path template: `/`-separated literal segments, `*` and at least one `{secret}`,
/// without a query or fragment.
fn path_template_ok(template: &str) -> bool {
    let Some(rest) = template.strip_prefix('/') else {
        return false;
    };
    let steps: Vec<&str> = rest.split('/').collect();
    steps.contains(&SECRET_SEGMENT)
        && steps.iter().all(|s| {
            *s == SECRET_SEGMENT
                || (!s.is_empty()
                    && !s.contains(['{', '}', '?', '#'])
                    && !s.contains(char::is_whitespace))
        })
}

fn pointer_ok(pointer: &str) -> Result<(), Kind> {
    pointer_tokens(pointer)
        .map(drop)
        .ok_or_else(|| Kind::InvalidPointer(pointer.to_owned()))
}
