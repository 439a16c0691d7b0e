//! A set of file writes and removals made all at once or not at all (a patch's).
//!
//! Every file is first located beneath the root (its directory held open by fd, symlinks inside
//! followed as `write` follows them) and read through that fd. The commit then checks that no
//! file changed since, writes every new content to a temporary file beside its target (creating
//! missing directories), and only then switches them in: a replaced file is exchanged with its
//! temporary file (`RENAME_EXCHANGE`, so readers see the old content or the new, and the old
//! stays at hand), a new one is renamed into place where nothing has its name, a removed one is
//! renamed to a temporary name. A step that fails undoes the ones before it, in reverse; once all
//! are made, the old contents and the removed files are unlinked.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use super::error::{FileError, FileErrorKind};
use super::resolve::{RelPath, MAX_SYMLINKS};
use super::sys::{self, rename_into, Swap};
use super::write::{temp_name, write_temp, AgentWrite};
use super::Workspace;

/// What a located name held when it was looked at: enough to tell that it changed since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    dev: u64,
    ino: u64,
    size: i64,
    mtime_ns: i64,
    /// `S_IFMT` and the permission bits.
    pub(crate) mode: u32,
}

impl Found {
    fn of(st: &libc::stat) -> Found {
        Found {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime_ns: sys::mtime_ns(st),
            mode: st.st_mode,
        }
    }

    pub(crate) fn is_regular(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    pub(crate) fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    pub(crate) fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }
}

/// A name beneath the root, resolved: the deepest directory of its path that exists (held open),
/// the directories still to create below it, and the final name.
#[derive(Debug)]
pub(crate) struct Target {
    /// The path as the client gave it, for messages.
    pub(crate) display: String,
    /// The normalised path the client named, for results.
    pub(crate) normal: String,
    base: OwnedFd,
    missing: Vec<String>,
    name: String,
    /// What has the name now, when its directory exists.
    pub(crate) found: Option<Found>,
}

/// Identifies the file a target names, whichever path named it: two paths that reach the same
/// file through symlinks have the same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TargetKey {
    dev: u64,
    ino: u64,
    below: String,
}

impl Target {
    pub(crate) fn key(&self) -> Result<TargetKey, FileError> {
        let st = sys::fstat(self.base.as_fd())
            .map_err(|e| FileError::from_io(&e, "patch", &self.display))?;
        let mut below = self.missing.join("/");
        below.push('/');
        below.push_str(&self.name);
        Ok(TargetKey {
            dev: st.st_dev,
            ino: st.st_ino,
            below,
        })
    }

