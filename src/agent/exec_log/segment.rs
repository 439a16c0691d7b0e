//! Segment files of an exec log: append-only records `len:u32 BE | seq:u64 BE | event JSON`,
//! named by their first seq, plus a sparse in-memory index of record offsets for seeking.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::event::{Event, MAX_EVENT_JSON};

/// Bytes before each record's JSON: its length (u32) and its seq (u64), both big-endian.
pub const RECORD_HEADER: u64 = 12;

/// One sparse index entry per this many bytes of records: a disk read seeks to the nearest
/// entry at or before its seq and skips at most this much.
const SPARSE_STEP: u64 = 64 * 1024;

/// Reads through segment files in chunks of this size.
const READ_BUFFER: usize = 64 * 1024;

/// Scans of record headers read this much at a time while records are small; after a record
/// at least this large they read the next header alone (see [`Headers`]).
const SCAN_BUFFER: usize = 4 * 1024;

/// The file name of the segment whose first record has `first_seq`: zero-padded, so names sort
/// in seq order.
pub fn file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.seg")
}

/// The first seq a segment file name stands for, or `None` for any other file.
pub fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Appends one record to `out`.
pub fn encode_record(out: &mut Vec<u8>, seq: u64, json: &str) {
    // An event's JSON is bounded by MAX_EVENT_JSON, far below u32::MAX.
    let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(json.as_bytes());
}

/// What the log knows of one segment file.
#[derive(Debug)]
pub struct Segment {
    pub first_seq: u64,
    /// `first_seq - 1` while the segment is empty.
    pub last_seq: u64,
    /// Size of the file: records with their headers.
    pub file_bytes: u64,
    /// Output bytes of its events (`Event::data_len`: what `dropped_bytes` counts).
    pub event_bytes: u64,
    /// Output bytes of every event of the stream before this segment, evicted ones included.
    pub cum_before: u64,
    /// Creation order across all logs of the process: the shared budget evicts oldest first.
    pub epoch: u64,
    /// `(seq, offset)` of some records, ascending; `None` until built (recovered segments are
    /// indexed on their first read).
    pub sparse: Option<Vec<(u64, u64)>>,
}

impl Segment {
    pub fn new(first_seq: u64, cum_before: u64, epoch: u64) -> Self {
        Self {
            first_seq,
            last_seq: first_seq - 1,
            file_bytes: 0,
            event_bytes: 0,
            cum_before,
            epoch,
            sparse: Some(Vec::new()),
        }
    }

    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(file_name(self.first_seq))
    }

    pub fn is_empty(&self) -> bool {
        self.last_seq < self.first_seq
    }

    /// Accounts for a record appended at the end of the file.
    pub fn note_record(&mut self, seq: u64, json_len: u64, data_len: u64) {
        let offset = self.file_bytes;
        if let Some(sparse) = &mut self.sparse {
            if sparse
                .last()
                .is_none_or(|&(_, last)| offset - last >= SPARSE_STEP)
            {
                sparse.push((seq, offset));
            }
        }
        self.last_seq = seq;
        self.file_bytes += RECORD_HEADER + json_len;
        self.event_bytes += data_len;
    }

    /// The offset of a record at or before `seq` and that record's seq.
    pub fn seek_point(&mut self, dir: &Path, seq: u64) -> io::Result<(u64, u64)> {
        if self.sparse.is_none() {
            let mut sparse: Vec<(u64, u64)> = Vec::new();
            let file = File::open(self.path(dir))?;
            scan(&file, 0, self.first_seq, |record| {
                if sparse
                    .last()
                    .is_none_or(|&(_, last)| record.offset - last >= SPARSE_STEP)
                {
                    sparse.push((record.seq, record.offset));
                }
                true
            })?;
            self.sparse = Some(sparse);
        }
        let sparse = self.sparse.as_deref().unwrap_or_default();
        let at = sparse.partition_point(|&(s, _)| s <= seq);
        Ok(match at.checked_sub(1).and_then(|i| sparse.get(i)) {
            Some(&(s, offset)) => (s, offset),
            None => (self.first_seq, 0),
        })
    }
}

