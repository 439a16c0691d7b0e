//! Where output goes: the caller's sink, awaited by the readers so a slow sink slows the process
//! down through its pipe instead of growing the supervisor's memory.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::status::ExecStatus;

/// The largest chunk handed to a sink in one call.
pub const MAX_CHUNK: usize = 64 * 1024;

/// Which output stream a chunk came from. A PTY has one stream, reported as `Stdout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

pub type SinkFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a step with a report channel wrote there (see `ExecSpec::report`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Its first `MAX_REPORT_BYTES`.
    pub data: Vec<u8>,
    /// How many bytes it wrote in all.
    pub total: u64,
}

impl StepReport {
    /// It wrote more than was kept.
    pub fn truncated(&self) -> bool {
        self.total > self.data.len() as u64
    }
}

/// Receives an exec's output.
///
/// Flow-control contract: each stream has one reader that reads at most [`MAX_CHUNK`] bytes,
/// awaits `output`, and only then reads again. The supervisor therefore holds at most one chunk
/// per stream; a sink that is slow (or waits for room downstream) leaves the data in the kernel
/// pipe, whose fill blocks the process's writes. Calls for one stream are in order and never
/// overlap; stdout and stderr calls may run concurrently. `finished` is called exactly once,
/// after every `output` call of the exec has returned, and before `Exec::wait` resolves.
/// `report` is called once for each step that has a report channel, after that step's output
/// and before the next step starts (or `finished`).
pub trait OutputSink: Send + Sync + 'static {
    fn output<'a>(&'a self, stream: Stream, chunk: &'a [u8]) -> SinkFuture<'a>;

    fn report(&self, _report: StepReport) -> SinkFuture<'_> {
        Box::pin(async {})
    }

    fn finished<'a>(&'a self, _status: &'a ExecStatus) -> SinkFuture<'a> {
        Box::pin(async {})
    }
}

/// What a [`ChannelSink`] forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkEvent {
    Output { stream: Stream, data: Vec<u8> },
    Finished(ExecStatus),
}

/// A sink that forwards into a bounded channel: a full channel back-pressures the process.
/// When the receiver is dropped, further output is discarded and the process runs on.
pub struct ChannelSink {
    tx: mpsc::Sender<SinkEvent>,
}

impl ChannelSink {
    pub fn new(capacity: usize) -> (Arc<Self>, mpsc::Receiver<SinkEvent>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Arc::new(Self { tx }), rx)
    }
}

impl OutputSink for ChannelSink {
    fn output<'a>(&'a self, stream: Stream, chunk: &'a [u8]) -> SinkFuture<'a> {
        Box::pin(async move {
            let event = SinkEvent::Output {
                stream,
                data: chunk.to_vec(),
            };
            // A dropped receiver means nobody wants the output any more; the exec still runs.
            let _ = self.tx.send(event).await;
        })
    }

    fn finished<'a>(&'a self, status: &'a ExecStatus) -> SinkFuture<'a> {
        Box::pin(async move {
            let _ = self.tx.send(SinkEvent::Finished(status.clone())).await;
        })
    }
}

#[cfg(test)]
mod tests {
    // Output reaches the sink complete, in order per stream, bounded in chunk size, before the end.

    use std::sync::Arc;
    use std::time::Duration;

    use crate::agent::process::group::signal_group;
    use crate::agent::process::tests::{run_to_end, supervisor, temp_dir, wait, CollectSink};
    use crate::agent::process::{
        ExecSpec, ExecState, ExitStatus, OutputSink, SinkFuture, Stream, Supervisor,
        SupervisorConfig,
    };

    #[tokio::test]
    async fn test_interleaved_stdout_and_stderr_arrive_complete_and_in_order() {
        let script = r#"for i in $(seq 1 3000); do echo "out $i"; echo "err $i" >&2; done"#;
        let (sink, status) =
            run_to_end(&supervisor(), ExecSpec::argv(["bash", "-c", script])).await;
        let expected = |tag: &str| {
            (1..=3000)
                .map(|i| format!("{tag} {i}\n"))
                .collect::<String>()
        };
        assert_eq!(status.state, ExecState::Finished);
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        assert_eq!(sink.stdout(), expected("out"));
        assert_eq!(sink.stderr(), expected("err"));
    }

