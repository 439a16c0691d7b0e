//! The life of an exec as the caller sees it: its state, pid, exit status and times.
//! Snapshots are plain values; `Exec::status` and `Exec::wait` hand them out.

use std::time::SystemTime;

/// `starting` → `running` → one final state. `failed` means it never ran (spawn error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecState {
    Starting,
    Running,
    Finished,
    Cancelled,
    Failed,
    TimedOut,
}

impl ExecState {
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Starting | Self::Running)
    }

    /// The wire name (`timed_out`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
        }
    }
}

/// How the process leader ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// It called `exit` with this code.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
}

impl ExitStatus {
    /// Decodes a raw `waitpid` status of a process that has terminated.
    pub(crate) fn from_wait_status(raw: libc::c_int) -> Self {
        if libc::WIFSIGNALED(raw) {
            Self::Signal(libc::WTERMSIG(raw))
        } else {
            Self::Code(libc::WEXITSTATUS(raw))
        }
    }

    /// The code, or minus the signal number (as Python's `subprocess` reports it).
    pub fn returncode(self) -> i32 {
        match self {
            Self::Code(code) => code,
            Self::Signal(signal) => -signal,
        }
    }
}

/// A snapshot of one exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecStatus {
    pub state: ExecState,
    /// Also the process group id; `None` when the exec never started.
    pub pid: Option<u32>,
    /// `None` until the leader has been reaped, and for execs that never ran.
    pub exit: Option<ExitStatus>,
    /// Why the exec `failed`, with the operating system's error text.
    pub error: Option<String>,
    pub started_at: Option<SystemTime>,
    pub ended_at: Option<SystemTime>,
}

impl ExecStatus {
    pub(crate) fn starting() -> Self {
        Self {
            state: ExecState::Starting,
            pid: None,
            exit: None,
            error: None,
            started_at: None,
            ended_at: None,
        }
    }

    /// Shortcut for `exit.map(ExitStatus::returncode)`.
    pub fn returncode(&self) -> Option<i32> {
        self.exit.map(ExitStatus::returncode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_only_the_four_outcomes_are_final() {
        assert!(!ExecState::Starting.is_final());
        assert!(!ExecState::Running.is_final());
        for state in [
            ExecState::Finished,
            ExecState::Cancelled,
            ExecState::Failed,
            ExecState::TimedOut,
        ] {
            assert!(state.is_final(), "{}", state.as_str());
        }
    }

    #[test]
    fn test_returncode_is_negative_signal_for_killed_processes() {
        assert_eq!(ExitStatus::Code(3).returncode(), 3);
        assert_eq!(ExitStatus::Signal(9).returncode(), -9);
        assert_eq!(ExitStatus::from_wait_status(9), ExitStatus::Signal(9));
        assert_eq!(ExitStatus::from_wait_status(3 << 8), ExitStatus::Code(3));
    }
}
