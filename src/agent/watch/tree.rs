//! The state of one watch: which watch descriptor is which directory (relative to the root),
//! and the translation of kernel records into ordered create/modify/remove/rename events.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use super::inotify::{self, RawEvent};
use super::{EventKind, WatchEnd, WatchEvent};
use crate::agent::files::sys;
use crate::agent::files::{agent_write_temp, AgentWrite};
use crate::agent::files::{FileError, Workspace};

/// A rename's first half, held until its second half (same cookie) arrives or does not.
struct PendingMove {
    cookie: u32,
    path: String,
    is_dir: bool,
}

pub struct Tree {
    ws: Arc<Workspace>,
    pub ino: OwnedFd,
    dirs: HashMap<i32, String>,
    root_wd: i32,
    max_dirs: usize,
    /// Creates already reported by a scan of a new directory, so the kernel's own record of
    /// the same create (when it raced the scan) is not reported twice.
    synthesized: HashSet<String>,
    pending: Option<PendingMove>,
    last: Option<WatchEvent>,
}

/// The agent's own atomic writes as what they mean: its temporary file is never reported, and
/// the temporary file's rename over the final name is that file's create (or modify). A file
/// renamed to a temporary name to be removed (a patch's removal) is that file's removal, and
/// the other half of an exchange (the replaced file taking the temporary name) is not reported.
fn as_meant(event: WatchEvent) -> Option<WatchEvent> {
    let temp = |path: &str| agent_write_temp(path.rsplit('/').next().unwrap_or(path));
    if event.is_dir || event.kind == EventKind::Overflow {
        return Some(event);
    }
    if event.kind == EventKind::Rename {
        let kind = match event.from.as_deref().and_then(temp) {
            Some(AgentWrite::Creates) => EventKind::Create,
            Some(AgentWrite::Replaces) => EventKind::Modify,
            // A removed file put back by a patch that failed.
            Some(AgentWrite::Removes) => EventKind::Create,
            None => {
                return match (temp(&event.path), event.from.clone()) {
                    (Some(AgentWrite::Removes), Some(from)) => Some(WatchEvent {
                        kind: EventKind::Remove,
                        path: from,
                        from: None,
                        ..event
                    }),
                    (Some(_), _) => None,
                    (None, _) => Some(event),
                }
            }
        };
        return Some(WatchEvent {
            kind,
            from: None,
            ..event
        });
    }
    match temp(&event.path) {
        Some(_) => None,
        None => Some(event),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() || dir == "." {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

impl Tree {
    /// Watches `root` (a normalised path relative to the workspace root) and every directory
    /// below it, without reporting what already exists.
    pub fn new(ws: Arc<Workspace>, root: &str, max_dirs: usize) -> Result<Self, FileError> {
        let ino = inotify::init()?;
        let mut tree = Self {
            ws,
            ino,
            dirs: HashMap::new(),
            root_wd: -1,
            max_dirs,
            synthesized: HashSet::new(),
            pending: None,
            last: None,
        };
        tree.root_wd = tree.add_dir(root, true, None)?;
        Ok(tree)
    }

    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Watches `rel` and its subdirectories; when `found` is given, every entry already inside
    /// is pushed to it as a create (a new directory may fill before its watch exists).
    fn add_dir(
        &mut self,
        rel: &str,
        follow: bool,
        mut found: Option<&mut Vec<WatchEvent>>,
    ) -> Result<i32, FileError> {
        if self.dirs.len() >= self.max_dirs {
            return Err(FileError::limit(format!(
                "the watch covers more than {} directories; watch a smaller directory",
                self.max_dirs
            )));
        }
        let path = if rel.is_empty() { "." } else { rel };
        // A subdirectory is opened with O_NOFOLLOW: a symlink planted in the tree is not entered.
        let dir = self
            .ws
            .open_raw(path.as_bytes(), libc::O_RDONLY | libc::O_DIRECTORY, follow)
            .map_err(|e| FileError::from_io(&e, "watch", path))?;
        let wd = inotify::add_watch(self.ino.as_fd(), dir.as_fd(), path)?;
        self.dirs.insert(wd, rel.to_owned());
        let mut names =
            sys::read_dir_names(dir.as_fd()).map_err(|e| FileError::from_io(&e, "watch", path))?;
        names.sort();
        for name in names {
            let Ok(st) = sys::fstatat(dir.as_fd(), name.as_bytes(), libc::AT_SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            let child = join(rel, &name.to_string_lossy());
            let is_dir = sys::is_dir(&st);
            if let Some(found) = found.as_deref_mut() {
                // Only a short race window needs this memory: keep it bounded.
                if self.synthesized.len() >= 4096 {
                    self.synthesized.clear();
                }
                self.synthesized.insert(child.clone());
                found.push(WatchEvent {
                    kind: EventKind::Create,
                    path: child.clone(),
                    from: None,
                    is_dir,
                });
            }
            if is_dir {
                match self.add_dir(&child, false, found.as_deref_mut()) {
                    Ok(_) => {}
                    // Gone or swapped for a non-directory since readdir: nothing to watch.
                    Err(e) if e.kind != crate::agent::files::FileErrorKind::Limit => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(wd)
    }

    /// Stops watching `prefix` and everything below it (it left the tree).
    fn drop_prefix(&mut self, prefix: &str) {
        let below = format!("{prefix}/");
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, p)| *p == prefix || p.starts_with(&below))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            inotify::rm_watch(self.ino.as_fd(), wd);
            self.dirs.remove(&wd);
        }
    }

    /// Renames the watched directories under `from` to live under `to`.
    fn move_prefix(&mut self, from: &str, to: &str) {
        let below = format!("{from}/");
        for path in self.dirs.values_mut() {
            if path == from {
                *path = to.to_owned();
            } else if let Some(rest) = path.strip_prefix(&below) {
                *path = format!("{to}/{rest}");
            }
        }
    }

    /// Reports a held first half of a rename whose partner never came: it left the tree.
    pub fn flush(&mut self, emit: &mut dyn FnMut(WatchEvent)) {
        if let Some(moved) = self.pending.take() {
            if moved.is_dir {
                self.drop_prefix(&moved.path);
            }
            self.synthesized.remove(&moved.path);
            self.send(
                emit,
                WatchEvent {
                    kind: EventKind::Remove,
                    path: moved.path,
                    from: None,
                    is_dir: moved.is_dir,
                },
            );
        }
    }

    fn send(&mut self, emit: &mut dyn FnMut(WatchEvent), event: WatchEvent) {
        let Some(event) = as_meant(event) else {
            return;
        };
        // One write() is one IN_MODIFY: a burst of them on one file is reported once.
        if event.kind == EventKind::Modify && self.last.as_ref() == Some(&event) {
            return;
        }
        self.last = Some(event.clone());
        emit(event);
    }

    /// Translates one record; returns why the watch must end, if it must.
    pub fn handle(&mut self, raw: RawEvent, emit: &mut dyn FnMut(WatchEvent)) -> Option<WatchEnd> {
        if raw.mask & libc::IN_Q_OVERFLOW != 0 {
            self.flush(emit);
            self.send(
                emit,
                WatchEvent {
                    kind: EventKind::Overflow,
                    path: String::new(),
                    from: None,
                    is_dir: false,
                },
            );
            return None;
        }
        if raw.mask & libc::IN_IGNORED != 0 {
            self.dirs.remove(&raw.wd);
        }
        if raw.wd == self.root_wd
            && raw.mask
                & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_UNMOUNT)
                != 0
        {
            self.flush(emit);
            return Some(WatchEnd::RootRemoved);
        }
        let (Some(dir), false) = (self.dirs.get(&raw.wd), raw.name.is_empty()) else {
            return None;
        };
        let path = join(dir, &String::from_utf8_lossy(&raw.name));
        let is_dir = raw.mask & libc::IN_ISDIR != 0;
        if raw.mask & libc::IN_MOVED_TO != 0 {
            if let Some(moved) = self.pending.take_if(|m| m.cookie == raw.cookie) {
                if moved.is_dir {
                    self.move_prefix(&moved.path, &path);
                }
                self.synthesized.remove(&moved.path);
                let event = WatchEvent {
                    kind: EventKind::Rename,
                    path,
                    from: Some(moved.path),
                    is_dir,
                };
                self.send(emit, event);
                return None;
            }
        }
        self.flush(emit);
        if raw.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
            if self.synthesized.remove(&path) && raw.mask & libc::IN_CREATE != 0 {
                return None; // Already reported by the scan of its new parent.
            }
            let mut found = Vec::new();
            if is_dir {
                if let Err(e) = self.add_dir(&path, false, Some(&mut found)) {
                    if e.kind == crate::agent::files::FileErrorKind::Limit {
                        return Some(WatchEnd::Failed(e));
                    }
                }
            }
            self.send(
                emit,
                WatchEvent {
                    kind: EventKind::Create,
                    path,
                    from: None,
                    is_dir,
                },
            );
            for event in found {
                self.send(emit, event);
            }
        } else if raw.mask & libc::IN_MOVED_FROM != 0 {
            self.pending = Some(PendingMove {
                cookie: raw.cookie,
                path,
                is_dir,
            });
        } else if raw.mask & libc::IN_DELETE != 0 {
            self.synthesized.remove(&path);
            self.send(
                emit,
                WatchEvent {
                    kind: EventKind::Remove,
                    path,
                    from: None,
                    is_dir,
                },
            );
        } else if raw.mask & (libc::IN_MODIFY | libc::IN_ATTRIB) != 0 && !is_dir {
            self.send(
                emit,
                WatchEvent {
                    kind: EventKind::Modify,
                    path,
                    from: None,
                    is_dir,
                },
            );
        }
        None
    }
}
