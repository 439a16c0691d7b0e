//! The ref policy as a specification, and a differential test against `git check-ref-format`:
//! git is the reference for its own rules, so our rules are checked against the real thing.

use super::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::Cell;
use std::process::Command;

#[test]
fn accepts_ordinary_names_and_full_commit_ids() {
    let sha1 = "0123456789abcdef0123456789abcdef01234567";
    let sha256 = "0123456789abcdef".repeat(4);
    for name in [
        "main",
        "feature/x",
        "v1.2.3",
        "refs/heads/main",
        "release-2026",
        "a+b",
        "a-b/c",
        "x@y",
        "über",
        "Head",
        "MY_HEAD/x",
        "HEADS",
        sha1,
        &sha256,
        &"a".repeat(MAX_REF_BYTES),
    ] {
        assert_eq!(git_ref(name).as_deref(), Ok(name), "{name:?}");
    }
}

#[test]
fn rejects_each_rule_by_name() {
    let table: &[(&str, &str)] = &[
        ("", "ref.empty"),
        (&"a".repeat(MAX_REF_BYTES + 1), "ref.too-long"),
        ("a\u{0}b", "ref.control-char"),
        ("a\tb", "ref.control-char"),
        ("a\u{7f}", "ref.control-char"),
        ("a b", "ref.space"),
        ("main~1", "ref.revision-syntax"),
        ("main^", "ref.revision-syntax"),
        ("a:b", "ref.revision-syntax"),
        ("a?", "ref.glob"),
        ("a*", "ref.glob"),
        ("a[b", "ref.glob"),
        ("a\\b", "ref.backslash"),
        ("@", "ref.at-sign"),
        ("a@{1}", "ref.at-brace"),
        ("@{-1}", "ref.at-brace"),
        ("a..b", "ref.double-dot"),
        ("/a", "ref.slash"),
        ("a/", "ref.slash"),
        ("a//b", "ref.slash"),
        (".a", "ref.component-dot"),
        ("a/.b", "ref.component-dot"),
        ("a.lock", "ref.lock-suffix"),
        ("a.lock/b", "ref.lock-suffix"),
        ("a.", "ref.trailing-dot"),
        ("-a", "ref.leading-dash"),
        ("--upload-pack=x", "ref.leading-dash"),
        ("+a", "ref.leading-plus"),
        ("a/-b", "ref.component-dash"),
        ("HEAD", "ref.head"),
        ("FETCH_HEAD", "ref.head"),
        ("ORIG_HEAD", "ref.head"),
        ("MERGE-HEAD", "ref.head"),
    ];
    for (name, rule) in table {
        let err = git_ref(name).expect_err(name);
        assert_eq!(err.rule, *rule, "{name:?}: {}", err.message);
        assert!(err.message.contains("ref name"), "{}", err.message);
    }
}

/// Git's verdict, or `None` when git is not installed.
fn git_accepts(name: &str) -> Option<bool> {
    // git's hand-rolled option parser takes any argument starting with '-' for an option. To git's
    // rules '-' is an ordinary character, so asking about 'a' + the rest gives the same verdict.
    let asked = match name.strip_prefix('-') {
        Some(rest) => format!("a{rest}"),
        None => name.to_owned(),
    };
    let status = Command::new("git")
        .args(["check-ref-format", "--allow-onelevel", &asked])
        .status()
        .ok()?;
    match status.code() {
        Some(0) => Some(true),
        Some(1) => Some(false),
        other => panic!("git check-ref-format {asked:?} exited with {other:?}"),
    }
}

/// The extra rule (ours, not git's) that a name git accepts must fail, in the order we check them.
fn expected_extra_rule(name: &str) -> Option<&'static str> {
    let head_like = name.ends_with("HEAD")
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-');
    if name.len() > MAX_REF_BYTES {
        Some("ref.too-long")
    } else if name.starts_with('-') {
        Some("ref.leading-dash")
    } else if name.starts_with('+') {
        Some("ref.leading-plus")
    } else if name.split('/').any(|c| c.starts_with('-')) {
        Some("ref.component-dash")
    } else if head_like {
        Some("ref.head")
    } else {
        None
    }
}

/// Names built from a weighted alphabet rich in the characters and words the rules are about.
fn ref_like() -> impl Strategy<Value = String> {
    let special = prop::sample::select(vec![
        "/",
        "/",
        "/",
        ".",
        ".",
        ".",
        "-",
        "-",
        "+",
        "@",
        "{",
        "}",
        "~",
        "^",
        ":",
        "?",
        "*",
        "[",
        "]",
        "\\",
        " ",
        "\t",
        "\n",
        "\u{1}",
        "\u{1b}",
        "\u{7f}",
        "lock",
        ".lock",
        "HEAD",
        "_HEAD",
        "FETCH_HEAD",
        "@{",
        "..",
        "//",
        "é",
        "日本",
        "\u{85}",
        "\u{200b}",
        "\u{fffd}",
        "\u{1f600}",
    ]);
    let piece = prop_oneof![
        6 => special.prop_map(str::to_owned),
        4 => "[a-zA-Z0-9_]{1,4}",
        1 => "[A-Z_]{1,5}",
        1 => any::<char>().prop_filter("argv cannot carry NUL", |c| *c != '\0').prop_map(String::from),
        1 => Just("x".repeat(120)),
    ];
    prop::collection::vec(piece, 0..10).prop_map(|v| v.concat())
}

#[test]
fn agrees_with_git_check_ref_format() {
    if git_accepts("main").is_none() {
        println!("skipped: git is not installed, so there is nothing to compare against");
        return;
    }
    let mut runner = TestRunner::new(Config {
        cases: crate::policy::tests::test_cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let (accepted, extra) = (Cell::new(0u32), Cell::new(0u32));
    let outcome = runner.run(&ref_like(), |name| {
        let ours = git_ref(&name);
        let git = git_accepts(&name).ok_or_else(|| TestCaseError::fail("git vanished"))?;
        match (&ours, git) {
            (Ok(_), false) => {
                return Err(TestCaseError::fail(format!(
                    "{name:?}: git rejects it, we accept it"
                )))
            }
            (Ok(out), true) => {
                prop_assert_eq!(out, &name);
                prop_assert_eq!(expected_extra_rule(&name), None);
                accepted.set(accepted.get() + 1);
            }
            (Err(e), true) => {
                prop_assert_eq!(Some(e.rule), expected_extra_rule(&name), "{:?}", name);
                extra.set(extra.get() + 1);
            }
            (Err(_), false) => {}
        }
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    let (accepted, extra) = (accepted.get(), extra.get());
    println!("git_ref vs git: {accepted} accepted by both, {extra} refused only by extra rules");
    assert!(accepted > 0, "the generator must produce names git accepts");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

    #[test]
    fn never_panics_and_accepted_names_are_returned_unchanged(text in any::<String>()) {
        if let Ok(out) = git_ref(&text) {
            prop_assert_eq!(&out, &text);
            prop_assert_eq!(git_ref(&out), Ok(out.clone()));
        }
    }

    #[test]
    fn structured_names_are_reaccepted_unchanged(text in ref_like()) {
        if let Ok(out) = git_ref(&text) {
            prop_assert_eq!(git_ref(&out), Ok(out.clone()));
            prop_assert!(!out.starts_with('-'));
            prop_assert!(!out.contains("@{"), "{:?}", out);
            prop_assert!(out.len() <= MAX_REF_BYTES);
        }
    }
}
