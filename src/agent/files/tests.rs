//! The module's guarantee, containment, specified as tests: no path, symlink or race makes
//! any operation read or write outside the workspace root, under both resolvers.
//!
//! Also the fixtures every test of this module's files shares: a unique temporary directory
//! holding a workspace root and an `outside` sibling that no operation may touch.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::{FileErrorKind, ReadOptions, Resolver, Workspace, WriteOptions};

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

fn read_text(ws: &Workspace, path: &str) -> Result<String, super::FileError> {
    ws.read(path, ReadOptions::default())
        .map(|c| String::from_utf8(c.data).unwrap())
}

#[test]
fn dotdot_that_climbs_out_is_refused_and_inner_dotdot_is_fine() {
    let sb = Sandbox::new("dotdot");
    sb.file("a/b.txt", "inside");
    for ws in sb.workspaces() {
        for path in ["../outside/secret.txt", "a/../../outside/secret.txt", ".."] {
            let err = read_text(&ws, path).unwrap_err();
            assert_eq!(err.kind, FileErrorKind::Permission, "{path}: {err}");
        }
        assert_eq!(read_text(&ws, "a/../a/b.txt").unwrap(), "inside");
    }
}

#[test]
fn absolute_paths_must_lie_under_the_root() {
    let sb = Sandbox::new("absolute");
    sb.file("a.txt", "inside");
    let inside = sb.at("a.txt");
    for ws in sb.workspaces() {
        let err = read_text(&ws, "/etc/passwd").unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Permission);
        assert!(err.message.contains("'/etc/passwd'"), "{err}");
        let secret = sb.outside().join("secret.txt");
        assert!(read_text(&ws, secret.to_str().unwrap()).is_err());
        assert_eq!(read_text(&ws, inside.to_str().unwrap()).unwrap(), "inside");
    }
}

#[test]
fn symlinks_to_etc_and_to_the_parent_are_never_followed_out() {
    let sb = Sandbox::new("links-out");
    sb.symlink("/etc", "etc");
    sb.symlink("..", "up");
    sb.symlink("../outside/secret.txt", "secret");
    sb.symlink(sb.outside(), "abs");
    for ws in sb.workspaces() {
        for path in [
            "etc/passwd",
            "up/outside/secret.txt",
            "secret",
            "abs/secret.txt",
        ] {
            let err = read_text(&ws, path).unwrap_err();
            assert_eq!(err.kind, FileErrorKind::Permission, "{path}: {err}");
            let write = ws.write(
                path,
                b"pwned",
                WriteOptions {
                    create_parents: true,
                },
            );
            assert_eq!(write.unwrap_err().kind, FileErrorKind::Permission, "{path}");
        }
        let edit = super::EditRequest {
            old: "SECRET".into(),
            new: "x".into(),
            expected: None,
        };
        assert!(ws.edit("secret", &edit).is_err());
        assert!(ws
            .write("up/new.txt", b"x", WriteOptions::default())
            .is_err());
        assert!(ws.list("up", Default::default()).is_err());
        assert!(ws.list("etc", Default::default()).is_err());
    }
    sb.assert_outside_untouched();
}

#[test]
fn a_symlink_in_a_middle_component_is_followed_only_while_it_stays_inside() {
    let sb = Sandbox::new("middle");
    sb.file("real/dir/f.txt", "inside");
    sb.symlink("real/dir", "short");
    sb.symlink("../../../outside", "real/dir/back");
    for ws in sb.workspaces() {
        assert_eq!(read_text(&ws, "short/f.txt").unwrap(), "inside");
        ws.write("short/g.txt", b"new", WriteOptions::default())
            .unwrap();
        let err = read_text(&ws, "short/back/secret.txt").unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Permission);
        let err = ws
            .write("short/back/x.txt", b"x", WriteOptions::default())
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Permission);
    }
    assert_eq!(sb.read("real/dir/g.txt"), "new");
    sb.assert_outside_untouched();
}

