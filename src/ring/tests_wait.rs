//! Tests of the ring under concurrent writers, readers and waiters.

use std::thread;

use super::tests::{out, seqs};
use super::*;

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
            assert!(page.dropped_bytes >= page.dropped_events * 30);
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
