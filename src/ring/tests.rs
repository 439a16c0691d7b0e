//! Tests of paging, eviction, coalescing and the UTF-8 framing through the ring, and of the ring
//! under concurrent writers, readers and waiters.

use std::sync::Arc;
use std::thread;

use serde_json::json;

use super::*;
use crate::event::{StreamState, MAX_EVENT_DATA, MAX_EVENT_JSON};

fn no_fields() -> Map<String, Value> {
    Map::new()
}

pub(super) fn out(ring: &EventRing, data: &[u8]) -> u64 {
    ring.append(EventType::Stdout, Some(data), &no_fields())
        .unwrap()
}

/// The page as JSON, checked to parse; returns the parsed value.
fn parsed(page: &Page) -> Value {
    serde_json::from_str(&page.to_json()).unwrap()
}

fn seqs(page: &Page) -> Vec<u64> {
    page.events.iter().map(PageEvent::seq).collect()
}

/// Reads every event from `cursor` on, page by page, checking each page's contract.
fn drain(ring: &EventRing, mut cursor: u64, max_bytes: usize, coalesce: bool) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let page = ring.read(cursor, 1000, max_bytes, coalesce).unwrap();
        assert!(page.to_json().len() <= max_bytes.max(MIN_PAGE_BYTES));
        let value = parsed(&page);
        all.extend(value["events"].as_array().unwrap().iter().cloned());
        if !page.has_more {
            return all;
        }
        assert!(page.next_cursor > cursor, "a page made no progress");
        cursor = page.next_cursor;
    }
}

/// Concatenated `data` of decoded text events.
fn text(events: &[Value]) -> String {
    events.iter().map(|e| e["data"].as_str().unwrap()).collect()
}

#[test]
fn seqs_start_at_one_and_have_no_holes() {
    let ring = EventRing::new(1 << 20, None).unwrap();
    assert_eq!(ring.last_seq(), 0);
    assert_eq!(out(&ring, b"a"), 1);
    assert_eq!(out(&ring, &vec![b'x'; 40_000]), 4); // 16 KiB + 16 KiB + the rest
    let status = json!({"state": "running"}).as_object().unwrap().clone();
    assert_eq!(ring.append(EventType::Status, None, &status).unwrap(), 5);
    let page = ring.read(0, 100, 1 << 20, false).unwrap();
    assert_eq!(seqs(&page), vec![1, 2, 3, 4, 5]);
    assert_eq!(page.next_cursor, 5);
    assert_eq!(page.first_seq, 1);
    assert!(!page.has_more && !page.cursor_expired && !page.closed);
    assert_eq!(parsed(&page)["events"][4]["state"], "running");
}

#[test]
fn a_ring_reports_the_bounds_kind_and_status_it_has() {
    let ring = EventRing::of_kind(Some(StreamKind::Exec), 4096, Some(7)).unwrap();
    assert_eq!(ring.max_bytes(), 4096);
    assert_eq!(ring.max_events(), Some(7));
    assert_eq!(ring.kind(), Some(StreamKind::Exec));
    assert!(!ring.is_closed());
    assert_eq!(ring.status().state, Some(StreamState::Starting));
    let exit = json!({"returncode": 2, "state": "failed"});
    ring.append(EventType::Exit, None, exit.as_object().unwrap())
        .unwrap();
    let failed = StreamStatus {
        state: Some(StreamState::Failed),
        returncode: Some(2),
    };
    assert_eq!(ring.status(), failed);
}

#[test]
fn events_that_exactly_fill_the_budget_are_all_kept() {
    let probe = EventRing::new(1 << 20, None).unwrap();
    out(&probe, b"line 1\n");
    out(&probe, b"line 2\n");
    let full = probe.held_bytes();
    let ring = EventRing::new(full, None).unwrap();
    out(&ring, b"line 1\n");
    out(&ring, b"line 2\n");
    assert_eq!(ring.held_bytes(), full);
    assert_eq!(ring.read(0, 10, 0, false).unwrap().first_seq, 1);
    assert_eq!(ring.trim(full), 0, "at the bound is within it");
    out(&ring, b"line 3\n");
    assert_eq!(ring.read(0, 10, 0, false).unwrap().first_seq, 2);
}

