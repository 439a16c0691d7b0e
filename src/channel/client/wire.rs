//! The headers the gateway writes and reads (docs/protocol.md), and the error a channel reports:
//! JSON in and out of frames, checked here so the channel logic handles typed values only.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::channel::{Frame, FrameKind, MAX_FRAME_BYTES};

/// The protocol this build speaks; peers with another number cannot talk to it.
pub const PROTOCOL_VERSION: u32 = 1;

/// This build, as announced in `Hello`.
pub const BUILD: &str = env!("CARGO_PKG_VERSION");

/// The longest operation name accepted (`exec.start`, `file.read`, …).
const MAX_OP_LEN: usize = 64;

/// Why a channel failed or a request could not be sent. `code` is one of the protocol's error
/// codes; `message` never contains request arguments (they may hold secrets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelError {
    pub code: &'static str,
    pub message: String,
}

impl ChannelError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The error as the JSON object of a failed response: `{"code":…,"message":…}`.
    pub fn to_json(&self) -> String {
        serde_json::json!({"code": self.code, "message": self.message}).to_string()
    }
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ChannelError {}

/// A peer's `Hello`. Unknown members are ignored, so later builds may announce more.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Hello {
    pub protocol: u32,
    pub build: String,
    pub role: String,
}

impl Hello {
    pub fn gateway() -> Self {
        Self {
            protocol: PROTOCOL_VERSION,
            build: BUILD.to_owned(),
            role: "gateway".to_owned(),
        }
    }

    pub fn frame(&self) -> Frame {
        let header = serde_json::to_vec(self).unwrap_or_default();
        Frame::new(FrameKind::Hello, header, Vec::new())
    }

    /// Checks that the peer is an agent speaking our protocol.
    pub fn check_agent(&self) -> Result<(), ChannelError> {
        if self.protocol != PROTOCOL_VERSION {
            return Err(ChannelError::new(
                "protocol_mismatch",
                format!(
                    "protocol mismatch: this gateway speaks protocol {PROTOCOL_VERSION} (build \
                     {BUILD}) but the agent speaks protocol {} (build {}); install the same \
                     version of modal-workspace-core on both sides",
                    self.protocol,
                    crate::policy::echo(&self.build),
                ),
            ));
        }
        if self.role != "agent" {
            return Err(ChannelError::new(
                "unavailable",
                format!(
                    "the peer announced itself as {} instead of an agent; connect to the \
                     agent's socket or `mwc-agent connect`",
                    crate::policy::echo(&self.role)
                ),
            ));
        }
        Ok(())
    }
}

/// Builds a `Request` frame. `args_json` must be a JSON object; it is copied into the header as
/// is (no re-encoding of what may be large, like an exec's environment).
pub fn request_frame(
    id: u64,
    op: &str,
    args_json: &str,
    payload: Vec<u8>,
) -> Result<Frame, ChannelError> {
    if op.is_empty()
        || op.len() > MAX_OP_LEN
        || !op
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_')
    {
        return Err(ChannelError::new(
            "invalid_argument",
            format!(
                "op must be 1-{MAX_OP_LEN} of a-z, 0-9, '.' and '_' (got {})",
                crate::policy::echo(op)
            ),
        ));
    }
    let args: &RawValue = serde_json::from_str(args_json).map_err(|_| {
        ChannelError::new("invalid_argument", "args must be valid JSON (an object)")
    })?;
    if !args.get().starts_with('{') {
        return Err(ChannelError::new(
            "invalid_argument",
            "args must be a JSON object",
        ));
    }
    #[derive(Serialize)]
    struct Header<'a> {
        id: u64,
        op: &'a str,
        args: &'a RawValue,
    }
    let header = serde_json::to_vec(&Header { id, op, args })
        .map_err(|e| ChannelError::new("internal", format!("cannot encode a request: {e}")))?;
    let size = 4 + header.len() + payload.len();
    if size > MAX_FRAME_BYTES {
        return Err(ChannelError::new(
            "limit",
            format!(
                "a request of {size} bytes (header and payload) exceeds the frame limit of \
                 {MAX_FRAME_BYTES}; send large stdin or files in several requests"
            ),
        ));
    }
    Ok(Frame::new(FrameKind::Request, header, payload))
}

/// Builds a `Credit` frame granting `stream` more bytes.
pub fn credit_frame(stream: &str, bytes: usize) -> Frame {
    let header = serde_json::json!({"stream": stream, "bytes": bytes}).to_string();
    Frame::new(FrameKind::Credit, header.into_bytes(), Vec::new())
}

/// A `Response` header: `result` on success, `error` on failure (raw JSON, handed on as is).
#[derive(Debug, Deserialize)]
pub struct ResponseHeader<'a> {
    pub id: u64,
    pub ok: bool,
    #[serde(borrow, default)]
    pub result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
}

/// The error of a failed response, read for its code (the channel reacts to some codes).
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// An `Events` header: which stream the page belongs to.
#[derive(Debug, Deserialize)]
pub struct EventsHeader {
    pub stream: String,
}

/// Parses a header, turning a malformed one into the channel's failure.
pub fn parse_header<'a, T: Deserialize<'a>>(
    kind: FrameKind,
    header: &'a [u8],
) -> Result<T, ChannelError> {
    serde_json::from_slice(header).map_err(|e| {
        ChannelError::new(
            "unavailable",
            format!("the agent sent a malformed {kind:?} header ({e}); the channel is closed"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_header_carries_the_args_unchanged() {
        let frame = request_frame(
            7,
            "exec.start",
            r#"{"command":"echo hi","env":{}}"#,
            b"in".to_vec(),
        )
        .unwrap();
        assert_eq!(frame.kind, FrameKind::Request);
        assert_eq!(
            std::str::from_utf8(&frame.header).unwrap(),
            r#"{"id":7,"op":"exec.start","args":{"command":"echo hi","env":{}}}"#
        );
        assert_eq!(frame.payload, b"in");
    }

    #[test]
    fn bad_ops_args_and_sizes_are_refused() {
        assert_eq!(
            request_frame(1, "", "{}", vec![]).unwrap_err().code,
            "invalid_argument"
        );
        assert_eq!(
            request_frame(1, "Exec Start", "{}", vec![])
                .unwrap_err()
                .code,
            "invalid_argument"
        );
        assert_eq!(
            request_frame(1, "ping", "[1]", vec![]).unwrap_err().code,
            "invalid_argument"
        );
        assert_eq!(
            request_frame(1, "ping", "{", vec![]).unwrap_err().code,
            "invalid_argument"
        );
        let big = vec![0; MAX_FRAME_BYTES];
        assert_eq!(
            request_frame(1, "exec.input", "{}", big).unwrap_err().code,
            "limit"
        );
    }

    #[test]
    fn a_mismatched_hello_names_both_versions_and_builds() {
        let theirs = Hello {
            protocol: 2,
            build: "9.9.9".into(),
            role: "agent".into(),
        };
        let err = theirs.check_agent().unwrap_err();
        assert_eq!(err.code, "protocol_mismatch");
        assert!(err.message.contains("protocol 1"), "{}", err.message);
        assert!(err.message.contains("protocol 2"), "{}", err.message);
        assert!(err.message.contains(BUILD) && err.message.contains("9.9.9"));
        let gateway = Hello::gateway();
        assert!(gateway.check_agent().is_err());
    }
}
