//! The on-disk part of one exec log: its segments, appends with per-exec eviction, the index
//! file that survives eviction and restarts, recovery, and pages read back from any cursor
//! (see the module notes of `exec_log` for when their `dropped_bytes` is exact).

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::segment::{self, Segment, RECORD_HEADER};
use super::LogError;
use crate::event::{Event, StreamStatus};
use crate::ring::ledger::Ledger;
use crate::ring::{events_budget, Page, PageEvent, MAX_PAGE_EVENTS};

const INDEX_FILE: &str = "index.json";

/// How many boundaries of deleted segments are remembered (16 bytes each) for `dropped_bytes`
/// when the per-event ledger cannot answer.
const DELETED_BOUNDARIES: usize = 4096;

/// Orders segments across every log of the process (the shared budget evicts oldest first).
static EPOCH: AtomicU64 = AtomicU64::new(1);

fn next_epoch() -> u64 {
    EPOCH.fetch_add(1, Ordering::Relaxed)
}

/// What survives eviction and restarts: where the retained events start and what came before.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
struct Index {
    first_seq: u64,
    evicted_bytes: u64,
    closed: bool,
}

#[derive(Debug)]
pub(super) struct Disk {
    dir: PathBuf,
    segment_bytes: u64,
    max_bytes: u64,
    segments: VecDeque<Segment>,
    /// The last segment, open for appending; `None` until the first record, after close, and
    /// for recovered logs until something is appended.
    active: Option<File>,
    next_seq: u64,
    index: Index,
    /// Sum of the segments' `file_bytes`.
    file_bytes: u64,
    /// Output bytes of evicted events, for exact `dropped_bytes` (logs created by this
    /// process only: a recovered log does not know the sizes of what was evicted before).
    ledger: Option<Ledger>,
    /// `(first_seq, cum_before)` of recently deleted segments, oldest first.
    deleted: VecDeque<(u64, u64)>,
    /// Set by the first failed write: later events are not stored, reads serve what is.
    pub(super) broken: Option<String>,
}

impl Disk {
    pub(super) fn create(dir: &Path, segment_bytes: u64, max_bytes: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let disk = Self::empty(
            dir,
            segment_bytes,
            max_bytes,
            Index::fresh(),
            Some(Ledger::default()),
        );
        disk.write_index()?;
        Ok(disk)
    }

    fn empty(
        dir: &Path,
        segment_bytes: u64,
        max_bytes: u64,
        index: Index,
        ledger: Option<Ledger>,
    ) -> Self {
        Self {
            dir: dir.to_path_buf(),
            segment_bytes,
            max_bytes,
            segments: VecDeque::new(),
            active: None,
            next_seq: index.first_seq,
            index,
            file_bytes: 0,
            ledger,
            deleted: VecDeque::new(),
            broken: None,
        }
    }