    /// The file's bytes, when it is a regular file of at most `limit` bytes.
    pub(crate) fn read(&self, action: &str, limit: u64) -> Result<Vec<u8>, FileError> {
        let io = |e: std::io::Error| FileError::from_io(&e, action, &self.display);
        let Some(found) = self.found.filter(|_| self.missing.is_empty()) else {
            return Err(FileError::not_found(format!(
                "cannot {action} '{}': no such file",
                self.display
            )));
        };
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW;
        let fd = sys::openat(self.base.as_fd(), self.name.as_bytes(), flags, 0).map_err(io)?;
        let st = sys::fstat(fd.as_fd()).map_err(io)?;
        if Found::of(&st) != found {
            return Err(changed(&self.display));
        }
        if !found.is_regular() {
            return Err(FileError::invalid(format!(
                "cannot {action} '{}': it is not a regular file",
                self.display
            )));
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if size > limit {
            return Err(FileError::limit(format!(
                "cannot {action} '{}': it is {size} bytes, more than the {limit} a patch reads \
                 of one file",
                self.display
            )));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        Ok(bytes)
    }

    /// Whether the name still holds what it held when located.
    fn unchanged(&self) -> Result<bool, FileError> {
        if !self.missing.is_empty() {
            return Ok(true);
        }
        let now = match sys::fstatat(
            self.base.as_fd(),
            self.name.as_bytes(),
            libc::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Some(Found::of(&st)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
            Err(e) => return Err(FileError::from_io(&e, "patch", &self.display)),
        };
        Ok(now == self.found)
    }
}

fn changed(display: &str) -> FileError {
    FileError::conflict(format!(
        "'{display}' changed while the patch was being applied: read it again and make the \
         patch anew"
    ))
}

impl Workspace {
    /// Resolves `path` (relative to the root, or absolute under it) to a target. With
    /// `follow`, a final symlink that stays inside the root is followed (as `write` does) and
    /// one that points out is refused; without, the name itself is the target (as `remove`).
    pub(crate) fn locate(&self, path: &str, follow: bool) -> Result<Target, FileError> {
        let rel = self.rel(path)?;
        let normal = rel.normal();
        let mut current = rel.clone();
        for hop in 0..=MAX_SYMLINKS {
            let (parent, name) = current.split_parent()?;
            let dir = match self.open_dir(&parent, "patch") {
                Ok(dir) => dir,
                // Only a path as the client wrote it (normalised, no `..`) may name
                // directories still to create; one a symlink led to must exist.
                Err(e) if e.kind == FileErrorKind::NotFound && hop == 0 => {
                    let (base, missing) = self.deepest_dir(&parent)?;
                    return Ok(Target {
                        display: rel.display.clone(),
                        normal,
                        base,
                        missing,
                        name,
                        found: None,
                    });
                }
                Err(e) => return Err(e),
            };
            let found = match sys::fstatat(dir.as_fd(), name.as_bytes(), libc::AT_SYMLINK_NOFOLLOW)
            {
                Ok(st) => Some(Found::of(&st)),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
                Err(e) => return Err(FileError::from_io(&e, "patch", &rel.display)),
            };
            if follow && found.is_some_and(|f| f.is_symlink()) {
                let target = sys::readlinkat(dir.as_fd(), name.as_bytes())
                    .map_err(|e| FileError::from_io(&e, "patch", &rel.display))?;
                let target = String::from_utf8_lossy(target.as_bytes()).into_owned();
                if target.starts_with('/') {
                    return Err(FileError::permission(format!(
                        "'{}' is a symlink that points outside the workspace root, and a patch \
                         never follows one",
                        rel.display
                    )));
                }
                // Resolved from the root on the next turn: a `..` that climbs out is refused
                // by the kernel (or the walk) like any other escape.
                current = RelPath {
                    display: rel.display.clone(),
                    rel: format!("{}/{target}", parent.rel),
                };
                continue;
            }
            return Ok(Target {
                display: rel.display.clone(),
                normal,
                base: dir,
                missing: Vec::new(),
                name,
                found,
            });
        }
        Err(FileError::invalid(format!(
            "cannot patch '{}': too many levels of symbolic links",
            rel.display
        )))
    }

    /// The deepest existing directory of `dir` (a path without `..`) and the names below it.
    fn deepest_dir(&self, dir: &RelPath) -> Result<(OwnedFd, Vec<String>), FileError> {
        let parts: Vec<String> = dir.normal().split('/').map(str::to_owned).collect();
        for have in (0..parts.len()).rev() {
            let prefix = RelPath {
                display: dir.display.clone(),
                rel: if have == 0 {
                    ".".into()
                } else {
                    parts[..have].join("/")
                },
            };
            match self.open_dir(&prefix, "patch") {
                Ok(fd) => return Ok((fd, parts[have..].to_vec())),
                Err(e) if e.kind == FileErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Err(FileError::not_found(format!(
            "cannot patch '{}': the workspace root is gone",
            dir.display
        )))
    }
}

/// One change of a set.
#[derive(Debug)]
pub(crate) enum Step {
    /// `data` becomes the target's content, with the permission bits `mode` (a new file's
    /// default when `None`) and the executable bits as `executable` says.
    Write {
        target: Target,
        data: Vec<u8>,
        mode: Option<u32>,
        executable: Option<bool>,
    },
    /// The target (a file or a symlink, not followed) is removed.
    Remove { target: Target },
}

impl Step {
    fn target(&self) -> &Target {
        match self {
            Step::Write { target, .. } | Step::Remove { target } => target,
        }
    }
}

/// What the commit did so far, to undo in reverse or finish.
#[derive(Debug)]
enum Done {
    /// A directory made for a new file: (its parent, its name).
    Dir(OwnedFd, String),
    /// Content staged in a temporary file of a directory, not yet switched in.
    Staged(usize, OwnedFd, String),
    /// The temporary file exchanged with the target: it now holds the old content.
    Exchanged(OwnedFd, String, String),
    /// The temporary file renamed to a new name.
    Created(OwnedFd, String),
    /// The target renamed to a temporary name.
    Removed(OwnedFd, String, String),
}

fn dup(fd: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

/// Makes every step or none. Names in errors are the targets' as the client gave them.
pub(crate) fn commit(steps: Vec<Step>) -> Result<(), FileError> {
    for step in &steps {
        if !step.target().unchanged()? {
            return Err(changed(&step.target().display));
        }
    }
    let mut done: Vec<Done> = Vec::new();
    let result = stage(&steps, &mut done).and_then(|()| switch(&steps, &mut done));
    match result {
        Ok(()) => {
            finish(done);
            Ok(())
        }
        Err(e) => {
            let unrestored = undo(done);
            Err(if unrestored.is_empty() {
                e
            } else {
                FileError::new(
                    FileErrorKind::Io,
                    format!(
                        "{} (and undoing the patch's other changes failed for {}: check them)",
                        e.message,
                        unrestored.join(", ")
                    ),
                )
            })
        }
    }
}

/// Every write's content in a temporary file beside its target (directories made first).
fn stage(steps: &[Step], done: &mut Vec<Done>) -> Result<(), FileError> {
    for (index, step) in steps.iter().enumerate() {
        let Step::Write {
            target,
            data,
            mode,
            executable,
        } = step
        else {
            continue;
        };
        let io = |e: std::io::Error| FileError::from_io(&e, "write", &target.display);
        let mut dir = dup(target.base.as_fd()).map_err(io)?;
        for name in &target.missing {
            match sys::mkdirat(dir.as_fd(), name.as_bytes(), 0o777) {
                Ok(()) => done.push(Done::Dir(dup(dir.as_fd()).map_err(io)?, name.clone())),
                // Made by an earlier step (or meanwhile): used only if it is a directory.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(io(e)),
            }
            let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            dir = sys::openat(dir.as_fd(), name.as_bytes(), flags, 0).map_err(io)?;
        }
        let intent = if target.found.is_some() {
            AgentWrite::Replaces
        } else {
            AgentWrite::Creates
        };
        let temp = write_temp(dir.as_fd(), data, *mode, *executable, intent).map_err(io)?;
        done.push(Done::Staged(index, dir, temp));
    }
    Ok(())
}

/// Every staged write switched in, then every removal made.
fn switch(steps: &[Step], done: &mut Vec<Done>) -> Result<(), FileError> {
    let staged: Vec<(usize, OwnedFd, String)> = done
        .iter()
        .filter_map(|d| match d {
            Done::Staged(index, dir, temp) => {
                dup(dir.as_fd()).ok().map(|dir| (*index, dir, temp.clone()))
            }
            _ => None,
        })
        .collect();
    for (index, dir, temp) in staged {
        let target = steps[index].target();
        let name = target.name.as_bytes();
        let io = |e: std::io::Error| FileError::from_io(&e, "write", &target.display);
        if target.found.is_some() {
            rename_into(dir.as_fd(), temp.as_bytes(), name, Swap::Exchange).map_err(io)?;
            forget_staged(done, &temp);
            done.push(Done::Exchanged(dir, temp, target.name.clone()));
        } else {
            rename_into(dir.as_fd(), temp.as_bytes(), name, Swap::NoReplace).map_err(|e| {
                if e.raw_os_error() == Some(libc::EEXIST) {
                    changed(&target.display)
                } else {
                    io(e)
                }
            })?;
            forget_staged(done, &temp);
            done.push(Done::Created(dir, target.name.clone()));
        }
    }
    for step in steps {
        let Step::Remove { target } = step else {
            continue;
        };
        let io = |e: std::io::Error| FileError::from_io(&e, "delete", &target.display);
        let dir = dup(target.base.as_fd()).map_err(io)?;
        let aside = temp_name(AgentWrite::Removes);
        sys::renameat(dir.as_fd(), target.name.as_bytes(), aside.as_bytes()).map_err(io)?;
        done.push(Done::Removed(dir, target.name.clone(), aside));
    }
    Ok(())
}

fn forget_staged(done: &mut Vec<Done>, temp: &str) {
    done.retain(|d| !matches!(d, Done::Staged(_, _, t) if t == temp));
}

/// Undoes what was done, last first; answers the names that could not be put back.
fn undo(done: Vec<Done>) -> Vec<String> {
    let mut unrestored = Vec::new();
    for step in done.into_iter().rev() {
        let failed = match step {
            Done::Dir(parent, name) => {
                // Left in place if something else was put in it meanwhile.
                let _ = sys::unlinkat(parent.as_fd(), name.as_bytes(), libc::AT_REMOVEDIR);
                None
            }
            Done::Staged(_, dir, temp) => {
                let _ = sys::unlinkat(dir.as_fd(), temp.as_bytes(), 0);
                None
            }
            Done::Exchanged(dir, temp, name) => {
                match rename_into(
                    dir.as_fd(),
                    temp.as_bytes(),
                    name.as_bytes(),
                    Swap::Exchange,
                ) {
                    Ok(()) => {
                        let _ = sys::unlinkat(dir.as_fd(), temp.as_bytes(), 0);
                        None
                    }
                    Err(_) => Some(name),
                }
            }
            Done::Created(dir, name) => sys::unlinkat(dir.as_fd(), name.as_bytes(), 0)
                .err()
                .map(|_| name),
            Done::Removed(dir, name, aside) => rename_into(
                dir.as_fd(),
                aside.as_bytes(),
                name.as_bytes(),
                Swap::NoReplace,
            )
            .err()
            .map(|_| name),
        };
        unrestored.extend(failed);
    }
    unrestored
}

/// Drops what the switched-in steps left behind (old contents, removed files) and makes the
/// renames durable. Nothing here can undo the patch: a failure only leaves a temporary file.
fn finish(done: Vec<Done>) {
    for step in done {
        let dir = match step {
            Done::Exchanged(dir, temp, _) | Done::Removed(dir, _, temp) => {
                if let Err(e) = sys::unlinkat(dir.as_fd(), temp.as_bytes(), 0) {
                    tracing::warn!(error = %e, "a patch left a temporary file behind");
                }
                dir
            }
            Done::Created(dir, _) => dir,
            Done::Dir(..) | Done::Staged(..) => continue,
        };
        if let Ok(readable) = sys::reopen_dir(dir.as_fd()) {
            let _ = File::from(readable).sync_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Sandbox;
    use super::*;

    fn write(ws: &Workspace, path: &str, data: &str) -> Step {
        Step::Write {
            target: ws.locate(path, true).unwrap(),
            data: data.as_bytes().to_vec(),
            mode: None,
            executable: None,
        }
    }

    fn names(sb: &Sandbox) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(sb.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_set_switches_in_every_write_and_removal() {
        let sb = Sandbox::new("changeset-all");
        sb.file("a.txt", "a");
        sb.file("z.txt", "z");
        let ws = sb.ws();
        let steps = vec![
            write(&ws, "a.txt", "A"),
            write(&ws, "d/e/new.txt", "new"),
            Step::Remove {
                target: ws.locate("z.txt", false).unwrap(),
            },
        ];
        commit(steps).unwrap();
        assert_eq!(sb.read("a.txt"), "A");
        assert_eq!(sb.read("d/e/new.txt"), "new");
        assert_eq!(names(&sb), ["a.txt", "d"]);
    }

    #[test]
    fn a_step_that_fails_undoes_the_ones_before_it() {
        let sb = Sandbox::new("changeset-undo");
        sb.file("a.txt", "a");
        sb.file("z.txt", "z");
        let ws = sb.ws();
        let steps = vec![
            write(&ws, "a.txt", "A"),
            write(&ws, "d/made.txt", "made"),
            write(&ws, "new.txt", "new"),
            Step::Remove {
                target: ws.locate("z.txt", false).unwrap(),
            },
        ];
        let mut done = Vec::new();
        stage(&steps, &mut done).unwrap();
        // Someone takes the new file's name between the staging and the switch: its rename
        // fails after a.txt and d/made.txt were switched in, and both are undone.
        sb.file("new.txt", "someone else's");
        let err = switch(&steps, &mut done).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict, "{err}");
        assert!(err.message.contains("'new.txt' changed"), "{err}");
        assert!(undo(done).is_empty());
        assert_eq!(sb.read("a.txt"), "a");
        assert_eq!(sb.read("z.txt"), "z");
        assert_eq!(sb.read("new.txt"), "someone else's");
        assert_eq!(names(&sb), ["a.txt", "new.txt", "z.txt"]);
    }

    #[test]
    fn a_removal_that_fails_puts_back_the_writes_and_removals_before_it() {
        let sb = Sandbox::new("changeset-undo-remove");
        sb.file("a.txt", "a");
        sb.file("y.txt", "y");
        sb.file("z.txt", "z");
        let ws = sb.ws();
        let steps = vec![
            write(&ws, "a.txt", "A"),
            Step::Remove {
                target: ws.locate("y.txt", false).unwrap(),
            },
            Step::Remove {
                target: ws.locate("z.txt", false).unwrap(),
            },
        ];
        let mut done = Vec::new();
        stage(&steps, &mut done).unwrap();
        std::fs::remove_file(sb.at("z.txt")).unwrap();
        let err = switch(&steps, &mut done).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::NotFound, "{err}");
        assert!(undo(done).is_empty());
        assert_eq!(sb.read("a.txt"), "a");
        assert_eq!(sb.read("y.txt"), "y");
        assert_eq!(names(&sb), ["a.txt", "y.txt"]);
    }

    #[test]
    fn a_file_changed_since_it_was_located_stops_the_set_before_any_write() {
        let sb = Sandbox::new("changeset-changed");
        sb.file("a.txt", "a");
        sb.file("b.txt", "b");
        let ws = sb.ws();
        let steps = vec![write(&ws, "a.txt", "A"), write(&ws, "b.txt", "B")];
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(sb.at("b.txt"), "edited").unwrap();
        let err = commit(steps).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict);
        assert!(err.message.contains("'b.txt' changed"), "{err}");
        assert_eq!(
            (sb.read("a.txt"), sb.read("b.txt")),
            ("a".into(), "edited".into())
        );
        assert_eq!(names(&sb), ["a.txt", "b.txt"]);
    }
}
