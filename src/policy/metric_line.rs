//! The metrics a command reports of itself, one line each of its output:
//!
//! ```text
//! ::metric loss=0.31 step=120
//! ::metric {"loss": 0.31, "step": 120}
//! ```
//!
//! The output is the workspace's, so every byte of it is hostile: a line is read only up to
//! [`MAX_METRIC_LINE_BYTES`], names and values are checked, and a line that says `::metric` and
//! does not parse whole is refused, never half taken. The agent (which tees these lines into the
//! metrics stream) and the gateway (which folds them into a run's record) read them by these
//! rules alone.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The word that starts a metric line (after blanks); `::metrics…` is another word.
pub const METRIC_PREFIX: &str = "::metric";
/// A longer line is not a metric line, and is not held while waiting for its end.
pub const MAX_METRIC_LINE_BYTES: usize = 4096;
/// The longest name, in characters (all ASCII).
pub const MAX_METRIC_NAME_CHARS: usize = 64;
/// The most names a run keeps; a line that names more could never be kept whole, and is refused.
pub const MAX_METRIC_NAMES: usize = 32;

/// What one line of output says.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricLine {
    /// Not a metric line: it does not start with the word `::metric`.
    Other,
    /// It says `::metric` and does not parse.
    Refused,
    /// The values it reports, by name, in the order the names first appear (a name given twice
    /// keeps its last value).
    Values(Vec<(String, f64)>),
}

/// What `line` (without its newline) reports.
///
/// Names are `[A-Za-z_][A-Za-z0-9_.:/-]{0,63}`; values finite numbers (`name=VALUE` in decimal
/// notation, or JSON numbers in an object); at least one and at most [`MAX_METRIC_NAMES`] names.
pub fn metric_line(line: &str) -> MetricLine {
    let text = line.trim();
    let Some(rest) = text.strip_prefix(METRIC_PREFIX) else {
        return MetricLine::Other;
    };
    if rest.chars().next().is_some_and(|c| !c.is_whitespace()) {
        return MetricLine::Other;
    }
    let rest = rest.trim();
    let values = match rest.starts_with('{') {
        true => json_values(rest),
        false => word_values(rest),
    };
    match values {
        Some(values) if !values.is_empty() => MetricLine::Values(values),
        _ => MetricLine::Refused,
    }
}

/// Whether `name` may name a metric.
pub fn is_metric_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let Some(&first) = bytes.first() else {
        return false;
    };
    bytes.len() <= MAX_METRIC_NAME_CHARS
        && (first.is_ascii_alphabetic() || first == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'-'))
}

/// The values of `name=VALUE` words; `None` when one word is not such a pair.
fn word_values(rest: &str) -> Option<Vec<(String, f64)>> {
    let mut values = Values::default();
    for word in rest.split_whitespace() {
        let (name, value) = word.split_once('=')?;
        values.add(name, decimal(value)?)?;
    }
    Some(values.0)
}

/// The values of a JSON object of numbers; `None` for anything else (trailing text included).
fn json_values(rest: &str) -> Option<Vec<(String, f64)>> {
    let Members(members) = serde_json::from_str::<Members<'_>>(rest).ok()?;
    let mut values = Values::default();
    for (name, raw) in members {
        values.add(&name, json_number(raw.get())?)?;
    }
    Some(values.0)
}

/// A finite number in decimal notation (`0.31`, `-2`, `1e-3`, `+.5`), correctly rounded.
fn decimal(text: &str) -> Option<f64> {
    // Rust also reads `inf` and `NaN`, which are not finite; nothing else it reads is refused.
    text.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A JSON value's text when it is a number, read as [`decimal`] does: JSON's grammar is a subset
/// of it, and reading the text keeps the value correctly rounded (and an integer too large for a
/// float refused, as not finite).
fn json_number(raw: &str) -> Option<f64> {
    let raw = raw.trim();
    let first = raw.bytes().next()?;
    if first != b'-' && !first.is_ascii_digit() {
        return None; // a string, a boolean, null, an array or an object
    }
    decimal(raw)
}

/// Values being collected: names checked, a repeated name updated in place, at most
/// [`MAX_METRIC_NAMES`] names.
#[derive(Default)]
struct Values(Vec<(String, f64)>);

impl Values {
    fn add(&mut self, name: &str, value: f64) -> Option<()> {
        if !is_metric_name(name) {
            return None;
        }
        if let Some(held) = self.0.iter_mut().find(|(held, _)| held == name) {
            held.1 = value;
            return Some(());
        }
        if self.0.len() >= MAX_METRIC_NAMES {
            return None;
        }
        self.0.push((name.to_owned(), value));
        Some(())
    }
}

/// A JSON object's members in the order written, each value as its raw text. A value's text is
/// checked by serde_json's grammar without building it (with no recursion, so no depth of
/// nesting costs more than its bytes).
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;

        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of metric values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }

        deserializer.deserialize_map(MembersVisitor)
    }
}

