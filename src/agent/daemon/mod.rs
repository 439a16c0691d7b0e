//! The workspace agent daemon: owns the supervisor, the workspace's files and watches, the
//! exec registry with its durable logs and the metrics sampler, and serves the channel protocol
//! on a unix socket.

mod agent_env;
mod archive_ops;
mod askpass;
mod command_home;
mod execs;
mod file_ops;
mod fs_user;
pub mod launch_config;
mod lock;
pub mod metrics;
mod port_relay;
mod service;
mod tasks;
mod watches;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::agent::exec_log::{LogBudget, LogConfig};
use crate::agent::files::Workspace;
use crate::agent::process::{agent_base_env, Supervisor, SupervisorConfig};
use crate::agent::watch::DEFAULT_MAX_WATCHES;
use crate::channel::server;
pub use execs::DEFAULT_MAX_ENDED_EXECS;
pub use service::Daemon;

/// The variable that tells `mwc-agent askpass` where the daemon answers.
pub const ASKPASS_SOCKET_ENV: &str = "MWC_ASKPASS_SOCKET";
/// The variable that tells the askpass program which Python runs the agent.
pub const AGENT_PYTHON_ENV: &str = "MWC_AGENT_PYTHON";
pub use askpass::ask;

/// How long running execs get to end when the daemon is asked to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// The workspace root every path is contained in.
    pub root: PathBuf,
    /// Where exec records and logs live (survives restarts).
    pub state_dir: PathBuf,
    /// The agent's own directory, outside the workspace root: the HOME and working directory
    /// of agent-identity steps, and what they keep between operations (git mirrors). Default
    /// `<state_dir>/agent`.
    pub agent_dir: Option<PathBuf>,
    /// The GIT_ASKPASS program agent steps use, which the workspace cannot modify (reported
    /// by `ping`; the daemon only passes it on).
    pub askpass: Option<PathBuf>,
    /// The Python interpreter this agent runs in: the askpass program runs the agent's
    /// `askpass` mode with it (`-m modal_workspace_core.agent`).
    pub python: Option<PathBuf>,
    pub socket: PathBuf,
    pub max_log_bytes: u64,
    pub max_total_log_bytes: u64,
    pub max_watches: usize,
    /// How many ended execs are kept (records and logs); the ones that ended first go first.
    pub max_ended_execs: usize,
    /// Variables of the daemon's own environment that hold secrets (names, never values):
    /// every exec inherits them, so their values are redacted from every exec.
    pub redact_env: Vec<String>,
    /// Read a [`launch_config::LaunchConfig`] from stdin at start: the execs' environment then
    /// comes from it, not from the daemon's own.
    pub config_stdin: bool,
    /// How the workspace's metrics are sampled (see [`metrics`]).
    pub metrics: metrics::MetricsConfig,
}

impl DaemonConfig {
    pub fn new(root: PathBuf, state_dir: PathBuf, socket: PathBuf) -> Self {
        Self {
            root,
            state_dir,
            agent_dir: None,
            askpass: None,
            python: None,
            socket,
            max_log_bytes: crate::agent::exec_log::DEFAULT_MAX_LOG_BYTES,
            max_total_log_bytes: crate::agent::exec_log::DEFAULT_MAX_TOTAL_LOG_BYTES,
            max_watches: DEFAULT_MAX_WATCHES,
            max_ended_execs: DEFAULT_MAX_ENDED_EXECS,
            redact_env: Vec::new(),
            config_stdin: false,
            metrics: metrics::MetricsConfig::default(),
        }
    }
    /// Where git's askpass asks the daemon for a step's token: beside the channel's socket.
    pub fn askpass_socket(&self) -> PathBuf {
        let mut path = self.socket.as_os_str().to_owned();
        path.push(".askpass");
        PathBuf::from(path)
    }

