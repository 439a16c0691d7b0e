//! What every exec of one supervisor shares: the base environments of workspace and agent
//! steps, orphan adoption, the output drain time and the confinement each identity starts with.

use std::ffi::OsString;
use std::time::Duration;

use super::confine::Confinement;

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
