//! The agent's side of one connection: the Hello exchange, requests dispatched concurrently
//! (each its own task, answered in any order), subscriptions, and one bounded outgoing queue.
//! A connection whose first request is `port.connect` becomes a relay instead (`relay`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};

use super::decoder::FrameDecoder;
use super::frame::{Frame, FrameKind};
use super::message::{
    frame, parse_header, response_bytes, CreditHeader, ErrorBody, ErrorCode, Hello, RequestHeader,
    Role, KEEPALIVE_MISSES, KEEPALIVE_RANGE,
};
use super::relay::{self, RelayFuture, RELAY_OP};
use super::subscription::{pump, Control, EventSource};
use crate::ring::MIN_PAGE_BYTES;

/// Frames waiting to be written per connection (responses and pages together). Pages are read
/// only when there is room, so a slow peer holds at most this many frames in memory.
pub const OUTGOING_FRAMES: usize = 16;

/// Requests of one connection being handled at once; past it, the connection is not read until
/// one finishes (the peer is slowed down, memory stays bounded).
pub const MAX_IN_FLIGHT: usize = 64;

/// How long a peer has to send its Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

/// One request as the service sees it.
#[derive(Debug)]
pub struct Request {
    pub id: u64,
    pub op: String,
    pub args: Map<String, Value>,
    pub payload: Vec<u8>,
}

/// The answer to a request: a result object (or an error) and an optional payload.
#[derive(Debug)]
pub struct Reply {
    pub result: Result<Value, ErrorBody>,
    pub payload: Vec<u8>,
}

impl Reply {
    pub fn ok(result: Value) -> Self {
        Self {
            result: Ok(result),
            payload: Vec::new(),
        }
    }

    pub fn err(error: ErrorBody) -> Self {
        Self {
            result: Err(error),
            payload: Vec::new(),
        }
    }
}

pub type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// What a connection serves.
pub trait Service: Send + Sync + 'static {
    /// Called on the connection's reader, in the order requests arrived: work whose order
    /// matters (queuing stdin) happens here, before returning. The future then runs in its own
    /// task, concurrently with other requests.
    fn handle(&self, request: Request) -> ReplyFuture;

    /// The stream named `id` (an exec, a watch, a task or a metrics stream), for `subscribe`.
    fn stream(&self, id: &str) -> Result<Arc<dyn EventSource>, ErrorBody>;

    /// The key a peer's `Hello` must carry, when the service has one.
    fn channel_key(&self) -> Option<&str> {
        None
    }

    /// What a relay connection carries bytes to: the TCP connection its `port.connect` opens
    /// (`relay`). A service that opens none refuses.
    fn relay(&self, request: Request) -> RelayFuture {
        drop(request);
        Box::pin(async {
            Err(ErrorBody::new(
                ErrorCode::Conflict,
                "this agent relays nothing",
            ))
        })
    }
}

/// Serves one connection until the peer closes it or breaks the protocol.
pub async fn serve<R, W>(reader: R, writer: W, service: Arc<dyn Service>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(OUTGOING_FRAMES);
    let writer_task = tokio::spawn(write_frames(writer, out_rx));
    let relayed = match converse(reader, &out_tx, Arc::clone(&service)).await {
        Ok(relayed) => relayed,
        Err(reason) => {
            tracing::info!(%reason, "closing a channel connection");
            None
        }
    };
    let Some((frames, request)) = relayed else {
        drop(out_tx);
        // Everything queued (a final error response included) is written before the socket
        // closes.
        if let Ok(Some(mut writer)) = writer_task.await {
            let _ = writer.shutdown().await;
        }
        return;
    };
    let id = request.id;
    let (answer, target) = match service.relay(request).await {
        Ok(stream) => (Ok(json!({})), Some(stream)),
        Err(error) => (Err(error), None),
    };
    // The answer is the last frame: once it is written, the connection carries raw bytes.
    let _ = out_tx.send(response_bytes(id, answer, Vec::new())).await;
    drop(out_tx);
    let Ok(Some(mut writer)) = writer_task.await else {
        return;
    };
    match target {
        Some(stream) => {
            let FrameReader {
                reader,
                mut decoder,
                ..
            } = frames;
            relay::carry(reader, decoder.take_pending(), writer, stream).await;
        }
        None => {
            let _ = writer.shutdown().await;
        }
    }
}

/// Writes queued frames until the queue closes; returns the writer, or None once a write
/// failed.
async fn write_frames<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
) -> Option<W> {
    while let Some(bytes) = rx.recv().await {
        writer.write_all(&bytes).await.ok()?;
        // Write what else is queued before flushing: one flush per burst.
        while let Ok(more) = rx.try_recv() {
            writer.write_all(&more).await.ok()?;
        }
        writer.flush().await.ok()?;
    }
    Some(writer)
}

