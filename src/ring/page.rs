//! Reading the ring: a page of events after a cursor, within a count and an encoded-byte budget,
//! optionally coalescing adjacent text output of one stream, and saying exactly what was lost.

use super::EventRing;
use crate::event::{decimal_len, push_decimal, timestamp::TIMESTAMP_LEN, Event, EventType};
use crate::policy::PolicyError;

/// The smallest page budget: smaller `max_bytes` are raised to it, so that the largest event
/// plus the page envelope always fits and every read makes progress.
pub const MIN_PAGE_BYTES: usize = 32 * 1024;

/// The most events one page holds (a larger `max_events` is lowered to it). It bounds how many
/// events a reader clones while holding the ring's lock, coalesced or not.
pub const MAX_PAGE_EVENTS: usize = 10_000;

/// The page envelope around the events at its largest (20-digit numbers, `false` flags).
pub fn envelope_max_len() -> usize {
    envelope_len(u64::MAX, u64::MAX, u64::MAX, u64::MAX, [false; 3])
}

fn envelope_len(next: u64, first: u64, dropped: u64, bytes: u64, flags: [bool; 3]) -> usize {
    let fixed = "{\"events\":[],\"next_cursor\":,\"has_more\":,\"first_seq\":,\"cursor_expired\":,\
                 \"dropped_events\":,\"dropped_bytes\":,\"closed\":}"
        .len();
    let flags: usize = flags.iter().map(|&f| if f { 4 } else { 5 }).sum();
    fixed
        + decimal_len(next)
        + decimal_len(first)
        + decimal_len(dropped)
        + decimal_len(bytes)
        + flags
}

/// One event of a page: as stored, or adjacent text output of one stream merged into one.
#[derive(Debug, Clone)]
pub enum PageEvent {
    One(Event),
    /// Two or more consecutive text events of one stream, oldest first; shown as one event with
    /// `seq` = the last one, `seq_start` = the first one, and the last one's timestamp.
    Coalesced(Vec<Event>),
}

impl PageEvent {
    /// The seq a client's cursor moves to after this event.
    pub fn seq(&self) -> u64 {
        match self {
            Self::One(event) => event.seq(),
            Self::Coalesced(parts) => parts.last().map_or(0, |e| e.seq()),
        }
    }

    pub fn write_json(&self, out: &mut String) {
        let parts = match self {
            Self::One(event) => return out.push_str(event.json()),
            Self::Coalesced(parts) => parts,
        };
        let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
            return;
        };
        out.push_str("{\"seq\":");
        push_decimal(out, last.seq());
        out.push_str(",\"seq_start\":");
        push_decimal(out, first.seq());
        out.push_str(",\"timestamp\":\"");
        out.push_str(last.timestamp());
        out.push_str("\",\"type\":\"");
        out.push_str(last.kind().as_str());
        out.push_str("\",\"data\":\"");
        for part in parts {
            out.push_str(part.coalescable_text().unwrap_or_default());
        }
        out.push_str("\"}");
    }
}

/// Encoded length of a coalesced event (must agree with [`PageEvent::write_json`]).
fn coalesced_len(first: u64, last: u64, kind: EventType, escaped_data: usize) -> usize {
    "{\"seq\":,\"seq_start\":,\"timestamp\":\"\",\"type\":\"\",\"data\":\"\"}".len()
        + decimal_len(last)
        + decimal_len(first)
        + TIMESTAMP_LEN
        + kind.as_str().len()
        + escaped_data
}

/// A page read from the ring. Its JSON (`to_json`) is at most the budget the read was given.
#[derive(Debug, Clone)]
pub struct Page {
    /// Events with `seq > cursor` (or from `first_seq` when the cursor expired), oldest first.
    pub events: Vec<PageEvent>,
    /// The last seq returned, or the cursor when none was.
    pub next_cursor: u64,
    /// More events existed after this page when it was read.
    pub has_more: bool,
    /// The oldest kept seq (`last seq + 1` while the ring is empty).
    pub first_seq: u64,
    /// Events after the cursor were evicted: the page continues from the oldest kept one.
    pub cursor_expired: bool,
    /// How many events between the cursor and `first_seq` this reader lost.
    pub dropped_events: u64,
    /// Their encoded bytes (exact within the ledger's limit, a lower bound past it).
    pub dropped_bytes: u64,
    /// The producer has finished: no event will follow the last one.
    pub closed: bool,
}

impl Page {
    /// The events as a JSON array.
    pub fn events_json(&self) -> String {
        let mut out = String::with_capacity(self.events_capacity());
        self.write_events(&mut out);
        out
    }

