//! Mirror mode: a ring that holds another ring's events under their original seqs, fed already
//! encoded events (a gateway's cache of an agent's stream) instead of appended bytes.

use super::{EventRing, RingError};
use crate::event::{Event, StreamKind, StreamStatus};

/// What [`EventRing::insert`] did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Inserted {
    /// Events added (events the mirror already held are skipped, not repeated).
    pub added: usize,
    /// The batch started after a gap: what the mirror held was dropped and it now starts at
    /// the batch's first event.
    pub restarted: bool,
}

impl EventRing {
    /// An empty mirror positioned after `cursor`: the first event it takes is `cursor + 1`, and
    /// reads of older cursors report them expired (their events live at the source).
    /// Until the source says its status ([`EventRing::insert_settled`]), the mirror assumes the
    /// kind's initial state from cursor 0 and its live state past it.
    pub fn mirror(
        kind: Option<StreamKind>,
        max_bytes: usize,
        max_events: Option<usize>,
        cursor: u64,
    ) -> Result<Self, RingError> {
        let ring = Self::of_kind(kind, max_bytes, max_events)?;
        ring.writer.lock().next_seq = cursor + 1;
        let mut state = ring.state.lock();
        state.last_seq = cursor;
        state.status = StreamStatus::assumed_at(kind, cursor);
        drop(state);
        Ok(ring)
    }

    /// Adds events received from the source in seq order, without re-encoding them. Events at
    /// or below the last seq held are skipped (a page repeated after a resubscribe); a batch
    /// that starts past the next seq is a gap at the source (or a cursor it expired), so the
    /// mirror drops what it holds and restarts at the batch's first event. `close` marks the
    /// source's end after the batch. Refused: a batch that is not consecutive in itself, or
    /// any event after the mirror was closed.
    pub fn insert(&self, events: Vec<Event>, close: bool) -> Result<Inserted, RingError> {
        self.insert_settled(events, close, None)
    }

    /// [`EventRing::insert`] of a page that says the source's status as of its `next_cursor`
    /// (`settled`): the mirror takes it when that is where the mirror now ends, so its pages
    /// show what the source knew before the mirror began, too.
    pub fn insert_settled(
        &self,
        events: Vec<Event>,
        close: bool,
        settled: Option<(u64, StreamStatus)>,
    ) -> Result<Inserted, RingError> {
        let mut writer = self.writer.lock();
        let fresh: Vec<Event> = events
            .into_iter()
            .skip_while(|e| e.seq() < writer.next_seq)
            .collect();
        if let Some(pair) = fresh.windows(2).find(|w| w[1].seq() != w[0].seq() + 1) {
            return Err(RingError::MirrorOrder {
                previous: pair[0].seq(),
                seq: pair[1].seq(),
            });
        }
        if !fresh.is_empty() {
            writer.check_open()?;
        }
        let mut inserted = Inserted {
            added: fresh.len(),
            restarted: false,
        };
        if let Some(first) = fresh.first().map(Event::seq) {
            if first > writer.next_seq {
                self.restart(&mut writer, first);
                inserted.restarted = true;
            }
        }
        if let Some(last) = fresh.last() {
            writer.next_seq = last.seq() + 1;
        }
        let settled = settled
            .filter(|&(next_cursor, _)| next_cursor + 1 == writer.next_seq)
            .map(|(_, status)| status);
        let close = close && !writer.closed;
        writer.closed |= close;
        self.publish_settled(fresh, close, settled);
        Ok(inserted)
    }

    /// Moves an open mirror forward to hold nothing before `next_seq`, as when the source says
    /// the events before it are gone. Does nothing if the mirror is already there or past it.
    pub fn skip_to(&self, next_seq: u64) -> bool {
        let mut writer = self.writer.lock();
        if next_seq <= writer.next_seq || writer.closed {
            return false;
        }
        self.restart(&mut writer, next_seq);
        writer.next_seq = next_seq;
        drop(writer);
        self.changed.notify_all();
        self.notify.notify_waiters();
        true
    }

