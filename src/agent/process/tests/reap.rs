//! With the subreaper on, orphaned grandchildren are adopted and reaped: no zombies remain.

use std::time::{Duration, Instant};

use super::{in_isolation, processes, run_isolated, test_path, LIMIT};
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
    let (sink, status) = super::run_to_end(&supervisor, spec).await;
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
