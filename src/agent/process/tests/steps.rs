//! Steps and identities: a follow-up step runs in the same exec only after its predecessor
//! exited 0, the outcome is the last step's, and an agent-identity step sees none of the
//! workspace's environment.

use super::*;
use crate::agent::process::{agent_base_env, ExecState, Identity};

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
