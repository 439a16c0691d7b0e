//! The repository policy as a specification: every accepted form, every hostile class, and
//! properties over arbitrary input.

use super::*;
use proptest::prelude::*;

fn repo(owner: &str, name: &str) -> GitHubRepo {
    GitHubRepo {
        owner: owner.into(),
        name: name.into(),
    }
}

#[test]
fn accepts_every_documented_form() {
    let table = [
        ("octo/hello", repo("octo", "hello")),
        ("octo/hello.git", repo("octo", "hello")),
        ("https://github.com/octo/hello", repo("octo", "hello")),
        ("https://github.com/octo/hello.git", repo("octo", "hello")),
        ("https://github.com/octo/hello/", repo("octo", "hello")),
        ("https://github.com/octo/hello.git/", repo("octo", "hello")),
        ("HTTPS://GitHub.COM/Octo/Hello", repo("Octo", "Hello")),
        ("octo/.github", repo("octo", ".github")),
        ("octo/.github.git", repo("octo", ".github")),
        ("a/b", repo("a", "b")),
        ("rust-lang/rust.vim", repo("rust-lang", "rust.vim")),
        (
            "o-1/under_score-dot.name",
            repo("o-1", "under_score-dot.name"),
        ),
        ("octo/git", repo("octo", "git")),
        ("octo/.git.x", repo("octo", ".git.x")),
        (
            &format!("{}/{}", "o".repeat(39), "r".repeat(100)),
            repo(&"o".repeat(39), &"r".repeat(100)),
        ),
    ];
    for (input, expected) in table {
        assert_eq!(github_repo(input), Ok(expected), "input {input:?}");
    }
}

#[test]
fn canonical_forms_are_slug_and_https_url() {
    let r = github_repo("https://GITHUB.com/Octo/Hello.git/").unwrap();
    assert_eq!(r.slug(), "Octo/Hello");
    assert_eq!(r.url(), "https://github.com/Octo/Hello.git");
}

