//! `write`: atomic replace of a file's content: a temporary file in the same directory, fsync,
//! `renameat` over the name, fsync of the directory; the old mode is kept.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::error::{FileError, FileErrorKind};
use super::resolve::{RelPath, MAX_SYMLINKS};
use super::sys;
use super::Workspace;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteOptions {
    /// Create missing parent directories (like `mkdir -p`).
    pub create_parents: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriteOutcome {
    pub path: String,
    pub size: u64,
    /// False when an existing file was replaced.
    pub created: bool,
}

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// The agent's temporary files are `.mwc-write-{pid}-{seq}.{new|old|del}.tmp`: `new` when the
/// rename creates the file, `old` when it replaces one, `del` when a file is renamed to it to
/// be removed (a patch keeps it until every other change is made). Watches hide them and report
/// the rename as what it means for the final name (`watch::tree`).
const TEMP_PREFIX: &str = ".mwc-write-";

/// What the rename of one of the agent's temporary files does to its final name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentWrite {
    Creates,
    Replaces,
    /// The final name is renamed to the temporary one: the file is removed (and renamed back,
    /// should the patch that removed it fail).
    Removes,
}

/// `Some` when `name` (a file name, no directory) is one of the agent's temporary files. The
/// whole shape must match, so a user's file that merely starts alike is never hidden.
pub(crate) fn agent_write_temp(name: &str) -> Option<AgentWrite> {
    let rest = name.strip_prefix(TEMP_PREFIX)?.strip_suffix(".tmp")?;
    let (ids, intent) = rest.rsplit_once('.')?;
    let (pid, seq) = ids.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(seq) {
        return None;
    }
    match intent {
        "new" => Some(AgentWrite::Creates),
        "old" => Some(AgentWrite::Replaces),
        "del" => Some(AgentWrite::Removes),
        _ => None,
    }
}

