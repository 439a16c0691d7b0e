//! JSON string escaping with a known cost per byte, and the splitting of text into pieces whose
//! escaped form stays within a bound (control characters grow six-fold as `\u0001`).

/// The escape of each ASCII byte: 0 = copied as is, `u` = `\u00XX`, other = `\` + that byte.
/// Matches serde_json, so either can read what the other wrote byte for byte.
const ESCAPE: [u8; 128] = {
    let mut table = [b'u'; 128];
    let mut i = 0x20;
    while i < 128 {
        table[i] = 0;
        i += 1;
    }
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[0x08] = b'b';
    table[0x0C] = b'f';
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table
};

/// How many bytes `byte` takes once escaped inside a JSON string.
#[inline]
pub fn escaped_cost(byte: u8) -> usize {
    match ESCAPE.get(usize::from(byte)) {
        None | Some(0) => 1,
        Some(b'u') => 6,
        Some(_) => 2,
    }
}

/// Appends `text` escaped for the inside of a JSON string (no surrounding quotes).
pub fn escape_into(out: &mut String, text: &str) {
    escape_prefix_into(out, text, usize::MAX, usize::MAX);
}

/// Escapes into `out` the longest prefix of `text` that is at most `max_raw` bytes long, takes
/// at most `max_escaped` bytes once escaped, and ends on a character boundary; returns its
/// length. Runs of bytes that need no escaping (almost all output) are found sixteen bytes at
/// a time and copied whole. Both bounds must allow one character (≥ 4 and ≥ 6), so that a
/// non-empty `text` always makes progress.
pub fn escape_prefix_into(
    out: &mut String,
    text: &str,
    max_raw: usize,
    max_escaped: usize,
) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    let limit = bytes.len().min(max_raw);
    let mut room = max_escaped;
    // `copied..at` is plain text scanned but not yet written.
    let (mut copied, mut at) = (0, 0);
    let end = loop {
        let plain = find_escape(&bytes[at..limit]);
        if plain > room {
            break at + room;
        }
        room -= plain;
        at += plain;
        if at == limit {
            break at;
        }
        let byte = bytes[at];
        let cost = escaped_cost(byte);
        if cost > room {
            break at;
        }
        // `at` is at an ASCII byte, hence at a character boundary.
        out.push_str(&text[copied..at]);
        out.push('\\');
        match ESCAPE.get(usize::from(byte)) {
            Some(b'u') => {
                out.push_str("u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xF)]));
            }
            Some(&e) => out.push(char::from(e)),
            None => {}
        }
        room -= cost;
        at += 1;
        copied = at;
    };
    // A bound may fall inside a character of a plain run: end before that character instead.
    let mut end = end;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 && !text.is_empty() {
        // Unreachable with the documented bounds; take one character to stay finite.
        let first = text.chars().next().map_or(1, char::len_utf8);
        return escape_prefix_into(out, &text[..first], usize::MAX, usize::MAX);
    }
    out.push_str(&text[copied..end]);
    end
}

/// How many leading bytes of `bytes` need no escaping (`bytes.len()` when none does).
///
/// Sixteen bytes are tested at a time with a branch-free OR over a fixed-size chunk, a form the
/// compiler turns into vector compares (SSE2 on x86-64, NEON on ARM) in safe code; only the
/// chunk that holds a hit is searched byte by byte. About twice as fast here as testing eight
/// bytes at a time in a `u64` with carry tricks.
pub fn find_escape(bytes: &[u8]) -> usize {
    let needs_escape = |b: u8| (b < 0x20) | (b == b'"') | (b == b'\\');
    let (chunks, tail) = bytes.as_chunks::<16>();
    let mut offset = 0;
    for chunk in chunks {
        if chunk.iter().fold(false, |hit, &b| hit | needs_escape(b)) {
            return offset + chunk.iter().position(|&b| needs_escape(b)).unwrap_or(0);
        }
        offset += 16;
    }
    offset
        + tail
            .iter()
            .position(|&b| needs_escape(b))
            .unwrap_or(tail.len())
}

