//! Tests of the event framing: JSON form, bounds, fields and lossless bytes.

use super::*;

const TS: &str = "2026-11-29T10:04:45.123Z";

/// Encodes all of `payload` as consecutive events, as the ring does.
fn encode_all(
    encoder: &mut Encoder,
    events: &mut Vec<Event>,
    kind: EventType,
    mut payload: Payload<'_>,
    fields: &Fields,
) {
    loop {
        let seq = events.len() as u64 + 1;
        let (event, taken) = encoder.next(seq, TS, kind, payload, fields);
        events.push(event);
        payload = match payload {
            Payload::Text(text) if taken < text.len() => Payload::Text(&text[taken..]),
            Payload::Bytes(bytes) if taken < bytes.len() => Payload::Bytes(&bytes[taken..]),
            _ => return,
        };
    }
}

/// Runs one stream's appends through the decoder and the encoder, as the ring does.
fn encode_stream(kind: EventType, chunks: &[&[u8]]) -> Vec<Event> {
    let mut decoder = StreamDecoder::default();
    let (mut encoder, mut events) = (Encoder::default(), Vec::new());
    let fields = Fields::default();
    let mut emit = |segment: Segment<'_>| {
        let payload = match segment {
            Segment::Text(text) => Payload::Text(text),
            Segment::Bytes(bytes) => Payload::Bytes(bytes),
        };
        encode_all(&mut encoder, &mut events, kind, payload, &fields);
    };
    for chunk in chunks {
        decoder.decode(chunk, &mut emit);
    }
    decoder.flush(&mut emit);
    events
}

/// The bytes a list of encoded events stands for, read back from their JSON alone.
fn bytes_from_json(events: &[Event]) -> Vec<u8> {
    let mut all = Vec::new();
    for event in events {
        let value: Value = serde_json::from_str(event.json()).unwrap();
        if let Some(text) = value.get("data").and_then(Value::as_str) {
            all.extend_from_slice(text.as_bytes());
        } else if let Some(b64) = value.get("data_b64").and_then(Value::as_str) {
            all.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap(),
            );
        }
    }
    all
}

#[test]
fn text_output_has_the_documented_json_form() {
    let events = encode_stream(EventType::Stdout, &[b"text"]);
    assert_eq!(
        events[0].json(),
        r#"{"seq":1,"timestamp":"2026-11-29T10:04:45.123Z","type":"stdout","data":"text"}"#
    );
    assert_eq!(events[0].timestamp(), TS);
    assert_eq!(events[0].coalescable_text(), Some("text"));
}

#[test]
fn bytes_that_are_not_utf8_travel_as_data_b64() {
    let events = encode_stream(EventType::Stderr, &[b"\xFF\xFE\x80\x81"]);
    assert_eq!(
        events[0].json(),
        r#"{"seq":1,"timestamp":"2026-11-29T10:04:45.123Z","type":"stderr","data_b64":"//6AgQ=="}"#
    );
    assert_eq!(events[0].coalescable_text(), None);
}

#[test]
fn fields_merge_at_the_top_level() {
    let map = serde_json::json!({"returncode": 0, "signal": null})
        .as_object()
        .unwrap()
        .clone();
    let event = encode(
        7,
        TS,
        EventType::Exit,
        Payload::None,
        &Fields::new(&map).unwrap(),
    );
    let value: Value = serde_json::from_str(event.json()).unwrap();
    assert_eq!(value["seq"], 7);
    assert_eq!(value["type"], "exit");
    assert_eq!(value["returncode"], 0);
    assert!(value["signal"].is_null());
    assert_eq!(event.timestamp(), TS);
}

#[test]
fn reserved_field_names_are_refused() {
    for key in RESERVED_KEYS {
        let mut map = Map::new();
        map.insert(key.to_owned(), Value::from(1));
        let err = Fields::new(&map).unwrap_err();
        assert_eq!(err.rule, "event.reserved-field");
        assert!(err.message.contains(key));
    }
}

#[test]
fn fields_of_exactly_the_limit_are_taken_and_one_byte_more_is_not() {
    // `"note":"…"` is 9 bytes of framing around the value.
    let sized = |len: usize| {
        let mut map = Map::new();
        map.insert("note".into(), Value::from("x".repeat(len - 9)));
        Fields::new(&map)
    };
    assert_eq!(sized(MAX_FIELDS_JSON).unwrap().0.len(), MAX_FIELDS_JSON);
    let err = sized(MAX_FIELDS_JSON + 1).unwrap_err();
    assert_eq!(err.rule, "event.fields-too-large");
    assert!(err.message.contains("take 8193 bytes"), "{}", err.message);
    assert!(err.message.contains("the limit is 8192"), "{}", err.message);
}

