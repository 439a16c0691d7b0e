//! Pages read in one pass: the layout `Page::to_json` writes, byte for byte, with every event in
//! the canonical layout without fields (`Event::read_canonical`). A page in any other layout (an
//! exit or status event with fields, whitespace, another key order) is `None` here and is read
//! by the general parser, so this is only ever a faster way to the same page.

use super::page::ReceivedPage;
use crate::event::Event;

/// The page, when `json` is exactly in the agent's layout.
pub(super) fn read_canonical(json: &str) -> Option<ReceivedPage> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use crate::ring::EventRing;
    use serde_json::{json, Map, Value};

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
}
