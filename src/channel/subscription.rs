//! Subscriptions of one connection: per-stream credit, one page per ready stream per turn
//! (round-robin), and page reads only when the connection's bounded outgoing queue has room.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::frame::{Frame, FrameError, FrameKind, FRAME_OVERHEAD};
use super::message::EventsHeader;
use crate::ring::{EventRing, Layout, Page, MAX_PAGE_EVENTS, MIN_PAGE_BYTES};

/// The largest page pushed to a subscriber: a stream overshoots its credit by at most this.
pub const MAX_PUSH_PAGE_BYTES: usize = 64 * 1024;

pub type WaitFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A stream of events that can be paged from a cursor and waited on.
pub trait EventSource: Send + Sync + 'static {
    /// A page of the events after `cursor`, within `max_bytes` of JSON.
    fn read(&self, cursor: u64, max_bytes: usize) -> Result<Page, String>;
    /// True when an event after `cursor` exists or the stream is closed.
    fn ready(&self, cursor: u64) -> bool;
    /// Resolves once [`EventSource::ready`] holds (woken by a notification, not a timer).
    fn wait(&self, cursor: u64) -> WaitFuture<'_>;
}

/// How long one wait of a subscription lasts before it checks again (it is woken by a
/// notification long before that whenever an event arrives).
pub const WAIT_SLICE: Duration = Duration::from_secs(3600);

/// A ring as a subscribable stream (a watch's events, or any ring a test feeds).
pub struct RingSource(pub Arc<EventRing>);

impl EventSource for RingSource {
    fn read(&self, cursor: u64, max_bytes: usize) -> Result<Page, String> {
        self.0
            .read(cursor, MAX_PAGE_EVENTS, max_bytes, false)
            .map_err(|e| e.message())
    }

    fn ready(&self, cursor: u64) -> bool {
        self.0.last_seq() > cursor || self.0.is_closed()
    }

    fn wait(&self, cursor: u64) -> WaitFuture<'_> {
        Box::pin(async move { while !self.0.wait_async(cursor, WAIT_SLICE).await {} })
    }
}

pub(crate) enum Control {
    /// Starts (or restarts, from a new cursor) a stream. The pump queues `response` before any
    /// page of it, so the peer learns of the subscription before its first page.
    Subscribe {
        stream: String,
        source: Arc<dyn EventSource>,
        cursor: u64,
        credit: u64,
        response: Vec<u8>,
    },
    /// Stops a stream; `response(subscribed)` is queued after its last page.
    Unsubscribe {
        stream: String,
        response: Box<dyn FnOnce(bool) -> Vec<u8> + Send>,
    },
    Credit {
        stream: String,
        bytes: u64,
    },
}

struct Sub {
    source: Arc<dyn EventSource>,
    cursor: u64,
    credit: u64,
    waiter: Option<JoinHandle<()>>,
}

impl Drop for Sub {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            waiter.abort();
        }
    }
}

