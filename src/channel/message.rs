//! The headers of the channel's frames as types, shared by the agent's server and the gateway's
//! client: Hello, requests, responses, events and credit (docs/protocol.md), and error codes.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::frame::{Frame, FrameError, FrameKind};

/// The protocol this build speaks. Peers with another number refuse each other.
pub const PROTOCOL_VERSION: u32 = 1;

/// This build's version, sent in `Hello` (builds may differ while the protocol is equal).
pub const BUILD: &str = env!("CARGO_PKG_VERSION");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Agent,
    Gateway,
}

/// The first frame in each direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub build: String,
    pub role: Role,
    /// The gateway's proof that it is the gateway: the workspace's channel key, which the agent
    /// was given at start (never by a command). An agent started with a key serves nothing to a
    /// peer without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The gateway's promise: it sends a frame at least this often (a `Keepalive` when it has
    /// nothing else to say), so an agent may close a connection silent for
    /// [`KEEPALIVE_MISSES`] times as long: its gateway is gone (killed, its container
    /// replaced) and nothing else would ever end the connection and its `connect` process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_seconds: Option<u32>,
    /// The agent's: it takes `Keepalive` frames. A gateway sends them only to an agent that
    /// says so (an older agent, kept in a snapshot's image, does not know the frame).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keepalive: bool,
}

impl Hello {
    pub fn ours(role: Role) -> Self {
        Self {
            protocol: PROTOCOL_VERSION,
            build: BUILD.to_owned(),
            role,
            key: None,
            keepalive_seconds: None,
            keepalive: role == Role::Agent,
        }
    }
}

/// How often a gateway sends a frame on an idle channel unless configured otherwise.
pub const KEEPALIVE_SECONDS: u32 = 10;
/// The shortest and longest keepalive a gateway may promise.
pub const KEEPALIVE_RANGE: std::ops::RangeInclusive<u32> = 1..=300;
/// How many keepalives in a row an agent waits for before it closes the connection.
pub const KEEPALIVE_MISSES: u32 = 3;

/// A request's header; its payload travels beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeader {
    pub id: u64,
    pub op: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub args: Map<String, Value>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    Ok(Option::<Map<String, Value>>::deserialize(d)?.unwrap_or_default())
}

/// The error codes of docs/protocol.md (docs/architecture.md §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidArgument,
    NotFound,
    Conflict,
    Permission,
    Limit,
    Timeout,
    Unavailable,
    Internal,
    ProtocolMismatch,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid_argument",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::Permission => "permission",
            Self::Limit => "limit",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
            Self::ProtocolMismatch => "protocol_mismatch",
        }
    }
}

/// What went wrong with a request: a code, a message safe to show, and the argument at fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::InvalidArgument,
            message: message.into(),
            field: Some(field.to_owned()),
        }
    }
}

impl std::fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}]", self.message, self.code.as_str())
    }
}

impl std::error::Error for ErrorBody {}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseHeader {
    pub id: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsHeader {
    pub stream: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditHeader {
    pub stream: String,
    pub bytes: u64,
}

/// A frame of `kind` with `header` serialized as JSON.
pub fn frame<T: Serialize>(
    kind: FrameKind,
    header: &T,
    payload: Vec<u8>,
) -> Result<Frame, FrameError> {
    let header =
        serde_json::to_vec(header).map_err(|_| FrameError::Malformed("unserializable header"))?;
    Ok(Frame::new(kind, header, payload))
}

/// The wire bytes of a response to request `id`.
pub fn response_bytes(id: u64, result: Result<Value, ErrorBody>, payload: Vec<u8>) -> Vec<u8> {
    let header = match result {
        Ok(result) => ResponseHeader {
            id,
            ok: true,
            result: Some(result),
            error: None,
        },
        Err(error) => ResponseHeader {
            id,
            ok: false,
            result: None,
            error: Some(error),
        },
    };
    let encoded = frame(FrameKind::Response, &header, payload).and_then(|f| f.encode());
    match encoded {
        Ok(bytes) => bytes,
        // Only a payload past the frame limit gets here: say so instead of the result.
        Err(e) => response_bytes(
            id,
            Err(ErrorBody::new(
                ErrorCode::Limit,
                format!("the response does not fit in one frame: {e}"),
            )),
            Vec::new(),
        ),
    }
}

/// Parses a frame's header as `T`.
pub fn parse_header<T: DeserializeOwned>(frame: &Frame) -> Result<T, String> {
    serde_json::from_slice(&frame.header).map_err(|e| format!("bad {:?} header: {e}", frame.kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_have_the_documented_json() {
        let hello = serde_json::to_value(Hello::ours(Role::Agent)).unwrap();
        assert_eq!(
            hello,
            serde_json::json!({"protocol": 1, "build": BUILD, "role": "agent", "keepalive": true})
        );
        // A gateway's Hello says nothing of keepalives until it promises one.
        let gateway = serde_json::to_value(Hello::ours(Role::Gateway)).unwrap();
        assert_eq!(
            gateway,
            serde_json::json!({"protocol": 1, "build": BUILD, "role": "gateway"})
        );
        let req: RequestHeader = serde_json::from_str(r#"{"id":3,"op":"ping"}"#).unwrap();
        assert!(req.args.is_empty());
        let req: RequestHeader =
            serde_json::from_str(r#"{"id":3,"op":"ping","args":null}"#).unwrap();
        assert!(req.args.is_empty());
        let bytes = response_bytes(7, Err(ErrorBody::invalid("path", "bad path")), Vec::new());
        let mut decoder = super::super::FrameDecoder::new();
        decoder.feed(&bytes);
        let frame = decoder.next_frame().unwrap().unwrap();
        let header: Value = serde_json::from_slice(&frame.header).unwrap();
        assert_eq!(
            header,
            serde_json::json!({"id": 7, "ok": false, "error": {"code": "invalid_argument", "message": "bad path", "field": "path"}})
        );
    }

    #[test]
    fn an_oversized_response_becomes_a_limit_error() {
        let bytes = response_bytes(1, Ok(Value::Null), vec![0; super::super::MAX_FRAME_BYTES]);
        assert!(bytes.len() < 1024);
        assert!(String::from_utf8_lossy(&bytes).contains("\"limit\""));
    }
}
