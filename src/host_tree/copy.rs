//! Copying a tree a workspace may be reshaping, into a directory of the caller's: the source is
//! walked by directory fds (one name at a time, `O_NOFOLLOW`, never across a mount), each entry
//! is judged by `fstat` of the fd that is then read, and the copy is written the same way beneath
//! the target's fd, so a restore into a workspace's own directory cannot be steered out of it.
//!
//! Kept: regular files (their bytes as they were when opened, holes kept, blocks shared where
//! the file system can), directories, symlinks (as symlinks), hard links within the tree, modes
//! (setuid and setgid dropped), times, and owners (as root) or the caller's one owner. Left out
//! and counted: FIFOs, sockets, devices, entries that vanished or changed kind mid-walk, other
//! file systems mounted inside. Extended attributes are not copied (file capabilities among
//! them).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use serde::Serialize;

use super::sys;
use super::{child_display, Progress, TreeError, TreeErrorKind, MAX_DEPTH};

/// Whose the copied entries are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The source's owners, where this process may set them (as root); else this process's.
    Keep,
    /// This uid and gid for every entry (a fork's own user).
    Set(u32, u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    /// The most file bytes the copy may write (the data of its files, holes not counted).
    pub max_bytes: u64,
    /// The most entries it may make.
    pub max_entries: u64,
    /// It stops when the target's file system has less free than this.
    pub min_free_bytes: u64,
    pub owner: Owner,
    /// How messages name the source's root (`/workspace`).
    pub display: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CopyStats {
    /// File bytes written (holes not counted).
    pub bytes: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hardlinks: u64,
    /// FIFOs, sockets and devices, and mounts inside the tree: left out.
    pub skipped: u64,
    /// Entries that vanished or changed kind between the listing and their open: left out.
    pub changed: u64,
}

/// How often (in bytes written) the free space of the target is checked again.
const FREE_CHECK_EVERY: u64 = 64 << 20;
/// The most bytes one `copy_file_range` or read asks for (progress and bounds in between).
const CHUNK: u64 = 8 << 20;
/// The most distinct hard-linked files remembered; past it, further links become copies.
const MAX_LINK_GROUPS: usize = 1 << 20;
/// The buffer of a copy that reads and writes.
const PLAIN_BUFFER: usize = 1 << 20;

/// Copies the contents of `source` into the existing directory `target` (whose own mode, owner
/// and times become the source root's). On failure what was copied stays: the caller copies
/// into a directory of its own and removes it.
pub fn copy_tree(
    source: &Path,
    target: &Path,
    options: &CopyOptions,
    progress: &Progress,
) -> Result<CopyStats, TreeError> {
    let root_display = options.display.as_str();
    let src = sys::open_root(source).map_err(|e| TreeError::io(&e, "cannot open", root_display))?;
    let dst = sys::open_root(target)
        .map_err(|e| TreeError::io(&e, "cannot open the copy of", root_display))?;
    let src_st =
        sys::fstat(src.as_fd()).map_err(|e| TreeError::io(&e, "cannot stat", root_display))?;
    let mut copy = Copy {
        options,
        progress,
        stats: CopyStats::default(),
        dev: src_st.st_dev,
        target_root: dst
            .try_clone()
            .map_err(|e| TreeError::io(&e, "cannot open", "the copy"))?,
        links: HashMap::new(),
        euid: sys::euid(),
        next_free_check: 0,
        plain: false,
        buffer: Vec::new(),
    };
    copy.check_free(dst.as_fd())?;
    copy.dir(src.as_fd(), dst.as_fd(), root_display, &mut Vec::new(), 0)?;
    copy.finish_meta(dst.as_fd(), &src_st, root_display)?;
    Ok(copy.stats)
}

struct Copy<'a> {
    options: &'a CopyOptions,
    progress: &'a Progress,
    stats: CopyStats,
    /// The source root's device: nothing on another is entered.
    dev: libc::dev_t,
    target_root: OwnedFd,
    /// (device, inode) of a source file with several links -> its copy, relative to the target.
    links: HashMap<(libc::dev_t, libc::ino_t), Vec<u8>>,
    euid: u32,
    next_free_check: u64,
    /// `copy_file_range` refused once (across file systems): read and write through `buffer`.
    plain: bool,
    buffer: Vec<u8>,
}