    #[tokio::test]
    async fn test_shell_text_runs_in_bash_with_env_and_workdir() {
        let dir = temp_dir();
        let spec = ExecSpec::shell("echo \"$GREETING\"; pwd; exit 7")
            .env("GREETING", "hello there")
            .workdir(&dir);
        let (sink, status) = run_to_end(&supervisor(), spec).await;
        let real_dir = dir.canonicalize().unwrap();
        assert_eq!(
            sink.stdout(),
            format!("hello there\n{}\n", real_dir.display())
        );
        assert_eq!(status.state, ExecState::Finished);
        assert_eq!(status.returncode(), Some(7));
        let (started, ended) = (status.started_at.unwrap(), status.ended_at.unwrap());
        assert!(started <= ended);
        assert!(status.pid.is_some());
    }

    #[tokio::test]
    async fn test_spec_env_overrides_the_base_env() {
        let config = SupervisorConfig {
            base_env: vec![("A".into(), "base".into()), ("B".into(), "base".into())],
            adopt_orphans: false,
            ..SupervisorConfig::default()
        };
        let supervisor = Supervisor::new(config).unwrap();
        let spec = ExecSpec::argv(["/usr/bin/env"]).env("B", "spec");
        let (sink, _) = run_to_end(&supervisor, spec).await;
        assert_eq!(sink.stdout(), "A=base\nB=spec\n");
    }

    /// Takes its time over each chunk: the process must wait for it, and nothing may be lost.
    struct SlowSink(Arc<CollectSink>);

    impl OutputSink for SlowSink {
        fn output<'a>(&'a self, stream: Stream, chunk: &'a [u8]) -> SinkFuture<'a> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                self.0.output(stream, chunk).await;
            })
        }

        fn finished<'a>(&'a self, status: &'a crate::agent::process::ExecStatus) -> SinkFuture<'a> {
            self.0.finished(status)
        }
    }

    #[tokio::test]
    async fn test_a_slow_sink_back_pressures_the_process_and_loses_nothing() {
        let inner = CollectSink::new();
        // 4 MiB written as fast as head can: far more than a pipe holds.
        let spec = ExecSpec::argv(["bash", "-c", "head -c 4194304 /dev/zero | tr '\\0' x"]);
        let exec = supervisor().spawn(spec, Arc::new(SlowSink(inner.clone())));
        let status = wait(&exec).await;
        inner.assert_contract(&status);
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        let out = inner.out.lock();
        assert_eq!(out.len(), 4 * 1024 * 1024);
        assert!(out.iter().all(|&b| b == b'x'));
    }

    #[tokio::test]
    async fn test_a_background_process_holding_the_pipes_delays_the_outcome_only_by_the_drain_time()
    {
        let config = SupervisorConfig {
            adopt_orphans: false,
            drain_timeout: Duration::from_millis(300),
            ..SupervisorConfig::default()
        };
        let supervisor = Supervisor::new(config).unwrap();
        let (sink, status) = run_to_end(
            &supervisor,
            ExecSpec::argv(["bash", "-c", "sleep 600 & echo done"]),
        )
        .await;
        assert_eq!(status.state, ExecState::Finished);
        assert_eq!(sink.stdout(), "done\n");
        let pgid = i32::try_from(status.pid.unwrap()).unwrap();
        // The background sleep is still in the exec's group; clean it up.
        assert!(
            signal_group(pgid, libc::SIGKILL).unwrap(),
            "the background process should still run"
        );
    }

    #[tokio::test]
    async fn test_a_command_of_another_user_reopens_its_own_standard_streams() {
        // The agent is root where commands run as a user of their own (Modal): the pipes it makes
        // are that user's, so `> /dev/stderr` (an open of /proc/self/fd/2) works as in a terminal.
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let user = crate::agent::process::CommandUser {
            uid: 4242,
            gid: 4242,
        };
        let config = SupervisorConfig {
            confinement: crate::agent::process::Confinement {
                user: Some(user),
                limits: Vec::new(),
            },
            adopt_orphans: false,
            ..SupervisorConfig::default()
        };
        let supervisor = Supervisor::new(config).unwrap();
        let script =
            "id -u; echo to-err > /dev/stderr; echo to-out > /dev/stdout; true < /dev/stdin";
        let spec = ExecSpec::argv(["sh", "-c", script]).workdir("/");
        let (sink, status) = run_to_end(&supervisor, spec).await;
        assert_eq!(status.returncode(), Some(0), "{}", sink.stderr());
        assert_eq!(sink.stdout(), "4242\nto-out\n");
        assert_eq!(sink.stderr(), "to-err\n");
    }
}
