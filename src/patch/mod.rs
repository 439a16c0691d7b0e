//! Multi-file patches: a unified diff or an `apply_patch` envelope parsed into one model (the
//! files it adds, deletes, updates or moves, and each update's hunks), and the hunks applied to
//! a text in memory. No I/O here: the agent reads and writes the files (`agent::files::patch`).
//!
//! Both formats are client input: parsing is bounded ([`MAX_PATCH_BYTES`], [`MAX_PATCH_FILES`]),
//! never panics on any text, and refuses what it does not apply (binary changes, symlinks,
//! copies) rather than skipping it. Every path a patch names passes the workspace's path rules
//! ([`Patch::check_paths`]) before a file is touched.

mod apply;
mod envelope;
mod unified;

use crate::policy::{echo, PolicyError};

pub use apply::{apply_hunks, HunkFailure, TextFile, MATCH_BUDGET};

/// The largest patch accepted, in bytes of UTF-8.
pub const MAX_PATCH_BYTES: usize = 1 << 20;
/// The most files one patch may change.
pub const MAX_PATCH_FILES: usize = 100;

/// The two formats a patch may be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `diff -u` / `git diff`: `--- a/x`, `+++ b/x`, `@@ -l,c +l,c @@` hunks.
    Unified,
    /// The envelope OpenAI's models emit: `*** Begin Patch` … `*** End Patch`.
    ApplyPatch,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Unified => "unified",
            Format::ApplyPatch => "apply_patch",
        }
    }

    pub fn from_name(name: &str) -> Option<Format> {
        match name {
            "unified" => Some(Format::Unified),
            "apply_patch" => Some(Format::ApplyPatch),
            _ => None,
        }
    }

    /// An envelope starts with `*** Begin Patch` (blank lines and a heredoc's `<<EOF` line
    /// before it allowed); anything else is read as a unified diff.
    pub fn detect(text: &str) -> Format {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next().unwrap_or("");
        let first = if envelope::is_heredoc_start(first) {
            lines.next().unwrap_or("")
        } else {
            first
        };
        if first == envelope::BEGIN {
            Format::ApplyPatch
        } else {
            Format::Unified
        }
    }
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// In the file before and after (` ` in both formats).
    Context(String),
    /// Removed (`-`).
    Remove(String),
    /// Added (`+`).
    Add(String),
}

impl Line {
    /// The text the file holds before the change, for the lines that are there.
    pub fn old(&self) -> Option<&str> {
        match self {
            Line::Context(t) | Line::Remove(t) => Some(t),
            Line::Add(_) => None,
        }
    }
}

/// One hunk: where it goes (an anchor line, a line number, the end of the file) and its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// The hunk's header as the patch wrote it (`@@ -3,4 +3,5 @@`, `@@ def f():`, `@@`), for
    /// messages.
    pub header: String,
    /// The patch's line (1-based) the hunk starts on.
    pub patch_line: usize,
    /// The envelope's `@@ <line>`: a line of the file the hunk's lines come after.
    pub anchor: Option<String>,
    /// A unified diff's line number as an index (0-based) where the old lines are expected;
    /// for a hunk with no old lines, the index it inserts at.
    pub old_index: Option<usize>,
    pub lines: Vec<Line>,
    /// The old lines end the file (`*** End of File`, or a unified diff's
    /// `\ No newline at end of file` on the old side).
    pub at_end: bool,
    /// Whether the file ends with a newline afterwards, when the hunk says (a unified diff's
    /// `\ No newline at end of file`); `None` keeps the file's own ending.
    pub final_newline: Option<bool>,
}

impl Hunk {
    pub fn added(&self) -> usize {
        self.lines
            .iter()
            .filter(|l| matches!(l, Line::Add(_)))
            .count()
    }

    pub fn removed(&self) -> usize {
        self.lines
            .iter()
            .filter(|l| matches!(l, Line::Remove(_)))
            .count()
    }
}

