//! The gateway's cache of subscribed streams: one mirror ring per stream, bounded in bytes per
//! stream and in the number of streams (least recently used unread first out), and the credit
//! it owes the agent for pages its readers have consumed.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::page::ReceivedPage;
use super::wire::ChannelError;
use crate::channel::message::ErrorCode;
use crate::channel::subscription::MAX_PUSH_PAGE_BYTES;
use crate::event::StreamKind;
use crate::policy::PolicyError;
use crate::ring::{EventRing, RingError, MIN_PAGE_BYTES};

/// Bounds of the cache and the flow-control window of each stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Encoded event bytes kept per stream; older events are read from the agent's log.
    pub stream_bytes: usize,
    /// Streams kept at once; subscribing one more drops the least recently used.
    pub max_streams: usize,
    /// Bytes of pages the agent may send a stream ahead of the gateway's credit.
    pub credit: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            stream_bytes: 1 << 20,
            max_streams: 64,
            credit: 1 << 20,
        }
    }
}

impl CacheConfig {
    /// The window granted to the agent: at most `credit`, and small enough that a window plus
    /// the one page the agent may send past it fits in the stream's cache, so events a reader
    /// has not read yet are never evicted from it (a cache too small for that still grants
    /// one page).
    pub fn window(&self) -> usize {
        let room = self.stream_bytes.saturating_sub(MAX_PUSH_PAGE_BYTES);
        self.credit.min(room.max(MIN_PAGE_BYTES))
    }

