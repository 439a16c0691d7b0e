//! Per-exec I/O requests: stdin jobs written in request order by one task per exec, terminal
//! resize, and `exec.read` pages (long-polled, read on a blocking thread).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::args::{internal, log_error, policy, Args};
use super::execs::ExecRegistry;
use super::record::ExecRecord;
use crate::agent::process::{Exec, StdinError};
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::policy;
use crate::ring::{Page, MAX_PAGE_EVENTS};

/// One `exec.input` request, queued in arrival order.
pub(super) struct InputJob {
    data: Vec<u8>,
    eof: bool,
    reply: oneshot::Sender<Result<usize, ErrorBody>>,
}

impl ExecRegistry {
    /// Queues stdin for `exec_id` in request order; the future resolves once it is written.
    pub(crate) fn input(
        &self,
        args: &Map<String, Value>,
        data: Vec<u8>,
    ) -> Result<oneshot::Receiver<Result<usize, ErrorBody>>, ErrorBody> {
        let a = Args(args);
        let id =
            policy::check_id("ex", a.required_str("exec_id")?).map_err(|e| policy("exec_id", e))?;
        let eof = a.bool("eof")?;
        let entries = self.entries.lock();
        let entry = entries
            .get(&id)
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, format!("no exec '{id}'")))?;
        let closed = || {
            ErrorBody::new(
                ErrorCode::Conflict,
                "this exec does not take input: it has ended or was run by an earlier agent",
            )
        };
        let tx = entry.input.as_ref().ok_or_else(closed)?;
        let (reply, rx) = oneshot::channel();
        tx.send(InputJob { data, eof, reply })
            .map_err(|_| closed())?;
        Ok(rx)
    }

    pub(crate) fn resize(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody> {
        let a = Args(args);
        let record = self.record(a.required_str("exec_id")?)?;
        let size = |name: &str| -> Result<u16, ErrorBody> {
            a.u64(name)?
                .and_then(|n| u16::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| ErrorBody::invalid(name, format!("'{name}' must be 1 to 65535")))
        };
        let (rows, cols) = (size("rows")?, size("cols")?);
        let exec = record
            .exec
            .get()
            .ok_or_else(|| ErrorBody::new(ErrorCode::Conflict, "this exec is not running here"))?;
        exec.resize(rows, cols)
            .map_err(|e| ErrorBody::new(ErrorCode::Conflict, e.to_string()))?;
        Ok(record.status())
    }

    pub(crate) fn read(&self, args: &Map<String, Value>) -> Result<ReadRequest, ErrorBody> {
        let a = Args(args);
        Ok(ReadRequest {
            record: self.record(a.required_str("exec_id")?)?,
            cursor: a.u64("cursor")?.unwrap_or(0),
            max_events: a.usize("max_events", MAX_PAGE_EVENTS)?.max(1),
            max_bytes: a.usize("max_bytes", 64 * 1024)?,
            wait: a
                .seconds("wait_seconds")?
                .map(|w| w.min(Duration::from_secs(25))),
        })
    }
}

/// An `exec.read`, checked.
pub(crate) struct ReadRequest {
    pub(crate) record: Arc<ExecRecord>,
    pub(crate) cursor: u64,
    pub(crate) max_events: usize,
    pub(crate) max_bytes: usize,
    /// Long-poll this long for an event after the cursor (at most 25 s).
    pub(crate) wait: Option<Duration>,
}

impl ReadRequest {
    pub(crate) async fn page(self) -> Result<Page, ErrorBody> {
        if let Some(wait) = self.wait {
            self.record.log.wait_async(self.cursor, wait).await;
        }
        // A page may come from disk: read it on a blocking thread.
        let read = tokio::task::spawn_blocking(move || {
            self.record
                .log
                .read(self.cursor, self.max_events, self.max_bytes)
                .map_err(log_error)
        })
        .await;
        read.unwrap_or_else(|e| Err(internal("a read failed", e)))
    }
}

/// Writes one exec's stdin jobs in order; ends with the exec (later jobs are refused).
pub(super) async fn pump_input(exec: Exec, mut jobs: mpsc::UnboundedReceiver<InputJob>) {
    let ended = exec.clone();
    let mut done = Box::pin(async move { ended.wait().await });
    loop {
        let job = tokio::select! {
            job = jobs.recv() => match job {
                Some(job) => job,
                None => return,
            },
            _ = &mut done => return,
        };
        let len = job.data.len();
        let mut result = Ok(len);
        if len > 0 {
            result = exec.write_stdin(&job.data).await.map(|()| len);
        }
        if job.eof && result.is_ok() {
            result = exec.close_stdin().await.map(|()| len);
        }
        let _ = job.reply.send(result.map_err(|e| match e {
            StdinError::Closed | StdinError::Full => {
                ErrorBody::new(ErrorCode::Conflict, e.to_string())
            }
        }));
    }
}
