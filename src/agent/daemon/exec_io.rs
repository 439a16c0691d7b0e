//! Per-exec I/O requests: stdin jobs written in request order by one task per exec, terminal
//! resize, and `exec.read` pages (long-polled, read on a blocking thread).

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::execs::ExecRegistry;
use super::record::ExecRecord;
use crate::agent::ops::{internal, log_error, InputRequest, ReadRequest, ResizeRequest};
use crate::agent::process::{Exec, StdinError};
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::ring::Page;

/// One `exec.input` request, queued in arrival order.
pub(super) struct InputJob {
    data: Vec<u8>,
    eof: bool,
    reply: oneshot::Sender<Result<usize, ErrorBody>>,
}

impl ExecRegistry {
    /// Queues stdin for the exec in request order; the future resolves once it is written.
    pub(crate) fn input(
        &self,
        input: InputRequest,
    ) -> Result<oneshot::Receiver<Result<usize, ErrorBody>>, ErrorBody> {
        let InputRequest { exec_id, data, eof } = input;
        let entries = self.entries.lock();
        let entry = entries
            .get(&exec_id)
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, format!("no exec '{exec_id}'")))?;
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

    pub(crate) fn resize(&self, resize: ResizeRequest) -> Result<Value, ErrorBody> {
        let record = self.record(&resize.exec_id)?;
        let exec = record
            .exec
            .get()
            .ok_or_else(|| ErrorBody::new(ErrorCode::Conflict, "this exec is not running here"))?;
        exec.resize(resize.size.rows, resize.size.cols)
            .map_err(|e| ErrorBody::new(ErrorCode::Conflict, e.to_string()))?;
        Ok(record.status())
    }

    pub(crate) fn read(&self, read: ReadRequest) -> Result<PageRead, ErrorBody> {
        Ok(PageRead {
            record: self.record(&read.exec_id)?,
            request: read,
        })
    }
}

/// An `exec.read` of an exec this daemon knows.
pub(crate) struct PageRead {
    record: Arc<ExecRecord>,
    request: ReadRequest,
}

impl PageRead {
    pub(crate) async fn page(self) -> Result<Page, ErrorBody> {
        let ReadRequest {
            cursor,
            max_events,
            max_bytes,
            wait,
            ..
        } = self.request;
        if let Some(wait) = wait {
            self.record.log.wait_async(cursor, wait).await;
        }
        // A page may come from disk: read it on a blocking thread.
        let read = tokio::task::spawn_blocking(move || {
            self.record
                .log
                .read(cursor, max_events, max_bytes)
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