    /// The variables a step with a credential gets: where to ask, and with what.
    fn askpass_env(&self) -> Vec<(OsString, OsString)> {
        // Absolute for the steps, which run elsewhere; a socket given by its name in the
        // daemon's cwd (a deep data root) stays reachable through it (see `askpass::ask`).
        let socket = self.askpass_socket();
        let socket = match std::env::current_dir() {
            Ok(cwd) if socket.is_relative() => cwd.join(socket),
            _ => socket,
        };
        let mut env = vec![(OsString::from(ASKPASS_SOCKET_ENV), socket.into_os_string())];
        if let Some(python) = &self.python {
            env.push((
                OsString::from(AGENT_PYTHON_ENV),
                python.clone().into_os_string(),
            ));
        }
        env
    }

    /// See [`DaemonConfig::agent_dir`].
    pub fn agent_dir(&self) -> PathBuf {
        self.agent_dir
            .clone()
            .unwrap_or_else(|| self.state_dir.join("agent"))
    }
}

impl Daemon {
    /// Opens the root, starts the supervisor (as a subreaper) and loads earlier execs.
    pub fn open(config: &DaemonConfig) -> Result<Arc<Self>, String> {
        let launch = launch_config::LaunchConfig {
            env: std::env::vars_os().collect(),
            ..Default::default()
        };
        Self::open_with(config, launch)
    }

    /// Opens with the environment, user and limits a launcher gave.
    pub fn open_with(
        config: &DaemonConfig,
        launch: launch_config::LaunchConfig,
    ) -> Result<Arc<Self>, String> {
        let root = std::fs::canonicalize(&config.root)
            .map_err(|e| format!("cannot use --root {}: {e}", config.root.display()))?;
        let root_str = root
            .to_str()
            .ok_or("the workspace root must be a UTF-8 path")?
            .to_owned();
        crate::policy::workspace_path(&root_str, ".").map_err(|e| e.message)?;
        let ws = Arc::new(Workspace::open(&root).map_err(|e| e.message)?);
        let staging = crate::agent::archive::Staging::open(&config.state_dir.join("artifacts"))?;
        // Variables named in MWC_PRIVATE_ENV are withheld from every exec (and kept nowhere).
        let secrets = inherited_secrets(&config.redact_env, &launch.env);
        let mut base_env = agent_env::workspace_env(launch.env);
        if let (Some(user), Some(home)) = (launch.workspace_user, &launch.command_home) {
            // Beside the agent's state when the image's own place cannot be written.
            let fallback = config.state_dir.parent().map(|dir| dir.join("home"));
            let homes = (home, fallback.as_deref());
            give_commands_their_home(&root, user, homes, launch.claim_root, &mut base_env)?;
            for volume in &launch.volume_roots {
                // A volume that keeps its owners is still usable below what it already lets
                // the user write: a warning, not a failed start.
                if let Err(e) = command_home::claim_dir(volume, user) {
                    tracing::warn!(error = %e, "a volume's root stays as it was");
                }
            }
        }
        let agent_dir = config.agent_dir();
        let agent_home = agent_dir.join("home");
        create_private_dir(&agent_home)?;
        if let Some(user) = launch.agent_confinement.user {
            hand_agent_dir_to(&config.state_dir, &agent_dir, &agent_home, user)?;
        }
        let supervisor = Supervisor::new(SupervisorConfig {
            base_env,
            agent_env: agent_base_env(&agent_home),
            confinement: launch.confinement,
            agent_confinement: launch.agent_confinement,
            ..SupervisorConfig::default()
        })
        .map_err(|e| format!("cannot start the process supervisor: {e}"))?;
        let budget = LogBudget::new(config.max_total_log_bytes);
        let credentials = Arc::new(askpass::Credentials::default());
        // Before the registry: execs that report metrics put them in its stream.
        let metrics = metrics::MetricsStream::open(root.clone(), &config.metrics)?;
        let execs = execs::ExecRegistry::new(
            config.state_dir.join("execs"),
            root_str.clone(),
            supervisor,
            LogConfig::with_max_bytes(config.max_log_bytes),
            budget,
            secrets,
        )
        .with_agent_home(agent_home)
        .with_max_ended(config.max_ended_execs)
        .with_askpass(Arc::clone(&credentials), config.askpass_env())
        .with_reported_metrics(metrics.reported());
        let loaded = execs
            .load()
            .map_err(|e| format!("cannot load earlier execs: {e}"))?;
        tracing::info!(loaded, "loaded the execs of earlier agents");
        Ok(Arc::new(Self {
            metrics,
            watches: watches::WatchStreams::new(
                root_str.clone(),
                Arc::clone(&ws),
                config.max_watches,
            ),
            tasks: tasks::TaskStreams::default(),
            root: root_str,
            agent_dir: agent_dir.to_string_lossy().into_owned(),
            askpass: config
                .askpass
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            ws,
            staging,
            execs,
            started: Instant::now(),
            workspace_user: launch.workspace_user,
            channel_key: launch.channel_key,
            credentials,
        }))
    }
}

