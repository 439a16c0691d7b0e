//! Pages as they travel (`Events` payloads and `exec.read` results), read back into events the
//! cache can hold and into the ring's `Page`, so a page from the agent reads like a cached one.
//!
//! Two readers, one result: a page exactly in the layout `Page::write_json` writes, with every
//! event in the canonical layout without fields (`Event::read_canonical`), is read in one pass
//! over its bytes; any other layout (an exit or status event with fields, whitespace, another
//! key order, an older agent's page without `state`) through serde, with the same result.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::wire::ChannelError;
use crate::channel::message::ErrorCode;
use crate::event::{Event, StreamState, StreamStatus};
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
    /// Absent from an older agent's pages, which carry no state either.
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    returncode: Option<i64>,
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
    /// The stream's status as of the page's end, as the agent folded it; `None` from an agent
    /// too old to say.
    pub status: Option<StreamStatus>,
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
        let fast = std::str::from_utf8(json).ok().and_then(read_canonical);
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
    fn parse_general(json: &[u8]) -> Result<Self, String> {
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
            status: wire.done.map(|_| StreamStatus {
                state: wire.state.as_deref().and_then(StreamState::parse),
                returncode: wire.returncode,
            }),
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

    /// The page as the ring's `Page`, for a caller that reads it like a page of the cache. An
    /// older agent's page shows the state its own events give.
    pub fn into_page(self) -> Page {
        let status = self.status.unwrap_or_else(|| {
            let mut status = StreamStatus::default();
            self.events.iter().for_each(|e| status.apply(e));
            status
        });
        Page {
            events: self.events.into_iter().map(PageEvent::One).collect(),
            next_cursor: self.next_cursor,
            has_more: self.has_more,
            first_seq: self.first_seq,
            cursor_expired: self.cursor_expired,
            dropped_events: self.dropped_events,
            dropped_bytes: self.dropped_bytes,
            closed: self.closed,
            status,
        }
    }
}

/// The page, when `json` is exactly in the agent's layout.
fn read_canonical(json: &str) -> Option<ReceivedPage> {
    let bytes = json.as_bytes();
    let mut at = expect(bytes, 0, b"{\"events\":[")?;
    let mut events = Vec::new();
    if bytes.get(at) != Some(&b']') {
        loop {
            let (event, used) = Event::read_canonical(json.get(at..)?)?;
            events.push(event);
            at += used;
            match bytes.get(at)? {
                b',' => at += 1,
                b']' => break,
                _ => return None,
            }
        }
    }
    at += 1;
    let (next_cursor, at) = number(bytes, at, b",\"next_cursor\":")?;
    let (has_more, at) = flag(bytes, at, b",\"has_more\":")?;
    let (_done, at) = flag(bytes, at, b",\"done\":")?;
    let (state, at) = state(bytes, at)?;
    let (returncode, at) = returncode(bytes, at)?;
    let (first_seq, at) = number(bytes, at, b",\"first_seq\":")?;
    let (cursor_expired, at) = flag(bytes, at, b",\"cursor_expired\":")?;
    let (dropped_events, at) = number(bytes, at, b",\"dropped_events\":")?;
    let (dropped_bytes, at) = number(bytes, at, b",\"dropped_bytes\":")?;
    let (closed, at) = flag(bytes, at, b",\"closed\":")?;
    if expect(bytes, at, b"}")? != bytes.len() {
        return None;
    }
    Some(ReceivedPage {
        events,
        next_cursor,
        has_more,
        first_seq,
        cursor_expired,
        dropped_events,
        dropped_bytes,
        closed,
        status: Some(StreamStatus { state, returncode }),
    })
}

/// The offset after `token` when `bytes` has it at `at`.
fn expect(bytes: &[u8], at: usize, token: &[u8]) -> Option<usize> {
    bytes
        .get(at..)?
        .starts_with(token)
        .then_some(at + token.len())
}

