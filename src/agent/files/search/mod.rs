//! Search: glob over names and regex over contents, honouring `.gitignore` with the `ignore`
//! crate (ripgrep's walker), bounded in results, file size and files visited.
//!
//! Why `ignore`: it is the walker ripgrep ships, so `.gitignore`, `.ignore` and
//! `.git/info/exclude` behave as developers know them from `rg`, including nested files and
//! negations; gix's exclude support is built for a repository's index, not a plain tree.
//!
//! Containment: the walker never follows symlinks (`follow_links(false)`) and reads no ignore
//! file above the start directory (`parents(false)`, no global gitignore); the ancestors' own
//! `.gitignore` files between the root and the start are read here through the contained
//! resolver instead. The walker lists directories by path, so a directory swapped for a symlink
//! mid-walk could make it list names outside; that is why every hit is re-opened beneath the
//! root fd (`O_NOFOLLOW`) before it is reported, and every content is read only from that fd.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::WalkBuilder;
use regex::bytes::{Regex, RegexBuilder};
use serde::Serialize;

use super::error::FileError;
use super::sys;
use super::Workspace;

/// Hard caps, whatever a query asks.
pub const MAX_RESULTS: usize = 10_000;
pub const MAX_FILES_VISITED: usize = 200_000;
pub const MAX_FILE_SIZE: u64 = 16 * 1024 * 1024;
pub const MAX_LINE_CHARS: usize = 2_000;
/// A NUL in this many leading bytes marks a file as binary (as git and ripgrep decide).
const BINARY_SNIFF: usize = 8 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobQuery {
    /// The directory to search, relative to the root.
    pub path: String,
    /// A glob; without `/` it matches names at any depth, with `/` the path below `path`.
    pub pattern: String,
    pub max_results: usize,
    pub max_files: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepQuery {
    pub path: String,
    /// A `regex` crate pattern, matched per line.
    pub pattern: String,
    /// Only files whose name (or path, with `/`) matches this glob.
    pub glob: Option<String>,
    pub case_insensitive: bool,
    pub max_results: usize,
    pub max_files: usize,
    /// Larger files are skipped.
    pub max_file_size: u64,
    /// Longer lines are cut to this many characters.
    pub max_line_chars: usize,
}

impl GlobQuery {
    pub fn new(path: impl Into<String>, pattern: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            pattern: pattern.into(),
            max_results: 1000,
            max_files: 50_000,
        }
    }
}

