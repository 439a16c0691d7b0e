//! Reading the ring: a page of events after a cursor, within a count and an encoded-byte budget,
//! optionally coalescing adjacent text output of one stream, and saying exactly what was lost.

use std::sync::OnceLock;

use super::{EventRing, RingError};
use crate::event::{
    decimal_len, push_decimal, timestamp::TIMESTAMP_LEN, Event, EventType, StreamState,
    StreamStatus,
};

/// The smallest page budget: smaller `max_bytes` are raised to it, so that the largest event
/// plus the page envelope always fits and every read makes progress.
pub const MIN_PAGE_BYTES: usize = 32 * 1024;

/// The most events one page holds (a larger `max_events` is lowered to it). It bounds how many
/// events a reader clones while holding the ring's lock, coalesced or not.
pub const MAX_PAGE_EVENTS: usize = 10_000;

/// What the gateway may add to a client's page after the read: `resumed_from`, the snapshot a
/// read resumed its workspace from (`,"resumed_from":"sn-` and 32 hex digits and `"`).
pub const RESUME_NOTE_MAX_LEN: usize = ",\"resumed_from\":\"sn-\"".len() + 32;

/// The bytes of events a page of `max_bytes` holds: budgets below [`MIN_PAGE_BYTES`] are
/// raised to it; the envelope at its largest and the gateway's resume note come off it, so the
/// page a client gets is at most `max_bytes` long in either layout.
pub fn events_budget(max_bytes: usize) -> usize {
    max_bytes.max(MIN_PAGE_BYTES) - envelope_max_len() - RESUME_NOTE_MAX_LEN
}

/// The page envelope around the events at its largest (20-digit numbers, the longest state, the
/// lowest return code, `false` flags), in the wire layout (the client's is shorter by `closed`).
pub fn envelope_max_len() -> usize {
    static LEN: OnceLock<usize> = OnceLock::new();
    *LEN.get_or_init(|| {
        let longest = StreamState::ALL
            .into_iter()
            .max_by_key(|s| s.as_str().len())
            .unwrap_or(StreamState::RootRemoved);
        let page = Page {
            events: Vec::new(),
            next_cursor: u64::MAX,
            has_more: false,
            first_seq: u64::MAX,
            cursor_expired: false,
            dropped_events: u64::MAX,
            dropped_bytes: u64::MAX,
            closed: false,
            status: StreamStatus {
                state: Some(longest),
                returncode: Some(i64::MIN),
            },
        };
        let mut out = String::new();
        page.write_json(&mut out, Layout::Wire);
        out.len()
    })
}

/// Which JSON object a page is written as: the agent's (`Events` payloads and `exec.read`), or
/// the client's (`results.EventPage`, what REST sends), which leaves out `closed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Wire,
    Client,
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
    /// The stored events it shows, oldest first.
    pub fn parts(&self) -> &[Event] {
        match self {
            Self::One(event) => std::slice::from_ref(event),
            Self::Coalesced(parts) => parts,
        }
    }

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
    /// The output bytes they carried (`Event::data_len`; exact within the ledger's limit, a
    /// lower bound past it).
    pub dropped_bytes: u64,
    /// The producer has finished: no event will follow the last one.
    pub closed: bool,
    /// The stream's state and return code as of this page's last event (as of the cursor when
    /// the page is empty).
    pub status: StreamStatus,
}

impl Page {
    /// The events as a JSON array.
    pub fn events_json(&self) -> String {
        let mut out = String::with_capacity(self.events_capacity());
        self.write_events(&mut out);
        out
    }

    /// The stream is closed and nothing is left after this page: its last event (an exec's
    /// `exit`, then its final `status`) has been delivered, in this page or an earlier one. A
    /// page that ends with the `exit` is done too: only the closing `status` may follow.
    pub fn done(&self) -> bool {
        if self.has_more {
            return false;
        }
        let ends_with_exit = self.events.last().is_some_and(|e| {
            e.parts()
                .last()
                .is_some_and(|e| e.kind() == EventType::Exit)
        });
        self.closed || ends_with_exit
    }

