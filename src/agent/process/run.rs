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
        pty_master,
        report,
    } = launched;
    let is_pty = pty_master.is_some();
    if let Some(master) = pty_master {
        let _ = shared.pty_master.set(master);
    }
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
    match launch(spec, base_env, confinement, reaper) {
        Ok(launched) => {
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
