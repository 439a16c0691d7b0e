//! Exec logs against a real directory: disk pages equal ring pages, per-exec and shared bounds,
//! exact drop counts, and recovery after a crash with a torn last record.

use std::path::PathBuf;
use std::sync::Arc;

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde_json::{json, Map, Value};

use super::*;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "exec-log-{name}-{}-{}",
            std::process::id(),
            crate::policy::new_id("ex").unwrap()
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn no_fields() -> Map<String, Value> {
    Map::new()
}

fn small(max_log_bytes: u64, segment_bytes: u64, ring_bytes: usize) -> LogConfig {
    LogConfig {
        max_log_bytes,
        segment_bytes,
        ring_bytes,
    }
}

/// Appends `n` stdout lines, one event each, and returns each event's encoded size by seq.
fn lines(log: &ExecLog, n: usize, sizes: &mut Vec<u64>) {
    for i in 0..n {
        let line = format!("line {i:06} {}\n", "x".repeat(i % 50));
        log.append(EventType::Stdout, Some(line.as_bytes()), &no_fields())
            .unwrap();
        // What the command wrote: what `dropped_bytes` counts of the events lost.
        sizes.push(line.len() as u64);
    }
}

fn all_events(log: &ExecLog, mut cursor: u64) -> (Vec<Value>, Vec<Page>) {
    let mut events = Vec::new();
    let mut pages = Vec::new();
    loop {
        let page = log.read(cursor, 1000, 64 << 10).unwrap();
        let v: Value = serde_json::from_str(&page.to_json()).unwrap();
        events.extend(v["events"].as_array().unwrap().iter().cloned());
        let more = page.has_more;
        cursor = page.next_cursor;
        pages.push(page);
        if !more {
            return (events, pages);
        }
    }
}

#[test]
fn pages_from_disk_equal_pages_from_the_ring() {
    let dir = TempDir::new("equal");
    let budget = LogBudget::new(1 << 30);
    // A ring of 1 KiB forgets almost at once; the disk keeps everything.
    let log = ExecLog::create(&dir.0.join("a"), &small(1 << 20, 4096, 1024), &budget).unwrap();
    let mirror = EventRing::of_kind(Some(StreamKind::Exec), 1 << 20, None).unwrap();
    for i in 0..300 {
        let data = format!("{i} é\u{1}\n");
        log.append(EventType::Stdout, Some(data.as_bytes()), &no_fields())
            .unwrap();
        mirror
            .append(EventType::Stdout, Some(data.as_bytes()), &no_fields())
            .unwrap();
    }
    let fields = json!({"returncode": 0}).as_object().unwrap().clone();
    log.append(EventType::Exit, None, &fields).unwrap();
    mirror.append(EventType::Exit, None, &fields).unwrap();
    for cursor in [0, 1, 57, 299, 300] {
        let disk = log.read(cursor, 50, 4000).unwrap();
        let ring = mirror.read(cursor, 50, 4000, false).unwrap();
        assert!(!disk.cursor_expired, "the disk kept everything");
        // Timestamps may differ between the two streams; compare without them.
        let strip = |p: &Page| {
            let mut v: Value = serde_json::from_str(&p.to_json()).unwrap();
            for e in v["events"].as_array_mut().unwrap() {
                e.as_object_mut().unwrap().remove("timestamp");
            }
            v
        };
        assert_eq!(strip(&disk), strip(&ring), "cursor {cursor}");
    }
    assert!(dir.0.join("a").join("00000000000000000001.seg").exists());
}

#[test]
fn a_log_is_bounded_and_reports_exact_drops_from_any_cursor() {
    let dir = TempDir::new("bound");
    let budget = LogBudget::new(1 << 30);
    let config = small(16 << 10, 4 << 10, 512);
    let log = ExecLog::create(&dir.0.join("a"), &config, &budget).unwrap();
    let mut sizes = Vec::new();
    lines(&log, 2000, &mut sizes);
    let bytes = log.disk_bytes();
    assert!(
        bytes <= config.max_log_bytes + config.segment_bytes,
        "{bytes}"
    );
    assert_eq!(budget.used(), bytes);
    let first = log.first_seq();
    assert!(
        first > 1000,
        "old segments were deleted (first kept: {first})"
    );
    for cursor in [0, 1, 17, 500, first - 2] {
        let page = log.read(cursor, 10, 1 << 20).unwrap();
        assert!(page.cursor_expired);
        assert_eq!(page.first_seq, first);
        assert_eq!(page.dropped_events, first - 1 - cursor);
        let dropped: u64 = sizes[cursor as usize..(first - 1) as usize].iter().sum();
        assert_eq!(page.dropped_bytes, dropped, "cursor {cursor}");
        assert_eq!(
            page.events[0].seq(),
            first,
            "continues from the oldest kept"
        );
    }
    let page = log.read(first - 1, 10, 1 << 20).unwrap();
    assert!(!page.cursor_expired && page.dropped_events == 0);
}

