//! The unified diff, as `diff -u` and `git diff` write it (and as `git apply` reads it):
//!
//! ```text
//! diff --git a/x b/x              (optional, with git's extended header lines)
//! --- a/x                         (--- /dev/null: a new file)
//! +++ b/x                         (+++ /dev/null: a deleted file)
//! @@ -START,COUNT +START,COUNT @@ then ' ', '-', '+' lines, and '\ No newline at end of file'
//! ```
//!
//! Counts in a hunk header are held to, as `git apply` does: a hunk shorter or longer than its
//! header says is refused, naming both lines. A header without numbers (`@@ @@`, as models
//! sometimes write) reads lines up to the next header and is placed by its context alone.
//! `a/` and `b/` are dropped when both sides carry them; quoted names (`"a/\303\244"`) are
//! unquoted; git's renames (`rename from`/`rename to`) move the file; `new file mode 100755`
//! and `new mode` set or clear the executable bits. Text around the diff (a commit message, a
//! diffstat, `Index:` lines, an email signature) is skipped. Binary patches, copies, symlinks
//! and submodules are refused.

use super::{lines_of, malformed, Change, FilePatch, Hunk, Line};
use crate::policy::{echo, PolicyError};

const DEV_NULL: &str = "/dev/null";

pub(super) fn parse(text: &str) -> Result<Vec<FilePatch>, PolicyError> {
    let lines = lines_of(text);
    let mut files = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("diff --git ") {
            let (file, next) = git_section(&lines, i)?;
            files.extend(file);
            i = next;
        } else if is_file_header(&lines, i) {
            let (file, next) = file_section(&lines, i, i, &GitHeader::default())?;
            files.push(file);
            i = next;
        } else if line.starts_with("@@") {
            return Err(malformed(
                i + 1,
                "a hunk before any file header: start each file with '--- a/PATH' and \
                 '+++ b/PATH' lines",
            ));
        } else {
            refuse_binary(line, i)?;
            i += 1;
        }
    }
    Ok(files)
}

fn is_file_header(lines: &[&str], i: usize) -> bool {
    lines[i].starts_with("--- ") && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ "))
}

fn refuse_binary(line: &str, i: usize) -> Result<(), PolicyError> {
    if line.starts_with("Binary files ") || line == "GIT binary patch" {
        return Err(PolicyError::without_echo(
            "patch.binary",
            format!(
                "line {}: binary changes are not applied: a patch changes text files only \
                 (upload binary files as artifacts)",
                i + 1
            ),
        ));
    }
    Ok(())
}

/// What git's extended header lines say about one file.
#[derive(Debug, Default)]
struct GitHeader {
    /// The names of the `diff --git` line, prefixes dropped.
    old: Option<String>,
    new: Option<String>,
    new_file: Option<bool>,
    deleted: bool,
    rename_from: Option<String>,
    rename_to: Option<String>,
    new_mode: Option<bool>,
}

/// A git file mode: whether it is executable. Symlinks and submodules are refused.
fn git_mode(mode: &str, i: usize) -> Result<bool, PolicyError> {
    match mode.trim() {
        "100644" | "100664" => Ok(false),
        "100755" => Ok(true),
        "120000" => Err(PolicyError::without_echo(
            "patch.unsupported",
            format!(
                "line {}: symlinks are not patched: create or change them with a command",
                i + 1
            ),
        )),
        "160000" => Err(PolicyError::without_echo(
            "patch.unsupported",
            format!("line {}: submodules are not patched", i + 1),
        )),
        other => Err(malformed(
            i + 1,
            format!("{} is not a git file mode", echo(other)),
        )),
    }
}

