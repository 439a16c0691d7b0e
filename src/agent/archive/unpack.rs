//! Unpacking a staged upload into the workspace, all or nothing: a tar is read once to admit
//! every entry (`policy::TarPlan`: names, types, link targets, sizes) before anything is
//! written, then extracted into a fresh directory beside the destination, each entry created by
//! name in a directory fd reached with `O_NOFOLLOW`, and renamed into place. A single file is
//! copied beside its destination and renamed likewise. Whatever fails, the temporary is removed.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::sys::{linkat, symlinkat};
use crate::agent::files::sys::{rename_into, Swap};
use crate::agent::files::{remove_tree, sys, FileError, Workspace};
use crate::policy::{PolicyError, TarEntry, TarKind, TarLimits, TarPlan};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnpackFormat {
    /// The staged bytes are a tar of a directory's tree.
    Tar,
    /// The staged bytes are one file's content.
    File,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnpackOutcome {
    /// The destination, relative to the root.
    pub path: String,
    /// `dir` or `file`.
    pub kind: &'static str,
    /// Entries created (a file upload: 1).
    pub entries: u64,
    /// File bytes written.
    pub bytes: u64,
    /// Something had the destination's name and was replaced (only with `overwrite`).
    pub replaced: bool,
}

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

fn temp_name() -> String {
    format!(
        ".mwc-extract-{}-{}.tmp",
        std::process::id(),
        TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn refused(e: PolicyError) -> FileError {
    let kind = if matches!(e.rule, "tar.bytes" | "tar.entries") {
        crate::agent::files::FileErrorKind::Limit
    } else {
        crate::agent::files::FileErrorKind::InvalidArgument
    };
    FileError::new(
        kind,
        format!(
            "the archive was refused, nothing was written: {}",
            e.message
        ),
    )
}

fn bad_tar(e: &io::Error) -> FileError {
    FileError::invalid(format!("the upload is not a readable tar archive: {e}"))
}

/// What a header is, as the policy sees it; `None` for headers that carry no entry.
fn kind_of(entry: &tar::EntryType) -> Option<TarKind> {
    use tar::EntryType as T;
    Some(match entry {
        T::Regular | T::Continuous => TarKind::File,
        T::Directory => TarKind::Dir,
        T::Symlink => TarKind::Symlink,
        T::Link => TarKind::Hardlink,
        T::XGlobalHeader => return None,
        _ => TarKind::Other,
    })
}

/// Every entry of the staged tar, admitted, in order (nothing is written).
fn plan(staged: &mut File, limits: TarLimits) -> Result<Vec<TarEntry>, FileError> {
    staged.seek(SeekFrom::Start(0)).map_err(|e| bad_tar(&e))?;
    let mut archive = tar::Archive::new(staged);
    let mut plan = TarPlan::new(limits);
    // Headers only: the data between them is seeked over, not read.
    for entry in archive.entries_with_seek().map_err(|e| bad_tar(&e))? {
        let entry = entry.map_err(|e| bad_tar(&e))?;
        let Some(kind) = kind_of(&entry.header().entry_type()) else {
            continue;
        };
        let mode = entry.header().mode().unwrap_or(0o644);
        let link = entry.link_name_bytes();
        plan.admit(
            &entry.path_bytes(),
            kind,
            entry.size(),
            mode,
            link.as_deref(),
        )
        .map_err(refused)?;
    }
    plan.finish().map_err(refused)
}

/// The directory fd of `parts` under `top`, every level opened with `O_NOFOLLOW` (created,
/// when `create`, as it is missing).
fn walk_to(top: BorrowedFd<'_>, parts: &[&str], create: bool) -> io::Result<OwnedFd> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let mut fd = sys::openat(top, b".", flags, 0)?;
    for part in parts {
        let name = part.as_bytes();
        fd = match sys::openat(fd.as_fd(), name, flags, 0) {
            Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                sys::mkdirat(fd.as_fd(), name, 0o755)?;
                sys::openat(fd.as_fd(), name, flags, 0)?
            }
            other => other?,
        };
    }
    Ok(fd)
}

fn split(path: &str) -> (Vec<&str>, &str) {
    let mut parts: Vec<&str> = path.split('/').collect();
    let name = parts.pop().unwrap_or_default();
    (parts, name)
}

/// Creates one admitted entry under `top`, reading a file's bytes from `data`.
fn create(top: BorrowedFd<'_>, entry: &TarEntry, data: &mut dyn Read) -> io::Result<u64> {
    let (parents, leaf) = split(&entry.path);
    let dir = walk_to(top, &parents, true)?;
    let name = leaf.as_bytes();
    match entry.kind {
        TarKind::Dir => {
            let mode = (entry.mode | 0o700) as libc::mode_t;
            match sys::mkdirat(dir.as_fd(), name, mode) {
                // Only a directory an earlier entry implied may be there (the plan refused
                // every other clash); opening it without following makes sure.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    walk_to(dir.as_fd(), &[leaf], false).map(|_| 0)
                }
                other => other.map(|()| 0),
            }
        }
        TarKind::File => {
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
            let mut file = File::from(sys::openat(dir.as_fd(), name, flags, 0o600)?);
            let written = io::copy(&mut data.take(entry.size), &mut file)?;
            file.set_permissions(std::fs::Permissions::from_mode(entry.mode))?;
            Ok(written)
        }
        TarKind::Symlink => {
            let target = entry.link.as_deref().unwrap_or_default();
            symlinkat(target.as_bytes(), dir.as_fd(), name).map(|()| 0)
        }
        TarKind::Hardlink => {
            let (tparents, tname) = split(entry.link.as_deref().unwrap_or_default());
            let from = walk_to(top, &tparents, false)?;
            linkat(from.as_fd(), tname.as_bytes(), dir.as_fd(), name).map(|()| 0)
        }
        TarKind::Other => Err(io::Error::from_raw_os_error(libc::EPERM)),
    }
}

/// Extracts the admitted `entries` of the staged tar into the new directory `top`.
fn extract(staged: &mut File, top: BorrowedFd<'_>, entries: &[TarEntry]) -> Result<u64, FileError> {
    staged.seek(SeekFrom::Start(0)).map_err(|e| bad_tar(&e))?;
    let mut archive = tar::Archive::new(staged);
    let mut planned = entries.iter();
    let mut bytes = 0;
    for entry in archive.entries().map_err(|e| bad_tar(&e))? {
        let mut entry = entry.map_err(|e| bad_tar(&e))?;
        if kind_of(&entry.header().entry_type()).is_none() {
            continue;
        }
        let is_root = entry
            .path_bytes()
            .split(|b| *b == b'/')
            .all(|part| part.is_empty() || part == b".");
        if is_root {
            continue; // the plan skipped it too
        }
        let Some(admitted) = planned.next() else {
            return Err(FileError::invalid(
                "the archive changed while it was extracted",
            ));
        };
        bytes += create(top, admitted, &mut entry)
            .map_err(|e| FileError::from_io(&e, "extract", &admitted.path))?;
    }
    Ok(bytes)
}

/// Unpacks the staged upload at `dest` (under the root). An existing destination is replaced
/// only with `overwrite`; missing parent directories are created.
pub fn unpack(
    ws: &Workspace,
    staged: &mut File,
    dest: &str,
    format: UnpackFormat,
    overwrite: bool,
    limits: TarLimits,
) -> Result<UnpackOutcome, FileError> {
    let rel = ws.rel(dest)?;
    if rel.normal().is_empty() {
        return Err(FileError::invalid(
            "name a path under the workspace root to upload to, not the root itself",
        ));
    }
    let (parent, name) = rel.split_parent()?;
    // Admitted before anything is created, the parents included.
    let (entries, size) = match format {
        UnpackFormat::Tar => (plan(staged, limits)?, 0),
        UnpackFormat::File => {
            let size = staged.metadata().map_err(|e| bad_tar(&e))?.len();
            if size > limits.max_bytes {
                return Err(FileError::limit(format!(
                    "the upload is over {} bytes",
                    limits.max_bytes
                )));
            }
            (Vec::new(), size)
        }
    };
    let dir = ws.ensure_dir(&parent)?;
    let dir = dir.as_fd();
    let temp = temp_name();
    let written = match format {
        UnpackFormat::Tar => {
            sys::mkdirat(dir, temp.as_bytes(), 0o700)
                .map_err(|e| FileError::from_io(&e, "extract into", &rel.display))?;
            let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            sys::openat(dir, temp.as_bytes(), flags, 0)
                .map_err(|e| FileError::from_io(&e, "extract into", &rel.display))
                .and_then(|top| extract(staged, top.as_fd(), &entries))
        }
        UnpackFormat::File => copy_file(staged, dir, &temp, size)
            .map_err(|e| FileError::from_io(&e, "write", &rel.display)),
    };
    let outcome = written.and_then(|bytes| {
        let replaced = place(dir, &temp, &name, overwrite, &rel.display)?;
        Ok(UnpackOutcome {
            path: rel.normal(),
            kind: if format == UnpackFormat::Tar {
                "dir"
            } else {
                "file"
            },
            entries: if format == UnpackFormat::Tar {
                entries.len() as u64
            } else {
                1
            },
            bytes: if format == UnpackFormat::Tar {
                bytes
            } else {
                size
            },
            replaced,
        })
    });
    // The temporary holds the new tree on failure, the replaced one after an exchange, and
    // nothing after a plain rename.
    let mut removed = 0;
    match remove_tree(dir, temp.as_bytes(), 0, &mut removed) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
            tracing::warn!(error = %e, "cannot remove an extraction's temporary");
        }
        _ => {}
    }
    outcome
}

