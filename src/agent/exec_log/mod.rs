//! Durable exec logs: each exec's events in append-only segment files on the workspace's disk,
//! bounded per exec and across execs, with an in-memory ring as the cache of the tail.
//!
//! # Layout and format
//!
//! A log is a directory holding `index.json` (`{"first_seq","evicted_bytes","closed"}`, replaced
//! atomically) and segment files named by their first seq (`00000000000000000001.seg`). A
//! segment is a run of records `len:u32 BE | seq:u64 BE | event JSON` (`len` counts the JSON),
//! exactly the JSON the ring encoded. Every event the ring assigns is written, in seq order,
//! under the ring's writer lock and before readers can see it ([`EventRing::append_with`]), with
//! one `write` per append: the log survives the daemon being killed (not a power loss: there is
//! no fsync per event).
//!
//! # Bounds
//!
//! Per exec, segments roll at `segment_bytes` and the oldest are deleted while the log exceeds
//! `max_log_bytes` (the segment being written is never deleted, so a log may exceed its bound by
//! less than one segment). Across execs, a [`LogBudget`] deletes the oldest segments of finished
//! execs first, then those of running ones (always keeping a running exec's last segment).
//!
//! In memory, a running log's ring keeps up to `ring_bytes` (4 MiB by default), so that a
//! subscriber a credit window or two behind is served from memory rather than from disk; a
//! finished log's ring is trimmed to [`FINISHED_RING_BYTES`]. The [`LogBudget`] also bounds the
//! rings together (64 MiB by default): past it the largest are halved, down to that same floor.
//!
//! # Reads and drops
//!
//! A read is served by the ring while the ring still holds the cursor, otherwise from disk; both
//! return the same [`Page`] JSON (never coalesced from disk). Events deleted from disk are
//! reported with `cursor_expired`, `first_seq` and exact `dropped_events`. `dropped_bytes` (the
//! output bytes of the dropped events, `Event::data_len`) is exact from cursor 0, at every
//! segment boundary this process deleted (the last 4096), and at any cursor among the last
//! 65 536 events this process deleted; otherwise — a cursor inside a segment deleted before a restart, or very far behind —
//! it is a lower bound that omits the remainder of the deleted segment the cursor was in.
//!
//! # Recovery
//!
//! [`ExecLog::recover`] reopens a log written by an earlier process: it finds the last seq,
//! truncates a torn last record, deletes segments an interrupted eviction left, and continues
//! the numbering. A recovered log has no ring: its appends go straight to disk. Recovery reads
//! each kept segment once, to count its output bytes (a log written by a build that counted
//! encoded bytes keeps that count in `index.json` for what it had already deleted).

mod budget;
mod disk;
mod segment;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Map, Value};

use crate::event::{self, EventType, Fields, Payload, StreamKind, StreamStatus};
use crate::policy::PolicyError;
use crate::ring::{EventRing, Page, PageEvent, RingError};
pub use budget::LogBudget;
use disk::Disk;

/// The default bound of one exec's log on disk.
pub const DEFAULT_MAX_LOG_BYTES: u64 = 64 << 20;
/// The default bound of all exec logs together.
pub const DEFAULT_MAX_TOTAL_LOG_BYTES: u64 = 1 << 30;
/// The default size of the in-memory tail of each running log: a subscriber up to this far
/// behind (a credit window and the pages queued for its connection, a few MiB) is served
/// from memory instead of from disk.
pub const DEFAULT_RING_BYTES: usize = 4 << 20;
/// What the in-memory tail of a finished log keeps; the rest is read from disk.
pub const FINISHED_RING_BYTES: usize = 256 << 10;
/// The default bound of all in-memory tails together (see [`LogBudget`]).
pub const DEFAULT_MAX_TOTAL_RING_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// Bytes on disk one log may keep (see the module's notes on bounds).
    pub max_log_bytes: u64,
    /// Size at which a segment is closed and the next one started.
    pub segment_bytes: u64,
    /// Encoded bytes of events the in-memory ring keeps.
    pub ring_bytes: usize,
}

