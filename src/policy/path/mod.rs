//! Lexical containment of a client's path under the workspace root, for permission decisions.
//! Symlinks are not resolved here: the agent does that for I/O, inside the workspace.

use super::error::PolicyError;

/// Longest path accepted, in bytes, both as given and once resolved (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single component, in bytes (Linux's `NAME_MAX`).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// Resolves `path` against `root` lexically and returns the normalised absolute path.
///
/// `root` must be absolute and normalised. A relative `path` starts at `root`; an absolute one
/// must start with `root`'s components. `.` is dropped and `..` removes the previous component,
/// but a `..` that would climb above `root` is refused outright, even if later components would
/// come back inside: such a path means something else once a symlink is involved.
pub fn workspace_path(root: &str, path: &str) -> Result<String, PolicyError> {
    check_root(root)?;
    let reject = |rule: &'static str, what: &str| PolicyError::new(rule, what, path);
    if path.is_empty() {
        return Err(reject(
            "path.empty",
            "a path must not be empty; use '.' for the workspace root",
        ));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(reject("path.too-long", "a path must be at most 4096 bytes"));
    }
    if path.contains('\0') {
        return Err(reject("path.nul", "a path must not contain NUL bytes"));
    }
    if path.chars().any(char::is_control) {
        return Err(reject(
            "path.control-char",
            "a path must not contain control characters",
        ));
    }
    let mut parts = path.split('/').filter(|c| !c.is_empty() && *c != ".");
    if path.starts_with('/') {
        for root_part in components(root) {
            if parts.next() != Some(root_part) {
                return Err(PolicyError::new(
                    "path.outside-root",
                    format!("an absolute path must be inside the workspace root {root}; use a path relative to it"),
                    path,
                ));
            }
        }
    }
    let mut inside: Vec<&str> = Vec::new();
    for part in parts {
        if part.len() > MAX_COMPONENT_BYTES {
            return Err(reject(
                "path.component-too-long",
                "each '/'-separated part of a path must be at most 255 bytes",
            ));
        }
        if part == ".." {
            if inside.pop().is_none() {
                return Err(reject(
                    "path.escapes-root",
                    "a path must not use '..' to climb above the workspace root",
                ));
            }
        } else {
            inside.push(part);
        }
    }
    let resolved = join(root, &inside);
    if resolved.len() > MAX_PATH_BYTES {
        return Err(reject(
            "path.too-long",
            "a path must be at most 4096 bytes once resolved under the workspace root",
        ));
    }
    Ok(resolved)
}

/// The root comes from configuration, but a wrong one would void every containment decision.
fn check_root(root: &str) -> Result<(), PolicyError> {
    if !root.starts_with('/') {
        return Err(PolicyError::new(
            "path.root-not-absolute",
            "the workspace root must be an absolute path",
            root,
        ));
    }
    let normalised = root == "/"
        || (!root.ends_with('/')
            && root.len() <= MAX_PATH_BYTES
            && !root.chars().any(char::is_control)
            && root[1..]
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".." && c.len() <= MAX_COMPONENT_BYTES));
    if !normalised {
        return Err(PolicyError::new(
            "path.root-not-normalised",
            "the workspace root must be normalised: no '.', '..', '//', trailing '/' or control characters",
            root,
        ));
    }
    Ok(())
}

fn components(root: &str) -> impl Iterator<Item = &str> {
    root.split('/').filter(|c| !c.is_empty())
}

fn join(root: &str, inside: &[&str]) -> String {
    let mut out = String::from(root);
    for part in inside {
        if !out.ends_with('/') {
            out.push('/');
        }
        out.push_str(part);
    }
    out
}

#[cfg(test)]
mod tests;
