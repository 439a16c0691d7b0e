//! Turns a client path into an fd opened beneath the root fd, with no window between check and
//! use: `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, or a symlink-resolving `openat` walk.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use super::error::FileError;
use super::sys;
use super::Workspace;

/// How many symlinks one resolution may pass through, as the kernel's own limit (MAXSYMLINKS).
pub const MAX_SYMLINKS: usize = 40;

/// How paths are resolved beneath the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// The kernel refuses every escape itself (Linux ≥ 5.6).
    Openat2,
    /// One component at a time with `O_NOFOLLOW`; symlinks are read and resolved here.
    Walk,
}

/// A client path made relative to the root: `display` is what messages show (the client's
/// text, minus a leading root prefix), `rel` is what is handed to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelPath {
    pub display: String,
    pub rel: String,
}

impl RelPath {
    /// The normalised path of the entry `name` inside this directory, for results.
    pub fn child(&self, name: &str) -> String {
        let base = self.normal();
        if base.is_empty() {
            name.to_owned()
        } else {
            format!("{base}/{name}")
        }
    }

    /// `rel` without `.` and empty components: what results show for this path.
    pub fn normal(&self) -> String {
        self.rel
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Splits into (parent, final name) for operations on the entry itself (write, remove).
    pub fn split_parent(&self) -> Result<(RelPath, String), FileError> {
        let trimmed = self.rel.trim_end_matches('/');
        let (parent, name) = match trimmed.rfind('/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(FileError::invalid(format!(
                "'{}' does not name an entry inside the workspace (it ends in '{}')",
                self.display,
                if name.is_empty() { "/" } else { name }
            )));
        }
        let parent = RelPath {
            display: self.display.clone(),
            rel: if parent.is_empty() {
                ".".into()
            } else {
                parent.into()
            },
        };
        Ok((parent, name.to_owned()))
    }
}

impl Workspace {
    /// Parses a client path: relative to the root, or absolute under the root's own path.
    /// `..` that climbs above the root lexically is refused here, before any I/O.
    pub fn rel(&self, client: &str) -> Result<RelPath, FileError> {
        if client.contains('\0') {
            return Err(FileError::invalid("a path must not contain a NUL byte"));
        }
        let path = Path::new(client);
        let (display, rel) = if path.is_absolute() {
            match path.strip_prefix(&self.root) {
                Ok(inside) => {
                    let s = inside.to_string_lossy().into_owned();
                    (s.clone(), s)
                }
                // The host path of the root is never echoed: name only the client's input.
                Err(_) => return Err(FileError::outside(client)),
            }
        } else {
            (client.to_owned(), client.to_owned())
        };
        let mut depth: usize = 0;
        for component in Path::new(&rel).components() {
            match component {
                Component::ParentDir => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or_else(|| FileError::outside(&display))?;
                }
                Component::Normal(_) => depth += 1,
                _ => {}
            }
        }
        let rel = if rel.is_empty() { ".".to_owned() } else { rel };
        Ok(RelPath { display, rel })
    }

    /// Opens `path` beneath the root with `flags`; the final component is followed only when
    /// `follow` is set (a symlink then yields ELOOP, or the link itself with `O_PATH`).
    pub fn open_beneath(
        &self,
        path: &RelPath,
        flags: libc::c_int,
        follow: bool,
        action: &str,
    ) -> Result<OwnedFd, FileError> {
        self.open_raw(path.rel.as_bytes(), flags, follow)
            .map_err(|e| FileError::from_io(&e, action, &path.display))
    }

    pub(crate) fn open_raw(
        &self,
        path: &[u8],
        flags: libc::c_int,
        follow: bool,
    ) -> io::Result<OwnedFd> {
        match self.resolver {
            Resolver::Openat2 => open_openat2(self.root_fd.as_fd(), path, flags, follow),
            Resolver::Walk => open_walk(self.root_fd.as_fd(), path, flags, follow),
        }
    }

    /// An `O_PATH` fd of the directory `path` (followed: it may be reached through links).
    pub fn open_dir(&self, path: &RelPath, action: &str) -> Result<OwnedFd, FileError> {
        self.open_beneath(path, libc::O_PATH | libc::O_DIRECTORY, true, action)
    }
}

