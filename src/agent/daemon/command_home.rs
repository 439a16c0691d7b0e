//! Where the agent is its container's root (Modal) and commands run as a user of their own, the
//! agent gives that user its home and, at a workspace's first start, the workspace's files.
//!
//! Both walk file descriptors, one name at a time, `O_NOFOLLOW`, and change only the fd they
//! opened: a link planted where a directory was expected is refused, never followed, so the
//! agent's rights never reach past what the user already owns.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use crate::agent::process::CommandUser;
use crate::host_tree::sys;

/// How deep the first start's claim goes; a deeper image tree keeps the rest as it was.
const MAX_CLAIM_DEPTH: usize = crate::host_tree::MAX_DEPTH;
const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// Opens `name` below `dir` as a directory, creating it with `mode` when missing.
fn open_or_make(dir: BorrowedFd<'_>, name: &[u8], mode: libc::mode_t) -> io::Result<OwnedFd> {
    match sys::openat(dir, name, DIR_FLAGS, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            match sys::mkdirat(dir, name, mode) {
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
                _ => {}
            }
            sys::openat(dir, name, DIR_FLAGS, 0)
        }
        other => other,
    }
}

/// The names of an absolute path of plain names.
fn plain_names(path: &Path) -> Result<Vec<&[u8]>, String> {
    if !path.is_absolute() {
        return Err(format!("{} is not absolute", path.display()));
    }
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(Ok(name.as_bytes())),
            Component::RootDir => None,
            _ => Some(Err(())),
        })
        .collect::<Result<Vec<_>, ()>>()
        .map_err(|()| format!("{} is not a plain path", path.display()))
}

/// Opens the directory at `path`, one name at a time from `/`, never through a link; with
/// `create`, missing directories are made (0755 above, `last_mode` the last).
fn open_dir_path(path: &Path, create: Option<libc::mode_t>) -> Result<OwnedFd, String> {
    let names = plain_names(path)?;
    let fail = |e: io::Error| format!("{}: {e}", path.display());
    let Some((last, parents)) = names.split_last() else {
        return Err("/ is not a directory of its own".into());
    };
    let mut dir = sys::open_root(Path::new("/")).map_err(fail)?;
    for name in parents {
        dir = match create {
            Some(_) => open_or_make(dir.as_fd(), name, 0o755),
            None => sys::openat(dir.as_fd(), name, DIR_FLAGS, 0),
        }
        .map_err(fail)?;
    }
    match create {
        Some(mode) => open_or_make(dir.as_fd(), last, mode),
        None => sys::openat(dir.as_fd(), last, DIR_FLAGS, 0),
    }
    .map_err(fail)
}

/// Makes `home` (an absolute path) a directory that belongs to `user`: the directories above it
/// are made when missing (0755, the agent's), the home itself 0700.
pub(crate) fn prepare_home(home: &Path, user: CommandUser) -> Result<(), String> {
    let fail = |e: String| format!("cannot prepare the commands' home: {e}");
    let fd = open_dir_path(home, Some(0o700)).map_err(fail)?;
    give(fd.as_fd(), user).map_err(|e| fail(format!("{}: {e}", home.display())))
}

/// A mount point the commands write below (a volume's): the directory itself becomes `user`'s
/// when it is root's, and nothing below it changes. Returns whether it changed.
pub(crate) fn claim_dir(path: &Path, user: CommandUser) -> Result<bool, String> {
    let fail = |e: String| format!("cannot give a volume's root to the commands' user: {e}");
    let fd = open_dir_path(path, None).map_err(fail)?;
    let st = sys::fstat(fd.as_fd()).map_err(|e| fail(e.to_string()))?;
    if st.st_uid != 0 {
        return Ok(false);
    }
    sys::fchown(fd.as_fd(), user.uid, user.gid).map_err(|e| fail(e.to_string()))?;
    Ok(true)
}

fn give(fd: BorrowedFd<'_>, user: CommandUser) -> io::Result<()> {
    let st = sys::fstat(fd)?;
    if st.st_uid != user.uid || st.st_gid != user.gid {
        sys::fchown(fd, user.uid, user.gid)?;
    }
    Ok(())
}

/// At a workspace's first start, before any command has run: what the image put in `root`
/// (and `root` itself) that belongs to root becomes `user`'s, so the workspace's own commands
/// can change it. Mounts below it (volumes) are left as they are, and so is whatever belongs to
/// another user. Returns how many entries changed owner.
pub(crate) fn claim_tree(root: &Path, user: CommandUser) -> Result<u64, String> {
    let fail = |e: io::Error| format!("cannot give {} to the commands' user: {e}", root.display());
    let fd = sys::open_root(root).map_err(fail)?;
    let st = sys::fstat(fd.as_fd()).map_err(fail)?;
    let mut changed = 0;
    if st.st_uid == 0 {
        sys::fchown(fd.as_fd(), user.uid, user.gid).map_err(fail)?;
        changed += 1;
    }
    claim_below(fd.as_fd(), st.st_dev, user, 1, &mut changed).map_err(fail)?;
    Ok(changed)
}