/// Appends the text that `escaped` (the inside of a JSON string, as [`escape_into`] writes it)
/// stands for. Returns false, leaving `out` in an unspecified state, for content this function
/// does not take: anything but the short escapes and `\\uXXXX` outside the surrogate range.
pub fn unescape_into(out: &mut String, escaped: &str) -> bool {
    let mut rest = escaped;
    while let Some(at) = find_byte(rest.as_bytes(), b'\\') {
        out.push_str(&rest[..at]);
        let (ch, len) = match rest.as_bytes().get(at + 1) {
            Some(b'"') => ('"', 2),
            Some(b'\\') => ('\\', 2),
            Some(b'/') => ('/', 2),
            Some(b'b') => ('\u{8}', 2),
            Some(b'f') => ('\u{c}', 2),
            Some(b'n') => ('\n', 2),
            Some(b'r') => ('\r', 2),
            Some(b't') => ('\t', 2),
            Some(b'u') => {
                let hex = rest.get(at + 2..at + 6).unwrap_or_default();
                let unit = match hex.bytes().all(|b| b.is_ascii_hexdigit()) && hex.len() == 4 {
                    true => u32::from_str_radix(hex, 16).ok(),
                    false => None,
                };
                match unit.and_then(char::from_u32) {
                    Some(ch) => (ch, 6),
                    None => return false,
                }
            }
            _ => return false,
        };
        out.push(ch);
        rest = &rest[at + len..];
    }
    out.push_str(rest);
    true
}

/// Writes the text that `escaped` stands for into `out` (which must be at least as long as
/// `escaped`: text never grows by unescaping) when that text is ASCII, and returns its length;
/// `None` for text that is not ASCII or an escape [`unescape_into`] would not take. The way to
/// build a string in a buffer sized before its exact length is known.
pub fn unescape_ascii(out: &mut [u8], escaped: &str) -> Option<usize> {
    let bytes = escaped.as_bytes();
    if !bytes.is_ascii() || out.len() < bytes.len() {
        return None;
    }
    let (mut from, mut to) = (0, 0);
    while let Some(at) = find_byte(&bytes[from..], b'\\').map(|at| from + at) {
        out[to..to + at - from].copy_from_slice(&bytes[from..at]);
        to += at - from;
        let (byte, len) = match bytes.get(at + 1)? {
            b'"' => (b'"', 2),
            b'\\' => (b'\\', 2),
            b'/' => (b'/', 2),
            b'b' => (0x08, 2),
            b'f' => (0x0C, 2),
            b'n' => (b'\n', 2),
            b'r' => (b'\r', 2),
            b't' => (b'\t', 2),
            b'u' => {
                let hex = escaped.get(at + 2..at + 6)?;
                let ok = hex.len() == 4 && hex.bytes().all(|b| b.is_ascii_hexdigit());
                let unit = u8::try_from(u32::from_str_radix(hex, 16).ok()?).ok()?;
                if !ok || !unit.is_ascii() {
                    return None;
                }
                (unit, 6)
            }
            _ => return None,
        };
        out[to] = byte;
        to += 1;
        from = at + len;
    }
    out[to..to + bytes.len() - from].copy_from_slice(&bytes[from..]);
    Some(to + bytes.len() - from)
}

/// Where `needle` first occurs in `bytes`. `memchr` picks the widest vector compare the CPU has
/// at run time (AVX2 here), where a loop of ours gets what the build targets (SSE2): twice as
/// fast over output with an escape every line.
fn find_byte(bytes: &[u8], needle: u8) -> Option<usize> {
    memchr::memchr(needle, bytes)
}

/// Whether `bytes` holds a control character (below 0x20), which a JSON string may not hold
/// raw: checked sixty-four bytes at a time, so a whole event costs about a memory read.
pub fn has_control(bytes: &[u8]) -> bool {
    let (chunks, tail) = bytes.as_chunks::<64>();
    chunks
        .iter()
        .any(|chunk| chunk.iter().fold(false, |hit, &b| hit | (b < 0x20)))
        || tail.iter().any(|&b| b < 0x20)
}