/// Runs until the connection's control channel or outgoing queue closes.
pub(crate) async fn pump(mut control: mpsc::Receiver<Control>, out: mpsc::Sender<Vec<u8>>) {
    let mut subs: HashMap<String, Sub> = HashMap::new();
    let mut order: VecDeque<String> = VecDeque::new();
    // One outstanding wake per idle subscription at most, so this never grows past their count.
    let (wake_tx, mut wake_rx) = mpsc::unbounded_channel::<()>();
    loop {
        loop {
            let reply = match control.try_recv() {
                Ok(c) => apply(c, &mut subs, &mut order),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            };
            if let Some(bytes) = reply {
                if out.send(bytes).await.is_err() {
                    return;
                }
            }
        }
        while wake_rx.try_recv().is_ok() {}
        let Some(key) = next_ready(&mut subs, &mut order, &wake_tx) else {
            tokio::select! {
                c = control.recv() => match c {
                    Some(c) => {
                        if let Some(bytes) = apply(c, &mut subs, &mut order) {
                            if out.send(bytes).await.is_err() {
                                return;
                            }
                        }
                    }
                    None => return,
                },
                _ = wake_rx.recv() => {}
            }
            continue;
        };
        let permit = tokio::select! {
            p = out.reserve() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            c = control.recv() => {
                match c {
                    Some(c) => {
                        if let Some(bytes) = apply(c, &mut subs, &mut order) {
                            if out.send(bytes).await.is_err() {
                                return;
                            }
                        }
                    }
                    None => return,
                }
                continue;
            }
        };
        let Some(sub) = subs.get_mut(&key) else {
            continue;
        };
        let budget = usize::try_from(sub.credit)
            .unwrap_or(usize::MAX)
            .clamp(MIN_PAGE_BYTES, MAX_PUSH_PAGE_BYTES);
        let page = match sub.source.read(sub.cursor, budget) {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(stream = %key, error = %e, "cannot read a subscribed stream; unsubscribed");
                remove(&key, &mut subs, &mut order);
                continue;
            }
        };
        let Ok((bytes, cost)) = events_frame(&key, &page) else {
            remove(&key, &mut subs, &mut order);
            continue;
        };
        sub.credit = sub.credit.saturating_sub(cost);
        sub.cursor = page.next_cursor;
        let finished = page.closed && !page.has_more;
        permit.send(bytes);
        if finished {
            // The final page is out: nothing will follow, the subscription is over.
            remove(&key, &mut subs, &mut order);
        }
    }
}

/// The `Events` frame of one page, with the page's JSON written in place, and the payload's
/// length (what the page costs the stream's credit).
fn events_frame(stream: &str, page: &Page) -> Result<(Vec<u8>, u64), FrameError> {
    let header = serde_json::to_string(&EventsHeader {
        stream: stream.to_owned(),
    })
    .map_err(|_| FrameError::Malformed("unserializable header"))?;
    let bytes = Frame::encode_text(FrameKind::Events, &header, page.json_capacity(), |out| {
        page.write_json(out, Layout::Wire)
    })?;
    let payload = bytes.len() - FRAME_OVERHEAD - header.len();
    Ok((bytes, payload as u64))
}

/// Applies a control message; returns a response to queue, if it carries one.
fn apply(
    c: Control,
    subs: &mut HashMap<String, Sub>,
    order: &mut VecDeque<String>,
) -> Option<Vec<u8>> {
    match c {
        Control::Subscribe {
            stream,
            source,
            cursor,
            credit,
            response,
        } => {
            let sub = Sub {
                source,
                cursor,
                credit,
                waiter: None,
            };
            if subs.insert(stream.clone(), sub).is_none() {
                order.push_back(stream);
            }
            Some(response)
        }
        Control::Unsubscribe { stream, response } => Some(response(remove(&stream, subs, order))),
        Control::Credit { stream, bytes } => {
            if let Some(sub) = subs.get_mut(&stream) {
                sub.credit = sub.credit.saturating_add(bytes);
            }
            None
        }
    }
}

fn remove(key: &str, subs: &mut HashMap<String, Sub>, order: &mut VecDeque<String>) -> bool {
    order.retain(|k| k != key);
    subs.remove(key).is_some()
}

/// The next stream (in turn) with credit and events to send, moved to the back of the turn;
/// idle streams get a waiter that wakes the pump when they have events.
fn next_ready(
    subs: &mut HashMap<String, Sub>,
    order: &mut VecDeque<String>,
    wake: &mpsc::UnboundedSender<()>,
) -> Option<String> {
    for _ in 0..order.len() {
        let key = order.pop_front()?;
        order.push_back(key.clone());
        let Some(sub) = subs.get_mut(&key) else {
            continue;
        };
        if sub.credit == 0 {
            continue;
        }
        if sub.source.ready(sub.cursor) {
            if let Some(waiter) = sub.waiter.take() {
                waiter.abort();
            }
            return Some(key);
        }
        if sub.waiter.as_ref().is_none_or(|w| w.is_finished()) {
            let source = Arc::clone(&sub.source);
            let cursor = sub.cursor;
            let wake = wake.clone();
            sub.waiter = Some(tokio::spawn(async move {
                source.wait(cursor).await;
                let _ = wake.send(());
            }));
        }
    }
    None
}
