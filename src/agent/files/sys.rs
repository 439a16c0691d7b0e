//! Thin wrappers over the `*at` system calls the contained operations are built from.
//! Each takes a directory fd and ONE name or relative path; none ever resolves a host path.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// `RESOLVE_NO_MAGICLINKS` from linux/openat2.h: refuse /proc-style magic links.
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
/// `RESOLVE_BENEATH` from linux/openat2.h: every step must stay beneath the dirfd.
pub const RESOLVE_BENEATH: u64 = 0x08;

/// `struct open_how` from linux/openat2.h (three u64, no padding).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

pub fn cstring(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn owned(ret: libc::c_int) -> io::Result<OwnedFd> {
    let fd = check(ret)?;
    // SAFETY: `fd` was just returned by a successful open-like call and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dir, path, flags | O_CLOEXEC, mode, resolve)`.
pub fn openat2(
    dir: BorrowedFd<'_>,
    path: &[u8],
    flags: libc::c_int,
    mode: libc::mode_t,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let path = cstring(path)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: u64::from(mode),
        resolve,
    };
    // SAFETY: `path` is NUL-terminated and lives across the call; `how` is a fully initialised
    // `open_how` and we pass its exact size, so the kernel reads only memory we own.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    owned(libc::c_int::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?)
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub fn openat(
    dir: BorrowedFd<'_>,
    name: &[u8],
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let name = cstring(name)?;
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is a live fd.
    owned(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    })
}

/// `fstatat(dir, name, flags)`; an empty `name` with `AT_EMPTY_PATH` stats `dir` itself.
pub fn fstatat(dir: BorrowedFd<'_>, name: &[u8], flags: libc::c_int) -> io::Result<libc::stat> {
    let name = cstring(name)?;
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `st` is a writable `stat` the kernel fills in.
    check(unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, flags) })?;
    Ok(st)
}

/// `fstat` of the fd itself (works on `O_PATH` fds, including one that names a symlink).
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    fstatat(fd, b"", libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
}

pub fn is_symlink(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

pub fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

pub fn is_regular(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// `readlinkat(dir, name)`; an empty `name` reads the link an `O_PATH|O_NOFOLLOW` fd names.
pub fn readlinkat(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<OsString> {
    let name = cstring(name)?;
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: `buf` is writable for `buf.len()` bytes; the kernel writes at most that many.
        let n = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if n < buf.len() {
            buf.truncate(n);
            return Ok(OsString::from_vec(buf));
        }
        if buf.len() >= 1 << 16 {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        buf.resize(buf.len() * 4, 0);
    }
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &[u8], mode: libc::mode_t) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: `name` is NUL-terminated and outlives the call.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

pub fn unlinkat(dir: BorrowedFd<'_>, name: &[u8], flags: libc::c_int) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: `name` is NUL-terminated and outlives the call.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat` within one directory: replaces the entry `to`, never what it may point at.
pub fn renameat(dir: BorrowedFd<'_>, from: &[u8], to: &[u8]) -> io::Result<()> {
    let (from, to) = (cstring(from)?, cstring(to)?);
    // SAFETY: both names are NUL-terminated and outlive the call.
    check(unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) })
        .map(drop)
}

/// How a rename takes its destination's name (an extraction's, a patch's).
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
    match check(ret).map(drop) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => {}
        other => return other,
    }
    match how {
        Swap::NoReplace => {
            match fstatat(dir, to, libc::AT_SYMLINK_NOFOLLOW) {
                Ok(_) => return Err(io::Error::from_raw_os_error(libc::EEXIST)),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            renameat(dir, from, to)
        }
        Swap::Exchange => {
            let mut aside = from.to_vec();
            aside.extend_from_slice(b".old");
            renameat(dir, to, &aside)?;
            renameat(dir, from, to)?;
            renameat(dir, &aside, from)
        }
    }
}

/// The names in the directory `dir` (which must be opened for reading), without `.` and `..`.
pub fn read_dir_names(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    // fdopendir takes ownership of its fd, so hand it a fresh one for the same directory.
    let fd = openat(dir, b".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
    // SAFETY: `raw` is an open directory fd that we own and give to the DIR stream.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        let err = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `raw` is still ours to close.
        unsafe { libc::close(raw) };
        return Err(err);
    }
    let mut names = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; clearing it tells end-of-stream from an error below.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is a valid DIR* until closedir below.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let err = io::Error::last_os_error();
            break if err.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(err)
            };
        }
        // SAFETY: readdir returned a valid dirent whose d_name is NUL-terminated and stays
        // valid until the next readdir on this stream; we copy it out at once.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    };
    // SAFETY: `stream` is valid and closed exactly once; it also closes `raw`.
    unsafe { libc::closedir(stream) };
    result.map(|()| names)
}

/// A readable fd for the directory an `O_PATH` fd names (to list it or fsync it).
pub fn reopen_dir(dir: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    openat(dir, b".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

pub fn mtime_ns(st: &libc::stat) -> i64 {
    st.st_mtime
        .saturating_mul(1_000_000_000)
        .saturating_add(st.st_mtime_nsec)
}