#[test]
fn the_shared_budget_evicts_finished_logs_first() {
    let dir = TempDir::new("budget");
    let budget = LogBudget::new(64 << 10);
    let config = small(1 << 20, 4 << 10, 512);
    let done = ExecLog::create(&dir.0.join("done"), &config, &budget).unwrap();
    let mut sizes = Vec::new();
    lines(&done, 400, &mut sizes);
    done.close().unwrap();
    let running = ExecLog::create(&dir.0.join("running"), &config, &budget).unwrap();
    lines(&running, 400, &mut sizes);
    assert!(budget.used() <= 64 << 10, "{}", budget.used());
    // Everything of the finished log went before anything of the running one.
    assert_eq!(running.first_seq(), 1);
    assert!(done.first_seq() > 1);
    // Past that, the running log loses its own oldest segments, never its last one.
    lines(&running, 2000, &mut sizes);
    assert!(budget.used() <= (64 << 10) + config.segment_bytes);
    assert_eq!(done.disk_bytes(), 0);
    assert!(running.first_seq() > 1);
    let page = done.read(0, 10, 1 << 20).unwrap();
    assert!(page.closed && page.cursor_expired && page.events.is_empty());
    assert_eq!(page.next_cursor, done.last_seq());
    assert!(!page.has_more);
}

#[test]
fn the_in_memory_tails_share_one_budget_and_lose_nothing_to_it() {
    let dir = TempDir::new("memory");
    let budget = LogBudget::with_memory(1 << 30, 1 << 20);
    let config = small(64 << 20, 1 << 20, 1 << 20);
    let chunk = "0123456789abcdef".repeat(4096);
    let logs: Vec<_> = (0..3)
        .map(|i| ExecLog::create(&dir.0.join(format!("l{i}")), &config, &budget).unwrap())
        .collect();
    // One log alone keeps a large tail: all of its 640 KiB, within its own bound.
    for _ in 0..10 {
        logs[0]
            .append(EventType::Stdout, Some(chunk.as_bytes()), &no_fields())
            .unwrap();
    }
    assert!(logs[0].ring_bytes() > 600 << 10);
    // Three flooding together share the 1 MiB budget.
    for _ in 0..10 {
        for log in &logs {
            log.append(EventType::Stdout, Some(chunk.as_bytes()), &no_fields())
                .unwrap();
            assert!(budget.ring_used() <= 1 << 20, "{}", budget.ring_used());
        }
    }
    let held: usize = logs.iter().map(|log| log.ring_bytes()).sum();
    assert_eq!(
        budget.ring_used(),
        held,
        "the budget counts exactly what the rings hold"
    );
    // None is trimmed below the floor (by more than the one event that straddles it).
    let floor = FINISHED_RING_BYTES - crate::event::MAX_EVENT_JSON;
    assert!(logs.iter().all(|log| log.ring_bytes() >= floor));
    // What the rings let go is read back from disk, every event of it.
    for (log, appends) in logs.iter().zip([20, 10, 10]) {
        let (events, _) = all_events(log, 0);
        assert_eq!(events.len() as u64, log.last_seq());
        let text: String = events.iter().map(|e| e["data"].as_str().unwrap()).collect();
        assert_eq!(text, chunk.repeat(appends));
    }
    // A finished log keeps a small tail; a dropped one gives its share back.
    logs[1].close().unwrap();
    assert!(logs[1].ring_bytes() <= FINISHED_RING_BYTES);
    drop(logs);
    assert_eq!(budget.ring_used(), 0);
}

#[test]
fn a_reader_within_the_in_memory_tail_is_served_without_the_disk() {
    let dir = TempDir::new("tail");
    let budget = LogBudget::new(1 << 30);
    let config = small(64 << 20, 1 << 20, 1 << 20);
    let log = ExecLog::create(&dir.0.join("a"), &config, &budget).unwrap();
    let chunk = "0123456789abcdef".repeat(4096);
    for _ in 0..8 {
        log.append(EventType::Stdout, Some(chunk.as_bytes()), &no_fields())
            .unwrap();
    }
    // With its segments gone from the disk, the 512 KiB the tail holds still read whole.
    for entry in std::fs::read_dir(dir.0.join("a")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "seg") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let (events, _) = all_events(&log, 0);
    let text: String = events.iter().map(|e| e["data"].as_str().unwrap()).collect();
    assert_eq!(text, chunk.repeat(8));
    // Once the exec ends, its tail shrinks to what a finished log keeps; older reads need the
    // disk (gone here, so they fail rather than come back short).
    log.close().unwrap();
    assert!(log.ring_bytes() <= FINISHED_RING_BYTES);
    assert!(log.read(0, 1000, 64 << 10).is_err());
    assert!(log.read(log.last_seq() - 1, 1000, 64 << 10).is_ok());
}