#[test]
fn only_stdout_and_stderr_are_output() {
    let output: Vec<EventType> = EventType::ALL
        .into_iter()
        .filter(|kind| kind.is_output())
        .collect();
    assert_eq!(output, [EventType::Stdout, EventType::Stderr]);
    let status = encode(
        1,
        TS,
        EventType::Status,
        Payload::Text("ok"),
        &Fields::default(),
    );
    assert_eq!(
        status.data_len(),
        0,
        "only output counts as what a command wrote"
    );
}

#[test]
fn encoded_len_is_the_length_of_the_json() {
    let event = encode(
        1,
        TS,
        EventType::Stdout,
        Payload::Text("hi"),
        &Fields::default(),
    );
    let json = r#"{"seq":1,"timestamp":"2026-11-29T10:04:45.123Z","type":"stdout","data":"hi"}"#;
    assert_eq!(event.encoded_len(), json.len());
    assert_eq!(event.json(), json);
}

#[test]
fn the_largest_event_leaves_room_for_a_page_envelope_in_the_smallest_page() {
    assert!(MAX_EVENT_JSON <= crate::ring::events_budget(0));
}

#[test]
fn the_data_budget_fills_an_event_of_the_largest_seq_to_the_bound() {
    let fields = Fields::new(serde_json::json!({"state": "running"}).as_object().unwrap()).unwrap();
    for kind in EventType::ALL {
        for fields in [Fields::default(), fields.clone()] {
            // The framing with an empty `data_b64` is what every byte of budget comes on top of.
            let empty = encode(u64::MAX, TS, kind, Payload::Bytes(b""), &fields);
            assert_eq!(
                empty.encoded_len() + data_budget(kind, &fields),
                MAX_EVENT_JSON,
                "{kind:?} {fields:?}"
            );
        }
    }
}

#[test]
fn binary_data_is_cut_at_max_event_data_even_beside_the_largest_fields() {
    let large = Fields(format!("\"k\":\"{}\"", "x".repeat(MAX_FIELDS_JSON - 6)));
    let bytes = vec![0xFF; 3 * MAX_EVENT_DATA];
    for fields in [Fields::default(), large] {
        let (event, taken) =
            Encoder::default().next(1, TS, EventType::Progress, Payload::Bytes(&bytes), &fields);
        assert_eq!(taken, MAX_EVENT_DATA);
        assert!(event.encoded_len() <= MAX_EVENT_JSON);
    }
}

#[test]
fn the_encoder_keeps_its_buffer_from_event_to_event() {
    // Full events are the common case under load: each must not allocate the buffer anew.
    let mut encoder = Encoder::default();
    let text = "\"".repeat(MAX_EVENT_DATA);
    let fields = Fields::default();
    encoder.next(1, TS, EventType::Stdout, Payload::Text(&text), &fields);
    let kept = encoder.buf.capacity();
    assert!(kept >= MAX_EVENT_JSON - 8, "{kept}");
    encoder.next(2, TS, EventType::Stdout, Payload::Text("x"), &fields);
    assert_eq!(encoder.buf.capacity(), kept);
}

#[test]
fn oversized_fields_are_refused() {
    let mut map = Map::new();
    map.insert("note".into(), Value::from("x".repeat(MAX_FIELDS_JSON)));
    assert_eq!(
        Fields::new(&map).unwrap_err().rule,
        "event.fields-too-large"
    );
}

#[test]
fn event_types_parse_by_name_only() {
    for kind in EventType::ALL {
        assert_eq!(EventType::parse(kind.as_str()).unwrap(), kind);
    }
    let err = EventType::parse("STDOUT").unwrap_err();
    assert_eq!(err.rule, "event.type");
    assert!(err.message.contains("'STDOUT'"));
}

#[test]
fn a_large_append_becomes_consecutive_events_of_bounded_data() {
    let text = "0123456789abcdef".repeat(4096); // 64 KiB
    let events = encode_stream(EventType::Stdout, &[text.as_bytes()]);
    assert_eq!(events.len(), 4);
    assert!(events.iter().all(|e| e.encoded_len() <= MAX_EVENT_JSON));
    assert_eq!(bytes_from_json(&events), text.as_bytes());
}

#[test]
fn control_characters_are_resplit_so_every_event_fits_its_bound() {
    let data = vec![0x01u8; 1 << 20];
    let events = encode_stream(EventType::Stdout, &[&data]);
    assert!(events.iter().all(|e| e.encoded_len() <= MAX_EVENT_JSON));
    assert!(events.len() > (1 << 20) * 6 / MAX_EVENT_JSON);
    assert_eq!(bytes_from_json(&events), data);
}

