//! What the host does to a workspace's tree: copy it (a snapshot, a restore, a fork), measure
//! it and remove it. A command of the workspace may reshape the tree while the host works on it
//! (a directory swapped for a symlink to a host directory between a listing and an open, a file
//! turned into a FIFO, a file that keeps growing), so nothing here ever resolves a path string
//! below the root it was given: every directory is an fd opened from its parent's fd by one name
//! with `O_NOFOLLOW`, every decision is taken from `fstat` of the fd that is then used, symlinks
//! are copied as symlinks and never followed, special files are left out, a file is read only up
//! to the size it had when opened, and no walk crosses into another file system.
//!
//! Messages name entries by the caller's display root (`/workspace/src/x`), never a host path.

mod copy;
mod remove;
pub(crate) mod sys;
#[cfg(test)]
mod tests;
mod usage;

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use copy::{copy_tree, CopyOptions, CopyStats, Owner};
pub use remove::{empty_dir, remove_tree};
pub use usage::{tree_usage, Usage};

/// The deepest a walk descends (each level holds one directory fd open).
pub const MAX_DEPTH: usize = 256;

/// Why a tree operation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeErrorKind {
    /// A bound of the caller's (bytes, entries, depth) would be passed.
    Limit,
    /// The file system holding the copy is full, or under the caller's free-space floor.
    NoSpace,
    /// The caller asked it to stop.
    Cancelled,
    /// Any other failure of a system call; the message says which entry and why.
    Io,
}

impl TreeErrorKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Limit => "limit",
            Self::NoSpace => "no_space",
            Self::Cancelled => "cancelled",
            Self::Io => "io",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeError {
    pub kind: TreeErrorKind,
    /// Names entries by their display path only.
    pub message: String,
}

impl TreeError {
    pub fn new(kind: TreeErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A failed system call on `display` while `doing` something. ENOSPC and EDQUOT are the
    /// full disk's own kind.
    pub fn io(err: &io::Error, doing: &str, display: &str) -> Self {
        let kind = match err.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => TreeErrorKind::NoSpace,
            _ => TreeErrorKind::Io,
        };
        // io::Error's Display is the OS's text and code: it names no path.
        Self::new(kind, format!("{doing} {display}: {err}"))
    }
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TreeError {}

/// How far a running operation is, and a way to stop it, shared with another thread.
#[derive(Debug, Default)]
pub struct Progress {
    bytes: AtomicU64,
    entries: AtomicU64,
    cancelled: AtomicBool,
}

impl Progress {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Asks the operation to stop at its next entry or chunk (it then fails `Cancelled`).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    fn add_entry(&self) {
        self.entries.fetch_add(1, Ordering::Relaxed);
    }

    fn check(&self) -> Result<(), TreeError> {
        if self.cancelled.load(Ordering::Relaxed) {
            Err(TreeError::new(
                TreeErrorKind::Cancelled,
                "the copy was stopped",
            ))
        } else {
            Ok(())
        }
    }
}

/// `display` + `/` + `name`, lossily as text (messages only; the kernel gets the bytes).
fn child_display(display: &str, name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    if display.ends_with('/') {
        format!("{display}{name}")
    } else {
        format!("{display}/{name}")
    }
}