impl LogConfig {
    /// Segments of an eighth of the bound (64 KiB to 8 MiB): eviction frees space in steps
    /// small enough to keep most of the budget in use.
    pub fn with_max_bytes(max_log_bytes: u64) -> Self {
        Self {
            max_log_bytes,
            segment_bytes: (max_log_bytes / 8).clamp(64 << 10, 8 << 20),
            ring_bytes: DEFAULT_RING_BYTES,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self::with_max_bytes(DEFAULT_MAX_LOG_BYTES)
    }
}

#[derive(Debug)]
pub enum LogError {
    /// The request was wrong (a cursor past the end, an append after close, bad fields).
    Invalid(RingError),
    Io(io::Error),
}

impl LogError {
    fn cursor_ahead(cursor: u64, last_seq: u64) -> Self {
        Self::Invalid(RingError::CursorAhead { cursor, last_seq })
    }
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(e) => e.fmt(f),
            Self::Io(e) => write!(f, "exec log I/O error: {e}"),
        }
    }
}

impl std::error::Error for LogError {}

impl From<io::Error> for LogError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<RingError> for LogError {
    fn from(e: RingError) -> Self {
        Self::Invalid(e)
    }
}

impl From<PolicyError> for LogError {
    fn from(e: PolicyError) -> Self {
        Self::Invalid(RingError::Event(e))
    }
}

/// One exec's event log. Share it in an `Arc`.
pub struct ExecLog {
    ring: Option<Arc<EventRing>>,
    disk: Mutex<Disk>,
    /// The exec's status as of the last event on disk: the fold of every event appended (for a
    /// recovered log, of its last events). Changed and read under the disk lock, so a page read
    /// from disk and the status it shows agree.
    status: Mutex<StreamStatus>,
    budget: Arc<LogBudget>,
    /// Finished logs are evicted before running ones.
    finished: AtomicBool,
    /// Mirrors of the disk state for the budget's choice and for reads served by the ring,
    /// updated under the disk lock: a read of the ring never waits for a write to disk (or an
    /// eviction) in progress.
    first_seq: AtomicU64,
    oldest_epoch: AtomicU64,
    segments: AtomicUsize,
    charged: AtomicU64,
    /// The ring's bytes as last counted in the budget.
    ring_charged: AtomicUsize,
}

impl fmt::Debug for ExecLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecLog")
            .field("last_seq", &self.last_seq())
            .finish()
    }
}

impl ExecLog {
    /// A new, empty log in `dir` (created if missing).
    pub fn create(
        dir: &Path,
        config: &LogConfig,
        budget: &Arc<LogBudget>,
    ) -> Result<Arc<Self>, LogError> {
        let disk = Disk::create(dir, config.segment_bytes, config.max_log_bytes)?;
        let ring = EventRing::of_kind(Some(StreamKind::Exec), config.ring_bytes.max(1), None)?;
        Ok(Self::assemble(Some(Arc::new(ring)), disk, budget))
    }

    /// Reopens a log an earlier process wrote (see the module's notes on recovery).
    pub fn recover(
        dir: &Path,
        config: &LogConfig,
        budget: &Arc<LogBudget>,
    ) -> Result<Arc<Self>, LogError> {
        let mut disk = Disk::recover(dir, config.segment_bytes, config.max_log_bytes)?;
        let status = recovered_status(&mut disk);
        let log = Self::assemble(None, disk, budget);
        *log.status.lock() = status;
        if log.is_closed() {
            log.finished.store(true, Ordering::Release);
        }
        Ok(log)
    }

    fn assemble(ring: Option<Arc<EventRing>>, disk: Disk, budget: &Arc<LogBudget>) -> Arc<Self> {
        let log = Arc::new(Self {
            ring,
            disk: Mutex::new(disk),
            status: Mutex::new(StreamStatus::initial(Some(StreamKind::Exec))),
            budget: Arc::clone(budget),
            finished: AtomicBool::new(false),
            first_seq: AtomicU64::new(1),
            oldest_epoch: AtomicU64::new(u64::MAX),
            segments: AtomicUsize::new(0),
            charged: AtomicU64::new(0),
            ring_charged: AtomicUsize::new(0),
        });
        log.after_disk_change(&log.disk.lock());
        budget.register(&log);
        budget.enforce();
        log
    }