#[test]
fn rejects_every_hostile_class_with_its_rule() {
    let long = format!("octo/{}", "r".repeat(260));
    let table: &[(&str, &str)] = &[
        ("", "repo.empty"),
        (&long, "repo.too-long"),
        // Other schemes and transports.
        ("http://github.com/o/r", "repo.scheme"),
        ("ssh://git@github.com/o/r", "repo.scheme"),
        ("git://github.com/o/r", "repo.scheme"),
        ("file:///srv/o/r", "repo.scheme"),
        ("file:o/r", "repo.scheme"),
        ("ftp://github.com/o/r", "repo.scheme"),
        ("git+ssh://github.com/o/r", "repo.scheme"),
        ("https:github.com/o/r", "repo.scheme"),
        ("https:/github.com/o/r", "repo.scheme"),
        ("ext::sh", "repo.transport"),
        ("git@github.com:o/r", "repo.scp-like"),
        ("github.com:o/r", "repo.scp-like"),
        ("o/r:x", "repo.colon"),
        // Other hosts and look-alikes.
        ("https://github.com.evil.example/o/r", "repo.host"),
        ("https://www.github.com/o/r", "repo.host"),
        ("https://evil.example/github.com/o/r", "repo.host"),
        ("https://gist.github.com/o/r", "repo.host"),
        ("https://github.com./o/r", "repo.host"),
        ("https:///o/r", "repo.host"),
        ("https://githüb.com/o/r", "repo.host"),
        ("evil.example/github.com/o/r", "repo.path-parts"),
        ("github.com/o/r", "repo.path-parts"),
        ("//github.com/o/r", "repo.path-parts"),
        // Userinfo, tokens, ports, query, fragment, escapes.
        ("https://github.com@evil.example/o/r", "repo.userinfo"),
        ("https://ghp_secret@github.com/o/r", "repo.userinfo"),
        (
            "https://x-access-token:ghp_secret@github.com/o/r",
            "repo.userinfo",
        ),
        ("https://github.com:443/o/r", "repo.port"),
        ("https://github.com:/o/r", "repo.port"),
        ("https://github.com/o/r?ref=main", "repo.query"),
        ("o/r?x", "repo.query"),
        ("https://github.com/o/r#main", "repo.fragment"),
        ("https://github.com/o/%72", "repo.percent-escape"),
        ("o%2Fr/x", "repo.percent-escape"),
        // Whitespace, control characters, backslashes.
        (" o/r", "repo.whitespace"),
        ("o/r ", "repo.whitespace"),
        ("o/\u{a0}r", "repo.whitespace"),
        ("o/r\n", "repo.control-char"),
        ("o/\u{0}r", "repo.control-char"),
        ("o/r\u{7f}", "repo.control-char"),
        ("o\\r", "repo.backslash"),
        ("https://github.com\\o/r", "repo.backslash"),
        // Dot segments and path shape.
        ("o/..", "repo.dot-segment"),
        ("../r", "repo.dot-segment"),
        ("o/.", "repo.dot-segment"),
        ("https://github.com/o/../r", "repo.dot-segment"),
        ("https://github.com/o/./r", "repo.dot-segment"),
        ("o/..git", "repo.dot-segment"),
        ("o/...git", "repo.dot-segment"),
        ("o", "repo.path-parts"),
        ("o/r/x", "repo.path-parts"),
        ("o/r/", "repo.path-parts"),
        ("https://github.com/o/r//", "repo.path-parts"),
        ("https://github.com/o/r/tree/main", "repo.path-parts"),
        ("https://github.com/o", "repo.path-parts"),
        ("https://github.com/", "repo.path-parts"),
        ("https://github.com", "repo.path-parts"),
        ("/o/r", "repo.path-parts"),
        ("o//r", "repo.path-parts"),
        // One part empty: refused as a missing part, not as a bad owner or name.
        ("https://github.com//r", "repo.path-parts"),
        ("https://github.com/o//", "repo.path-parts"),
        ("o/.git", "repo.name"),
        // Options in disguise and GitHub's naming rules.
        ("-o/r", "repo.leading-dash"),
        ("o/-r", "repo.leading-dash"),
        ("o/--upload-pack=x", "repo.leading-dash"),
        ("o-/r", "repo.owner"),
        ("o_o/r", "repo.owner"),
        ("o.o/r", "repo.owner"),
        (&format!("{}/r", "o".repeat(40)), "repo.owner"),
        (&format!("o/{}", "r".repeat(101)), "repo.name"),
        ("o/r!", "repo.name"),
        ("o/ré", "repo.name"),
        ("o/r.git.git", "repo.name-git-suffix"),
        ("o/r@v1", "repo.name"),
    ];
    for (input, rule) in table {
        let err = github_repo(input).expect_err(input);
        assert_eq!(err.rule, *rule, "input {input:?}: {}", err.message);
        assert!(
            err.message.to_lowercase().contains("repo") || err.message.contains("OWNER"),
            "message says what is allowed: {}",
            err.message
        );
    }
}

#[test]
fn never_echoes_userinfo_or_tokens() {
    let inputs = [
        "https://ghp_abcdefghijklmnop@github.com/o/r",
        "https://user:hunter2pass@github.com/o/r",
        "https://github.com@evil.example/o/r",
        "ssh://git:s3cret@github.com/o/r",
        "user:s3cret@github.com:o/r",
        "https://github.com/o/r?access_token=ghp_abcdefghijklmnop",
        "ghp_abcdefghijklmnop/r",
        "https://evil.example/github_pat_abcdefghijklmnop/o/r",
    ];
    for input in inputs {
        let err = github_repo(input).expect_err(input);
        for secret in ["ghp_", "hunter2", "s3cret", "github_pat", "evil"] {
            assert!(
                !err.message.contains(secret),
                "{input:?} echoed in {:?}",
                err.message
            );
        }
    }
}

#[test]
fn echoes_a_bounded_prefix_of_harmless_input() {
    let err = github_repo(&format!("https://example.org/{}", "x".repeat(200))).unwrap_err();
    assert_eq!(err.rule, "repo.host");
    assert!(err.message.contains("'https://example.org/"));
    assert!(err.message.len() < 300, "{}", err.message);
}

