//! What every command of a workspace is confined to beyond its sandbox: the user it runs as (a
//! uid of the workspace's own, when the launcher gave one) and its resource limits (rlimits).
//!
//! Applied in the forked child before `exec`, so the agent itself keeps its own identity and
//! limits, and no command can start without them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A uid and gid (numbers as seen inside the sandbox) that commands run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandUser {
    pub uid: u32,
    pub gid: u32,
}

/// The resource limits the launcher may set, by the names it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Processes of the command's uid (`RLIMIT_NPROC`).
    Processes,
    /// Address space of each process, in bytes (`RLIMIT_AS`).
    AddressSpace,
    /// Largest file a process may write, in bytes (`RLIMIT_FSIZE`).
    FileSize,
    /// Open file descriptors of each process (`RLIMIT_NOFILE`).
    OpenFiles,
    /// CPU seconds of each process (`RLIMIT_CPU`).
    CpuSeconds,
}

impl Limit {
    /// The launcher's name of each limit.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "processes" => Self::Processes,
            "address_space_bytes" => Self::AddressSpace,
            "file_size_bytes" => Self::FileSize,
            "open_files" => Self::OpenFiles,
            "cpu_seconds" => Self::CpuSeconds,
            _ => return None,
        })
    }

    fn resource(self) -> libc::__rlimit_resource_t {
        match self {
            Self::Processes => libc::RLIMIT_NPROC,
            Self::AddressSpace => libc::RLIMIT_AS,
            Self::FileSize => libc::RLIMIT_FSIZE,
            Self::OpenFiles => libc::RLIMIT_NOFILE,
            Self::CpuSeconds => libc::RLIMIT_CPU,
        }
    }
}

/// The user and limits of every command; the default confines nothing (the agent's own user).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    pub user: Option<CommandUser>,
    pub limits: Vec<(Limit, u64)>,
}

impl Confinement {
    /// Gives the pipes (or PTY) of a command's standard streams to its user, as a container
    /// runtime does: a command that reopens them (`echo x > /dev/stderr` opens
    /// `/proc/self/fd/2`) is then allowed to, where the agent made them as another user.
    pub(crate) fn give_stdio(&self, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let Some(user) = self.user else {
            return Ok(());
        };
        for fd in fds {
            // SAFETY: fchown(2) on a descriptor we hold changes only that inode's owner and
            // touches no memory of ours.
            if unsafe { libc::fchown(fd.as_raw_fd(), user.uid, user.gid) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Makes `command` start as the configured user with the configured limits, unable to gain
    /// privileges again (`no_new_privs`: no setuid binaries, no file capabilities).
    pub(crate) fn apply(&self, command: &mut Command) {
        if let Some(user) = self.user {
            // std drops the supplementary groups (setgroups) before setgid/setuid when the
            // agent is root, and changes the directory only after the switch, so a workdir
            // the user cannot enter is refused.
            command.gid(user.gid).uid(user.uid);
        }
        let limits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)> = self
            .limits
            .iter()
            .map(|&(limit, value)| (limit.resource(), value as libc::rlim_t))
            .collect();
        // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
        // calls are allowed. It iterates a vector allocated before the fork (no allocation) and
        // makes setrlimit(2) and prctl(2) calls, which take no locks; errors are built from
        // errno without allocating.
        unsafe {
            command.pre_exec(move || {
                for &(resource, value) in &limits {
                    let limit = libc::rlimit {
                        rlim_cur: value,
                        rlim_max: value,
                    };
                    if libc::setrlimit(resource, &limit) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(confinement: &Confinement, script: &str) -> String {
        let mut command = Command::new("bash");
        command.arg("-c").arg(script);
        confinement.apply(&mut command);
        let out = command.output().expect("sh runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    #[test]
    fn test_limits_reach_the_command_as_hard_limits() {
        let confinement = Confinement {
            user: None,
            limits: vec![(Limit::OpenFiles, 77), (Limit::FileSize, 4096 * 1024)],
        };
        assert_eq!(run(&confinement, "ulimit -Hn; ulimit -Sn"), "77\n77");
        // bash's ulimit -f counts 1024-byte blocks.
        assert_eq!(run(&confinement, "ulimit -Hf"), "4096");
    }

    #[test]
    fn test_a_command_cannot_gain_privileges_again() {
        let out = run(&Confinement::default(), "grep NoNewPrivs /proc/self/status");
        assert!(out.ends_with('1'), "{out}");
    }

    #[test]
    fn test_a_file_larger_than_the_limit_cannot_be_written() {
        let dir = std::env::temp_dir().join(format!("mwc-fsize-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("big");
        let confinement = Confinement {
            user: None,
            limits: vec![(Limit::FileSize, 8192)],
        };
        let script = format!(
            "trap '' XFSZ; head -c 100000 /dev/zero > {} 2>/dev/null; echo $?",
            file.display()
        );
        let status = run(&confinement, &script);
        let written = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        std::fs::remove_dir_all(&dir).ok();
        assert_ne!(status, "0");
        assert!(written <= 8192, "{written} bytes written");
    }

    #[test]
    fn test_limit_names_are_the_launchers() {
        assert_eq!(Limit::from_name("processes"), Some(Limit::Processes));
        assert_eq!(Limit::from_name("nproc"), None);
    }
}
