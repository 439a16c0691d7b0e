//! The path policy as a specification, and properties over arbitrary paths and roots:
//! whatever is accepted resolves inside the root and is already in canonical form.

use super::*;
use proptest::prelude::*;

const ROOT: &str = "/workspace";

#[test]
fn resolves_relative_and_absolute_paths_inside_the_root() {
    let table = [
        (".", "/workspace"),
        ("./", "/workspace"),
        ("a", "/workspace/a"),
        ("a/b/", "/workspace/a/b"),
        ("a//b/./c", "/workspace/a/b/c"),
        ("a/../b", "/workspace/b"),
        ("a/b/../..", "/workspace"),
        ("/workspace", "/workspace"),
        ("/workspace/", "/workspace"),
        ("/workspace/src/main.rs", "/workspace/src/main.rs"),
        ("//workspace//./src", "/workspace/src"),
        ("/workspace/a/..", "/workspace"),
        ("...", "/workspace/..."),
        ("..a/b..", "/workspace/..a/b.."),
        ("ünïcode/日本", "/workspace/ünïcode/日本"),
    ];
    for (path, expected) in table {
        assert_eq!(
            workspace_path(ROOT, path).as_deref(),
            Ok(expected),
            "{path:?}"
        );
    }
}

#[test]
fn the_filesystem_root_can_be_the_workspace_root() {
    assert_eq!(workspace_path("/", ".").as_deref(), Ok("/"));
    assert_eq!(workspace_path("/", "/etc/x").as_deref(), Ok("/etc/x"));
    assert_eq!(workspace_path("/", "a/b").as_deref(), Ok("/a/b"));
    assert_eq!(
        workspace_path("/", "..").unwrap_err().rule,
        "path.escapes-root"
    );
}

#[test]
fn rejects_each_rule_by_name() {
    let long_part = "x".repeat(MAX_COMPONENT_BYTES + 1);
    let long_path = "ab/".repeat(1400);
    let table: &[(&str, &str)] = &[
        ("", "path.empty"),
        (&long_path, "path.too-long"),
        ("a\u{0}b", "path.nul"),
        ("a\nb", "path.control-char"),
        ("a\u{7f}", "path.control-char"),
        ("a\u{85}", "path.control-char"),
        ("..", "path.escapes-root"),
        ("../workspace/a", "path.escapes-root"),
        ("a/../../workspace/a", "path.escapes-root"),
        ("/workspace/../workspace/a", "path.escapes-root"),
        ("/workspace/..", "path.escapes-root"),
        ("/etc/passwd", "path.outside-root"),
        ("/", "path.outside-root"),
        ("/workspacex/a", "path.outside-root"),
        ("/workspace.evil", "path.outside-root"),
        ("/a/../workspace/x", "path.outside-root"),
        (&long_part, "path.component-too-long"),
    ];
    for (path, rule) in table {
        let err = workspace_path(ROOT, path).expect_err(path);
        assert_eq!(err.rule, *rule, "{path:?}: {}", err.message);
        assert!(err.message.contains("path"), "{}", err.message);
    }
}

#[test]
fn a_component_of_exactly_255_bytes_is_fine() {
    let part = "x".repeat(MAX_COMPONENT_BYTES);
    assert_eq!(workspace_path(ROOT, &part), Ok(format!("{ROOT}/{part}")));
}

#[test]
fn a_path_that_only_becomes_too_long_under_the_root_is_rejected() {
    let path = "ab/".repeat(1364); // 4092 bytes, 4102 once under /workspace
    assert!(path.len() <= MAX_PATH_BYTES);
    assert_eq!(
        workspace_path(ROOT, &path).unwrap_err().rule,
        "path.too-long"
    );
}

/// An absolute path under [`ROOT`] of exactly `len` bytes, already in its resolved form.
fn absolute_path_of(len: usize) -> String {
    let mut path = ROOT.to_owned();
    while path.len() < len {
        let part = (len - path.len() - 1).min(MAX_COMPONENT_BYTES);
        path.push('/');
        path.push_str(&"x".repeat(part));
    }
    path
}

#[test]
fn a_path_of_exactly_4096_bytes_is_fine_and_4097_is_not() {
    let longest = absolute_path_of(MAX_PATH_BYTES);
    assert_eq!(longest.len(), 4096);
    assert_eq!(
        workspace_path(ROOT, &longest).as_deref(),
        Ok(longest.as_str())
    );
    let over = absolute_path_of(MAX_PATH_BYTES + 1);
    assert_eq!(
        workspace_path(ROOT, &over).unwrap_err().rule,
        "path.too-long"
    );
}

#[test]
fn a_path_too_long_as_given_is_refused_even_when_it_resolves_short() {
    let path = format!("a/{}", "./".repeat(2100));
    assert!(path.len() > MAX_PATH_BYTES);
    assert_eq!(
        workspace_path(ROOT, &path).unwrap_err().rule,
        "path.too-long"
    );
}

#[test]
fn the_root_must_be_absolute_and_normalised() {
    for (root, rule) in [
        ("", "path.root-not-absolute"),
        ("workspace", "path.root-not-absolute"),
        ("/workspace/", "path.root-not-normalised"),
        ("/srv//ws", "path.root-not-normalised"),
        ("/srv/./ws", "path.root-not-normalised"),
        ("/srv/../ws", "path.root-not-normalised"),
        ("/srv\nws", "path.root-not-normalised"),
    ] {
        assert_eq!(
            workspace_path(root, "a").unwrap_err().rule,
            rule,
            "{root:?}"
        );
    }
}

fn path_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => "[a-z]{1,3}",
        3 => Just("/".to_owned()),
        2 => Just("..".to_owned()),
        1 => Just(".".to_owned()),
        1 => Just("/workspace".to_owned()),
        1 => any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

fn root_like() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_owned()),
        Just(ROOT.to_owned()),
        "(/[a-z]{1,4}){1,3}",
    ]
}

fn is_inside(root: &str, out: &str) -> bool {
    out == root || root == "/" || out.starts_with(&format!("{root}/"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

    #[test]
    fn never_panics_on_arbitrary_text(root in any::<String>(), path in any::<String>()) {
        let _ = workspace_path(&root, &path);
    }

    #[test]
    fn output_is_inside_root_canonical_and_reaccepted(root in root_like(), path in path_like()) {
        if let Ok(out) = workspace_path(&root, &path) {
            prop_assert!(out.starts_with(&root));
            prop_assert!(is_inside(&root, &out), "{} not inside {}", out, root);
            prop_assert!(out == "/" || !out.ends_with('/'));
            prop_assert!(!out.contains("//") && !out.split('/').any(|c| c == "." || c == ".."));
            prop_assert_eq!(workspace_path(&root, &out), Ok(out.clone()));
            if let Some(rel) = out.strip_prefix(&root) {
                let rel = rel.trim_start_matches('/');
                let rel = if rel.is_empty() { "." } else { rel };
                prop_assert_eq!(workspace_path(&root, rel), Ok(out.clone()));
            }
        }
    }

    #[test]
    fn arbitrary_paths_never_leave_the_root(path in any::<String>()) {
        if let Ok(out) = workspace_path(ROOT, &path) {
            prop_assert!(is_inside(ROOT, &out), "{}", out);
        }
    }
}
