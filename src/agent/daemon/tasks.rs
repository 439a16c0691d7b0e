//! Task streams: a long operation the gateway does itself (a snapshot) reported as a stream the
//! agent keeps, so that a client that asks another gateway, or asks again after its call timed
//! out, reads the same events. A task opens with a `status` (`running`), carries `progress`
//! events, and ends with an `exit` (its result or error) and a final `status`. The gateway's
//! every word renews the task's lease; a task not renewed in time ends `lost`, so a gateway
//! that dies mid-operation never leaves a stream that says `running` for ever.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use crate::agent::ops::{internal, TaskEndRequest, TaskProgressRequest, TaskRef, TaskStartRequest};
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::event::{timestamp, EventType, StreamKind, StreamState};
use crate::policy;
use crate::ring::EventRing;

/// Encoded bytes of events each task keeps: progress reports are small and few.
const TASK_RING_BYTES: usize = 256 * 1024;

/// Tasks known at once; a start past it is refused while they all run.
const MAX_TASKS: usize = 64;

pub(crate) struct TaskEntry {
    pub(crate) ring: Arc<EventRing>,
    id: String,
    operation: String,
    created_ms: u64,
    lease: Duration,
    state: Mutex<TaskState>,
}

struct TaskState {
    /// When the gateway last spoke of the task.
    renewed: Instant,
    /// Why and when the task ended, once it has.
    ended: Option<(StreamState, String)>,
}

impl TaskEntry {
    fn status(&self) -> Value {
        let state = self.state.lock();
        let (name, ended_at) = match &state.ended {
            Some((s, at)) => (s.as_str(), Some(at.clone())),
            None => ("running", None),
        };
        json!({
            "task_id": self.id,
            "operation": self.operation,
            "state": name,
            "created_at": timestamp::format_millis(self.created_ms),
            "ended_at": ended_at,
            "last_seq": self.ring.last_seq(),
        })
    }

    /// Appends the task's `exit` and final `status` and closes its stream, once: an end that
    /// comes after the first is ignored.
    fn end(&self, state: StreamState, mut exit: Map<String, Value>) {
        {
            let mut current = self.state.lock();
            if current.ended.is_some() {
                return;
            }
            current.ended = Some((state, timestamp::now()));
        }
        let returncode = match state {
            StreamState::Finished => json!(0),
            StreamState::Failed => json!(1),
            _ => Value::Null,
        };
        exit.insert("state".into(), json!(state.as_str()));
        exit.insert("returncode".into(), returncode);
        let _ = self.ring.append(EventType::Exit, None, &exit);
        let mut last = Map::new();
        last.insert("state".into(), json!(state.as_str()));
        let _ = self.ring.append(EventType::Status, None, &last);
        self.ring.close();
    }

    /// The instant the lease runs out, or `None` once the task has ended.
    fn lease_end(&self) -> Option<Instant> {
        let state = self.state.lock();
        state.ended.is_none().then(|| state.renewed + self.lease)
    }
}

#[derive(Default)]
pub(crate) struct TaskStreams {
    entries: Mutex<HashMap<String, Arc<TaskEntry>>>,
}

impl TaskStreams {
    pub(crate) fn entry(&self, id: &str) -> Result<Arc<TaskEntry>, ErrorBody> {
        let id =
            policy::check_id("tk", id).map_err(|e| ErrorBody::invalid("task_id", e.message))?;
        self.entries
            .lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, format!("no task '{id}'")))
    }

    pub(crate) fn start(&self, start: TaskStartRequest) -> Result<Value, ErrorBody> {
        let mut entries = self.entries.lock();
        if let Some(existing) = entries.get(&start.task_id) {
            return Ok(existing.status());
        }
        prune(&mut entries);
        if entries.len() >= MAX_TASKS {
            return Err(ErrorBody::new(
                ErrorCode::Limit,
                format!("{MAX_TASKS} tasks are running in this workspace; wait for one to end"),
            ));
        }
        let ring = EventRing::of_kind(Some(StreamKind::Task), TASK_RING_BYTES, None)
            .map_err(|e| internal("cannot make a ring", e))?;
        let entry = Arc::new(TaskEntry {
            ring: Arc::new(ring),
            id: start.task_id.clone(),
            operation: start.operation.clone(),
            created_ms: timestamp::now_millis(),
            lease: start.lease,
            state: Mutex::new(TaskState {
                renewed: Instant::now(),
                ended: None,
            }),
        });
        let mut first = start.fields;
        first.insert("state".into(), json!("running"));
        first.insert("operation".into(), json!(start.operation));
        entry
            .ring
            .append(EventType::Status, None, &first)
            .map_err(|e| ErrorBody::invalid("fields", e.message()))?;
        // The lease is kept by a task of the runtime the channel runs on: without one there is
        // nobody to end the task, so it is not started.
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| internal("no runtime to keep the task's lease", e))?;
        runtime.spawn(keep_lease(Arc::clone(&entry)));
        entries.insert(start.task_id, Arc::clone(&entry));
        Ok(entry.status())
    }

    pub(crate) fn progress(&self, progress: TaskProgressRequest) -> Result<Value, ErrorBody> {
        let entry = self.entry(&progress.task_id)?;
        {
            let mut state = entry.state.lock();
            if state.ended.is_some() {
                return Err(ErrorBody::new(
                    ErrorCode::Conflict,
                    format!("task '{}' has ended", entry.id),
                ));
            }
            state.renewed = Instant::now();
        }
        let mut fields = Map::new();
        for (name, value) in [("done", progress.done), ("total", progress.total)] {
            if let Some(value) = value {
                fields.insert(name.into(), json!(value));
            }
        }
        if let Some(message) = progress.message {
            fields.insert("message".into(), json!(message));
        }
        entry
            .ring
            .append(EventType::Progress, None, &fields)
            .map_err(|e| internal("cannot record the progress", e.message()))?;
        Ok(entry.status())
    }

    pub(crate) fn end(&self, end: TaskEndRequest) -> Result<Value, ErrorBody> {
        let entry = self.entry(&end.task_id)?;
        let mut exit = Map::new();
        if !end.result.is_empty() {
            exit.insert("result".into(), Value::Object(end.result));
        }
        if !end.error.is_empty() {
            exit.insert("error".into(), Value::Object(end.error));
        }
        entry.end(end.state, exit);
        Ok(entry.status())
    }

    pub(crate) fn status(&self, task: &TaskRef) -> Result<Value, ErrorBody> {
        Ok(self.entry(&task.task_id)?.status())
    }
}

