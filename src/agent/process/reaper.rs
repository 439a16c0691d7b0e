//! One process-wide reaper: a SIGCHLD-driven thread collects exit statuses with `waitpid` and
//! hands each one to the exec that waits for that pid, so no status is lost or read twice.

use std::collections::HashMap;
use std::io;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{oneshot, watch, Notify};

/// Exit statuses are delivered as raw `waitpid` values.
pub(crate) type RawStatus = libc::c_int;

pub(crate) struct Reaper {
    /// Pids spawned by a supervisor, each with the exec waiting for its status. The lock is held
    /// across fork+exec and across every `waitpid` pass, so a child is always registered before
    /// the reaper can collect it.
    waiters: Mutex<HashMap<libc::pid_t, oneshot::Sender<RawStatus>>>,
    /// Once the process is a subreaper, every child is ours: collect all (orphans included).
    /// Before that, only registered pids are waited for, so children that other code in the same
    /// process spawned (and waits for) keep their statuses.
    reap_all: AtomicBool,
    nudge: Notify,
    /// Bumped after each pass, so terminations can wait for a process group to empty.
    passes: watch::Sender<u64>,
}

static REAPER: OnceLock<Result<Arc<Reaper>, String>> = OnceLock::new();

/// The reaper of this process, started on first use (its own thread and tiny runtime, so it
/// outlives any caller's runtime).
pub(crate) fn reaper() -> io::Result<Arc<Reaper>> {
    REAPER.get_or_init(start).clone().map_err(io::Error::other)
}

fn start() -> Result<Arc<Reaper>, String> {
    let reaper = Arc::new(Reaper {
        waiters: Mutex::new(HashMap::new()),
        reap_all: AtomicBool::new(false),
        nudge: Notify::new(),
        passes: watch::Sender::new(0),
    });
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let worker = Arc::clone(&reaper);
    std::thread::Builder::new()
        .name("exec-reaper".into())
        .spawn(move || worker.run(ready_tx))
        .map_err(|err| format!("cannot start the reaper thread: {err}"))?;
    // Wait until the SIGCHLD handler is installed: a child spawned before that could exit unseen.
    ready_rx
        .recv()
        .map_err(|_| "the reaper thread stopped before it was ready".to_string())??;
    Ok(reaper)
}

impl Reaper {
    fn run(self: Arc<Self>, ready: SyncSender<Result<(), String>>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(err) => {
                let _ = ready.send(Err(format!("cannot start the reaper runtime: {err}")));
                return;
            }
        };
        runtime.block_on(async move {
            let mut sigchld = match signal(SignalKind::child()) {
                Ok(stream) => stream,
                Err(err) => {
                    let _ = ready.send(Err(format!("cannot watch SIGCHLD: {err}")));
                    return;
                }
            };
            let _ = ready.send(Ok(()));
            loop {
                self.pass();
                tokio::select! {
                    received = sigchld.recv() => if received.is_none() { return },
                    () = self.nudge.notified() => {}
                }
            }
        });
    }

    /// Spawns a child with `spawn` and registers it before any pass can collect it.
    pub(crate) fn spawn(
        &self,
        spawn: impl FnOnce() -> io::Result<Child>,
    ) -> io::Result<(Child, oneshot::Receiver<RawStatus>)> {
        let mut waiters = self.waiters.lock();
        let child = spawn()?;
        let pid = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
        let (tx, rx) = oneshot::channel();
        waiters.insert(pid, tx);
        Ok((child, rx))
    }

    /// Makes this process a child subreaper: orphaned descendants are re-parented to it (not to
    /// init) and reaped here. From then on every child of the process is collected, so other code
    /// in the same process must not spawn children and wait for them itself.
    pub(crate) fn adopt_orphans(&self) -> io::Result<()> {
        // SAFETY: PR_SET_CHILD_SUBREAPER reads one integer argument and touches no memory of ours.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        self.reap_all.store(true, Ordering::Release);
        self.nudge.notify_one();
        Ok(())
    }

    /// A receiver that changes after every reaping pass.
    pub(crate) fn passes(&self) -> watch::Receiver<u64> {
        self.passes.subscribe()
    }

    fn pass(&self) {
        let mut waiters = self.waiters.lock();
        if self.reap_all.load(Ordering::Acquire) {
            while let Waited::Exited(pid, status) = wait_nohang(-1) {
                // Unregistered pids are orphans: reaping them is all they need.
                if let Some(tx) = waiters.remove(&pid) {
                    let _ = tx.send(status);
                }
            }
        } else {
            let pids: Vec<libc::pid_t> = waiters.keys().copied().collect();
            for pid in pids {
                match wait_nohang(pid) {
                    Waited::Exited(_, status) => {
                        if let Some(tx) = waiters.remove(&pid) {
                            let _ = tx.send(status);
                        }
                    }
                    // Someone else collected it: drop the sender so the exec learns it is gone.
                    Waited::Gone => {
                        waiters.remove(&pid);
                    }
                    Waited::Running => {}
                }
            }
        }
        drop(waiters);
        self.passes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

enum Waited {
    Exited(libc::pid_t, RawStatus),
    Running,
    /// No such child (ECHILD) or another error.
    Gone,
}

fn wait_nohang(pid: libc::pid_t) -> Waited {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes only the status integer we own; WNOHANG makes it non-blocking.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc > 0 {
            return Waited::Exited(rc, status);
        }
        if rc == 0 {
            return Waited::Running;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return Waited::Gone;
        }
    }
}

#[cfg(test)]
mod tests {
    // With the subreaper on, orphaned grandchildren are adopted and reaped: no zombies remain.

    use std::time::{Duration, Instant};

    use crate::agent::process::tests::{
        in_isolation, processes, run_isolated, run_to_end, test_path, LIMIT,
    };
    use crate::agent::process::{ExecSpec, ExitStatus, Supervisor, SupervisorConfig};

    #[test]
    fn test_orphaned_grandchildren_are_adopted_and_reaped() {
        run_isolated(&test_path(
            module_path!(),
            "isolated_orphaned_grandchildren_are_adopted_and_reaped",
        ));
    }

    #[tokio::test]
    #[ignore = "runs in its own process, started by test_orphaned_grandchildren_are_adopted_and_reaped"]
    async fn isolated_orphaned_grandchildren_are_adopted_and_reaped() {
        if !in_isolation(&test_path(
            module_path!(),
            "isolated_orphaned_grandchildren_are_adopted_and_reaped",
        )) {
            return;
        }
        let supervisor = Supervisor::new(SupervisorConfig::default()).unwrap();
        // The sleep outlives bash, which exits at once: it becomes an orphan.
        let spec = ExecSpec::argv(["bash", "-c", "sleep 3 >/dev/null 2>&1 & echo $!"]);
        let (sink, status) = run_to_end(&supervisor, spec).await;
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        let orphan: i32 = sink.stdout().trim().parse().unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        if let Some(entry) = processes().into_iter().find(|p| p.0 == orphan) {
            assert_eq!(
                entry.2, me,
                "the orphan must be re-parented to the supervisor"
            );
        }
        let deadline = Instant::now() + LIMIT;
        while processes().iter().any(|p| p.0 == orphan) {
            assert!(
                Instant::now() < deadline,
                "the orphan was never reaped: {:?}",
                processes().iter().find(|p| p.0 == orphan)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let zombies: Vec<_> = processes()
            .into_iter()
            .filter(|p| p.2 == me && p.1 == 'Z')
            .collect();
        assert_eq!(zombies, vec![], "zombie children left under the supervisor");
    }
}