/// A fresh temporary name for `intent`.
pub(crate) fn temp_name(intent: AgentWrite) -> String {
    let intent = match intent {
        AgentWrite::Creates => "new",
        AgentWrite::Replaces => "old",
        AgentWrite::Removes => "del",
    };
    format!(
        "{TEMP_PREFIX}{}-{}.{intent}.tmp",
        std::process::id(),
        TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

impl Workspace {
    /// Replaces the content of `path` with `data`. A final symlink that stays inside the root is
    /// written through (its target is replaced); one that points outside is refused.
    pub fn write(
        &self,
        path: &str,
        data: &[u8],
        opts: WriteOptions,
    ) -> Result<WriteOutcome, FileError> {
        let rel = self.rel(path)?;
        self.write_rel(&rel, data, opts.create_parents)
    }

    pub(crate) fn write_rel(
        &self,
        rel: &RelPath,
        data: &[u8],
        create_parents: bool,
    ) -> Result<WriteOutcome, FileError> {
        let mut current = rel.clone();
        let mut create_parents = create_parents;
        for hop in 0..=MAX_SYMLINKS {
            // After a hop, an escape is the link's doing: say so rather than blame the path.
            let blame = |e: FileError| {
                if hop > 0 && e.kind == FileErrorKind::Permission {
                    link_outside(&rel.display)
                } else {
                    e
                }
            };
            let (parent, name) = current.split_parent()?;
            let dir = if create_parents {
                self.ensure_dir(&parent)
            } else {
                self.open_dir(&parent, "write")
            }
            .map_err(blame)?;
            let existing =
                match sys::fstatat(dir.as_fd(), name.as_bytes(), libc::AT_SYMLINK_NOFOLLOW) {
                    Ok(st) => Some(st),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
                    Err(e) => return Err(FileError::from_io(&e, "write", &rel.display)),
                };
            if existing.as_ref().is_some_and(sys::is_symlink) {
                let target = sys::readlinkat(dir.as_fd(), name.as_bytes())
                    .map_err(|e| FileError::from_io(&e, "write", &rel.display))?;
                let target = String::from_utf8_lossy(target.as_bytes()).into_owned();
                if target.starts_with('/') {
                    return Err(link_outside(&rel.display));
                }
                // The target is resolved from the root on the next turn, so a `..` that climbs
                // out is refused by the kernel (or the walk) like any other escape.
                current = RelPath {
                    display: rel.display.clone(),
                    rel: format!("{}/{target}", parent.rel),
                };
                create_parents = false;
                continue;
            }
            let mode = match existing {
                Some(st) if sys::is_dir(&st) => {
                    return Err(FileError::conflict(format!(
                        "cannot write '{}': it is a directory",
                        rel.display
                    )))
                }
                Some(st) if !sys::is_regular(&st) => {
                    return Err(FileError::invalid(format!(
                        "cannot write '{}': it is not a regular file",
                        rel.display
                    )))
                }
                Some(st) => Some(st.st_mode & 0o7777),
                None => None,
            };
            replace(dir.as_fd(), name.as_bytes(), data, mode)
                .map_err(|e| FileError::from_io(&e, "write", &rel.display))?;
            return Ok(WriteOutcome {
                path: rel.normal(),
                size: data.len() as u64,
                created: mode.is_none(),
            });
        }
        Err(FileError::invalid(format!(
            "cannot write '{}': too many levels of symbolic links",
            rel.display
        )))
    }
}

fn link_outside(path: &str) -> FileError {
    FileError::permission(format!(
        "cannot write '{path}': it is a symlink that points outside the workspace root, and a \
         write never follows one"
    ))
}

/// Writes `data` to a fresh temporary name in `dir` and renames it over `name`. Readers see the
/// old content or the new one, never a mix; a failure removes the temporary file.
fn replace(
    dir: BorrowedFd<'_>,
    name: &[u8],
    data: &[u8],
    mode: Option<u32>,
) -> std::io::Result<()> {
    let intent = if mode.is_some() {
        AgentWrite::Replaces
    } else {
        AgentWrite::Creates
    };
    let temp = write_temp(dir, data, mode, None, intent)?;
    if let Err(e) = sys::renameat(dir, temp.as_bytes(), name) {
        let _ = sys::unlinkat(dir, temp.as_bytes(), 0);
        return Err(e);
    }
    // The rename is durable only once the directory is: fsync it too.
    File::from(sys::reopen_dir(dir)?).sync_all()
}

/// The first half of an atomic write: `data` in a fresh temporary file in `dir`, synced, with
/// the permission bits `mode` (a new file's default when `None`) and the executable bits set
/// or cleared where `executable` says (each where the read bit is, as `chmod +x` under a umask
/// does). Answers the temporary name; a failure removes the file.
pub(crate) fn write_temp(
    dir: BorrowedFd<'_>,
    data: &[u8],
    mode: Option<u32>,
    executable: Option<bool>,
    intent: AgentWrite,
) -> std::io::Result<String> {
    let temp = temp_name(intent);
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    let fd = sys::openat(dir, temp.as_bytes(), flags, 0o666)?;
    let result = (|| {
        let mut file = File::from(fd);
        let mode = match (mode, executable) {
            (Some(mode), _) => Some(mode),
            (None, Some(_)) => Some(file.metadata()?.permissions().mode() & 0o7777),
            (None, None) => None,
        };
        if let Some(mode) = mode {
            let mode = match executable {
                Some(true) => mode | ((mode & 0o444) >> 2),
                Some(false) => mode & !0o111,
                None => mode,
            };
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        file.write_all(data)?;
        file.sync_all()
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = sys::unlinkat(dir, temp.as_bytes(), 0);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_whole_shape_of_a_temporary_name_is_the_agents() {
        use super::{agent_write_temp, temp_name, AgentWrite};
        for intent in [
            AgentWrite::Creates,
            AgentWrite::Replaces,
            AgentWrite::Removes,
        ] {
            assert_eq!(agent_write_temp(&temp_name(intent)), Some(intent));
        }
        for name in [
            ".mwc-write-1-2.tmp",
            ".mwc-write-1-2.new.tmp.bak",
            ".mwc-write-x-2.new.tmp",
            ".mwc-write--2.old.tmp",
            ".mwc-write-1-2.other.tmp",
            "mwc-write-1-2.new.tmp",
            "notes.txt",
        ] {
            assert_eq!(agent_write_temp(name), None, "{name}");
        }
    }

    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    use super::super::tests::{Sandbox, SetOnDrop, RACE_BOUND};
    use super::*;

    #[test]
    fn write_creates_parents_only_on_request() {
        let sb = Sandbox::new("write-parents");
        let ws = sb.ws();
        let err = ws
            .write("a/b/c.txt", b"x", WriteOptions::default())
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::NotFound);
        let out = ws
            .write(
                "a/b/c.txt",
                b"x",
                WriteOptions {
                    create_parents: true,
                },
            )
            .unwrap();
        assert!(out.created);
        assert_eq!(sb.read("a/b/c.txt"), "x");
    }

    #[test]
    fn write_keeps_the_mode_of_the_file_it_replaces() {
        let sb = Sandbox::new("write-mode");
        sb.file("run.sh", "old");
        std::fs::set_permissions(sb.at("run.sh"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let out = sb
            .ws()
            .write("run.sh", b"new", WriteOptions::default())
            .unwrap();
        assert!(!out.created);
        let mode = std::fs::metadata(sb.at("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o700);
    }

    #[test]
    fn write_over_a_directory_is_a_conflict() {
        let sb = Sandbox::new("write-dir");
        sb.dir("d");
        let err = sb
            .ws()
            .write("d", b"x", WriteOptions::default())
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict);
    }

    #[test]
    fn atomic_write_never_leaves_a_partial_file_visible() {
        let sb = Sandbox::new("write-atomic");
        let size = 256 * 1024;
        let (a, b) = (vec![b'a'; size], vec![b'b'; size]);
        std::fs::write(sb.at("f"), &a).unwrap();
        let ws = sb.ws();
        let done = AtomicBool::new(false);
        let deadline = Instant::now() + RACE_BOUND;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // The reader stops however the writes end, a failed one included.
                let _done = SetOnDrop(&done);
                for i in 0..200 {
                    let data = if i % 2 == 0 { &b } else { &a };
                    ws.write("f", data, WriteOptions::default()).unwrap();
                }
            });
            let mut seen = 0;
            while !done.load(Ordering::Relaxed) {
                assert!(
                    Instant::now() < deadline,
                    "the writes did not end within {RACE_BOUND:?}"
                );
                let content = std::fs::read(sb.at("f")).unwrap();
                assert_eq!(content.len(), size, "a reader saw a partial file");
                assert!(content == a || content == b, "a reader saw mixed content");
                seen += 1;
            }
            assert!(seen > 0);
        });
        let names: Vec<_> = std::fs::read_dir(sb.root())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("f")],
            "no temporary file is left behind"
        );
    }
}
