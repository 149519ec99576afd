//! Each crate's "How to add" section names the files a routine change touches (a
//! breaker's trip condition, a rejection kind, a bulkhead's queue option): every
//! file it names exists, and no change needs more than three, so the note stays
//! true as files move and the changes stay small.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

/// The crates with a note, and the change each note must cover.
const NOTES: &[(&str, &str)] = &[
    ("crates/circuit-breaker/src", "A trip condition"),
    ("crates/core/src", "A rejection kind"),
    ("crates/bulkhead/src", "A queue option"),
];

/// The most files one routine change may touch (its tests and changelog aside).
const MOST_FILES: usize = 3;

/// The changes the `# How to add` section of `lib_rs` lists, each with the files it
/// names: a change is a bullet starting `- **Title:**`; its files are the words in
/// backticks that end in `.rs` or `.md`, relative to the crate's `src/`.
fn notes(lib_rs: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut lines = lib_rs
        .lines()
        .map_while(|line| line.strip_prefix("//!"))
        .map(str::trim)
        .skip_while(|line| *line != "# How to add");
    if lines.next().is_none() {
        return Err("no `# How to add` section".to_owned());
    }
    let mut changes: Vec<(String, String)> = Vec::new();
    for line in lines.take_while(|line| !line.starts_with("# ")) {
        if let Some(rest) = line.strip_prefix("- **") {
            let (title, text) = rest
                .split_once(":**")
                .ok_or_else(|| format!("a bullet without `- **Title:**`: {line:?}"))?;
            changes.push((title.to_owned(), text.to_owned()));
        } else if let Some((_, text)) = changes.last_mut() {
            text.push(' ');
            text.push_str(line);
        }
    }
    if changes.is_empty() {
        return Err("the `# How to add` section lists no change".to_owned());
    }
    Ok(changes
        .into_iter()
        .map(|(title, text)| {
            let files = text
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|word| {
                    !word.contains(' ') && (word.ends_with(".rs") || word.ends_with(".md"))
                })
                .map(str::to_owned)
                .collect();
            (title, files)
        })
        .collect())
}

#[test]
fn every_note_names_files_that_exist_and_at_most_three_per_change() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for (krate, wanted) in NOTES {
        let src = workspace.join(krate);
        let lib_rs = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
        let changes = match notes(&lib_rs) {
            Ok(changes) => changes,
            Err(why) => {
                problems.push(format!("{krate}/lib.rs: {why}"));
                continue;
            }
        };
        if !changes.iter().any(|(title, _)| title == wanted) {
            problems.push(format!("{krate}/lib.rs: no note for {wanted:?}"));
        }
        for (title, files) in &changes {
            if files.is_empty() || files.len() > MOST_FILES {
                problems.push(format!(
                    "{krate}: {title:?} names {} files ({files:?}), not 1 to {MOST_FILES}",
                    files.len()
                ));
            }
            for file in files {
                if !src.join(file).is_file() {
                    problems.push(format!(
                        "{krate}: {title:?} names `{file}`, which does not exist"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_note_reader_finds_each_change_and_its_files() {
    let docs = "//! Intro naming `lib.rs`.\n//!\n//! # How to add\n//!\n\
                //! - **A thing:** `a.rs` and `b/c.rs`, through `fn_name` and\n\
                //!   `d.md`; not `a sentence.rs`.\n\
                //! - **Another:** `e.rs`.\n//!\n//! # Next\n//! `f.rs`\n";
    let changes = notes(docs).unwrap();
    assert_eq!(
        changes,
        [
            (
                "A thing".to_owned(),
                vec!["a.rs".to_owned(), "b/c.rs".to_owned(), "d.md".to_owned()]
            ),
            ("Another".to_owned(), vec!["e.rs".to_owned()]),
        ]
    );
    assert!(notes("//! # Layout\n").is_err());
    assert!(notes("//! # How to add\n//!\n//! Nothing listed.\n").is_err());
}