/// The UTF-8 length of the JSON string whose escaped contents start `escaped` (up to its
/// closing quote), as this module's escaping writes it.
pub fn unescaped_len(escaped: &[u8]) -> usize {
    let hex = |at: usize| {
        escaped
            .get(at..at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    let (mut at, mut len) = (0, 0);
    loop {
        // Plain bytes count one each: jump to the next quote or backslash.
        let plain = escaped
            .get(at..)
            .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
            .unwrap_or(escaped.len().saturating_sub(at));
        (len, at) = (len + plain, at + plain);
        let Some(&b) = escaped.get(at) else { break };
        match b {
            b'"' => break,
            b'\\' if escaped.get(at + 1) == Some(&b'u') => {
                let unit = hex(at + 2).unwrap_or(0);
                let low = (escaped.get(at + 6..at + 8) == Some(b"\\u".as_slice()))
                    .then(|| hex(at + 8))
                    .flatten()
                    .filter(|l| (0xDC00..0xE000).contains(l));
                if (0xD800..0xDC00).contains(&unit) && low.is_some() {
                    (len, at) = (len + 4, at + 12);
                } else {
                    let width = char::from_u32(unit).map_or(3, char::len_utf8);
                    (len, at) = (len + width, at + 6);
                }
            }
            b'\\' => (len, at) = (len + 1, at + 2),
            _ => (len, at) = (len + 1, at + 1),
        }
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        escape_into(&mut out, text);
        out
    }

    /// The prefix length a byte-by-byte greedy cut takes: the specification of
    /// [`escape_prefix_into`], written the slow and obvious way.
    fn greedy_prefix(text: &str, max_raw: usize, max_escaped: usize) -> usize {
        let bytes = text.as_bytes();
        let (mut end, mut escaped) = (0, 0);
        while end < bytes.len()
            && end < max_raw
            && escaped + escaped_cost(bytes[end]) <= max_escaped
        {
            escaped += escaped_cost(bytes[end]);
            end += 1;
        }
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        end
    }

    /// Cuts `text` into pieces with [`escape_prefix_into`], checking each piece's escaping.
    fn pieces(text: &str, max_raw: usize, max_escaped: usize) -> Vec<&str> {
        let (mut rest, mut out) = (text, Vec::new());
        while !rest.is_empty() {
            let mut escaped_piece = String::new();
            let taken = escape_prefix_into(&mut escaped_piece, rest, max_raw, max_escaped);
            assert_eq!(taken, greedy_prefix(rest, max_raw, max_escaped));
            assert_eq!(escaped_piece, escaped(&rest[..taken]));
            out.push(&rest[..taken]);
            rest = &rest[taken..];
        }
        out
    }

    #[test]
    fn escapes_exactly_like_serde_json() {
        let mut all = String::new();
        for c in (0u32..0x300).filter_map(char::from_u32) {
            all.push(c);
        }
        all.push_str("\"\\/€𝄞\u{7f}\u{2028}");
        let ours = format!("\"{}\"", escaped(&all));
        assert_eq!(ours, serde_json::to_string(&all).unwrap());
    }

    #[test]
    fn the_cost_table_matches_the_escaper() {
        for byte in 0u8..128 {
            let text = char::from(byte).to_string();
            assert_eq!(escaped(&text).len(), escaped_cost(byte), "byte {byte:#x}");
        }
    }

    #[test]
    fn the_word_scan_finds_every_byte_that_needs_escaping_at_every_offset() {
        let specials = (0u8..0x20).chain([b'"', b'\\']);
        for special in specials {
            for at in 0..40 {
                // Plain bytes around it include UTF-8 lead and continuation bytes (≥ 0x80).
                let mut bytes = b"abc\xC3\xA9xyz\xE2\x82\xAC0123456789~!@#$%^&*()".repeat(2);
                bytes.truncate(40);
                assert_eq!(find_escape(&bytes), bytes.len());
                bytes[at] = special;
                assert_eq!(find_escape(&bytes), at, "byte {special:#x} at {at}");
                if at + 1 < bytes.len() {
                    bytes[at + 1] = b'"';
                    assert_eq!(
                        find_escape(&bytes),
                        at,
                        "a second hit does not hide the first"
                    );
                }
            }
        }
    }

    #[test]
    fn control_characters_are_found_at_every_offset() {
        let mut bytes =
            b"plain text \xC3\xA9 and more, well past sixty-four bytes of it......".repeat(3);
        assert!(!has_control(&bytes));
        for at in 0..bytes.len() {
            let kept = bytes[at];
            for control in [0x00, 0x0A, 0x1F] {
                bytes[at] = control;
                assert!(has_control(&bytes), "{control:#x} at {at}");
            }
            bytes[at] = 0x20;
            assert!(!has_control(&bytes));
            bytes[at] = kept;
        }
    }

    #[test]
    fn control_characters_are_split_by_their_escaped_size() {
        let text = "\u{1}".repeat(10_000);
        let pieces = pieces(&text, 16_384, 6_000);
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| escaped(p).len() <= 6_000));
        assert_eq!(pieces[0].len(), 1_000);
    }

    #[test]
    fn splits_never_cut_a_character() {
        let text = "€".repeat(10_000);
        let pieces = pieces(&text, 1_000, 100_000);
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| p.len() <= 1_000 && p.len() % 3 == 0));
    }

    #[test]
    fn unescaping_gives_back_what_was_escaped() {
        let mut all = String::new();
        for c in (0u32..0x300).filter_map(char::from_u32) {
            all.push(c);
        }
        all.push_str("\"\\/€𝄞 end");
        let mut back = String::new();
        assert!(unescape_into(&mut back, &escaped(&all)));
        assert_eq!(back, all);
        let mut solidus = String::new();
        assert!(unescape_into(&mut solidus, "a\\/b\\u00e9"));
        assert_eq!(solidus, "a/bé");
    }

    proptest::proptest! {
        #[test]
        fn unescaping_into_a_buffer_agrees_with_unescaping_into_a_string(
            text in "[\\x00-\\x7f]{0,60}|\\PC{0,20}",
        ) {
            let escaped = escaped(&text);
            let mut buffer = vec![0u8; escaped.len()];
            let mut string = String::new();
            proptest::prop_assert!(unescape_into(&mut string, &escaped));
            match unescape_ascii(&mut buffer, &escaped) {
                Some(n) => proptest::prop_assert_eq!(&buffer[..n], string.as_bytes()),
                None => proptest::prop_assert!(!text.is_ascii()),
            }
        }
    }

    #[test]
    fn unescaping_into_a_buffer_refuses_what_is_not_ascii_text() {
        let mut out = [0u8; 16];
        assert_eq!(unescape_ascii(&mut out, "a\\u00e9"), None);
        assert_eq!(unescape_ascii(&mut out, "é"), None);
        assert_eq!(unescape_ascii(&mut out, "a\\x"), None);
        assert_eq!(unescape_ascii(&mut out, "a\\"), None);
        assert_eq!(unescape_ascii(&mut out, "\\u12"), None);
        // `from_str_radix` takes a sign: four bytes that parse are still not four hex digits.
        assert_eq!(unescape_ascii(&mut out, "\\u+041"), None);
        assert_eq!(unescape_ascii(&mut [0u8; 2], "abc"), None);
        assert_eq!(unescape_ascii(&mut out, "a\\u0041\\n\\/"), Some(4));
        assert_eq!(&out[..4], b"aA\n/");
    }

    #[test]
    fn unescaping_refuses_what_it_does_not_take() {
        for bad in [
            "\\",
            "a\\x",
            "\\u12",
            "\\u+123",
            "\\ud834\\udd1e",
            "\\uzzzz",
        ] {
            assert!(!unescape_into(&mut String::new(), bad), "{bad:?}");
        }
    }

    #[test]
    fn two_control_characters_in_one_chunk_are_still_found() {
        let mut bytes = [b'a'; 64];
        bytes[3] = 0x01;
        bytes[40] = b'\n';
        assert!(has_control(&bytes));
        assert!(!has_control(&[b'a'; 64]));
    }

    #[test]
    fn unescaped_len_counts_the_bytes_the_escapes_stand_for() {
        for (escaped, text) in [
            (r#"plain""#, "plain"),
            (r#"a\u00e9b""#, "aéb"),
            (r#"\n\"\\""#, "\n\"\\"),
            (r#"\ud834\udd1e""#, "𝄞"),
            (r#"x\ud834\udd1ey""#, "x𝄞y"),
        ] {
            assert_eq!(unescaped_len(escaped.as_bytes()), text.len(), "{escaped}");
        }
        // A high surrogate with no low one after it counts as U+FFFD, three bytes.
        assert_eq!(unescaped_len(br#"\ud834ab""#), 3 + 2);
    }

    #[test]
    fn unbounded_escaping_takes_everything() {
        let mut out = String::new();
        let text = "plain \"quoted\" \u{1}€ and more plain text";
        assert_eq!(
            escape_prefix_into(&mut out, text, usize::MAX, usize::MAX),
            text.len()
        );
        assert_eq!(format!("\"{out}\""), serde_json::to_string(text).unwrap());
    }

    proptest::proptest! {
        #[test]
        fn pieces_rebuild_the_text_within_both_bounds(
            text in "\\PC*|[\\x00-\\x1f\"\\\\a€𝄞]*|[a-z\"\\\\\\x01é]{0,80}",
            max_raw in 4usize..64,
            max_escaped in 6usize..64,
        ) {
            let pieces = pieces(&text, max_raw, max_escaped);
            proptest::prop_assert_eq!(pieces.concat(), text.clone());
            for piece in pieces {
                proptest::prop_assert!(!piece.is_empty());
                proptest::prop_assert!(piece.len() <= max_raw);
                proptest::prop_assert!(escaped(piece).len() <= max_escaped);
            }
        }

        #[test]
        fn escaping_matches_serde_json_for_any_text(text in "\\PC*|[\\x00-\\x7f]*") {
            let ours = format!("\"{}\"", escaped(&text));
            proptest::prop_assert_eq!(ours, serde_json::to_string(&text).unwrap());
            let mut back = String::new();
            proptest::prop_assert!(unescape_into(&mut back, &escaped(&text)));
            proptest::prop_assert_eq!(back, text);
        }
    }
}
