//! Finding `nvidia-smi` on the daemon's `PATH`, and only a copy the workspace cannot have
//! written: the daemon runs it with its own rights, so a program the workspace could replace
//! (one under the workspace root, or in a directory or file its user may write) is never run.

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The program's name.
pub(crate) const NVIDIA_SMI: &str = "nvidia-smi";

/// The first `name` on `path_var` (absolute directories only) that is a trusted executable file,
/// resolved through its links. `None` when there is none: the machine has no GPU tool.
pub(crate) fn find(name: &str, path_var: Option<&OsStr>, workspace_root: &Path) -> Option<PathBuf> {
    let root = std::fs::canonicalize(workspace_root).ok();
    std::env::split_paths(path_var?)
        .filter(|dir| dir.is_absolute())
        .filter_map(|dir| std::fs::canonicalize(dir.join(name)).ok())
        .find(|program| trusted(program, root.as_deref()))
}

/// An executable regular file outside the workspace root that it and its directory are owned by
/// root or by this daemon's user and writable by no one else.
fn trusted(program: &Path, root: Option<&Path>) -> bool {
    if root.is_some_and(|root| program.starts_with(root)) {
        return false;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let safe = |path: &Path, is_file: bool| {
        std::fs::metadata(path).is_ok_and(|meta| {
            let mode = meta.permissions().mode();
            let owner_ok = meta.uid() == 0 || meta.uid() == me;
            let kind_ok = if is_file {
                meta.is_file() && mode & 0o111 != 0
            } else {
                meta.is_dir()
            };
            owner_ok && kind_ok && mode & 0o022 == 0
        })
    };
    safe(program, true) && program.parent().is_some_and(|dir| safe(dir, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mwc-smi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    fn program(dir: &Path, mode: u32) -> PathBuf {
        let path = dir.join(NVIDIA_SMI);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn path_of(dirs: &[&Path]) -> OsString {
        std::env::join_paths(dirs).unwrap()
    }

    #[test]
    fn the_first_trusted_copy_on_the_path_is_found() {
        let bin = temp("bin");
        let empty = temp("empty");
        let ws = temp("ws");
        let found = program(&bin, 0o755);
        let path = path_of(&[&empty, &bin]);
        assert_eq!(find(NVIDIA_SMI, Some(&path), &ws), Some(found));
        assert_eq!(find(NVIDIA_SMI, None, &ws), None);
        assert_eq!(find(NVIDIA_SMI, Some(&path_of(&[&empty])), &ws), None);
        for dir in [bin, empty, ws] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn a_copy_the_workspace_could_have_written_is_never_run() {
        let ws = temp("ws2");
        let inside = ws.join("bin");
        std::fs::create_dir_all(&inside).unwrap();
        program(&inside, 0o755);
        assert_eq!(find(NVIDIA_SMI, Some(&path_of(&[&inside])), &ws), None);

        let other = temp("writable");
        program(&other, 0o777);
        assert_eq!(find(NVIDIA_SMI, Some(&path_of(&[&other])), &ws), None);
        let shared = temp("shared-dir");
        program(&shared, 0o755);
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(find(NVIDIA_SMI, Some(&path_of(&[&shared])), &ws), None);
        let plain = temp("not-executable");
        program(&plain, 0o644);
        assert_eq!(find(NVIDIA_SMI, Some(&path_of(&[&plain])), &ws), None);
        let relative = OsString::from("relative/bin");
        assert_eq!(find(NVIDIA_SMI, Some(&relative), &ws), None);
        for dir in [ws, other, shared, plain] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}
