//! XML answers, read as a tree: the AWS Query APIs (EC2's `DescribeInstances`, `CreateKeyPair`)
//! answer XML, not JSON.
//!
//! A path is written like a JSON pointer, one element name per step:
//! `/DescribeInstancesResponse/reservationSet/item`. From a document it starts at the root
//! element (as an XPath `/` does); from an element it starts at that element's children. Names
//! are compared without their namespace (`<ec2:item>` and `<item xmlns="...">` are both
//! `item`), and a step takes every child of that name, so a path can select many elements.
//!
//! Parsing is [roxmltree](https://docs.rs/roxmltree)'s: the document must be well-formed,
//! entities are decoded, a DTD is refused (no entity expansion tricks), and the number of nodes
//! is bounded.

use roxmltree::{Document, Node, ParsingOptions};

/// The most nodes an answer may have (a 1 MiB answer has far fewer).
const MAX_NODES: u32 = 1 << 20;

/// The tree of `text`, or the parser's error (a malformed document, a DTD, too many nodes).
pub(crate) fn parse(text: &str) -> Result<Document<'_>, roxmltree::Error> {
    Document::parse_with_options(
        text,
        ParsingOptions {
            allow_dtd: false,
            nodes_limit: MAX_NODES,
            ..ParsingOptions::default()
        },
    )
}

/// The tree of `bytes` when they are UTF-8 XML (after leading whitespace), or `None`.
pub(crate) fn parse_bytes(bytes: &[u8]) -> Option<Document<'_>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let start = text.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n']);
    if !start.starts_with('<') {
        return None;
    }
    parse(text).ok()
}

/// The elements `path` selects from `start` (a document's root node, or an element): every
/// child element named by the first step, then every child of those named by the next one, and
/// so on. `""` selects `start` itself.
pub(crate) fn select<'a, 'i>(start: Node<'a, 'i>, path: &str) -> Vec<Node<'a, 'i>> {
    let mut current = vec![start];
    if path.is_empty() {
        return current;
    }
    for step in path.split('/').skip(1) {
        current = current
            .iter()
            .flat_map(|n| {
                n.children()
                    .filter(|c| c.is_element() && c.tag_name().name() == step)
            })
            .collect();
        if current.is_empty() {
            break;
        }
    }
    current
}

/// The text of the first element `path` selects from `start`, trimmed: `None` when there is
/// none, or when it holds elements (a structure is not a value).
pub(crate) fn text_at(start: Node<'_, '_>, path: &str) -> Option<String> {
    let node = select(start, path).into_iter().next()?;
    if node.children().any(|c| c.is_element()) {
        return None;
    }
    let text: String = node
        .children()
        .filter(|c| c.is_text())
        .filter_map(|c| c.text())
        .collect();
    Some(text.trim().to_owned())
}

/// The source text of `within` (a document's root node: the whole document), with the content
/// of every element a field names replaced by `marker`, and whether anything was. A field is a
/// path (`/CreateKeyPairResponse/keyMaterial`, from `within`) or a bare element name
/// (`keyMaterial`: every element of that name at any depth). An element without content
/// (`<a/>`, `<a></a>`) has nothing to replace.
pub(crate) fn redacted<'f>(
    doc: &Document<'_>,
    within: Node<'_, '_>,
    fields: impl Iterator<Item = &'f str>,
    marker: &str,
) -> (String, bool) {
    let source = doc.input_text();
    let mut cuts: Vec<std::ops::Range<usize>> = Vec::new();
    for field in fields {
        let named: Vec<Node<'_, '_>> = if field.starts_with('/') {
            select(within, field)
        } else {
            within
                .descendants()
                .filter(|n| n.is_element() && n.tag_name().name() == field)
                .collect()
        };
        cuts.extend(named.into_iter().filter_map(|n| content(source, n)));
    }
    let whole = within.range();
    if cuts.is_empty() {
        return (source[whole].to_owned(), false);
    }
    cuts.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut out = String::with_capacity(whole.len());
    let mut at = whole.start;
    for cut in cuts {
        // A cut inside one already made (a secret element inside another) is covered.
        if cut.start < at {
            continue;
        }
        out.push_str(&source[at..cut.start]);
        out.push_str(marker);
        at = cut.end;
    }
    out.push_str(&source[at..whole.end]);
    (out, true)
}

/// The byte range of `element`'s content in `source`: from its first child to its end tag.
fn content(source: &str, element: Node<'_, '_>) -> Option<std::ops::Range<usize>> {
    let first = element.first_child()?;
    let range = element.range();
    // The element's own end tag is the last `</` in its source: nothing follows it.
    let end_tag = source.get(range.clone())?.rfind("</")?;
    let (start, end) = (first.range().start, range.start + end_tag);
    (start <= end).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<R xmlns="http://example.test/doc/"><set><item><id> i-1 </id><s>a &amp; b</s></item><item><id>i-2</id></item></set><empty/></R>"#;

    #[test]
    fn paths_start_at_the_root_element_and_take_every_match() {
        let doc = parse(ANSWER).unwrap();
        let items = select(doc.root(), "/R/set/item");
        assert_eq!(items.len(), 2);
        assert_eq!(text_at(items[0], "/id").as_deref(), Some("i-1"));
        assert_eq!(text_at(items[0], "/s").as_deref(), Some("a & b"));
        assert_eq!(text_at(items[1], "/id").as_deref(), Some("i-2"));
        assert_eq!(
            text_at(doc.root(), "/R/set/item/id").as_deref(),
            Some("i-1")
        );
        assert_eq!(
            text_at(doc.root(), "/R/set").as_deref(),
            None,
            "a structure"
        );
        assert_eq!(text_at(doc.root(), "/R/empty").as_deref(), Some(""));
        assert!(
            select(doc.root(), "/set").is_empty(),
            "the root is named first"
        );
        assert_eq!(select(items[0], "").len(), 1);
    }

    #[test]
    fn malformed_documents_and_dtds_are_refused() {
        for bad in [
            "<a><b></a>",
            "<a>",
            "not xml",
            "<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse_bytes(b"{\"a\":1}").is_none());
        assert!(parse_bytes(b"\xff<a/>").is_none());
        assert!(parse_bytes(b"\n  <a/>").is_some());
    }

    #[test]
    fn redaction_replaces_the_content_of_named_elements_only() {
        let doc = parse(ANSWER).unwrap();
        let (out, changed) = redacted(&doc, doc.root(), ["id"].into_iter(), "[redacted]");
        assert!(changed);
        assert!(out.contains("<id>[redacted]</id><s>a &amp; b</s>"), "{out}");
        assert!(!out.contains("i-1") && !out.contains("i-2"), "{out}");
        assert!(parse(&out).is_ok(), "still well-formed: {out}");
        // A path, from an item; an element holding elements loses them all.
        let items = select(doc.root(), "/R/set/item");
        let (out, _) = redacted(&doc, items[0], ["/s"].into_iter(), "[redacted]");
        assert_eq!(out, "<item><id> i-1 </id><s>[redacted]</s></item>");
        let (out, _) = redacted(&doc, doc.root(), ["set", "id"].into_iter(), "[redacted]");
        assert!(out.contains("<set>[redacted]</set>"), "{out}");
        // Nothing named: the source as it is.
        let (out, changed) = redacted(&doc, doc.root(), ["nope", "empty"].into_iter(), "x");
        assert!(!changed);
        assert_eq!(out, ANSWER);
    }
}
