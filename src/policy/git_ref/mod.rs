//! Branch, tag and commit names a client asks for: git's own `check-ref-format --allow-onelevel`
//! rules, plus bans on names git would read as options, forced refspecs or special refs.

use super::error::PolicyError;

/// Longest ref name accepted, in bytes (git has no limit; file systems and our logs do).
pub const MAX_REF_BYTES: usize = 255;

/// Checks `text` and returns it unchanged: a valid ref name has exactly one spelling.
///
/// Git's rules come first, in the order `git-check-ref-format(1)` lists them, so a name git
/// accepts can only fail here on one of our extra rules: length, a leading `-` or `+`, a
/// component starting with `-`, or a `HEAD`-like special name.
pub fn git_ref(text: &str) -> Result<String, PolicyError> {
    let reject = |rule: &'static str, what: &str| Err(PolicyError::new(rule, what, text));
    if text.is_empty() {
        return reject("ref.empty", "a ref name must not be empty");
    }
    if text.len() > MAX_REF_BYTES {
        return reject("ref.too-long", "a ref name must be at most 255 bytes");
    }
    if let Some(rule_what) = bad_character(text) {
        return reject(rule_what.0, rule_what.1);
    }
    if text == "@" {
        return reject(
            "ref.at-sign",
            "a ref name must not be the single character '@'",
        );
    }
    if text.contains("@{") {
        return reject(
            "ref.at-brace",
            "a ref name must not contain '@{' (git reads it as a reflog expression)",
        );
    }
    if text.contains("..") {
        return reject(
            "ref.double-dot",
            "a ref name must not contain '..' (git reads it as a range)",
        );
    }
    for component in text.split('/') {
        if component.is_empty() {
            return reject(
                "ref.slash",
                "a ref name must not start or end with '/' nor contain '//'",
            );
        }
        if component.starts_with('.') {
            return reject(
                "ref.component-dot",
                "no '/'-separated part of a ref name may start with '.'",
            );
        }
        if component.ends_with(".lock") {
            return reject(
                "ref.lock-suffix",
                "no '/'-separated part of a ref name may end with '.lock'",
            );
        }
    }
    if text.ends_with('.') {
        return reject("ref.trailing-dot", "a ref name must not end with '.'");
    }
    extra_rules(text)
}

/// Git's forbidden characters: ASCII control characters, space, and `~ ^ : ? * [ \`.
fn bad_character(text: &str) -> Option<(&'static str, &'static str)> {
    text.chars().find_map(|c| match c {
        '\0'..='\u{1f}' | '\u{7f}' => Some((
            "ref.control-char",
            "a ref name must not contain control characters",
        )),
        ' ' => Some(("ref.space", "a ref name must not contain spaces")),
        '~' | '^' | ':' => Some((
            "ref.revision-syntax",
            "a ref name must not contain '~', '^' or ':' (revision syntax)",
        )),
        '?' | '*' | '[' => Some((
            "ref.glob",
            "a ref name must not contain '?', '*' or '[' (glob characters)",
        )),
        '\\' => Some(("ref.backslash", "a ref name must not contain '\\'")),
        _ => None,
    })
}

/// Our rules on top of git's: names that a git command line would take for something else.
fn extra_rules(text: &str) -> Result<String, PolicyError> {
    let reject = |rule: &'static str, what: &str| Err(PolicyError::new(rule, what, text));
    if text.starts_with('-') {
        return reject(
            "ref.leading-dash",
            "a ref name must not start with '-' (git would read it as an option)",
        );
    }
    if text.starts_with('+') {
        return reject(
            "ref.leading-plus",
            "a ref name must not start with '+' (git would read it as a forced refspec)",
        );
    }
    if text.split('/').any(|c| c.starts_with('-')) {
        return reject(
            "ref.component-dash",
            "no '/'-separated part of a ref name may start with '-'",
        );
    }
    if is_special_head(text) {
        return reject(
            "ref.head",
            "a ref name must not be HEAD or a one-level all-caps name ending in HEAD \
             (FETCH_HEAD, ORIG_HEAD, ...); name a branch, tag or commit",
        );
    }
    Ok(text.to_owned())
}

/// `HEAD`, `FETCH_HEAD`, `ORIG_HEAD`…: one level, git's pseudo-ref alphabet (`A-Z`, `_`, `-`).
fn is_special_head(text: &str) -> bool {
    text.ends_with("HEAD")
        && text
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests;
