//! The agent's staging directory for archives: outside the workspace, private to the agent,
//! one file per archive named by the gateway (32 lowercase hex digits). Files a gateway left
//! behind (it died mid-transfer) are pruned by age on every archive request and all at start.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::agent::files::FileError;

/// How long an archive may sit untouched before it is taken for abandoned.
pub const STAGING_MAX_AGE: Duration = Duration::from_secs(3600);
/// How many archives may be staged at once (transfers in flight).
pub const STAGING_MAX_FILES: usize = 64;
/// The most bytes all staged archives together may hold: transfers in flight cannot fill the
/// disk the agent's state lives on beyond it.
pub const STAGING_MAX_BYTES: u64 = 16 << 30;

#[derive(Debug, Clone)]
pub struct Staging {
    dir: PathBuf,
}

fn io_error(what: &str, e: &std::io::Error) -> FileError {
    FileError::new(
        crate::agent::files::FileErrorKind::Io,
        format!("cannot {what} the staged archive: {e}"),
    )
}

impl Staging {
    /// Creates the directory (0700) and empties it: no transfer survives its agent.
    pub fn open(dir: &Path) -> Result<Self, String> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let staging = Self {
            dir: dir.to_path_buf(),
        };
        staging.prune(Duration::ZERO);
        Ok(staging)
    }

    fn path(&self, id: &str) -> Result<PathBuf, FileError> {
        let ok = id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !ok {
            return Err(FileError::invalid(
                "'archive_id' must be 32 lowercase hex digits",
            ));
        }
        Ok(self.dir.join(format!("{id}.archive")))
    }

    /// A new, empty archive `id` (an earlier one of that id is replaced).
    pub fn create(&self, id: &str) -> Result<File, FileError> {
        let path = self.path(id)?;
        self.prune(STAGING_MAX_AGE);
        if !path.exists() && self.count() >= STAGING_MAX_FILES {
            return Err(FileError::limit(format!(
                "{STAGING_MAX_FILES} archives are in transfer already; retry when one ends"
            )));
        }
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| io_error("create", &e))
    }

    /// Archive `id` for writing at offsets, created when absent.
    pub fn writable(&self, id: &str) -> Result<File, FileError> {
        let path = self.path(id)?;
        if path.exists() {
            return OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| io_error("open", &e));
        }
        self.create(id)
    }

    /// Archive `id` for reading; `not_found` when it is not staged (removed, or pruned).
    pub fn readable(&self, id: &str) -> Result<File, FileError> {
        let path = self.path(id)?;
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => FileError::not_found(
                    "no such staged archive (it was removed, or abandoned and pruned)",
                ),
                _ => io_error("open", &e),
            })
    }

    /// Removes archive `id`; true when it was there.
    pub fn remove(&self, id: &str) -> Result<bool, FileError> {
        match std::fs::remove_file(self.path(id)?) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error("remove", &e)),
        }
    }

    /// The bytes every staged archive holds.
    pub fn total_bytes(&self) -> u64 {
        std::fs::read_dir(&self.dir).map_or(0, |entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
    }

    fn count(&self) -> usize {
        std::fs::read_dir(&self.dir).map_or(0, |entries| entries.count())
    }

    /// Removes the archives untouched for longer than `max_age`; returns how many went.
    pub fn prune(&self, max_age: Duration) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = SystemTime::now();
        let mut pruned = 0;
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .map(|t| now.duration_since(t).unwrap_or_default() >= max_age)
                .unwrap_or(true);
            if old && std::fs::remove_file(entry.path()).is_ok() {
                pruned += 1;
            }
        }
        if pruned > 0 {
            tracing::info!(pruned, "pruned abandoned staged archives");
        }
        pruned
    }
}
