//! Length-framed messages on one byte stream: the unit of the gateway <-> agent protocol.
//! A frame is a kind, a JSON header and an opaque payload, so bulk bytes never pass through JSON.

use std::fmt;

/// The largest frame either side accepts (header and payload together). Larger stdin or file
/// contents travel as several frames; a peer that sends more is broken and is disconnected.
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// Bytes before the body: the body length (u32, big-endian) and the kind (u8).
const PREFIX_BYTES: usize = 5;

/// What a frame is for. The numbers are part of the wire format (docs/protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// First frame in each direction: protocol version and build.
    Hello = 1,
    /// A request with an id; answered by exactly one `Response`.
    Request = 2,
    /// The answer to a request, with the same id.
    Response = 3,
    /// Events of one subscribed stream, pushed by the agent.
    Events = 4,
    /// Flow control: the gateway grants a stream more bytes.
    Credit = 5,
}

impl FrameKind {
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Hello,
            2 => Self::Request,
            3 => Self::Response,
            4 => Self::Events,
            5 => Self::Credit,
            _ => return None,
        })
    }
}

/// One decoded frame: `header` is UTF-8 JSON text, `payload` raw bytes (often empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameKind,
    pub header: Vec<u8>,
    pub payload: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLarge(usize),
    UnknownKind(u8),
    Malformed(&'static str),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge(n) => write!(f, "frame of {n} bytes exceeds {MAX_FRAME_BYTES}"),
            Self::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            Self::Malformed(why) => write!(f, "malformed frame: {why}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl Frame {
    pub fn new(kind: FrameKind, header: Vec<u8>, payload: Vec<u8>) -> Self {
        Self {
            kind,
            header,
            payload,
        }
    }

    /// Appends the wire form to `out`: `len:u32 | kind:u8 | header_len:u32 | header | payload`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let body = 4 + self.header.len() + self.payload.len();
        if body > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge(body));
        }
        // Both lengths fit in u32: body <= MAX_FRAME_BYTES < u32::MAX.
        out.reserve(PREFIX_BYTES + body);
        out.extend_from_slice(&(body as u32).to_be_bytes());
        out.push(self.kind as u8);
        out.extend_from_slice(&(self.header.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.header);
        out.extend_from_slice(&self.payload);
        Ok(())
    }

    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }
}

/// Incremental decoder: feed it bytes as they arrive from any transport, take whole frames out.
/// Memory is bounded by one frame plus whatever was fed and not yet taken.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        // Compact lazily so that a long run of small frames does not shift the buffer each time.
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes fed but not yet returned as frames.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole frame, `Ok(None)` when more bytes are needed, or an error that leaves the
    /// stream unusable (the caller closes the channel).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let avail = &self.buf[self.start..];
        if avail.len() < PREFIX_BYTES {
            return Ok(None);
        }
        let body = u32::from_be_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize;
        if body > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge(body));
        }
        let kind = FrameKind::from_byte(avail[4]).ok_or(FrameError::UnknownKind(avail[4]))?;
        if body < 4 {
            return Err(FrameError::Malformed("body shorter than its header length"));
        }
        if avail.len() < PREFIX_BYTES + body {
            return Ok(None);
        }
        let body_bytes = &avail[PREFIX_BYTES..PREFIX_BYTES + body];
        let header_len =
            u32::from_be_bytes([body_bytes[0], body_bytes[1], body_bytes[2], body_bytes[3]])
                as usize;
        if header_len > body - 4 {
            return Err(FrameError::Malformed("header longer than the frame"));
        }
        let header = body_bytes[4..4 + header_len].to_vec();
        let payload = body_bytes[4 + header_len..].to_vec();
        self.start += PREFIX_BYTES + body;
        Ok(Some(Frame {
            kind,
            header,
            payload,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(kind: FrameKind, header: &str, payload: &[u8]) -> Frame {
        Frame::new(kind, header.as_bytes().to_vec(), payload.to_vec())
    }

    #[test]
    fn a_frame_round_trips() {
        let f = frame(
            FrameKind::Request,
            r#"{"id":1,"op":"exec.start"}"#,
            b"\x00\xffbytes",
        );
        let mut d = FrameDecoder::new();
        d.feed(&f.encode().unwrap());
        assert_eq!(d.next_frame().unwrap(), Some(f));
        assert_eq!(d.next_frame().unwrap(), None);
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn a_frame_split_at_every_byte_comes_out_whole() {
        let f = frame(FrameKind::Events, r#"{"stream":"ex-1"}"#, b"payload");
        let wire = f.encode().unwrap();
        for cut in 0..wire.len() {
            let mut d = FrameDecoder::new();
            d.feed(&wire[..cut]);
            assert_eq!(d.next_frame().unwrap(), None, "cut at {cut}");
            d.feed(&wire[cut..]);
            assert_eq!(d.next_frame().unwrap(), Some(f.clone()), "cut at {cut}");
        }
    }

    #[test]
    fn oversized_and_unknown_frames_are_errors() {
        let mut d = FrameDecoder::new();
        d.feed(&((MAX_FRAME_BYTES as u32) + 1).to_be_bytes());
        d.feed(&[2]);
        assert!(matches!(d.next_frame(), Err(FrameError::TooLarge(_))));

        let mut d = FrameDecoder::new();
        d.feed(&[0, 0, 0, 4, 99, 0, 0, 0, 0]);
        assert_eq!(d.next_frame(), Err(FrameError::UnknownKind(99)));

        let mut d = FrameDecoder::new();
        d.feed(&[0, 0, 0, 4, 2, 0, 0, 0, 9]);
        assert!(matches!(d.next_frame(), Err(FrameError::Malformed(_))));

        let big = Frame::new(FrameKind::Request, vec![], vec![0; MAX_FRAME_BYTES]);
        assert!(matches!(big.encode(), Err(FrameError::TooLarge(_))));
    }

    proptest! {
        #[test]
        fn any_sequence_of_frames_survives_any_chunking(
            frames in proptest::collection::vec(
                (1u8..=5, proptest::collection::vec(any::<u8>(), 0..64),
                 proptest::collection::vec(any::<u8>(), 0..300)), 0..8),
            chunk in 1usize..50,
        ) {
            let frames: Vec<Frame> = frames.into_iter().map(|(k, h, p)| {
                Frame::new(FrameKind::from_byte(k).unwrap(), h, p)
            }).collect();
            let mut wire = Vec::new();
            for f in &frames { f.encode_into(&mut wire).unwrap(); }
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            for piece in wire.chunks(chunk) {
                d.feed(piece);
                while let Some(f) = d.next_frame().unwrap() { got.push(f); }
            }
            prop_assert_eq!(got, frames);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut d = FrameDecoder::new();
            d.feed(&bytes);
            while let Ok(Some(_)) = d.next_frame() {}
        }
    }
}
