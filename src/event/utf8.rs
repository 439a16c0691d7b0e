//! Incremental UTF-8 decoding of one output stream: a character split across two appends comes
//! out whole, and bytes that are not UTF-8 are kept as bytes so nothing is ever replaced.

/// A run of decoded output, borrowed from the input: text, or bytes that are not UTF-8 (carried
/// as `data_b64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
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
    /// What was held back joined with the next input, so the completed character stays in one
    /// run with the text after it; reused from append to append.
    joined: Vec<u8>,
}

impl StreamDecoder {
    /// Decodes `input` after whatever was held back, handing each segment to `emit` in order.
    /// Segments borrow the input (or the decoder's buffer), so nothing is copied per segment.
    pub fn decode(&mut self, input: &[u8], emit: &mut dyn FnMut(Segment<'_>)) {
        if self.carry_len == 0 {
            let keep = incomplete_tail_len(input);
            segment_into(&input[..input.len() - keep], emit);
            self.hold(&input[input.len() - keep..]);
            return;
        }
        let mut joined = std::mem::take(&mut self.joined);
        joined.clear();
        joined.extend_from_slice(&self.carry[..self.carry_len]);
        joined.extend_from_slice(input);
        let keep = incomplete_tail_len(&joined);
        segment_into(&joined[..joined.len() - keep], emit);
        self.hold(&joined[joined.len() - keep..]);
        // A buffer grown by one huge append is not kept for the life of the stream.
        if joined.capacity() <= 64 * 1024 {
            self.joined = joined;
        }
    }

    /// Emits whatever is held back: it can no longer be completed, so it travels as bytes.
    pub fn flush(&mut self, emit: &mut dyn FnMut(Segment<'_>)) {
        if self.carry_len > 0 {
            let len = std::mem::take(&mut self.carry_len);
            emit(Segment::Bytes(&self.carry[..len]));
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
pub fn decode_whole(input: &[u8], emit: &mut dyn FnMut(Segment<'_>)) {
    segment_into(input, emit);
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

/// Splits bytes into text and byte runs. A byte run absorbs the short text between two invalid
/// sequences; since those are contiguous in `bytes`, every run is one borrowed slice.
fn segment_into<'a>(bytes: &'a [u8], emit: &mut dyn FnMut(Segment<'_>)) {
    if bytes.is_empty() {
        return;
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        return emit(Segment::Text(text));
    }
    // Where the byte run being gathered started; it ends at `at`.
    let mut bytes_from: Option<usize> = None;
    let mut at = 0;
    for chunk in bytes.utf8_chunks() {
        let (valid, invalid) = (chunk.valid(), chunk.invalid());
        if !valid.is_empty() {
            let joins_bytes =
                bytes_from.is_some() && !invalid.is_empty() && valid.len() < MIN_TEXT_RUN;
            if !joins_bytes {
                if let Some(from) = bytes_from.take() {
                    emit(Segment::Bytes(&bytes[from..at]));
                }
                emit(Segment::Text(valid));
            }
            at += valid.len();
        }
        if !invalid.is_empty() {
            bytes_from.get_or_insert(at);
            at += invalid.len();
        }
    }
    if let Some(from) = bytes_from {
        emit(Segment::Bytes(&bytes[from..at]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment copied out of the decoder, for comparing.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Owned {
        Text(String),
        Bytes(Vec<u8>),
    }

    fn collect(out: &mut Vec<Owned>) -> impl FnMut(Segment<'_>) + '_ {
        |segment| {
            out.push(match segment {
                Segment::Text(t) => Owned::Text(t.to_owned()),
                Segment::Bytes(b) => Owned::Bytes(b.to_vec()),
            })
        }
    }

    /// Everything a stream produced, with text and bytes told apart.
    fn run(chunks: &[&[u8]]) -> Vec<Owned> {
        let mut decoder = StreamDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.decode(chunk, &mut collect(&mut out));
        }
        decoder.flush(&mut collect(&mut out));
        out
    }

    /// The bytes the segments stand for, in order.
    fn bytes_of(segments: &[Owned]) -> Vec<u8> {
        let mut all = Vec::new();
        for s in segments {
            match s {
                Owned::Text(t) => all.extend_from_slice(t.as_bytes()),
                Owned::Bytes(b) => all.extend_from_slice(b),
            }
        }
        all
    }

    fn text_of(segments: &[Owned]) -> String {
        let mut all = String::new();
        for s in segments {
            match s {
                Owned::Text(t) => all.push_str(t),
                Owned::Bytes(b) => panic!("unexpected bytes {b:?}"),
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
        decoder.decode(&"𝄞".as_bytes()[..3], &mut collect(&mut out));
        assert!(out.is_empty());
        assert_eq!(decoder.held(), 3);
        decoder.decode(b"", &mut collect(&mut out));
        assert_eq!(decoder.held(), 3);
    }

    #[test]
    fn an_unfinished_character_that_is_not_completed_travels_as_bytes() {
        let euro = "€".as_bytes();
        let out = run(&[&euro[..2], b"x"]);
        assert_eq!(
            out,
            vec![Owned::Bytes(euro[..2].to_vec()), Owned::Text("x".into())]
        );
    }

    #[test]
    fn a_completed_character_stays_in_one_run_with_the_text_after_it() {
        let euro = "€".as_bytes();
        let mut tail = euro[1..].to_vec();
        tail.extend_from_slice(b"uro");
        assert_eq!(run(&[&euro[..1], &tail]), vec![Owned::Text("€uro".into())]);
    }

    #[test]
    fn flush_emits_what_was_held_back() {
        let out = run(&[b"ok\xF0\x9F"]);
        assert_eq!(
            out,
            vec![Owned::Text("ok".into()), Owned::Bytes(vec![0xF0, 0x9F])]
        );
    }

    #[test]
    fn impossible_sequences_are_not_held_back() {
        // 0xC0 can never start a character, nor 0xED 0xA0 (a surrogate): emit them now.
        let mut decoder = StreamDecoder::default();
        let mut out = Vec::new();
        decoder.decode(b"a\xC0", &mut collect(&mut out));
        decoder.decode(b"b\xED\xA0", &mut collect(&mut out));
        assert_eq!(decoder.held(), 0);
        assert_eq!(bytes_of(&out), b"a\xC0b\xED\xA0");
    }

    #[test]
    fn short_text_between_invalid_bytes_joins_the_bytes() {
        let out = run(&[b"\xFFab\xFE"]);
        assert_eq!(out, vec![Owned::Bytes(b"\xFFab\xFE".to_vec())]);
        let long = run(&[b"\xFFthis run is long enough\xFE"]);
        assert_eq!(long.len(), 3);
    }

    #[test]
    fn text_of_exactly_the_minimum_run_stays_text() {
        let text = "x".repeat(MIN_TEXT_RUN);
        let out = run(&[&[b"\xFF", text.as_bytes(), b"\xFE"].concat()]);
        let expected = vec![
            Owned::Bytes(b"\xFF".to_vec()),
            Owned::Text(text),
            Owned::Bytes(b"\xFE".to_vec()),
        ];
        assert_eq!(out, expected);
        let short: &[u8] = &[b'x'; MIN_TEXT_RUN - 1];
        let shorter = run(&[&[b"\xFF".as_slice(), short, b"\xFE"].concat()]);
        assert_eq!(shorter.len(), 1, "one byte shorter joins the bytes");
    }

    #[test]
    fn the_join_buffer_is_kept_for_appends_up_to_64_kib_and_dropped_after_larger() {
        // Kept: the next append after a held-back byte allocates nothing.
        let mut decoder = StreamDecoder::default();
        decoder.decode(b"\xE2", &mut |_| {});
        decoder.decode(&[b'x'; 60 * 1024], &mut |_| {});
        assert!(decoder.joined.capacity() >= 60 * 1024);
        // Dropped: one huge append must not pin its size for the life of the stream.
        decoder.decode(b"\xE2", &mut |_| {});
        decoder.decode(&vec![b'x'; 1 << 20], &mut |_| {});
        assert!(decoder.joined.capacity() <= 64 * 1024);
    }

    #[test]
    fn decode_whole_holds_nothing_back() {
        let mut out = Vec::new();
        decode_whole(b"x\xE2\x82", &mut collect(&mut out));
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
