//! `remove`: unlinks an entry by name in its directory fd: a symlink removes the link, a
//! directory only with `recursive`, and recursion opens every level with `O_NOFOLLOW`.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use serde::Serialize;

use super::error::FileError;
use super::sys;
use super::Workspace;

/// The deepest a recursive removal descends (each level holds one fd open).
pub const MAX_REMOVE_DEPTH: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoveOutcome {
    pub path: String,
    /// How many entries were removed, the named one included.
    pub removed: u64,
}

impl Workspace {
    /// Removes `path` itself; never what a symlink points at.
    pub fn remove(&self, path: &str, recursive: bool) -> Result<RemoveOutcome, FileError> {
        let rel = self.rel(path)?;
        let (parent, name) = rel.split_parent()?;
        let dir = self.open_dir(&parent, "remove")?;
        let name = name.as_bytes();
        let st = sys::fstatat(dir.as_fd(), name, libc::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| FileError::from_io(&e, "remove", &rel.display))?;
        let mut removed = 0;
        let result = if sys::is_dir(&st) {
            if !recursive {
                return Err(FileError::conflict(format!(
                    "cannot remove '{}': it is a directory; pass recursive to remove it and its \
                     contents",
                    rel.display
                )));
            }
            remove_tree(dir.as_fd(), name, 0, &mut removed)
        } else {
            sys::unlinkat(dir.as_fd(), name, 0).map(|()| removed += 1)
        };
        result.map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                FileError::limit(format!(
                    "cannot remove '{}': deeper than {MAX_REMOVE_DEPTH} levels",
                    rel.display
                ))
            } else {
                FileError::from_io(&e, "remove", &rel.display)
            }
        })?;
        Ok(RemoveOutcome {
            path: rel.normal(),
            removed,
        })
    }
}

/// Empties and removes the directory `name` in `parent`. An entry that is not a directory when
/// opened with `O_DIRECTORY | O_NOFOLLOW` (a symlink swapped in, say) is unlinked as a name.
pub(crate) fn remove_tree(
    parent: BorrowedFd<'_>,
    name: &[u8],
    depth: usize,
    removed: &mut u64,
) -> std::io::Result<()> {
    if depth >= MAX_REMOVE_DEPTH {
        return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let dir = match sys::openat(parent, name, flags, 0) {
        Ok(fd) => fd,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP)) => {
            sys::unlinkat(parent, name, 0)?;
            *removed += 1;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    for child in sys::read_dir_names(dir.as_fd())? {
        let child = child.as_bytes();
        let st = match sys::fstatat(dir.as_fd(), child, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        if sys::is_dir(&st) {
            remove_tree(dir.as_fd(), child, depth + 1, removed)?;
        } else {
            match sys::unlinkat(dir.as_fd(), child, 0) {
                Ok(()) => *removed += 1,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
    }
    sys::unlinkat(parent, name, libc::AT_REMOVEDIR)?;
    *removed += 1;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::Sandbox;
    use super::super::FileErrorKind;

    #[test]
    fn remove_of_a_symlink_keeps_the_target() {
        let sb = Sandbox::new("remove-link");
        sb.file("target.txt", "keep");
        sb.symlink("target.txt", "link");
        sb.symlink(sb.outside(), "out");
        for ws in sb.workspaces() {
            let _ = ws.remove("link", false);
            let _ = ws.remove("out", true);
        }
        assert!(!sb.at("link").exists() && sb.at("link").symlink_metadata().is_err());
        assert!(sb.at("out").symlink_metadata().is_err());
        assert_eq!(sb.read("target.txt"), "keep");
        sb.assert_outside_untouched();
    }

    #[test]
    fn remove_of_a_directory_needs_recursive() {
        let sb = Sandbox::new("remove-dir");
        sb.file("d/a/b.txt", "x");
        let ws = sb.ws();
        assert_eq!(
            ws.remove("d", false).unwrap_err().kind,
            FileErrorKind::Conflict
        );
        assert!(sb.at("d/a/b.txt").exists());
        assert_eq!(ws.remove("d", true).unwrap().removed, 3);
        assert!(!sb.at("d").exists());
    }

    #[test]
    fn recursive_remove_never_follows_a_symlink_inside_the_tree() {
        let sb = Sandbox::new("remove-nofollow");
        sb.file("d/own.txt", "x");
        sb.symlink(sb.outside(), "d/out");
        sb.symlink("../keep", "d/keep-link");
        sb.file("keep/k.txt", "k");
        sb.ws().remove("d", true).unwrap();
        assert!(!sb.at("d").exists());
        assert_eq!(sb.read("keep/k.txt"), "k");
        sb.assert_outside_untouched();
    }

    #[test]
    fn remove_of_the_root_is_refused() {
        let sb = Sandbox::new("remove-root");
        for path in ["", ".", "a/.."] {
            assert_eq!(
                sb.ws().remove(path, true).unwrap_err().kind,
                FileErrorKind::InvalidArgument
            );
        }
        assert!(sb.root().is_dir());
    }
}
