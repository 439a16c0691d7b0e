//! Process supervision for the workspace agent: every exec runs in its own session and process
//! group, streams its output and input without polling, can be cancelled as a tree, and is reaped.
//!
//! The agent daemon owns one [`Supervisor`]; each [`Supervisor::spawn`] returns an [`Exec`]
//! handle (state, stdin, resize, cancel, wait) and hands output to the caller's [`OutputSink`].
//! [`Redactor`] removes known secret values from a byte stream before it is stored.

mod config;
mod confine;
mod exec;
mod fdio;
mod group;
mod pty;
mod reaper;
mod redact;
mod run;
mod sink;
mod spawn;
mod spec;
mod status;
mod stdin;
mod supervisor;

#[cfg(test)]
mod tests;

pub use config::{agent_base_env, SupervisorConfig, DEFAULT_DRAIN_TIMEOUT};
pub use confine::{CommandUser, Confinement, Limit};
pub use exec::Exec;
/// For the agent's own helpers (the metrics sampler's), which must be reaped by the one reaper.
pub(crate) use group::signal_group;
pub(crate) use reaper::reaper;
pub use redact::{Redactor, REDACTED};
pub use sink::{ChannelSink, OutputSink, SinkEvent, SinkFuture, StepReport, Stream, MAX_CHUNK};
pub use spec::{
    CommandLine, ExecSpec, Identity, PidSlot, PtySize, DEFAULT_KILL_GRACE, MAX_REPORT_BYTES,
    REPORT_FD,
};
pub use status::{ExecState, ExecStatus, ExitStatus};
pub use stdin::{StdinError, STDIN_CHUNK, STDIN_QUEUE_CHUNKS};
pub use supervisor::Supervisor;
