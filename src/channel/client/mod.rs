//! The gateway's side of the agent channel, sans-IO: fed the bytes a transport read, it returns
//! the bytes to write, completed responses, and the streams whose cache changed.

mod cache;
mod page;
mod receive;
#[cfg(test)]
mod tests;
mod wire;

use std::collections::HashMap;
use std::sync::Arc;

use crate::channel::message::KEEPALIVE_RANGE;
pub use crate::channel::message::{ErrorCode, BUILD, KEEPALIVE_SECONDS, PROTOCOL_VERSION};
pub use cache::{CacheConfig, Consumed};
pub use page::ReceivedPage;
pub use wire::ChannelError;

use crate::channel::{FeedError, Frame, FrameDecoder};
use crate::event::StreamKind;
use crate::policy::PolicyError;
use crate::ring::{EventRing, Page, RingError};
use cache::StreamCache;

/// A completed request: `body` is the result's JSON object when `ok`, otherwise the error's
/// (`{"code":…,"message":…}`); `payload` is the response's bulk bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub id: u64,
    pub ok: bool,
    pub body: String,
    pub payload: Vec<u8>,
}

/// What one `feed` produced.
#[derive(Debug, Default)]
pub struct Fed {
    /// The agent's `Hello` header (JSON), when it arrived in this feed and was accepted.
    pub hello: Option<String>,
    /// Responses to the caller's requests (and subscriptions), in arrival order.
    pub responses: Vec<Response>,
    /// Streams whose cache changed (new events, a gap, or the end), each once.
    pub woken: Vec<String>,
    /// The channel failed in this feed: nothing more will be answered; pending requests are
    /// forgotten. Reported once.
    pub failure: Option<ChannelError>,
}

/// A subscription the caller asked for: the request id to wait on, and the streams dropped
/// from the cache to make room (their waiters should look again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribed {
    pub id: u64,
    pub dropped: Vec<String>,
}

/// What the cache can say about a read.
#[derive(Debug)]
pub enum CacheRead {
    /// The stream is not cached: subscribe first.
    Missing,
    /// Served from the cache (possibly empty: nothing after the cursor yet).
    Page(Page),
    /// The cursor is older than the cache: read it from the agent's log. The page is the
    /// cache's own (`cursor_expired`, continuing from its oldest event), for streams that have
    /// no log to read.
    Expired(Page),
    /// The cursor is past the cache's last event; `closed` says whether more can come.
    Ahead { closed: bool },
}

/// Why a request id is outstanding.
#[derive(Debug)]
enum Pending {
    Caller,
    Subscribe { stream: String, caller: bool },
    Internal,
}

/// The gateway's end of one channel. Not thread-safe by itself (wrap it in a lock); the rings it
/// hands out are.
#[derive(Debug)]
pub struct AgentChannel {
    decoder: FrameDecoder,
    outgoing: Vec<u8>,
    hello: Option<String>,
    failure: Option<ChannelError>,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    cache: StreamCache,
    /// The workspace's channel key, sent in every `Hello`.
    key: Option<String>,
    /// How often this gateway promises to send a frame (its Hello says so).
    keepalive_seconds: u32,
    /// The agent's Hello said it takes `Keepalive` frames.
    agent_takes_keepalive: bool,
}

impl AgentChannel {
    /// A channel whose first outgoing bytes are the gateway's `Hello`.
    pub fn new(config: CacheConfig) -> Result<Self, PolicyError> {
        Self::with_key(config, None)
    }

    /// A channel that proves itself to the agent with `key` in each `Hello`.
    pub fn with_key(config: CacheConfig, key: Option<String>) -> Result<Self, PolicyError> {
        Self::configured(config, key, KEEPALIVE_SECONDS)
    }

    /// A channel with `key` that promises the agent a frame every `keepalive_seconds`
    /// (within [`KEEPALIVE_RANGE`]): the caller sends [`keepalive`](Self::keepalive) that often.
    pub fn configured(
        config: CacheConfig,
        key: Option<String>,
        keepalive_seconds: u32,
    ) -> Result<Self, PolicyError> {
        config.check()?;
        if !KEEPALIVE_RANGE.contains(&keepalive_seconds) {
            return Err(PolicyError::without_echo(
                "channel.keepalive",
                format!(
                    "keepalive_seconds must be {} to {}",
                    KEEPALIVE_RANGE.start(),
                    KEEPALIVE_RANGE.end()
                ),
            ));
        }
        let mut channel = Self {
            decoder: FrameDecoder::new(),
            outgoing: Vec::new(),
            hello: None,
            failure: None,
            next_id: 1,
            pending: HashMap::new(),
            cache: StreamCache::new(config),
            key,
            keepalive_seconds,
            agent_takes_keepalive: false,
        };
        channel.push(&wire::gateway_hello(
            channel.key.as_deref(),
            keepalive_seconds,
        ));
        Ok(channel)
    }

