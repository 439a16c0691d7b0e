//! Events received in the exact layout `encode` writes, read in one pass over their bytes: the
//! gateway takes every pushed page this way, so each byte of output is scanned once instead of
//! once per parse (the page, the event's head, its text). Anything else is left to
//! [`Event::from_json`], which decides; this reader only ever agrees with it.

use super::json::{find_escape, has_control, unescaped_len};
use super::timestamp::TIMESTAMP_LEN;
use super::{Event, EventType, MAX_EVENT_JSON};

impl Event {
    /// Reads the event that starts `json`, when it is in the canonical layout with no fields:
    /// `{"seq":N,"timestamp":"…","type":"…"}`, optionally with `"data":"…"` or
    /// `"data_b64":"…"` before the closing brace. Returns it and how many bytes of `json` it
    /// took. `None` for any other event, or text with an escape `encode` never writes (a
    /// `\u` surrogate): [`Event::from_json`] then takes it, or refuses it.
    ///
    /// Accepts exactly what `from_json` accepts among such events and builds the same event:
    /// a decimal seq of 1 or more without leading zeros, a timestamp of 24 bytes without
    /// escapes, a known type, valid string escapes, at most [`MAX_EVENT_JSON`] bytes.
    pub fn read_canonical(json: &str) -> Option<(Event, usize)> {
        let bytes = json.as_bytes();
        let mut at = expect(bytes, 0, b"{\"seq\":")?;
        let digits = bytes[at..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 || (digits > 1 && bytes[at] == b'0') {
            return None;
        }
        let seq: u64 = json.get(at..at + digits)?.parse().ok()?;
        if seq == 0 {
            return None;
        }
        at = expect(bytes, at + digits, b",\"timestamp\":\"")?;
        let stamp = bytes.get(at..at + TIMESTAMP_LEN)?;
        if find_escape(stamp) != TIMESTAMP_LEN {
            return None;
        }
        at = expect(bytes, at + TIMESTAMP_LEN, b"\",\"type\":\"")?;
        let kind = EventType::ALL.into_iter().find(|k| {
            bytes[at..].starts_with(k.as_str().as_bytes())
                && bytes.get(at + k.as_str().len()) == Some(&b'"')
        })?;
        at += kind.as_str().len() + 1;
        let (mut text_start, mut data_len) = (0, 0);
        for (key, text) in [(&b",\"data\":\""[..], true), (b",\"data_b64\":\"", false)] {
            if let Some(start) = expect(bytes, at, key) {
                let close = string_end(bytes, start)?;
                at = close + 1;
                if kind.is_output() {
                    data_len = if text {
                        unescaped_len(&bytes[start..])
                    } else {
                        let padding = bytes[start..close].iter().rev().take_while(|&&b| b == b'=');
                        ((close - start) / 4 * 3).saturating_sub(padding.count())
                    };
                }
                if text && kind.is_output() {
                    text_start = start;
                }
                break;
            }
        }
        let end = expect(bytes, at, b"}")?;
        // A JSON string may not hold a raw control character; the framing around the strings
        // was matched byte for byte, so the whole event holds none either.
        if end > MAX_EVENT_JSON || has_control(&bytes[..end]) {
            return None;
        }
        let event = Event {
            seq,
            kind,
            json: json.get(..end)?.into(),
            text_start: u32::try_from(text_start).ok()?,
            data_len: u16::try_from(data_len).ok()?,
        };
        Some((event, end))
    }
}

/// The offset after `token` when `bytes` has it at `at`.
fn expect(bytes: &[u8], at: usize, token: &[u8]) -> Option<usize> {
    bytes
        .get(at..)?
        .starts_with(token)
        .then_some(at + token.len())
}

/// Where the JSON string whose content starts at `start` ends (the offset of its closing
/// quote), checking its escapes; `None` for a string that is cut short or holds a malformed
/// escape, or escapes a surrogate (the general parser judges pairs). Raw control characters
/// are the caller's to refuse (`has_control`, once over the whole event).
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start;
    loop {
        // A quote ends the string; anything else memchr2 stops at is a backslash.
        at += memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
        match bytes[at] {
            b'"' => return Some(at),
            _ => {
                at += match *bytes.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' => {
                        let hex = std::str::from_utf8(bytes.get(at + 2..at + 6)?).ok()?;
                        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                            return None;
                        }
                        let unit = u32::from_str_radix(hex, 16).ok()?;
                        if (0xD800..0xE000).contains(&unit) {
                            return None;
                        }
                        6
                    }
                    _ => return None,
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{encode, Fields, Payload};
    use super::*;
    use serde_json::{json, Map, Value};

    const TS: &str = "2026-11-29T10:04:45.123Z";

    fn no_fields() -> Fields {
        Fields::default()
    }

    /// The one-pass reader agrees with the general parse: same event when it reads one, and
    /// nothing the general parse refuses.
    fn agrees(json: &str) {
        let general = Event::from_json(json);
        if let Some((event, used)) = Event::read_canonical(json) {
            // What follows the event is the caller's (the next event of a page, or its end).
            let general = match used == json.len() {
                true => general,
                false => Event::from_json(&json[..used]),
            };
            let general = general.unwrap_or_else(|e| panic!("{json}: {}", e.message));
            assert_eq!(event.seq(), general.seq());
            assert_eq!(event.kind(), general.kind());
            assert_eq!(event.json(), general.json());
            assert_eq!(event.coalescable_text(), general.coalescable_text());
        }
    }

    #[test]
    fn encoded_events_without_fields_are_read_in_one_pass() {
        let cases = [
            encode(
                1,
                TS,
                EventType::Stdout,
                Payload::Text("a \"quoted\"\n\u{1}\\ é"),
                &no_fields(),
            ),
            encode(
                2,
                TS,
                EventType::Stderr,
                Payload::Bytes(b"\xff"),
                &no_fields(),
            ),
            encode(3, TS, EventType::Stdout, Payload::Text(""), &no_fields()),
            encode(40, TS, EventType::Exit, Payload::None, &no_fields()),
            encode(41, TS, EventType::Status, Payload::Text("x"), &no_fields()),
        ];
        for original in cases {
            let (event, used) = Event::read_canonical(original.json()).unwrap();
            assert_eq!(used, original.json().len());
            assert_eq!(event.json(), original.json());
            assert_eq!(event.coalescable_text(), original.coalescable_text());
            agrees(original.json());
        }
    }

    #[test]
    fn it_stops_at_the_end_of_the_event() {
        let one = encode(7, TS, EventType::Stdout, Payload::Text("x}"), &no_fields());
        let two = format!("{},{}", one.json(), one.json());
        let (event, used) = Event::read_canonical(&two).unwrap();
        assert_eq!(used, one.json().len());
        assert_eq!(event.json(), one.json());
    }

    #[test]
    fn events_it_does_not_take_are_left_to_the_general_parse() {
        let with_fields = Fields::new(&fields(json!({"returncode": 0}))).unwrap();
        let exit = encode(9, TS, EventType::Exit, Payload::None, &with_fields);
        let skipped = [
            exit.json().to_owned(),
            format!(r#"{{"seq":01,"timestamp":"{TS}","type":"exit"}}"#),
            format!(r#"{{"seq":0,"timestamp":"{TS}","type":"exit"}}"#),
            format!(r#"{{"seq":99999999999999999999,"timestamp":"{TS}","type":"exit"}}"#),
            format!(r#"{{"seq":1,"timestamp":"{TS}","type":"shout"}}"#),
            format!(r#"{{"seq":1,"timestamp":"{TS}","type":"stdoutx"}}"#),
            r#"{"seq":1,"timestamp":"2026-11-29T10:04:45.12\"","type":"exit"}"#.to_owned(),
            format!(r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":"\ud834\udd1e"}}"#),
            format!(r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":"\x"}}"#),
            format!(r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":"\u12"}}"#),
            format!("{{\"seq\":1,\"timestamp\":\"{TS}\",\"type\":\"stdout\",\"data\":\"a\u{1}\"}}"),
            format!(r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":"a}}"#),
            format!(r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":1}}"#),
            format!(r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":"a","x":1}}"#),
            format!(r#"{{"seq":2,"seq_start":1,"timestamp":"{TS}","type":"stdout"}}"#),
            format!(
                r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":"{}"}}"#,
                "x".repeat(MAX_EVENT_JSON)
            ),
        ];
        for json in &skipped {
            assert!(Event::read_canonical(json).is_none(), "{json}");
        }
    }

    #[test]
    fn an_event_of_exactly_the_bound_is_read_and_one_byte_more_is_not() {
        let sized = |len: usize| {
            let framing = encode(1, TS, EventType::Stdout, Payload::Text(""), &no_fields());
            let text = "x".repeat(len - framing.encoded_len());
            encode(1, TS, EventType::Stdout, Payload::Text(&text), &no_fields())
        };
        let largest = sized(MAX_EVENT_JSON);
        let (event, used) = Event::read_canonical(largest.json()).unwrap();
        assert_eq!((used, event.json()), (MAX_EVENT_JSON, largest.json()));
        assert!(Event::read_canonical(sized(MAX_EVENT_JSON + 1).json()).is_none());
    }

    fn fields(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    proptest::proptest! {
        #[test]
        fn it_agrees_with_the_general_parse_on_any_text(
            text in "\\PC*|[\\x00-\\x1f\"\\\\/a€𝄞]{0,40}",
            seq in 1u64..u64::MAX,
            kind in proptest::sample::select(EventType::ALL.to_vec()),
        ) {
            let event = encode(seq, TS, kind, Payload::Text(&text), &no_fields());
            let (read, used) = Event::read_canonical(event.json()).unwrap();
            proptest::prop_assert_eq!(used, event.json().len());
            proptest::prop_assert_eq!(read.json(), event.json());
            agrees(event.json());
        }

        #[test]
        fn it_never_takes_what_the_general_parse_refuses(
            body in "[\\x00-\\x7f]{0,12}|\\\\u[0-9a-fA-FxX]{0,5}|\\\\[\\x00-\\x7f]",
            cut in 0usize..80,
        ) {
            // Damaged and odd events: valid prefixes with arbitrary bodies, cut anywhere.
            let json = format!(r#"{{"seq":5,"timestamp":"{TS}","type":"stdout","data":"{body}"}}"#);
            agrees(&json);
            let end = json.len().min(cut);
            if json.is_char_boundary(end) {
                agrees(&json[..end]);
            }
        }
    }
}
