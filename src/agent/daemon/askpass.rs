//! Where git's password prompt is answered: the token of an authenticated git step stays in the
//! daemon's memory and is handed out on the askpass socket, one prompt per connection, only to a
//! process that descends from the step it was given for (its pid, from `SO_PEERCRED`, walked up
//! `/proc/<pid>/stat` to the step's own process) and only for the prompts git asks for the one
//! configured base. So the token is in no process's environment, argv or file, and a command of
//! the workspace that connects gets nothing, even one of the same uid.
//!
//! Protocol: the client (`mwc-agent askpass PROMPT`, git's `GIT_ASKPASS`) writes the prompt and
//! shuts its side down; the daemon answers the line to print, or closes with nothing.

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::agent::process::PidSlot;

/// The longest prompt read: git's prompts name a URL, far shorter.
const MAX_PROMPT_BYTES: usize = 4096;
/// How long one client may take to send its prompt.
const PROMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// How far up the process tree a client may be from the step (askpass ← git-remote-https ← git
/// ← the step's shell is three).
const MAX_ANCESTRY: usize = 32;
/// The user name git sends with a GitHub token.
const TOKEN_USER: &str = "x-access-token";

/// The token of one step and the base it is for.
#[derive(Debug)]
pub(crate) struct Credential {
    scheme: String,
    authority: String,
    token: String,
}

impl Credential {
    /// `base` is `scheme://host[:port]` (checked as the gateway's GitHub base is, no path).
    pub(crate) fn new(base: &str, token: String) -> Result<Self, String> {
        let base = crate::policy::github_base(base).map_err(|e| e.message)?;
        // git's prompts name the origin alone: a base with a path could never be asked for.
        let (scheme, authority) = base
            .split_once("://")
            .filter(|(_, authority)| !authority.contains('/'))
            .ok_or("the credential's base must be scheme://host[:port], without a path")?;
        if token.is_empty() || token.contains(['\n', '\r', '\0']) {
            return Err("the credential's token must be one non-empty line".into());
        }
        Ok(Self {
            scheme: scheme.to_owned(),
            authority: authority.to_owned(),
            token,
        })
    }

    /// What git's prompt gets: the user name, then the token, each for this base alone.
    fn answer(&self, prompt: &str) -> Option<&str> {
        let (scheme, authority) = (&self.scheme, &self.authority);
        if prompt == format!("Username for '{scheme}://{authority}': ") {
            return Some(TOKEN_USER);
        }
        if prompt == format!("Password for '{scheme}://{TOKEN_USER}@{authority}': ") {
            return Some(&self.token);
        }
        None
    }
}

/// The credentials of the steps that hold one, each as long as its step's spec (which holds the
/// slot) exists: the token is forgotten with the exec.
#[derive(Debug, Default)]
pub(crate) struct Credentials {
    granted: Mutex<Vec<(Weak<PidSlot>, Credential)>>,
}

impl Credentials {
    /// The slot the step's spec carries; its pid, while it runs, is what the token answers to.
    pub(crate) fn grant(&self, credential: Credential) -> Arc<PidSlot> {
        let slot = Arc::new(PidSlot::default());
        let mut granted = self.granted.lock();
        granted.retain(|(step, _)| step.strong_count() > 0);
        granted.push((Arc::downgrade(&slot), credential));
        slot
    }

    /// The answer for `prompt` from the running step `peer` descends from, if any.
    fn answer(&self, peer: libc::pid_t, prompt: &str) -> Option<String> {
        let ancestry = ancestry(peer);
        let granted = self.granted.lock();
        granted
            .iter()
            .filter(|(step, _)| {
                step.upgrade()
                    .and_then(|slot| slot.get())
                    .is_some_and(|pid| ancestry.contains(&pid))
            })
            .find_map(|(_, c)| c.answer(prompt).map(str::to_owned))
    }
}

/// `pid` and its ancestors, nearest first, up to `MAX_ANCESTRY` (init and the kernel excluded).
fn ancestry(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let mut out = Vec::new();
    let mut current = pid;
    while current > 1 && out.len() < MAX_ANCESTRY {
        out.push(current);
        match parent_of(current) {
            Some(parent) => current = parent,
            None => break,
        }
    }
    out
}

/// The parent pid from `/proc/<pid>/stat`: the field after the state, which follows the last
/// `)` (the command name in parentheses may itself hold spaces and parentheses).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Binds the askpass socket: any local process may connect (git runs as the agent's git user or
/// as the commands' user); what it is told depends on where it descends from, not on its uid.
pub(crate) fn bind(path: &Path) -> Result<UnixListener, String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // The git user must be able to reach the socket: its directory may have been made private
    // (0700) along with the state directory. Traversal only; nothing there becomes listable.
    if let Some(dir) = path.parent() {
        if let Ok(meta) = std::fs::metadata(dir) {
            // SAFETY: geteuid reads this process's effective uid; it cannot fail.
            let euid = unsafe { libc::geteuid() };
            if meta.uid() == euid && meta.mode() & 0o011 != 0o011 {
                let mode = (meta.mode() & 0o7777) | 0o011;
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
            }
        }
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("cannot open {} to git: {e}", path.display()))?;
    Ok(listener)
}

