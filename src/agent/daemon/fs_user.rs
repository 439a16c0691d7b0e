//! File operations on the workspace run as the commands' user, not as the agent: a file the
//! agent writes belongs to the workspace's user (commands can change it again), and the agent
//! reaches only what that user may reach.
//!
//! The filesystem uid (`setfsuid(2)`) is per thread on Linux, and the guard restores it before
//! the blocking thread takes other work (exec logs, records), which stay the agent's.

use crate::agent::process::CommandUser;

/// While alive, this thread's file system accesses are `user`'s.
pub(crate) struct AsUser {
    previous: Option<(u32, u32)>,
}

impl AsUser {
    pub(crate) fn enter(user: Option<CommandUser>) -> Self {
        let previous = user.map(|user| {
            // SAFETY: setfsgid/setfsuid change a credential of the calling thread only and
            // touch no memory of ours; they cannot fail in a way that breaks memory safety (an
            // unpermitted change leaves the ids as they were, and the accesses then fail).
            unsafe {
                let gid = libc::setfsgid(user.gid) as u32;
                let uid = libc::setfsuid(user.uid) as u32;
                (uid, gid)
            }
        });
        Self { previous }
    }
}

impl Drop for AsUser {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.previous {
            // SAFETY: as in `enter`: thread credentials only.
            unsafe {
                libc::setfsuid(uid);
                libc::setfsgid(gid);
            }
        }
    }
}