    /// Opens a log written by an earlier process: finds its last seq, truncates a torn last
    /// record, and drops segment files that an interrupted eviction left behind.
    pub(super) fn recover(dir: &Path, segment_bytes: u64, max_bytes: u64) -> io::Result<Self> {
        let index = match fs::read(dir.join(INDEX_FILE)) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|_| Index::fresh()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Index::fresh(),
            Err(e) => return Err(e),
        };
        let mut firsts = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if let Some(first) = entry.file_name().to_str().and_then(segment::parse_name) {
                if first < index.first_seq {
                    // Evicted: the index was updated before the unlink that did not happen.
                    let _ = fs::remove_file(entry.path());
                } else {
                    firsts.push(first);
                }
            }
        }
        firsts.sort_unstable();
        let mut disk = Self::empty(dir, segment_bytes, max_bytes, index, None);
        let mut cum = index.evicted_bytes;
        for (i, &first) in firsts.iter().enumerate() {
            let mut seg = Segment::new(first, cum, next_epoch());
            seg.sparse = None;
            let path = seg.path(dir);
            match firsts.get(i + 1) {
                // An earlier segment is whole: its records end where the next one starts.
                Some(&next) => {
                    seg.file_bytes = fs::metadata(&path)?.len();
                    seg.last_seq = next - 1;
                    seg.event_bytes = data_bytes(&path, &seg);
                }
                None => {
                    let file = OpenOptions::new().read(true).write(true).open(&path)?;
                    let end = segment::scan(&file, 0, first, |_| true)?;
                    if end.torn {
                        file.set_len(end.offset)?;
                    }
                    seg.file_bytes = end.offset;
                    seg.last_seq = end.next_seq - 1;
                    seg.event_bytes = data_bytes(&path, &seg);
                }
            }
            cum += seg.event_bytes;
            disk.file_bytes += seg.file_bytes;
            disk.next_seq = seg.last_seq + 1;
            disk.segments.push_back(seg);
        }
        if disk.segments.back().is_some_and(Segment::is_empty) {
            // A segment cut down to nothing: remove it so that no segment is empty.
            if let Some(seg) = disk.segments.pop_back() {
                let _ = fs::remove_file(seg.path(dir));
            }
        }
        Ok(disk)
    }

    pub(super) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    pub(super) fn first_seq(&self) -> u64 {
        self.segments.front().map_or(self.next_seq, |s| s.first_seq)
    }

    pub(super) fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    pub(super) fn is_closed(&self) -> bool {
        self.index.closed
    }

    pub(super) fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub(super) fn oldest_epoch(&self) -> Option<u64> {
        self.segments.front().map(|s| s.epoch)
    }

    /// Stores `events` (consecutive, continuing the log) and evicts this log's oldest segments
    /// past its own bound. After a write error the log is
    /// marked broken and stores nothing more.
    pub(super) fn append(&mut self, events: &[Event]) {
        if self.broken.is_some() || events.is_empty() {
            return;
        }
        if let Err(e) = self.write_events(events) {
            tracing::error!(dir = %self.dir.display(), error = %e, "cannot write an exec log; its later events are kept in memory only");
            self.broken = Some(e.to_string());
        }
        while self.file_bytes > self.max_bytes && self.segments.len() > 1 {
            if self.evict_oldest().is_err() {
                break;
            }
        }
    }

    fn write_events(&mut self, events: &[Event]) -> io::Result<()> {
        // Sized once: an append of 64 KiB of output would otherwise grow it by doubling.
        let records: usize = events
            .iter()
            .map(|e| RECORD_HEADER as usize + e.encoded_len())
            .sum();
        let mut buf = Vec::with_capacity(records);
        for event in events {
            if event.seq() != self.next_seq {
                return Err(io::Error::other(format!(
                    "event {} does not follow {} in the log",
                    event.seq(),
                    self.last_seq()
                )));
            }
            let record = RECORD_HEADER + event.encoded_len() as u64;
            let full = self
                .segments
                .back()
                .is_none_or(|s| !s.is_empty() && s.file_bytes + record > self.segment_bytes);
            if full || self.active.is_none() {
                self.flush(&mut buf)?;
                self.roll(event.seq(), !full)?;
            }
            segment::encode_record(&mut buf, event.seq(), event.json());
            if let Some(seg) = self.segments.back_mut() {
                seg.note_record(
                    event.seq(),
                    event.encoded_len() as u64,
                    event.data_len() as u64,
                );
            }
            self.file_bytes += record;
            self.next_seq += 1;
        }
        self.flush(&mut buf)
    }

    fn flush(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        match &mut self.active {
            Some(file) => file.write_all(buf)?,
            None => return Err(io::Error::other("no segment is open for appending")),
        }
        buf.clear();
        Ok(())
    }

    /// Starts a new segment whose first record will be `first_seq`; a recovered last segment
    /// that is still appendable is reopened instead.
    fn roll(&mut self, first_seq: u64, reopen: bool) -> io::Result<()> {
        if let Some(last) = self.segments.back() {
            if reopen && self.active.is_none() {
                self.active = Some(OpenOptions::new().append(true).open(last.path(&self.dir))?);
                return Ok(());
            }
        }
        let cum_before = self
            .segments
            .back()
            .map_or(self.index.evicted_bytes, |s| s.cum_before + s.event_bytes);
        let seg = Segment::new(first_seq, cum_before, next_epoch());
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(seg.path(&self.dir))?;
        self.active = Some(file);
        self.segments.push_back(seg);
        Ok(())
    }

    /// Deletes the oldest segment (the active one too: callers decide when that is allowed).
    /// The index is written first, so a crash in between leaves a file recovery deletes.
    pub(super) fn evict_oldest(&mut self) -> io::Result<u64> {
        let Some(seg) = self.segments.front() else {
            return Ok(0);
        };
        let path = seg.path(&self.dir);
        if let Some(ledger) = &mut self.ledger {
            match segment::record_data_sizes(&path, seg.first_seq, seg.last_seq) {
                Ok(sizes) if sizes.len() as u64 == seg.last_seq + 1 - seg.first_seq => {
                    for size in sizes {
                        ledger.record(usize::try_from(size).unwrap_or(usize::MAX));
                    }
                }
                _ => self.ledger = None,
            }
        }
        let next = Index {
            first_seq: seg.last_seq + 1,
            evicted_bytes: seg.cum_before + seg.event_bytes,
            closed: self.index.closed,
        };
        let (first, cum_before, bytes) = (seg.first_seq, seg.cum_before, seg.file_bytes);
        let previous = std::mem::replace(&mut self.index, next);
        if let Err(e) = self.write_index() {
            self.index = previous;
            return Err(e);
        }
        if self.segments.len() == 1 {
            self.active = None;
        }
        self.segments.pop_front();
        if self.deleted.len() == DELETED_BOUNDARIES {
            self.deleted.pop_front();
        }
        self.deleted.push_back((first, cum_before));
        self.file_bytes -= bytes;
        let _ = fs::remove_file(&path);
        Ok(bytes)
    }

    pub(super) fn close(&mut self) -> io::Result<()> {
        self.active = None;
        if self.index.closed {
            return Ok(());
        }
        self.index.closed = true;
        self.write_index()
    }

    fn write_index(&self) -> io::Result<()> {
        let json = serde_json::to_vec(&self.index).map_err(io::Error::other)?;
        super::write_atomically(&self.dir.join(INDEX_FILE), &json)
    }

    /// Encoded bytes of the evicted events after `cursor`. Exact from cursor 0, at the start of
    /// any segment deleted by this process (the last 4096), and for any cursor among the last
    /// 65 536 events evicted by this process; otherwise a lower bound that leaves out the rest
    /// of the deleted segment the cursor was in.
    fn dropped_bytes_after(&self, cursor: u64) -> u64 {
        let evicted = self.index.evicted_bytes;
        if cursor == 0 {
            return evicted;
        }
        if let Some(ledger) = &self.ledger {
            return ledger.dropped_after(cursor);
        }
        let boundary = self
            .deleted
            .iter()
            .find(|&&(first, _)| first > cursor)
            .map_or(evicted, |&(_, cum)| cum);
        evicted.saturating_sub(boundary)
    }

    /// A page of the events after `cursor`, as [`crate::ring::EventRing::read`] makes one
    /// (without coalescing).
    pub(super) fn read(
        &mut self,
        cursor: u64,
        max_events: usize,
        max_bytes: usize,
    ) -> Result<Page, LogError> {
        let last = self.last_seq();
        if cursor > last {
            return Err(LogError::cursor_ahead(cursor, last));
        }
        let max_events = max_events.clamp(1, MAX_PAGE_EVENTS);
        let budget = events_budget(max_bytes);
        let first_seq = self.first_seq();
        let cursor_expired = cursor + 1 < first_seq;
        let (dropped_events, dropped_bytes) = match cursor_expired {
            true => (first_seq - 1 - cursor, self.dropped_bytes_after(cursor)),
            false => (0, 0),
        };
        let start = (cursor + 1).max(first_seq);
        let mut events: Vec<PageEvent> = Vec::new();
        let mut used = 0;
        let mut last_taken = cursor;
        if cursor_expired {
            last_taken = first_seq - 1;
        }
        let dir = self.dir.clone();
        for seg in self.segments.iter_mut() {
            if seg.last_seq < start {
                continue;
            }
            let from = start.max(seg.first_seq);
            let (seq_at, offset) = seg.seek_point(&dir, from)?;
            let file = File::open(seg.path(&dir))?;
            let mut full = false;
            segment::read_records(&file, offset, seq_at, from, seg.last_seq, |seq, json| {
                let cost = json.len() + usize::from(!events.is_empty());
                if events.len() == max_events || used + cost > budget {
                    full = true;
                    return false;
                }
                match Event::from_encoded(json) {
                    Some(event) if event.seq() == seq => {
                        used += cost;
                        last_taken = seq;
                        events.push(PageEvent::One(event));
                        true
                    }
                    _ => {
                        full = true;
                        false
                    }
                }
            })?;
            if full {
                break;
            }
        }
        Ok(Page {
            events,
            next_cursor: last_taken,
            has_more: last_taken < last,
            first_seq,
            cursor_expired,
            dropped_events,
            dropped_bytes,
            closed: self.index.closed,
            // The log's owner knows the stream's status (`ExecLog::read` sets it).
            status: StreamStatus::default(),
        })
    }
}

impl Index {
    fn fresh() -> Self {
        Self {
            first_seq: 1,
            evicted_bytes: 0,
            closed: false,
        }
    }
}

/// The output bytes of a recovered segment's records: read back once, when the log is reopened
/// (a damaged record counts as none, so `dropped_bytes` stays a lower bound).
fn data_bytes(path: &Path, seg: &Segment) -> u64 {
    segment::record_data_sizes(path, seg.first_seq, seg.last_seq)
        .map_or(0, |sizes| sizes.iter().sum())
}
