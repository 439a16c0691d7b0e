//! Per-exec I/O: stdin jobs written in request order by one task per exec, and `exec.read`
//! pages (long-polled, read on a blocking thread).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::record::ExecRecord;
use crate::agent::ops::{internal, log_error, ReadRequest};
use crate::agent::process::{Exec, StdinError};
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::ring::Page;

/// One `exec.input` request, queued in arrival order.
pub(super) struct InputJob {
    pub(super) data: Vec<u8>,
    pub(super) eof: bool,
    pub(super) reply: oneshot::Sender<Result<usize, ErrorBody>>,
}

/// An `exec.read` of an exec this daemon knows.
pub(crate) struct PageRead {
    pub(super) record: Arc<ExecRecord>,
    pub(super) request: ReadRequest,
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
