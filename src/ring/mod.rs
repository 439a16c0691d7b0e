//! The byte-budgeted cursor ring: appends number events 1, 2, 3, … and evict the oldest, readers
//! page from a cursor and learn exactly what they lost, and waiters wake on a notification.

mod doorbell;
mod error;
pub mod ledger;
mod mirror;
mod page;
mod ready;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::{Map, Value};
use tokio::sync::Notify;

pub use doorbell::Doorbell;
pub use error::RingError;
pub use ready::{ReadyCallback, WaiterId};
use writer::Writer;

use crate::event::{Event, EventType, Fields, StreamKind, StreamStatus};
use crate::policy::PolicyError;
use ledger::Ledger;
pub use mirror::Inserted;
pub use page::{
    envelope_max_len, events_budget, Layout, Page, PageEvent, MAX_PAGE_EVENTS, MIN_PAGE_BYTES,
    RESUME_NOTE_MAX_LEN,
};

/// A stream's events, bounded in encoded bytes (and optionally in count). Share it in an `Arc`:
/// any number of threads may append, read and wait at once.
///
/// Two locks keep readers off the writers' path: `writer` orders appends (decoding, numbering
/// and encoding happen under it), `state` is held only to push or clone events (a clone is a
/// reference count).
#[derive(Debug)]
pub struct EventRing {
    /// What the stream is, when the owner said: it decides the state before any event.
    kind: Option<StreamKind>,
    max_bytes: usize,
    max_events: Option<usize>,
    writer: Mutex<Writer>,
    state: Mutex<State>,
    /// Wakes blocked waiters; used with `state`.
    changed: Condvar,
    /// Wakes async waiters.
    notify: Notify,
    /// `publish` made callbacks ready (see [`EventRing::on_ready`]) that no one has run yet.
    wakes_pending: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    events: VecDeque<Event>,
    /// The stream's status as of `last_seq`: the fold of every event published.
    status: StreamStatus,
    /// Encoded bytes of the kept events.
    bytes: usize,
    last_seq: u64,
    closed: bool,
    ledger: Ledger,
    /// The emptied vector of the last batch published: the next append collects into it, so a
    /// one-event append allocates nothing but the event.
    spare: Vec<Event>,
    waiters: ready::Waiters,
}

impl State {
    /// The oldest kept seq; `last_seq + 1` (the next to come) when nothing is kept yet.
    fn first_seq(&self) -> u64 {
        self.last_seq + 1 - self.events.len() as u64
    }

    fn ready(&self, cursor: u64) -> bool {
        self.last_seq > cursor || self.closed
    }

    /// Evicts the oldest events (into the ledger) until at most `max_bytes` and `max_events`
    /// are kept; the newest event always stays. Returns the bytes freed.
    fn evict_to(&mut self, max_bytes: usize, max_events: usize) -> usize {
        let before = self.bytes;
        while self.events.len() > 1 && (self.bytes > max_bytes || self.events.len() > max_events) {
            if let Some(oldest) = self.events.pop_front() {
                self.bytes -= oldest.encoded_len();
                self.ledger.record(oldest.data_len());
            }
        }
        before - self.bytes
    }
}

impl EventRing {
    /// A ring that keeps at most `max_bytes` of encoded events and at most `max_events` events;
    /// the newest event is kept even when it alone is larger than the budget.
    pub fn new(max_bytes: usize, max_events: Option<usize>) -> Result<Self, RingError> {
        Self::of_kind(None, max_bytes, max_events)
    }

    /// [`EventRing::new`] for a stream of `kind`, whose pages then always carry a state.
    pub fn of_kind(
        kind: Option<StreamKind>,
        max_bytes: usize,
        max_events: Option<usize>,
    ) -> Result<Self, RingError> {
        if max_bytes == 0 {
            return Err(RingError::Bound {
                rule: "ring.max-bytes",
                message: "max_bytes must be a positive number of bytes",
            });
        }
        if max_events == Some(0) {
            return Err(RingError::Bound {
                rule: "ring.max-events",
                message: "max_events must be positive (or None for no limit on the count)",
            });
        }
        Ok(Self {
            kind,
            max_bytes,
            max_events,
            writer: Mutex::new(Writer::new()),
            state: Mutex::new(State {
                status: StreamStatus::initial(kind),
                ..State::default()
            }),
            changed: Condvar::new(),
            notify: Notify::new(),
            wakes_pending: AtomicBool::new(false),
        })
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    pub fn kind(&self) -> Option<StreamKind> {
        self.kind
    }

    /// The stream's status as of its newest event.
    pub fn status(&self) -> StreamStatus {
        self.state.lock().status
    }

    pub fn max_events(&self) -> Option<usize> {
        self.max_events
    }

    /// Appends one event (or several, when the data is large), returning the last seq assigned
    /// so far. Output (`stdout`, `stderr`) is decoded per stream: an unfinished character is
    /// held back until the next append of that stream, so an append may add no event at all.
    /// Other types take `fields`, merged at the top level of the event. An `exit` event first
    /// flushes what the output streams held back, so that it comes last.
    pub fn append(
        &self,
        kind: EventType,
        data: Option<&[u8]>,
        fields: &Map<String, Value>,
    ) -> Result<u64, RingError> {
        self.append_with(kind, data, fields, &mut |_| {})
    }

    /// [`EventRing::append`] that first shows the events it produced to `observe`, under the
    /// writer lock and before any reader can see them: an observer that stores them (the exec
    /// log) sees every event exactly once, in seq order, before it becomes readable here.
    pub fn append_with(
        &self,
        kind: EventType,
        data: Option<&[u8]>,
        fields: &Map<String, Value>,
        observe: &mut dyn FnMut(&[Event]),
    ) -> Result<u64, RingError> {
        let fields = Fields::new(fields)?;
        if kind.is_output() && !fields.is_empty() {
            return Err(RingError::Event(PolicyError::new(
                "event.output-fields",
                "stdout and stderr events carry data only; report other facts in a status event",
                kind.as_str(),
            )));
        }
        let mut writer = self.writer.lock();
        writer.check_open()?;
        let timestamp = writer.timestamp();
        let mut batch = self.spare_batch();
        writer.collect(kind, data, &fields, &timestamp, &mut batch);
        observe(&batch);
        self.publish(batch, false);
        let last = writer.next_seq - 1;
        drop(writer);
        self.run_ready_callbacks();
        Ok(last)
    }

    /// Appends several chunks of one type as [`EventRing::append`] would one by one, under one
    /// lock and with one wake-up: the cheap way to feed many small events.
    pub fn append_many(&self, kind: EventType, chunks: &[&[u8]]) -> Result<u64, RingError> {
        let fields = Fields::default();
        let mut writer = self.writer.lock();
        writer.check_open()?;
        let timestamp = writer.timestamp();
        let mut batch = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            writer.collect(kind, Some(chunk), &fields, &timestamp, &mut batch);
        }
        self.publish(batch, false);
        let last = writer.next_seq - 1;
        drop(writer);
        self.run_ready_callbacks();
        Ok(last)
    }