#[test]
fn the_largest_possible_event_fits_the_bound() {
    let fields = Fields(format!("\"k\":\"{}\"", "x".repeat(MAX_FIELDS_JSON - 6)));
    for kind in EventType::ALL {
        let (bytes, text) = (
            vec![0xFF; MAX_EVENT_DATA * 2],
            "\u{1}".repeat(MAX_EVENT_DATA * 2),
        );
        for payload in [Payload::Bytes(&bytes), Payload::Text(&text)] {
            let (event, taken) = Encoder::default().next(u64::MAX, TS, kind, payload, &fields);
            assert!(event.encoded_len() <= MAX_EVENT_JSON, "{kind:?}");
            assert!(taken > 0);
        }
    }
}

#[test]
fn the_encoder_writes_what_encode_writes_when_the_data_fits_one_event() {
    let map = serde_json::json!({"state": "running"});
    let fields = Fields::new(map.as_object().unwrap()).unwrap();
    let mut encoder = Encoder::default();
    let cases = [
        (
            EventType::Stdout,
            Payload::Text("a \"line\"\n"),
            Fields::default(),
        ),
        (
            EventType::Stderr,
            Payload::Bytes(b"\xFF\x00"),
            Fields::default(),
        ),
        (EventType::Status, Payload::None, fields.clone()),
        (EventType::Progress, Payload::Text("50%"), fields),
    ];
    for (seq, (kind, payload, fields)) in (1..).zip(cases) {
        let (event, _) = encoder.next(seq, TS, kind, payload, &fields);
        let whole = encode(seq, TS, kind, payload, &fields);
        assert_eq!(event.json(), whole.json());
        assert_eq!(event.coalescable_text(), whole.coalescable_text());
    }
}

#[test]
fn decimal_len_counts_digits() {
    assert_eq!(decimal_len(0), 1);
    assert_eq!(decimal_len(9), 1);
    assert_eq!(decimal_len(10), 2);
    assert_eq!(decimal_len(u64::MAX), 20);
    for n in [0, 7, 10, 99, 12_345, u64::MAX] {
        let mut out = String::from("x");
        push_decimal(&mut out, n);
        assert_eq!(out, format!("x{n}"));
    }
}

proptest::proptest! {
    #[test]
    fn random_bytes_round_trip_exactly_through_the_json_form(
        data in proptest::collection::vec(proptest::num::u8::ANY, 0..2000),
        split in 0usize..2000,
    ) {
        let split = split.min(data.len());
        let events = encode_stream(EventType::Stdout, &[&data[..split], &data[split..]]);
        proptest::prop_assert_eq!(bytes_from_json(&events), data);
    }

    /// However an event is made (encoded, or read back by each reader), it carries the count
    /// of output bytes its JSON stands for.
    #[test]
    fn every_reader_agrees_on_the_output_bytes_of_an_event(
        data in proptest::collection::vec(proptest::num::u8::ANY, 0..2000),
        kind in proptest::sample::select(vec![EventType::Stdout, EventType::Stderr]),
    ) {
        for event in encode_stream(kind, &[&data]) {
            let want = bytes_from_json(std::slice::from_ref(&event)).len();
            proptest::prop_assert_eq!(event.data_len(), want);
            let json = event.json();
            proptest::prop_assert_eq!(Event::from_json(json).unwrap().data_len(), want);
            proptest::prop_assert_eq!(Event::from_encoded(json).unwrap().data_len(), want);
            let (canonical, _) = Event::read_canonical(json).unwrap();
            proptest::prop_assert_eq!(canonical.data_len(), want);
        }
    }
}

#[test]
fn an_encoded_event_is_rebuilt_from_its_json() {
    let fields = Fields::new(serde_json::json!({"state": "running"}).as_object().unwrap()).unwrap();
    let ts = timestamp::now();
    let cases = [
        encode(
            7,
            &ts,
            EventType::Stdout,
            Payload::Text("a\"b\n"),
            &Fields::default(),
        ),
        encode(
            12_345,
            &ts,
            EventType::Stderr,
            Payload::Bytes(b"\xff\x00"),
            &Fields::default(),
        ),
        encode(1, &ts, EventType::Status, Payload::None, &fields),
        encode(9, &ts, EventType::Exit, Payload::None, &Fields::default()),
        // Text that is not output: never coalesced with its neighbours.
        encode(
            3,
            &ts,
            EventType::Error,
            Payload::Text("boom"),
            &Fields::default(),
        ),
    ];
    for original in cases {
        let rebuilt = Event::from_encoded(original.json()).unwrap();
        assert_eq!(rebuilt.seq(), original.seq());
        assert_eq!(rebuilt.kind(), original.kind());
        assert_eq!(rebuilt.json(), original.json());
        assert_eq!(rebuilt.coalescable_text(), original.coalescable_text());
        assert_eq!(rebuilt.timestamp(), original.timestamp());
    }
    assert!(Event::from_encoded("{\"seq\":x}").is_none());
    assert!(Event::from_encoded("").is_none());
}

#[test]
fn an_event_stays_32_bytes() {
    // Rings hold millions of events: a field more must not grow every one of them.
    assert_eq!(std::mem::size_of::<Event>(), 32);
}