enum Opened {
    Dir(OwnedFd, libc::stat),
    File(OwnedFd, libc::stat),
    Symlink(libc::stat),
    Skip,
    Changed,
}

impl Copy<'_> {
    fn entry(&mut self, display: &str) -> Result<(), TreeError> {
        self.progress.check()?;
        self.progress.add_entry();
        let made = self.stats.files + self.stats.dirs + self.stats.symlinks + self.stats.hardlinks;
        if made >= self.options.max_entries {
            return Err(TreeError::new(
                TreeErrorKind::Limit,
                format!(
                    "{} holds more than {} entries (stopped at {display})",
                    self.options.display, self.options.max_entries
                ),
            ));
        }
        Ok(())
    }

    fn check_free(&mut self, fd: BorrowedFd<'_>) -> Result<(), TreeError> {
        if self.options.min_free_bytes == 0 {
            return Ok(());
        }
        let free = sys::free_bytes(fd).map_err(|e| TreeError::io(&e, "cannot stat", "the copy"))?;
        if free < self.options.min_free_bytes {
            return Err(TreeError::new(
                TreeErrorKind::NoSpace,
                format!(
                    "the host's free space fell under its floor of {} MiB while copying {}",
                    self.options.min_free_bytes >> 20,
                    self.options.display
                ),
            ));
        }
        self.next_free_check = self.stats.bytes + FREE_CHECK_EVERY;
        Ok(())
    }

    /// Opens `name` in `dir` as what it is now: the decision is taken on the opened fd.
    fn open(&self, dir: BorrowedFd<'_>, name: &[u8], display: &str) -> Result<Opened, TreeError> {
        let st = match sys::fstatat(dir, name, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Opened::Changed),
            Err(e) => return Err(TreeError::io(&e, "cannot stat", display)),
        };
        if sys::is_symlink(&st) {
            return Ok(Opened::Symlink(st));
        }
        let flags = if sys::is_dir(&st) {
            libc::O_RDONLY | libc::O_DIRECTORY
        } else if sys::is_regular(&st) {
            // O_NONBLOCK: a FIFO swapped in after the stat opens at once, then is refused.
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY
        } else {
            return Ok(Opened::Skip);
        };
        let fd = match sys::openat(dir, name, flags | libc::O_NOFOLLOW, 0) {
            Ok(fd) => fd,
            // Gone, or now a symlink (ELOOP), or no longer a directory.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT)
                        | Some(libc::ELOOP)
                        | Some(libc::ENOTDIR)
                        | Some(libc::ENXIO)
                ) =>
            {
                return Ok(Opened::Changed)
            }
            Err(e) => return Err(TreeError::io(&e, "cannot open", display)),
        };
        let st = sys::fstat(fd.as_fd()).map_err(|e| TreeError::io(&e, "cannot stat", display))?;
        if st.st_dev != self.dev {
            return Ok(Opened::Skip);
        }
        if sys::is_dir(&st) && flags & libc::O_DIRECTORY != 0 {
            Ok(Opened::Dir(fd, st))
        } else if sys::is_regular(&st) && flags & libc::O_DIRECTORY == 0 {
            Ok(Opened::File(fd, st))
        } else {
            Ok(Opened::Changed)
        }
    }

    fn dir(
        &mut self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        display: &str,
        rel: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), TreeError> {
        if depth >= MAX_DEPTH {
            return Err(TreeError::new(
                TreeErrorKind::Limit,
                format!("{display} is more than {MAX_DEPTH} directories deep"),
            ));
        }
        let mut names =
            sys::read_dir_names(src).map_err(|e| TreeError::io(&e, "cannot list", display))?;
        names.sort();
        for name in names {
            let name = std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str()).to_vec();
            let here = child_display(display, &name);
            self.entry(&here)?;
            let len = rel.len();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(&name);
            let done = self.one(src, dst, &name, &here, rel, depth);
            rel.truncate(len);
            done?;
        }
        Ok(())
    }

    fn one(
        &mut self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        name: &[u8],
        display: &str,
        rel: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), TreeError> {
        match self.open(src, name, display)? {
            Opened::Changed => self.stats.changed += 1,
            Opened::Skip => self.stats.skipped += 1,
            Opened::Symlink(st) => {
                let target = match sys::readlinkat(src, name) {
                    Ok(t) => t,
                    Err(e)
                        if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EINVAL)) =>
                    {
                        self.stats.changed += 1;
                        return Ok(());
                    }
                    Err(e) => return Err(TreeError::io(&e, "cannot read the link", display)),
                };
                let target = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
                sys::symlinkat(target, dst, name)
                    .map_err(|e| TreeError::io(&e, "cannot copy the link", display))?;
                if let Some((uid, gid)) = self.owner_of(&st) {
                    sys::lchownat(dst, name, uid, gid)
                        .map_err(|e| TreeError::io(&e, "cannot set the owner of", display))?;
                }
                // Times of a link are cosmetic; a file system without them is no failure.
                let _ = sys::lutimensat(dst, name, &st);
                self.stats.symlinks += 1;
            }
            Opened::Dir(fd, st) => {
                sys::mkdirat(dst, name, 0o700)
                    .map_err(|e| TreeError::io(&e, "cannot copy the directory", display))?;
                let sub = sys::openat(
                    dst,
                    name,
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                    0,
                )
                .map_err(|e| TreeError::io(&e, "cannot open the copy of", display))?;
                self.stats.dirs += 1;
                self.dir(fd.as_fd(), sub.as_fd(), display, rel, depth + 1)?;
                self.finish_meta(sub.as_fd(), &st, display)?;
            }
            Opened::File(fd, st) => {
                if st.st_nlink > 1 && self.link(&st, dst, name, display)? {
                    return Ok(());
                }
                let out = sys::openat(
                    dst,
                    name,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                    0o600,
                )
                .map_err(|e| TreeError::io(&e, "cannot copy", display))?;
                self.data(fd.as_fd(), out.as_fd(), &st, display)?;
                self.finish_meta(out.as_fd(), &st, display)?;
                self.stats.files += 1;
                if st.st_nlink > 1 && self.links.len() < MAX_LINK_GROUPS {
                    self.links.insert((st.st_dev, st.st_ino), rel.clone());
                }
            }
        }
        Ok(())
    }

    /// Links `name` to the copy of a file met before under another name; false when there is
    /// none (or it cannot be linked: then the file is copied again).
    fn link(
        &mut self,
        st: &libc::stat,
        dst: BorrowedFd<'_>,
        name: &[u8],
        display: &str,
    ) -> Result<bool, TreeError> {
        let Some(first) = self.links.get(&(st.st_dev, st.st_ino)) else {
            return Ok(false);
        };
        // The first copy is found again beneath the target's root with no symlink followed,
        // whatever happened to the target meanwhile.
        let resolve = sys::RESOLVE_BENEATH
            | sys::RESOLVE_NO_SYMLINKS
            | sys::RESOLVE_NO_MAGICLINKS
            | sys::RESOLVE_NO_XDEV;
        let Ok(fd) = sys::openat2(
            self.target_root.as_fd(),
            first,
            libc::O_PATH | libc::O_NOFOLLOW,
            0,
            resolve,
        ) else {
            return Ok(false);
        };
        match sys::fstat(fd.as_fd()) {
            Ok(found) if sys::is_regular(&found) => {}
            _ => return Ok(false),
        }
        match sys::link_fd(fd.as_fd(), dst, name) {
            Ok(()) => {
                self.stats.hardlinks += 1;
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                Err(TreeError::io(&e, "cannot copy", display))
            }
            Err(_) => Ok(false),
        }
    }

    fn owner_of(&self, st: &libc::stat) -> Option<(u32, u32)> {
        match self.options.owner {
            Owner::Set(uid, gid) => Some((uid, gid)),
            Owner::Keep if self.euid == 0 => Some((st.st_uid, st.st_gid)),
            Owner::Keep => None,
        }
    }

    /// Owner, then mode (chown clears set-id bits; they are dropped anyway), then times.
    fn finish_meta(
        &self,
        fd: BorrowedFd<'_>,
        st: &libc::stat,
        display: &str,
    ) -> Result<(), TreeError> {
        if let Some((uid, gid)) = self.owner_of(st) {
            sys::fchown(fd, uid, gid)
                .map_err(|e| TreeError::io(&e, "cannot set the owner of", display))?;
        }
        let keep = if sys::is_dir(st) { 0o1777 } else { 0o777 };
        sys::fchmod(fd, st.st_mode & keep)
            .map_err(|e| TreeError::io(&e, "cannot set the mode of", display))?;
        sys::futimens(fd, st).map_err(|e| TreeError::io(&e, "cannot set the times of", display))
    }

    /// The file's data as far as the size it had when opened (a file that keeps growing is
    /// copied to that size), region by region so that holes stay holes.
    fn data(
        &mut self,
        from: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        st: &libc::stat,
        display: &str,
    ) -> Result<(), TreeError> {
        let size = u64::try_from(st.st_size).unwrap_or(0);
        let mut at = 0u64;
        let mut ends_at = size;
        while at < size {
            let start = match sys::seek(from, at, libc::SEEK_DATA) {
                Ok(Some(start)) => start,
                Ok(None) => break,
                // No SEEK_DATA here: all of it is data.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => at,
                Err(e) => return Err(TreeError::io(&e, "cannot read", display)),
            };
            if start >= size {
                break;
            }
            let end = match sys::seek(from, start, libc::SEEK_HOLE) {
                Ok(Some(end)) => end.min(size),
                Ok(None) => size,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => size,
                Err(e) => return Err(TreeError::io(&e, "cannot read", display)),
            };
            let copied = self.region(from, to, start, end, display)?;
            at = start + copied;
            if at < end {
                ends_at = at; // the file shrank under us: where it ended is its end
                break;
            }
        }
        sys::ftruncate(to, ends_at).map_err(|e| TreeError::io(&e, "cannot copy", display))
    }

    /// Copies [start, end) at the same offsets; returns the bytes copied (fewer at an early
    /// end of file).
    fn region(
        &mut self,
        from: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        start: u64,
        end: u64,
        display: &str,
    ) -> Result<u64, TreeError> {
        let mut at = start;
        while at < end {
            self.progress.check()?;
            let want = (end - at).min(CHUNK);
            if self.stats.bytes + want > self.options.max_bytes {
                return Err(TreeError::new(
                    TreeErrorKind::Limit,
                    format!(
                        "{} holds more than {} MiB of files (stopped at {display})",
                        self.options.display,
                        self.options.max_bytes >> 20
                    ),
                ));
            }
            if self.stats.bytes >= self.next_free_check {
                self.check_free(to)?;
            }
            let n = if self.plain {
                read_write(from, to, at, want, &mut self.buffer)
            } else {
                match sys::copy_range(from, to, at, want as usize) {
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EXDEV)
                                | Some(libc::EINVAL)
                                | Some(libc::ENOSYS)
                                | Some(libc::EOPNOTSUPP)
                        ) =>
                    {
                        self.plain = true;
                        read_write(from, to, at, want, &mut self.buffer)
                    }
                    other => other.map(|n| n as u64),
                }
            }
            .map_err(|e| TreeError::io(&e, "cannot copy", display))?;
            if n == 0 {
                break;
            }
            at += n;
            self.stats.bytes += n;
            self.progress.add_bytes(n);
        }
        Ok(at - start)
    }
}

/// Reads and writes up to `len` bytes at `at` through `buf` (where `copy_file_range` cannot:
/// across file systems).
fn read_write(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    at: u64,
    len: u64,
    buf: &mut Vec<u8>,
) -> io::Result<u64> {
    if buf.is_empty() {
        buf.resize(PLAIN_BUFFER, 0);
    }
    let want = len.min(buf.len() as u64) as usize;
    let n = sys::pread(from, &mut buf[..want], at)?;
    let mut written = 0;
    while written < n {
        written += sys::pwrite(to, &buf[written..n], at + written as u64)?;
    }
    Ok(n as u64)
}