/// What a patch does to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new file with these lines.
    Add {
        lines: Vec<String>,
        final_newline: bool,
        /// Git's `new file mode 100755`.
        executable: bool,
    },
    /// The file removed; a unified diff's hunks list its lines, which must be all it holds.
    Delete { hunks: Vec<Hunk> },
    /// The file's lines changed, and it may move (`*** Move to:`, git's `rename to`).
    Update {
        hunks: Vec<Hunk>,
        move_to: Option<String>,
        /// Git's `new mode 100755` (true) or `new mode 100644` (false).
        executable: Option<bool>,
    },
}

/// One file's part of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// As the patch names it, until [`Patch::check_paths`] makes it canonical.
    pub path: String,
    /// The patch's line (1-based) where this file's part starts.
    pub patch_line: usize,
    pub change: Change,
}

impl FilePatch {
    pub fn hunks(&self) -> &[Hunk] {
        match &self.change {
            Change::Add { .. } => &[],
            Change::Delete { hunks } | Change::Update { hunks, .. } => hunks,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub format: Format,
    pub files: Vec<FilePatch>,
}

impl Patch {
    /// Parses `text` in `format` (detected when `None`), within the bounds.
    pub fn parse(text: &str, format: Option<Format>) -> Result<Patch, PolicyError> {
        if text.len() > MAX_PATCH_BYTES {
            return Err(PolicyError::without_echo(
                "patch.too-large",
                format!(
                    "a patch must be at most {MAX_PATCH_BYTES} bytes (this one is {}); split it",
                    text.len()
                ),
            ));
        }
        if let Some(at) = text.find('\0') {
            return Err(PolicyError::without_echo(
                "patch.binary",
                format!(
                    "line {}: a patch must not contain NUL bytes: only text files are patched",
                    line_of(text, at)
                ),
            ));
        }
        let format = format.unwrap_or_else(|| Format::detect(text));
        let files = match format {
            Format::Unified => unified::parse(text)?,
            Format::ApplyPatch => envelope::parse(text)?,
        };
        if files.is_empty() {
            return Err(PolicyError::without_echo(
                "patch.empty",
                match format {
                    Format::Unified => {
                        "the patch changes no file: a unified diff needs '--- a/PATH' and \
                         '+++ b/PATH' lines before its hunks"
                    }
                    Format::ApplyPatch => {
                        "the patch changes no file: add '*** Add File:', '*** Update File:' or \
                         '*** Delete File:' sections"
                    }
                },
            ));
        }
        if files.len() > MAX_PATCH_FILES {
            return Err(PolicyError::without_echo(
                "patch.too-many-files",
                format!(
                    "a patch may change at most {MAX_PATCH_FILES} files (this one changes {}); \
                     split it",
                    files.len()
                ),
            ));
        }
        Ok(Patch { format, files })
    }

    /// Puts every path (and move target) through `check` (the workspace's path rule, which
    /// answers the canonical path), refusing one that names the root itself. A refusal names
    /// the patch's line and the path.
    pub fn check_paths(
        &mut self,
        root: &str,
        check: impl Fn(&str) -> Result<String, PolicyError>,
    ) -> Result<(), PolicyError> {
        let one = |path: &str, line: usize| -> Result<String, PolicyError> {
            let refuse = |why: String| {
                PolicyError::without_echo(
                    "patch.path",
                    format!("line {line}: the path {} is refused: {why}", echo(path)),
                )
            };
            let canonical = check(path).map_err(|e| refuse(e.message))?;
            if canonical == root {
                return Err(refuse("it names the workspace root, not a file".into()));
            }
            Ok(canonical)
        };
        for file in &mut self.files {
            file.path = one(&file.path, file.patch_line)?;
            if let Change::Update {
                move_to: Some(to), ..
            } = &mut file.change
            {
                *to = one(to, file.patch_line)?;
            }
        }
        Ok(())
    }
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// A parse error at a line of the patch (1-based), quoting the line when there is one.
fn malformed(line: usize, what: impl Into<String>) -> PolicyError {
    PolicyError::without_echo("patch.malformed", format!("line {line}: {}", what.into()))
}

/// The lines of a patch, without their `\n` or `\r\n` endings.
fn lines_of(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

#[cfg(test)]
mod tests;
