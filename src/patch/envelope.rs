//! The `apply_patch` envelope, as OpenAI's codex parses it (`codex-rs/apply-patch`):
//!
//! ```text
//! *** Begin Patch
//! *** Add File: PATH          then its lines, each after '+'
//! *** Delete File: PATH
//! *** Update File: PATH
//! *** Move to: PATH           (optional)
//! @@ LINE                     (or a bare @@) then ' ', '-' and '+' lines
//! *** End of File             (optional: the hunk's old lines end the file)
//! *** End Patch
//! ```
//!
//! Like codex it accepts padding around the markers, a first hunk without its `@@`, an empty
//! line inside a hunk as an empty context line, and the whole wrapped in a heredoc (`<<'EOF'`
//! … `EOF`). Beyond codex: blank lines between file sections, an update that only moves, and a
//! unified-diff header (`@@ -1,3 +1,4 @@`) where an anchor line belongs, read as a bare `@@`.

use super::{lines_of, malformed, Change, FilePatch, Hunk, Line};
use crate::policy::{echo, PolicyError};

pub(super) const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// What follows `marker` on `line` (a trimmed line), if the line is that marker's.
fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.strip_prefix(marker)
        .filter(|rest| rest.is_empty() || rest.starts_with(' '))
}

/// The first line of a heredoc that wraps the envelope (as models write for a shell).
pub(super) fn is_heredoc_start(line: &str) -> bool {
    matches!(line, "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
}

pub(super) fn parse(text: &str) -> Result<Vec<FilePatch>, PolicyError> {
    let lines = lines_of(text);
    let blank = |i: &usize| lines[*i].trim().is_empty();
    let mut first = (0..lines.len()).find(|i| !blank(i)).unwrap_or(0);
    let mut last = (0..lines.len()).rev().find(|i| !blank(i)).unwrap_or(0);
    let trimmed = |i: usize| lines.get(i).map_or("", |l| l.trim());
    if is_heredoc_start(trimmed(first)) && trimmed(last).ends_with("EOF") && last > first {
        first = (first + 1..last).find(|i| !blank(i)).unwrap_or(last);
        last = (first..last).rev().find(|i| !blank(i)).unwrap_or(first);
    }
    if trimmed(first) != BEGIN {
        return Err(malformed(
            first + 1,
            format!("the patch must start with '{BEGIN}'"),
        ));
    }
    if last == first || trimmed(last) != END {
        return Err(malformed(
            last + 1,
            format!("the patch must end with '{END}'"),
        ));
    }
    let body = &lines[..last];
    let mut files = Vec::new();
    let mut i = first + 1;
    while i < body.len() {
        let line = body[i].trim();
        if line.is_empty() {
            i += 1;
            continue;
        }
        let start = i;
        let path = |rest: &str| -> Result<String, PolicyError> {
            let path = rest.trim();
            if path.is_empty() {
                return Err(malformed(start + 1, "the file header names no path"));
            }
            Ok(path.to_owned())
        };
        let change = if let Some(rest) = after(line, ADD) {
            let path = path(rest)?;
            i += 1;
            let mut content = Vec::new();
            while let Some(added) = body.get(i).and_then(|l| l.strip_prefix('+')) {
                content.push(added.to_owned());
                i += 1;
            }
            let change = Change::Add {
                lines: content,
                final_newline: true,
                executable: false,
            };
            (path, change)
        } else if let Some(rest) = after(line, DELETE) {
            i += 1;
            (path(rest)?, Change::Delete { hunks: Vec::new() })
        } else if let Some(rest) = after(line, UPDATE) {
            let path = path(rest)?;
            i += 1;
            let move_to = match body.get(i).and_then(|l| after(l.trim(), MOVE)) {
                Some(to) if !to.trim().is_empty() => {
                    i += 1;
                    Some(to.trim().to_owned())
                }
                Some(_) => return Err(malformed(i + 1, "'*** Move to:' names no path")),
                None => None,
            };
            let mut hunks = Vec::new();
            while i < body.len() {
                if body[i].trim().is_empty() {
                    i += 1;
                    continue;
                }
                if body[i].starts_with('*') {
                    break;
                }
                let (hunk, used) = parse_hunk(&body[i..], i, hunks.is_empty())?;
                hunks.push(hunk);
                i += used;
            }
            if hunks.is_empty() && move_to.is_none() {
                return Err(malformed(
                    start + 1,
                    format!(
                        "the update of {} has no hunk: follow it with '@@' and its ' ', '-' \
                         and '+' lines",
                        echo(&path)
                    ),
                ));
            }
            let change = Change::Update {
                hunks,
                move_to,
                executable: None,
            };
            (path, change)
        } else {
            return Err(malformed(
                start + 1,
                format!(
                    "{} is not a file header: expected '{ADD} PATH', '{DELETE} PATH' or \
                     '{UPDATE} PATH'",
                    echo(line)
                ),
            ));
        };
        let (path, change) = change;
        files.push(FilePatch {
            path,
            patch_line: start + 1,
            change,
        });
    }
    Ok(files)
}

/// A unified diff's hunk header where the envelope wants an anchor line: `-3,4 +3,5 @@…`.
fn is_unified_range(anchor: &str) -> bool {
    let mut parts = anchor.split_whitespace();
    let number = |part: Option<&str>, sign: char| {
        part.and_then(|p| p.strip_prefix(sign)).is_some_and(|p| {
            !p.is_empty()
                && p.split(',').count() <= 2
                && p.split(',')
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    number(parts.next(), '-') && number(parts.next(), '+')
}

/// One hunk from the start of `lines` (`at` is its index in the patch): its `@@` line, unless
/// it is the file's first and has none, then its lines up to the next marker or header.
/// Answers the hunk and how many lines it used.
fn parse_hunk(lines: &[&str], at: usize, first: bool) -> Result<(Hunk, usize), PolicyError> {
    let head = lines[0];
    let (header, anchor, start) = if head.trim_end() == "@@" {
        ("@@".to_owned(), None, 1)
    } else if let Some(anchor) = head.strip_prefix("@@ ") {
        let anchor =
            (!anchor.trim().is_empty() && !is_unified_range(anchor)).then(|| anchor.to_owned());
        (head.trim_end().to_owned(), anchor, 1)
    } else if first {
        (String::new(), None, 0)
    } else {
        return Err(malformed(
            at + 1,
            format!(
                "expected a hunk's '@@' (or '@@ LINE') line, got {}",
                echo(head)
            ),
        ));
    };
    let mut hunk = Hunk {
        header,
        patch_line: at + 1,
        anchor,
        old_index: None,
        lines: Vec::new(),
        at_end: false,
        final_newline: None,
    };
    let mut used = 0;
    for line in &lines[start..] {
        if line.trim() == END_OF_FILE {
            if used == 0 {
                break;
            }
            hunk.at_end = true;
            used += 1;
            break;
        }
        let (marker, text) = match line.char_indices().nth(1) {
            Some((i, _)) => (&line[..i], &line[i..]),
            None => (*line, ""),
        };
        hunk.lines.push(match marker {
            "" => Line::Context(String::new()),
            " " => Line::Context(text.to_owned()),
            "+" => Line::Add(text.to_owned()),
            "-" => Line::Remove(text.to_owned()),
            _ if used == 0 => {
                return Err(malformed(
                    at + start + 1,
                    format!(
                        "{} is not a hunk line: each starts with ' ' (context), '-' (removed) \
                         or '+' (added)",
                        echo(line)
                    ),
                ))
            }
            // The next hunk or file header.
            _ => break,
        });
        used += 1;
    }
    if used == 0 {
        return Err(malformed(at + 1, "the hunk has no lines"));
    }
    Ok((hunk, start + used))
}

#[cfg(test)]
mod tests {
    use super::super::{Change, Format, Line, Patch};
    use super::*;

    fn parse_ok(text: &str) -> Vec<FilePatch> {
        parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn context(t: &str) -> Line {
        Line::Context(t.into())
    }
    fn add(t: &str) -> Line {
        Line::Add(t.into())
    }
    fn remove(t: &str) -> Line {
        Line::Remove(t.into())
    }

    #[test]
    fn every_kind_of_section_parses() {
        let files = parse_ok(
            "*** Begin Patch\n\
             *** Add File: path/add.py\n\
             +abc\n\
             +def\n\
             *** Delete File: path/delete.py\n\
             *** Update File: path/update.py\n\
             *** Move to: path/update2.py\n\
             @@ def f():\n\
             -    pass\n\
             +    return 123\n\
             *** End Patch",
        );
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].path, "path/add.py");
        assert_eq!(
            files[0].change,
            Change::Add {
                lines: vec!["abc".into(), "def".into()],
                final_newline: true,
                executable: false
            }
        );
        assert_eq!(files[1].change, Change::Delete { hunks: Vec::new() });
        let Change::Update { hunks, move_to, .. } = &files[2].change else {
            panic!("{:?}", files[2]);
        };
        assert_eq!(move_to.as_deref(), Some("path/update2.py"));
        assert_eq!(hunks.len(), 1);
        assert_eq!(hunks[0].anchor.as_deref(), Some("def f():"));
        assert_eq!(hunks[0].header, "@@ def f():");
        assert_eq!(
            hunks[0].lines,
            vec![remove("    pass"), add("    return 123")]
        );
        assert_eq!((files[0].patch_line, files[1].patch_line), (2, 5));
    }

    #[test]
    fn an_update_may_hold_several_hunks_and_end_of_file() {
        let files = parse_ok(
            "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+zwei\n\n@@ four\n five\n\
             +six\n*** End of File\n*** End Patch\n",
        );
        let hunks = files[0].hunks();
        assert_eq!(hunks.len(), 2);
        // The empty line inside the first hunk is an empty context line, as in codex.
        assert_eq!(
            hunks[0].lines,
            vec![context("one"), remove("two"), add("zwei"), context("")]
        );
        assert!(!hunks[0].at_end);
        assert_eq!(hunks[1].lines, vec![context("five"), add("six")]);
        assert!(hunks[1].at_end);
        assert_eq!(hunks[1].patch_line, 8);
    }

    #[test]
    fn the_first_hunk_may_omit_its_at_at_line() {
        let files =
            parse_ok("*** Begin Patch\n*** Update File: f.py\n import foo\n+bar\n*** End Patch");
        let hunk = &files[0].hunks()[0];
        assert_eq!(hunk.header, "");
        assert_eq!(hunk.lines, vec![context("import foo"), add("bar")]);
    }

    #[test]
    fn padding_crlf_and_a_heredoc_are_accepted() {
        let text =
            "\n<<'EOF'\r\n  *** Begin Patch \r\n*** Add File: a\r\n+x\r\n *** End Patch\r\nEOF\n\n";
        assert_eq!(Format::detect(text), Format::ApplyPatch);
        let files = parse_ok(text);
        assert_eq!(
            files[0].change,
            Change::Add {
                lines: vec!["x".into()],
                final_newline: true,
                executable: false
            }
        );
    }

    #[test]
    fn blank_lines_between_sections_and_a_pure_move_are_accepted() {
        let files = parse_ok(
            "*** Begin Patch\n\n*** Delete File: a\n\n*** Update File: b\n*** Move to: c\n\n*** End Patch",
        );
        assert_eq!(files.len(), 2);
        assert_eq!(
            files[1].change,
            Change::Update {
                hunks: Vec::new(),
                move_to: Some("c".into()),
                executable: None
            }
        );
    }

    #[test]
    fn a_unified_range_in_place_of_an_anchor_is_a_bare_at_at() {
        let files =
            parse_ok("*** Begin Patch\n*** Update File: a\n@@ -1,2 +1,2 @@\n-x\n+y\n*** End Patch");
        assert_eq!(files[0].hunks()[0].anchor, None);
        assert_eq!(files[0].hunks()[0].header, "@@ -1,2 +1,2 @@");
    }

    #[test]
    fn malformed_envelopes_are_refused_with_their_line() {
        let cases: &[(&str, &str)] = &[
            ("", "line 1: the patch must start with '*** Begin Patch'"),
            ("bad", "line 1: the patch must start"),
            (
                "*** Begin Patch\nbad",
                "line 2: the patch must end with '*** End Patch'",
            ),
            ("*** Begin Patch", "line 1: the patch must end"),
            (
                "*** Begin Patch\n*** Update File: t.py\n*** End Patch",
                "line 2: the update of 't.py' has no hunk",
            ),
            (
                "*** Begin Patch\n*** Frobnicate File: x\n*** End Patch",
                "line 2: '*** Frobnicate File: x' is not a file header",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n x\n@@\n*** End Patch",
                "line 5: the hunk has no lines",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n x\nbad\n*** End Patch",
                "line 5: expected a hunk's '@@'",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\nbad\n*** End Patch",
                "line 4: 'bad' is not a hunk line",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n x\nbad\n*** End Patch",
                "line 4: expected a hunk's '@@'",
            ),
            (
                "*** Begin Patch\n*** Add File:   \n*** End Patch",
                "line 2: the file header names no path",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** Move to: \n*** End Patch",
                "line 3: '*** Move to:' names no path",
            ),
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
        // Through the whole parse, an envelope that names nothing is refused too.
        let err = Patch::parse("*** Begin Patch\n*** End Patch", None).unwrap_err();
        assert_eq!(err.rule, "patch.empty");
    }
}