/// Ends the task `lost` when its lease runs out before its gateway ends it.
async fn keep_lease(entry: Arc<TaskEntry>) {
    while let Some(deadline) = entry.lease_end() {
        if Instant::now() >= deadline {
            let mut exit = Map::new();
            exit.insert(
                "error".into(),
                json!({
                    "code": "upstream",
                    "message": "the gateway doing this stopped reporting; the operation's \
                                outcome is unknown (list the snapshots to see whether it exists)",
                }),
            );
            entry.end(StreamState::Lost, exit);
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// Forgets the oldest ended tasks so that a new one fits.
fn prune(entries: &mut HashMap<String, Arc<TaskEntry>>) {
    while entries.len() >= MAX_TASKS {
        let oldest = entries
            .values()
            .filter(|e| e.ring.is_closed())
            .min_by_key(|e| (e.created_ms, e.id.clone()))
            .map(|e| e.id.clone());
        match oldest {
            Some(id) => entries.remove(&id),
            None => return,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ops::Args;

    const ID: &str = "tk-0123456789abcdef0123456789abcdef";

    fn start(lease: f64) -> TaskStartRequest {
        let args = json!({"task_id": ID, "operation": "workspace_snapshot",
                          "lease_seconds": lease, "fields": {"snapshot_id": "sn-1"}});
        let Value::Object(map) = args else { panic!() };
        TaskStartRequest::parse(&Args(&map)).unwrap()
    }

    fn kinds(ring: &EventRing) -> Vec<(String, String)> {
        let page = ring.read(0, 100, 1 << 20, false).unwrap();
        let events: Value = serde_json::from_str(&page.events_json()).unwrap();
        events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let t = e["type"].as_str().unwrap_or_default().to_owned();
                let s = e["state"].as_str().unwrap_or_default().to_owned();
                (t, s)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_task_runs_reports_and_ends_once() {
        let tasks = TaskStreams::default();
        tasks.start(start(60.0)).unwrap();
        let again = tasks.start(start(60.0)).unwrap();
        assert_eq!(
            again["state"], "running",
            "a second start answers the first"
        );
        let progress = TaskProgressRequest {
            task_id: ID.into(),
            done: Some(5),
            total: Some(10),
            message: Some("copying".into()),
        };
        tasks.progress(progress).unwrap();
        let mut result = Map::new();
        result.insert("snapshot_id".into(), json!("sn-1"));
        let end = |state| TaskEndRequest {
            task_id: ID.into(),
            state,
            result: result.clone(),
            error: Map::new(),
        };
        assert_eq!(
            tasks.end(end(StreamState::Finished)).unwrap()["state"],
            "finished"
        );
        assert_eq!(
            tasks.end(end(StreamState::Failed)).unwrap()["state"],
            "finished",
            "the first end stands"
        );
        let ring = Arc::clone(&tasks.entry(ID).unwrap().ring);
        assert!(ring.is_closed());
        assert_eq!(
            kinds(&ring),
            [
                ("status".into(), "running".into()),
                ("progress".into(), String::new()),
                ("exit".into(), "finished".into()),
                ("status".into(), "finished".into()),
            ]
        );
        let late = TaskProgressRequest {
            task_id: ID.into(),
            done: None,
            total: None,
            message: None,
        };
        assert_eq!(tasks.progress(late).unwrap_err().code, ErrorCode::Conflict);
    }

    #[tokio::test]
    async fn a_task_whose_gateway_goes_quiet_ends_lost() {
        let tasks = TaskStreams::default();
        tasks.start(start(0.3)).unwrap();
        let ring = Arc::clone(&tasks.entry(ID).unwrap().ring);
        assert!(!ring.is_closed(), "within its lease");
        for _ in 0..100 {
            if ring.is_closed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(ring.is_closed(), "past its lease");
        assert_eq!(
            tasks.status(&TaskRef { task_id: ID.into() }).unwrap()["state"],
            "lost"
        );
        assert_eq!(kinds(&ring).last().unwrap().1, "lost");
    }

    #[test]
    fn an_unknown_task_is_not_found() {
        let tasks = TaskStreams::default();
        let err = tasks.status(&TaskRef { task_id: ID.into() }).unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound);
    }
}
