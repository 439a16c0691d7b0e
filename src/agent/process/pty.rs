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
    use crate::agent::process::fdio::FdIo;
    use crate::agent::process::tests::{run_to_end, supervisor, wait, CollectSink};
    use crate::agent::process::{ExecSpec, ExecState, ExitStatus};

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

    #[tokio::test]
    async fn test_the_master_reads_what_was_written_then_eio_as_end_of_file() {
        use std::io::Write;
        let pair = open(PtySize { rows: 24, cols: 80 }).unwrap();
        std::fs::File::from(pair.slave)
            .write_all(b"last words\n")
            .unwrap(); // and the slave's only descriptor closes here
        let master = FdIo::new(pair.master, true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            // Without the EIO rule, the read after the data fails instead of ending.
            let n = master
                .read(&mut buf)
                .await
                .expect("EIO must read as the end");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(
            got, b"last words\r\n",
            "what was written before the close is kept"
        );
    }

    // Execs on a pseudo-terminal: a real tty, VEOF as end of input, resizing.

    #[tokio::test]
    async fn test_a_pty_exec_leads_its_session_with_the_terminal_as_controlling_tty() {
        let script = "test -t 0 && test -t 1 && test -t 2 && echo tty-ok; \
                      [ \"$(ps -o sid= -p $$ | tr -d ' ')\" = \"$$\" ] && echo leader; \
                      [ \"$(ps -o tty= -p $$ | tr -d ' ')\" = \"$(tty | sed 's|^/dev/||')\" ] && echo ctty; \
                      echo \"term=$TERM\"";
        let spec = ExecSpec::argv(["sh", "-c", script]).pty(24, 80);
        let (sink, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(status.exit, Some(ExitStatus::Code(0)), "{}", sink.stdout());
        assert_eq!(
            sink.stdout(),
            "tty-ok\r\nleader\r\nctty\r\nterm=xterm-256color\r\n"
        );
    }

    #[tokio::test]
    async fn test_the_execs_env_may_set_another_term() {
        let spec = ExecSpec::argv(["sh", "-c", "echo $TERM"])
            .pty(24, 80)
            .env("TERM", "dumb");
        let (sink, _) = run_to_end(&supervisor(), spec).await;
        assert_eq!(sink.stdout(), "dumb\r\n");
    }

    #[tokio::test]
    async fn test_all_output_before_the_exit_arrives_and_the_code_is_kept() {
        // Far more than the terminal buffers at once: read while the process writes, and the
        // tail after it exited (EIO once its last descriptor of the slave closes).
        let spec = ExecSpec::argv(["sh", "-c", "seq 1 20000; exit 7"]).pty(24, 80);
        let (sink, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(status.state, ExecState::Finished);
        assert_eq!(status.exit, Some(ExitStatus::Code(7)));
        let out = sink.stdout();
        assert_eq!(out.lines().count(), 20000);
        assert!(
            out.ends_with("19999\r\n20000\r\n"),
            "{:?}",
            &out[out.len() - 40..]
        );
    }

    #[tokio::test]
    async fn test_a_pty_exec_ended_by_a_signal_reports_it() {
        let spec = ExecSpec::argv(["sh", "-c", "echo bye; kill -KILL $$"]).pty(24, 80);
        let (sink, status) = run_to_end(&supervisor(), spec).await;
        assert_eq!(status.exit, Some(ExitStatus::Signal(libc::SIGKILL)));
        assert_eq!(sink.stdout(), "bye\r\n");
    }

    #[tokio::test]
    async fn test_a_resize_reaches_a_program_trapping_sigwinch() {
        let sink = CollectSink::new();
        let script = "trap 'echo winch $(stty size)' WINCH; echo ready; \
                      while :; do sleep 0.05; done";
        let spec = ExecSpec::argv(["bash", "-c", script]).pty(24, 80);
        let exec = supervisor().spawn(spec, sink.clone());
        sink.wait_for_stdout("ready").await;
        exec.resize(PtySize {
            rows: 50,
            cols: 132,
        })
        .unwrap();
        sink.wait_for_stdout("winch 50 132").await;
        exec.cancel();
        wait(&exec).await;
    }

    #[tokio::test]
    async fn test_a_resize_before_the_process_starts_is_the_size_it_starts_with() {
        let sink = CollectSink::new();
        let exec = supervisor().spawn(ExecSpec::argv(["stty", "size"]).pty(24, 80), sink.clone());
        // The exec's task has not run yet on this one-thread runtime: nothing is spawned.
        assert_eq!(exec.status().state, ExecState::Starting);
        exec.resize(PtySize {
            rows: 45,
            cols: 140,
        })
        .unwrap();
        let status = wait(&exec).await;
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        assert_eq!(sink.stdout(), "45 140\r\n");
    }

    #[tokio::test]
    async fn test_an_ended_pty_exec_cannot_be_resized() {
        let exec = supervisor().spawn(ExecSpec::argv(["true"]).pty(24, 80), CollectSink::new());
        wait(&exec).await;
        let err = exec.resize(PtySize { rows: 30, cols: 90 }).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("ended"), "{err}");
    }

    #[tokio::test]
    async fn test_a_pty_exec_sees_a_terminal() {
        let (sink, status) = run_to_end(&supervisor(), ExecSpec::argv(["tty"]).pty(24, 80)).await;
        assert_eq!(status.exit, Some(ExitStatus::Code(0)), "{}", sink.stdout());
        assert!(
            sink.stdout().starts_with("/dev/pts/"),
            "{:?}",
            sink.stdout()
        );
        assert!(
            sink.err.lock().is_empty(),
            "a PTY has one stream, reported as stdout"
        );
    }

    #[tokio::test]
    async fn test_the_same_command_without_a_pty_has_no_terminal() {
        let (sink, status) = run_to_end(&supervisor(), ExecSpec::argv(["tty"])).await;
        assert_eq!(status.exit, Some(ExitStatus::Code(1)));
        assert_eq!(sink.stdout(), "not a tty\n");
    }

    #[tokio::test]
    async fn test_closing_stdin_on_a_pty_sends_veof_and_ends_cat() {
        let sink = CollectSink::new();
        let exec = supervisor().spawn(ExecSpec::argv(["cat"]).pty(24, 80), sink.clone());
        exec.write_stdin(b"hello\n").await.unwrap();
        exec.close_stdin().await.unwrap();
        let status = wait(&exec).await;
        sink.assert_contract(&status);
        assert_eq!(status.state, ExecState::Finished);
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        // The terminal echoes the line, then cat prints it.
        assert_eq!(sink.stdout(), "hello\r\nhello\r\n");
    }

    #[tokio::test]
    async fn test_veof_after_a_partial_line_still_ends_cat() {
        let sink = CollectSink::new();
        let exec = supervisor().spawn(ExecSpec::argv(["cat"]).pty(24, 80), sink.clone());
        exec.write_stdin(b"partial").await.unwrap();
        exec.close_stdin().await.unwrap();
        let status = wait(&exec).await;
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        assert!(
            sink.stdout().ends_with("partialpartial"),
            "{:?}",
            sink.stdout()
        );
    }

    #[tokio::test]
    async fn test_resize_is_seen_by_stty_size() {
        let sink = CollectSink::new();
        let spec = ExecSpec::argv(["bash", "-c", "stty size; echo ready; read line; stty size"])
            .pty(24, 80);
        let exec = supervisor().spawn(spec, sink.clone());
        sink.wait_for_stdout("ready").await;
        exec.resize(PtySize {
            rows: 40,
            cols: 100,
        })
        .unwrap();
        exec.write_stdin(b"go\n").await.unwrap();
        let status = wait(&exec).await;
        assert_eq!(status.exit, Some(ExitStatus::Code(0)));
        let lines: Vec<String> = sink
            .stdout()
            .lines()
            .map(|line| line.trim().to_string())
            .collect();
        assert_eq!(
            lines.first().map(String::as_str),
            Some("24 80"),
            "{lines:?}"
        );
        assert_eq!(
            lines.last().map(String::as_str),
            Some("40 100"),
            "{lines:?}"
        );
    }

    #[tokio::test]
    async fn test_resize_without_a_pty_is_an_error() {
        let exec = supervisor().spawn(ExecSpec::argv(["true"]), CollectSink::new());
        exec.started().await;
        let err = exec.resize(PtySize { rows: 10, cols: 10 }).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        wait(&exec).await;
    }
}
