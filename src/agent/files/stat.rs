//! `stat`: what an entry is (type, size, mode, mtime, and a symlink's target), never following
//! a final symlink, so a link is reported as the link it is.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use serde::Serialize;

use super::error::FileError;
use super::sys;
use super::Workspace;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device: listed, never read or written.
    Other,
}

/// One entry, as `stat` and `list` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stat {
    /// Relative to the workspace root.
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Modification time in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// What a symlink contains, verbatim (lossy UTF-8); `None` for everything else.
    pub symlink_target: Option<String>,
}

impl Stat {
    /// Builds the record for `name` in `dir` from an already fetched `stat`.
    pub(crate) fn from_raw(
        path: String,
        st: &libc::stat,
        dir: BorrowedFd<'_>,
        name: &[u8],
    ) -> Self {
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => EntryKind::File,
            libc::S_IFDIR => EntryKind::Dir,
            libc::S_IFLNK => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        let symlink_target = (kind == EntryKind::Symlink)
            .then(|| sys::readlinkat(dir, name).ok())
            .flatten()
            .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned());
        Self {
            path,
            kind,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mode: st.st_mode & 0o7777,
            mtime_ns: sys::mtime_ns(st),
            symlink_target,
        }
    }
}

impl Workspace {
    /// Describes `path`; a final symlink is described, not followed.
    pub fn stat(&self, path: &str) -> Result<Stat, FileError> {
        let rel = self.rel(path)?;
        let fd = self.open_beneath(&rel, libc::O_PATH, false, "stat")?;
        let st =
            sys::fstat(fd.as_fd()).map_err(|e| FileError::from_io(&e, "stat", &rel.display))?;
        // An O_PATH|O_NOFOLLOW fd of a symlink is the link: readlinkat(fd, "") reads it.
        Ok(Stat::from_raw(rel.normal(), &st, fd.as_fd(), b""))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Sandbox;
    use super::*;

    #[test]
    fn stat_reports_a_symlink_as_a_link_with_its_target() {
        let sb = Sandbox::new("stat-link");
        sb.file("a.txt", "hello");
        sb.symlink("/etc", "etc-link");
        for ws in sb.workspaces() {
            let file = ws.stat("a.txt").unwrap();
            assert_eq!((file.kind, file.size), (EntryKind::File, 5));
            let link = ws.stat("etc-link").unwrap();
            assert_eq!(link.kind, EntryKind::Symlink);
            assert_eq!(link.symlink_target.as_deref(), Some("/etc"));
        }
    }

    #[test]
    fn stat_of_a_missing_path_is_not_found_and_names_the_client_path() {
        let sb = Sandbox::new("stat-missing");
        let err = sb.ws().stat("nope/x").unwrap_err();
        assert_eq!(err.kind, super::super::FileErrorKind::NotFound);
        assert!(err.message.contains("'nope/x'"), "{}", err.message);
        assert!(!err.message.contains(sb.root().to_str().unwrap()));
    }
}
