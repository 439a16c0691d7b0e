//! Measuring a tree a workspace may be reshaping, the way a copy walks it (directory fds,
//! `O_NOFOLLOW`, one file system): what a copy of it would write, before any copy starts.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::Serialize;

use super::sys;
use super::{child_display, TreeError, MAX_DEPTH};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// The data the regular files hold (their allocated bytes, at most their sizes).
    pub bytes: u64,
    /// Entries below the root.
    pub entries: u64,
    /// The walk stopped at `max_entries`: there is more.
    pub truncated: bool,
    /// The first directory met that is deeper than a walk descends (`MAX_DEPTH`), if any.
    pub too_deep: Option<String>,
}

/// What `root` holds, counting at most `max_entries` entries.
pub fn tree_usage(root: &Path, display: &str, max_entries: u64) -> Result<Usage, TreeError> {
    let dir = sys::open_root(root).map_err(|e| TreeError::io(&e, "cannot open", display))?;
    let dev = sys::fstat(dir.as_fd())
        .map_err(|e| TreeError::io(&e, "cannot stat", display))?
        .st_dev;
    let mut usage = Usage::default();
    walk(dir.as_fd(), display, dev, max_entries, 0, &mut usage)?;
    Ok(usage)
}

fn walk(
    dir: BorrowedFd<'_>,
    display: &str,
    dev: libc::dev_t,
    max_entries: u64,
    depth: usize,
    usage: &mut Usage,
) -> Result<(), TreeError> {
    let names = sys::read_dir_names(dir).map_err(|e| TreeError::io(&e, "cannot list", display))?;
    for name in names {
        if usage.entries >= max_entries {
            usage.truncated = true;
            return Ok(());
        }
        usage.entries += 1;
        let name = name.as_bytes();
        let Ok(st) = sys::fstatat(dir, name, libc::AT_SYMLINK_NOFOLLOW) else {
            continue; // gone since the listing
        };
        if sys::is_regular(&st) {
            let size = u64::try_from(st.st_size).unwrap_or(0);
            let allocated = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512);
            usage.bytes = usage.bytes.saturating_add(size.min(allocated));
        } else if sys::is_dir(&st) && st.st_dev == dev {
            if depth + 1 >= MAX_DEPTH {
                if usage.too_deep.is_none() {
                    usage.too_deep = Some(child_display(display, name));
                }
                continue;
            }
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            let Ok(sub) = sys::openat(dir, name, flags, 0) else {
                continue; // gone or swapped for a link since the stat
            };
            match sys::fstat(sub.as_fd()) {
                Ok(now) if now.st_dev == dev => {}
                _ => continue,
            }
            let here = child_display(display, name);
            walk(sub.as_fd(), &here, dev, max_entries, depth + 1, usage)?;
        }
    }
    Ok(())
}
