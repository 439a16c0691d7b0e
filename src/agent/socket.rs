//! A connected unix socket split into a reader and a writer that is registered for writability
//! only while a write waits for room.
//!
//! tokio registers a socket for both directions, edge-triggered, for its whole life. A unix
//! socket signals "writable" every time its peer reads, so each page the gateway read woke the
//! daemon for nothing, on the gateway's CPU, in the middle of the gateway's long-poll (see
//! bench/README.md). Here the reader's registration asks for readability alone, and a write that
//! finds the socket full registers a duplicate descriptor for writability until it goes through.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::UnixStream;

/// The read half: readable interest only.
pub struct SocketReader {
    fd: Arc<AsyncFd<OwnedFd>>,
}

/// The write half: sends without waiting, and waits for room only when the socket is full.
pub struct SocketWriter {
    /// Keeps the descriptor open (and registered for reads) as long as either half lives.
    fd: Arc<AsyncFd<OwnedFd>>,
    /// A duplicate registered for writability while a write waits; dropped (deregistered) once
    /// the write has gone through.
    waiting: Option<AsyncFd<OwnedFd>>,
}

/// Splits a connected stream (taken from tokio's reactor) into the two halves.
pub fn split(stream: UnixStream) -> io::Result<(SocketReader, SocketWriter)> {
    let std = stream.into_std()?;
    std.set_nonblocking(true)?;
    let fd = Arc::new(register(OwnedFd::from(std), Interest::READABLE)?);
    Ok((
        SocketReader {
            fd: Arc::clone(&fd),
        },
        SocketWriter { fd, waiting: None },
    ))
}

fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is a valid open descriptor that it alone closes, and its as_raw_fd
    // returns that same descriptor until the AsyncFd (which now owns it) is dropped.
    Ok(unsafe { AsyncFd::register_with_interest(fd, interest) }?)
}

impl AsyncRead for SocketReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let wanted = unfilled.len();
            let result = guard.try_io(|fd| {
                // SAFETY: recv writes at most `unfilled.len()` bytes into `unfilled`, a slice we
                // borrow mutably for the call; the descriptor is open while `fd` lives.
                let n = unsafe {
                    libc::recv(
                        fd.as_raw_fd(),
                        unfilled.as_mut_ptr().cast(),
                        unfilled.len(),
                        0,
                    )
                };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            });
            match result {
                Ok(Ok(n)) => {
                    // A short read drained the socket: wait for the next edge rather than read
                    // again for EAGAIN (as tokio's own sockets do).
                    if n > 0 && n < wanted {
                        guard.clear_ready_matching(tokio::io::Ready::READABLE);
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => {}
            }
        }
    }
}

impl SocketWriter {
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: send reads at most `buf.len()` bytes from `buf`, borrowed for the call; the
        // descriptor is open while `self.fd` lives. MSG_NOSIGNAL: a closed peer is an EPIPE
        // error, not a SIGPIPE that would end the daemon.
        let n = unsafe {
            libc::send(
                self.fd.get_ref().as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

impl AsyncWrite for SocketWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            if let Some(waiting) = &self.waiting {
                let mut guard = ready!(waiting.poll_write_ready(cx))?;
                // The readiness is cleared unless this send went through.
                guard.clear_ready();
            }
            match self.send(buf) {
                Ok(n) => {
                    self.waiting = None;
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.waiting.is_none() {
                        // Registering polls the socket at once: room made since the send above
                        // is reported, not missed.
                        let dup = self.fd.get_ref().try_clone()?;
                        self.waiting = Some(register(dup, Interest::WRITABLE)?);
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: shutdown takes a descriptor that is open while `self.fd` lives, and no memory.
        let rc = unsafe { libc::shutdown(self.fd.get_ref().as_raw_fd(), libc::SHUT_WR) };
        if rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::ENOTCONN) {
            Poll::Ready(Ok(()))
        } else {
            Poll::Ready(Err(io::Error::last_os_error()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Everything written arrives in order, across many fills of the socket's buffer (each one
    /// a wait for room), and the end of the stream is passed on.
    #[tokio::test(flavor = "current_thread")]
    async fn moves_more_than_the_socket_buffer_both_ways_in_order() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let (mut a_read, mut a_write) = split(a).expect("split a");
        let (mut b_read, mut b_write) = split(b).expect("split b");
        let data: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let expected = data.clone();
        let writer = tokio::spawn(async move {
            a_write.write_all(&data).await.expect("write");
            a_write.shutdown().await.expect("shutdown");
            a_write
        });
        let mut got = Vec::new();
        b_read.read_to_end(&mut got).await.expect("read");
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "bytes arrived out of order");
        let a_write = writer.await.expect("writer task");
        assert!(
            a_write.waiting.is_none(),
            "the writability registration outlived the write"
        );

        b_write.write_all(b"back").await.expect("write back");
        drop(b_write);
        drop(b_read);
        let mut back = [0u8; 4];
        a_read.read_exact(&mut back).await.expect("read back");
        assert_eq!(&back, b"back");
    }

    /// A write to a peer that has gone is an error (EPIPE), not a signal that ends the process.
    #[tokio::test(flavor = "current_thread")]
    async fn a_write_to_a_closed_peer_fails() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        drop(b);
        let (_read, mut write) = split(a).expect("split");
        let err = write.write_all(b"x").await.expect_err("the peer is gone");
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}