/// `key` then a JSON number that is a u64 written without leading zeros.
fn number(bytes: &[u8], at: usize, key: &[u8]) -> Option<(u64, usize)> {
    let at = expect(bytes, at, key)?;
    let digits = bytes[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || (digits > 1 && bytes[at] == b'0') {
        return None;
    }
    let text = std::str::from_utf8(&bytes[at..at + digits]).ok()?;
    Some((text.parse().ok()?, at + digits))
}

/// `key` then `true` or `false`.
fn flag(bytes: &[u8], at: usize, key: &[u8]) -> Option<(bool, usize)> {
    let at = expect(bytes, at, key)?;
    if let Some(end) = expect(bytes, at, b"true") {
        return Some((true, end));
    }
    expect(bytes, at, b"false").map(|end| (false, end))
}

/// `,"state":` then `null` or a state's name (a name this build does not know is no state).
fn state(bytes: &[u8], at: usize) -> Option<(Option<StreamState>, usize)> {
    let at = expect(bytes, at, b",\"state\":")?;
    if let Some(end) = expect(bytes, at, b"null") {
        return Some((None, end));
    }
    let at = expect(bytes, at, b"\"")?;
    let len = bytes[at..]
        .iter()
        .take_while(|b| b.is_ascii_lowercase() || **b == b'_')
        .count();
    let end = expect(bytes, at + len, b"\"")?;
    let name = std::str::from_utf8(&bytes[at..at + len]).ok()?;
    Some((StreamState::parse(name), end))
}

/// `,"returncode":` then `null` or an i64 (a minus sign, digits without leading zeros).
fn returncode(bytes: &[u8], at: usize) -> Option<(Option<i64>, usize)> {
    let at = expect(bytes, at, b",\"returncode\":")?;
    if let Some(end) = expect(bytes, at, b"null") {
        return Some((None, end));
    }
    let sign = usize::from(bytes.get(at) == Some(&b'-'));
    let digits = bytes[at + sign..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || (digits > 1 && bytes[at + sign] == b'0') {
        return None;
    }
    let end = at + sign + digits;
    let text = std::str::from_utf8(&bytes[at..end]).ok()?;
    Some((Some(text.parse().ok()?), end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use crate::ring::EventRing;
    use serde_json::{json, Map, Value};

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

    fn ring_with(chunks: &[&[u8]]) -> EventRing {
        let ring = EventRing::new(1 << 20, None).unwrap();
        for chunk in chunks {
            ring.append(EventType::Stdout, Some(chunk), &Map::new())
                .unwrap();
        }
        ring
    }

    fn same(a: &ReceivedPage, b: &ReceivedPage) -> bool {
        let jsons = |p: &ReceivedPage| -> Vec<String> {
            p.events.iter().map(|e| e.json().to_owned()).collect()
        };
        let texts = |p: &ReceivedPage| {
            p.events
                .iter()
                .map(|e| e.coalescable_text().map(str::to_owned))
                .collect::<Vec<_>>()
        };
        jsons(a) == jsons(b)
            && texts(a) == texts(b)
            && (a.next_cursor, a.has_more, a.first_seq, a.cursor_expired)
                == (b.next_cursor, b.has_more, b.first_seq, b.cursor_expired)
            && (a.dropped_events, a.dropped_bytes, a.closed)
                == (b.dropped_events, b.dropped_bytes, b.closed)
    }

    #[test]
    fn a_page_of_output_is_read_in_one_pass_like_the_general_parse() {
        let ring = ring_with(&[b"hello\n", b"\xff\xfe", "quote \" \u{1} é".as_bytes(), b""]);
        for cursor in 0..3 {
            let json = ring.read(cursor, 100, 0, false).unwrap().to_json();
            let fast = read_canonical(&json).expect("the agent's own layout");
            assert!(same(&fast, &ReceivedPage::parse(json.as_bytes()).unwrap()));
            let general: Value = serde_json::from_str(&json).unwrap();
            assert_eq!(fast.next_cursor, general["next_cursor"].as_u64().unwrap());
            assert_eq!(
                fast.events.len(),
                general["events"].as_array().unwrap().len()
            );
        }
        let empty = ring.read(ring.last_seq(), 100, 0, false).unwrap().to_json();
        assert_eq!(read_canonical(&empty).unwrap().events.len(), 0);
    }

    #[test]
    fn other_layouts_are_left_to_the_general_parse() {
        let ring = ring_with(&[b"x"]);
        let mut fields = Map::new();
        fields.insert("returncode".into(), json!(0));
        ring.append(EventType::Exit, None, &fields).unwrap();
        ring.close();
        let with_fields = ring.read(0, 100, 0, false).unwrap().to_json();
        assert!(read_canonical(&with_fields).is_none());
        let parsed = ReceivedPage::parse(with_fields.as_bytes()).unwrap();
        assert!(parsed.ends_stream() && parsed.events.len() == 2);

        let plain = ring_with(&[b"x"]).read(0, 100, 0, false).unwrap().to_json();
        let spaced = plain.replacen("\"next_cursor\":", "\"next_cursor\": ", 1);
        let missing = plain.replacen("\"has_more\":false,", "", 1);
        let trailing = format!("{plain} ");
        let zeros = plain.replacen("\"first_seq\":1", "\"first_seq\":01", 1);
        for other in [&spaced, &missing, &trailing, &zeros] {
            assert!(read_canonical(other).is_none(), "{other}");
        }
        // The general parse still takes what is valid JSON in another layout.
        assert_eq!(
            ReceivedPage::parse(spaced.as_bytes()).unwrap().events.len(),
            1
        );
    }

    proptest::proptest! {
        #[test]
        fn any_page_the_ring_writes_reads_the_same_both_ways(
            chunks in proptest::collection::vec(
                proptest::collection::vec(proptest::num::u8::ANY, 0..300), 0..12),
            cursor_at in 0usize..12,
            max_bytes in 0usize..70_000,
        ) {
            let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let ring = ring_with(&refs);
            let cursor = (cursor_at as u64).min(ring.last_seq());
            let json = ring.read(cursor, 100, max_bytes, false).unwrap().to_json();
            let fast = read_canonical(&json);
            proptest::prop_assert!(fast.is_some());
            let general = ReceivedPage::parse_general(json.as_bytes()).unwrap();
            proptest::prop_assert!(same(&fast.unwrap(), &general));
        }
    }

    #[test]
    fn the_state_travels_with_the_page_both_ways() {
        use crate::event::StreamKind;
        let ring = EventRing::of_kind(Some(StreamKind::Exec), 1 << 20, None).unwrap();
        let mut fields = Map::new();
        fields.insert("state".into(), json!("running"));
        ring.append(EventType::Status, None, &fields).unwrap();
        ring.append(EventType::Stdout, Some(b"x"), &Map::new())
            .unwrap();
        let output = ring.read(1, 100, 0, false).unwrap().to_json();
        let fast = read_canonical(&output).expect("output only: the fast path");
        let running = StreamStatus {
            state: Some(StreamState::Running),
            returncode: None,
        };
        assert_eq!(fast.status, Some(running));
        let exit = json!({"state": "failed", "returncode": -15, "signal": 15});
        ring.append(EventType::Exit, None, exit.as_object().unwrap())
            .unwrap();
        let empty = ring.read(3, 100, 0, false).unwrap().to_json();
        let failed = Some(StreamStatus {
            state: Some(StreamState::Failed),
            returncode: Some(-15),
        });
        assert_eq!(read_canonical(&empty).unwrap().status, failed);
        assert_eq!(
            ReceivedPage::parse_general(empty.as_bytes())
                .unwrap()
                .status,
            failed
        );
        let whole = ring.read(0, 100, 0, false).unwrap().to_json();
        assert_eq!(
            ReceivedPage::parse(whole.as_bytes()).unwrap().status,
            failed
        );
    }

    #[test]
    fn an_older_agents_page_without_state_shows_what_its_events_say() {
        let ts = "2026-11-29T10:04:45.123Z";
        let old = format!(
            r#"{{"events":[{{"seq":1,"timestamp":"{ts}","type":"exit","returncode":2,"state":"finished"}}],"next_cursor":1,"has_more":false,"first_seq":1,"cursor_expired":false,"dropped_events":0,"dropped_bytes":0,"closed":false}}"#
        );
        let received = ReceivedPage::parse(old.as_bytes()).unwrap();
        assert_eq!(received.status, None);
        let page = received.into_page();
        assert_eq!(page.status.state, Some(StreamState::Finished));
        assert_eq!(page.status.returncode, Some(2));
    }
}
