//! The task behind each exec: spawn (unless cancelled first), stream output to the sink, watch
//! for exit, cancellation and timeout, run the next step after a step that exited 0, and publish
//! the outcome (the last step's) only after the last output.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};

use super::config::SupervisorConfig;
use super::exec::ExecShared;
use super::fdio::FdIo;
use super::group::terminate_group;
use super::reaper::{RawStatus, Reaper};
use super::sink::{OutputSink, StepReport, Stream, MAX_CHUNK};
use super::spawn::{launch, Launched};
use super::spec::{ExecSpec, Identity, MAX_REPORT_BYTES};
use super::status::{ExecState, ExitStatus};
use super::stdin::{pump, StdinMsg};

pub(crate) struct RunContext {
    pub(crate) shared: Arc<ExecShared>,
    pub(crate) spec: ExecSpec,
    pub(crate) sink: Arc<dyn OutputSink>,
    pub(crate) stdin_rx: mpsc::Receiver<StdinMsg>,
    pub(crate) config: Arc<SupervisorConfig>,
    pub(crate) reaper: Arc<Reaper>,
}

enum Start {
    Cancelled,
    Failed(String),
    Running(Launched),
}

pub(crate) async fn run(ctx: RunContext) {
    let RunContext {
        shared,
        spec,
        sink,
        stdin_rx,
        config,
        reaper,
    } = ctx;
    let _guard = OutcomeGuard(Arc::clone(&shared));
    // The first step's limit bounds the whole exec, every step included.
    let deadline = spec.timeout.map(|limit| Instant::now() + limit);
    let kill_grace = spec.kill_grace;
    let mut stdin_rx = Some(stdin_rx);
    let mut step = spec;
    loop {
        let next = step.then.take();
        // A spawn waits until the child has exec'd (std reads the child's status pipe), ~1 ms:
        // on a blocking thread, so that a burst of starts does not hold up the daemon's one
        // runtime thread, and with it every other exec's output.
        let started = {
            let (shared, config, reaper) = (
                Arc::clone(&shared),
                Arc::clone(&config),
                Arc::clone(&reaper),
            );
            tokio::task::spawn_blocking(move || {
                let start = start(&shared, &step, &config, &reaper);
                (start, step)
            })
            .await
        };
        let (start, ran) = match started {
            Ok(started) => started,
            Err(e) => {
                let message = format!("the exec's start was interrupted: {e}");
                return finish(&shared, &*sink, ExecState::Failed, None, Some(message)).await;
            }
        };
        let launched = match start {
            Start::Cancelled => {
                return finish(&shared, &*sink, ExecState::Cancelled, None, None).await
            }
            Start::Failed(message) => {
                return finish(&shared, &*sink, ExecState::Failed, None, Some(message)).await
            }
            Start::Running(launched) => launched,
        };
        let pid_slot = ran.pid_slot.clone();
        if let Some(slot) = &pid_slot {
            slot.set(launched.pid);
        }
        // Only the last step reads the exec's stdin; an earlier one sees end of input.
        let stdin_rx = if next.is_none() {
            stdin_rx.take()
        } else {
            None
        };
        let (state, exit, report) = run_step(
            &shared, &*sink, &config, &reaper, launched, stdin_rx, deadline, kill_grace,
        )
        .await;
        if let Some(slot) = &pid_slot {
            slot.clear();
        }
        if let Some(report) = report {
            sink.report(report).await;
        }
        match next {
            Some(next)
                if state == ExecState::Finished && exit.is_some_and(|e| e.returncode() == 0) =>
            {
                step = *next;
            }
            _ => return finish(&shared, &*sink, state, exit, None).await,
        }
    }
}

