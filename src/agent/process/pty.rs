//! Pseudo-terminals for execs that ask for one: opening the pair, resizing, and the character
//! that means end-of-file to the terminal's line discipline.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::spec::PtySize;

pub(crate) struct PtyPair {
    pub(crate) master: OwnedFd,
    pub(crate) slave: OwnedFd,
}

/// Opens a new pseudo-terminal of `size`. Both ends are close-on-exec so concurrent spawns never
/// inherit them (the child gets the slave through its stdio, which `dup2` makes inheritable).
pub(crate) fn open(size: PtySize) -> io::Result<PtyPair> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: posix_openpt takes flags and returns a new descriptor or -1.
    let raw = unsafe { libc::posix_openpt(flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a freshly opened descriptor that nothing else owns.
    let master = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: grantpt and unlockpt only act on the master descriptor we own.
    if unsafe { libc::grantpt(raw) } != 0 || unsafe { libc::unlockpt(raw) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: ptsname_r writes at most `name.len()` bytes, NUL included, into our buffer.
    let rc = unsafe { libc::ptsname_r(raw, name.as_mut_ptr(), name.len()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SAFETY: on success ptsname_r left a NUL-terminated path in `name`, which outlives the call.
    let slave_raw = unsafe { libc::open(name.as_ptr(), flags) };
    if slave_raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `slave_raw` is a freshly opened descriptor that nothing else owns.
    let slave = unsafe { OwnedFd::from_raw_fd(slave_raw) };
    set_size(master.as_fd(), size)?;
    Ok(PtyPair { master, slave })
}

/// Sets the terminal size; the kernel sends SIGWINCH to the terminal's foreground group.
pub(crate) fn set_size(fd: BorrowedFd<'_>, size: PtySize) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize`, which lives on our stack for the whole call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &winsize) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The terminal's current VEOF character (usually ^D), read from its settings.
pub(crate) fn eof_char(fd: BorrowedFd<'_>) -> io::Result<u8> {
    // SAFETY: termios is a struct of plain integers, for which all-zero bytes are a valid value.
    let mut termios: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: tcgetattr writes one termios into the struct we own.
    if unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut termios) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(termios.c_cc[libc::VEOF])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_a_new_pty_has_the_requested_size_and_an_eof_char() {
        let pair = open(PtySize { rows: 33, cols: 99 }).unwrap();
        let mut ws = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one winsize into `ws`.
        let rc = unsafe { libc::ioctl(pair.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
        assert_eq!(rc, 0);
        assert_eq!((ws.ws_row, ws.ws_col), (33, 99));
        assert_eq!(eof_char(pair.master.as_fd()).unwrap(), 4, "^D by default");
    }
}
