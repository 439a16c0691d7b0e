//! Cancellation and timeouts: the whole group is ended, TERM first, KILL after the grace period.

use std::time::{Duration, Instant};

use super::{
    group_members, in_isolation, run_isolated, supervisor, temp_dir, test_path, CollectSink,
};
use crate::agent::process::{ExecSpec, ExecState, ExitStatus, Supervisor, SupervisorConfig};

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
    let status = super::wait(&exec).await;
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
    let spec =
        ExecSpec::argv(["bash", "-c", "trap '' TERM; echo ready; sleep 1000"]).kill_grace(grace);
    let exec = supervisor().spawn(spec, sink.clone());
    sink.wait_for_stdout("ready").await;
    let cancelled_at = Instant::now();
    exec.cancel();
    let status = super::wait(&exec).await;
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
    let status = super::wait(&exec).await;
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
    let (_, status) = super::run_to_end(&supervisor(), spec).await;
    assert_eq!(status.state, ExecState::TimedOut);
    assert_eq!(status.exit, Some(ExitStatus::Signal(libc::SIGTERM)));
}

#[tokio::test]
async fn test_cancel_after_the_end_changes_nothing() {
    let exec = supervisor().spawn(ExecSpec::argv(["true"]), CollectSink::new());
    let before = super::wait(&exec).await;
    exec.cancel();
    assert_eq!(exec.status(), before);
    assert_eq!(before.state, ExecState::Finished);
}
