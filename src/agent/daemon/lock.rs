//! Exclusive lock files (so a second daemon refuses to start) and the socket bound with mode
//! 0600 from the start.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use tokio::net::UnixListener;

/// Held for the life of the daemon; the kernel releases it when the process dies, even by
/// SIGKILL, so a stale file never blocks a restart.
pub(crate) struct Lock {
    _file: File,
}

impl Lock {
    pub(crate) fn acquire(path: &Path, what: &str) -> Result<Self, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("cannot open the lock file {}: {e}", path.display()))?;
        // SAFETY: flock takes the fd of a file we own and an integer flag; it touches no memory.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EWOULDBLOCK) => format!(
                    "another agent daemon is already running on this {what} (lock {} is held)",
                    path.display()
                ),
                _ => format!("cannot lock {}: {err}", path.display()),
            });
        }
        Ok(Self { _file: file })
    }
}

/// Binds the unix socket at `path` with mode 0600. A socket file left by a dead daemon is
/// replaced (the caller holds the socket's lock, so no live daemon uses it); any other file
/// there is an error.
pub(crate) fn bind_private(path: &Path) -> Result<UnixListener, String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove the stale socket {}: {e}", path.display()))?;
        }
        Ok(_) => {
            return Err(format!(
                "{} exists and is not a socket; choose another --socket",
                path.display()
            ))
        }
        Err(_) => {}
    }
    // The socket is created with the umask applied: make it 0600 from the start, so no other
    // user can connect in the moment before the chmod below.
    // SAFETY: umask only swaps the process's file mode mask; it cannot fail or touch memory.
    let previous = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(previous) };
    let listener = bound.map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict {}: {e}", path.display()))?;
    Ok(listener)
}
