//! The registry of open watches: bounded in number, each ended by cancel, by its timeout or by
//! its root's removal, and its slot freed in every case, even if the watch thread panics.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::inotify;
use super::tree::Tree;
use super::{Sink, WatchEnd, WatchEvent, WatchMessage, WatchRequest};
use crate::agent::files::{FileError, FileErrorKind, Workspace};

/// How many watches may be open at once by default.
pub const DEFAULT_MAX_WATCHES: usize = 32;

/// How long the first half of a rename waits for its second before it counts as a remove.
const RENAME_PAIRING: std::time::Duration = std::time::Duration::from_millis(20);

type Slots = Arc<Mutex<HashMap<String, Arc<OwnedFd>>>>;

pub struct WatchRegistry {
    ws: Arc<Workspace>,
    max: usize,
    slots: Slots,
}

/// Frees the slot when the watch ends, however it ends.
struct SlotGuard {
    slots: Slots,
    id: String,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.slots.lock().remove(&self.id);
    }
}

impl WatchRegistry {
    pub fn new(ws: Arc<Workspace>, max_watches: usize) -> Self {
        Self {
            ws,
            max: max_watches,
            slots: Arc::default(),
        }
    }

    /// How many watches are open.
    pub fn active(&self) -> usize {
        self.slots.lock().len()
    }

    /// Starts a watch; errors (bad path, limits) are returned here, before any thread starts.
    /// Messages then reach `sink` in order, ending with exactly one [`WatchMessage::Ended`].
    pub fn start(&self, req: WatchRequest, sink: Sink) -> Result<(), FileError> {
        let rel = self.ws.rel(&req.path)?;
        let cancel = Arc::new(
            inotify::eventfd().map_err(|e| FileError::from_io(&e, "watch", &rel.display))?,
        );
        {
            let mut slots = self.slots.lock();
            if slots.len() >= self.max {
                return Err(FileError::limit(format!(
                    "{} watches are open, the most allowed; cancel one before starting another",
                    self.max
                )));
            }
            if slots.contains_key(&req.id) {
                return Err(FileError::conflict(format!(
                    "a watch named '{}' is already open",
                    req.id
                )));
            }
            slots.insert(req.id.clone(), Arc::clone(&cancel));
        }
        let guard = SlotGuard {
            slots: Arc::clone(&self.slots),
            id: req.id.clone(),
        };
        let tree = Tree::new(Arc::clone(&self.ws), &rel.normal(), req.max_dirs.max(1))?;
        std::thread::Builder::new()
            .name(format!("watch {}", req.id))
            .spawn(move || run(tree, req, cancel, guard, sink))
            .map_err(|e| FileError::limit(format!("cannot start a watch thread: {e}")))?;
        Ok(())
    }

    /// Asks the watch `id` to end; false when no such watch is open.
    pub fn cancel(&self, id: &str) -> bool {
        match self.slots.lock().get(id) {
            Some(fd) => {
                inotify::signal(fd.as_fd());
                true
            }
            None => false,
        }
    }
}

impl Drop for WatchRegistry {
    fn drop(&mut self) {
        for fd in self.slots.lock().values() {
            inotify::signal(fd.as_fd());
        }
    }
}

fn run(mut tree: Tree, req: WatchRequest, cancel: Arc<OwnedFd>, guard: SlotGuard, mut sink: Sink) {
    let deadline = req.timeout.map(|t| Instant::now() + t);
    let kinds = req.kinds;
    let end = {
        let mut emit = |event: WatchEvent| {
            if kinds.allows(event.kind) {
                sink(WatchMessage::Event(event));
            }
        };
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                tree.flush(&mut emit);
                break WatchEnd::TimedOut;
            }
            let mut wait = deadline.map(|d| d - now);
            if tree.has_pending() {
                wait = Some(wait.map_or(RENAME_PAIRING, |w| w.min(RENAME_PAIRING)));
            }
            let (ready, cancelled) = inotify::wait(tree.ino.as_fd(), cancel.as_fd(), wait);
            if cancelled {
                tree.flush(&mut emit);
                break WatchEnd::Cancelled;
            }
            if !ready {
                tree.flush(&mut emit); // The rename's partner did not come in time.
                continue;
            }
            match inotify::read_events(tree.ino.as_fd()) {
                Ok(events) => {
                    if let Some(end) = events
                        .into_iter()
                        .find_map(|raw| tree.handle(raw, &mut emit))
                    {
                        break end;
                    }
                }
                Err(e) => {
                    break WatchEnd::Failed(FileError::new(
                        FileErrorKind::Io,
                        format!("reading inotify events: {e}"),
                    ))
                }
            }
        }
    };
    // Free the slot before the sink hears the end, so a caller that reacts to it can reuse it.
    drop(guard);
    sink(WatchMessage::Ended(end));
}
