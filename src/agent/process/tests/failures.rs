//! Execs that cannot start end `failed` with the operating system's reason and never run.

use super::{run_to_end, supervisor, temp_dir};
use crate::agent::process::{ExecSpec, ExecState};

#[tokio::test]
async fn test_a_missing_binary_fails_with_the_os_error() {
    let (sink, status) = run_to_end(
        &supervisor(),
        ExecSpec::argv(["no-such-program-for-this-test"]),
    )
    .await;
    assert_eq!(status.state, ExecState::Failed);
    let error = status.error.unwrap();
    assert!(error.contains("no-such-program-for-this-test"), "{error}");
    assert!(error.contains("No such file or directory"), "{error}");
    assert_eq!(
        (status.pid, status.exit, status.started_at),
        (None, None, None)
    );
    assert!(status.ended_at.is_some());
    assert!(sink.out.lock().is_empty());
}

#[tokio::test]
async fn test_a_missing_workdir_fails_with_the_os_error() {
    let missing = temp_dir().join("not-here");
    let (_, status) = run_to_end(&supervisor(), ExecSpec::argv(["true"]).workdir(&missing)).await;
    assert_eq!(status.state, ExecState::Failed);
    let error = status.error.unwrap();
    assert!(
        error.contains("not-here") && error.contains("No such file or directory"),
        "{error}"
    );
    assert_eq!(status.pid, None);
}

#[tokio::test]
async fn test_a_workdir_that_is_a_file_fails() {
    let file = temp_dir().join("file");
    std::fs::write(&file, b"x").unwrap();
    let (_, status) = run_to_end(&supervisor(), ExecSpec::argv(["true"]).workdir(&file)).await;
    assert_eq!(status.state, ExecState::Failed);
    assert!(status.error.unwrap().contains("Not a directory"));
}

#[tokio::test]
async fn test_an_empty_argv_fails_without_running_anything() {
    let (_, status) = run_to_end(&supervisor(), ExecSpec::argv(Vec::<String>::new())).await;
    assert_eq!(status.state, ExecState::Failed);
    assert!(status.error.unwrap().contains("empty"));
}
