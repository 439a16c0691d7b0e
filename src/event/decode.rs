//! Events received in encoded form (pages of another process's ring): checked to be in the
//! canonical layout that `encode` writes, so a mirror can page and coalesce them like its own.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::{decimal_len, timestamp::TIMESTAMP_LEN, Event, EventType, MAX_EVENT_JSON};
use crate::policy::PolicyError;

/// An event with no fields: only the framing's keys. Duplicate keys are refused by serde.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Plain<'a> {
    #[serde(borrow)]
    #[serde(rename = "type")]
    kind: &'a str,
    #[allow(dead_code)]
    seq: u64,
    #[allow(dead_code)]
    timestamp: IgnoredAny,
    #[allow(dead_code)]
    data: Option<IgnoredAny>,
    #[allow(dead_code)]
    data_b64: Option<IgnoredAny>,
}

/// Any event: the framing's keys; other keys are its fields.
#[derive(Deserialize)]
struct Head<'a> {
    seq: u64,
    #[serde(borrow)]
    timestamp: &'a str,
    #[serde(borrow)]
    #[serde(rename = "type")]
    kind: &'a str,
    seq_start: Option<u64>,
}

impl Event {
    /// Takes one event as another ring encoded it. Refused: invalid JSON, a coalesced event
    /// (`seq_start`: a mirror keeps one seq per event), an unknown type, more than
    /// [`MAX_EVENT_JSON`] bytes, or a layout other than `{"seq":…,"timestamp":"…","type":"…"…}`
    /// (the ring slices the timestamp and the text of output events at fixed places).
    pub fn from_json(json: &str) -> Result<Event, PolicyError> {
        let bad = |why: &str| {
            PolicyError::without_echo(
                "event.encoding",
                format!("a received event is not in the canonical encoding: {why}"),
            )
        };
        if json.len() > MAX_EVENT_JSON {
            return Err(bad("it is larger than one event may be"));
        }
        let head: Head<'_> = serde_json::from_str(json).map_err(|_| bad("invalid framing"))?;
        if head.seq_start.is_some() {
            return Err(bad(
                "it is coalesced (seq_start); mirrors take single events",
            ));
        }
        if head.seq == 0 {
            return Err(bad("seq 0 (seqs start at 1)"));
        }
        let kind = EventType::parse(head.kind)?;
        if head.timestamp.len() != TIMESTAMP_LEN {
            return Err(bad("the timestamp has the wrong length"));
        }
        let prefix_len = "{\"seq\":,\"timestamp\":\"\",\"type\":\"\"".len()
            + decimal_len(head.seq)
            + TIMESTAMP_LEN
            + kind.as_str().len();
        let mut expected = String::with_capacity(prefix_len);
        expected.push_str("{\"seq\":");
        expected.push_str(&head.seq.to_string());
        expected.push_str(",\"timestamp\":\"");
        expected.push_str(head.timestamp);
        expected.push_str("\",\"type\":\"");
        expected.push_str(kind.as_str());
        expected.push('"');
        if !json.starts_with(&expected) {
            return Err(bad("the keys are not in the order seq, timestamp, type"));
        }
        // The text of an output event may be concatenated with its neighbours' only when the
        // event is exactly the framing plus `data` as its last member.
        let data_start = prefix_len + ",\"data\":\"".len();
        let coalescable = kind.is_output()
            && json[prefix_len..].starts_with(",\"data\":\"")
            && json.ends_with("\"}")
            && json.len() >= data_start + 2
            && serde_json::from_str::<Plain<'_>>(json).is_ok_and(|p| p.kind == kind.as_str());
        Ok(Event {
            seq: head.seq,
            kind,
            data_len: super::scanned_data_len(kind, json),
            json: json.into(),
            text_start: if coalescable {
                u32::try_from(data_start).unwrap_or(0)
            } else {
                0
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{encode, Fields, Payload};
    use super::*;
    use serde_json::{json, Map, Value};

    const TS: &str = "2026-11-29T10:04:45.123Z";

    fn fields(value: Value) -> Fields {
        Fields::new(value.as_object().unwrap_or(&Map::new())).unwrap()
    }

    #[test]
    fn every_encoded_event_reads_back_identically() {
        let cases = [
            encode(
                1,
                TS,
                EventType::Stdout,
                Payload::Text("a \"quoted\"\n"),
                &Fields::default(),
            ),
            encode(
                2,
                TS,
                EventType::Stderr,
                Payload::Bytes(b"\xff\xfe"),
                &Fields::default(),
            ),
            encode(
                3,
                TS,
                EventType::Stdout,
                Payload::Text(""),
                &Fields::default(),
            ),
            encode(
                40,
                TS,
                EventType::Exit,
                Payload::None,
                &fields(json!({"returncode": 0})),
            ),
            encode(
                41,
                TS,
                EventType::Status,
                Payload::Text("x"),
                &fields(json!({"s": "r"})),
            ),
        ];
        for original in cases {
            let back = Event::from_json(original.json()).unwrap();
            assert_eq!(back.seq(), original.seq());
            assert_eq!(back.kind(), original.kind());
            assert_eq!(back.json(), original.json());
            assert_eq!(back.timestamp(), TS);
            assert_eq!(back.coalescable_text(), original.coalescable_text());
        }
    }

    #[test]
    fn non_canonical_or_coalesced_events_are_refused() {
        let refused = [
            r#"{"timestamp":"2026-11-29T10:04:45.123Z","seq":1,"type":"stdout","data":"a"}"#,
            r#"{"seq":2,"seq_start":1,"timestamp":"2026-11-29T10:04:45.123Z","type":"stdout","data":"ab"}"#,
            r#"{"seq":1,"timestamp":"2026","type":"stdout","data":"a"}"#,
            r#"{"seq":1,"timestamp":"2026-11-29T10:04:45.123Z","type":"shout"}"#,
            r#"{"seq":0,"timestamp":"2026-11-29T10:04:45.123Z","type":"exit"}"#,
            r#"{"seq":1,"timestamp":"2026-11-29T10:04:45.123Z","type":"stdout","data":"a""#,
            "[]",
        ];
        for json in refused {
            assert!(Event::from_json(json).is_err(), "{json}");
        }
        let huge = format!(
            r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":"{}"}}"#,
            "x".repeat(MAX_EVENT_JSON)
        );
        assert!(Event::from_json(&huge).is_err());
    }

    #[test]
    fn an_event_of_exactly_the_bound_is_taken_and_one_byte_more_is_not() {
        let sized = |len: usize| {
            let framing = encode(
                1,
                TS,
                EventType::Stdout,
                Payload::Text(""),
                &Fields::default(),
            );
            let text = "x".repeat(len - framing.encoded_len());
            encode(
                1,
                TS,
                EventType::Stdout,
                Payload::Text(&text),
                &Fields::default(),
            )
        };
        let largest = sized(MAX_EVENT_JSON);
        assert_eq!(
            Event::from_json(largest.json()).unwrap().json(),
            largest.json()
        );
        let err = Event::from_json(sized(MAX_EVENT_JSON + 1).json()).unwrap_err();
        assert!(
            err.message.contains("larger than one event may be"),
            "{}",
            err.message
        );
    }

    #[test]
    fn output_with_extra_members_is_kept_but_never_coalesced() {
        let json = format!(r#"{{"seq":1,"timestamp":"{TS}","type":"stdout","data":"a","x":"}}"}}"#);
        let event = Event::from_json(&json).unwrap();
        assert_eq!(event.coalescable_text(), None);
        assert_eq!(event.json(), json);
    }
}
