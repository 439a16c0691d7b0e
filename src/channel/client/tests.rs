//! The channel's handshake and request/response handling, against frames built by hand as an
//! agent would send them. The stream cache is tested beside its code (receive.rs, cache.rs).

use super::*;
use crate::channel::FrameKind;

/// Frames as an agent would write them.
pub(super) mod agent {
    use crate::channel::{Frame, FrameDecoder, FrameKind};

    pub fn wire(kind: FrameKind, header: &str, payload: &[u8]) -> Vec<u8> {
        Frame::new(kind, header.as_bytes().to_vec(), payload.to_vec())
            .encode()
            .unwrap()
    }

    pub fn hello() -> Vec<u8> {
        hello_with(1, "0.1.0")
    }

    pub fn hello_with(protocol: u32, build: &str) -> Vec<u8> {
        let header = format!(r#"{{"protocol":{protocol},"build":"{build}","role":"agent"}}"#);
        wire(FrameKind::Hello, &header, b"")
    }

    pub fn ok(id: u64, result: &str, payload: &[u8]) -> Vec<u8> {
        let header = format!(r#"{{"id":{id},"ok":true,"result":{result}}}"#);
        wire(FrameKind::Response, &header, payload)
    }

    pub fn err(id: u64, code: &str, message: &str) -> Vec<u8> {
        let header = format!(
            r#"{{"id":{id},"ok":false,"error":{{"code":"{code}","message":"{message}"}}}}"#
        );
        wire(FrameKind::Response, &header, b"")
    }

    pub fn events(stream: &str, page_json: &str) -> Vec<u8> {
        wire(
            FrameKind::Events,
            &format!(r#"{{"stream":"{stream}"}}"#),
            page_json.as_bytes(),
        )
    }

    /// Every frame in `bytes`, as (kind, header JSON, payload).
    pub fn frames(bytes: &[u8]) -> Vec<(FrameKind, serde_json::Value, Vec<u8>)> {
        let mut decoder = FrameDecoder::new();
        decoder.feed(bytes);
        let mut out = Vec::new();
        while let Some(frame) = decoder.next_frame().unwrap() {
            let header = serde_json::from_slice(&frame.header).unwrap();
            out.push((frame.kind, header, frame.payload));
        }
        assert_eq!(decoder.pending(), 0, "a partial frame was written");
        out
    }
}

/// A channel that has exchanged Hellos (the gateway's Hello already taken).
pub(super) fn connected(config: CacheConfig) -> AgentChannel {
    let mut channel = AgentChannel::new(config).unwrap();
    channel.take_outgoing();
    let fed = channel.feed(&agent::hello());
    assert!(fed.hello.is_some() && fed.failure.is_none());
    channel
}

#[test]
fn the_gateway_says_hello_first_and_accepts_the_agents() {
    let mut channel = AgentChannel::new(CacheConfig::default()).unwrap();
    let id = channel.request("ping", "{}", Vec::new()).unwrap();
    let sent = agent::frames(&channel.take_outgoing());
    assert_eq!(sent[0].0, FrameKind::Hello);
    assert_eq!(sent[0].1["protocol"], 1);
    assert_eq!(sent[0].1["role"], "gateway");
    assert_eq!(sent[0].1["build"], BUILD);
    assert_eq!(sent[1].0, FrameKind::Request);
    assert_eq!(
        sent[1].1,
        serde_json::json!({"id": id, "op": "ping", "args": {}})
    );
    assert!(channel.take_outgoing().is_empty());

    assert!(channel.agent_hello().is_none());
    let fed = channel.feed(&agent::hello());
    let hello: serde_json::Value = serde_json::from_str(fed.hello.as_deref().unwrap()).unwrap();
    assert_eq!(hello["role"], "agent");
    assert!(channel.agent_hello().is_some());
}

#[test]
fn a_protocol_mismatch_fails_the_channel_naming_both_sides() {
    let mut channel = AgentChannel::new(CacheConfig::default()).unwrap();
    let id = channel.request("ping", "{}", Vec::new()).unwrap();
    let mut bytes = agent::hello_with(2, "7.0.0");
    bytes.extend(agent::ok(id, "{}", b""));
    let fed = channel.feed(&bytes);
    let failure = fed.failure.unwrap();
    assert_eq!(failure.code, "protocol_mismatch");
    for part in ["protocol 1", "protocol 2", BUILD, "7.0.0"] {
        assert!(
            failure.message.contains(part),
            "{part} missing: {}",
            failure.message
        );
    }
    // Nothing after the refusal is believed, and the failure is reported once.
    assert!(fed.hello.is_none() && fed.responses.is_empty());
    assert!(channel.feed(&agent::ok(id, "{}", b"")).failure.is_none());
    assert_eq!(channel.failure().unwrap().code, "protocol_mismatch");
    assert_eq!(
        channel.request("ping", "{}", Vec::new()).unwrap_err().code,
        "unavailable"
    );
}

#[test]
fn the_agents_refusal_with_id_zero_fails_the_channel_with_its_code() {
    let mut channel = AgentChannel::new(CacheConfig::default()).unwrap();
    let mut bytes = agent::hello();
    bytes.extend(agent::err(
        0,
        "protocol_mismatch",
        "agent speaks 1, gateway 3",
    ));
    let failure = channel.feed(&bytes).failure.unwrap();
    assert_eq!(failure.code, "protocol_mismatch");
    assert_eq!(failure.message, "agent speaks 1, gateway 3");
}

#[test]
fn a_peer_that_does_not_start_with_hello_is_refused() {
    let mut channel = AgentChannel::new(CacheConfig::default()).unwrap();
    let failure = channel.feed(&agent::ok(1, "{}", b"")).failure.unwrap();
    assert_eq!(failure.code, "unavailable");

    let mut channel = AgentChannel::new(CacheConfig::default()).unwrap();
    let gateway_hello = agent::wire(
        FrameKind::Hello,
        r#"{"protocol":1,"build":"x","role":"gateway"}"#,
        b"",
    );
    assert!(channel
        .feed(&gateway_hello)
        .failure
        .unwrap()
        .message
        .contains("gateway"));

    let mut channel = AgentChannel::new(CacheConfig::default()).unwrap();
    assert!(channel
        .feed(b"HTTP/1.1 400 Bad Request\r\n")
        .failure
        .is_some());
}

#[test]
fn responses_out_of_order_each_reach_their_request() {
    let mut channel = connected(CacheConfig::default());
    let a = channel
        .request("file.grep", r#"{"path":"."}"#, Vec::new())
        .unwrap();
    let b = channel
        .request("exec.input", r#"{"exec_id":"x"}"#, b"stdin".to_vec())
        .unwrap();
    let c = channel
        .request("file.read", r#"{"path":"f"}"#, Vec::new())
        .unwrap();
    assert!(a < b && b < c);
    let sent = agent::frames(&channel.take_outgoing());
    assert_eq!(sent[1].2, b"stdin");

    let mut bytes = agent::ok(c, r#"{"size":3}"#, b"\x00\xff\x01");
    bytes.extend(agent::err(a, "timeout", "search took too long"));
    bytes.extend(agent::ok(b, r#"{"accepted":5}"#, b""));
    let fed = channel.feed(&bytes);
    let got: Vec<_> = fed.responses.iter().map(|r| (r.id, r.ok)).collect();
    assert_eq!(got, vec![(c, true), (a, false), (b, true)]);
    assert_eq!(fed.responses[0].body, r#"{"size":3}"#);
    assert_eq!(fed.responses[0].payload, b"\x00\xff\x01");
    let error: serde_json::Value = serde_json::from_str(&fed.responses[1].body).unwrap();
    assert_eq!(error["code"], "timeout");

    // An answer to no outstanding request (a duplicate) is dropped.
    assert!(channel.feed(&agent::ok(b, "{}", b"")).responses.is_empty());
}

#[test]
fn a_cancelled_request_never_answers() {
    let mut channel = connected(CacheConfig::default());
    let id = channel.request("ping", "{}", Vec::new()).unwrap();
    channel.cancel(id);
    let fed = channel.feed(&agent::ok(id, "{}", b""));
    assert!(fed.responses.is_empty() && fed.failure.is_none());
}

#[test]
fn bytes_cut_anywhere_give_the_same_responses() {
    let mut wire = agent::hello();
    wire.extend(agent::ok(1, r#"{"a":1}"#, b"xyz"));
    wire.extend(agent::ok(2, "{}", b""));
    for cut in 0..wire.len() {
        let mut channel = AgentChannel::new(CacheConfig::default()).unwrap();
        channel.request("ping", "{}", Vec::new()).unwrap();
        channel.request("ping", "{}", Vec::new()).unwrap();
        let mut ids = Vec::new();
        for piece in [&wire[..cut], &wire[cut..]] {
            let fed = channel.feed(piece);
            assert!(fed.failure.is_none());
            ids.extend(fed.responses.iter().map(|r| r.id));
        }
        assert_eq!(ids, vec![1, 2], "cut at {cut}");
    }
}

#[test]
fn a_response_with_a_malformed_header_fails_the_channel() {
    let mut channel = connected(CacheConfig::default());
    let fed = channel.feed(&agent::wire(FrameKind::Response, r#"{"ok":true}"#, b""));
    assert_eq!(fed.failure.unwrap().code, "unavailable");
    let mut channel = connected(CacheConfig::default());
    let fed = channel.feed(&agent::wire(
        FrameKind::Request,
        r#"{"id":1,"op":"x","args":{}}"#,
        b"",
    ));
    assert!(fed.failure.is_some());
}

#[test]
fn bad_requests_are_refused_before_anything_is_sent() {
    let mut channel = connected(CacheConfig::default());
    assert_eq!(
        channel.request("", "{}", Vec::new()).unwrap_err().code,
        "invalid_argument"
    );
    assert_eq!(
        channel.request("ping", "[]", Vec::new()).unwrap_err().code,
        "invalid_argument"
    );
    assert!(channel.take_outgoing().is_empty());
    assert_eq!(
        channel.subscribe("ex-nope", 0).unwrap_err().code,
        "invalid_argument"
    );
    assert!(AgentChannel::new(CacheConfig {
        max_streams: 0,
        ..CacheConfig::default()
    })
    .is_err());
}

#[test]
fn keepalives_go_only_to_an_agent_that_takes_them() {
    let mut channel = AgentChannel::configured(CacheConfig::default(), None, 7).unwrap();
    let hello = channel.take_outgoing();
    let mut decoder = FrameDecoder::new();
    decoder.feed(&hello);
    let sent = decoder.next_frame().unwrap().unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&sent.header).unwrap();
    assert_eq!(
        sent["keepalive_seconds"], 7,
        "the Hello promises the keepalive"
    );
    assert!(!channel.keepalive(), "nothing before the agent's Hello");

    // An older agent (its Hello says nothing of keepalives) never gets one.
    channel.feed(&agent::hello());
    assert!(!channel.keepalive() && channel.take_outgoing().is_empty());

    channel.restart();
    channel.take_outgoing();
    let header = r#"{"protocol":1,"build":"0.1.0","role":"agent","keepalive":true}"#;
    channel.feed(&agent::wire(FrameKind::Hello, header, b""));
    assert!(channel.keepalive());
    let mut decoder = FrameDecoder::new();
    decoder.feed(&channel.take_outgoing());
    assert_eq!(
        decoder.next_frame().unwrap().unwrap().kind,
        FrameKind::Keepalive
    );
}

#[test]
fn a_keepalive_out_of_range_is_refused() {
    for seconds in [0, 301] {
        let err = AgentChannel::configured(CacheConfig::default(), None, seconds).unwrap_err();
        assert_eq!(err.rule, "channel.keepalive");
    }
}
