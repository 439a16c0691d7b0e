//! Fixtures for the tests of supervised execs beside each file of this module (real processes):
//! a sink that records everything and checks its contract, a supervisor that adopts no orphans,
//! and a fresh process of this test binary for tests that need the process-wide subreaper.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{
    ExecSpec, ExecStatus, OutputSink, SinkFuture, StepReport, Stream, Supervisor, SupervisorConfig,
    MAX_CHUNK,
};

/// Far above anything these tests need, even on a loaded machine: only a hang trips it.
pub(super) const LIMIT: Duration = Duration::from_secs(60);

/// Records everything, and whether any output came after `finished`.
#[derive(Default)]
pub(super) struct CollectSink {
    pub(super) out: Mutex<Vec<u8>>,
    pub(super) err: Mutex<Vec<u8>>,
    pub(super) finished: Mutex<Option<ExecStatus>>,
    /// Each report, with the stdout there was when it came.
    pub(super) reports: Mutex<Vec<(StepReport, String)>>,
    output_after_finish: AtomicBool,
    oversized_chunk: AtomicBool,
    changed: Notify,
}

impl OutputSink for CollectSink {
    fn output<'a>(&'a self, stream: Stream, chunk: &'a [u8]) -> SinkFuture<'a> {
        Box::pin(async move {
            if self.finished.lock().is_some() {
                self.output_after_finish.store(true, Ordering::SeqCst);
            }
            if chunk.len() > MAX_CHUNK || chunk.is_empty() {
                self.oversized_chunk.store(true, Ordering::SeqCst);
            }
            match stream {
                Stream::Stdout => self.out.lock().extend_from_slice(chunk),
                Stream::Stderr => self.err.lock().extend_from_slice(chunk),
            }
            self.changed.notify_waiters();
        })
    }

    fn report(&self, report: StepReport) -> SinkFuture<'_> {
        Box::pin(async move {
            let stdout = self.stdout();
            self.reports.lock().push((report, stdout));
        })
    }

    fn finished<'a>(&'a self, status: &'a ExecStatus) -> SinkFuture<'a> {
        Box::pin(async move {
            *self.finished.lock() = Some(status.clone());
        })
    }
}

impl CollectSink {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(super) fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock()).into_owned()
    }

    pub(super) fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock()).into_owned()
    }

    /// Waits (woken by each chunk) until stdout contains `needle`; panics after `LIMIT`.
    pub(super) async fn wait_for_stdout(&self, needle: &str) {
        let wait = async {
            loop {
                let notified = self.changed.notified();
                if self.stdout().contains(needle) {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(LIMIT, wait).await.is_err() {
            panic!("stdout never contained {needle:?}; got {:?}", self.stdout());
        }
    }

    /// The sink contract every test relies on: finished once, after all output, chunks bounded.
    pub(super) fn assert_contract(&self, status: &ExecStatus) {
        assert_eq!(
            self.finished.lock().as_ref(),
            Some(status),
            "finished() must see the final status"
        );
        assert!(
            !self.output_after_finish.load(Ordering::SeqCst),
            "output arrived after finished()"
        );
        assert!(
            !self.oversized_chunk.load(Ordering::SeqCst),
            "a chunk was empty or above MAX_CHUNK"
        );
    }
}

/// A supervisor that leaves other children of the test process alone (no subreaper).
pub(super) fn supervisor() -> Supervisor {
    Supervisor::new(SupervisorConfig {
        adopt_orphans: false,
        ..SupervisorConfig::default()
    })
    .unwrap()
}

/// Runs `spec` to its end and checks the sink contract.
pub(super) async fn run_to_end(
    supervisor: &Supervisor,
    spec: ExecSpec,
) -> (Arc<CollectSink>, ExecStatus) {
    let sink = CollectSink::new();
    let exec = supervisor.spawn(spec, sink.clone());
    let status = wait(&exec).await;
    sink.assert_contract(&status);
    (sink, status)
}

pub(super) async fn wait(exec: &super::Exec) -> ExecStatus {
    tokio::time::timeout(LIMIT, exec.wait())
        .await
        .expect("the exec never ended")
}

/// A fresh empty directory under the system's temporary directory.
pub(super) fn temp_dir() -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("mwc-process-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// (pid, state, ppid, pgrp) of every process, from /proc.
pub(super) fn processes() -> Vec<(i32, char, i32, i32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: fields start after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = fields[0].chars().next().unwrap_or('?');
        found.push((
            pid,
            state,
            fields[1].parse().unwrap_or(0),
            fields[2].parse().unwrap_or(0),
        ));
    }
    found
}

pub(super) fn group_members(pgid: i32) -> Vec<(i32, char, i32, i32)> {
    processes().into_iter().filter(|p| p.3 == pgid).collect()
}

const ISOLATED: &str = "MWC_PROCESS_ISOLATED_TEST";

/// True only inside the fresh process started by `run_isolated(name)`.
pub(super) fn in_isolation(name: &str) -> bool {
    std::env::var(ISOLATED).as_deref() == Ok(name)
}

/// Runs the `#[ignore]`d test `name` in a fresh process of this test binary, for tests that turn
/// the whole process into a subreaper (which would collect other tests' children).
pub(super) fn run_isolated(name: &str) {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(exe)
        .args([
            name,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ISOLATED, name)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{name} failed:\n{stdout}\n{stderr}"
    );
}

/// The full test path of `name` in module `module` (from `module_path!()`), crate name removed.
pub(super) fn test_path(module: &str, name: &str) -> String {
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    format!("{module}::{name}")
}
