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

#[cfg(test)]
mod tests {
    // Stdin is streamed in order without blocking the caller, bounded, and ended on request.

    use std::time::Duration;

    use crate::agent::process::tests::{
        run_to_end, supervisor, temp_dir, wait, CollectSink, LIMIT,
    };
    use crate::agent::process::{ExecSpec, ExecState, ExitStatus, StdinError};

    /// Deterministic bytes that are not all alike (xorshift).
    fn noise(len: usize) -> Vec<u8> {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[0]
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn test_ten_mib_through_cat_and_sha256sum_matches_the_file() {
        let data = noise(10 * 1024 * 1024);
        let file = temp_dir().join("data");
        std::fs::write(&file, &data).unwrap();
        let supervisor = supervisor();
        let (expected, _) = run_to_end(
            &supervisor,
            ExecSpec::argv(["bash", "-c", "sha256sum < \"$F\""]).env("F", &file),
        )
        .await;

        let sink = CollectSink::new();
        let exec = supervisor.spawn(
            ExecSpec::argv(["bash", "-c", "cat | sha256sum"]),
            sink.clone(),
        );
        tokio::time::timeout(LIMIT, exec.write_stdin(&data))
            .await
            .unwrap()
            .unwrap();
        exec.close_stdin().await.unwrap();
        let status = wait(&exec).await;
        sink.assert_contract(&status);
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        assert_eq!(sink.stdout(), expected.stdout());
        assert_eq!(
            sink.stdout().len(),
            64 + 4,
            "one hash line: {:?}",
            sink.stdout()
        );
    }

    #[tokio::test]
    async fn test_closing_stdin_ends_cat() {
        let sink = CollectSink::new();
        let exec = supervisor().spawn(ExecSpec::argv(["cat"]), sink.clone());
        exec.write_stdin(b"first\n").await.unwrap();
        exec.write_stdin(b"second").await.unwrap();
        exec.close_stdin().await.unwrap();
        let status = wait(&exec).await;
        sink.assert_contract(&status);
        assert_eq!(status.state, ExecState::Finished);
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        assert_eq!(sink.stdout(), "first\nsecond");
    }

    #[tokio::test]
    async fn test_writing_after_close_reports_closed() {
        let exec = supervisor().spawn(ExecSpec::argv(["cat"]), CollectSink::new());
        exec.close_stdin().await.unwrap();
        assert_eq!(exec.write_stdin(b"late").await, Err(StdinError::Closed));
        assert_eq!(exec.try_write_stdin(b"late"), Err(StdinError::Closed));
        assert_eq!(exec.close_stdin().await, Err(StdinError::Closed));
        wait(&exec).await;
    }

    #[tokio::test]
    async fn test_try_write_reports_a_full_queue_instead_of_growing_it() {
        // `sleep` never reads its stdin: the pipe fills, then the bounded queue.
        let exec = supervisor().spawn(
            ExecSpec::argv(["sleep", "600"]).kill_grace(Duration::from_secs(1)),
            CollectSink::new(),
        );
        exec.started().await;
        let chunk = vec![b'x'; 64 * 1024];
        let mut accepted = 0;
        let full = loop {
            match exec.try_write_stdin(&chunk) {
                Ok(()) => accepted += 1,
                Err(err) => break err,
            }
            assert!(accepted < 1000, "the queue never filled");
            tokio::task::yield_now().await;
        };
        assert_eq!(full, StdinError::Full);
        assert!(full.to_string().contains("full"));
        exec.cancel();
        assert_eq!(wait(&exec).await.state, ExecState::Cancelled);
    }

    #[tokio::test]
    async fn test_stdin_of_an_exited_process_reports_closed() {
        let exec = supervisor().spawn(ExecSpec::argv(["true"]), CollectSink::new());
        wait(&exec).await;
        let mut result = Ok(());
        // The queue may take a few chunks before the writer notices the process is gone.
        for _ in 0..100 {
            result = exec.write_stdin(b"nobody reads this\n").await;
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(StdinError::Closed));
    }
}
