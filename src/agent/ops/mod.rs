//! The agent's operations (docs/protocol.md) as one table: each op's name, whether the gateway
//! may send it again after a lost channel, and its arguments parsed into a typed request.
//!
//! The daemon dispatches on [`AgentRequest`] and never reads a request's JSON itself; the Python
//! bindings export the names and the repeatable set (`_core.AGENT_OPS`,
//! `_core.REPEATABLE_AGENT_OPS`), so the gateway's retry rule comes from here too. `subscribe`
//! and `unsubscribe` are not in the table: the channel server answers them itself, in order
//! with the stream's pages.

mod archive;
mod args;
mod exec;
mod file;
mod metrics;
mod paths;
mod task;
mod watch;

use serde_json::{Map, Value};

use crate::channel::message::ErrorBody;
use crate::policy;

pub(crate) use archive::{ArchiveOp, ArchiveRequest};
pub(crate) use args::{file_error, internal, log_error, policy, Args};
pub(crate) use exec::{
    CancelRequest, InputRequest, ReadRequest, ResizeRequest, StartRequest, StatusRequest,
    StepCredential, StepProgram, StepRequest,
};
pub(crate) use file::{FileOp, FileRequest, PatchRequest};
pub(crate) use metrics::{
    interval as metrics_interval, MetricsSetRequest, DEFAULT_INTERVAL as DEFAULT_METRICS_INTERVAL,
};
pub(crate) use paths::under_root;
pub use paths::{shown_path, CLIENT_ROOT};
pub(crate) use task::{TaskEndRequest, TaskProgressRequest, TaskRef, TaskStartRequest};
pub(crate) use watch::{WatchRef, WatchStartRequest};

/// Every op the daemon serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentOp {
    Ping,
    ExecStart,
    ExecInput,
    ExecCancel,
    ExecResize,
    ExecStatus,
    ExecList,
    ExecNotes,
    ExecSettle,
    ExecRead,
    FileStat,
    FileList,
    FileRead,
    FileWrite,
    FileEdit,
    FilePatch,
    FileRemove,
    FileMkdir,
    FileGlob,
    FileGrep,
    WatchStart,
    WatchCancel,
    WatchStatus,
    WatchList,
    TaskStart,
    TaskProgress,
    TaskEnd,
    TaskStatus,
    MetricsStatus,
    MetricsSet,
    ArchiveCreate,
    ArchiveRead,
    ArchiveWrite,
    ArchiveExtract,
    ArchiveRemove,
    PortConnect,
}

impl AgentOp {
    pub const ALL: [AgentOp; 36] = [
        AgentOp::Ping,
        AgentOp::ExecStart,
        AgentOp::ExecInput,
        AgentOp::ExecCancel,
        AgentOp::ExecResize,
        AgentOp::ExecStatus,
        AgentOp::ExecList,
        AgentOp::ExecNotes,
        AgentOp::ExecSettle,
        AgentOp::ExecRead,
        AgentOp::FileStat,
        AgentOp::FileList,
        AgentOp::FileRead,
        AgentOp::FileWrite,
        AgentOp::FileEdit,
        AgentOp::FilePatch,
        AgentOp::FileRemove,
        AgentOp::FileMkdir,
        AgentOp::FileGlob,
        AgentOp::FileGrep,
        AgentOp::WatchStart,
        AgentOp::WatchCancel,
        AgentOp::WatchStatus,
        AgentOp::WatchList,
        AgentOp::TaskStart,
        AgentOp::TaskProgress,
        AgentOp::TaskEnd,
        AgentOp::TaskStatus,
        AgentOp::MetricsStatus,
        AgentOp::MetricsSet,
        AgentOp::ArchiveCreate,
        AgentOp::ArchiveRead,
        AgentOp::ArchiveWrite,
        AgentOp::ArchiveExtract,
        AgentOp::ArchiveRemove,
        AgentOp::PortConnect,
    ];

