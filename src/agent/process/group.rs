//! Signals to a whole process group, and the SIGTERM → grace → SIGKILL escalation that ends a
//! cancelled or timed-out exec together with every process it started in its group.

use std::io;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::{sleep_until, Instant};

use super::reaper::{RawStatus, Reaper};
use super::status::ExitStatus;

/// After SIGKILL, how long to wait for the group's members to be reaped before giving up
/// (a process in uninterruptible sleep cannot die sooner; without the subreaper, orphans are
/// reaped by init and we are not told).
const GROUP_SETTLE: Duration = Duration::from_secs(2);

/// Sends `signal` to every process of group `pgid`. `Ok(false)` when the group no longer exists.
pub(crate) fn signal_group(pgid: libc::pid_t, signal: libc::c_int) -> io::Result<bool> {
    // kill(-1) would signal every process we may signal, and -0 our own group: never allow them.
    if pgid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    // SAFETY: kill takes plain integers; -pgid with pgid > 1 addresses exactly that group.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ESRCH) => Ok(false),
        // The group exists, even if some member is not ours to signal.
        Some(libc::EPERM) => Ok(true),
        _ => Err(err),
    }
}

/// Whether any process (zombies included) is still in group `pgid`.
pub(crate) fn group_alive(pgid: libc::pid_t) -> bool {
    signal_group(pgid, 0).unwrap_or(false)
}

/// SIGTERM to the group; after `grace`, SIGKILL to whatever of the group is left (even when the
/// leader is already gone); then waits for the leader's status and for the group to empty.
pub(crate) async fn terminate_group(
    reaper: &Reaper,
    pgid: libc::pid_t,
    mut leader: oneshot::Receiver<RawStatus>,
    grace: Duration,
) -> Option<ExitStatus> {
    let mut passes = reaper.passes();
    let _ = signal_group(pgid, libc::SIGTERM);
    let grace_end = Instant::now() + grace;
    let early = tokio::select! {
        status = &mut leader => Some(status.ok()),
        () = sleep_until(grace_end) => None,
    };
    if !wait_group_gone(pgid, &mut passes, grace_end).await {
        let _ = signal_group(pgid, libc::SIGKILL);
    }
    let status = match early {
        Some(status) => status,
        None => leader.await.ok(),
    };
    // A member may have forked while SIGKILL was on its way: kill the group once more if so.
    if !wait_group_gone(pgid, &mut passes, Instant::now() + GROUP_SETTLE).await {
        let _ = signal_group(pgid, libc::SIGKILL);
        wait_group_gone(pgid, &mut passes, Instant::now() + GROUP_SETTLE).await;
    }
    status.map(ExitStatus::from_wait_status)
}

/// Waits until group `pgid` is empty or `until`; woken by reaping passes, not by a timer loop.
async fn wait_group_gone(
    pgid: libc::pid_t,
    passes: &mut watch::Receiver<u64>,
    until: Instant,
) -> bool {
    loop {
        if !group_alive(pgid) {
            return true;
        }
        tokio::select! {
            changed = passes.changed() => if changed.is_err() {
                sleep_until(until).await;
                return !group_alive(pgid);
            },
            () = sleep_until(until) => return !group_alive(pgid),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::agent::process::tests::{
        group_members, in_isolation, run_isolated, run_to_end, supervisor, temp_dir, test_path,
        wait, CollectSink,
    };
    use crate::agent::process::{ExecSpec, ExecState, ExitStatus, Supervisor, SupervisorConfig};

    #[test]
    fn test_signal_group_refuses_the_broadcast_pids() {
        for pgid in [-5, 0, 1] {
            let err = signal_group(pgid, 0).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }

    // Cancellation and timeouts: the whole group is ended, TERM first, KILL after the grace period.

    #[test]
    fn test_cancel_kills_the_whole_process_group() {
        run_isolated(&test_path(
            module_path!(),
            "isolated_cancel_kills_the_whole_process_group",
        ));
    }

    #[tokio::test]
    #[ignore = "runs in its own process, started by test_cancel_kills_the_whole_process_group"]
    async fn isolated_cancel_kills_the_whole_process_group() {
        if !in_isolation(&test_path(
            module_path!(),
            "isolated_cancel_kills_the_whole_process_group",
        )) {
            return;
        }
        let supervisor = Supervisor::new(SupervisorConfig::default()).unwrap();
        let sink = CollectSink::new();
        let spec = ExecSpec::argv(["bash", "-c", "sleep 1000 & sleep 1000 & echo ready; wait"]);
        let exec = supervisor.spawn(spec, sink.clone());
        sink.wait_for_stdout("ready").await;
        let pgid = i32::try_from(exec.status().pid.unwrap()).unwrap();
        assert!(
            group_members(pgid).len() >= 3,
            "bash and two sleeps: {:?}",
            group_members(pgid)
        );
        exec.cancel();
        let status = wait(&exec).await;
        sink.assert_contract(&status);
        assert_eq!(status.state, ExecState::Cancelled);
        assert_eq!(status.exit, Some(ExitStatus::Signal(libc::SIGTERM)));
        assert_eq!(
            group_members(pgid),
            vec![],
            "no process of the group may remain, not even a zombie"
        );
    }

    #[tokio::test]
    async fn test_a_command_that_ignores_term_is_killed_after_the_grace_period() {
        let grace = Duration::from_millis(500);
        let sink = CollectSink::new();
        let spec = ExecSpec::argv(["bash", "-c", "trap '' TERM; echo ready; sleep 1000"])
            .kill_grace(grace);
        let exec = supervisor().spawn(spec, sink.clone());
        sink.wait_for_stdout("ready").await;
        let cancelled_at = Instant::now();
        exec.cancel();
        let status = wait(&exec).await;
        assert!(
            cancelled_at.elapsed() >= grace,
            "SIGKILL came before the grace period ended"
        );
        assert_eq!(status.state, ExecState::Cancelled);
        assert_eq!(status.exit, Some(ExitStatus::Signal(libc::SIGKILL)));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn test_cancel_before_start_never_runs_the_command() {
        let marker = temp_dir().join("ran");
        let sink = CollectSink::new();
        let exec = supervisor().spawn(
            ExecSpec::argv(["touch".into(), marker.clone().into_os_string()]),
            sink.clone(),
        );
        // On a current-thread runtime the exec's task has not run yet: this cancel precedes the spawn.
        exec.cancel();
        let status = wait(&exec).await;
        sink.assert_contract(&status);
        assert_eq!(status.state, ExecState::Cancelled);
        assert_eq!(
            (status.pid, status.exit, status.started_at),
            (None, None, None)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!marker.exists(), "the cancelled command ran");
    }

    #[tokio::test]
    async fn test_a_timeout_ends_the_exec_as_timed_out() {
        let spec = ExecSpec::argv(["sleep", "1000"])
            .timeout(Duration::from_millis(200))
            .kill_grace(Duration::from_secs(5));
        let (_, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(status.state, ExecState::TimedOut);
        assert_eq!(status.exit, Some(ExitStatus::Signal(libc::SIGTERM)));
    }

    #[tokio::test]
    async fn test_cancel_after_the_end_changes_nothing() {
        let exec = supervisor().spawn(ExecSpec::argv(["true"]), CollectSink::new());
        let before = wait(&exec).await;
        exec.cancel();
        assert_eq!(exec.status(), before);
        assert_eq!(before.state, ExecState::Finished);
    }
}