/// A `diff --git` section: its header lines, then its hunks if it has any. A section without
/// hunks is a rename, a mode change, an empty new file or the deletion of an empty one.
fn git_section(lines: &[&str], start: usize) -> Result<(Option<FilePatch>, usize), PolicyError> {
    let mut git = GitHeader::default();
    if let Some((old, new)) = git_names(&lines[start]["diff --git ".len()..]) {
        git.old = Some(old);
        git.new = Some(new);
    }
    let mut i = start + 1;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("diff --git ") || is_file_header(lines, i) || line.starts_with("@@") {
            break;
        }
        refuse_binary(line, i)?;
        if let Some(mode) = line.strip_prefix("new file mode ") {
            git.new_file = Some(git_mode(mode, i)?);
        } else if let Some(mode) = line.strip_prefix("deleted file mode ") {
            git_mode(mode, i)?;
            git.deleted = true;
        } else if let Some(mode) = line.strip_prefix("old mode ") {
            git_mode(mode, i)?;
        } else if let Some(mode) = line.strip_prefix("new mode ") {
            git.new_mode = Some(git_mode(mode, i)?);
        } else if let Some(name) = line.strip_prefix("rename from ") {
            git.rename_from = Some(header_name(name, i)?);
        } else if let Some(name) = line.strip_prefix("rename to ") {
            git.rename_to = Some(header_name(name, i)?);
        } else if line.starts_with("copy from ") || line.starts_with("copy to ") {
            return Err(PolicyError::without_echo(
                "patch.unsupported",
                format!(
                    "line {}: copies are not applied: add the new file with its content",
                    i + 1
                ),
            ));
        } else if !(line.starts_with("index ")
            || line.starts_with("similarity index ")
            || line.starts_with("dissimilarity index "))
        {
            break;
        }
        i += 1;
    }
    if i < lines.len() && is_file_header(lines, i) {
        let (file, next) = file_section(lines, start, i, &git)?;
        return Ok((Some(file), next));
    }
    if i < lines.len() && lines[i].starts_with("@@") {
        return Err(malformed(
            i + 1,
            "a hunk without its '--- a/PATH' and '+++ b/PATH' lines",
        ));
    }
    let path = git.rename_from.clone().or(git.old.clone());
    let Some(path) = path else {
        return Err(malformed(
            start + 1,
            "cannot tell the file's name from this 'diff --git' line",
        ));
    };
    let change = if let Some(executable) = git.new_file {
        Change::Add {
            lines: Vec::new(),
            final_newline: false,
            executable,
        }
    } else if git.deleted {
        Change::Delete { hunks: Vec::new() }
    } else if git.rename_to.is_some() || git.new_mode.is_some() {
        Change::Update {
            hunks: Vec::new(),
            move_to: git.rename_to.clone(),
            executable: git.new_mode,
        }
    } else {
        // Nothing but an index line: nothing to do for this file.
        return Ok((None, i));
    };
    let file = FilePatch {
        path,
        patch_line: start + 1,
        change,
    };
    Ok((Some(file), i))
}

/// The two names of a `diff --git` line. Names with spaces are ambiguous there; git itself
/// reads them when both are the same, or quoted, and so does this.
fn git_names(rest: &str) -> Option<(String, String)> {
    let (old, new) = if rest.starts_with('"') {
        let (old, after) = unquote(rest)?;
        let after = after.strip_prefix(' ')?;
        let new = if after.starts_with('"') {
            unquote(after)?.0
        } else {
            after.to_owned()
        };
        (old, new)
    } else {
        // `a/NAME b/NAME`: the split where both halves name the same file.
        let split = rest
            .match_indices(' ')
            .map(|(at, _)| (&rest[..at], &rest[at + 1..]))
            .find(|(old, new)| strip_prefixes(old, new).is_some_and(|(o, n)| o == n))?;
        (split.0.to_owned(), split.1.to_owned())
    };
    match strip_prefixes(&old, &new) {
        Some((old, new)) => Some((old.to_owned(), new.to_owned())),
        None => Some((old, new)),
    }
}

/// `a/X` and `b/Y` without their prefixes, when both have them (or are /dev/null).
fn strip_prefixes<'a>(old: &'a str, new: &'a str) -> Option<(&'a str, &'a str)> {
    let strip = |name: &'a str, prefix: &str| {
        if name == DEV_NULL {
            Some(name)
        } else {
            name.strip_prefix(prefix)
        }
    };
    match (strip(old, "a/"), strip(new, "b/")) {
        (Some(o), Some(n)) if !(o == DEV_NULL && n == DEV_NULL) => Some((o, n)),
        _ => None,
    }
}

/// A name after `rename from ` and the like: quoted or as it is.
fn header_name(text: &str, i: usize) -> Result<String, PolicyError> {
    if text.starts_with('"') {
        return unquote(text)
            .map(|(name, _)| name)
            .ok_or_else(|| malformed(i + 1, format!("{} is not a quoted name", echo(text))));
    }
    Ok(text.to_owned())
}

