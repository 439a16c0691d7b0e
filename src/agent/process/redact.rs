//! Streaming secret redaction: known secret values are replaced by `[REDACTED]` in output that
//! arrives in arbitrary pieces, holding back only what could still become a secret.

use std::borrow::Cow;

/// What replaces each occurrence of a secret.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// Replaces every occurrence of the given secrets in a byte stream.
///
/// Matching is leftmost-longest without overlap: at each position the longest secret that
/// matches there is replaced and scanning resumes after it, so the output is the same however the
/// stream is split, and no secret appears whole in it (one that overlaps a replaced secret loses
/// at least the overlapping bytes). `push` holds back at most (longest secret − 1) bytes: a tail
/// that is still the beginning of some secret; `finish` flushes it.
///
/// Edge cases: empty secrets are ignored (they would match between every two bytes); duplicates
/// count once. Very short secrets (one to three bytes) are still redacted wherever they occur,
/// which can blank out much ordinary output: refusing them is the configuration's job, since
/// showing them would leak them.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// Longest first, so the first match at a position is the longest one.
    secrets: Vec<Vec<u8>>,
    /// Bytes that start some secret: every other byte is copied without looking further.
    starts: [bool; 256],
    held: Vec<u8>,
}

impl Redactor {
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<[u8]>,
    {
        let mut secrets: Vec<Vec<u8>> = secrets
            .into_iter()
            .map(|secret| secret.as_ref().to_vec())
            .filter(|secret| !secret.is_empty())
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        let mut starts = [false; 256];
        for secret in &secrets {
            starts[usize::from(secret[0])] = true;
        }
        Self {
            secrets,
            starts,
            held: Vec::new(),
        }
    }

    /// The length of the longest secret (0 without secrets).
    pub fn longest_secret(&self) -> usize {
        self.secrets.first().map_or(0, Vec::len)
    }

