//! Why a policy document was not loaded or applied.

use std::fmt;
use std::path::PathBuf;

use seawall_core::ConfigError;

use super::locate::field_named;

/// Why a policy document was not loaded or applied. Every variant says which
/// file, and every problem names its field by its path in the document.
#[derive(Debug)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The document is not valid TOML, or has an unknown field, or a value of
    /// the wrong type or format (a duration without a unit, say).
    Malformed {
        /// The file, when the document came from one.
        path: Option<PathBuf>,
        /// The field at fault, e.g. `policies.quote.bulkhead.queue.max_wait`, when it
        /// could be told.
        field: Option<String>,
        /// 1-based line and column of the fault, when known.
        line_column: Option<(usize, usize)>,
        /// What is wrong (from the TOML parser).
        message: String,
    },
    /// The document is well formed, but some values are invalid (a rate above
    /// 1.0, a zero limit, a route naming an undeclared policy). All of them are
    /// listed, each naming its field, e.g. `policies.quote.breaker.policy.failure_rate`.
    Invalid {
        /// The file, when the document came from one.
        path: Option<PathBuf>,
        /// Every problem found.
        errors: Vec<ConfigError>,
    },
    /// The document is valid, but changes what a running service cannot change
    /// (see [`Policies::apply`](super::Policies::apply)); nothing was applied.
    NeedsRestart {
        /// The file, when the document came from one.
        path: Option<PathBuf>,
        /// Every change that cannot be applied at run time.
        errors: Vec<ConfigError>,
    },
    /// No file to reload: the policies were not loaded from a file.
    NoFile,
}

impl LoadError {
    pub(crate) fn from_toml(path: Option<PathBuf>, text: &str, e: &toml::de::Error) -> Self {
        let span = e.span();
        let message = e.message().trim().to_owned();
        let field = span
            .as_ref()
            .and_then(|s| field_named(text, s.start, &message));
        let line_column = match &span {
            Some(s) => Some(line_column(text, s.start)),
            // The parser gives no position when a document nests deeper than it
            // allows: point at the most deeply nested line instead.
            None if message.contains("recursion limit") => deepest_line(text),
            None => None,
        };
        let message = if span.is_none() && message.contains("recursion limit") {
            "keys or tables nested deeper than the parser allows (a policy document \
             needs a handful of levels)"
                .to_owned()
        } else {
            message
        };
        LoadError::Malformed {
            path,
            field,
            line_column,
            message,
        }
    }

    /// The same error, for the document read from `path`.
    pub(crate) fn in_file(mut self, file: PathBuf) -> Self {
        match &mut self {
            LoadError::Malformed { path, .. }
            | LoadError::Invalid { path, .. }
            | LoadError::NeedsRestart { path, .. } => *path = Some(file),
            LoadError::Read { .. } | LoadError::NoFile => {}
        }
        self
    }

    /// The fields at fault (full paths in the document), in the order reported.
    pub fn fields(&self) -> Vec<&str> {
        match self {
            LoadError::Malformed { field, .. } => field.as_deref().into_iter().collect(),
            LoadError::Invalid { errors, .. } | LoadError::NeedsRestart { errors, .. } => {
                errors.iter().map(ConfigError::field).collect()
            }
            LoadError::Read { .. } | LoadError::NoFile => Vec::new(),
        }
    }
}

/// The line with the most nesting (dots in a key, brackets, braces), column 1.
fn deepest_line(text: &str) -> Option<(usize, usize)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (line.matches(['.', '[', '{']).count(), i))
        .max_by_key(|&(depth, i)| (depth, std::cmp::Reverse(i)))
        .map(|(_, i)| (i + 1, 1))
}

fn line_column(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = |path: &Option<PathBuf>| {
            path.as_ref()
                .map_or_else(|| "policy document".to_owned(), |p| p.display().to_string())
        };
        match self {
            LoadError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            LoadError::Malformed {
                path,
                field,
                line_column,
                message,
            } => {
                write!(f, "{}", file(path))?;
                if let Some((line, column)) = line_column {
                    write!(f, ":{line}:{column}")?;
                }
                if let Some(field) = field {
                    write!(f, ": `{field}`")?;
                }
                write!(f, ": {message}")
            }
            LoadError::Invalid { path, errors } => {
                write!(f, "{}: ", file(path))?;
                list(f, errors)
            }
            LoadError::NeedsRestart { path, errors } => {
                write!(f, "{}: not applied: ", file(path))?;
                list(f, errors)
            }
            LoadError::NoFile => f.write_str("the policies were not loaded from a file"),
        }
    }
}

fn list(f: &mut fmt::Formatter<'_>, errors: &[ConfigError]) -> fmt::Result {
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        write!(f, "{e}")?;
    }
    Ok(())
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let text = "a = 1\nbb = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 8), (2, 3));
        assert_eq!(line_column(text, 100), (3, 1));
    }
}