/// Where the agent is the container's root: the commands' home made theirs, and at the first
/// start the image's files in the workspace root; their environment names that home and user
/// (over the container's, which is root's).
fn give_commands_their_home(
    root: &Path,
    user: crate::agent::process::CommandUser,
    (home, fallback): (&launch_config::CommandHome, Option<&Path>),
    claim_root: bool,
    env: &mut Vec<(OsString, OsString)>,
) -> Result<(), String> {
    let path = match (command_home::prepare_home(&home.path, user), fallback) {
        (Ok(()), _) => home.path.clone(),
        (Err(first), Some(fallback)) => {
            // A read-only image root, say. The state directory's parent is the agent's and
            // becomes traversable when the askpass socket is bound there (`askpass::bind`).
            command_home::prepare_home(fallback, user).map_err(|e| format!("{first}; {e}"))?;
            tracing::warn!(reason = %first, home = %fallback.display(), "the commands' home moved");
            fallback.to_owned()
        }
        (Err(first), None) => return Err(first),
    };
    if claim_root {
        let changed = command_home::claim_tree(root, user)?;
        tracing::info!(
            changed,
            "gave the image's workspace files to the commands' user"
        );
    }
    let overrides: [(&str, OsString); 3] = [
        ("HOME", path.into_os_string()),
        ("USER", home.user_name.clone().into()),
        ("LOGNAME", home.user_name.clone().into()),
    ];
    env.retain(|(key, _)| !overrides.iter().any(|(name, _)| key == name));
    env.extend(overrides.map(|(name, value)| (OsString::from(name), value)));
    Ok(())
}

