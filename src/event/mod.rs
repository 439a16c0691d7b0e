//! The event model: what a stream carries (`seq`, timestamp, type, bytes or fields) and its
//! JSON framing, encoded once at append time with every event's size bounded.

mod canonical;
mod decode;
pub mod json;
pub mod stream;
pub mod timestamp;
pub mod utf8;

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::policy::PolicyError;
pub use stream::{StreamKind, StreamState, StreamStatus};
pub use timestamp::Timestamp;
pub use utf8::{Segment, StreamDecoder};

/// Raw data carried by one event; a larger append becomes consecutive events.
pub const MAX_EVENT_DATA: usize = 16 * 1024;

/// The most bytes one encoded event may take. With the page envelope it fits the smallest page
/// budget ([`crate::ring::MIN_PAGE_BYTES`]), so every read makes progress.
pub const MAX_EVENT_JSON: usize = 32 * 1024 - 512;

/// The most bytes the extra fields of one event may take once encoded.
pub const MAX_FIELDS_JSON: usize = 8 * 1024;

/// Keys the framing owns; an event's fields may not use them.
pub const RESERVED_KEYS: [&str; 6] = ["seq", "seq_start", "timestamp", "type", "data", "data_b64"];

/// What an event is about. Output types decode their bytes incrementally, per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Status,
    Stdout,
    Stderr,
    Error,
    Exit,
    Fs,
    Metrics,
    Progress,
    /// Metrics a command printed of itself (`::metric` lines), in the metrics stream beside
    /// the samples: a type of its own, so that a reader of samples never takes one for a sample.
    Reported,
}

impl EventType {
    pub const ALL: [EventType; 9] = [
        Self::Status,
        Self::Stdout,
        Self::Stderr,
        Self::Error,
        Self::Exit,
        Self::Fs,
        Self::Metrics,
        Self::Progress,
        Self::Reported,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
            Self::Error => "error",
            Self::Exit => "exit",
            Self::Fs => "fs",
            Self::Metrics => "metrics",
            Self::Progress => "progress",
            Self::Reported => "reported",
        }
    }

    pub fn parse(name: &str) -> Result<Self, PolicyError> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == name)
            .ok_or_else(|| {
                PolicyError::new(
                    "event.type",
                    "unknown event type: expected one of status, stdout, stderr, error, exit, fs, \
                 metrics, progress, reported",
                    name,
                )
            })
    }

    /// Output is a byte stream cut at arbitrary points: its data is decoded incrementally.
    pub fn is_output(self) -> bool {
        matches!(self, Self::Stdout | Self::Stderr)
    }
}

/// One encoded event. The JSON is built once, at append time, and shared by every reader: the
/// event is cheap to clone (the JSON is reference-counted in the one allocation that holds it).
#[derive(Debug, Clone)]
pub struct Event {
    seq: u64,
    kind: EventType,
    json: Arc<str>,
    /// Where the escaped `data` string starts, for text output without fields (0 otherwise):
    /// such events can be coalesced by concatenating their escaped data.
    text_start: u32,
    /// The output bytes it carries ([`Event::data_len`]), known when it is made: evicting an
    /// event (under the ring's lock) must not scan its JSON. At most the event's JSON length,
    /// so 16 bits hold it (and the event stays 32 bytes, as rings hold millions of them).
    data_len: u16,
}

// An event's output bytes never exceed its JSON's length, which this bounds.
const _: () = assert!(MAX_EVENT_JSON <= u16::MAX as usize);

impl Event {
    pub fn seq(&self) -> u64 {
        self.seq
    }

    pub fn kind(&self) -> EventType {
        self.kind
    }

    /// The encoded JSON object.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// Encoded size in bytes: what the ring's budget and the page budget count.
    pub fn encoded_len(&self) -> usize {
        self.json.len()
    }

    /// The output bytes the event carries (its `data` as UTF-8, or its `data_b64` decoded): what
    /// a reader that loses the event loses of what the command wrote. 0 for other events.
    pub fn data_len(&self) -> usize {
        self.data_len as usize
    }

    /// The event's timestamp, sliced from its JSON (the framing puts it at a fixed place).
    pub fn timestamp(&self) -> &str {
        let start = "{\"seq\":".len() + decimal_len(self.seq) + ",\"timestamp\":\"".len();
        self.json
            .get(start..start + timestamp::TIMESTAMP_LEN)
            .unwrap_or_default()
    }

