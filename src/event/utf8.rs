//! Incremental UTF-8 decoding of one output stream: a character split across two appends comes
//! out whole, and bytes that are not UTF-8 are kept as bytes so nothing is ever replaced.

/// A run of decoded output: text, or bytes that are not UTF-8 (carried as `data_b64`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Text(String),
    Bytes(Vec<u8>),
}

/// Valid text shorter than this between two invalid bytes joins the bytes around it: binary
/// output then becomes a few `data_b64` events instead of thousands of one-letter ones.
const MIN_TEXT_RUN: usize = 16;

/// The longest incomplete sequence held back: a four-byte character missing its last byte.
pub const MAX_CARRY: usize = 3;

/// The decoder of one stream: holds back the start of a character cut off by the end of an
/// append until the next append of the same stream, or until [`StreamDecoder::flush`].
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    carry: [u8; MAX_CARRY],
    carry_len: usize,
}

impl StreamDecoder {
    /// Decodes `input` after whatever was held back, appending segments to `out`.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<Segment>) {
        if self.carry_len == 0 {
            let keep = incomplete_tail_len(input);
            segment_into(&input[..input.len() - keep], out);
            self.hold(&input[input.len() - keep..]);
            return;
        }
        let mut joined = Vec::with_capacity(self.carry_len + input.len());
        joined.extend_from_slice(&self.carry[..self.carry_len]);
        joined.extend_from_slice(input);
        let keep = incomplete_tail_len(&joined);
        segment_into(&joined[..joined.len() - keep], out);
        self.hold(&joined[joined.len() - keep..]);
    }

    /// Emits whatever is held back: it can no longer be completed, so it travels as bytes.
    pub fn flush(&mut self, out: &mut Vec<Segment>) {
        if self.carry_len > 0 {
            out.push(Segment::Bytes(self.carry[..self.carry_len].to_vec()));
            self.carry_len = 0;
        }
    }

    /// How many bytes are held back (0 to [`MAX_CARRY`]).
    pub fn held(&self) -> usize {
        self.carry_len
    }

    fn hold(&mut self, tail: &[u8]) {
        self.carry[..tail.len()].copy_from_slice(tail);
        self.carry_len = tail.len();
    }
}

/// Decodes a complete message (no holding back): for events whose data is whole on arrival.
pub fn decode_whole(input: &[u8], out: &mut Vec<Segment>) {
    segment_into(input, out);
}

/// Length of a trailing sequence that is a valid but unfinished character (0 to 3 bytes).
fn incomplete_tail_len(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=MAX_CARRY.min(len) {
        let start = len - back;
        let byte = bytes[start];
        if byte < 0x80 {
            return 0; // ASCII: the input ends on a whole character
        }
        if byte >= 0xC0 {
            // A lead byte: the tail is held only if it could still become a character, which
            // `from_utf8` reports as an error with no invalid byte (`error_len() == None`).
            return match std::str::from_utf8(&bytes[start..]) {
                Err(e) if e.valid_up_to() == 0 && e.error_len().is_none() => back,
                _ => 0,
            };
        }
    }
    0
}

/// Splits bytes into text and byte runs, merging adjacent runs of the same kind.
fn segment_into(bytes: &[u8], out: &mut Vec<Segment>) {
    if bytes.is_empty() {
        return;
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        out.push(Segment::Text(text.to_owned()));
        return;
    }
    let start = out.len();
    for chunk in bytes.utf8_chunks() {
        let (valid, invalid) = (chunk.valid(), chunk.invalid());
        if !valid.is_empty() {
            let after_bytes = matches!(out[start..].last(), Some(Segment::Bytes(_)));
            if after_bytes && !invalid.is_empty() && valid.len() < MIN_TEXT_RUN {
                push_bytes(out, valid.as_bytes());
            } else {
                out.push(Segment::Text(valid.to_owned()));
            }
        }
        if !invalid.is_empty() {
            push_bytes(out, invalid);
        }
    }
}

