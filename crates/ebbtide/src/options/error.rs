//! Errors of the tunables registry: values with messages, never panics.

use std::fmt;

/// What went wrong with one setting.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionErrorKind {
    /// No tunable has this name.
    UnknownName {
        /// The name as given.
        name: String,
        /// Closest names by edit distance (may be empty).
        suggestions: Vec<&'static str>,
    },
    /// An `EBBTIDE_*` environment variable that names no tunable.
    UnknownEnv {
        /// The variable's name.
        var: String,
        /// Closest variable names by edit distance (may be empty).
        suggestions: Vec<String>,
    },
    /// The value does not parse.
    BadSyntax {
        /// The tunable.
        name: &'static str,
        /// The value as given.
        value: String,
        /// What was expected instead.
        expected: String,
    },
    /// The value parses but lies outside the tunable's range.
    OutOfRange {
        /// The tunable.
        name: &'static str,
        /// The value as given.
        value: String,
        /// The accepted range, with units.
        range: String,
    },
    /// A start-up-only tunable was set after start-up.
    StartupOnly {
        /// The tunable.
        name: &'static str,
        /// Its environment variable.
        env: String,
    },
    /// A piece of `EBBTIDE_CONF` without `=`.
    MissingEquals {
        /// The piece as given.
        entry: String,
    },
    /// The same tunable twice in one batch.
    Duplicate {
        /// The tunable.
        name: &'static str,
    },
    /// Each value is valid alone but the combination is not.
    Conflict {
        /// Which rule is broken, with the values.
        message: String,
    },
    /// An `EBBTIDE_*` environment variable whose name or value is not UTF-8.
    NotUnicode {
        /// The variable's name (lossy).
        var: String,
    },
}

/// An error of the tunables registry, with where the setting came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    /// What went wrong.
    pub kind: OptionErrorKind,
    /// Where: `"EBBTIDE_CONF entry 2 'squeez_ms=5'"`, `"EBBTIDE_SQUEEZE_MS"`, or `None` for a
    /// direct API call.
    pub origin: Option<String>,
}

impl OptionError {
    pub(crate) fn new(kind: OptionErrorKind, origin: impl Into<String>) -> Self {
        OptionError {
            kind,
            origin: Some(origin.into()),
        }
    }
}

impl From<OptionErrorKind> for OptionError {
    fn from(kind: OptionErrorKind) -> Self {
        OptionError { kind, origin: None }
    }
}

fn did_you_mean(f: &mut fmt::Formatter<'_>, suggestions: &[impl AsRef<str>]) -> fmt::Result {
    for (i, s) in suggestions.iter().enumerate() {
        let sep = match i {
            0 => "; did you mean ",
            _ if i + 1 == suggestions.len() => " or ",
            _ => ", ",
        };
        write!(f, "{sep}'{}'", s.as_ref())?;
    }
    if !suggestions.is_empty() {
        f.write_str("?")?;
    }
    Ok(())
}

impl fmt::Display for OptionErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionErrorKind::UnknownName { name, suggestions } => {
                write!(f, "unknown tunable '{name}'")?;
                did_you_mean(f, suggestions)
            }
            OptionErrorKind::UnknownEnv { var, suggestions } => {
                write!(f, "unknown environment variable {var} (no such tunable)")?;
                did_you_mean(f, suggestions)
            }
            OptionErrorKind::BadSyntax {
                name,
                value,
                expected,
            } => write!(f, "{name}: cannot parse '{value}': expected {expected}"),
            OptionErrorKind::OutOfRange { name, value, range } => {
                write!(f, "{name}: '{value}' is out of range {range}")
            }
            OptionErrorKind::StartupOnly { name, env } => write!(
                f,
                "{name} is a start-up only tunable and cannot change at run time; \
                 set it with {env} or EBBTIDE_CONF before the process starts"
            ),
            OptionErrorKind::MissingEquals { entry } => {
                write!(f, "expected 'name=value', found '{entry}'")
            }
            OptionErrorKind::Duplicate { name } => {
                write!(f, "{name} is set more than once in the same batch")
            }
            OptionErrorKind::Conflict { message } => f.write_str(message),
            OptionErrorKind::NotUnicode { var } => {
                write!(f, "environment variable {var} is not valid UTF-8")
            }
        }
    }
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(origin) = &self.origin {
            write!(f, "{origin}: ")?;
        }
        self.kind.fmt(f)
    }
}

impl std::error::Error for OptionError {}