/// One output stream (stdout or stderr: never the two mixed) read as lines for metric lines:
/// bytes cut anywhere are joined into lines, and a line longer than [`MAX_METRIC_LINE_BYTES`]
/// is dropped whole, up to its newline, however many reads it spans (never a tail of it parsed
/// as a line of its own). At most that many bytes are held between reads.
#[derive(Debug, Default)]
pub struct MetricLineReader {
    /// The start of a line whose end has not come yet.
    partial: Vec<u8>,
    /// In a line too long to be a metric line: everything up to its newline goes.
    dropping: bool,
}

impl MetricLineReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads `data`, the stream's next bytes: `found` gets what each metric line in it says
    /// (never [`MetricLine::Other`]), in order.
    pub fn feed(&mut self, data: &[u8], found: &mut dyn FnMut(MetricLine)) {
        let mut rest = data;
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let (line, after) = (&rest[..end], &rest[end + 1..]);
            rest = after;
            if std::mem::take(&mut self.dropping) {
                continue;
            }
            if self.partial.is_empty() {
                read_line(line, found);
            } else if self.partial.len() + line.len() <= MAX_METRIC_LINE_BYTES {
                self.partial.extend_from_slice(line);
                read_line(&self.partial, found);
                self.partial.clear();
            } else {
                self.partial.clear();
            }
        }
        if self.dropping {
            return;
        }
        if self.partial.len() + rest.len() > MAX_METRIC_LINE_BYTES {
            self.partial = Vec::new(); // its memory too: a long line is no reason to keep it
            self.dropping = true;
        } else {
            self.partial.extend_from_slice(rest);
        }
    }

    /// The stream ended: a last line without its newline counts too.
    pub fn finish(&mut self, found: &mut dyn FnMut(MetricLine)) {
        if !std::mem::take(&mut self.dropping) && !self.partial.is_empty() {
            read_line(&self.partial, found);
        }
        self.partial = Vec::new();
    }
}

