//! Hunks applied to one text in memory, in order, each after the one before.
//!
//! A hunk's old lines are looked for as codex does: exactly, then ignoring trailing whitespace,
//! then ignoring whitespace around each line, then also reading typographic dashes, quotes and
//! spaces as their ASCII kin. Where they go: after its `@@ LINE` anchor (found the same way);
//! nearest the line its unified header names, shifted as the hunks before it shifted; at the end
//! of the file for `*** End of File`; else the first match after the previous hunk. Context
//! lines keep the file's own text (a match that ignored whitespace does not rewrite them), every
//! line keeps its own ending, added lines take the file's (CRLF when most of its lines are), and
//! a UTF-8 BOM stays.

use super::{Hunk, Line};
use crate::policy::echo;

const BOM: &str = "\u{feff}";

/// How many line comparisons one patch may spend looking for its hunks: far more than any real
/// patch needs, and a bound on one built to make the search quadratic.
pub const MATCH_BUDGET: u64 = 200_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileLine {
    text: String,
    /// Ends in CRLF (for the last line without an ending: would, if it had one).
    cr: bool,
}

/// A text file as lines, with what it takes to write it back byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFile {
    bom: bool,
    crlf: bool,
    lines: Vec<FileLine>,
    final_newline: bool,
}

impl TextFile {
    pub fn parse(text: &str) -> TextFile {
        let (bom, body) = match text.strip_prefix(BOM) {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let crlf = is_crlf(body);
        let mut parts: Vec<&str> = body.split('\n').collect();
        let final_newline = parts.len() > 1 && parts.last() == Some(&"");
        if parts.last() == Some(&"") {
            parts.pop();
        }
        let last = parts.len().saturating_sub(1);
        let lines = parts
            .into_iter()
            .enumerate()
            .map(|(i, part)| match part.strip_suffix('\r') {
                Some(text) if i < last || final_newline => FileLine {
                    text: text.to_owned(),
                    cr: true,
                },
                _ => FileLine {
                    text: part.to_owned(),
                    cr: crlf && i == last && !final_newline,
                },
            })
            .collect();
        TextFile {
            bom,
            crlf,
            lines,
            final_newline,
        }
    }

    /// A new file of `lines` (LF endings).
    pub fn from_lines(lines: &[String], final_newline: bool) -> TextFile {
        TextFile {
            bom: false,
            crlf: false,
            lines: lines
                .iter()
                .map(|text| FileLine {
                    text: text.clone(),
                    cr: false,
                })
                .collect(),
            final_newline,
        }
    }

    pub fn line_count(&self) -> usize {
        self.lines.len()
    }

    pub fn render(&self) -> String {
        let size: usize = self.lines.iter().map(|l| l.text.len() + 2).sum();
        let mut out = String::with_capacity(size + BOM.len());
        if self.bom {
            out.push_str(BOM);
        }
        let last = self.lines.len().saturating_sub(1);
        for (i, line) in self.lines.iter().enumerate() {
            out.push_str(&line.text);
            if i < last || self.final_newline {
                out.push_str(if line.cr { "\r\n" } else { "\n" });
            }
        }
        out
    }
}

/// True when most line endings are CRLF (as `file_edit` decides).
fn is_crlf(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    let lf = text.matches('\n').count();
    crlf > 0 && crlf * 2 >= lf
}

/// Why a hunk did not apply: its index among the file's hunks (0-based) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkFailure {
    pub index: usize,
    pub reason: String,
    /// The match budget ran out (a limit, not a mismatch).
    pub exhausted: bool,
}

/// The budget ran out.
struct Exhausted;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Exact,
    TrimEnd,
    Trim,
    Loose,
}

const LEVELS: [Level; 4] = [Level::Exact, Level::TrimEnd, Level::Trim, Level::Loose];

/// Typographic punctuation read as ASCII, as codex's last, most lenient pass does.
fn ascii_kin(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' => '\'',
        '\u{201C}'..='\u{201F}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

fn same(level: Level, a: &str, b: &str) -> bool {
    match level {
        Level::Exact => a == b,
        Level::TrimEnd => a.trim_end() == b.trim_end(),
        Level::Trim => a.trim() == b.trim(),
        Level::Loose => a
            .trim()
            .chars()
            .map(ascii_kin)
            .eq(b.trim().chars().map(ascii_kin)),
    }
}

struct Seeker<'a> {
    lines: &'a [FileLine],
    budget: &'a mut u64,
}

