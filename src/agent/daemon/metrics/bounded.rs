//! Reads of the files the sampler looks at (`/proc`, cgroup files), each bounded in size: the
//! workspace shapes what some of them hold (a process's name, its number of threads), so no read
//! takes more than its cap, and what does not parse is counted, never trusted or fatal.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The most bytes read of a process's `stat` (a few hundred in practice).
pub(crate) const STAT_BYTES: usize = 4 * 1024;
/// The most bytes read of a small file (`memory.max`, `/proc/self/cgroup`, `memory.events`).
pub(crate) const SMALL_BYTES: usize = 16 * 1024;
/// The most bytes read of a table (`/proc/meminfo`, `/proc/net/dev`, `/proc/vmstat`).
pub(crate) const TABLE_BYTES: usize = 64 * 1024;

/// What a bounded read found: the text (lossy UTF-8) and whether the file went on past the cap
/// (the last, cut line is then dropped).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Bounded {
    pub(crate) text: String,
    pub(crate) truncated: bool,
}

/// At most `max` bytes of the file at `path`. A file longer than that keeps its complete lines
/// only and says `truncated`.
pub(crate) fn read(path: &Path, max: usize) -> io::Result<Bounded> {
    let file = File::open(path)?;
    let mut bytes = Vec::with_capacity(max.min(4096));
    // One byte past the cap tells a file of exactly `max` bytes from a longer one.
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(cut(bytes, max))
}

fn cut(mut bytes: Vec<u8>, max: usize) -> Bounded {
    let truncated = bytes.len() > max;
    if truncated {
        let end = bytes[..max]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        bytes.truncate(end);
    }
    Bounded {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        truncated,
    }
}

/// A name the workspace chose (a process's, a GPU's), made safe to show: control characters
/// become `?` and at most `max_chars` characters are kept.
pub(crate) fn shown_name(name: &str, max_chars: usize) -> String {
    name.chars()
        .take(max_chars)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_within_the_cap_is_read_whole() {
        let dir = std::env::temp_dir().join(format!("mwc-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, "a 1\nb 2\n").unwrap();
        let got = read(&path, 8).unwrap();
        assert_eq!(got.text, "a 1\nb 2\n");
        assert!(!got.truncated);
        let cut_short = read(&path, 6).unwrap();
        assert_eq!(cut_short.text, "a 1\n", "the cut line is dropped");
        assert!(cut_short.truncated);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_long_line_with_no_end_in_the_cap_leaves_nothing() {
        let got = cut(vec![b'x'; 100], 10);
        assert_eq!(
            got,
            Bounded {
                text: String::new(),
                truncated: true
            }
        );
    }

    #[test]
    fn names_lose_control_characters_and_length() {
        assert_eq!(shown_name("py\u{1b}[31mthon\n", 8), "py?[31mt");
        assert_eq!(shown_name("bash", 15), "bash");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        let got = cut(b"ok \xff\n".to_vec(), 64);
        assert_eq!(got.text, "ok \u{fffd}\n");
    }
}
