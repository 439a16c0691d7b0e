//! Pages read back from an exec log's segments: from any cursor, with the drops the log knows
//! of (see the module notes of `exec_log` for when `dropped_bytes` is exact).

use std::fs::File;

use super::super::segment;
use super::super::LogError;
use super::Disk;
use crate::event::{Event, StreamStatus};
use crate::ring::{envelope_max_len, Page, PageEvent, MAX_PAGE_EVENTS, MIN_PAGE_BYTES};

impl Disk {
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
    pub(in crate::agent::exec_log) fn read(
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
        let budget = max_bytes.max(MIN_PAGE_BYTES) - envelope_max_len();
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
