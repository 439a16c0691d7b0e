//! Recursive inotify watches of directories inside the workspace, delivering ordered
//! create/modify/remove/rename events (paths relative to the root) to a caller's sink.
//!
//! Each watch runs on its own thread, blocked in `poll` on its inotify fd and an eventfd that
//! cancel writes to: watches are few (the registry bounds them, 32 by default), so a parked
//! thread each is cheap, and the watch works whatever runtime (or none) the caller has. The
//! sink may forward into a tokio channel; `UnboundedSender::send` never blocks.
//!
//! Directories are watched through their fds (`/proc/self/fd/N`), opened by the contained
//! resolver, so a watch never lands outside the root; a symlink inside the tree is not entered.

mod inotify;
mod registry;
mod tree;

#[cfg(test)]
mod tests;

use std::time::Duration;

use serde::Serialize;

use crate::agent::files::FileError;

pub use registry::{WatchRegistry, DEFAULT_MAX_WATCHES};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Create,
    Modify,
    Remove,
    /// One event with `from` and `path`, when both halves of a rename were seen.
    Rename,
    /// The kernel dropped events (its queue overflowed): rescan. Always delivered.
    Overflow,
}

/// Which kinds a watch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindFilter {
    bits: u8,
}

impl KindFilter {
    pub fn all() -> Self {
        Self { bits: 0b1111 }
    }

    pub fn only(kinds: &[EventKind]) -> Self {
        Self {
            bits: kinds.iter().fold(0, |bits, k| bits | Self::bit(*k)),
        }
    }

    fn bit(kind: EventKind) -> u8 {
        match kind {
            EventKind::Create => 1,
            EventKind::Modify => 2,
            EventKind::Remove => 4,
            EventKind::Rename => 8,
            EventKind::Overflow => 0,
        }
    }

    pub fn allows(self, kind: EventKind) -> bool {
        kind == EventKind::Overflow || self.bits & Self::bit(kind) != 0
    }
}

impl Default for KindFilter {
    fn default() -> Self {
        Self::all()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WatchEvent {
    pub kind: EventKind,
    /// Relative to the workspace root; for a rename, the new path.
    pub path: String,
    /// For a rename, the old path.
    pub from: Option<String>,
    pub is_dir: bool,
}

/// Why a watch ended. Its slot in the registry is already free when the sink hears this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchEnd {
    Cancelled,
    TimedOut,
    /// The watched directory was removed or moved away.
    RootRemoved,
    Failed(FileError),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum WatchMessage {
    Event(WatchEvent),
    /// The last message of every watch.
    Ended(WatchEnd),
}

/// Where a watch delivers its messages, in order, from the watch's thread.
pub type Sink = Box<dyn FnMut(WatchMessage) + Send>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    /// The caller's name for the watch (an `fw-` id); unique among open watches.
    pub id: String,
    /// The directory to watch, relative to the workspace root.
    pub path: String,
    pub kinds: KindFilter,
    /// The watch ends by itself after this long.
    pub timeout: Option<Duration>,
    /// The most directories one watch covers (each costs an inotify watch of the user's quota).
    pub max_dirs: usize,
}

impl WatchRequest {
    pub fn new(id: impl Into<String>, path: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            path: path.into(),
            kinds: KindFilter::all(),
            timeout: None,
            max_dirs: 4096,
        }
    }
}