impl GrepQuery {
    pub fn new(path: impl Into<String>, pattern: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            pattern: pattern.into(),
            glob: None,
            case_insensitive: false,
            max_results: 1000,
            max_files: 50_000,
            max_file_size: 1024 * 1024,
            max_line_chars: 500,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchHit {
    /// Relative to the workspace root.
    pub path: String,
    pub is_dir: bool,
    /// 1-based; `None` for a name match.
    pub line: Option<u64>,
    /// The matching line, without its line ending, cut to the bound.
    pub text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchResult {
    pub hits: Vec<SearchHit>,
    /// True when a bound (results or files visited) stopped the search early.
    pub truncated: bool,
    pub files_visited: usize,
}

/// One entry the walk produced, already checked to be inside the root.
struct Found {
    rel: String,
    below: PathBuf,
    is_dir: bool,
    is_file: bool,
}

impl Workspace {
    /// Names under `q.path` that match `q.pattern`, in walk order.
    pub fn glob(&self, q: &GlobQuery) -> Result<SearchResult, FileError> {
        let matcher = compile_glob(&q.pattern)?;
        let max_results = q.max_results.min(MAX_RESULTS);
        let mut result = SearchResult {
            hits: Vec::new(),
            truncated: false,
            files_visited: 0,
        };
        self.walk(&q.path, q.max_files, &mut result, |found, result| {
            if glob_matches(&matcher, &q.pattern, &found.below) {
                if result.hits.len() >= max_results {
                    return false;
                }
                result.hits.push(SearchHit {
                    path: found.rel.clone(),
                    is_dir: found.is_dir,
                    line: None,
                    text: None,
                });
            }
            true
        })?;
        Ok(result)
    }

    /// Lines under `q.path` that match `q.pattern`, skipping binary and oversized files.
    pub fn grep(&self, q: &GrepQuery) -> Result<SearchResult, FileError> {
        let regex = RegexBuilder::new(&q.pattern)
            .case_insensitive(q.case_insensitive)
            .build()
            .map_err(|e| {
                FileError::invalid(format!("'pattern' is not a valid regular expression: {e}"))
            })?;
        let glob = q.glob.as_deref().map(compile_glob).transpose()?;
        let max_results = q.max_results.min(MAX_RESULTS);
        let max_size = q.max_file_size.min(MAX_FILE_SIZE);
        let max_chars = q.max_line_chars.clamp(1, MAX_LINE_CHARS);
        let mut result = SearchResult {
            hits: Vec::new(),
            truncated: false,
            files_visited: 0,
        };
        self.walk(&q.path, q.max_files, &mut result, |found, result| {
            if !found.is_file {
                return true;
            }
            if let (Some(m), Some(p)) = (&glob, &q.glob) {
                if !glob_matches(m, p, &found.below) {
                    return true;
                }
            }
            let Some(content) = self.load_text(&found.rel, max_size) else {
                return true;
            };
            grep_lines(&regex, &content, &found.rel, max_chars, max_results, result)
        })?;
        Ok(result)
    }

    /// Walks `start`, calling `visit` for each entry inside the root until it returns false
    /// (a result bound) or `max_files` entries were seen; either marks the result truncated.
    fn walk(
        &self,
        start: &str,
        max_files: usize,
        result: &mut SearchResult,
        mut visit: impl FnMut(&Found, &mut SearchResult) -> bool,
    ) -> Result<(), FileError> {
        let rel = self.rel(start)?;
        self.open_dir(&rel, "search")?;
        let prefix = lexical(&rel.rel);
        let base = self.root().join(&prefix);
        let ancestors = self.ancestor_ignores(&prefix);
        let max_files = max_files.min(MAX_FILES_VISITED);
        let walker = WalkBuilder::new(&base)
            .hidden(false)
            .parents(false)
            .git_global(false)
            .require_git(false)
            .follow_links(false)
            .filter_entry(move |entry| {
                let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
                if is_dir && entry.file_name() == ".git" {
                    return false;
                }
                !ancestors
                    .iter()
                    .rev()
                    .any(|ig| ig.matched(entry.path(), is_dir).is_ignore())
            })
            .build();
        for entry in walker {
            let Ok(entry) = entry else { continue };
            if entry.depth() == 0 {
                continue;
            }
            let Ok(below) = entry.path().strip_prefix(&base) else {
                continue;
            };
            if result.files_visited >= max_files {
                result.truncated = true;
                return Ok(());
            }
            result.files_visited += 1;
            let below = below.to_path_buf();
            let rel_path = if prefix.is_empty() {
                below.to_string_lossy().into_owned()
            } else {
                format!("{prefix}/{}", below.to_string_lossy())
            };
            // The walker found it by path: confirm the name is inside the root right now.
            let Ok(fd) = self.open_raw(rel_path.as_bytes(), libc::O_PATH, false) else {
                continue;
            };
            let Ok(st) = sys::fstat(fd.as_fd()) else {
                continue;
            };
            let found = Found {
                rel: rel_path,
                below,
                is_dir: sys::is_dir(&st),
                is_file: sys::is_regular(&st),
            };
            if !visit(&found, result) {
                result.truncated = true;
                return Ok(());
            }
        }
        Ok(())
    }

    /// `.gitignore` matchers of the root and each directory down to (not including) `prefix`,
    /// read through the resolver so no ignore file outside the root is ever opened.
    fn ancestor_ignores(&self, prefix: &str) -> Vec<Gitignore> {
        let mut dirs = vec![String::new()];
        let parts: Vec<&str> = prefix.split('/').filter(|p| !p.is_empty()).collect();
        for i in 1..parts.len() {
            dirs.push(parts[..i].join("/"));
        }
        if parts.is_empty() {
            return Vec::new(); // The walker reads the start directory's own .gitignore.
        }
        let mut out = Vec::new();
        for dir in dirs {
            let file = if dir.is_empty() {
                ".gitignore".to_owned()
            } else {
                format!("{dir}/.gitignore")
            };
            let Some(text) = self.load_text(&file, 1024 * 1024) else {
                continue;
            };
            let mut builder = GitignoreBuilder::new(self.root().join(&dir));
            for line in String::from_utf8_lossy(&text).lines() {
                let _ = builder.add_line(None, line);
            }
            if let Ok(ig) = builder.build() {
                out.push(ig);
            }
        }
        out
    }

    /// The content of a regular, non-binary file of at most `max` bytes, opened beneath the
    /// root without following a final symlink; `None` for anything else.
    fn load_text(&self, rel: &str, max: u64) -> Option<Vec<u8>> {
        let fd = self
            .open_raw(rel.as_bytes(), libc::O_RDONLY | libc::O_NONBLOCK, false)
            .ok()?;
        let st = sys::fstat(fd.as_fd()).ok()?;
        if !sys::is_regular(&st) || u64::try_from(st.st_size).ok()? > max {
            return None;
        }
        let mut content = Vec::new();
        std::fs::File::from(fd)
            .take(max)
            .read_to_end(&mut content)
            .ok()?;
        let sniff = &content[..content.len().min(BINARY_SNIFF)];
        (!sniff.contains(&0)).then_some(content)
    }
}

fn grep_lines(
    regex: &Regex,
    content: &[u8],
    rel: &str,
    max_chars: usize,
    max_results: usize,
    result: &mut SearchResult,
) -> bool {
    for (index, line) in content.split(|b| *b == b'\n').enumerate() {
        if !regex.is_match(line) {
            continue;
        }
        if result.hits.len() >= max_results {
            return false;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text: String = String::from_utf8_lossy(line)
            .chars()
            .take(max_chars)
            .collect();
        result.hits.push(SearchHit {
            path: rel.to_owned(),
            is_dir: false,
            line: Some(index as u64 + 1),
            text: Some(text),
        });
    }
    true
}

fn compile_glob(pattern: &str) -> Result<GlobMatcher, FileError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| FileError::invalid(format!("'glob' is not a valid glob: {e}")))
}

fn glob_matches(matcher: &GlobMatcher, pattern: &str, below: &Path) -> bool {
    if pattern.contains('/') {
        matcher.is_match(below)
    } else {
        below.file_name().is_some_and(|name| matcher.is_match(name))
    }
}

/// `rel` with `.` removed and `..` applied lexically (already known not to climb out), for
/// naming results; the directory itself was opened through the resolver.
fn lexical(rel: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    parts.join("/")
}

#[cfg(test)]
mod tests;
