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

/// How a finished extraction takes its destination's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swap {
    /// Only when nothing has that name (race-free where the kernel has `RENAME_NOREPLACE`).
    NoReplace,
    /// Exchanged atomically with what has that name, which then has the temporary name.
    Exchange,
}

/// `renameat2` within one directory. A kernel or file system without it (EINVAL, ENOSYS)
/// gets the nearest plain `renameat` steps: a check before the rename, or the old entry moved
/// aside first (a reader may then briefly find no entry, never a partial one).
pub fn rename_into(dir: BorrowedFd<'_>, from: &[u8], to: &[u8], how: Swap) -> io::Result<()> {
    let (cfrom, cto) = (cstring(from)?, cstring(to)?);
    let flags = match how {
        Swap::NoReplace => libc::RENAME_NOREPLACE,
        Swap::Exchange => libc::RENAME_EXCHANGE,
    };
    // SAFETY: both names are NUL-terminated and outlive the call; the fd is live.
    let ret = unsafe {
        libc::renameat2(
            dir.as_raw_fd(),
            cfrom.as_ptr(),
            dir.as_raw_fd(),
            cto.as_ptr(),
            flags,
        )
    };
    match check(ret) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => {}
        other => return other,
    }
    use crate::agent::files::sys as fsys;
    match how {
        Swap::NoReplace => {
            match fsys::fstatat(dir, to, libc::AT_SYMLINK_NOFOLLOW) {
                Ok(_) => return Err(io::Error::from_raw_os_error(libc::EEXIST)),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            fsys::renameat(dir, from, to)
        }
        Swap::Exchange => {
            let mut aside = from.to_vec();
            aside.extend_from_slice(b".old");
            fsys::renameat(dir, to, &aside)?;
            fsys::renameat(dir, from, to)?;
            fsys::renameat(dir, &aside, from)
        }
    }
}