fn claim_below(
    dir: BorrowedFd<'_>,
    device: libc::dev_t,
    user: CommandUser,
    depth: usize,
    changed: &mut u64,
) -> io::Result<()> {
    for name in sys::read_dir_names(dir)? {
        let name = name.as_bytes();
        let st = match sys::fstatat(dir, name, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        if st.st_dev != device {
            continue; // a mount point: a volume keeps its own owners
        }
        if sys::is_dir(&st) {
            if depth >= MAX_CLAIM_DEPTH {
                continue;
            }
            let sub = sys::openat(dir, name, DIR_FLAGS, 0)?;
            let sub_st = sys::fstat(sub.as_fd())?;
            if sub_st.st_dev != device {
                continue;
            }
            if sub_st.st_uid == 0 {
                sys::fchown(sub.as_fd(), user.uid, user.gid)?;
                *changed += 1;
            }
            claim_below(sub.as_fd(), device, user, depth + 1, changed)?;
        } else if st.st_uid == 0 {
            sys::lchownat(dir, name, user.uid, user.gid)?;
            *changed += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};

    static NEXT: AtomicU64 = AtomicU64::new(0);

    /// A temporary directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Self {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("mwc-home-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Ownership changes need root; elsewhere these tests check only what needs none.
    fn as_root() -> bool {
        sys::euid() == 0
    }

    const USER: CommandUser = CommandUser {
        uid: 4242,
        gid: 4243,
    };

    #[test]
    fn test_a_missing_home_is_made_with_its_parents_and_given_to_the_user() {
        if !as_root() {
            return;
        }
        let tmp = Scratch::new();
        let home = tmp.path().join("home/workspace");
        prepare_home(&home, USER).unwrap();
        let meta = std::fs::metadata(&home).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (USER.uid, USER.gid));
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let parent = std::fs::metadata(tmp.path().join("home")).unwrap();
        assert_eq!(
            (parent.uid(), parent.permissions().mode() & 0o777),
            (0, 0o755)
        );
        // Again: nothing to do, nothing fails.
        prepare_home(&home, USER).unwrap();
    }

    #[test]
    fn test_a_home_that_is_a_link_is_refused_and_its_target_untouched() {
        let tmp = Scratch::new();
        let target = tmp.path().join("agent-private");
        std::fs::create_dir(&target).unwrap();
        let owner = std::fs::metadata(&target).unwrap().uid();
        std::fs::create_dir(tmp.path().join("home")).unwrap();
        std::os::unix::fs::symlink(&target, tmp.path().join("home/workspace")).unwrap();
        let err = prepare_home(&tmp.path().join("home/workspace"), USER).unwrap_err();
        assert!(err.contains("cannot prepare"), "{err}");
        assert_eq!(std::fs::metadata(&target).unwrap().uid(), owner);
        // A link among the parents is refused the same way.
        std::os::unix::fs::symlink(tmp.path().join("home"), tmp.path().join("via")).unwrap();
        assert!(prepare_home(&tmp.path().join("via/other"), USER).is_err());
        assert!(!tmp.path().join("home/other").exists());
    }

    #[test]
    fn test_a_volume_root_is_claimed_only_when_roots_and_reached_without_links() {
        let tmp = Scratch::new();
        let mount = tmp.path().join("data");
        std::fs::create_dir(&mount).unwrap();
        std::os::unix::fs::symlink(&mount, tmp.path().join("link")).unwrap();
        assert!(claim_dir(&tmp.path().join("link"), USER).is_err());
        assert!(claim_dir(&tmp.path().join("missing"), USER).is_err());
        if !as_root() {
            return;
        }
        assert!(claim_dir(&mount, USER).unwrap());
        assert_eq!(std::fs::metadata(&mount).unwrap().uid(), USER.uid);
        // Already the user's: nothing to do.
        assert!(!claim_dir(&mount, USER).unwrap());
    }

    #[test]
    fn test_a_relative_or_dotted_home_is_refused() {
        for bad in ["home/workspace", "/home/../etc", "/"] {
            assert!(prepare_home(Path::new(bad), USER).is_err(), "{bad}");
        }
    }

    #[test]
    fn test_the_claim_gives_roots_entries_to_the_user_and_follows_no_link() {
        if !as_root() {
            return;
        }
        let tmp = Scratch::new();
        let root = tmp.path().join("workspace");
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::write(root.join("src/deep/file"), b"x").unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"host").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::fs::write(root.join("other"), b"y").unwrap();
        std::os::unix::fs::lchown(root.join("other"), Some(7), Some(7)).unwrap();

        let changed = claim_tree(&root, USER).unwrap();

        assert_eq!(changed, 5); // the root, src, deep, file, the link itself
        for path in ["", "src", "src/deep", "src/deep/file"] {
            assert_eq!(
                std::fs::metadata(root.join(path)).unwrap().uid(),
                USER.uid,
                "{path}"
            );
        }
        assert_eq!(
            std::fs::symlink_metadata(root.join("link")).unwrap().uid(),
            USER.uid
        );
        assert_eq!(std::fs::metadata(&outside).unwrap().uid(), 0);
        assert_eq!(std::fs::metadata(root.join("other")).unwrap().uid(), 7);
    }

    #[test]
    fn test_a_root_that_is_a_link_is_not_claimed() {
        let tmp = Scratch::new();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, tmp.path().join("workspace")).unwrap();
        assert!(claim_tree(&tmp.path().join("workspace"), USER).is_err());
    }
}