    /// Appends like [`EventRing::append`]: output is decoded per stream, a large write becomes
    /// several events. Returns the last seq assigned.
    pub fn append(
        &self,
        kind: EventType,
        data: Option<&[u8]>,
        fields: &Map<String, Value>,
    ) -> Result<u64, LogError> {
        let last = match &self.ring {
            Some(ring) => ring.append_with(kind, data, fields, &mut |events| {
                let mut disk = self.disk.lock();
                disk.append(events);
                self.fold(events);
                self.after_disk_change(&disk);
            })?,
            None => self.append_direct(kind, data, fields)?,
        };
        self.budget.enforce();
        self.after_ring_change();
        self.budget.enforce_rings();
        Ok(last)
    }

    /// Without a ring (a recovered log), only non-output events without data are accepted.
    fn append_direct(
        &self,
        kind: EventType,
        data: Option<&[u8]>,
        fields: &Map<String, Value>,
    ) -> Result<u64, LogError> {
        if kind.is_output() || data.is_some() {
            return Err(LogError::Invalid(RingError::Refused {
                rule: "log.recovered-append",
                message: "a recovered log accepts only events without data",
            }));
        }
        let fields = Fields::new(fields)?;
        let mut disk = self.disk.lock();
        if disk.is_closed() {
            return Err(LogError::Invalid(RingError::Closed));
        }
        let seq = disk.last_seq() + 1;
        let event = event::encode(seq, &event::timestamp::now(), kind, Payload::None, &fields);
        disk.append(std::slice::from_ref(&event));
        self.fold(std::slice::from_ref(&event));
        self.after_disk_change(&disk);
        if let Some(broken) = &disk.broken {
            return Err(LogError::Io(io::Error::other(broken.clone())));
        }
        Ok(seq)
    }

    /// Ends the log: flushes held-back output, marks it closed on disk, wakes every waiter.
    pub fn close(&self) -> Result<(), LogError> {
        let mut result = Ok(());
        let mut finish = |disk: &mut Disk| {
            result = disk.close();
            self.after_disk_change(disk);
        };
        match &self.ring {
            Some(ring) => ring.close_with(&mut |events| {
                let mut disk = self.disk.lock();
                disk.append(events);
                finish(&mut disk);
            }),
            None => finish(&mut self.disk.lock()),
        }
        self.finished.store(true, Ordering::Release);
        self.budget.enforce();
        // Nobody follows a finished log at the speed of its output any more.
        self.trim_ring(FINISHED_RING_BYTES);
        result.map_err(LogError::Io)
    }

    /// Folds appended events into the status; called with the disk lock held.
    fn fold(&self, events: &[event::Event]) {
        let mut status = self.status.lock();
        events.iter().for_each(|e| status.apply(e));
    }

    /// The exec's status as of its newest event.
    pub fn status(&self) -> StreamStatus {
        let _disk = self.disk.lock();
        *self.status.lock()
    }

    /// The events after `cursor` (see the module's notes on reads), with the exec's status as
    /// of the page's last event.
    pub fn read(&self, cursor: u64, max_events: usize, max_bytes: usize) -> Result<Page, LogError> {
        if let Some(ring) = &self.ring {
            match ring.read(cursor, max_events, max_bytes, false) {
                Ok(mut page) if !page.cursor_expired => {
                    // The oldest kept event is the log's, which may be older than the ring's.
                    page.first_seq = page.first_seq.min(self.first_seq());
                    return Ok(page);
                }
                Ok(page) if self.disk.lock().broken.is_some() => return Ok(page),
                Ok(_) => {}
                // The disk may hold a later event than the ring shows yet; it decides.
                Err(_) => {}
            }
        }
        let mut disk = self.disk.lock();
        let mut page = disk.read(cursor, max_events, max_bytes)?;
        let current = *self.status.lock();
        drop(disk);
        let shown = page.events.iter().flat_map(PageEvent::parts);
        page.status = StreamStatus::at_page(Some(StreamKind::Exec), shown, page.has_more, current);
        Ok(page)
    }

    pub fn last_seq(&self) -> u64 {
        match &self.ring {
            Some(ring) => ring.last_seq(),
            None => self.disk.lock().last_seq(),
        }
    }

    /// The oldest event still kept on disk.
    pub fn first_seq(&self) -> u64 {
        self.first_seq.load(Ordering::Acquire)
    }

    pub fn is_closed(&self) -> bool {
        match &self.ring {
            Some(ring) => ring.is_closed(),
            None => self.disk.lock().is_closed(),
        }
    }

