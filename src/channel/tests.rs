//! The connection handler over an in-memory duplex stream with a fake service: Hello and its
//! mismatch, concurrent requests answered out of order, credit, and round-robin between streams.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::decoder::FrameDecoder;
use super::frame::{Frame, FrameKind};
use super::message::{frame, ErrorBody, ErrorCode};
use super::server::{serve, Reply, ReplyFuture, Request, Service};
use super::subscription::{EventSource, RingSource};
use crate::event::EventType;
use crate::ring::EventRing;

struct Fake {
    streams: Vec<(String, Arc<EventRing>)>,
}

impl Service for Fake {
    fn handle(&self, request: Request) -> ReplyFuture {
        Box::pin(async move {
            if request.op == "slow" {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Reply::ok(Value::Object(request.args))
        })
    }
    fn stream(&self, id: &str) -> Result<Arc<dyn EventSource>, ErrorBody> {
        self.streams
            .iter()
            .find(|(name, _)| name == id)
            .map(|(_, ring)| Arc::new(RingSource(Arc::clone(ring))) as Arc<dyn EventSource>)
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, "no such stream"))
    }
}

struct Peer {
    io: DuplexStream,
    decoder: FrameDecoder,
}

impl Peer {
    async fn send(&mut self, kind: FrameKind, header: Value, payload: &[u8]) {
        let f = frame(kind, &header, payload.to_vec()).unwrap();
        self.io.write_all(&f.encode().unwrap()).await.unwrap();
    }

    async fn next(&mut self) -> Option<Frame> {
        let mut buf = vec![0u8; 65536];
        loop {
            if let Some(f) = self.decoder.next_frame().unwrap() {
                return Some(f);
            }
            let n = tokio::time::timeout(Duration::from_secs(30), self.io.read(&mut buf))
                .await
                .expect("a frame in time")
                .unwrap();
            if n == 0 {
                return None;
            }
            self.decoder.feed(&buf[..n]);
        }
    }

    async fn header(&mut self) -> (FrameKind, Value) {
        let f = self.next().await.expect("a frame");
        (f.kind, serde_json::from_slice(&f.header).unwrap())
    }
}

async fn connect(streams: Vec<(String, Arc<EventRing>)>, protocol: u32) -> Peer {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (reader, writer) = tokio::io::split(theirs);
    tokio::spawn(serve(reader, writer, Arc::new(Fake { streams })));
    let mut peer = Peer {
        io: ours,
        decoder: FrameDecoder::new(),
    };
    let (kind, hello) = peer.header().await;
    assert_eq!(kind, FrameKind::Hello);
    assert_eq!(hello["role"], "agent");
    let hello = json!({"protocol": protocol, "build": "test", "role": "gateway"});
    peer.send(FrameKind::Hello, hello, b"").await;
    peer
}

fn ring_with(events: usize, size: usize) -> Arc<EventRing> {
    let ring = Arc::new(EventRing::new(64 << 20, None).unwrap());
    for _ in 0..events {
        ring.append(EventType::Stdout, Some(&vec![b'x'; size]), &Map::new())
            .unwrap();
    }
    ring
}

#[tokio::test]
async fn a_protocol_mismatch_is_answered_then_the_connection_closes() {
    let mut peer = connect(Vec::new(), 2).await;
    let (kind, response) = peer.header().await;
    assert_eq!(kind, FrameKind::Response);
    assert_eq!(response["id"], 0);
    assert_eq!(response["error"]["code"], "protocol_mismatch");
    let message = response["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("protocol 1") && message.contains("protocol 2"),
        "{message}"
    );
    assert!(peer.next().await.is_none());
}

