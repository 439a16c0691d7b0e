//! The host's tree operations against trees that are reshaped under them: nothing outside the
//! tree is read, written or removed, and every operation ends.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::*;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A temporary directory with `src`, `dst` and a canary host directory `host` that no
/// operation may copy, change or remove; removed when dropped.
struct Scene {
    base: PathBuf,
}

const CANARY: &str = "HOST-CANARY-4f1e";

impl Scene {
    fn new(name: &str) -> Self {
        let base = std::env::temp_dir().join(format!(
            "mwc-host-tree-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        for dir in ["src", "dst", "host"] {
            fs::create_dir_all(base.join(dir)).unwrap();
        }
        fs::write(base.join("host/secret"), CANARY).unwrap();
        fs::set_permissions(base.join("host/secret"), fs::Permissions::from_mode(0o600)).unwrap();
        Self { base }
    }
    fn src(&self) -> PathBuf {
        self.base.join("src")
    }
    fn dst(&self) -> PathBuf {
        self.base.join("dst")
    }
    fn host(&self) -> PathBuf {
        self.base.join("host")
    }
    fn host_intact(&self) -> bool {
        fs::read_to_string(self.host().join("secret"))
            .ok()
            .as_deref()
            == Some(CANARY)
            && fs::read_dir(self.host()).map(|d| d.count()).unwrap_or(0) == 1
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

fn options() -> CopyOptions {
    CopyOptions {
        max_bytes: 1 << 30,
        max_entries: 1 << 20,
        min_free_bytes: 0,
        owner: Owner::Keep,
        display: "/workspace".into(),
    }
}

/// Every file under `dir` (links not followed) whose bytes hold the canary.
fn canary_in(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            found.extend(canary_in(&path));
        } else if meta.is_file() {
            if let Ok(bytes) = fs::read(&path) {
                if bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()) {
                    found.push(path);
                }
            }
        }
    }
    found
}