    /// Marks the end of the stream: flushes held-back partial characters (as `data_b64`) and
    /// wakes every waiter. Later appends are refused; closing again does nothing.
    pub fn close(&self) {
        self.close_with(&mut |_| {});
    }

    /// [`EventRing::close`] that shows the flushed events to `observe` first (see
    /// [`EventRing::append_with`]); `observe` is called once, possibly with no events, unless
    /// the ring was already closed.
    pub fn close_with(&self, observe: &mut dyn FnMut(&[Event])) {
        let mut writer = self.writer.lock();
        if writer.closed {
            return;
        }
        writer.closed = true;
        let timestamp = writer.timestamp();
        let mut batch = Vec::new();
        writer.flush_outputs(&timestamp, &mut batch);
        observe(&batch);
        self.publish(batch, true);
        drop(writer);
        self.run_ready_callbacks();
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Encoded bytes of the events held: what the ring's budget counts.
    pub fn held_bytes(&self) -> usize {
        self.state.lock().bytes
    }

    /// Evicts the oldest events until at most `max_bytes` are kept (the newest event stays),
    /// as the ring's own bound does: for an owner that shares memory between rings. Returns
    /// the bytes freed. Readers learn of the evicted events like of any others.
    pub fn trim(&self, max_bytes: usize) -> usize {
        self.state.lock().evict_to(max_bytes, usize::MAX)
    }

    /// The newest seq appended (0 before the first event).
    pub fn last_seq(&self) -> u64 {
        self.state.lock().last_seq
    }

    /// Blocks until an event after `cursor` exists or the ring is closed (true), or until
    /// `timeout` passes (false). Wakes on a notification, never by polling.
    pub fn wait(&self, cursor: u64, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.state.lock();
        while !state.ready(cursor) {
            match deadline {
                Some(deadline) => {
                    if self.changed.wait_until(&mut state, deadline).timed_out() {
                        return state.ready(cursor);
                    }
                }
                None => self.changed.wait(&mut state),
            }
        }
        true
    }

    /// [`EventRing::wait`] for async code: needs a tokio runtime with the time driver.
    pub async fn wait_async(&self, cursor: u64, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Register before checking, so an append between the check and the await still
            // wakes this waiter (`notify_waiters` only wakes registered ones).
            notified.as_mut().enable();
            if self.state.lock().ready(cursor) {
                return true;
            }
            match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return self.state.lock().ready(cursor);
                    }
                }
                None => notified.await,
            }
        }
    }

    /// An empty vector to collect a batch in, with the capacity the last batch left.
    fn spare_batch(&self) -> Vec<Event> {
        std::mem::take(&mut self.state.lock().spare)
    }

    /// Makes a batch of encoded events visible, evicts the oldest over budget, wakes waiters
    /// (callbacks are only made ready here: the caller runs them once it has released the
    /// writer lock). Called with the writer lock held, so batches land in seq order.
    fn publish(&self, batch: Vec<Event>, close: bool) {
        self.publish_settled(batch, close, None);
    }

    /// [`EventRing::publish`] that then takes `settled` as the status (a mirror told its source's
    /// status as of the batch's end).
    fn publish_settled(&self, mut batch: Vec<Event>, close: bool, settled: Option<StreamStatus>) {
        if batch.is_empty() && !close && settled.is_none() {
            return;
        }
        let mut state = self.state.lock();
        for event in batch.drain(..) {
            state.status.apply(&event);
            state.bytes += event.encoded_len();
            state.last_seq = event.seq();
            state.events.push_back(event);
        }
        // Small batches come back for the next append; a huge one is not kept for ever.
        if batch.capacity() <= 64 {
            state.spare = batch;
        }
        if let Some(status) = settled {
            state.status = status;
        }
        state.evict_to(self.max_bytes, self.max_events.unwrap_or(usize::MAX));
        state.closed |= close;
        let (last_seq, closed) = (state.last_seq, state.closed);
        if state
            .waiters
            .collect_ready(|cursor| last_seq > cursor || closed)
        {
            self.wakes_pending.store(true, Ordering::Release);
        }
        drop(state);
        self.changed.notify_all();
        self.notify.notify_waiters();
    }
}