    /// The op's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            AgentOp::Ping => "ping",
            AgentOp::ExecStart => "exec.start",
            AgentOp::ExecInput => "exec.input",
            AgentOp::ExecCancel => "exec.cancel",
            AgentOp::ExecResize => "exec.resize",
            AgentOp::ExecStatus => "exec.status",
            AgentOp::ExecList => "exec.list",
            AgentOp::ExecNotes => "exec.notes",
            AgentOp::ExecSettle => "exec.settle",
            AgentOp::ExecRead => "exec.read",
            AgentOp::FileStat => "file.stat",
            AgentOp::FileList => "file.list",
            AgentOp::FileRead => "file.read",
            AgentOp::FileWrite => "file.write",
            AgentOp::FileEdit => "file.edit",
            AgentOp::FilePatch => "file.patch",
            AgentOp::FileRemove => "file.remove",
            AgentOp::FileMkdir => "file.mkdir",
            AgentOp::FileGlob => "file.glob",
            AgentOp::FileGrep => "file.grep",
            AgentOp::WatchStart => "watch.start",
            AgentOp::WatchCancel => "watch.cancel",
            AgentOp::WatchStatus => "watch.status",
            AgentOp::WatchList => "watch.list",
            AgentOp::TaskStart => "task.start",
            AgentOp::TaskProgress => "task.progress",
            AgentOp::TaskEnd => "task.end",
            AgentOp::TaskStatus => "task.status",
            AgentOp::MetricsStatus => "metrics.status",
            AgentOp::MetricsSet => "metrics.set",
            AgentOp::ArchiveCreate => "archive.create",
            AgentOp::ArchiveRead => "archive.read",
            AgentOp::ArchiveWrite => "archive.write",
            AgentOp::ArchiveExtract => "archive.extract",
            AgentOp::ArchiveRemove => "archive.remove",
            AgentOp::PortConnect => "port.connect",
        }
    }

    pub fn from_name(name: &str) -> Option<AgentOp> {
        AgentOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether sending the op again after the channel was lost (not knowing whether the agent
    /// got it) does nothing twice. `exec.start` is: the gateway names the exec, and a second
    /// start of the same id answers the first. `exec.input` (stdin would be written twice),
    /// `exec.resize`, `file.edit` (a replacement could apply twice), `file.patch` (likewise),
    /// `file.remove`,
    /// `watch.start` and `task.progress` (a report would show twice) are not; `task.start` and
    /// `task.end` are (the gateway names the task; a second end answers the first), and so is
    /// `metrics.set` (it sets a value: twice is once). The
    /// `archive.*` steps name their archive and offset, so they repeat safely, except
    /// `archive.extract` (a second one would find its own result in place). `port.connect`
    /// opens a connection: twice is two.
    pub fn repeatable(self) -> bool {
        !matches!(
            self,
            AgentOp::ExecInput
                | AgentOp::ExecResize
                | AgentOp::FileEdit
                | AgentOp::FilePatch
                | AgentOp::FileRemove
                | AgentOp::WatchStart
                | AgentOp::TaskProgress
                | AgentOp::ArchiveExtract
                | AgentOp::PortConnect
        )
    }

    /// The op's arguments (and payload, for the ops that take bytes) as its typed request.
    pub(crate) fn parse(
        self,
        args: &Map<String, Value>,
        payload: Vec<u8>,
    ) -> Result<AgentRequest, ErrorBody> {
        let a = Args(args);
        Ok(match self {
            AgentOp::Ping => AgentRequest::Ping,
            AgentOp::ExecStart => AgentRequest::ExecStart(StartRequest::parse(args)?),
            AgentOp::ExecInput => AgentRequest::ExecInput(InputRequest::parse(&a, payload)?),
            AgentOp::ExecCancel => AgentRequest::ExecCancel(CancelRequest::parse(&a)?),
            AgentOp::ExecResize => AgentRequest::ExecResize(ResizeRequest::parse(&a)?),
            AgentOp::ExecStatus => AgentRequest::ExecStatus(StatusRequest::parse(&a)?),
            AgentOp::ExecList => AgentRequest::ExecList,
            AgentOp::ExecNotes => AgentRequest::ExecNotes,
            AgentOp::ExecSettle => AgentRequest::ExecSettle(exec::exec_id(&a)?),
            AgentOp::ExecRead => AgentRequest::ExecRead(ReadRequest::parse(&a)?),
            AgentOp::FileStat
            | AgentOp::FileList
            | AgentOp::FileRead
            | AgentOp::FileWrite
            | AgentOp::FileEdit
            | AgentOp::FileRemove
            | AgentOp::FileMkdir
            | AgentOp::FileGlob
            | AgentOp::FileGrep => AgentRequest::File(FileRequest::parse(self, &a, payload)?),
            AgentOp::FilePatch => AgentRequest::FilePatch(PatchRequest::parse(&a, payload)?),
            AgentOp::WatchStart => AgentRequest::WatchStart(WatchStartRequest::parse(&a)?),
            AgentOp::WatchCancel => AgentRequest::WatchCancel(WatchRef::parse(&a)?),
            AgentOp::WatchStatus => AgentRequest::WatchStatus(WatchRef::parse(&a)?),
            AgentOp::WatchList => AgentRequest::WatchList,
            AgentOp::TaskStart => AgentRequest::TaskStart(TaskStartRequest::parse(&a)?),
            AgentOp::TaskProgress => AgentRequest::TaskProgress(TaskProgressRequest::parse(&a)?),
            AgentOp::TaskEnd => AgentRequest::TaskEnd(TaskEndRequest::parse(&a)?),
            AgentOp::TaskStatus => AgentRequest::TaskStatus(TaskRef::parse(&a)?),
            AgentOp::MetricsStatus => AgentRequest::MetricsStatus,
            AgentOp::MetricsSet => AgentRequest::MetricsSet(MetricsSetRequest::parse(&a)?),
            AgentOp::ArchiveCreate
            | AgentOp::ArchiveRead
            | AgentOp::ArchiveWrite
            | AgentOp::ArchiveExtract
            | AgentOp::ArchiveRemove => {
                AgentRequest::Archive(ArchiveRequest::parse(self, &a, payload)?)
            }
            AgentOp::PortConnect => AgentRequest::PortConnect(port_arg(&a)?),
        })
    }
}

/// A request of the channel, its op known and its arguments checked.
#[derive(Debug)]
pub(crate) enum AgentRequest {
    Ping,
    ExecStart(StartRequest),
    ExecInput(InputRequest),
    ExecCancel(CancelRequest),
    ExecResize(ResizeRequest),
    ExecStatus(StatusRequest),
    ExecList,
    ExecNotes,
    /// The exec whose note is settled.
    ExecSettle(String),
    ExecRead(ReadRequest),
    File(FileRequest),
    FilePatch(PatchRequest),
    WatchStart(WatchStartRequest),
    WatchCancel(WatchRef),
    WatchStatus(WatchRef),
    WatchList,
    TaskStart(TaskStartRequest),
    TaskProgress(TaskProgressRequest),
    TaskEnd(TaskEndRequest),
    TaskStatus(TaskRef),
    MetricsStatus,
    MetricsSet(MetricsSetRequest),
    Archive(ArchiveRequest),
    /// A TCP port on the workspace's loopback to relay a connection to (`port.connect`, the
    /// first and only request of a connection of its own: `channel::server`).
    PortConnect(u16),
}

/// `port`: a preview port under the core's rule (1024 to 65535), the only ports a relay opens.
fn port_arg(a: &Args<'_>) -> Result<u16, ErrorBody> {
    let port = a
        .u64("port")?
        .ok_or_else(|| ErrorBody::invalid("port", "'port' is required"))?;
    policy::preview_port(i64::try_from(port).unwrap_or(i64::MAX))
        .map_err(|e| args::policy("port", e))
}

impl AgentRequest {
    /// The request named `op` with `args`; an op not in the table is refused naming `op`.
    pub(crate) fn parse(
        op: &str,
        args: &Map<String, Value>,
        payload: Vec<u8>,
    ) -> Result<AgentRequest, ErrorBody> {
        let Some(op) = AgentOp::from_name(op) else {
            return Err(ErrorBody::invalid(
                "op",
                format!("unknown op '{}'; see docs/protocol.md", policy::echo(op)),
            ));
        };
        op.parse(args, payload)
    }
}

#[cfg(test)]
mod tests;