#[test]
fn an_empty_ring_reads_as_an_empty_page() {
    let ring = EventRing::new(1000, None).unwrap();
    let page = ring.read(0, 10, 0, false).unwrap();
    assert!(page.events.is_empty());
    assert_eq!(
        (page.next_cursor, page.first_seq, page.has_more),
        (0, 1, false)
    );
}

#[test]
fn max_events_bounds_a_page_and_has_more_says_so() {
    let ring = EventRing::new(1 << 20, None).unwrap();
    for _ in 0..10 {
        out(&ring, b"line\n");
    }
    let page = ring.read(2, 3, 65_536, false).unwrap();
    assert_eq!(seqs(&page), vec![3, 4, 5]);
    assert_eq!(page.next_cursor, 5);
    assert!(page.has_more);
    let page = ring.read(10, 3, 65_536, false).unwrap();
    assert!(page.events.is_empty() && !page.has_more);
    assert_eq!(page.next_cursor, 10);
}

#[test]
fn the_oldest_events_are_evicted_first_by_bytes_and_by_count() {
    let ring = EventRing::new(1000, Some(5)).unwrap();
    for _ in 0..8 {
        out(&ring, b"0123456789");
    }
    assert_eq!(ring.read(0, 100, 0, false).unwrap().first_seq, 4); // count bound
    out(&ring, &[b'y'; 800]);
    let page = ring.read(8, 100, 0, false).unwrap();
    assert_eq!(page.first_seq, 8); // byte bound: only 8 and the large 9 fit in 1000 bytes
    assert_eq!(seqs(&page), vec![9]);
}

#[test]
fn the_newest_event_is_kept_even_when_larger_than_the_budget() {
    let ring = EventRing::new(10, None).unwrap();
    out(&ring, b"first");
    out(&ring, b"second");
    let page = ring.read(0, 100, 0, false).unwrap();
    assert_eq!(seqs(&page), vec![2]);
    assert_eq!(page.first_seq, 2);
}

#[test]
fn a_reader_that_falls_behind_learns_exactly_what_it_lost() {
    // A twin ring that keeps everything gives each event's output bytes.
    let ring = EventRing::new(2_000, None).unwrap();
    let twin = EventRing::new(1 << 20, None).unwrap();
    for i in 0..200u32 {
        let line = format!("line {i} {}\n", "x".repeat((i % 37) as usize));
        out(&ring, line.as_bytes());
        out(&twin, line.as_bytes());
    }
    // What a reader loses is the output the command wrote in the events it missed.
    let sizes: Vec<usize> = data_sizes(&twin);
    for cursor in [0u64, 1, 17, 100] {
        let page = ring.read(cursor, 1000, 0, false).unwrap();
        assert!(page.cursor_expired);
        let first = page.first_seq;
        assert_eq!(seqs(&page)[0], first, "continues from the oldest kept");
        assert_eq!(page.dropped_events, first - 1 - cursor);
        let lost: usize = sizes[cursor as usize..(first - 1) as usize].iter().sum();
        assert_eq!(page.dropped_bytes, lost as u64);
    }
    let kept = ring.read(0, 1000, 0, false).unwrap().first_seq;
    let page = ring.read(kept - 1, 1000, 0, false).unwrap();
    assert!(!page.cursor_expired);
    assert_eq!((page.dropped_events, page.dropped_bytes), (0, 0));
}