fn copy_file(staged: &mut File, dir: BorrowedFd<'_>, temp: &str, size: u64) -> io::Result<u64> {
    staged.seek(SeekFrom::Start(0))?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    let mut file = File::from(sys::openat(dir, temp.as_bytes(), flags, 0o644)?);
    let copied = io::copy(&mut staged.take(size), &mut file)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.flush()?;
    file.sync_all()?;
    Ok(copied)
}

/// Gives the temporary the destination's name; true when something was replaced.
fn place(
    dir: BorrowedFd<'_>,
    temp: &str,
    name: &str,
    overwrite: bool,
    display: &str,
) -> Result<bool, FileError> {
    let exists = match sys::fstatat(dir, name.as_bytes(), libc::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => true,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => false,
        Err(e) => return Err(FileError::from_io(&e, "upload to", display)),
    };
    if exists && !overwrite {
        return Err(FileError::conflict(format!(
            "'{display}' exists; pass overwrite=true to replace it"
        )));
    }
    let how = if exists {
        Swap::Exchange
    } else {
        Swap::NoReplace
    };
    rename_into(dir, temp.as_bytes(), name.as_bytes(), how).map_err(|e| {
        match e.raw_os_error() {
            Some(libc::EEXIST) => FileError::conflict(format!(
                "'{display}' appeared meanwhile; pass overwrite=true to replace it"
            )),
            _ => FileError::from_io(&e, "upload to", display),
        }
    })?;
    if let Ok(dirfd) = sys::reopen_dir(dir) {
        let _ = File::from(dirfd).sync_all();
    }
    Ok(exists)
}