    /// Evicts everything held (into the ledger) and positions the state just before `next_seq`.
    /// Called with the writer lock held.
    fn restart(&self, _writer: &mut super::Writer, next_seq: u64) {
        let mut state = self.state.lock();
        while let Some(oldest) = state.events.pop_front() {
            state.bytes -= oldest.encoded_len();
            state.ledger.record(oldest.data_len());
        }
        state.last_seq = next_seq - 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{encode, EventType, Fields, Payload, StreamState};
    use crate::ring::PageEvent;
    use std::sync::Arc;

    const TS: &str = "2026-11-29T10:04:45.123Z";

    fn events(seqs: std::ops::RangeInclusive<u64>) -> Vec<Event> {
        seqs.map(|seq| {
            let text = format!("line {seq}\n");
            encode(
                seq,
                TS,
                EventType::Stdout,
                Payload::Text(&text),
                &Fields::default(),
            )
        })
        .collect()
    }

    fn seqs(ring: &EventRing, cursor: u64) -> Vec<u64> {
        let page = ring.read(cursor, 1000, 1 << 20, false).unwrap();
        page.events.iter().map(PageEvent::seq).collect()
    }

    #[test]
    fn a_mirror_keeps_the_source_seqs_from_its_cursor() {
        let ring = EventRing::mirror(None, 1 << 20, None, 10).unwrap();
        assert_eq!(ring.last_seq(), 10);
        assert_eq!(ring.read(10, 10, 0, false).unwrap().events.len(), 0);
        ring.insert(events(11..=13), false).unwrap();
        assert_eq!(seqs(&ring, 10), vec![11, 12, 13]);
        assert_eq!(seqs(&ring, 12), vec![13]);
        let older = ring.read(5, 10, 0, false).unwrap();
        assert!(older.cursor_expired);
        assert_eq!(older.dropped_events, 5);
    }

    #[test]
    fn a_mirrors_first_batch_follows_its_cursor_without_a_restart() {
        let ring = EventRing::mirror(None, 1 << 20, None, 10).unwrap();
        // Seq 10 is the cursor's own event: the reader has it, the mirror must not.
        let inserted = ring.insert(events(10..=12), false).unwrap();
        assert_eq!(
            inserted,
            Inserted {
                added: 2,
                restarted: false
            }
        );
        assert_eq!(seqs(&ring, 10), vec![11, 12]);
    }

    #[test]
    fn a_settled_status_is_taken_only_where_the_mirror_ends() {
        let ring = EventRing::mirror(Some(StreamKind::Exec), 1 << 20, None, 0).unwrap();
        let failed = StreamStatus {
            state: Some(StreamState::Failed),
            returncode: Some(1),
        };
        ring.insert_settled(events(1..=3), false, Some((3, failed)))
            .unwrap();
        assert_eq!(ring.status(), failed);
        let stale = StreamStatus {
            state: Some(StreamState::Lost),
            returncode: None,
        };
        ring.insert_settled(events(4..=5), false, Some((3, stale)))
            .unwrap();
        assert_eq!(
            ring.status(),
            failed,
            "a status as of seq 3 says nothing of 5"
        );
    }

    #[test]
    fn skip_to_moves_only_an_open_mirror_and_only_forward() {
        let ring = EventRing::mirror(None, 1 << 20, None, 0).unwrap();
        ring.insert(events(1..=5), false).unwrap();
        assert!(!ring.skip_to(3), "behind what it holds");
        assert!(!ring.skip_to(6), "where it already is");
        assert_eq!(seqs(&ring, 0), vec![1, 2, 3, 4, 5]);
        assert!(ring.skip_to(8));
        assert_eq!((ring.last_seq(), ring.held_bytes()), (7, 0));
        ring.insert(events(8..=8), true).unwrap();
        assert!(!ring.skip_to(20), "a closed mirror stays where it ended");
        assert_eq!(ring.last_seq(), 8);
    }

    #[test]
    fn a_restart_counts_only_the_bytes_it_now_holds() {
        let ring = EventRing::mirror(None, 1 << 20, None, 0).unwrap();
        // One event held: a miscount of what the restart drops cannot cancel out to zero.
        ring.insert(events(1..=1), false).unwrap();
        let batch = events(10..=11);
        let held: usize = batch.iter().map(Event::encoded_len).sum();
        assert!(ring.insert(batch, false).unwrap().restarted);
        assert_eq!(ring.held_bytes(), held);
    }

    #[test]
    fn repeated_events_are_skipped_and_never_doubled() {
        let ring = EventRing::mirror(None, 1 << 20, None, 0).unwrap();
        assert_eq!(ring.insert(events(1..=3), false).unwrap().added, 3);
        let again = ring.insert(events(2..=5), false).unwrap();
        assert_eq!(
            again,
            Inserted {
                added: 2,
                restarted: false
            }
        );
        assert_eq!(seqs(&ring, 0), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_gap_restarts_the_mirror_at_the_batch() {
        let ring = EventRing::mirror(None, 1 << 20, None, 0).unwrap();
        ring.insert(events(1..=3), false).unwrap();
        let inserted = ring.insert(events(10..=11), false).unwrap();
        assert!(inserted.restarted);
        assert_eq!(seqs(&ring, 9), vec![10, 11]);
        let page = ring.read(3, 10, 0, false).unwrap();
        assert!(page.cursor_expired);
        assert_eq!(page.first_seq, 10);
        assert_eq!(page.dropped_events, 6);
        assert!(ring.skip_to(20));
        assert_eq!(ring.last_seq(), 19);
        assert!(ring.read(11, 10, 0, false).unwrap().cursor_expired);
        ring.insert(events(20..=20), false).unwrap();
        assert_eq!(seqs(&ring, 19), vec![20]);
    }

    #[test]
    fn a_batch_with_a_hole_is_refused_whole() {
        let ring = EventRing::mirror(None, 1 << 20, None, 0).unwrap();
        let mut batch = events(1..=2);
        batch.extend(events(4..=4));
        assert!(ring.insert(batch, false).is_err());
        assert_eq!(ring.last_seq(), 0);
    }

    #[test]
    fn closing_wakes_and_refuses_later_events() {
        let ring = EventRing::mirror(None, 1 << 20, None, 0).unwrap();
        ring.insert(events(1..=2), true).unwrap();
        assert!(ring.is_closed());
        assert!(ring.wait(2, std::time::Duration::ZERO));
        assert!(ring.read(0, 10, 0, false).unwrap().closed);
        assert!(ring.insert(events(3..=3), false).is_err());
        // A repeat of what it holds is still fine: a resubscribe may resend the tail.
        assert_eq!(ring.insert(events(2..=2), true).unwrap().added, 0);
    }

    #[test]
    fn a_mirror_is_bounded_like_any_ring() {
        let ring = EventRing::mirror(None, 4096, None, 0).unwrap();
        for start in (1..=1000).step_by(10) {
            ring.insert(events(start..=start + 9), false).unwrap();
        }
        let page = ring.read(1000 - 5, 100, 0, false).unwrap();
        assert_eq!(page.events.len(), 5);
        assert!(ring.read(0, 100, 0, false).unwrap().cursor_expired);
    }

    #[test]
    fn inserted_events_wake_async_waiters() {
        let ring = Arc::new(EventRing::mirror(None, 1 << 20, None, 0).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let waiter = Arc::clone(&ring);
        let woke = rt.block_on(async move {
            let wait = tokio::spawn(async move {
                waiter
                    .wait_async(0, std::time::Duration::from_secs(30))
                    .await
            });
            tokio::task::yield_now().await;
            ring.insert(events(1..=1), false).unwrap();
            wait.await.unwrap()
        });
        assert!(woke);
    }
}