/// One record's place, as a scan meets it.
#[derive(Debug, Clone, Copy)]
pub struct RecordAt {
    pub seq: u64,
    pub offset: u64,
    /// The JSON's length (the tests check scans by it; the log itself counts output bytes).
    #[cfg_attr(not(test), allow(dead_code))]
    pub json_len: u64,
}

/// Where a scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanEnd {
    /// The offset after the last whole, well-formed record.
    pub offset: u64,
    /// The seq the next record would have.
    pub next_seq: u64,
    /// Bytes followed that offset that are not a whole record (a torn write).
    pub torn: bool,
}

/// Walks the record headers from `offset` (where a record of `seq` starts), calling `each`
/// until it returns false. Stops at the end of the file, or at the first record that is cut
/// short, out of sequence or implausibly long.
pub fn scan(
    file: &File,
    offset: u64,
    seq: u64,
    mut each: impl FnMut(RecordAt) -> bool,
) -> io::Result<ScanEnd> {
    let size = file.metadata()?.len();
    let mut headers = Headers::new(file);
    let mut end = ScanEnd {
        offset,
        next_seq: seq,
        torn: false,
    };
    while end.offset < size {
        if size - end.offset < RECORD_HEADER {
            end.torn = true;
            break;
        }
        let header = headers.at(end.offset, size)?;
        let (len, record_seq) = parse_header(&header);
        if record_seq != end.next_seq
            || len > MAX_EVENT_JSON as u64 * 2
            || size - end.offset - RECORD_HEADER < len
        {
            end.torn = true;
            break;
        }
        let record = RecordAt {
            seq: record_seq,
            offset: end.offset,
            json_len: len,
        };
        if !each(record) {
            break;
        }
        end.offset += RECORD_HEADER + len;
        end.next_seq += 1;
    }
    Ok(end)
}

/// Record headers read at their offsets, never the JSON between them in bulk: finding the
/// sizes of a segment's records before it is deleted (for exact `dropped_bytes`) would otherwise
/// read the whole segment again. Small records are served from a window of [`SCAN_BUFFER`]
/// bytes that holds several headers; past a large record, the next header is read alone.
struct Headers<'a> {
    file: &'a File,
    window: Vec<u8>,
    /// The file offset of `window[0]`.
    start: u64,
}

impl<'a> Headers<'a> {
    fn new(file: &'a File) -> Self {
        Self {
            file,
            window: Vec::new(),
            start: 0,
        }
    }

    /// The header at `offset` (the caller checked that it lies within `size`).
    fn at(&mut self, offset: u64, size: u64) -> io::Result<[u8; RECORD_HEADER as usize]> {
        let end = self.start + self.window.len() as u64;
        if offset < self.start || offset + RECORD_HEADER > end {
            // A record far past the window (one larger than it) suggests the next ones are
            // large too: read just the header. Otherwise refill the window from here.
            let skipped_large = offset >= end + SCAN_BUFFER as u64 - RECORD_HEADER;
            let want = match skipped_large {
                true => RECORD_HEADER,
                false => SCAN_BUFFER as u64,
            };
            self.window.resize(want.min(size - offset) as usize, 0);
            self.file.read_exact_at(&mut self.window, offset)?;
            self.start = offset;
        }
        let at = (offset - self.start) as usize;
        let mut header = [0u8; RECORD_HEADER as usize];
        header.copy_from_slice(&self.window[at..at + RECORD_HEADER as usize]);
        Ok(header)
    }
}

fn parse_header(header: &[u8; RECORD_HEADER as usize]) -> (u64, u64) {
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&header[4..]);
    (u64::from(len), u64::from_be_bytes(seq))
}

