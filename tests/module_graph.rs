//! No two top-level modules of a crate import each other, directly or through
//! others: for each crate's `src/`, the graph of its top-level modules (a module's
//! submodules merged into it; the `crate::` and `super::` paths outside
//! `#[cfg(test)]` modules and comments) is acyclic. A cycle is printed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose module graph must be acyclic.
const CRATES: &[&str] = &[
    "src",
    "crates/bulkhead/src",
    "crates/circuit-breaker/src",
    "crates/core/src",
    "crates/degradation/src",
    "crates/fallback/src",
    "crates/fault/src",
    "crates/fleet/src",
    "crates/test-support/src",
];

/// Crates whose modules still import each other in a circle (issue #36, item 1):
/// each moves to [`CRATES`] when its cycles are gone, which the test below asks for.
const NOT_YET_ACYCLIC: &[&str] = &[];

/// Crates not read by these tests (none now: each crate is in [`CRATES`]).
const NOT_YET_CHECKED: &[&str] = &[];

/// `text` without comments (doc comments included), string literals, and the
/// items under `#[cfg(test)]` (a `mod tests { .. }` block or a `mod tests;` line).
fn code(text: &str) -> String {
    let mut out = String::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 2)].iter().collect();
        if rest == "//" {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
        } else if rest == "/*" {
            let mut depth = 0;
            while i < bytes.len() {
                let two: String = bytes[i..bytes.len().min(i + 2)].iter().collect();
                if two == "/*" {
                    depth += 1;
                    i += 2;
                } else if two == "*/" {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if bytes[i] == '"' {
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                if bytes[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    strip_test_items(&out)
}

fn strip_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item ends at its first `;` before any `{`, or at its matching `}`.
        let (semi, brace) = (after.find(';'), after.find('{'));
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = after.len();
                for (j, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `path`, a submodule's file, is declared only under `#[cfg(test)]` in its
/// parent (`mod tests;`): its paths are test code, like a `mod tests { .. }` block.
fn test_only(path: &Path) -> bool {
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem()) else {
        return false;
    };
    let parent = [dir.with_extension("rs"), dir.join("mod.rs")]
        .into_iter()
        .find(|p| p.is_file() && p != path);
    let Some(parent) = parent else { return false };
    let parent = code(&std::fs::read_to_string(parent).unwrap());
    let declaration = format!("mod {}", stem.to_string_lossy());
    !parent.match_indices(&declaration).any(|(at, _)| {
        let next = parent[at + declaration.len()..].chars().next();
        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The identifiers following `prefix` in `code` (`crate::` → `state`).
fn after<'c>(code: &'c str, prefix: &str) -> Vec<&'c str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let ident = &rest[..end];
        if !ident.is_empty() {
            out.push(ident);
        } else if rest.starts_with('{') {
            // `crate::{a, b::c}`: each first identifier of the group.
            let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
            out.extend(
                group
                    .split(',')
                    .filter_map(|p| p.split("::").next())
                    .map(str::trim)
                    .filter(|p| !p.is_empty()),
            );
        }
    }
    out
}

/// Module graph of the crate at `src`: top-level module → the ones it uses.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(src, &mut all);
    let top = |path: &Path| -> Option<String> {
        let rel = path.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()?
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        let name = first.trim_end_matches(".rs").to_owned();
        (name != "lib").then_some(name)
    };
    let modules: BTreeSet<String> = all.iter().filter_map(|p| top(p)).collect();
    // The root's re-exports: `pub use module::{A, B}` names A and B after `module`.
    let lib = code(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    for stmt in lib.split(';') {
        let stmt = stmt.trim();
        let Some(used) = stmt
            .strip_prefix("pub use ")
            .or_else(|| stmt.strip_prefix("pub(crate) use "))
            .or_else(|| stmt.split_once("pub use ").map(|(_, u)| u))
        else {
            continue;
        };
        let used = used
            .trim_start_matches("crate::")
            .trim_start_matches("self::");
        let Some((module, names)) = used.split_once("::") else {
            continue;
        };
        if !modules.contains(module) {
            continue;
        }
        for name in names
            .trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .map(|n| n.rsplit("::").next().unwrap().trim())
            .map(|n| n.rsplit(" as ").next().unwrap().trim())
        {
            reexported.insert(name.to_owned(), module.to_owned());
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &all {
        let Some(from) = top(path) else { continue };
        let depth = path.strip_prefix(src).unwrap().components().count();
        if depth > 1 && test_only(path) {
            continue;
        }
        let text = code(&std::fs::read_to_string(path).unwrap());
        let mut targets = after(&text, "crate::");
        if depth == 1 {
            // In a top-level file, `super::` is the crate root.
            targets.extend(after(&text, "super::"));
        }
        for ident in targets {
            let to = if modules.contains(ident) {
                Some(ident.to_owned())
            } else {
                reexported.get(ident).cloned()
            };
            if let Some(to) = to.filter(|to| *to != from) {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

/// A cycle of `graph`, if it has one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_two_top_level_modules_of_a_crate_import_each_other() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for krate in CRATES {
        if let Some(c) = cycle(&graph(&workspace.join(krate))) {
            problems.push(format!("{krate}: {}", c.join(" → ")));
        }
    }
    assert!(problems.is_empty(), "cycles:\n{}", problems.join("\n"));
}

#[test]
fn the_crates_not_yet_acyclic_still_have_a_cycle_and_the_lists_cover_every_crate() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for krate in NOT_YET_ACYCLIC {
        let found = cycle(&graph(&workspace.join(krate)));
        assert!(found.is_some(), "{krate} is acyclic now: move it to CRATES");
    }
    let listed: BTreeSet<&str> = CRATES
        .iter()
        .chain(NOT_YET_ACYCLIC)
        .chain(NOT_YET_CHECKED)
        .copied()
        .collect();
    let mut present = BTreeSet::from(["src".to_owned()]);
    for entry in std::fs::read_dir(workspace.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        present.insert(format!("crates/{name}/src"));
    }
    let present: BTreeSet<&str> = present.iter().map(String::as_str).collect();
    assert_eq!(listed, present, "every crate is in exactly one list");
}

#[test]
fn the_reader_sees_crate_and_super_paths_outside_tests_and_comments() {
    let text = "use crate::state::Shared;\n// crate::hidden\n/// crate::doc\n\
                fn f() { super::layer::g(); crate::{a, b::c}; }\n\
                #[cfg(test)]\nmod tests { use crate::testonly; }\n";
    let code = code(text);
    assert_eq!(after(&code, "crate::"), ["state", "a", "b"]);
    assert_eq!(after(&code, "super::"), ["layer"]);
    let machine =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/circuit-breaker/src/machine");
    assert!(test_only(&machine.join("tests.rs")));
    assert!(!test_only(&machine.join("window.rs")));
    let mut g = BTreeMap::new();
    g.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    g.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(cycle(&g).unwrap(), ["a", "b", "a"]);
}
