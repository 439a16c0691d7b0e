//! The `*at` calls extraction needs beyond the `files` ones: each takes directory fds and one
//! name, never a host path.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::agent::files::sys::cstring;

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `symlinkat(target, dir, name)`: a link named `name` in `dir`; the target is stored as given.
pub fn symlinkat(target: &[u8], dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let (target, name) = (cstring(target)?, cstring(name)?);
    // SAFETY: both strings are NUL-terminated and outlive the call.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
}

/// `linkat(from_dir, from, to_dir, to, 0)`: a hardlink; a symlink `from` is linked itself.
pub fn linkat(
    from_dir: BorrowedFd<'_>,
    from: &[u8],
    to_dir: BorrowedFd<'_>,
    to: &[u8],
) -> io::Result<()> {
    let (from, to) = (cstring(from)?, cstring(to)?);
    // SAFETY: both names are NUL-terminated and outlive the call; the fds are live.
    check(unsafe {
        libc::linkat(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            0,
        )
    })
}
