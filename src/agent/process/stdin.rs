//! Stdin of an exec: a bounded queue of chunks that callers fill without blocking their task,
//! and a pump that writes the chunks in order into the pipe or terminal, then ends the input.

use std::fmt;

use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::Mutex;

use super::fdio::FdIo;
use super::pty;

/// Writes are split into chunks of at most this many bytes.
pub const STDIN_CHUNK: usize = 64 * 1024;
/// How many chunks may wait for the process to read them (so at most 1 MiB is queued).
pub const STDIN_QUEUE_CHUNKS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinError {
    /// The input was already ended, or the process exited or stopped reading its stdin.
    Closed,
    /// `try_write_stdin` only: the queue has no room for the whole write now.
    Full,
}

impl fmt::Display for StdinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str(
                "stdin is closed: the input was ended or the process no longer reads it",
            ),
            Self::Full => write!(
                f,
                "the stdin queue is full ({} KiB waiting for the process to read it): retry later",
                STDIN_CHUNK * STDIN_QUEUE_CHUNKS / 1024
            ),
        }
    }
}

impl std::error::Error for StdinError {}

pub(crate) enum StdinMsg {
    Data(Vec<u8>),
    Eof,
}

/// The caller's side. The async mutex keeps one write's chunks together and in order, even when
/// several tasks write at once.
pub(crate) struct StdinQueue {
    tx: Mutex<Option<mpsc::Sender<StdinMsg>>>,
}

impl StdinQueue {
    pub(crate) fn new() -> (Self, mpsc::Receiver<StdinMsg>) {
        let (tx, rx) = mpsc::channel(STDIN_QUEUE_CHUNKS);
        (
            Self {
                tx: Mutex::new(Some(tx)),
            },
            rx,
        )
    }

    /// Queues `data`, waiting (without blocking a thread) while the queue is full.
    pub(crate) async fn write(&self, data: &[u8]) -> Result<(), StdinError> {
        let guard = self.tx.lock().await;
        let tx = guard.as_ref().ok_or(StdinError::Closed)?;
        for chunk in data.chunks(STDIN_CHUNK) {
            tx.send(StdinMsg::Data(chunk.to_vec()))
                .await
                .map_err(|_| StdinError::Closed)?;
        }
        Ok(())
    }

    /// Queues all of `data` now or nothing (`Full`); never waits.
    pub(crate) fn try_write(&self, data: &[u8]) -> Result<(), StdinError> {
        let guard = self.tx.try_lock().map_err(|_| StdinError::Full)?;
        let tx = guard.as_ref().ok_or(StdinError::Closed)?;
        if tx.is_closed() {
            return Err(StdinError::Closed);
        }
        // Room only grows while we hold the lock (we are the only sender), so this check holds.
        if tx.capacity() < data.len().div_ceil(STDIN_CHUNK) {
            return Err(StdinError::Full);
        }
        for chunk in data.chunks(STDIN_CHUNK) {
            tx.try_send(StdinMsg::Data(chunk.to_vec()))
                .map_err(|err| match err {
                    TrySendError::Full(_) => StdinError::Full,
                    TrySendError::Closed(_) => StdinError::Closed,
                })?;
        }
        Ok(())
    }

    /// Ends the input after everything queued so far.
    pub(crate) async fn close(&self) -> Result<(), StdinError> {
        let tx = self.tx.lock().await.take().ok_or(StdinError::Closed)?;
        tx.send(StdinMsg::Eof).await.map_err(|_| StdinError::Closed)
    }
}

/// Writes queued chunks in order. End of input closes a pipe; on a terminal it writes VEOF (twice
/// when the current line is not empty: the first only submits the pending line).
pub(crate) async fn pump(mut rx: mpsc::Receiver<StdinMsg>, io: FdIo, is_pty: bool) {
    let mut line_open = false;
    while let Some(msg) = rx.recv().await {
        match msg {
            StdinMsg::Data(data) => {
                if io.write_all(&data).await.is_err() {
                    // The reader is gone (EPIPE/EIO): dropping `rx` makes later writes `Closed`.
                    return;
                }
                if let Some(&last) = data.last() {
                    line_open = last != b'\n' && last != b'\r';
                }
            }
            StdinMsg::Eof => {
                if is_pty {
                    if let Ok(veof) = pty::eof_char(io.borrow_fd()) {
                        let count = if line_open { 2 } else { 1 };
                        let _ = io.write_all(&[veof, veof][..count]).await;
                    }
                }
                return;
            }
        }
    }
}