    pub fn check(&self) -> Result<(), PolicyError> {
        let positive = [
            ("cache.stream-bytes", self.stream_bytes),
            ("cache.max-streams", self.max_streams),
            ("cache.credit", self.credit),
        ];
        for (rule, value) in positive {
            if value == 0 {
                return Err(PolicyError::without_echo(
                    rule,
                    "stream_bytes, max_streams and credit must be positive",
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Stream {
    ring: Arc<EventRing>,
    /// Pages received and not yet read past, oldest first: the last seq the mirror held after
    /// each, and its bytes on the wire (what the agent charged against the credit).
    unread: VecDeque<(u64, usize)>,
    /// Bytes of pages read past and not yet returned to the agent as credit.
    consumed: usize,
    last_used: u64,
}

/// What consuming one page changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Consumed {
    /// New events, a restart after a gap, or the end of the stream: waiters should look.
    pub changed: bool,
}

#[derive(Debug)]
pub struct StreamCache {
    config: CacheConfig,
    streams: HashMap<String, Stream>,
    /// Readers per stream (cached or not): a stream being read is never dropped, so readers of
    /// more streams than the bound cannot evict each other's streams in turn (a livelock).
    pins: HashMap<String, usize>,
    tick: u64,
}

impl StreamCache {
    pub fn new(config: CacheConfig) -> Self {
        Self {
            config,
            streams: HashMap::new(),
            pins: HashMap::new(),
            tick: 0,
        }
    }

    pub fn config(&self) -> CacheConfig {
        self.config
    }

    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Encoded event bytes held across all streams.
    pub fn held_bytes(&self) -> usize {
        self.streams.values().map(|s| s.ring.held_bytes()).sum()
    }

    /// The stream's ring, marking the stream as recently used.
    pub fn get(&mut self, name: &str) -> Option<Arc<EventRing>> {
        self.tick += 1;
        let tick = self.tick;
        self.streams.get_mut(name).map(|s| {
            s.last_used = tick;
            Arc::clone(&s.ring)
        })
    }

    /// Counts one more reader of `name`; while it has readers it is not dropped.
    pub fn pin(&mut self, name: &str) {
        *self.pins.entry(name.to_owned()).or_default() += 1;
    }

    /// Counts one reader of `name` fewer.
    pub fn unpin(&mut self, name: &str) {
        if let Some(count) = self.pins.get_mut(name) {
            *count -= 1;
            if *count == 0 {
                self.pins.remove(name);
            }
        }
    }

    /// Starts caching `name` after `cursor`, first dropping the least recently used streams
    /// without readers so the count stays within bounds. Returns the dropped streams with
    /// whether each was still open (and so still subscribed at the agent), or `None` (nothing
    /// changed) when every cached stream has a reader and `overflow` is false. With `overflow`
    /// the stream is added past the bound instead; later additions trim the excess.
    pub fn add(
        &mut self,
        name: &str,
        cursor: u64,
        overflow: bool,
    ) -> Result<Option<Vec<(String, bool)>>, RingError> {
        let unpinned = self
            .streams
            .keys()
            .filter(|k| !self.pins.contains_key(k.as_str()))
            .count();
        let excess = (self.streams.len() + 1).saturating_sub(self.config.max_streams);
        if excess > unpinned && !overflow {
            return Ok(None);
        }
        let kind = StreamKind::of(name)?;
        let ring = Arc::new(EventRing::mirror(
            Some(kind),
            self.config.stream_bytes,
            None,
            cursor,
        )?);
        let mut dropped = Vec::new();
        while self.streams.len() >= self.config.max_streams {
            let Some(oldest) = self
                .streams
                .iter()
                .filter(|(k, _)| !self.pins.contains_key(k.as_str()))
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(stream) = self.streams.remove(&oldest) {
                dropped.push((oldest, !stream.ring.is_closed()));
            }
        }
        self.tick += 1;
        self.streams.insert(
            name.to_owned(),
            Stream {
                ring,
                unread: VecDeque::new(),
                consumed: 0,
                last_used: self.tick,
            },
        );
        Ok(Some(dropped))
    }

    pub fn remove(&mut self, name: &str) -> bool {
        self.streams.remove(name).is_some()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.streams.contains_key(name)
    }

    /// Takes one page of `name` into its ring and counts `wire_len` as unread until a reader
    /// reads past it ([`reader_at`](Self::reader_at)). `None` when the stream is not cached (a
    /// page in flight after it was dropped).
    pub fn consume(
        &mut self,
        name: &str,
        page: ReceivedPage,
        wire_len: usize,
    ) -> Option<Result<Consumed, ChannelError>> {
        let stream = self.streams.get_mut(name)?;
        let ring = &stream.ring;
        let before = (ring.last_seq(), ring.is_closed());
        if page.events.is_empty() && page.first_seq > before.0 + 1 {
            // The agent no longer keeps what follows the mirror: readers of it ask the agent,
            // whose log reports the loss with exact counts.
            ring.skip_to(page.first_seq);
        }
        let close = page.ends_stream();
        let settled = page.status.map(|status| (page.next_cursor, status));
        if let Err(e) = ring.insert_settled(page.events, close, settled) {
            return Some(Err(ChannelError::new(
                ErrorCode::Unavailable,
                format!("the agent sent a page that does not continue its stream ({e})"),
            )));
        }
        let after = (ring.last_seq(), ring.is_closed());
        if after.1 {
            // A stream that ended needs no more credit.
            stream.unread.clear();
            stream.consumed = 0;
        } else {
            stream.unread.push_back((after.0, wire_len));
        }
        Some(Ok(Consumed {
            changed: after != before,
        }))
    }

    /// A reader of `name` asked for the events after `cursor`, so it has consumed every page
    /// up to it. Returns the credit to give back to the agent now, if any.
    ///
    /// Credit follows consumption, not receipt, so the agent pushes no more than a window
    /// ahead of the most advanced reader: a stream nobody reads holds at most one window here,
    /// and the rest waits in the agent's log instead of being pushed through the cache (and
    /// out of it) unread. It goes back in batches of half the window (one frame per half
    /// window instead of one per page); the agent stops only after a whole window is
    /// unreturned, so a reader that keeps up never stalls it.
    pub fn reader_at(&mut self, name: &str, cursor: u64) -> Option<usize> {
        let half_window = self.config.window().div_ceil(2);
        let stream = self.streams.get_mut(name)?;
        while let Some(&(last_seq, bytes)) = stream.unread.front() {
            if last_seq > cursor {
                break;
            }
            stream.unread.pop_front();
            stream.consumed += bytes;
        }
        if stream.consumed >= half_window {
            Some(std::mem::take(&mut stream.consumed))
        } else {
            None
        }
    }

    /// Open streams and the cursor to resubscribe each from (the last seq its mirror holds),
    /// with their pages owed credit forgotten: a new subscription grants a new window.
    pub fn resume_points(&mut self) -> Vec<(String, u64)> {
        self.streams
            .iter_mut()
            .filter(|(_, s)| !s.ring.is_closed())
            .map(|(name, s)| {
                s.unread.clear();
                s.consumed = 0;
                (name.clone(), s.ring.last_seq())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    // Streams with readers are pinned in the cache: subscribing past the bound drops only streams
    // nobody reads, and refuses an exec (read its log) rather than evict a stream being read.

    use crate::channel::client::tests::{agent, connected};
    use crate::channel::client::*;

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
}
