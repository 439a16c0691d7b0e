//! Watch streams: each watch of the registry feeds an in-memory ring of `fs` events (closed
//! with a final `status` when the watch ends), readable and subscribable like an exec's log.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::agent::files::Workspace;
use crate::agent::ops::{file_error, internal, policy as policy_error, shown_path, under_root};
use crate::agent::ops::{WatchRef, WatchStartRequest};
use crate::agent::watch::{EventKind, WatchEnd, WatchMessage, WatchRegistry, WatchRequest};
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::event::{timestamp, EventType, StreamKind};
use crate::policy;
use crate::ring::EventRing;

/// Encoded bytes of events each watch keeps (older ones are reported as dropped).
const WATCH_RING_BYTES: usize = 1 << 20;

/// Ended watches remembered for `watch.status` and late readers; older ones are forgotten.
const ENDED_WATCHES_KEPT: usize = 256;

pub(crate) struct WatchEntry {
    pub(crate) ring: Arc<EventRing>,
    id: String,
    path: String,
    created_ms: u64,
    /// `watching` until the watch ends, then why it ended.
    state: Mutex<(String, Option<String>)>,
}

impl WatchEntry {
    fn status(&self) -> Value {
        let (state, ended_at) = self.state.lock().clone();
        json!({
            "watch_id": self.id,
            "path": self.path,
            "state": state,
            "created_at": timestamp::format_millis(self.created_ms),
            "ended_at": ended_at,
            "last_seq": self.ring.last_seq(),
        })
    }
}

pub(crate) struct WatchStreams {
    root: String,
    registry: WatchRegistry,
    entries: Mutex<HashMap<String, Arc<WatchEntry>>>,
}

fn end_name(end: &WatchEnd) -> (&'static str, Option<String>) {
    match end {
        WatchEnd::Cancelled => ("cancelled", None),
        WatchEnd::TimedOut => ("timed_out", None),
        WatchEnd::RootRemoved => ("root_removed", None),
        WatchEnd::Failed(e) => ("failed", Some(e.message.clone())),
    }
}

fn kind_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Create => "create",
        EventKind::Modify => "modify",
        EventKind::Remove => "remove",
        EventKind::Rename => "rename",
        EventKind::Overflow => "overflow",
    }
}

impl WatchStreams {
    pub(crate) fn new(root: String, ws: Arc<Workspace>, max_watches: usize) -> Self {
        Self {
            root,
            registry: WatchRegistry::new(ws, max_watches),
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn entry(&self, id: &str) -> Result<Arc<WatchEntry>, ErrorBody> {
        let id = policy::check_id("fw", id).map_err(|e| policy_error("watch_id", e))?;
        self.entries
            .lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, format!("no watch '{id}'")))
    }

    pub(crate) fn start(&self, start: WatchStartRequest) -> Result<Value, ErrorBody> {
        let id = match start.watch_id {
            Some(id) => id,
            None => policy::new_id("fw").map_err(|e| internal("cannot make a watch id", e))?,
        };
        let path = policy::workspace_path(&self.root, &under_root(&start.path))
            .map_err(|e| policy_error("path", e))?;
        let mut request = WatchRequest::new(id.clone(), path.clone());
        request.kinds = start.kinds;
        request.timeout = start.timeout;
        let ring = Arc::new(
            EventRing::of_kind(Some(StreamKind::Watch), WATCH_RING_BYTES, None)
                .map_err(|e| internal("cannot make a ring", e))?,
        );
        let rel = path.strip_prefix(&self.root).unwrap_or("");
        let entry = Arc::new(WatchEntry {
            ring: Arc::clone(&ring),
            id: id.clone(),
            path: shown_path(rel),
            created_ms: timestamp::now_millis(),
            state: Mutex::new(("watching".into(), None)),
        });
        if let Some(existing) = self.entries.lock().get(&id) {
            return Ok(existing.status());
        }
        let sink_entry = Arc::clone(&entry);
        let sink = Box::new(move |message: WatchMessage| match message {
            WatchMessage::Event(e) => {
                let fields = json!({
                    "kind": kind_name(e.kind),
                    "path": e.path,
                    "from": e.from,
                    "is_dir": e.is_dir,
                });
                if let Value::Object(fields) = fields {
                    let _ = sink_entry.ring.append(EventType::Fs, None, &fields);
                }
            }
            WatchMessage::Ended(end) => {
                let (state, error) = end_name(&end);
                *sink_entry.state.lock() = (state.to_owned(), Some(timestamp::now()));
                let mut fields = json!({"state": state});
                if let Some(error) = error {
                    fields["error"] = Value::String(error);
                }
                if let Value::Object(fields) = fields {
                    let _ = sink_entry.ring.append(EventType::Status, None, &fields);
                }
                sink_entry.ring.close();
            }
        });
        self.registry.start(request, sink).map_err(file_error)?;
        let mut entries = self.entries.lock();
        entries.insert(id, Arc::clone(&entry));
        prune(&mut entries);
        Ok(entry.status())
    }

    pub(crate) fn cancel(&self, watch: &WatchRef) -> Result<Value, ErrorBody> {
        let entry = self.entry(&watch.watch_id)?;
        self.registry.cancel(&entry.id);
        Ok(entry.status())
    }

    pub(crate) fn status(&self, watch: &WatchRef) -> Result<Value, ErrorBody> {
        Ok(self.entry(&watch.watch_id)?.status())
    }

    pub(crate) fn list(&self) -> Value {
        let mut entries: Vec<Arc<WatchEntry>> = self.entries.lock().values().cloned().collect();
        entries.sort_by_key(|e| std::cmp::Reverse((e.created_ms, e.id.clone())));
        Value::Array(entries.iter().map(|e| e.status()).collect())
    }
}

/// Forgets the oldest ended watches past [`ENDED_WATCHES_KEPT`].
fn prune(entries: &mut HashMap<String, Arc<WatchEntry>>) {
    let mut ended: Vec<(u64, String)> = entries
        .values()
        .filter(|e| e.ring.is_closed())
        .map(|e| (e.created_ms, e.id.clone()))
        .collect();
    if ended.len() <= ENDED_WATCHES_KEPT {
        return;
    }
    ended.sort();
    for (_, id) in ended.iter().take(ended.len() - ENDED_WATCHES_KEPT) {
        entries.remove(id);
    }
}