/// What one complete line says, when it is a metric line at all (most output is not: a search
/// for the word decides before any decoding).
fn read_line(line: &[u8], found: &mut dyn FnMut(MetricLine)) {
    if line.len() > MAX_METRIC_LINE_BYTES
        || memchr::memmem::find(line, METRIC_PREFIX.as_bytes()).is_none()
    {
        return;
    }
    match metric_line(&String::from_utf8_lossy(line)) {
        MetricLine::Other => {}
        said => found(said),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn values(pairs: &[(&str, f64)]) -> MetricLine {
        MetricLine::Values(pairs.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect())
    }

    #[test]
    fn both_forms_parse() {
        assert_eq!(
            metric_line("::metric loss=0.31 step=120"),
            values(&[("loss", 0.31), ("step", 120.0)])
        );
        assert_eq!(
            metric_line(r#"  ::metric {"loss": 0.31, "gpu/util": 7}"#),
            values(&[("loss", 0.31), ("gpu/util", 7.0)])
        );
        assert_eq!(
            metric_line("::metric   a=1e-3\t b=-2"),
            values(&[("a", 0.001), ("b", -2.0)])
        );
        assert_eq!(
            metric_line("::metric\u{a0}x=+.5 y=5. z=1E2\r"),
            values(&[("x", 0.5), ("y", 5.0), ("z", 100.0)])
        );
        assert_eq!(
            metric_line(r#"::metric {"lo\u0073s": -0, "a": 1e2}"#),
            values(&[("loss", -0.0), ("a", 100.0)])
        );
    }

    #[test]
    fn other_lines_are_not_metric_lines() {
        for other in [
            "loss=0.31",
            "epoch 1 ::metric loss=1",
            "::metrics loss=1",
            "::metric:loss=1",
            "",
            "   ",
            ":: metric a=1",
        ] {
            assert_eq!(metric_line(other), MetricLine::Other, "{other:?}");
        }
    }

    #[test]
    fn a_line_that_says_it_is_one_and_is_not_is_refused() {
        let long_name = format!("::metric {}=1", "x".repeat(65));
        let deep = format!("::metric {}", "[".repeat(5000));
        let deep_object = format!("::metric {}", "{\"a\":".repeat(5000));
        let huge_int = format!("::metric {{\"a\": 1{}}}", "0".repeat(400));
        for bad in [
            "::metric",
            "::metric   ",
            "::metric loss",
            "::metric loss=",
            "::metric =1",
            "::metric loss=abc",
            "::metric loss=nan",
            "::metric loss=NaN",
            "::metric loss=inf",
            "::metric loss=-infinity",
            "::metric loss=1e999",
            "::metric loss=1_000",
            "::metric loss=0x10",
            "::metric loss==1",
            "::metric 1loss=2",
            "::metric lo$s=2",
            "::metric lossé=2",
            "::metric ok=1 bad",
            long_name.as_str(),
            r#"::metric {"loss": "0.3"}"#,
            r#"::metric {"ok": true}"#,
            r#"::metric {"ok": null}"#,
            r#"::metric {"ok": [1]}"#,
            r#"::metric {"ok": {"a": 1}}"#,
            r#"::metric {"a": NaN}"#,
            r#"::metric {"a": 1e400}"#,
            r#"::metric {"a": 01}"#,
            r#"::metric {"a": .5}"#,
            r#"::metric {"1a": 1}"#,
            r#"::metric {"a": 1} trailing"#,
            r#"::metric {"a": 1}}"#,
            "::metric {}",
            "::metric [1, 2]",
            "::metric {not json",
            deep.as_str(),
            deep_object.as_str(),
            huge_int.as_str(),
        ] {
            assert_eq!(metric_line(bad), MetricLine::Refused, "{bad:?}");
        }
    }

    #[test]
    fn names_are_bounded_in_length_and_number() {
        let longest = format!("::metric {}=1", "x".repeat(MAX_METRIC_NAME_CHARS));
        assert!(matches!(metric_line(&longest), MetricLine::Values(_)));
        let names = |n: usize| (0..n).map(|i| format!("m{i}=1")).collect::<Vec<_>>();
        let most = format!("::metric {}", names(MAX_METRIC_NAMES).join(" "));
        let MetricLine::Values(kept) = metric_line(&most) else {
            panic!("{most}")
        };
        assert_eq!(kept.len(), MAX_METRIC_NAMES);
        let too_many = format!("::metric {}", names(MAX_METRIC_NAMES + 1).join(" "));
        assert_eq!(metric_line(&too_many), MetricLine::Refused);
        let object = (0..=MAX_METRIC_NAMES)
            .map(|i| format!("\"m{i}\": 1"))
            .collect::<Vec<_>>()
            .join(", ");
        assert_eq!(
            metric_line(&format!("::metric {{{object}}}")),
            MetricLine::Refused
        );
        // A repeated name is one name, with its last value, where it first came.
        let repeated = format!("::metric a=1 b=2 {} a=3", "b=4 ".repeat(100));
        assert_eq!(metric_line(&repeated), values(&[("a", 3.0), ("b", 4.0)]));
        assert_eq!(
            metric_line(r#"::metric {"a": 1, "b": 2, "a": 3}"#),
            values(&[("a", 3.0), ("b", 2.0)])
        );
    }

    #[test]
    fn numbers_are_read_exactly() {
        for text in ["0.1", "0.31", "2.2250738585072014e-308", "9007199254740993"] {
            let expected: f64 = text.parse().unwrap();
            let line = format!("::metric {{\"a\": {text}}}");
            assert_eq!(metric_line(&line), values(&[("a", expected)]), "{text}");
        }
    }

    /// Every metric line a reader found in `chunks`, fed one after another, then finished.
    fn read(chunks: &[&[u8]]) -> Vec<MetricLine> {
        let mut reader = MetricLineReader::new();
        let mut found = Vec::new();
        for chunk in chunks {
            reader.feed(chunk, &mut |line| found.push(line));
        }
        reader.finish(&mut |line| found.push(line));
        found
    }

    #[test]
    fn the_reader_joins_lines_cut_anywhere_and_takes_a_last_line_without_its_newline() {
        let found = read(&[
            b"::metric loss=0.9\n::metric lo",
            b"ss=0.7\nnoise\n::metric loss=x\n",
            b"::metric loss=0.2",
        ]);
        assert_eq!(
            found,
            [
                values(&[("loss", 0.9)]),
                values(&[("loss", 0.7)]),
                MetricLine::Refused,
                values(&[("loss", 0.2)]),
            ]
        );
        let bytes = b"a\n::metric x=1\r\n\xff::metric y=2\n::metric z=3 \xff\n";
        let one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(
            read(&one_by_one),
            [values(&[("x", 1.0)]), MetricLine::Refused],
            "a line that starts with a bad byte is not a metric line"
        );
    }

    #[test]
    fn a_line_too_long_is_dropped_whole_however_it_is_cut() {
        let long = |tail: &str| {
            let mut line = b"::metric y=1".to_vec();
            line.resize(MAX_METRIC_LINE_BYTES * 3, b' ');
            line.extend_from_slice(tail.as_bytes());
            line
        };
        // Its tail, arriving in a read of its own, is not a line of its own.
        let line = long("::metric tail=1");
        let (head, tail) = line.split_at(line.len() - "::metric tail=1".len());
        assert_eq!(
            read(&[head, tail, b"\n::metric z=2\n"]),
            [values(&[("z", 2.0)])]
        );
        assert_eq!(read(&[&line, b"\n::metric z=2"]), [values(&[("z", 2.0)])]);
        // Nor at the end of the stream.
        assert_eq!(read(&[head, tail]), []);
        // The longest line is read; one byte more is not, whether it comes whole or in parts.
        let longest = format!(
            "::metric a=1{}",
            " ".repeat(MAX_METRIC_LINE_BYTES - "::metric a=1".len())
        );
        assert_eq!(longest.len(), MAX_METRIC_LINE_BYTES);
        let over = format!("{longest} ");
        for text in [&longest, &over] {
            let whole = format!("{text}\n");
            let (a, b) = whole.as_bytes().split_at(100);
            let expected = match text.len() <= MAX_METRIC_LINE_BYTES {
                true => vec![values(&[("a", 1.0)])],
                false => vec![],
            };
            assert_eq!(read(&[whole.as_bytes()]), expected);
            assert_eq!(read(&[a, b]), expected);
        }
    }

    #[test]
    fn the_reader_holds_at_most_a_line_between_reads() {
        let mut reader = MetricLineReader::new();
        let mut found = 0;
        for _ in 0..1000 {
            reader.feed(&[b'x'; 1000], &mut |_| found += 1);
            assert!(reader.partial.capacity() <= 2 * MAX_METRIC_LINE_BYTES);
        }
        assert_eq!(found, 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn the_name_rule_is_the_documented_pattern(name in "[a-zA-Z0-9_.:/ $é-]{0,70}") {
            let pattern = regex::Regex::new(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$").unwrap();
            prop_assert_eq!(pattern.is_match(&name), is_metric_name(&name));
        }

        #[test]
        fn any_line_parses_without_panicking_into_named_finite_values(line in any::<String>()) {
            if let MetricLine::Values(values) = metric_line(&line) {
                prop_assert!(!values.is_empty() && values.len() <= MAX_METRIC_NAMES);
                for (name, value) in values {
                    prop_assert!(is_metric_name(&name) && value.is_finite());
                }
            }
        }

        #[test]
        fn how_output_is_cut_changes_nothing(
            lines in proptest::collection::vec("(::metric [a-c]=[0-9]{1,3}|noise|::metric x)", 0..20),
            cut in 1usize..50,
        ) {
            let text = lines.join("\n");
            let chunks: Vec<&[u8]> = text.as_bytes().chunks(cut).collect();
            prop_assert_eq!(read(&chunks), read(&[text.as_bytes()]));
        }
    }
}