    /// Bytes this log keeps on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.disk.lock().file_bytes()
    }

    /// True when an event after `cursor` exists or the log is closed.
    pub fn ready(&self, cursor: u64) -> bool {
        self.last_seq() > cursor || self.is_closed()
    }

    /// Waits (on a notification) until [`ExecLog::ready`] or `timeout`.
    pub async fn wait_async(&self, cursor: u64, timeout: Duration) -> bool {
        match &self.ring {
            Some(ring) => ring.wait_async(cursor, timeout).await,
            // A recovered log changes only while the daemon starts.
            None => self.ready(cursor),
        }
    }

    /// Bytes the in-memory tail holds.
    fn ring_bytes(&self) -> usize {
        self.ring.as_ref().map_or(0, |ring| ring.held_bytes())
    }

    /// Trims the in-memory tail to `max_bytes` (the budget's choice, or the log's end).
    fn trim_ring(&self, max_bytes: usize) {
        if let Some(ring) = &self.ring {
            ring.trim(max_bytes);
        }
        self.after_ring_change();
    }

    /// Counts the ring's change since the last count in the budget.
    fn after_ring_change(&self) {
        let now = self.ring_bytes();
        let was = self.ring_charged.swap(now, Ordering::AcqRel);
        self.budget.charge_ring(
            isize::try_from(now).unwrap_or(isize::MAX) - isize::try_from(was).unwrap_or(0),
        );
    }

    /// `(running, oldest segment's epoch)` when the budget may evict from this log.
    fn eviction_key(&self) -> Option<(bool, u64)> {
        let finished = self.finished.load(Ordering::Acquire);
        let segments = self.segments.load(Ordering::Acquire);
        let keep = if finished { 0 } else { 1 };
        (segments > keep).then(|| (!finished, self.oldest_epoch.load(Ordering::Acquire)))
    }

    /// Deletes this log's oldest segment for the shared budget; false when it may not.
    fn evict_for_budget(&self) -> bool {
        let mut disk = self.disk.lock();
        let keep = if self.finished.load(Ordering::Acquire) {
            0
        } else {
            1
        };
        if disk.segment_count() <= keep {
            return false;
        }
        let before = disk.file_bytes();
        let evicted = disk.evict_oldest().is_ok();
        self.after_disk_change(&disk);
        evicted && disk.file_bytes() < before
    }

    fn after_disk_change(&self, disk: &Disk) {
        self.first_seq.store(disk.first_seq(), Ordering::Release);
        self.oldest_epoch
            .store(disk.oldest_epoch().unwrap_or(u64::MAX), Ordering::Release);
        self.segments.store(disk.segment_count(), Ordering::Release);
        let now = disk.file_bytes();
        let was = self.charged.swap(now, Ordering::AcqRel);
        self.budget
            .charge(i64::try_from(now).unwrap_or(i64::MAX) - i64::try_from(was).unwrap_or(0));
    }
}

impl Drop for ExecLog {
    fn drop(&mut self) {
        // Its files stay, but no one can evict them any more: stop counting them.
        let charged = self.charged.load(Ordering::Acquire);
        self.budget.charge(-i64::try_from(charged).unwrap_or(0));
        let ring = self.ring_charged.load(Ordering::Acquire);
        self.budget.charge_ring(-isize::try_from(ring).unwrap_or(0));
    }
}

/// How many of a recovered log's last events its status is folded from: an exec's state is
/// decided by its last two (`exit`, then the closing `status`), or by its last alone (`lost`).
const RECOVERED_TAIL: u64 = 4;

/// The status a recovered log's last events give: the kind's live state once an event exists
/// (an earlier agent ran the exec), then what its last `exit` and `status` say.
fn recovered_status(disk: &mut Disk) -> StreamStatus {
    let last = disk.last_seq();
    let cursor = last.saturating_sub(RECOVERED_TAIL);
    let mut status = StreamStatus::assumed_at(Some(StreamKind::Exec), last.min(1));
    if let Ok(page) = disk.read(cursor, usize::MAX, usize::MAX) {
        page.events
            .iter()
            .flat_map(PageEvent::parts)
            .for_each(|e| status.apply(e));
    }
    status
}

/// Replaces `path` with `bytes` atomically (a temporary file renamed over it), so a reader or a
/// restart sees the old content or the new, never a mix.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