    /// Rebuilds an event from the JSON [`encode`] produced (as an exec log stores it), or `None`
    /// when `json` does not start with this module's framing.
    pub fn from_encoded(json: &str) -> Option<Event> {
        let rest = json.strip_prefix("{\"seq\":")?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let seq: u64 = rest.get(..digits)?.parse().ok()?;
        let type_at =
            "{\"seq\":,\"timestamp\":\"\",\"type\":\"".len() + digits + timestamp::TIMESTAMP_LEN;
        let after_type = json.get(type_at..)?;
        let kind = EventType::ALL.into_iter().find(|k| {
            after_type
                .strip_prefix(k.as_str())
                .is_some_and(|tail| tail.starts_with('"'))
        })?;
        // Output events carry data only, so text output is `…"type":"stdout","data":"…"}`.
        let data_key = "\",\"data\":\"";
        let text_start = match after_type[kind.as_str().len()..].starts_with(data_key) {
            true if kind.is_output() => {
                u32::try_from(type_at + kind.as_str().len() + data_key.len()).unwrap_or(0)
            }
            _ => 0,
        };
        Some(Event {
            seq,
            kind,
            data_len: scanned_data_len(kind, json),
            json: json.into(),
            text_start,
        })
    }

    /// The escaped text of an output event that may be coalesced with its neighbours.
    pub fn coalescable_text(&self) -> Option<&str> {
        if self.text_start == 0 {
            return None;
        }
        self.json.get(self.text_start as usize..self.json.len() - 2)
    }
}

/// Extra fields of an event, validated and encoded once (the members without the braces).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields(String);