#[tokio::test]
async fn requests_are_answered_in_any_order() {
    let mut peer = connect(Vec::new(), 1).await;
    peer.send(
        FrameKind::Request,
        json!({"id": 1, "op": "slow", "args": {"n": 1}}),
        b"",
    )
    .await;
    peer.send(
        FrameKind::Request,
        json!({"id": 2, "op": "fast", "args": {"n": 2}}),
        b"",
    )
    .await;
    let (_, first) = peer.header().await;
    let (_, second) = peer.header().await;
    assert_eq!(
        (first["id"].clone(), second["id"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(second["result"], json!({"n": 1}));
}

#[tokio::test]
async fn a_stream_without_credit_gets_no_more_pages() {
    let ring = ring_with(100, 1000);
    let mut peer = connect(vec![("a".into(), Arc::clone(&ring))], 1).await;
    let sub =
        json!({"id": 1, "op": "subscribe", "args": {"stream": "a", "cursor": 0, "credit": 1}});
    peer.send(FrameKind::Request, sub, b"").await;
    let (kind, response) = peer.header().await;
    assert_eq!(
        (kind, response["ok"].clone()),
        (FrameKind::Response, json!(true))
    );
    let page = peer.next().await.unwrap();
    assert_eq!(page.kind, FrameKind::Events);
    let first: Value = serde_json::from_slice(&page.payload).unwrap();
    assert!(first["has_more"].as_bool().unwrap());
    // No credit left: a ping is answered, and nothing else comes first.
    peer.send(FrameKind::Request, json!({"id": 2, "op": "ping"}), b"")
        .await;
    let (kind, response) = peer.header().await;
    assert_eq!(
        (kind, response["id"].clone()),
        (FrameKind::Response, json!(2))
    );
    peer.send(FrameKind::Credit, json!({"stream": "a", "bytes": 1}), b"")
        .await;
    let next = peer.next().await.unwrap();
    let second: Value = serde_json::from_slice(&next.payload).unwrap();
    assert_eq!(
        second["events"][0]["seq"].as_u64().unwrap(),
        first["next_cursor"].as_u64().unwrap() + 1
    );
}

#[tokio::test]
async fn streams_with_events_take_turns() {
    let flood = ring_with(2000, 16 << 10);
    let quiet = ring_with(1, 10);
    let streams = vec![("flood".into(), flood), ("quiet".into(), quiet)];
    let mut peer = connect(streams, 1).await;
    for (id, stream) in [(1, "flood"), (2, "quiet")] {
        let args = json!({"stream": stream, "cursor": 0, "credit": 1u64 << 40});
        peer.send(
            FrameKind::Request,
            json!({"id": id, "op": "subscribe", "args": args}),
            b"",
        )
        .await;
    }
    let mut order = Vec::new();
    while order.len() < 6 {
        let (kind, header) = peer.header().await;
        if kind == FrameKind::Events {
            order.push(header["stream"].as_str().unwrap().to_owned());
        }
    }
    let quiet_at = order.iter().position(|s| s == "quiet");
    assert!(quiet_at.is_some_and(|i| i <= 2), "{order:?}");
}

/// A service that serves only peers proving the key.
struct Keyed;

impl Service for Keyed {
    fn handle(&self, request: Request) -> ReplyFuture {
        Box::pin(async move { Reply::ok(Value::Object(request.args)) })
    }
    fn stream(&self, _id: &str) -> Result<Arc<dyn EventSource>, ErrorBody> {
        Err(ErrorBody::new(ErrorCode::NotFound, "no streams"))
    }
    fn channel_key(&self) -> Option<&str> {
        Some("00112233445566778899aabbccddeeff")
    }
}

async fn hello_with(key: Option<&str>) -> Peer {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (reader, writer) = tokio::io::split(theirs);
    tokio::spawn(serve(reader, writer, Arc::new(Keyed)));
    let mut peer = Peer {
        io: ours,
        decoder: FrameDecoder::new(),
    };
    let _ = peer.header().await;
    let mut hello = json!({"protocol": 1, "build": "test", "role": "gateway"});
    if let Some(key) = key {
        hello["key"] = json!(key);
    }
    peer.send(FrameKind::Hello, hello, b"").await;
    peer.send(
        FrameKind::Request,
        json!({"id": 1, "op": "echo", "args": {"n": 1}}),
        b"",
    )
    .await;
    peer
}

#[tokio::test]
async fn a_peer_without_the_channel_key_is_refused_before_any_request() {
    for key in [None, Some("00112233445566778899aabbccddeefe"), Some("")] {
        let mut peer = hello_with(key).await;
        let (kind, response) = peer.header().await;
        assert_eq!(kind, FrameKind::Response);
        assert_eq!(response["id"], 0, "{key:?}");
        assert_eq!(response["error"]["code"], "permission");
        assert!(peer.next().await.is_none(), "the connection closes");
    }
}

#[tokio::test]
async fn a_peer_with_the_channel_key_is_served() {
    let mut peer = hello_with(Some("00112233445566778899aabbccddeeff")).await;
    let (_, response) = peer.header().await;
    assert_eq!(response["id"], 1);
    assert_eq!(response["result"]["n"], 1);
}

/// A peer that promised a keepalive in its Hello.
async fn connect_promising(keepalive_seconds: u32) -> Peer {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (reader, writer) = tokio::io::split(theirs);
    tokio::spawn(serve(reader, writer, Arc::new(Fake { streams: vec![] })));
    let mut peer = Peer {
        io: ours,
        decoder: FrameDecoder::new(),
    };
    let (_, hello) = peer.header().await;
    assert_eq!(
        hello["keepalive"], true,
        "the agent says it takes keepalives"
    );
    let hello = json!({"protocol": 1, "build": "test", "role": "gateway",
                       "keepalive_seconds": keepalive_seconds});
    peer.send(FrameKind::Hello, hello, b"").await;
    peer
}

#[tokio::test]
async fn a_gateway_that_goes_quiet_after_promising_keepalives_is_disconnected() {
    let mut peer = connect_promising(1).await;
    let started = std::time::Instant::now();
    // Nothing more is sent: three missed keepalives later the agent closes the connection.
    assert!(peer.next().await.is_none(), "the connection closes");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(2900), "{waited:?}");
}

#[tokio::test]
async fn keepalives_keep_a_quiet_connection_open() {
    let mut peer = connect_promising(1).await;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        peer.send(FrameKind::Keepalive, json!(null), b"").await;
    }
    // Still served, 4.5 s after the Hello: longer than three keepalives.
    peer.send(
        FrameKind::Request,
        json!({"id": 1, "op": "x", "args": {}}),
        b"",
    )
    .await;
    let (kind, response) = peer.header().await;
    assert_eq!(
        (kind, response["id"].as_u64()),
        (FrameKind::Response, Some(1))
    );
}

#[tokio::test]
async fn a_gateway_that_promised_nothing_may_stay_quiet() {
    let mut peer = connect(Vec::new(), 1).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    peer.send(
        FrameKind::Request,
        json!({"id": 1, "op": "x", "args": {}}),
        b"",
    )
    .await;
    let (_, response) = peer.header().await;
    assert_eq!(response["id"], 1);
}

/// A service whose relays go to one TCP address.
struct Relaying {
    to: std::net::SocketAddr,
}

impl Service for Relaying {
    fn handle(&self, request: Request) -> ReplyFuture {
        Box::pin(async move { Reply::ok(json!({"served": request.op})) })
    }
    fn stream(&self, _: &str) -> Result<Arc<dyn EventSource>, ErrorBody> {
        Err(ErrorBody::new(ErrorCode::NotFound, "no streams"))
    }
    fn relay(&self, _: Request) -> super::relay::RelayFuture {
        let to = self.to;
        Box::pin(async move {
            tokio::net::TcpStream::connect(to)
                .await
                .map_err(|e| ErrorBody::new(ErrorCode::Unavailable, e.to_string()))
        })
    }
}

async fn connect_to(service: Arc<dyn Service>) -> Peer {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (reader, writer) = tokio::io::split(theirs);
    tokio::spawn(serve(reader, writer, service));
    let mut peer = Peer {
        io: ours,
        decoder: FrameDecoder::new(),
    };
    let (kind, _) = peer.header().await;
    assert_eq!(kind, FrameKind::Hello);
    let hello = json!({"protocol": 1, "build": "test", "role": "gateway", "keepalive_seconds": 1});
    peer.send(FrameKind::Hello, hello, b"").await;
    peer
}

#[tokio::test]
async fn a_first_port_connect_makes_the_connection_a_relay() {
    let app = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let to = app.local_addr().unwrap();
    let mut peer = connect_to(Arc::new(Relaying { to })).await;
    peer.send(
        FrameKind::Request,
        json!({"id": 1, "op": "port.connect", "args": {"port": to.port()}}),
        b"",
    )
    .await;
    let (mut conn, _) = app.accept().await.unwrap();
    let (kind, answer) = peer.header().await;
    assert_eq!(
        (kind, answer["id"].clone(), answer["ok"].clone()),
        (FrameKind::Response, json!(1), json!(true))
    );
    assert_eq!(
        peer.decoder.pending(),
        0,
        "nothing but the answer came before the app's bytes"
    );
    // Raw bytes now, both ways; and no keepalive is owed on a relay (the promise of 1 s above
    // would have closed a channel that said nothing for 3 s).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    peer.io.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut request = [0u8; 18];
    conn.read_exact(&mut request).await.unwrap();
    assert_eq!(&request, b"GET / HTTP/1.0\r\n\r\n");
    conn.write_all(b"HTTP/1.0 200 OK\r\n\r\nhi").await.unwrap();
    drop(conn);
    let mut back = Vec::new();
    peer.io.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"HTTP/1.0 200 OK\r\n\r\nhi");
}

#[tokio::test]
async fn a_port_connect_on_a_serving_channel_is_the_services_to_answer() {
    let to: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut peer = connect_to(Arc::new(Relaying { to })).await;
    for (id, op) in [(1, "ping"), (2, "port.connect")] {
        peer.send(
            FrameKind::Request,
            json!({"id": id, "op": op, "args": {"port": 8000}}),
            b"",
        )
        .await;
        let (kind, answer) = peer.header().await;
        assert_eq!(kind, FrameKind::Response);
        assert_eq!(answer["result"]["served"], op);
    }
}

#[tokio::test]
async fn a_relay_that_cannot_open_answers_why_and_closes() {
    let mut peer = connect(Vec::new(), 1).await;
    peer.send(
        FrameKind::Request,
        json!({"id": 1, "op": "port.connect", "args": {"port": 8000}}),
        b"",
    )
    .await;
    let (_, answer) = peer.header().await;
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["error"]["code"], "conflict");
    assert!(peer.next().await.is_none());
}