#[test]
fn recovery_truncates_a_torn_record_and_continues_numbering() {
    let dir = TempDir::new("recover");
    let path = dir.0.join("a");
    let budget = LogBudget::new(1 << 30);
    let config = small(1 << 20, 4 << 10, 512);
    let mut sizes = Vec::new();
    {
        let log = ExecLog::create(&path, &config, &budget).unwrap();
        lines(&log, 100, &mut sizes);
        assert_eq!(log.last_seq(), 100);
    } // "killed": no close.
    let mut last_segment: Vec<_> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    last_segment.sort();
    let last = last_segment.pop().unwrap();
    let whole = std::fs::metadata(&last).unwrap().len();
    // Half a record: a header that promises more than follows.
    let mut torn = Vec::new();
    segment::encode_record(&mut torn, 101, "{\"seq\":101,\"never\":\"finished\"}");
    torn.truncate(20);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap();
    std::io::Write::write_all(&mut file, &torn).unwrap();
    drop(file);

    let log = ExecLog::recover(&path, &config, &budget).unwrap();
    assert_eq!(
        std::fs::metadata(&last).unwrap().len(),
        whole,
        "torn tail cut"
    );
    assert_eq!(log.last_seq(), 100);
    assert!(!log.is_closed());
    let status = json!({"state": "lost"}).as_object().unwrap().clone();
    assert_eq!(log.append(EventType::Status, None, &status).unwrap(), 101);
    log.close().unwrap();
    let (events, pages) = all_events(&log, 0);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=101).collect::<Vec<_>>());
    assert_eq!(events[100]["state"], "lost");
    assert!(pages.last().unwrap().closed);
    assert!(
        log.append(EventType::Status, None, &no_fields()).is_err(),
        "closed logs refuse appends"
    );

    // Reopened again, it is closed and unchanged.
    drop(log);
    let again = ExecLog::recover(&path, &config, &budget).unwrap();
    assert!(again.is_closed());
    assert_eq!(again.last_seq(), 101);
}

#[test]
fn output_delivered_plus_dropped_is_what_the_command_wrote() {
    let dir = TempDir::new("delivered");
    let budget = LogBudget::new(1 << 30);
    let log = ExecLog::create(&dir.0.join("a"), &small(16 << 10, 4 << 10, 512), &budget).unwrap();
    let mut sizes = Vec::new();
    lines(&log, 2000, &mut sizes);
    let odd = b"\xc3\xa9\x01\"\\ \xe2\x9c\x93 \xff\n";
    log.append(EventType::Stdout, Some(odd), &no_fields())
        .unwrap();
    let written = sizes.iter().sum::<u64>() + odd.len() as u64;
    log.close().unwrap();
    let (events, pages) = all_events(&log, 0);
    assert!(pages[0].cursor_expired, "the log overflowed");
    let delivered: u64 = events
        .iter()
        .map(|e| match (&e["data"], &e["data_b64"]) {
            (Value::String(text), _) => text.len() as u64,
            (_, Value::String(b64)) => STANDARD.decode(b64).unwrap().len() as u64,
            _ => 0,
        })
        .sum();
    assert_eq!(delivered + pages[0].dropped_bytes, written);
}

#[test]
fn after_a_restart_drops_are_exact_at_the_oldest_kept_event() {
    let dir = TempDir::new("restart-drops");
    let path = dir.0.join("a");
    let budget = LogBudget::new(1 << 30);
    let config = small(16 << 10, 4 << 10, 512);
    let mut sizes = Vec::new();
    {
        let log = ExecLog::create(&path, &config, &budget).unwrap();
        lines(&log, 1000, &mut sizes);
    }
    let log = ExecLog::recover(&path, &config, &budget).unwrap();
    let first = log.first_seq();
    let total: u64 = sizes[..(first - 1) as usize].iter().sum();
    assert_eq!(log.read(0, 1, 1 << 20).unwrap().dropped_bytes, total);
    let behind = log.read(first / 2, 1, 1 << 20).unwrap();
    let exact: u64 = sizes[(first / 2) as usize..(first - 1) as usize]
        .iter()
        .sum();
    assert!(behind.dropped_bytes <= exact, "a lower bound");
    assert_eq!(behind.dropped_events, first - 1 - first / 2);
}

#[test]
fn waiters_wake_on_append_and_on_close() {
    let dir = TempDir::new("wait");
    let budget = LogBudget::new(1 << 30);
    let log = ExecLog::create(&dir.0.join("a"), &LogConfig::default(), &budget).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let writer = Arc::clone(&log);
    runtime.block_on(async move {
        let waiter = tokio::spawn({
            let log = Arc::clone(&writer);
            async move { log.wait_async(0, Duration::from_secs(60)).await }
        });
        tokio::task::yield_now().await;
        writer
            .append(EventType::Stdout, Some(b"hi"), &no_fields())
            .unwrap();
        assert!(waiter.await.unwrap());
        writer.close().unwrap();
        assert!(writer.wait_async(1, Duration::from_secs(60)).await);
    });
    assert!(log.ready(1) && log.is_closed());
}
