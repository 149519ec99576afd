//! Which field of a TOML document a byte offset falls in: the parser reports where
//! a deserialisation error is, not the dotted path of the field.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::document::key;

/// The dotted path (`policies.quote.bulkhead.queue.max_wait`) of the deepest key or
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

/// The field a parser error at byte `at` is about, by its path in the document: the
/// deepest key or value containing `at`, made precise by the key the message names
/// ([`inner_field`]) only where the result is a path of the document (or, for a
/// missing field, where the field belongs). A misspelled top-level table
/// (`[polices.f]`) is refused as an unknown field `polices` of the document while
/// the parser points into `polices.f`: the field is `polices`, the key that is
/// there, not `polices.f.polices`.
pub(crate) fn field_named(text: &str, at: usize, message: &str) -> Option<String> {
    let outer = field_at(text, at)?;
    let Some(inner) = inner_field(text, at, message) else {
        return Some(outer);
    };
    if outer == inner || outer.ends_with(&format!(".{inner}")) {
        return Some(outer);
    }
    let joined = format!("{outer}.{inner}");
    if message.contains("missing field ") || has_path(text, &joined) {
        return Some(joined);
    }
    // The nearest enclosing key the message names, if any.
    let mut ancestor = outer.as_str();
    while let Some((parent, last)) = ancestor.rsplit_once('.') {
        if last == inner {
            return Some(ancestor.to_owned());
        }
        ancestor = parent;
    }
    Some(if ancestor == inner { inner } else { outer })
}

/// Whether `path` (dotted, as [`field_at`] writes it) is a key of the document.
pub(crate) fn has_path(text: &str, path: &str) -> bool {
    let Ok(doc) = DeTable::parse(text) else {
        return false;
    };
    let mut found = false;
    let mut prefix = Vec::new();
    each_path(doc.get_ref(), &mut prefix, &mut |p| found |= p == path);
    found
}

/// Calls `f` with the dotted path of every key and array item of `table`.
fn each_path(table: &DeTable<'_>, path: &mut Vec<String>, f: &mut impl FnMut(&str)) {
    for (k, v) in table.iter() {
        path.push(key(k.get_ref()));
        f(&path.join("."));
        each_value_path(v.get_ref(), path, f);
        path.pop();
    }
}

fn each_value_path(value: &DeValue<'_>, path: &mut Vec<String>, f: &mut impl FnMut(&str)) {
    match value {
        DeValue::Table(t) => each_path(t, path, f),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let Some(base) = path.last().cloned() else {
                    return;
                };
                if let Some(last) = path.last_mut() {
                    *last = format!("{base}[{i}]");
                }
                f(&path.join("."));
                each_value_path(item.get_ref(), path, f);
                if let Some(last) = path.last_mut() {
                    *last = base;
                }
            }
        }
        _ => {}
    }
}

/// The field an error inside an inline table is about, when the parser could only
/// point at the whole table (serde buffers internally tagged tables such as a
/// breaker's `policy = { kind = ... }`, losing the inner position): the key a
/// `missing field`/`unknown field` message names, or the one key whose written value
/// the message quotes. `None` when nothing names one key for sure.
fn inner_field(text: &str, at: usize, message: &str) -> Option<String> {
    let doc = DeTable::parse(text).ok()?;
    let table = table_at(doc.get_ref(), at)?;
    if let Some(name) = backticked_after(message, "unknown field ")
        .or_else(|| backticked_after(message, "missing field "))
    {
        return Some(key(name));
    }
    let mut quoted = table.iter().filter(|(_, v)| {
        let written = text.get(v.span()).unwrap_or("").trim();
        !written.is_empty() && message.contains(written)
    });
    match (quoted.next(), quoted.next()) {
        (Some((k, _)), None) => Some(key(k.get_ref())),
        _ => None,
    }
}

fn backticked_after<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    let rest = rest.strip_prefix('`')?;
    Some(&rest[..rest.find('`')?])
}

/// The innermost table value whose span contains `at` (header tables have no
/// useful span, so every table is searched).
fn table_at<'t>(table: &'t DeTable<'t>, at: usize) -> Option<&'t DeTable<'t>> {
    let mut found = None;
    for (_, v) in table.iter() {
        if let DeValue::Table(inner) = v.get_ref() {
            if let Some(deeper) = table_at(inner, at) {
                return Some(deeper);
            }
            if contains(&v.span(), at) && !v.span().is_empty() {
                found = Some(inner);
            }
        }
    }
    found
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
[policies.quote.bulkhead.queue]
max_wait = "20"

[policies.quote.fallback]
step_timeouts = [{ step = "cache", timeout = "0ms" }]

[routes]
"/quote" = "quote"
"#;
        assert_eq!(
            at(text, "\"20\"").as_deref(),
            Some("policies.quote.bulkhead.queue.max_wait")
        );
        assert_eq!(
            at(text, "max_wait").as_deref(),
            Some("policies.quote.bulkhead.queue.max_wait")
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
