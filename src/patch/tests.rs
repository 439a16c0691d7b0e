//! The patch model as a whole: format detection, the path rules on every path, and properties
//! over generated input (no text makes the parsers panic; a diff of an edit applies back to it).

use proptest::prelude::*;

use super::*;
use crate::policy::workspace_path;

const ROOT: &str = "/workspace";

fn checked(text: &str) -> Result<Patch, PolicyError> {
    let mut patch = Patch::parse(text, None)?;
    patch.check_paths(ROOT, |p| workspace_path(ROOT, p))?;
    Ok(patch)
}

#[test]
fn the_format_is_detected_from_the_first_line() {
    assert_eq!(Format::detect("*** Begin Patch\n"), Format::ApplyPatch);
    assert_eq!(Format::detect("\n  *** Begin Patch\n"), Format::ApplyPatch);
    assert_eq!(
        Format::detect("<<EOF\n*** Begin Patch\n"),
        Format::ApplyPatch
    );
    assert_eq!(Format::detect("--- a/x\n+++ b/x\n"), Format::Unified);
    assert_eq!(Format::detect(""), Format::Unified);
    assert_eq!(Format::from_name("apply_patch"), Some(Format::ApplyPatch));
    assert_eq!(
        Format::from_name(Format::Unified.name()),
        Some(Format::Unified)
    );
    assert_eq!(Format::from_name("git"), None);
}

#[test]
fn a_format_named_wins_over_detection() {
    let envelope = "*** Begin Patch\n*** Delete File: a\n*** End Patch\n";
    let err = Patch::parse(envelope, Some(Format::Unified)).unwrap_err();
    assert_eq!(err.rule, "patch.empty");
    assert_eq!(
        Patch::parse(envelope, None).unwrap().format,
        Format::ApplyPatch
    );
}

#[test]
fn every_path_and_move_target_is_made_canonical() {
    let patch = checked(
        "*** Begin Patch\n*** Update File: src/./a.py\n*** Move to: /workspace/lib/b.py\n\
         *** Delete File: x/../c\n*** End Patch",
    )
    .unwrap();
    assert_eq!(patch.files[0].path, "/workspace/src/a.py");
    let Change::Update { move_to, .. } = &patch.files[0].change else {
        panic!("{:?}", patch.files[0]);
    };
    assert_eq!(move_to.as_deref(), Some("/workspace/lib/b.py"));
    assert_eq!(patch.files[1].path, "/workspace/c");
}

#[test]
fn a_path_out_of_the_workspace_is_refused_naming_its_line() {
    for (text, line) in [
        ("*** Begin Patch\n*** Add File: ../x\n+a\n*** End Patch", 2),
        (
            "*** Begin Patch\n*** Delete File: /etc/passwd\n*** End Patch",
            2,
        ),
        (
            "*** Begin Patch\n*** Update File: a\n*** Move to: ../../b\n*** End Patch",
            2,
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/../y\n+++ b/../y\n@@ -1 +1 @@\n-a\n+b\n",
            6,
        ),
        ("*** Begin Patch\n*** Delete File: .\n*** End Patch", 2),
        ("*** Begin Patch\n*** Delete File: a\u{7}\n*** End Patch", 2),
    ] {
        let err = checked(text).expect_err(text);
        assert_eq!(err.rule, "patch.path", "{text}: {err}");
        assert!(
            err.message.starts_with(&format!("line {line}: the path ")),
            "{text}: {err}"
        );
    }
    let root = checked("*** Begin Patch\n*** Delete File: /workspace\n*** End Patch").unwrap_err();
    assert!(root.message.contains("names the workspace root"), "{root}");
}

#[test]
fn bounds_and_nul_are_refused_before_parsing() {
    let big = format!(
        "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+{}\n",
        "b".repeat(MAX_PATCH_BYTES)
    );
    assert_eq!(
        Patch::parse(&big, None).unwrap_err().rule,
        "patch.too-large"
    );
    let nul = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\0\n";
    let err = Patch::parse(nul, None).unwrap_err();
    assert_eq!(err.rule, "patch.binary");
    assert!(err.message.starts_with("line 5:"), "{err}");
    let many: String = (0..=MAX_PATCH_FILES)
        .map(|i| format!("*** Delete File: f{i}\n"))
        .collect();
    let many = format!("*** Begin Patch\n{many}*** End Patch\n");
    assert_eq!(
        Patch::parse(&many, None).unwrap_err().rule,
        "patch.too-many-files"
    );
}

