//! The budgets shared by every exec log of a daemon: bytes on disk across logs, and the eviction
//! order when they exceed it (finished execs' oldest segments first, then running ones'); and
//! bytes held in memory by the logs' in-memory tails, trimmed largest first when they exceed
//! theirs.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::{ExecLog, DEFAULT_MAX_TOTAL_RING_BYTES, FINISHED_RING_BYTES};

pub struct LogBudget {
    max_bytes: u64,
    used: AtomicU64,
    /// Bytes the in-memory tails of all logs may hold together.
    max_ring_bytes: usize,
    ring_used: AtomicUsize,
    logs: Mutex<Vec<Weak<ExecLog>>>,
}

impl std::fmt::Debug for LogBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBudget")
            .field("max_bytes", &self.max_bytes)
            .field("used", &self.used())
            .finish()
    }
}

impl LogBudget {
    /// A budget of `max_bytes` on disk, and the default for the in-memory tails.
    pub fn new(max_bytes: u64) -> Arc<Self> {
        Self::with_memory(max_bytes, DEFAULT_MAX_TOTAL_RING_BYTES)
    }

    /// A budget of `max_bytes` on disk and `max_ring_bytes` for the in-memory tails together.
    pub fn with_memory(max_bytes: u64, max_ring_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            max_bytes,
            used: AtomicU64::new(0),
            max_ring_bytes,
            ring_used: AtomicUsize::new(0),
            logs: Mutex::new(Vec::new()),
        })
    }

    /// Bytes the in-memory tails of every live log hold.
    pub fn ring_used(&self) -> usize {
        self.ring_used.load(Ordering::Acquire)
    }

    pub(super) fn charge_ring(&self, delta: isize) {
        if delta >= 0 {
            self.ring_used
                .fetch_add(delta.unsigned_abs(), Ordering::AcqRel);
        } else {
            let freed = delta.unsigned_abs();
            let _ = self
                .ring_used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    Some(u.saturating_sub(freed))
                });
        }
    }

    /// Trims in-memory tails until they fit their budget: the largest first, each by half
    /// (never below [`FINISHED_RING_BYTES`], the size a finished log keeps), so that one log
    /// flooding alone keeps a large tail and many share the budget. Readers of what is trimmed
    /// read it from disk.
    pub(super) fn enforce_rings(&self) {
        while self.ring_used() > self.max_ring_bytes {
            let largest = {
                let logs = self.logs.lock();
                logs.iter()
                    .filter_map(Weak::upgrade)
                    .map(|log| (log.ring_bytes(), log))
                    .filter(|(held, _)| *held > FINISHED_RING_BYTES)
                    .max_by_key(|(held, _)| *held)
            };
            let Some((held, log)) = largest else {
                return;
            };
            log.trim_ring((held / 2).max(FINISHED_RING_BYTES));
        }
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes on disk of every live log.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    pub(super) fn register(&self, log: &Arc<ExecLog>) {
        let mut logs = self.logs.lock();
        logs.retain(|w| w.strong_count() > 0);
        logs.push(Arc::downgrade(log));
    }

    pub(super) fn charge(&self, delta: i64) {
        if delta >= 0 {
            self.used.fetch_add(delta.unsigned_abs(), Ordering::AcqRel);
        } else {
            let freed = delta.unsigned_abs();
            let _ = self
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    Some(u.saturating_sub(freed))
                });
        }
    }

    /// Evicts segments until the logs fit the budget or nothing more may go. Takes no lock
    /// while holding another: the victim's own lock is taken after the choice is made.
    pub(super) fn enforce(&self) {
        while self.used() > self.max_bytes {
            let Some(victim) = self.pick() else {
                return;
            };
            if !victim.evict_for_budget() {
                return;
            }
        }
    }

    /// The log whose oldest evictable segment should go first: finished logs before running
    /// ones, then the oldest segment. A running log always keeps its last segment.
    fn pick(&self) -> Option<Arc<ExecLog>> {
        let logs = self.logs.lock();
        let mut best: Option<((bool, u64), Arc<ExecLog>)> = None;
        for log in logs.iter().filter_map(Weak::upgrade) {
            let Some(key) = log.eviction_key() else {
                continue;
            };
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, log));
            }
        }
        best.map(|(_, log)| log)
    }
}
