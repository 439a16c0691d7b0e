//! The gateway's reading and writing of the headers in `channel::message`: zero-copy views where
//! the client only passes JSON on (request args, response results), and the channel's error.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::channel::message::{
    self, CreditHeader, ErrorCode, Hello, Role, BUILD, PROTOCOL_VERSION,
};
use crate::channel::{Frame, FrameKind, MAX_FRAME_BYTES};

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
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code: code.as_str(),
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

pub fn gateway_hello(key: Option<&str>, keepalive_seconds: u32) -> Frame {
    let hello = Hello {
        key: key.map(str::to_owned),
        keepalive_seconds: Some(keepalive_seconds),
        ..Hello::ours(Role::Gateway)
    };
    // A Hello of strings always serializes.
    message::frame(FrameKind::Hello, &hello, Vec::new())
        .unwrap_or_else(|_| Frame::new(FrameKind::Hello, Vec::new(), Vec::new()))
}

/// The frame that says the gateway is still there.
pub fn keepalive() -> Frame {
    Frame::new(FrameKind::Keepalive, Vec::new(), Vec::new())
}

/// Checks that the peer is an agent speaking our protocol.
pub fn check_agent(hello: &Hello) -> Result<(), ChannelError> {
    if hello.protocol != PROTOCOL_VERSION {
        return Err(ChannelError::new(
            ErrorCode::ProtocolMismatch,
            format!(
                "protocol mismatch: this gateway speaks protocol {PROTOCOL_VERSION} (build \
                 {BUILD}) but the agent speaks protocol {} (build {}); install the same version \
                 of modal-workspace-core on both sides",
                hello.protocol,
                crate::policy::echo(&hello.build),
            ),
        ));
    }
    if hello.role != Role::Agent {
        return Err(ChannelError::new(
            ErrorCode::Unavailable,
            "the peer announced itself as a gateway instead of an agent; connect to the agent's \
             socket or `mwc-agent connect`",
        ));
    }
    Ok(())
}

/// Builds a `Request` frame. `args_json` must be a JSON object; it is copied into the header as
/// is (no re-encoding of what may be large, like an exec's environment).
pub fn request_frame(
    id: u64,
    op: &str,
    args_json: &str,
    payload: Vec<u8>,
) -> Result<Frame, ChannelError> {
    let op_ok = !op.is_empty()
        && op.len() <= MAX_OP_LEN
        && op
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_');
    if !op_ok {
        return Err(ChannelError::new(
            ErrorCode::InvalidArgument,
            format!(
                "op must be 1-{MAX_OP_LEN} of a-z, 0-9, '.' and '_' (got {})",
                crate::policy::echo(op)
            ),
        ));
    }
    let args: &RawValue = serde_json::from_str(args_json)
        .map_err(|_| ChannelError::new(ErrorCode::InvalidArgument, "args must be a JSON object"))?;
    if !args.get().starts_with('{') {
        return Err(ChannelError::new(
            ErrorCode::InvalidArgument,
            "args must be a JSON object",
        ));
    }
    /// `message::RequestHeader` with its args borrowed as they were encoded.
    #[derive(Serialize)]
    struct RequestView<'a> {
        id: u64,
        op: &'a str,
        args: &'a RawValue,
    }
    let header = serde_json::to_vec(&RequestView { id, op, args }).map_err(|e| {
        ChannelError::new(ErrorCode::Internal, format!("cannot encode a request: {e}"))
    })?;
    let size = 4 + header.len() + payload.len();
    if size > MAX_FRAME_BYTES {
        return Err(ChannelError::new(
            ErrorCode::Limit,
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
    let header = CreditHeader {
        stream: stream.to_owned(),
        bytes: bytes as u64,
    };
    message::frame(FrameKind::Credit, &header, Vec::new())
        .unwrap_or_else(|_| Frame::new(FrameKind::Credit, Vec::new(), Vec::new()))
}

/// `message::ResponseHeader` read without parsing `result` and `error`: they go on to the
/// caller as the JSON text they arrived as.
#[derive(Debug, Deserialize)]
pub struct ResponseView<'a> {
    pub id: u64,
    pub ok: bool,
    #[serde(borrow, default)]
    pub result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
}

/// A protocol error code read leniently: a code this build does not know is `internal`.
pub fn error_code(error_json: &str) -> (ErrorCode, String) {
    #[derive(Deserialize)]
    struct Lenient {
        code: serde_json::Value,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_str::<Lenient>(error_json) {
        Ok(e) => (
            serde_json::from_value(e.code).unwrap_or(ErrorCode::Internal),
            e.message,
        ),
        Err(_) => (ErrorCode::Internal, String::new()),
    }
}

/// Parses a header, turning a malformed one into the channel's failure.
pub fn parse_header<'a, T: Deserialize<'a>>(
    kind: FrameKind,
    header: &'a [u8],
) -> Result<T, ChannelError> {
    serde_json::from_slice(header).map_err(|e| {
        ChannelError::new(
            ErrorCode::Unavailable,
            format!("the agent sent a malformed {kind:?} header ({e}); the channel is closed"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(op: &str, args: &str, payload: Vec<u8>) -> &'static str {
        request_frame(1, op, args, payload).unwrap_err().code
    }

    #[test]
    fn a_request_header_carries_the_args_unchanged() {
        let args = r#"{"command":"echo hi","env":{}}"#;
        let frame = request_frame(7, "exec.start", args, b"in".to_vec()).unwrap();
        assert_eq!(frame.kind, FrameKind::Request);
        assert_eq!(
            std::str::from_utf8(&frame.header).unwrap(),
            r#"{"id":7,"op":"exec.start","args":{"command":"echo hi","env":{}}}"#
        );
        assert_eq!(frame.payload, b"in");
        let parsed: message::RequestHeader = serde_json::from_slice(&frame.header).unwrap();
        assert_eq!(parsed.op, "exec.start");
    }

    #[test]
    fn bad_ops_args_and_sizes_are_refused() {
        assert_eq!(refused("", "{}", vec![]), "invalid_argument");
        assert_eq!(refused("Exec Start", "{}", vec![]), "invalid_argument");
        assert_eq!(refused("ping", "[1]", vec![]), "invalid_argument");
        assert_eq!(refused("ping", "{", vec![]), "invalid_argument");
        assert_eq!(
            refused("exec.input", "{}", vec![0; MAX_FRAME_BYTES]),
            "limit"
        );
    }

    #[test]
    fn a_mismatched_hello_names_both_versions_and_builds() {
        let theirs = Hello {
            protocol: 2,
            build: "9.9.9".into(),
            ..Hello::ours(Role::Agent)
        };
        let err = check_agent(&theirs).unwrap_err();
        assert_eq!(err.code, "protocol_mismatch");
        assert!(err.message.contains("protocol 1"), "{}", err.message);
        assert!(err.message.contains("protocol 2"), "{}", err.message);
        assert!(err.message.contains(BUILD) && err.message.contains("9.9.9"));
        assert!(check_agent(&Hello::ours(Role::Gateway)).is_err());
        assert!(check_agent(&Hello::ours(Role::Agent)).is_ok());
    }

    #[test]
    fn unknown_error_codes_read_as_internal() {
        let (code, message) = error_code(r#"{"code":"not_found","message":"gone"}"#);
        assert_eq!((code, message.as_str()), (ErrorCode::NotFound, "gone"));
        assert_eq!(error_code(r#"{"code":"novel"}"#).0, ErrorCode::Internal);
    }
}
