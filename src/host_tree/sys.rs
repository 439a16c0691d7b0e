//! The system calls the host's tree operations add to the agent's `*at` wrappers: each takes an
//! fd (or a directory fd and one name) and never resolves a path below it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub use crate::agent::archive::sys::symlinkat;
pub use crate::agent::files::sys::{
    cstring, fstat, fstatat, is_dir, is_regular, is_symlink, mkdirat, openat, openat2,
    read_dir_names, readlinkat, unlinkat, RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS,
};

/// `RESOLVE_NO_SYMLINKS` from linux/openat2.h: no symlink anywhere on the path.
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
/// `RESOLVE_NO_XDEV` from linux/openat2.h: no step may cross a mount.
pub const RESOLVE_NO_XDEV: u64 = 0x01;

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Opens the root a caller named by a host path (the caller's own directory, which no
/// workspace can rename): a directory, and never through a symlink in its last component.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by a successful open and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: a plain syscall on a live fd.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })
}

pub fn fchmod(fd: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: a plain syscall on a live fd.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode) })
}

/// `fchownat(dir, name, AT_SYMLINK_NOFOLLOW)`: the entry itself (a symlink stays one).
pub fn lchownat(dir: BorrowedFd<'_>, name: &[u8], uid: u32, gid: u32) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: `name` is NUL-terminated and outlives the call.
    check(unsafe {
        libc::fchownat(
            dir.as_raw_fd(),
            name.as_ptr(),
            uid,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

fn times(st: &libc::stat) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec,
        },
        libc::timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec,
        },
    ]
}

/// Gives the fd's file the access and modification times of `st`.
pub fn futimens(fd: BorrowedFd<'_>, st: &libc::stat) -> io::Result<()> {
    let ts = times(st);
    // SAFETY: `ts` is two initialised timespecs, as futimens reads.
    check(unsafe { libc::futimens(fd.as_raw_fd(), ts.as_ptr()) })
}

/// Gives the entry itself (a symlink stays one) the times of `st`.
pub fn lutimensat(dir: BorrowedFd<'_>, name: &[u8], st: &libc::stat) -> io::Result<()> {
    let name = cstring(name)?;
    let ts = times(st);
    // SAFETY: `name` is NUL-terminated and `ts` is two initialised timespecs.
    check(unsafe {
        libc::utimensat(
            dir.as_raw_fd(),
            name.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

pub fn ftruncate(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: a plain syscall on a live fd.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })
}

/// `lseek(fd, offset, whence)`; `None` for ENXIO (no data, or no hole, past `offset`).
pub fn seek(fd: BorrowedFd<'_>, offset: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a plain syscall on a live fd.
    let ret = unsafe { libc::lseek(fd.as_raw_fd(), off, whence) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::ENXIO) {
            Ok(None)
        } else {
            Err(err)
        };
    }
    Ok(Some(ret as u64))
}

/// `copy_file_range` of up to `len` bytes at the same offset in both files (the kernel may
/// share the blocks: a reflink on btrfs and XFS). Returns how many it copied (0: end of file).
pub fn copy_range(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut off_in =
        libc::loff_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut off_out = off_in;
    // SAFETY: both offsets are live, writable loff_t values; the fds are live.
    let ret = unsafe {
        libc::copy_file_range(
            from.as_raw_fd(),
            &mut off_in,
            to.as_raw_fd(),
            &mut off_out,
            len,
            0,
        )
    };
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

/// Bytes an unprivileged writer may still put on the file system that holds `fd`.
pub fn free_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable statvfs the kernel fills in.
    check(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) })?;
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Makes the directory an `O_PATH` fd names searchable and writable by its owner (a command may
/// leave its directories mode 000) through the fd's own `/proc/self/fd` entry, so the change
/// lands on that inode whatever its name now points at.
pub fn chmod_owner_rwx(fd: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // SAFETY: `path` is NUL-terminated and outlives the call.
    check(unsafe { libc::chmod(path.as_ptr().cast(), mode | 0o700) })
}

/// A hard link named `name` in `dir` to the file the (`O_PATH`) fd names, through its
/// `/proc/self/fd` entry (no path below any root is resolved).
pub fn link_fd(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let from = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let name = cstring(name)?;
    // SAFETY: both strings are NUL-terminated and outlive the call; the fds are live.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
}

pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`: moves one entry between two
/// directories held by fd.
pub fn move_entry(
    from_dir: BorrowedFd<'_>,
    from: &[u8],
    to_dir: BorrowedFd<'_>,
    to: &[u8],
) -> io::Result<()> {
    let (from, to) = (cstring(from)?, cstring(to)?);
    // SAFETY: both names are NUL-terminated and outlive the call; the fds are live.
    check(unsafe {
        libc::renameat2(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    })
}

/// `pread` into `buf` at `offset`; returns how many bytes it read (0: end of file).
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: `buf` is writable for `buf.len()` bytes; the kernel writes at most that many.
        let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), off) };
        match usize::try_from(n) {
            Ok(n) => return Ok(n),
            Err(_) => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
}

/// `pwrite` of `buf` at `offset`; returns how many bytes it wrote (at least one).
pub fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: `buf` is readable for `buf.len()` bytes; the kernel reads at most that many.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), off) };
        match usize::try_from(n) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => return Ok(n),
            Err(_) => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
}
