//! The incremental reading of frames from a byte stream: bytes go in as a transport reads them,
//! whole frames come out, copied (`next_frame`) or borrowed from the bytes fed (`feed_each`).

use super::frame::{Frame, FrameError, FrameKind, FrameRef, MAX_FRAME_BYTES, PREFIX_BYTES};

/// Why [`FrameDecoder::feed_each`] stopped: the byte stream is broken, or the handler failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedError<E> {
    Frame(FrameError),
    Handler(E),
}

/// Incremental decoder: feed it bytes as they arrive from any transport, take whole frames out.
/// Memory is bounded by one frame plus whatever was fed and not yet taken.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        // Compact lazily so that a long run of small frames does not shift the buffer each time.
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes fed but not yet returned as frames.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The bytes fed but not returned as frames, taken out: what follows the last frame on a
    /// stream that stops being framed (a relay, `server`).
    pub fn take_pending(&mut self) -> Vec<u8> {
        let rest = self.buf.split_off(self.start);
        self.buf.clear();
        self.start = 0;
        rest
    }

    /// The next whole frame, `Ok(None)` when more bytes are needed, or an error that leaves the
    /// stream unusable (the caller closes the channel).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some((frame, used)) = parse_frame(&self.buf[self.start..])? else {
            return Ok(None);
        };
        let frame = frame.to_frame();
        self.start += used;
        Ok(Some(frame))
    }

    /// Hands every whole frame of what was held and `bytes` to `each`, in order, and keeps
    /// only the unfinished frame at the end. Frames that lie whole in `bytes` (all but the one
    /// completing what an earlier feed left) are borrowed from it, never copied: the cheap way
    /// to take pages of up to a few hundred KiB at a time. Stops at the first error of the
    /// stream or of `each`; the stream is then unusable.
    pub fn feed_each<E>(
        &mut self,
        bytes: &[u8],
        mut each: impl FnMut(FrameRef<'_>) -> Result<(), E>,
    ) -> Result<(), FeedError<E>> {
        let mut rest = bytes;
        // First the frame an earlier feed left unfinished: copy in only what it still needs.
        while self.pending() > 0 {
            let held = &self.buf[self.start..];
            let need = frame_len(held).map_err(FeedError::Frame)?;
            if held.len() < need {
                let take = (need - held.len()).min(rest.len());
                self.buf.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if take == 0 {
                    return Ok(());
                }
                continue;
            }
            let Some((frame, used)) = parse_frame(held).map_err(FeedError::Frame)? else {
                return Ok(());
            };
            each(frame).map_err(FeedError::Handler)?;
            self.start += used;
        }
        self.buf.clear();
        self.start = 0;
        while let Some((frame, used)) = parse_frame(rest).map_err(FeedError::Frame)? {
            each(frame).map_err(FeedError::Handler)?;
            rest = &rest[used..];
        }
        self.buf.extend_from_slice(rest);
        Ok(())
    }
}

/// The whole length of the frame `bytes` starts with (prefix included), or the prefix's length
/// while `bytes` is shorter than it; checks what the prefix says.
fn frame_len(bytes: &[u8]) -> Result<usize, FrameError> {
    let [b0, b1, b2, b3, kind, ..] = *bytes else {
        return Ok(PREFIX_BYTES);
    };
    let body = u32::from_be_bytes([b0, b1, b2, b3]) as usize;
    if body > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(body));
    }
    FrameKind::from_byte(kind).ok_or(FrameError::UnknownKind(kind))?;
    if body < 4 {
        return Err(FrameError::Malformed("body shorter than its header length"));
    }
    Ok(PREFIX_BYTES + body)
}

