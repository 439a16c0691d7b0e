//! Callbacks that run once a ring is ready past a cursor: how an event loop other than tokio's
//! (asyncio, through the bindings) waits on a ring with neither a thread nor a poll of its own.

use std::fmt;
use std::sync::atomic::Ordering;

use super::EventRing;

/// Runs once, on the thread whose append or close made the ring ready, after that call has
/// released the ring's locks (so it may block, take other locks, or append to this ring).
pub type ReadyCallback = Box<dyn FnOnce() + Send>;

/// Names a registered callback, to take it back with [`EventRing::forget_waiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WaiterId(u64);

/// The callbacks of one ring; lives in the ring's state, under its lock.
#[derive(Default)]
pub(super) struct Waiters {
    next_id: u64,
    /// Waiting callbacks with the cursor each waits past.
    waiting: Vec<(WaiterId, u64, ReadyCallback)>,
    /// Callbacks whose wait is over, handed to the appender to run once unlocked.
    ready: Vec<ReadyCallback>,
}

impl fmt::Debug for Waiters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiters")
            .field("waiting", &self.waiting.len())
            .field("ready", &self.ready.len())
            .finish()
    }
}

impl Waiters {
    fn add(&mut self, cursor: u64, callback: ReadyCallback) -> WaiterId {
        let id = WaiterId(self.next_id);
        self.next_id += 1;
        self.waiting.push((id, cursor, callback));
        id
    }

    fn remove(&mut self, id: WaiterId) -> bool {
        match self.waiting.iter().position(|(i, _, _)| *i == id) {
            Some(at) => {
                drop(self.waiting.swap_remove(at));
                true
            }
            None => false,
        }
    }

    /// Moves the callbacks whose cursor `is_ready` accepts to the ready list; true if it moved
    /// any. Costs one branch when nothing waits, which is every append without async readers.
    pub(super) fn collect_ready(&mut self, is_ready: impl Fn(u64) -> bool) -> bool {
        if self.waiting.is_empty() {
            return false;
        }
        let before = self.ready.len();
        let mut at = 0;
        while at < self.waiting.len() {
            if is_ready(self.waiting[at].1) {
                let (_, _, callback) = self.waiting.swap_remove(at);
                self.ready.push(callback);
            } else {
                at += 1;
            }
        }
        self.ready.len() > before
    }
}

impl EventRing {
    /// Runs `callback` once an event after `cursor` exists or the ring is closed. Returns `None`
    /// without keeping the callback when that is already so: the caller goes on at once. The
    /// callback runs on the appending (or closing) thread after the ring's locks are released.
    pub fn on_ready(&self, cursor: u64, callback: ReadyCallback) -> Option<WaiterId> {
        let mut state = self.state.lock();
        if state.ready(cursor) {
            return None;
        }
        Some(state.waiters.add(cursor, callback))
    }

    /// Takes back a callback registered with [`EventRing::on_ready`]: true if it had not been
    /// handed to an appender yet, and so will never run (false once it ran or is about to).
    pub fn forget_waiter(&self, id: WaiterId) -> bool {
        self.state.lock().waiters.remove(id)
    }

    /// Runs the callbacks an append or close made ready. Called with no lock of the ring held.
    pub(super) fn run_ready_callbacks(&self) {
        // Set under the state lock by `publish`; an appender that misses a concurrent one here
        // leaves it to that appender, which calls this after its own publish.
        if !self.wakes_pending.load(Ordering::Acquire) {
            return;
        }
        let ready = {
            let mut state = self.state.lock();
            self.wakes_pending.store(false, Ordering::Release);
            std::mem::take(&mut state.waiters.ready)
        };
        for callback in ready {
            callback();
        }
    }
}