#[test]
fn trimming_evicts_the_oldest_like_the_bound_and_counts_them_exactly() {
    let ring = EventRing::new(1 << 20, None).unwrap();
    for i in 0..100u32 {
        out(
            &ring,
            format!("line {i} {}\n", "y".repeat((i % 13) as usize)).as_bytes(),
        );
    }
    let sizes = ring_sizes(&ring);
    let held = ring.held_bytes();
    assert_eq!(held, sizes.iter().sum::<usize>());
    let freed = ring.trim(held / 2);
    assert_eq!(ring.held_bytes(), held - freed);
    assert!(ring.held_bytes() <= held / 2);
    let page = ring.read(0, 1000, 0, false).unwrap();
    let gone = (page.first_seq - 1) as usize;
    assert!(gone > 0 && page.cursor_expired);
    assert_eq!(freed, sizes[..gone].iter().sum::<usize>());
    let data = data_sizes_of(&twin_of_trim(100));
    assert_eq!(
        page.dropped_bytes,
        data[..gone].iter().sum::<usize>() as u64
    );
    // The newest event stays however small the bound, and appends go on as before.
    ring.trim(0);
    assert_eq!(ring.held_bytes(), sizes[99]);
    assert_eq!(out(&ring, b"more\n"), 101);
    assert_eq!(seqs(&ring.read(99, 10, 0, false).unwrap()), vec![100, 101]);
}

/// The output bytes of each event of a ring that still holds them all.
fn data_sizes(ring: &EventRing) -> Vec<usize> {
    data_sizes_of(ring)
}

fn data_sizes_of(ring: &EventRing) -> Vec<usize> {
    let page = ring.read(0, MAX_PAGE_EVENTS, usize::MAX, false).unwrap();
    assert!(!page.has_more && !page.cursor_expired);
    page.events
        .iter()
        .flat_map(PageEvent::parts)
        .map(Event::data_len)
        .collect()
}

/// The ring `trimming_evicts…` fills, before it is trimmed.
fn twin_of_trim(n: u32) -> EventRing {
    let ring = EventRing::new(1 << 20, None).unwrap();
    for i in 0..n {
        out(
            &ring,
            format!("line {i} {}\n", "y".repeat((i % 13) as usize)).as_bytes(),
        );
    }
    ring
}

#[test]
fn output_delivered_plus_dropped_is_what_the_command_wrote() {
    let ring = EventRing::new(4_000, None).unwrap();
    let mut written = 0;
    for i in 0..500u32 {
        let chunk = format!("{i} é ✓ \"q\" \\ \u{1}\n").into_bytes();
        let chunk = if i % 7 == 0 {
            [&chunk[..], b"\xff\xfe"].concat()
        } else {
            chunk
        };
        written += chunk.len() as u64;
        out(&ring, &chunk);
    }
    ring.close();
    let page = ring.read(0, MAX_PAGE_EVENTS, usize::MAX, false).unwrap();
    assert!(page.cursor_expired && !page.has_more, "the ring overflowed");
    let value: serde_json::Value = serde_json::from_str(&page.to_json()).unwrap();
    let delivered: u64 = value["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match (&e["data"], &e["data_b64"]) {
            (serde_json::Value::String(text), _) => text.len() as u64,
            (_, serde_json::Value::String(b64)) => {
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD.decode(b64);
                bytes.unwrap().len() as u64
            }
            _ => 0,
        })
        .sum();
    assert_eq!(delivered + page.dropped_bytes, written);
}

fn ring_sizes(ring: &EventRing) -> Vec<usize> {
    let page = ring.read(0, MAX_PAGE_EVENTS, usize::MAX, false).unwrap();
    assert!(!page.has_more);
    page.events
        .iter()
        .map(|e| match e {
            PageEvent::One(event) => event.encoded_len(),
            PageEvent::Coalesced(_) => unreachable!(),
        })
        .collect()
}

#[test]
fn every_page_fits_its_budget_and_progresses_through_control_characters() {
    let ring = EventRing::new(64 << 20, None).unwrap();
    let data = vec![0x01u8; 1 << 20];
    out(&ring, &data);
    out(&ring, &data);
    for budget in [0, 1, 32 * 1024, 40_000, 65_536, 1 << 20] {
        for coalesce in [false, true] {
            let events = drain(&ring, 0, budget, coalesce);
            assert_eq!(text(&events).len(), 2 << 20, "budget {budget}");
        }
    }
}

#[test]
fn every_stored_event_is_within_the_event_bound() {
    let ring = EventRing::new(64 << 20, None).unwrap();
    out(&ring, &vec![b'"'; 300_000]);
    out(&ring, &vec![0xFF; 300_000]);
    for event in ring.state.lock().events.iter() {
        assert!(event.encoded_len() <= MAX_EVENT_JSON);
    }
}

