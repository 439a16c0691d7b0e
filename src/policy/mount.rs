//! Where a volume may be mounted in a workspace: one rule for every driver (the local driver's
//! bubblewrap binds and Modal's volume mounts accept exactly the same paths).

use super::error::{echo, PolicyError};
use super::path::workspace_path;

/// What a sandbox is built from, on either driver: a volume at, under or above one of these
/// would replace the system, the sandbox's own /proc and /dev, its /etc, or the agent's state
/// and socket (both drivers keep them under /run).
pub const SYSTEM_TREES: [&str; 12] = [
    "/bin", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
    "/sys", "/usr",
];

/// Directories a workspace's commands write in: a volume may go inside one, never over one
/// (nor over a parent of one, which would hide it).
pub const WRITABLE_DIRS: [&str; 3] = ["/workspace", "/home/workspace", "/tmp"];

/// The canonical form of the absolute path `text` where a volume may be mounted.
pub fn volume_mount(text: &str) -> Result<String, PolicyError> {
    if !text.starts_with('/') {
        return Err(PolicyError::new(
            "mount.relative",
            "a mount path must be absolute",
            text,
        ));
    }
    // Refused even where it would stay inside: the path means something else once a symlink
    // is involved, and a request should say plainly where it mounts.
    if text.split('/').any(|part| part == "..") {
        return Err(PolicyError::new(
            "mount.dot-dot",
            "a mount path must not contain '..'",
            text,
        ));
    }
    let path = workspace_path("/", text)?;
    if let Some(tree) = SYSTEM_TREES
        .iter()
        .find(|tree| within(&path, tree) || within(tree, &path))
    {
        return Err(PolicyError::without_echo(
            "mount.system",
            format!(
                "cannot mount a volume at {}: the sandbox needs {tree}",
                echo(&path)
            ),
        ));
    }
    if let Some(needed) = WRITABLE_DIRS.iter().find(|dir| within(dir, &path)) {
        return Err(PolicyError::without_echo(
            "mount.hides",
            format!(
                "cannot mount a volume over {}: it would hide {needed}",
                echo(&path)
            ),
        ));
    }
    Ok(path)
}

/// `path` is `root` or lies under it (both canonical).
fn within(path: &str, root: &str) -> bool {
    path == root || root == "/" || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_mount_at_plain_absolute_paths_inside_or_beside_what_commands_use() {
        for (given, canonical) in [
            ("/data", "/data"),
            ("/cache/", "/cache"),
            ("/workspace/models", "/workspace/models"),
            ("/home/workspace/.cache", "/home/workspace/.cache"),
            ("/tmp/shared", "/tmp/shared"),
            ("/mnt//a/./b", "/mnt/a/b"),
            ("/runner", "/runner"),
        ] {
            assert_eq!(volume_mount(given).as_deref(), Ok(canonical), "{given}");
        }
    }

    #[test]
    fn mounts_that_would_replace_or_hide_what_the_sandbox_needs_are_refused() {
        for (bad, rule) in [
            ("data", "mount.relative"),
            ("", "mount.relative"),
            ("/a/../etc", "mount.dot-dot"),
            ("/workspace/..", "mount.dot-dot"),
            ("/", "mount.system"),
            ("/usr", "mount.system"),
            ("/usr/local", "mount.system"),
            ("/run/mwc", "mount.system"),
            ("/proc/self", "mount.system"),
            ("/etc/", "mount.system"),
            ("/workspace", "mount.hides"),
            ("/home", "mount.hides"),
            ("/home/workspace", "mount.hides"),
            ("/tmp", "mount.hides"),
            ("/data\0x", "path.nul"),
        ] {
            assert_eq!(volume_mount(bad).map_err(|e| e.rule), Err(rule), "{bad:?}");
        }
    }
}
