//! The `task.*` requests: the gateway reporting a long operation of its own (a snapshot) as a
//! stream the agent keeps, so that whichever gateway a client reaches next can read it.

use std::time::Duration;

use serde_json::{Map, Value};

use super::args::{policy, Args};
use crate::channel::message::ErrorBody;
use crate::event::{StreamState, MAX_FIELDS_JSON};
use crate::policy as rules;

/// How long a task lives without word from its gateway when the start names no lease.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// The longest lease a start may ask for: a gateway gone for longer leaves a task `lost`.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(600);
/// The longest progress message (characters).
const MAX_MESSAGE_CHARS: usize = 200;
/// The longest operation name.
const MAX_OPERATION_CHARS: usize = 64;

fn task_id(a: &Args<'_>) -> Result<String, ErrorBody> {
    let id = a.required_str("task_id")?;
    rules::check_id("tk", id).map_err(|e| policy("task_id", e))
}

/// `task.status`: the required `task_id`, checked.
#[derive(Debug)]
pub(crate) struct TaskRef {
    pub(crate) task_id: String,
}

impl TaskRef {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        Ok(Self {
            task_id: task_id(a)?,
        })
    }
}

/// `task.start`: a new task stream, named by the gateway (a second start of one id answers
/// the first).
#[derive(Debug)]
pub(crate) struct TaskStartRequest {
    pub(crate) task_id: String,
    /// What the task does, for its `status` event (`workspace_snapshot`).
    pub(crate) operation: String,
    /// Each word from the gateway (start, progress) renews the task for this long; past it the
    /// agent ends the task `lost`: its gateway is gone.
    pub(crate) lease: Duration,
    /// Facts about the task known from its start (the snapshot's id), for its first event.
    pub(crate) fields: Map<String, Value>,
}

impl TaskStartRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        let operation = a.required_str("operation")?;
        let well_formed = !operation.is_empty()
            && operation.len() <= MAX_OPERATION_CHARS
            && operation
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !well_formed {
            return Err(ErrorBody::invalid(
                "operation",
                "'operation' is an operation's name: 1 to 64 of a-z, 0-9 and _",
            ));
        }
        let lease = a.seconds("lease_seconds")?.unwrap_or(DEFAULT_LEASE);
        if lease.is_zero() || lease > MAX_LEASE {
            return Err(ErrorBody::invalid(
                "lease_seconds",
                "'lease_seconds' is more than 0 and at most 600",
            ));
        }
        Ok(Self {
            task_id: task_id(a)?,
            operation: operation.to_owned(),
            lease,
            fields: bounded_object(a, "fields")?,
        })
    }
}

/// `task.progress`: how far the task has come; renews its lease.
#[derive(Debug)]
pub(crate) struct TaskProgressRequest {
    pub(crate) task_id: String,
    pub(crate) done: Option<u64>,
    pub(crate) total: Option<u64>,
    pub(crate) message: Option<String>,
}

impl TaskProgressRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        let message = match a.str("message")? {
            Some(m) if m.chars().count() > MAX_MESSAGE_CHARS || m.chars().any(char::is_control) => {
                return Err(ErrorBody::invalid(
                    "message",
                    "'message' is at most 200 characters, none of them control characters",
                ))
            }
            m => m.map(str::to_owned),
        };
        Ok(Self {
            task_id: task_id(a)?,
            done: a.u64("done")?,
            total: a.u64("total")?,
            message,
        })
    }
}

/// `task.end`: how the task ended, with its result or its error (each a bounded object).
#[derive(Debug)]
pub(crate) struct TaskEndRequest {
    pub(crate) task_id: String,
    /// `finished` or `failed`.
    pub(crate) state: StreamState,
    pub(crate) result: Map<String, Value>,
    pub(crate) error: Map<String, Value>,
}

impl TaskEndRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        let state = match a.required_str("state")? {
            "finished" => StreamState::Finished,
            "failed" => StreamState::Failed,
            _ => return Err(ErrorBody::invalid("state", "'state' is finished or failed")),
        };
        Ok(Self {
            task_id: task_id(a)?,
            state,
            result: bounded_object(a, "result")?,
            error: bounded_object(a, "error")?,
        })
    }
}

/// An optional object argument, small enough to travel in one event.
fn bounded_object(a: &Args<'_>, name: &str) -> Result<Map<String, Value>, ErrorBody> {
    let Some(map) = a.object(name)? else {
        return Ok(Map::new());
    };
    let encoded = serde_json::to_string(map).map_or(usize::MAX, |s| s.len());
    // Half an event's fields, so that the event's own fields always fit beside it.
    if encoded > MAX_FIELDS_JSON / 2 {
        return Err(ErrorBody::invalid(
            name,
            format!("'{name}' is at most {} bytes of JSON", MAX_FIELDS_JSON / 2),
        ));
    }
    Ok(map.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "tk-0123456789abcdef0123456789abcdef";

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("an object"),
        }
    }

    #[test]
    fn a_start_takes_an_id_an_operation_and_a_bounded_lease() {
        let ok = args(json!({"task_id": ID, "operation": "workspace_snapshot"}));
        let start = TaskStartRequest::parse(&Args(&ok)).unwrap();
        assert_eq!(start.lease, DEFAULT_LEASE);
        for (bad, field) in [
            (json!({"task_id": "ex-0", "operation": "x"}), "task_id"),
            (json!({"task_id": ID, "operation": "a b"}), "operation"),
            (json!({"task_id": ID, "operation": ""}), "operation"),
            (
                json!({"task_id": ID, "operation": "x", "lease_seconds": 0}),
                "lease_seconds",
            ),
            (
                json!({"task_id": ID, "operation": "x", "lease_seconds": 601}),
                "lease_seconds",
            ),
            (
                json!({"task_id": ID, "operation": "x", "fields": [1]}),
                "fields",
            ),
        ] {
            let err = TaskStartRequest::parse(&Args(&args(bad.clone()))).unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{bad}");
        }
    }

    #[test]
    fn progress_messages_are_short_and_plain() {
        let long = "x".repeat(201);
        for bad in [long.as_str(), "a\nb", "\u{1b}[2J"] {
            let a = args(json!({"task_id": ID, "message": bad}));
            let err = TaskProgressRequest::parse(&Args(&a)).unwrap_err();
            assert_eq!(err.field.as_deref(), Some("message"));
        }
        let a = args(json!({"task_id": ID, "done": 5, "total": 9, "message": "copying"}));
        let p = TaskProgressRequest::parse(&Args(&a)).unwrap();
        assert_eq!((p.done, p.total), (Some(5), Some(9)));
    }

    #[test]
    fn an_end_is_finished_or_failed_with_a_bounded_result() {
        let a = args(json!({"task_id": ID, "state": "lost"}));
        assert_eq!(
            TaskEndRequest::parse(&Args(&a))
                .unwrap_err()
                .field
                .as_deref(),
            Some("state")
        );
        let big = "x".repeat(MAX_FIELDS_JSON);
        let a = args(json!({"task_id": ID, "state": "finished", "result": {"x": big}}));
        assert_eq!(
            TaskEndRequest::parse(&Args(&a))
                .unwrap_err()
                .field
                .as_deref(),
            Some("result")
        );
        let a = args(json!({"task_id": ID, "state": "failed", "error": {"code": "conflict"}}));
        let end = TaskEndRequest::parse(&Args(&a)).unwrap();
        assert_eq!(end.state, StreamState::Failed);
        assert_eq!(end.error["code"], "conflict");
    }
}