/// Reads whole frames from a byte stream.
struct FrameReader<R> {
    reader: R,
    decoder: FrameDecoder,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// The next frame, `Ok(None)` at a clean end of stream.
    async fn next(&mut self) -> Result<Option<Frame>, String> {
        loop {
            if let Some(frame) = self.decoder.next_frame().map_err(|e| e.to_string())? {
                return Ok(Some(frame));
            }
            let n = self
                .reader
                .read(&mut self.buf)
                .await
                .map_err(|e| format!("read error: {e}"))?;
            if n == 0 {
                return match self.decoder.pending() {
                    0 => Ok(None),
                    _ => Err("the peer closed the stream inside a frame".into()),
                };
            }
            self.decoder.feed(&self.buf[..n]);
        }
    }
}

async fn send(out: &mpsc::Sender<Vec<u8>>, bytes: Vec<u8>) -> Result<(), String> {
    out.send(bytes)
        .await
        .map_err(|_| "the connection's writer stopped".to_string())
}

/// Serves the connection's requests until it closes (`None`), or hands back its reader and
/// its first request when that is a relay's (`port.connect`).
async fn converse<R: AsyncRead + Unpin>(
    reader: R,
    out: &mpsc::Sender<Vec<u8>>,
    service: Arc<dyn Service>,
) -> Result<Option<(FrameReader<R>, Request)>, String> {
    let mut frames = FrameReader {
        reader,
        decoder: FrameDecoder::new(),
        buf: vec![0; 256 * 1024],
    };
    let hello = frame(FrameKind::Hello, &Hello::ours(Role::Agent), Vec::new())
        .and_then(|f| f.encode())
        .map_err(|e| e.to_string())?;
    send(out, hello).await?;
    let first = match tokio::time::timeout(HELLO_TIMEOUT, frames.next()).await {
        Ok(Ok(Some(first))) => first,
        Ok(Ok(None)) => return Ok(None),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err("no Hello from the peer in time".into()),
    };
    check_hello(&first, out, service.channel_key()).await?;
    let silence = allowed_silence(&first);

    let (control_tx, control_rx) = mpsc::channel::<Control>(64);
    let pump_task = tokio::spawn(pump(control_rx, out.clone()));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    // Only a connection's first request may make it a relay: a channel that is already
    // serving stays one (a later `port.connect` is the service's to refuse).
    let mut first = true;
    let result = loop {
        let next = match silence {
            None => frames.next().await,
            Some(limit) => match tokio::time::timeout(limit, frames.next()).await {
                Ok(next) => next,
                Err(_) => {
                    break Err(format!(
                        "the gateway sent nothing for {} s although it promised a keepalive: \
                         it is gone",
                        limit.as_secs()
                    ))
                }
            },
        };
        let frame = match next {
            Ok(Some(frame)) => frame,
            Ok(None) => break Ok(None),
            Err(e) => break Err(e),
        };
        let relay_allowed = std::mem::replace(&mut first, false);
        match frame.kind {
            FrameKind::Request => {
                let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
                    break Ok(None);
                };
                let header: RequestHeader = match parse_header(&frame) {
                    Ok(h) => h,
                    Err(e) => break Err(e),
                };
                let request = Request {
                    id: header.id,
                    op: header.op,
                    args: header.args,
                    payload: frame.payload,
                };
                if relay_allowed && request.op == RELAY_OP {
                    break Ok(Some((frames, request)));
                }
                let out = out.clone();
                match request.op.as_str() {
                    // Handled in order on the reader, so subscribe, credit and unsubscribe of
                    // one stream reach the pump in the order the peer sent them.
                    "subscribe" | "unsubscribe" => {
                        channel_op(&request, &*service, &control_tx, &out).await;
                        drop(permit);
                    }
                    _ => {
                        let id = request.id;
                        let future = service.handle(request);
                        tokio::spawn(async move {
                            let reply = future.await;
                            let _ = out
                                .send(response_bytes(id, reply.result, reply.payload))
                                .await;
                            drop(permit);
                        });
                    }
                }
            }
            FrameKind::Credit => {
                let header: CreditHeader = match parse_header(&frame) {
                    Ok(h) => h,
                    Err(e) => break Err(e),
                };
                let credit = Control::Credit {
                    stream: header.stream,
                    bytes: header.bytes,
                };
                if control_tx.send(credit).await.is_err() {
                    break Ok(None);
                }
            }
            // Its arrival is all it says: the wait for the next frame starts again.
            FrameKind::Keepalive => {}
            other => break Err(format!("a gateway may not send {other:?} frames")),
        }
    };
    drop(control_tx);
    pump_task.abort();
    result
}

