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
    use super::*;

    #[test]
    fn test_signal_group_refuses_the_broadcast_pids() {
        for pgid in [-5, 0, 1] {
            let err = signal_group(pgid, 0).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }
}
