//! Test fixtures: a unique temporary directory holding a workspace root and an `outside`
//! sibling that no operation may touch, removed when dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::{Resolver, Workspace};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// How long a test that races two threads may run: far more than any takes, a bound and not a
/// measure. Past it the race stops and the test fails, so a broken guarantee that keeps the
/// work from ending fails the test instead of hanging it.
pub const RACE_BOUND: Duration = Duration::from_secs(120);

/// Sets its flag when dropped: the other side of a race stops however this side ends, a
/// failed assertion included (a panic leaves a thread scope only once every thread of it has
/// ended, so a side that waits for the flag would otherwise wait forever).
pub struct SetOnDrop<'a>(pub &'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub struct Sandbox {
    base: PathBuf,
}

impl Sandbox {
    pub fn new(name: &str) -> Self {
        let unique = format!(
            "mwc-files-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let base = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(base.join("root")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/secret.txt"), "SECRET").unwrap();
        Self { base }
    }

    pub fn root(&self) -> PathBuf {
        self.base.join("root")
    }

    pub fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    pub fn at(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub fn file(&self, rel: &str, content: &str) {
        let path = self.at(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub fn dir(&self, rel: &str) {
        std::fs::create_dir_all(self.at(rel)).unwrap();
    }

    pub fn symlink(&self, target: impl AsRef<Path>, rel: &str) {
        std::os::unix::fs::symlink(target, self.at(rel)).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.at(rel)).unwrap()
    }

    /// The workspace with the resolver this kernel picks.
    pub fn ws(&self) -> Workspace {
        Workspace::open(self.root()).unwrap()
    }

    /// One workspace per resolver, so each case runs under openat2 and under the walk.
    pub fn workspaces(&self) -> Vec<Workspace> {
        vec![
            Workspace::with_resolver(self.root(), Resolver::Openat2).unwrap(),
            Workspace::with_resolver(self.root(), Resolver::Walk).unwrap(),
        ]
    }

    /// The outside directory is exactly as the fixture left it.
    pub fn assert_outside_untouched(&self) {
        let mut names: Vec<_> = std::fs::read_dir(self.outside())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, vec![std::ffi::OsString::from("secret.txt")]);
        assert_eq!(
            std::fs::read_to_string(self.outside().join("secret.txt")).unwrap(),
            "SECRET"
        );
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