/// How long the connection may stay silent: [`KEEPALIVE_MISSES`] times the keepalive the
/// gateway's Hello promised (within [`KEEPALIVE_RANGE`]); without a promise, for ever (an
/// older gateway, or a peer on a socket that closes when its process ends).
fn allowed_silence(hello: &Frame) -> Option<Duration> {
    let peer: Value = serde_json::from_slice(&hello.header).ok()?;
    let promised = peer.get("keepalive_seconds")?.as_u64()?;
    let promised = u32::try_from(promised)
        .ok()?
        .clamp(*KEEPALIVE_RANGE.start(), *KEEPALIVE_RANGE.end());
    Some(Duration::from_secs(u64::from(promised * KEEPALIVE_MISSES)))
}

/// Answers the peer's Hello: equal protocol numbers continue, anything else is refused with
/// `protocol_mismatch` (id 0) naming both versions and builds.
async fn check_hello(
    first: &Frame,
    out: &mpsc::Sender<Vec<u8>>,
    key: Option<&str>,
) -> Result<(), String> {
    let ours = Hello::ours(Role::Agent);
    let refuse = |message: String| {
        response_bytes(
            0,
            Err(ErrorBody::new(ErrorCode::ProtocolMismatch, message)),
            Vec::new(),
        )
    };
    if first.kind != FrameKind::Hello {
        send(
            out,
            refuse(format!(
                "the first frame must be Hello (protocol {}); got a {:?} frame",
                ours.protocol, first.kind
            )),
        )
        .await?;
        return Err("the peer did not start with Hello".into());
    }
    let peer: Value = serde_json::from_slice(&first.header).unwrap_or(Value::Null);
    let protocol = peer.get("protocol").and_then(Value::as_u64);
    if protocol != Some(u64::from(ours.protocol)) {
        let build = peer
            .get("build")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        let theirs = protocol.map_or("none".to_string(), |p| p.to_string());
        send(
            out,
            refuse(format!(
                "protocol mismatch: this agent (build {}) speaks protocol {}, the peer \
                 (build {}) speaks protocol {theirs}; use an agent and a gateway of the same \
                 protocol",
                ours.build,
                ours.protocol,
                crate::policy::echo(build),
            )),
        )
        .await?;
        return Err(format!("protocol mismatch (peer speaks {theirs})"));
    }
    if let Some(key) = key {
        let given = peer.get("key").and_then(Value::as_str).unwrap_or("");
        // Constant time: how much of a guess matched must not show in the time to refuse it.
        if !bool::from(given.as_bytes().ct_eq(key.as_bytes())) {
            let reply = response_bytes(
                0,
                Err(ErrorBody::new(
                    ErrorCode::Permission,
                    "this agent serves only its gateway: the Hello carries no valid channel key",
                )),
                Vec::new(),
            );
            send(out, reply).await?;
            return Err("a peer without the channel key".into());
        }
    }
    Ok(())
}

/// `subscribe` and `unsubscribe`, ordered against the pages of the stream: the subscribe
/// response is queued before the first page, the unsubscribe response after the last.
fn channel_op(
    request: &Request,
    service: &dyn Service,
    control: &mpsc::Sender<Control>,
    out: &mpsc::Sender<Vec<u8>>,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let id = request.id;
    let out = out.clone();
    let control = control.clone();
    let stream = match request.args.get("stream").and_then(Value::as_str) {
        Some(s) => s.to_owned(),
        None => {
            let error = ErrorBody::invalid(
                "stream",
                "'stream' must name an exec, watch, task or metrics id",
            );
            return Box::pin(async move {
                let _ = out.send(response_bytes(id, Err(error), Vec::new())).await;
            });
        }
    };
    if request.op == "unsubscribe" {
        return Box::pin(async move {
            let response = Box::new(move |subscribed: bool| {
                response_bytes(id, Ok(json!({"subscribed": subscribed})), Vec::new())
            });
            let _ = control
                .send(Control::Unsubscribe { stream, response })
                .await;
        });
    }
    let prepared = (|| {
        let cursor = uint_arg(&request.args, "cursor", 0)?;
        let credit = uint_arg(&request.args, "credit", 256 * 1024)?;
        let source = service.stream(&stream)?;
        // A cursor past the end is refused now rather than failing later in the pump.
        source
            .read(cursor, MIN_PAGE_BYTES)
            .map_err(|message| ErrorBody::invalid("cursor", message))?;
        Ok::<_, ErrorBody>((cursor, credit, source))
    })();
    Box::pin(async move {
        let (cursor, credit, source) = match prepared {
            Ok(p) => p,
            Err(error) => {
                let _ = out.send(response_bytes(id, Err(error), Vec::new())).await;
                return;
            }
        };
        let subscribe = Control::Subscribe {
            stream,
            source,
            cursor,
            credit,
            response: response_bytes(id, Ok(json!({})), Vec::new()),
        };
        let _ = control.send(subscribe).await;
    })
}

fn uint_arg(args: &Map<String, Value>, name: &str, default: u64) -> Result<u64, ErrorBody> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_u64().ok_or_else(|| {
            ErrorBody::invalid(name, format!("'{name}' must be a non-negative integer"))
        }),
    }
}