/// The values of the named variables of the execs' environment (those set and not empty).
fn inherited_secrets(names: &[String], env: &[(OsString, OsString)]) -> Vec<String> {
    names
        .iter()
        .filter_map(|name| env.iter().find(|(k, _)| k.to_str() == Some(name.as_str())))
        .filter_map(|(_, value)| value.to_str())
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The launcher's configuration from stdin, when asked for; the environment otherwise.
fn launch_config(config: &DaemonConfig) -> Result<launch_config::LaunchConfig, String> {
    if !config.config_stdin {
        return Ok(launch_config::LaunchConfig {
            env: std::env::vars_os().collect(),
            ..Default::default()
        });
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)
        .map_err(|e| format!("cannot read the launch configuration from stdin: {e}"))?;
    let mut launch = launch_config::parse(&bytes)?;
    // A launcher that sends no environment (Modal: the sandbox's own is the workspace's, secrets
    // included) leaves the daemon's own to the execs.
    if !launch.env_given {
        launch.env = std::env::vars_os().collect();
    }
    Ok(launch)
}

/// Keeps commands of the same uid from reading the daemon's memory, environment and open files
/// (`/proc/<daemon>/…`) or tracing it: it holds the workspace's secrets and its channel.
fn refuse_inspection() -> Result<(), String> {
    // SAFETY: prctl(PR_SET_DUMPABLE) changes a flag of this process and reads no memory of ours.
    let done = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if done < 0 {
        return Err(format!(
            "cannot make the daemon undumpable: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Runs the daemon until SIGTERM or SIGINT. Refuses to start when another daemon holds the
/// socket or the state directory.
pub async fn run(config: DaemonConfig) -> Result<(), String> {
    refuse_inspection()?;
    let launch = launch_config(&config)?;
    create_private_dir(&config.state_dir)?;
    let _state_lock =
        lock::Lock::acquire(&config.state_dir.join("daemon.lock"), "state directory")?;
    let mut socket_lock_path = config.socket.as_os_str().to_owned();
    socket_lock_path.push(".lock");
    let _socket_lock = lock::Lock::acquire(Path::new(&socket_lock_path), "socket")?;
    let daemon = Daemon::open_with(&config, launch)?;
    let listener = lock::bind_private(&config.socket)?;
    let askpass_socket = config.askpass_socket();
    tokio::spawn(askpass::serve(
        askpass::bind(&askpass_socket)?,
        Arc::clone(&daemon.credentials),
    ));
    tracing::info!(socket = %config.socket.display(), root = %daemon.root, "agent daemon listening");

    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let service: Arc<dyn server::Service> = daemon.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let service = Arc::clone(&service);
                    match crate::agent::socket::split(stream) {
                        Ok((reader, writer)) => {
                            tokio::spawn(server::serve(reader, writer, service));
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot set up an accepted connection"),
                    }
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    shutdown(&daemon, listener, &config.socket).await;
    Ok(())
}

/// Stops taking connections, cancels running execs (their ends are recorded), removes the socket.
async fn shutdown(daemon: &Daemon, listener: UnixListener, socket: &Path) {
    tracing::info!("agent daemon stopping");
    drop(listener);
    let _ = std::fs::remove_file(socket);
    let mut askpass = socket.as_os_str().to_owned();
    askpass.push(".askpass");
    let _ = std::fs::remove_file(askpass);
    let running = daemon.execs.running();
    let waits: Vec<_> = running
        .iter()
        .filter_map(|r| r.exec.get().cloned())
        .map(|exec| {
            exec.cancel_with_grace(SHUTDOWN_GRACE);
            async move { exec.wait().await }
        })
        .collect();
    let all = async {
        for wait in waits {
            wait.await;
        }
    };
    let _ = tokio::time::timeout(SHUTDOWN_GRACE * 3, all).await;
    // After the execs: stopping the GPU readers may wait a moment for a driver.
    daemon.metrics.stop();
}

/// Gives the agent's directory to the user its steps run as: it writes the mirrors and its home
/// there; workspace commands may read the mirrors (step 2 clones from them) and traverse the
/// state directory to reach them, but write none of it and list nothing else.
fn hand_agent_dir_to(
    state_dir: &Path,
    agent_dir: &Path,
    agent_home: &Path,
    user: crate::agent::process::CommandUser,
) -> Result<(), String> {
    use std::os::unix::fs::{lchown, PermissionsExt};
    let fail = |what: &Path, e: std::io::Error| format!("cannot prepare {}: {e}", what.display());
    for (dir, mode) in [(agent_dir, 0o755), (agent_home, 0o700)] {
        // The mode first, while the directory is still the agent's (the agent has no
        // CAP_FOWNER); on a later start it is the git user's, with this mode already.
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
        lchown(dir, Some(user.uid), Some(user.gid)).map_err(|e| fail(dir, e))?;
    }
    let git = agent_dir.join("git");
    if git.is_dir() {
        lchown(&git, Some(user.uid), Some(user.gid)).map_err(|e| fail(&git, e))?;
    }
    std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o711))
        .map_err(|e| fail(state_dir, e))
}

fn create_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}
