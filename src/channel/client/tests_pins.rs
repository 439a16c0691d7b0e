//! Streams with readers are pinned in the cache: subscribing past the bound drops only streams
//! nobody reads, and refuses an exec (read its log) rather than evict a stream being read.

use super::tests::{agent, connected};
use super::*;

fn exec_id(n: u32) -> String {
    format!("ex-{n:032x}")
}

fn watch_id(n: u32) -> String {
    format!("fw-{n:032x}")
}

fn subscribed(channel: &mut AgentChannel, stream: &str) -> Subscribed {
    let sub = channel.subscribe(stream, 0).unwrap().unwrap();
    channel.feed(&agent::ok(sub.id, "{}", b""));
    sub
}

fn is_cached(channel: &mut AgentChannel, stream: &str) -> bool {
    !matches!(channel.read(stream, 0, 10, 0).unwrap(), CacheRead::Missing)
}

fn small() -> AgentChannel {
    connected(CacheConfig {
        max_streams: 2,
        ..CacheConfig::default()
    })
}

#[test]
fn a_pinned_stream_is_not_dropped_even_when_least_recently_used() {
    let mut channel = small();
    channel.pin(&exec_id(1));
    subscribed(&mut channel, &exec_id(1));
    subscribed(&mut channel, &exec_id(2));
    let sub = subscribed(&mut channel, &exec_id(3));
    assert_eq!(sub.dropped, vec![exec_id(2)]);
    assert!(is_cached(&mut channel, &exec_id(1)));
    assert_eq!(channel.cache_usage().0, 2);
}

#[test]
fn an_exec_is_refused_with_limit_when_every_cached_stream_has_a_reader() {
    let mut channel = small();
    for n in 1..=2 {
        channel.pin(&exec_id(n));
        subscribed(&mut channel, &exec_id(n));
    }
    channel.take_outgoing();
    let err = channel.subscribe(&exec_id(3), 0).unwrap_err();
    assert_eq!(err.code, "limit");
    // Nothing was dropped, cached or sent.
    assert!(channel.take_outgoing().is_empty());
    assert!(is_cached(&mut channel, &exec_id(1)) && is_cached(&mut channel, &exec_id(2)));
    assert!(!is_cached(&mut channel, &exec_id(3)));

    // Once a reader leaves, its stream makes room again.
    channel.unpin(&exec_id(2));
    let sub = subscribed(&mut channel, &exec_id(3));
    assert_eq!(sub.dropped, vec![exec_id(2)]);
}

#[test]
fn pins_count_readers_so_one_leaving_keeps_the_stream_pinned() {
    let mut channel = small();
    for _ in 0..2 {
        channel.pin(&exec_id(1));
    }
    channel.pin(&exec_id(2));
    subscribed(&mut channel, &exec_id(1));
    subscribed(&mut channel, &exec_id(2));
    channel.unpin(&exec_id(1));
    assert_eq!(channel.subscribe(&exec_id(3), 0).unwrap_err().code, "limit");
    channel.unpin(&exec_id(1));
    channel.unpin(&exec_id(9)); // never pinned: ignored
    assert_eq!(
        subscribed(&mut channel, &exec_id(3)).dropped,
        vec![exec_id(1)]
    );
}

#[test]
fn a_watch_has_no_log_so_it_is_cached_past_the_bound_and_trimmed_later() {
    let mut channel = small();
    for n in 1..=2 {
        channel.pin(&exec_id(n));
        subscribed(&mut channel, &exec_id(n));
    }
    let sub = subscribed(&mut channel, &watch_id(1));
    assert!(sub.dropped.is_empty());
    assert_eq!(channel.cache_usage().0, 3);
    for n in 1..=2 {
        channel.unpin(&exec_id(n));
    }
    let sub = subscribed(&mut channel, &exec_id(3));
    assert_eq!(sub.dropped.len(), 2);
    assert_eq!(channel.cache_usage().0, 2);
}