    /// The whole page as one JSON object, at most the read's budget long.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(self.json_capacity());
        self.write_json(&mut out);
        out
    }

    /// The most bytes [`Page::write_json`] writes.
    pub fn json_capacity(&self) -> usize {
        self.events_capacity() + envelope_max_len()
    }

    /// Appends [`Page::to_json`] to `out` (a frame being built, for one).
    pub fn write_json(&self, out: &mut String) {
        out.push_str("{\"events\":");
        self.write_events(out);
        let flag = |f: bool| if f { "true" } else { "false" };
        out.push_str(",\"next_cursor\":");
        push_decimal(out, self.next_cursor);
        out.push_str(",\"has_more\":");
        out.push_str(flag(self.has_more));
        out.push_str(",\"first_seq\":");
        push_decimal(out, self.first_seq);
        out.push_str(",\"cursor_expired\":");
        out.push_str(flag(self.cursor_expired));
        out.push_str(",\"dropped_events\":");
        push_decimal(out, self.dropped_events);
        out.push_str(",\"dropped_bytes\":");
        push_decimal(out, self.dropped_bytes);
        out.push_str(",\"closed\":");
        out.push_str(flag(self.closed));
        out.push('}');
    }

    fn write_events(&self, out: &mut String) {
        out.push('[');
        for (i, event) in self.events.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            event.write_json(out);
        }
        out.push(']');
    }

    fn events_capacity(&self) -> usize {
        let parts = |e: &PageEvent| match e {
            PageEvent::One(event) => event.encoded_len(),
            PageEvent::Coalesced(parts) => parts.iter().map(|p| p.encoded_len()).sum(),
        };
        2 + self.events.iter().map(|e| parts(e) + 1).sum::<usize>()
    }
}

/// A run of text events being merged while a page is selected.
struct Run {
    kind: EventType,
    parts: Vec<Event>,
    escaped_data: usize,
    /// Encoded length of the run as the page will show it.
    len: usize,
}

impl Run {
    fn into_page_event(mut self) -> PageEvent {
        match self.parts.len() {
            1 => PageEvent::One(self.parts.remove(0)),
            _ => PageEvent::Coalesced(self.parts),
        }
    }
}

impl EventRing {
    /// Reads the events after `cursor` (0 = from the start): at most `max_events` events and
    /// `max_bytes` of page JSON. Budgets below [`MIN_PAGE_BYTES`] are raised to it and counts
    /// above [`MAX_PAGE_EVENTS`] lowered to it. With `coalesce`, adjacent text events of one
    /// output stream are merged, and `max_events` counts the merged events.
    pub fn read(
        &self,
        cursor: u64,
        max_events: usize,
        max_bytes: usize,
        coalesce: bool,
    ) -> Result<Page, PolicyError> {
        if max_events == 0 {
            return Err(PolicyError::without_echo(
                "ring.max-events",
                "max_events must be at least 1",
            ));
        }
        let max_events = max_events.min(MAX_PAGE_EVENTS);
        let budget = max_bytes.max(MIN_PAGE_BYTES) - envelope_max_len();
        let state = self.state.lock();
        if cursor > state.last_seq {
            return Err(PolicyError::without_echo(
                "ring.cursor-ahead",
                format!(
                    "cursor {cursor} is past the last event of this stream ({}); pass the \
                     next_cursor of a previous page, or 0 to read from the start",
                    state.last_seq
                ),
            ));
        }
        let first_seq = state.first_seq();
        let cursor_expired = cursor + 1 < first_seq;
        let (dropped_events, dropped_bytes) = if cursor_expired {
            (first_seq - 1 - cursor, state.ledger.dropped_after(cursor))
        } else {
            (0, 0)
        };
        let skip = usize::try_from(cursor.max(first_seq - 1) - (first_seq - 1)).unwrap_or(0);

        // Only arithmetic and reference counts under the lock; the JSON is built by the caller.
        let mut events = Vec::new();
        let mut run: Option<Run> = None;
        let mut used = 0;
        let mut raw = 0;
        let mut last_taken = cursor;
        for event in state.events.range(skip..) {
            if raw == MAX_PAGE_EVENTS {
                break;
            }
            let text = if coalesce {
                event.coalescable_text()
            } else {
                None
            };
            if let (Some(open), Some(text)) = (run.as_mut(), text) {
                if open.kind == event.kind() {
                    let first = open.parts[0].seq();
                    let escaped_data = open.escaped_data + text.len();
                    let len = coalesced_len(first, event.seq(), open.kind, escaped_data);
                    if used + len - open.len > budget {
                        break;
                    }
                    used += len - open.len;
                    open.len = len;
                    open.escaped_data = escaped_data;
                    open.parts.push(event.clone());
                    raw += 1;
                    last_taken = event.seq();
                    continue;
                }
            }
            let count = events.len() + usize::from(run.is_some());
            let cost = event.encoded_len() + usize::from(count > 0);
            if count == max_events || used + cost > budget {
                break;
            }
            used += cost;
            raw += 1;
            last_taken = event.seq();
            events.extend(run.take().map(Run::into_page_event));
            match text {
                Some(text) => {
                    run = Some(Run {
                        kind: event.kind(),
                        parts: vec![event.clone()],
                        escaped_data: text.len(),
                        len: event.encoded_len(),
                    })
                }
                None => events.push(PageEvent::One(event.clone())),
            }
        }
        events.extend(run.map(Run::into_page_event));
        Ok(Page {
            events,
            next_cursor: last_taken,
            has_more: last_taken < state.last_seq,
            first_seq,
            cursor_expired,
            dropped_events,
            dropped_bytes,
            closed: state.closed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_event_and_envelope_fit_the_smallest_page() {
        assert!(crate::event::MAX_EVENT_JSON + envelope_max_len() <= MIN_PAGE_BYTES);
    }

    #[test]
    fn envelope_length_matches_the_json() {
        let page = Page {
            events: Vec::new(),
            next_cursor: u64::MAX,
            has_more: false,
            first_seq: u64::MAX,
            cursor_expired: false,
            dropped_events: u64::MAX,
            dropped_bytes: u64::MAX,
            closed: false,
        };
        assert_eq!(page.to_json().len(), envelope_max_len());
    }
}
