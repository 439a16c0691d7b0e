//! The supervisor: configuration shared by all execs (base environment, orphan adoption, output
//! drain time) and `spawn`, which starts one exec's task and returns its handle.

use std::ffi::OsString;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::confine::Confinement;
use super::exec::{Exec, ExecShared};
use super::reaper::{reaper, Reaper};
use super::run::{run, RunContext};
use super::sink::OutputSink;
use super::spec::ExecSpec;
use super::stdin::StdinQueue;

/// How long output is still read after the leader has exited, when a background process keeps
/// the pipes open.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// The environment of every `Identity::Workspace` step starts from this (then gets its
    /// spec's `env`).
    pub base_env: Vec<(OsString, OsString)>,
    /// The environment of every `Identity::Agent` step starts from this, and nothing else of
    /// the process's or the workspace's environment (see [`agent_base_env`]).
    pub agent_env: Vec<(OsString, OsString)>,
    /// Make this process a child subreaper (`PR_SET_CHILD_SUBREAPER`) and reap every child,
    /// orphaned grandchildren included. Right for the agent daemon, which owns all children of
    /// its process; wrong for a process where other code spawns children and waits for them
    /// itself (their statuses would be collected here). Once on, it stays on for the process.
    pub adopt_orphans: bool,
    /// See [`DEFAULT_DRAIN_TIMEOUT`].
    pub drain_timeout: Duration,
    /// The user and limits every command starts with.
    pub confinement: Confinement,
    /// The user and limits of the agent's own steps (`Identity::Agent`).
    pub agent_confinement: Confinement,
}

impl Default for SupervisorConfig {
    /// The daemon's settings: the current environment, orphans adopted.
    fn default() -> Self {
        Self {
            base_env: std::env::vars_os().collect(),
            agent_env: agent_base_env(std::path::Path::new("/nonexistent")),
            adopt_orphans: true,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            confinement: Confinement::default(),
            agent_confinement: Confinement::default(),
        }
    }
}

/// The fixed environment of agent-identity steps: a system PATH, a UTF-8 locale, `home` as HOME,
/// and no terminal prompts. Nothing here comes from the workspace.
pub fn agent_base_env(home: &std::path::Path) -> Vec<(OsString, OsString)> {
    vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("LANG".into(), "C.UTF-8".into()),
        ("HOME".into(), home.as_os_str().to_owned()),
        ("GIT_TERMINAL_PROMPT".into(), "0".into()),
    ]
}

/// Starts and owns execs. Cheap to clone.
#[derive(Clone)]
pub struct Supervisor {
    config: Arc<SupervisorConfig>,
    reaper: Arc<Reaper>,
}

impl Supervisor {
    /// Starts the process-wide reaper (once) and, if asked, adopts orphans.
    pub fn new(config: SupervisorConfig) -> io::Result<Self> {
        let reaper = reaper()?;
        if config.adopt_orphans {
            reaper.adopt_orphans()?;
        }
        Ok(Self {
            config: Arc::new(config),
            reaper,
        })
    }

    /// Starts `spec` on the current tokio runtime and returns its handle at once, in state
    /// `starting`; a `cancel` before the task reaches the spawn means the command never runs.
    /// Spawn errors are not returned here: the exec ends `failed` with the OS error text.
    ///
    /// # Panics
    /// Outside a tokio runtime (with I/O and time enabled).
    pub fn spawn(&self, spec: ExecSpec, sink: Arc<dyn OutputSink>) -> Exec {
        let (stdin, stdin_rx) = StdinQueue::new();
        let shared = Arc::new(ExecShared::new(stdin));
        let context = RunContext {
            shared: Arc::clone(&shared),
            spec,
            sink,
            stdin_rx,
            config: Arc::clone(&self.config),
            reaper: Arc::clone(&self.reaper),
        };
        tokio::spawn(run(context));
        Exec { shared }
    }
}
