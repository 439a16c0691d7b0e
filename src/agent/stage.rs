//! `mwc-agent stage`: copies one file a workspace command wrote (a push's git bundle) into the
//! agent step's own private directory, so that the step's git, which holds a token, reads only
//! a plain file of its own and never a path the workspace controls.
//!
//! The workspace is hostile: the path is resolved beneath the root with the same containment as
//! every `file.*` operation (a symlink out of the root is refused, a FIFO does not hang the
//! open), and the file must be a regular file with one link (a planted hard link to a file of
//! the agent's would have two; the agent's private directory cannot even be reached).
//! Otherwise `git fetch PATH` would read whatever PATH names: another workspace's mirror, a
//! repository of the agent's, a directory it mistakes for one.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::files::Workspace;

/// Copies `path` (beneath `root`) to `to`, a new file, refusing more than `max_bytes`.
/// Returns the bytes copied; on any failure `to` does not exist.
pub fn stage(root: &Path, path: &str, to: &Path, max_bytes: u64) -> Result<u64, String> {
    let ws = Workspace::open(root).map_err(|e| e.to_string())?;
    let rel = ws.rel(path).map_err(|e| e.to_string())?;
    let (file, size) = ws.open_regular(&rel, "stage").map_err(|e| e.to_string())?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat '{path}': {e}"))?;
    check_links(path, &meta)?;
    if size > max_bytes {
        return Err(format!(
            "'{path}' is {size} bytes, more than the {max_bytes} this step takes"
        ));
    }
    copy_new(file, to, max_bytes)
}

fn check_links(path: &str, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if meta.nlink() != 1 {
        return Err(format!(
            "'{path}' has other hard links: not a file a command wrote"
        ));
    }
    Ok(())
}

/// Writes `from` into the new file `to` (never an existing path, never through a symlink);
/// bounded by `max_bytes` however much the file grew since it was measured.
fn copy_new(from: File, to: &Path, max_bytes: u64) -> Result<u64, String> {
    let fail = |e: io::Error| format!("cannot stage into {}: {e}", to.display());
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(to)
        .map_err(fail)?;
    let mut limited = from.take(max_bytes.saturating_add(1));
    let copied = io::copy(&mut limited, &mut out).map_err(|e| format!("cannot copy: {e}"))?;
    if copied > max_bytes {
        return Err(format!(
            "the file grew past the {max_bytes} bytes this step takes"
        ));
    }
    out.flush().map_err(fail)?;
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Dirs {
        base: std::path::PathBuf,
    }

    impl Dirs {
        fn new(name: &str) -> Self {
            let base =
                std::env::temp_dir().join(format!("mwc-stage-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            std::fs::create_dir_all(base.join("root")).unwrap();
            std::fs::create_dir_all(base.join("private")).unwrap();
            Self { base }
        }
        fn root(&self) -> std::path::PathBuf {
            self.base.join("root")
        }
        fn to(&self) -> std::path::PathBuf {
            self.base.join("private/copy")
        }
    }

    impl Drop for Dirs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    fn refused(dirs: &Dirs, path: &str) -> String {
        let err = stage(&dirs.root(), path, &dirs.to(), 1 << 20).unwrap_err();
        assert!(!dirs.to().exists(), "nothing is staged on a refusal");
        err
    }

    #[test]
    fn a_symlink_out_of_the_root_is_refused() {
        let dirs = Dirs::new("symlink");
        std::fs::write(dirs.base.join("private/secret"), "agent's").unwrap();
        symlink("../private/secret", dirs.root().join("push.bundle")).unwrap();
        let err = refused(&dirs, "push.bundle");
        assert!(!err.contains("agent's"), "{err}");
    }

    #[test]
    fn a_directory_or_fifo_is_refused_without_hanging() {
        let dirs = Dirs::new("kinds");
        std::fs::create_dir(dirs.root().join("repo.git")).unwrap();
        refused(&dirs, "repo.git");
        let fifo = std::ffi::CString::new(dirs.root().join("pipe").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path and touches no other memory.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        refused(&dirs, "pipe");
    }

    #[test]
    fn a_hard_link_is_refused() {
        let dirs = Dirs::new("hardlink");
        std::fs::write(dirs.base.join("private/secret"), "agent's").unwrap();
        std::fs::hard_link(dirs.base.join("private/secret"), dirs.root().join("b")).unwrap();
        assert!(refused(&dirs, "b").contains("hard links"));
    }

    #[test]
    fn a_plain_file_is_copied_and_a_big_one_refused() {
        let dirs = Dirs::new("plain");
        std::fs::create_dir(dirs.root().join("sub")).unwrap();
        std::fs::write(dirs.root().join("sub/push.bundle"), "bundle").unwrap();
        let copied = stage(&dirs.root(), "sub/push.bundle", &dirs.to(), 6).unwrap();
        assert_eq!(
            (copied, std::fs::read(dirs.to()).unwrap()),
            (6, b"bundle".to_vec())
        );
        std::fs::remove_file(dirs.to()).unwrap();
        let err = stage(&dirs.root(), "sub/push.bundle", &dirs.to(), 5).unwrap_err();
        assert!(err.contains("more than the 5"), "{err}");
        assert!(!dirs.to().exists());
    }

    #[test]
    fn the_copy_is_bounded_and_never_overwrites() {
        let dirs = Dirs::new("copy");
        let source = dirs.root().join("f");
        std::fs::write(&source, vec![7u8; 100]).unwrap();
        let file = File::open(&source).unwrap();
        assert_eq!(copy_new(file, &dirs.to(), 100).unwrap(), 100);
        assert_eq!(std::fs::read(dirs.to()).unwrap(), vec![7u8; 100]);
        let again = File::open(&source).unwrap();
        assert!(
            copy_new(again, &dirs.to(), 100).is_err(),
            "an existing file is kept"
        );
        std::fs::remove_file(dirs.to()).unwrap();
        let big = File::open(&source).unwrap();
        assert!(copy_new(big, &dirs.to(), 99)
            .unwrap_err()
            .contains("grew past"));
    }
}
