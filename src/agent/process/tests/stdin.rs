//! Stdin is streamed in order without blocking the caller, bounded, and ended on request.

use std::time::Duration;

use super::{run_to_end, supervisor, temp_dir, CollectSink, LIMIT};
use crate::agent::process::{ExecSpec, ExecState, ExitStatus, StdinError};

/// Deterministic bytes that are not all alike (xorshift).
fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_ten_mib_through_cat_and_sha256sum_matches_the_file() {
    let data = noise(10 * 1024 * 1024);
    let file = temp_dir().join("data");
    std::fs::write(&file, &data).unwrap();
    let supervisor = supervisor();
    let (expected, _) = run_to_end(
        &supervisor,
        ExecSpec::argv(["bash", "-c", "sha256sum < \"$F\""]).env("F", &file),
    )
    .await;

    let sink = CollectSink::new();
    let exec = supervisor.spawn(
        ExecSpec::argv(["bash", "-c", "cat | sha256sum"]),
        sink.clone(),
    );
    tokio::time::timeout(LIMIT, exec.write_stdin(&data))
        .await
        .unwrap()
        .unwrap();
    exec.close_stdin().await.unwrap();
    let status = super::wait(&exec).await;
    sink.assert_contract(&status);
    assert_eq!(status.exit, Some(ExitStatus::Code(0)));
    assert_eq!(sink.stdout(), expected.stdout());
    assert_eq!(
        sink.stdout().len(),
        64 + 4,
        "one hash line: {:?}",
        sink.stdout()
    );
}

#[tokio::test]
async fn test_closing_stdin_ends_cat() {
    let sink = CollectSink::new();
    let exec = supervisor().spawn(ExecSpec::argv(["cat"]), sink.clone());
    exec.write_stdin(b"first\n").await.unwrap();
    exec.write_stdin(b"second").await.unwrap();
    exec.close_stdin().await.unwrap();
    let status = super::wait(&exec).await;
    sink.assert_contract(&status);
    assert_eq!(status.state, ExecState::Finished);
    assert_eq!(status.exit, Some(ExitStatus::Code(0)));
    assert_eq!(sink.stdout(), "first\nsecond");
}

#[tokio::test]
async fn test_writing_after_close_reports_closed() {
    let exec = supervisor().spawn(ExecSpec::argv(["cat"]), CollectSink::new());
    exec.close_stdin().await.unwrap();
    assert_eq!(exec.write_stdin(b"late").await, Err(StdinError::Closed));
    assert_eq!(exec.try_write_stdin(b"late"), Err(StdinError::Closed));
    assert_eq!(exec.close_stdin().await, Err(StdinError::Closed));
    super::wait(&exec).await;
}

#[tokio::test]
async fn test_try_write_reports_a_full_queue_instead_of_growing_it() {
    // `sleep` never reads its stdin: the pipe fills, then the bounded queue.
    let exec = supervisor().spawn(
        ExecSpec::argv(["sleep", "600"]).kill_grace(Duration::from_secs(1)),
        CollectSink::new(),
    );
    exec.started().await;
    let chunk = vec![b'x'; 64 * 1024];
    let mut accepted = 0;
    let full = loop {
        match exec.try_write_stdin(&chunk) {
            Ok(()) => accepted += 1,
            Err(err) => break err,
        }
        assert!(accepted < 1000, "the queue never filled");
        tokio::task::yield_now().await;
    };
    assert_eq!(full, StdinError::Full);
    assert!(full.to_string().contains("full"));
    exec.cancel();
    assert_eq!(super::wait(&exec).await.state, ExecState::Cancelled);
}

#[tokio::test]
async fn test_stdin_of_an_exited_process_reports_closed() {
    let exec = supervisor().spawn(ExecSpec::argv(["true"]), CollectSink::new());
    super::wait(&exec).await;
    let mut result = Ok(());
    // The queue may take a few chunks before the writer notices the process is gone.
    for _ in 0..100 {
        result = exec.write_stdin(b"nobody reads this\n").await;
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, Err(StdinError::Closed));
}