#[test]
fn a_write_through_a_final_symlink_lands_on_its_inside_target() {
    let sb = Sandbox::new("write-link");
    sb.file("docs/target.md", "old");
    sb.symlink("docs/target.md", "link.md");
    for ws in sb.workspaces() {
        ws.write("link.md", b"new", WriteOptions::default())
            .unwrap();
        assert!(sb
            .at("link.md")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(sb.read("docs/target.md"), "new");
    }
}

#[test]
fn magic_links_are_refused() {
    let sb = Sandbox::new("magic");
    sb.symlink("/proc/self/root/etc", "magic");
    for ws in sb.workspaces() {
        assert!(read_text(&ws, "magic/passwd").is_err());
    }
}

/// How many rounds of work one race runs.
const RACE_ROUNDS: usize = 3000;
/// Swaps `root/d` between a real directory and a symlink to the outside, as fast as it can,
/// while `work` runs; `work` must never see or change anything outside. The race ends when
/// the work does, however it ends, and within [`RACE_BOUND`] in any case.
fn race(resolver: Resolver, target: &str, work: impl Fn(&Workspace, usize) + Send + Sync) {
    let sb = Sandbox::new("race");
    sb.file("d/secret.txt", "inside");
    sb.symlink(
        target.replace("{outside}", sb.outside().to_str().unwrap()),
        "alt",
    );
    let ws = Workspace::with_resolver(sb.root(), resolver).unwrap();
    let stop = AtomicBool::new(false);
    let swaps = AtomicUsize::new(0);
    let deadline = Instant::now() + RACE_BOUND;
    let (d, alt) = (
        std::ffi::CString::new(sb.at("d").to_str().unwrap()).unwrap(),
        std::ffi::CString::new(sb.at("alt").to_str().unwrap()).unwrap(),
    );
    let rounds = thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                // SAFETY: two valid NUL-terminated paths; RENAME_EXCHANGE swaps them atomically.
                let swapped = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        d.as_ptr(),
                        libc::AT_FDCWD,
                        alt.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                if swapped == 0 {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let _stop = SetOnDrop(&stop);
        let mut rounds = 0;
        while rounds < RACE_ROUNDS && Instant::now() < deadline {
            work(&ws, rounds);
            rounds += 1;
        }
        rounds
    });
    assert_eq!(
        rounds, RACE_ROUNDS,
        "the race did not end within {RACE_BOUND:?} ({rounds} of {RACE_ROUNDS} rounds)"
    );
    assert!(
        swaps.load(Ordering::Relaxed) > 0,
        "nothing was swapped: the race tested nothing"
    );
    sb.assert_outside_untouched();
}

#[test]
fn a_symlink_swapped_in_between_check_and_use_never_leaks_a_read() {
    for resolver in [Resolver::Openat2, Resolver::Walk] {
        for target in ["../outside", "{outside}"] {
            race(resolver, target, |ws, _| {
                if let Ok(text) = read_text(ws, "d/secret.txt") {
                    assert_eq!(text, "inside");
                }
                if let Ok(listing) = ws.list("d", Default::default()) {
                    assert!(listing
                        .entries
                        .iter()
                        .all(|e| e.kind != super::EntryKind::File || e.size == 6));
                }
            });
        }
    }
}

#[test]
fn a_symlink_swapped_in_between_check_and_use_never_redirects_a_write() {
    for resolver in [Resolver::Openat2, Resolver::Walk] {
        race(resolver, "../outside", |ws, i| {
            let _ = ws.write(
                &format!("d/new-{}.txt", i % 7),
                b"x",
                WriteOptions::default(),
            );
            let _ = ws.write("d/secret.txt", b"inside", WriteOptions::default());
            let _ = ws.mkdir("d/sub", true);
            let _ = ws.remove("d/sub", true);
            let _ = ws.remove(&format!("d/new-{}.txt", (i + 3) % 7), false);
        });
    }
}