/// Tells whether this kernel has `openat2` (absent before 5.6, and under seccomp filters
/// written before it existed, which answer EPERM or ENOSYS).
pub fn probe(root: BorrowedFd<'_>) -> Resolver {
    let how = sys::RESOLVE_BENEATH | sys::RESOLVE_NO_MAGICLINKS;
    match sys::openat2(root, b".", libc::O_PATH | libc::O_DIRECTORY, 0, how) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
            Resolver::Walk
        }
        _ => Resolver::Openat2,
    }
}

fn open_openat2(
    root: BorrowedFd<'_>,
    path: &[u8],
    flags: libc::c_int,
    follow: bool,
) -> io::Result<OwnedFd> {
    let flags = if follow {
        flags
    } else {
        flags | libc::O_NOFOLLOW
    };
    let how = sys::RESOLVE_BENEATH | sys::RESOLVE_NO_MAGICLINKS;
    // With RESOLVE_BENEATH the kernel answers EAGAIN when a concurrent rename could have let a
    // `..` escape; it asks the caller to retry, and a bounded retry cannot spin forever.
    let mut tries = 0;
    loop {
        match sys::openat2(root, path, flags, 0, how) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 64 => tries += 1,
            other => return other,
        }
    }
}

fn components(path: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    path.split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
}

/// The fallback: every component is opened with `O_NOFOLLOW` relative to the fd of the one
/// before it; a symlink is read and its target spliced into the queue; `..` pops a held fd and
/// may never pop the root. Every directory on the way is pinned by an fd, so swapping a name
/// afterwards changes nothing already resolved.
fn open_walk(
    root: BorrowedFd<'_>,
    path: &[u8],
    flags: libc::c_int,
    follow: bool,
) -> io::Result<OwnedFd> {
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut queue: VecDeque<Vec<u8>> = components(path).collect();
    let mut links = 0;
    while let Some(name) = queue.pop_front() {
        if name == b".." {
            if stack.pop().is_none() {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
            continue;
        }
        let dir = stack.last().map_or(root, |fd| fd.as_fd());
        let last = queue.is_empty();
        let opened = if last {
            sys::openat(dir, &name, flags | libc::O_NOFOLLOW, 0)
        } else {
            sys::openat(dir, &name, libc::O_PATH | libc::O_NOFOLLOW, 0)
        };
        let is_link = match &opened {
            Ok(fd) => sys::is_symlink(&sys::fstat(fd.as_fd())?),
            // O_NOFOLLOW on a symlink fails with ELOOP, or ENOTDIR alongside O_DIRECTORY: ask
            // what the name is. A swap since the open only changes which rule applies next.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) => {
                sys::fstatat(dir, &name, libc::AT_SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| sys::is_symlink(&st))
            }
            Err(_) => false,
        };
        if is_link && (follow || !last) {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            let target = sys::readlinkat(dir, &name)?;
            let target = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec();
            if target.first() == Some(&b'/') {
                // As RESOLVE_BENEATH: an absolute link leaves the root by definition.
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
            for component in components(&target).collect::<Vec<_>>().into_iter().rev() {
                queue.push_front(component);
            }
            continue;
        }
        let fd = opened?;
        if last {
            return Ok(fd);
        }
        if !sys::is_dir(&sys::fstat(fd.as_fd())?) {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        stack.push(fd);
    }
    // The path ended on a directory already held (empty, `.`, or a trailing `..`).
    let dir = stack.last().map_or(root, |fd| fd.as_fd());
    sys::openat(dir, b".", flags, 0)
}