fn push_bytes(out: &mut Vec<Segment>, bytes: &[u8]) {
    if let Some(Segment::Bytes(last)) = out.last_mut() {
        last.extend_from_slice(bytes);
    } else {
        out.push(Segment::Bytes(bytes.to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything a stream produced, with text and bytes told apart.
    fn run(chunks: &[&[u8]]) -> Vec<Segment> {
        let mut decoder = StreamDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.decode(chunk, &mut out);
        }
        decoder.flush(&mut out);
        out
    }

    /// The bytes the segments stand for, in order.
    fn bytes_of(segments: &[Segment]) -> Vec<u8> {
        let mut all = Vec::new();
        for s in segments {
            match s {
                Segment::Text(t) => all.extend_from_slice(t.as_bytes()),
                Segment::Bytes(b) => all.extend_from_slice(b),
            }
        }
        all
    }

    fn text_of(segments: &[Segment]) -> String {
        let mut all = String::new();
        for s in segments {
            match s {
                Segment::Text(t) => all.push_str(t),
                Segment::Bytes(b) => panic!("unexpected bytes {b:?}"),
            }
        }
        all
    }

    #[test]
    fn a_character_split_at_every_byte_position_comes_out_whole() {
        let text = "aé€𝄞z — ünïcødé 🎉";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            assert_eq!(
                text_of(&run(&[&bytes[..cut], &bytes[cut..]])),
                text,
                "cut at {cut}"
            );
        }
        // One byte per append is the harshest split of all.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(text_of(&run(&singles)), text);
    }

    #[test]
    fn holds_back_at_most_three_bytes() {
        let mut decoder = StreamDecoder::default();
        let mut out = Vec::new();
        decoder.decode(&"𝄞".as_bytes()[..3], &mut out);
        assert!(out.is_empty());
        assert_eq!(decoder.held(), 3);
        decoder.decode(b"", &mut out);
        assert_eq!(decoder.held(), 3);
    }

    #[test]
    fn an_unfinished_character_that_is_not_completed_travels_as_bytes() {
        let euro = "€".as_bytes();
        let out = run(&[&euro[..2], b"x"]);
        assert_eq!(
            out,
            vec![
                Segment::Bytes(euro[..2].to_vec()),
                Segment::Text("x".into())
            ]
        );
    }

    #[test]
    fn flush_emits_what_was_held_back() {
        let out = run(&[b"ok\xF0\x9F"]);
        assert_eq!(
            out,
            vec![Segment::Text("ok".into()), Segment::Bytes(vec![0xF0, 0x9F])]
        );
    }

    #[test]
    fn impossible_sequences_are_not_held_back() {
        // 0xC0 can never start a character, nor 0xED 0xA0 (a surrogate): emit them now.
        let mut decoder = StreamDecoder::default();
        let mut out = Vec::new();
        decoder.decode(b"a\xC0", &mut out);
        decoder.decode(b"b\xED\xA0", &mut out);
        assert_eq!(decoder.held(), 0);
        assert_eq!(bytes_of(&out), b"a\xC0b\xED\xA0");
    }

    #[test]
    fn short_text_between_invalid_bytes_joins_the_bytes() {
        let out = run(&[b"\xFFab\xFE"]);
        assert_eq!(out, vec![Segment::Bytes(b"\xFFab\xFE".to_vec())]);
        let long = run(&[b"\xFFthis run is long enough\xFE"]);
        assert_eq!(long.len(), 3);
    }

    #[test]
    fn decode_whole_holds_nothing_back() {
        let mut out = Vec::new();
        decode_whole(b"x\xE2\x82", &mut out);
        assert_eq!(bytes_of(&out), b"x\xE2\x82");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_in_any_chunking_come_back_exactly(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            cuts in proptest::collection::vec(0usize..300, 0..6),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut from = 0;
            for cut in cuts {
                chunks.push(&data[from..cut]);
                from = cut;
            }
            chunks.push(&data[from..]);
            proptest::prop_assert_eq!(bytes_of(&run(&chunks)), data);
        }
    }
}
