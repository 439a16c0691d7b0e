//! Throughput and wake-up latency of the event ring, printed as tables (`make bench`).
//! Figures, never assertions: see bench/README.md for how to read and reproduce them.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use modal_workspace_core::event::EventType;
use modal_workspace_core::ring::EventRing;
use serde_json::Map;

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

fn row(name: &str, size: usize, events: usize, elapsed: Duration) {
    let secs = elapsed.as_secs_f64();
    println!(
        "| {name:<34} | {size:>7} | {:>12.0} | {:>9.1} |",
        events as f64 / secs,
        (events * size) as f64 / secs / 1e6
    );
}

/// Appends `count` events of `size` bytes one call each.
fn append_one_by_one(size: usize, count: usize) -> (EventRing, Duration) {
    let ring = EventRing::new(256 << 20, None).expect("valid ring");
    let data = vec![b'x'; size];
    let fields = Map::new();
    let started = Instant::now();
    for _ in 0..count {
        ring.append(EventType::Stdout, Some(&data), &fields)
            .expect("open ring");
    }
    (ring, started.elapsed())
}

fn append_batched(size: usize, count: usize) -> Duration {
    let ring = EventRing::new(256 << 20, None).expect("valid ring");
    let data = vec![b'x'; size];
    let batch: Vec<&[u8]> = vec![&data; 1000];
    let started = Instant::now();
    for _ in 0..count / 1000 {
        ring.append_many(EventType::Stdout, &batch)
            .expect("open ring");
    }
    started.elapsed()
}

/// Appends `count` events of `size` bytes one call each into a ring that is already full, so
/// each append evicts: the steady state of a long-running stream, whose memory is recycled
/// (the rows above grow the heap, and so also time the kernel handing out fresh pages).
fn append_evicting(size: usize, count: usize) -> Duration {
    let ring = EventRing::new(16 << 20, None).expect("valid ring");
    let data = vec![b'x'; size];
    let fields = Map::new();
    for _ in 0..(16 << 20) / size + 1000 {
        ring.append(EventType::Stdout, Some(&data), &fields)
            .expect("open ring");
    }
    let started = Instant::now();
    for _ in 0..count {
        ring.append(EventType::Stdout, Some(&data), &fields)
            .expect("open ring");
    }
    started.elapsed()
}

/// Reads everything from the start in pages of `max_bytes`, building each page's JSON.
fn read_pages(ring: &EventRing, max_bytes: usize) -> (usize, Duration) {
    let started = Instant::now();
    let (mut cursor, mut events) = (0, 0);
    loop {
        let page = ring
            .read(cursor, 10_000, max_bytes, false)
            .expect("valid read");
        events += page.events.len();
        std::hint::black_box(page.to_json());
        cursor = page.next_cursor;
        if !page.has_more {
            return (events, started.elapsed());
        }
    }
}

/// Appends while two readers follow with blocking waits: the cost of sharing the ring.
fn append_with_readers(size: usize, count: usize) -> Duration {
    let ring = Arc::new(EventRing::new(64 << 20, None).expect("valid ring"));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                let mut cursor = 0;
                loop {
                    ring.wait(cursor, Duration::from_secs(10));
                    let page = ring.read(cursor, 1000, 1 << 20, false).expect("read");
                    std::hint::black_box(page.to_json());
                    cursor = page.next_cursor;
                    if page.closed && !page.has_more {
                        return;
                    }
                }
            })
        })
        .collect();
    let (data, fields) = (vec![b'x'; size], Map::new());
    let started = Instant::now();
    for _ in 0..count {
        ring.append(EventType::Stdout, Some(&data), &fields)
            .expect("open ring");
    }
    let elapsed = started.elapsed();
    ring.close();
    for reader in readers {
        let _ = reader.join();
    }
    elapsed
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Time from `append` to a blocked thread returning from `wait`.
fn wake_latency_thread(rounds: usize) -> Vec<Duration> {
    let ring = Arc::new(EventRing::new(1 << 20, None).expect("valid ring"));
    let mut samples = Vec::with_capacity(rounds);
    for seq in 0..rounds as u64 {
        let waiter = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                ring.wait(seq, Duration::from_secs(10));
                Instant::now()
            })
        };
        thread::sleep(Duration::from_micros(300)); // let it block
        let started = Instant::now();
        ring.append(EventType::Stdout, Some(b"x"), &Map::new())
            .expect("open ring");
        if let Ok(woke) = waiter.join() {
            samples.push(woke.saturating_duration_since(started));
        }
    }
    samples
}

/// Time from `append` to a tokio task returning from `wait_async`.
fn wake_latency_async(rounds: usize) -> Vec<Duration> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let ring = Arc::new(EventRing::new(1 << 20, None).expect("valid ring"));
    let mut samples = Vec::with_capacity(rounds);
    for seq in 0..rounds as u64 {
        let ring2 = Arc::clone(&ring);
        let task = runtime.spawn(async move {
            ring2.wait_async(seq, Duration::from_secs(10)).await;
            Instant::now()
        });
        thread::sleep(Duration::from_micros(300));
        let started = Instant::now();
        ring.append(EventType::Stdout, Some(b"x"), &Map::new())
            .expect("open ring");
        if let Ok(woke) = runtime.block_on(task) {
            samples.push(woke.saturating_duration_since(started));
        }
    }
    samples
}

fn latency_row(name: &str, mut samples: Vec<Duration>) {
    samples.sort_unstable();
    println!(
        "| {name:<34} | {:>9.1} | {:>9.1} | {:>7} |",
        percentile(&samples, 0.5).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples.len()
    );
}

fn main() {
    let cores = thread::available_parallelism().map_or(0, |n| n.get());
    println!("\n## Rust event ring — {cores} cores, {}\n", cpu_model());
    println!("| operation                          |   bytes |     events/s |      MB/s |");
    println!("|------------------------------------|--------:|-------------:|----------:|");
    for (size, count) in [(100usize, 1_000_000usize), (16 * 1024, 20_000)] {
        let (ring, elapsed) = append_one_by_one(size, count);
        row("append (one call per event)", size, count, elapsed);
        row(
            "append_many (batches of 1000)",
            size,
            count,
            append_batched(size, count),
        );
        let name = "append into a full ring (evicting)";
        row(name, size, count, append_evicting(size, count));
        for budget in [64 * 1024, 1 << 20] {
            let (events, elapsed) = read_pages(&ring, budget);
            let name = format!("read + to_json, {} KiB pages", budget / 1024);
            row(&name, size, events, elapsed);
        }
        let name = "append with 2 readers following";
        row(name, size, count / 4, append_with_readers(size, count / 4));
    }
    println!("\n| wake-up after append               | median µs |    p99 µs |  rounds |");
    println!("|------------------------------------|----------:|----------:|--------:|");
    latency_row("blocked thread (wait)", wake_latency_thread(1000));
    latency_row("tokio task (wait_async)", wake_latency_async(1000));
}
