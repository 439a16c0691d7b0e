//! The one path form the agent speaks with the gateway: client paths under `/workspace`,
//! whatever the workspace's real root (in an unisolated local workspace, a host directory).
//!
//! Requests may name a path under `/workspace`, relative to the root, or absolute under the
//! real root; [`under_root`] turns the first into the second before the policy and the
//! contained file operations see it (which alone decide containment). Results name paths under
//! `/workspace` ([`shown_path`]). Watch events stay relative to the watched root.

use std::borrow::Cow;

/// The root as clients name it.
pub const CLIENT_ROOT: &str = "/workspace";

/// A request's path with a `/workspace` prefix made relative to the root; any other path as
/// it is. Nothing here is a check: `..` and the rest are the policy's to refuse.
pub(crate) fn under_root(path: &str) -> Cow<'_, str> {
    match path.strip_prefix(CLIENT_ROOT) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            let rest = rest.trim_start_matches('/');
            Cow::Owned(if rest.is_empty() {
                ".".into()
            } else {
                rest.into()
            })
        }
        _ => Cow::Borrowed(path),
    }
}

/// A path relative to the root (as the file operations report it; `""` or `.` is the root
/// itself) under `/workspace`.
pub fn shown_path(relative: &str) -> String {
    let relative = relative.trim_start_matches("./").trim_matches('/');
    if relative.is_empty() || relative == "." {
        CLIENT_ROOT.to_owned()
    } else {
        format!("{CLIENT_ROOT}/{relative}")
    }
}
