//! Tests of the ring under concurrent writers, readers and waiters.

use std::sync::Arc;
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

/// A callback for `on_ready` that reports on a channel.
fn report(tx: &std::sync::mpsc::Sender<u64>, value: u64) -> ReadyCallback {
    let tx = tx.clone();
    Box::new(move || {
        let _ = tx.send(value);
    })
}

#[test]
fn ready_callbacks_run_once_an_event_passes_their_cursor() {
    let ring = Arc::new(EventRing::new(1 << 16, None).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    assert!(ring.on_ready(0, report(&tx, 1)).is_some());
    assert!(ring.on_ready(1, report(&tx, 2)).is_some());
    out(&ring, b"first");
    assert_eq!(
        rx.try_recv(),
        Ok(1),
        "ran on the appending thread, before append returned"
    );
    assert!(rx.try_recv().is_err(), "cursor 1 is not passed by seq 1");
    let appender = {
        let ring = Arc::clone(&ring);
        thread::spawn(move || out(&ring, b"second"))
    };
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(2));
    appender.join().unwrap();
    out(&ring, b"third");
    assert!(rx.try_recv().is_err(), "a callback runs once");
}

#[test]
fn ready_callbacks_are_not_kept_when_the_ring_is_already_ready() {
    let ring = EventRing::new(1 << 16, None).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    out(&ring, b"x");
    assert!(ring.on_ready(0, report(&tx, 1)).is_none());
    ring.close();
    assert!(ring.on_ready(1, report(&tx, 2)).is_none());
    assert!(rx.try_recv().is_err());
}

#[test]
fn closing_runs_ready_callbacks() {
    let ring = EventRing::new(1 << 16, None).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    ring.on_ready(0, report(&tx, 7));
    ring.close();
    assert_eq!(rx.try_recv(), Ok(7));
}

#[test]
fn a_forgotten_callback_never_runs() {
    let ring = EventRing::new(1 << 16, None).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let id = ring.on_ready(0, report(&tx, 1)).unwrap();
    let kept = ring.on_ready(0, report(&tx, 2)).unwrap();
    assert!(ring.forget_waiter(id));
    assert!(!ring.forget_waiter(id));
    out(&ring, b"x");
    assert_eq!(rx.try_recv(), Ok(2));
    assert!(rx.try_recv().is_err());
    assert!(!ring.forget_waiter(kept), "it already ran");
}

#[test]
fn a_ready_callback_runs_with_the_ring_unlocked() {
    // It may append to the very ring that woke it: with a lock still held this would deadlock.
    let ring = Arc::new(EventRing::new(1 << 16, None).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let inner = Arc::clone(&ring);
    ring.on_ready(
        0,
        Box::new(move || {
            let seq = out(&inner, b"from the callback");
            let _ = tx.send(seq);
        }),
    );
    assert_eq!(out(&ring, b"x"), 1);
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(2));
    assert_eq!(ring.last_seq(), 2);
}

#[test]
fn every_callback_registered_by_many_threads_runs_exactly_once() {
    let ring = Arc::new(EventRing::new(1 << 20, None).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let registrars: Vec<_> = (0..4u64)
        .map(|t| {
            let (ring, tx) = (Arc::clone(&ring), tx.clone());
            thread::spawn(move || {
                for i in 0..500 {
                    let value = t * 1000 + i;
                    let cursor = ring.last_seq();
                    if ring.on_ready(cursor, report(&tx, value)).is_none() {
                        let _ = tx.send(value); // already ready: the caller goes on itself
                    }
                }
            })
        })
        .collect();
    let appender = {
        let ring = Arc::clone(&ring);
        thread::spawn(move || {
            for _ in 0..3000 {
                out(&ring, b"x");
            }
        })
    };
    for registrar in registrars {
        registrar.join().unwrap();
    }
    appender.join().unwrap();
    ring.close();
    drop(tx);
    let mut seen: Vec<u64> = rx.iter().collect();
    seen.sort_unstable();
    let expected: Vec<u64> = (0..4u64)
        .flat_map(|t| (0..500).map(move |i| t * 1000 + i))
        .collect();
    assert_eq!(seen, expected);
}
