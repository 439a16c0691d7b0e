//! Removing a tree a workspace may be reshaping: every directory is entered by fd from its
//! parent's fd with `O_NOFOLLOW`, entries are unlinked by name in the directory fd that holds
//! them, so a symlink swapped in is removed as a link and nothing outside the tree is touched.
//! Directories a command left unsearchable are opened up through their own fd first; a tree
//! deeper than a walk may hold open is moved up, piece by piece, and removed from there.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::sys;
use super::{child_display, TreeError, TreeErrorKind, MAX_DEPTH};

/// How many times a directory that keeps being refilled under the walk is emptied again.
const ROUNDS: usize = 64;

/// Removes `path` (a directory and everything in it, or a single entry); nothing there is no
/// failure. `path`'s parent is the caller's own directory; `display` names it in messages.
pub fn remove_tree(path: &Path, display: &str) -> Result<(), TreeError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(TreeError::new(
            TreeErrorKind::Io,
            format!("cannot remove {display}"),
        ));
    };
    let name = name.as_bytes();
    let parent = match sys::open_root(parent) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(TreeError::io(&e, "cannot open the directory of", display)),
    };
    let st = match sys::fstatat(parent.as_fd(), name, libc::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(TreeError::io(&e, "cannot stat", display)),
    };
    if sys::is_dir(&st) {
        let dir = open_dir(parent.as_fd(), name, display)?;
        empty(dir.as_fd(), display)?;
    }
    let flags = if sys::is_dir(&st) {
        libc::AT_REMOVEDIR
    } else {
        0
    };
    match sys::unlinkat(parent.as_fd(), name, flags) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
            Err(TreeError::io(&e, "cannot remove", display))
        }
        _ => Ok(()),
    }
}

/// Removes everything in the directory `path`, which stays (it may be a mount point).
pub fn empty_dir(path: &Path, display: &str) -> Result<(), TreeError> {
    let dir = sys::open_root(path).map_err(|e| TreeError::io(&e, "cannot open", display))?;
    empty(dir.as_fd(), display)
}

fn empty(top: BorrowedFd<'_>, display: &str) -> Result<(), TreeError> {
    let dev = sys::fstat(top)
        .map_err(|e| TreeError::io(&e, "cannot stat", display))?
        .st_dev;
    let mut walk = Walk { top, dev, moved: 0 };
    for _ in 0..ROUNDS {
        walk.dir(top, display, 0)?;
        let left =
            sys::read_dir_names(top).map_err(|e| TreeError::io(&e, "cannot list", display))?;
        if left.is_empty() {
            return Ok(());
        }
    }
    Err(TreeError::new(
        TreeErrorKind::Io,
        format!("{display} kept being refilled while it was removed"),
    ))
}

fn open_dir(parent: BorrowedFd<'_>, name: &[u8], display: &str) -> Result<OwnedFd, TreeError> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    match sys::openat(parent, name, flags, 0) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            // Mode 000 and not root: open it up through its own fd, then enter it.
            let path = sys::openat(parent, name, libc::O_PATH | libc::O_NOFOLLOW, 0)
                .map_err(|e| TreeError::io(&e, "cannot open", display))?;
            let st =
                sys::fstat(path.as_fd()).map_err(|e| TreeError::io(&e, "cannot stat", display))?;
            if !sys::is_dir(&st) {
                return Err(TreeError::io(&e, "cannot open", display));
            }
            sys::chmod_owner_rwx(path.as_fd(), st.st_mode & 0o7777)
                .map_err(|e| TreeError::io(&e, "cannot open", display))?;
            sys::openat(parent, name, flags, 0)
                .map_err(|e| TreeError::io(&e, "cannot open", display))
        }
        Err(e) => Err(TreeError::io(&e, "cannot open", display)),
    }
}

struct Walk<'a> {
    top: BorrowedFd<'a>,
    dev: libc::dev_t,
    moved: u64,
}

impl Walk<'_> {
    fn dir(&mut self, dir: BorrowedFd<'_>, display: &str, depth: usize) -> Result<(), TreeError> {
        if sys::euid() != 0 {
            // Removing entries needs write and search on the directory: a command may have
            // taken them away from its own user.
            if let Ok(st) = sys::fstat(dir) {
                let _ = sys::fchmod(dir, (st.st_mode & 0o7777) | 0o700);
            }
        }
        let names = match sys::read_dir_names(dir) {
            Ok(names) => names,
            Err(e) => return Err(TreeError::io(&e, "cannot list", display)),
        };
        for name in names {
            let name = name.as_bytes();
            let here = child_display(display, name);
            let st = match sys::fstatat(dir, name, libc::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(TreeError::io(&e, "cannot stat", &here)),
            };
            if sys::is_dir(&st) {
                if depth + 1 >= MAX_DEPTH {
                    // Too deep to hold every level open: move it up to the top, where the next
                    // round removes it.
                    self.moved += 1;
                    let aside = format!(".mwc-deep-{}", self.moved);
                    match sys::move_entry(dir, name, self.top, aside.as_bytes()) {
                        Ok(()) => continue,
                        Err(e) => return Err(TreeError::io(&e, "cannot remove", &here)),
                    }
                }
                let sub = match open_dir(dir, name, &here) {
                    Ok(sub) => sub,
                    Err(_) if sys::fstatat(dir, name, libc::AT_SYMLINK_NOFOLLOW).is_err() => {
                        continue
                    }
                    Err(e) => return Err(e),
                };
                let sub_st =
                    sys::fstat(sub.as_fd()).map_err(|e| TreeError::io(&e, "cannot stat", &here))?;
                if sub_st.st_dev != self.dev {
                    return Err(TreeError::new(
                        TreeErrorKind::Io,
                        format!("cannot remove {here}: another file system is mounted there"),
                    ));
                }
                self.dir(sub.as_fd(), &here, depth + 1)?;
                match sys::unlinkat(dir, name, libc::AT_REMOVEDIR) {
                    Ok(()) => {}
                    // Gone, or refilled (the next round empties it again).
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::ENOENT) | Some(libc::ENOTEMPTY) | Some(libc::EEXIST)
                        ) => {}
                    Err(e) => return Err(TreeError::io(&e, "cannot remove", &here)),
                }
            } else {
                match sys::unlinkat(dir, name, 0) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    // Swapped for a directory since the stat: the next round sees it as one.
                    Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {}
                    Err(e) => return Err(TreeError::io(&e, "cannot remove", &here)),
                }
            }
        }
        Ok(())
    }
}
