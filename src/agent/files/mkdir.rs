//! `mkdir`: creates a directory beneath the root, with its missing parents on request; each
//! level is created with `mkdirat` in a directory fd that was itself resolved beneath the root.

use std::os::fd::{AsFd, OwnedFd};

use serde::Serialize;

use super::error::{FileError, FileErrorKind};
use super::resolve::RelPath;
use super::sys;
use super::Workspace;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MkdirOutcome {
    pub path: String,
    /// False when `parents` was set and the directory already existed.
    pub created: bool,
}

impl Workspace {
    /// Creates `path`; with `parents`, creates missing ancestors and accepts an existing one.
    pub fn mkdir(&self, path: &str, parents: bool) -> Result<MkdirOutcome, FileError> {
        let rel = self.rel(path)?;
        let (parent, name) = rel.split_parent()?;
        let dir = if parents {
            self.ensure_dir(&parent)?
        } else {
            self.open_dir(&parent, "create a directory in")?
        };
        let created = match sys::mkdirat(dir.as_fd(), name.as_bytes(), 0o777) {
            Ok(()) => true,
            Err(e) if parents && e.raw_os_error() == Some(libc::EEXIST) => {
                // Accept it only if it is (or leads, beneath the root, to) a directory.
                self.open_dir(&rel, "create")?;
                false
            }
            Err(e) => return Err(FileError::from_io(&e, "create", &rel.display)),
        };
        Ok(MkdirOutcome {
            path: rel.normal(),
            created,
        })
    }

    /// An `O_PATH` fd of directory `path`, creating every missing level. Each prefix is resolved
    /// from the root again, so a level reached through a symlink must still lead inside.
    pub(crate) fn ensure_dir(&self, path: &RelPath) -> Result<OwnedFd, FileError> {
        match self.open_dir(path, "create") {
            Err(e) if e.kind == FileErrorKind::NotFound => {}
            other => return other,
        }
        let normal = path.normal();
        let mut prefix = String::new();
        for part in normal.split('/') {
            let parent = RelPath {
                display: path.display.clone(),
                rel: if prefix.is_empty() {
                    ".".into()
                } else {
                    prefix.clone()
                },
            };
            prefix = if prefix.is_empty() {
                part.into()
            } else {
                format!("{prefix}/{part}")
            };
            if part == ".." {
                continue;
            }
            let here = RelPath {
                display: path.display.clone(),
                rel: prefix.clone(),
            };
            match self.open_dir(&here, "create") {
                Ok(_) => continue,
                Err(e) if e.kind == FileErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            let dir = self.open_dir(&parent, "create")?;
            match sys::mkdirat(dir.as_fd(), part.as_bytes(), 0o777) {
                Ok(()) => {}
                // Someone else made it in the meantime: the next open checks what it is.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(FileError::from_io(&e, "create", &path.display)),
            }
        }
        self.open_dir(path, "create")
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Sandbox;
    use super::*;

    #[test]
    fn mkdir_without_parents_needs_the_parent() {
        let sb = Sandbox::new("mkdir-plain");
        let ws = sb.ws();
        assert_eq!(
            ws.mkdir("a/b", false).unwrap_err().kind,
            FileErrorKind::NotFound
        );
        assert!(ws.mkdir("a", false).unwrap().created);
        assert_eq!(
            ws.mkdir("a", false).unwrap_err().kind,
            FileErrorKind::Conflict
        );
    }

    #[test]
    fn mkdir_with_parents_creates_every_level_and_accepts_an_existing_one() {
        let sb = Sandbox::new("mkdir-parents");
        let ws = sb.ws();
        assert!(ws.mkdir("a/b/c", true).unwrap().created);
        assert!(sb.at("a/b/c").is_dir());
        assert!(!ws.mkdir("a/b/c", true).unwrap().created);
        sb.file("f", "x");
        assert_eq!(
            ws.mkdir("f/g", true).unwrap_err().kind,
            FileErrorKind::NotFound
        );
    }

    #[test]
    fn mkdir_through_a_symlink_to_the_outside_is_refused() {
        let sb = Sandbox::new("mkdir-escape");
        sb.symlink(sb.outside(), "out");
        sb.symlink("..", "up");
        for ws in sb.workspaces() {
            for path in ["out/new", "up/new", "out/x/y"] {
                let err = ws.mkdir(path, true).unwrap_err();
                assert_eq!(err.kind, FileErrorKind::Permission, "{path}: {err}");
            }
        }
        sb.assert_outside_untouched();
    }
}
