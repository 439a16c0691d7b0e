//! Packing: a contained path as an archive in a staging file. A regular file is staged as its
//! bytes; a directory as a tar of its tree, walked through directory fds opened with
//! `O_NOFOLLOW` at every level, symlinks stored as symlinks (never followed), other special
//! files skipped. The path itself may be reached through symlinks that stay inside the root.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use serde::Serialize;

use crate::agent::files::sys;
use crate::agent::files::{FileError, Workspace};

/// The most entries a listing (a dry run's) carries; the counts cover the rest.
pub const MAX_LISTING: usize = 100_000;
/// The deepest a directory walk descends (each level holds one fd open).
const MAX_DEPTH: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackLimits {
    pub max_bytes: u64,
    pub max_entries: u64,
    /// How many entries the summary lists.
    pub list_max: usize,
}

/// One entry of what was packed, relative to the packed directory (a file: its own name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedEntry {
    pub path: String,
    pub kind: &'static str,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackSummary {
    /// `file` (the archive is the file's bytes) or `dir` (a tar).
    pub kind: &'static str,
    /// The files' bytes.
    pub bytes: u64,
    /// Files, directories and symlinks packed (the directory itself not counted).
    pub entries: u64,
    /// Special files (fifos, sockets, devices) left out.
    pub skipped: u64,
    pub listing: Vec<ListedEntry>,
    /// The listing stops short of `entries`.
    pub truncated: bool,
}

struct Walk<'a> {
    limits: PackLimits,
    display: &'a str,
    tar: Option<tar::Builder<BufWriter<&'a mut File>>>,
    summary: PackSummary,
}

fn io_err(e: &io::Error, display: &str) -> FileError {
    FileError::from_io(e, "archive", display)
}

impl Walk<'_> {
    fn note(&mut self, path: &str, kind: &'static str, size: u64) -> Result<(), FileError> {
        self.summary.entries += 1;
        self.summary.bytes += size;
        if self.summary.entries > self.limits.max_entries {
            return Err(FileError::limit(format!(
                "'{}' holds more than {} entries; archive a smaller path",
                self.display, self.limits.max_entries
            )));
        }
        if self.summary.bytes > self.limits.max_bytes {
            return Err(FileError::limit(format!(
                "'{}' holds more than {} bytes; archive a smaller path",
                self.display, self.limits.max_bytes
            )));
        }
        if self.summary.listing.len() < self.limits.list_max {
            self.summary.listing.push(ListedEntry {
                path: path.to_owned(),
                kind,
                size,
            });
        } else {
            self.summary.truncated = true;
        }
        Ok(())
    }

    fn header(kind: tar::EntryType, st: &libc::stat, size: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(st.st_mode & 0o777);
        header.set_mtime(u64::try_from(st.st_mtime).unwrap_or(0));
        header.set_size(size);
        header
    }

    fn dir(&mut self, dir: BorrowedFd<'_>, prefix: &str, depth: usize) -> Result<(), FileError> {
        if depth >= MAX_DEPTH {
            return Err(FileError::limit(format!(
                "'{}' is deeper than {MAX_DEPTH} levels",
                self.display
            )));
        }
        let mut names = sys::read_dir_names(dir).map_err(|e| io_err(&e, self.display))?;
        names.sort();
        for name in names {
            let bytes = name.as_bytes();
            let path = if prefix.is_empty() {
                name.to_string_lossy().into_owned()
            } else {
                format!("{prefix}/{}", name.to_string_lossy())
            };
            let st = match sys::fstatat(dir, bytes, libc::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue, // gone meanwhile
                Err(e) => return Err(io_err(&e, &path)),
            };
            if sys::is_dir(&st) {
                let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
                let child = sys::openat(dir, bytes, flags, 0).map_err(|e| io_err(&e, &path))?;
                self.note(&path, "dir", 0)?;
                if let Some(tar) = &mut self.tar {
                    let mut header = Self::header(tar::EntryType::Directory, &st, 0);
                    tar.append_data(&mut header, format!("{path}/"), io::empty())
                        .map_err(|e| io_err(&e, &path))?;
                }
                self.dir(child.as_fd(), &path, depth + 1)?;
            } else if sys::is_symlink(&st) {
                let target = sys::readlinkat(dir, bytes).map_err(|e| io_err(&e, &path))?;
                self.note(&path, "symlink", 0)?;
                if let Some(tar) = &mut self.tar {
                    let mut header = Self::header(tar::EntryType::Symlink, &st, 0);
                    tar.append_link(&mut header, &path, &target)
                        .map_err(|e| io_err(&e, &path))?;
                }
            } else if sys::is_regular(&st) {
                let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
                let fd = sys::openat(dir, bytes, flags, 0).map_err(|e| io_err(&e, &path))?;
                self.file(fd, &path)?;
            } else {
                self.summary.skipped += 1;
            }
        }
        Ok(())
    }

    fn file(&mut self, fd: OwnedFd, path: &str) -> Result<(), FileError> {
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_err(&e, path))?;
        if !sys::is_regular(&st) {
            self.summary.skipped += 1; // swapped for something else since it was listed
            return Ok(());
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        self.note(path, "file", size)?;
        if let Some(tar) = &mut self.tar {
            let mut header = Self::header(tar::EntryType::Regular, &st, size);
            // A file that shrinks while read is padded to the size its header promised, so
            // the archive stays well-formed; one that grows is cut there.
            let data = File::from(fd).take(size).chain(io::repeat(0)).take(size);
            tar.append_data(&mut header, path, data)
                .map_err(|e| io_err(&e, path))?;
        }
        Ok(())
    }
}

