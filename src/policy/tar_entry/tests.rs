use super::*;

const LIMITS: TarLimits = TarLimits {
    max_entries: 100,
    max_bytes: 1000,
};

fn plan() -> TarPlan {
    TarPlan::new(LIMITS)
}

fn file(plan: &mut TarPlan, path: &str) -> Result<Option<TarEntry>, PolicyError> {
    plan.admit(path.as_bytes(), TarKind::File, 1, 0o644, None)
        .map(|e| e.cloned())
}

fn link(plan: &mut TarPlan, path: &str, target: &str) -> Result<Option<TarEntry>, PolicyError> {
    plan.admit(
        path.as_bytes(),
        TarKind::Symlink,
        0,
        0o777,
        Some(target.as_bytes()),
    )
    .map(|e| e.cloned())
}

fn rule(result: Result<Option<TarEntry>, PolicyError>) -> &'static str {
    result.expect_err("refused").rule
}

#[test]
fn names_are_normalised_and_the_root_entry_is_skipped() {
    let mut p = plan();
    assert!(p
        .admit(b"./", TarKind::Dir, 0, 0o755, None)
        .unwrap()
        .is_none());
    let e = file(&mut p, "./a//b/./c.txt").unwrap().unwrap();
    assert_eq!(e.path, "a/b/c.txt");
}

#[test]
fn parent_components_and_absolute_names_are_refused() {
    let mut p = plan();
    assert_eq!(rule(file(&mut p, "../x")), "tar.parent");
    assert_eq!(rule(file(&mut p, "a/../../x")), "tar.parent");
    assert_eq!(rule(file(&mut p, "a/../b")), "tar.parent");
    assert_eq!(rule(file(&mut p, "/etc/x")), "tar.absolute");
}

#[test]
fn special_files_are_refused() {
    let mut p = plan();
    let r = p.admit(b"dev/null", TarKind::Other, 0, 0o666, None);
    assert_eq!(r.unwrap_err().rule, "tar.special");
}

#[test]
fn setuid_and_sticky_bits_are_dropped() {
    let mut p = plan();
    let e = p
        .admit(b"run", TarKind::File, 0, 0o6755 | 0o1000, None)
        .unwrap()
        .unwrap();
    assert_eq!(e.mode, 0o755);
}

#[test]
fn symlinks_out_of_the_root_are_refused() {
    let mut p = plan();
    assert_eq!(
        rule(link(&mut p, "link", "../../outside")),
        "tar.link-outside"
    );
    assert_eq!(rule(link(&mut p, "a/link", "../..")), "tar.link-outside");
    assert_eq!(
        rule(link(&mut p, "link", "/etc/passwd")),
        "tar.link-outside"
    );
    assert!(link(&mut p, "a/b/link", "../c").unwrap().is_some());
}

#[test]
fn nothing_may_lie_under_a_symlink_or_a_file_in_either_order() {
    let mut p = plan();
    link(&mut p, "link", "sub").unwrap();
    assert_eq!(rule(file(&mut p, "link/file")), "tar.clash");
    let mut p = plan();
    file(&mut p, "d/x").unwrap();
    assert_eq!(rule(link(&mut p, "d", "e")), "tar.clash");
    let mut p = plan();
    file(&mut p, "f").unwrap();
    assert_eq!(rule(file(&mut p, "f/g")), "tar.clash");
    assert_eq!(rule(file(&mut p, "f")), "tar.clash");
}

#[test]
fn a_symlink_target_through_another_symlink_is_refused_at_the_end() {
    let mut p = plan();
    // `d/s -> ..` is the root; `x -> d/s/..` would then climb above it.
    link(&mut p, "x", "d/s/..").unwrap();
    link(&mut p, "d/s", "..").unwrap();
    assert_eq!(p.finish().unwrap_err().rule, "tar.link-chain");
    let mut p = plan();
    link(&mut p, "d/s", "..").unwrap();
    link(&mut p, "y", "d/s").unwrap();
    assert_eq!(p.finish().unwrap().len(), 2);
    // Spelled with `.` parts, the target still passes through `s`.
    let mut p = plan();
    link(&mut p, "s", "d").unwrap();
    link(&mut p, "x", "./s/./y").unwrap();
    assert_eq!(p.finish().unwrap_err().rule, "tar.link-chain");
}