/// Streams one launched step's output and input until it ends; returns how it ended and, for a
/// step with a report channel, its report.
#[allow(clippy::too_many_arguments)]
async fn run_step(
    shared: &ExecShared,
    sink: &dyn OutputSink,
    config: &SupervisorConfig,
    reaper: &Reaper,
    launched: Launched,
    stdin_rx: Option<mpsc::Receiver<StdinMsg>>,
    deadline: Option<Instant>,
    kill_grace: std::time::Duration,
) -> (ExecState, Option<ExitStatus>, Option<StepReport>) {
    let Launched {
        pid,
        exit,
        stdin,
        stdout,
        stderr,
        pty_master: _, // in `shared` since the start
        report,
    } = launched;
    let is_pty = shared.terminal.lock().master.is_some();
    let stdin_task = match stdin_rx {
        Some(rx) => Some(tokio::spawn(pump(rx, stdin, is_pty))),
        None => {
            drop(stdin); // end of input for a step that is not the last
            None
        }
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_err = stop_rx.clone();
    let stop_report = stop_rx.clone();
    let readers = async {
        tokio::join!(
            read_stream(&stdout, Stream::Stdout, sink, stop_rx),
            async {
                if let Some(stderr) = &stderr {
                    read_stream(stderr, Stream::Stderr, sink, stop_err).await;
                }
            },
            async {
                match &report {
                    Some(report) => Some(read_report(report, stop_report).await),
                    None => None,
                }
            }
        )
    };
    let supervise = async {
        let outcome = supervise(shared, reaper, pid, exit, deadline, kill_grace).await;
        // Output still in the pipes is drained; a background process that keeps them open only
        // delays the outcome by `drain_timeout`, after which its later output is not read.
        tokio::select! {
            () = tokio::time::sleep(config.drain_timeout) => { let _ = stop_tx.send(true); }
            () = stop_tx.closed() => {}
        }
        outcome
    };
    let ((state, exit), (_, _, report)) = tokio::join!(supervise, readers);
    if let Some(task) = stdin_task {
        task.abort();
    }
    // The step has ended: its terminal goes (a later resize is refused, not sent to nobody).
    shared.terminal.lock().master = None;
    (state, exit, report)
}

/// Launches the command unless it was cancelled first; under the gate, so that a cancel sees
/// either no process or its pid.
fn start(
    shared: &ExecShared,
    spec: &ExecSpec,
    config: &SupervisorConfig,
    reaper: &Reaper,
) -> Start {
    let _gate = shared.gate.lock();
    if *shared.cancel.borrow() {
        return Start::Cancelled;
    }
    let (base_env, confinement) = match spec.identity {
        Identity::Workspace => (&config.base_env, &config.confinement),
        Identity::Agent => (&config.agent_env, &config.agent_confinement),
    };
    // A resize before the spawn (the terminal's size now) is the size it opens with.
    let resized = match (spec.pty, shared.terminal.lock().size) {
        (Some(asked), Some(now)) if asked != now => Some(ExecSpec {
            pty: Some(now),
            ..spec.clone()
        }),
        _ => None,
    };
    match launch(
        resized.as_ref().unwrap_or(spec),
        base_env,
        confinement,
        reaper,
    ) {
        Ok(mut launched) => {
            // Resizable from the moment the exec is seen running.
            shared.terminal.lock().master = launched.pty_master.take();
            let pid = u32::try_from(launched.pid).ok();
            shared.status.send_modify(|status| {
                status.state = ExecState::Running;
                status.pid = pid;
                // A later step keeps the exec's start time.
                status.started_at.get_or_insert_with(SystemTime::now);
            });
            Start::Running(launched)
        }
        Err(message) => Start::Failed(message),
    }
}

/// Waits for the leader's exit, a cancel or the timeout; the latter two terminate the group.
async fn supervise(
    shared: &ExecShared,
    reaper: &Reaper,
    pid: libc::pid_t,
    mut exit: oneshot::Receiver<RawStatus>,
    deadline: Option<Instant>,
    kill_grace: std::time::Duration,
) -> (ExecState, Option<ExitStatus>) {
    let mut cancel = shared.cancel.subscribe();
    let reason = tokio::select! {
        status = &mut exit => return (ExecState::Finished, status.ok().map(ExitStatus::from_wait_status)),
        Ok(_) = cancel.wait_for(|cancelled| *cancelled) => ExecState::Cancelled,
        () = until(deadline) => ExecState::TimedOut,
    };
    let grace = match reason {
        ExecState::Cancelled => shared.cancel_grace.lock().unwrap_or(kill_grace),
        _ => kill_grace,
    };
    (reason, terminate_group(reaper, pid, exit, grace).await)
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Hands chunks to the sink one at a time (see `OutputSink` for the flow-control contract).
async fn read_stream(
    io: &FdIo,
    stream: Stream,
    sink: &dyn OutputSink,
    mut stop: watch::Receiver<bool>,
) {
    let mut buf = Vec::new();
    loop {
        let n = tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => return,
            read = read_lazily(io, &mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        sink.output(stream, &buf[..n]).await;
    }
}

/// Reads a step's report channel to its end (or until the drain stops it, like the output):
/// the first [`MAX_REPORT_BYTES`] are kept, the rest read and counted, so that a step that
/// writes more is never blocked by a full pipe.
async fn read_report(io: &FdIo, mut stop: watch::Receiver<bool>) -> StepReport {
    let mut report = StepReport::default();
    let mut buf = Vec::new();
    loop {
        let n = tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => return report,
            read = read_lazily(io, &mut buf) => match read {
                Ok(0) | Err(_) => return report,
                Ok(n) => n,
            },
        };
        let room = MAX_REPORT_BYTES.saturating_sub(report.data.len());
        report.data.extend_from_slice(&buf[..n.min(room)]);
        report.total += n as u64;
    }
}

/// Reads into `buf`, which gets its [`MAX_CHUNK`] bytes only once there is something to read:
/// an exec that prints nothing (an idle one waiting for input or time) holds no buffer.
async fn read_lazily(io: &FdIo, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.is_empty() {
        io.readable().await?;
        buf.resize(MAX_CHUNK, 0);
    }
    io.read(buf).await
}

async fn finish(
    shared: &ExecShared,
    sink: &dyn OutputSink,
    state: ExecState,
    exit: Option<ExitStatus>,
    error: Option<String>,
) {
    let mut status = shared.status.borrow().clone();
    status.state = state;
    status.exit = exit;
    status.error = error;
    status.ended_at = Some(SystemTime::now());
    sink.finished(&status).await;
    shared.status.send_replace(status);
}

/// Makes sure `wait` never hangs: if the task ends without an outcome (a panicking sink, or the
/// runtime shutting down), the exec is marked `failed`.
struct OutcomeGuard(Arc<ExecShared>);

impl Drop for OutcomeGuard {
    fn drop(&mut self) {
        self.0.status.send_if_modified(|status| {
            if status.state.is_final() {
                return false;
            }
            status.state = ExecState::Failed;
            status.error = Some("the task supervising this exec stopped before its outcome".into());
            status.ended_at = Some(SystemTime::now());
            true
        });
    }
}

#[cfg(test)]
mod tests {
    // Steps and identities: a follow-up step runs in the same exec only after its predecessor
    // exited 0, the outcome is the last step's, an agent-identity step sees none of the
    // workspace's environment, and a step's report channel is its own.

    use std::time::Duration;

    use crate::agent::process::tests::{run_to_end, supervisor, wait, CollectSink};
    use crate::agent::process::{
        agent_base_env, ExecSpec, ExecState, Identity, Supervisor, SupervisorConfig,
        MAX_REPORT_BYTES,
    };

    /// `sh -c TEXT` (not `bash -l`: a login shell's profile is no part of what these tests check).
    fn sh(text: &str) -> ExecSpec {
        ExecSpec::argv(["/bin/sh", "-c", text])
    }

    fn with_env(base: &[(&str, &str)]) -> Supervisor {
        Supervisor::new(SupervisorConfig {
            base_env: base
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            agent_env: agent_base_env(std::path::Path::new("/agent-home")),
            adopt_orphans: false,
            ..SupervisorConfig::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn test_the_next_step_runs_after_a_step_that_exits_0_in_the_same_stream() {
        let spec = sh("echo one").then(sh("echo two; exit 3"));
        let (sink, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(sink.stdout(), "one\ntwo\n");
        assert_eq!(
            (status.state, status.returncode()),
            (ExecState::Finished, Some(3))
        );
    }

    #[tokio::test]
    async fn test_a_failed_step_ends_the_exec_and_the_next_never_runs() {
        let spec = sh("echo one; exit 5")
            .then(sh("echo two"))
            .then(sh("echo three"));
        let (sink, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(sink.stdout(), "one\n");
        assert_eq!(status.returncode(), Some(5));
    }

    #[tokio::test]
    async fn test_a_step_that_cannot_start_fails_the_exec() {
        let spec = sh("true").then(ExecSpec::argv(["/nonexistent/program"]));
        let (_, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(status.state, ExecState::Failed);
    }

    #[tokio::test]
    async fn test_only_the_last_step_reads_stdin() {
        let supervisor = supervisor();
        let sink = CollectSink::new();
        let spec = sh("cat; echo first-done").then(sh("cat"));
        let exec = supervisor.spawn(spec, sink.clone());
        sink.wait_for_stdout("first-done").await;
        exec.write_stdin(b"to the last\n").await.unwrap();
        exec.close_stdin().await.unwrap();
        let status = wait(&exec).await;
        assert_eq!(sink.stdout(), "first-done\nto the last\n");
        assert_eq!(status.returncode(), Some(0));
    }

    #[tokio::test]
    async fn test_the_first_steps_timeout_bounds_every_step() {
        let spec = sh("true")
            .timeout(Duration::from_millis(300))
            .kill_grace(Duration::from_millis(100))
            .then(sh("sleep 30"));
        let (_, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(status.state, ExecState::TimedOut);
    }

    #[tokio::test]
    async fn test_an_agent_step_gets_the_fixed_environment_and_its_own_env_only() {
        let supervisor = with_env(&[("WORKSPACE_VAR", "1"), ("GIT_CONFIG_GLOBAL", "/evil")]);
        let spec = ExecSpec::argv(["/usr/bin/env"])
            .identity(Identity::Agent)
            .env("MINE", "yes")
            .then(sh("echo ---; /usr/bin/env"));
        let (sink, _) = run_to_end(&supervisor, spec).await;
        let out = sink.stdout();
        let (agent, workspace) = out.split_once("---\n").unwrap();
        assert!(
            agent.contains("HOME=/agent-home\n") && agent.contains("MINE=yes\n"),
            "{agent}"
        );
        assert!(!agent.contains("GIT_CONFIG_GLOBAL"), "{agent}");
        assert!(workspace.contains("GIT_CONFIG_GLOBAL=/evil") && !workspace.contains("MINE"));
    }

    #[tokio::test]
    async fn test_a_steps_report_is_what_it_wrote_on_its_channel_and_no_other_step_has_one() {
        let spec = sh("echo before")
            .then(sh("echo out; echo \"fd=$MWC_REPORT_FD\" >&3; echo said >&3").report())
            .then(sh(
                "echo \"after:${MWC_REPORT_FD-unset}\"; { echo forged >&3; } 2>/dev/null || echo closed",
            ));
        let (sink, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(status.returncode(), Some(0));
        assert_eq!(sink.stdout(), "before\nout\nafter:unset\nclosed\n");
        let reports = sink.reports.lock();
        assert_eq!(reports.len(), 1, "one step has a report channel");
        let (report, stdout_then) = &reports[0];
        assert_eq!(report.data, b"fd=3\nsaid\n");
        assert!(!report.truncated());
        // Handed over when its step ended, before the next step ran.
        assert_eq!(stdout_then, "before\nout\n");
    }

    #[tokio::test]
    async fn test_a_report_is_bounded_and_a_long_one_never_blocks_its_step() {
        let written = MAX_REPORT_BYTES + 300_000;
        let spec = sh(&format!(
            "head -c {written} /dev/zero | tr '\\0' r >&3; echo done"
        ))
        .report();
        let (sink, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(
            (status.returncode(), sink.stdout()),
            (Some(0), "done\n".into())
        );
        let reports = sink.reports.lock();
        let report = &reports[0].0;
        assert_eq!(
            (report.data.len(), report.total),
            (MAX_REPORT_BYTES, written as u64)
        );
        assert!(report.truncated() && report.data.iter().all(|&b| b == b'r'));
    }

    #[tokio::test]
    async fn test_a_report_channel_left_open_by_a_background_process_ends_with_the_drain() {
        let supervisor = Supervisor::new(SupervisorConfig {
            adopt_orphans: false,
            drain_timeout: Duration::from_millis(200),
            ..SupervisorConfig::default()
        })
        .unwrap();
        // The background sleep holds the channel (not the output) long after its step ended.
        let spec = sh("echo kept >&3; sleep 5 >/dev/null 2>&1 & exit 0")
            .report()
            .then(sh("echo next"));
        let (sink, status) = run_to_end(&supervisor, spec).await;
        assert_eq!(
            (status.returncode(), sink.stdout()),
            (Some(0), "next\n".into())
        );
        assert_eq!(sink.reports.lock()[0].0.data, b"kept\n");
    }
}
