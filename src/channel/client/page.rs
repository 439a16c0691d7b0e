//! Pages as they travel (`Events` payloads and `exec.read` results): parsed back into events the
//! cache can hold and into the ring's `Page`, so a page from the agent reads like a cached one.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::scan;
use super::wire::ChannelError;
use crate::channel::message::ErrorCode;
use crate::event::Event;
use crate::ring::{Page, PageEvent};

/// A page's envelope and its events, still encoded.
#[derive(Debug, Deserialize)]
struct WirePage<'a> {
    #[serde(borrow)]
    events: Vec<&'a RawValue>,
    next_cursor: u64,
    has_more: bool,
    first_seq: u64,
    cursor_expired: bool,
    dropped_events: u64,
    dropped_bytes: u64,
    closed: bool,
}

/// A received page: its events, oldest first, and what its envelope says.
#[derive(Debug)]
pub struct ReceivedPage {
    pub events: Vec<Event>,
    pub next_cursor: u64,
    pub has_more: bool,
    pub first_seq: u64,
    pub cursor_expired: bool,
    pub dropped_events: u64,
    pub dropped_bytes: u64,
    pub closed: bool,
}

impl ReceivedPage {
    /// Parses a page's JSON; every event must be a single, canonically encoded event and the
    /// seqs must rise by one. A page as the agent writes it is read in one pass over its bytes
    /// (`scan`); any other layout the general way, with the same result.
    pub fn parse(json: &[u8]) -> Result<Self, ChannelError> {
        let bad = |why: String| {
            ChannelError::new(
                ErrorCode::Unavailable,
                format!("the agent sent a malformed page ({why})"),
            )
        };
        let fast = std::str::from_utf8(json)
            .ok()
            .and_then(scan::read_canonical);
        let page = match fast {
            Some(page) => page,
            None => Self::parse_general(json).map_err(bad)?,
        };
        if let Some(w) = page
            .events
            .windows(2)
            .find(|w| w[1].seq() != w[0].seq() + 1)
        {
            return Err(bad(format!(
                "seq {} follows seq {}",
                w[1].seq(),
                w[0].seq()
            )));
        }
        Ok(page)
    }

    /// Any JSON layout of a page (each event still canonical): the envelope through serde, the
    /// events one by one through [`Event::from_json`].
    pub(super) fn parse_general(json: &[u8]) -> Result<Self, String> {
        let wire: WirePage<'_> = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        let events = wire
            .events
            .iter()
            .map(|raw| Event::from_json(raw.get()).map_err(|e| e.message))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            events,
            next_cursor: wire.next_cursor,
            has_more: wire.has_more,
            first_seq: wire.first_seq,
            cursor_expired: wire.cursor_expired,
            dropped_events: wire.dropped_events,
            dropped_bytes: wire.dropped_bytes,
            closed: wire.closed,
        })
    }

    /// Encoded bytes of the events (what a cache holding them counts).
    pub fn event_bytes(&self) -> usize {
        self.events.iter().map(Event::encoded_len).sum()
    }

    /// The source has ended and this page holds its last event.
    pub fn ends_stream(&self) -> bool {
        self.closed && !self.has_more
    }

    /// The page as the ring's `Page`, for a caller that reads it like a page of the cache.
    pub fn into_page(self) -> Page {
        Page {
            events: self.events.into_iter().map(PageEvent::One).collect(),
            next_cursor: self.next_cursor,
            has_more: self.has_more,
            first_seq: self.first_seq,
            cursor_expired: self.cursor_expired,
            dropped_events: self.dropped_events,
            dropped_bytes: self.dropped_bytes,
            closed: self.closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use crate::ring::EventRing;
    use serde_json::Map;

    #[test]
    fn a_ring_page_round_trips_through_its_json() {
        let ring = EventRing::new(1 << 20, None).unwrap();
        ring.append(EventType::Stdout, Some(b"hello\n"), &Map::new())
            .unwrap();
        ring.append(EventType::Stderr, Some(b"\xff"), &Map::new())
            .unwrap();
        let mut fields = Map::new();
        fields.insert("returncode".into(), 3.into());
        ring.append(EventType::Exit, None, &fields).unwrap();
        ring.close();
        let original = ring.read(0, 100, 0, false).unwrap();
        let received = ReceivedPage::parse(original.to_json().as_bytes()).unwrap();
        assert!(received.ends_stream());
        assert_eq!(received.into_page().to_json(), original.to_json());
    }

    #[test]
    fn malformed_pages_are_refused() {
        let ts = "2026-11-29T10:04:45.123Z";
        let event = |seq: u64| format!(r#"{{"seq":{seq},"timestamp":"{ts}","type":"exit"}}"#);
        let envelope = r#""next_cursor":3,"has_more":false,"first_seq":1,"cursor_expired":false,"dropped_events":0,"dropped_bytes":0,"closed":false"#;
        let good = format!(r#"{{"events":[{},{}],{envelope}}}"#, event(1), event(2));
        assert!(ReceivedPage::parse(good.as_bytes()).is_ok());
        let hole = format!(r#"{{"events":[{},{}],{envelope}}}"#, event(1), event(3));
        let missing = r#"{"events":[]}"#.to_owned();
        let not_json = "{".to_owned();
        for bad in [hole, missing, not_json] {
            let err = ReceivedPage::parse(bad.as_bytes()).unwrap_err();
            assert_eq!(err.code, "unavailable");
        }
    }
}
