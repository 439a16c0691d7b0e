//! Streaming secret redaction: known secret values, and their common encodings, are replaced by
//! `[REDACTED]` in output that arrives in arbitrary pieces, holding back only what could still
//! become a secret. A safety net for output, not a boundary: a command that holds a secret can
//! always print it in a form no list of encodings foresees.

use std::borrow::Cow;

use base64::alphabet::{Alphabet, STANDARD, URL_SAFE};
use base64::engine::general_purpose::{GeneralPurpose, PAD};
use base64::Engine;

/// Secrets shorter than this are redacted as written only: their encoded forms would be so
/// short that they blank out ordinary output.
pub const MIN_ENCODED_SECRET_BYTES: usize = 8;

/// The forms of `secret` that commands commonly print: the value itself; its base64 (standard
/// and URL-safe, with and without padding, and as it appears at each of the three alignments
/// inside a longer base64 stream, such as `Authorization: Basic` of `user:secret`); its hex in
/// lower and upper case; and its percent-encoding (and that of its standard base64). Nothing
/// assumes a length: an installation token's is not fixed.
pub fn encoded_forms(secret: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![secret.to_vec()];
    if secret.len() < MIN_ENCODED_SECRET_BYTES {
        return forms;
    }
    for alphabet in [&STANDARD, &URL_SAFE] {
        forms.extend(base64_forms(alphabet, secret));
    }
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    forms.push(hex.to_ascii_uppercase().into_bytes());
    forms.push(hex.into_bytes());
    let standard: Vec<Vec<u8>> = base64_forms(&STANDARD, secret).collect();
    for form in std::iter::once(secret.to_vec()).chain(standard) {
        for upper in [true, false] {
            let encoded = percent_encode(&form, upper);
            if encoded != form {
                forms.push(encoded);
            }
        }
    }
    forms
}

/// The base64 characters that depend only on `secret`'s bytes when it starts at each offset
/// (0, 1, 2) of a longer stream, and the padded encoding of the secret alone.
fn base64_forms<'a>(
    alphabet: &'a Alphabet,
    secret: &'a [u8],
) -> impl Iterator<Item = Vec<u8>> + 'a {
    let engine = GeneralPurpose::new(alphabet, PAD);
    let padded = engine.encode(secret).into_bytes();
    let aligned = (0..3usize).map(move |offset| {
        let mut stream = vec![0u8; offset];
        stream.extend_from_slice(secret);
        let encoded = engine.encode(&stream).into_bytes();
        // Character i covers bits [6i, 6i + 6): keep those inside the secret's bits.
        let first = (8 * offset).div_ceil(6);
        let last = (8 * (offset + secret.len())) / 6;
        encoded[first..last].to_vec()
    });
    std::iter::once(padded).chain(aligned)
}

fn percent_encode(data: &[u8], upper: bool) -> Vec<u8> {
    let digits: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = Vec::with_capacity(data.len());
    for &b in data {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[
                b'%',
                digits[usize::from(b >> 4)],
                digits[usize::from(b & 15)],
            ]);
        }
    }
    out
}

/// What replaces each occurrence of a secret.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// Replaces every occurrence of the given secrets, and of their [`encoded_forms`], in a byte
/// stream.
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
            .filter(|secret| !secret.as_ref().is_empty())
            .flat_map(|secret| encoded_forms(secret.as_ref()))
            .filter(|form| !form.is_empty())
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

    fn b64(engine: &impl Engine, data: &[u8]) -> String {
        engine.encode(data)
    }

    const TOKEN: &str = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";

    #[test]
    fn test_base64_of_the_secret_is_redacted_in_both_alphabets_with_and_without_padding() {
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        // A value whose encodings hold '+', '/', '-' and '_'.
        let secret = "tok\u{fb}\u{ff}en-\u{3e}\u{3f}value";
        for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
            let text = format!("x {} y", b64(&engine, secret.as_bytes()));
            let out = redact_all(&[secret], &text);
            assert!(out.contains("[REDACTED]"), "{text} -> {out}");
            assert!(
                !out.contains(&b64(&engine, secret.as_bytes())[..8]),
                "{out}"
            );
        }
    }

    #[test]
    fn test_the_secret_is_redacted_at_every_alignment_inside_a_longer_base64_stream() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        for prefix in ["x-access-token:", "ab", "a", "", "user:"] {
            let stream = format!("{prefix}{TOKEN}!tail");
            for encoded in [
                b64(&STANDARD, stream.as_bytes()),
                b64(&URL_SAFE_NO_PAD, stream.as_bytes()),
            ] {
                let text = format!("Authorization: Basic {encoded}");
                let out = redact_all(&[TOKEN], &text);
                assert!(out.contains("[REDACTED]"), "{prefix}: {out}");
                // What is left cannot hold more than a few characters of the secret's encoding.
                let kept = out.len() - "Authorization: Basic ".len() - "[REDACTED]".len();
                assert!(kept <= 4 * (prefix.len() + 6) / 3 + 4, "{prefix}: {out}");
            }
        }
    }

    #[test]
    fn test_hex_and_percent_encodings_are_redacted() {
        let secret = "p@ss w/rd:42%x";
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        for text in [
            hex.clone(),
            hex.to_uppercase(),
            "p%40ss%20w%2Frd%3A42%25x".to_owned(),
            "p%40ss%20w%2frd%3a42%25x".to_owned(),
        ] {
            assert_eq!(
                redact_all(&[secret], &format!("<{text}>")),
                "<[REDACTED]>",
                "{text}"
            );
        }
    }

    #[test]
    fn test_encodings_split_across_pushes_are_still_redacted() {
        let encoded = base64::engine::general_purpose::STANDARD.encode(TOKEN);
        let mut r = Redactor::new([TOKEN]);
        let (a, b) = encoded.split_at(encoded.len() / 2);
        let mut out = r.push(a.as_bytes());
        out.extend(r.push(b.as_bytes()));
        out.extend(r.finish());
        assert_eq!(String::from_utf8(out).unwrap(), "[REDACTED]");
    }

    #[test]
    fn test_tokens_of_any_length_get_their_encodings_and_short_values_only_themselves() {
        for len in [8, 9, 10, 40, 93, 255] {
            let secret: String = "k".repeat(len);
            let encoded = base64::engine::general_purpose::STANDARD.encode(&secret);
            assert!(!redact_all(&[&secret], &encoded).contains(&encoded[..encoded.len() - 4]));
        }
        assert_eq!(encoded_forms(b"short"), vec![b"short".to_vec()]);
    }
}