    /// How many bytes are held back waiting for the next push.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Redacts the next piece of the stream; returns what is safe to release now.
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        self.redact(data).into_owned()
    }

    /// [`Redactor::push`] that hands the piece back as it is, uncopied, when there are no
    /// secrets (the output of most execs).
    pub fn redact<'a>(&mut self, data: &'a [u8]) -> Cow<'a, [u8]> {
        if self.secrets.is_empty() {
            return Cow::Borrowed(data);
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(data);
        Cow::Owned(self.scan(buf, false))
    }

    /// Ends the stream: releases the held bytes (redacting any secret they complete).
    pub fn finish(&mut self) -> Vec<u8> {
        let buf = std::mem::take(&mut self.held);
        self.scan(buf, true)
    }

    fn scan(&mut self, buf: Vec<u8>, at_end: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(buf.len());
        let mut pos = 0;
        while pos < buf.len() {
            if !self.starts[usize::from(buf[pos])] {
                let run = buf[pos..].iter().position(|&b| self.starts[usize::from(b)]);
                let end = run.map_or(buf.len(), |offset| pos + offset);
                out.extend_from_slice(&buf[pos..end]);
                pos = end;
                continue;
            }
            let rest = &buf[pos..];
            // A longer secret could still match here once more bytes arrive: decide later.
            let undecided = !at_end
                && self
                    .secrets
                    .iter()
                    .any(|s| s.len() > rest.len() && s.starts_with(rest));
            if undecided {
                break;
            }
            match self.secrets.iter().find(|secret| rest.starts_with(secret)) {
                Some(secret) => {
                    out.extend_from_slice(REDACTED);
                    pos += secret.len();
                }
                None => {
                    out.push(buf[pos]);
                    pos += 1;
                }
            }
        }
        self.held = buf[pos..].to_vec();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn redact_all(secrets: &[&str], text: &str) -> String {
        let mut redactor = Redactor::new(secrets);
        let mut out = redactor.push(text.as_bytes());
        out.extend(redactor.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn test_every_occurrence_is_replaced() {
        assert_eq!(
            redact_all(&["hunter2"], "pw=hunter2 again hunter2!"),
            "pw=[REDACTED] again [REDACTED]!"
        );
    }

    #[test]
    fn test_a_secret_split_across_pushes_is_still_replaced() {
        let mut redactor = Redactor::new(["s3cret-token"]);
        let mut out = redactor.push(b"token: s3cr");
        assert_eq!(out, b"token: ");
        assert_eq!(redactor.held(), 4);
        out.extend(redactor.push(b"et-token done"));
        out.extend(redactor.finish());
        assert_eq!(out, b"token: [REDACTED] done");
    }

    #[test]
    fn test_output_without_secrets_is_handed_back_uncopied() {
        let data = b"plain output\n";
        let mut none = Redactor::new::<[&str; 0], &str>([]);
        assert!(matches!(none.redact(data), Cow::Borrowed(d) if d == data));
        let mut some = Redactor::new(["hunter2"]);
        assert_eq!(some.redact(b"pw=hunter2\n").as_ref(), b"pw=[REDACTED]\n");
    }

    #[test]
    fn test_a_held_prefix_that_does_not_complete_is_released() {
        let mut redactor = Redactor::new(["abcdef"]);
        assert_eq!(redactor.push(b"xxabc"), b"xx");
        assert_eq!(redactor.push(b"Z"), b"abcZ");
        assert_eq!(redactor.push(b"ab"), b"");
        assert_eq!(redactor.finish(), b"ab");
    }

    #[test]
    fn test_the_longest_secret_wins_at_a_position() {
        assert_eq!(
            redact_all(&["abc", "abcdef"], "abcdef abcde"),
            "[REDACTED] [REDACTED]de"
        );
    }

    #[test]
    fn test_empty_secrets_are_ignored_and_no_secrets_pass_everything() {
        assert_eq!(redact_all(&[""], "anything"), "anything");
        assert_eq!(redact_all(&[], "anything"), "anything");
        assert_eq!(Redactor::new([""]).longest_secret(), 0);
    }

    #[test]
    fn test_a_one_byte_secret_is_redacted_everywhere() {
        assert_eq!(redact_all(&["x"], "axbx"), "a[REDACTED]b[REDACTED]");
    }

    #[test]
    fn test_binary_bytes_are_kept() {
        let mut redactor = Redactor::new([b"\xff\x00k".as_slice()]);
        let mut out = redactor.push(b"\x00\xff\x00");
        out.extend(redactor.push(b"k\xfe"));
        out.extend(redactor.finish());
        assert_eq!(out, b"\x00[REDACTED]\xfe");
    }

    fn split_run(secrets: &[String], text: &[u8], cuts: &[usize]) -> (Vec<u8>, usize) {
        let mut redactor = Redactor::new(secrets);
        let mut out = Vec::new();
        let mut most_held = 0;
        let mut start = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (text.len() + 1)).collect();
        cuts.sort_unstable();
        for cut in cuts.into_iter().chain([text.len()]) {
            out.extend(redactor.push(&text[start..cut]));
            most_held = most_held.max(redactor.held());
            start = cut;
        }
        out.extend(redactor.finish());
        (out, most_held)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Small alphabets make overlapping and repeated secrets common.
        #[test]
        fn prop_no_split_position_leaks_a_secret(
            secrets in prop::collection::vec("[ab]{1,6}", 1..4),
            text in "[abc]{0,40}",
            cuts in prop::collection::vec(0usize..64, 0..8),
        ) {
            let whole = split_run(&secrets, text.as_bytes(), &[]).0;
            let (split, most_held) = split_run(&secrets, text.as_bytes(), &cuts);
            prop_assert_eq!(&split, &whole, "the output must not depend on the split");
            let longest = secrets.iter().map(String::len).max().unwrap_or(0);
            prop_assert!(most_held < longest.max(1), "held {} bytes, longest secret {}", most_held, longest);
            let shown = String::from_utf8(split).unwrap();
            for secret in &secrets {
                prop_assert!(!shown.contains(secret.as_str()), "{:?} leaked in {:?}", secret, shown);
            }
        }

        #[test]
        fn prop_every_single_split_point_of_a_secret_is_redacted(cut in 0usize..20, pad in "[xy]{0,5}") {
            let secret = "ghp_0123456789abcdef";
            let text = format!("{pad}{secret}{pad}");
            let (out, _) = split_run(&[secret.to_string()], text.as_bytes(), &[pad.len() + cut]);
            prop_assert_eq!(String::from_utf8(out).unwrap(), format!("{pad}[REDACTED]{pad}"));
        }
    }
}