/// Packs `path` (under the root) into `out` (`None`: a dry run that only lists and counts).
pub fn pack(
    ws: &Workspace,
    path: &str,
    out: Option<&mut File>,
    limits: PackLimits,
) -> Result<PackSummary, FileError> {
    let rel = ws.rel(path)?;
    let display = rel.display.clone();
    let probe = ws.open_beneath(&rel, libc::O_PATH, true, "archive")?;
    let st = sys::fstat(probe.as_fd()).map_err(|e| io_err(&e, &display))?;
    let summary = PackSummary {
        kind: "dir",
        bytes: 0,
        entries: 0,
        skipped: 0,
        listing: Vec::new(),
        truncated: false,
    };
    if sys::is_regular(&st) {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK;
        let fd = ws.open_beneath(&rel, flags, true, "archive")?;
        let name = rel.normal();
        let name = name.rsplit('/').next().unwrap_or_default().to_owned();
        let mut walk = Walk {
            limits,
            display: &display,
            tar: None,
            summary: PackSummary {
                kind: "file",
                ..summary
            },
        };
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_err(&e, &display))?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        walk.note(&name, "file", size)?;
        if let Some(out) = out {
            let copied =
                io::copy(&mut File::from(fd).take(size), out).map_err(|e| io_err(&e, &display))?;
            walk.summary.bytes = copied;
            if let Some(entry) = walk.summary.listing.first_mut() {
                entry.size = copied;
            }
            out.flush().map_err(|e| io_err(&e, &display))?;
        }
        return Ok(walk.summary);
    }
    if !sys::is_dir(&st) {
        return Err(FileError::invalid(format!(
            "'{display}' is neither a file nor a directory"
        )));
    }
    let dir = ws.open_beneath(&rel, libc::O_RDONLY | libc::O_DIRECTORY, true, "archive")?;
    let mut walk = Walk {
        limits,
        display: &display,
        tar: out.map(|file| tar::Builder::new(BufWriter::new(file))),
        summary,
    };
    walk.dir(dir.as_fd(), "", 0)?;
    if let Some(tar) = walk.tar.take() {
        let mut buffered = tar.into_inner().map_err(|e| io_err(&e, &display))?;
        buffered.flush().map_err(|e| io_err(&e, &display))?;
    }
    Ok(walk.summary)
}
