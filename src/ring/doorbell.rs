//! A doorbell for an event loop that is not tokio's (asyncio, through the bindings): any thread
//! rings it with a token, without blocking and without the loop's interpreter, and the loop
//! learns of it by watching a pipe, then takes the tokens.

use std::io::{self, PipeReader, PipeWriter, Write};
use std::os::fd::{AsRawFd, RawFd};

use parking_lot::Mutex;

/// The tokens rung since the loop last took them, and a pipe that is readable while there are.
#[derive(Debug)]
pub struct Doorbell {
    reader: PipeReader,
    writer: PipeWriter,
    state: Mutex<Rung>,
}

#[derive(Debug, Default)]
struct Rung {
    tokens: Vec<u64>,
    /// A byte is in the pipe (or being read before `take`): the next ring writes none.
    rung: bool,
}

impl Doorbell {
    pub fn new() -> io::Result<Self> {
        let (reader, writer) = io::pipe()?;
        Ok(Self {
            reader,
            writer,
            state: Mutex::new(Rung::default()),
        })
    }

    /// The pipe's read end, for the loop to watch (and read: its one byte says "take").
    pub fn fd(&self) -> RawFd {
        self.reader.as_raw_fd()
    }

    /// Adds `token` and makes the pipe readable; from any thread, never blocks.
    pub fn ring(&self, token: u64) {
        let mut state = self.state.lock();
        state.tokens.push(token);
        if !state.rung {
            state.rung = true;
            // At most one byte is ever unread, so the write cannot block; with the read end open
            // as long as this one it cannot fail either. Were it lost, the loop would still have
            // the token at its next take.
            let _ = (&self.writer).write(&[1]);
        }
    }

    /// The tokens rung so far. The loop reads the pipe's byte first: a ring that lands between
    /// that read and this call is taken here, and one after it writes a new byte.
    pub fn take(&self) -> Vec<u64> {
        let mut state = self.state.lock();
        state.rung = false;
        std::mem::take(&mut state.tokens)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::Arc;

    use super::*;

    fn read_byte(bell: &Doorbell) -> usize {
        let mut buf = [0u8; 16];
        (&bell.reader).read(&mut buf).unwrap()
    }

    #[test]
    fn many_rings_leave_one_byte_and_every_token() {
        let bell = Doorbell::new().unwrap();
        for token in 0..10_000 {
            bell.ring(token);
        }
        assert_eq!(read_byte(&bell), 1);
        assert_eq!(bell.take(), (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_ring_after_take_writes_a_new_byte() {
        let bell = Doorbell::new().unwrap();
        bell.ring(1);
        assert_eq!(read_byte(&bell), 1);
        assert_eq!(bell.take(), vec![1]);
        bell.ring(2);
        assert_eq!(read_byte(&bell), 1);
        assert_eq!(bell.take(), vec![2]);
    }

    #[test]
    fn a_ring_between_the_read_and_take_is_not_lost() {
        let bell = Doorbell::new().unwrap();
        bell.ring(1);
        assert_eq!(read_byte(&bell), 1);
        bell.ring(2); // writes no byte: the loop is about to take
        assert_eq!(bell.take(), vec![1, 2]);
    }

    /// Whether `fd` has something to read now (a poll that does not wait).
    fn readable(fd: RawFd) -> bool {
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, and a zero timeout: the call only inspects `fd`.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready == 1 && poll.revents & libc::POLLIN != 0
    }

    #[test]
    fn the_fd_the_loop_watches_turns_readable_when_rung_and_holds_the_byte() {
        let bell = Doorbell::new().unwrap();
        let fd = bell.fd();
        assert!(!readable(fd), "nothing rung yet");
        bell.ring(7);
        assert!(readable(fd), "a ring must wake a loop watching fd()");
        let mut byte = [0u8; 4];
        // SAFETY: `fd` is open for the life of `bell`, and `byte` is writable for its length.
        let n = unsafe { libc::read(fd, byte.as_mut_ptr().cast(), byte.len()) };
        assert_eq!((n, byte[0]), (1, 1), "one byte says take");
        assert!(!readable(fd));
        assert_eq!(bell.take(), vec![7]);
    }

    #[test]
    fn rings_from_many_threads_all_arrive() {
        let bell = Arc::new(Doorbell::new().unwrap());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let bell = Arc::clone(&bell);
                std::thread::spawn(move || (0..1000).for_each(|i| bell.ring(t * 1000 + i)))
            })
            .collect();
        let mut seen = Vec::new();
        while seen.len() < 4000 {
            read_byte(&bell);
            seen.extend(bell.take());
        }
        threads.into_iter().for_each(|t| t.join().unwrap());
        seen.sort_unstable();
        assert_eq!(seen, (0..4000).collect::<Vec<_>>());
    }
}
