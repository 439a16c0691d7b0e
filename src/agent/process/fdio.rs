//! Non-blocking reads and writes on pipe and PTY descriptors, driven by tokio's readiness
//! events (epoll), so waiting for output or for room in a pipe costs no thread and no polling.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Ready;

pub(crate) struct FdIo {
    fd: AsyncFd<OwnedFd>,
    /// A PTY master reports EIO once every slave descriptor is closed: that is its end of file.
    eio_is_eof: bool,
}

impl FdIo {
    /// Takes ownership of `fd`, makes it non-blocking and registers it with the runtime.
    pub(crate) fn new(fd: OwnedFd, eio_is_eof: bool) -> io::Result<Self> {
        set_nonblocking(&fd)?;
        // SAFETY: an OwnedFd is a valid open descriptor that it alone closes, and its as_raw_fd
        // returns that same descriptor until the AsyncFd (which now owns it) is dropped.
        let fd = unsafe { AsyncFd::register(fd) }?;
        Ok(Self { fd, eio_is_eof })
    }

    pub(crate) fn borrow_fd(&self) -> BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }

    /// Waits until a read would not block (data, end of file or an error), reading nothing.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        // The guard is dropped without clearing the readiness: the next `read` uses it.
        self.fd.readable().await.map(drop)
    }

    /// Reads up to `buf.len()` bytes; `Ok(0)` is end of file. Cancel-safe: no byte is consumed
    /// unless the future completes.
    pub(crate) async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            let result = guard.try_io(|inner| {
                // SAFETY: read writes at most buf.len() bytes into `buf`, borrowed mutably here.
                let n =
                    unsafe { libc::read(inner.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            });
            match result {
                Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(err)) if self.eio_is_eof && err.raw_os_error() == Some(libc::EIO) => {
                    return Ok(0)
                }
                Ok(Ok(n)) => {
                    // A pipe read returns less than asked only once the pipe is empty: the read
                    // after it would only say EAGAIN. Clearing the readiness saves that syscall
                    // on every chunk of output (tokio's sockets do the same). The next edge
                    // (new data, or the writer closing) sets it again, and one that arrived
                    // since this read is kept: tokio clears only the readiness this guard saw.
                    // A PTY master may return short reads with data still buffered: not there.
                    if !self.eio_is_eof && n > 0 && n < buf.len() {
                        guard.clear_ready_matching(Ready::READABLE);
                    }
                    return Ok(n);
                }
                Ok(Err(err)) => return Err(err),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `buf`, waiting for room as the reader drains the pipe.
    pub(crate) async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let mut guard = self.fd.writable().await?;
            let result = guard.try_io(|inner| {
                // SAFETY: write reads at most buf.len() bytes from `buf`, which is borrowed here.
                let n = unsafe { libc::write(inner.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            });
            match result {
                Ok(Ok(n)) => buf = &buf[n..],
                Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(err)) => return Err(err),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL read and set the status flags of a descriptor we own.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