/// A unified diff that turns `old` into `new` by replacing lines `from..to` with `with`, with
/// up to three lines of context.
fn unified_for(old: &[String], from: usize, to: usize, with: &[String]) -> String {
    let before = from.saturating_sub(3);
    let after = (to + 3).min(old.len());
    let mut body = String::new();
    for line in &old[before..from] {
        body.push_str(&format!(" {line}\n"));
    }
    for line in &old[from..to] {
        body.push_str(&format!("-{line}\n"));
    }
    for line in with {
        body.push_str(&format!("+{line}\n"));
    }
    for line in &old[to..after] {
        body.push_str(&format!(" {line}\n"));
    }
    let old_count = after - before;
    let new_count = old_count - (to - from) + with.len();
    let start = |count: usize| if count == 0 { before } else { before + 1 };
    format!(
        "--- a/f\n+++ b/f\n@@ -{},{old_count} +{},{new_count} @@\n{body}",
        start(old_count),
        start(new_count)
    )
}

fn edited(old: &[String], from: usize, to: usize, with: &[String]) -> String {
    let mut lines: Vec<String> = old[..from].to_vec();
    lines.extend_from_slice(with);
    lines.extend_from_slice(&old[to..]);
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn applied(patch: &str, text: &str) -> String {
    let patch = Patch::parse(patch, None).unwrap_or_else(|e| panic!("{e}\n{patch}"));
    let mut budget = MATCH_BUDGET;
    apply_hunks(&TextFile::parse(text), patch.files[0].hunks(), &mut budget)
        .unwrap_or_else(|e| panic!("{e:?}\n{text}"))
        .render()
}

fn an_edit() -> impl Strategy<Value = (Vec<String>, usize, usize, Vec<String>)> {
    // Few distinct lines, so that the context is often ambiguous.
    let line = prop::sample::select(vec!["a", "b", "c", "", "  a", "}"]).prop_map(String::from);
    (
        prop::collection::vec(line.clone(), 1..40),
        prop::collection::vec(line, 0..5),
    )
        .prop_flat_map(|(old, with)| {
            let len = old.len();
            (Just(old), 0..=len, Just(with)).prop_flat_map(move |(old, from, with)| {
                (Just(old), Just(from), from..=len, Just(with))
            })
        })
}

proptest! {
    #[test]
    fn no_text_makes_either_parser_panic(text in "(?s).{0,400}") {
        let _ = Patch::parse(&text, Some(Format::Unified));
        let _ = Patch::parse(&text, Some(Format::ApplyPatch));
        let _ = Patch::parse(&format!("*** Begin Patch\n{text}\n*** End Patch"), None);
        let _ = Patch::parse(&format!("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n{text}"), None);
    }

    #[test]
    fn hunk_like_lines_never_make_either_parser_panic(
        lines in prop::collection::vec(
            prop::sample::select(vec![
                "@@", "@@ -1 +1 @@", "@@ -0,0 +1,2 @@", "@@ x", " a", "-a", "+a", "", "\\ No newline",
                "--- a/x", "+++ b/x", "--- /dev/null", "+++ /dev/null", "diff --git a/x b/x",
                "*** Begin Patch", "*** End Patch", "*** Add File: x", "*** Update File: x",
                "*** Delete File: x", "*** Move to: y", "*** End of File", "rename from x",
                "rename to y", "new file mode 100755", "new mode 100644",
            ]),
            0..30,
        )
    ) {
        let text = lines.join("\n");
        if let Ok(patch) = Patch::parse(&text, None) {
            for file in &patch.files {
                let mut budget = MATCH_BUDGET;
                let _ = apply_hunks(&TextFile::parse("a\nb\n a\n"), file.hunks(), &mut budget);
            }
        }
    }

    #[test]
    fn a_unified_diff_of_an_edit_applies_back_to_it((old, from, to, with) in an_edit()) {
        let text: String = old.iter().map(|l| format!("{l}\n")).collect();
        let patch = unified_for(&old, from, to, &with);
        if patch.lines().nth(3).is_none() {
            return Ok(()); // an empty edit with no context has no hunk lines
        }
        prop_assert_eq!(applied(&patch, &text), edited(&old, from, to, &with));
    }

    #[test]
    fn an_envelope_of_an_edit_with_unique_context_applies_back_to_it(
        (count, from, to, with) in (1usize..30).prop_flat_map(|n| (Just(n), 0..=n))
            .prop_flat_map(|(n, from)| (Just(n), Just(from), from..=n,
                prop::collection::vec("[a-z ]{0,6}", 0..4)))
    ) {
        let old: Vec<String> = (0..count).map(|i| format!("line {i}")).collect();
        let text: String = old.iter().map(|l| format!("{l}\n")).collect();
        let unified = unified_for(&old, from, to, &with);
        let body: String = unified.lines().skip(3).map(|l| format!("{l}\n")).collect();
        if body.is_empty() {
            return Ok(());
        }
        let envelope = format!("*** Begin Patch\n*** Update File: f\n@@\n{body}*** End Patch\n");
        prop_assert_eq!(applied(&envelope, &text), edited(&old, from, to, &with));
    }
}