impl Fields {
    pub fn new(map: &Map<String, Value>) -> Result<Self, PolicyError> {
        if map.is_empty() {
            return Ok(Self::default());
        }
        if let Some(key) = map.keys().find(|k| RESERVED_KEYS.contains(&k.as_str())) {
            return Err(PolicyError::new(
                "event.reserved-field",
                "this field name belongs to the event framing (seq, seq_start, timestamp, type, \
                 data, data_b64)",
                key,
            ));
        }
        // Serialized in place: wrapping the map in a `Value` would clone it first.
        let object = serde_json::to_string(map).map_err(|e| {
            PolicyError::without_echo("event.fields", format!("fields cannot be encoded: {e}"))
        })?;
        let members = &object[1..object.len() - 1];
        if members.len() > MAX_FIELDS_JSON {
            return Err(PolicyError::without_echo(
                "event.fields-too-large",
                format!(
                    "the fields of one event take {} bytes once encoded; the limit is {}",
                    members.len(),
                    MAX_FIELDS_JSON
                ),
            ));
        }
        Ok(Self(members.to_owned()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The data of one event before encoding.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    None,
    Text(&'a str),
    Bytes(&'a [u8]),
}

/// Bytes of escaped data (or base64) an event of `kind` with `fields` may carry and still
/// encode within [`MAX_EVENT_JSON`], whatever its seq.
fn data_budget(kind: EventType, fields: &Fields) -> usize {
    let framing = "{\"seq\":,\"timestamp\":\"\",\"type\":\"\",\"data_b64\":\"\"}".len()
        + decimal_len(u64::MAX)
        + timestamp::TIMESTAMP_LEN
        + kind.as_str().len()
        + if fields.is_empty() {
            0
        } else {
            1 + fields.0.len()
        };
    MAX_EVENT_JSON - framing
}

/// Encodes the events of a stream into one buffer that lives as long as the stream's writer,
/// then copies each event into an allocation of its exact size: one allocation per event (the
/// reference-counted JSON), and no intermediate strings or growth on the append path.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: String,
}

impl Encoder {
    /// Encodes as much of `payload` as one event may carry (see [`MAX_EVENT_DATA`] and
    /// [`MAX_EVENT_JSON`]): text is cut at a character boundary by its raw and escaped size,
    /// bytes by their base64 size. Returns the event and how many bytes of the payload's text or
    /// bytes it holds; call again with the rest until all is taken.
    pub fn next(
        &mut self,
        seq: u64,
        timestamp: &str,
        kind: EventType,
        payload: Payload<'_>,
        fields: &Fields,
    ) -> (Event, usize) {
        let budget = data_budget(kind, fields);
        let bytes_per_event = MAX_EVENT_DATA.min(budget / 4 * 3);
        self.buf.clear();
        let (text_start, taken) = write_event(
            &mut self.buf,
            seq,
            timestamp,
            kind,
            payload,
            fields,
            (MAX_EVENT_DATA, budget, bytes_per_event),
        );
        let event = Event {
            seq,
            kind,
            json: Arc::from(self.buf.as_str()),
            text_start,
            data_len: output_len(kind, taken),
        };
        // A buffer grown by one oversized event is not kept for the life of the stream.
        if self.buf.capacity() > 2 * MAX_EVENT_JSON {
            self.buf = String::new();
        }
        (event, taken)
    }
}

/// Encodes one event with all of its data: `{"seq":…,"timestamp":…,"type":…[,"data"|"data_b64":…]
/// [,fields…]}`. The ring goes through [`Encoder::next`], which also bounds the event's size.
pub fn encode(
    seq: u64,
    timestamp: &str,
    kind: EventType,
    payload: Payload<'_>,
    fields: &Fields,
) -> Event {
    let mut out = String::new();
    let unbounded = (usize::MAX, usize::MAX, usize::MAX);
    let (text_start, taken) =
        write_event(&mut out, seq, timestamp, kind, payload, fields, unbounded);
    Event {
        seq,
        kind,
        json: Arc::from(out),
        text_start,
        data_len: output_len(kind, taken),
    }
}

/// The output bytes an event made from `taken` bytes of data carries (only output counts).
fn output_len(kind: EventType, taken: usize) -> u16 {
    if kind.is_output() {
        u16::try_from(taken).unwrap_or(u16::MAX)
    } else {
        0
    }
}

/// The output bytes of an event read back from its JSON: its `data` as UTF-8, or its
/// `data_b64` decoded; 0 for events that are not output. Output events carry no fields, so
/// the first such key is the data's.
pub(crate) fn scanned_data_len(kind: EventType, json: &str) -> u16 {
    if !kind.is_output() {
        return 0;
    }
    let len = if let Some(at) = memchr::memmem::find(json.as_bytes(), b",\"data_b64\":\"") {
        let b64 = &json.as_bytes()[at + ",\"data_b64\":\"".len()..];
        let len = memchr::memchr(b'"', b64).unwrap_or(b64.len());
        let padding = b64[..len].iter().rev().take_while(|&&b| b == b'=').count();
        (len / 4 * 3).saturating_sub(padding)
    } else {
        match memchr::memmem::find(json.as_bytes(), b",\"data\":\"") {
            Some(at) => json::unescaped_len(&json.as_bytes()[at + ",\"data\":\"".len()..]),
            None => 0,
        }
    };
    u16::try_from(len).unwrap_or(u16::MAX)
}

/// Writes one event's JSON into `out`, taking at most `max_raw` bytes of text escaped to at most
/// `max_escaped`, or at most `max_bytes` of bytes. Returns where the escaped text of a
/// coalescable event starts (0 if it is not one) and how much of the payload was taken.
fn write_event(
    out: &mut String,
    seq: u64,
    timestamp: &str,
    kind: EventType,
    payload: Payload<'_>,
    fields: &Fields,
    (max_raw, max_escaped, max_bytes): (usize, usize, usize),
) -> (u32, usize) {
    out.reserve(
        64 + fields.0.len()
            + match payload {
                Payload::None => 0,
                Payload::Text(t) => t.len().min(max_escaped) + 8,
                Payload::Bytes(b) => b.len().min(max_bytes) / 3 * 4 + 4,
            },
    );
    out.push_str("{\"seq\":");
    push_decimal(out, seq);
    out.push_str(",\"timestamp\":\"");
    out.push_str(timestamp);
    out.push_str("\",\"type\":\"");
    out.push_str(kind.as_str());
    out.push('"');
    let (mut text_start, mut taken) = (0, 0);
    match payload {
        Payload::None => {}
        Payload::Text(text) => {
            out.push_str(",\"data\":\"");
            if kind.is_output() && fields.is_empty() {
                text_start = u32::try_from(out.len()).unwrap_or(0);
            }
            taken = json::escape_prefix_into(out, text, max_raw, max_escaped);
            out.push('"');
        }
        Payload::Bytes(bytes) => {
            taken = bytes.len().min(max_bytes);
            out.push_str(",\"data_b64\":\"");
            base64::engine::general_purpose::STANDARD.encode_string(&bytes[..taken], out);
            out.push('"');
        }
    }
    if !fields.is_empty() {
        out.push(',');
        out.push_str(&fields.0);
    }
    out.push('}');
    (text_start, taken)
}

/// Number of decimal digits of `n`.
pub fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Appends the decimal digits of `n`: `itoa` formats without `fmt` machinery or a UTF-8
/// check, which matters when it runs once per event.
pub fn push_decimal(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

#[cfg(test)]
mod tests;
