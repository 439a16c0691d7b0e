//! The supervisor: owns the configuration shared by all execs (see `config`) and the reaper, and
//! `spawn`, which starts one exec's task and returns its handle.

use std::io;
use std::sync::Arc;

use super::config::SupervisorConfig;
use super::exec::{Exec, ExecShared};
use super::reaper::{reaper, Reaper};
use super::run::{run, RunContext};
use super::sink::OutputSink;
use super::spec::ExecSpec;
use super::stdin::StdinQueue;

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
