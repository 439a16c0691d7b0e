//! The workspace agent's file operations, contained in the workspace root: stat, list, read,
//! write, edit, patch, remove, mkdir and search, every one of them done through fds opened
//! beneath it.
//!
//! # The guarantee
//!
//! The gateway has already decided, lexically, that the client may name a path
//! (docs/architecture.md §5.4). This module decides what that name *is*, canonically, at the
//! moment of use, and never reads or writes anything outside the root:
//!
//! - The root is opened once as an `O_PATH | O_DIRECTORY` fd. Every path is resolved relative
//!   to that fd with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: the kernel itself
//!   refuses `..` above the root, absolute paths, absolute symlinks, symlinks that climb out,
//!   and `/proc` magic links, in the same call that opens the file. When the kernel has no
//!   `openat2` (ENOSYS before Linux 5.6, or a seccomp filter that predates it), the same rules
//!   are enforced by a component-by-component walk with `openat(O_NOFOLLOW)` that reads each
//!   symlink and resolves it itself (see [`resolve`]).
//! - The fd that comes back is what is used: reads `pread` it, listings read it, writes create a
//!   temporary file with `openat` in the directory fd and `renameat` it over the final name,
//!   removals `unlinkat` a name in a directory fd. No string path is ever re-joined and
//!   re-resolved after the check, so a symlink swapped in after resolution changes nothing.
//! - A final component that is a symlink is handled by each operation on purpose: `stat` and
//!   `remove` act on the link itself; `read` follows it beneath the root; `write` and `edit`
//!   follow a link that stays inside and refuse one that points out.
//!
//! What this does not cover: a directory that was inside when it was opened and is then moved
//! out of the root by a command keeps being the directory the open fd names. Only a process that
//! can already write there can do that, so it gains nothing it did not have. Search walks the
//! tree with the `ignore` crate by path; each hit is re-opened beneath the root before it is
//! read or reported (see [`search`]).

mod changeset;
mod edit;
mod error;
mod list;
mod mkdir;
mod patch;
mod read;
mod remove;
mod resolve;
mod search;
mod stat;
pub(crate) mod sys;
mod write;

#[cfg(test)]
mod tests;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

pub use edit::{EditOutcome, EditRequest};
pub use error::{FileError, FileErrorKind};
pub use list::{ListOptions, Listing};
pub use mkdir::MkdirOutcome;
pub use patch::{PatchAction, PatchOutcome, PatchedFile, MAX_PATCH_READ_BYTES};
pub use read::{ReadChunk, ReadOptions};
pub(crate) use remove::remove_tree;
pub use remove::RemoveOutcome;
pub use resolve::{RelPath, Resolver, MAX_SYMLINKS};
pub use search::{GlobQuery, GrepQuery, SearchHit, SearchResult};
pub use stat::{EntryKind, Stat};
pub(crate) use write::{agent_write_temp, AgentWrite};
pub use write::{WriteOptions, WriteOutcome};

/// The workspace root, held open: the anchor every operation resolves beneath.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    root_fd: OwnedFd,
    resolver: Resolver,
}

impl Workspace {
    /// Opens the root and picks `openat2` when the kernel has it, the walk otherwise.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, FileError> {
        let root_fd = open_root(root.as_ref())?;
        let resolver = resolve::probe(root_fd.as_fd());
        Ok(Self {
            root: root.as_ref().to_path_buf(),
            root_fd,
            resolver,
        })
    }

    /// Opens the root with a chosen resolver (tests run every containment case under both).
    pub fn with_resolver(root: impl AsRef<Path>, resolver: Resolver) -> Result<Self, FileError> {
        Ok(Self {
            root: root.as_ref().to_path_buf(),
            root_fd: open_root(root.as_ref())?,
            resolver,
        })
    }

    /// The host path of the root. Never put it in a message to a client.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn resolver(&self) -> Resolver {
        self.resolver
    }
}

fn open_root(root: &Path) -> Result<OwnedFd, FileError> {
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(root.as_os_str());
    // The root itself is the one path opened by name: it is the trust anchor, chosen by the
    // operator, not by a client.
    sys::openat(cwd(), bytes, libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(|e| FileError::from_io(&e, "open the workspace root", "."))
}

fn cwd() -> BorrowedFd<'static> {
    // SAFETY: AT_FDCWD is a constant the kernel interprets as "the current directory"; it is
    // never closed, so borrowing it for 'static is sound.
    unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) }
}
