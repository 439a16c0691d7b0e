//! What the channel does with each frame the agent sends: the Hello check, responses matched to
//! their requests, and pages taken into the stream cache (credit goes back as readers read).

use super::wire::{self, parse_header, ChannelError, ResponseView};
use super::{AgentChannel, Fed, Pending, ReceivedPage, Response};
use crate::channel::message::{ErrorCode, EventsHeader, Hello};
use crate::channel::{FrameKind, FrameRef};

impl AgentChannel {
    pub(super) fn handle(
        &mut self,
        frame: FrameRef<'_>,
        fed: &mut Fed,
    ) -> Result<(), ChannelError> {
        if self.hello.is_none() {
            return self.handle_hello(frame, fed);
        }
        match frame.kind {
            FrameKind::Response => self.handle_response(frame, fed),
            FrameKind::Events => self.handle_events(frame, fed),
            kind => Err(ChannelError::new(
                ErrorCode::Unavailable,
                format!("the agent sent an unexpected {kind:?} frame; the channel is closed"),
            )),
        }
    }

    fn handle_hello(&mut self, frame: FrameRef<'_>, fed: &mut Fed) -> Result<(), ChannelError> {
        match frame.kind {
            FrameKind::Hello => {
                let hello: Hello = parse_header(frame.kind, frame.header)?;
                wire::check_agent(&hello)?;
                self.agent_takes_keepalive = hello.keepalive;
                let json = String::from_utf8_lossy(frame.header).into_owned();
                self.hello = Some(json.clone());
                fed.hello = Some(json);
                Ok(())
            }
            // The agent refuses a gateway before its own Hello only to say why.
            FrameKind::Response => self.handle_response(frame, fed).and(Err(ChannelError::new(
                ErrorCode::Unavailable,
                "the agent answered before saying Hello; the channel is closed",
            ))),
            kind => Err(ChannelError::new(
                ErrorCode::Unavailable,
                format!("the peer's first frame was {kind:?}, not Hello: is it an agent?"),
            )),
        }
    }

    fn handle_response(&mut self, frame: FrameRef<'_>, fed: &mut Fed) -> Result<(), ChannelError> {
        let header: ResponseView<'_> = parse_header(frame.kind, frame.header)?;
        let body = match (header.ok, header.result, header.error) {
            (true, Some(result), _) => result.get().to_owned(),
            (true, None, _) => "{}".to_owned(),
            (false, _, Some(error)) => error.get().to_owned(),
            (false, _, None) => {
                ChannelError::new(ErrorCode::Internal, "the agent gave no reason").to_json()
            }
        };
        if header.id == 0 {
            // Id 0 answers no request: the agent is refusing the whole channel.
            return Err(channel_refusal(header.ok, &body));
        }
        let response = Response {
            id: header.id,
            ok: header.ok,
            body,
            payload: frame.payload.to_vec(),
        };
        match self.pending.remove(&header.id) {
            Some(Pending::Caller) => fed.responses.push(response),
            Some(Pending::Subscribe { stream, caller }) => {
                if !response.ok && self.cache.remove(&stream) {
                    wake(fed, &stream);
                }
                if caller {
                    fed.responses.push(response);
                }
            }
            Some(Pending::Internal) | None => {}
        }
        Ok(())
    }

    fn handle_events(&mut self, frame: FrameRef<'_>, fed: &mut Fed) -> Result<(), ChannelError> {
        let header: EventsHeader = parse_header(frame.kind, frame.header)?;
        if !self.cache.contains(&header.stream) {
            return Ok(());
        }
        let page = ReceivedPage::parse(frame.payload)?;
        let Some(consumed) = self
            .cache
            .consume(&header.stream, page, frame.payload.len())
        else {
            return Ok(());
        };
        if consumed?.changed {
            wake(fed, &header.stream);
        }
        Ok(())
    }
}

fn wake(fed: &mut Fed, stream: &str) {
    if !fed.woken.iter().any(|s| s == stream) {
        fed.woken.push(stream.to_owned());
    }
}

