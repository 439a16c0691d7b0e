//! Many execs at once: each gets exactly its own bytes and its own exit code.

use super::{supervisor, CollectSink};
use crate::agent::process::{ExecSpec, ExecState, ExitStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_two_hundred_concurrent_execs_each_get_their_own_output_and_exit_code() {
    let supervisor = supervisor();
    let script =
        r#"for j in $(seq 1 50); do echo "o$N-$j"; echo "e$N-$j" >&2; done; exit $((N % 100))"#;
    let mut running = Vec::new();
    for n in 0..200 {
        let sink = CollectSink::new();
        let spec = ExecSpec::argv(["bash", "-c", script]).env("N", n.to_string());
        running.push((n, supervisor.spawn(spec, sink.clone()), sink));
    }
    for (n, exec, sink) in running {
        let status = super::wait(&exec).await;
        sink.assert_contract(&status);
        assert_eq!(status.state, ExecState::Finished, "exec {n}");
        assert_eq!(status.exit, Some(ExitStatus::Code(n % 100)), "exec {n}");
        let expected = |tag: &str| {
            (1..=50)
                .map(|j| format!("{tag}{n}-{j}\n"))
                .collect::<String>()
        };
        assert_eq!(sink.stdout(), expected("o"), "exec {n}");
        assert_eq!(sink.stderr(), expected("e"), "exec {n}");
    }
}
