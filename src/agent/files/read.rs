//! `read`: a bounded window of a regular file (offset + length) through an fd opened beneath the
//! root, with the file's total size and whether more remains.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use serde::Serialize;

use super::error::FileError;
use super::resolve::RelPath;
use super::sys;
use super::Workspace;

/// The most one read returns, whatever the client asks: a page, not a download.
pub const MAX_READ_BYTES: usize = 8 * 1024 * 1024;
/// What a read returns when the client names no length.
pub const DEFAULT_READ_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadOptions {
    pub offset: u64,
    /// Clamped to [`MAX_READ_BYTES`]; `None` means [`DEFAULT_READ_BYTES`].
    pub max_len: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadChunk {
    pub path: String,
    pub offset: u64,
    pub data: Vec<u8>,
    /// The file's size when it was read.
    pub total_size: u64,
    /// True when bytes remain after this window.
    pub truncated: bool,
    /// True when this window reaches the end of the file.
    pub eof: bool,
}

impl Workspace {
    /// Reads `opts.max_len` bytes from `opts.offset`; a final symlink is followed beneath the root.
    pub fn read(&self, path: &str, opts: ReadOptions) -> Result<ReadChunk, FileError> {
        let rel = self.rel(path)?;
        let (file, size) = self.open_regular(&rel, "read")?;
        let want = opts
            .max_len
            .unwrap_or(DEFAULT_READ_BYTES)
            .min(MAX_READ_BYTES);
        let available = size.saturating_sub(opts.offset);
        let len = usize::try_from(available).unwrap_or(usize::MAX).min(want);
        let mut data = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            let n = file
                .read_at(&mut data[filled..], opts.offset + filled as u64)
                .map_err(|e| FileError::from_io(&e, "read", &rel.display))?;
            if n == 0 {
                break; // The file shrank under us: return what is there.
            }
            filled += n;
        }
        data.truncate(filled);
        let end = opts.offset.saturating_add(filled as u64);
        Ok(ReadChunk {
            path: rel.normal(),
            offset: opts.offset,
            data,
            total_size: size,
            truncated: end < size,
            eof: end >= size,
        })
    }

    /// Opens a regular file for reading. `O_NONBLOCK` keeps a planted FIFO from hanging the
    /// open; anything that is not a regular file is refused before a byte is read.
    pub(crate) fn open_regular(
        &self,
        rel: &RelPath,
        action: &str,
    ) -> Result<(File, u64), FileError> {
        let fd = self.open_beneath(rel, libc::O_RDONLY | libc::O_NONBLOCK, true, action)?;
        let st =
            sys::fstat(fd.as_fd()).map_err(|e| FileError::from_io(&e, action, &rel.display))?;
        if sys::is_dir(&st) {
            return Err(FileError::conflict(format!(
                "cannot {action} '{}': it is a directory",
                rel.display
            )));
        }
        if !sys::is_regular(&st) {
            return Err(FileError::invalid(format!(
                "cannot {action} '{}': it is not a regular file",
                rel.display
            )));
        }
        Ok((File::from(fd), u64::try_from(st.st_size).unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Sandbox;
    use super::*;

    #[test]
    fn read_returns_the_window_and_says_whether_more_remains() {
        let sb = Sandbox::new("read-window");
        sb.file("a.txt", "0123456789");
        let ws = sb.ws();
        let chunk = ws
            .read(
                "a.txt",
                ReadOptions {
                    offset: 2,
                    max_len: Some(3),
                },
            )
            .unwrap();
        assert_eq!(chunk.data, b"234");
        assert_eq!(
            (chunk.total_size, chunk.truncated, chunk.eof),
            (10, true, false)
        );
        let tail = ws
            .read(
                "a.txt",
                ReadOptions {
                    offset: 7,
                    max_len: Some(100),
                },
            )
            .unwrap();
        assert_eq!(tail.data, b"789");
        assert_eq!((tail.truncated, tail.eof), (false, true));
    }

    #[test]
    fn read_past_the_end_is_empty_and_eof() {
        let sb = Sandbox::new("read-past");
        sb.file("a.txt", "abc");
        let chunk = sb
            .ws()
            .read(
                "a.txt",
                ReadOptions {
                    offset: 50,
                    max_len: None,
                },
            )
            .unwrap();
        assert!(chunk.data.is_empty() && chunk.eof && !chunk.truncated);
    }

    #[test]
    fn read_is_bounded_by_the_maximum_whatever_is_asked() {
        let sb = Sandbox::new("read-max");
        std::fs::write(sb.at("big"), vec![b'x'; MAX_READ_BYTES + 10]).unwrap();
        let chunk = sb
            .ws()
            .read(
                "big",
                ReadOptions {
                    offset: 0,
                    max_len: Some(usize::MAX),
                },
            )
            .unwrap();
        assert_eq!(chunk.data.len(), MAX_READ_BYTES);
        assert!(chunk.truncated);
    }

    #[test]
    fn read_of_a_directory_or_a_fifo_is_refused() {
        let sb = Sandbox::new("read-fifo");
        sb.dir("d");
        let fifo = std::ffi::CString::new(sb.at("pipe").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let ws = sb.ws();
        assert_eq!(
            ws.read("d", ReadOptions::default()).unwrap_err().kind,
            super::super::FileErrorKind::Conflict
        );
        assert_eq!(
            ws.read("pipe", ReadOptions::default()).unwrap_err().kind,
            super::super::FileErrorKind::InvalidArgument
        );
    }
}
