//! Secret values in what a vendor answers, replaced before anything is stored.
//!
//! A vendor's answer can carry a credential of its own: a Stripe PaymentIntent's
//! `client_secret`, a webhook endpoint's signing `secret`, EC2's `CreateKeyPair` private key.
//! The first response of a write is stored for callers that ask again, and a lookup's answer is
//! kept as evidence and shown to reviewers; both go through [`answer`] first, with the fields the
//! contract names ([`Contract::secret_response_fields`](crate::Contract::secret_response_fields),
//! and its secret body fields, which are secret in an answer too).
//!
//! A field is a JSON pointer (`/client_secret`: that place only) or a bare name
//! (`client_secret`: every member of that name, at any depth, in objects and in arrays of
//! objects). Its value, whatever it is, becomes the string [`REDACTED`]; the member stays, so the
//! shape of the answer is still visible. An XML answer is read the same way, a pointer being a
//! path of element names and a bare name any element of that name: the element's content becomes
//! [`REDACTED`].
//!
//! An answer that names a secret field but cannot be read (neither JSON nor XML, a body cut
//! short) cannot be redacted, and is not stored at all: a value that cannot be found cannot be
//! taken out.

use bytes::Bytes;
use serde_json::Value;

/// What a secret value is replaced with, in stored answers and in stored URLs (a secret path
/// segment).
pub const REDACTED: &str = "[redacted]";

/// `body` with the values of `fields` replaced by [`REDACTED`]: the same bytes when it holds
/// none (or `fields` is empty), a JSON body re-serialized compactly when something was
/// replaced, an XML body with only the named elements' content changed. `None` when the body
/// may hold a named field and is neither JSON nor XML: it must not be stored.
pub(crate) fn answer(body: &Bytes, fields: &[&[String]]) -> Option<Bytes> {
    let mut all = fields.iter().flat_map(|f| f.iter()).peekable();
    if all.peek().is_none() || body.is_empty() {
        return Some(body.clone());
    }
    // The common case, without parsing: no field's name appears in the body. A JSON key can
    // hide a name behind an escape (`client\u005fsecret`), so a body with a backslash is read.
    if !body.contains(&b'\\') && !all.clone().any(|f| mentions(body, f)) {
        return Some(body.clone());
    }
    if let Ok(mut value) = serde_json::from_slice::<Value>(body) {
        let mut changed = false;
        for field in all {
            changed |= json(&mut value, field);
        }
        return Some(match changed {
            true => Bytes::from(serde_json::to_vec(&value).ok()?),
            false => body.clone(),
        });
    }
    let doc = crate::xml::parse_bytes(body)?;
    let (text, changed) = crate::xml::redacted(&doc, doc.root(), all.map(String::as_str), REDACTED);
    Some(match changed {
        true => Bytes::from(text),
        false => body.clone(),
    })
}

/// `value` with the values of `fields` replaced by [`REDACTED`], and whether any was (see
/// [`answer`]).
pub(crate) fn json_value<'f>(value: &mut Value, fields: impl Iterator<Item = &'f String>) -> bool {
    let mut changed = false;
    for field in fields {
        changed |= json(value, field);
    }
    changed
}

/// Whether the body contains the name `field` ends with (a pointer's last token, unescaped).
fn mentions(body: &[u8], field: &str) -> bool {
    let name = match field.rsplit_once('/') {
        Some((_, last)) if last.contains('~') => last.replace("~1", "/").replace("~0", "~"),
        Some((_, last)) => last.to_owned(),
        None => field.to_owned(),
    };
    name.is_empty() || body.windows(name.len()).any(|w| w == name.as_bytes())
}

/// Replaces the value(s) `field` names; `true` if one was not already the marker.
fn json(value: &mut Value, field: &str) -> bool {
    if field.starts_with('/') {
        return match value.pointer_mut(field) {
            Some(v) => replace(v),
            None => false,
        };
    }
    match value {
        Value::Object(map) => {
            let mut changed = false;
            for (k, v) in map.iter_mut() {
                changed |= if k == field {
                    replace(v)
                } else {
                    json(v, field)
                };
            }
            changed
        }
        // Depth is bounded: serde_json refuses documents nested more than 128 levels.
        Value::Array(items) => items.iter_mut().fold(false, |c, v| json(v, field) | c),
        _ => false,
    }
}

fn replace(v: &mut Value) -> bool {
    if v.as_str() == Some(REDACTED) {
        return false;
    }
    *v = Value::String(REDACTED.to_owned());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(body: &str, fields: &[&str]) -> Option<String> {
        let fields: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
        answer(&Bytes::from(body.to_owned()), &[&fields])
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
    }

    #[test]
    fn a_bare_name_is_replaced_at_any_depth_and_a_pointer_at_its_place() {
        let body = r#"{"id":"pi_1","client_secret":"pi_1_secret_x","latest":{"client_secret":"y"},"data":[{"client_secret":{"nested":1}}],"n":{"client_secret":"z"}}"#;
        let out = redact(body, &["client_secret"]).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["client_secret"], REDACTED);
        assert_eq!(v["latest"]["client_secret"], REDACTED);
        assert_eq!(v["data"][0]["client_secret"], REDACTED);
        assert_eq!(v["id"], "pi_1");
        assert!(
            !out.contains("secret_x") && !out.contains("nested"),
            "{out}"
        );

        let out = redact(body, &["/latest/client_secret"]).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["latest"]["client_secret"], REDACTED);
        assert_eq!(v["client_secret"], "pi_1_secret_x", "only that place");
    }

    #[test]
    fn bodies_without_the_field_keep_their_bytes() {
        let body = "{ \"id\" : \"pi_1\" }";
        assert_eq!(redact(body, &["client_secret"]).unwrap(), body);
        assert_eq!(redact(body, &[]).unwrap(), body);
        assert_eq!(redact("", &["client_secret"]).unwrap(), "");
        // Plain text that does not name the field is stored as it is.
        assert_eq!(redact("OK", &["client_secret"]).unwrap(), "OK");
        // A JSON key spelled with an escape is still found.
        let escaped = r#"{"client\u005fsecret":"s3"}"#;
        assert_eq!(
            redact(escaped, &["client_secret"]).unwrap(),
            r#"{"client_secret":"[redacted]"}"#
        );
    }

    #[test]
    fn an_answer_that_names_the_field_but_cannot_be_read_is_not_stored() {
        assert_eq!(redact("client_secret=s3&id=1", &["client_secret"]), None);
        assert_eq!(
            redact(r#"{"client_secret":"s3","cut":"#, &["client_secret"]),
            None
        );
    }

    #[test]
    fn xml_answers_lose_the_content_of_named_elements() {
        let body = "<CreateKeyPairResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\n  <keyName>k</keyName>\n  <keyMaterial>-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----</keyMaterial>\n</CreateKeyPairResponse>";
        let out = redact(body, &["keyMaterial"]).unwrap();
        assert!(
            out.contains("<keyMaterial>[redacted]</keyMaterial>"),
            "{out}"
        );
        assert!(out.contains("<keyName>k</keyName>"), "{out}");
        assert!(!out.contains("PRIVATE KEY"), "{out}");
        let out = redact(body, &["/CreateKeyPairResponse/keyMaterial"]).unwrap();
        assert!(!out.contains("PRIVATE KEY"), "{out}");
    }
}