/// Reads the records of `file` from `offset` (a record of `seq_at_offset` starts there),
/// skipping those before `from_seq`, and hands each later record's JSON to `take` until it
/// returns false or `last_seq` has been read. The file is read in windows of [`READ_BUFFER`]
/// (or one record, when larger) straight into one buffer, and each JSON is lent from it: a
/// page read back costs one copy out of the page cache, not one per layer.
pub fn read_records(
    file: &File,
    offset: u64,
    seq_at_offset: u64,
    from_seq: u64,
    last_seq: u64,
    mut take: impl FnMut(u64, &str) -> bool,
) -> io::Result<()> {
    let damaged = |seq: u64, why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("record {seq} of an exec log is damaged ({why})"),
        )
    };
    let mut window: Vec<u8> = Vec::new();
    // The file offset of `window[0]`, and where the next record starts.
    let (mut start, mut at) = (offset, offset);
    let mut seq = seq_at_offset;
    while seq <= last_seq {
        let header_end = (at - start) as usize + RECORD_HEADER as usize;
        if header_end > window.len() {
            refill(file, &mut window, &mut start, at, READ_BUFFER)?;
        }
        let h = (at - start) as usize;
        let mut header = [0u8; RECORD_HEADER as usize];
        header.copy_from_slice(&window[h..h + RECORD_HEADER as usize]);
        let (len, record_seq) = parse_header(&header);
        if record_seq != seq || len > MAX_EVENT_JSON as u64 * 2 {
            return Err(damaged(seq, "its header does not follow the one before"));
        }
        let record_end = at + RECORD_HEADER + len;
        if seq >= from_seq {
            if (record_end - start) as usize > window.len() {
                let whole = (RECORD_HEADER + len) as usize;
                refill(file, &mut window, &mut start, at, whole.max(READ_BUFFER))?;
                if (record_end - start) as usize > window.len() {
                    return Err(damaged(seq, "the segment ends inside it"));
                }
            }
            let j = (at - start) as usize + RECORD_HEADER as usize;
            let json = std::str::from_utf8(&window[j..j + len as usize])
                .map_err(|_| damaged(seq, "its JSON is not UTF-8"))?;
            if !take(seq, json) {
                return Ok(());
            }
        }
        at = record_end;
        seq += 1;
    }
    Ok(())
}

/// Fills `window` with up to `want` bytes of `file` from `at` (fewer at the end of the file);
/// fails when not even a record header is there.
fn refill(
    file: &File,
    window: &mut Vec<u8>,
    start: &mut u64,
    at: u64,
    want: usize,
) -> io::Result<()> {
    window.resize(want, 0);
    let mut filled = 0;
    while filled < want {
        match file.read_at(&mut window[filled..], at + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    window.truncate(filled);
    *start = at;
    if filled < RECORD_HEADER as usize {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "an exec log segment ends inside a record",
        ));
    }
    Ok(())
}