#[test]
fn a_copy_keeps_files_directories_links_modes_holes_and_hard_links() {
    let s = Scene::new("keeps");
    fs::create_dir_all(s.src().join("a/b")).unwrap();
    fs::write(s.src().join("a/b/file"), "hello").unwrap();
    fs::set_permissions(s.src().join("a/b/file"), fs::Permissions::from_mode(0o4751)).unwrap();
    std::os::unix::fs::symlink("../outside/anything", s.src().join("a/link")).unwrap();
    fs::hard_link(s.src().join("a/b/file"), s.src().join("a/again")).unwrap();
    let sparse = fs::File::create(s.src().join("sparse")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    drop(sparse);
    fs::set_permissions(s.src().join("a"), fs::Permissions::from_mode(0o555)).unwrap();

    let stats = copy_tree(&s.src(), &s.dst(), &options(), &Progress::new()).unwrap();

    assert_eq!(
        fs::read_to_string(s.dst().join("a/b/file")).unwrap(),
        "hello"
    );
    let mode = fs::metadata(s.dst().join("a/b/file")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o751, "setuid dropped, the rest kept");
    assert_eq!(
        fs::metadata(s.dst().join("a")).unwrap().mode() & 0o7777,
        0o555
    );
    assert_eq!(
        fs::read_link(s.dst().join("a/link")).unwrap(),
        Path::new("../outside/anything")
    );
    let (one, two) = (
        fs::metadata(s.dst().join("a/b/file")).unwrap(),
        fs::metadata(s.dst().join("a/again")).unwrap(),
    );
    assert_eq!(one.ino(), two.ino(), "a hard link stays one");
    let sparse = fs::metadata(s.dst().join("sparse")).unwrap();
    assert_eq!(sparse.len(), 64 << 20);
    assert!(sparse.blocks() * 512 < 1 << 20, "the hole stays a hole");
    assert_eq!(
        (stats.files, stats.hardlinks, stats.symlinks, stats.dirs),
        (2, 1, 1, 2)
    );
    assert_eq!(stats.bytes, 5);
    fs::set_permissions(s.src().join("a"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(s.dst().join("a"), fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn special_files_are_left_out_without_blocking() {
    let s = Scene::new("special");
    let fifo = std::ffi::CString::new(s.src().join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let _sock = std::os::unix::net::UnixListener::bind(s.src().join("sock")).unwrap();
    fs::write(s.src().join("plain"), "x").unwrap();
    let stats = copy_tree(&s.src(), &s.dst(), &options(), &Progress::new()).unwrap();
    assert_eq!((stats.files, stats.skipped), (1, 2));
    assert!(!s.dst().join("fifo").exists() && !s.dst().join("sock").exists());
}

#[test]
fn links_out_of_the_tree_are_copied_as_links_never_followed() {
    let s = Scene::new("links");
    std::os::unix::fs::symlink(s.host(), s.src().join("dir-out")).unwrap();
    std::os::unix::fs::symlink(s.host().join("secret"), s.src().join("file-out")).unwrap();
    copy_tree(&s.src(), &s.dst(), &options(), &Progress::new()).unwrap();
    assert!(canary_in(&s.dst()).is_empty());
    assert!(fs::symlink_metadata(s.dst().join("dir-out"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// A tenant that swaps directories of the tree for symlinks to the host directory and back,
/// as fast as it can, while the host copies and removes the tree.
fn swapper(src: PathBuf, host: PathBuf, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            for i in 0..8 {
                let dir = src.join(format!("d{i}"));
                let aside = src.join(format!(".aside{i}"));
                if fs::rename(&dir, &aside).is_ok() {
                    let _ = std::os::unix::fs::symlink(&host, &dir);
                    swaps += 1;
                    // Long enough for a walk to meet the link where the directory was.
                    thread::sleep(Duration::from_micros(200));
                    let _ = fs::remove_file(&dir);
                    let _ = fs::rename(&aside, &dir);
                }
            }
        }
        swaps
    })
}

#[test]
fn a_copy_under_a_tenant_swapping_in_links_never_holds_the_host_file() {
    let s = Scene::new("race-copy");
    for i in 0..8 {
        let dir = s.src().join(format!("d{i}"));
        fs::create_dir_all(&dir).unwrap();
        for j in 0..20 {
            fs::write(dir.join(format!("f{j}")), "workspace data").unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let racer = swapper(s.src(), s.host(), stop.clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut rounds = 0;
    while rounds < 200 && Instant::now() < deadline {
        let dst = s.base.join(format!("dst{rounds}"));
        fs::create_dir(&dst).unwrap();
        let result = copy_tree(&s.src(), &dst, &options(), &Progress::new());
        assert!(result.is_ok(), "{result:?}");
        let leaked = canary_in(&dst);
        assert!(leaked.is_empty(), "the host file was copied: {leaked:?}");
        fs::remove_dir_all(&dst).unwrap();
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    assert!(racer.join().unwrap() > 0, "the tenant never swapped");
    assert!(s.host_intact());
}

#[test]
fn removal_under_a_tenant_swapping_in_links_leaves_the_host_directory() {
    let s = Scene::new("race-remove");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut rounds = 0;
    while rounds < 100 && Instant::now() < deadline {
        let tree = s.base.join(format!("tree{rounds}"));
        for i in 0..8 {
            let dir = tree.join(format!("d{i}"));
            fs::create_dir_all(&dir).unwrap();
            for j in 0..10 {
                fs::write(dir.join(format!("f{j}")), "x").unwrap();
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let racer = swapper(tree.clone(), s.host(), stop.clone());
        let removed = remove_tree(&tree, "/workspace");
        stop.store(true, Ordering::Relaxed);
        racer.join().unwrap();
        // The tenant may refill what was emptied; the host must be untouched either way.
        assert!(s.host_intact(), "round {rounds}: {removed:?}");
        let _ = remove_tree(&tree, "/workspace");
        rounds += 1;
    }
}

#[test]
fn removal_does_not_follow_links_and_opens_up_locked_directories() {
    let s = Scene::new("remove");
    let tree = s.src().join("t");
    fs::create_dir_all(tree.join("locked/inner")).unwrap();
    fs::write(tree.join("locked/inner/f"), "x").unwrap();
    std::os::unix::fs::symlink(s.host(), tree.join("out")).unwrap();
    fs::set_permissions(tree.join("locked/inner"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(tree.join("locked"), fs::Permissions::from_mode(0o500)).unwrap();
    remove_tree(&tree, "/workspace").unwrap();
    assert!(!tree.exists());
    assert!(s.host_intact());
    remove_tree(&tree, "/workspace").unwrap(); // nothing there: no failure
}

#[test]
fn a_tree_deeper_than_a_walk_holds_is_removed_and_measured() {
    let s = Scene::new("deep");
    let tree = s.src().join("t");
    let mut path = tree.clone();
    for _ in 0..(MAX_DEPTH + 40) {
        path.push("d");
    }
    fs::create_dir_all(&path).unwrap();
    fs::write(path.join("f"), "x").unwrap();
    let usage = tree_usage(&tree, "/workspace", 1 << 20).unwrap();
    assert!(!usage.truncated);
    assert!(usage.too_deep.unwrap().starts_with("/workspace/d/d/"));
    let err = copy_tree(&tree, &s.dst(), &options(), &Progress::new()).unwrap_err();
    assert_eq!(err.kind, TreeErrorKind::Limit);
    remove_tree(&tree, "/workspace").unwrap();
    assert!(!tree.exists());
}

#[test]
fn empty_dir_keeps_the_directory() {
    let s = Scene::new("empty");
    fs::create_dir_all(s.src().join("a/b")).unwrap();
    fs::write(s.src().join("f"), "x").unwrap();
    empty_dir(&s.src(), "/workspace").unwrap();
    assert!(s.src().is_dir());
    assert_eq!(fs::read_dir(s.src()).unwrap().count(), 0);
}

#[test]
fn bounds_stop_the_copy_and_messages_name_no_host_path() {
    let s = Scene::new("bounds");
    fs::create_dir_all(s.src().join("sub")).unwrap();
    fs::write(s.src().join("sub/big"), vec![7u8; 3 << 20]).unwrap();
    let mut small = options();
    small.max_bytes = 1 << 20;
    let err = copy_tree(&s.src(), &s.dst(), &small, &Progress::new()).unwrap_err();
    assert_eq!(err.kind, TreeErrorKind::Limit);
    assert!(
        err.message.contains("/workspace/sub/big"),
        "{}",
        err.message
    );
    assert!(
        !err.message.contains(s.base.to_str().unwrap()),
        "{}",
        err.message
    );

    let mut few = options();
    few.max_entries = 1;
    let err = copy_tree(&s.src(), &s.base.join("dst2"), &few, &Progress::new());
    assert!(err.is_err());
    let missing = copy_tree(&s.base.join("nope"), &s.dst(), &options(), &Progress::new());
    let message = missing.unwrap_err().message;
    assert!(!message.contains(s.base.to_str().unwrap()), "{message}");

    let mut floor = options();
    floor.min_free_bytes = u64::MAX;
    let err = copy_tree(&s.src(), &s.dst(), &floor, &Progress::new()).unwrap_err();
    assert_eq!(err.kind, TreeErrorKind::NoSpace);
}

#[test]
fn a_file_growing_while_copied_is_copied_to_the_size_it_had() {
    let s = Scene::new("growing");
    fs::write(s.src().join("log"), vec![b'a'; 1 << 20]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (path, stop) = (s.src().join("log"), stop.clone());
        thread::spawn(move || {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
            let chunk = vec![b'b'; 64 << 10];
            let mut written = 0u64;
            while !stop.load(Ordering::Relaxed) && written < 512 << 20 {
                f.write_all(&chunk).unwrap();
                written += chunk.len() as u64;
            }
        })
    };
    thread::sleep(Duration::from_millis(20));
    let stats = copy_tree(&s.src(), &s.dst(), &options(), &Progress::new()).unwrap();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let copied = fs::metadata(s.dst().join("log")).unwrap().len();
    assert_eq!(stats.bytes, copied);
    assert!(copied >= 1 << 20);
}

#[test]
fn a_cancelled_copy_stops() {
    let s = Scene::new("cancel");
    fs::write(s.src().join("f"), "x").unwrap();
    let progress = Progress::new();
    progress.cancel();
    let err = copy_tree(&s.src(), &s.dst(), &options(), &progress).unwrap_err();
    assert_eq!(err.kind, TreeErrorKind::Cancelled);
}

#[test]
fn owner_set_gives_every_entry_that_owner() {
    if sys::euid() != 0 {
        eprintln!("skipped: setting another owner needs root");
        return;
    }
    let s = Scene::new("owner");
    fs::create_dir_all(s.src().join("a")).unwrap();
    fs::write(s.src().join("a/f"), "x").unwrap();
    std::os::unix::fs::symlink("f", s.src().join("a/l")).unwrap();
    let mut set = options();
    set.owner = Owner::Set(4242, 4243);
    copy_tree(&s.src(), &s.dst(), &set, &Progress::new()).unwrap();
    for rel in ["", "a", "a/f", "a/l"] {
        let meta = fs::symlink_metadata(s.dst().join(rel)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (4242, 4243), "{rel}");
    }
}
