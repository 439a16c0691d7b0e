//! The one error every policy raises: which rule failed, and a message safe to show a client.
//! The message echoes at most a short, escaped prefix of the input, never the whole of it.

use std::fmt;

/// How many characters of a rejected input a message may quote.
pub const ECHO_CHARS: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// A stable, machine-readable name of the rule that failed (e.g. `ref.double-dot`).
    pub rule: &'static str,
    /// Human-readable text that says what was wrong and what is allowed.
    pub message: String,
}

impl PolicyError {
    /// An error that quotes a bounded prefix of `input`.
    pub fn new(rule: &'static str, what: impl Into<String>, input: &str) -> Self {
        let what = what.into();
        Self {
            rule,
            message: format!("{what} (got {})", echo(input)),
        }
    }

    /// An error that quotes nothing of the input: for inputs that may hold a secret.
    pub fn without_echo(rule: &'static str, what: impl Into<String>) -> Self {
        Self {
            rule,
            message: what.into(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]", self.message, self.rule)
    }
}

impl std::error::Error for PolicyError {}

/// A quoted, escaped prefix of `input`: at most [`ECHO_CHARS`] characters, control characters
/// shown as escapes, and an ellipsis when the input was longer.
pub fn echo(input: &str) -> String {
    let mut out = String::from("'");
    let mut chars = input.chars();
    for c in chars.by_ref().take(ECHO_CHARS) {
        out.extend(c.escape_debug());
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_bounds_and_escapes_the_input() {
        let long = "x".repeat(1000);
        let shown = echo(&long);
        assert_eq!(shown.chars().count(), ECHO_CHARS + 3);
        assert!(shown.ends_with("…'"));
        assert_eq!(echo("a\u{0}b\n"), "'a\\0b\\n'");
    }

    #[test]
    fn display_names_the_rule() {
        let e = PolicyError::new("ref.empty", "a ref name must not be empty", "");
        assert_eq!(
            e.to_string(),
            "a ref name must not be empty (got '') [ref.empty]"
        );
    }
}
