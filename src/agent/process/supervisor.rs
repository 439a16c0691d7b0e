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
        let shared = Arc::new(ExecShared::new(stdin, spec.pty));
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

#[cfg(test)]
mod tests {
    // Many execs at once: each gets exactly its own bytes and its own exit code.

    use crate::agent::process::tests::{supervisor, wait, CollectSink};
    use crate::agent::process::{ExecSpec, ExecState, ExitStatus};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn test_two_hundred_concurrent_execs_each_get_their_own_output_and_exit_code() {
        let supervisor = supervisor();
        let script =
            r#"for j in $(seq 1 50); do echo "o$N-$j"; echo "e$N-$j" >&2; done; exit $((N % 100))"#;
        let mut running = Vec::new();
        for n in 0..200 {
            let sink = CollectSink::new();
            let spec = ExecSpec::argv(["bash", "-c", script]).env("N", n.to_string());
            running.push((n, supervisor.spawn(spec, sink.clone()), sink));
        }
        for (n, exec, sink) in running {
            let status = wait(&exec).await;
            sink.assert_contract(&status);
            assert_eq!(status.state, ExecState::Finished, "exec {n}");
            assert_eq!(status.exit, Some(ExitStatus::Code(n % 100)), "exec {n}");
            let expected = |tag: &str| {
                (1..=50)
                    .map(|j| format!("{tag}{n}-{j}\n"))
                    .collect::<String>()
            };
            assert_eq!(sink.stdout(), expected("o"), "exec {n}");
            assert_eq!(sink.stderr(), expected("e"), "exec {n}");
        }
    }
}
