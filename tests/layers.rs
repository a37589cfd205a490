//! The crate's layers only point down (issue 28).
//!
//! leaf (clock, evidence, encoding, text, secrets) → domain (operation, guard, contract, budget,
//! state) → ledger (the trait, capability traits, backends, conformance) → engine (core,
//! reconcile, review, retention's purger, authorize, notify, error) → faces (builder and
//! handle, layer, reqwest, responses, callbacks, review page, CLI, operator views, test kit).
//!
//! This test reads every source file under `src/` (unit-test modules and `tests.rs` files
//! aside: tests may reach anywhere) and every path it names through `crate::`, in `use`
//! declarations and in code, and fails when one names a module of a higher layer. The
//! imports that still go up are listed in [`KNOWN`], each to be removed by moving what it
//! needs down; the test also fails when a listed one is gone, so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first.
const LAYERS: [&str; 5] = ["leaf", "domain", "ledger", "engine", "faces"];

/// The layer of each top-level module (a file `src/{name}.rs` or a folder `src/{name}/`).
/// Anything not listed (the crate root, the faces) is in the top layer.
const MODULES: &[(&str, &str)] = &[
    ("clock", "leaf"),
    ("evidence", "leaf"),
    ("encoding", "leaf"),
    ("text", "leaf"),
    ("inline_str", "leaf"),
    ("length_prefixed", "leaf"),
    ("secret", "leaf"),
    ("xml", "leaf"),
    ("redact", "leaf"),
    ("operation", "domain"),
    ("guard", "domain"),
    ("contract", "domain"),
    ("budget", "domain"),
    ("state", "domain"),
    ("ledger", "ledger"),
    // What contradicts a final state: read by the ledger's conformance suite and the engine.
    ("contradiction", "ledger"),
    ("core", "engine"),
    ("reconcile", "engine"),
    ("review", "engine"),
    ("retention", "engine"),
    ("authorize", "engine"),
    ("notify", "engine"),
    ("error", "engine"),
];

/// Imports that still go up a layer (none now): (file, the top-level module or crate-root item
/// it names).
/// Remove an entry by moving what the file needs to its own layer or below.
const KNOWN: &[(&str, &str)] = &[];

fn layer_of_module(name: &str) -> usize {
    let layer = MODULES
        .iter()
        .find(|(m, _)| *m == name)
        .map_or("faces", |(_, l)| *l);
    LAYERS.iter().position(|l| *l == layer).expect("a layer")
}

/// The module a crate-root item is re-exported from (`pub use module::{A, B};` in lib.rs).
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = lib;
    while let Some(at) = rest.find("pub use ") {
        rest = &rest[at + "pub use ".len()..];
        let end = rest.find(';').unwrap_or(rest.len());
        let decl = &rest[..end];
        rest = &rest[end..];
        let Some((module, items)) = decl.split_once("::") else {
            continue;
        };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let name = item.trim().rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                out.insert(name.to_owned(), module.trim().to_owned());
            }
        }
    }
    out
}

/// Whether an attribute line compiles what follows only for tests (`#[cfg(test)]`,
/// `#[cfg(all(test, feature = "…"))]`; not `#[cfg(feature = "test-util")]`).
fn is_test_cfg(line: &str) -> bool {
    let Some(cfg) = line.strip_prefix("#[cfg(") else {
        return false;
    };
    cfg.match_indices("test").any(|(at, _)| {
        let before = cfg[..at].chars().next_back();
        let after = cfg[at + 4..].chars().next();
        matches!(before, None | Some('(' | ' ' | ',')) && matches!(after, Some(')' | ',' | ' '))
    })
}

/// The code of a source file without its unit-test module and its comments.
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if is_test_cfg(trimmed) {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The first segment of every path named through `crate::` (a brace group names several).
fn named(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() {
                    out.insert(first.to_owned());
                }
            }
        } else {
            let first: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !first.is_empty() {
                out.insert(first);
            }
        }
    }
    out
}

/// The source files under `dir`, unit tests aside (`tests.rs` files and `tests/` folders: tests
/// may reach anywhere).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

#[test]
fn imports_only_point_down_a_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("lib.rs");
    let reexported = reexports(&lib);
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files.sort();
    // The top-level modules: a lower-case name that is none of them is a macro or a function
    // at the crate root (`crate::ledger_conformance_tests!`), defined where it is used.
    let modules: BTreeSet<String> = std::fs::read_dir(root.join("src"))
        .expect("src")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            Some(name.trim_end_matches(".rs").to_owned())
        })
        .collect();

    let mut found: BTreeSet<(String, String)> = BTreeSet::new();
    for path in &files {
        let rel = path
            .strip_prefix(root)
            .expect("under the crate")
            .to_string_lossy()
            .replace('\\', "/");
        let top = rel
            .trim_start_matches("src/")
            .split('/')
            .next()
            .expect("a segment")
            .trim_end_matches(".rs")
            .to_owned();
        let own = layer_of_module(&top);
        let text = std::fs::read_to_string(path).expect("source");
        for name in named(&code(&text)) {
            let module = if name.starts_with(|c: char| c.is_uppercase()) {
                // A crate-root item: where it is defined, or the root itself (an alias).
                reexported.get(&name).cloned().unwrap_or_default()
            } else if modules.contains(&name) {
                name.clone()
            } else {
                continue;
            };
            if module == top {
                continue;
            }
            if layer_of_module(&module) > own {
                found.insert((rel.clone(), name));
            }
        }
    }

    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(f, n)| ((*f).to_owned(), (*n).to_owned()))
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        new.is_empty(),
        "imports that go up a layer (leaf → domain → ledger → engine → faces): {new:#?}\n\
         Move what they need down instead."
    );
    assert!(
        gone.is_empty(),
        "these no longer go up a layer: remove them from KNOWN in tests/layers.rs: {gone:#?}"
    );
}

/// Every `.rs` file under `dir`, tests included.
fn all_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            all_rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The longest a source file may be: a file holds one responsibility (issue 28).
const MAX_LINES: usize = 800;

#[test]
fn no_source_file_is_over_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    all_rust_files(&root.join("src"), &mut files);
    let mut long: Vec<(String, usize)> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("read source");
            let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
            (rel, text.lines().count())
        })
        .filter(|(_, n)| *n > MAX_LINES)
        .collect();
    long.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines (split them by responsibility): {long:#?}"
    );
}

#[test]
fn the_reader_finds_paths_in_groups_and_skips_comments_and_tests() {
    let text = "use crate::{ledger::Ledger, State};\n// crate::cli in a comment\n\
                fn f() { crate::review::x(); }\n#[cfg(test)]\nmod tests { use crate::cli; }\n";
    let names = named(&code(text));
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["State", "ledger", "review"]
    );
    let r = reexports("pub use ledger::{Ledger, MemoryLedger};\npub use state::State;\n");
    assert_eq!(r.get("MemoryLedger").map(String::as_str), Some("ledger"));
    assert_eq!(r.get("State").map(String::as_str), Some("state"));
    assert!(is_test_cfg("#[cfg(all(test, feature = \"test-util\"))]"));
    assert!(is_test_cfg("#[cfg(test)]"));
    assert!(!is_test_cfg("#[cfg(feature = \"test-util\")]"));
    assert_eq!(layer_of_module("ledger"), 2);
    assert_eq!(layer_of_module("review_ui"), 4);
}
