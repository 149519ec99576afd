//! Which field of a TOML document a byte offset falls in: the parser reports where
//! a deserialisation error is, not the dotted path of the field.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::document::key;

/// The dotted path (`policies.quote.bulkhead.max_wait`) of the deepest key or
/// value containing byte `at`, if any.
pub(crate) fn field_at(text: &str, at: usize) -> Option<String> {
    let doc = DeTable::parse(text).ok()?;
    let mut best: Option<Vec<String>> = None;
    let mut path = Vec::new();
    walk(doc.get_ref(), at, &mut path, &mut best);
    best.map(|p| p.join("."))
}

fn contains(span: &Range<usize>, at: usize) -> bool {
    span.start <= at && at < span.end.max(span.start + 1)
}

fn keep(path: &[String], best: &mut Option<Vec<String>>) {
    if best.as_ref().is_none_or(|b| path.len() >= b.len()) {
        *best = Some(path.to_vec());
    }
}

fn walk(table: &DeTable<'_>, at: usize, path: &mut Vec<String>, best: &mut Option<Vec<String>>) {
    for (k, v) in table.iter() {
        path.push(key(k.get_ref()));
        if contains(&k.span(), at) || contains(&v.span(), at) {
            keep(path, best);
        }
        walk_value(v.get_ref(), at, path, best);
        path.pop();
    }
}

fn walk_value(
    value: &DeValue<'_>,
    at: usize,
    path: &mut Vec<String>,
    best: &mut Option<Vec<String>>,
) {
    match value {
        DeValue::Table(t) => walk(t, at, path, best),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(last) = path.last_mut() {
                    let base = last.clone();
                    *last = format!("{base}[{i}]");
                    if contains(&item.span(), at) {
                        keep(path, best);
                    }
                    walk_value(item.get_ref(), at, path, best);
                    if let Some(last) = path.last_mut() {
                        *last = base;
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str, needle: &str) -> Option<String> {
        field_at(text, text.find(needle).unwrap())
    }

    #[test]
    fn finds_keys_values_headers_and_array_items() {
        let text = r#"
[policies.quote.bulkhead]
max_wait = "20"

[policies.quote.fallback]
step_timeouts = [{ step = "cache", timeout = "0ms" }]

[routes]
"/quote" = "quote"
"#;
        assert_eq!(
            at(text, "\"20\"").as_deref(),
            Some("policies.quote.bulkhead.max_wait")
        );
        assert_eq!(
            at(text, "max_wait").as_deref(),
            Some("policies.quote.bulkhead.max_wait")
        );
        assert_eq!(
            at(text, "\"0ms\"").as_deref(),
            Some("policies.quote.fallback.step_timeouts[0].timeout")
        );
        assert_eq!(at(text, "= \"quote\"").as_deref(), None);
        assert_eq!(
            at(text, "\"quote\"\n").as_deref(),
            Some("routes.\"/quote\"")
        );
    }
}
