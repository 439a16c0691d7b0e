//! Steps and identities: a follow-up step runs in the same exec only after its predecessor
//! exited 0, the outcome is the last step's, an agent-identity step sees none of the
//! workspace's environment, and a step's report channel is its own.

use super::*;
use crate::agent::process::{agent_base_env, ExecState, Identity, MAX_REPORT_BYTES};

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