/// The frame `bytes` starts with and its length on the wire, or `None` while it is unfinished.
fn parse_frame(bytes: &[u8]) -> Result<Option<(FrameRef<'_>, usize)>, FrameError> {
    let total = frame_len(bytes)?;
    if bytes.len() < total {
        return Ok(None);
    }
    let kind = FrameKind::from_byte(bytes[4]).ok_or(FrameError::UnknownKind(bytes[4]))?;
    let body = &bytes[PREFIX_BYTES..total];
    let header_len = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
    if header_len > body.len() - 4 {
        return Err(FrameError::Malformed("header longer than the frame"));
    }
    let frame = FrameRef {
        kind,
        header: &body[4..4 + header_len],
        payload: &body[4 + header_len..],
    };
    Ok(Some((frame, total)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::frame::FrameKind;
    use proptest::prelude::*;

    fn frame(kind: FrameKind, header: &str, payload: &[u8]) -> Frame {
        Frame::new(kind, header.as_bytes().to_vec(), payload.to_vec())
    }

    #[test]
    fn a_frame_round_trips() {
        let f = frame(
            FrameKind::Request,
            r#"{"id":1,"op":"exec.start"}"#,
            b"\x00\xffbytes",
        );
        let mut d = FrameDecoder::new();
        d.feed(&f.encode().unwrap());
        assert_eq!(d.next_frame().unwrap(), Some(f));
        assert_eq!(d.next_frame().unwrap(), None);
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn a_frame_split_at_every_byte_comes_out_whole() {
        let f = frame(FrameKind::Events, r#"{"stream":"ex-1"}"#, b"payload");
        let wire = f.encode().unwrap();
        for cut in 0..wire.len() {
            let mut d = FrameDecoder::new();
            d.feed(&wire[..cut]);
            assert_eq!(d.next_frame().unwrap(), None, "cut at {cut}");
            d.feed(&wire[cut..]);
            assert_eq!(d.next_frame().unwrap(), Some(f.clone()), "cut at {cut}");
        }
    }

    #[test]
    fn feeding_stops_at_a_broken_frame_or_a_failing_handler() {
        let good = frame(FrameKind::Events, r#"{"stream":"ex-1"}"#, b"page")
            .encode()
            .unwrap();
        let mut wire = good.clone();
        wire.extend_from_slice(&[0, 0, 0, 4, 99, 0, 0, 0, 0]);
        wire.extend_from_slice(&good);
        let mut seen = 0;
        let result = FrameDecoder::new().feed_each(&wire, |_| {
            seen += 1;
            Ok::<(), ()>(())
        });
        assert_eq!(result, Err(FeedError::Frame(FrameError::UnknownKind(99))));
        assert_eq!(seen, 1);
        let mut twice = good.clone();
        twice.extend_from_slice(&good);
        let result = FrameDecoder::new().feed_each(&twice, |_| Err("no"));
        assert_eq!(result, Err(FeedError::Handler("no")));
    }

    #[test]
    fn a_frame_split_at_every_byte_comes_out_whole_from_feed_each() {
        let f = frame(FrameKind::Events, r#"{"stream":"ex-1"}"#, b"payload");
        let wire = f.encode().unwrap();
        for cut in 0..=wire.len() {
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            for piece in [&wire[..cut], &wire[cut..]] {
                d.feed_each(piece, |fr| {
                    got.push(fr.to_frame());
                    Ok::<(), ()>(())
                })
                .unwrap();
            }
            assert_eq!(got, vec![f.clone()], "cut at {cut}");
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn oversized_and_unknown_frames_are_errors() {
        let mut d = FrameDecoder::new();
        d.feed(&((MAX_FRAME_BYTES as u32) + 1).to_be_bytes());
        d.feed(&[2]);
        assert!(matches!(d.next_frame(), Err(FrameError::TooLarge(_))));

        let mut d = FrameDecoder::new();
        d.feed(&[0, 0, 0, 4, 99, 0, 0, 0, 0]);
        assert_eq!(d.next_frame(), Err(FrameError::UnknownKind(99)));

        let mut d = FrameDecoder::new();
        d.feed(&[0, 0, 0, 4, 2, 0, 0, 0, 9]);
        assert!(matches!(d.next_frame(), Err(FrameError::Malformed(_))));
    }

    proptest! {
        #[test]
        fn any_sequence_of_frames_survives_any_chunking(
            frames in proptest::collection::vec(
                (1u8..=5, proptest::collection::vec(any::<u8>(), 0..64),
                 proptest::collection::vec(any::<u8>(), 0..300)), 0..8),
            chunk in 1usize..50,
        ) {
            let frames: Vec<Frame> = frames.into_iter().map(|(k, h, p)| {
                Frame::new(FrameKind::from_byte(k).unwrap(), h, p)
            }).collect();
            let mut wire = Vec::new();
            for f in &frames { f.encode_into(&mut wire).unwrap(); }
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            for piece in wire.chunks(chunk) {
                d.feed(piece);
                while let Some(f) = d.next_frame().unwrap() { got.push(f); }
            }
            prop_assert_eq!(got, frames);
        }

        #[test]
        fn frames_fed_in_any_pieces_come_out_whole_and_borrowed_where_they_lie_whole(
            frames in proptest::collection::vec(
                (1u8..=5, proptest::collection::vec(any::<u8>(), 0..64),
                 proptest::collection::vec(any::<u8>(), 1..300)), 0..8),
            cuts in proptest::collection::vec(0usize..2000, 0..6),
        ) {
            let frames: Vec<Frame> = frames.into_iter().map(|(k, h, p)| {
                Frame::new(FrameKind::from_byte(k).unwrap(), h, p)
            }).collect();
            let mut wire = Vec::new();
            let mut spans = Vec::new();
            for f in &frames {
                let at = wire.len();
                f.encode_into(&mut wire).unwrap();
                spans.push((at, wire.len()));
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(wire.len())).collect();
            cuts.push(wire.len());
            cuts.sort_unstable();
            let mut d = FrameDecoder::new();
            let (mut got, mut from) = (Vec::new(), 0);
            for &cut in &cuts {
                let piece = &wire[from..cut];
                let inside = piece.as_ptr_range();
                d.feed_each(piece, |f: FrameRef<'_>| {
                    got.push((f.to_frame(), inside.contains(&f.payload.as_ptr()), from));
                    Ok::<(), ()>(())
                }).unwrap();
                from = cut;
            }
            prop_assert_eq!(d.pending(), 0);
            let decoded: Vec<Frame> = got.iter().map(|(f, _, _)| f.clone()).collect();
            prop_assert_eq!(decoded, frames);
            for ((_, borrowed, piece_start), &(start, end)) in got.iter().zip(&spans) {
                // A frame that lies whole in the piece that completed it was not copied.
                let piece_end = cuts.iter().copied().find(|&c| c > *piece_start).unwrap_or(0);
                if start >= *piece_start && end <= piece_end {
                    prop_assert!(*borrowed);
                }
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut d = FrameDecoder::new();
            d.feed(&bytes);
            while let Ok(Some(_)) = d.next_frame() {}
        }
    }
}
