use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::agent::files::{FileErrorKind, Workspace};
use crate::policy::TarLimits;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A root and an `outside` sibling, removed when dropped.
struct Place(PathBuf);

impl Place {
    fn new() -> Self {
        let base = std::env::temp_dir().join(format!(
            "mwc-archive-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(base.join("root")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/secret"), "SECRET").unwrap();
        Self(base)
    }
    fn root(&self) -> PathBuf {
        self.0.join("root")
    }
    fn at(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }
    fn write(&self, rel: &str, data: &[u8]) {
        let path = self.at(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }
    fn ws(&self) -> Workspace {
        Workspace::open(self.root()).unwrap()
    }
    fn abs(&self, rel: &str) -> String {
        self.at(rel).to_string_lossy().into_owned()
    }
    fn scratch(&self) -> File {
        let path = self
            .0
            .join(format!("scratch-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .unwrap()
    }
    /// Every entry under `rel` (sorted, relative), with file contents and link targets.
    fn tree(&self, rel: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        walk(&self.at(rel), "", &mut out);
        out.sort();
        out
    }
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            let target = std::fs::read_link(entry.path()).unwrap();
            out.push((name, format!("-> {}", target.display())));
        } else if kind.is_dir() {
            out.push((name.clone(), "dir".into()));
            walk(&entry.path(), &format!("{name}/"), out);
        } else {
            out.push((name, std::fs::read_to_string(entry.path()).unwrap()));
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const PACK: PackLimits = PackLimits {
    max_bytes: 1 << 20,
    max_entries: 1000,
    list_max: 1000,
};
const UNPACK: TarLimits = TarLimits {
    max_bytes: 1 << 20,
    max_entries: 1000,
};

#[test]
fn a_packed_tree_unpacks_to_the_same_tree_with_its_symlinks() {
    let place = Place::new();
    place.write("src/a.txt", b"alpha");
    place.write("src/deep/b.txt", b"beta");
    std::os::unix::fs::symlink("deep/b.txt", place.at("src/link")).unwrap();
    let ws = place.ws();
    let mut out = place.scratch();
    let summary = pack(&ws, &place.abs("src"), Some(&mut out), PACK).unwrap();
    assert_eq!(
        (summary.kind, summary.bytes, summary.entries),
        ("dir", 9, 4)
    );
    let outcome = unpack(
        &ws,
        &mut out,
        &place.abs("copy"),
        UnpackFormat::Tar,
        false,
        UNPACK,
    )
    .unwrap();
    assert_eq!(
        (outcome.kind, outcome.entries, outcome.replaced),
        ("dir", 4, false)
    );
    assert_eq!(place.tree("copy"), place.tree("src"));
    // Nothing of the extraction is left beside it.
    let names: Vec<_> = std::fs::read_dir(place.root()).unwrap().collect();
    assert_eq!(names.len(), 2);
}

#[test]
fn a_dry_run_lists_without_staging_and_bounds_hold() {
    let place = Place::new();
    for i in 0..20 {
        place.write(&format!("d/f{i:02}"), b"x");
    }
    let ws = place.ws();
    let listed = pack(
        &ws,
        &place.abs("d"),
        None,
        PackLimits {
            list_max: 5,
            ..PACK
        },
    )
    .unwrap();
    assert_eq!(
        (listed.entries, listed.listing.len(), listed.truncated),
        (20, 5, true)
    );
    let few = PackLimits {
        max_entries: 10,
        ..PACK
    };
    let err = pack(&ws, &place.abs("d"), None, few).unwrap_err();
    assert_eq!(err.kind, FileErrorKind::Limit);
    let small = PackLimits {
        max_bytes: 10,
        ..PACK
    };
    assert_eq!(
        pack(&ws, &place.abs("d"), None, small).unwrap_err().kind,
        FileErrorKind::Limit
    );
}

#[test]
fn a_path_that_is_a_symlink_out_of_the_root_is_refused() {
    let place = Place::new();
    std::os::unix::fs::symlink(place.0.join("outside"), place.at("out")).unwrap();
    std::os::unix::fs::symlink("../outside/secret", place.at("secret")).unwrap();
    let ws = place.ws();
    for path in ["out", "secret"] {
        let err = pack(&ws, &place.abs(path), None, PACK).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Permission, "{path}");
    }
    // Inside a packed tree such links are stored as links, never followed.
    place.write("tree/ok", b"ok");
    std::os::unix::fs::symlink(place.0.join("outside"), place.at("tree/out")).unwrap();
    let mut out = place.scratch();
    pack(&ws, &place.abs("tree"), Some(&mut out), PACK).unwrap();
    let mut bytes = Vec::new();
    out.seek(SeekFrom::Start(0)).unwrap();
    out.read_to_end(&mut bytes).unwrap();
    assert!(!bytes.windows(6).any(|w| w == b"SECRET"));
}

#[test]
fn a_single_file_round_trips_and_overwrite_is_explicit() {
    let place = Place::new();
    place.write("f.bin", &[0, 1, 2, 255]);
    let ws = place.ws();
    let mut out = place.scratch();
    let summary = pack(&ws, &place.abs("f.bin"), Some(&mut out), PACK).unwrap();
    assert_eq!((summary.kind, summary.bytes), ("file", 4));
    unpack(
        &ws,
        &mut out,
        &place.abs("g/copy.bin"),
        UnpackFormat::File,
        false,
        UNPACK,
    )
    .unwrap();
    assert_eq!(
        std::fs::read(place.at("g/copy.bin")).unwrap(),
        [0, 1, 2, 255]
    );
    let err = unpack(
        &ws,
        &mut out,
        &place.abs("g/copy.bin"),
        UnpackFormat::File,
        false,
        UNPACK,
    )
    .unwrap_err();
    assert_eq!(err.kind, FileErrorKind::Conflict);
    place.write("g/copy.bin", b"old");
    let again = unpack(
        &ws,
        &mut out,
        &place.abs("g/copy.bin"),
        UnpackFormat::File,
        true,
        UNPACK,
    )
    .unwrap();
    assert!(again.replaced);
    assert_eq!(
        std::fs::read(place.at("g/copy.bin")).unwrap(),
        [0, 1, 2, 255]
    );
}

#[test]
fn an_existing_directory_is_replaced_whole_only_with_overwrite() {
    let place = Place::new();
    place.write("new/a", b"new");
    place.write("dest/old", b"old");
    let ws = place.ws();
    let mut out = place.scratch();
    pack(&ws, &place.abs("new"), Some(&mut out), PACK).unwrap();
    let err = unpack(
        &ws,
        &mut out,
        &place.abs("dest"),
        UnpackFormat::Tar,
        false,
        UNPACK,
    )
    .unwrap_err();
    assert_eq!(err.kind, FileErrorKind::Conflict);
    assert_eq!(place.tree("dest"), vec![("old".into(), "old".into())]);
    unpack(
        &ws,
        &mut out,
        &place.abs("dest"),
        UnpackFormat::Tar,
        true,
        UNPACK,
    )
    .unwrap();
    assert_eq!(place.tree("dest"), vec![("a".into(), "new".into())]);
}

/// A raw header's name, type and link name, and the entry's data.
type RawEntry<'a> = (&'a str, tar::EntryType, &'a str, &'a [u8]);

/// A tar whose one entry has exactly this raw header (name, type, link), as a hostile client
/// would write it (the builder's own checks would refuse these names).
fn raw_tar(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, kind, link, data) in entries {
        let mut header = tar::Header::new_old();
        let raw = header.as_old_mut();
        raw.name[..name.len()].copy_from_slice(name.as_bytes());
        raw.linkname[..link.len()].copy_from_slice(link.as_bytes());
        header.set_entry_type(*kind);
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap()
}

#[test]
fn hostile_archives_are_refused_with_nothing_written() {
    use tar::EntryType as T;
    let hostile: Vec<Vec<RawEntry<'_>>> = vec![
        vec![
            ("ok", T::Regular, "", b"ok"),
            ("../x", T::Regular, "", b"x"),
        ],
        vec![("/etc/x", T::Regular, "", b"x")],
        vec![("a/../../x", T::Regular, "", b"x")],
        vec![
            ("link", T::Symlink, "../../outside", b""),
            ("link/file", T::Regular, "", b"x"),
        ],
        vec![("hard", T::Link, "../outside/secret", b"")],
        vec![("hard", T::Link, "/etc/passwd", b"")],
        vec![("dev", T::Char, "", b"")],
        vec![("fifo", T::Fifo, "", b"")],
        vec![("big", T::Regular, "", &[0u8; 2048])],
    ];
    let place = Place::new();
    let ws = place.ws();
    let small = TarLimits {
        max_bytes: 1024,
        max_entries: 10,
    };
    for entries in hostile {
        let mut staged = place.scratch();
        staged.write_all(&raw_tar(&entries)).unwrap();
        let err = unpack(
            &ws,
            &mut staged,
            &place.abs("dest"),
            UnpackFormat::Tar,
            true,
            small,
        )
        .unwrap_err();
        assert!(
            matches!(
                err.kind,
                FileErrorKind::InvalidArgument | FileErrorKind::Limit
            ),
            "{entries:?}: {err:?}"
        );
        let names: Vec<_> = std::fs::read_dir(place.root()).unwrap().collect();
        assert!(names.is_empty(), "{entries:?} left {names:?}");
    }
    assert_eq!(
        std::fs::read(place.0.join("outside/secret")).unwrap(),
        b"SECRET"
    );
}

#[test]
fn staging_names_are_checked_and_abandoned_archives_pruned() {
    let place = Place::new();
    let staging = Staging::open(&place.0.join("staging")).unwrap();
    assert!(staging.create("../escape").is_err());
    assert!(staging.create("ABCDEF0123456789abcdef0123456789").is_err());
    let id = "0123456789abcdef0123456789abcdef";
    staging.create(id).unwrap().write_all(b"x").unwrap();
    assert_eq!(staging.total_bytes(), 1);
    assert_eq!(staging.prune(STAGING_MAX_AGE), 0);
    assert!(staging.readable(id).is_ok());
    assert_eq!(staging.prune(std::time::Duration::ZERO), 1);
    assert_eq!(
        staging.readable(id).unwrap_err().kind,
        FileErrorKind::NotFound
    );
}

#[test]
fn implied_directories_and_hardlinks_inside_the_archive_are_extracted() {
    use std::os::unix::fs::MetadataExt;
    use tar::EntryType as T;
    let place = Place::new();
    let ws = place.ws();
    let mut staged = place.scratch();
    let entries: Vec<RawEntry<'_>> = vec![
        ("d/x", T::Regular, "", b"xx"),
        ("d", T::Directory, "", b""),
        ("h", T::Link, "d/x", b""),
        ("s", T::Symlink, "d/x", b""),
    ];
    staged.write_all(&raw_tar(&entries)).unwrap();
    let done = unpack(
        &ws,
        &mut staged,
        &place.abs("out"),
        UnpackFormat::Tar,
        false,
        UNPACK,
    )
    .unwrap();
    assert_eq!((done.entries, done.bytes), (4, 2));
    let x = std::fs::metadata(place.at("out/d/x")).unwrap();
    let h = std::fs::metadata(place.at("out/h")).unwrap();
    assert_eq!((x.ino(), x.nlink()), (h.ino(), 2));
    assert_eq!(
        std::fs::read_link(place.at("out/s")).unwrap(),
        Path::new("d/x")
    );
}
