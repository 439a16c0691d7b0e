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
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    let mut copied = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape = match ESCAPE.get(usize::from(byte)) {
            None | Some(0) => continue,
            Some(&e) => e,
        };
        // `i` is at an ASCII byte, hence at a character boundary.
        out.push_str(&text[copied..i]);
        out.push('\\');
        if escape == b'u' {
            out.push_str("u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xF)]));
        } else {
            out.push(char::from(escape));
        }
        copied = i + 1;
    }
    out.push_str(&text[copied..]);
}

/// Splits `text` at character boundaries into pieces of at most `max_raw` bytes whose escaped
/// form is at most `max_escaped` bytes. Both bounds must allow one character (≥ 4 and ≥ 6).
pub fn split_text(text: &str, max_raw: usize, max_escaped: usize) -> Vec<&str> {
    debug_assert!(max_raw >= 4 && max_escaped >= 6);
    if text.is_empty() {
        return Vec::new();
    }
    // Fast path: short enough that even all-control-character text would fit.
    if text.len() <= max_raw && text.len().saturating_mul(6) <= max_escaped {
        return vec![text];
    }
    let bytes = text.as_bytes();
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = start;
        let mut escaped = 0;
        while end < bytes.len() && end - start < max_raw {
            let cost = escaped_cost(bytes[end]);
            if escaped + cost > max_escaped {
                break;
            }
            escaped += cost;
            end += 1;
        }
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end == start {
            // Unreachable with the documented bounds; take one character to stay finite.
            end = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
        pieces.push(&text[start..end]);
        start = end;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        escape_into(&mut out, text);
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
    fn control_characters_are_split_by_their_escaped_size() {
        let text = "\u{1}".repeat(10_000);
        let pieces = split_text(&text, 16_384, 6_000);
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| escaped(p).len() <= 6_000));
        assert_eq!(pieces[0].len(), 1_000);
    }

    #[test]
    fn splits_never_cut_a_character() {
        let text = "€".repeat(10_000);
        let pieces = split_text(&text, 1_000, 100_000);
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| p.len() <= 1_000 && p.len() % 3 == 0));
    }

    proptest::proptest! {
        #[test]
        fn pieces_rebuild_the_text_within_both_bounds(
            text in "\\PC*|[\\x00-\\x1f\"\\\\a€𝄞]*",
            max_raw in 4usize..64,
            max_escaped in 6usize..64,
        ) {
            let pieces = split_text(&text, max_raw, max_escaped);
            proptest::prop_assert_eq!(pieces.concat(), text.clone());
            for piece in pieces {
                proptest::prop_assert!(!piece.is_empty());
                proptest::prop_assert!(piece.len() <= max_raw);
                proptest::prop_assert!(escaped(piece).len() <= max_escaped);
            }
        }
    }
}
