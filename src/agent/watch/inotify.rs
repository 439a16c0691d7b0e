//! The inotify and eventfd system calls a watch is built from, and the parser of the kernel's
//! event records. A directory is watched by its fd (`/proc/self/fd/N`), never by a path string.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::agent::files::FileError;

/// What every watched directory reports. `IN_ONLYDIR` makes a swap to a non-directory fail.
pub const MASK: u32 = libc::IN_CREATE
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_EXCL_UNLINK;

/// One record as the kernel wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    pub wd: i32,
    pub mask: u32,
    pub cookie: u32,
    pub name: Vec<u8>,
}

fn owned(ret: libc::c_int) -> io::Result<OwnedFd> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ret` is a new fd from a successful call, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

/// A non-blocking inotify instance. EMFILE here is the per-user instance limit.
pub fn init() -> Result<OwnedFd, FileError> {
    // SAFETY: inotify_init1 takes only flags and returns an fd or -1.
    owned(unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) }).map_err(|e| match e
        .raw_os_error()
    {
        Some(libc::EMFILE) | Some(libc::ENFILE) => FileError::limit(
            "no inotify instance is available (fs.inotify.max_user_instances or the open \
                 file limit is reached); cancel other watches first",
        ),
        _ => FileError::new(
            crate::agent::files::FileErrorKind::Io,
            format!("inotify_init1: {e}"),
        ),
    })
}

/// Watches the directory `dir` names, through its fd, so no path is resolved again.
pub fn add_watch(ino: BorrowedFd<'_>, dir: BorrowedFd<'_>, shown: &str) -> Result<i32, FileError> {
    let path = format!("/proc/self/fd/{}\0", dir.as_raw_fd());
    // SAFETY: `path` is NUL-terminated and lives across the call; `ino` is an inotify fd.
    let wd = unsafe { libc::inotify_add_watch(ino.as_raw_fd(), path.as_ptr().cast(), MASK) };
    if wd >= 0 {
        return Ok(wd);
    }
    let e = io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ENOSPC) => FileError::limit(format!(
            "cannot watch '{shown}': the inotify watch limit (fs.inotify.max_user_watches) is \
             reached; watch a smaller directory or cancel other watches"
        )),
        _ => FileError::from_io(&e, "watch", shown),
    })
}

pub fn rm_watch(ino: BorrowedFd<'_>, wd: i32) {
    // SAFETY: plain integer arguments; a stale wd only yields EINVAL, which we ignore.
    unsafe { libc::inotify_rm_watch(ino.as_raw_fd(), wd) };
}

/// An eventfd that `cancel` writes to wake the watch thread.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes an initial value and flags and returns an fd or -1.
    owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })
}

pub fn signal(efd: BorrowedFd<'_>) {
    let one: u64 = 1;
    // SAFETY: writes exactly 8 readable bytes from `one`, as eventfd requires.
    unsafe { libc::write(efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Waits until `ino` or `cancel` is readable or `timeout` passes; returns (events, cancelled).
pub fn wait(
    ino: BorrowedFd<'_>,
    cancel: BorrowedFd<'_>,
    timeout: Option<Duration>,
) -> (bool, bool) {
    let mut fds = [
        libc::pollfd {
            fd: ino.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: cancel.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.map_or(-1, |t| {
        libc::c_int::try_from(t.as_millis().max(1)).unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: `fds` is a live array of two pollfd and we pass its length.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n <= 0 {
        return (false, false); // Timeout, or EINTR: the caller re-checks its deadline.
    }
    (fds[0].revents != 0, fds[1].revents != 0)
}

/// Reads what is queued (non-blocking) and parses it.
pub fn read_events(ino: BorrowedFd<'_>) -> io::Result<Vec<RawEvent>> {
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: `buf` is writable for its length; the kernel writes whole records only.
    let n = unsafe { libc::read(ino.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(Vec::new())
        } else {
            Err(e)
        };
    }
    buf.truncate(usize::try_from(n).unwrap_or(0));
    Ok(parse(&buf))
}

/// Splits a buffer of `struct inotify_event` records (16-byte header, NUL-padded name).
pub fn parse(buf: &[u8]) -> Vec<RawEvent> {
    let word = |at: usize| -> Option<[u8; 4]> { buf.get(at..at + 4)?.try_into().ok() };
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(wd), Some(mask), Some(cookie), Some(len)) =
        (word(at), word(at + 4), word(at + 8), word(at + 12))
    {
        let len = u32::from_ne_bytes(len) as usize;
        let Some(raw_name) = buf.get(at + 16..at + 16 + len) else {
            break;
        };
        let name = raw_name
            .split(|b| *b == 0)
            .next()
            .unwrap_or_default()
            .to_vec();
        out.push(RawEvent {
            wd: i32::from_ne_bytes(wd),
            mask: u32::from_ne_bytes(mask),
            cookie: u32::from_ne_bytes(cookie),
            name,
        });
        at += 16 + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_consecutive_records_and_strips_name_padding() {
        let mut buf = Vec::new();
        for (wd, name) in [(1i32, &b"a.txt"[..]), (2, &b""[..])] {
            let padded = if name.is_empty() { 0 } else { 16 };
            buf.extend(wd.to_ne_bytes());
            buf.extend(libc::IN_CREATE.to_ne_bytes());
            buf.extend(7u32.to_ne_bytes());
            buf.extend((padded as u32).to_ne_bytes());
            let mut n = name.to_vec();
            n.resize(padded, 0);
            buf.extend(n);
        }
        let events = parse(&buf);
        assert_eq!(events.len(), 2);
        assert_eq!(
            (events[0].wd, events[0].cookie, events[0].name.as_slice()),
            (1, 7, &b"a.txt"[..])
        );
        assert!(events[1].name.is_empty());
    }
}
