//! What to run: the command, who runs it, its environment, working directory, terminal, time
//! limits and the step that follows it. Plain data built by the caller; `spawn` turns it into a
//! process.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a cancelled or timed-out exec gets between SIGTERM and SIGKILL unless the caller says.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// The descriptor a step with a report channel writes its report to (see [`ExecSpec::report`]).
pub const REPORT_FD: i32 = 3;
/// The most of a step's report that is kept; the rest is read and counted, never stored.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// The program to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandLine {
    /// `bash -lc TEXT`: the text is one argument, never split or re-quoted by us.
    Shell(String),
    /// A program and its arguments, run without a shell; the first element is looked up in PATH.
    Argv(Vec<OsString>),
}

/// Size of a pseudo-terminal in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtySize {
    pub rows: u16,
    pub cols: u16,
}

/// On whose behalf a command runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Identity {
    /// The workspace's commands: the workspace's environment (the supervisor's `base_env`).
    #[default]
    Workspace,
    /// The agent's own work (the network step of an authenticated git operation): a fixed
    /// minimal environment (`agent_env`) plus only the spec's `env`, none of the workspace's, a
    /// private home. This is where a separate uid would be switched to, in `spawn`.
    Agent,
}

impl Identity {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workspace => "workspace",
            Self::Agent => "agent",
        }
    }
}

/// One command to supervise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    pub command: CommandLine,
    /// Whose environment (and, later, uid) the command gets.
    pub identity: Identity,
    /// Added to (and overriding) the base environment of the identity.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory; `None` keeps the supervisor's own.
    pub workdir: Option<PathBuf>,
    /// Run on a pseudo-terminal of this size: stdout and stderr become one stream (stdout).
    pub pty: Option<PtySize>,
    /// Wall-clock limit from the spawn; when it passes the group is terminated (`timed_out`).
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the exec is cancelled or times out.
    pub kill_grace: Duration,
    /// A step run, in the same exec and event stream, only when this one exits 0; the exec's
    /// outcome is that of the last step run. Only the first step's `timeout` counts (it bounds
    /// the whole exec), and only the last step reads stdin (the others get end of input).
    pub then: Option<Box<ExecSpec>>,
    /// Holds this step's process id while it runs (0 before and after): how the agent tells
    /// whether a process asking it for something descends from this step.
    pub pid_slot: Option<Arc<PidSlot>>,
    /// Give the step a report channel of its own: descriptor [`REPORT_FD`] (also named by
    /// `MWC_REPORT_FD` in its environment) is the write end of a pipe that only this step's
    /// processes hold and only the supervisor reads. Unlike its output, which every step of the
    /// exec (and whatever they leave running) shares, what arrives there is this step's alone;
    /// the sink gets it when the step ends ([`OutputSink::report`](super::OutputSink::report)),
    /// at most [`MAX_REPORT_BYTES`] of it.
    pub report: bool,
}

/// A step's process id while it runs; 0 when it is not running.
#[derive(Debug, Default)]
pub struct PidSlot(AtomicI32);

impl PidSlot {
    pub fn get(&self) -> Option<libc::pid_t> {
        Some(self.0.load(Ordering::Acquire)).filter(|&pid| pid > 0)
    }

    pub(crate) fn set(&self, pid: libc::pid_t) {
        self.0.store(pid, Ordering::Release);
    }

    pub(crate) fn clear(&self) {
        self.0.store(0, Ordering::Release);
    }
}

// Two specs are equal when they share the slot itself, not a pid that happens to match.
impl PartialEq for PidSlot {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for PidSlot {}

impl ExecSpec {
    /// `bash -lc TEXT`.
    pub fn shell(text: impl Into<String>) -> Self {
        Self::new(CommandLine::Shell(text.into()))
    }

    /// A program and its arguments, no shell.
    pub fn argv<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Self::new(CommandLine::Argv(
            argv.into_iter().map(Into::into).collect(),
        ))
    }

    fn new(command: CommandLine) -> Self {
        Self {
            command,
            identity: Identity::Workspace,
            env: Vec::new(),
            workdir: None,
            pty: None,
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            then: None,
            pid_slot: None,
            report: false,
        }
    }

    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = identity;
        self
    }

    /// Gives the step its report channel (see the field).
    pub fn report(mut self) -> Self {
        self.report = true;
        self
    }

    /// Appends `next` as the step after the last one of this spec.
    pub fn then(mut self, next: ExecSpec) -> Self {
        let mut slot = &mut self.then;
        while let Some(step) = slot {
            slot = &mut step.then;
        }
        *slot = Some(Box::new(next));
        self
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn workdir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workdir = Some(dir.into());
        self
    }

    pub fn pty(mut self, rows: u16, cols: u16) -> Self {
        self.pty = Some(PtySize { rows, cols });
        self
    }

    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }
}