fn repo_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => "[A-Za-z0-9]{1,6}",
        2 => Just("/".to_owned()),
        1 => Just(".git".to_owned()),
        1 => Just("https://github.com/".to_owned()),
        1 => Just("HTTPS://GITHUB.COM/".to_owned()),
        1 => prop::sample::select(vec![".", "..", "-", "_", "@", ":", "%", "?", "#", "\\", " "])
            .prop_map(str::to_owned),
        1 => any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

    #[test]
    fn never_panics_on_arbitrary_text(text in any::<String>()) {
        let _ = github_repo(&text);
    }

    #[test]
    fn accepted_input_is_canonical_and_reaccepted(text in repo_like()) {
        if let Ok(r) = github_repo(&text) {
            prop_assert_eq!(github_repo(&r.slug()), Ok(r.clone()));
            prop_assert_eq!(github_repo(&r.url()), Ok(r.clone()));
            prop_assert!(valid_owner(&r.owner) && valid_name(&r.name));
            prop_assert!(!r.name.ends_with(".git"));
        }
    }

    #[test]
    fn rejection_messages_are_bounded(text in any::<String>()) {
        if let Err(e) = github_repo(&text) {
            prop_assert!(e.message.chars().count() < 260, "{}", e.message);
            prop_assert!(e.rule.starts_with("repo."));
        }
    }
}

#[test]
fn a_base_url_is_returned_canonical() {
    let table = [
        ("https://github.com", "https://github.com"),
        ("https://github.com/", "https://github.com"),
        ("HTTPS://GitHub.COM", "https://github.com"),
        ("http://127.0.0.1:36823/", "http://127.0.0.1:36823"),
        ("https://ghe.example.org/git", "https://ghe.example.org/git"),
        ("https://git-hub.example.org", "https://git-hub.example.org"),
    ];
    for (input, want) in table {
        assert_eq!(github_base(input).as_deref(), Ok(want), "{input}");
    }
}

#[test]
fn an_input_of_exactly_256_characters_is_judged_by_its_shape_not_its_length() {
    let exact = format!("octo/{}", "r".repeat(256 - 5));
    assert_eq!(exact.chars().count(), 256);
    assert_ne!(github_repo(&exact).unwrap_err().rule, "repo.too-long");
    let over = format!("{exact}r");
    assert_eq!(github_repo(&over).unwrap_err().rule, "repo.too-long");
}

#[test]
fn a_base_url_of_exactly_200_characters_is_taken_and_201_is_not() {
    let url = |len: usize| format!("https://h.example/{}", "a".repeat(len - 18));
    assert_eq!(url(200).chars().count(), 200);
    assert!(github_base(&url(200)).is_ok());
    assert_eq!(github_base(&url(201)).unwrap_err().rule, "base.too-long");
}

#[test]
fn a_base_url_refuses_what_git_could_misread() {
    let table = [
        ("", "base.scheme"),
        ("github.com", "base.scheme"),
        ("ssh://github.com", "base.scheme"),
        ("file:///srv/git", "base.scheme"),
        ("https://user:tok@github.com", "base.userinfo"),
        ("https://github.com?x=1", "base.character"),
        ("https://github.com#frag", "base.character"),
        ("https://github.com/%2e%2e", "base.character"),
        ("https://github.com /x", "base.character"),
        ("https://", "base.host"),
        ("https://:80", "base.host"),
        ("https://-evil.com", "base.host"),
        ("https://git_hub.com", "base.host"),
        ("https://github.com:0", "base.port"),
        ("https://github.com:99999", "base.port"),
        ("https://github.com:", "base.port"),
        ("https://github.com/a/../b", "base.path"),
        ("https://github.com//x", "base.path"),
    ];
    for (input, rule) in table {
        let err = github_base(input).expect_err(input);
        assert_eq!(err.rule, rule, "{input}");
    }
    let err = github_base("https://ghp_secret@github.com").unwrap_err();
    assert!(!err.to_string().contains("ghp_secret"));
}

#[test]
fn a_repository_url_is_rebuilt_onto_the_base() {
    let hello = repo("octo", "hello");
    assert_eq!(
        hello.url_on("https://github.com/").as_deref(),
        Ok("https://github.com/octo/hello.git")
    );
    assert_eq!(hello.url_on("https://github.com").ok(), Some(hello.url()));
    assert_eq!(
        hello.url_on("http://127.0.0.1:8080").as_deref(),
        Ok("http://127.0.0.1:8080/octo/hello.git")
    );
    assert!(hello.url_on("ftp://x").is_err());
}