/// The agent's refusal of the channel (a response with id 0) as the channel's failure.
fn channel_refusal(ok: bool, body: &str) -> ChannelError {
    if ok {
        return ChannelError::new(
            ErrorCode::Unavailable,
            "the agent answered request id 0, which no gateway sends; the channel is closed",
        );
    }
    let (code, message) = wire::error_code(body);
    ChannelError::new(code, message)
}

#[cfg(test)]
mod tests {
    // The channel's stream cache: events into mirrors, credit returned, bounds held, resubscribe
    // after a reconnect — with pages cut from a real ring standing in for the agent's log.

    use serde_json::{Map, Value};

    use crate::channel::client::tests::{agent, connected};
    use crate::channel::client::*;
    use crate::channel::subscription::MAX_PUSH_PAGE_BYTES;
    use crate::channel::FrameKind;
    use crate::event::EventType;

    fn exec_id(n: u32) -> String {
        format!("ex-{n:032x}")
    }

    /// The agent's side of one stream: a ring and the cursor its pushes have reached.
    struct Source {
        ring: EventRing,
        sent: u64,
    }

    impl Source {
        fn new() -> Self {
            Self {
                ring: EventRing::new(64 << 20, None).unwrap(),
                sent: 0,
            }
        }

        fn lines(&self, from: u32, to: u32) {
            for i in from..=to {
                let line = format!("line {i}\n");
                self.ring
                    .append(EventType::Stdout, Some(line.as_bytes()), &Map::new())
                    .unwrap();
            }
        }

        /// The next page after what was sent, as an `Events` frame.
        fn push(&mut self, stream: &str, max_bytes: usize) -> Vec<u8> {
            let page = self.ring.read(self.sent, 10_000, max_bytes, false).unwrap();
            self.sent = page.next_cursor;
            agent::events(stream, &page.to_json())
        }
    }

    fn subscribe(channel: &mut AgentChannel, stream: &str, cursor: u64) -> u64 {
        let id = channel.subscribe(stream, cursor).unwrap().unwrap().id;
        channel.feed(&agent::ok(id, "{}", b""));
        id
    }

    fn cached_seqs(channel: &mut AgentChannel, stream: &str, cursor: u64) -> Vec<u64> {
        match channel.read(stream, cursor, 10_000, 16 << 20).unwrap() {
            CacheRead::Page(page) => page.events.iter().map(|e| e.seq()).collect(),
            other => panic!("expected a page, got {other:?}"),
        }
    }

