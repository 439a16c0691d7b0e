//! The caller's handle on one exec: its status, stdin, terminal size, cancellation and the wait
//! for its outcome. Cheap to clone; every clone talks to the same exec.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::pty;
use super::spec::PtySize;
use super::status::{ExecState, ExecStatus};
use super::stdin::{StdinError, StdinQueue};

/// State shared by the handle and the task that runs the exec.
pub(crate) struct ExecShared {
    /// Held while deciding to spawn and while spawning, and by `cancel`: a cancel either lands
    /// before the spawn (the command never runs) or after it (the group is terminated).
    pub(crate) gate: Mutex<()>,
    pub(crate) cancel: watch::Sender<bool>,
    pub(crate) status: watch::Sender<ExecStatus>,
    pub(crate) stdin: StdinQueue,
    /// The exec's terminal, if it has one (see [`Terminal`]).
    pub(crate) terminal: Mutex<Terminal>,
    /// The grace a cancel asked for, instead of the spec's.
    pub(crate) cancel_grace: Mutex<Option<std::time::Duration>>,
}

impl ExecShared {
    pub(crate) fn new(stdin: StdinQueue, pty: Option<PtySize>) -> Self {
        Self {
            gate: Mutex::new(()),
            cancel: watch::Sender::new(false),
            status: watch::Sender::new(ExecStatus::starting()),
            stdin,
            terminal: Mutex::new(Terminal {
                size: pty,
                master: None,
            }),
            cancel_grace: Mutex::new(None),
        }
    }
}

/// An exec's pseudo-terminal: the size it has (or will have when the process starts: a resize
/// before the spawn is kept for it), and the master while the process runs. The master is
/// dropped when the process ends, so an ended exec holds no terminal.
pub(crate) struct Terminal {
    /// `None` for an exec without a terminal.
    pub(crate) size: Option<PtySize>,
    pub(crate) master: Option<OwnedFd>,
}

/// A supervised exec.
#[derive(Clone)]
pub struct Exec {
    pub(crate) shared: Arc<ExecShared>,
}

impl Exec {
    /// The current snapshot.
    pub fn status(&self) -> ExecStatus {
        self.shared.status.borrow().clone()
    }

    /// Resolves once the exec has left `starting` (it runs, or ended without running).
    pub async fn started(&self) -> ExecStatus {
        let mut rx = self.shared.status.subscribe();
        let result = rx
            .wait_for(|status| status.state != ExecState::Starting)
            .await
            .map(|s| s.clone());
        result.unwrap_or_else(|_| self.status())
    }

    /// Resolves with the final status, after the sink has received all output and `finished`.
    pub async fn wait(&self) -> ExecStatus {
        let mut rx = self.shared.status.subscribe();
        // The sender lives in `shared`, which we hold, so the wait cannot fail.
        let result = rx
            .wait_for(|status| status.state.is_final())
            .await
            .map(|s| s.clone());
        result.unwrap_or_else(|_| self.status())
    }

    /// Terminates the exec: before the spawn the command never runs (`cancelled`, no pid); after
    /// it, SIGTERM to the whole process group, SIGKILL after the spec's grace. Idempotent, and a
    /// no-op once the exec has ended.
    pub fn cancel(&self) {
        let _gate = self.shared.gate.lock();
        self.shared.cancel.send_replace(true);
    }

    /// [`Exec::cancel`] with `grace` between SIGTERM and SIGKILL instead of the spec's. Only the
    /// first cancel that reaches a running exec decides the grace.
    pub fn cancel_with_grace(&self, grace: std::time::Duration) {
        let _gate = self.shared.gate.lock();
        self.shared.cancel_grace.lock().get_or_insert(grace);
        self.shared.cancel.send_replace(true);
    }

    /// Queues `data` for the process's stdin, in order, waiting while the queue (at most
    /// `STDIN_QUEUE_CHUNKS` chunks of `STDIN_CHUNK` bytes) is full. Data queued before the
    /// process starts is written once it runs.
    pub async fn write_stdin(&self, data: &[u8]) -> Result<(), StdinError> {
        self.shared.stdin.write(data).await
    }

    /// Queues all of `data` now, or fails with `StdinError::Full` without queuing any of it.
    pub fn try_write_stdin(&self, data: &[u8]) -> Result<(), StdinError> {
        self.shared.stdin.try_write(data)
    }

    /// Ends the input after what is queued: closes the pipe, or sends VEOF on a terminal.
    pub async fn close_stdin(&self) -> Result<(), StdinError> {
        self.shared.stdin.close().await
    }

    /// Resizes the exec's terminal (the kernel sends SIGWINCH to its foreground group); before
    /// the process starts, the size it will start with. `InvalidInput` for an exec that has no
    /// terminal: started without one, or ended.
    pub fn resize(&self, size: PtySize) -> io::Result<()> {
        // Under the gate, as the spawn: the size is either the one the spawn opens, or set on
        // the master the spawn left.
        let _gate = self.shared.gate.lock();
        let mut terminal = self.shared.terminal.lock();
        let refused = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("this exec has no terminal to resize: {why}"),
            )
        };
        if terminal.size.is_none() {
            return Err(refused("it was started without one"));
        }
        match &terminal.master {
            Some(master) => pty::set_size(master.as_fd(), size)?,
            None if self.status().state == ExecState::Starting => {}
            None => return Err(refused("it has ended")),
        }
        terminal.size = Some(size);
        Ok(())
    }
}