#[test]
fn hardlinks_must_name_an_earlier_file_of_the_archive() {
    let mut p = plan();
    let hard = |p: &mut TarPlan, path: &str, target: &str| {
        p.admit(
            path.as_bytes(),
            TarKind::Hardlink,
            0,
            0o644,
            Some(target.as_bytes()),
        )
        .map(|e| e.cloned())
    };
    assert_eq!(rule(hard(&mut p, "h", "../../etc/passwd")), "tar.parent");
    assert_eq!(rule(hard(&mut p, "h", "/etc/passwd")), "tar.absolute");
    assert_eq!(rule(hard(&mut p, "h", "later")), "tar.link-outside");
    file(&mut p, "a").unwrap();
    let e = hard(&mut p, "h", "./a").unwrap().unwrap();
    assert_eq!(e.link.as_deref(), Some("a"));
}

#[test]
fn sizes_and_counts_are_bounded() {
    let mut p = plan();
    let r = p.admit(b"big", TarKind::File, 1001, 0o644, None);
    assert_eq!(r.unwrap_err().rule, "tar.bytes");
    p.admit(b"half", TarKind::File, 600, 0o644, None).unwrap();
    let r = p.admit(b"half2", TarKind::File, 600, 0o644, None);
    assert_eq!(r.unwrap_err().rule, "tar.bytes");
    let mut p = TarPlan::new(TarLimits {
        max_entries: 2,
        max_bytes: 10,
    });
    file(&mut p, "a").unwrap();
    file(&mut p, "b").unwrap();
    assert_eq!(rule(file(&mut p, "c")), "tar.entries");
}

#[test]
fn names_that_are_not_utf8_or_hold_nul_are_refused() {
    let mut p = plan();
    let r = p.admit(b"a\xff", TarKind::File, 0, 0o644, None);
    assert_eq!(r.unwrap_err().rule, "tar.not-utf8");
    assert_eq!(rule(file(&mut p, "a\0b")), "tar.nul");
}

/// A relative name of exactly `len` bytes whose parts are at most 255 bytes.
fn name_of(len: usize) -> String {
    let mut name = String::new();
    while len - name.len() > MAX_COMPONENT_BYTES {
        name.push_str(&"a".repeat(MAX_COMPONENT_BYTES - 1));
        name.push('/');
    }
    name.push_str(&"a".repeat(len - name.len()));
    name
}

#[test]
fn names_and_parts_are_taken_up_to_their_bounds_exactly() {
    let mut p = plan();
    let longest = name_of(MAX_PATH_BYTES);
    assert_eq!(longest.len(), MAX_PATH_BYTES);
    assert!(file(&mut p, &longest).is_ok());
    assert_eq!(
        rule(file(&mut p, &name_of(MAX_PATH_BYTES + 1))),
        "tar.too-long"
    );
    assert!(file(&mut p, &"b".repeat(MAX_COMPONENT_BYTES)).is_ok());
    let part = "c".repeat(MAX_COMPONENT_BYTES + 1);
    assert_eq!(rule(file(&mut p, &part)), "tar.too-long");
}

#[test]
fn files_may_fill_the_byte_budget_exactly() {
    let mut p = plan();
    p.admit(b"most", TarKind::File, 600, 0o644, None).unwrap();
    assert!(p.admit(b"rest", TarKind::File, 400, 0o644, None).is_ok());
    let r = p.admit(b"more", TarKind::File, 1, 0o644, None);
    assert_eq!(r.unwrap_err().rule, "tar.bytes");
    assert_eq!(p.bytes(), 1000, "what the admitted files hold");
}

#[test]
fn a_symlink_target_is_a_non_empty_bounded_path_without_nul() {
    let mut p = plan();
    for bad in ["", "a\0b", &name_of(MAX_PATH_BYTES + 1)] {
        assert_eq!(rule(link(&mut p, "l", bad)), "tar.link-target", "{bad:?}");
    }
    assert!(link(&mut p, "l", &name_of(MAX_PATH_BYTES)).is_ok());
}

#[test]
fn a_directory_may_come_twice_but_nothing_else_may_take_its_name() {
    let dir = |p: &mut TarPlan, path: &str| {
        p.admit(path.as_bytes(), TarKind::Dir, 0, 0o755, None)
            .map(|e| e.cloned())
    };
    let mut p = plan();
    dir(&mut p, "d").unwrap();
    assert!(dir(&mut p, "d").is_ok(), "archivers repeat directories");
    assert_eq!(rule(file(&mut p, "d")), "tar.clash");
}
