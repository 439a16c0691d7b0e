//! Execs on a pseudo-terminal: a real tty, VEOF as end of input, resizing.

use super::{supervisor, CollectSink};
use crate::agent::process::{ExecSpec, ExecState, ExitStatus};

#[tokio::test]
async fn test_a_pty_exec_sees_a_terminal() {
    let (sink, status) =
        super::run_to_end(&supervisor(), ExecSpec::argv(["tty"]).pty(24, 80)).await;
    assert_eq!(status.exit, Some(ExitStatus::Code(0)), "{}", sink.stdout());
    assert!(
        sink.stdout().starts_with("/dev/pts/"),
        "{:?}",
        sink.stdout()
    );
    assert!(
        sink.err.lock().is_empty(),
        "a PTY has one stream, reported as stdout"
    );
}

#[tokio::test]
async fn test_the_same_command_without_a_pty_has_no_terminal() {
    let (sink, status) = super::run_to_end(&supervisor(), ExecSpec::argv(["tty"])).await;
    assert_eq!(status.exit, Some(ExitStatus::Code(1)));
    assert_eq!(sink.stdout(), "not a tty\n");
}

#[tokio::test]
async fn test_closing_stdin_on_a_pty_sends_veof_and_ends_cat() {
    let sink = CollectSink::new();
    let exec = supervisor().spawn(ExecSpec::argv(["cat"]).pty(24, 80), sink.clone());
    exec.write_stdin(b"hello\n").await.unwrap();
    exec.close_stdin().await.unwrap();
    let status = super::wait(&exec).await;
    sink.assert_contract(&status);
    assert_eq!(status.state, ExecState::Finished);
    assert_eq!(status.exit, Some(ExitStatus::Code(0)));
    // The terminal echoes the line, then cat prints it.
    assert_eq!(sink.stdout(), "hello\r\nhello\r\n");
}

#[tokio::test]
async fn test_veof_after_a_partial_line_still_ends_cat() {
    let sink = CollectSink::new();
    let exec = supervisor().spawn(ExecSpec::argv(["cat"]).pty(24, 80), sink.clone());
    exec.write_stdin(b"partial").await.unwrap();
    exec.close_stdin().await.unwrap();
    let status = super::wait(&exec).await;
    assert_eq!(status.exit, Some(ExitStatus::Code(0)));
    assert!(
        sink.stdout().ends_with("partialpartial"),
        "{:?}",
        sink.stdout()
    );
}

#[tokio::test]
async fn test_resize_is_seen_by_stty_size() {
    let sink = CollectSink::new();
    let spec =
        ExecSpec::argv(["bash", "-c", "stty size; echo ready; read line; stty size"]).pty(24, 80);
    let exec = supervisor().spawn(spec, sink.clone());
    sink.wait_for_stdout("ready").await;
    exec.resize(40, 100).unwrap();
    exec.write_stdin(b"go\n").await.unwrap();
    let status = super::wait(&exec).await;
    assert_eq!(status.exit, Some(ExitStatus::Code(0)));
    let lines: Vec<String> = sink
        .stdout()
        .lines()
        .map(|line| line.trim().to_string())
        .collect();
    assert_eq!(
        lines.first().map(String::as_str),
        Some("24 80"),
        "{lines:?}"
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some("40 100"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn test_resize_without_a_pty_is_an_error() {
    let exec = supervisor().spawn(ExecSpec::argv(["true"]), CollectSink::new());
    exec.started().await;
    let err = exec.resize(10, 10).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    super::wait(&exec).await;
}
