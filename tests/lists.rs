//! Every prose copy of a list, checked against the one list in the code: the
//! answers table (one row per rejection kind and per breaker cause, found by their
//! labels) and the lists of gRPC codes a client may see.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use seawall::core::{OpenCause, RejectionKind};

/// The (kind, cause) pairs a row of the answers table is about: its label cell names
/// kinds by their labels (`bulkhead_full`, `bulkhead_timeout`), and a breaker's
/// cause by its label in brackets (`circuit_open` (`ramping`)), so a new kind needs
/// a row in the table and nothing here.
fn row(label: &str) -> Vec<(RejectionKind, Option<OpenCause>)> {
    let words: Vec<&str> = label
        .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let cause = words
        .iter()
        .find_map(|w| OpenCause::ALL.into_iter().find(|c| c.as_str() == *w));
    let kinds: Vec<RejectionKind> = words
        .iter()
        .filter_map(|w| RejectionKind::ALL.into_iter().find(|k| k.as_str() == *w))
        .collect();
    assert!(!kinds.is_empty(), "a row nobody knows: {label:?}");
    kinds
        .into_iter()
        .map(|k| match k {
            RejectionKind::CircuitOpen => (k, Some(cause.unwrap_or(OpenCause::Open))),
            _ => {
                assert!(cause.is_none(), "a cause on a row of {k}: {label:?}");
                (k, None)
            }
        })
        .collect()
}

/// `DeadlineExceeded` → `DEADLINE_EXCEEDED`.
fn screaming(code: tonic::Code) -> String {
    let mut out = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The rows of the table whose header starts `| rejection |` in `text` (a Markdown
/// file or a Rust file's `//!` docs): the cells of each row, trimmed, backticks off.
fn table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim_start().trim_start_matches("//!").trim())
        .collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("| rejection |"))
        .expect("an answers table");
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().trim_matches('`').to_owned())
            .collect()
    };
    let header = cells(lines[start]);
    let rows = lines[start + 2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .map(|l| cells(l))
        .collect();
    (header, rows)
}

/// Checks an answers table: each row says its kinds' HTTP status (if it has that
/// column) and gRPC code, and every kind, and every breaker cause, has one row.
fn check_table(file: &str, text: &str) {
    let (header, rows) = table(text);
    let column = |name: &str| header.iter().position(|h| h == name);
    let http = column("HTTP");
    let grpc = column("gRPC status")
        .or_else(|| column("gRPC"))
        .unwrap_or_else(|| panic!("{file}: no gRPC column in {header:?}"));
    let mut seen = Vec::new();
    for cells in &rows {
        for (kind, cause) in row(&cells[0]) {
            if let Some(http) = http {
                assert_eq!(
                    cells[http],
                    kind.http_status().as_u16().to_string(),
                    "{file}: {}",
                    cells[0]
                );
            }
            assert_eq!(
                cells[grpc],
                screaming(kind.grpc_code()),
                "{file}: {}",
                cells[0]
            );
            seen.push((kind, cause));
        }
    }
    // One row per breaker cause where the table splits the breaker by cause,
    // one row per kind otherwise.
    let by_cause = seen
        .iter()
        .any(|(_, c)| c.is_some_and(|c| c != OpenCause::Open));
    for kind in RejectionKind::ALL {
        let wanted: Vec<Option<OpenCause>> = match kind {
            RejectionKind::CircuitOpen if by_cause => OpenCause::ALL.map(Some).to_vec(),
            RejectionKind::CircuitOpen => vec![Some(OpenCause::Open)],
            _ => vec![None],
        };
        for cause in wanted {
            let n = seen.iter().filter(|s| **s == (kind, cause)).count();
            assert_eq!(n, 1, "{file}: {kind} ({cause:?}) has {n} rows");
        }
    }
    assert_eq!(
        seen.len(),
        RejectionKind::COUNT - 1 + if by_cause { OpenCause::ALL.len() } else { 1 },
        "{file}: a row too many"
    );
}

#[test]
fn the_answers_table_has_one_row_per_kind_and_cause_with_its_declared_answers() {
    // One copy: the README and the `grpc` module point at it.
    check_table(
        "crates/core/src/http.rs",
        include_str!("../crates/core/src/http.rs"),
    );
}

/// Each run of gRPC codes written `A / B / C` in `text` (comment markers and line
/// breaks between them ignored).
fn code_lists(text: &str) -> Vec<Vec<String>> {
    let words: Vec<String> = text
        .split_whitespace()
        .filter(|w| !matches!(*w, "//" | "///" | "//!"))
        .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '/'))
        .map(str::to_owned)
        .collect();
    let is_code = |w: &str| w.len() > 3 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_');
    let mut lists = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if is_code(&words[i]) && words.get(i + 1).is_some_and(|w| w == "/") {
            let mut list = vec![words[i].clone()];
            while words.get(i + 1).is_some_and(|w| w == "/")
                && words.get(i + 2).is_some_and(|w| is_code(w))
            {
                list.push(words[i + 2].clone());
                i += 2;
            }
            lists.push(list);
        }
        i += 1;
    }
    lists
}

#[test]
fn every_list_of_the_codes_a_client_sees_names_each_declared_code() {
    let mut declared: Vec<String> = RejectionKind::ALL
        .iter()
        .map(|k| screaming(k.grpc_code()))
        .collect();
    declared.sort();
    declared.dedup();
    let files = [
        ("README.md", include_str!("../README.md")),
        (
            "crates/core/README.md",
            include_str!("../crates/core/README.md"),
        ),
        (
            "crates/core/src/lib.rs",
            include_str!("../crates/core/src/lib.rs"),
        ),
        (
            "crates/core/src/grpc.rs",
            include_str!("../crates/core/src/grpc.rs"),
        ),
        (
            "examples/tonic_channel.rs",
            include_str!("../examples/tonic_channel.rs"),
        ),
        (
            "examples/shared/quote_stack.rs",
            include_str!("../examples/shared/quote_stack.rs"),
        ),
    ];
    let mut found = 0;
    for (file, text) in files {
        for mut list in code_lists(text) {
            list.sort();
            assert_eq!(list, declared, "{file}");
            found += 1;
        }
    }
    // The files above hold seven such lists; a list rewritten as prose is checked
    // by eye, so say so here when one goes.
    assert_eq!(found, 7);
}