#[test]
fn a_character_split_at_every_byte_position_reads_back_whole() {
    let sample = "héllo €uro 𝄞 wörld";
    for cut in 0..=sample.len() {
        let ring = EventRing::new(1 << 16, None).unwrap();
        out(&ring, &sample.as_bytes()[..cut]);
        out(&ring, &sample.as_bytes()[cut..]);
        ring.close();
        let events = drain(&ring, 0, 0, false);
        assert_eq!(text(&events), sample, "cut at {cut}");
    }
}

#[test]
fn coalescing_merges_adjacent_text_of_one_stream() {
    let ring = EventRing::new(1 << 20, None).unwrap();
    out(&ring, b"a\n");
    out(&ring, b"b\"\n");
    ring.append(EventType::Stderr, Some(b"err"), &no_fields())
        .unwrap();
    out(&ring, b"c");
    out(&ring, b"\xFF");
    out(&ring, b"d");
    let events = drain(&ring, 0, 0, true);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["stdout", "stderr", "stdout", "stdout", "stdout"]);
    assert_eq!(events[0]["data"], "a\nb\"\n");
    assert_eq!(
        (events[0]["seq"].as_u64(), events[0]["seq_start"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(events[1].get("seq_start").is_none());
    assert_eq!(events[3]["data_b64"], "/w==");
}

#[test]
fn coalesced_pages_respect_max_events_and_the_budget() {
    let ring = EventRing::new(64 << 20, None).unwrap();
    for i in 0..5_000 {
        out(&ring, format!("{i}\n").as_bytes());
        if i % 1000 == 999 {
            ring.append(EventType::Status, None, &no_fields()).unwrap();
        }
    }
    let page = ring.read(0, 2, 32 * 1024, true).unwrap();
    assert_eq!(page.events.len(), 2);
    assert!(page.to_json().len() <= 32 * 1024);
    assert_eq!(page.next_cursor, 1001);
    let events = drain(&ring, 0, 32 * 1024, true);
    let expected: String = (0..5_000).map(|i| format!("{i}\n")).collect();
    let joined: String = events.iter().filter_map(|e| e["data"].as_str()).collect();
    assert_eq!(joined, expected);
}

#[test]
fn close_flushes_a_held_back_partial_character() {
    let ring = EventRing::new(1 << 16, None).unwrap();
    out(&ring, b"ok\xE2\x82");
    assert_eq!(ring.last_seq(), 1);
    ring.close();
    let page = ring.read(0, 10, 0, false).unwrap();
    let value = parsed(&page);
    assert_eq!(value["events"][1]["data_b64"], "4oI=");
    assert!(page.closed);
    assert!(ring.is_closed());
    let err = out_result(&ring, b"late");
    assert_eq!(err.unwrap_err().rule(), "ring.closed");
}

#[test]
fn events_carry_the_time_of_their_append() {
    let ring = EventRing::new(1 << 16, None).unwrap();
    let before = crate::event::timestamp::now();
    out(&ring, b"x");
    out(&ring, b"y");
    let after = crate::event::timestamp::now();
    let page = ring.read(0, 10, 0, false).unwrap();
    assert_eq!(page.events.len(), 2);
    for event in page.events.iter().flat_map(PageEvent::parts) {
        // One fixed-width format: the strings sort as the instants do.
        let at = event.timestamp();
        assert!(before.as_str() <= at && at <= after.as_str(), "{at}");
    }
}

#[test]
fn an_empty_output_append_adds_no_event() {
    let ring = EventRing::new(1 << 16, None).unwrap();
    assert_eq!(out(&ring, b""), 0);
    let stderr = ring.append(EventType::Stderr, Some(b""), &no_fields());
    assert_eq!(stderr.unwrap(), 0);
    assert_eq!(ring.last_seq(), 0);
}

#[test]
fn whole_text_after_a_held_back_byte_comes_after_that_byte() {
    let ring = EventRing::new(1 << 16, None).unwrap();
    out(&ring, b"\xE2"); // the start of a three-byte character: held back
    out(&ring, b"abc"); // does not complete it: the held byte goes first, as bytes
    ring.close();
    let events = drain(&ring, 0, 0, false);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["data_b64"], "4g==");
    assert_eq!(events[1]["data"], "abc");
}

#[test]
fn binary_output_larger_than_one_event_is_carried_whole() {
    // Lone continuation bytes: none of it is UTF-8, all of it travels as base64.
    let data: Vec<u8> = (0..2 * MAX_EVENT_DATA + 100)
        .map(|i| 0x80 | (i % 64) as u8)
        .collect();
    let ring = EventRing::new(1 << 20, None).unwrap();
    assert_eq!(out(&ring, &data), 3);
    let events = drain(&ring, 0, 0, false);
    let mut carried = Vec::new();
    for event in &events {
        use base64::Engine as _;
        let b64 = event["data_b64"].as_str().unwrap();
        carried.extend(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
        );
    }
    assert_eq!(carried, data);
}

#[test]
fn a_small_batch_leaves_its_vector_for_the_next_append_and_a_huge_one_does_not() {
    let ring = EventRing::new(64 << 20, None).unwrap();
    out(&ring, b"x");
    assert!(
        ring.state.lock().spare.capacity() > 0,
        "the next one-event append reuses it"
    );
    assert!(out(&ring, &vec![b'y'; 100 * MAX_EVENT_DATA]) > 100);
    assert!(
        ring.state.lock().spare.capacity() <= 64,
        "a batch of a hundred events is not kept"
    );
}

fn out_result(ring: &EventRing, data: &[u8]) -> Result<u64, RingError> {
    ring.append(EventType::Stdout, Some(data), &no_fields())
}

#[test]
fn exit_comes_after_everything_the_streams_held_back() {
    let ring = EventRing::new(1 << 16, None).unwrap();
    ring.append(EventType::Stderr, Some(b"\xF0\x9F"), &no_fields())
        .unwrap();
    let code = json!({"returncode": 3}).as_object().unwrap().clone();
    assert_eq!(ring.append(EventType::Exit, None, &code).unwrap(), 2);
    let value = parsed(&ring.read(0, 10, 0, false).unwrap());
    assert_eq!(value["events"][0]["type"], "stderr");
    assert_eq!(value["events"][1]["type"], "exit");
    assert_eq!(value["events"][1]["returncode"], 3);
}

#[test]
fn bad_arguments_are_refused_with_a_rule() {
    assert_eq!(
        EventRing::new(0, None).unwrap_err().rule(),
        "ring.max-bytes"
    );
    assert_eq!(
        EventRing::new(10, Some(0)).unwrap_err().rule(),
        "ring.max-events"
    );
    let ring = EventRing::new(1000, None).unwrap();
    out(&ring, b"x");
    assert_eq!(
        ring.read(2, 10, 0, false).unwrap_err().rule(),
        "ring.cursor-ahead"
    );
    assert_eq!(
        ring.read(0, 0, 0, false).unwrap_err().rule(),
        "ring.max-events"
    );
    let fields = json!({"pid": 1}).as_object().unwrap().clone();
    let err = ring
        .append(EventType::Stdout, Some(b"x"), &fields)
        .unwrap_err();
    assert_eq!(err.rule(), "event.output-fields");
}

#[test]
fn append_many_numbers_like_single_appends() {
    let ring = EventRing::new(1 << 20, None).unwrap();
    let chunks: Vec<&[u8]> = vec![b"a", b"\xE2\x82", b"\xAC", b"b"];
    assert_eq!(ring.append_many(EventType::Stdout, &chunks).unwrap(), 3);
    assert_eq!(text(&drain(&ring, 0, 0, false)), "a€b");
}

// Concurrent writers, readers and waiters.

#[test]
fn concurrent_readers_see_every_seq_once_in_order() {
    let ring = Arc::new(EventRing::new(64 << 20, None).unwrap());
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                for i in 0..2_000 {
                    let kind = if w == 0 {
                        EventType::Stderr
                    } else {
                        EventType::Stdout
                    };
                    ring.append(kind, Some(format!("{w}:{i}\n").as_bytes()), &Map::new())
                        .unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                let (mut cursor, mut seen) = (0, Vec::new());
                loop {
                    ring.wait(cursor, Duration::from_secs(10));
                    let page = ring.read(cursor, 50, 0, false).unwrap();
                    assert!(!page.cursor_expired);
                    seen.extend(seqs(&page));
                    cursor = page.next_cursor;
                    if page.closed && !page.has_more {
                        return seen;
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    ring.close();
    for reader in readers {
        let seen = reader.join().unwrap();
        assert_eq!(seen, (1..=6_000).collect::<Vec<u64>>());
    }
}

#[test]
fn a_slow_reader_under_eviction_never_sees_a_silent_gap() {
    let ring = Arc::new(EventRing::new(4_000, None).unwrap());
    let writer = {
        let ring = Arc::clone(&ring);
        thread::spawn(move || {
            for i in 0..20_000 {
                out(&ring, format!("{i}\n").as_bytes());
            }
            ring.close();
        })
    };
    // Start once the ring has evicted, so the reader is behind from its first page on.
    while ring.read(0, 1, 0, false).unwrap().first_seq == 1 {
        ring.wait(ring.last_seq(), Duration::from_secs(10));
    }
    let (mut cursor, mut expired_pages) = (0, 0);
    loop {
        ring.wait(cursor, Duration::from_secs(10));
        let page = ring.read(cursor, 7, 0, false).unwrap();
        let got = seqs(&page);
        if page.cursor_expired {
            expired_pages += 1;
            assert_eq!(page.dropped_events, page.first_seq - 1 - cursor);
            // Each event is a line of 2 to 6 bytes of output.
            assert!(page.dropped_bytes >= page.dropped_events * 2);
            assert_eq!(got[0], page.first_seq);
        } else if let Some(&first) = got.first() {
            assert_eq!(first, cursor + 1, "a gap without cursor_expired");
        }
        assert!(got.windows(2).all(|w| w[1] == w[0] + 1));
        cursor = page.next_cursor;
        if page.closed && !page.has_more {
            break;
        }
    }
    writer.join().unwrap();
    assert_eq!(cursor, 20_000);
    assert!(expired_pages >= 1);
}

#[test]
fn wait_returns_promptly_after_an_append_and_at_its_timeout_otherwise() {
    let ring = Arc::new(EventRing::new(1 << 16, None).unwrap());
    let started = Instant::now();
    assert!(!ring.wait(0, Duration::from_millis(50)));
    assert!(started.elapsed() >= Duration::from_millis(50));

    let appender = {
        let ring = Arc::clone(&ring);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            out(&ring, b"x");
        })
    };
    let started = Instant::now();
    assert!(ring.wait(0, Duration::from_secs(30)));
    assert!(started.elapsed() < Duration::from_secs(5));
    appender.join().unwrap();
    assert!(
        ring.wait(0, Duration::ZERO),
        "an event past the cursor is ready at once"
    );
}

#[test]
fn wait_returns_when_the_ring_closes() {
    let ring = Arc::new(EventRing::new(1 << 16, None).unwrap());
    let closer = {
        let ring = Arc::clone(&ring);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            ring.close();
        })
    };
    assert!(ring.wait(0, Duration::from_secs(30)));
    closer.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_async_returns_promptly_after_an_append_and_at_its_timeout_otherwise() {
    let ring = Arc::new(EventRing::new(1 << 16, None).unwrap());
    let started = Instant::now();
    assert!(!ring.wait_async(0, Duration::from_millis(50)).await);
    assert!(started.elapsed() >= Duration::from_millis(50));

    let appender = {
        let ring = Arc::clone(&ring);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            out(&ring, b"x");
        })
    };
    let started = Instant::now();
    assert!(ring.wait_async(0, Duration::from_secs(30)).await);
    assert!(started.elapsed() < Duration::from_secs(5));
    appender.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_async_waiters_all_wake_on_one_append() {
    let ring = Arc::new(EventRing::new(1 << 16, None).unwrap());
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let ring = Arc::clone(&ring);
            tokio::spawn(async move { ring.wait_async(0, Duration::from_secs(30)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    out(&ring, b"x");
    for waiter in waiters {
        assert!(waiter.await.unwrap());
    }
}