    /// How often the Hello promised the agent a frame.
    pub fn keepalive_seconds(&self) -> u32 {
        self.keepalive_seconds
    }

    /// Queues a `Keepalive` frame, if the agent takes them (true when one was queued). The
    /// gateway calls it every `keepalive_seconds`; a channel that carries other frames anyway
    /// loses nothing by it.
    pub fn keepalive(&mut self) -> bool {
        if !self.agent_takes_keepalive || self.hello.is_none() {
            return false;
        }
        self.push(&wire::keepalive());
        true
    }

    /// The agent's `Hello` header once accepted.
    pub fn agent_hello(&self) -> Option<&str> {
        self.hello.as_deref()
    }

    pub fn failure(&self) -> Option<&ChannelError> {
        self.failure.as_ref()
    }

    pub fn config(&self) -> CacheConfig {
        self.cache.config()
    }

    /// Streams cached, and the encoded event bytes they hold.
    pub fn cache_usage(&self) -> (usize, usize) {
        (self.cache.stream_count(), self.cache.held_bytes())
    }

    /// Bytes to write to the transport, in order; empties the buffer.
    pub fn take_outgoing(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.outgoing)
    }

    /// Sends a request; its response comes back from `feed` with the returned id.
    pub fn request(
        &mut self,
        op: &str,
        args_json: &str,
        payload: Vec<u8>,
    ) -> Result<u64, ChannelError> {
        self.check_usable()?;
        let id = self.next_id;
        let frame = wire::request_frame(id, op, args_json, payload)?;
        self.next_id += 1;
        self.push(&frame);
        self.pending.insert(id, Pending::Caller);
        Ok(id)
    }

    /// Forgets a request the caller stopped waiting for; its late response is dropped.
    pub fn cancel(&mut self, id: u64) {
        match self.pending.get_mut(&id) {
            Some(Pending::Caller) => {
                self.pending.remove(&id);
            }
            Some(Pending::Subscribe { caller, .. }) => *caller = false,
            _ => {}
        }
    }

    /// Starts caching `stream` (an exec, watch, task or metrics id) after `cursor` and
    /// subscribes to it. `None` when it is already cached (or being subscribed): read it. Fails
    /// with `limit` when the cache is full of streams that have readers ([`pin`](Self::pin)):
    /// read the exec's log instead (`exec.read`, which long-polls by itself). A watch, a task
    /// or a metrics stream has no log to fall back on, so it is cached past the bound instead
    /// (by at most the streams being read at once).
    pub fn subscribe(
        &mut self,
        stream: &str,
        cursor: u64,
    ) -> Result<Option<Subscribed>, ChannelError> {
        let kind = stream_kind(stream)?;
        self.check_usable()?;
        if self.cache.get(stream).is_some() {
            return Ok(None);
        }
        let overflow = !kind.has_log();
        let dropped = self
            .cache
            .add(stream, cursor, overflow)
            .map_err(|e| ChannelError::new(ErrorCode::InvalidArgument, e.message()))?
            .ok_or_else(|| {
                ChannelError::new(
                    ErrorCode::Limit,
                    format!(
                        "every one of the {} cached streams has a reader; read {stream} from the \
                         agent's log",
                        self.cache.config().max_streams
                    ),
                )
            })?;
        let mut names = Vec::with_capacity(dropped.len());
        for (name, open) in dropped {
            if open {
                let args = serde_json::json!({ "stream": name }).to_string();
                self.internal("unsubscribe", &args);
            }
            names.push(name);
        }
        let id = self.send_subscribe(stream, cursor, true);
        Ok(Some(Subscribed { id, dropped: names }))
    }

    /// Marks `stream` as being read (cached or not): it is not dropped to make room until as
    /// many [`unpin`](Self::unpin)s have followed.
    pub fn pin(&mut self, stream: &str) {
        self.cache.pin(stream);
    }

    pub fn unpin(&mut self, stream: &str) {
        self.cache.unpin(stream);
    }

    /// The cached ring of `stream`, marked as recently used.
    pub fn ring(&mut self, stream: &str) -> Option<Arc<EventRing>> {
        self.cache.get(stream)
    }

    /// Reads `stream` from the cache; see [`CacheRead`].
    pub fn read(
        &mut self,
        stream: &str,
        cursor: u64,
        max_events: usize,
        max_bytes: usize,
    ) -> Result<CacheRead, RingError> {
        match self.ring(stream) {
            None => Ok(CacheRead::Missing),
            Some(ring) => {
                self.reader_at(stream, cursor);
                read_ring(&ring, cursor, max_events, max_bytes)
            }
        }
    }

    /// A reader of `stream` has consumed its events up to `cursor` (it asks for the ones after
    /// it): queues the credit this frees, if a batch is due. [`read`](Self::read) calls it.
    pub fn reader_at(&mut self, stream: &str, cursor: u64) {
        if let Some(bytes) = self.cache.reader_at(stream, cursor) {
            self.push(&wire::credit_frame(stream, bytes));
        }
    }

    /// Begins a new session on a new transport, keeping the cache: queues the gateway's `Hello`
    /// and a subscription of every open stream from the last seq its cache holds, so the agent
    /// resends exactly what followed. Requests still pending are forgotten (the caller fails
    /// them: their answers were lost with the old transport).
    pub fn restart(&mut self) {
        self.decoder = FrameDecoder::new();
        self.outgoing.clear();
        self.hello = None;
        self.agent_takes_keepalive = false;
        self.failure = None;
        self.pending.clear();
        let hello = wire::gateway_hello(self.key.as_deref(), self.keepalive_seconds);
        self.push(&hello);
        for (stream, cursor) in self.cache.resume_points() {
            self.send_subscribe(&stream, cursor, false);
        }
    }

    /// Takes bytes read from the transport and handles every whole frame in them.
    pub fn feed(&mut self, data: &[u8]) -> Fed {
        let mut fed = Fed::default();
        if self.failure.is_some() {
            return fed;
        }
        // Taken out while it hands out frames borrowed from `data`, which `handle` then reads.
        let mut decoder = std::mem::take(&mut self.decoder);
        let result = decoder.feed_each(data, |frame| self.handle(frame, &mut fed));
        self.decoder = decoder;
        if let Err(e) = result {
            let e = match e {
                FeedError::Handler(e) => e,
                FeedError::Frame(e) => ChannelError::new(
                    ErrorCode::Unavailable,
                    format!("the agent sent a broken frame ({e}); the channel is closed"),
                ),
            };
            self.failure = Some(e.clone());
            self.pending.clear();
            fed.failure = Some(e);
        }
        fed
    }

    fn send_subscribe(&mut self, stream: &str, cursor: u64, caller: bool) -> u64 {
        let args = serde_json::json!({
            "stream": stream,
            "cursor": cursor,
            "credit": self.cache.config().window(),
        })
        .to_string();
        let id = self.internal("subscribe", &args);
        self.pending.insert(
            id,
            Pending::Subscribe {
                stream: stream.to_owned(),
                caller,
            },
        );
        id
    }

    /// Sends a request whose answer only the channel itself looks at.
    fn internal(&mut self, op: &str, args_json: &str) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        // The args are built here from checked ids and numbers, so the frame is always valid.
        if let Ok(frame) = wire::request_frame(id, op, args_json, Vec::new()) {
            self.push(&frame);
        }
        self.pending.insert(id, Pending::Internal);
        id
    }

    fn push(&mut self, frame: &Frame) {
        // Frames built here are within the limit (request_frame checks the caller's).
        let _ = frame.encode_into(&mut self.outgoing);
    }

    fn check_usable(&self) -> Result<(), ChannelError> {
        match &self.failure {
            Some(e) => Err(ChannelError::new(
                ErrorCode::Unavailable,
                format!("the channel has failed ({}); reconnect", e.message),
            )),
            None => Ok(()),
        }
    }
}

/// Reads a cached ring (outside the channel's lock: rings are shared safely).
pub fn read_ring(
    ring: &EventRing,
    cursor: u64,
    max_events: usize,
    max_bytes: usize,
) -> Result<CacheRead, RingError> {
    let last = ring.last_seq();
    if cursor > last {
        return Ok(CacheRead::Ahead {
            closed: ring.is_closed(),
        });
    }
    match ring.read(cursor, max_events, max_bytes, false) {
        Ok(page) if page.cursor_expired => Ok(CacheRead::Expired(page)),
        Ok(page) => Ok(CacheRead::Page(page)),
        // Only "ahead" can race (the check above); any other error is the caller's argument.
        Err(RingError::CursorAhead { .. }) => Ok(CacheRead::Ahead { closed: false }),
        Err(e) => Err(e),
    }
}

fn stream_kind(stream: &str) -> Result<StreamKind, ChannelError> {
    StreamKind::of(stream).map_err(|_| {
        ChannelError::new(
            ErrorCode::InvalidArgument,
            format!(
                "stream must be an exec id (ex-…), a watch id (fw-…), a task id (tk-…) or a \
                 metrics stream id (mt-…) (got {})",
                crate::policy::echo(stream)
            ),
        )
    })
}
