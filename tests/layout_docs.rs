//! Each crate's "Layout" section lists the files its `src/` holds: every file it
//! names exists, and every file that exists is named (test-only `tests.rs` and
//! `*_tests.rs` files may be left out), so a newcomer can trust it to find things.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The `src/` directories whose `lib.rs` has a layout section.
const CRATES: &[&str] = &[
    "src",
    "crates/core/src",
    "crates/bulkhead/src",
    "crates/circuit-breaker/src",
    "crates/degradation/src",
    "crates/fallback/src",
    "crates/fleet/src",
    "crates/fault/src",
];

/// The files the `# Layout` section of `lib_rs` names: the first word of each line of
/// its text block, when that word is a path ending in `.rs`.
fn named_files(lib_rs: &str) -> Result<BTreeSet<String>, String> {
    let mut lines = lib_rs
        .lines()
        .map(|line| line.strip_prefix("//!").map(str::trim_start))
        .skip_while(|line| *line != Some("# Layout"));
    if lines.next().is_none() {
        return Err("no `# Layout` section".to_owned());
    }
    let mut lines = lines.skip_while(|line| *line != Some("```text"));
    if lines.next().is_none() {
        return Err("no text block in the layout section".to_owned());
    }
    let mut named = BTreeSet::new();
    for line in lines {
        match line {
            None => return Err("the layout's text block is not closed".to_owned()),
            Some("```") => return Ok(named),
            Some(text) => {
                if let Some(word) = text.split_whitespace().next() {
                    if word.ends_with(".rs") {
                        named.insert(word.to_owned());
                    }
                }
            }
        }
    }
    Err("the layout's text block is not closed".to_owned())
}

/// Every `.rs` file under `dir`, as a path relative to `root` with `/` separators.
fn files_under(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files_under(root, &path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let relative = path.strip_prefix(root).expect("under the root");
            let parts: Vec<_> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.insert(parts.join("/"));
        }
    }
}

fn is_test_only(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    name == "tests.rs" || name.ends_with("_tests.rs")
}

#[test]
fn every_crates_layout_names_exactly_the_files_it_has() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for krate in CRATES {
        let src = workspace.join(krate);
        let lib_rs = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
        let named = match named_files(&lib_rs) {
            Ok(named) => named,
            Err(why) => {
                problems.push(format!("{krate}/lib.rs: {why}"));
                continue;
            }
        };
        let mut present = BTreeSet::new();
        files_under(&src, &src, &mut present);
        for missing in named.difference(&present) {
            problems.push(format!(
                "{krate}: the layout names `{missing}`, which does not exist"
            ));
        }
        for unnamed in present.difference(&named) {
            if !is_test_only(unnamed) {
                problems.push(format!("{krate}: `{unnamed}` is not in the layout"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_layout_reader_finds_paths_and_refuses_a_missing_section() {
    let docs = "//! Intro.\n//!\n//! # Layout\n//!\n//! ```text\n//! lib.rs   these docs\n\
                //! a.rs     one thing, and\n//!          a second line naming b.rs\n\
                //!   a/b.rs   nested\n//! ```\n//! after.rs is not in the block\n";
    let named: Vec<_> = named_files(docs).unwrap().into_iter().collect();
    assert_eq!(named, ["a.rs", "a/b.rs", "lib.rs"]);
    assert!(named_files("//! # Example\n").is_err());
    assert!(named_files("//! # Layout\n//!\n//! ```text\n//! lib.rs\n").is_err());
}
