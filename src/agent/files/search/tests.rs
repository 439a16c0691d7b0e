//! Search, specified as tests: `.gitignore` is honoured, every bound holds, binary files and
//! symlinks out of the root are skipped.

use super::super::tests::Sandbox;
use super::{GlobQuery, GrepQuery, SearchResult};

fn paths(result: &SearchResult) -> Vec<&str> {
    result.hits.iter().map(|h| h.path.as_str()).collect()
}

fn project() -> Sandbox {
    let sb = Sandbox::new("search");
    sb.file(".gitignore", "target/\n*.log\n!keep.log\n");
    sb.file("src/main.rs", "fn main() {\n    println!(\"needle\");\n}\n");
    sb.file("src/lib.rs", "// needle in lib\r\npub fn f() {}\r\n");
    sb.file("src/sub/.gitignore", "generated.rs\n");
    sb.file("src/sub/generated.rs", "needle generated\n");
    sb.file("src/sub/kept.rs", "needle kept\n");
    sb.file("target/debug/out.rs", "needle in build output\n");
    sb.file("app.log", "needle in a log\n");
    sb.file("keep.log", "needle kept log\n");
    sb.file(".git/config", "needle in git\n");
    std::fs::write(sb.at("blob.bin"), b"needle\0binary").unwrap();
    sb
}

#[test]
fn grep_honours_gitignore_and_skips_binary_files() {
    let sb = project();
    let mut result = sb.ws().grep(&GrepQuery::new("", "needle")).unwrap();
    result.hits.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(
        paths(&result),
        ["keep.log", "src/lib.rs", "src/main.rs", "src/sub/kept.rs"]
    );
    assert!(!result.truncated);
    let main = result
        .hits
        .iter()
        .find(|h| h.path == "src/main.rs")
        .unwrap();
    assert_eq!(main.line, Some(2));
    assert_eq!(main.text.as_deref(), Some("    println!(\"needle\");"));
    let lib = result.hits.iter().find(|h| h.path == "src/lib.rs").unwrap();
    assert_eq!(
        lib.text.as_deref(),
        Some("// needle in lib"),
        "the CR is not part of the line"
    );
}

#[test]
fn a_search_below_the_root_still_honours_the_root_gitignore() {
    let sb = project();
    sb.file("target/inner/x.rs", "needle");
    sb.file("nested/app.log", "needle");
    sb.file("nested/ok.rs", "needle");
    let result = sb.ws().grep(&GrepQuery::new("nested", "needle")).unwrap();
    assert_eq!(paths(&result), ["nested/ok.rs"]);
}

#[test]
fn glob_matches_names_at_any_depth_or_paths_with_a_slash() {
    let sb = project();
    let ws = sb.ws();
    let mut names = ws.glob(&GlobQuery::new("", "*.rs")).unwrap();
    names.hits.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(
        paths(&names),
        ["src/lib.rs", "src/main.rs", "src/sub/kept.rs"]
    );
    let top = ws.glob(&GlobQuery::new("src", "*/kept.rs")).unwrap();
    assert_eq!(paths(&top), ["src/sub/kept.rs"]);
    assert!(ws.glob(&GlobQuery::new("", "[")).is_err());
}

#[test]
fn search_bounds_results_and_files_visited() {
    let sb = Sandbox::new("search-bounds");
    for i in 0..20 {
        sb.file(&format!("f{i:02}.txt"), "hit\nhit\n");
    }
    let ws = sb.ws();
    let mut q = GrepQuery::new("", "hit");
    q.max_results = 5;
    let few = ws.grep(&q).unwrap();
    assert_eq!(few.hits.len(), 5);
    assert!(few.truncated);
    let mut q = GrepQuery::new("", "hit");
    q.max_files = 3;
    let visited = ws.grep(&q).unwrap();
    assert_eq!(visited.files_visited, 3);
    assert_eq!(visited.hits.len(), 6);
    assert!(visited.truncated);
}

#[test]
fn grep_skips_large_files_and_cuts_long_lines() {
    let sb = Sandbox::new("search-size");
    sb.file("big.txt", &format!("hit {}\n", "x".repeat(5000)));
    let ws = sb.ws();
    let mut q = GrepQuery::new("", "hit");
    q.max_file_size = 100;
    assert!(ws.grep(&q).unwrap().hits.is_empty());
    let mut q = GrepQuery::new("", "hit");
    q.max_line_chars = 10;
    let hits = ws.grep(&q).unwrap().hits;
    assert_eq!(hits[0].text.as_deref(), Some("hit xxxxxx"));
}

#[test]
fn search_never_follows_a_symlink_out_of_the_root() {
    let sb = Sandbox::new("search-links");
    sb.symlink(sb.outside(), "out");
    sb.symlink("../outside/secret.txt", "secret-link");
    sb.file("in.txt", "SECRET is a word here too");
    for ws in sb.workspaces() {
        let result = ws.grep(&GrepQuery::new("", "SECRET")).unwrap();
        assert_eq!(paths(&result), ["in.txt"]);
        assert!(ws.grep(&GrepQuery::new("out", "SECRET")).is_err());
        let names = ws.glob(&GlobQuery::new("", "secret*")).unwrap();
        assert_eq!(
            paths(&names),
            ["secret-link"],
            "the link is a name inside; its target is not"
        );
    }
}

#[test]
fn a_bad_regex_is_an_invalid_argument() {
    let sb = Sandbox::new("search-regex");
    let err = sb.ws().grep(&GrepQuery::new("", "(")).unwrap_err();
    assert_eq!(err.kind, super::super::FileErrorKind::InvalidArgument);
}