    /// The whole page as the agent sends it, at most the read's budget long.
    pub fn to_json(&self) -> String {
        self.to_json_as(Layout::Wire)
    }

    /// The page in `layout`; either is at most the read's budget long.
    pub fn to_json_as(&self, layout: Layout) -> String {
        let mut out = String::with_capacity(self.json_capacity());
        self.write_json(&mut out, layout);
        out
    }

    /// The most bytes [`Page::write_json`] writes.
    pub fn json_capacity(&self) -> usize {
        self.events_capacity() + envelope_max_len()
    }

    /// Appends the page in `layout` to `out` (a frame being built, for one). The one place a
    /// page's JSON is written: `results.EventPage` declares the client's fields in this order.
    pub fn write_json(&self, out: &mut String, layout: Layout) {
        let flag = |f: bool| if f { "true" } else { "false" };
        out.push_str("{\"events\":");
        self.write_events(out);
        out.push_str(",\"next_cursor\":");
        push_decimal(out, self.next_cursor);
        out.push_str(",\"has_more\":");
        out.push_str(flag(self.has_more));
        out.push_str(",\"done\":");
        out.push_str(flag(self.done()));
        out.push_str(",\"state\":");
        match self.status.state {
            Some(state) => {
                out.push('"');
                out.push_str(state.as_str());
                out.push('"');
            }
            None => out.push_str("null"),
        }
        out.push_str(",\"returncode\":");
        match self.status.returncode {
            Some(code) => out.push_str(itoa::Buffer::new().format(code)),
            None => out.push_str("null"),
        }
        out.push_str(",\"first_seq\":");
        push_decimal(out, self.first_seq);
        out.push_str(",\"cursor_expired\":");
        out.push_str(flag(self.cursor_expired));
        out.push_str(",\"dropped_events\":");
        push_decimal(out, self.dropped_events);
        out.push_str(",\"dropped_bytes\":");
        push_decimal(out, self.dropped_bytes);
        if layout == Layout::Wire {
            out.push_str(",\"closed\":");
            out.push_str(flag(self.closed));
        }
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
    ) -> Result<Page, RingError> {
        if max_events == 0 {
            return Err(RingError::Bound {
                rule: "ring.max-events",
                message: "max_events must be at least 1",
            });
        }
        let max_events = max_events.min(MAX_PAGE_EVENTS);
        let budget = events_budget(max_bytes);
        let state = self.state.lock();
        if cursor > state.last_seq {
            return Err(RingError::CursorAhead {
                cursor,
                last_seq: state.last_seq,
            });
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
        let has_more = last_taken < state.last_seq;
        let shown = events.iter().flat_map(PageEvent::parts);
        let status = StreamStatus::at_page(self.kind, shown, has_more, state.status);
        Ok(Page {
            events,
            next_cursor: last_taken,
            has_more,
            first_seq,
            cursor_expired,
            dropped_events,
            dropped_bytes,
            closed: state.closed,
            status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::StreamKind;
    use serde_json::Map;

    #[test]
    fn the_largest_event_and_envelope_fit_the_smallest_page() {
        assert!(crate::event::MAX_EVENT_JSON <= events_budget(0));
    }

    fn exec_ring() -> EventRing {
        let ring = EventRing::of_kind(Some(StreamKind::Exec), 1 << 20, None).unwrap();
        let fields = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        let running = fields(serde_json::json!({"state": "running", "pid": 7}));
        ring.append(EventType::Status, None, &running).unwrap();
        ring.append(EventType::Stdout, Some(b"hi\n"), &Map::new())
            .unwrap();
        let exit = fields(serde_json::json!({"returncode": -9, "signal": 9, "state": "timed_out"}));
        ring.append(EventType::Exit, None, &exit).unwrap();
        let last = fields(serde_json::json!({"state": "timed_out"}));
        ring.append(EventType::Status, None, &last).unwrap();
        ring.close();
        ring
    }

    #[test]
    fn the_client_page_has_the_models_fields_in_order_and_the_wire_page_adds_closed() {
        let page = exec_ring().read(0, 100, 0, false).unwrap();
        let client = page.to_json_as(Layout::Client);
        let keys = |json: &str| -> Vec<String> {
            let value: serde_json::Value = serde_json::from_str(json).unwrap();
            let mut keys: Vec<(usize, String)> = value
                .as_object()
                .unwrap()
                .keys()
                .map(|k| (json.rfind(&format!("\"{k}\":")).unwrap(), k.clone()))
                .collect();
            keys.sort();
            keys.into_iter().map(|(_, k)| k).collect()
        };
        let model = [
            "events",
            "next_cursor",
            "has_more",
            "done",
            "state",
            "returncode",
            "first_seq",
            "cursor_expired",
            "dropped_events",
            "dropped_bytes",
        ];
        assert_eq!(keys(&client), model);
        assert_eq!(
            keys(&page.to_json()).last().map(String::as_str),
            Some("closed")
        );
        let tail = r#""has_more":false,"done":true,"state":"timed_out","returncode":-9,"#;
        assert!(client.contains(tail), "{client}");
        assert_eq!(
            page.to_json(),
            format!("{},\"closed\":true}}", &client[..client.len() - 1])
        );
    }

    #[test]
    fn every_page_carries_the_state_as_of_its_last_event() {
        let ring = exec_ring();
        let at = |cursor: u64, max_events: usize| {
            let page = ring.read(cursor, max_events, 0, false).unwrap();
            let client: serde_json::Value =
                serde_json::from_str(&page.to_json_as(Layout::Client)).unwrap();
            (
                client["state"].clone(),
                client["returncode"].clone(),
                page.done(),
            )
        };
        use serde_json::json;
        assert_eq!(at(0, 1), (json!("running"), json!(null), false));
        assert_eq!(at(1, 1), (json!("running"), json!(null), false));
        // The exit, with the closing status still to come: not done yet.
        assert_eq!(at(2, 1), (json!("timed_out"), json!(-9), false));
        assert_eq!(at(3, 1), (json!("timed_out"), json!(-9), true));
        assert_eq!(
            at(4, 1),
            (json!("timed_out"), json!(-9), true),
            "empty, no round trip"
        );

        let starting = EventRing::of_kind(Some(StreamKind::Exec), 1 << 20, None).unwrap();
        let empty = starting.read(0, 10, 0, false).unwrap();
        assert_eq!(empty.status.state, Some(StreamState::Starting));
        assert!(!empty.done());
        let untyped = EventRing::new(1 << 20, None).unwrap();
        let page = untyped
            .read(0, 10, 0, false)
            .unwrap()
            .to_json_as(Layout::Client);
        assert!(page.contains(r#""state":null,"returncode":null"#), "{page}");
    }

    /// A ring whose budget has let go of its oldest events: `(ring, first kept seq)`.
    fn ring_past_its_budget() -> (EventRing, u64) {
        let ring = EventRing::new(500, None).unwrap();
        for i in 0..40u32 {
            let line = format!("line {i}\n");
            ring.append(EventType::Stdout, Some(line.as_bytes()), &Map::new())
                .unwrap();
        }
        let first = ring.read(0, 1, 0, false).unwrap().first_seq;
        assert!(first > 3, "the budget evicted a few events");
        (ring, first)
    }

    #[test]
    fn a_reader_that_missed_exactly_one_event_learns_it() {
        let (ring, first) = ring_past_its_budget();
        let missed = first - 1;
        // Seq n holds "line {n - 1}": the one event missed, as the command wrote it.
        let lost = format!("line {}\n", missed - 1).len() as u64;
        let page = ring.read(missed - 1, 100, 0, false).unwrap();
        assert!(
            page.cursor_expired,
            "event {missed} is gone and was never read"
        );
        assert_eq!((page.dropped_events, page.dropped_bytes), (1, lost));
        assert_eq!(
            page.events[0].seq(),
            first,
            "continues from the oldest kept"
        );
    }

    #[test]
    fn a_reader_at_the_oldest_kept_event_has_missed_nothing() {
        let (ring, first) = ring_past_its_budget();
        for cursor in [first - 1, first] {
            let page = ring.read(cursor, 100, 0, false).unwrap();
            assert!(!page.cursor_expired, "cursor {cursor} lost nothing");
            assert_eq!((page.dropped_events, page.dropped_bytes), (0, 0));
            assert_eq!(page.events[0].seq(), cursor + 1);
        }
    }

    #[test]
    fn an_open_stream_read_to_its_end_is_done_only_once_its_exit_is_read() {
        let ring = EventRing::of_kind(Some(StreamKind::Exec), 1 << 20, None).unwrap();
        ring.append(EventType::Stdout, Some(b"hi\n"), &Map::new())
            .unwrap();
        let page = ring.read(0, 100, 0, false).unwrap();
        assert!(!page.has_more && !page.closed);
        assert!(!page.done(), "output alone does not end the stream");
        let exit = serde_json::json!({"returncode": 0, "state": "finished"});
        ring.append(EventType::Exit, None, exit.as_object().unwrap())
            .unwrap();
        assert!(ring.read(1, 100, 0, false).unwrap().done());
    }

    #[test]
    fn events_json_is_the_pages_events_array() {
        let page = exec_ring().read(0, 100, 0, false).unwrap();
        let whole: serde_json::Value = serde_json::from_str(&page.to_json()).unwrap();
        let events: serde_json::Value = serde_json::from_str(&page.events_json()).unwrap();
        assert_eq!(events.as_array().map(Vec::len), Some(4));
        assert_eq!(events, whole["events"]);
    }

    /// `n` stdout events of a few dozen bytes each, escapes included.
    fn text_ring(n: usize) -> EventRing {
        let ring = EventRing::new(64 << 20, None).unwrap();
        for i in 0..n {
            let line = format!("line {i} \"{}\"\n", "x".repeat(i % 29));
            ring.append(EventType::Stdout, Some(line.as_bytes()), &Map::new())
                .unwrap();
        }
        ring
    }

    #[test]
    fn a_pages_capacity_covers_its_json_and_reserves_at_most_an_envelope_more() {
        let ring = text_ring(300);
        let pages = [
            exec_ring().read(0, 100, 0, false).unwrap(),
            ring.read(0, 1, 0, false).unwrap(),
            ring.read(0, 1000, 0, false).unwrap(),
            ring.read(300, 1000, 0, false).unwrap(),
        ];
        for page in &pages {
            let (events, json) = (page.events_json(), page.to_json());
            // Without coalescing, only the comma after the last event is reserved in vain.
            let reserved = page.events_capacity();
            assert!(events.len() <= reserved && reserved <= events.len() + 1);
            assert!(json.len() <= page.json_capacity());
            assert!(page.json_capacity() <= json.len() + envelope_max_len() + 1);
        }
        let coalesced = ring.read(0, 1000, 0, true).unwrap();
        assert!(matches!(coalesced.events[0], PageEvent::Coalesced(_)));
        assert!(coalesced.to_json().len() <= coalesced.json_capacity());
    }

    /// The page `read` must fill to the byte: what `events` take as a page's events, one
    /// comma between each, with the largest envelope.
    fn budget_for(events: &[PageEvent]) -> usize {
        let mut out = String::new();
        let page = Page {
            events: events.to_vec(),
            next_cursor: 0,
            has_more: false,
            first_seq: 0,
            cursor_expired: false,
            dropped_events: 0,
            dropped_bytes: 0,
            closed: false,
            status: StreamStatus::default(),
        };
        page.write_events(&mut out);
        // The envelope's bound already counts the brackets of an empty list.
        envelope_max_len() + RESUME_NOTE_MAX_LEN + out.len() - 2
    }

    #[test]
    fn a_full_page_with_the_gateways_resume_note_is_within_its_budget() {
        let ring = text_ring(4000);
        for max_bytes in [0, MIN_PAGE_BYTES, MIN_PAGE_BYTES + 777, 100_000] {
            let page = ring.read(0, MAX_PAGE_EVENTS, max_bytes, false).unwrap();
            assert!(page.has_more, "a full page");
            let client = page.to_json_as(Layout::Client);
            // As the gateway adds it: before the closing brace.
            let note = format!(",\"resumed_from\":\"sn-{}\"", "f".repeat(32));
            assert_eq!(note.len(), RESUME_NOTE_MAX_LEN);
            let noted = format!("{}{note}}}", &client[..client.len() - 1]);
            assert!(serde_json::from_str::<serde_json::Value>(&noted).is_ok());
            assert!(
                noted.len() <= max_bytes.max(MIN_PAGE_BYTES),
                "{}",
                noted.len()
            );
            assert!(page.to_json().len() <= max_bytes.max(MIN_PAGE_BYTES));
        }
    }

    #[test]
    fn a_page_takes_every_event_that_fits_its_budget_to_the_byte() {
        let ring = text_ring(2000);
        let all = ring.read(0, MAX_PAGE_EVENTS, usize::MAX, false).unwrap();
        let fits = (1..all.events.len())
            .find(|&k| budget_for(&all.events[..k]) > MIN_PAGE_BYTES)
            .unwrap();
        let budget = budget_for(&all.events[..fits]);
        let page = ring.read(0, MAX_PAGE_EVENTS, budget, false).unwrap();
        assert_eq!(page.events.len(), fits, "exactly {budget} bytes fit them");
        assert!(page.to_json().len() <= budget);
        let short = ring.read(0, MAX_PAGE_EVENTS, budget - 1, false).unwrap();
        assert_eq!(short.events.len(), fits - 1, "one byte less does not");
    }

    #[test]
    fn a_coalesced_page_takes_every_part_that_fits_its_budget_to_the_byte() {
        let ring = text_ring(2000);
        let all = ring.read(0, MAX_PAGE_EVENTS, usize::MAX, false).unwrap();
        let parts: Vec<Event> = all.events.iter().flat_map(|e| e.parts().to_vec()).collect();
        let merged = |k: usize| [PageEvent::Coalesced(parts[..k].to_vec())];
        let fits = (2..parts.len())
            .find(|&k| budget_for(&merged(k)) > MIN_PAGE_BYTES)
            .unwrap();
        let budget = budget_for(&merged(fits));
        let page = ring.read(0, MAX_PAGE_EVENTS, budget, true).unwrap();
        assert_eq!(page.events.len(), 1);
        assert_eq!(
            page.events[0].parts().len(),
            fits,
            "{budget} bytes fit them"
        );
        assert!(page.to_json().len() <= budget);
        let short = ring.read(0, MAX_PAGE_EVENTS, budget - 1, true).unwrap();
        assert_eq!(short.events[0].parts().len(), fits - 1);
    }

    #[test]
    fn a_coalesced_page_holds_at_most_max_page_events_stored_events() {
        let ring = EventRing::new(64 << 20, None).unwrap();
        let chunks: Vec<&[u8]> = vec![b"x"; MAX_PAGE_EVENTS + 5];
        ring.append_many(EventType::Stdout, &chunks).unwrap();
        let page = ring.read(0, 10, usize::MAX, true).unwrap();
        assert_eq!(page.events.len(), 1);
        assert_eq!(page.events[0].parts().len(), MAX_PAGE_EVENTS);
        assert_eq!(page.next_cursor, MAX_PAGE_EVENTS as u64);
        assert!(page.has_more);
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
            status: StreamStatus {
                state: Some(StreamState::RootRemoved),
                returncode: Some(i64::MIN),
            },
        };
        assert_eq!(page.to_json().len(), envelope_max_len());
        assert!(page.to_json_as(Layout::Client).len() < envelope_max_len());
    }
}