/// A C-quoted name as git writes one (`"a/\303\244 b"`): the name and what follows its quote.
fn unquote(text: &str) -> Option<(String, &str)> {
    let mut bytes = Vec::new();
    let mut chars = text.strip_prefix('"')?.char_indices();
    let body = &text[1..];
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((String::from_utf8(bytes).ok()?, &body[at + 1..])),
            '\\' => {
                let (_, escaped) = chars.next()?;
                match escaped {
                    'n' => bytes.push(b'\n'),
                    't' => bytes.push(b'\t'),
                    'r' => bytes.push(b'\r'),
                    'a' => bytes.push(7),
                    'b' => bytes.push(8),
                    'f' => bytes.push(12),
                    'v' => bytes.push(11),
                    '0'..='7' => {
                        let mut value = escaped.to_digit(8)?;
                        for _ in 0..2 {
                            let (_, digit) = chars.next()?;
                            value = value * 8 + digit.to_digit(8)?;
                        }
                        bytes.push(u8::try_from(value).ok()?);
                    }
                    other => {
                        let mut buf = [0; 4];
                        bytes.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                    }
                }
            }
            other => {
                let mut buf = [0; 4];
                bytes.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    None
}

/// The name on a `---` or `+++` line: quoted, or up to a tab (a timestamp follows it in
/// `diff -u`); `None` for /dev/null.
fn side_name(line: &str, i: usize) -> Result<Option<String>, PolicyError> {
    let text = &line[4..];
    let name = if text.starts_with('"') {
        header_name(text, i)?
    } else {
        text.split('\t').next().unwrap_or("").trim_end().to_owned()
    };
    if name.is_empty() {
        return Err(malformed(i + 1, "the file header names no path"));
    }
    Ok((name != DEV_NULL).then_some(name))
}

/// One file's `---`/`+++` lines (at `at`) and its hunks; `start` is where the section began.
fn file_section(
    lines: &[&str],
    start: usize,
    at: usize,
    git: &GitHeader,
) -> Result<(FilePatch, usize), PolicyError> {
    let mut old = side_name(lines[at], at)?;
    let mut new = side_name(lines[at + 1], at + 1)?;
    if old.is_none() && new.is_none() {
        return Err(malformed(at + 1, "both sides of the file are /dev/null"));
    }
    let dev_null = || DEV_NULL.to_owned();
    let (o, n) = (
        old.clone().unwrap_or_else(dev_null),
        new.clone().unwrap_or_else(dev_null),
    );
    if let Some((o, n)) = strip_prefixes(&o, &n) {
        old = (o != DEV_NULL).then(|| o.to_owned());
        new = (n != DEV_NULL).then(|| n.to_owned());
    }
    let mut i = at + 2;
    let mut hunks = Vec::new();
    while i < lines.len() && lines[i].starts_with("@@") {
        let (hunk, next) = parse_hunk(lines, i)?;
        hunks.push(hunk);
        i = next;
    }
    let Some(last) = hunks.last() else {
        return Err(malformed(
            at + 1,
            "the file has no hunk: '+++' is followed by '@@ -START,COUNT +START,COUNT @@'",
        ));
    };
    // A counted hunk that ends where its header says, followed at once by more hunk lines,
    // had its count wrong: refuse rather than skip them.
    if last.old_index.is_some() {
        if let Some(next) = lines.get(i) {
            let stray =
                (next.starts_with(['+', '-', ' ']) && !is_file_header(lines, i)) && *next != "-- "; // an email's signature line
            if stray {
                return Err(malformed(
                    i + 1,
                    format!(
                        "{} follows the hunk of line {} ({}) past the lines its header counts: \
                         correct the counts",
                        echo(next),
                        last.patch_line,
                        echo(&last.header)
                    ),
                ));
            }
        }
    }
    let change = match (&old, &new) {
        (None, _) => {
            let mut content = Vec::new();
            let mut final_newline = true;
            for hunk in &hunks {
                for line in &hunk.lines {
                    match line {
                        Line::Add(text) => content.push(text.clone()),
                        _ => {
                            return Err(malformed(
                                hunk.patch_line,
                                "a new file's hunk may only add lines ('+')",
                            ))
                        }
                    }
                }
                if hunk.final_newline == Some(false) {
                    final_newline = false;
                }
            }
            Change::Add {
                lines: content,
                final_newline,
                executable: git.new_file.unwrap_or(false),
            }
        }
        (Some(_), None) => {
            if let Some(hunk) = hunks.iter().find(|h| h.added() > 0) {
                return Err(malformed(
                    hunk.patch_line,
                    "a deleted file's hunk may only remove lines ('-')",
                ));
            }
            Change::Delete { hunks }
        }
        (Some(o), Some(n)) => Change::Update {
            move_to: (o != n).then(|| n.clone()),
            hunks,
            executable: git.new_mode,
        },
    };
    let path = old.or(new).unwrap_or_default();
    let file = FilePatch {
        path,
        patch_line: start + 1,
        change,
    };
    Ok((file, i))
}

/// A hunk header's `START,COUNT`.
type Range = (usize, usize);

/// `-START[,COUNT] +START[,COUNT]`, or `None` for a header without numbers.
fn ranges(header: &str, i: usize) -> Result<Option<(Range, Range)>, PolicyError> {
    let body = header[2..].trim_start();
    let body = body.split("@@").next().unwrap_or("").trim();
    // `@@ @@`, `@@ ... @@`: a header without numbers.
    if !body.starts_with('-') {
        return Ok(None);
    }
    let bad = || {
        malformed(
            i + 1,
            format!(
                "{} is not a hunk header: '@@ -START,COUNT +START,COUNT @@'",
                echo(header)
            ),
        )
    };
    let range = |part: Option<&str>, sign: char| -> Result<Range, PolicyError> {
        let part = part.and_then(|p| p.strip_prefix(sign)).ok_or_else(bad)?;
        let number = |n: &str| n.parse::<usize>().map_err(|_| bad());
        match part.split_once(',') {
            Some((start, count)) => Ok((number(start)?, number(count)?)),
            None => Ok((number(part)?, 1)),
        }
    };
    let mut parts = body.split_whitespace();
    let old = range(parts.next(), '-')?;
    let new = range(parts.next(), '+')?;
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(Some((old, new)))
}

/// One hunk from its header at `at`; answers it and the index of the line after it.
fn parse_hunk(lines: &[&str], at: usize) -> Result<(Hunk, usize), PolicyError> {
    let header = lines[at];
    let counts = ranges(header, at)?.map(|((_, old), (_, new))| (old, new));
    let mut hunk = Hunk {
        header: header.trim_end().to_owned(),
        patch_line: at + 1,
        anchor: None,
        old_index: None,
        lines: Vec::new(),
        at_end: false,
        final_newline: None,
    };
    let (mut old_no_newline, mut new_no_newline) = (false, false);
    let (mut seen_old, mut seen_new) = (0, 0);
    // Lines read from bare empty lines (an editor's stripped ' '): trailing ones are dropped
    // when the header has no counts.
    let mut bare_empty_tail = 0;
    let mut i = at + 1;
    while let Some(line) = lines.get(i) {
        match counts {
            Some((old, new)) if seen_old >= old && seen_new >= new && !line.starts_with('\\') => {
                break
            }
            None if line.starts_with("@@")
                || line.starts_with("diff --git ")
                || is_file_header(lines, i) =>
            {
                break
            }
            _ => {}
        }
        let (marker, text) = match line.char_indices().nth(1) {
            Some((k, _)) => (&line[..k], &line[k..]),
            None => (*line, ""),
        };
        let (old, new) = match marker {
            "\\" => {
                match hunk.lines.last() {
                    Some(Line::Remove(_)) => old_no_newline = true,
                    Some(Line::Add(_)) => new_no_newline = true,
                    Some(Line::Context(_)) => {
                        old_no_newline = true;
                        new_no_newline = true;
                    }
                    None => {
                        return Err(malformed(
                            i + 1,
                            "'\\ No newline at end of file' before any line of the hunk",
                        ))
                    }
                }
                i += 1;
                continue;
            }
            "" => {
                hunk.lines.push(Line::Context(String::new()));
                bare_empty_tail += 1;
                (1, 1)
            }
            " " => {
                hunk.lines.push(Line::Context(text.to_owned()));
                (1, 1)
            }
            "-" => {
                hunk.lines.push(Line::Remove(text.to_owned()));
                (1, 0)
            }
            "+" => {
                hunk.lines.push(Line::Add(text.to_owned()));
                (0, 1)
            }
            _ => break,
        };
        if !marker.is_empty() {
            bare_empty_tail = 0;
        }
        seen_old += old;
        seen_new += new;
        if let Some((old, new)) = counts {
            if seen_old > old || seen_new > new {
                return Err(malformed(
                    i + 1,
                    format!(
                        "the hunk of line {} ({}) has more lines than its header counts ({old} \
                         old, {new} new): correct the counts",
                        hunk.patch_line,
                        echo(&hunk.header)
                    ),
                ));
            }
        }
        i += 1;
    }
    if let Some((old, new)) = counts {
        if seen_old < old || seen_new < new {
            return Err(malformed(
                i + 1,
                format!(
                    "the hunk of line {} ({}) ends after {seen_old} old and {seen_new} new \
                     lines, but its header counts {old} and {new}: correct the counts, and start \
                     every line of a hunk with ' ', '-' or '+'",
                    hunk.patch_line,
                    echo(&hunk.header)
                ),
            ));
        }
    } else {
        hunk.lines.truncate(hunk.lines.len() - bare_empty_tail);
    }
    if hunk.lines.is_empty() {
        return Err(malformed(at + 1, "the hunk has no lines"));
    }
    if let Some(((old_start, old_count), _)) = ranges(header, at)? {
        hunk.old_index = Some(if old_count == 0 {
            old_start
        } else {
            old_start.saturating_sub(1)
        });
    }
    hunk.at_end = old_no_newline;
    hunk.final_newline = if new_no_newline {
        Some(false)
    } else if old_no_newline {
        Some(true)
    } else {
        None
    };
    Ok((hunk, i))
}

#[cfg(test)]
mod tests {
    use super::super::{Change, Format, Patch};
    use super::*;

    fn parse_ok(text: &str) -> Vec<FilePatch> {
        parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn c(t: &str) -> Line {
        Line::Context(t.into())
    }
    fn a(t: &str) -> Line {
        Line::Add(t.into())
    }
    fn r(t: &str) -> Line {
        Line::Remove(t.into())
    }

    const GIT_DIFF: &str = concat!(
        "diff --git a/src/app.py b/src/app.py\n",
        "index 83db48f..bf269f4 100644\n",
        "--- a/src/app.py\n",
        "+++ b/src/app.py\n",
        "@@ -1,4 +1,4 @@ import os\n",
        " import os\n",
        "-x = 1\n",
        "+x = 2\n",
        " y = 3\n",
        " z = 4\n",
        "@@ -10,3 +10,4 @@ def f():\n",
        " a\n",
        " b\n",
        "+c\n",
        " d\n",
        "diff --git a/new.txt b/new.txt\n",
        "new file mode 100755\n",
        "index 0000000..e69de29\n",
        "--- /dev/null\n",
        "+++ b/new.txt\n",
        "@@ -0,0 +1,2 @@\n",
        "+#!/bin/sh\n",
        "+echo hi\n",
        "diff --git a/gone.txt b/gone.txt\n",
        "deleted file mode 100644\n",
        "index e69de29..0000000\n",
        "--- a/gone.txt\n",
        "+++ /dev/null\n",
        "@@ -1 +0,0 @@\n",
        "-bye\n",
        "\\ No newline at end of file\n",
        "diff --git a/old name.txt b/new name.txt\n",
        "similarity index 100%\n",
        "rename from old name.txt\n",
        "rename to new name.txt\n",
    );

    #[test]
    fn a_git_diff_parses_into_its_files() {
        assert_eq!(Format::detect(GIT_DIFF), Format::Unified);
        let files = parse_ok(GIT_DIFF);
        assert_eq!(files.len(), 4);
        assert_eq!(files[0].path, "src/app.py");
        let hunks = files[0].hunks();
        assert_eq!(hunks.len(), 2);
        assert_eq!(hunks[0].header, "@@ -1,4 +1,4 @@ import os");
        assert_eq!(hunks[0].old_index, Some(0));
        assert_eq!(
            hunks[0].lines,
            vec![
                c("import os"),
                r("x = 1"),
                a("x = 2"),
                c("y = 3"),
                c("z = 4")
            ]
        );
        assert_eq!((hunks[1].old_index, hunks[1].patch_line), (Some(9), 11));
        assert_eq!(
            files[1].change,
            Change::Add {
                lines: vec!["#!/bin/sh".into(), "echo hi".into()],
                final_newline: true,
                executable: true
            }
        );
        let Change::Delete { hunks } = &files[2].change else {
            panic!("{:?}", files[2]);
        };
        assert_eq!(hunks[0].lines, vec![r("bye")]);
        assert!(hunks[0].at_end);
        assert_eq!(files[3].path, "old name.txt");
        assert_eq!(
            files[3].change,
            Change::Update {
                hunks: Vec::new(),
                move_to: Some("new name.txt".into()),
                executable: None
            }
        );
        assert_eq!(
            (
                files[0].patch_line,
                files[1].patch_line,
                files[3].patch_line
            ),
            (1, 16, 32)
        );
    }

    #[test]
    fn a_plain_diff_u_with_timestamps_and_no_prefixes_parses() {
        let files = parse_ok(
            "--- lib/a.c\t2024-01-01 10:00:00.000000000 +0000\n\
             +++ lib/a.c\t2024-01-02 10:00:00.000000000 +0000\n\
             @@ -2 +2 @@\n\
             -old\n\
             +new\n",
        );
        assert_eq!(files[0].path, "lib/a.c");
        assert_eq!(files[0].hunks()[0].old_index, Some(1));
        assert_eq!(files[0].hunks()[0].lines, vec![r("old"), a("new")]);
    }

    #[test]
    fn commentary_around_the_diff_is_skipped() {
        let files = parse_ok(
            "From 1234 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] fix\n\n fix it\n---\n \
             a.txt | 2 +-\n 1 file changed\n\ndiff --git a/a.txt b/a.txt\n--- a/a.txt\n\
             +++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\n-- \n2.43.0\n",
        );
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].hunks()[0].lines, vec![r("x"), a("y")]);
    }

    #[test]
    fn a_header_without_numbers_reads_up_to_the_next_header() {
        let files = parse_ok(
            "--- a/x\n+++ b/x\n@@ @@\n a\n-b\n+c\n\n@@ ... @@\n d\n+e\n--- a/y\n+++ b/y\n@@\n-1\n+2\n",
        );
        assert_eq!(files.len(), 2);
        let hunks = files[0].hunks();
        assert_eq!(hunks.len(), 2);
        assert_eq!(hunks[0].lines, vec![c("a"), r("b"), a("c")]);
        assert_eq!(hunks[0].old_index, None);
        assert_eq!(hunks[1].lines, vec![c("d"), a("e")]);
        assert_eq!(files[1].hunks()[0].lines, vec![r("1"), a("2")]);
    }

    #[test]
    fn an_empty_line_in_a_counted_hunk_is_an_empty_context_line() {
        let files = parse_ok("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n");
        assert_eq!(
            files[0].hunks()[0].lines,
            vec![c("a"), c(""), r("b"), a("c")]
        );
    }

    #[test]
    fn no_newline_markers_say_how_the_file_ends() {
        let files =
            parse_ok("--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n-a\n\\ No newline at end of file\n+a\n+b\n");
        let hunk = &files[0].hunks()[0];
        assert!(hunk.at_end);
        assert_eq!(hunk.final_newline, Some(true));
        let files =
            parse_ok("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n");
        assert_eq!(files[0].hunks()[0].final_newline, Some(false));
        let files =
            parse_ok("--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+b\n\\ No newline at end of file\n");
        assert_eq!(
            files[0].change,
            Change::Add {
                lines: vec!["b".into()],
                final_newline: false,
                executable: false
            }
        );
    }

    #[test]
    fn quoted_names_and_renames_with_changes_parse() {
        let files = parse_ok(
            "diff --git \"a/caf\\303\\251.txt\" \"b/t\\303\\251.txt\"\nsimilarity index 90%\n\
             rename from \"caf\\303\\251.txt\"\nrename to \"t\\303\\251.txt\"\n\
             --- \"a/caf\\303\\251.txt\"\n+++ \"b/t\\303\\251.txt\"\n@@ -1 +1 @@\n-x\n+y\n",
        );
        assert_eq!(files[0].path, "café.txt");
        let Change::Update { move_to, .. } = &files[0].change else {
            panic!("{:?}", files[0]);
        };
        assert_eq!(move_to.as_deref(), Some("té.txt"));
    }

    #[test]
    fn a_mode_change_alone_is_an_update_without_hunks() {
        let files = parse_ok("diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n");
        assert_eq!(
            files[0].change,
            Change::Update {
                hunks: Vec::new(),
                move_to: None,
                executable: Some(true)
            }
        );
        // An empty new file and the deletion of an empty one carry no hunk either.
        let files = parse_ok(
            "diff --git a/e b/e\nnew file mode 100644\nindex 0000000..e69de29\n\
             diff --git a/f b/f\ndeleted file mode 100644\nindex e69de29..0000000\n",
        );
        assert_eq!(
            files[0].change,
            Change::Add {
                lines: Vec::new(),
                final_newline: false,
                executable: false
            }
        );
        assert_eq!(files[1].change, Change::Delete { hunks: Vec::new() });
    }

    #[test]
    fn what_is_not_applied_is_refused_not_skipped() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "diff --git a/i.png b/i.png\nindex 1..2 100644\nBinary files a/i.png and b/i.png differ\n",
                "patch.binary",
                "line 3: binary changes are not applied",
            ),
            (
                "diff --git a/i b/i\nGIT binary patch\nliteral 1\n",
                "patch.binary",
                "line 2:",
            ),
            (
                "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+t\n",
                "patch.unsupported",
                "line 2: symlinks are not patched",
            ),
            (
                "diff --git a/a b/c\ncopy from a\ncopy to c\n",
                "patch.unsupported",
                "line 2: copies are not applied",
            ),
        ];
        for (text, rule, expected) in cases {
            let err = parse(text).expect_err(text);
            assert_eq!(err.rule, *rule, "{text:?}: {}", err.message);
            assert!(
                err.message.starts_with(expected),
                "{text:?}: {}",
                err.message
            );
        }
    }

    #[test]
    fn malformed_diffs_are_refused_with_their_line() {
        let cases: &[(&str, &str)] = &[
            ("@@ -1 +1 @@\n-a\n+b\n", "line 1: a hunk before any file header"),
            (
                "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n",
                "line 7: the hunk of line 3 ('@@ -1,3 +1,3 @@') ends after 2 old and 2 new lines, \
                 but its header counts 3 and 3",
            ),
            (
                "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\nnot a hunk line\n+c\n",
                "line 6: the hunk of line 3",
            ),
            (
                "--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n a\n-b\n",
                "line 5: the hunk of line 3 ('@@ -1 +1,2 @@') has more lines than its header counts",
            ),
            ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n", "line 6: '+c' follows the hunk of line 3"),
            (
                "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n-d\n",
                "line 7: '-d' follows the hunk of line 3",
            ),
            ("--- a/x\n+++ b/x\n@@ -x +1 @@\n", "line 3: '@@ -x +1 @@' is not a hunk header"),
            ("--- a/x\n+++ b/x\nhello\n", "line 1: the file has no hunk"),
            ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", "line 1: both sides"),
            ("--- /dev/null\n+++ b/x\n@@ @@\n+a\n b\n", "line 3: a new file's hunk"),
            ("--- a/x\n+++ /dev/null\n@@ -1 +1 @@\n-a\n+b\n", "line 3: a deleted file's hunk"),
            ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n\\ No newline\n", "line 4: '\\ No newline"),
            ("--- \n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "line 1: the file header names no path"),
            ("diff --git a/x b/x\n@@ -1 +1 @@\n-a\n+b\n", "line 2: a hunk without its"),
        ];
        for (text, expected) in cases {
            let err = parse(text).expect_err(text);
            assert!(
                err.message.starts_with(expected),
                "{text:?}: {} (wanted {expected})",
                err.message
            );
            assert_eq!(err.rule, "patch.malformed");
        }
        let err = Patch::parse("just some text\n", None).unwrap_err();
        assert_eq!(err.rule, "patch.empty");
    }
}