    fn credits(bytes: &[u8]) -> Vec<(String, u64)> {
        agent::frames(bytes)
            .into_iter()
            .filter(|(kind, _, _)| *kind == FrameKind::Credit)
            .map(|(_, h, _)| {
                (
                    h["stream"].as_str().unwrap().to_owned(),
                    h["bytes"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn the_window_leaves_room_in_the_cache_for_the_page_the_agent_may_send_past_it() {
        let config = CacheConfig {
            stream_bytes: 1 << 20,
            credit: 1 << 20,
            ..CacheConfig::default()
        };
        assert_eq!(config.window(), (1 << 20) - MAX_PUSH_PAGE_BYTES);
        let small = CacheConfig {
            credit: 4096,
            ..config
        };
        assert_eq!(small.window(), 4096);
    }

    #[test]
    fn subscribing_asks_the_agent_from_the_cursor_with_a_credit_window() {
        let mut channel = connected(CacheConfig {
            credit: 4096,
            ..CacheConfig::default()
        });
        let stream = exec_id(1);
        let sub = channel.subscribe(&stream, 7).unwrap().unwrap();
        let sent = agent::frames(&channel.take_outgoing());
        assert_eq!(
            sent[0].1,
            serde_json::json!({"id": sub.id, "op": "subscribe",
                               "args": {"stream": stream, "cursor": 7, "credit": 4096}})
        );
        // A second subscription of a cached stream is a read, not a request.
        assert!(channel.subscribe(&stream, 0).unwrap().is_none());
        assert!(channel.take_outgoing().is_empty());
        let fed = channel.feed(&agent::ok(sub.id, "{}", b""));
        assert_eq!(fed.responses.len(), 1);
    }

    #[test]
    fn pushed_events_land_in_the_cache_under_the_agents_seqs() {
        let mut channel = connected(CacheConfig::default());
        let stream = exec_id(1);
        let mut source = Source::new();
        source.lines(1, 10);
        source.sent = 4;
        subscribe(&mut channel, &stream, 4);
        assert!(
            matches!(channel.read(&stream, 4, 10, 0).unwrap(), CacheRead::Page(p) if p.events.is_empty())
        );

        let fed = channel.feed(&source.push(&stream, 1 << 20));
        assert_eq!(fed.woken, vec![stream.clone()]);
        assert_eq!(
            cached_seqs(&mut channel, &stream, 4),
            (5..=10).collect::<Vec<_>>()
        );
        assert_eq!(cached_seqs(&mut channel, &stream, 8), vec![9, 10]);
        let CacheRead::Page(page) = channel.read(&stream, 4, 10, 0).unwrap() else {
            panic!()
        };
        let parsed: Value = serde_json::from_str(&page.to_json()).unwrap();
        assert_eq!(parsed["events"][0]["data"], "line 5\n");
        assert!(matches!(
            channel.read(&stream, 2, 10, 0).unwrap(),
            CacheRead::Expired(_)
        ));
        assert!(matches!(
            channel.read(&stream, 11, 10, 0).unwrap(),
            CacheRead::Ahead { closed: false }
        ));
        assert!(matches!(
            channel.read(&exec_id(2), 0, 10, 0).unwrap(),
            CacheRead::Missing
        ));

        // The end of the stream closes the mirror and wakes its readers once more.
        source.ring.close();
        let fed = channel.feed(&source.push(&stream, 1 << 20));
        assert_eq!(fed.woken, vec![stream.clone()]);
        assert!(
            matches!(channel.read(&stream, 10, 10, 0).unwrap(), CacheRead::Page(p) if p.closed)
        );
        assert!(matches!(
            channel.read(&stream, 11, 10, 0).unwrap(),
            CacheRead::Ahead { closed: true }
        ));
    }

    #[test]
    fn many_streams_interleave_without_mixing() {
        let mut channel = connected(CacheConfig::default());
        let mut sources: Vec<(String, Source)> =
            (1..=5).map(|n| (exec_id(n), Source::new())).collect();
        for (stream, _) in &sources {
            subscribe(&mut channel, stream, 0);
        }
        for round in 0..20 {
            let mut bytes = Vec::new();
            for (stream, source) in sources.iter_mut() {
                source.lines(round * 3 + 1, round * 3 + 3);
                bytes.extend(source.push(stream, 1 << 20));
            }
            // Fed in awkward pieces, as a transport would deliver them.
            for piece in bytes.chunks(97) {
                assert!(channel.feed(piece).failure.is_none());
            }
        }
        for (stream, _) in &sources {
            assert_eq!(
                cached_seqs(&mut channel, stream, 0),
                (1..=60).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn credit_is_returned_in_half_windows_as_readers_consume_pages() {
        let window = 64 * 1024;
        let mut channel = connected(CacheConfig {
            credit: window,
            ..CacheConfig::default()
        });
        let stream = exec_id(1);
        let mut source = Source::new();
        subscribe(&mut channel, &stream, 0);
        channel.take_outgoing();

        // Pages nobody reads earn no credit: the agent stops after one window.
        let (mut pushed, mut i) = (0, 0);
        while pushed < window {
            source.lines(i * 50 + 1, i * 50 + 50);
            let frame = source.push(&stream, 64 * 1024);
            pushed += frame.len() - agent::events(&stream, "").len();
            channel.feed(&frame);
            i += 1;
        }
        assert!(credits(&channel.take_outgoing()).is_empty());
        // A reader that asks for what follows an early event has consumed only the pages before.
        channel.read(&stream, 1, 10, 0).unwrap();
        assert!(credits(&channel.take_outgoing()).is_empty());

        let mut returned = 0;
        for i in i..i + 200 {
            source.lines(i * 50 + 1, i * 50 + 50);
            let frame = source.push(&stream, 64 * 1024);
            pushed += frame.len() - agent::events(&stream, "").len();
            channel.feed(&frame);
            channel.read(&stream, source.sent, 10, 0).unwrap();
            for (name, bytes) in credits(&channel.take_outgoing()) {
                assert_eq!(name, stream);
                assert!(
                    bytes as usize >= window / 2,
                    "credit returned in a crumb: {bytes}"
                );
                returned += bytes as usize;
            }
            // A reader that keeps up leaves the agent at least half a window: it never stalls.
            assert!(pushed - returned < window / 2, "owed {}", pushed - returned);
        }
        assert!(returned > 0);

        // No credit is owed for a stream that ended.
        source.ring.close();
        channel.feed(&source.push(&stream, 64 * 1024));
        channel.read(&stream, source.sent, 10, 0).unwrap();
        assert!(credits(&channel.take_outgoing()).is_empty());
    }

    #[test]
    fn a_flood_stays_within_the_cache_bound() {
        let stream_bytes = 256 * 1024;
        let mut channel = connected(CacheConfig {
            stream_bytes,
            ..CacheConfig::default()
        });
        let stream = exec_id(1);
        let mut source = Source::new();
        subscribe(&mut channel, &stream, 0);
        for i in 0..100 {
            source.lines(i * 1000 + 1, i * 1000 + 1000);
            while source.sent < source.ring.last_seq() {
                channel.feed(&source.push(&stream, 64 * 1024));
            }
            let (_, held) = channel.cache_usage();
            assert!(held <= stream_bytes, "held {held}");
            channel.take_outgoing();
        }
        assert_eq!(channel.ring(&stream).unwrap().last_seq(), 100_000);
        assert!(matches!(
            channel.read(&stream, 0, 10, 0).unwrap(),
            CacheRead::Expired(_)
        ));
        assert_eq!(
            cached_seqs(&mut channel, &stream, 99_998),
            vec![99_999, 100_000]
        );
    }

    #[test]
    fn the_least_recently_used_stream_makes_room_and_is_unsubscribed() {
        let mut channel = connected(CacheConfig {
            max_streams: 3,
            ..CacheConfig::default()
        });
        for n in 1..=3 {
            subscribe(&mut channel, &exec_id(n), 0);
        }
        channel.take_outgoing();
        channel.read(&exec_id(1), 0, 10, 0).unwrap(); // 2 is now the least recently used
        let sub = channel.subscribe(&exec_id(4), 0).unwrap().unwrap();
        assert_eq!(sub.dropped, vec![exec_id(2)]);
        let ops: Vec<(String, Value)> = agent::frames(&channel.take_outgoing())
            .into_iter()
            .map(|(_, h, _)| {
                (
                    h["op"].as_str().unwrap().to_owned(),
                    h["args"]["stream"].clone(),
                )
            })
            .collect();
        assert_eq!(
            ops,
            vec![
                ("unsubscribe".into(), exec_id(2).into()),
                ("subscribe".into(), exec_id(4).into())
            ]
        );
        assert_eq!(channel.cache_usage().0, 3);
        assert!(matches!(
            channel.read(&exec_id(2), 0, 10, 0).unwrap(),
            CacheRead::Missing
        ));

        // A page in flight for the dropped stream is ignored; the unsubscribe's answer is internal.
        let mut source = Source::new();
        source.lines(1, 3);
        let fed = channel.feed(&source.push(&exec_id(2), 1 << 20));
        assert!(fed.woken.is_empty() && fed.failure.is_none());
        assert!(channel
            .feed(&agent::ok(sub.id - 1, "{}", b""))
            .responses
            .is_empty());
    }

    #[test]
    fn a_refused_subscription_leaves_nothing_cached() {
        let mut channel = connected(CacheConfig::default());
        let stream = exec_id(9);
        let id = channel.subscribe(&stream, 0).unwrap().unwrap().id;
        let fed = channel.feed(&agent::err(id, "not_found", "no such exec"));
        assert_eq!(fed.responses.len(), 1);
        assert!(!fed.responses[0].ok);
        assert_eq!(fed.woken, vec![stream.clone()]);
        assert!(matches!(
            channel.read(&stream, 0, 10, 0).unwrap(),
            CacheRead::Missing
        ));
    }

    #[test]
    fn events_the_agent_dropped_make_the_cache_restart_and_send_old_cursors_to_the_log() {
        let mut channel = connected(CacheConfig::default());
        let stream = exec_id(1);
        subscribe(&mut channel, &stream, 0);
        let small = EventRing::new(2048, None).unwrap();
        for i in 1..=200 {
            small
                .append(
                    EventType::Stdout,
                    Some(format!("line {i}\n").as_bytes()),
                    &Map::new(),
                )
                .unwrap();
        }
        let page = small.read(0, 10_000, 1 << 20, false).unwrap();
        assert!(page.cursor_expired);
        let first = page.first_seq;
        let fed = channel.feed(&agent::events(&stream, &page.to_json()));
        assert!(fed.failure.is_none());
        assert_eq!(
            cached_seqs(&mut channel, &stream, first - 1),
            (first..=200).collect::<Vec<_>>()
        );
        assert!(matches!(
            channel.read(&stream, 0, 10, 0).unwrap(),
            CacheRead::Expired(_)
        ));
    }

    #[test]
    fn after_a_restart_every_open_stream_resumes_from_its_last_seq_exactly_once() {
        let mut channel = connected(CacheConfig::default());
        let (open, ended) = (exec_id(1), exec_id(2));
        let mut sources = [Source::new(), Source::new()];
        subscribe(&mut channel, &open, 0);
        subscribe(&mut channel, &ended, 0);
        sources[0].lines(1, 30);
        sources[1].lines(1, 5);
        sources[1].ring.close();
        channel.feed(&sources[0].push(&open, 1 << 20));
        channel.feed(&sources[1].push(&ended, 1 << 20));
        let pending = channel.request("ping", "{}", Vec::new()).unwrap();

        // The transport dies; a page was in flight and is lost with it. More output follows.
        sources[0].lines(31, 40);
        let _lost = sources[0].push(&open, 1 << 20);
        channel.restart();
        let sent = agent::frames(&channel.take_outgoing());
        assert_eq!(sent[0].0, FrameKind::Hello);
        let resubscribes: Vec<&Value> = sent[1..].iter().map(|(_, h, _)| h).collect();
        assert_eq!(resubscribes.len(), 1, "only the open stream resubscribes");
        assert_eq!(resubscribes[0]["op"], "subscribe");
        assert_eq!(resubscribes[0]["args"]["stream"], open.as_str());
        assert_eq!(resubscribes[0]["args"]["cursor"], 30);
        let resubscribe_id = resubscribes[0]["id"].as_u64().unwrap();

        // The old session's answers mean nothing now; the new session starts with Hello.
        let mut bytes = agent::hello();
        bytes.extend(agent::ok(pending, "{}", b""));
        bytes.extend(agent::ok(resubscribe_id, "{}", b""));
        // The agent resends from 30, and (a little overlap) from 25: nothing is doubled.
        let overlap = sources[0].ring.read(25, 10_000, 1 << 20, false).unwrap();
        bytes.extend(agent::events(&open, &overlap.to_json()));
        let fed = channel.feed(&bytes);
        assert!(fed.failure.is_none() && fed.responses.is_empty());
        assert_eq!(
            cached_seqs(&mut channel, &open, 0),
            (1..=40).collect::<Vec<_>>()
        );
        assert_eq!(
            cached_seqs(&mut channel, &ended, 0),
            (1..=5).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_page_that_contradicts_the_cache_fails_the_channel() {
        let mut channel = connected(CacheConfig::default());
        let stream = exec_id(1);
        subscribe(&mut channel, &stream, 0);
        let mut source = Source::new();
        source.lines(1, 3);
        source.ring.close();
        channel.feed(&source.push(&stream, 1 << 20));
        // Events after the end of a stream cannot be.
        let later = Source::new();
        later.lines(1, 5);
        let page = later.ring.read(3, 100, 1 << 20, false).unwrap();
        let fed = channel.feed(&agent::events(&stream, &page.to_json()));
        assert_eq!(fed.failure.unwrap().code, "unavailable");

        let mut channel = connected(CacheConfig::default());
        subscribe(&mut channel, &stream, 0);
        assert!(channel
            .feed(&agent::events(&stream, r#"{"events":[1]}"#))
            .failure
            .is_some());
    }
}