/// The output bytes (`Event::data_len`) of the records `first_seq..=last_seq` of a segment,
/// oldest first (for the drop ledger and a recovered segment's count).
pub fn record_data_sizes(path: &Path, first_seq: u64, last_seq: u64) -> io::Result<Vec<u64>> {
    let file = File::open(path)?;
    let mut sizes = Vec::new();
    read_records(&file, 0, first_seq, first_seq, last_seq, |_, json| {
        let len = Event::from_encoded(json).map_or(0, |e| e.data_len());
        sizes.push(len as u64);
        true
    })?;
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn names_sort_in_seq_order_and_parse_back() {
        assert_eq!(file_name(42), "00000000000000000042.seg");
        assert_eq!(parse_name(&file_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_name("42.seg"), None);
        assert_eq!(parse_name("index.json"), None);
        assert!(file_name(9) < file_name(10));
    }

    proptest::proptest! {
        #[test]
        fn a_scan_finds_every_record_whatever_their_sizes(
            lens in proptest::collection::vec(
                proptest::prop_oneof![0usize..64, 3_000usize..5_000, 10_000usize..20_000], 0..40),
            torn in 0usize..20,
        ) {
            let dir = std::env::temp_dir()
                .join(format!("seg-scan-{}-{}", std::process::id(), lens.len()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(file_name(1));
            let mut bytes = Vec::new();
            let mut expected = Vec::new();
            for (i, &len) in lens.iter().enumerate() {
                let seq = i as u64 + 1;
                encode_record(&mut bytes, seq, &"x".repeat(len));
                expected.push((seq, len as u64));
            }
            // A torn record at the end: part of a header, or a header and part of its JSON.
            let whole = bytes.len() as u64;
            encode_record(&mut bytes, lens.len() as u64 + 1, &"y".repeat(30));
            bytes.truncate(whole as usize + torn);
            File::create(&path).unwrap().write_all(&bytes).unwrap();
            let mut seen = Vec::new();
            let end = scan(&File::open(&path).unwrap(), 0, 1, |r| {
                seen.push((r.seq, r.json_len));
                true
            })
            .unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            proptest::prop_assert_eq!(seen, expected);
            proptest::prop_assert_eq!(end.offset, whole);
            proptest::prop_assert_eq!(end.torn, torn > 0);
        }
    }

    proptest::proptest! {
        #[test]
        fn records_read_back_whole_across_read_windows(
            lens in proptest::collection::vec(
                proptest::prop_oneof![0usize..64, 10_000usize..30_000], 1..30),
            from_at in 0usize..30,
            stop_after in 1usize..40,
        ) {
            let dir = std::env::temp_dir()
                .join(format!("seg-read-{}-{}", std::process::id(), lens.len()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(file_name(1));
            let mut bytes = Vec::new();
            let mut all = Vec::new();
            for (i, &len) in lens.iter().enumerate() {
                let json = format!("{{\"n\":\"{}\"}}", char::from(b'a' + (i % 26) as u8).to_string().repeat(len));
                encode_record(&mut bytes, i as u64 + 1, &json);
                all.push((i as u64 + 1, json));
            }
            File::create(&path).unwrap().write_all(&bytes).unwrap();
            let from = (from_at % lens.len()) as u64 + 1;
            let mut got = Vec::new();
            read_records(&File::open(&path).unwrap(), 0, 1, from, lens.len() as u64, |seq, json| {
                got.push((seq, json.to_owned()));
                got.len() < stop_after
            })
            .unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            let expected: Vec<_> = all.into_iter().skip(from as usize - 1).take(stop_after).collect();
            proptest::prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn a_scan_stops_at_a_torn_record() {
        let dir = std::env::temp_dir().join(format!("seg-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(file_name(5));
        let mut bytes = Vec::new();
        encode_record(&mut bytes, 5, "{\"a\":1}");
        encode_record(&mut bytes, 6, "{\"b\":22}");
        let whole = bytes.len() as u64;
        encode_record(&mut bytes, 7, "{\"c\":333}");
        bytes.truncate(bytes.len() - 3);
        File::create(&path).unwrap().write_all(&bytes).unwrap();
        let mut seen = Vec::new();
        let end = scan(&File::open(&path).unwrap(), 0, 5, |r| {
            seen.push((r.seq, r.json_len));
            true
        })
        .unwrap();
        assert_eq!(seen, vec![(5, 7), (6, 8)]);
        assert_eq!(
            end,
            ScanEnd {
                offset: whole,
                next_seq: 7,
                torn: true
            }
        );
        let mut got = Vec::new();
        read_records(&File::open(&path).unwrap(), 0, 5, 6, 6, |seq, json| {
            got.push((seq, json.to_owned()));
            true
        })
        .unwrap();
        assert_eq!(got, vec![(6, "{\"b\":22}".to_string())]);
        let past_the_end = read_records(&File::open(&path).unwrap(), 0, 5, 5, 7, |_, _| true);
        assert_eq!(
            past_the_end.unwrap_err().kind(),
            io::ErrorKind::InvalidData,
            "a torn record is not read as a record"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