impl Seeker<'_> {
    fn matches_at(&mut self, at: usize, pattern: &[&str], level: Level) -> Result<bool, Exhausted> {
        for (k, want) in pattern.iter().enumerate() {
            if *self.budget == 0 {
                return Err(Exhausted);
            }
            *self.budget -= 1;
            match self.lines.get(at + k) {
                Some(line) if same(level, &line.text, want) => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Where `pattern` starts, at or after `from`: at the end only when `at_end`, else nearest
    /// `near` when given, else the first; each strictness tried over every place before the
    /// next is.
    fn find(
        &mut self,
        pattern: &[&str],
        from: usize,
        near: Option<usize>,
        at_end: bool,
    ) -> Result<Option<usize>, Exhausted> {
        let Some(last) = self.lines.len().checked_sub(pattern.len()) else {
            return Ok(None);
        };
        if from > last {
            return Ok(None);
        }
        for level in LEVELS {
            if at_end {
                if self.matches_at(last, pattern, level)? {
                    return Ok(Some(last));
                }
                continue;
            }
            match near {
                Some(near) => {
                    let near = near.clamp(from, last);
                    for distance in 0..=(last - from) {
                        let below = near.checked_sub(distance).filter(|at| *at >= from);
                        let above = Some(near + distance).filter(|at| *at <= last && distance > 0);
                        if below.is_none() && above.is_none() {
                            break;
                        }
                        for at in [below, above].into_iter().flatten() {
                            if self.matches_at(at, pattern, level)? {
                                return Ok(Some(at));
                            }
                        }
                    }
                }
                None => {
                    for at in from..=last {
                        if self.matches_at(at, pattern, level)? {
                            return Ok(Some(at));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// The place at or after `from` where the longest run of `pattern`'s first lines matches
    /// (ignoring surrounding whitespace), and how many: what a failure message points at.
    fn closest(
        &mut self,
        pattern: &[&str],
        from: usize,
    ) -> Result<Option<(usize, usize)>, Exhausted> {
        let mut best: Option<(usize, usize)> = None;
        for at in from..self.lines.len() {
            let mut run = 0;
            while run < pattern.len() && at + run < self.lines.len() {
                if *self.budget == 0 {
                    return Err(Exhausted);
                }
                *self.budget -= 1;
                if !same(Level::Trim, &self.lines[at + run].text, pattern[run]) {
                    break;
                }
                run += 1;
            }
            if run > 0 && best.is_none_or(|(_, longest)| run > longest) {
                best = Some((at, run));
            }
        }
        Ok(best)
    }
}

/// One hunk's place in the file: its old lines start at `start`; `lines` replace them.
struct Edit<'h> {
    start: usize,
    old_len: usize,
    lines: Vec<&'h Line>,
}

/// `hunks` applied to `file`, in order; the first that does not apply fails it all. `budget`
/// is the comparisons left to the patch ([`MATCH_BUDGET`] for a whole patch).
pub fn apply_hunks(
    file: &TextFile,
    hunks: &[Hunk],
    budget: &mut u64,
) -> Result<TextFile, HunkFailure> {
    let mut seeker = Seeker {
        lines: &file.lines,
        budget,
    };
    let len = file.lines.len();
    let mut cursor = 0;
    let mut drift: isize = 0;
    let mut final_newline = None;
    let mut edits: Vec<Edit<'_>> = Vec::with_capacity(hunks.len());
    for (index, hunk) in hunks.iter().enumerate() {
        let fail = |reason: String| HunkFailure {
            index,
            reason,
            exhausted: false,
        };
        let exhausted = |_: Exhausted| HunkFailure {
            index,
            reason: "looking for it took too long (the file has many alike lines): give the \
                     hunk lines that occur once"
                .into(),
            exhausted: true,
        };
        if let Some(anchor) = &hunk.anchor {
            match seeker
                .find(&[anchor.as_str()], cursor, None, false)
                .map_err(exhausted)?
            {
                Some(at) => cursor = at + 1,
                None => {
                    return Err(fail(format!(
                        "its '@@' line {} is not in the file at or after line {} (the file has \
                         {len} lines)",
                        echo(anchor),
                        cursor + 1
                    )))
                }
            }
        }
        let mut lines: Vec<&Line> = hunk.lines.iter().collect();
        let mut old: Vec<&str> = lines.iter().filter_map(|l| l.old()).collect();
        // Line numbers are the client's: any value, so the arithmetic saturates.
        let near = hunk
            .old_index
            .map(|at| usize::try_from(signed(at).saturating_add(drift)).unwrap_or(0));
        let start = if old.is_empty() {
            match near {
                Some(at) => at.clamp(cursor, len),
                None if hunk.anchor.is_some() && !hunk.at_end => cursor,
                // As codex: at the end, before a last empty line.
                None => match file.lines.last() {
                    Some(last) if last.text.is_empty() => (len - 1).max(cursor),
                    _ => len,
                },
            }
        } else {
            let mut found = seeker
                .find(&old, cursor, near, hunk.at_end)
                .map_err(exhausted)?;
            // As codex: an empty last line is often the patch's own final newline; look again
            // without it.
            if found.is_none() && old.last() == Some(&"") {
                if let Some(at) = lines.iter().rposition(|l| l.old().is_some()) {
                    lines.remove(at);
                    old.pop();
                    found = seeker
                        .find(&old, cursor, near, hunk.at_end)
                        .map_err(exhausted)?;
                }
            }
            match found {
                Some(at) => at,
                None => {
                    let closest = seeker.closest(&old, cursor).map_err(exhausted)?;
                    return Err(fail(not_found(hunk, &old, cursor, near, closest, file)));
                }
            }
        };
        if let Some(at) = hunk.old_index {
            drift = signed(start).saturating_sub(signed(at));
        }
        cursor = start + old.len();
        if hunk.final_newline.is_some() {
            final_newline = hunk.final_newline;
        }
        edits.push(Edit {
            start,
            old_len: old.len(),
            lines,
        });
    }
    // Insertions at the end may sort before later hunks; at one place, insertions go first.
    edits.sort_by_key(|e| (e.start, e.old_len));
    let mut out: Vec<FileLine> = Vec::with_capacity(len + hunks.len());
    let mut at = 0;
    for edit in &edits {
        let start = edit.start.max(at);
        out.extend_from_slice(&file.lines[at..start]);
        at = start;
        for line in &edit.lines {
            match line {
                Line::Context(_) => {
                    if let Some(kept) = file.lines.get(at) {
                        out.push(kept.clone());
                    }
                    at += 1;
                }
                Line::Remove(_) => at += 1,
                Line::Add(text) => out.push(FileLine {
                    text: text.clone(),
                    cr: file.crlf,
                }),
            }
        }
        at = at.min(len);
    }
    out.extend_from_slice(&file.lines[at..]);
    let final_newline = final_newline.unwrap_or(file.lines.is_empty() || file.final_newline);
    // A last line that gains an ending takes the file's kind.
    if let Some(last) = out.last_mut() {
        if final_newline && !file.final_newline && !last.cr {
            last.cr = file.crlf;
        }
    }
    Ok(TextFile {
        bom: file.bom,
        crlf: file.crlf,
        lines: out,
        final_newline,
    })
}

fn signed(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

/// The reason a hunk's old lines were not found, and where the nearest thing to them is.
fn not_found(
    hunk: &Hunk,
    old: &[&str],
    cursor: usize,
    near: Option<usize>,
    closest: Option<(usize, usize)>,
    file: &TextFile,
) -> String {
    let len = file.lines.len();
    let count = old.len();
    let place = if hunk.at_end {
        "at the end of the file".to_owned()
    } else {
        match near {
            Some(near) => format!("near line {} nor anywhere after line {cursor}", near + 1),
            None => format!("at or after line {}", cursor + 1),
        }
    };
    let (plural, are) = if count == 1 { ("", "is") } else { ("s", "are") };
    let mut reason = format!(
        "context not found: its {count} old line{plural} (first {}) {are} not in the file \
         {place} (the file has {len} lines)",
        echo(old.first().copied().unwrap_or(""))
    );
    if let Some((at, run)) = closest {
        if run < count {
            let found = file
                .lines
                .get(at + run)
                .map_or("the end of the file".to_owned(), |l| echo(&l.text));
            reason.push_str(&format!(
                "; the nearest, at line {}, matches its first {run} then has {found} where the \
                 hunk has {}",
                at + 1,
                echo(old[run])
            ));
        }
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hunk(lines: Vec<Line>) -> Hunk {
        Hunk {
            header: "@@".into(),
            patch_line: 1,
            anchor: None,
            old_index: None,
            lines,
            at_end: false,
            final_newline: None,
        }
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

    fn apply(text: &str, hunks: &[Hunk]) -> Result<String, HunkFailure> {
        let mut budget = MATCH_BUDGET;
        apply_hunks(&TextFile::parse(text), hunks, &mut budget).map(|f| f.render())
    }

    #[test]
    fn parse_and_render_round_trip_every_text() {
        for text in [
            "",
            "\n",
            "a",
            "a\n",
            "a\r\nb\r\n",
            "a\r\nb",
            "a\nb\r\nc",
            "\u{feff}x\r\n",
            "\n\n\n",
            "\r",
            "a\r",
        ] {
            assert_eq!(TextFile::parse(text).render(), text, "{text:?}");
        }
    }

    #[test]
    fn hunks_apply_in_order_and_keep_the_rest() {
        let text = "one\ntwo\nthree\nfour\nfive\n";
        let out = apply(
            text,
            &[
                hunk(vec![c("one"), r("two"), a("2")]),
                hunk(vec![c("four"), a("4½"), c("five")]),
            ],
        )
        .unwrap();
        assert_eq!(out, "one\n2\nthree\nfour\n4½\nfive\n");
    }

    #[test]
    fn a_later_hunk_is_looked_for_after_the_one_before() {
        let text = "x\ny\nx\ny\n";
        let out = apply(
            text,
            &[
                hunk(vec![c("x"), r("y"), a("1")]),
                hunk(vec![c("x"), r("y"), a("2")]),
            ],
        )
        .unwrap();
        assert_eq!(out, "x\n1\nx\n2\n");
        let err = apply(
            "x\ny\n",
            &[hunk(vec![c("x"), r("y")]), hunk(vec![c("x"), r("y")])],
        )
        .unwrap_err();
        assert_eq!(err.index, 1);
        assert!(err.reason.contains("at or after line 3"), "{}", err.reason);
    }

    #[test]
    fn whitespace_is_forgiven_in_steps_and_context_keeps_the_files_text() {
        let text = "\tdef f():\n\t\treturn 1   \n";
        let out = apply(
            text,
            &[hunk(vec![
                c("def f():"),
                r("    return 1"),
                a("\t\treturn 2"),
            ])],
        )
        .unwrap();
        assert_eq!(out, "\tdef f():\n\t\treturn 2\n");
        // Typographic quotes and dashes in the file match their ASCII kin in the hunk.
        let out = apply(
            "say “hi” — ok\n",
            &[hunk(vec![r("say \"hi\" - ok"), a("x")])],
        )
        .unwrap();
        assert_eq!(out, "x\n");
    }

    #[test]
    fn an_exact_match_wins_over_an_earlier_lenient_one() {
        let out = apply("a \nb\na\nb\n", &[hunk(vec![c("a"), r("b"), a("B")])]).unwrap();
        assert_eq!(out, "a \nb\na\nB\n");
    }

    #[test]
    fn an_anchor_places_the_hunk_after_it() {
        let text = "fn a() {\n    x\n}\nfn b() {\n    x\n}\n";
        let mut h = hunk(vec![r("    x"), a("    y")]);
        h.anchor = Some("fn b() {".into());
        assert_eq!(
            apply(text, &[h.clone()]).unwrap(),
            "fn a() {\n    x\n}\nfn b() {\n    y\n}\n"
        );
        // A pure insertion goes right after its anchor.
        h.lines = vec![a("    // b")];
        assert_eq!(
            apply(text, &[h.clone()]).unwrap(),
            "fn a() {\n    x\n}\nfn b() {\n    // b\n    x\n}\n"
        );
        h.anchor = Some("fn c() {".into());
        let err = apply(text, &[h]).unwrap_err();
        assert!(
            err.reason
                .contains("'@@' line 'fn c() {' is not in the file"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn a_pure_insertion_without_a_place_goes_at_the_end() {
        assert_eq!(apply("a\n", &[hunk(vec![a("b")])]).unwrap(), "a\nb\n");
        assert_eq!(apply("", &[hunk(vec![a("b")])]).unwrap(), "b\n");
        // Before a last empty line, as codex.
        assert_eq!(apply("a\n\n", &[hunk(vec![a("b")])]).unwrap(), "a\nb\n\n");
    }

    #[test]
    fn end_of_file_matches_only_the_end() {
        let mut h = hunk(vec![r("x"), a("y")]);
        h.at_end = true;
        assert_eq!(apply("x\nx\n", &[h.clone()]).unwrap(), "x\ny\n");
        assert!(apply("x\nz\n", &[h])
            .unwrap_err()
            .reason
            .contains("at the end of the file"));
    }

    #[test]
    fn a_trailing_empty_old_line_is_dropped_when_that_is_what_it_takes() {
        let out = apply("a\nb\n", &[hunk(vec![c("a"), r("b"), a("c"), c("")])]).unwrap();
        assert_eq!(out, "a\nc\n");
    }

    #[test]
    fn a_unified_line_number_picks_the_nearest_match_and_shifts_later_ones() {
        let text = "x\n1\nx\n2\nx\n3\nx\n4\n";
        let mut h = hunk(vec![r("x"), a("X")]);
        h.old_index = Some(4);
        assert_eq!(
            apply(text, &[h.clone()]).unwrap(),
            "x\n1\nx\n2\nX\n3\nx\n4\n"
        );
        // The first hunk landed two lines early: the second is looked for two lines early too.
        let mut first = hunk(vec![r("1"), a("one")]);
        first.old_index = Some(3);
        let mut second = hunk(vec![r("x"), a("X")]);
        second.old_index = Some(6);
        assert_eq!(
            apply(text, &[first, second]).unwrap(),
            "x\none\nx\n2\nX\n3\nx\n4\n"
        );
        // A pure insertion lands where its line number says.
        let mut insert = hunk(vec![a("new")]);
        insert.old_index = Some(2);
        assert_eq!(apply("a\nb\nc\n", &[insert]).unwrap(), "a\nb\nnew\nc\n");
    }

    #[test]
    fn any_line_number_is_only_a_hint() {
        for at in [usize::MAX, usize::MAX / 2 + 1, 1 << 40] {
            let mut first = hunk(vec![r("b"), a("B")]);
            first.old_index = Some(at);
            let mut second = hunk(vec![a("end")]);
            second.old_index = Some(0);
            assert_eq!(apply("a\nb\n", &[first, second]).unwrap(), "a\nB\nend\n");
        }
    }

    #[test]
    fn crlf_files_stay_crlf_and_a_bom_stays() {
        let out = apply(
            "\u{feff}one\r\ntwo\r\n",
            &[hunk(vec![c("one"), r("two"), a("2"), a("3")])],
        )
        .unwrap();
        assert_eq!(out, "\u{feff}one\r\n2\r\n3\r\n");
        // Lines the hunk does not touch keep their own endings, even in a mixed file.
        let out = apply("a\r\nb\nc\r\n", &[hunk(vec![r("c"), a("C")])]).unwrap();
        assert_eq!(out, "a\r\nb\nC\r\n");
    }

    #[test]
    fn the_final_newline_is_kept_unless_a_hunk_says() {
        assert_eq!(
            apply("a\nb", &[hunk(vec![r("a"), a("A")])]).unwrap(),
            "A\nb"
        );
        let mut h = hunk(vec![r("b"), a("B")]);
        h.final_newline = Some(true);
        assert_eq!(apply("a\nb", &[h.clone()]).unwrap(), "a\nB\n");
        h.final_newline = Some(false);
        assert_eq!(apply("a\nb\n", &[h]).unwrap(), "a\nB");
    }

    #[test]
    fn a_failure_says_where_it_looked_and_what_differs() {
        let err = apply(
            "fn a() {\n    one();\n    two();\n}\n",
            &[hunk(vec![
                c("fn a() {"),
                c("    one();"),
                r("    three();"),
            ])],
        )
        .unwrap_err();
        assert_eq!(err.index, 0);
        assert!(!err.exhausted);
        assert!(
            err.reason.starts_with(
                "context not found: its 3 old lines (first 'fn a() {') are not in the file at or \
                 after line 1 (the file has 4 lines)"
            ),
            "{}",
            err.reason
        );
        assert!(
            err.reason.contains(
                "the nearest, at line 1, matches its first 2 then has '    two();' where the \
                 hunk has '    three();'"
            ),
            "{}",
            err.reason
        );
    }

    #[test]
    fn a_search_built_to_be_quadratic_runs_out_of_budget_instead_of_time() {
        let text = "a\n".repeat(20_000);
        let mut lines = vec![c("a"); 5_000];
        lines.push(r("b"));
        let mut budget = 1_000_000;
        let err = apply_hunks(&TextFile::parse(&text), &[hunk(lines)], &mut budget).unwrap_err();
        assert!(err.exhausted, "{}", err.reason);
    }
}