/// Answers prompts until the listener fails.
pub(crate) async fn serve(listener: UnixListener, credentials: Arc<Credentials>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let credentials = Arc::clone(&credentials);
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(PROMPT_TIMEOUT, answer(stream, &credentials)).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "the askpass socket failed");
                return;
            }
        }
    }
}

async fn answer(mut stream: UnixStream, credentials: &Credentials) {
    let Some(peer) = stream.peer_cred().ok().and_then(|c| c.pid()) else {
        return;
    };
    let mut prompt = Vec::new();
    let mut limited = (&mut stream).take(MAX_PROMPT_BYTES as u64 + 1);
    if limited.read_to_end(&mut prompt).await.is_err() || prompt.len() > MAX_PROMPT_BYTES {
        return;
    }
    let Ok(prompt) = std::str::from_utf8(&prompt) else {
        return;
    };
    match credentials.answer(peer, prompt) {
        Some(line) => {
            let _ = stream.write_all(line.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        None => tracing::warn!(peer, "an askpass prompt from outside an authenticated step"),
    }
}

/// The client side, `mwc-agent askpass PROMPT`: the answer, or `None` when there is none.
pub fn ask(socket: &Path, prompt: &str) -> std::io::Result<Option<String>> {
    use std::io::{Read, Write};
    // By its name from its directory: a socket path may be longer than a socket address holds
    // (a deep data root). This process exists only to ask, so its cwd is its own to change.
    let mut stream = match (socket.parent(), socket.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => {
            std::env::set_current_dir(dir)?;
            std::os::unix::net::UnixStream::connect(name)?
        }
        _ => std::os::unix::net::UnixStream::connect(socket)?,
    };
    stream.set_read_timeout(Some(PROMPT_TIMEOUT))?;
    stream.write_all(prompt.as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    stream
        .take(MAX_PROMPT_BYTES as u64)
        .read_to_string(&mut answer)?;
    Ok(Some(answer).filter(|a| !a.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential() -> Credential {
        Credential::new("https://github.example:8443", "s3cret".into()).expect("a valid base")
    }

    #[test]
    fn test_only_the_prompts_for_the_base_are_answered() {
        let c = credential();
        assert_eq!(
            c.answer("Username for 'https://github.example:8443': "),
            Some(TOKEN_USER)
        );
        assert_eq!(
            c.answer("Password for 'https://x-access-token@github.example:8443': "),
            Some("s3cret")
        );
        for other in [
            "Username for 'https://evil.example': ",
            "Password for 'https://x-access-token@evil.example': ",
            "Password for 'https://someone@github.example:8443': ",
            "Password for 'http://x-access-token@github.example:8443': ",
            "Username for 'https://github.example:8443/owner/repo': ",
            "",
        ] {
            assert_eq!(c.answer(other), None, "{other}");
        }
    }

    #[test]
    fn test_a_bad_base_or_token_is_refused() {
        assert!(Credential::new("ftp://github.com", "t".into()).is_err());
        assert!(Credential::new("https://github.com/path", "t".into()).is_err());
        assert!(Credential::new("https://github.com", String::new()).is_err());
        assert!(Credential::new("https://github.com", "a\nb".into()).is_err());
    }

    #[test]
    fn test_the_parent_is_read_from_proc() {
        let me = std::process::id() as libc::pid_t;
        let parent = std::os::unix::process::parent_id() as libc::pid_t;
        assert_eq!(parent_of(me), Some(parent));
        assert_eq!(ancestry(me).first(), Some(&me));
        assert!(ancestry(me).contains(&parent) || parent <= 1);
    }

    #[test]
    fn test_a_credential_answers_only_descendants_of_its_running_step() {
        let credentials = Credentials::default();
        let step = credentials.grant(credential());
        let prompt = "Password for 'https://x-access-token@github.example:8443': ";
        let me = std::process::id() as libc::pid_t;
        // Not running yet: nobody is answered.
        assert_eq!(credentials.answer(me, prompt), None);
        // This process as the step: it (a descendant of itself) is answered.
        step.set(me);
        assert_eq!(credentials.answer(me, prompt).as_deref(), Some("s3cret"));
        // A process that is not below the step (the parent of this one) is not.
        let parent = std::os::unix::process::parent_id() as libc::pid_t;
        assert_eq!(credentials.answer(parent, prompt), None);
        step.clear();
        assert_eq!(credentials.answer(me, prompt), None);
        // Gone with the exec that held it.
        step.set(me);
        drop(step);
        assert_eq!(credentials.answer(me, prompt), None);
    }
}
