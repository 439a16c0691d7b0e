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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    use super::*;
    use crate::ring::tests::out;

    /// A callback for `on_ready` that reports on a channel.
    fn report(tx: &std::sync::mpsc::Sender<u64>, value: u64) -> ReadyCallback {
        let tx = tx.clone();
        Box::new(move || {
            let _ = tx.send(value);
        })
    }

    #[test]
    fn collecting_says_whether_it_moved_a_callback() {
        // Its answer decides whether the appender takes the ring's lock again to run callbacks.
        let mut waiters = Waiters::default();
        waiters.add(5, Box::new(|| {}));
        assert!(!waiters.collect_ready(|cursor| cursor < 5), "none is ready");
        assert_eq!(waiters.ready.len(), 0);
        assert!(waiters.collect_ready(|cursor| cursor < 6));
        assert_eq!((waiters.waiting.len(), waiters.ready.len()), (0, 1));
    }

    #[test]
    fn ready_callbacks_run_once_an_event_passes_their_cursor() {
        let ring = Arc::new(EventRing::new(1 << 16, None).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(ring.on_ready(0, report(&tx, 1)).is_some());
        assert!(ring.on_ready(1, report(&tx, 2)).is_some());
        out(&ring, b"first");
        assert_eq!(
            rx.try_recv(),
            Ok(1),
            "ran on the appending thread, before append returned"
        );
        assert!(rx.try_recv().is_err(), "cursor 1 is not passed by seq 1");
        let appender = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || out(&ring, b"second"))
        };
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(2));
        appender.join().unwrap();
        out(&ring, b"third");
        assert!(rx.try_recv().is_err(), "a callback runs once");
    }

    #[test]
    fn ready_callbacks_are_not_kept_when_the_ring_is_already_ready() {
        let ring = EventRing::new(1 << 16, None).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        out(&ring, b"x");
        assert!(ring.on_ready(0, report(&tx, 1)).is_none());
        ring.close();
        assert!(ring.on_ready(1, report(&tx, 2)).is_none());
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn closing_runs_ready_callbacks() {
        let ring = EventRing::new(1 << 16, None).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        ring.on_ready(0, report(&tx, 7));
        ring.close();
        assert_eq!(rx.try_recv(), Ok(7));
    }

    #[test]
    fn a_forgotten_callback_never_runs() {
        let ring = EventRing::new(1 << 16, None).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let id = ring.on_ready(0, report(&tx, 1)).unwrap();
        let kept = ring.on_ready(0, report(&tx, 2)).unwrap();
        assert!(ring.forget_waiter(id));
        assert!(!ring.forget_waiter(id));
        out(&ring, b"x");
        assert_eq!(rx.try_recv(), Ok(2));
        assert!(rx.try_recv().is_err());
        assert!(!ring.forget_waiter(kept), "it already ran");
    }

    #[test]
    fn a_ready_callback_runs_with_the_ring_unlocked() {
        // It may append to the very ring that woke it: with a lock still held this would deadlock.
        let ring = Arc::new(EventRing::new(1 << 16, None).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let inner = Arc::clone(&ring);
        ring.on_ready(
            0,
            Box::new(move || {
                let seq = out(&inner, b"from the callback");
                let _ = tx.send(seq);
            }),
        );
        assert_eq!(out(&ring, b"x"), 1);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(2));
        assert_eq!(ring.last_seq(), 2);
    }

    #[test]
    fn every_callback_registered_by_many_threads_runs_exactly_once() {
        let ring = Arc::new(EventRing::new(1 << 20, None).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let registrars: Vec<_> = (0..4u64)
            .map(|t| {
                let (ring, tx) = (Arc::clone(&ring), tx.clone());
                thread::spawn(move || {
                    for i in 0..500 {
                        let value = t * 1000 + i;
                        let cursor = ring.last_seq();
                        if ring.on_ready(cursor, report(&tx, value)).is_none() {
                            let _ = tx.send(value); // already ready: the caller goes on itself
                        }
                    }
                })
            })
            .collect();
        let appender = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                for _ in 0..3000 {
                    out(&ring, b"x");
                }
            })
        };
        for registrar in registrars {
            registrar.join().unwrap();
        }
        appender.join().unwrap();
        ring.close();
        drop(tx);
        let mut seen: Vec<u64> = rx.iter().collect();
        seen.sort_unstable();
        let expected: Vec<u64> = (0..4u64)
            .flat_map(|t| (0..500).map(move |i| t * 1000 + i))
            .collect();
        assert_eq!(seen, expected);
    }
}
