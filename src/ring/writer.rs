//! The writing side of a ring, under its writer lock: the stream decoders, numbering, the
//! clock, and the encoding of each append into events.

use super::RingError;
use crate::event::{
    self, Encoder, Event, EventType, Fields, Payload, Segment, StreamDecoder, Timestamp,
};

/// What appends share, under the ring's writer lock.
#[derive(Debug)]
pub(super) struct Writer {
    pub(super) next_seq: u64,
    stdout: StreamDecoder,
    stderr: StreamDecoder,
    pub(super) closed: bool,
    /// The last timestamp formatted, by its millisecond: appends within one millisecond share
    /// it instead of formatting it again.
    clock: (u64, Timestamp),
    /// The buffer events are encoded in, reused under this lock from append to append.
    encoder: Encoder,
}

impl Writer {
    pub(super) fn new() -> Self {
        Self {
            next_seq: 1,
            stdout: StreamDecoder::default(),
            stderr: StreamDecoder::default(),
            closed: false,
            clock: (u64::MAX, Timestamp::from_millis(0)),
            encoder: Encoder::default(),
        }
    }

    pub(super) fn timestamp(&mut self) -> Timestamp {
        let now = event::timestamp::now_millis();
        if self.clock.0 != now {
            self.clock = (now, Timestamp::from_millis(now));
        }
        self.clock.1
    }

    pub(super) fn check_open(&self) -> Result<(), RingError> {
        if self.closed {
            return Err(RingError::Closed);
        }
        Ok(())
    }

    /// Decodes, splits and encodes the data of one append into `batch`, numbering as it goes.
    pub(super) fn collect(
        &mut self,
        kind: EventType,
        data: Option<&[u8]>,
        fields: &Fields,
        timestamp: &Timestamp,
        batch: &mut Vec<Event>,
    ) {
        match (kind, data) {
            (EventType::Stdout | EventType::Stderr, Some(data))
                if self.decoder(kind).held() == 0 && !data.is_empty() =>
            {
                // Most output is whole UTF-8 text: it is what decoding would give, so it goes
                // straight to the encoder (valid UTF-8 cannot end inside a character).
                match std::str::from_utf8(data) {
                    Ok(text) => self.push(batch, timestamp, kind, Payload::Text(text), fields),
                    Err(_) => self.decode_output(kind, data, fields, timestamp, batch),
                }
            }
            (EventType::Stdout | EventType::Stderr, Some(data)) => {
                self.decode_output(kind, data, fields, timestamp, batch)
            }
            (EventType::Exit, _) => self.flush_outputs(timestamp, batch),
            _ => {}
        }
        if !kind.is_output() {
            match data {
                Some([]) => self.push(batch, timestamp, kind, Payload::Text(""), fields),
                Some(data) => event::utf8::decode_whole(data, &mut |segment| {
                    self.push_segment(batch, timestamp, kind, segment, fields)
                }),
                None => self.push(batch, timestamp, kind, Payload::None, fields),
            }
        }
    }

    /// Decodes output through the stream's decoder, which holds back an unfinished character.
    fn decode_output(
        &mut self,
        kind: EventType,
        data: &[u8],
        fields: &Fields,
        timestamp: &Timestamp,
        batch: &mut Vec<Event>,
    ) {
        // Taken out for the call, so the callback may encode through `self`.
        let mut decoder = std::mem::take(self.decoder(kind));
        decoder.decode(data, &mut |segment| {
            self.push_segment(batch, timestamp, kind, segment, fields)
        });
        *self.decoder(kind) = decoder;
    }

    /// Emits what the output decoders hold back: it can no longer be completed.
    pub(super) fn flush_outputs(&mut self, timestamp: &Timestamp, batch: &mut Vec<Event>) {
        for kind in [EventType::Stdout, EventType::Stderr] {
            let mut decoder = std::mem::take(self.decoder(kind));
            decoder.flush(&mut |segment| {
                self.push_segment(batch, timestamp, kind, segment, &Fields::default())
            });
            *self.decoder(kind) = decoder;
        }
    }

    fn decoder(&mut self, kind: EventType) -> &mut StreamDecoder {
        match kind {
            EventType::Stderr => &mut self.stderr,
            _ => &mut self.stdout,
        }
    }

    fn push_segment(
        &mut self,
        batch: &mut Vec<Event>,
        timestamp: &Timestamp,
        kind: EventType,
        segment: Segment<'_>,
        fields: &Fields,
    ) {
        let payload = match segment {
            Segment::Text(text) => Payload::Text(text),
            Segment::Bytes(bytes) => Payload::Bytes(bytes),
        };
        self.push(batch, timestamp, kind, payload, fields);
    }

    /// Encodes `payload` as one event, or as consecutive events when it is larger than one
    /// event may carry.
    fn push(
        &mut self,
        batch: &mut Vec<Event>,
        timestamp: &Timestamp,
        kind: EventType,
        mut payload: Payload<'_>,
        fields: &Fields,
    ) {
        loop {
            let (event, taken) =
                self.encoder
                    .next(self.next_seq, timestamp.as_str(), kind, payload, fields);
            batch.push(event);
            self.next_seq += 1;
            payload = match payload {
                Payload::Text(text) if taken < text.len() => Payload::Text(&text[taken..]),
                Payload::Bytes(bytes) if taken < bytes.len() => Payload::Bytes(&bytes[taken..]),
                _ => return,
            };
        }
    }
}
