//! Turns an `ExecSpec` into a running process: its own session and process group, stdin/stdout/
//! stderr as pipes or one PTY, the environment, and registration with the reaper.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use tokio::sync::oneshot;

use super::confine::Confinement;
use super::fdio::FdIo;
use super::group::signal_group;
use super::pty;
use super::reaper::{RawStatus, Reaper};
use super::spec::{CommandLine, ExecSpec, REPORT_FD};

/// `TERM` for a command on a pseudo-terminal.
pub(crate) const PTY_TERM: &str = "xterm-256color";

pub(crate) struct Launched {
    pub(crate) pid: libc::pid_t,
    pub(crate) exit: oneshot::Receiver<RawStatus>,
    pub(crate) stdin: FdIo,
    pub(crate) stdout: FdIo,
    /// `None` on a PTY, where stderr is the same stream as stdout.
    pub(crate) stderr: Option<FdIo>,
    /// A PTY master kept for resizing.
    pub(crate) pty_master: Option<OwnedFd>,
    /// The read end of the step's report channel (`ExecSpec::report`).
    pub(crate) report: Option<FdIo>,
}

/// Starts the process; the error is the text a user needs (what failed and the OS error).
pub(crate) fn launch(
    spec: &ExecSpec,
    base_env: &[(OsString, OsString)],
    confinement: &Confinement,
    reaper: &Reaper,
) -> Result<Launched, String> {
    let (mut command, program) = match &spec.command {
        CommandLine::Shell(text) => {
            let mut command = Command::new("bash");
            command.arg("-lc").arg(text);
            (command, OsString::from("bash"))
        }
        CommandLine::Argv(argv) => {
            let Some((program, args)) = argv.split_first() else {
                return Err("the command is empty: give the program to run".into());
            };
            let mut command = Command::new(program);
            command.args(args);
            (command, program.clone())
        }
    };
    if let Some(dir) = &spec.workdir {
        // Checked here so the error names the directory; the child's chdir reports only errno.
        let checked = std::fs::metadata(dir).and_then(|meta| match meta.is_dir() {
            true => Ok(()),
            false => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
        });
        if let Err(err) = checked {
            return Err(format!("cannot use workdir {}: {err}", dir.display()));
        }
        command.current_dir(dir);
    }
    command
        .env_clear()
        .envs(base_env.iter().map(|(k, v)| (k, v)));
    if spec.pty.is_some() {
        // What the terminal a person attaches speaks (xterm.js and most emulators); the
        // exec's own `env` may still say otherwise.
        command.env("TERM", PTY_TERM);
    }
    command.envs(spec.env.iter().map(|(k, v)| (k, v)));
    let io_error = |err: io::Error| format!("cannot set up the exec's input and output: {err}");
    let pty_pair = match spec.pty {
        Some(size) => Some(pty::open(size).map_err(io_error)?),
        None => None,
    };
    // Our ends of the pipes (stdin's write end, stdout's and stderr's read ends).
    let mut pipes: Option<(OwnedFd, OwnedFd, OwnedFd)> = None;
    match &pty_pair {
        Some(pair) => {
            confinement
                .give_stdio(&[pair.slave.as_fd()])
                .map_err(io_error)?;
            let slave = |fd: &OwnedFd| fd.try_clone().map(Stdio::from);
            command
                .stdin(slave(&pair.slave).map_err(io_error)?)
                .stdout(slave(&pair.slave).map_err(io_error)?)
                .stderr(slave(&pair.slave).map_err(io_error)?);
        }
        None => {
            // Made here rather than by std, so that they can be the command's user's.
            let (stdin_child, stdin_ours) = io::pipe().map_err(io_error)?;
            let (stdout_ours, stdout_child) = io::pipe().map_err(io_error)?;
            let (stderr_ours, stderr_child) = io::pipe().map_err(io_error)?;
            confinement
                .give_stdio(&[
                    stdin_child.as_fd(),
                    stdout_child.as_fd(),
                    stderr_child.as_fd(),
                ])
                .map_err(io_error)?;
            command
                .stdin(Stdio::from(stdin_child))
                .stdout(Stdio::from(stdout_child))
                .stderr(Stdio::from(stderr_child));
            pipes = Some((stdin_ours.into(), stdout_ours.into(), stderr_ours.into()));
        }
    }
    // `spec.identity` chose the environment (`base_env`) and the confinement: workspace
    // commands and the agent's own steps run as different uids where the launcher gave them.
    confinement.apply(&mut command);
    // The report channel: both ends close on exec here, and the child alone gets the write end
    // again, as REPORT_FD, so it is held by this step's processes and read only by us.
    let report_pipe = match spec.report {
        true => Some(report_pipe().map_err(io_error)?),
        false => None,
    };
    if let Some((_, writer)) = &report_pipe {
        command.env("MWC_REPORT_FD", REPORT_FD.to_string());
        let raw = writer.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec, where only
        // async-signal-safe calls are allowed: dup2(2) and fcntl(2) on descriptors, which
        // neither allocate nor take a lock; errors are built from errno without allocating.
        // `raw` is open in the child (the parent keeps `writer` until the spawn returns).
        unsafe {
            command.pre_exec(move || {
                if raw == REPORT_FD {
                    // Already in place: only its close-on-exec flag is to go.
                    if libc::fcntl(raw, libc::F_SETFD, 0) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(raw, REPORT_FD) < 0 {
                    // dup2 clears close-on-exec on the copy; the original still closes.
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let take_tty = pty_pair.is_some();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed. It makes two system calls, setsid(2) and ioctl(2) on fd 0 (which std has
    // already dup2'ed to the PTY slave), neither of which allocates or takes a lock; on failure it
    // builds an io::Error from errno, which stores an integer and does not allocate either.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if take_tty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = reaper.spawn(|| command.spawn());
    // Drop our copies of the PTY slave now: the master sees end-of-file only once all are closed.
    drop(command);
    // And of the report's write end, for the same reason.
    let report_reader = report_pipe.map(|(reader, _writer)| reader);
    let (child, exit) =
        spawned.map_err(|err| format!("cannot start {}: {err}", program.to_string_lossy()))?;
    let pid = libc::pid_t::try_from(child.id()).map_err(|err| err.to_string())?;
    let streams = (|| {
        let (stdin, stdout, stderr, pty_master) = match pty_pair {
            Some(pair) => {
                drop(pair.slave);
                let writer = pair.master.try_clone().map_err(io_error)?;
                let resizer = pair.master.try_clone().map_err(io_error)?;
                let reader = FdIo::new(pair.master, true).map_err(io_error)?;
                (
                    FdIo::new(writer, true).map_err(io_error)?,
                    reader,
                    None,
                    Some(resizer),
                )
            }
            None => {
                let missing = || "the child's pipes are missing".to_string();
                let (stdin, stdout, stderr) = pipes.ok_or_else(missing)?;
                (
                    FdIo::new(stdin, false).map_err(io_error)?,
                    FdIo::new(stdout, false).map_err(io_error)?,
                    Some(FdIo::new(stderr, false).map_err(io_error)?),
                    None,
                )
            }
        };
        let report = match report_reader {
            Some(reader) => Some(FdIo::new(reader, false).map_err(io_error)?),
            None => None,
        };
        Ok((stdin, stdout, stderr, pty_master, report))
    })();
    let (stdin, stdout, stderr, pty_master, report) = match streams {
        Ok(streams) => streams,
        Err(err) => {
            // Unsupervised output would block the process forever: end it (the reaper reaps it).
            let _ = signal_group(pid, libc::SIGKILL);
            return Err(err);
        }
    };
    // `child` is dropped without waiting: its status belongs to the reaper.
    Ok(Launched {
        pid,
        exit,
        stdin,
        stdout,
        stderr,
        pty_master,
        report,
    })
}

/// A pipe for a step's report, both ends close-on-exec, the write end numbered above the
/// standard descriptors (which the child's own stdio replaces before it takes REPORT_FD).
fn report_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (reader, writer) = io::pipe()?;
    let writer = OwnedFd::from(writer);
    let writer = match writer.as_raw_fd() {
        // try_clone duplicates with F_DUPFD_CLOEXEC from 3 up.
        0..=2 => writer.try_clone()?,
        _ => writer,
    };
    Ok((OwnedFd::from(reader), writer))
}

#[cfg(test)]
mod tests {
    // Execs that cannot start end `failed` with the operating system's reason and never run.

    use crate::agent::process::tests::{run_to_end, supervisor, temp_dir};
    use crate::agent::process::{ExecSpec, ExecState};

    #[tokio::test]
    async fn test_a_missing_binary_fails_with_the_os_error() {
        let (sink, status) = run_to_end(
            &supervisor(),
            ExecSpec::argv(["no-such-program-for-this-test"]),
        )
        .await;
        assert_eq!(status.state, ExecState::Failed);
        let error = status.error.unwrap();
        assert!(error.contains("no-such-program-for-this-test"), "{error}");
        assert!(error.contains("No such file or directory"), "{error}");
        assert_eq!(
            (status.pid, status.exit, status.started_at),
            (None, None, None)
        );
        assert!(status.ended_at.is_some());
        assert!(sink.out.lock().is_empty());
    }

    #[tokio::test]
    async fn test_a_missing_workdir_fails_with_the_os_error() {
        let missing = temp_dir().join("not-here");
        let (_, status) =
            run_to_end(&supervisor(), ExecSpec::argv(["true"]).workdir(&missing)).await;
        assert_eq!(status.state, ExecState::Failed);
        let error = status.error.unwrap();
        assert!(
            error.contains("not-here") && error.contains("No such file or directory"),
            "{error}"
        );
        assert_eq!(status.pid, None);
    }

    #[tokio::test]
    async fn test_a_workdir_that_is_a_file_fails() {
        let file = temp_dir().join("file");
        std::fs::write(&file, b"x").unwrap();
        let (_, status) = run_to_end(&supervisor(), ExecSpec::argv(["true"]).workdir(&file)).await;
        assert_eq!(status.state, ExecState::Failed);
        assert!(status.error.unwrap().contains("Not a directory"));
    }

    #[tokio::test]
    async fn test_an_empty_argv_fails_without_running_anything() {
        let (_, status) = run_to_end(&supervisor(), ExecSpec::argv(Vec::<String>::new())).await;
        assert_eq!(status.state, ExecState::Failed);
        assert!(status.error.unwrap().contains("empty"));
    }
}
