//! Length-framed messages on one byte stream: the unit of the gateway <-> agent protocol.
//! A frame is a kind, a JSON header and an opaque payload, so bulk bytes never pass through JSON.

use std::fmt;

/// The largest frame either side accepts (header and payload together). Larger stdin or file
/// contents travel as several frames; a peer that sends more is broken and is disconnected.
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// Bytes before the body: the body length (u32, big-endian) and the kind (u8).
pub(super) const PREFIX_BYTES: usize = 5;

/// Bytes of a frame that are neither its header nor its payload: the prefix and the header's
/// length.
pub const FRAME_OVERHEAD: usize = PREFIX_BYTES + 4;

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
    /// The gateway is still there (empty header and payload); sent only to an agent whose
    /// Hello says it takes them.
    Keepalive = 6,
}

impl FrameKind {
    pub(super) fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Hello,
            2 => Self::Request,
            3 => Self::Response,
            4 => Self::Events,
            5 => Self::Credit,
            6 => Self::Keepalive,
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

/// A frame borrowed from the bytes it was decoded from (see
/// [`FrameDecoder::feed_each`](super::FrameDecoder::feed_each)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef<'a> {
    pub kind: FrameKind,
    pub header: &'a [u8],
    pub payload: &'a [u8],
}

impl FrameRef<'_> {
    pub fn to_frame(&self) -> Frame {
        Frame::new(self.kind, self.header.to_vec(), self.payload.to_vec())
    }
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

    /// The wire form of a frame whose payload is text that `payload` writes straight after the
    /// header: a large payload (a page of events) is never built apart and copied in.
    /// `capacity` is the payload's expected size.
    pub fn encode_text(
        kind: FrameKind,
        header: &str,
        capacity: usize,
        payload: impl FnOnce(&mut String),
    ) -> Result<Vec<u8>, FrameError> {
        const LENGTHS: &str = "\0\0\0\0\0\0\0\0\0";
        let mut out = String::with_capacity(LENGTHS.len() + header.len() + capacity);
        // Placeholders for the two lengths and the kind, filled in once the payload is known.
        out.push_str(LENGTHS);
        out.push_str(header);
        payload(&mut out);
        let mut bytes = out.into_bytes();
        let body = bytes.len() - PREFIX_BYTES;
        if body > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge(body));
        }
        // Both lengths fit in u32: body <= MAX_FRAME_BYTES < u32::MAX.
        bytes[..4].copy_from_slice(&(body as u32).to_be_bytes());
        bytes[4] = kind as u8;
        bytes[5..9].copy_from_slice(&(header.len() as u32).to_be_bytes());
        Ok(bytes)
    }

    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: FrameKind, header: &str, payload: &[u8]) -> Frame {
        Frame::new(kind, header.as_bytes().to_vec(), payload.to_vec())
    }

    #[test]
    fn a_text_frame_written_in_place_is_the_frame_encoded_whole() {
        let header = r#"{"stream":"ex-1"}"#;
        let bytes = Frame::encode_text(FrameKind::Events, header, 4, |out| {
            out.push_str("{\"events\":[]}");
        })
        .unwrap();
        let whole = frame(FrameKind::Events, header, br#"{"events":[]}"#);
        assert_eq!(bytes, whole.encode().unwrap());
        let big = Frame::encode_text(FrameKind::Events, header, 0, |out| {
            out.push_str(&"x".repeat(MAX_FRAME_BYTES));
        });
        assert!(matches!(big, Err(FrameError::TooLarge(_))));
    }

    #[test]
    fn an_oversized_frame_is_not_encoded() {
        let big = Frame::new(FrameKind::Request, vec![], vec![0; MAX_FRAME_BYTES]);
        assert!(matches!(big.encode(), Err(FrameError::TooLarge(_))));
    }
}
