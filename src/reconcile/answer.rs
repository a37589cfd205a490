//! A lookup's answer, JSON or XML, read through one interface, and what of it is kept.

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::Value;

use crate::contract::AnswerFormat;
use crate::redact::REDACTED;

/// One document of an answer (the answer, or one item of a list): a JSON value, or an XML
/// element (or an XML document's root node).
#[derive(Clone, Copy, Debug)]
pub(super) enum Doc<'a, 'i> {
    Json(&'a Value),
    Xml(roxmltree::Node<'a, 'i>),
}

impl<'a> Doc<'a, '_> {
    /// The string at `path`: a JSON string (not a number), or an XML element's text.
    pub(super) fn str_at(&self, path: &str) -> Option<Cow<'a, str>> {
        match self {
            Self::Json(v) => v.pointer(path)?.as_str().map(Cow::Borrowed),
            Self::Xml(n) => crate::xml::text_at(*n, path).map(Cow::Owned),
        }
    }

    /// The value at `path` as text: a JSON string or number, or an XML element's text.
    pub(super) fn scalar_at(&self, path: &str) -> Option<String> {
        match self {
            Self::Json(v) => match v.pointer(path)? {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            },
            Self::Xml(n) => crate::xml::text_at(*n, path),
        }
    }
}

/// Why a 2xx answer could not be read, for the evidence (`what` names the lookup).
pub(super) fn unreadable(format: AnswerFormat, what: &str) -> String {
    match format {
        AnswerFormat::Xml => format!("{what} answered 2xx without a well-formed XML document"),
        _ => format!("{what} answered 2xx without a JSON document"),
    }
}

/// The secret fields of a kept answer: the contract's secret response fields, then its secret
/// body fields (secret in an answer too).
#[derive(Clone, Debug, Default)]
pub(super) struct Secrets {
    pub(super) response_fields: Vec<String>,
    pub(super) body_fields: Vec<String>,
}

impl Secrets {
    fn lists(&self) -> [&[String]; 2] {
        [&self.response_fields, &self.body_fields]
    }

    fn iter(&self) -> impl Iterator<Item = &String> {
        self.response_fields.iter().chain(&self.body_fields)
    }

    /// A whole answer's body as kept: secret fields replaced (see [`crate::redact`]), at most
    /// `max` bytes. An answer that may hold a secret field and cannot be read is not kept.
    pub(super) fn kept_body(&self, body: &Bytes, max: usize) -> String {
        match crate::redact::answer(body, &self.lists()) {
            Some(redacted) => kept(&String::from_utf8_lossy(&redacted), max),
            None => NOT_KEPT.to_owned(),
        }
    }

    /// One JSON item of a list as kept.
    pub(super) fn kept_json(&self, mut item: Value, max: usize) -> String {
        crate::redact::json_value(&mut item, self.iter());
        kept(&serde_json::to_string(&item).unwrap_or_default(), max)
    }

    /// One XML element of `doc` as kept: its source with secret fields replaced.
    pub(super) fn kept_xml(
        &self,
        doc: &roxmltree::Document<'_>,
        item: roxmltree::Node<'_, '_>,
        max: usize,
    ) -> String {
        let (text, _) = crate::xml::redacted(doc, item, self.iter().map(String::as_str), REDACTED);
        kept(&text, max)
    }
}

/// The note of an answer that could not be redacted.
const NOT_KEPT: &str =
    "lookup answer not kept: it may hold a secret field and is neither JSON nor XML";

/// `lookup answer: {text}`, at most `max` bytes of the text (cut at a character boundary, and
/// marked ` [cut]`).
fn kept(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < text.len() { " [cut]" } else { "" };
    format!("lookup answer: {}{cut}", &text[..end])
}
