//! The gateway <-> agent protocol: one byte stream each way carrying framed requests, responses
//! and pushed events. `frame` is the wire unit; the request set is described in docs/protocol.md.

pub mod client;
pub mod decoder;
pub mod frame;
pub mod message;
pub mod relay;
pub mod server;
pub mod subscription;

pub use decoder::{FeedError, FrameDecoder};
pub use frame::{Frame, FrameError, FrameKind, FrameRef, MAX_FRAME_BYTES};

#[cfg(test)]
mod tests;
