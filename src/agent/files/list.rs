//! `list`: the entries of a directory, sorted by name, bounded in count, optionally recursing a
//! bounded number of levels; recursion opens each subdirectory with `O_NOFOLLOW`.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use serde::Serialize;

use super::error::FileError;
use super::stat::Stat;
use super::sys;
use super::Workspace;

/// The most entries one listing returns, whatever the client asks.
pub const MAX_LIST_ENTRIES: usize = 10_000;
/// The deepest a listing recurses, whatever the client asks.
pub const MAX_LIST_DEPTH: u32 = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListOptions {
    /// Clamped to [`MAX_LIST_ENTRIES`].
    pub max_entries: usize,
    /// Levels below the directory to include: 0 lists only its own entries.
    pub depth: u32,
}

impl Default for ListOptions {
    fn default() -> Self {
        Self {
            max_entries: 1000,
            depth: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listing {
    pub path: String,
    /// Depth-first, each directory's entries sorted by name, a directory before its contents.
    pub entries: Vec<Stat>,
    /// True when entries were left out to honour `max_entries`.
    pub truncated: bool,
}

impl Workspace {
    pub fn list(&self, path: &str, opts: ListOptions) -> Result<Listing, FileError> {
        let rel = self.rel(path)?;
        let fd = self.open_beneath(&rel, libc::O_RDONLY | libc::O_DIRECTORY, true, "list")?;
        let mut listing = Listing {
            path: rel.normal(),
            entries: Vec::new(),
            truncated: false,
        };
        let budget = opts.max_entries.min(MAX_LIST_ENTRIES);
        let depth = opts.depth.min(MAX_LIST_DEPTH);
        let prefix = rel.normal();
        collect(fd.as_fd(), &prefix, depth, budget, &mut listing)
            .map_err(|e| FileError::from_io(&e, "list", &rel.display))?;
        Ok(listing)
    }
}

fn collect(
    dir: BorrowedFd<'_>,
    prefix: &str,
    depth: u32,
    budget: usize,
    out: &mut Listing,
) -> std::io::Result<()> {
    let mut names = sys::read_dir_names(dir)?;
    names.sort();
    for name in names {
        if out.entries.len() >= budget {
            out.truncated = true;
            return Ok(());
        }
        let bytes = name.as_bytes();
        // An entry removed between readdir and fstatat is simply no longer there.
        let Ok(st) = sys::fstatat(dir, bytes, libc::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        let shown = String::from_utf8_lossy(bytes);
        let path = if prefix.is_empty() {
            shown.into_owned()
        } else {
            format!("{prefix}/{shown}")
        };
        out.entries
            .push(Stat::from_raw(path.clone(), &st, dir, bytes));
        if depth > 0 && sys::is_dir(&st) {
            // O_NOFOLLOW: a directory swapped for a symlink since fstatat is not entered.
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            if let Ok(child) = sys::openat(dir, bytes, flags, 0) {
                collect(child.as_fd(), &path, depth - 1, budget, out)?;
                if out.truncated {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::stat::EntryKind;
    use super::super::tests::Sandbox;
    use super::*;

    fn paths(listing: &Listing) -> Vec<&str> {
        listing.entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn list_is_sorted_and_bounded() {
        let sb = Sandbox::new("list-sorted");
        for name in ["c", "a", "b"] {
            sb.file(&format!("d/{name}"), name);
        }
        let ws = sb.ws();
        let all = ws.list("d", ListOptions::default()).unwrap();
        assert_eq!(paths(&all), ["d/a", "d/b", "d/c"]);
        assert!(!all.truncated);
        let two = ws
            .list(
                "d",
                ListOptions {
                    max_entries: 2,
                    depth: 0,
                },
            )
            .unwrap();
        assert_eq!(paths(&two), ["d/a", "d/b"]);
        assert!(two.truncated);
    }

    #[test]
    fn list_recurses_to_the_depth_asked_and_not_through_symlinks() {
        let sb = Sandbox::new("list-depth");
        sb.file("a/b/c/deep.txt", "x");
        sb.file("a/top.txt", "x");
        sb.symlink(sb.outside(), "a/out");
        let ws = sb.ws();
        let one = ws
            .list(
                "",
                ListOptions {
                    max_entries: 100,
                    depth: 1,
                },
            )
            .unwrap();
        assert_eq!(paths(&one), ["a", "a/b", "a/out", "a/top.txt"]);
        assert_eq!(one.entries[2].kind, EntryKind::Symlink);
        let all = ws
            .list(
                ".",
                ListOptions {
                    max_entries: 100,
                    depth: 10,
                },
            )
            .unwrap();
        assert_eq!(
            paths(&all),
            ["a", "a/b", "a/b/c", "a/b/c/deep.txt", "a/out", "a/top.txt"]
        );
    }
}
